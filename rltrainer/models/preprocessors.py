"""RLlib's preprocessor API (``from rltrainer.models.preprocessors import get_preprocessor``):
``get_preprocessor(space)(space).transform(obs)`` is one observation as the model reads it
(a flat row: Box flattened, Discrete one-hot, Dict/Tuple concatenated; ``uint8`` frames stay
``uint8``), what ``policy.model({"obs": ...})`` takes a batch of."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from rltrainer.env.preprocessors import Preprocessor as _Rows


class Preprocessor:
    """Flattens single observations of ``obs_space``; ``shape`` is ``(size,)``."""

    def __init__(self, obs_space: spaces.Space, options: dict[str, Any] | None = None) -> None:  # noqa: ARG002
        self._rows = _Rows(obs_space)
        self.observation_space = obs_space
        self.shape = (self._rows.size,)
        self.size = self._rows.size

    def transform(self, observation: Any) -> np.ndarray:
        """One observation -> its row ``[size]``; ``EnvError`` when it does not fit the space."""
        return self._rows.transform_one(observation)[0]

    def check_shape(self, observation: Any) -> None:
        """Raise ``EnvError`` unless ``observation`` fits the space."""
        self._rows.transform_one(observation)


def get_preprocessor(space: spaces.Space) -> type[Preprocessor]:
    """The preprocessor class for ``space`` (one class serves every supported space)."""
    _Rows(space)  # EnvError now for spaces no model can read
    return Preprocessor
