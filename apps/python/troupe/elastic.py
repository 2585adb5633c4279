"""Elastic data parallelism for a loop of one's own (Horovod Elastic's shape, on Troupe's loop
groups): processes join a group, which forms a generation (ranks, size) whenever membership
changes; a step cut short by a change is discarded everywhere, and the loop goes on from the
last committed state, which the members first agree on.

    group = troupe.elastic.GroupService(listen="127.0.0.1:7800", min_size=2)   # one process
    troupe.elastic.init("127.0.0.1:7800")                                        # every loop
    optimizer = troupe.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                            model.named_parameters())
    state = troupe.elastic.State(model, optimizer, epoch=0, position=0)
    sampler = troupe.elastic.ElasticSampler(len(data), batch=32)

    @troupe.elastic.run
    def train(state):
        while state.epoch < epochs:
            x, y = data[sampler.indices(state)]
            optimizer.zero_grad(); loss_fn(model(x), y).backward()
            optimizer.step()            # MembershipChanged if the group re-formed meanwhile
            sampler.advance(state)      # the next step's examples
            state.commit()              # what a re-formed group goes on from
    train(state)

Every wait has a bound (TimeoutError past it); Ctrl-C raises KeyboardInterrupt.
"""
import copy
import functools
import io
import os
import socket

import torch

from . import _native
from . import parameters as _parameters  # noqa: F401  (the runtime's atexit hook)

_member = None  # this process's membership (init)
_current = (0, 0, 1)  # (generation, rank, size) the loop works in


class MembershipChanged(RuntimeError):
    """The group re-formed (a member joined, left or was lost) during this step: its
    collectives were discarded on every member. troupe.elastic.run restores the last commit."""


class GroupService:
    """The coordinator of a loop group, served from this process (a driver, as horovodrun's).

    listen:     HOST:PORT (port 0: a free one; see `address`), with `secret` (default:
                TROUPE_SECRET): members prove it to join.
    min_size:   members before the first generation forms; after that the group goes on with
                whoever is left.
    collective: "gloo" (TCP) or "actors" (Troupe's own connections).
    timeout:    the bound of each collective and of forming a generation (seconds).
    settle:     how long a failed collective waits for a loss to explain it (seconds).
    """

    def __init__(self, *, listen, min_size=1, secret=None, name="group", collective="gloo",
                 timeout=30.0, settle=1.0):
        self._native = _native.GroupService(listen, secret or os.environ.get("TROUPE_SECRET", ""),
                                            name, int(min_size), collective, float(timeout),
                                            float(settle))

    @property
    def address(self):
        return self._native.address

    def stop(self):
        self._native.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def init(address, *, secret=None, group="group", name=None, host=None, bind="127.0.0.1",
         timeout=30.0):
    """Joins the loop group served at `address` (this process's one membership). `bind` is
    where the other members' collectives reach this one; `host` the host it counts as."""
    global _member
    if _member is not None:
        raise RuntimeError("troupe.elastic.init: this process has joined a group already")
    name = name or f"{socket.gethostname()}-{os.getpid()}"
    _member = _native.LoopMember.join(address, secret or os.environ.get("TROUPE_SECRET", ""),
                                      group, name, host or socket.gethostname(), bind,
                                      float(timeout))


def shutdown():
    """Leaves the group (the others form a generation without this process)."""
    global _member
    if _member is not None:
        _member.leave()
        _member = None


def member():
    if _member is None:
        raise RuntimeError("call troupe.elastic.init(address) first")
    return _member


def rank():
    return _current[1]


def size():
    return _current[2]


def generation():
    return _current[0]


def _wait_generation(after, timeout):
    global _current
    _current = member().generation(after, timeout)
    return _current


class State:
    """What a loop goes on from after the group re-forms: the model's and the optimizer's state
    and any counters given as keywords (epoch=0, position=0), read and written as attributes.
    commit() keeps a copy; restore() goes back to it; the members agree on the one with the most
    commits before each (re)start of the loop (troupe.elastic.run)."""

    def __init__(self, model=None, optimizer=None, **values):
        object.__setattr__(self, "_objects", {"model": model, "optimizer": optimizer})
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "commits", 0)
        object.__setattr__(self, "_committed", None)
        self.commit()
        object.__setattr__(self, "commits", 0)

    def __getattr__(self, key):
        values = object.__getattribute__(self, "_values")
        if key in values:
            return values[key]
        if key in ("rank", "size", "generation"):
            return {"generation": _current[0], "rank": _current[1], "size": _current[2]}[key]
        raise AttributeError(key)

    def __setattr__(self, key, value):
        if key in self._values:
            self._values[key] = value
        else:
            object.__setattr__(self, key, value)

    def _snapshot(self):
        out = {"values": copy.deepcopy(self._values)}
        for key, obj in self._objects.items():
            if obj is not None:
                out[key] = copy.deepcopy(obj.state_dict())
        return out

    def commit(self):
        """The state as it is now is what the group goes on from if it re-forms."""
        object.__setattr__(self, "_committed", self._snapshot())
        object.__setattr__(self, "commits", self.commits + 1)

    def restore(self):
        """Back to the last commit."""
        self._load(self._committed)

    def _load(self, snapshot, own=True):
        """Takes `snapshot`; one of another member's (own=False) leaves out a sharded
        optimizer's state, which is its shard, not this member's."""
        self._values.clear()
        self._values.update(copy.deepcopy(snapshot["values"]))
        for key, obj in self._objects.items():
            if obj is None or key not in snapshot:
                continue
            if own or not getattr(obj, "zero_stage", 0):
                obj.load_state_dict(snapshot[key])
        object.__setattr__(self, "_committed", snapshot)

    def sync(self, timeout=None):
        """Every member of the current generation goes on from the commit of the member with
        the most commits (its bytes go, in pieces, to the members that are behind it)."""
        buffer = io.BytesIO()
        torch.save(self._committed, buffer)
        try:
            steps, source, state = member().sync(generation(), self.commits, buffer.getvalue(),
                                                 float(timeout or 300))
        except RuntimeError as e:  # the group re-formed again meanwhile
            raise MembershipChanged(str(e)) from None
        if state is not None:  # this member was behind: it takes the source's commit
            self._load(torch.load(io.BytesIO(state), weights_only=False), own=False)
            object.__setattr__(self, "commits", steps)
        else:
            self.restore()
        # A sharded optimizer cuts its shards anew (a member that took the source's commit
        # holds no shard of it).
        optimizer = self._objects.get("optimizer")
        if optimizer is not None and hasattr(optimizer, "_after_sync"):
            mine = self._committed.get("optimizer") if state is None else None
            optimizer._after_sync(mine, self.commits)


def run(fn, state=None, *args, **kwargs):
    """Runs fn(state, ...) in the current generation of the group, after the members agree on
    a state; when the group re-forms (MembershipChanged), restores the last commit, waits for
    the new generation and runs fn again from there. As a decorator, `run(fn)` returns the
    function that does this; `run(fn, state, ...)` does it at once. Returns what fn returns."""

    @functools.wraps(fn)
    def wrapper(state, *args, **kwargs):
        after = 0
        while True:
            _wait_generation(after, 300.0)
            after = generation()
            try:
                state.sync()
                return fn(state, *args, **kwargs)
            except MembershipChanged:
                state.restore()

    return wrapper if state is None else wrapper(state, *args, **kwargs)


class ElasticSampler:
    """Which of an epoch's examples this member computes in each step, so that every example is
    used once per epoch however the group re-forms: the state's `position` (examples of this
    epoch the committed steps used) advances by size x batch per step; member r takes its
    batch at position + r x batch of the epoch's order (the same permutation everywhere).
    The state needs `epoch` and `position`."""

    def __init__(self, examples, batch, seed=0, shuffle=True):
        self.examples, self.batch, self.seed, self.shuffle = int(examples), int(batch), seed, shuffle
        self._order = (None, None)

    def order(self, epoch):
        if self._order[0] != epoch:
            if self.shuffle:
                g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
                self._order = (epoch, torch.randperm(self.examples, generator=g))
            else:
                self._order = (epoch, torch.arange(self.examples))
        return self._order[1]

    def indices(self, state):
        """This member's examples in the step at the state's position (may be empty at the end
        of an epoch: the member still takes part in the step, with no gradient)."""
        start = min(state.position + rank() * self.batch, self.examples)
        end = min(start + self.batch, self.examples)
        return self.order(state.epoch)[start:end]

    def advance(self, state):
        """The position after this step; the next epoch once every example was used."""
        state.position += size() * self.batch
        if state.position >= self.examples:
            state.epoch += 1
            state.position = 0
