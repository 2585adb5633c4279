#!/usr/bin/env python3
"""troupe.DistributedOptimizer's sharded state (zero_stage 0, 1, 2) beside PyTorch DDP and DDP
with ZeroRedundancyOptimizer, the same loop in the same run.

Every side trains the same MLP (784-W-...-W-10, --hidden layers of W; --size parameters, default
20M) with Adam from the same initial values on the same random examples: --procs processes
(default 2), --steps steps of --batch examples each; DDP over gloo on loopback, Troupe over a
loop group served by this script's process (gloo too). Printed per side: seconds per step
(the median after two warm-up steps, slowest process), the model-state bytes per parameter per
process (its peak RSS less its RSS before the model was made, over the parameters), and both
against DDP's.

    PYTHONPATH=build/python:apps/examples/python /usr/bin/python3 apps/bench/zero_loop.py
"""
import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time

SECRET = "zero-loop-bench-secret"
SIDES = ["ddp", "ddp-zero", "troupe-0", "troupe-1", "troupe-2"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def width_for(size, hidden):
    # 784 W + (hidden - 1) W^2 + 10 W (+ biases) ~ size
    a, b = hidden - 1, 794 + hidden
    return int((-b + (b * b + 4 * a * size) ** 0.5) / (2 * a)) if a else int(size / b)


def member(args):
    """One process of one side: trains, then prints its figures as JSON."""
    import torch
    from torch import nn
    torch.set_num_threads(1)
    base = rss_mb()
    torch.manual_seed(0)
    w = width_for(args.size, args.hidden)
    layers, width = [], 784
    for _ in range(args.hidden):
        layers += [nn.Linear(width, w), nn.ReLU()]
        width = w
    model = nn.Sequential(*layers, nn.Linear(width, 10))
    params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch * args.procs, 784, generator=g)
    y = torch.randint(0, 10, (args.batch * args.procs,), generator=g)
    rank = args.rank
    mine = slice(rank * args.batch, (rank + 1) * args.batch)
    if args.side.startswith("troupe"):
        import troupe
        troupe.elastic.init(args.address, secret=SECRET)
        troupe.elastic.run(lambda state: None)(troupe.elastic.State())
        opt = troupe.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-4),
                                          model.named_parameters(),
                                          zero_stage=int(args.side[-1]))
        net = model
    else:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        dist.init_process_group("gloo", init_method=f"tcp://{args.address}", rank=rank,
                                world_size=args.procs)
        net = DistributedDataParallel(model)
        if args.side == "ddp-zero":
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                          lr=1e-4)
        else:
            opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    took = []
    for _ in range(args.steps):
        began = time.perf_counter()
        opt.zero_grad()
        loss_fn(net(x[mine]), y[mine]).backward()
        opt.step()
        took.append(time.perf_counter() - began)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"rank": rank, "params": params, "step_s": statistics.median(took[2:]),
                      "state_mb": peak - base, "checksum": float(sum(p.double().sum()
                                                                      for p in model.parameters()))}),
          flush=True)
    if args.side.startswith("troupe"):
        import troupe
        troupe.elastic.shutdown()
    return 0


def run_side(args, side):
    """Every process of `side`; their figures."""
    env = dict(os.environ, TROUPE_SECRET=SECRET)
    group = None
    if side.startswith("troupe"):
        import troupe
        group = troupe.elastic.GroupService(listen="127.0.0.1:0", min_size=args.procs,
                                            secret=SECRET, timeout=120)
        address = group.address
    else:
        address = f"127.0.0.1:{free_port()}"
    procs = [subprocess.Popen([sys.executable, __file__, "--member", "--side", side,
                               "--rank", str(r), "--address", address,
                               "--size", str(args.size), "--hidden", str(args.hidden),
                               "--procs", str(args.procs), "--steps", str(args.steps),
                               "--batch", str(args.batch)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
             for r in range(args.procs)]
    try:
        out = [p.communicate(timeout=1800)[0] for p in procs]
    finally:
        if group is not None:
            group.stop()
    rows = []
    for p, text in zip(procs, out):
        if p.returncode != 0:
            raise RuntimeError(f"{side}: a process exited {p.returncode}")
        rows.append(json.loads(text.strip().splitlines()[-1]))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--member", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--side", default="ddp")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--address", default="")
    p.add_argument("--size", type=float, default=20e6)
    p.add_argument("--hidden", type=int, default=4)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--sides", default=",".join(SIDES))
    args = p.parse_args()
    args.size = int(args.size)
    if args.member:
        return member(args)
    results = {side: run_side(args, side) for side in args.sides.split(",")}
    params = results[next(iter(results))][0]["params"]
    print(f"\nMLP of {params / 1e6:.1f}M parameters ({args.hidden} hidden layers), Adam, "
          f"{args.procs} processes, batch {args.batch} each")
    print(f"{'side':<10} {'s/step':>7} {'B/param':>8} {'x DDP s':>8} {'x DDP B':>8}  checksum")
    ddp = results.get("ddp")
    for side, rows in results.items():
        s = max(r["step_s"] for r in rows)
        b = max(r["state_mb"] for r in rows) * 2**20 / params
        ds = max(r["step_s"] for r in ddp) if ddp else s
        db = max(r["state_mb"] for r in ddp) * 2**20 / params if ddp else b
        print(f"{side:<10} {s:>7.3f} {b:>8.1f} {s / ds:>8.2f} {b / db:>8.2f}  "
              f"{rows[0]['checksum']:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
