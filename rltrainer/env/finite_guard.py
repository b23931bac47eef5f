"""NaN and infinity in what envs return, caught at the step they appear.

``FiniteGuard.check`` runs on every vectorized step's observations (before the observation
filter, whose running statistics one NaN would spoil for good) and rewards. The common case
costs one dot product with zeros (NaN or infinity in any element makes it NaN; about a
microsecond for a batch of CartPole observations); only a failing check looks further, to say
which sub-env, element and value.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from rltrainer.errors import NumericalError

logger = logging.getLogger(__name__)


class FiniteGuard:
    """One env runner's check. ``on_nonfinite="stop"`` raises ``NumericalError``;
    ``"skip_batch"`` zeroes the bad values (so the policy can still act), marks the fragment
    ``tainted`` (the runner then drops its steps) and warns; ``max_in_a_row`` tainted
    fragments in a row stop training anyway (an env that never recovers)."""

    def __init__(self, on_nonfinite: str, worker_index: int, env_name: str, max_in_a_row: int) -> None:
        self.stop = on_nonfinite == "stop"
        self.where = f"env runner {worker_index} ({env_name})"
        self.max_in_a_row = max_in_a_row
        self.tainted = False
        self.tainted_in_a_row = 0
        self._zeros: dict[tuple[int, np.dtype], np.ndarray] = {}

    def check(self, what: str, values: np.ndarray, env_steps: int) -> np.ndarray:
        """``values`` (``[num_envs, ...]``) when all finite; otherwise stop, or the repaired copy."""
        if values.dtype.kind != "f":
            return values
        flat = values.reshape(-1)
        key = (flat.size, flat.dtype)
        zeros = self._zeros.get(key)
        if zeros is None:
            zeros = self._zeros[key] = np.zeros(flat.size, dtype=flat.dtype)
        if math.isfinite(flat.dot(zeros)):
            return values
        return self._found(what, values, env_steps)

    def _found(self, what: str, values: np.ndarray, env_steps: int) -> np.ndarray:
        first = tuple(int(i) for i in np.argwhere(~np.isfinite(values))[0])
        element = f"[{', '.join(map(str, first[1:]))}]" if len(first) > 1 else ""
        message = (
            f"{self.where}: the {what}{element} of sub-env {first[0]} is {values[first]} "
            f"(after {env_steps} env steps of this runner)"
        )
        if self.stop:
            raise NumericalError(
                f"{message}; fix the env, or set .debugging(on_nonfinite='skip_batch') to drop such fragments"
            )
        if not self.tainted:
            logger.warning("%s: its fragment is dropped (on_nonfinite='skip_batch')", message)
        self.tainted = True
        return np.where(np.isfinite(values), values, 0).astype(values.dtype, copy=False)

    def end_fragment(self) -> bool:
        """Whether the fragment just sampled is to be dropped; resets for the next one."""
        tainted, self.tainted = self.tainted, False
        self.tainted_in_a_row = self.tainted_in_a_row + 1 if tainted else 0
        if self.tainted_in_a_row >= self.max_in_a_row:
            raise NumericalError(
                f"{self.where}: {self.tainted_in_a_row} fragments in a row held NaN or infinity "
                "(num_consecutive_env_runner_failures_tolerance); the env does not recover"
            )
        return tainted
