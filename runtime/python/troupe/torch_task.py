"""TorchTask: a PyTorch model, its data, a loss and an evaluation as a Troupe training task.

Troupe's C++ side (runtime/python/native/python_task.cpp) calls these methods from its
trainers' threads, holding the GIL; parameters and gradients cross as flat float32 buffers in
the order of model.named_parameters() (docs/python.md says how a TorchTask maps onto
troupe/task.hpp).
"""
import math
import threading

import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset
from torch.utils.data._utils.collate import default_collate


# Models are built from torch's global random generator; trainers of one process build theirs
# (and the coordinator draws the initial parameters) at the same time, so every build holds
# this lock and draws from its own seed without changing the generator's state for others.
_building = threading.Lock()


def _build(model, seed):
    """model(), its random initialisation drawn from `seed` alone."""
    with _building, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model()


def _examples(dataset, indices):
    """The examples `indices` of `dataset`, collated into a batch (inputs, targets)."""
    if isinstance(dataset, TensorDataset):
        return tuple(t[indices] for t in dataset.tensors)
    return default_collate([dataset[int(i)] for i in indices])


class _Plan:
    """A batch sampler whose batches are set before each pass (_Loader.fetch)."""

    def __init__(self):
        self.batches = []

    def __iter__(self):
        return iter(list(self.batches))

    def __len__(self):
        return len(self.batches)


class _Loader:
    """Examples by index through a DataLoader's worker processes (--loader-workers N): the
    workers stay up between steps (persistent), and each step's indices are split among
    them, read in parallel and put back in order. The workers are forked from a trainer's
    process; they run only the dataset's code and torch's collation, never Troupe's."""

    def __init__(self, dataset, workers):
        self.workers = workers
        self.plan = _Plan()
        self.loader = torch.utils.data.DataLoader(dataset, batch_sampler=self.plan,
                                                  num_workers=workers, persistent_workers=True,
                                                  multiprocessing_context="fork")

    def fetch(self, indices):
        parts = [p.tolist() for p in torch.tensor_split(indices, min(self.workers, len(indices)))]
        self.plan.batches = [p for p in parts if p]
        batches = list(self.loader)
        return tuple(torch.cat(column) for column in zip(*batches))


def _correct(output, target):
    """How many of a batch's predictions (arg max of the output) are the target."""
    return int((output.argmax(dim=1) == target).sum())


class TorchTask:
    """A model written in PyTorch as a Troupe task.

    model:      a callable returning a new torch.nn.Module (its class, say); Troupe calls it after
                torch.manual_seed(seed), so every process builds the same initial model.
    train:      the training set: a map-style dataset of (input, target) examples, or a
                TensorDataset (read by index, fastest).
    test:       the held-out set, the same way.
    loss:       loss(output, target) -> the batch's mean loss (default: cross entropy).
    correct:    correct(output, target) -> how many predictions are right (default: arg max).
    eval_batch: examples per forward pass of the evaluation.
    loader_workers: DataLoader worker processes per trainer that read a map-style training set
                (None: --loader-workers, 0 by default: read in the trainer). A TensorDataset
                is always read by index in the trainer.
    overlap:    tell Troupe each parameter's gradient as soon as backward has accumulated it,
                so that data-parallel jobs reduce it while backward goes on. The first step
                counts how many times backward accumulates each parameter; a model whose
                graph changes from step to step needs overlap=False.
    """

    def __init__(self, model, train, test, loss=F.cross_entropy, correct=_correct,
                 eval_batch=1000, overlap=True, loader_workers=None):
        self.model = model
        self.train = train
        self.test = test
        self.loss = loss
        self.correct = correct
        self.eval_batch = eval_batch
        self.overlap = overlap
        self.loader_workers = loader_workers
        probe = _build(model, 0)
        _check_model(probe)
        self._specs = [(n, tuple(p.shape)) for n, p in probe.named_parameters()]
        # The evaluation's model, built now: not beside trainers that draw random numbers.
        self._evaluator = _Model(probe)
        if len(train) == 0:
            raise ValueError("TorchTask: the training set is empty")

    # -- the task protocol (troupe/task.hpp's training_task) -------------------------------

    def parameters(self):
        """(name, shape) of each parameter, in named_parameters() order."""
        return self._specs

    def initialize(self, seed, out):
        """The initial parameters the model's constructor draws from `seed`, into `out`."""
        model = _build(self.model, seed)
        flat = torch.frombuffer(out, dtype=torch.float32)
        with torch.no_grad():
            torch.cat([p.detach().reshape(-1) for p in model.parameters()], out=flat)

    def batches_per_epoch(self, batch):
        return math.ceil(len(self.train) / batch)

    def make_replica(self, batch, seed):
        return _Replica(self, batch, seed)

    def evaluate(self, params):
        """(accuracy, mean loss) on the test set with the parameters `params`."""
        model = self._evaluator
        model.load(torch.frombuffer(params, dtype=torch.float32))
        model.module.eval()
        right, loss_sum, n = 0, 0.0, len(self.test)
        with torch.no_grad():
            for start in range(0, n, self.eval_batch):
                indices = torch.arange(start, min(start + self.eval_batch, n))
                inputs, targets = _examples(self.test, indices)
                output = model.module(inputs)
                right += self.correct(output, targets)
                loss_sum += float(self.loss(output, targets)) * len(indices)
        model.module.train()
        return (right / n, loss_sum / n) if n else (0.0, 0.0)


def _check_model(module):
    if not isinstance(module, torch.nn.Module):
        raise TypeError("TorchTask: model() must return a torch.nn.Module, not "
                        f"{type(module).__name__}")
    params = list(module.named_parameters())
    if not params:
        raise ValueError("TorchTask: the model has no parameters")
    for name, p in params:
        if not p.requires_grad:
            raise ValueError(f"TorchTask: parameter '{name}' is frozen (requires_grad=False); "
                             "Troupe trains every parameter the model has")
        if p.dtype != torch.float32:
            raise TypeError(f"TorchTask: parameter '{name}' is {p.dtype}; Troupe trains float32")
    buffers = [name for name, _ in module.named_buffers()]
    if buffers:
        raise ValueError("TorchTask: models with buffers (" + ", ".join(buffers) + ") are not "
                         "supported yet: their broadcast in data-parallel jobs is not built")


class _Model:
    """A module whose parameters are views of one flat tensor, loaded with one copy."""

    def __init__(self, module):
        self.module = module
        params = list(module.parameters())
        self.sizes = [p.numel() for p in params]
        self.offsets = [0]
        for n in self.sizes:
            self.offsets.append(self.offsets[-1] + n)
        self.flat = torch.zeros(self.offsets[-1])
        with torch.no_grad():
            for p, at, n in zip(params, self.offsets, self.sizes):
                p.data = self.flat[at:at + n].view_as(p)
        self.params = params

    def load(self, values):
        with torch.no_grad():
            self.flat.copy_(values)


class _Replica:
    """One trainer's model: computes the gradient of any range of any epoch's examples."""

    def __init__(self, task, batch, seed):
        self.task = task
        self.batch = batch
        self.seed = seed
        self.model = _Model(_build(task.model, seed))
        self.order_epoch, self.order = None, None
        workers = task.loader_workers or 0
        self.loader = None
        if workers > 0 and not isinstance(task.train, TensorDataset):
            self.loader = _Loader(task.train, workers)
        self.uses = None  # how many times backward accumulates each parameter (first step)
        # Each parameter's gradient accumulator: its hook tells Troupe the gradient is final.
        self.accumulators = []
        for i, p in enumerate(self.model.params):
            accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
            accumulator.register_hook(self._hook(i))
            self.accumulators.append(accumulator)
        self.step = None

    def _epoch_order(self, epoch):
        """Epoch `epoch`'s order of the training examples, the same in every process."""
        if self.order_epoch != epoch:
            g = torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) % (1 << 63))
            self.order = torch.randperm(len(self.task.train), generator=g)
            self.order_epoch = epoch
        return self.order

    def _hook(self, i):
        def accumulated(*_):
            step = self.step
            if step is None:
                return
            step["fired"][i] += 1
            if step["overlap"] and step["fired"][i] == self.uses[i]:
                self._report(i)
        return accumulated

    def _report(self, i):
        """Parameter i's gradient into Troupe's buffer, and Troupe told that it is final."""
        step = self.step
        if step["told"][i]:
            return
        step["told"][i] = True
        at, n = self.model.offsets[i], self.model.sizes[i]
        p = self.model.params[i]
        target = step["grad"][at:at + n]
        if p.grad is None:
            target.zero_()
        else:
            target.copy_(p.grad.reshape(-1))
        if step["ready"] is not None:
            step["ready"](i)

    def gradient_range(self, params, epoch, first, count, grad, ready):
        """The mean gradient of examples first .. first + count - 1 of epoch `epoch`'s order
        into `grad`; returns (mean loss, examples used)."""
        grad = torch.frombuffer(grad, dtype=torch.float32)
        n = len(self.task.train)
        end = min(first + count, n)
        if first >= end:
            grad.zero_()
            return (0.0, 0)
        indices = self._epoch_order(epoch)[first:end]
        if self.loader is not None:
            inputs, targets = self.loader.fetch(indices)
        else:
            inputs, targets = _examples(self.task.train, indices)
        self.model.load(torch.frombuffer(params, dtype=torch.float32))
        for p in self.model.params:
            p.grad = None
        k = len(self.model.params)
        # Told during backward only once the first step has counted the accumulations.
        overlap = self.task.overlap and ready is not None and self.uses is not None
        self.step = {"fired": [0] * k, "told": [False] * k, "grad": grad, "ready": ready,
                     "overlap": overlap}
        try:
            loss = self.task.loss(self.model.module(inputs), targets)
            loss.backward()
            fired = self.step["fired"]
            if self.uses is None:
                self.uses = list(fired)
            elif overlap and fired != self.uses:
                changed = [name for (name, _), a, b in zip(self.task.parameters(), fired, self.uses)
                           if a != b]
                raise RuntimeError("TorchTask: backward accumulated " + ", ".join(changed) +
                                   " another number of times than in the first step (the graph "
                                   "changed); use TorchTask(..., overlap=False)")
            for i in range(k):
                self._report(i)
        finally:
            self.step = None
        return (float(loss), end - first)
