"""Turn (batches of) observations of any supported space into flat float32 arrays.

Box observations are flattened, Discrete and MultiDiscrete ones one-hot encoded,
Dict and Tuple ones flattened recursively and concatenated in the space's order.
Everything operates on the batch axis at once. Rows are float32, but for ``uint8`` frames (a
rank-3 ``uint8`` Box): those stay ``uint8``, 4x smaller through sampling, transfer and replay;
the conv encoder scales them (``rltrainer.core.encoders``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from rltrainer.env.spaces import space_parts
from rltrainer.errors import EnvError


class Preprocessor:
    """Flattens observations of ``space`` into vectors of ``size`` floats."""

    def __init__(self, space: spaces.Space) -> None:
        self.space = space
        self.size = flat_size(space)
        self.dtype = np.dtype(np.float32)
        """The rows' dtype: ``uint8`` for ``uint8`` frames, float32 for everything else."""
        if isinstance(space, spaces.Box) and len(space.shape) == 3 and space.dtype == np.uint8:
            self.dtype = np.dtype(np.uint8)
            self.transform = _flatten_frames
        elif isinstance(space, (spaces.Box, spaces.MultiBinary)):
            self.transform = _flatten_array  # env runners call it every step: skip the dispatch

    def transform(self, batch: Any) -> np.ndarray:
        """A batch of observations (leading batch axis) -> float32 array ``[B, size]``."""
        return _flatten(self.space, batch)

    def transform_one(self, obs: Any) -> np.ndarray:
        """One observation -> float32 array ``[1, size]``; ``EnvError`` when it does not fit the
        observation space (a user's call, e.g. ``compute_single_action``, not the env's)."""
        try:
            flat = self.transform(_add_batch_axis(self.space, obs))
        except (ValueError, TypeError, KeyError, IndexError) as err:
            flat, problem = None, f"{type(err).__name__}: {err}"
        if flat is None or flat.shape != (1, self.size):
            array_like = isinstance(obs, np.ndarray | list | int | float)
            got = (
                f"an observation of shape {np.shape(obs)}"
                if array_like
                else f"{type(obs).__name__} {obs!r:.80}"
            )
            detail = f" ({problem})" if flat is None else ""
            raise EnvError(f"{got} does not fit the observation space {self.space}{detail}")
        return flat


def leaf_columns(space: spaces.Space) -> list[tuple[str, spaces.Space, int, int]]:
    """``(path, space, start, stop)`` of each non-Dict/Tuple part of ``space`` (``space_parts``)
    in a row's column order; the row is what ``Preprocessor.transform`` returns."""
    leaves, start = [], 0
    for path, leaf in space_parts(space):
        size = flat_size(leaf)
        leaves.append((path, leaf, start, start + size))
        start += size
    return leaves


def flat_size(space: spaces.Space) -> int:
    """How many columns observations of ``space`` take in a row."""
    if isinstance(space, spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    if isinstance(space, spaces.MultiBinary):
        return int(np.prod(space.shape))
    if isinstance(space, spaces.Dict):
        return sum(flat_size(s) for s in space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return sum(flat_size(s) for s in space.spaces)
    raise EnvError(
        f"unsupported observation space {space}: use Box, Discrete, MultiDiscrete, "
        "MultiBinary, or Dict/Tuple of those"
    )


def _flatten_array(batch: Any) -> np.ndarray:
    """Box and MultiBinary batches: float32 ``[B, size]``."""
    arr = np.asarray(batch, dtype=np.float32)
    return arr if arr.ndim == 2 else arr.reshape(arr.shape[0], -1)


def _flatten_frames(batch: Any) -> np.ndarray:
    """``uint8`` frame batches: ``uint8`` ``[B, size]`` (a view when the batch is one array)."""
    arr = np.asarray(batch)
    if arr.dtype != np.uint8:
        arr = arr.astype(np.uint8)
    return arr.reshape(arr.shape[0], -1)


def _flatten(space: spaces.Space, batch: Any) -> np.ndarray:
    if isinstance(space, (spaces.Box, spaces.MultiBinary)):
        return _flatten_array(batch)
    if isinstance(space, spaces.Discrete):
        index = np.asarray(batch, dtype=np.int64).reshape(-1) - int(space.start)
        return np.eye(int(space.n), dtype=np.float32)[index]
    if isinstance(space, spaces.MultiDiscrete):
        index = np.asarray(batch, dtype=np.int64).reshape(len(batch), -1)
        nvec = space.nvec.reshape(-1)
        offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
        out = np.zeros((index.shape[0], int(nvec.sum())), dtype=np.float32)
        np.put_along_axis(out, index + offsets, 1.0, axis=1)
        return out
    if isinstance(space, spaces.Dict):
        return np.concatenate([_flatten(s, batch[k]) for k, s in space.spaces.items()], axis=1)
    if isinstance(space, spaces.Tuple):
        return np.concatenate([_flatten(s, batch[i]) for i, s in enumerate(space.spaces)], axis=1)
    raise EnvError(f"unsupported observation space {space}")


def _add_batch_axis(space: spaces.Space, obs: Any) -> Any:
    if isinstance(space, spaces.Dict):
        return {k: _add_batch_axis(s, obs[k]) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_add_batch_axis(s, o) for s, o in zip(space.spaces, obs, strict=True))
    return np.asarray(obs)[None]
