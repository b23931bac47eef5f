"""Synchronous advantage actor-critic: the training step (PPO's: sample, update, sync weights;
the config is in ``a2c_config``)."""

from __future__ import annotations

from rltrainer.algorithms.a2c.a2c_config import A2CConfig
from rltrainer.algorithms.a2c.a2c_learner import A2CLearner
from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.ppo.ppo import PPO
from rltrainer.policy import Policy


class A2CPolicy(Policy):
    """PPO's actor-critic network; without ``use_critic`` its value head is not used."""

    @property
    def has_value_function(self) -> bool:  # type: ignore[override]
        return bool(self.config.use_critic)


class A2C(Algorithm):
    """A2C: sample a train batch with the env runners, one gradient step (accumulated over
    ``microbatch_size`` pieces), sync weights."""

    config_class = A2CConfig
    learner_class = A2CLearner
    policy_class = A2CPolicy
    training_step = PPO.training_step


__all__ = ["A2C", "A2CConfig", "A2CPolicy"]
