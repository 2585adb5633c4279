"""A parameter service for a training loop of one's own (ps-lite's KVWorker, the design's
WorkerNode): the model's parameters live in Troupe's parameter buckets, which apply each push
as it arrives with the service's optimizer and stamp values with vector clocks.

    service = troupe.ParameterService(model, clients=2, optimizer="sgd", lr=0.05,
                                      listen="127.0.0.1:7700", secret=SECRET)
    client = service.client(0)          # or, in another process:
    client = troupe.ParameterClient("127.0.0.1:7700", client=1, secret=SECRET)
    for x, y in loader:
        client.pull(model)               # the service's values into the model
        loss_fn(model(x), y).backward()
        staleness = client.push(model)   # the model's .grad; updates others made since the pull
        model.zero_grad()

Every call blocks the calling thread only (the GIL is released while it waits; Ctrl-C raises
KeyboardInterrupt) and has a bound: TimeoutError past it. Bad input raises before anything is
sent: ValueError for tensors of other names or shapes, and for NaN or Inf in a gradient.
"""
import atexit
import os
import time

import numpy as np

from . import _native

atexit.register(_native.stop_runtime)


def _named(tensors):
    """(name, tensor) pairs of a module (its parameters), a dict, or an iterable of pairs."""
    if hasattr(tensors, "named_parameters"):
        return list(tensors.named_parameters())
    if isinstance(tensors, dict):
        return list(tensors.items())
    return list(tensors)


def _flags(options):
    """Troupe's flags (--lr 0.05) of keyword options (lr=0.05); None leaves a flag out."""
    out = []
    for key, value in options.items():
        if value is None:
            continue
        out += [f"--{key.replace('_', '-')}", str(value)]
    return out


class ParameterClient:
    """One client of a parameter service: pull() values into a model, push() its gradients.

    address: HOST:PORT of the app node serving the service (ParameterService(listen=...)).
    client:  this client's id, below the service's `clients`. One id is one loop: its pushes
             are the clock that ssp and bsp gate its pulls by.
    secret:  the cluster secret (default: TROUPE_SECRET).
    """

    def __init__(self, address, *, client, secret=None, service="params", timeout=30.0):
        self._native = _native.ParameterClient.connect(
            address, int(client), secret or os.environ.get("TROUPE_SECRET", ""), service,
            float(timeout))
        self._init()

    @classmethod
    def _of(cls, native):
        self = cls.__new__(cls)
        self._native = native
        self._init()
        return self

    def _init(self):
        self._tensors = [(name, tuple(shape)) for name, shape in self._native.tensors]
        self._read = None

    @property
    def id(self):
        return self._native.id

    @property
    def pushes(self):
        """Pushes this client made (its clock)."""
        return self._native.pushes

    @property
    def routes(self):
        """How each bucket is reached: "in-process", "lane" (the serving node's data lane) or
        "caf" (empty before its first request)."""
        return list(self._native.routes)

    @property
    def tensors(self):
        """The service's tensors: (name, shape) in the order of a flat vector."""
        return list(self._tensors)

    def pull(self, into=None, timeout=None):
        """Pulls every bucket's values (ssp and bsp may hold it until slower clients catch up)
        and copies them into `into` (a module's parameters, a dict of tensors, or (name, tensor)
        pairs), when given. Returns the snapshot: `.values` (a flat float32 numpy array) and
        `.clocks` (each bucket's vector clock); a later push() is stamped with it."""
        snapshot = self._native.pull(timeout)
        self._read = snapshot
        if into is not None:
            self._scatter(snapshot.values, into)
        return snapshot

    def wait_for(self, pushes, timeout=300.0, into=None):
        """Pulls until every bucket has applied at least `pushes` pushes in all (its vector
        clock's sum: every client's pushes it applied) and returns that pull's snapshot, as
        pull() does (into `into`, when given). TimeoutError when `timeout` seconds pass first.
        The way a serving process learns that its clients' work has landed."""
        pushes, timeout = int(pushes), float(timeout)
        if pushes < 0 or not timeout > 0:
            raise ValueError(f"wait_for(pushes={pushes}, timeout={timeout}): pushes >= 0 and "
                             "a timeout > 0")
        deadline, pause = time.monotonic() + timeout, 0.01
        while True:
            left = deadline - time.monotonic()
            snapshot = self.pull(into, timeout=max(left, 0.001))
            applied = min((sum(clock) for clock in snapshot.clocks), default=0)
            if applied >= pushes:
                return snapshot
            if time.monotonic() + pause > deadline:
                raise TimeoutError(f"wait_for: {applied} of {pushes} pushes applied by every "
                                   f"bucket after {timeout:g} s")
            time.sleep(pause)
            pause = min(pause * 1.5, 0.25)

    def push(self, grads, read=None, batches=None, timeout=None):
        """Pushes gradients computed from the snapshot `read` (default: the last pull): a module
        (each parameter's .grad; none counts as zeros), a dict of tensors, (name, tensor) pairs,
        or a flat float32 array. `batches` = (epoch, first, count) names what they were computed
        from: a bucket applies a named batch once, whoever pushes it. Returns the staleness: the
        updates others applied since `read`, the most any bucket counted."""
        read = read or self._read
        if read is None:
            raise ValueError("push() before any pull(): a gradient is computed from values")
        flat = self._gather(grads)
        return self._native.push(flat, read, batches, timeout)

    def _check_names(self, pairs):
        names = [name for name, _ in pairs]
        wanted = [name for name, _ in self._tensors]
        if names != wanted:
            raise ValueError(f"tensors {names} do not match the service's {wanted}")
        for (name, t), (_, shape) in zip(pairs, self._tensors):
            if tuple(t.shape) != shape:
                raise ValueError(f"{name}: shape {tuple(t.shape)}, the service has {shape}")

    def _scatter(self, values, into):
        import torch
        pairs = _named(into)
        self._check_names(pairs)
        flat = torch.from_numpy(values)
        offset = 0
        with torch.no_grad():
            for _, t in pairs:
                n = t.numel()
                t.copy_(flat[offset:offset + n].view_as(t))
                offset += n

    def _gather(self, grads):
        if isinstance(grads, np.ndarray):
            return np.ascontiguousarray(grads, dtype=np.float32).reshape(-1)
        import torch
        if hasattr(grads, "named_parameters"):
            pairs = [(name, p.grad if p.grad is not None else torch.zeros_like(p))
                     for name, p in grads.named_parameters()]
        else:
            pairs = _named(grads)
        self._check_names(pairs)
        parts = [t.detach().reshape(-1).to(torch.float32).cpu() for _, t in pairs]
        return torch.cat(parts).numpy() if parts else np.zeros(0, np.float32)


class ParameterService:
    """A parameter service in this process for `tensors` (a module's parameters, a dict of
    tensors, or (name, tensor) pairs), starting from their values.

    clients: how many loops push (ids 0 .. clients - 1).
    optimizer, lr, momentum, weight_decay, consistency ("async", "ssp:N", "bsp"),
    compensation, buckets, request_timeout (seconds): as the flags of the Troupe binaries,
    with their defaults; `flags` takes any other flag ("--dash-block", "64", ...).
    listen:  HOST:PORT to serve it to clients in other processes (ParameterClient), with
             `secret` (default: TROUPE_SECRET); port 0 takes a free one (see `address`).
    servers: put the buckets on this many server nodes instead of this process: any Troupe
             binary run with `--role server --coordinator` at `listen` (a port of its own, so
             that they can be started first) and the secret. The constructor waits for them
             (TimeoutError past `--join-timeout`, default 30 s).
    replication: with servers, the copies of each bucket, each on its own server: when a
             server is lost, its buckets' backups take over and the clients go on.
    """

    def __init__(self, tensors, *, clients, optimizer=None, lr=None, momentum=None,
                 weight_decay=None, consistency=None, compensation=None, buckets=None,
                 request_timeout=None, listen=None, secret=None, name="params", flags=(),
                 servers=0, replication=1):
        import torch
        pairs = _named(tensors)
        if not pairs:
            raise ValueError("a parameter service needs tensors")
        names = [name for name, _ in pairs]
        shapes = [list(t.shape) for _, t in pairs]
        initial = torch.cat([t.detach().reshape(-1).to(torch.float32).cpu() for _, t in pairs])
        options = dict(optimizer=optimizer, lr=lr, momentum=momentum, weight_decay=weight_decay,
                       consistency=consistency, compensation=compensation, buckets=buckets,
                       request_timeout=request_timeout, listen=listen)
        args = _flags(options) + [str(f) for f in flags]
        if listen is not None:
            args += ["--secret", secret or os.environ.get("TROUPE_SECRET", "")]
        self._native = _native.ParameterService(names, shapes, initial.numpy(), int(clients),
                                                args, name, listen is not None, int(servers),
                                                int(replication))

    @property
    def address(self):
        """HOST:PORT where other processes reach it (empty when not served)."""
        return self._native.address

    def client(self, id):
        """The client of `id` in this process."""
        return ParameterClient._of(self._native.client(int(id)))

    def stop(self):
        """Stops serving and stops the buckets; clients then fail their requests."""
        self._native.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
