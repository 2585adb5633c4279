"""Troupe for PyTorch users: train a torch model on Troupe's parameter service or its
data-parallel groups, with every flag, role and fault path of the Troupe binaries.

    import troupe
    task = troupe.TorchTask(Net, train_set, test_set)
    # embeddings on the parameter service: troupe.Table(name, dim) in Net, and
    # TorchTask(..., ids=lambda x, ids: {name: ids}); --mode ps or --mode hybrid
    raise SystemExit(troupe.run(task, mode="dp", workers=2))  # the command line overrides

    # or a loop of one's own on the parameter service:
    client = troupe.ParameterClient("HOST:PORT", client=1)   # troupe.ParameterService serves
    client.pull(model); loss.backward(); client.push(model)

    # or a data-parallel loop of one's own, elastic (troupe.elastic says how):
    optimizer = troupe.DistributedOptimizer(torch.optim.SGD(...), model.named_parameters())

See docs/python.md.
"""
from . import elastic, optim
from .distributed import DistributedOptimizer
from .launch import run
from .options import Flag, Flags
from .parameters import ParameterClient, ParameterService
from .table import Table
from .task_protocol import ReplicaProtocol, TaskProtocol
from .torch_task import TorchTask

__all__ = ["DistributedOptimizer", "Flag", "Flags", "ParameterClient", "ParameterService",
           "ReplicaProtocol", "Table", "TaskProtocol", "TorchTask", "elastic", "run"]
