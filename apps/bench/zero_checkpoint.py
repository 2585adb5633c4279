#!/usr/bin/python3
"""Checkpoints of sharded state beside a replica's: troupe-fmnist's MLP (default 100M
parameters, eight hidden layers) in --mode dp with Adam at 4 members, --zero-stage 0 and 2,
each run with a checkpoint after every step and without any, all in this run.

For each stage: seconds per step without checkpoints and with one after every step (steady
state, as apps/bench/size_ladder.py measures it) and so a checkpoint's cost in seconds, the
checkpoint file's bytes per parameter, and the peak RSS of the members and of the coordinator
with and without checkpoints (under stage 2 every member sends its own pieces; no process
ever holds the whole optimizer state). Then a resume of a stage 2 checkpoint under stage 1,
with the members' and coordinator's peak RSS beside the same job not resumed.

    /usr/bin/python3 apps/bench/zero_checkpoint.py [--size 100M] [--hidden 8] [--steps 6]
"""
import argparse
import glob
import json
import os
import tempfile

from size_ladder import mlp_params, parse_size, per_step, rss_of, troupe_job, width_for


def newest_checkpoint(directory):
    files = glob.glob(os.path.join(directory, "ckpt-*.troupe"))
    return max(files, key=os.path.getmtime) if files else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="100M")
    parser.add_argument("--hidden", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    h, steps = args.hidden, args.steps
    w = width_for(parse_size(args.size), h)
    params = mlp_params(w, h)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for stage in ["0", "2"]:
            flags = ["--zero-stage", stage, "--shard-backups", "0"]
            plain = [troupe_job("dp", w, n, tmp, members=4, extra=flags, hidden=h)
                     for n in (2, 2 + steps)]
            saved = os.path.join(tmp, f"ckpt-{stage}")
            saving = flags + ["--checkpoint-dir", saved, "--checkpoint-every", "1",
                              "--checkpoint-keep", "2"]
            with_ckpt = [troupe_job("dp", w, n, tmp, members=4, extra=saving, hidden=h)
                         for n in (2, 2 + steps)]
            plain_s = per_step(plain[1], plain[0], steps)
            ckpt_s = per_step(with_ckpt[1], with_ckpt[0], steps)
            rows.append({"stage": stage, "s_per_step": plain_s, "s_per_step_saving": ckpt_s,
                         "checkpoint_s": ckpt_s - plain_s,
                         "file_bytes_per_param": os.path.getsize(newest_checkpoint(saved)) / params,
                         "checkpoints": with_ckpt[1].get("checkpoints", 0),
                         "rss_mb": rss_of(plain[1]), "rss_mb_saving": rss_of(with_ckpt[1])})
            print(json.dumps(rows[-1]), flush=True)
        # The stage 2 checkpoint before the last step resumed under stage 1 (the last one's
        # file dropped, so that one step is left).
        os.remove(newest_checkpoint(os.path.join(tmp, "ckpt-2")))
        stage_1 = ["--zero-stage", "1", "--shard-backups", "0"]
        resumed = troupe_job("dp", w, 2 + steps, tmp, members=4, hidden=h,
                             extra=stage_1 + ["--resume", os.path.join(tmp, "ckpt-2")])
        fresh = troupe_job("dp", w, 2 + steps, tmp, members=4, hidden=h, extra=stage_1)
        rows.append({"stage": "resume 2 -> 1", "resumed_from_step": resumed["resumed_from_step"],
                     "rss_mb": rss_of(resumed), "rss_mb_fresh": rss_of(fresh)})
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n784-{'-'.join([str(w)] * h)}-10 MLP, {params / 1e6:.1f}M parameters, Adam, "
          "4 members, a checkpoint after every step")
    print(f"{'stage':>5} {'s/step':>7} {'saving':>7} {'ckpt s':>7} {'file B/param':>12}  "
          "peak RSS MB: members (no checkpoints -> saving), coordinator")
    for r in rows[:2]:
        a, b = r["rss_mb"], r["rss_mb_saving"]
        print(f"{r['stage']:>5} {r['s_per_step']:>7.3f} {r['s_per_step_saving']:>7.3f} "
              f"{r['checkpoint_s']:>7.3f} {r['file_bytes_per_param']:>12.2f}  "
              f"{max(a['workers']):.0f} -> {max(b['workers']):.0f}, "
              f"{a['coordinator']:.0f} -> {b['coordinator']:.0f}")
    r = rows[2]
    print(f"\nstage 2's checkpoint resumed under stage 1 from step {r['resumed_from_step']}: "
          f"members' peak RSS {[round(x) for x in r['rss_mb']['workers']]} MB, coordinator "
          f"{r['rss_mb']['coordinator']:.0f} MB; the same job not resumed: members "
          f"{[round(x) for x in r['rss_mb_fresh']['workers']]} MB, coordinator "
          f"{r['rss_mb_fresh']['coordinator']:.0f} MB")


if __name__ == "__main__":
    main()
