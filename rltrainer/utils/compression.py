"""``compress_observations``: arrays lz4-compressed for the trip from an env runner to the driver.

RLlib compresses observations with lz4 too (``ray.rllib.utils.compression``); here the packed
form is a small record of dtype, shape and bytes (no base64, no pickle of the array itself).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import lz4.frame
import numpy as np


class PackedArray(NamedTuple):
    """An array's bytes, lz4-compressed, with what rebuilds it."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes

    @property
    def nbytes(self) -> int:
        return len(self.data)


def pack(array: np.ndarray) -> PackedArray:
    array = np.ascontiguousarray(array)
    return PackedArray(array.dtype.str, array.shape, lz4.frame.compress(array.tobytes()))


def unpack(packed: PackedArray) -> np.ndarray:
    buffer = lz4.frame.decompress(packed.data)
    return np.frombuffer(buffer, dtype=np.dtype(packed.dtype)).reshape(packed.shape).copy()


def pack_rollout(rollout: Any) -> Any:
    """A ``Rollout`` with its observations (``obs``, ``last_obs``) packed."""
    return rollout._replace(obs=pack(rollout.obs), last_obs=pack(rollout.last_obs))


def unpack_rollout(rollout: Any) -> Any:
    """``pack_rollout`` undone (a rollout that was not packed is returned as it is)."""
    if not isinstance(getattr(rollout, "obs", None), PackedArray):
        return rollout
    return rollout._replace(obs=unpack(rollout.obs), last_obs=unpack(rollout.last_obs))


__all__ = ["PackedArray", "pack", "pack_rollout", "unpack", "unpack_rollout"]
