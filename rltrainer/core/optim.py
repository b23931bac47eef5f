"""A minimal Adam with the same update as ``torch.optim.Adam``.

Why not ``torch.optim``: its first use imports ``torch._dynamo`` (2.3 s on a 2-core
machine, a third of our time-to-solve budget for CartPole), and its per-step Python
machinery costs more than the math for the small networks RL trains. This one is a
handful of ``torch._foreach_*`` calls, and its state is plain tensors for safetensors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch


class Adam:
    """Adam (Kingma & Ba 2015) with bias correction, as in ``torch.optim.Adam``."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.betas, self.eps = lr, betas, eps
        self.step_count = 0
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        params = [p for p in self.params if p.grad is not None]
        if len(params) != len(self.params):
            raise RuntimeError("Adam.step(): every parameter needs a gradient")
        grads = [p.grad for p in params]
        beta1, beta2 = self.betas
        self.step_count += 1
        torch._foreach_lerp_(self.exp_avg, grads, 1 - beta1)
        torch._foreach_mul_(self.exp_avg_sq, beta2)
        torch._foreach_addcmul_(self.exp_avg_sq, grads, grads, 1 - beta2)
        bias1 = 1 - beta1**self.step_count
        bias2 = 1 - beta2**self.step_count
        denom = torch._foreach_sqrt(self.exp_avg_sq)
        torch._foreach_div_(denom, math.sqrt(bias2))
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(params, self.exp_avg, denom, -self.lr / bias1)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Moments by parameter index, plus the step count."""
        out = {"step": torch.tensor(self.step_count, dtype=torch.int64)}
        for i, (m, v) in enumerate(zip(self.exp_avg, self.exp_avg_sq, strict=True)):
            out[f"exp_avg.{i}"] = m.detach().cpu().clone()
            out[f"exp_avg_sq.{i}"] = v.detach().cpu().clone()
        return out

    def load_state_tensors(self, state: dict[str, torch.Tensor]) -> None:
        """Inverse of ``state_tensors``; shapes must match this optimizer's parameters."""
        for i, p in enumerate(self.params):
            for name, moments in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
                value = state[f"{name}.{i}"]
                if value.shape != p.shape:
                    raise ValueError(f"{name}.{i} has shape {tuple(value.shape)}, expected {tuple(p.shape)}")
                moments[i] = value.to(p.device, p.dtype).clone()
        self.step_count = int(state["step"])
