"""CQL's policy: SAC's, for Box actions, with the Lagrangian's parameter (its own module, so
that env runners and learners load it without the algorithm, and so without Ray Tune)."""

from __future__ import annotations

import torch
from gymnasium import spaces
from torch import nn

from rltrainer.algorithms.sac.sac_learner import SACModule
from rltrainer.algorithms.sac.sac_policy import SACPolicy
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
