"""Evaluation during training: what ``Algorithm.evaluate()`` runs (RLlib's ``evaluate``).

Where: with ``evaluation_num_env_runners=0``, one env runner in the driver. Otherwise that
many remote env runners: an ``EnvRunnerGroup`` built from the evaluation config
(``evaluation_config`` applied), pinned to placement-group bundles after the training
runners', with worker indices (hence env seeds) after theirs. A remote evaluation runner
that dies, raises or misses ``evaluation_sample_timeout_s`` is restarted, dropped or fatal
per the evaluation config's fault-tolerance settings, as training runners are, and counted
in ``num_env_runner_restarts``.

How long: ``evaluation_duration`` episodes or timesteps, split among the healthy runners as
RLlib splits them (``left // n`` each, one more for the first ``left % n``), in rounds until
done: a runner that fails loses its share, which the next round gives to the others.
``"auto"``: rounds of ``AUTO_ROUND_STEPS`` env steps per runner until the training step that
runs in parallel is done.

When: ``train()`` evaluates every ``evaluation_interval`` iterations, after the training
step or, with ``evaluation_parallel_to_training``, in a thread while it runs, on the
weights from before that step (so the results lag one update behind, as RLlib's do).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rltrainer.algorithms.episode_metrics import episode_metrics
from rltrainer.env.env_runner import EnvRunner, EpisodeStats
from rltrainer.env.env_runner_group import EnvRunnerGroup
from rltrainer.env.registry import resolve_creator
from rltrainer.errors import ConfigError
from rltrainer.utils.import_paths import object_path, resolve_function

if TYPE_CHECKING:
    from rltrainer.core.cluster import Placement

logger = logging.getLogger(__name__)

#: Env steps each remote runner samples per round of an ``"auto"`` evaluation (RLlib's
#: ``evaluation_auto_duration_min_env_steps_per_sample`` default).
AUTO_ROUND_STEPS = 100


class Evaluation:
    """An algorithm's evaluation env runners and the evaluation loop over them.

    ``algo``: the ``Algorithm`` evaluated (its config, training env runners and callbacks);
    typed loosely so that this module does not import the one that imports it."""

    def __init__(self, algo: Any, placement: Placement | None) -> None:
        self.algo = algo
        self.config = algo.config
        self.function = resolve_function("custom_evaluation_function", self.config.custom_evaluation_function)
        self.last_results: dict[str, Any] | None = None  # for always_attach_evaluation_results
        self._placement = placement
        self._timestep = 0
        self._group: EnvRunnerGroup | None = None
        if self.config.evaluation_num_env_runners > 0:  # actors start with the algorithm
            self._group = self._make_group()
        elif (self.config.evaluation_config or {}).get("env") is not None:
            # The local evaluation runner is made at the first evaluation: an env id it cannot
            # resolve fails now, at build, not after the first training iteration.
            resolve_creator(self.config.evaluation_config["env"])
        self.estimation = None  # off_policy_estimation_methods, on recorded episodes
        if self.config.off_policy_estimation_methods:
            from rltrainer.offline.estimators import OffPolicyEstimation

            self.estimation = OffPolicyEstimation(algo)

    @property
    def group(self) -> EnvRunnerGroup:
        """The evaluation ``EnvRunnerGroup`` (made at first use when it is only local)."""
        if self._group is None:
            self._group = self._make_group()
        return self._group

    def foreach_runner(self, fn: Any) -> None:
        """``fn(runner)`` on every evaluation env runner made so far (none: nothing to do)."""
        if self._group is not None:
            self._group.foreach_worker(fn)

    def _make_group(self) -> EnvRunnerGroup:
        cfg = self.config
        eval_config = cfg.get_evaluation_config()
        eval_config.num_env_runners = cfg.evaluation_num_env_runners
        # Worker indices (env seeds) after the training runners': the remote ones, then the local one.
        return EnvRunnerGroup(
            eval_config,
            self._placement,
            index_offset=cfg.num_env_runners,
            local_worker_index=cfg.num_env_runners + cfg.evaluation_num_env_runners + 1,
            in_evaluation=True,
        )

    # --- when ------------------------------------------------------------------------
    def due(self, iteration: int) -> bool:
        """Whether ``train()`` evaluates in its iteration number ``iteration`` (1-based)."""
        interval = self.config.evaluation_interval
        return bool(interval) and iteration % interval == 0

    def start_parallel(self, iteration: int) -> ParallelEvaluation | None:
        """For an iteration that evaluates in parallel to training: the current weights synced,
        then ``Algorithm.evaluate()`` started in a thread. ``None`` for any other iteration."""
        if not (self.config.evaluation_parallel_to_training and self.due(iteration)):
            return None
        self.sync()  # here, not in the thread: the weights from before the training step
        return ParallelEvaluation(self.algo.evaluate)

    # --- one evaluation -----------------------------------------------------------------
    def sync(self) -> None:
        """Give the evaluation runners the training weights, observation filter and env steps."""
        local = self.algo.env_runner_group.local_worker()
        group = self.group
        group.sync_weights(local.get_weights())
        group.set_filter_state(local.get_filter_state())
        self._timestep = self.algo.counters.timesteps_total  # exploration schedules follow it
        group.local_worker().set_global_timestep(self._timestep)

    def run(self, parallel_train_future: Any = None) -> dict[str, Any]:
        """One evaluation; returns its metrics (``result["evaluation"]``).

        ``parallel_train_future``: the training step running meanwhile (its ``done()`` ends an
        ``"auto"`` evaluation); the weights were synced before it started.
        """
        if self.config.env is None:  # no env to run episodes in: only the estimates
            metrics = self._summarize([], 0)
            metrics["off_policy_estimator"] = self.estimation.run()
            return metrics
        if parallel_train_future is None:
            self.sync()
        group = self.group
        if self.function is not None:
            metrics = self._run_function(group)
        elif group.num_remote_workers() == 0:
            metrics = self._run_local(group.local_worker())
        else:
            metrics = self._run_remote(group, parallel_train_future)
        if self.estimation is not None:
            metrics["off_policy_estimator"] = self.estimation.run()
        metrics.setdefault("num_healthy_env_runners", group.num_healthy_remote_env_runners())
        metrics.setdefault("num_env_runner_restarts", group.num_restarts)
        return metrics

    def _run_local(self, runner: EnvRunner) -> dict[str, Any]:
        cfg = self.config
        by_episodes = cfg.evaluation_duration_unit == "episodes"
        episodes, steps = runner.sample_episodes(
            num_episodes=cfg.evaluation_duration if by_episodes else None,
            num_timesteps=None if by_episodes else cfg.evaluation_duration,
            force_reset=cfg.evaluation_force_reset_envs_before_iteration,
        )
        return self._summarize(episodes, steps)

    def _run_remote(self, group: EnvRunnerGroup, parallel_train_future: Any) -> dict[str, Any]:
        cfg = self.config
        auto = cfg.evaluation_duration == "auto"
        by_episodes = not auto and cfg.evaluation_duration_unit == "episodes"
        episodes: list[EpisodeStats] = []
        steps = done = 0
        reset: set[int] = set()  # runners whose envs were reset in this evaluation
        for round_index in itertools.count():
            if auto and round_index > 0 and (parallel_train_future is None or parallel_train_future.done()):
                break
            if not auto and done >= cfg.evaluation_duration:
                break
            ids = group.live_remote_ids()
            if not ids:
                logger.warning(
                    "every evaluation env runner has failed; this evaluation ends with %d episodes "
                    "(see .fault_tolerance() for restarts)",
                    len(episodes),
                )
                break
            shares = (
                {i: AUTO_ROUND_STEPS for i in ids} if auto else split(cfg.evaluation_duration - done, ids)
            )
            force = cfg.evaluation_force_reset_envs_before_iteration
            calls = {
                i: (
                    _sample_for_evaluation,
                    n if by_episodes else None,
                    None if by_episodes else n,
                    force and i not in reset,
                    self._timestep,
                )
                for i, n in shares.items()
            }
            reset.update(calls)
            started = time.monotonic()
            results = group.call_remote(
                calls, cfg.evaluation_sample_timeout_s, "evaluation", "evaluation_sample_timeout_s"
            )
            for new_episodes, new_steps in results.values():
                episodes.extend(new_episodes)
                steps += new_steps
                done += len(new_episodes) if by_episodes else new_steps
            if len(results) < len(calls) and time.monotonic() - started >= cfg.evaluation_sample_timeout_s:
                logger.warning(
                    "evaluation env runner(s) did not finish within evaluation_sample_timeout_s=%s; "
                    "this evaluation ends with %d episodes: raise the timeout, or shorten the "
                    "evaluation (evaluation_duration, evaluation_duration_unit='timesteps')",
                    cfg.evaluation_sample_timeout_s,
                    len(episodes),
                )
                break
        return self._summarize(episodes, steps)

    def _run_function(self, group: EnvRunnerGroup) -> dict[str, Any]:
        out = self.function(self.algo, group)
        if isinstance(out, tuple) and len(out) == 3 and isinstance(out[0], dict):
            metrics, env_steps, _agent_steps = out  # RLlib's new-stack form
            out = {"num_env_steps_sampled": env_steps, **metrics}
        if not isinstance(out, dict):
            shown = repr(out)
            shown = shown if len(shown) <= 200 else shown[:200] + "..."
            raise ConfigError(
                f"custom_evaluation_function {object_path(self.function)} must return a dict of "
                f"metrics; it returned a {type(out).__name__}: {shown}"
            )
        return dict(out)

    def _summarize(self, episodes: list[EpisodeStats], steps: int) -> dict[str, Any]:
        metrics = episode_metrics(episodes, self.config.keep_per_episode_custom_metrics)
        metrics["episodes_this_iter"] = len(episodes)
        metrics["num_env_steps_sampled"] = steps
        metrics["episode_returns"] = [e.episode_return for e in episodes]
        if any(e.policy_returns for e in episodes):  # multi-agent: each policy's agents' returns
            from rltrainer.algorithms.multi_agent import policy_metrics

            per_policy = policy_metrics(episodes)
            metrics["hist_stats"].update(per_policy.pop("policy_hist_stats"))
            metrics.update(per_policy)
        return metrics

    def stop(self) -> None:
        """Stop the evaluation runners (actors and envs)."""
        if self._group is not None:
            self._group.stop()
            self._group = None


class TrainingStep:
    """What a parallel evaluation sees of the training step: ``done()``, as RLlib's future."""

    def __init__(self) -> None:
        self._done = threading.Event()

    def done(self) -> bool:
        return self._done.is_set()

    def set_done(self) -> None:
        self._done.set()


class ParallelEvaluation:
    """``evaluate(training_step)`` in a thread while the caller runs the training step."""

    def __init__(self, evaluate: Callable[[TrainingStep], dict[str, Any]]) -> None:
        self.training = TrainingStep()
        executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rltrainer-evaluation")
        self._future = executor.submit(evaluate, self.training)
        executor.shutdown(wait=False)  # the thread ends with the evaluation

    def finish(self) -> None:
        """Mark the training step done (an ``"auto"`` evaluation ends its round) and wait."""
        self.training.set_done()
        concurrent.futures.wait([self._future])

    def result(self) -> dict[str, Any]:
        """What ``evaluate`` returned (or raise what it raised)."""
        self.finish()
        return self._future.result()


def split(units: int, worker_ids: list[int]) -> dict[int, int]:
    """RLlib's split of ``units`` among runners: ``units // n`` each and one more for the first
    ``units % n``; runners whose share is 0 are left out."""
    n = len(worker_ids)
    shares = {wid: units // n + (rank < units % n) for rank, wid in enumerate(worker_ids)}
    return {wid: share for wid, share in shares.items() if share}


def _sample_for_evaluation(
    runner: EnvRunner, num_episodes: int | None, num_timesteps: int | None, force_reset: bool, timestep: int
) -> tuple[list[EpisodeStats], int]:
    """A remote evaluation runner's share of a round (runs in the actor)."""
    runner.set_global_timestep(timestep)
    return runner.sample_episodes(
        num_episodes=num_episodes, num_timesteps=num_timesteps, force_reset=force_reset
    )


__all__ = [
    "AUTO_ROUND_STEPS",
    "Evaluation",
    "ParallelEvaluation",
    "split",
]
