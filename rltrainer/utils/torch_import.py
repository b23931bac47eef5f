"""torch's first import with Python's cyclic garbage collector paused.

Importing torch builds about a million objects that live as long as the process (its modules,
operator registrations, decompositions). While they pile up, the collector runs hundreds of
times, each full pass walking the whole growing heap: about a fifth of torch's import time on
a 2-core CPU, and every later full pass walks them again (~70 ms per 100 PPO iterations on
CartPole). So when rltrainer is imported before torch, torch's import runs with the collector
paused, then what exists by then is frozen (``gc.freeze``): later collections skip it. The
collector is on again, with its usual thresholds, as soon as torch's import ends (or fails).
"""

from __future__ import annotations

import gc
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any


class _TorchImportFinder(importlib.abc.MetaPathFinder):
    """Finds ``torch`` as Python's path finder does, with a loader that pauses the collector."""

    def __init__(self) -> None:
        self.used = False

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,  # noqa: ARG002 - the finder protocol's
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch" or self.used:
            return None
        self.used = True  # once: a failed import is retried by the usual finders
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        loader: Any = spec.loader
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            paused = gc.isenabled()
            gc.disable()
            try:
                run(module)
            finally:
                del loader.exec_module  # the loader's own method again
                if self in sys.meta_path:
                    sys.meta_path.remove(self)
                if paused:
                    gc.freeze()
                    gc.enable()

        loader.exec_module = exec_module  # this loader instance only (torch's)
        return spec


def install() -> None:
    """Pause the collector during torch's import if torch is not imported yet (idempotent)."""
    if "torch" in sys.modules or any(isinstance(f, _TorchImportFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _TorchImportFinder())
