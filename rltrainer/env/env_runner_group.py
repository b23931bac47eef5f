"""``EnvRunnerGroup`` (``algo.workers``): the local env runner plus remote ones as Ray actors.

With ``num_env_runners=0`` the local runner samples in this process and Ray is never
touched. With ``num_env_runners >= 1`` that many ``EnvRunner`` actors sample in parallel,
each pinned to its bundle of the algorithm's placement group; the local runner then only
serves inference (``compute_single_action``) and holds the global observation filter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from rltrainer.core.cluster import Placement, env_runner_bundle
from rltrainer.env.env_runner import EnvRunner, EpisodeStats, Rollout
from rltrainer.env.registry import registered_creators
from rltrainer.errors import WorkerError

logger = logging.getLogger(__name__)


class EnvRunnerGroup:
    """All env runners of an algorithm; RLlib's ``WorkerSet`` API over them."""

    def __init__(self, config: Any, placement: Placement | None = None) -> None:
        self.config = config
        self._local = EnvRunner(config, worker_index=0, num_workers=config.num_env_runners)
        self._remote: list[Any] = []
        if config.num_env_runners > 0:
            if placement is None:
                raise ValueError("remote env runners need the algorithm's placement group")
            self._remote = [self._create_actor(i, placement) for i in range(config.num_env_runners)]

    def _create_actor(self, index: int, placement: Placement) -> Any:
        import ray

        bundle = env_runner_bundle(self.config)
        remote_class = ray.remote(EnvRunner)
        return remote_class.options(
            num_cpus=bundle.get("CPU", 0),
            num_gpus=bundle.get("GPU", 0),
            resources={k: v for k, v in bundle.items() if k not in ("CPU", "GPU")},
            scheduling_strategy=placement.scheduling(placement.env_runner_bundle(index)),
            name=None,
        ).remote(
            self.config,
            worker_index=index + 1,
            num_workers=self.config.num_env_runners,
            remote=True,
            env_creators=registered_creators(),
        )

    # --- access ---------------------------------------------------------------------
    def local_worker(self) -> EnvRunner:
        """The env runner in the driver process (samples when ``num_env_runners=0``)."""
        return self._local

    local_env_runner = property(local_worker)

    @property
    def remote_workers(self) -> list[Any]:
        """The env-runner actor handles (empty with ``num_env_runners=0``)."""
        return list(self._remote)

    def num_remote_workers(self) -> int:
        return len(self._remote)

    def healthy_env_runner_ids(self) -> list[int]:
        return list(range(1, len(self._remote) + 1)) if self._remote else [0]

    # --- sampling -------------------------------------------------------------------
    def sample(self, min_steps: int) -> tuple[list[Rollout], list[EpisodeStats]]:
        """Sample rounds (all runners in parallel) until they hold ``min_steps`` env steps.

        One round suffices with ``rollout_fragment_length="auto"``.
        """
        runners = max(1, len(self._remote))
        per_round = self.config.get_rollout_fragment_length() * self.config.num_envs_per_env_runner * runners
        rollouts: list[Rollout] = []
        episodes: list[EpisodeStats] = []
        for _ in range(max(1, -(-min_steps // per_round))):
            if not self._remote:
                rollout, new_episodes = self._local.sample()
                rollouts.append(rollout)
                episodes.extend(new_episodes)
                continue
            results = self._get(
                [runner.sample_with_filter_delta.remote() for runner in self._remote], "sample"
            )
            for rollout, new_episodes, delta in results:
                rollouts.append(rollout)
                episodes.extend(new_episodes)
                self._local.filter.apply_delta(delta)
            self._broadcast_filter()
        return rollouts, episodes

    def _broadcast_filter(self) -> None:
        state = self._local.get_filter_state()
        if state and self._remote:  # ray.put would start Ray: never without remote runners
            import ray

            ref = ray.put(state)
            for runner in self._remote:
                runner.set_filter_state.remote(ref)

    def sync_weights(self, weights: dict[str, Any]) -> None:
        """Send the learner's weights to every env runner: one ``ray.put``, one reference each."""
        self._local.set_weights(weights)
        if self._remote:
            import ray

            ref = ray.put({name: np.asarray(value) for name, value in weights.items()})
            for runner in self._remote:
                runner.set_weights.remote(ref)

    def set_filter_state(self, state: dict[str, np.ndarray]) -> None:
        self._local.set_filter_state(state)
        self._broadcast_filter()

    # --- RLlib's WorkerSet helpers ----------------------------------------------------
    def foreach_worker(self, fn: Callable[[EnvRunner], Any], local_worker: bool = True) -> list[Any]:
        """``fn(runner)`` for each env runner (the function is shipped to the actors)."""
        return self.foreach_worker_with_index(lambda runner, _index: fn(runner), local_worker)

    def foreach_worker_with_index(
        self, fn: Callable[[EnvRunner, int], Any], local_worker: bool = True
    ) -> list[Any]:
        """``fn(runner, worker_index)`` for each env runner; the local one has index 0."""
        results = [fn(self._local, 0)] if local_worker else []
        refs = [runner.apply.remote(fn, index + 1) for index, runner in enumerate(self._remote)]
        return results + self._get(refs, "foreach_worker") if refs else results

    def foreach_env(self, fn: Callable[[Any], Any]) -> list[list[Any]]:
        """``fn(env)`` for every sub-env of every runner; one list per runner."""
        return self.foreach_worker(lambda runner: runner.foreach_env(fn))

    def stop(self) -> None:
        self._local.stop()
        if self._remote:
            import ray

            for runner in self._remote:
                ray.kill(runner)
            self._remote = []

    def _get(self, refs: list[Any], what: str) -> list[Any]:
        """Results of remote calls; a dead or silent actor becomes a ``WorkerError`` naming it."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return ray.get(refs, timeout=self.config.sample_timeout_s)
        except GetTimeoutError:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            silent = [i + 1 for i, ref in enumerate(refs) if ref not in ready]
            raise WorkerError(
                f"env runner(s) {silent} did not finish {what} within sample_timeout_s="
                f"{self.config.sample_timeout_s}"
            ) from None
        except RayActorError as err:
            dead = [i + 1 for i, ref in enumerate(refs) if _failed(ref)]
            cause = str(err).strip().splitlines()[0]
            raise WorkerError(f"env runner(s) {dead or '?'} died during {what}: {cause}") from None


def _failed(ref: Any) -> bool:
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    try:
        ray.get(ref, timeout=0)
    except RayActorError:
        return True
    except GetTimeoutError:
        return False
    return False
