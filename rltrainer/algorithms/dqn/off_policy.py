"""What DQN and SAC share: the off-policy training step (their replay settings: ``off_policy_config``).

One training step: sample one round from the env runners and add it to the replay buffer
as n-step transitions; once ``num_steps_sampled_before_learning_starts`` env steps were
sampled, take as many gradient steps on replayed batches as ``training_intensity`` asks
for (updating priorities); then sync the acting weights to the env runners.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.dqn.off_policy_config import OffPolicyConfig
from rltrainer.checkpoints import Checkpoint
from rltrainer.errors import CheckpointError
from rltrainer.utils.replay_buffers import (
    PrioritizedReplayBuffer,
    ReplayBuffer,
    make_replay_buffer,
    transitions_from_rollout,
)

BUFFER_FILE = "replay_buffer.npz"


class OffPolicyAlgorithm(Algorithm):
    """Replay-based training step; subclasses set the learner (the losses) and policy."""

    def setup(self, config: Any) -> None:
        super().setup(config)
        cfg = self.config
        policy = self.get_policy()
        box = isinstance(self.action_space, spaces.Box)
        self.replay_buffer: ReplayBuffer = make_replay_buffer(
            cfg.replay_buffer_config,
            obs_shape=(policy.preprocessor.size,),
            # uint8 frames stay uint8 in the buffer (a MeanStdFilter's output is float32)
            obs_dtype=policy.preprocessor.dtype if cfg.observation_filter == "NoFilter" else np.float32,
            action_shape=self.action_space.shape if box else (),
            action_dtype=np.float32 if box else np.int64,
            seed=cfg.seed,
        )
        self._update_credit = 0.0  # fractional gradient steps owed under training_intensity
        # Sampling and training both in the driver on the CPU: the local env runner acts with the
        # learner's module itself (numpy views of its parameters), so nothing is copied per step.
        learner = self.learner_group.local_learner
        self._shared_module = (
            cfg.num_env_runners == 0 and cfg.num_learners == 0 and learner.device.type == "cpu"
        )
        if self._shared_module:
            policy.share_model(learner.module)
        self._last_stats: dict[str, float] = {k: float("nan") for k in self.learner_class.STAT_KEYS}

    def training_step(self) -> dict[str, float]:
        cfg = self.config
        self._sync_global_timestep()
        # 1. sample one round and store it as n-step transitions
        rollouts = self.sample_for_replay()
        sampled = 0
        for rollout in rollouts:
            self.replay_buffer.add(transitions_from_rollout(rollout, cfg.n_step, cfg.gamma))
            sampled += rollout.num_steps
        if self.counters.timesteps_total < cfg.num_steps_sampled_before_learning_starts:
            return self._last_stats
        # 2. update on replayed batches
        if cfg.training_intensity is None:
            num_updates = 1
        else:
            self._update_credit += sampled * cfg.training_intensity / cfg.train_batch_size
            num_updates = int(self._update_credit)
            self._update_credit -= num_updates
        prioritized = isinstance(self.replay_buffer, PrioritizedReplayBuffer)
        learner = self.learner_group.local_learner
        with self.timed("learn"):
            for _ in range(num_updates):
                batch = self.replay_buffer.sample(cfg.train_batch_size)
                self._last_stats = self.learner_group.update(batch, timestep=self.counters.timesteps_total)
                if prioritized:
                    self.replay_buffer.update_priorities(batch.indices, learner.last_td_errors)
                self.counters.num_env_steps_trained += cfg.train_batch_size
        # 3. sync the acting weights
        if num_updates and not self._shared_module and self.weights_due():
            with self.timed("synch_weights"):
                self.env_runner_group.sync_weights(learner.get_policy_weights())
        return self._last_stats

    def sample_for_replay(self) -> list[Any]:
        """New rollouts for the replay buffer: one round of every env runner (Ape-X overrides
        it with asynchronous sampling)."""
        return self.sample_rollouts(min_steps=1)

    def weights_due(self) -> bool:
        """Whether the env runners get the new weights after this step's updates (always here)."""
        return True

    def _sync_global_timestep(self) -> None:
        """Exploration schedules follow the algorithm's env steps, in every env runner."""
        timestep = self.counters.timesteps_total
        self.env_runner_group.local_worker().set_global_timestep(timestep)
        for runner in self.env_runner_group.remote_workers:
            if runner is not None:  # fire and forget: it runs before the runner's next sample
                runner.set_global_timestep.remote(timestep)

    # --- the replay buffer in checkpoints (checkpointing(store_buffer_in_checkpoints=True)) ---
    def checkpoint_arrays(self) -> dict[str, dict[str, np.ndarray]]:
        if not self.config.store_buffer_in_checkpoints:
            return {}
        state = self.replay_buffer.get_state()
        return {BUFFER_FILE: {k: np.asarray(v) for k, v in state.items()}}

    def restore_arrays(self, checkpoint: Checkpoint) -> None:
        if BUFFER_FILE not in checkpoint.metadata["files"] or not self.config.store_buffer_in_checkpoints:
            return
        try:
            self.replay_buffer.set_state(checkpoint.arrays(BUFFER_FILE))
        except (KeyError, ValueError) as err:
            raise CheckpointError(
                f"checkpoint {checkpoint.source!r}: cannot restore the replay buffer ({err})"
            ) from None


__all__ = ["BUFFER_FILE", "OffPolicyAlgorithm", "OffPolicyConfig"]
