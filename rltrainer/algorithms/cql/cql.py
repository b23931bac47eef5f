"""CQL: SAC's off-policy training step with CQL's learner and policy (``cql_learner``,
``cql_policy``; the config is in ``cql_config``).

Trained from recorded data, ``.offline_data(input_=PATH, actions_in_input_normalized=True)``
makes every env runner's ``sample()`` return recorded rows, which the off-policy training step
adds to the replay buffer as it would sampled ones; ``training_intensity`` sets how many
gradient steps each row read buys. With ``input_="sampler"`` it is SAC with the CQL penalty.
"""

from __future__ import annotations

from rltrainer.algorithms.cql.cql_config import CQLConfig
from rltrainer.algorithms.cql.cql_learner import CQLLearner
from rltrainer.algorithms.cql.cql_policy import CQLPolicy
from rltrainer.algorithms.sac.sac import SAC


class CQL(SAC):
    """CQL: SAC's training step (replay of recorded or sampled rows) with CQL's losses."""

    config_class = CQLConfig
    learner_class = CQLLearner
    policy_class = CQLPolicy

    def setup(self, config: CQLConfig) -> None:
        super().setup(config)
        if not self.config.lagrangian:  # reported only with the Lagrangian
            self._last_stats.pop("alpha_prime_value", None)


__all__ = ["CQL", "CQLConfig", "CQLPolicy"]
