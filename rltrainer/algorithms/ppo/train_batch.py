"""PPO's train batch and the value function's explained variance: what the PPO learner, the
stacked multi-agent update and the learners built on PPO's (A2C, MARWIL, IMPALA) share."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


class PPOBatch(NamedTuple):
    """A train batch; flat arrays (numpy from env runners, tensors inside the learner)."""

    obs: Any
    actions: Any
    action_logp: Any
    vf_preds: Any
    advantages: Any
    value_targets: Any


def explained_variance(predictions: np.ndarray, targets: np.ndarray) -> float:
    """1 - Var[targets - predictions] / Var[targets]; 1 is perfect, <= 0 is no better than a constant."""
    var = float(np.var(targets))
    return float("nan") if var == 0 else 1.0 - float(np.var(targets - predictions)) / var
