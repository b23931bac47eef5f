"""Algorithm names (as the CLI and checkpoints spell them) -> classes, imported lazily."""

from __future__ import annotations

import importlib

from rltrainer.errors import ConfigError

ALGORITHMS: dict[str, str] = {
    "PPO": "rltrainer.algorithms.ppo:PPO",
    "DQN": "rltrainer.algorithms.dqn:DQN",
    "SAC": "rltrainer.algorithms.sac:SAC",
}


def get_algorithm_class(name: str) -> type:
    """The algorithm class called ``name`` (case-insensitive)."""
    key = {k.upper(): k for k in ALGORITHMS}.get(str(name).upper())
    if key is None:
        raise ConfigError(f"unknown algorithm {name!r}; available: {', '.join(sorted(ALGORITHMS))}")
    module_name, _, class_name = ALGORITHMS[key].partition(":")
    return getattr(importlib.import_module(module_name), class_name)
