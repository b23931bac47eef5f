"""The Trainer era's import paths (``rltrainer.agents.ppo.PPOTrainer``), as RLlib 1.x documents them.

Re-exports only: ``<ALGO>Trainer`` is today's algorithm class and ``DEFAULT_CONFIG`` the
algorithm config's defaults as a plain dict (``<ALGO>Config().to_dict()``, a fresh one per
import, with the documents' key names), which the algorithm accepts as ``config=``::

    import rltrainer.agents.ppo as ppo

    config = ppo.DEFAULT_CONFIG.copy()
    config["num_workers"] = 0
    trainer = ppo.PPOTrainer(config=config, env="CartPole-v1")

Imported on first use, like ``rltrainer.algorithms``: nothing here imports torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def trainer_exports(package: str, algorithm: str, config: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``rltrainer.agents.<algo>``: ``algorithm`` and ``config``
    are ``"module:Class"`` of today's classes; ``<Class>Trainer`` is the algorithm class."""
    algo_module, algo_name = algorithm.split(":")
    config_module, config_name = config.split(":")

    def __getattr__(name: str) -> Any:  # noqa: N807 - the module hook's name
        if name in (algo_name, f"{algo_name}Trainer"):
            return getattr(importlib.import_module(algo_module), algo_name)
        if name == config_name:
            return getattr(importlib.import_module(config_module), config_name)
        if name == "DEFAULT_CONFIG":
            return getattr(importlib.import_module(config_module), config_name)().to_dict()
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
