"""DDPG and TD3: policy and algorithms (the configs are in ``ddpg_config``; the training step
is the off-policy one DQN and SAC use).

The actor is deterministic, ``tanh`` of an MLP (or of an encoder's features) in the normalized
[-1, 1] action space; exploration adds the noise (Ornstein-Uhlenbeck for DDPG, Gaussian for
TD3, both from ``exploration_config``), and the env gets the actions rescaled to its bounds.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces

from rltrainer.algorithms.ddpg.ddpg_config import DDPGConfig, TD3Config
from rltrainer.algorithms.ddpg.ddpg_learner import DDPGLearner, DDPGModule
from rltrainer.algorithms.dqn.off_policy import OffPolicyAlgorithm
from rltrainer.core.distributions import SquashedDeterministic
from rltrainer.errors import ConfigError
from rltrainer.policy import Policy


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


class DDPG(OffPolicyAlgorithm):
    """DDPG: sample with exploration noise into the replay buffer, replay batches through the
    learner, sync the actor."""

    config_class = DDPGConfig
    learner_class = DDPGLearner
    policy_class = DDPGPolicy


class TD3(DDPG):
    """TD3: DDPG with twin critics, delayed actor updates and target policy smoothing."""

    config_class = TD3Config


__all__ = ["DDPG", "TD3", "DDPGConfig", "DDPGPolicy", "TD3Config"]
