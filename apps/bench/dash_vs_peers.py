#!/usr/bin/env python3
"""troupe.optim.DASH against other optimizers in plain PyTorch loops, on the CPU, in one run
(docs/benchmarks.md, "DASH as a PyTorch optimizer"):

  - the fmnist MLP (784-256-128-10) on all of Fashion-MNIST, 10 epochs, batch 128: DASH, Adam
    and AdamW each at the best learning rate of a small sweep, pytorch_optimizer's
    ScalableShampoo (the same block size and frequency as DASH, preconditioning from step 1)
    and Shampoo (preconditioners every F steps) at their default learning rate;
  - the CNN of apps/examples/python/fmnist_cnn.py on a slice, each optimizer at its MLP
    learning rate.
Printed per optimizer: time per step (training only), test accuracy after each epoch,
training time until the test accuracy first reaches the target, and the optimizer state's
bytes. pytorch-optimizer 2.12.0 (PyPI, pure Python) is installed into a cache folder when it
is not importable.

    PYTHONPATH=build/python /usr/bin/python3 apps/bench/dash_vs_peers.py [--epochs 10]
"""
import argparse
import os
import subprocess
import sys
import time

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
DATA = "/usr/share/datasets/fashion-mnist"


def peers():
    """pytorch_optimizer, installed into ~/.cache/troupe-bench when it is missing."""
    try:
        import pytorch_optimizer
        return pytorch_optimizer
    except ImportError:
        pass
    target = os.path.expanduser("~/.cache/troupe-bench/pytorch-optimizer-2.12.0")
    if not os.path.isdir(os.path.join(target, "pytorch_optimizer")):
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--target", target, "pytorch-optimizer==2.12.0"], check=True)
    sys.path.insert(0, target)
    import pytorch_optimizer
    return pytorch_optimizer


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def state_bytes(opt):
    """Bytes of every tensor in the optimizer's state (DASH's statistics and roots included)."""
    def walk(x):
        if torch.is_tensor(x):
            return x.numel() * x.element_size()
        if isinstance(x, dict):
            return sum(walk(v) for v in x.values())
        if isinstance(x, (list, tuple)):
            return sum(walk(v) for v in x)
        return 0
    return walk(opt.state_dict()["state"])


def accuracy(model, test):
    x, y = test.tensors
    with torch.no_grad():
        return sum(int((model(x[i:i + 2000]).argmax(1) == y[i:i + 2000]).sum())
                   for i in range(0, len(x), 2000)) / len(x)


def train(make_model, make_opt, train_set, test, epochs, batch, target):
    """(seconds per step, accuracy per epoch, training seconds to `target` or None, state
    bytes); every run starts from the same model and shuffles alike."""
    torch.manual_seed(1)
    model = make_model()
    opt = make_opt(model.parameters())
    x, y = train_set.tensors
    g = torch.Generator().manual_seed(2)
    spent, steps, reached, curve = 0.0, 0, None, []
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=g)
        began = time.perf_counter()
        for first in range(0, len(x), batch):
            at = order[first:first + batch]
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x[at]), y[at]).backward()
            opt.step()
            steps += 1
        spent += time.perf_counter() - began
        curve.append(accuracy(model, test))
        if reached is None and curve[-1] >= target:
            reached = spent
    return spent / steps, curve, reached, state_bytes(opt)


def attempt(name, lr, target, *args):
    """train(*args), shown; a run that fails (a peer diverging into an SVD of NaN) says so."""
    try:
        result = train(*args)
    except Exception as e:  # the peer's own error: reported, and the others still run
        print(f"  {name:<16} lr {lr:<7g} failed: {type(e).__name__}: {str(e)[:120]}", flush=True)
        return None
    show(name, lr, result, target)
    return result


def show(name, lr, result, target):
    per_step, curve, reached, size = result
    first = next((i + 1 for i, a in enumerate(curve) if a >= target), None)
    print(f"  {name:<16} lr {lr:<7g} {per_step * 1e3:7.2f} ms/step  state {size / 2**20:6.2f} MiB"
          f"  to {target}: " + (f"{reached:6.1f} s (epoch {first})" if reached else "   never")
          + "  accuracy " + " ".join(f"{a:.4f}" for a in curve), flush=True)


def main():
    flags = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    flags.add_argument("--epochs", type=int, default=10)
    flags.add_argument("--batch", type=int, default=128)
    flags.add_argument("--block", type=int, default=128, help="B of DASH and ScalableShampoo")
    flags.add_argument("--frequency", type=int, default=10, help="F, steps between roots")
    flags.add_argument("--cnn-train", type=int, default=12000, help="the CNN's slice")
    flags.add_argument("--target", type=float, default=0.88, help="the MLP's target accuracy")
    flags.add_argument("--cnn-target", type=float, default=0.85)
    flags.add_argument("--lrs", default="", help="NAME=LR,...: no sweep for those (e.g. "
                       "DASH=1e-3,Adam=1e-3,AdamW=1e-3 from an earlier run)")
    flags.add_argument("--skip", default="", help="NAME,...: optimizers the MLP part leaves out")
    o = flags.parse_args()
    given = {k: float(v) for k, v in (x.split("=") for x in o.lrs.split(",") if x)}
    skip = set(filter(None, o.skip.split(",")))
    import fmnist_cnn
    import troupe
    po = peers()
    B, F = o.block, o.frequency
    optimizers = {
        "DASH": lambda lr: lambda p: troupe.optim.DASH(p, lr=lr, block_size=B, frequency=F),
        "Adam": lambda lr: lambda p: torch.optim.Adam(p, lr=lr),
        "AdamW": lambda lr: lambda p: torch.optim.AdamW(p, lr=lr, weight_decay=1e-2),
    }
    fixed = {
        "ScalableShampoo": (1e-3, lambda p: po.ScalableShampoo(
            p, lr=1e-3, block_size=B, preconditioning_compute_steps=F,
            start_preconditioning_step=1)),
        "Shampoo": (1e-3, lambda p: po.Shampoo(p, lr=1e-3, preconditioning_compute_steps=F)),
    }
    train_set = fmnist_cnn.fashion_mnist(DATA, "train", 0)
    test = fmnist_cnn.fashion_mnist(DATA, "t10k", 0)
    print(f"MLP, {len(train_set)} examples, {o.epochs} epochs, batch {o.batch}, torch threads "
          f"{torch.get_num_threads()}, B {B}, F {F}", flush=True)
    best = {}
    for name, make in optimizers.items():
        if name in given:
            best[name] = (given[name], make(given[name]))
            continue
        runs = {}
        for lr in (3e-4, 1e-3, 3e-3):
            runs[lr] = attempt(name, lr, o.target, mlp, make(lr), train_set, test, o.epochs,
                               o.batch, o.target)
        runs = {k: v for k, v in runs.items() if v}
        lr = max(runs, key=lambda k: max(runs[k][1]))
        best[name] = (lr, make(lr))
        print(f"  {name}: best lr {lr:g} (best test accuracy {max(runs[lr][1]):.4f})")
    for name, (lr, make) in fixed.items():
        if name not in skip:
            attempt(name, lr, o.target, mlp, make, train_set, test, o.epochs, o.batch, o.target)
        best[name] = (lr, make)
    cnn_train = fmnist_cnn.fashion_mnist(DATA, "train", o.cnn_train)
    print(f"CNN, {len(cnn_train)} examples, {o.epochs} epochs, each optimizer at its MLP lr",
          flush=True)
    for name, (lr, make) in best.items():
        attempt(name, lr, o.cnn_target, fmnist_cnn.Net, make, cnn_train, test, o.epochs,
                o.batch, o.cnn_target)


if __name__ == "__main__":
    main()
