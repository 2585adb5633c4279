"""troupe.DistributedOptimizer: Horovod's DistributedOptimizer on Troupe's loop groups, for a
data-parallel loop of one's own (troupe.elastic says how processes join and re-form).

Gradients are bucketed in reverse parameter order (about the order backward finishes them)
and each bucket is summed over the group's members as soon as backward has accumulated every
gradient in it, while backward goes on; step() waits for the sums, averages them (divides by
the group's size) and steps the wrapped optimizer. A step whose summed gradient has NaN or Inf
is skipped by every member alike (they all see the same sum), with a warning. If the group
re-forms meanwhile, step() raises troupe.elastic.MembershipChanged: that step is discarded
everywhere (troupe.elastic.run restores the last commit).

With zero_stage=1 the wrapped optimizer's state is sharded as ZeroRedundancyOptimizer shards it
(troupe/zero.py): each member steps, and keeps state for, only the parameters it owns, and the
new values are gathered to every member after. zero_stage=2 also frees each .grad once its
bucket is sent and keeps, once summed, only the gradients of the parameters it owns.
"""
import warnings

import numpy as np
import torch

from . import elastic, zero
from ._hooks import on_accumulated


class DistributedOptimizer:
    """Wraps `optimizer` (any torch.optim.Optimizer) for the parameters `named_parameters`
    (model.named_parameters(): the same names and order in every member).

    bucket_mb:  the size of a gradient bucket (one collective each).
    timeout:    the bound of each step's wait for its sums, in seconds.
    zero_stage: 0, the wrapped optimizer's whole state on every member; 1, sharded over the
                members (each parameter's state on the member that owns it); 2, the gradients
                too (each .grad freed once sent; only the owned ones kept once summed).
    """

    def __init__(self, optimizer, named_parameters, *, bucket_mb=4.0, timeout=120.0,
                 zero_stage=0):
        if zero_stage not in (0, 1, 2):
            raise ValueError(f"DistributedOptimizer: zero_stage must be 0, 1 or 2, not "
                             f"{zero_stage!r}")
        self.zero_stage = zero_stage
        self._owners = (0, [])  # (size, each parameter's owner at that size)
        self.optimizer = optimizer
        pairs = [(n, p) for n, p in named_parameters if p.requires_grad]
        if not pairs:
            raise ValueError("DistributedOptimizer: no parameters that require gradients")
        self.names = [n for n, _ in pairs]
        self.params = [p for _, p in pairs]
        self.timeout = float(timeout)
        self.buckets = self._plan(bucket_mb)
        self.bucket_of = {}
        for b, members in enumerate(self.buckets):
            for i in members:
                self.bucket_of[i] = b
        # Backward's accumulations per parameter, learned in the first step that had any, and
        # per bucket the parameters that backward reaches (the others are sent at step()).
        self.uses = None
        self._needed = None
        self._hooks = on_accumulated(self.params, self._accumulated)
        self._reset()

    # -- torch.optim.Optimizer's face
    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def state_dict(self):
        """The wrapped optimizer's; with zero_stage 1 or 2 this member's shard of it (by
        parameter name, with the owners it was cut by)."""
        if self.zero_stage:
            return zero.shard_of(self)
        return self.optimizer.state_dict()

    def load_state_dict(self, state):
        if not self.zero_stage:
            return self.optimizer.load_state_dict(state)
        zero.load_shard(self, state)

    def _after_sync(self, mine, commits):
        """troupe.elastic.State, once the members agreed on a commit: with sharded state, the
        shards cut anew for this generation (`mine`: this member's shard of it, None when it
        took another member's commit)."""
        if self.zero_stage:
            zero.warn_lost(zero.reshard(self, mine, commits))

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)
        self._reset()

    # -- the step
    def synchronize(self):
        """Waits until every bucket is summed over the group (sending those backward has not
        finished, e.g. parameters it did not reach, with what they have); returns the
        averaged gradients into each parameter's .grad. MembershipChanged if the group
        re-formed."""
        for b in range(len(self.buckets)):
            if self._pending[b] is None:
                self._send(b)
        seconds = 0.0
        try:
            for b, pending in enumerate(self._pending):
                seconds += pending.wait(self.timeout)
        except RuntimeError as e:
            self._reset()
            raise elastic.MembershipChanged(str(e)) from None
        size = elastic.size()
        owned = self._owned()
        for b, members in enumerate(self.buckets):
            flat = torch.from_numpy(self._values[b])
            offset = 0
            for i in members:
                p = self.params[i]
                n = p.numel()
                grad = flat[offset:offset + n].view_as(p).to(p.dtype) / size
                offset += n
                if self.zero_stage == 2 and not owned[i]:
                    p.grad = None  # (only the owned parameters' sums are kept)
                elif p.grad is None:
                    p.grad = grad.to(p.device)
                else:
                    p.grad.copy_(grad)
        if self.uses is None and any(self._fired):
            self.uses = list(self._fired)
            self._needed = [sum(1 for i in m if self.uses[i] > 0) for m in self.buckets]
        self.allreduce_s = seconds
        return seconds

    def step(self, closure=None):
        """synchronize(), then the wrapped optimizer's step (skipped everywhere when the summed
        gradient has NaN or Inf). Returns the closure's loss, if any."""
        loss = closure() if closure is not None else None
        self.synchronize()
        finite = all(bool(np.isfinite(v).all()) for v in self._values)
        generation = self._generation
        self._reset()
        if not finite:
            warnings.warn("troupe.DistributedOptimizer: the summed gradient has NaN or Inf; "
                          "every member skipped this step")
            return loss
        if not self.zero_stage:
            self.optimizer.step()
            return loss
        # Only the owned parameters are stepped (the others' gradients hidden meanwhile, so
        # that the wrapped optimizer keeps no state for them), then every value is gathered.
        owned = self._owned()
        hidden = {}
        for i, p in enumerate(self.params):
            if not owned[i] and p.grad is not None:
                hidden[i], p.grad = p.grad, None
        self.optimizer.step()
        for i, grad in hidden.items():
            self.params[i].grad = grad
        zero.gather(self, generation, owned)
        return loss

    # -- inside
    def _plan(self, bucket_mb):
        limit = max(1, int(bucket_mb * (1 << 20) / 4))
        buckets, current, size = [], [], 0
        for i in reversed(range(len(self.params))):
            current.append(i)
            size += self.params[i].numel()
            if size >= limit:
                buckets.append(current)
                current, size = [], 0
        if current:
            buckets.append(current)
        return buckets

    def _owned(self):
        """Whether this member owns each parameter in the current generation (all of them
        without sharded state)."""
        if not self.zero_stage:
            return [True] * len(self.params)
        rank, size = elastic.rank(), elastic.size()
        if self._owners[0] != size:  # (cut once per generation size)
            self._owners = (size, zero.owners(self.params, size))
        return [r == rank for r in self._owners[1]]

    def _reset(self):
        self._fired = [0] * len(self.params)
        self._ready = [0] * len(self.buckets)  # parameters of each bucket final in this step
        self._pending = [None] * len(self.buckets)
        self._values = [None] * len(self.buckets)
        self._generation = None

    def _accumulated(self, i):
        self._fired[i] += 1
        if self.uses is None or self._fired[i] != self.uses[i]:
            return  # not learned yet, or accumulated again later (weights used twice)
        b = self.bucket_of[i]
        self._ready[b] += 1
        if self._ready[b] == self._needed[b] and self._pending[b] is None:
            self._send(b)

    def _send(self, b):
        parts = []
        for i in self.buckets[b]:
            p = self.params[i]
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            parts.append(g.detach().reshape(-1).to(torch.float32).cpu())
        values = torch.cat(parts).numpy().copy()
        if self.zero_stage == 2:  # (copied: the member's own gradient is not kept)
            for i in self.buckets[b]:
                self.params[i].grad = None
        if self._generation is None:
            self._generation = elastic.generation()
        self._values[b] = values
        self._pending[b] = elastic.member().reduce(self._generation, values, b)
