"""Synchronous advantage actor-critic: the training step (PPO's: sample, update, sync weights;
the config is in ``a2c_config``)."""

from __future__ import annotations

from rltrainer.algorithms.a2c.a2c_config import A2CConfig
from rltrainer.algorithms.a2c.a2c_learner import A2CLearner
from rltrainer.algorithms.a2c.a2c_policy import A2CPolicy
from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.ppo.ppo import PPO


class A2C(Algorithm):
    """A2C: sample a train batch with the env runners, one gradient step (accumulated over
    ``microbatch_size`` pieces), sync weights."""

    config_class = A2CConfig
    learner_class = A2CLearner
    policy_class = A2CPolicy
    training_step = PPO.training_step


__all__ = ["A2C", "A2CConfig", "A2CPolicy"]
