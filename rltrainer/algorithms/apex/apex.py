"""Ape-X (Horgan et al. 2018, "Distributed Prioritized Experience Replay") for DQN and DDPG:
the off-policy training step with asynchronous env runners (the config is in ``apex_config``).

Each remote env runner keeps ``max_requests_in_flight_per_env_runner`` sample requests queued
(``EnvRunnerGroup.sample_async``) and explores with its own constant epsilon or noise scale
(``PerWorkerEpsilonGreedy`` / ``PerWorkerOrnsteinUhlenbeckNoise``: worker i of N uses
0.4 ** (1 + 7 (i - 1) / (N - 1))). The driver adds whatever finished to its prioritized replay
buffer, trains ``training_intensity`` replayed samples per sampled step, and broadcasts weights
every ``max_weight_sync_delay`` sampled env steps. Without remote runners it is the synchronous
off-policy step. The replay buffer is the driver's (one buffer of the whole capacity, no replay
actors, whatever ``num_replay_buffer_shards`` says).
"""

from __future__ import annotations

import logging
from typing import Any

from rltrainer.algorithms.apex.apex_config import ApexDDPGConfig, ApexDQNConfig
from rltrainer.algorithms.ddpg.ddpg import DDPG
from rltrainer.algorithms.dqn.dqn import DQN
from rltrainer.algorithms.dqn.off_policy import OffPolicyAlgorithm
from rltrainer.errors import WorkerError

logger = logging.getLogger(__name__)


class ApexSampling(OffPolicyAlgorithm):
    """The asynchronous sampling and weight broadcasts Ape-X adds to an off-policy algorithm."""

    def setup(self, config: Any) -> None:
        super().setup(config)
        shards = self.config.num_replay_buffer_shards
        if shards > 1:
            logger.warning(
                "num_replay_buffer_shards=%d: rltrainer's Ape-X keeps one replay buffer in "
                "the driver, holding the whole capacity (%s transitions) that RLlib splits across %d "
                "replay actors",
                shards,
                self.config.replay_buffer_config.get("capacity"),
                shards,
            )
        self._sampled_since_sync = 0

    def sample_for_replay(self) -> list[Any]:
        group = self.env_runner_group
        if not group.num_remote_workers():
            return super().sample_for_replay()
        cfg = self.config
        with self.timed("sample"):
            results = group.sample_async(
                cfg.max_requests_in_flight_per_env_runner, timeout=cfg.sample_timeout_s
            )
        if not results and group.silent_s() > cfg.sample_timeout_s:
            # Failed runners are replaced in the background; this is none coming back in time.
            raise WorkerError(
                f"no env runner finished a sample within sample_timeout_s={cfg.sample_timeout_s:g}"
            )
        rollouts = []
        for rollout, episodes, _ in results:
            self.count_samples([rollout], episodes)
            self._sampled_since_sync += rollout.num_steps
            rollouts.append(rollout)
        return rollouts

    def weights_due(self) -> bool:
        if not self.env_runner_group.num_remote_workers():
            return True
        if self._sampled_since_sync < self.config.max_weight_sync_delay:
            return False
        self._sampled_since_sync = 0
        return True


class ApexDQN(ApexSampling, DQN):
    """Ape-X DQN (RLlib's ``APEX``)."""

    config_class = ApexDQNConfig


class ApexDDPG(ApexSampling, DDPG):
    """Ape-X DDPG (RLlib's ``APEX_DDPG``)."""

    config_class = ApexDDPGConfig


__all__ = ["ApexDDPG", "ApexDDPGConfig", "ApexDQN", "ApexDQNConfig"]
