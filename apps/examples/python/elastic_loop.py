#!/usr/bin/env python3
"""A plain data-parallel PyTorch loop on Troupe, elastic: troupe.DistributedOptimizer sums the
gradients over a loop group, which re-forms when a process joins, leaves or is lost; the loop
then goes on from its last commit, and every example of an epoch is still used once.

    python3 elastic_loop.py --serve 127.0.0.1:7800 --min-size 2    # the group (a driver)
    python3 elastic_loop.py --join 127.0.0.1:7800                  # a loop; start 2 or more

All need TROUPE_SECRET. The driver prints "serving at HOST:PORT" and serves until killed.
Each loop prints a line per committed step ("commit epoch E position P size S generation G
rank R loss L") and at the end "done: checksum C accuracy A optimizer state of N parameters"
(the checksum of its parameters: the same in every loop; N: the parameters whose optimizer
state it holds, all of them unless --zero-stage shards it). Other flags: --epochs, --batch (per member), --lr, --optimizer
sgd|adam, --zero-stage 0|1|2 (DistributedOptimizer's sharded state), --data DIR,
--train-limit N, --test-limit N, --step-delay-ms MS (a floor under each step), --hidden W1,W2,...
(the MLP's hidden widths, the same in every process).
"""
import argparse
import signal
import sys
import time
import zlib

import torch
from torch import nn

import troupe
from fmnist_cnn import fashion_mnist
from ps_loop import MLP, hidden_widths


def checksum(model):
    data = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    return f"{zlib.crc32(data):08x}"


def serve(args):
    group = troupe.elastic.GroupService(listen=args.serve, min_size=args.min_size,
                                        timeout=args.timeout)
    signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    print(f"serving at {group.address}", flush=True)
    signal.sigwait(signals)
    group.stop()
    return 0


def join(args):
    torch.manual_seed(0)
    model = MLP(args.hidden)
    train_set = fashion_mnist(args.data, "train", args.train_limit)
    x_all, y_all = train_set.tensors
    troupe.elastic.init(args.join, timeout=args.timeout)
    inner = (torch.optim.Adam(model.parameters(), lr=args.lr) if args.optimizer == "adam"
             else torch.optim.SGD(model.parameters(), lr=args.lr))
    optimizer = troupe.DistributedOptimizer(inner, model.named_parameters(),
                                            zero_stage=args.zero_stage)
    state = troupe.elastic.State(model, optimizer, epoch=0, position=0)
    sampler = troupe.elastic.ElasticSampler(len(x_all), args.batch, seed=1)
    loss_fn = nn.CrossEntropyLoss(reduction="sum")

    @troupe.elastic.run
    def train(state):
        while state.epoch < args.epochs:
            idx = sampler.indices(state)
            optimizer.zero_grad()
            loss = torch.zeros(())
            if len(idx):
                # Summed over this member's examples, divided by the step's global batch:
                # the group's average (DistributedOptimizer divides by the size).
                loss = loss_fn(model(x_all[idx]), y_all[idx]) / args.batch
                loss.backward()
            optimizer.step()
            if args.step_delay_ms:
                time.sleep(args.step_delay_ms / 1000)
            epoch, position = state.epoch, state.position
            sampler.advance(state)
            state.commit()
            print(f"commit epoch {epoch} position {position} size {state.size} "
                  f"generation {state.generation} rank {state.rank} loss {loss.item():.4f}",
                  flush=True)

    train(state)
    test_set = fashion_mnist(args.data, "t10k", args.test_limit)
    x, y = test_set.tensors
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    print(f"done: checksum {checksum(model)} accuracy {accuracy:.4f} "
          f"optimizer state of {len(optimizer.state)} parameters", flush=True)
    troupe.elastic.shutdown()
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--serve", metavar="HOST:PORT")
    where.add_argument("--join", metavar="HOST:PORT")
    p.add_argument("--min-size", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    p.add_argument("--zero-stage", type=int, choices=(0, 1, 2), default=0,
                   help="the optimizer's state sharded over the members (1), the gradients too (2)")
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--step-delay-ms", type=int, default=0)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--test-limit", type=int, default=0)
    p.add_argument("--hidden", type=hidden_widths, default=(128,),
                   help="the MLP's hidden widths, W1,W2,... (the same in every process)")
    args = p.parse_args()
    return serve(args) if args.serve else join(args)


if __name__ == "__main__":
    sys.exit(main())
