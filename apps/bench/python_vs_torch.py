#!/usr/bin/env python3
"""The Python CNN (apps/examples/python/fmnist_cnn.py) on Troupe against PyTorch's own, back to
back on this machine, medians of 3 (docs/benchmarks.md, "PyTorch models"):

  1. embedded, 1 worker, --mode ps  vs  a plain PyTorch loop (same model, data, batch, SGD):
     steps/s; beside it the same CNN written with libtorch (apps/examples/torch_cnn, the
     build's bin/torch-cnn) on Troupe;
  2. --mode dp, 2 worker processes  vs  DistributedDataParallel (gloo), 2 processes: wall
     time and test accuracy, at equal epochs, global batch and learning rate.
Both PyTorch baselines evaluate on the whole test set after each epoch, as Troupe's
coordinator does, so that both sides do the same work. DDP starts from the same initial model
(torch.manual_seed(1), as --seed 1) and shuffles as TorchTask does, so that the two jobs take
the same steps and their accuracies differ only by floating-point sums.

    PYTHONPATH=build/python /usr/bin/python3 apps/bench/python_vs_torch.py [--train N] [--epochs E]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples", "python")
CNN = os.path.join(EXAMPLES, "fmnist_cnn.py")
sys.path.insert(0, EXAMPLES)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def troupe_run(args, folder, command=(sys.executable, CNN)):
    """Runs the CNN (the Python script, or another command) as one Troupe process; its
    report."""
    report = os.path.join(folder, "report.json")
    subprocess.run([*command, *args, "--report", report, "--log-level", "error"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(report) as f:
        return json.load(f)


def troupe_dp(common, folder):
    """A dp job of 2 worker processes and a coordinator; (wall seconds, test accuracy)."""
    env = dict(os.environ, TROUPE_SECRET="a-long-random-secret-for-bench")
    at = f"127.0.0.1:{free_port()}"
    report = os.path.join(folder, "dp.json")
    began = time.monotonic()
    coordinator = subprocess.Popen([sys.executable, CNN, *common, "--role", "coordinator",
                                    "--workers", "2", "--listen", at, "--report", report,
                                    "--log-level", "error"], env=env, stdout=subprocess.DEVNULL)
    workers = [subprocess.Popen([sys.executable, CNN, *common, "--role", "worker",
                                 "--coordinator", at, "--name", f"w{i}", "--log-level", "error"],
                                env=env, stdout=subprocess.DEVNULL) for i in range(2)]
    for p in [coordinator, *workers]:
        if p.wait(timeout=1800) != 0:
            raise RuntimeError("the Troupe dp job failed")
    wall = time.monotonic() - began
    with open(report) as f:
        return wall, json.load(f)["test_accuracy"]


def evaluate(model, test):
    """Test accuracy, as TorchTask.evaluate computes it (chunks of 1000)."""
    import torch
    x, y = test.tensors
    with torch.no_grad():
        right = sum(int((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum())
                    for i in range(0, len(x), 1000))
    return right / len(x)


def plain_loop(train_n, batch, steps, lr, threads):
    """A plain PyTorch loop over the same model and data, evaluating after the epoch: steps/s."""
    import torch
    import fmnist_cnn
    torch.set_num_threads(threads)
    data = fmnist_cnn.fashion_mnist("/usr/share/datasets/fashion-mnist", "train", train_n)
    test = fmnist_cnn.fashion_mnist("/usr/share/datasets/fashion-mnist", "t10k", 0)
    torch.manual_seed(1)
    model = fmnist_cnn.Net()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = data.tensors
    order = torch.randperm(len(x))
    began = time.monotonic()
    for s in range(steps):
        idx = order[(s * batch) % len(x):][:batch]
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    evaluate(model, test)
    return steps / (time.monotonic() - began)


DDP_WORKER = r'''
import os, sys, time, torch, torch.distributed as dist
sys.path.insert(0, {examples!r})
import fmnist_cnn
torch.set_num_threads({threads})
dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
train = fmnist_cnn.fashion_mnist("/usr/share/datasets/fashion-mnist", "train", {train})
test = fmnist_cnn.fashion_mnist("/usr/share/datasets/fashion-mnist", "t10k", 0)
torch.manual_seed(1)
model = torch.nn.parallel.DistributedDataParallel(fmnist_cnn.Net())
opt = torch.optim.SGD(model.parameters(), lr={lr})
x, y = train.tensors
for epoch in range({epochs}):
    # TorchTask's order of the epoch (troupe/torch_task.py, _epoch_order) for --seed 1: both
    # jobs take the same steps, each member the same half of each
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1_000_003 + epoch))
    for first in range(0, len(x), {batch} * size):
        idx = order[first + rank * {batch}:first + (rank + 1) * {batch}]
        if len(idx) == 0:
            idx = order[first:first + 1]
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    if rank == 0:  # after every epoch, as Troupe's coordinator
        with torch.no_grad():
            right = sum(int((model.module(test.tensors[0][i:i + 1000]).argmax(1) ==
                             test.tensors[1][i:i + 1000]).sum()) for i in range(0, len(test), 1000))
if rank == 0:
    print(right / len(test))
dist.destroy_process_group()
'''


def ddp(train_n, batch, epochs, lr, threads, folder):
    """DDP with gloo, 2 processes (torchrun's variables set by hand); (wall s, accuracy)."""
    script = os.path.join(folder, "ddp_worker.py")
    with open(script, "w") as f:
        f.write(DDP_WORKER.format(examples=EXAMPLES, threads=threads, train=train_n, lr=lr,
                                  epochs=epochs, batch=batch))
    port = str(free_port())
    began = time.monotonic()
    procs = [subprocess.Popen([sys.executable, script], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                                       RANK=str(r), WORLD_SIZE="2")) for r in range(2)]
    outs = [p.communicate(timeout=1800)[0] for p in procs]
    wall = time.monotonic() - began
    if any(p.returncode for p in procs):
        raise RuntimeError("DDP failed")
    return wall, float(outs[0].strip())


def main():
    flags = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    flags.add_argument("--train", type=int, default=12800, help="training examples")
    flags.add_argument("--epochs", type=int, default=3, help="epochs of the dp comparison")
    flags.add_argument("--batch", type=int, default=64, help="examples per worker per step")
    flags.add_argument("--lr", type=float, default=0.05)
    flags.add_argument("--runs", type=int, default=3)
    flags.add_argument("--torch-cnn", default=os.path.join(HERE, "..", "..", "build", "bin",
                                                           "torch-cnn"),
                       help="the libtorch CNN binary (skipped when missing)")
    o = flags.parse_args()
    common = ["--train-limit", str(o.train), "--test-limit", "0", "--torch-threads", "1",
              "--blas-threads", "1", "--optimizer", "sgd", "--lr", str(o.lr), "--seed", "1"]
    with tempfile.TemporaryDirectory() as folder:
        ours, theirs, cpp = [], [], []
        embedded = [*common, "--workers", "1", "--servers", "1", "--epochs", "1", "--batch",
                    str(o.batch)]
        for _ in range(o.runs):
            r = troupe_run(embedded, folder)
            ours.append(r["steps"] / r["wall_s"])
            theirs.append(plain_loop(o.train, o.batch, int(r["steps"]), o.lr, 1))
            if os.path.exists(o.torch_cnn):
                r = troupe_run(embedded, folder, (o.torch_cnn,))
                cpp.append(r["steps"] / r["wall_s"])
        a, b = statistics.median(ours), statistics.median(theirs)
        print(f"embedded, 1 worker: troupe {a:.1f} steps/s, plain PyTorch loop {b:.1f} "
              f"steps/s: {a / b:.2f}x (goal: at least 0.9x)")
        if cpp:
            c = statistics.median(cpp)
            print(f"embedded, 1 worker, the libtorch CNN: troupe {c:.1f} steps/s, the Python "
                  f"CNN {a:.1f} steps/s: {c / a:.2f}x")
        dp_runs, ddp_runs = [], []
        for _ in range(o.runs):
            dp_runs.append(troupe_dp([*common, "--mode", "dp", "--epochs", str(o.epochs),
                                      "--batch", str(o.batch)], folder))
            ddp_runs.append(ddp(o.train, o.batch, o.epochs, o.lr, 1, folder))
        wa = statistics.median(w for w, _ in dp_runs)
        wb = statistics.median(w for w, _ in ddp_runs)
        aa = statistics.median(a for _, a in dp_runs)
        ab = statistics.median(a for _, a in ddp_runs)
        print(f"dp, 2 processes, {o.epochs} epochs: troupe {wa:.1f} s accuracy {aa:.4f}, "
              f"DDP (gloo) {wb:.1f} s accuracy {ab:.4f}: wall {wa / wb:.2f}x (goal: at most "
              f"1.0x), accuracy {aa - ab:+.4f} (goal: within 0.005)")


if __name__ == "__main__":
    main()
