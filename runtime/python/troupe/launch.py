"""troupe.run: a Python script as a Troupe binary (run_app in C++, troupe/app.hpp)."""
import os
import sys

from . import _native

# The flags every Python task has, beside Troupe's own: (name, metavar, help, default, kind).
_TORCH_FLAGS = [
    ("torch-threads", "N",
     "intra-op threads of each trainer (0: this machine's cores / the trainers in this process)",
     "0", "whole"),
    ("loader-workers", "N",
     "DataLoader worker processes per trainer reading a map-style training set (0: none)",
     "0", "whole"),
    ("device", "DEV", "where the model computes: cpu, or cuda (cuda:N)", "cpu", "text"),
]


def _device(values):
    """--device as a torch.device; ValueError for one this process cannot use."""
    import torch
    name = values.get("device", "cpu") or "cpu"
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
    wanted = int(values.get("torch-threads", "0") or 0)
    if wanted > 0:
        return wanted
    trainers = max(1, int(values.get("trainers_here", "1") or 1))
    return max(1, (os.cpu_count() or 1) // trainers)


def run(task, argv=None, flags=(), name=None):
    """Runs a Troupe job (or one role of it) for `task`; returns the process exit code.

    task:  a TorchTask (or an object with its methods), or a callable that gets the flags'
           values (a dict of str, the script's own `flags` included) and returns one.
    argv:  the command line after the program name (default: sys.argv[1:]); every flag of
           troupe-fmnist works (--role, --mode, --workers, ...), and TROUPE_* variables too.
    flags: the script's own flags, as (name, metavar, help, default) or with a fifth field,
           "text" | "number" | "whole".
    """
    import torch

    args = list(sys.argv[1:] if argv is None else argv)
    program = name or os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "troupe")
    rows = [tuple(f) if len(f) == 5 else (*f, "text") for f in flags] + _TORCH_FLAGS

    def build(values):
        torch.set_num_threads(_torch_threads(values))
        built = task if hasattr(task, "make_replica") else task(values)
        if getattr(built, "loader_workers", 0) is None:
            built.loader_workers = int(values.get("loader-workers", "0") or 0)
        if hasattr(built, "device") and built.device is None:
            built.device = _device(values)
        return built

    return _native.run(build, [program, *args], program, rows)
