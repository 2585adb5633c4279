"""What Troupe calls on a task (troupe/task.hpp's training_task, seen from Python): a
typing.Protocol that troupe.TorchTask satisfies and that type checkers read. A task of one's
own implements it (docs/python.md, "A task of your own"); troupe.run checks it at start.

Buffers (`out`, `params`, `grad`) are float32 memoryviews of Troupe's flat vector, in the
order of parameters(); `ready(i)`, when not None, says that tensor i's gradient is final."""
from typing import Any, Callable, Optional, Protocol, Sequence, Tuple, runtime_checkable


@runtime_checkable
class ReplicaProtocol(Protocol):
    """One trainer's copy of the model (make_replica), used by one thread at a time."""

    def gradient_range(self, params: memoryview, epoch: int, first: int, count: int,
                       grad: memoryview, ready: Optional[Callable[[int], None]],
                       rows: Optional[Sequence[Any]] = None) -> Tuple[float, int]:
        """The mean gradient of examples first .. first + count - 1 of `epoch`'s order into
        `grad`; returns (mean loss, examples used). A replica may also have
        gradient_range_streamed(params, epoch, first, count, put, rows=None), which hands each
        tensor's gradient to put(i, values) (a 1-D float32 buffer, copied at once) instead
        (--zero-stage 2: no whole gradient is held; TorchTask's replicas have it)."""

    def rows_of_range(self, epoch: int, first: int, count: int) -> Sequence[Any]:
        """Per table, the sorted unique int64 ids the range reads (a model with tables)."""


@runtime_checkable
class TaskProtocol(Protocol):
    """A model, its data and its evaluation, as troupe.run trains it."""

    def parameters(self) -> Sequence[tuple]:
        """(name, shape) of each tensor of the flat vector, in order; (name, shape, "buffer")
        for one that no gradient updates."""

    def initialize(self, seed: int, out: memoryview) -> None:
        """The initial values drawn from `seed` into `out` (every process the same)."""

    def batches_per_epoch(self, batch: int) -> int:
        """How many batches of `batch` examples an epoch has."""

    def make_replica(self, batch: int, seed: int) -> ReplicaProtocol:
        """A trainer's copy of the model."""

    def evaluate(self, params: memoryview,
                 rows: Optional[Sequence[Any]] = None) -> Tuple[float, float]:
        """(accuracy, mean loss) on the held-out set with `params` (and the tables' rows)."""


def check_task(task):
    """TypeError naming what `task` lacks of TaskProtocol (tables() is optional: a model with
    troupe.Tables has it, and evaluation_rows() with it)."""
    missing = [name for name in ("parameters", "initialize", "batches_per_epoch",
                                 "make_replica", "evaluate")
               if not callable(getattr(task, name, None))]
    if hasattr(task, "tables") and not callable(getattr(task, "evaluation_rows", None)):
        missing.append("evaluation_rows (a task with tables())")
    if missing:
        raise TypeError(f"{type(task).__name__} is not a troupe task (troupe.TaskProtocol): "
                        f"it has no {', '.join(missing)}")
    return task
