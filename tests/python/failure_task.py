"""A Python task that fails at one point (--fault), for the failure matrix (test_failure_matrix.py).

    python3 failure_task.py --fault NAME [any troupe flag: --mode, --role, ...]

A small classifier on a synthetic set (1024 examples of 6 features), with an embedding table
(troupe.Table) unless --fault is no-tables; a table needs --mode ps or hybrid, so under
--mode dp the model has none. The faults, at step 8 of the training (the 8th training forward
pass of this process), or at once:
  parameters, initialize, evaluate   that hook raises
  forward                            the model's forward raises (the gradient's user code)
  ids                                the task's ids= raises (the rows a batch reads)
  malformed-example                  one example of the training set has the wrong shape
  nan-loss                           the loss is NaN at step 8 only
  deadlock                           forward blocks for good from step 8 on
  deadlock-holding-gil               the same, in a C call that keeps Python's lock (GIL)
  no-tables                          a model without tables (--mode hybrid trains it as dp)
  none                               nothing fails
"""
import ctypes
import sys
import threading

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

import troupe

FAULT_STEP = 8


def fault_of(argv):
    for i, arg in enumerate(argv):
        if arg == "--fault" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--fault="):
            return arg.split("=", 1)[1]
    return "none"


FAULT = fault_of(sys.argv)
MODE = sys.argv[sys.argv.index("--mode") + 1] if "--mode" in sys.argv[:-1] else "ps"
TABLES = FAULT != "no-tables" and MODE not in ("dp", "diloco")  # (diloco: dense only)
calls = {"forward": 0, "ids": 0}
never = threading.Event()


def at_fault(hook):
    """Counts a training call of `hook`; True at the faulty one (and after it, for deadlock)."""
    calls[hook] += 1
    stuck = FAULT.startswith("deadlock")
    return calls[hook] >= FAULT_STEP if stuck else calls[hook] == FAULT_STEP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(6, 3)
        if TABLES:
            self.rows = troupe.Table("rows", 3, init_scale=0.1)

    def forward(self, x, ids=None):
        out = self.dense(x)
        if self.training and at_fault("forward"):
            if FAULT == "forward":
                raise RuntimeError("failure_task: forward raised at step 8")
            if FAULT == "deadlock":
                never.wait()
            if FAULT == "deadlock-holding-gil":
                ctypes.PyDLL(None).pause()  # libc's pause(), called with the GIL held
            if FAULT == "nan-loss":
                out = out * float("nan")
        if TABLES:
            out = out + self.rows(ids).sum(dim=1)
        return out


class Malformed(Dataset):
    """The training set, with example 200 of the wrong shape."""

    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        x, *rest = self.inner[i]
        return (torch.zeros(5) if i == 200 else x, *rest)


class FailingTask(troupe.TorchTask):
    def parameters(self):
        if FAULT == "parameters":
            raise RuntimeError("failure_task: parameters raised")
        return super().parameters()

    def initialize(self, seed, out):
        if FAULT == "initialize":
            raise RuntimeError("failure_task: initialize raised")
        return super().initialize(seed, out)

    def evaluate(self, params, rows=None):
        if FAULT == "evaluate":
            raise RuntimeError("failure_task: evaluate raised")
        return super().evaluate(params, rows)


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    ids = torch.randint(0, 50, (n, 2), generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    return TensorDataset(x, ids, y) if TABLES else TensorDataset(x, y)


def ids_of(x, ids):
    if FAULT == "ids" and at_fault("ids"):
        raise KeyError("failure_task: ids raised at step 8")
    return {"rows": ids}


def make_task(flags):
    train = data(1024, 0)
    if FAULT == "malformed-example":
        train = Malformed(train)
    return FailingTask(Net, train, data(256, 1), ids=ids_of if TABLES else None)


FLAGS = [("fault", "NAME", "where the task fails (see the module's text)", "none")]

if __name__ == "__main__":
    sys.exit(troupe.run(make_task, flags=FLAGS))
