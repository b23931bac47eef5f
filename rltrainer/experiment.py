"""Running one experiment: train until a stop criterion is met, checkpointing on the way.

This is what ``rltrainer train`` runs, and what a driver started by the Kubernetes operator
calls: it takes a built config and a stop dict, and knows nothing about the command line.

With ``resume=True`` it continues from the newest valid checkpoint under
``<storage_path>/<experiment_name>/`` (any trial folder), writing on into that checkpoint's
trial folder; with none it starts fresh and says so.

Every iteration (and once more at the end) a small ``progress.json`` is written next to the
trial folders, ``<storage_path>/<experiment_name>/progress.json``: the iteration, timesteps,
return, newest checkpoint and env-runner health. It is what the Kubernetes operator reads to
mirror progress into an RLExperiment's status (see ``PROGRESS_FILE``). It also holds the
driver's ``seconds_per_iteration`` (the longest of the last 10) and ``seconds_per_checkpoint``
(the last save), and after a preemption the ``preempted`` record.

Preemption (``rltrainer.preemption``): a pod's ``preStop`` hook (through Ray's GCS) or a SIGTERM
to this process asks for a checkpoint; the iteration in flight finishes, the checkpoint is
written, the hook is told, and the run returns with ``stopped_by == PREEMPTED``.

Stop criteria follow Tune's dict form: ``{"training_iteration": 100, "episode_return_mean":
475}`` stops after the first result where ANY key reaches (``>=``) its threshold.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import math
import numbers
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rltrainer.algorithms.algorithm_config import AlgorithmConfig
from rltrainer.errors import CheckpointError, ConfigError
from rltrainer.preemption import PreemptionRequest, PreemptionWatch
from rltrainer.results import flatten
from rltrainer.storage import StorageError, check_storage_path, is_remote, open_storage

# No torch at import (Algorithm's and checkpoint_store's): the operator imports PROGRESS_FILE, resolve_stop.
if TYPE_CHECKING:
    from rltrainer.algorithms.algorithm import Algorithm

logger = logging.getLogger(__name__)

#: What ``rltrainer train`` stops at when no stop criteria are given.
DEFAULT_STOP: dict[str, float] = {"training_iteration": 100}

#: ``ExperimentResult.stopped_by`` when training ended by Ctrl-C (KeyboardInterrupt).
INTERRUPTED = "interrupted"
#: ``ExperimentResult.stopped_by`` when a preStop hook or a SIGTERM asked for a checkpoint and a stop.
PREEMPTED = "preempted"

#: The progress object's name, directly under the experiment folder.
PROGRESS_FILE = "progress.json"


class Reporter(Protocol):
    """Receives progress: where results go, then every iteration's result.

    A reporter may also have ``on_resume(checkpoint: str | None)``, called before
    ``on_start`` when resuming: the checkpoint resumed from, or ``None`` (starting fresh).
    """

    def on_start(self, trial_dir: Path | str) -> None: ...

    def on_result(self, result: dict[str, Any]) -> None: ...


@dataclasses.dataclass
class ExperimentResult:
    """How an experiment ended."""

    last_result: dict[str, Any] | None
    """The last result ``train()`` returned (``None`` if interrupted before the first)."""
    iterations: int
    """Training iterations completed (one more than ``last_result``'s if Ctrl-C hit just after)."""
    checkpoint_path: str | None
    """The newest checkpoint written (by ``checkpoint_frequency`` or ``checkpoint_at_end``)."""
    trial_dir: Path | str
    """``<storage_path>/<experiment_name>/<trial_id>``: params.json, result.json, progress.csv, ...
    (a ``Path``, or the ``s3://`` URI for S3 storage)."""
    stopped_by: str
    """The stop key that was reached, or ``INTERRUPTED`` or ``PREEMPTED``."""
    resumed_from: str | None = None
    """The checkpoint a ``resume=True`` run continued from (``None``: started fresh)."""
    preempted: dict[str, Any] | None = None
    """With ``PREEMPTED``: reason, pod, requested_at, checkpoint_written_at, iteration,
    seconds_to_checkpoint, checkpoint and error (the ``preempted`` record of progress.json)."""


def canonical_stop_key(key: str) -> str:
    """RLlib's spellings -> ours: ``env_runners/episode_reward_mean`` -> ``episode_return_mean``."""
    return key.replace("env_runners/", "").replace("episode_reward_", "episode_return_")


# Multi-agent results name their policies: policy_reward_mean/<policy id>, info/learner/<id>/...
# and RLlib's current learners/<id>/...
_PER_POLICY = re.compile(
    r"(evaluation/)?policy_reward_(mean|min|max)/[A-Za-z0-9_.-]+|(info/learner|learners)/[A-Za-z0-9_.-]+/.+"
)


def resolve_stop(stop: dict[str, Any], keys_of: type[Algorithm] | type[AlgorithmConfig]) -> dict[str, float]:
    """Validate stop criteria against ``keys_of.result_keys()``; returns them with our key names.

    ``keys_of``: an algorithm class, or its config class (which imports no torch: the operator's).
    """
    if not isinstance(stop, dict):
        raise ConfigError(
            f'stop criteria must be a dict like {{"training_iteration": 100}}, got {type(stop).__name__}'
        )
    allowed = keys_of.result_keys()
    resolved: dict[str, float] = {}
    for key, value in stop.items():
        name = str(key) if str(key) in allowed else canonical_stop_key(str(key))
        # Callbacks' metrics are named by the user: any custom_metrics/... key may stop a run.
        named_by_user = ("custom_metrics/", "evaluation/custom_metrics/", "evaluation/off_policy_estimator/")
        if name not in allowed and not name.startswith(named_by_user) and not _PER_POLICY.fullmatch(name):
            close = [f"'{match}'" for match in difflib.get_close_matches(str(key), allowed, n=3)]
            guess = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise ConfigError(
                f"unknown stop key {key!r}{guess}; allowed: "
                f"{', '.join(keys_of.result_keys(rllib_names=False))}, RLlib's names of these "
                "(episode_reward_mean, env_runners/..., sampler_results/..., info/...), timers/... "
                "and perf/... (every key: docs/guide/results.md), custom_metrics/<name>_mean|_min|_max, "
                "or (multi-agent) policy_reward_mean|_min|_max/<policy id>"
            )
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise ConfigError(f"stop value for {key!r} must be a number, got {value!r}")
        resolved[name] = value
    return resolved


def reached_stop(result: dict[str, Any], stop: dict[str, float]) -> str | None:
    """The first stop key whose threshold ``result`` reached, else ``None`` (NaN never reaches)."""
    flat = flatten(result)
    for key, threshold in stop.items():
        value = flat.get(key)
        if isinstance(value, numbers.Real) and value >= threshold:
            return key
    return None


def with_framework(config: dict[str, Any] | None, flag: str | None, path: str) -> dict[str, Any] | None:
    """An experiment file's config as ``rltrainer train -f FILE [--framework F]`` trains it.

    ``--framework torch`` overrides the file's ``framework`` (RLlib's CLI sets it for every
    experiment of the file from the flag; RLlib's tuned examples say ``framework: tf``). Without
    the flag, a framework other than torch is refused, naming the flag.
    """
    if flag is not None:
        return {**(config or {}), "framework": flag}
    framework = (config or {}).get("framework", "torch")
    if framework != "torch":
        raise ConfigError(
            f"{path}: framework: {framework!r}: rltrainer is torch only; pass --framework torch "
            "(it overrides the file's framework, as RLlib's CLI does) or set framework: torch"
        )
    return config


def run_experiment(
    config: AlgorithmConfig,
    stop: dict[str, Any],
    reporter: Reporter | None = None,
    resume: bool = False,
    resume_from: str | None = None,
) -> ExperimentResult:
    """Build the algorithm, train until ``stop`` (or Ctrl-C), save if ``checkpoint_at_end``.

    ``resume``: first restore the newest checkpoint of the experiment (see the module doc).
    ``resume_from``: with ``resume``, try this checkpoint first (the newest valid one is the
    fallback when it does not verify).

    ``checkpoint_frequency`` checkpoints are written by ``Algorithm.train()``. A Ctrl-C
    (``KeyboardInterrupt``) during training ends the run like a stop criterion, with
    ``stopped_by == INTERRUPTED``; a second one during the final save propagates. A preemption
    request (a preStop hook's, or a SIGTERM to this process; see ``rltrainer.preemption``) is
    acted on between iterations: a checkpoint, then ``stopped_by == PREEMPTED``.
    Raises ``RLTrainerError`` subclasses for bad stop keys, configs or envs.
    """
    criteria = resolve_stop(stop, config.algo_class or type(config))
    evaluated = [key for key in criteria if key.startswith("evaluation/")]
    if evaluated and not config.evaluation_interval:
        raise ConfigError(
            f"stop key {evaluated[0]!r} needs evaluation results: set evaluation_interval (e.g. 1)"
        )
    algo = config.build()
    if not algo._under_tune and is_remote(algo.config.storage_path):
        try:  # the keys may write, before the first iteration (build() only lists)
            check_storage_path(algo.config.storage_path, algo.config.storage_options, write=True)
        except StorageError:
            algo.stop()
            raise
    logger.info("built %s on %s; stopping at %s", type(algo).__name__, config.env_name, criteria)
    last_result: dict[str, Any] | None = None
    checkpoint_path: str | None = None
    checkpointed_iteration = 0
    stopped_by: str | None = None
    resumed_from: str | None = None
    progress = ProgressWriter(algo)
    watch = PreemptionWatch(algo.experiment_uri)  # after build(): a ray.init() sets its own SIGTERM handler
    request: PreemptionRequest | None = None
    try:
        watch.start()
        if resume:
            resumed_from = _resume(algo, reporter, resume_from)
            if resumed_from is not None:
                # A run resumed after it finished stops at once instead of training one more iteration.
                checkpoint_path, checkpointed_iteration = resumed_from, algo.counters.training_iteration
                last_result = _restored_state(algo)
                stopped_by = reached_stop(last_result, criteria)
        location = algo.trial_uri if is_remote(algo.trial_uri) else algo.trial_dir
        if reporter is not None:
            reporter.on_start(location)
        try:
            while stopped_by is None:
                request = watch.poll()
                if request is not None:
                    stopped_by = PREEMPTED
                    break
                started = time.perf_counter()
                last_result = algo.train()
                watch.iteration_done(last_result, time.perf_counter() - started)
                logger.debug("result of iteration %d: %s", last_result["training_iteration"], last_result)
                if "checkpoint_path" in last_result:
                    checkpoint_path = last_result["checkpoint_path"]
                    checkpointed_iteration = last_result["training_iteration"]
                    logger.info("saved checkpoint %s", checkpoint_path)
                if reporter is not None:
                    reporter.on_result(last_result)
                stopped_by = reached_stop(last_result, criteria)
                progress.write(last_result, checkpoint_path, timings=watch.timings())
        except KeyboardInterrupt:
            stopped_by = INTERRUPTED
            logger.info("interrupted after %d iteration(s)", algo.counters.training_iteration)
        # The counters, not last_result: Ctrl-C may land after an iteration ended, before train() returned.
        iterations = algo.counters.training_iteration
        preempted = None
        if request is not None:
            checkpoint_path, preempted = _save_preempted(
                algo, watch, request, checkpoint_path, checkpointed_iteration
            )
            state = last_result if last_result is not None else _restored_state(algo)
            progress.write(state, checkpoint_path, timings=watch.timings(), preempted=preempted)
        elif config.checkpoint_at_end and iterations > checkpointed_iteration:
            checkpoint_path = _save_at_end(algo, checkpoint_path)
        if stopped_by not in (INTERRUPTED, PREEMPTED) and last_result is not None:
            progress.write(last_result, checkpoint_path, finished_by=stopped_by, timings=watch.timings())
        return ExperimentResult(
            last_result, iterations, checkpoint_path, location, stopped_by, resumed_from, preempted
        )
    finally:
        watch.close(checkpoint_path)
        algo.stop()


def _save_at_end(algo: Algorithm, newest: str | None) -> str:
    """``checkpoint_at_end``'s save; a failure says which checkpoint is the newest."""
    try:
        checkpoint = algo.save()
    except StorageError as err:  # the run's results stay; only the final checkpoint is missing
        last = f"; the newest checkpoint is {newest}" if newest else ""
        ended = f"training ended after {algo.counters.training_iteration} iteration(s)"
        raise StorageError(f"{ended}, but checkpoint_at_end failed: {err}{last}") from None
    logger.info("saved checkpoint %s at the end", checkpoint)
    return checkpoint


def _save_preempted(
    algo: Algorithm,
    watch: PreemptionWatch,
    request: PreemptionRequest,
    checkpoint: str | None,
    checkpointed_iteration: int,
) -> tuple[str | None, dict[str, Any]]:
    """Save for a preemption (unless the newest checkpoint is of this iteration) and tell the hooks.

    Returns the newest checkpoint and the ``preempted`` record. A save that fails leaves no
    checkpoint (the manifest is written last): the hooks learn that it failed, the newest
    earlier checkpoint stays the one to resume from. An error other than storage's propagates.
    """
    iteration = algo.counters.training_iteration
    if iteration > checkpointed_iteration:
        started = time.perf_counter()
        try:
            checkpoint = str(algo.save())
        except Exception as err:
            said = watch.answer(request, checkpoint, iteration, error=str(err) or type(err).__name__)
            if not isinstance(err, StorageError):
                raise
            logger.error("preempted: the checkpoint of iteration %d was not written: %s", iteration, err)
            return checkpoint, said
        watch.checkpoint_done(time.perf_counter() - started)
        logger.info("saved checkpoint %s for the preemption", checkpoint)
    return checkpoint, watch.answer(request, checkpoint, iteration)


def _restored_state(algo: Algorithm) -> dict[str, Any]:
    """What a restored run's last result said: lifetime counters and the smoothed episode metrics."""
    from rltrainer.algorithms.algorithm import episode_metrics

    counters = dataclasses.asdict(algo.counters)
    return {
        **counters,
        "num_env_steps_sampled_lifetime": counters["timesteps_total"],
        **episode_metrics(algo._episodes),
    }


class ProgressWriter:
    """Writes ``progress.json`` under the experiment folder (see the module doc).

    A failed write is logged and skipped: progress is for observers, never a reason to stop
    training (the checkpoints are what must not be lost).
    """

    def __init__(self, algo: Algorithm) -> None:
        self.algo = algo
        self.storage = open_storage(algo.experiment_uri, algo.config.storage_options)
        self.failing = False

    def write(
        self,
        result: dict[str, Any],
        checkpoint: str | None,
        finished_by: str | None = None,
        timings: dict[str, float | None] | None = None,
        preempted: dict[str, Any] | None = None,
    ) -> None:
        flat = flatten(result)
        progress = {
            "iteration": flat.get("training_iteration"),
            "timesteps": flat.get("timesteps_total"),
            "episode_return_mean": _finite_or_none(flat.get("episode_return_mean")),
            "last_checkpoint": checkpoint,
            "num_healthy_env_runners": flat.get("num_healthy_env_runners"),
            "num_env_runner_restarts": flat.get("num_env_runner_restarts"),
            "num_learner_restarts": flat.get("num_learner_restarts"),
            "trial": str(self.algo.trial_uri),
            "finished": finished_by is not None,
            "stopped_by": PREEMPTED if preempted is not None else finished_by,
            "seconds_per_iteration": (timings or {}).get("seconds_per_iteration"),
            "seconds_per_checkpoint": (timings or {}).get("seconds_per_checkpoint"),
            "preempted": preempted,
            "updated_at": time.time(),
        }
        try:
            self.storage.write_bytes(PROGRESS_FILE, json.dumps(progress).encode())
        except Exception as err:  # noqa: BLE001 - observers only; training goes on
            if not self.failing:  # once until it works again, not every iteration
                logger.warning("could not write %s (tried again every iteration): %s", PROGRESS_FILE, err)
            self.failing = True
        else:
            self.failing = False


def _finite_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, numbers.Real) and math.isfinite(value) else None


def _resume(algo: Algorithm, reporter: Reporter | None, first: str | None = None) -> str | None:
    """Restore the newest checkpoint under the experiment folder that verifies; its URI, or None.

    ``first`` (a checkpoint URI) is tried before the listing. A checkpoint whose files fail
    verification is skipped with a warning (the next older one is tried), so one damaged
    upload cannot block a restart.
    """
    from rltrainer.checkpoint_store import list_checkpoints

    resumed = None
    listed = [info.uri for info in list_checkpoints(algo.experiment_uri, algo.config.storage_options)]
    candidates = ([first] if first else []) + [uri for uri in reversed(listed) if uri != first]
    for uri in candidates:
        try:
            algo.resume_from(uri)
        except CheckpointError as err:
            logger.warning("resume: skipping %s: %s", uri, err)
            continue
        resumed = uri
        logger.info("resumed from %s (iteration %d)", uri, algo.counters.training_iteration)
        break
    if resumed is None:
        logger.warning("resume: no valid checkpoint under %s; starting fresh", algo.experiment_uri)
    on_resume = getattr(reporter, "on_resume", None)
    if on_resume is not None:
        on_resume(resumed)
    return resumed


__all__ = [
    "DEFAULT_STOP",
    "INTERRUPTED",
    "PREEMPTED",
    "PROGRESS_FILE",
    "ExperimentResult",
    "ProgressWriter",
    "Reporter",
    "canonical_stop_key",
    "reached_stop",
    "resolve_stop",
    "run_experiment",
    "with_framework",
]
