"""DQN's policy: Q-values as the action distribution's inputs (its own module, so that env
runners and learners load it without the algorithm, and so without Ray Tune)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rltrainer.algorithms.dqn.dqn_learner import DQNModule
from rltrainer.core.distributions import Categorical
from rltrainer.core.models import QNetwork
from rltrainer.errors import ConfigError
from rltrainer.policy.policy import Policy


class DQNPolicy(Policy):
    """Q-values as the distribution's inputs: greedy is argmax Q; exploration picks the rest."""

    def make_dist_class(self) -> type:
        if not isinstance(self.action_space, spaces.Discrete):
            raise ConfigError(
                f"DQN needs a Discrete action space, got {self.action_space}; use SAC for Box actions"
            )
        return Categorical

    def make_model(self) -> DQNModule:
        """Q-values from an MLP, or from the ``hiddens`` head (and dueling value head) over a
        conv stack (image observations) or a custom model's outputs; masked (``MaskedQ``)
        when the observation holds an action mask."""
        encoder = self.make_feature_encoder()
        return DQNModule(self._masked(lambda: QNetwork(**self._q_kwargs(), make_encoder=encoder)))

    def _masked(self, make_q: Any) -> Any:
        """``make_q`` with masked Q-values when the observation holds an action mask."""
        if self._mask_columns is None:
            return make_q
        from rltrainer.core.action_masks import MaskedQ

        return lambda: MaskedQ(make_q(), self._mask_columns)

    def _q_kwargs(self) -> dict[str, Any]:
        cfg = self.config
        return dict(
            obs_size=self.preprocessor.size,
            num_actions=int(self.action_space.n),
            fcnet_hiddens=list(cfg.model.fcnet_hiddens),
            hiddens=list(cfg.hiddens),
            activation=cfg.model.fcnet_activation,
            dueling=cfg.dueling,
        )

    def torch_dist_inputs(self, flat_obs: torch.Tensor) -> torch.Tensor:
        return self.model(flat_obs)  # the online network's Q-values

    has_value_function = False

    def extra_fetches(self, flat_obs: np.ndarray, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {**super().extra_fetches(flat_obs, out), "q_values": out["action_dist_inputs"]}
