"""Trainer-era path of the callbacks (``from rltrainer.agents.callbacks import DefaultCallbacks``)."""

from rltrainer.algorithms.callbacks import DefaultCallbacks, MemoryTrackingCallbacks, MultiCallbacks

__all__ = ["DefaultCallbacks", "MemoryTrackingCallbacks", "MultiCallbacks"]
