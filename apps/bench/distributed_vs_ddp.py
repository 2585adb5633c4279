#!/usr/bin/env python3
"""troupe.DistributedOptimizer against PyTorch DDP, the same loop in the same run.

Both train the same model (the fmnist MLP of apps/examples/python/ps_loop.py, or the CNN with
--model cnn) from the same initial values on the same examples: 2 processes (--procs), each
taking its batch of every step at position + rank x batch of one shared permutation, SGD,
--epochs epochs; DDP over gloo on loopback (torch.distributed, init by TCP), Troupe over a loop
group served by this script's process (gloo too). Each side runs --reps times, alternating.
Printed per side: the median wall time of the training loop (slowest process), test accuracy,
and Troupe's wall time over DDP's.

    PYTHONPATH=build/python:apps/examples/python /usr/bin/python3 apps/bench/distributed_vs_ddp.py
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SECRET = "distributed-vs-ddp-bench-secret"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build(args):
    import torch
    from fmnist_cnn import Net, fashion_mnist
    from ps_loop import MLP
    torch.manual_seed(0)
    model = Net() if args.model == "cnn" else MLP()
    train = fashion_mnist(args.data, "train", args.train_limit)
    test = fashion_mnist(args.data, "t10k", args.test_limit)
    return model, train, test


def loop(args, model, optimizer, train, rank, size, step_done=None):
    """The training loop both sides run; returns its wall seconds."""
    import torch
    from torch import nn
    x_all, y_all = train.tensors
    n = len(x_all)
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    began = time.perf_counter()
    for epoch in range(args.epochs):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(1_000_003 + epoch))
        for position in range(0, n, size * args.batch):
            start = min(position + rank * args.batch, n)
            idx = order[start:min(start + args.batch, n)]
            optimizer.zero_grad()
            out = model(x_all[idx])
            (loss_fn(out, y_all[idx]) / args.batch).backward()
            optimizer.step()
    return time.perf_counter() - began


def accuracy(model, test):
    import torch
    x, y = test.tensors
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def worker(args):
    import torch
    torch.set_num_threads(args.threads)
    model, train, test = build(args)
    if args.side == "ddp":
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                                rank=args.rank, world_size=args.procs)
        net = DistributedDataParallel(model)
        optimizer = torch.optim.SGD(net.parameters(), lr=args.lr)
        seconds = loop(args, net, optimizer, train, args.rank, args.procs)
        dist.destroy_process_group()
    else:
        import troupe
        troupe.elastic.init(f"127.0.0.1:{args.port}", secret=SECRET)
        troupe.elastic.run(lambda state: None)(troupe.elastic.State())  # the first generation
        optimizer = troupe.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr),
                                                model.named_parameters())
        seconds = loop(args, model, optimizer, train, troupe.elastic.rank(), troupe.elastic.size())
        troupe.elastic.shutdown()
    print(f"seconds {seconds:.3f} accuracy {accuracy(model, test):.4f}", flush=True)


def run_side(args, side):
    port = free_port()
    group = None
    if side == "troupe":
        import troupe
        group = troupe.elastic.GroupService(listen=f"127.0.0.1:{port}", min_size=args.procs,
                                            secret=SECRET)
        port = int(group.address.rsplit(":", 1)[1])
    common = [sys.executable, os.path.abspath(__file__), "--side", side, "--port", str(port),
              "--procs", str(args.procs), "--epochs", str(args.epochs), "--batch",
              str(args.batch), "--lr", str(args.lr), "--model", args.model, "--data", args.data,
              "--train-limit", str(args.train_limit), "--test-limit", str(args.test_limit),
              "--threads", str(args.threads)]
    procs = [subprocess.Popen([*common, "--rank", str(r)], stdout=subprocess.PIPE, text=True)
             for r in range(args.procs)]
    outs = [p.communicate(timeout=1800)[0] for p in procs]
    if group is not None:
        group.stop()
    figures = []
    for text in outs:
        words = text.split()
        figures.append((float(words[words.index("seconds") + 1]),
                        float(words[words.index("accuracy") + 1])))
    return max(f[0] for f in figures), figures[0][1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--side", choices=["troupe", "ddp"])
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--test-limit", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    if args.side:
        return worker(args)
    times = {"troupe": [], "ddp": []}
    acc = {}
    for _ in range(args.reps):
        for side in ("ddp", "troupe"):
            seconds, acc[side] = run_side(args, side)
            times[side].append(seconds)
    print(f"model {args.model}, {args.procs} processes, {args.epochs} epochs, batch {args.batch} "
          f"per process, {args.threads} thread(s) each, medians of {args.reps}:")
    for side in ("ddp", "troupe"):
        print(f"  {side:7s} {statistics.median(times[side]):7.2f} s   accuracy {acc[side]:.4f}"
              f"   (runs: {', '.join(f'{t:.2f}' for t in times[side])})")
    ratio = statistics.median(times["troupe"]) / statistics.median(times["ddp"])
    print(f"  Troupe / DDP wall time: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
