"""troupe.DistributedOptimizer: Horovod's DistributedOptimizer on Troupe's loop groups, for a
data-parallel loop of one's own (troupe.elastic says how processes join and re-form).

Gradients are bucketed in reverse parameter order (about the order backward finishes them)
and each bucket is summed over the group's members as soon as backward has accumulated every
gradient in it, while backward goes on; step() waits for the sums, averages them (divides by
the group's size) and steps the wrapped optimizer. A step whose summed gradient has NaN or Inf
is skipped by every member alike (they all see the same sum), with a warning. If the group
re-forms meanwhile, step() raises troupe.elastic.MembershipChanged before anything is changed:
that step is discarded everywhere (troupe.elastic.run restores the last commit).
"""
import warnings

import numpy as np
import torch

from . import elastic
from ._hooks import on_accumulated


class DistributedOptimizer:
    """Wraps `optimizer` (any torch.optim.Optimizer) for the parameters `named_parameters`
    (model.named_parameters(): the same names and order in every member).

    bucket_mb:  the size of a gradient bucket (one collective each).
    timeout:    the bound of each step's wait for its sums, in seconds.
    zero_stage: 0, the wrapped optimizer's whole state on every member. Sharding it (1 and 2,
                as ZeroRedundancyOptimizer) is not built yet and is refused (ValueError);
                troupe.run(..., zero_stage=1 or 2) shards a TorchTask's already.
    """

    def __init__(self, optimizer, named_parameters, *, bucket_mb=4.0, timeout=120.0,
                 zero_stage=0):
        if zero_stage in (1, 2):
            raise ValueError(f"DistributedOptimizer: zero_stage={zero_stage} is not built yet "
                             "(its commit and restore in troupe.elastic need the pieces agreed "
                             "on); use zero_stage=0, or troupe.run(..., zero_stage="
                             f"{zero_stage}) with a TorchTask")
        if zero_stage != 0:
            raise ValueError(f"DistributedOptimizer: zero_stage must be 0, 1 or 2, not "
                             f"{zero_stage!r}")
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
        return self.optimizer.state_dict()

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state)

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
        for b, members in enumerate(self.buckets):
            flat = torch.from_numpy(self._values[b])
            offset = 0
            for i in members:
                p = self.params[i]
                n = p.numel()
                grad = flat[offset:offset + n].view_as(p).to(p.dtype) / size
                if p.grad is None:
                    p.grad = grad.to(p.device)
                else:
                    p.grad.copy_(grad)
                offset += n
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
        self._reset()
        if not finite:
            warnings.warn("troupe.DistributedOptimizer: the summed gradient has NaN or Inf; "
                          "every member skipped this step")
            return loss
        self.optimizer.step()
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
        if self._generation is None:
            self._generation = elastic.generation()
        self._values[b] = values
        self._pending[b] = elastic.member().reduce(self._generation, values, b)
