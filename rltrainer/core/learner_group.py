"""``LearnerGroup``: where updates happen (the driver now; learner actors later)."""

from __future__ import annotations

from typing import Any

import torch

from rltrainer.core.learner import Learner


class LearnerGroup:
    """Runs updates on the learner(s) and hands out their weights."""

    def __init__(self, learner: Learner) -> None:
        self._local = learner

    @property
    def local_learner(self) -> Learner:
        return self._local

    def update(self, rollouts: Any, timestep: int) -> dict[str, float]:
        return self._local.update(rollouts, timestep)

    def get_weights(self) -> dict[str, torch.Tensor]:
        return self._local.get_weights()
