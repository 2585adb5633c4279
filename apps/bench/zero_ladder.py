#!/usr/bin/python3
"""Sharded optimizer state and gradients beside replicas and DDP: troupe-fmnist's MLP
784-W-...-W-10 (--hidden layers of W, default 8; default 100M parameters) in --mode dp with
Adam, at 2 and 4 members, --zero-stage 0, 1 and 2 (with --shard-backups 0 and 1), beside
PyTorch DDP (gloo, Adam) with the same model, batch and data, all measured in this run. (A
stage-2 member holds one tensor's gradient at a time: the model has several layers, as models
of this size do, so that no one tensor is most of it.)

For each row: model-state bytes per parameter per member (its peak RSS less that of the same
job with a 16-wide model, over the parameters), the members' peak RSS, bytes each member sends
per step, and seconds per step (steady state, as apps/bench/size_ladder.py measures it). Then
the largest model each configuration trains on this machine at 4 members, computed from those
bytes per parameter: the members' and the coordinator's (which holds the evaluated parameters,
4 bytes each) within the machine's memory less what the 16-wide job's processes hold.

    /usr/bin/python3 apps/bench/zero_ladder.py [--size 100M] [--hidden 8] [--steps 4]
        [--members 2,4] [--configs 0,1:0,1:1,2:0,2:1]
"""
import argparse
import json
import os
import tempfile

from size_ladder import ddp_job, mlp_params, parse_size, per_step, rss_of, troupe_job, width_for


def sent_per_step(long, short, steps, members):
    return (long["allreduce_bytes"] - short["allreduce_bytes"]) / steps / members


def machine_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="100M")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--members", default="2,4")
    parser.add_argument("--hidden", type=int, default=8, help="hidden layers of W")
    parser.add_argument("--configs", default="0,1:0,1:1,2:0,2:1",
                        help="STAGE[:BACKUPS],...: --zero-stage and --shard-backups")
    args = parser.parse_args()
    h = args.hidden
    w = width_for(parse_size(args.size), h)
    params = mlp_params(w, h)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(x) for x in args.members.split(",")]:
            ddp_base = max(r["rss_mb"] for r in ddp_job(16, 2, tmp, world=n, hidden=h))
            ddp = ddp_job(w, args.steps, tmp, world=n, hidden=h)
            ddp_rss = [r["rss_mb"] for r in ddp]
            rows.append({"members": n, "config": "DDP", "s_per_step": ddp[0]["step_s"],
                         "bytes_per_param": (max(ddp_rss) - ddp_base) * 2**20 / params,
                         "rss_mb": ddp_rss, "fixed_mb": n * ddp_base,
                         "sent_per_step": 2 * (n - 1) / n * 4 * params})  # a ring allreduce's
            print(json.dumps(rows[-1]), flush=True)
            for config in args.configs.split(","):
                stage, _, backups = config.partition(":")
                flags = ["--zero-stage", stage, "--shard-backups", backups or "0"]
                base = troupe_job("dp", 16, 2, tmp, members=n, extra=flags, hidden=h)
                short = troupe_job("dp", w, 2, tmp, members=n, extra=flags, hidden=h)
                long = troupe_job("dp", w, 2 + args.steps, tmp, members=n, extra=flags, hidden=h)
                rss, base_rss = rss_of(long), rss_of(base)
                name = f"stage {stage}" + (f", {backups} backup" if backups else "")
                rows.append({"members": n, "config": name,
                             "s_per_step": per_step(long, short, args.steps),
                             "bytes_per_param": (max(rss["workers"]) - max(base_rss["workers"]))
                             * 2**20 / params,
                             "rss_mb": rss["workers"],
                             "fixed_mb": n * max(base_rss["workers"]) + base_rss["coordinator"],
                             "coordinator_bytes_per_param":
                                 (rss["coordinator"] - base_rss["coordinator"]) * 2**20 / params,
                             "sent_per_step": sent_per_step(long, short, args.steps, n)})
                print(json.dumps(rows[-1]), flush=True)
    print(f"\n784-{'-'.join([str(w)] * h)}-10 MLP, {params / 1e6:.1f}M parameters, Adam, "
          "batch 8 per member")
    print(f"{'members':>7} {'config':<18} {'s/step':>7} {'B/param':>8} {'x DDP':>6} "
          f"{'MB sent/step':>12}  peak RSS MB per member")
    for r in rows:
        ddp = next(d for d in rows if d["members"] == r["members"] and d["config"] == "DDP")
        print(f"{r['members']:>7} {r['config']:<18} {r['s_per_step']:>7.3f} "
              f"{r['bytes_per_param']:>8.1f} {r['bytes_per_param'] / ddp['bytes_per_param']:>6.2f} "
              f"{r['sent_per_step'] / 1e6:>12.1f}  {[round(x) for x in r['rss_mb']]}")
    total = machine_bytes()
    print(f"\nLargest model at 4 members in {total / 2**30:.1f} GiB (from the bytes per parameter "
          "above; the coordinator's 4 per parameter included):")
    largest = {}
    for r in rows:
        if r["members"] != 4:
            continue
        fixed = r["fixed_mb"] * 2**20
        per_param = 4 * r["bytes_per_param"] + r.get("coordinator_bytes_per_param", 0)
        largest[r["config"]] = (total - fixed) / per_param
        print(f"  {r['config']:<18} {largest[r['config']] / 1e6:>8.0f}M parameters "
              f"({per_param:.1f} bytes a parameter in all)")
    if "DDP" in largest:
        for config, n in largest.items():
            if config != "DDP":
                print(f"  {config}: {n / largest['DDP']:.2f}x DDP's")


if __name__ == "__main__":
    main()
