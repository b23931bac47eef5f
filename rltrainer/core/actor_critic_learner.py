"""``ActorCriticLearner``: a learner with one Adam per part of its module (SAC's actor, critics
and temperature; DDPG's and TD3's actor and critics), so each loss steps only its own part;
``ActorCriticModule``: the actor and its one or two critics with frozen target copies.

What the off-policy actor-critics share: the parts' flat parameters and optimizers, a guarded
gradient step per part, the actor's weights for the env runners, and the optimizers' state in
checkpoints (plain tensors, keyed ``"<part>.<name>"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from rltrainer.core.learner import ADAM_EPS, Learner
from rltrainer.core.optim import Adam, FlatParameters


class ActorCriticModule(nn.Module):
    """An actor ``pi`` and critics ``q1`` (and ``q2``) with target copies ``q1_target``
    (``q2_target``) that gradients never train."""

    def add_critics(self, make_critic: Callable[[], nn.Module], twin_q: bool) -> None:
        self.q1 = make_critic()
        self.q2 = make_critic() if twin_q else None
        self.q1_target = make_critic()
        self.q2_target = make_critic() if twin_q else None
        for online, target in ((self.q1, self.q1_target), (self.q2, self.q2_target)):
            if online is not None:
                freeze_as_target(online, target)

    def critics(self) -> list[nn.Module]:
        return [q for q in (self.q1, self.q2) if q is not None]

    def target_critics(self) -> list[nn.Module]:
        return [q for q in (self.q1_target, self.q2_target) if q is not None]

    def numpy_policy(self):
        return self.pi.numpy_policy()


def freeze_as_target(online: nn.Module, target: nn.Module) -> None:
    """``target`` starts as a copy of ``online`` and is not trained by gradients."""
    target.load_state_dict(online.state_dict())
    target.requires_grad_(False)


def min_q(critics: list[nn.Module], *inputs: torch.Tensor) -> torch.Tensor:
    """Clipped double Q (Fujimoto et al. 2018): the minimum over the critics."""
    values = [q(*inputs) for q in critics]
    return values[0] if len(values) == 1 else torch.minimum(values[0], values[1])


class ActorCriticLearner(Learner):
    """Trains ``module`` (with an actor ``module.pi``) part by part: ``optimizer_parts()`` maps a
    part's name to ``(its parameters as a module, its learning rate)``; the parts must not overlap."""

    #: One fused kernel per Adam step (``Adam(fused=True)``).
    FUSED_ADAM = False

    def optimizer_parts(self) -> dict[str, tuple[nn.Module, float]]:
        raise NotImplementedError

    def compiled_modules(self) -> list[nn.Module]:
        # The losses call the actor and the critics one by one, not the module as a whole.
        return [self.module.pi, *self.module.critics()]

    def build_optimizers(self) -> None:
        # No single optimizer over the whole module: one Adam per part.
        parts = self.optimizer_parts()
        self.params = {name: FlatParameters(part) for name, (part, _) in parts.items()}
        self.optimizers = {
            name: Adam(self.params[name], lr=lr, eps=ADAM_EPS, fused=self.FUSED_ADAM)
            for name, (_, lr) in parts.items()
        }
        self._stepping = next(iter(parts))
        self.set_td_errors(torch.zeros(0, device=self.device))  # the replay buffer's new priorities

    def build_batch(self, batch: Any) -> Any:
        return batch  # a replayed batch, as the buffer gives it

    def step(
        self,
        name: str,
        loss: torch.Tensor | Callable[[], torch.Tensor],
        inputs: list[torch.Tensor] | None = None,
        gradients: Callable[[], None] | None = None,
        finite: torch.Tensor | None = None,
    ) -> bool:
        """One gradient step of part ``name`` on ``loss``; False when a non-finite loss was
        skipped (``on_nonfinite="skip_batch"``). ``inputs``: accumulate gradients only into
        these (the actor's loss backpropagates through a critic without touching its weights).
        ``gradients``: writes the part's whole gradient itself (hand-written, see
        ``FastMLP.backward``) instead of autograd's ``loss.backward()``. ``finite``: a cheaper
        tensor to check, finite exactly when the loss is; ``loss`` may then be a function that
        computes it (only for the message)."""
        self._stepping = name
        value = loss if callable(loss) else lambda: loss
        checked = loss if finite is None else finite
        if not self.loss_is_finite(checked, lambda: {f"{name}_loss": float(value())}):
            return False
        params = self.params[name]
        if gradients is not None:
            gradients()
        else:
            params.zero_grad()
            loss.backward(inputs=inputs)
        if self.config.grad_clip is not None:
            params.clip_grad(self.config.grad_clip, self.config.grad_clip_by)
        self.optimizers[name].step()
        return True

    def current_lr(self) -> float:
        return self.optimizers[self._stepping].lr

    def set_td_errors(self, td_errors: torch.Tensor, first_critics: bool = False) -> None:
        """Keep the batch's TD errors for the replay buffer's priorities; ``last_td_errors``
        converts them when read (uniform replay never reads them). ``first_critics``: they are
        the first critic's of ``td_errors`` (``[critics, B, ...]``, tensors without autograd),
        taken when read as well."""
        self._td_errors_numpy = None
        self._td_errors = td_errors if first_critics else td_errors.detach()
        self._td_first_critics = first_critics

    @property
    def last_td_errors(self) -> np.ndarray:
        """The last batch's TD errors as numpy (0 where not finite, so a skipped step leaves no
        NaN priorities)."""
        if self._td_errors_numpy is None:
            errors = self._td_errors[0].reshape(-1) if self._td_first_critics else self._td_errors
            errors = torch.nan_to_num(errors, nan=0.0, posinf=0.0, neginf=0.0)
            self._td_errors_numpy = errors.cpu().numpy()
        return self._td_errors_numpy

    def get_policy_weights(self) -> dict[str, torch.Tensor]:
        """Only what env runners act with: the actor."""
        return {f"pi.{k}": v.detach().cpu().clone() for k, v in self.module.pi.state_dict().items()}

    def get_optimizer_state(self) -> dict[str, torch.Tensor]:
        return {
            f"{name}.{k}": v for name, opt in self.optimizers.items() for k, v in opt.state_tensors().items()
        }

    def set_optimizer_state(self, tensors: dict[str, torch.Tensor]) -> None:
        for name, opt in self.optimizers.items():
            prefix = f"{name}."
            opt.load_state_tensors({k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)})

    def setup_data_parallel(self, init_method: str, rank: int, world_size: int) -> None:
        raise NotImplementedError(f"{self.config.ALGORITHM} trains in the driver (num_learners=0)")


class ParameterModule(nn.Module):
    """A module holding one existing parameter (a part of its own, e.g. SAC's log alpha)."""

    def __init__(self, parameter: nn.Parameter) -> None:
        super().__init__()
        self.parameter = parameter
