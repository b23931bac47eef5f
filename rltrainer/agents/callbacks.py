"""Trainer-era path of the callbacks (``from rltrainer.agents.callbacks import DefaultCallbacks``)."""

from rltrainer.algorithms.callbacks import DefaultCallbacks

__all__ = ["DefaultCallbacks"]
