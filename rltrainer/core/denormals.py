"""Learner updates run with denormal floats flushed to zero, as TensorFlow and XLA run on CPU.

A ReLU unit that no input activates has exactly zero gradients, and Adam's first moment of
its parameters then decays by ``beta1`` at every step: after a few hundred steps it is a
denormal number (below 1.2e-38 in float32). x86 CPUs handle arithmetic on denormals slowly
(older cores take a microcode assist of ~100 cycles per value), so a learner whose network has
dead units slows down as training goes on (PPO on CartPole: 40-50% of its 9k parameters get
zero gradients; by iteration 100, 3.5k of Adam's moments are denormal and its step is 1.7x
slower). Flushing them (the CPU's FTZ and DAZ modes) changes nothing else: a denormal moment
moves a parameter by less than 1e-30 at learning rates below 0.1.

The mode is the calling thread's, so it is set only around an update and put back after it
(a user's own code in the driver keeps IEEE denormals). GPUs are not affected either way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

#: float32's smallest denormal, made from its bits (no arithmetic, which the mode would flush)
_SMALLEST_DENORMAL = torch.tensor([1], dtype=torch.int32).view(torch.float32)


def flushing() -> bool:
    """Whether this thread's CPU ops flush denormals now (``torch.set_flush_denormal``)."""
    return bool(_SMALLEST_DENORMAL.mul(1.0).eq(0).item())


@contextlib.contextmanager
def flush_denormals() -> Iterator[None]:
    """Flush denormals to zero inside the block (also a decorator), as it was after it.

    A no-op where the mode is already on or the CPU has none (``set_flush_denormal`` says so).
    """
    if flushing() or not torch.set_flush_denormal(True):
        yield
        return
    try:
        yield
    finally:
        torch.set_flush_denormal(False)
