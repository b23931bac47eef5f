"""Sweeps on the platform: whether an experiment is one, its trials, and how many run at once.

An ``RLExperiment`` is a sweep when its ``config`` (or ``envConfig``) holds search spaces
(``lr: {grid_search: [0.001, 0.0001]}``), or ``spec.tune`` asks for more than one sample or a
scheduler: exactly when ``rltrainer train`` runs the driver's command line as a Ray Tune sweep
(``rltrainer.tune.sweep_settings.is_sweep``). The whole sweep is one Ray job; each trial is one
rltrainer algorithm with its own placement group (a driver bundle, then its learner and
env-runner bundles), so the RayCluster is sized for the trials that run at once
(``builders.raycluster``). Pure: no Ray, no torch (the operator's image has neither).
"""

from __future__ import annotations

import math
from typing import Any

from rltrainer.algorithms.algorithm_config import ALIASES
from rltrainer.algorithms.registry import get_config_class
from rltrainer.tune.search_space import candidates, holds_search_space, is_search_space
from rltrainer.tune.sweep_settings import SweepSettings
from rltrainer_operator.models import ExperimentSpec

#: The config key whose CPUs each trial's driver bundle asks for (Tune reserves it per trial).
DRIVER_CPUS_KEY = "num_cpus_for_main_process"


def searched_config(spec: ExperimentSpec) -> dict[str, Any]:
    """What Tune resolves search spaces in: ``config``, with ``envConfig`` as ``env_config``."""
    return {**spec.config, "env_config": dict(spec.envConfig)}


def search_space_keys(spec: ExperimentSpec) -> list[str]:
    """The top-level keys holding search spaces (``env_config`` for ``envConfig``), sorted."""
    return sorted(key for key, value in searched_config(spec).items() if holds_search_space(value))


def is_sweep(spec: ExperimentSpec) -> bool:
    """Search spaces, ``tune.numSamples > 1`` or a scheduler: the driver runs a Tune sweep."""
    if search_space_keys(spec):
        return True
    return spec.tune is not None and (spec.tune.numSamples > 1 or spec.tune.scheduler != "fifo")


def sweep_settings(spec: ExperimentSpec) -> SweepSettings:
    """``spec.tune`` (its defaults when absent) as rltrainer's sweep settings."""
    tune = spec.tune
    if tune is None:
        return SweepSettings()
    return SweepSettings(
        num_samples=tune.numSamples,
        max_concurrent_trials=tune.maxConcurrentTrials,
        scheduler=tune.scheduler,
        scheduler_config=dict(tune.schedulerConfig),
        metric=tune.metric,
        mode=tune.mode,
    )


def grid_size(value: Any) -> int:
    """How many grid points ``value`` spans: the product of its ``grid_search`` lists' lengths
    (Tune runs every combination); other values, and sampled domains, count 1."""
    if isinstance(value, dict) and is_search_space(value):
        return max(1, len(value["grid_search"]))
    if isinstance(value, dict):
        return math.prod(grid_size(item) for item in value.values())
    if isinstance(value, list | tuple):
        return math.prod(grid_size(item) for item in value)
    return 1


def trial_count(spec: ExperimentSpec) -> int:
    """Trials of the sweep: grid combinations times ``numSamples`` (1 for a single run)."""
    if not is_sweep(spec):
        return 1
    samples = spec.tune.numSamples if spec.tune is not None else 1
    return grid_size(searched_config(spec)) * samples


def concurrency(spec: ExperimentSpec) -> int:
    """Trials running at once: ``maxConcurrentTrials`` when set, else every trial (1 for a
    single run); never more than there are trials."""
    trials = trial_count(spec)
    limit = spec.tune.maxConcurrentTrials if spec.tune is not None else None
    return min(trials, limit) if limit else trials


def driver_cpus(spec: ExperimentSpec) -> int:
    """CPUs of each trial's driver bundle: ``num_cpus_for_main_process`` (the largest value its
    search space can take), else the algorithm config's default."""
    for key, value in spec.config.items():
        if ALIASES.get(key, key) == DRIVER_CPUS_KEY:
            numbers = [v for v in candidates(value) if isinstance(v, int | float) and not isinstance(v, bool)]
            if numbers:
                return max(1, math.ceil(max(numbers)))
    default = get_config_class(spec.algorithm).model_fields[DRIVER_CPUS_KEY].default
    return int(default)
