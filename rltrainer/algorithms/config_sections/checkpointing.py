"""``.checkpointing()``: automatic checkpoints during and at the end of training."""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field

from rltrainer.algorithms.config_sections.section import ConfigSection

KEYS = (
    "checkpoint_frequency",
    "checkpoint_at_end",
    "num_to_keep",
    "checkpoint_score_attribute",
    "checkpoint_score_order",
    "store_buffer_in_checkpoints",
)


class CheckpointingSettings(ConfigSection):
    """``checkpointing()``'s settings."""

    checkpoint_frequency: int = Field(0, ge=0)
    """Save a checkpoint every this many ``train()`` calls (0: never automatically)."""
    checkpoint_at_end: bool = False
    """Save a checkpoint when an experiment run by ``rltrainer train`` stops."""
    num_to_keep: int | None = Field(None, ge=1)
    """Keep this many checkpoints of the trial (the newest, or the best by score); ``None``: all."""
    checkpoint_score_attribute: str | None = None
    """Result key ranking checkpoints for ``num_to_keep`` (``episode_return_mean``); ``None``: recency."""
    checkpoint_score_order: Literal["max", "min"] = "max"
    """Whether a higher or a lower ``checkpoint_score_attribute`` is better."""
    store_buffer_in_checkpoints: bool = False
    """Off-policy algorithms: save the replay buffer's contents in checkpoints (``replay_buffer.npz``)."""

    def checkpointing(self, **kwargs: Any) -> Self:
        """Automatic checkpoints during and at the end of training."""
        return self._update("checkpointing", kwargs)
