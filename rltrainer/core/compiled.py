"""Compiled kernels for the env runners' inference, used when numba is installed.

Sampling runs a small policy network on a batch of observations at every env step; at
these sizes numpy spends most of its time in per-call overhead, and its float32 tanh does
not vectorize on AVX2. The numba kernels in ``_numba_kernels`` fuse a layer's bias and
activation and the categorical sampling into one call for a whole MLP (matrix products
go to BLAS). ``pip install "rltrainer[fast]"`` adds numba and SciPy (the dev extras include it).

Without numba, or with ``RLTRAINER_COMPILED_INFERENCE=0`` in the environment (of every
process that samples, Ray workers included), the same computation runs in numpy. Results
agree to float32 rounding; the kernels' tanh differs from ``np.tanh`` by less than 4e-7.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
from types import ModuleType

import numpy as np

from rltrainer.core.kernel_codes import ACTIVATION_CODES

logger = logging.getLogger(__name__)

ENV_VAR = "RLTRAINER_COMPILED_INFERENCE"
# Smaller batches stay in numpy: there the kernels save a few microseconds per call, which
# would take hundreds of thousands of calls to pay back loading numba (~0.5 s per process).
# compute_single_action, evaluation with few envs and short runs never load it.
MIN_BATCH = 32


@functools.cache
def kernels() -> ModuleType | None:
    """The kernel module, or None when numba is missing, fails to import, or is turned off."""
    if os.environ.get(ENV_VAR, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    if importlib.util.find_spec("numba") is None or importlib.util.find_spec("scipy") is None:
        return None  # numba's matrix products call SciPy's BLAS
    try:  # imported here, not above: numba is optional and takes ~0.5 s to load
        from rltrainer.core import _numba_kernels
    except Exception as err:  # noqa: BLE001 - e.g. a numba built for another numpy
        logger.warning("numba is installed but failed to import (%s); inference runs in numpy", err)
        return None
    return _numba_kernels


def for_batch(size: int) -> ModuleType | None:
    """The kernels for a batch of ``size`` rows, or None where numpy should run it."""
    return kernels() if size >= MIN_BATCH else None


def warm_up() -> bool:
    """Compile (or load from numba's cache) the kernels for the argument types inference uses.

    Image builds call it so that env runners start with the kernels cached (for MLPs of one
    to four layers). Returns whether the kernels are in use.
    """
    k = kernels()
    if k is None:
        return False
    x, uniforms = np.zeros((2, 3), dtype=np.float32), np.zeros(2, dtype=np.float32)
    out, actions, logp = np.zeros_like(x), np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.float32)
    k.categorical_sample(x, uniforms, True, actions, logp)
    for layers in range(1, 5):
        weights = tuple(np.zeros((3, 3), dtype=np.float32) for _ in range(layers))
        biases = tuple(np.zeros(3, dtype=np.float32) for _ in range(layers))
        codes = tuple(ACTIVATION_CODES["tanh"] for _ in range(layers))
        for obs in (x, np.asfortranarray(x)):  # vector envs return either layout
            k.mlp_forward(obs, weights, biases, codes, out)
            k.mlp_categorical_sample(obs, weights, biases, codes, uniforms, True, out, actions, logp)
        # Multi-agent runners' PolicyStack: the same layers stacked for two policies.
        stacked_weights = tuple(np.stack([w, w]) for w in weights)
        stacked_biases = tuple(np.stack([b, b]) for b in biases)
        starts, slots = np.array([0, 1, 2], dtype=np.int64), np.array([1, 0], dtype=np.int64)
        k.stacked_mlp_categorical_sample(
            x, starts, slots, stacked_weights, stacked_biases, codes, uniforms, True, out, actions, logp
        )
    flags = np.zeros((2, 3), dtype=bool)
    k.close_episodes(x, flags, flags, np.zeros(3), np.zeros(3, dtype=np.int64))
    return True
