"""MARWIL and BC: the training step (PPO's: read or sample a batch, update, sync weights)."""

from __future__ import annotations

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.marwil.marwil_config import BCConfig, MARWILConfig
from rltrainer.algorithms.marwil.marwil_learner import MARWILLearner
from rltrainer.algorithms.ppo.ppo import PPO


class MARWIL(Algorithm):
    """Monotonic advantage re-weighted imitation learning from recorded (or sampled) batches."""

    config_class = MARWILConfig
    learner_class = MARWILLearner
    training_step = PPO.training_step


class BC(MARWIL):
    """Behaviour cloning: MARWIL with ``beta=0``."""

    config_class = BCConfig


__all__ = ["BC", "MARWIL", "BCConfig", "MARWILConfig"]
