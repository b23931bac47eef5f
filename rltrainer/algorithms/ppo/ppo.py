"""Proximal Policy Optimization: the training step (the config is in ``ppo_config``)."""

from __future__ import annotations

from typing import Any

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.driver_weights import learner_modules_shareable
from rltrainer.algorithms.ppo.ppo_config import PPOConfig
from rltrainer.algorithms.ppo.ppo_learner import PPOLearner


class PPO(Algorithm):
    """PPO: sample with the env runners, run minibatch SGD epochs, sync weights."""

    config_class = PPOConfig
    learner_class = PPOLearner

    def setup(self, config: Any) -> None:
        super().setup(config)
        # One policy sampled and trained in the driver on the CPU: the driver's env runner acts
        # with the learner's module itself, so no weights are copied after each update.
        self._shared_module = not self._multi_agent and learner_modules_shareable(self)
        if self._shared_module:
            self.get_policy().share_model(self.learner_group.local_learner.module)

    def training_step(self) -> dict[str, float]:
        rollouts = self.sample_rollouts()  # 1. sample
        with self.timed("learn"):  # 2. update
            stats = self.learner_group.update(rollouts, timestep=self.counters.timesteps_total)
        if not self._shared_module:
            with self.timed("synch_weights"):  # 3. sync weights
                self.env_runner_group.sync_weights(self.learner_group.get_weights())
        self.counters.num_env_steps_trained += sum(rollout.num_steps for rollout in rollouts)
        return stats


__all__ = ["PPO", "PPOConfig"]
