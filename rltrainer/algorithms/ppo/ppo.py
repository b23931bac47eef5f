"""Proximal Policy Optimization: the training step (the config is in ``ppo_config``)."""

from __future__ import annotations

from typing import Any

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.driver_weights import driver_policies, learner_groups, learner_modules_shareable
from rltrainer.algorithms.ppo.ppo_config import PPOConfig
from rltrainer.algorithms.ppo.ppo_learner import PPOLearner


class PPO(Algorithm):
    """PPO: sample with the env runners, run minibatch SGD epochs, sync weights."""

    config_class = PPOConfig
    learner_class = PPOLearner

    def setup(self, config: Any) -> None:
        super().setup(config)
        # Sampled and trained in the driver on the CPU: the driver's env runner acts with the
        # learners' modules themselves, so no weights are copied after each update.
        self._shared_modules = learner_modules_shareable(self)
        if self._shared_modules:
            self._share_learner_modules()

    def _share_learner_modules(self) -> None:
        """Each learning policy of the driver's env runner acts with its learner's module (a
        policy added since the last step, or a learner rebuilt, is shared now)."""
        policies = driver_policies(self)
        for pid, group in learner_groups(self).items():
            module = group.local_learner.module
            if pid in policies and policies[pid].model is not module:
                policies[pid].share_model(module)

    def training_step(self) -> dict[str, float]:
        rollouts = self.sample_rollouts()  # 1. sample
        with self.timed("learn"):  # 2. update
            stats = self.learner_group.update(rollouts, timestep=self.counters.timesteps_total)
        if self._shared_modules:
            self._share_learner_modules()
            if self._multi_agent:  # the stacked copies of the policies' parameters are stale
                self.env_runner_group.local_worker().weights_written_in_place()
        else:
            with self.timed("synch_weights"):  # 3. sync weights
                self.env_runner_group.sync_weights(self.learner_group.get_weights())
        self.counters.num_env_steps_trained += sum(rollout.num_steps for rollout in rollouts)
        return stats


__all__ = ["PPO", "PPOConfig"]
