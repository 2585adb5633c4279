#!/usr/bin/python3
"""Up the size ladder on this machine: troupe-fmnist's MLP 784-W-W-10 at each size asked for
(default 10M and 100M parameters), in --mode ps (1 server + 1 worker, SGD), --mode dp (2
members, Adam) and, with --modes pydp, the same model as a troupe.TorchTask in --mode dp from
Python (pydp) or libtorch (torchdp, torch-cnn --mlp); the dp rows beside PyTorch DDP (gloo, 2 processes, Adam) with the same model,
batch and data; then `troupe-bench state` at the largest size: the state hand-over beside Gloo's
broadcast of the same bytes, and checkpoint write/read beside dd. Batches are small (8 per
member) so that compute stays short.

For each row: seconds per step (steady state: the difference of a job of STEPS+2 steps and one
of 2, over STEPS, so start-up, the state agreement and the evaluation cancel), bytes per
parameter per member (its peak RSS less that of the same job with a 16-wide model, over the
parameters) and the peak RSS of every process. Checkpoints fsync (the file and its directory).

    /usr/bin/python3 apps/bench/size_ladder.py [--sizes 10M,100M] [--steps 4] [--modes ps,dp]
"""
import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("TROUPE_BIN", os.path.join(ROOT, "build", "bin"))
DATA = "/usr/share/datasets/fashion-mnist"
BATCH = 8


def width_for(params, hidden=2):
    """W such that 784-W-...-W-10 (`hidden` layers of W) has about `params` parameters."""
    a, b = hidden - 1, 784 + 1 + (hidden - 1) + 10
    return max(16, int((-b + math.sqrt(b ** 2 + 4 * a * params)) / (2 * a)))


def mlp_params(w, hidden=2):
    return 784 * w + w + (hidden - 1) * (w * w + w) + w * 10 + 10


def parse_size(text):
    text = text.strip().upper()
    scale = {"K": 1e3, "M": 1e6, "G": 1e9, "B": 1e9}.get(text[-1], 1)
    return int(float(text.rstrip("KMGB")) * scale)


def troupe_job(mode, width, steps, tmp, members=None, extra=(), hidden=2):
    """One job of coordinator, servers and workers as processes; its report. Mode pydp runs
    WIDE_MLP (a troupe.TorchTask) and mode torchdp torch-cnn --mlp (a libtorch task), both in
    --mode dp, with the same roles and flags as troupe-fmnist's. `members`: the workers (1 in
    ps, 2 in the dp modes by default); `extra`: more flags for every process; `hidden`: the
    hidden layers of W (troupe-fmnist only)."""
    members = members or (1 if mode == "ps" else 2)
    examples = steps * BATCH * members
    port = 20000 + (os.getpid() * 7 + steps * 13 + width + members * 101) % 20000
    address = f"127.0.0.1:{port}"
    report = os.path.join(tmp, f"r-{mode}-{width}-{steps}-{members}-{len(extra)}-{hidden}.json")
    common = ["--mode", "dp" if mode in ("pydp", "torchdp") else mode, "--epochs", "1",
              "--batch", str(BATCH),
              "--train-limit", str(examples), "--test-limit", "64", "--log-level", "warn",
              "--request-timeout", "300", "--heartbeat-timeout-ms", "30000",
              "--optimizer", "sgd" if mode == "ps" else "adam", *extra]
    env = dict(os.environ, TROUPE_SECRET="a-long-random-secret-for-the-ladder")
    if mode == "pydp":
        script = os.path.join(tmp, "wide_mlp.py")
        with open(script, "w") as f:
            f.write(WIDE_MLP)
        program = ["/usr/bin/python3", script]
        common += ["--torch-threads", "1"]
        env.update(LADDER_WIDTH=str(width), PYTHONPATH=os.path.join(os.path.dirname(BIN), "python"),
                   TROUPE_EXAMPLES=os.path.join(ROOT, "apps", "examples", "python"))
    elif mode == "torchdp":  # the same MLP in libtorch (apps/examples/torch_cnn --mlp)
        program = [os.path.join(BIN, "torch-cnn")]
        common += ["--mlp", f"{width},{width}", "--torch-threads", "1", "--blas-threads", "1"]
    else:
        program = [os.path.join(BIN, "troupe-fmnist")]
        common += ["--hidden", ",".join([str(width)] * hidden), "--blas-threads", "1"]
    head = program + ["--role", "coordinator", "--listen", address, "--workers", str(members),
                      "--report", report]
    if mode == "ps":
        head += ["--servers", "1"]
    procs = [subprocess.Popen(head + common, env=env, stdout=subprocess.DEVNULL,
                              stderr=open(os.path.join(tmp, "c.log"), "w"))]
    time.sleep(0.5)
    roles = (["server"] if mode == "ps" else []) + ["worker"] * members
    for i, role in enumerate(roles):
        procs.append(subprocess.Popen(
            program + ["--role", role, "--coordinator", address, "--name", f"{role[0]}{i}"] + common,
            env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, f"{i}.log"), "w")))
    codes = [p.wait(timeout=3600) for p in procs]
    if any(codes) or not os.path.exists(report):
        logs = "".join(open(os.path.join(tmp, n)).read()[-2000:]
                       for n in ["c.log"] + [f"{i}.log" for i in range(len(roles))])
        raise RuntimeError(f"{mode} W={width}: exit codes {codes}\n{logs}")
    with open(report) as f:
        return json.load(f)


WIDE_MLP = r"""
import os, sys
from torch import nn
import troupe
sys.path.insert(0, os.environ["TROUPE_EXAMPLES"])
from fmnist_cnn import FLAGS, fashion_mnist

W = int(os.environ["LADDER_WIDTH"])

def wide():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, W), nn.ReLU(), nn.Linear(W, W), nn.ReLU(),
                         nn.Linear(W, 10))

def make_task(flags):
    return troupe.TorchTask(wide, fashion_mnist(flags.data, "train", flags.train_limit),
                            fashion_mnist(flags.data, "t10k", flags.test_limit))

sys.exit(troupe.run(make_task, flags=FLAGS, prog="ladder-mlp"))
"""


DDP = r"""
import gzip, os, resource, sys, time, json
import numpy as np
import torch, torch.nn as nn, torch.distributed as dist, torch.multiprocessing as mp

def train_images(n):
    with gzip.open("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)[:n]
    with gzip.open("/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
    return torch.tensor(x, dtype=torch.float32) / 255.0, torch.tensor(y, dtype=torch.long)

def run(rank, world, width, steps, port, out, hidden):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)); torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world); torch.manual_seed(0)
    x, y = train_images((steps + 1) * 8 * world)
    layers = [nn.Flatten(), nn.Linear(784, width), nn.ReLU()]
    for _ in range(hidden - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    net = nn.Sequential(*layers, nn.Linear(width, 10))
    m = nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3); lossf = nn.CrossEntropyLoss()
    times = []
    for s in range(steps + 1):
        i = (s * world + rank) * 8
        dist.barrier(); t = time.time()
        opt.zero_grad(); lossf(m(x[i:i + 8]), y[i:i + 8]).backward(); opt.step()
        times.append(time.time() - t)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with open(out + f".{rank}", "w") as f:
        json.dump({"step_s": sorted(times[1:])[len(times[1:]) // 2], "rss_mb": rss}, f)
    dist.destroy_process_group()

if __name__ == "__main__":
    width, steps, out, world = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    hidden = int(sys.argv[5])
    mp.spawn(run, args=(world, width, steps, 29500 + os.getpid() % 1000, out, hidden),
             nprocs=world)
"""


def ddp_job(width, steps, tmp, world=2, hidden=2):
    """PyTorch DDP (gloo, `world` processes, Adam) on the same MLP (`hidden` layers of W): per
    rank its median step time and peak RSS."""
    script = os.path.join(tmp, "ddp_mlp.py")
    with open(script, "w") as f:
        f.write(DDP)
    out = os.path.join(tmp, f"ddp-{width}-{world}-{hidden}")
    subprocess.run([sys.executable, script, str(width), str(steps), out, str(world), str(hidden)],
                   check=True, timeout=3600)
    ranks = []
    for r in range(world):
        with open(f"{out}.{r}") as f:
            ranks.append(json.load(f))
    return ranks


def rss_of(report):
    return {"coordinator": report.get("coordinator_peak_rss_mb", 0),
            "servers": [s["peak_rss_mb"] for s in report.get("servers", [])],
            "workers": [w["peak_rss_mb"] for w in report.get("workers", [])]}


def per_step(long, short, steps):
    return (long["wall_s"] - short["wall_s"]) / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10M,100M")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--modes", default="ps,dp")
    parser.add_argument("--no-state", action="store_true", help="skip troupe-bench state")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    modes = args.modes.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = {m: troupe_job(m, 16, 2, tmp) for m in modes}
        ddp_base = ddp_job(16, 2, tmp) if {"dp", "pydp", "torchdp"} & set(modes) else None
        for size in sizes:
            w = width_for(size)
            params = mlp_params(w)
            for mode in modes:
                short = troupe_job(mode, w, 2, tmp)
                long = troupe_job(mode, w, 2 + args.steps, tmp)
                rss = rss_of(long)
                base_worker = max(rss_of(base[mode])["workers"])
                row = {"mode": mode, "params": params, "width": w,
                       "members": {"ps": "1 server + 1 worker", "dp": "2 members, C++",
                                           "pydp": "2 members, Python",
                                           "torchdp": "2 members, libtorch"}[mode],
                       "optimizer": "sgd" if mode == "ps" else "adam",
                       "s_per_step": per_step(long, short, args.steps),
                       "bytes_per_param_worker": (max(rss["workers"]) - base_worker) * 2**20 / params,
                       "rss_mb": rss}
                if mode == "ps":
                    base_server = max(rss_of(base[mode])["servers"])
                    row["bytes_per_param_server"] = (max(rss["servers"]) - base_server) * 2**20 / params
                if mode in ("dp", "pydp", "torchdp"):
                    ddp = ddp_job(w, args.steps, tmp)
                    ddp_rss = max(r["rss_mb"] for r in ddp)
                    row["ddp"] = {"s_per_step": ddp[0]["step_s"],
                                  "bytes_per_param": (ddp_rss - max(r["rss_mb"] for r in ddp_base))
                                  * 2**20 / params,
                                  "rss_mb": [r["rss_mb"] for r in ddp]}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print()
    print(f"{'mode':<5} {'params':>10} {'members, optimizer':<28} {'s/step':>8} "
          f"{'B/param':>8} {'DDP s/step':>10} {'DDP B/param':>11}  peak RSS MB")
    for r in rows:
        ddp = r.get("ddp")
        extra = (f"{ddp['s_per_step']:>10.3f} {ddp['bytes_per_param']:>11.1f}" if ddp
                 else f"{'':>10} {'':>11}")
        server = (f" server {r['bytes_per_param_server']:.1f} B/param" if "bytes_per_param_server"
                  in r else "")
        print(f"{r['mode']:<5} {r['params'] / 1e6:>9.1f}M {r['members'] + ', ' + r['optimizer']:<28} "
              f"{r['s_per_step']:>8.3f} {r['bytes_per_param_worker']:>8.1f} {extra}  "
              f"{json.dumps(r['rss_mb'])}{server}")
    if not args.no_state:
        values = max(sizes)
        print(f"\ntroupe-bench state --size {values} (an Adam store of {values / 1e6:.0f}M values)")
        subprocess.run([os.path.join(BIN, "troupe-bench"), "state", "--size", str(values),
                        "--reps", "3"], check=True)


if __name__ == "__main__":
    main()
