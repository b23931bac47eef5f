"""APPO: IMPALA's asynchronous training with PPO's clipped surrogate (the config is in
``appo_config``, the loss and target network in ``appo_learner``)."""

from __future__ import annotations

from rltrainer.algorithms.appo.appo_config import APPOConfig
from rltrainer.algorithms.appo.appo_learner import APPOLearner
from rltrainer.algorithms.impala.impala import IMPALA


class APPO(IMPALA):
    """Asynchronous PPO (IMPACT, Luo et al. 2020)."""

    config_class = APPOConfig
    learner_class = APPOLearner


__all__ = ["APPO", "APPOConfig"]
