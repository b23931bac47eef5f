"""Custom models behind the interface of the built-in ones, so that no algorithm has a second
code path: ``CustomActorCritic`` (PPO: ``forward(obs) -> (dist_inputs, values)``, ``values``,
``numpy_policy``) and ``CustomEncoder`` (features under DQN's Q head, ``out_size``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rltrainer.core.models import input_dict_rows, torch_inference
from rltrainer.errors import ConfigError
from rltrainer.models.catalog import ModelCatalog


def _input_dict(obs_space: gym.Space, flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """What ``TorchModelV2.forward`` reads: ``obs`` in the space's shape, ``obs_flat``."""
    flat = flat.float()
    shape = obs_space.shape if isinstance(obs_space, gym.spaces.Box) else None
    obs = flat.reshape(len(flat), *shape) if shape else flat
    return {"obs": obs, "obs_flat": flat}


def build_custom_model(
    obs_space: gym.Space, action_space: gym.Space, num_outputs: int, model_config: Any, name: str
) -> nn.Module:
    """The user's ``TorchModelV2`` for ``model_config`` (a ``ModelConfig``); ``ConfigError``
    naming the class when it cannot be constructed."""
    model_class = ModelCatalog.get_custom_model(model_config.custom_model)
    settings = model_config.model_dump()
    try:
        return model_class(
            obs_space, action_space, num_outputs, settings, name, **model_config.custom_model_config
        )
    except TypeError as err:
        raise ConfigError(
            f"model.custom_model {model_class.__name__}: constructing it failed ({err}); it is called as "
            "cls(obs_space, action_space, num_outputs, model_config, name, **custom_model_config)"
        ) from None


def _check_outputs(model: nn.Module, obs_space: gym.Space, size: int, expected: int, what: str) -> None:
    """One forward on two zero observations: ``ConfigError`` when the outputs have the wrong shape."""
    try:
        with torch.no_grad():
            outputs, _ = model(_input_dict(obs_space, torch.zeros(2, size)), [], None)
    except Exception as err:  # noqa: BLE001 - the user's code: say where, without a traceback
        raise ConfigError(
            f"model.custom_model {type(model).__name__}: forward() on a batch of 2 observations of "
            f"{obs_space} raised {type(err).__name__}: {err}"
        ) from err
    if not isinstance(outputs, torch.Tensor) or tuple(outputs.shape) != (2, expected):
        got = tuple(outputs.shape) if isinstance(outputs, torch.Tensor) else type(outputs).__name__
        raise ConfigError(
            f"model.custom_model {type(model).__name__}: forward() returned outputs of shape {got} for a "
            f"batch of 2; expected (2, {expected}) ({what})"
        )


class CustomActorCritic(nn.Module):
    """PPO's actor-critic from a custom model (``model``): its outputs are the distribution's
    inputs, with a free log standard deviation appended for Box actions when ``free_log_std``."""

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        obs_size: int,
        num_outputs: int,
        model_config: Any,
    ) -> None:
        super().__init__()
        self.obs_space = obs_space
        self.free_log_std = model_config.free_log_std and isinstance(action_space, gym.spaces.Box)
        outputs = num_outputs // 2 if self.free_log_std else num_outputs
        self.model = build_custom_model(obs_space, action_space, outputs, model_config, "policy")
        what = "the action distribution's inputs" + (" (means; log std is free)" if self.free_log_std else "")
        _check_outputs(self.model, obs_space, obs_size, outputs, what)
        with torch.no_grad():
            values = self.model.value_function()
        if not isinstance(values, torch.Tensor) or values.reshape(-1).shape != (2,):
            raise ConfigError(
                f"model.custom_model {type(self.model).__name__}: value_function() must return one value "
                f"per row of the last forward() ([B]); got {getattr(values, 'shape', values)!r:.60}"
            )
        if self.free_log_std:
            self.log_std = nn.Parameter(torch.zeros(outputs))

    def _dist_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        out, _ = self.model(_input_dict(self.obs_space, obs), [], None)
        if self.free_log_std:
            out = torch.cat([out, self.log_std.expand_as(out)], dim=-1)
        return out

    def forward(self, obs: Any, state: Any = None, seq_lens: Any = None) -> tuple[torch.Tensor, Any]:
        """``(dist_inputs, values)`` from flat rows; RLlib's call ``model({"obs": ...}, state,
        seq_lens)`` goes to the custom model itself (its outputs and state)."""
        if isinstance(obs, dict):
            rows = input_dict_rows(self, obs)
            return self.model(_input_dict(self.obs_space, rows), list(state or []), seq_lens)
        dist_inputs = self._dist_inputs(obs)
        return dist_inputs, self.model.value_function().reshape(-1)

    def value_function(self) -> torch.Tensor:
        """The custom model's values of its last batch."""
        return self.model.value_function()

    def values(self, obs: torch.Tensor) -> torch.Tensor:
        self.model(_input_dict(self.obs_space, obs), [], None)
        return self.model.value_function().reshape(-1)

    def numpy_policy(self):
        return torch_inference(self._dist_inputs, self)


class CustomEncoder(nn.Module):
    """A custom model's outputs as features (``out_size`` of them), for DQN's Q head."""

    def __init__(
        self, obs_space: gym.Space, action_space: gym.Space, obs_size: int, model_config: Any
    ) -> None:
        super().__init__()
        self.obs_space = obs_space
        self.out_size = int(([256, *model_config.fcnet_hiddens])[-1])
        self.model = build_custom_model(obs_space, action_space, self.out_size, model_config, "q_model")
        _check_outputs(self.model, obs_space, obs_size, self.out_size, "features for the Q head")

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.model(_input_dict(self.obs_space, obs), [], None)[0]


__all__ = ["CustomActorCritic", "CustomEncoder", "build_custom_model"]
