"""A hyperparameter sweep: one config holding search spaces, run by Ray Tune.

What ``rltrainer train`` runs when ``--config`` or the experiment file holds ``grid_search``
values (or ``--num-samples``/``--scheduler`` ask for a sweep), and what a driver started by the
Kubernetes operator runs for an RLExperiment with search spaces or ``spec.tune``. Everything a
user can get wrong (stop keys, the metric, the scheduler's settings, PBT mutations) is checked
before any trial starts (``sweep_settings.check_sweep``): one message, not a failure of every
trial. (This module imports Ray Tune: import it only to sweep.)

Results land as for one run, ``<storage_path>/<experiment_name>/``, with one folder per trial
(Tune's ``result.json``, ``progress.csv``, TensorBoard files and ``checkpoint_*`` folders that hold
our pickle-free checkpoints). ``progress.json`` there says how the sweep stands (trials by
state, the best trial's metric and checkpoint) for the operator.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray import tune
from ray.tune import Callback

from rltrainer.core.cluster import init_ray
from rltrainer.experiment import PROGRESS_FILE, canonical_stop_key
from rltrainer.storage import is_remote, join_uri, open_storage
from rltrainer.tune.sweep_settings import SweepSettings, check_sweep

if TYPE_CHECKING:
    from rltrainer.algorithms.algorithm_config import AlgorithmConfig

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class SweepResult:
    """How a sweep ended."""

    experiment_path: str
    trials: dict[str, int]
    """Trials by final state (TERMINATED, ERROR, ...)."""
    best_trial: str | None
    best_metric: float | None
    best_config: dict[str, Any] | None
    best_checkpoint: str | None
    errors: list[str]


def make_scheduler(settings: SweepSettings) -> Any:
    """Tune's scheduler object for ``settings`` (``None`` for fifo)."""
    from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining

    options = dict(settings.scheduler_config)
    if settings.scheduler == "asha":
        return ASHAScheduler(time_attr="training_iteration", **options)
    if settings.scheduler == "pbt":
        return PopulationBasedTraining(time_attr="training_iteration", **options)
    return None


def tune_storage(config: AlgorithmConfig) -> tuple[str, Any]:
    """Tune's ``storage_path`` and ``storage_filesystem`` for the config's storage: a folder, or
    ``s3://`` through pyarrow with the same endpoint and region as ours (credentials from the
    environment, as for our own S3 access)."""
    path = config.storage_path
    if not is_remote(path):
        return str(Path(path).expanduser().resolve()), None
    import pyarrow.fs

    options = config.storage_options or {}
    kwargs: dict[str, Any] = {}
    endpoint = options.get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        kwargs["endpoint_override"], kwargs["scheme"] = host, scheme
    if options.get("region_name"):
        kwargs["region"] = options["region_name"]
    return path.removeprefix("s3://"), pyarrow.fs.S3FileSystem(**kwargs)


def run_sweep(
    config: AlgorithmConfig,
    stop: dict[str, Any],
    settings: SweepSettings,
    resume: bool = False,
    verbose: int = 1,
) -> SweepResult:
    """Run the sweep to the end (``resume``: continue the experiment's unfinished trials)."""
    criteria = check_sweep(config, stop, settings)
    init_ray(config)  # a local instance without a dashboard, unless connected (RAY_ADDRESS)

    algo_class = config.algo_class
    name = config.experiment_name or f"{algo_class.__name__}_{config.env_name}"
    storage_path, filesystem = tune_storage(config)
    experiment_uri = join_uri(config.storage_path, name)
    scheduler = make_scheduler(settings)
    metric = canonical_stop_key(settings.metric)
    run_config = tune.RunConfig(
        name=name,
        storage_path=storage_path,
        storage_filesystem=filesystem,
        stop=criteria,
        verbose=verbose,
        checkpoint_config=tune.CheckpointConfig(
            checkpoint_at_end=config.checkpoint_at_end,
            num_to_keep=config.num_to_keep,
            checkpoint_score_attribute=config.checkpoint_score_attribute if config.num_to_keep else None,
            checkpoint_score_order=config.checkpoint_score_order,
        ),
        callbacks=[SweepProgress(experiment_uri, config.storage_options, metric, settings.mode)],
    )
    experiment_fs_path = f"{storage_path}/{name}"
    if resume and tune.Tuner.can_restore(experiment_fs_path, storage_filesystem=filesystem):
        logger.info("resuming the sweep in %s", experiment_uri)
        tuner = tune.Tuner.restore(
            experiment_fs_path,
            trainable=algo_class,
            resume_errored=True,
            storage_filesystem=filesystem,
            param_space=config,
        )
    else:
        tuner = tune.Tuner(
            algo_class,
            param_space=config,
            tune_config=tune.TuneConfig(
                num_samples=settings.num_samples,
                max_concurrent_trials=settings.max_concurrent_trials,
                scheduler=scheduler,
                metric=metric if scheduler is not None else None,
                mode=settings.mode if scheduler is not None else None,
            ),
            run_config=run_config,
        )
    grid = tuner.fit()
    return _summarize(grid, experiment_uri, metric, settings.mode)


def _summarize(grid: Any, experiment_uri: str, metric: str, mode: str) -> SweepResult:
    from rltrainer.checkpoint_store import checkpoint_uri

    states: dict[str, int] = {}
    for result in grid:
        state = "ERROR" if result.error else "TERMINATED"
        states[state] = states.get(state, 0) + 1
    errors = [f"{Path(r.path).name}: {str(r.error).strip().splitlines()[-1]}" for r in grid if r.error]
    try:
        best = grid.get_best_result(metric=metric, mode=mode)
    except RuntimeError:  # no trial reported a finite value of the metric
        best = None
    value = (best.metrics or {}).get(metric) if best is not None else None
    return SweepResult(
        experiment_path=experiment_uri,
        trials=states,
        best_trial=Path(best.path).name if best is not None else None,
        best_metric=value if isinstance(value, int | float) and math.isfinite(value) else None,
        best_config=best.config if best is not None else None,
        best_checkpoint=checkpoint_uri(best.checkpoint) if best is not None and best.checkpoint else None,
        errors=errors,
    )


class SweepProgress(Callback):
    """A Tune callback writing ``progress.json`` (trials by state, the best trial) after every
    result and trial end. A failed write is logged and skipped, as for single runs.

    The best trial is the one ``ResultGrid.get_best_result(metric, mode)`` returns at the end:
    each trial judged by the last value of the metric it reported, the earlier trial winning a
    tie, with its newest checkpoint; so the file and the sweep's summary name the same one."""

    def __init__(self, experiment_uri: str, options: dict | None, metric: str, mode: str) -> None:
        self.storage = open_storage(experiment_uri, options)
        self.metric, self.mode = metric, mode
        self.last_values: dict[str, float] = {}
        self.checkpoints: dict[str, str] = {}
        self.last_write = 0.0

    def on_trial_result(self, trials: list, trial: Any, result: dict, **info: Any) -> None:  # noqa: ARG002
        from rltrainer.results import flatten

        value = flatten(result).get(self.metric)
        if isinstance(value, int | float):
            self.last_values[trial.trial_id] = float(value)
        if time.monotonic() - self.last_write > 1.0:
            self._write(trials)

    def on_checkpoint(self, trials: list, trial: Any, checkpoint: Any, **info: Any) -> None:  # noqa: ARG002
        from rltrainer.checkpoint_store import checkpoint_uri

        self.checkpoints[trial.trial_id] = _as_uri(checkpoint_uri(checkpoint), self.storage.uri)
        self._write(trials)

    def on_trial_complete(self, trials: list, **info: Any) -> None:  # noqa: ARG002
        self._write(trials)

    def on_trial_error(self, trials: list, **info: Any) -> None:  # noqa: ARG002
        self._write(trials)

    def on_experiment_end(self, trials: list, **info: Any) -> None:  # noqa: ARG002
        self._write(trials, finished=True)

    def _best(self, trials: list) -> tuple[Any, float] | None:
        """The best trial (in ``trials``' order, the first wins a tie) and its last value."""
        best = None
        for trial in trials:
            value = self.last_values.get(trial.trial_id)
            if value is None or not math.isfinite(value):
                continue
            if best is None or (value > best[1] if self.mode == "max" else value < best[1]):
                best = (trial, value)
        return best

    def _write(self, trials: list, finished: bool = False) -> None:
        states: dict[str, int] = {}
        for trial in trials:
            states[trial.status] = states.get(trial.status, 0) + 1
        best = self._best(trials)
        progress = {
            "sweep": True,
            "trials": states,
            "metric": self.metric,
            "mode": self.mode,
            "best_trial": str(best[0]) if best else None,
            "best_metric": best[1] if best else None,
            "best_checkpoint": self.checkpoints.get(best[0].trial_id) if best else None,
            "finished": finished,
            "updated_at": time.time(),
        }
        self.last_write = time.monotonic()
        try:
            self.storage.write_bytes(PROGRESS_FILE, json.dumps(progress).encode())
        except Exception as err:  # noqa: BLE001 - observers only; the sweep goes on
            logger.warning("could not write %s: %s", PROGRESS_FILE, err)


def _as_uri(path: str, experiment_uri: str) -> str:
    """A checkpoint as our URI: pyarrow's S3 paths lack the scheme our storage URIs have."""
    if experiment_uri.startswith("s3://") and not path.startswith("s3://"):
        return f"s3://{path}"
    return path


__all__ = ["SweepProgress", "SweepResult", "make_scheduler", "run_sweep", "tune_storage"]
