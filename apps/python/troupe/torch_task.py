"""TorchTask: a PyTorch model, its data, a loss and an evaluation as a Troupe training task.

Troupe's C++ side (apps/python/native/python_task.cpp) calls these methods from its
trainers' threads, holding the GIL; the model's state and gradients cross as flat float32
buffers: the model's buffers (named_buffers(): BatchNorm's running statistics) first, then
named_parameters(), in order (docs/python.md says how a TorchTask maps onto troupe/task.hpp).
"""
import math
import threading

import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset
from torch.utils.data._utils.collate import default_collate

from ._hooks import on_accumulated
from .table import tables_of


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
    """The examples `indices` of `dataset`, collated into a batch: a tuple whose last item is
    the targets and whose others are the model's inputs, in order."""
    if isinstance(dataset, TensorDataset):
        return tuple(t[indices] for t in dataset.tensors)
    return tuple(default_collate([dataset[int(i)] for i in indices]))


def _floats(buffer):
    """A float32 tensor over a buffer (Troupe's memory; empty buffers included)."""
    return torch.frombuffer(buffer, dtype=torch.float32) if len(buffer) else torch.empty(0)


def _ids(buffer):
    """An int64 tensor over a buffer of 64-bit ids."""
    return torch.frombuffer(buffer, dtype=torch.int64) if len(buffer) else torch.empty(
        0, dtype=torch.int64)


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
    train:      the training set: a map-style dataset of examples (x..., target), or a
                TensorDataset (read by index, fastest). The model is called as model(x...).
    test:       the held-out set, the same way.
    loss:       loss(output, target) -> the batch's mean loss (default: cross entropy).
    correct:    correct(output, target) -> how many predictions are right (default: arg max).
    eval_batch: examples per forward pass of the evaluation.
    ids:        for a model with troupe.Tables: ids(x...) -> {table name: ids tensor}, the rows
                each table reads for a batch (any shape; Troupe pulls them before the forward
                pass and pushes their gradients after backward). Every table must be named.
    loader_workers: DataLoader worker processes per trainer that read a map-style training set
                (None: --loader-workers, 0 by default: read in the trainer). A TensorDataset
                is always read by index in the trainer.
    device:     where the model computes: "cpu" or "cuda" (None: --device, cpu by default);
                Troupe's parameters and gradients stay on the host, copied at each step.
    overlap:    tell Troupe each parameter's gradient as soon as backward has accumulated it,
                so that data-parallel jobs reduce it while backward goes on. The first step
                counts how many times backward accumulates each parameter; a model whose
                graph changes from step to step needs overlap=False.
    """

    def __init__(self, model, train, test, loss=F.cross_entropy, correct=_correct,
                 eval_batch=1000, overlap=True, loader_workers=None, ids=None, device=None):
        self.model = model
        self.train = train
        self.test = test
        self.loss = loss
        self.correct = correct
        self.eval_batch = eval_batch
        self.overlap = overlap
        self.loader_workers = loader_workers
        self.ids = ids
        self.device = device
        probe = _build(model, 0)
        _check_model(probe)
        self._specs = [(n, tuple(b.shape), "buffer") for n, b in probe.named_buffers()]
        self._specs += [(n, tuple(p.shape)) for n, p in probe.named_parameters()]
        self._tables = [t.spec() for t in tables_of(probe)]
        with torch.no_grad():
            for p in probe.parameters():  # the evaluator loads its values: hold none meanwhile
                p.data = _unbacked(p)
        if self._tables and ids is None:
            raise ValueError("TorchTask: the model has troupe.Tables; give ids=, the rows each "
                             "batch reads per table")
        # The evaluation's model, built now (not beside trainers that draw random numbers) and
        # moved to the device at the first evaluation (when --device is known).
        self._probe, self._evaluator = probe, None
        self._evaluating = threading.Lock()  # one evaluation at a time: one evaluator model
        self._evaluation_rows = None
        if len(train) == 0:
            raise ValueError("TorchTask: the training set is empty")

    # -- the task protocol (troupe/task.hpp's training_task) -------------------------------

    def parameters(self):
        """(name, shape, "buffer") of each of the model's buffers, then (name, shape) of each
        parameter: the flat vector's tensors, in order."""
        return self._specs

    def tables(self):
        """(name, dim, init_scale, capacity) of each troupe.Table, in modules() order."""
        return self._tables

    def initialize(self, seed, out):
        """The initial parameters the model's constructor draws from `seed`, into `out`."""
        model = _build(self.model, seed)
        flat = torch.frombuffer(out, dtype=torch.float32)
        state = [*model.buffers(), *model.parameters()]
        with torch.no_grad():
            torch.cat([t.detach().reshape(-1).float() for t in state], out=flat)

    def batches_per_epoch(self, batch):
        return math.ceil(len(self.train) / batch)

    def make_replica(self, batch, seed):
        return _Replica(self, batch, seed)

    def rows_read(self, inputs):
        """The sorted unique ids each table reads for a batch's inputs (int64 tensors)."""
        if not self._tables:
            return []
        named = self.ids(*inputs)
        if not isinstance(named, dict):
            raise TypeError("TorchTask: ids() must return a dict {table name: ids}, not "
                            f"{type(named).__name__}")
        out = []
        for name, *_ in self._tables:
            if name not in named:
                raise KeyError(f"TorchTask: ids() named no ids for table '{name}'")
            ids = torch.as_tensor(named[name])
            if ids.dtype.is_floating_point or ids.dtype == torch.bool:
                raise TypeError(f"TorchTask: table '{name}': ids must be integers, not "
                                f"{ids.dtype}")
            ids = torch.unique(ids.reshape(-1).to(torch.int64))  # sorted
            if len(ids) and int(ids[0]) < 0:
                raise ValueError(f"TorchTask: table '{name}': id {int(ids[0])} is negative")
            out.append(ids)
        unknown = set(named) - {name for name, *_ in self._tables}
        if unknown:
            raise KeyError(f"TorchTask: ids() named tables the model does not have: {unknown}")
        return out

    def evaluation_rows(self):
        """The rows the evaluation reads, per table (sorted unique int64 arrays)."""
        if self._evaluation_rows is None:
            per_table = [[] for _ in self._tables]
            for start in range(0, len(self.test), self.eval_batch):
                indices = torch.arange(start, min(start + self.eval_batch, len(self.test)))
                for table, ids in enumerate(self.rows_read(_examples(self.test, indices)[:-1])):
                    per_table[table].append(ids)
            self._evaluation_rows = [torch.unique(torch.cat(ids)) if ids else
                                     torch.empty(0, dtype=torch.int64) for ids in per_table]
        return [ids.numpy() for ids in self._evaluation_rows]

    def evaluate(self, params, rows=None):
        """(accuracy, mean loss) on the test set with the parameters `params` (and, for a
        model with tables, `rows`: (ids, values) per table)."""
        with self._evaluating:
            return self._evaluate(params, rows)

    def _evaluate(self, params, rows):
        if self._evaluator is None:
            self._evaluator = _Model(self._probe, self.device)
        model = self._evaluator
        model.load(torch.frombuffer(params, dtype=torch.float32))
        model.hold(rows or [], grad=False)
        model.module.eval()
        right, loss_sum, n = 0, 0.0, len(self.test)
        try:
            with torch.no_grad():
                for start in range(0, n, self.eval_batch):
                    indices = torch.arange(start, min(start + self.eval_batch, n))
                    *inputs, targets = model.to_device(_examples(self.test, indices))
                    output = model.module(*inputs)
                    right += self.correct(output, targets)
                    loss_sum += float(self.loss(output, targets)) * len(indices)
        finally:
            model.module.train()
            model.release()
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
    for name, b in module.named_buffers():
        if b.is_complex():
            raise TypeError(f"TorchTask: buffer '{name}' is {b.dtype}; Troupe keeps buffers as "
                            "float32")


class _Model:
    """A module as Troupe computes with it. On the CPU its parameters are views of Troupe's
    parameter buffer and their .grad views of Troupe's gradient buffer (bind_grads), so a
    member holds each value once, as under DDP; on another device they are views of one flat
    tensor there, loaded with one copy. Buffers (BatchNorm's running statistics, which the
    forward pass updates in place) are the module's own, copied in at each load. Its
    troupe.Tables read the rows Troupe pulled (hold)."""

    def __init__(self, module, device=None):
        self.device = torch.device(device or "cpu")
        self.viewed = self.device.type == "cpu"
        self.module = module.to(self.device)
        self.params = list(module.parameters())
        self.first_param = len(list(module.buffers()))  # tensors: the buffers, then these
        self.tensors = [*module.buffers(), *self.params]
        self.sizes = [t.numel() for t in self.tensors]
        self.offsets = [0]
        for n in self.sizes:
            self.offsets.append(self.offsets[-1] + n)
        own = self.offsets[self.first_param] if self.viewed else self.offsets[-1]
        self.flat = torch.zeros(own, device=self.device)  # the buffers (and, off the CPU, all)
        self.copied = []  # buffers that are not float32 (a step count): copied in at each load
        self.bound = None  # the address of the Troupe buffer the parameters view
        with torch.no_grad():
            for i, t in enumerate(self.tensors):
                if self.viewed and i >= self.first_param:
                    t.data = _unbacked(t)  # no memory until load() binds it
                    continue
                view = self.flat[self.offsets[i]:self.offsets[i + 1]].view_as(t)
                if t.dtype == torch.float32:
                    t.data = view
                else:
                    self.copied.append((t, view))
        self.tables = tables_of(module)

    def load(self, values):
        """The buffers and parameters from `values` (a float32 tensor over Troupe's buffer, which
        must not change while the module computes with it)."""
        with torch.no_grad():
            if not self.viewed:
                self.flat.copy_(values)
            else:
                self.flat.copy_(values[:len(self.flat)])
                if self.bound != values.data_ptr():
                    for t, at, n in self._parameter_ranges():
                        t.data = values[at:at + n].view_as(t)
                    self.bound = values.data_ptr()
            for t, view in self.copied:
                t.copy_(view)

    def bind_grads(self, grad):
        """On the CPU, each parameter's .grad a view of `grad` (zeroed), where backward
        accumulates in place; elsewhere no .grad (backward makes them on the device)."""
        for p in self.params:
            p.grad = None
        if not self.viewed:
            return
        grad[self.offsets[self.first_param]:].zero_()
        for t, at, n in self._parameter_ranges():
            t.grad = grad[at:at + n].view_as(t)

    def has_grad_in(self, t, target):
        """Whether tensor t's .grad is `target` itself (backward wrote it there)."""
        return t.grad is not None and t.grad.data_ptr() == target.data_ptr()

    def _parameter_ranges(self):
        for i in range(self.first_param, len(self.tensors)):
            yield self.tensors[i], self.offsets[i], self.sizes[i]

    def to_device(self, tensors):
        return tuple(t.to(self.device) for t in tensors)

    def hold(self, rows, grad):
        """Gives each table its rows: rows[t] = (ids, values, ...) buffers from Troupe. With
        `grad`, the values are leaves whose .grad backward fills; returns them."""
        if len(rows) != len(self.tables):
            raise ValueError(f"TorchTask: rows for {len(rows)} tables, the model has "
                             f"{len(self.tables)}")
        leaves = []
        for table, (ids, values, *_) in zip(self.tables, rows):
            ids = _ids(ids).to(self.device)
            values = _floats(values).view(len(ids), table.dim).to(self.device)
            if grad:
                values.requires_grad_(True)
            table.hold(ids, values)
            leaves.append(values)
        return leaves

    def release(self):
        for table in self.tables:
            table.release()


def _unbacked(t):
    """A tensor of t's shape and type that holds no memory (one value, broadcast)."""
    return torch.zeros((), dtype=t.dtype, device=t.device).expand(t.shape)


class _Replica:
    """One trainer's model: computes the gradient of any range of any epoch's examples."""

    def __init__(self, task, batch, seed):
        self.task = task
        self.batch = batch
        self.seed = seed
        self.model = _Model(_build(task.model, seed), task.device)
        self.order_epoch, self.order = None, None
        workers = task.loader_workers or 0
        self.loader = None
        if workers > 0 and not isinstance(task.train, TensorDataset):
            self.loader = _Loader(task.train, workers)
        self.read = None  # the last range read: ((epoch, first, count), examples, rows)
        self.uses = None  # how many times backward accumulates each parameter (first step)
        # Each parameter's gradient accumulator: its hook tells Troupe the gradient is final.
        first = self.model.first_param
        self.accumulators = on_accumulated(self.model.params,
                                           lambda i: self._accumulated(first + i))
        self.step = None

    def _epoch_order(self, epoch):
        """Epoch `epoch`'s order of the training examples, the same in every process."""
        if self.order_epoch != epoch:
            g = torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) % (1 << 63))
            self.order = torch.randperm(len(self.task.train), generator=g)
            self.order_epoch = epoch
        return self.order

    def _examples(self, epoch, first, count):
        """Examples first .. first + count - 1 of epoch `epoch` (cut at its end), and the rows
        they read per table; the last range is kept, as a step asks its rows first."""
        key = (epoch, first, count)
        if self.read is not None and self.read[0] == key:
            return self.read[1], self.read[2]
        end = min(first + count, len(self.task.train))
        if first >= end:
            return None, []
        indices = self._epoch_order(epoch)[first:end]
        if self.loader is not None:
            examples = self.loader.fetch(indices)
        else:
            examples = _examples(self.task.train, indices)
        rows = self.task.rows_read(examples[:-1]) if self.model.tables else []
        self.read = (key, examples, rows)
        return examples, rows

    def _accumulated(self, i):
        """Tensor i's gradient was accumulated once more in this step's backward."""
        step = self.step
        if step is None:
            return
        step["fired"][i] += 1
        if step["overlap"] and step["fired"][i] == self.uses[i]:
            self._report(i)

    def _report(self, i):
        """Tensor i's gradient (a buffer's value after the forward pass) into Troupe's buffer,
        and Troupe told that it is final."""
        step = self.step
        if step["told"][i]:
            return
        step["told"][i] = True
        t = self.model.tensors[i]
        if step["put"] is not None:
            return self._put(i, t, step["put"])
        at, n = self.model.offsets[i], self.model.sizes[i]
        target = step["grad"][at:at + n]
        if i < self.model.first_param:
            target.copy_(t.detach().reshape(-1))
        elif t.grad is None:
            target.zero_()
        elif not self.model.has_grad_in(t, target):
            target.copy_(t.grad.reshape(-1))
        if step["ready"] is not None:
            step["ready"](i)

    def _put(self, i, t, put):
        """Tensor i's gradient (a buffer's value) handed to Troupe, which copies it; a
        parameter's .grad is freed then (as FSDP's hooks do). A parameter backward did not
        reach is not put (Troupe counts it as zeros)."""
        if i < self.model.first_param:
            values = t.detach()
        elif t.grad is None:
            return
        else:
            values = t.grad.detach()
        put(i, values.reshape(-1).to("cpu", torch.float32).contiguous().numpy())
        if i >= self.model.first_param:
            t.grad = None

    def rows_of_range(self, epoch, first, count):
        """The ids each table reads for examples first .. first + count - 1 of `epoch`."""
        _, rows = self._examples(epoch, first, count)
        if not rows:
            rows = [torch.empty(0, dtype=torch.int64) for _ in self.model.tables]
        return [ids.numpy() for ids in rows]

    def gradient_range(self, params, epoch, first, count, grad, ready, rows=None):
        """The mean gradient of examples first .. first + count - 1 of epoch `epoch`'s order
        into `grad`; returns (mean loss, examples used). A model with tables gets `rows`:
        (ids, values, grads) buffers per table, the rows rows_of_range named, and adds their
        gradients into grads."""
        return self._range(params, epoch, first, count, torch.frombuffer(grad, dtype=torch.float32),
                           ready, None, rows)

    def gradient_range_streamed(self, params, epoch, first, count, put, rows=None):
        """As gradient_range (--zero-stage 2), without Troupe's gradient buffer: each tensor's
        gradient goes to put(i, values) as backward finishes it, and its .grad is freed, so the
        replica holds a few tensors' gradients at once, not the model's (from its second step:
        the first counts the accumulations, and puts after backward)."""
        return self._range(params, epoch, first, count, None, None, put, rows)

    def _range(self, params, epoch, first, count, grad, ready, put, rows):
        if self.model.tables and rows is None:
            raise RuntimeError("TorchTask: this model has troupe.Tables: it runs in --mode ps "
                               "or --mode hybrid, not --mode dp")
        examples, _ = self._examples(epoch, first, count)
        if examples is None:
            if grad is not None:
                grad.zero_()
            return (0.0, 0)
        *inputs, targets = self.model.to_device(examples)
        self.model.load(torch.frombuffer(params, dtype=torch.float32))
        leaves = self.model.hold(rows or [], grad=True)
        if grad is not None:
            self.model.bind_grads(grad)
        else:
            for p in self.model.params:
                p.grad = None
        try:
            loss = self._backward(inputs, targets, grad, ready, put)
        finally:
            self.model.release()
            for p in self.model.params:  # no view of Troupe's buffer outlives the call
                p.grad = None
        for (_, _, grads), values in zip(rows or [], leaves):
            if values.grad is not None:
                _floats(grads).add_(values.grad.reshape(-1).cpu())
        return (float(loss), len(targets))

    def _backward(self, inputs, targets, grad, ready, put):
        """Forward and backward of one range, each parameter's gradient into `grad` (told to
        `ready` as it is final, once the first step has counted the accumulations), or to
        `put`."""
        k = len(self.model.tensors)
        final = ready if put is None else put
        overlap = self.task.overlap and final is not None and self.uses is not None
        self.step = {"fired": [0] * k, "told": [False] * k, "grad": grad, "ready": ready,
                     "put": put, "overlap": overlap}
        try:
            loss = self.task.loss(self.model.module(*inputs), targets)
            loss.backward()
            fired = self.step["fired"]
            if self.uses is None:
                self.uses = list(fired)
            elif overlap and fired != self.uses:
                changed = [spec[0] for spec, a, b in zip(self.task.parameters(), fired, self.uses)
                           if a != b]
                raise RuntimeError("TorchTask: backward accumulated " + ", ".join(changed) +
                                   " another number of times than in the first step (the graph "
                                   "changed); use TorchTask(..., overlap=False)")
            for i in range(k):
                self._report(i)
        finally:
            self.step = None
        return loss
