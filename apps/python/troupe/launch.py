"""troupe.run: a Python script as a Troupe binary (run_app in C++, troupe/app.hpp)."""
import os
import sys

from . import _native
from .options import Flag, as_flag, defaults_of, typed
from .task_protocol import check_task

# The flags every Python task has, beside Troupe's own.
_TORCH_FLAGS = [
    Flag("torch-threads", int, 0, "intra-op threads of each trainer (0: this machine's cores "
         "/ the trainers in this process)", "N"),
    Flag("loader-workers", int, 0,
         "DataLoader worker processes per trainer reading a map-style training set (0: none)",
         "N"),
    Flag("device", str, "cpu", "where the model computes: cpu, or cuda (cuda:N)", "DEV"),
]


def _device(values):
    """--device as a torch.device; ValueError for one this process cannot use."""
    import torch
    name = values.get("device") or "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device {name}: not cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: this process has no usable GPU (torch sees none)")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"--device {name}: this process sees {torch.cuda.device_count()} GPUs")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"--device {name}: only cpu and cuda are supported")
    return device


def _torch_threads(values):
    """The --torch-threads each trainer of this process gets."""
    if values["torch-threads"] > 0:
        return values["torch-threads"]
    trainers = max(1, int(values.get("trainers_here", "1") or 1))
    return max(1, (os.cpu_count() or 1) // trainers)


def run(task, argv=None, *, flags=(), prog=None, **options):
    """Runs a Troupe job (or one role of it) for `task`; returns the process exit code.

    task:    a TorchTask (or any troupe.TaskProtocol), or a callable that gets the flags'
             values (troupe.Flags: flags["train-limit"] or flags.train_limit, typed) and
             returns one.
    argv:    the command line after the program's name (default: sys.argv[1:]); every flag of
             troupe-fmnist works (--role, --mode, --workers, ...), and TROUPE_* variables too.
    flags:   the script's own flags, troupe.Flag("train-limit", int, 0, "help").
    prog:    the program's name in --help and in messages (default: the script's file name).
    options: the script's values for flags, named as the flags with _ for -: mode="dp",
             workers=2, checkpoint_dir="ckpt", train_limit=100. The command line and TROUPE_*
             variables still override them. An unknown name raises TypeError, and a value its
             flag refuses ValueError, before anything starts.
    """
    import torch

    if hasattr(task, "make_replica") or not callable(task):
        check_task(task)
    declared = [as_flag(f) for f in flags] + _TORCH_FLAGS
    defaults = defaults_of(options, declared)
    args = list(sys.argv[1:] if argv is None else argv)
    program = prog or os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "troupe")

    def build(values):
        values = typed(values, declared)
        torch.set_num_threads(_torch_threads(values))
        built = check_task(task if hasattr(task, "make_replica") else task(values))
        if getattr(built, "loader_workers", 0) is None:
            built.loader_workers = values["loader-workers"]
        if hasattr(built, "device") and built.device is None:
            built.device = _device(values)
        return built

    return _native.run(build, [program, *args], program, [f.row() for f in declared],
                       defaults)
