"""Deep Q-Networks: the algorithm (the policy is in ``dqn_policy``, the config in ``dqn_config``;
the training step is the off-policy one).

Double Q (van Hasselt et al. 2016), dueling heads (Wang et al. 2016), n-step returns,
prioritized replay (Schaul et al. 2016), hard or soft target updates, Huber loss.
"""

from __future__ import annotations

from rltrainer.algorithms.dqn.dqn_config import DQNConfig
from rltrainer.algorithms.dqn.dqn_learner import DQNLearner
from rltrainer.algorithms.dqn.dqn_policy import DQNPolicy
from rltrainer.algorithms.dqn.off_policy import OffPolicyAlgorithm


class DQN(OffPolicyAlgorithm):
    """DQN: sample into the replay buffer, replay batches through the learner, sync weights."""

    config_class = DQNConfig
    learner_class = DQNLearner
    policy_class = DQNPolicy


__all__ = ["DQN", "DQNConfig", "DQNPolicy"]
