"""Results folders Tune and TensorBoard users know: ``<storage>/<name>/<trial_id>/``.

``params.json`` (the full config), ``result.json`` (one JSON object per iteration),
``progress.csv`` and a TensorBoard event file with every numeric metric.

``logger_config={"type": ...}`` chooses the result writers: ``JsonLogger``, ``CSVLogger``,
``TBXLogger`` (all three by default), or any class with Tune's ``Logger`` interface:
``Class(config: dict, logdir: str)`` (the config as ``to_dict()`` gives it, and the trial
folder), ``on_result(result: dict)`` after every iteration, ``close()`` at the end, and
optionally ``flush()``. Files it writes into the trial folder are uploaded with the others.

With an ``s3://`` storage path the files are written to a local cache folder and uploaded
whole to the trial's prefix after every iteration (and at ``close()``); an upload that fails
logs a warning and is tried again after the next iteration. A resumed trial first downloads
its ``result.json`` and ``progress.csv``, so they go on growing in place.

A trial resumed from a checkpoint (``Algorithm.resume_from``, ``--resume``) first drops the
rows of iterations after that checkpoint from ``result.json`` and ``progress.csv``: a run
killed between writing an iteration's result and its checkpoint trains that iteration again,
and its files then hold every iteration once, with no gap. The TensorBoard file gets a
``SessionLog.START`` event at the restored step, TensorBoard's own way of discarding what a
crashed run wrote after it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from rltrainer.result_writers import (
    CSVLogger,
    JsonLogger,
    TBXLogger,
    _json_safe,
    append_whole,
    check_logger_config,
    flatten,
    logger_classes,
    logger_config_to_json,
    rewind_results,
)
from rltrainer.storage import Storage, StorageError

logger = logging.getLogger(__name__)

#: Numeric keys of every ``Algorithm.train()`` result, besides its learner's ``STAT_KEYS``.
BASE_RESULT_KEYS: tuple[str, ...] = (
    "training_iteration",
    "timesteps_total",
    "time_this_iter_s",
    "time_total_s",
    "episode_return_mean",
    "episode_return_min",
    "episode_return_max",
    "episode_len_mean",
    "episodes_this_iter",
    "episodes_total",
    "num_env_steps_sampled",
    "num_env_steps_trained",
    "num_env_steps_sampled_lifetime",
    "num_env_steps_sampled_per_s",
    "num_healthy_env_runners",
    "num_env_runner_restarts",
    "num_learner_restarts",
)

#: Numeric keys under ``evaluation/`` (results of iterations that evaluated).
EVALUATION_KEYS: tuple[str, ...] = (
    "episode_return_mean",
    "episode_return_min",
    "episode_return_max",
    "episode_len_mean",
    "episodes_this_iter",
    "num_env_steps_sampled",
    "num_healthy_env_runners",
    "num_env_runner_restarts",
)


#: RLlib's (old API stack) names of our episode statistics.
EPISODE_ALIASES: dict[str, str] = {
    "episode_return_mean": "episode_reward_mean",
    "episode_return_min": "episode_reward_min",
    "episode_return_max": "episode_reward_max",
}
#: What RLlib groups under ``sampler_results`` and ``env_runners`` (with ``custom_metrics``
#: and ``hist_stats``).
SAMPLER_KEYS: tuple[str, ...] = (*EPISODE_ALIASES, "episode_len_mean", "episodes_this_iter")
#: RLlib's current (new API stack) names under ``env_runners/`` of counters a result reports at
#: its top level: RLlib name -> our key (``rltrainer.utils.metrics`` names them as RLlib does).
ENV_RUNNER_COUNTERS: dict[str, str] = {
    "num_episodes": "episodes_this_iter",
    "num_episodes_lifetime": "episodes_total",
    "num_env_steps_sampled": "num_env_steps_sampled",
    "num_env_steps_sampled_lifetime": "num_env_steps_sampled_lifetime",
    "num_agent_steps_sampled": "num_agent_steps_sampled",
    "num_agent_steps_sampled_lifetime": "num_agent_steps_sampled_lifetime",
}
#: ``timers/...`` of every result: milliseconds spent in this iteration.
TIMER_KEYS: tuple[str, ...] = (
    "training_iteration_time_ms",
    "sample_time_ms",
    "learn_time_ms",
    "synch_weights_time_ms",
)
#: ``perf/...``: the machine's CPU and memory use (percent), as RLlib reports them.
PERF_KEYS: tuple[str, ...] = ("cpu_util_percent", "ram_util_percent")


#: What multi-agent results add (per-policy returns are ``policy_reward_mean/<policy id>``).
MULTI_AGENT_KEYS: tuple[str, ...] = (
    "num_agent_steps_sampled",
    "num_agent_steps_sampled_lifetime",
    "agent_timesteps_total",
    "num_agent_steps_trained",
)


def _rllib_names(keys: tuple[str, ...] | list[str], prefix: str = "") -> list[str]:
    """The RLlib-named keys ``add_rllib_keys`` derives from ``keys`` (for stop criteria)."""
    old = [EPISODE_ALIASES[k] for k in EPISODE_ALIASES if k in keys]
    sampler = [EPISODE_ALIASES.get(k, k) for k in SAMPLER_KEYS]
    counters = [name for name, ours in ENV_RUNNER_COUNTERS.items() if ours in keys]
    return [
        *(prefix + k for k in old),
        *(f"{prefix}sampler_results/{k}" for k in sampler),
        *(f"{prefix}env_runners/{k}" for k in dict.fromkeys([*SAMPLER_KEYS, *sampler, *counters])),
    ]


def result_keys_for(stat_keys: tuple[str, ...] = (), rllib_names: bool = True) -> list[str]:
    """Every numeric key ``train()`` reports with a learner reporting ``stat_keys`` (what stop
    criteria may name); ``rllib_names``: RLlib's names and groupings of them, timers and perf
    too (else only rltrainer's own names, as an error message lists them)."""
    own = [
        *BASE_RESULT_KEYS,
        *stat_keys,
        *(f"evaluation/{k}" for k in EVALUATION_KEYS),
        "num_env_steps_sampled_this_iter",
        "num_env_steps_trained_this_iter",
        "num_env_steps_trained_lifetime",
        *MULTI_AGENT_KEYS,
    ]
    if not rllib_names:
        return own
    return [
        *own,
        *_rllib_names([*BASE_RESULT_KEYS, *MULTI_AGENT_KEYS]),
        "info/num_env_steps_sampled",
        "info/num_env_steps_trained",
        *(f"info/learner/default_policy/learner_stats/{k}" for k in stat_keys),
        *(f"learners/default_policy/{k}" for k in stat_keys),
        *(f"timers/{k}" for k in TIMER_KEYS),
        *(f"perf/{k}" for k in PERF_KEYS),
        *_rllib_names(EVALUATION_KEYS, "evaluation/"),
    ]


def add_rllib_keys(metrics: dict[str, Any], learner_stats: dict[str, Any] | None = None) -> dict[str, Any]:
    """Add RLlib's names and groupings of the same numbers to a result (or to its
    ``evaluation`` metrics): ``episode_reward_mean|min|max``, ``sampler_results/...`` and
    ``env_runners/...`` (with RLlib's current names of the sampling counters:
    ``num_episodes``, ``num_env_steps_sampled_lifetime``, ...), and with ``learner_stats``
    (``{policy id: stats}``) ``info/learner/<policy id>/learner_stats/...`` and RLlib's current
    ``learners/<policy id>/...``.
    Derived from what is there, never computed a second time. Returns ``metrics``."""
    for ours, theirs in EPISODE_ALIASES.items():
        if ours in metrics:
            metrics[theirs] = metrics[ours]
    grouped = {key: metrics[key] for key in (*SAMPLER_KEYS, "custom_metrics", "hist_stats") if key in metrics}
    metrics["sampler_results"] = {EPISODE_ALIASES.get(key, key): value for key, value in grouped.items()}
    counters = {name: metrics[ours] for name, ours in ENV_RUNNER_COUNTERS.items() if ours in metrics}
    metrics["env_runners"] = {**grouped, **metrics["sampler_results"], **counters}
    if learner_stats is not None:
        metrics["learners"] = {pid: dict(stats) for pid, stats in learner_stats.items()}
        metrics["info"] = {
            "learner": {pid: {"learner_stats": dict(stats)} for pid, stats in learner_stats.items()},
            "num_env_steps_sampled": metrics["num_env_steps_sampled_lifetime"],
            "num_env_steps_trained": metrics["num_env_steps_trained_lifetime"],
        }
    return metrics


def perf_metrics() -> dict[str, float]:
    """CPU use since the last call and memory use of the machine, in percent (RLlib's ``perf``)."""
    import psutil

    return {"cpu_util_percent": psutil.cpu_percent(), "ram_util_percent": psutil.virtual_memory().percent}


class ResultLogger:
    """Appends each iteration's result to the trial folder's files, through the writers
    ``logger_config`` chooses (see the module docstring)."""

    def __init__(
        self,
        trial_dir: Path,
        params: dict[str, Any],
        storage: Storage | None = None,
        logger_config: dict[str, Any] | None = None,
        resumed_at: tuple[int, int] | None = None,
    ) -> None:
        """``resumed_at``: ``(training_iteration, timesteps_total)`` of the checkpoint a
        resumed trial continues from: results written after it are dropped (module doc)."""
        self.trial_dir = trial_dir
        self.storage = storage
        try:
            trial_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StorageError(f"cannot write results to {trial_dir}: {err.strerror or err}") from None
        if storage is not None:
            self._download_existing(storage)
        if resumed_at is not None:
            try:
                dropped = rewind_results(trial_dir, resumed_at[0])
            except OSError as err:
                logger.warning("results after iteration %d not dropped: %s", resumed_at[0], err)
            else:
                if dropped:
                    logger.info(
                        "dropped %d result row(s) after iteration %d, the checkpoint resumed from",
                        dropped,
                        resumed_at[0],
                    )
        try:
            (trial_dir / "params.json").write_text(json.dumps(_json_safe(params), indent=2, sort_keys=True))
        except OSError as err:
            logger.warning("params.json not written to %s: %s", trial_dir, err.strerror or err)
        self.writers = [cls(params, str(trial_dir)) for cls in logger_classes(logger_config)]
        self._failing: set[Any] = set()
        if resumed_at is not None:
            for writer in self.writers:
                if isinstance(writer, TBXLogger):
                    writer.restart_at(resumed_at[1] + 1)

    def log(self, result: dict[str, Any]) -> None:
        """Give ``result`` to every writer. A writer that cannot write (a full disk) is warned
        about once, and retried at every next result; training goes on."""
        for writer in self.writers:
            try:
                writer.on_result(result)
            except OSError as err:
                if writer not in self._failing:
                    self._failing.add(writer)
                    logger.warning(
                        "%s could not write to %s (tried again every iteration): %s",
                        type(writer).__name__,
                        self.trial_dir,
                        err.strerror or err,
                    )
                continue
            if writer in self._failing:
                self._failing.discard(writer)
                logger.info("%s writes again", type(writer).__name__)
        if self.storage is not None:
            for writer in self.writers:
                if callable(getattr(writer, "flush", None)):
                    writer.flush()
            self.upload()

    def upload(self) -> bool:
        """Copy every file of the trial folder to the storage; warns and returns False on failure."""
        assert self.storage is not None
        try:
            for file in sorted(self.trial_dir.iterdir()):
                if file.is_file():
                    self.storage.upload_file(file, file.name)
        except StorageError as err:
            logger.warning("results not uploaded (tried again after the next iteration): %s", err)
            return False
        return True

    def _download_existing(self, storage: Storage) -> None:
        """A resumed trial's result.json and progress.csv, to append to."""
        try:
            for name in ("result.json", "progress.csv"):
                if not (self.trial_dir / name).exists() and storage.exists(name):
                    storage.download_file(name, self.trial_dir / name)
        except StorageError as err:
            logger.warning("could not fetch earlier results from %s: %s", storage.uri, err)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
        if self.storage is not None:
            self.upload()


__all__ = [  # the writers' names are re-exported: they were defined here before result_writers
    "BASE_RESULT_KEYS",
    "CSVLogger",
    "JsonLogger",
    "ResultLogger",
    "TBXLogger",
    "add_rllib_keys",
    "append_whole",
    "check_logger_config",
    "flatten",
    "logger_classes",
    "logger_config_to_json",
    "perf_metrics",
    "result_keys_for",
    "rewind_results",
]
