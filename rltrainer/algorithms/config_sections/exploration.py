"""``.exploration()``: whether actions are sampled, and how (``exploration_config``)."""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field

from rltrainer.algorithms.config_sections.section import ConfigSection
from rltrainer.errors import ConfigError

KEYS = (
    "explore",
    "exploration_config",
)


class ExplorationSettings(ConfigSection):
    """``exploration()``'s settings."""

    explore: bool = True
    """Sample actions stochastically; ``False`` takes the distribution's mode."""
    exploration_config: dict[str, Any] = Field(default_factory=lambda: {"type": "StochasticSampling"})
    """``{"type": ..., **ctor_args}``: a built-in name (``EpsilonGreedy``, ``SoftQ``,
    ``StochasticSampling``, ``GaussianNoise``, ``OrnsteinUhlenbeckNoise``, ``Random``), an
    ``Exploration`` subclass or ``"package.module:Class"``; keys given without a new type
    update the current ones."""

    def exploration(self, **kwargs: Any) -> Self:
        """Whether actions are sampled (explore) or the distribution's mode is taken."""
        return self._update("exploration", kwargs)

    def _merged_exploration_config(self, section: str, value: Any) -> dict[str, Any]:
        """RLlib's rule: the same (or no) type updates the current settings, a new type replaces them."""
        from rltrainer.core.exploration import check_exploration_config

        if not isinstance(value, dict):
            raise ConfigError(f"{section}(): 'exploration_config' must be a dict, got {type(value).__name__}")
        current = self.exploration_config
        same_type = "type" not in value or value["type"] == current.get("type")
        merged = {**current, **value} if same_type else dict(value)
        try:
            check_exploration_config(merged)
        except ValueError as err:
            raise ConfigError(f"{section}(): {err}") from None
        return merged
