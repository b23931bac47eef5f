"""Proximal Policy Optimization: the training step (the config is in ``ppo_config``)."""

from __future__ import annotations

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.driver_weights import act_with_learner_modules
from rltrainer.algorithms.ppo.ppo_config import PPOConfig
from rltrainer.algorithms.ppo.ppo_learner import PPOLearner


class PPO(Algorithm):
    """PPO: sample with the env runners, run minibatch SGD epochs, sync weights."""

    config_class = PPOConfig
    learner_class = PPOLearner

    def training_step(self) -> dict[str, float]:
        rollouts = self.sample_rollouts()  # 1. sample
        with self.timed("learn"):  # 2. update
            stats = self.learner_group.update(rollouts, timestep=self.counters.timesteps_total)
        if not act_with_learner_modules(self):  # 3. sync weights (none to copy where shared)
            with self.timed("synch_weights"):
                self.env_runner_group.sync_weights(self.learner_group.get_weights())
        self.counters.num_env_steps_trained += sum(rollout.num_steps for rollout in rollouts)
        return stats


__all__ = ["PPO", "PPOConfig"]
