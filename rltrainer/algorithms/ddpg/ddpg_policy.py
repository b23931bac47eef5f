"""DDPG's and TD3's policy: the deterministic tanh actor and the critics (its own module, so
that env runners and learners load it without the algorithm, and so without Ray Tune)."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces

from rltrainer.algorithms.ddpg.ddpg_learner import DDPGModule
from rltrainer.core.distributions import SquashedDeterministic
from rltrainer.errors import ConfigError
from rltrainer.policy.policy import Policy


class DDPGPolicy(Policy):
    """The deterministic actor over a bounded 1-D Box action space."""

    has_value_function = False

    def make_dist_class(self) -> type:
        space, name = self.action_space, self.config.ALGORITHM
        if not (isinstance(space, spaces.Box) and len(space.shape) == 1):
            raise ConfigError(
                f"{name} needs a 1-D Box action space (continuous actions), got {space}; use DQN, "
                "PPO or SAC for discrete actions"
            )
        if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
            raise ConfigError(f"{name}'s tanh actor needs finite action bounds, got {space}")
        if not self.config.normalize_actions:
            raise ConfigError(f"{name}'s tanh actor acts in [-1, 1]: keep normalize_actions=True")
        return SquashedDeterministic

    def make_model(self) -> DDPGModule:
        """The actor and critics: MLPs (``actor_hiddens``, ``critic_hiddens``) over the flat
        observation, or over their own encoder each: a conv stack for images, ``ComplexEncoder``
        for Dict/Tuple spaces holding images, or a custom model's outputs (as SAC's)."""
        if self._mask_columns is not None:
            raise ConfigError(f"{self.config.ALGORITHM} acts in a Box space: action masks do not apply")
        return DDPGModule(
            obs_size=self.preprocessor.size,
            action_size=int(self.action_space.shape[0]),
            config=self.config,
            make_encoder=self.make_feature_encoder(),
        )

    def torch_dist_inputs(self, flat_obs: torch.Tensor) -> torch.Tensor:
        return self.model.pi(flat_obs)  # the actor's, before tanh
