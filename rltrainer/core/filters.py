"""Observation filters: ``NoFilter`` and ``MeanStdFilter`` (running mean/std normalization).

Statistics merge exactly (Chan et al.'s parallel variance), so env runners can each
collect a delta that the driver folds into the global filter and broadcasts back.
"""

from __future__ import annotations

import numpy as np

from rltrainer.errors import ConfigError

CLIP = 10.0  # normalized observations are clipped to [-10, 10], as in RLlib and SB3's VecNormalize.


class RunningStat:
    """Count, mean and sum of squared deviations of a stream of vectors."""

    def __init__(self, size: int) -> None:
        self.count = 0.0
        self.mean = np.zeros(size, dtype=np.float64)
        self.m2 = np.zeros(size, dtype=np.float64)

    def push_batch(self, batch: np.ndarray) -> None:
        """Add the rows of ``batch``."""
        other = RunningStat(self.mean.size)
        other.count = float(batch.shape[0])
        other.mean = batch.mean(axis=0, dtype=np.float64)
        other.m2 = ((batch - other.mean) ** 2).sum(axis=0, dtype=np.float64)
        self.merge(other)

    def merge(self, other: RunningStat) -> None:
        """Fold another stream's statistics into this one."""
        if other.count == 0:
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        self.mean = self.mean + delta * (other.count / total)
        self.m2 = self.m2 + other.m2 + delta**2 * (self.count * other.count / total)
        self.count = total

    @property
    def std(self) -> np.ndarray:
        var = self.m2 / self.count if self.count > 1 else np.ones_like(self.m2)
        return np.sqrt(np.maximum(var, 1e-8))


class NoFilter:
    """Leaves observations unchanged."""

    name = "NoFilter"

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, obs: np.ndarray, update: bool = True) -> np.ndarray:  # noqa: ARG002
        return obs

    def get_state(self) -> dict[str, np.ndarray]:
        return {}

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        if state:
            raise ConfigError(
                "got MeanStdFilter statistics for a NoFilter observation filter: "
                "set observation_filter='MeanStdFilter' (the policy was trained on normalized observations)"
            )

    def pop_delta(self) -> dict[str, np.ndarray]:
        return {}

    def apply_delta(self, delta: dict[str, np.ndarray]) -> None:
        pass


class MeanStdFilter(NoFilter):
    """Normalizes by running mean and standard deviation, clipped to [-10, 10]."""

    name = "MeanStdFilter"

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.stats = RunningStat(size)
        self.delta = RunningStat(size)  # what this copy saw since the last pop_delta()

    def __call__(self, obs: np.ndarray, update: bool = True) -> np.ndarray:
        if update:
            self.stats.push_batch(obs)
            self.delta.push_batch(obs)
        normalized = (obs - self.stats.mean) / self.stats.std
        return np.clip(normalized, -CLIP, CLIP).astype(np.float32)

    def get_state(self) -> dict[str, np.ndarray]:
        return _stat_arrays(self.stats)

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        self.stats = _stat_from_arrays(state, self.size)

    def pop_delta(self) -> dict[str, np.ndarray]:
        """Statistics gathered since the last call (sent from env runners to the driver)."""
        delta, self.delta = self.delta, RunningStat(self.size)
        return _stat_arrays(delta)

    def apply_delta(self, delta: dict[str, np.ndarray]) -> None:
        self.stats.merge(_stat_from_arrays(delta, self.size))


def make_filter(name: str, size: int) -> NoFilter:
    """The filter called ``name`` for observations of ``size`` floats."""
    return {"NoFilter": NoFilter, "MeanStdFilter": MeanStdFilter}[name](size)


def _stat_arrays(stat: RunningStat) -> dict[str, np.ndarray]:
    return {"count": np.array([stat.count]), "mean": stat.mean.copy(), "m2": stat.m2.copy()}


def _stat_from_arrays(state: dict[str, np.ndarray], size: int) -> RunningStat:
    if not state:
        raise ConfigError(
            "got the (empty) state of a NoFilter observation filter for a MeanStdFilter: "
            "set observation_filter='NoFilter'"
        )
    if set(state) != {"count", "mean", "m2"}:
        raise ConfigError(f"MeanStdFilter needs statistics 'count', 'mean' and 'm2', got {sorted(state)}")
    for key in ("mean", "m2"):
        if np.size(state[key]) != size:
            raise ConfigError(f"MeanStdFilter '{key}' has {np.size(state[key])} values, expected {size}")
    stat = RunningStat(size)
    stat.count = float(np.asarray(state["count"]).reshape(-1)[0])
    stat.mean = np.asarray(state["mean"], dtype=np.float64).reshape(size).copy()
    stat.m2 = np.asarray(state["m2"], dtype=np.float64).reshape(size).copy()
    return stat
