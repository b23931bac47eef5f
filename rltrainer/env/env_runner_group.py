"""``EnvRunnerGroup`` (``algo.workers``): the local env runner and, later, remote ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rltrainer.env.env_runner import EnvRunner, EpisodeStats, Rollout


class EnvRunnerGroup:
    """All env runners of an algorithm; RLlib's ``WorkerSet`` API over them."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self._local = EnvRunner(config, worker_index=0, num_workers=config.num_env_runners)

    def local_worker(self) -> EnvRunner:
        """The env runner in the driver process (samples when ``num_env_runners=0``)."""
        return self._local

    local_env_runner = property(local_worker)

    def healthy_env_runner_ids(self) -> list[int]:
        return [0]

    def sample(self, min_steps: int) -> tuple[list[Rollout], list[EpisodeStats]]:
        """Enough sample rounds for ``min_steps`` env steps (one round with the "auto" fragment)."""
        per_round = self.config.get_rollout_fragment_length() * self.config.num_envs_per_env_runner
        rollouts, episodes = [], []
        for _ in range(max(1, -(-min_steps // per_round))):
            rollout, new_episodes = self._local.sample()
            rollouts.append(rollout)
            episodes.extend(new_episodes)
        return rollouts, episodes

    def sync_weights(self, weights: dict[str, Any]) -> None:
        """Send the learner's weights to every env runner."""
        self._local.set_weights(weights)

    def foreach_worker(self, fn: Callable[[EnvRunner], Any], local_worker: bool = True) -> list[Any]:
        """``fn(runner)`` for each env runner, results in worker-index order."""
        return [fn(self._local)] if local_worker else []

    def foreach_worker_with_index(
        self, fn: Callable[[EnvRunner, int], Any], local_worker: bool = True
    ) -> list[Any]:
        """``fn(runner, worker_index)`` for each env runner."""
        return [fn(self._local, 0)] if local_worker else []

    def foreach_env(self, fn: Callable[[Any], Any]) -> list[list[Any]]:
        """``fn(env)`` for every sub-env of every runner; one list per runner."""
        return self.foreach_worker(lambda runner: runner.foreach_env(fn))

    def stop(self) -> None:
        self._local.stop()
