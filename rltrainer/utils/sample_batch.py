"""``SampleBatch``: named columns of experience, the shape callbacks read and rewrite.

A plain dict of arrays keyed by RLlib's column names, so callback code written for RLlib
(``batch["rewards"] *= 0.5``, ``batch.count``) works as is. Inside rltrainer batches are
typed containers (``Rollout``, ``PPOBatch``); a ``SampleBatch`` is built from them only
for callbacks that are overridden, and what the callback wrote is copied back.
"""

from __future__ import annotations

import numpy as np


class SampleBatch(dict):
    """Columns of equal length (the first axis): ``obs``, ``actions``, ``rewards``, ..."""

    OBS = "obs"
    NEXT_OBS = "new_obs"
    ACTIONS = "actions"
    REWARDS = "rewards"
    TERMINATEDS = "terminateds"
    TRUNCATEDS = "truncateds"
    ACTION_LOGP = "action_logp"
    EPS_ID = "eps_id"
    T = "t"

    @property
    def count(self) -> int:
        """Rows in the batch (env steps, for the batches env runners hand to callbacks)."""
        if "valid" in self:
            return int(np.count_nonzero(self["valid"]))
        first = next(iter(self.values()), None)
        return 0 if first is None else len(first)

    def __len__(self) -> int:  # RLlib's len(batch) is its row count, not its column count
        return self.count

    def copy(self) -> SampleBatch:
        """A deep copy of every column."""
        return SampleBatch({key: np.array(value, copy=True) for key, value in self.items()})

    def __repr__(self) -> str:
        columns = ", ".join(f"{k}: {getattr(v, 'shape', '?')}" for k, v in self.items())
        return f"SampleBatch({self.count} rows; {columns})"


def written_columns(
    batch: SampleBatch, shapes: dict[str, tuple[int, ...]], where: str
) -> dict[str, np.ndarray]:
    """The columns ``shapes`` names as a callback left them in ``batch``, checked to keep their shape."""
    from rltrainer.errors import CallbackError

    out = {}
    for name, shape in shapes.items():
        if name not in batch:
            raise CallbackError(f"{where} removed column '{name}' from the batch; rewrite it instead")
        value = np.asarray(batch[name])
        if value.shape != shape:
            raise CallbackError(
                f"{where} changed the shape of column '{name}' from {shape} to {value.shape}; "
                "rewrite values in place or with arrays of the same shape"
            )
        out[name] = value
    return out
