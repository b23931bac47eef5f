"""rltrainer's algorithms by name in Ray Tune: ``tune.Tuner("PPO", param_space=config)``.

RLlib registers its algorithms when ``ray.rllib`` is imported. rltrainer does the same without
making every user pay for Tune: importing ``rltrainer`` installs a hook that runs when
``ray.tune`` is imported (or at once, if it already is), and again whenever Ray starts (Tune's
registry lives in the Ray session). It registers

- every algorithm of ``rltrainer.algorithms.registry`` under its name, *by reference*: Tune
  stores an object that unpickles to the class, so neither torch nor the algorithm is
  imported until a trial needs it (and our names win over RLlib's, which Tune only looks
  up for names it does not know);
- ``AlgorithmConfig`` as a Tune config, so ``param_space=config`` is read as ``config.to_dict()``.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
from typing import Any

from rltrainer.algorithms.registry import ALGORITHMS
from rltrainer.utils.import_paths import import_object

_TUNE = "ray.tune"
_lock = threading.Lock()
_installed = False


class _ClassReference:
    """Pickles to "import this class": what Tune's registry stores for each algorithm name."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return import_object, (self.path,)


def register_with_tune() -> None:
    """Register every algorithm name and ``AlgorithmConfig`` with Tune (imports ``ray.tune``)."""
    from ray.tune.registry import TRAINABLE_CLASS, _global_registry
    from ray.tune.tune import _Config

    from rltrainer.algorithms.algorithm_config import AlgorithmConfig
    from rltrainer.algorithms.trainable import become_trainable

    become_trainable()  # the algorithm classes, if imported, are Trainables from now on
    _Config.register(AlgorithmConfig)
    for name, registered in ALGORITHMS.items():
        # Tune's register_trainable would need the class itself (torch); the registry takes any
        # picklable value and unpickles it when a trial asks for the name.
        _global_registry.register(TRAINABLE_CLASS, name, _ClassReference(registered.algorithm))


def _on_ray_init() -> None:
    register_with_tune()


class _AfterTuneImport(importlib.abc.MetaPathFinder):
    """Runs ``register_with_tune`` right after ``ray.tune`` has been imported."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:  # noqa: ARG002
        if fullname != _TUNE:
            return None
        sys.meta_path.remove(self)  # let the usual finders find it, once
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module: Any) -> None:
            exec_module(module)
            _registered_after_import()

        spec.loader.exec_module = exec_then_register  # type: ignore[method-assign]
        return spec


def _registered_after_import() -> None:
    import ray

    ray._private.worker._post_init_hooks.append(_on_ray_init)  # noqa: SLF001 - as Tune's registry does
    register_with_tune()


def install() -> None:
    """Register with Tune now if it is imported, else right after it is (idempotent)."""
    global _installed  # noqa: PLW0603 - one hook per process
    with _lock:
        if _installed:
            return
        _installed = True
    if _TUNE in sys.modules:
        _registered_after_import()
    else:
        sys.meta_path.insert(0, _AfterTuneImport())


__all__ = ["install", "register_with_tune"]
