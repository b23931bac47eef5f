"""Dict and Tuple action spaces (RLlib's ``MultiActionDistribution``).

A composite action is one independent distribution per part, each part one of the spaces the
other distributions cover: ``Discrete`` (a categorical), ``MultiDiscrete`` / ``MultiBinary``
(a categorical per column) and ``Box`` (a diagonal Gaussian). The network's outputs hold the
parts' inputs side by side, in the space's order (Dict keys as the space iterates them, Tuple
positions, nested). Sampled actions are one float32 row per step, the parts' columns side by
side (a discrete part's index is exact in float32): the learner, the rollouts and the output
files see that row; log-probabilities, entropies and KLs add up over the parts.

The env gets the structure back (``CompositeActions.to_env``): a dict or tuple of batched
arrays, each part in its own dtype and shape, discrete parts from their ``start``, Box parts
rescaled from [-1, 1] to their bounds (``normalize_actions``) or clipped (``clip_actions``).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rltrainer.core.distributions import Categorical, DiagGaussian, multi_categorical, nvec_of
from rltrainer.env.spaces import space_parts

PART_SPACES = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Box)


def is_composite(space: spaces.Space) -> bool:
    return isinstance(space, spaces.Dict | spaces.Tuple)


def action_parts(space: spaces.Space) -> list[tuple[str, spaces.Space]]:
    """``(path, space)`` of each part of a Dict or Tuple action space, in the row's order;
    ``ValueError`` naming a part no distribution covers."""
    parts = space_parts(space)
    for path, part in parts:
        if not isinstance(part, PART_SPACES):
            raise ValueError(
                f"action part {path!r} is {part}: parts of Dict/Tuple actions are Discrete, "
                "MultiDiscrete, MultiBinary or Box"
            )
    return parts


def _columns(space: spaces.Space) -> int:
    """Columns a part's action takes in the row."""
    return 1 if isinstance(space, spaces.Discrete) else int(math.prod(space.shape))


def part_columns(parts: list[tuple[str, spaces.Space]]) -> list[slice]:
    """Each part's columns in the action row (a Discrete part's one index, the others' flat
    values), for ``action_parts(space)``."""
    slices, start = [], 0
    for _, part in parts:
        width = _columns(part)
        slices.append(slice(start, start + width))
        start += width
    return slices


class MultiAction:
    """Independent distributions over a composite action's parts (see the module doc);
    ``multi_action(space)`` makes the class for one space. RLlib's calls: ``sample()``,
    ``deterministic_sample()``, ``logp()``, ``entropy()``, ``kl()``."""

    #: (distribution class, input columns, action columns, squeeze: a Discrete part's [B] actions)
    PARTS: tuple[tuple[type, int, int, bool], ...] = ()

    def __init__(self, inputs: torch.Tensor, model: Any = None) -> None:  # noqa: ARG002 - RLlib's signature
        widths = [width for _, width, _, _ in self.PARTS]
        self.parts = [
            cls(x) for (cls, *_), x in zip(self.PARTS, torch.split(inputs, widths, dim=-1), strict=True)
        ]
        self.last_sample: torch.Tensor | None = None

    @classmethod
    def required_inputs(cls, space: spaces.Space) -> int:  # noqa: ARG003 - the other classes' signature
        return sum(width for _, width, _, _ in cls.PARTS)

    def _row(self, actions: list[torch.Tensor]) -> torch.Tensor:
        columns = [
            a.unsqueeze(-1) if squeeze else a for a, (*_, squeeze) in zip(actions, self.PARTS, strict=True)
        ]
        return torch.cat([c.float() for c in columns], dim=-1)

    def _split(self, actions: torch.Tensor) -> list[torch.Tensor]:
        parts = torch.split(actions, [columns for _, _, columns, _ in self.PARTS], dim=-1)
        return [p.squeeze(-1) if squeeze else p for p, (*_, squeeze) in zip(parts, self.PARTS, strict=True)]

    def sample(self) -> torch.Tensor:
        self.last_sample = self._row([part.sample() for part in self.parts])
        return self.last_sample

    def deterministic_sample(self) -> torch.Tensor:
        return self._row([part.deterministic_sample() for part in self.parts])

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return sum(part.log_prob(a) for part, a in zip(self.parts, self._split(actions), strict=True))

    logp = log_prob  # RLlib's name

    def entropy(self) -> torch.Tensor:
        return sum(part.entropy() for part in self.parts)

    def kl(self, other: MultiAction) -> torch.Tensor:
        return sum(part.kl(theirs) for part, theirs in zip(self.parts, other.parts, strict=True))

    def sampled_action_logp(self) -> torch.Tensor:
        if self.last_sample is None:
            raise ValueError("sampled_action_logp(): call sample() first")
        return self.log_prob(self.last_sample)

    @classmethod
    def sample_numpy(
        cls, inputs: np.ndarray, explore: bool, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(actions [B, columns], logp [B])`` from numpy inputs: each part sampled by its class."""
        rows, logp, start = [], np.zeros(len(inputs), dtype=np.float32), 0
        for part_class, width, _, _ in cls.PARTS:
            part_inputs = np.ascontiguousarray(inputs[:, start : start + width])
            actions, part_logp = part_class.sample_numpy(part_inputs, explore, rng)
            rows.append(np.asarray(actions, dtype=np.float32).reshape(len(inputs), -1))
            logp += part_logp
            start += width
        return np.concatenate(rows, axis=1), logp


def _part_class(space: spaces.Space) -> tuple[type, int, int, bool]:
    if isinstance(space, spaces.Discrete):
        return Categorical, int(space.n), 1, True
    if isinstance(space, spaces.Box):
        size = int(math.prod(space.shape))
        return DiagGaussian, 2 * size, size, False
    nvec = tuple(int(n) for n in nvec_of(space))
    return multi_categorical(nvec), sum(nvec), len(nvec), False


def multi_action(space: spaces.Dict | spaces.Tuple) -> type[MultiAction]:
    """The ``MultiAction`` class for a Dict or Tuple action space (one class per layout)."""
    return _multi_action(tuple(_part_class(part) for _, part in action_parts(space)))


@functools.cache
def _multi_action(parts: tuple[tuple[type, int, int, bool], ...]) -> type[MultiAction]:
    names = ", ".join(cls.__name__ for cls, *_ in parts)
    return type(f"MultiAction[{names}]", (MultiAction,), {"PARTS": parts})


class CompositeActions:
    """Rows of a composite action <-> the structure the env takes (see the module doc)."""

    def __init__(
        self, space: spaces.Dict | spaces.Tuple, normalize_actions: bool, clip_actions: bool
    ) -> None:
        self.space = space
        self.parts = action_parts(space)
        self.columns = part_columns(self.parts)
        """Per part: its columns in the row (a Discrete part's one index, the others' flat values)."""
        self.width = self.columns[-1].stop
        """Columns of a row: all the parts'."""
        self._normalized = []  # per part: a bounded Box acted in [-1, 1] (normalize_actions)
        for _, part in self.parts:
            bounded = (
                isinstance(part, spaces.Box) and np.isfinite(part.low).all() and np.isfinite(part.high).all()
            )
            self._normalized.append(bounded and normalize_actions)
        self.clip_actions = clip_actions

    def policy_space(self) -> spaces.Space:
        """The space of the distribution's actions per part: [-1, 1] for normalized Box parts."""
        parts = iter(zip(self.parts, self._normalized, strict=True))

        def rebuild(space: spaces.Space) -> spaces.Space:
            if isinstance(space, spaces.Dict):
                return spaces.Dict({key: rebuild(sub) for key, sub in space.spaces.items()})
            if isinstance(space, spaces.Tuple):
                return spaces.Tuple(tuple(rebuild(sub) for sub in space.spaces))
            (_, part), normalized = next(parts)
            return spaces.Box(-1.0, 1.0, part.shape, np.float32) if normalized else part

        return rebuild(self.space)

    def to_env(self, rows: np.ndarray, rescale: bool = True) -> Any:
        """``[B, columns]`` rows -> a dict/tuple of batched arrays in each part's dtype and shape;
        ``rescale=False`` leaves them in the distribution's terms (from 0, in [-1, 1])."""
        values = [
            self._part_to_env(part, normalized, rows[:, columns], rescale)
            for (_, part), normalized, columns in zip(self.parts, self._normalized, self.columns, strict=True)
        ]
        return self._rebuild(iter(values))

    def _part_to_env(
        self, part: spaces.Space, normalized: bool, columns: np.ndarray, rescale: bool
    ) -> np.ndarray:
        batch = len(columns)
        if isinstance(part, spaces.Box):
            actions = columns.astype(np.float32)
            if rescale and normalized:
                low, high = part.low.reshape(-1), part.high.reshape(-1)
                actions = low + (np.clip(actions, -1.0, 1.0) + 1.0) * 0.5 * (high - low)
            elif rescale and self.clip_actions:
                actions = np.clip(actions, part.low.reshape(-1), part.high.reshape(-1))
            return actions.reshape(batch, *part.shape).astype(part.dtype if rescale else np.float32)
        indices = np.rint(columns).astype(np.int64)
        if isinstance(part, spaces.Discrete):
            return indices[:, 0] + (int(part.start) if rescale else 0)
        if isinstance(part, spaces.MultiDiscrete) and rescale:
            indices = indices + np.asarray(part.start).reshape(-1)
        return indices.reshape(batch, *part.shape).astype(part.dtype if rescale else np.int64)

    def from_env(self, actions: Any) -> np.ndarray:
        """Env actions (a dict/tuple of batched arrays) -> ``[B, columns]`` rows (``to_env``
        undone; clipping cannot be)."""
        leaves = self._leaves(actions)
        columns = []
        for (_, part), normalized, value in zip(self.parts, self._normalized, leaves, strict=True):
            value = np.asarray(value)
            batch = value.shape[0] if value.ndim else 1
            if isinstance(part, spaces.Discrete):
                columns.append((value.reshape(batch, 1) - int(part.start)).astype(np.float32))
                continue
            flat = value.reshape(batch, -1).astype(np.float32)
            if isinstance(part, spaces.MultiDiscrete):
                flat = flat - np.asarray(part.start).reshape(-1)
            elif isinstance(part, spaces.Box) and normalized:
                low, high = part.low.reshape(-1), part.high.reshape(-1)
                flat = 2.0 * (flat - low) / (high - low) - 1.0
            columns.append(flat.astype(np.float32))
        return np.concatenate(columns, axis=1)

    def from_env_one(self, action: Any) -> np.ndarray:
        """One env action (a dict/tuple without a batch axis) -> a ``[1, columns]`` row."""
        leaves = iter(np.asarray(leaf)[None] for leaf in self._leaves(action))
        return self.from_env(self._rebuild(leaves))

    def _rebuild(self, values: Any, space: spaces.Space | None = None) -> Any:
        space = self.space if space is None else space
        if isinstance(space, spaces.Dict):
            return {key: self._rebuild(values, sub) for key, sub in space.spaces.items()}
        if isinstance(space, spaces.Tuple):
            return tuple(self._rebuild(values, sub) for sub in space.spaces)
        return next(values)

    def _leaves(self, actions: Any, space: spaces.Space | None = None) -> list[Any]:
        space = self.space if space is None else space
        if isinstance(space, spaces.Dict):
            return [leaf for key, sub in space.spaces.items() for leaf in self._leaves(actions[key], sub)]
        if isinstance(space, spaces.Tuple):
            return [leaf for i, sub in enumerate(space.spaces) for leaf in self._leaves(actions[i], sub)]
        return [actions]
