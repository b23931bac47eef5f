"""Compiled kernels for the env runners' inference, used when numba is installed.

Sampling runs a small policy network on a batch of observations at every env step; at
these sizes numpy spends most of its time in per-call overhead, and its float32 tanh does
not vectorize on AVX2. The numba kernels in ``_numba_kernels`` fuse a layer's bias and
activation and the categorical sampling into one pass each (the matrix products stay
with numpy's BLAS). ``pip install "rltrainer[fast]"`` adds numba (the dev extras include it).

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

logger = logging.getLogger(__name__)

ENV_VAR = "RLTRAINER_COMPILED_INFERENCE"
# Activations the kernels implement (others run in numpy), by the kernels' codes.
ACTIVATION_CODES = {"linear": 0, "relu": 1, "tanh": 2}


@functools.cache
def kernels() -> ModuleType | None:
    """The kernel module, or None when numba is missing, fails to import, or is turned off."""
    if os.environ.get(ENV_VAR, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    if importlib.util.find_spec("numba") is None:
        return None
    try:
        from rltrainer.core import _numba_kernels
    except Exception as err:  # noqa: BLE001 - e.g. a numba built for another numpy
        logger.warning("numba is installed but failed to import (%s); inference runs in numpy", err)
        return None
    return _numba_kernels


def warm_up() -> bool:
    """Compile (or load from numba's cache) the kernels for the argument types inference uses.

    Image builds call it so that env runners start with the kernels cached. Returns whether
    the kernels are in use.
    """
    k = kernels()
    if k is None:
        return False
    x, bias = np.zeros((2, 3), dtype=np.float32), np.zeros(3, dtype=np.float32)
    for code in ACTIVATION_CODES.values():
        k.bias_activation(x, bias, code)
    k.categorical_sample(x, np.zeros(2, dtype=np.float32), True)
    return True
