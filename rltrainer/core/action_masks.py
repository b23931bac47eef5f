"""Action masking: a Dict observation holding ``model["action_mask_key"]`` (default
``"action_mask"``: 1 for allowed actions, 0 for the others, one entry per action of a
Discrete action space) makes the policy module add a large negative number to the outputs of
masked actions, wherever they are computed: PPO's logits (sampling, log-probabilities, the
loss), DQN's Q-values (greedy actions, the targets' max over next actions). Random actions of
exploration draw among the allowed ones (``ActionDistribution.valid``).

The mask stays in the observation row (the network reads it too); the wrappers know its
columns (``mask_columns``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rltrainer.core.models import ModelV2Calls
from rltrainer.env.preprocessors import flat_size
from rltrainer.errors import ConfigError

#: Added to a masked action's logit or Q-value: far below any real one, and finite (no NaN in
#: softmax, entropy or KL: exp() of it is exactly 0).
MASKED = -1e9


def mask_columns(obs_space: spaces.Space, action_space: spaces.Space, key: str | None) -> slice | None:
    """The mask's columns in the observation row, or ``None`` without a mask; ``ConfigError``
    when the mask does not fit the action space."""
    if not key or not isinstance(obs_space, spaces.Dict) or key not in obs_space.spaces:
        return None
    mask_space = obs_space.spaces[key]
    if not isinstance(action_space, spaces.Discrete):
        raise ConfigError(
            f"the observation's {key!r} masks actions, which needs a Discrete action space; got "
            f"{action_space} (set model={{'action_mask_key': None}} if it is not an action mask)"
        )
    n = int(action_space.n)
    if not isinstance(mask_space, (spaces.Box, spaces.MultiBinary)) or tuple(mask_space.shape) != (n,):
        raise ConfigError(
            f"the observation's {key!r} must be a Box or MultiBinary of shape ({n},), one entry per "
            f"action of {action_space}; got {mask_space}"
        )
    start = 0
    for name, space in obs_space.spaces.items():  # the row's order (Preprocessor)
        if name == key:
            return slice(start, start + n)
        start += flat_size(space)
    raise AssertionError("unreachable")


def penalty(rows: torch.Tensor, columns: slice) -> torch.Tensor:
    """0 for allowed actions, ``MASKED`` for the others: ``[B, n]``."""
    allowed = rows[:, columns].float() > 0.5
    return torch.where(allowed, 0.0, MASKED)


def penalty_numpy(rows: np.ndarray, columns: slice) -> np.ndarray:
    return np.where(rows[:, columns] > 0.5, np.float32(0.0), np.float32(MASKED))


def masked_numpy_policy(inner: Any, columns: slice) -> Any:
    """``inner`` (rows -> outputs, numpy) with the masked outputs at ``MASKED``."""

    def masked(rows: np.ndarray) -> np.ndarray:
        return inner(rows) + penalty_numpy(rows, columns)

    return masked


def valid_actions(rows: np.ndarray, columns: slice) -> np.ndarray:
    """``[B, n]`` booleans: the allowed actions of each row."""
    return rows[:, columns] > 0.5


class MaskedActorCritic(ModelV2Calls, nn.Module):
    """An actor-critic whose distribution inputs (logits) are masked; values unchanged."""

    def __init__(self, inner: nn.Module, columns: slice) -> None:
        super().__init__()
        self.inner, self.columns = inner, columns

    def forward(self, obs: Any, state: Any = None, seq_lens: Any = None) -> tuple[torch.Tensor, Any]:  # noqa: ARG002
        if isinstance(obs, dict):
            return self._call_input_dict(obs, state)
        dist_inputs, values = self.inner(obs)
        return dist_inputs + penalty(obs, self.columns), values

    def values(self, obs: torch.Tensor) -> torch.Tensor:
        return self.inner.values(obs)

    def numpy_policy(self):
        return masked_numpy_policy(self.inner.numpy_policy(), self.columns)


class MaskedQ(nn.Module):
    """A Q-network whose Q-values of masked actions are ``MASKED`` (greedy actions and the
    targets' max over next actions skip them). ``features``/``q_values`` (the documents' calls)
    are the inner network's, unmasked: they do not see the observation."""

    def __init__(self, inner: nn.Module, columns: slice) -> None:
        super().__init__()
        self.inner, self.columns = inner, columns

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.inner(obs) + penalty(obs, self.columns)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        return self.inner.features(obs)

    def q_values(self, features: torch.Tensor) -> torch.Tensor:
        return self.inner.q_values(features)

    def state_value(self, features: torch.Tensor) -> torch.Tensor:
        return self.inner.state_value(features)

    def numpy_policy(self):
        return masked_numpy_policy(self.inner.numpy_policy(), self.columns)
