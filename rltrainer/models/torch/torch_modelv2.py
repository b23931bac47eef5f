"""``TorchModelV2``: the base class of custom models (RLlib's interface)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from torch import nn


class TorchModelV2(nn.Module):
    """A custom model: subclass it, build layers in ``__init__``, implement ``forward`` and
    ``value_function``, and name it in ``model={"custom_model": ...}`` (a name given to
    ``ModelCatalog.register_custom_model``, or a ``"package.module:Class"`` path).

    The constructor is called as ``cls(obs_space, action_space, num_outputs, model_config,
    name, **custom_model_config)``. ``num_outputs`` is what ``forward`` must return per row:
    the action distribution's inputs for PPO (logits; for Box actions the means, plus log
    standard deviations unless ``free_log_std``), the size of the features DQN puts its Q head
    on (the last of ``fcnet_hiddens``, 256 without any).

    ``forward(input_dict, state, seq_lens)`` gets ``input_dict["obs"]`` (a float32 tensor in
    the observation space's shape, ``[B, *shape]``; frames unscaled) and ``input_dict["obs_flat"]``
    (``[B, size]``, what the built-in models read; Dict and Tuple observations are given flat in
    both), and returns ``(outputs [B, num_outputs], state)``; ``state`` is ``[]`` (recurrent
    custom models are not supported yet). ``value_function()`` returns the values ``[B]`` of the
    last ``forward``'s batch (PPO's critic; DQN does not call it).

    Weights are saved by name with safetensors; checkpoints store ``custom_model`` (the name or
    path), never the class.
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int,
        model_config: dict[str, Any],
        name: str,
    ) -> None:
        super().__init__()
        self.obs_space = obs_space
        self.action_space = action_space
        self.num_outputs = num_outputs
        self.model_config = model_config
        self.name = name

    def forward(
        self, input_dict: dict[str, torch.Tensor], state: list[torch.Tensor], seq_lens: torch.Tensor | None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``(outputs [B, num_outputs], state_out)`` for a batch (see the class doc)."""
        raise NotImplementedError(f"{type(self).__name__} must implement forward()")

    def value_function(self) -> torch.Tensor:
        """State values ``[B]`` of the last ``forward`` call's batch."""
        raise NotImplementedError(f"{type(self).__name__} must implement value_function()")

    def get_initial_state(self) -> list[torch.Tensor]:
        """The recurrent state at an episode's start: ``[]`` (no recurrent custom models yet)."""
        return []
