"""Flat parameters and a minimal Adam with the same update as ``torch.optim.Adam``.

Why not ``torch.optim``: its first use imports ``torch._dynamo`` (2.3 s on a 2-core
machine, a third of our time-to-solve budget for CartPole). Why flat: on CPU the
``_foreach_*`` kernels run one small op per tensor, so Adam on a 12-tensor MLP launched
~70 ops per step. With every parameter and gradient a view into one buffer, Adam,
zeroing and clipping are a handful of ops on a single tensor.
"""

from __future__ import annotations

import math

import torch
from torch import nn

#: Where each parameter starts in the flat buffers: torch's CPU allocator's alignment.
ALIGN_BYTES = 64


def rehome(params: list[torch.Tensor]) -> tuple[torch.Tensor, list[slice]]:
    """Move ``params``' values into one zero-padded buffer, each parameter starting on an
    ``ALIGN_BYTES`` boundary (its ``.data`` becomes a view of it); returns the buffer and each
    parameter's slice of it. The same parameters in the same order always get the same layout."""
    first = params[0]
    align = max(1, ALIGN_BYTES // first.element_size())
    views: list[slice] = []
    offset = 0
    for p in params:
        offset = -(-offset // align) * align  # rounded up to the next boundary
        views.append(slice(offset, offset + p.numel()))
        offset += p.numel()
    data = torch.zeros(offset, device=first.device, dtype=first.dtype)
    for p, view in zip(params, views, strict=True):
        data[view].copy_(p.detach().reshape(-1))
        p.data = data[view].view_as(p)
    return data, views


class FlatParameters:
    """Re-homes a module's parameters (and their gradients) into two contiguous buffers.

    Parameters keep their identity (only ``.data`` moves), and autograd accumulates into
    the existing ``.grad`` views in place, so the module works exactly as before.

    Each parameter starts on a 64-byte boundary, as torch's own allocations do: BLAS kernels
    take other paths for unaligned operands, whose results differ in the last bit, so a module
    restored from a checkpoint (its own allocations) would not compute exactly what the learner's
    module computes. The padding between parameters stays zero (its gradient is zero, so Adam
    and clipping leave it so).
    """

    def __init__(self, module: nn.Module) -> None:
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.data, self.views = rehome(self.params)
        self.grad = torch.zeros_like(self.data)
        for p, view in zip(self.params, self.views, strict=True):
            p.grad = self.grad[view].view_as(p)

    def zero_grad(self) -> None:
        self.grad.zero_()

    @torch.no_grad()
    def clip_grad(self, clip: float, by: str) -> None:
        """Clip by each element's value, each tensor's norm, or the norm of all gradients."""
        if by == "value":
            self.grad.clamp_(-clip, clip)
        elif by == "global_norm":  # no host sync: scale by min(1, clip / norm)
            self.grad.mul_(torch.clamp(clip / (self.grad.norm() + 1e-6), max=1.0))
        else:
            for view in self.views:
                grad = self.grad[view]
                grad.mul_(torch.clamp(clip / (grad.norm() + 1e-6), max=1.0))


class Adam:
    """Adam (Kingma & Ba 2015) with bias correction, as in ``torch.optim.Adam``, on flat buffers."""

    def __init__(
        self,
        flat: FlatParameters,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        fused: bool = False,
    ) -> None:
        """``fused``: one kernel per step (``torch.optim.Adam(fused=True)``'s, where torch has it
        for the device) instead of seven ops; the same update up to rounding."""
        self.flat = flat
        self.lr, self.betas, self.eps = lr, betas, eps
        self.step_count = 0
        self.exp_avg = torch.zeros_like(flat.data)
        self.exp_avg_sq = torch.zeros_like(flat.data)
        self._denom = torch.empty_like(flat.data)
        self._fused_step: torch.Tensor | None = None  # the step count as the fused kernel reads it
        if fused and flat.data.device.type in ("cpu", "cuda") and hasattr(torch, "_fused_adam_"):
            self._fused_step = torch.zeros((), dtype=torch.float32, device=flat.data.device)

    def step(self) -> None:
        # No torch.no_grad() needed: the flat buffers are plain tensors (the parameters are
        # views of them through .data), so nothing here is recorded.
        grad = self.flat.grad
        beta1, beta2 = self.betas
        self.step_count += 1
        if self._fused_step is not None:
            self._fused_step.fill_(self.step_count)
            torch._fused_adam_(
                [self.flat.data],
                [grad],
                [self.exp_avg],
                [self.exp_avg_sq],
                [],
                [self._fused_step],
                lr=self.lr,
                beta1=beta1,
                beta2=beta2,
                weight_decay=0.0,
                eps=self.eps,
                amsgrad=False,
                maximize=False,
            )
            return
        self.exp_avg.lerp_(grad, 1 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias1 = 1 - beta1**self.step_count
        bias2 = 1 - beta2**self.step_count
        denom = torch.sqrt(self.exp_avg_sq, out=self._denom).div_(math.sqrt(bias2)).add_(self.eps)
        self.flat.data.addcdiv_(self.exp_avg, denom, value=-self.lr / bias1)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Moments by parameter index, plus the step count (plain tensors for safetensors)."""
        out = {"step": torch.tensor(self.step_count, dtype=torch.int64)}
        for i, view in enumerate(self.flat.views):
            shape = self.flat.params[i].shape
            out[f"exp_avg.{i}"] = self.exp_avg[view].view(shape).cpu().clone()
            out[f"exp_avg_sq.{i}"] = self.exp_avg_sq[view].view(shape).cpu().clone()
        return out

    def load_state_tensors(self, state: dict[str, torch.Tensor]) -> None:
        """Inverse of ``state_tensors``; shapes must match this optimizer's parameters."""
        for i, (view, p) in enumerate(zip(self.flat.views, self.flat.params, strict=True)):
            for name, moments in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
                value = state[f"{name}.{i}"]
                if value.shape != p.shape:
                    raise ValueError(f"{name}.{i} has shape {tuple(value.shape)}, expected {tuple(p.shape)}")
                moments[view].copy_(value.reshape(-1))
        self.step_count = int(state["step"])
