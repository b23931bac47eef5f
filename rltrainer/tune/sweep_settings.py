"""What a sweep is and the checks it gets before any trial starts, without Ray.

The CLI, the driver and the Kubernetes operator (whose image has neither Ray nor torch) share
these: schedulers and their settings, the sweep settings, and ``check_sweep`` (stop keys, the
metric, the scheduler's settings, PBT mutations): one message, not a failure of every trial.
``rltrainer.tune.sweep`` runs sweeps.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import TYPE_CHECKING, Any

from rltrainer.errors import ConfigError
from rltrainer.experiment import canonical_stop_key, resolve_stop
from rltrainer.storage import check_experiment_name
from rltrainer.tune.search_space import candidates

if TYPE_CHECKING:
    from rltrainer.algorithms.algorithm_config import AlgorithmConfig

SCHEDULERS = ("fifo", "asha", "pbt")
#: Each scheduler's settings (``--scheduler-config``, ``spec.tune.schedulerConfig``) and meaning.
SCHEDULER_SETTINGS: dict[str, dict[str, str]] = {
    "fifo": {},
    "asha": {
        "max_t": "the most iterations a trial runs (default 100)",
        "grace_period": "iterations before a trial can be stopped (default 1)",
        "reduction_factor": "keep the top 1/reduction_factor at each rung (default 4)",
    },
    "pbt": {
        "perturbation_interval": "iterations between exploit/explore steps (default 5)",
        "hyperparam_mutations": "{key: [values]} to resample from when exploring (required)",
        "quantile_fraction": "bottom fraction that copies the top one (default 0.25)",
        "resample_probability": "chance to resample instead of perturbing (default 0.25)",
        "synch": "wait for every trial at each interval (default false)",
    },
}


@dataclasses.dataclass
class SweepSettings:
    """How to run a sweep, besides the config and stop criteria."""

    num_samples: int = 1
    max_concurrent_trials: int | None = None
    scheduler: str = "fifo"
    scheduler_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    metric: str = "episode_return_mean"
    mode: str = "max"


def is_sweep(config: AlgorithmConfig, settings: SweepSettings) -> bool:
    """A config with search spaces, more than one sample, or a scheduler makes a sweep."""
    return bool(config.search_space) or settings.num_samples > 1 or settings.scheduler != "fifo"


def check_sweep(config: AlgorithmConfig, stop: dict[str, Any], settings: SweepSettings) -> dict[str, float]:
    """Check everything a sweep depends on; returns the resolved stop criteria."""
    keys_of = type(config)  # the config class knows the result keys without importing torch
    criteria = resolve_stop(stop, keys_of)
    if config.experiment_name is not None:  # the sweep's folder under storage_path
        check_experiment_name(config.experiment_name, "experiment_name")
    if not isinstance(settings.num_samples, int) or settings.num_samples < 1:
        raise ConfigError(f"num_samples must be a positive integer, got {settings.num_samples!r}")
    if settings.max_concurrent_trials is not None and settings.max_concurrent_trials < 1:
        raise ConfigError(f"max_concurrent_trials must be >= 1, got {settings.max_concurrent_trials!r}")
    if settings.scheduler not in SCHEDULERS:
        raise ConfigError(f"unknown scheduler {settings.scheduler!r}; allowed: {', '.join(SCHEDULERS)}")
    if settings.mode not in ("max", "min"):
        raise ConfigError(f"mode must be 'max' or 'min', got {settings.mode!r}")
    keys = keys_of.result_keys()
    metric = canonical_stop_key(settings.metric)
    if settings.metric not in keys and metric not in keys and not metric.startswith("custom_metrics/"):
        close = difflib.get_close_matches(metric, keys, n=3)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise ConfigError(
            f"unknown metric {settings.metric!r}: no result has it; {hint}e.g. episode_return_mean, "
            "episode_len_mean, timesteps_total, evaluation/episode_return_mean "
            "(every key: docs/guide/results.md)"
        )
    allowed = SCHEDULER_SETTINGS[settings.scheduler]
    unknown = sorted(set(settings.scheduler_config) - set(allowed))
    if unknown:
        where = ", ".join(allowed) or "none"
        raise ConfigError(f"{settings.scheduler} scheduler: unknown setting(s) {unknown}; allowed: {where}")
    if settings.scheduler == "pbt":
        _check_mutations(config, settings.scheduler_config.get("hyperparam_mutations"))
    return criteria


def _check_mutations(config: AlgorithmConfig, mutations: Any) -> None:
    if not isinstance(mutations, dict) or not mutations:
        raise ConfigError('pbt scheduler: set hyperparam_mutations, e.g. {"lr": [0.001, 0.0001]}')
    for key, values in mutations.items():
        options = values if isinstance(values, list) else candidates(values)
        if not isinstance(values, list) and not options:
            raise ConfigError(f"pbt scheduler: hyperparam_mutations[{key!r}] must be a list of values")
        for value in options:
            try:
                config.copy().update_from_dict({key: value})
            except ConfigError as err:
                raise ConfigError(f"pbt scheduler: hyperparam_mutations[{key!r}]: {err}") from None


__all__ = ["SCHEDULERS", "SCHEDULER_SETTINGS", "SweepSettings", "check_sweep", "is_sweep"]
