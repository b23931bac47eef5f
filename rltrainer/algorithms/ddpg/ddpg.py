"""DDPG and TD3: the algorithms (the policy is in ``ddpg_policy``, the configs in ``ddpg_config``;
the training step is the off-policy one DQN and SAC use).

The actor is deterministic, ``tanh`` of an MLP (or of an encoder's features) in the normalized
[-1, 1] action space; exploration adds the noise (Ornstein-Uhlenbeck for DDPG, Gaussian for
TD3, both from ``exploration_config``), and the env gets the actions rescaled to its bounds.
"""

from __future__ import annotations

from rltrainer.algorithms.ddpg.ddpg_config import DDPGConfig, TD3Config
from rltrainer.algorithms.ddpg.ddpg_learner import DDPGLearner
from rltrainer.algorithms.ddpg.ddpg_policy import DDPGPolicy
from rltrainer.algorithms.dqn.off_policy import OffPolicyAlgorithm


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
