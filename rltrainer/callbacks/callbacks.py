"""``from rltrainer.callbacks.callbacks import RLlibCallback``, as RLlib's current documents
import it; the classes live in ``rltrainer.algorithms.callbacks``."""

from __future__ import annotations

from rltrainer.algorithms.callbacks import DefaultCallbacks, MemoryTrackingCallbacks, RLlibCallback

__all__ = ["DefaultCallbacks", "MemoryTrackingCallbacks", "RLlibCallback"]
