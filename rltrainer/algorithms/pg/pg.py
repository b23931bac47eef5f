"""Vanilla policy gradient: the training step (PPO's: sample, update, sync weights; the config
is in ``pg_config``)."""

from __future__ import annotations

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.pg.pg_config import PGConfig
from rltrainer.algorithms.pg.pg_learner import PGLearner
from rltrainer.algorithms.pg.pg_policy import PGPolicy
from rltrainer.algorithms.ppo.ppo import PPO


class PG(Algorithm):
    """Policy gradient (REINFORCE): sample a train batch, one gradient step, sync weights."""

    config_class = PGConfig
    learner_class = PGLearner
    policy_class = PGPolicy
    training_step = PPO.training_step


__all__ = ["PG", "PGConfig", "PGPolicy"]
