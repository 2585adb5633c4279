#!/usr/bin/env python3
"""torchvision's ResNet-18 (11 M parameters, BatchNorm) on Fashion-MNIST, trained by Troupe:
the model a new user brings, unchanged but for its first convolution (one input channel) and
its classifier (ten classes). Every flag of troupe-fmnist works; ResNet-18 has buffers
(BatchNorm's running statistics), so it trains in --mode dp (or hybrid), as under DDP.

    python3 fmnist_resnet.py --mode dp --workers 2 --epochs 1 --train-limit 2048

Its flags: --data DIR, --train-limit N and --test-limit N (0: all), --torch-threads N.
"""
import os
import sys

import torch
from torch import nn
import torchvision

import troupe

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fmnist_cnn import FLAGS, fashion_mnist  # noqa: E402 (the same data and flags)


def resnet18():
    net = torchvision.models.resnet18(num_classes=10)
    net.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return net


def make_task(flags):
    train = fashion_mnist(flags.data, "train", flags.train_limit)
    test = fashion_mnist(flags.data, "t10k", flags.test_limit)
    return troupe.TorchTask(resnet18, train, test)


if __name__ == "__main__":
    sys.exit(troupe.run(make_task, flags=FLAGS, prog="fmnist-resnet"))
