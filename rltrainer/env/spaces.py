"""Gymnasium spaces to and from plain JSON (checkpoints describe their spaces this way)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces

from rltrainer.errors import CheckpointError


def space_parts(space: spaces.Space, path: str = "") -> list[tuple[str, spaces.Space]]:
    """``(path, space)`` of each part of a (nested) Dict or Tuple space that is neither, in the
    space's order (Dict keys as the space iterates them, Tuple positions): ``"camera"``,
    ``"sensors/0"``. Any other space is its own single part, at ``path``."""
    if isinstance(space, spaces.Dict | spaces.Tuple):
        items = space.spaces.items() if isinstance(space, spaces.Dict) else enumerate(space.spaces)
        return [
            part for key, sub in items for part in space_parts(sub, f"{path}/{key}" if path else str(key))
        ]
    return [(path, space)]


def space_to_json(space: spaces.Space) -> dict[str, Any]:
    """A JSON-serializable description of ``space`` (infinite bounds become strings)."""
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "low": _floats_to_json(space.low),
            "high": _floats_to_json(space.high),
            "shape": list(space.shape),
            "dtype": str(space.dtype),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        described = {"type": "MultiDiscrete", "nvec": space.nvec.tolist()}
        if np.any(space.start != 0):  # written only when set: older files have no "start"
            described["start"] = space.start.tolist()
        return described
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": {k: space_to_json(s) for k, s in space.spaces.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_json(s) for s in space.spaces]}
    raise ValueError(f"unsupported space {space!r}")


def space_from_json(data: dict[str, Any]) -> spaces.Space:
    """Rebuild a space written by ``space_to_json``."""
    try:
        kind = data["type"]
        if kind == "Box":
            dtype = np.dtype(data["dtype"])
            low = np.asarray(_floats_from_json(data["low"]), dtype=dtype)
            high = np.asarray(_floats_from_json(data["high"]), dtype=dtype)
            return spaces.Box(low=low, high=high, shape=tuple(data["shape"]), dtype=dtype)
        if kind == "Discrete":
            return spaces.Discrete(data["n"], start=data.get("start", 0))
        if kind == "MultiDiscrete":
            return spaces.MultiDiscrete(data["nvec"], start=data.get("start"))
        if kind == "MultiBinary":
            return spaces.MultiBinary(data["n"])
        if kind == "Dict":
            return spaces.Dict({k: space_from_json(v) for k, v in data["spaces"].items()})
        if kind == "Tuple":
            return spaces.Tuple([space_from_json(v) for v in data["spaces"]])
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"invalid space description {data!r}: {err}") from None
    raise CheckpointError(f"unknown space type {data.get('type')!r}")


def _floats_to_json(values: np.ndarray) -> Any:
    def encode(x: float) -> float | str:
        return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")

    flat = [encode(float(x)) for x in np.asarray(values, dtype=np.float64).ravel()]
    return np.array(flat, dtype=object).reshape(values.shape).tolist()


def _floats_from_json(values: Any) -> Any:
    if isinstance(values, list):
        return [_floats_from_json(v) for v in values]
    return float(values)
