"""Soft Actor-Critic: the algorithm (the policy is in ``sac_policy``, the config in ``sac_config``;
the training step is the off-policy one).

Box actions use a tanh-squashed Gaussian actor, Discrete actions a categorical one; both with
twin Q critics, Polyak-averaged targets and automatic entropy tuning.
"""

from __future__ import annotations

from rltrainer.algorithms.dqn.off_policy import OffPolicyAlgorithm
from rltrainer.algorithms.sac.sac_config import SACConfig
from rltrainer.algorithms.sac.sac_learner import SACLearner
from rltrainer.algorithms.sac.sac_policy import SACPolicy


class SAC(OffPolicyAlgorithm):
    """SAC: sample into the replay buffer, replay batches through the learner, sync the actor."""

    config_class = SACConfig
    learner_class = SACLearner
    policy_class = SACPolicy


__all__ = ["SAC", "SACConfig", "SACPolicy"]
