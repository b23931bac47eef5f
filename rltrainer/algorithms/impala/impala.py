"""IMPALA: asynchronous sampling, a learner queue, V-trace (the config is in ``impala_config``).

The training step never waits for the slowest env runner: every remote runner keeps
``max_requests_in_flight_per_env_runner`` sample requests queued (``EnvRunnerGroup.sample_async``),
the driver collects whatever finished, cuts it into train batches for the learner queue and
trains on the oldest batch while the runners go on sampling. Weights go out every
``broadcast_interval`` updates and apply to the requests sent after them; each rollout
remembers which weights it was sampled with, so results report the policy lag. Without remote
runners the driver samples one train batch per update (synchronous, as in RLlib).
"""

from __future__ import annotations

import random
import time
from collections import deque
from typing import Any, NamedTuple

import numpy as np

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.impala.impala_config import IMPALAConfig
from rltrainer.algorithms.impala.impala_learner import IMPALALearner
from rltrainer.env.env_runner import Rollout
from rltrainer.errors import WorkerError


class TrainBatch(NamedTuple):
    """Rollouts for one learner update, and for each the env steps the learner had trained on
    when the weights it was sampled with were made (its policy lag follows)."""

    rollouts: list[Rollout]
    weights_trained_at: list[int]

    @property
    def num_steps(self) -> int:
        return sum(rollout.num_steps for rollout in self.rollouts)


class ReplaySlots:
    """IMPALA's optional replay: the last ``num_slots`` rollouts; each new rollout brings
    ``proportion`` stored ones on average (the integer part always, the rest by chance)."""

    def __init__(self, num_slots: int, proportion: float, seed: int | None) -> None:
        self.slots: deque[tuple[Rollout, int]] = deque(maxlen=max(1, num_slots))
        self.proportion = proportion
        self.rng = random.Random(seed)

    def mix_in(self, rollout: Rollout, tag: int) -> list[tuple[Rollout, int]]:
        """The new rollout, then the stored ones replayed with it; stores the new one."""
        out = [(rollout, tag)]
        if self.proportion > 0 and self.slots:
            count = int(self.proportion) + (self.rng.random() < self.proportion % 1)
            out += [self.slots[self.rng.randrange(len(self.slots))] for _ in range(count)]
        if self.proportion > 0:
            self.slots.append((rollout, tag))
        return out


class MinibatchBuffer:
    """RLlib's minibatch buffer: ``size`` slots taken in turn, each train batch used for
    ``num_passes`` updates before the next one from the queue takes its slot."""

    def __init__(self, size: int, num_passes: int) -> None:
        self.slots: list[TrainBatch | None] = [None] * size
        self.passes_left = [0] * size
        self.index = 0
        self.num_passes = num_passes

    def needs_batch(self) -> bool:
        """Whether the next update takes a new batch from the queue (its slot is spent)."""
        return self.passes_left[self.index] == 0

    def next(self, queue: deque[TrainBatch]) -> TrainBatch | None:
        """The batch for the next update (``None`` when the slot is spent and the queue empty)."""
        i = self.index
        if self.passes_left[i] == 0:
            if not queue:
                return None
            self.slots[i], self.passes_left[i] = queue.popleft(), self.num_passes
        self.passes_left[i] -= 1
        self.index = (i + 1) % len(self.slots)
        return self.slots[i]


class IMPALA(Algorithm):
    """IMPALA (Espeholt et al. 2018): asynchronous env runners, a learner queue, V-trace."""

    config_class = IMPALAConfig
    learner_class = IMPALALearner

    def setup(self, config: Any) -> None:
        super().setup(config)
        cfg = self.config
        self._queue: deque[TrainBatch] = deque()
        self._pending: list[tuple[Rollout, int]] = []  # rollouts not yet a full train batch
        self._pending_steps = 0
        self._replay = ReplaySlots(cfg.replay_buffer_num_slots, cfg.replay_proportion, cfg.seed)
        self._buffer = MinibatchBuffer(cfg.minibatch_buffer_size, cfg.num_epochs)
        self._updates_since_broadcast = 0
        self._num_updates = 0
        self._weights_trained_at = 0  # env steps trained when the runners' weights were made
        self._last_stats: dict[str, float] = {}

    def restore_arrays(self, checkpoint: Any) -> None:
        """After a restore: batches sampled before it are dropped, and the restored weights
        (just sent to the runners) are the ones the policy lag counts from."""
        super().restore_arrays(checkpoint)
        self._queue.clear()
        self._pending, self._pending_steps = [], 0
        self._weights_trained_at = self.counters.num_env_steps_trained

    # --- sampling ------------------------------------------------------------------------
    def _collect(self) -> None:
        """Fill the learner queue with what the env runners finished; waits (at most
        ``learner_queue_timeout``) only while the learner has nothing to train on."""
        cfg = self.config
        if not self.env_runner_group.num_remote_workers():
            if not self._queue and self._buffer.needs_batch():
                self._add(self.sample_rollouts(), self._weights_trained_at)
            return
        deadline = time.monotonic() + cfg.learner_queue_timeout
        while len(self._queue) < cfg.learner_queue_size:
            waiting = not self._queue and self._buffer.needs_batch()
            with self.timed("sample"):
                results = self.env_runner_group.sample_async(
                    cfg.max_requests_in_flight_per_env_runner,
                    timeout=max(0.0, deadline - time.monotonic()) if waiting else 0.0,
                    tag=self._weights_trained_at,
                )
            for rollout, episodes, weights_trained_at in results:
                self.count_samples([rollout], episodes)
                self._add([rollout], weights_trained_at)
            if not waiting or self._queue:
                return
            if time.monotonic() >= deadline:
                raise WorkerError(
                    f"no train batch arrived within learner_queue_timeout={cfg.learner_queue_timeout:g} s "
                    f"(healthy env runners: {len(self.env_runner_group.live_remote_ids())}); raise it for "
                    "slow envs"
                )

    def _add(self, rollouts: list[Rollout], weights_trained_at: int) -> None:
        """Mix replayed rollouts in with new ones, and queue each full train batch."""
        for rollout in rollouts:
            for item in self._replay.mix_in(rollout, weights_trained_at):
                self._pending.append(item)
                self._pending_steps += item[0].num_steps
        if self._pending_steps >= self.config.train_batch_size:
            batch = TrainBatch([r for r, _ in self._pending], [v for _, v in self._pending])
            self._queue.append(batch)
            self._pending, self._pending_steps = [], 0

    # --- the training step -----------------------------------------------------------------
    def training_step(self) -> dict[str, float]:
        self._collect()
        batch = self._buffer.next(self._queue)
        if batch is None:  # only when the driver samples and a batch is not full yet
            return self._last_stats
        with self.timed("learn"):
            start = time.perf_counter()
            stats = self.learner_group.update(batch.rollouts, timestep=self.counters.timesteps_total)
            learn_s = time.perf_counter() - start
        # The policy lag: what the learner had trained on since each rollout's weights were made.
        lags = [self.counters.num_env_steps_trained - made for made in batch.weights_trained_at]
        trained = batch.num_steps
        self.counters.num_env_steps_trained += trained
        self._num_updates += 1
        self._updates_since_broadcast += 1
        if self._updates_since_broadcast >= self.config.broadcast_interval:
            with self.timed("synch_weights"):
                self.env_runner_group.sync_weights(self.learner_group.get_weights())
            self._updates_since_broadcast = 0
            self._weights_trained_at = self.counters.num_env_steps_trained
        self._last_stats = {
            **stats,
            "learner_queue_size": float(len(self._queue)),
            "policy_lag_env_steps": float(np.mean(lags)),
            "num_env_steps_trained_per_s": trained / max(learn_s, 1e-9),
            "num_learner_updates": float(self._num_updates),
        }
        return self._last_stats


Impala = IMPALA  # RLlib's older name
ImpalaConfig = IMPALAConfig

__all__ = ["IMPALA", "IMPALAConfig", "Impala", "ImpalaConfig"]
