"""Asynchronous advantage actor-critic (Mnih et al. 2016), RLlib's A3C (config in ``a3c_config``).

Each remote env runner samples a fragment with the weights it was sent, computes the gradient
of A2C's loss on it with a learner of its own (``runner_gradient``) and returns only the
gradient; the driver applies each gradient as it arrives (one Adam step each, never waiting
for the slowest runner) and sends the new weights with that runner's next request. A gradient
may come from weights a few updates old: results report that lag (``gradient_lag_updates``).
Without remote runners it is A2C.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rltrainer.algorithms.a2c.a2c import A2C
from rltrainer.algorithms.a2c.a2c_learner import A2CLearner
from rltrainer.algorithms.a3c.a3c_config import A3CConfig
from rltrainer.core.learner import make_learner
from rltrainer.errors import WorkerError


class A3CLearner(A2CLearner):
    """A2C's learner, split in two: gradients (in the env runners) and their application (in
    the driver)."""

    STAT_KEYS = A3CConfig.STAT_KEYS

    def gradient(self, rollout: Any) -> tuple[np.ndarray | None, dict[str, float]]:
        """The clipped gradient of A2C's loss on one rollout, flat, and its loss terms
        (``None`` when the loss is not finite and ``on_nonfinite="skip_batch"``)."""
        batch, extra = self.on_learn_on_batch(self.build_batch([rollout]))
        data = type(batch)(*(None if column is None else self.to_tensor(column) for column in batch))
        self.flat_params.zero_grad()
        loss, terms = self.compute_loss(data)
        if not self.loss_is_finite(loss, lambda: self._named(terms)):
            return None, {**self._named(terms), **extra}
        loss.backward()
        stats = {**self._named(terms), "grad_gnorm": float(self.flat_params.grad.norm()), **extra}
        if self.config.grad_clip is not None:
            self.flat_params.clip_grad(self.config.grad_clip, self.config.grad_clip_by)
        return self.flat_params.grad.cpu().numpy().copy(), self.add_stats(stats, batch)

    def apply_gradient(self, gradient: np.ndarray, timestep: int) -> float:
        """One optimizer step along a gradient computed elsewhere; the learning rate used."""
        lr = self.set_lr_for(timestep)
        self.flat_params.grad.copy_(self.to_tensor(gradient))  # read-only from the object store
        self.optimizer.step()
        return lr


def runner_gradient(runner: Any, weights: dict[str, np.ndarray]) -> tuple[Any, list[Any], dict[str, Any]]:
    """In an env runner: sample a fragment with ``weights`` and return ``((gradient, stats,
    env steps), finished episodes, filter delta)`` (``EnvRunnerGroup.sample_async``'s form)."""
    learner = getattr(runner, "_a3c_learner", None)
    if learner is None:  # built on the first request, from the runner's own config and spaces
        spaces = (runner.observation_space, runner.action_space)
        learner = make_learner(A3CLearner, *spaces, runner.config, "cpu")
        runner._a3c_learner = learner
    runner.set_weights(weights)
    learner.set_weights(weights)
    rollout, episodes = runner.sample()
    learner.last_rollout = rollout  # for inspection (tests)
    gradient, stats = learner.gradient(rollout)
    return (gradient, stats, rollout.num_steps), episodes, runner.filter.pop_delta()


class A3C(A2C):
    """A3C: gradients computed in the env runners, applied by the driver as they arrive."""

    config_class = A3CConfig
    learner_class = A3CLearner

    def setup(self, config: Any) -> None:
        super().setup(config)
        self._weights_ref: Any = None
        self._num_updates = 0
        self._last_stats: dict[str, float] = {}

    def training_step(self) -> dict[str, float]:
        group = self.env_runner_group
        if not group.num_remote_workers():
            return super().training_step()  # A2C's synchronous step
        import ray

        cfg = self.config
        learner = self.learner_group.local_learner
        if self._weights_ref is None:
            self._weights_ref = ray.put(self._numpy_weights())
        with self.timed("sample"):
            call = (runner_gradient, self._weights_ref)
            results = group.sample_async(
                1, timeout=cfg.sample_timeout_s, tag=self._num_updates, call=call, refill=False
            )
        lags = []
        for (gradient, stats, steps), episodes, sent_at in results:
            self.count_samples([], episodes, steps=steps)
            self._last_stats = stats
            if gradient is None:  # a non-finite loss, skipped (on_nonfinite="skip_batch")
                continue
            with self.timed("learn"):
                stats["cur_lr"] = learner.apply_gradient(gradient, self.counters.timesteps_total)
            lags.append(self._num_updates - sent_at)
            self._num_updates += 1
            self.counters.num_env_steps_trained += steps
        if results:
            with self.timed("synch_weights"):
                weights = self._numpy_weights()
                self._weights_ref = ray.put(weights)
                group.local_worker().set_weights(weights)
        elif group.silent_s() > cfg.sample_timeout_s:
            raise WorkerError(
                f"no env runner returned a gradient within sample_timeout_s={cfg.sample_timeout_s:g}"
            )
        group.request_async(1, tag=self._num_updates, call=(runner_gradient, self._weights_ref))
        return {
            **self._last_stats,
            "num_gradient_updates": float(self._num_updates),
            "gradient_lag_updates": float(np.mean(lags)) if lags else float("nan"),
        }

    def _numpy_weights(self) -> dict[str, np.ndarray]:
        return {k: v.numpy() for k, v in self.learner_group.get_weights().items()}


__all__ = ["A3C", "A3CConfig"]
