#!/usr/bin/env python3
"""A small CNN on Fashion-MNIST, trained by Troupe: every flag of troupe-fmnist works.

    python3 fmnist_cnn.py                                   # embedded: 2 workers, ps
    python3 fmnist_cnn.py --mode dp --workers 2 --epochs 3  # data parallel
    python3 fmnist_cnn.py --role worker --coordinator HOST:PORT --name w0

Its flags: --data DIR (Debian's dataset-fashion-mnist by default), --train-limit N and
--test-limit N (0: all), and --torch-threads N.
"""
import gzip
import os
import sys

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

import troupe


class Net(nn.Module):
    """Two convolutions and two linear layers; no dropout or batch norm."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 5, padding=2)
        self.conv2 = nn.Conv2d(8, 16, 5, padding=2)
        self.fc1 = nn.Linear(16 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def read_idx(path, limit):
    """An IDX file (gzip) as a numpy array of its first `limit` items (0: all)."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    values = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
    return values[:limit] if limit else values


def fashion_mnist(directory, split, limit):
    """Images as float32 N x 1 x 28 x 28 in [0, 1], labels as int64."""
    images = read_idx(os.path.join(directory, f"{split}-images-idx3-ubyte.gz"), limit)
    labels = read_idx(os.path.join(directory, f"{split}-labels-idx1-ubyte.gz"), limit)
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    return TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))


FLAGS = [
    troupe.Flag("data", str, "/usr/share/datasets/fashion-mnist", "Fashion-MNIST IDX files"),
    troupe.Flag("train-limit", int, 0, "use only the first N training examples (0: all)"),
    troupe.Flag("test-limit", int, 0, "use only the first N test examples (0: all)"),
]


def make_task(flags):
    train = fashion_mnist(flags.data, "train", flags.train_limit)
    test = fashion_mnist(flags.data, "t10k", flags.test_limit)
    return troupe.TorchTask(Net, train, test)


if __name__ == "__main__":
    sys.exit(troupe.run(make_task, flags=FLAGS, prog="fmnist-cnn"))
