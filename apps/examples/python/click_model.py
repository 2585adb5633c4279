#!/usr/bin/env python3
"""A click model whose embedding tables live on Troupe's parameter service, trained by Troupe.

Each example is a page view: a few categorical fields (user, item, site, hour: 64-bit ids),
three dense features, and whether it was clicked. The model looks each field's id up in two
troupe.Tables (a weight per id, and an 8-value embedding), and feeds the embeddings with the
dense features to a small tower (nn.Linear layers). In --mode hybrid the tables are on the
servers' buckets (asynchronous, rows pulled and pushed per step) and the tower is allreduced
by the workers; in --mode ps everything is on the buckets.

    python3 click_model.py --mode hybrid                        # embedded: 2 workers
    python3 click_model.py --mode hybrid --role coordinator --listen HOST:PORT --servers 2 ...
    troupe-fmnist --role server --coordinator HOST:PORT         # a server needs no model

The log is synthetic and its own: a hidden logistic model over the same fields draws each
click, so the best possible test loss is known (printed at the start).
Its flags: --train-examples N, --test-examples N, --log-seed N.
"""
import math
import sys

import torch
from torch import nn
from torch.utils.data import TensorDataset

import troupe

FIELDS = [("user", 5000), ("item", 2000), ("site", 300), ("hour", 24)]
DENSE = 3
EMBEDDING = 8


def click_log(examples, seed, truth_seed):
    """`examples` page views: (dense float32 N x 3, ids int64 N x fields, clicks float32 N).
    Field f's value v has id f * 2**32 + v; values follow a power law (few popular ones). The
    hidden model (from `truth_seed`, the same for training and test) draws the clicks."""
    truth = torch.Generator().manual_seed(truth_seed)
    weights = [torch.randn(size, generator=truth) * 0.8 for _, size in FIELDS]
    dense_weights = torch.randn(DENSE, generator=truth) * 0.5
    g = torch.Generator().manual_seed(seed)
    values = [(torch.rand(examples, generator=g) ** 2 * size).long() for _, size in FIELDS]
    dense = torch.randn(examples, DENSE, generator=g)
    logit = dense @ dense_weights - 1.0
    for w, v in zip(weights, values):
        logit += w[v]
    clicks = (torch.rand(examples, generator=g) < torch.sigmoid(logit)).float()
    ids = torch.stack([v + (f << 32) for f, v in enumerate(values)], dim=1)
    return TensorDataset(dense, ids, clicks), float(_log_loss(logit, clicks))


def _log_loss(logit, clicks):
    return nn.functional.binary_cross_entropy_with_logits(logit, clicks)


class ClickModel(nn.Module):
    """A weight per id (logistic part) plus a tower over the ids' embeddings and the dense
    features."""

    def __init__(self):
        super().__init__()
        self.weight = troupe.Table("weight", 1, init_scale=0.0)
        self.embedding = troupe.Table("embedding", EMBEDDING, init_scale=0.05)
        self.tower = nn.Sequential(nn.Linear(len(FIELDS) * EMBEDDING + DENSE, 32), nn.ReLU(),
                                   nn.Linear(32, 1))

    def forward(self, dense, ids):
        wide = self.weight(ids).sum(dim=(1, 2))
        deep = self.tower(torch.cat([self.embedding(ids).flatten(1), dense], dim=1))
        return wide + deep.squeeze(1)


def rows_read(dense, ids):
    """The rows each table reads for a batch: every field's id, in both tables."""
    return {"weight": ids, "embedding": ids}


def clicks_right(logit, clicks):
    return int(((logit > 0) == (clicks > 0.5)).sum())


FLAGS = [
    troupe.Flag("train-examples", int, 40000, "page views in the training log"),
    troupe.Flag("test-examples", int, 5000, "page views in the test log"),
    troupe.Flag("log-seed", int, 1, "the synthetic log's seed"),
]


def make_task(flags):
    seed = flags.log_seed
    train, _ = click_log(flags.train_examples, seed * 2, seed)
    test, best = click_log(flags.test_examples, seed * 2 + 1, seed)
    rate = float(test.tensors[2].mean())
    constant = -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate)) if 0 < rate < 1 else 0
    print(f"click log: test click rate {rate:.3f}, log loss of the rate {constant:.4f}, "
          f"of the hidden model {best:.4f}", flush=True)
    return troupe.TorchTask(ClickModel, train, test, loss=_log_loss, correct=clicks_right,
                            ids=rows_read)


if __name__ == "__main__":
    sys.exit(troupe.run(make_task, flags=FLAGS, prog="click-model"))
