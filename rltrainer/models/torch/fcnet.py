"""RLlib's generic fully connected ``TorchModelV2`` (``from rltrainer.models.torch.fcnet import
FullyConnectedNetwork``), for custom models that wrap it, as RLlib's custom-model examples do::

    self.torch_sub_model = FullyConnectedNetwork(obs_space, action_space, num_outputs, model_config, name)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rltrainer.core.models import ACTIVATIONS, mlp
from rltrainer.env.preprocessors import flat_size
from rltrainer.errors import ConfigError
from rltrainer.models.torch.torch_modelv2 import TorchModelV2


def _hidden_layers(sizes: list[int], activation: str) -> nn.Sequential:
    """A linear layer and ``activation`` for each step of ``sizes``: rltrainer's built-in MLP
    (its init), with the activation after the last layer too; empty for one size."""
    if len(sizes) < 2:
        return nn.Sequential()
    return nn.Sequential(*mlp(sizes, activation, out_gain=np.sqrt(2)), ACTIVATIONS[activation]())


class FullyConnectedNetwork(TorchModelV2):
    """Hidden layers of ``model_config["fcnet_hiddens"]`` with ``fcnet_activation`` over the flat
    observation (``input_dict["obs_flat"]``), then a linear layer of ``num_outputs`` (none when
    ``num_outputs`` is 0 or None: the last hidden layer's features are the outputs, and
    ``num_outputs`` becomes their size). ``value_function()`` is a linear head on the same
    features with ``vf_share_layers``, else on a separate stack of the same hidden sizes.

    A free log standard deviation is not appended here: rltrainer appends it to a custom model's
    outputs itself (``free_log_std``), so ``num_outputs`` is already the means' count.
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int | None,
        model_config: dict[str, Any],
        name: str,
    ) -> None:
        super().__init__(obs_space, action_space, num_outputs or 0, model_config, name)
        hiddens = [int(size) for size in model_config.get("fcnet_hiddens") or []]
        activation = model_config.get("fcnet_activation") or "tanh"
        if activation not in ACTIVATIONS:
            raise ConfigError(
                f"FullyConnectedNetwork: unknown fcnet_activation {activation!r}; allowed: "
                f"{', '.join(ACTIVATIONS)}"
            )
        sizes = [flat_size(obs_space), *hiddens]
        self.vf_share_layers = bool(model_config.get("vf_share_layers", False))
        self._hidden_layers = _hidden_layers(sizes, activation)
        self._logits = mlp([sizes[-1], num_outputs], "linear", out_gain=0.01) if num_outputs else None
        if not num_outputs:
            self.num_outputs = sizes[-1]
        self._value_branch_separate = None if self.vf_share_layers else _hidden_layers(sizes, activation)
        self._value_branch = mlp([sizes[-1], 1], "linear", out_gain=1.0)
        self._features: torch.Tensor | None = None
        self._last_flat_in: torch.Tensor | None = None

    def forward(
        self,
        input_dict: dict[str, torch.Tensor],
        state: list[torch.Tensor],
        seq_lens: torch.Tensor | None,  # noqa: ARG002 - RLlib's signature (not recurrent)
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        flat = input_dict["obs_flat"].float()
        self._last_flat_in = flat.reshape(len(flat), -1)
        self._features = self._hidden_layers(self._last_flat_in)
        outputs = self._logits(self._features) if self._logits is not None else self._features
        return outputs, state

    def value_function(self) -> torch.Tensor:
        if self._features is None:
            raise RuntimeError("FullyConnectedNetwork.value_function(): call forward() first")
        if self._value_branch_separate is not None:
            return self._value_branch(self._value_branch_separate(self._last_flat_in)).squeeze(1)
        return self._value_branch(self._features).squeeze(1)


__all__ = ["FullyConnectedNetwork"]
