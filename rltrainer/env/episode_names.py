"""RLlib's current (new API stack) names of an episode's numbers, shared by the single- and
multi-agent episode objects callbacks get: ``episode.get_return()``, ``episode.get_length()``
and ``episode.custom_data``."""

from __future__ import annotations

from typing import Any


class CurrentEpisodeNames:
    """Mixed into an episode object that has ``length``, ``total_reward`` and ``user_data``."""

    length: int
    total_reward: float
    user_data: dict[str, Any]

    def get_return(self) -> float:
        """The episode's return so far (raw env rewards; multi-agent: every agent's)."""
        return self.total_reward

    def get_length(self) -> int:
        """Env steps so far."""
        return self.length

    @property
    def custom_data(self) -> dict[str, Any]:
        """Yours to fill between hooks (RLlib's current name of ``user_data``; the same dict)."""
        return self.user_data
