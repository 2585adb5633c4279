#!/usr/bin/env python3
"""A plain PyTorch training loop on Troupe's parameter service, asynchronous, in several
processes: each pulls the values, computes a gradient of its share of the batches and pushes
it; the buckets apply every push as it arrives (SGD here), counting its staleness.

    python3 ps_loop.py --serve 127.0.0.1:7700 --clients 2              # the service
    python3 ps_loop.py --join 127.0.0.1:7700 --client 0 --clients 2    # a loop, client 0
    python3 ps_loop.py --join 127.0.0.1:7700 --client 1 --clients 2    # a loop, client 1

All need TROUPE_SECRET. The serving process prints "serving at HOST:PORT" once clients may
join (port 0 takes a free one), waits until every client's pushes have been applied (the
vector clocks say so), and prints the test accuracy of the result.
Other flags: --epochs, --batch, --lr, --data DIR, --train-limit N, --test-limit N, --hidden
W1,W2,... (the MLP's hidden widths, the same in every process).
"""
import argparse
import sys

import torch
from torch import nn

import troupe
from fmnist_cnn import fashion_mnist


class MLP(nn.Module):
    """784-W1-...-10 with ReLUs (default one hidden layer of 128)."""

    def __init__(self, hidden=(128,)):
        super().__init__()
        layers, width = [nn.Flatten()], 784
        for w in hidden:
            layers += [nn.Linear(width, w), nn.ReLU()]
            width = w
        self.layers = nn.Sequential(*layers, nn.Linear(width, 10))

    def forward(self, x):
        return self.layers(x)


def hidden_widths(text):
    """--hidden "W1,W2,...": the MLP's hidden widths."""
    return tuple(int(w) for w in text.split(","))


def my_batches(count, clients, client):
    """This client's share of a epoch's batches: every clients-th, from its id."""
    return range(client, count, clients)


def train(client, model, data, args, clients):
    x_all, y_all = data.tensors
    batches = (len(x_all) + args.batch - 1) // args.batch
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        losses, stale = [], []
        for b in my_batches(batches, clients, client.id):
            x = x_all[b * args.batch:(b + 1) * args.batch]
            y = y_all[b * args.batch:(b + 1) * args.batch]
            client.pull(model)
            model.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            stale.append(client.push(model, batches=(epoch, b, 1)))
            losses.append(loss.item())
        print(f"client {client.id} epoch {epoch + 1}: loss {sum(losses) / len(losses):.4f}, "
              f"staleness {sum(stale) / len(stale):.2f}", flush=True)
    return batches


def accuracy(model, data):
    x, y = data.tensors
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--serve", metavar="HOST:PORT")
    where.add_argument("--join", metavar="HOST:PORT")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--client", type=int, default=0)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--train-limit", type=int, default=0)
    p.add_argument("--test-limit", type=int, default=0)
    p.add_argument("--hidden", type=hidden_widths, default=(128,),
                   help="the MLP's hidden widths, W1,W2,... (the same in every process)")
    args = p.parse_args()
    torch.manual_seed(0)
    model = MLP(args.hidden)
    train_set = fashion_mnist(args.data, "train", args.train_limit)
    if args.join:
        client = troupe.ParameterClient(args.join, client=args.client)
        train(client, model, train_set, args, args.clients)
        print(f"routes {client.routes}", flush=True)  # how each bucket was reached
        return 0
    # One client more than the loops: this process's own, which only pulls (async never holds
    # a pull back, and a client that never pushes holds nobody else back either).
    service = troupe.ParameterService(model, clients=args.clients + 1, optimizer="sgd",
                                      lr=args.lr, listen=args.serve)
    print(f"serving at {service.address}", flush=True)
    batches = (len(train_set) + args.batch - 1) // args.batch
    try:  # each client pushes each of its batches once an epoch
        service.client(args.clients).wait_for(pushes=batches * args.epochs, into=model)
    except TimeoutError as e:
        print(f"not every client's pushes arrived: {e}", flush=True)
        return 1
    test_set = fashion_mnist(args.data, "t10k", args.test_limit)
    print(f"test accuracy {accuracy(model, test_set):.4f}", flush=True)
    service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
