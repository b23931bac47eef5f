"""Piecewise-linear schedules of a value over timesteps (RLlib's ``[[t, v], ...]`` lists)."""

from __future__ import annotations

import numpy as np


class PiecewiseSchedule:
    """Linear interpolation between ``(timestep, value)`` points, constant outside them."""

    def __init__(self, points: float | list[tuple[int, float]]) -> None:
        if isinstance(points, (int, float)):
            points = [(0, float(points))]
        self.steps = np.array([t for t, _ in points], dtype=np.float64)
        self.values = np.array([v for _, v in points], dtype=np.float64)

    def __call__(self, timestep: int) -> float:
        return float(np.interp(timestep, self.steps, self.values))
