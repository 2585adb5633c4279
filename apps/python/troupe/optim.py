"""troupe.optim.DASH: Troupe's DASH (batched block Shampoo with Adam grafting) as a
torch.optim.Optimizer, on the same CPU kernels the parameter buckets step with
(kernels/cpu/dash.hpp, through troupe._native). docs/python.md#dash-as-a-pytorch-optimizer.

    opt = troupe.optim.DASH(model.parameters(), lr=1e-3, block_size=128, frequency=10)

What each parameter gets, as in a bucket with --optimizer dash:
- a matrix (2-D, both sides at least 2) is cut into block_size x block_size blocks, each
  preconditioned by L^{-1/4} G R^{-1/4} (roots every `frequency` steps) and grafted to the norm
  of Adam's step on the block;
- a tensor of more dimensions (a convolution kernel out x in x kh x kw) is stepped as the matrix
  out x (in * kh * kw), its rows the output channels (the buckets step such tensors with AdamW);
- a vector, a scalar, or a matrix with a side of 1 gets AdamW (decoupled weight decay).
"""
import math
import warnings

import torch

from . import _native

_SOLVERS = ("evd", "cn", "ndb", "cheb")
_SCALINGS = ("power", "frobenius")
_STORAGES = ("fp32", "bf16", "fp16")


def _matrix_shape(p):
    """(rows, cols) DASH steps `p` as, or None for AdamW."""
    if p.dim() < 2:
        return None
    rows, cols = p.shape[0], p.numel() // p.shape[0]
    return (rows, cols) if rows >= 2 and cols >= 2 else None


def _view(t):
    """A float32 memoryview over a contiguous CPU tensor (no copy)."""
    return memoryview(t.detach().numpy()).cast("B").cast("f")


class DASH(torch.optim.Optimizer):
    """DASH for CPU tensors (CUDA tensors: not built yet, a clear error).

    lr, betas, eps, weight_decay: Adam's (the grafting's and the vectors'), decoupled weight
        decay, as --lr, --weight-decay and the buckets' Adam moments.
    block_size, frequency: B and the steps between inverse roots (--dash-block, --dash-freq).
    solver: evd | cn | ndb | cheb; scaling: power | frobenius; storage: fp32 | bf16 | fp16 (the
        statistics in 16 bits, each block scaled, rounded stochastically); nesterov: precondition
        Adam's look-ahead moment (--dash-solver, --dash-scaling, --dash-storage, --dash-nesterov).
    The learning rate may change between steps (schedulers); the other settings are read when a
    parameter's state is made. A step whose gradients hold a NaN or an inf changes nothing (a
    GradScaler's skipped step); state_dict() holds the statistics and roots as fp32 tensors, and
    load_state_dict() resets non-finite ones to a fresh block (statistics zero, roots the
    identity), with a warning.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 block_size=128, frequency=10, solver="cn", storage="fp32", nesterov=False,
                 scaling="power"):
        if not (lr >= 0 and math.isfinite(lr)):
            raise ValueError(f"DASH: lr must be finite and >= 0, not {lr}")
        if not all(0 <= b < 1 for b in betas):
            raise ValueError(f"DASH: betas must be in [0, 1), not {betas}")
        if not (eps > 0) or weight_decay < 0:
            raise ValueError("DASH: eps must be > 0 and weight_decay >= 0")
        if int(block_size) < 2 or int(frequency) < 1:
            raise ValueError("DASH: block_size must be at least 2 and frequency at least 1")
        for name, value, choices in (("solver", solver, _SOLVERS), ("scaling", scaling, _SCALINGS),
                                     ("storage", storage, _STORAGES)):
            if value not in choices:
                raise ValueError(f"DASH: {name} must be one of {', '.join(choices)}, not {value!r}")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        block_size=int(block_size), frequency=int(frequency), solver=solver,
                        storage=storage, nesterov=bool(nesterov), scaling=scaling)
        super().__init__(params, defaults)
        self._kernels = {}  # parameter -> _native.DashMatrix (matrices only)
        self.skipped_steps = 0  # steps left out for a non-finite gradient

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        stepped = [(group, p) for group in self.param_groups for p in group["params"]
                   if p.grad is not None]
        for _, p in stepped:
            if p.is_cuda or p.grad.is_cuda:
                raise NotImplementedError("troupe.optim.DASH: CUDA tensors are not built yet "
                                          "(the CPU kernels step CPU tensors)")
            if p.grad.is_sparse:
                raise RuntimeError("troupe.optim.DASH: sparse gradients are not supported")
        if not all(bool(torch.isfinite(p.grad).all()) for _, p in stepped):
            self.skipped_steps += 1
            return loss
        for group, p in stepped:
            self._step_one(group, p)
        return loss

    def _state_of(self, group, p):
        state = self.state[p]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32,
                                                memory_format=torch.contiguous_format)
            state["exp_avg_sq"] = torch.zeros_like(state["exp_avg"])
        if p not in self._kernels and _matrix_shape(p) is not None:
            self._kernels[p] = self._kernel(group, p)
            if "dash" in state:  # loaded by load_state_dict
                self._load_kernel(p, state.pop("dash"))
        return state

    def _kernel(self, group, p):
        rows, cols = _matrix_shape(p)
        b1, b2 = group["betas"]
        return _native.DashMatrix(rows, cols, group["block_size"], group["frequency"],
                                  group["solver"], group["scaling"], group["storage"],
                                  group["nesterov"], b1, b2, group["eps"], group["weight_decay"])

    def _step_one(self, group, p):
        if p.dtype != torch.float32:
            raise TypeError(f"troupe.optim.DASH: parameters must be float32, not {p.dtype}")
        state = self._state_of(group, p)
        state["step"] += 1
        theta = p.data if p.data.is_contiguous() else p.data.contiguous()
        grad = p.grad.contiguous()
        m, v = state["exp_avg"], state["exp_avg_sq"]
        kernel = self._kernels.get(p)
        if kernel is not None:
            kernel.step(_view(theta.view(-1)), _view(grad.view(-1)), _view(m.view(-1)),
                        _view(v.view(-1)), state["step"], group["lr"])
        else:
            b1, b2 = group["betas"]
            _native.adam_step(_view(theta.view(-1)), _view(m.view(-1)), _view(v.view(-1)),
                              _view(grad.view(-1)), group["lr"], b1, b2, group["eps"],
                              group["weight_decay"], state["step"])
        if theta is not p.data:
            p.data.copy_(theta)

    # -- state ---------------------------------------------------------------------------

    def state_dict(self):
        """torch's state_dict, each matrix's state with "dash": its statistics and roots, one
        fp32 tensor per group and kind (L, R, L^{-1/4}, R^{-1/4}, the blocks stacked)."""
        out = super().state_dict()
        index, at = {}, 0
        for group in self.param_groups:  # torch numbers the parameters in this order
            for p in group["params"]:
                index.setdefault(id(p), at)
                at += 1
        for p, kernel in self._kernels.items():
            i = index[id(p)]
            out["state"][i] = dict(out["state"][i])  # not the optimizer's own dict
            out["state"][i]["dash"] = [torch.frombuffer(bytearray(kernel.state(k)),
                                                        dtype=torch.float32)
                                       for k in range(kernel.state_count())]
        return out

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self._kernels = {}
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state.get(p)
                if not state:
                    continue
                for key in ("exp_avg", "exp_avg_sq"):
                    if key in state and not bool(torch.isfinite(state[key]).all()):
                        warnings.warn(f"troupe.optim.DASH: non-finite {key} reset to zero")
                        state[key].nan_to_num_(0.0, 0.0, 0.0).zero_()
                if "dash" in state:
                    self._state_of(group, p)  # makes the kernel and loads the statistics

    def _load_kernel(self, p, tensors):
        kernel = self._kernels[p]
        if len(tensors) != kernel.state_count():
            raise ValueError(f"troupe.optim.DASH: {len(tensors)} state tensors for a parameter "
                             f"of shape {tuple(p.shape)}, which has {kernel.state_count()}")
        for i, t in enumerate(tensors):
            values = t.detach().to(torch.float32).reshape(-1).contiguous().clone()
            if not bool(torch.isfinite(values).all()):
                warnings.warn(f"troupe.optim.DASH: non-finite statistics of a "
                              f"{tuple(p.shape)} parameter reset (statistics zero, roots the "
                              "identity)")
                values = self._fresh(kernel, i, len(values))
            kernel.set_state(i, _view(values))

    @staticmethod
    def _fresh(kernel, i, n):
        """State tensor i of a fresh block: statistics (L, R) zero, roots the identity."""
        if i % 4 < 2:
            return torch.zeros(n)
        side = math.isqrt(kernel.block_values(i))
        return torch.eye(side).reshape(-1).repeat(n // (side * side)).contiguous()
