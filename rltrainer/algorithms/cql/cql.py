"""CQL: SAC's policy and off-policy training step with CQL's learner (the config is in
``cql_config``).

Trained from recorded data, ``.offline_data(input_=PATH, actions_in_input_normalized=True)``
makes every env runner's ``sample()`` return recorded rows, which the off-policy training step
adds to the replay buffer as it would sampled ones; ``training_intensity`` sets how many
gradient steps each row read buys. With ``input_="sampler"`` it is SAC with the CQL penalty.
"""

from __future__ import annotations

import torch
from gymnasium import spaces
from torch import nn

from rltrainer.algorithms.cql.cql_config import CQLConfig
from rltrainer.algorithms.cql.cql_learner import CQLLearner
from rltrainer.algorithms.sac.sac import SAC, SACPolicy
from rltrainer.algorithms.sac.sac_learner import SACModule
from rltrainer.errors import ConfigError


class CQLPolicy(SACPolicy):
    """SAC's squashed-Gaussian actor and twin critics, for Box actions only; with
    ``lagrangian`` the module also holds ``log_alpha_prime`` (so checkpoints store it)."""

    def make_dist_class(self) -> type:
        if not isinstance(self.action_space, spaces.Box):
            raise ConfigError(
                f"CQL here needs a Box action space, got {self.action_space}; for discrete actions "
                "train from recorded data with DQN, BC or MARWIL"
            )
        return super().make_dist_class()

    def make_model(self) -> SACModule:
        module = super().make_model()
        if self.config.lagrangian:
            module.log_alpha_prime = nn.Parameter(torch.zeros((), dtype=torch.float32))  # alpha' = 1
        return module


class CQL(SAC):
    """CQL: SAC's training step (replay of recorded or sampled rows) with CQL's losses."""

    config_class = CQLConfig
    learner_class = CQLLearner
    policy_class = CQLPolicy

    def setup(self, config: CQLConfig) -> None:
        super().setup(config)
        if not self.config.lagrangian:  # reported only with the Lagrangian
            self._last_stats.pop("alpha_prime_value", None)


__all__ = ["CQL", "CQLConfig", "CQLPolicy"]
