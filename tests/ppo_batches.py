"""A PPO train batch for a learner's own network: the PPO gradient tests' common input."""

from __future__ import annotations

import numpy as np
import torch

from rltrainer.algorithms.ppo.ppo_learner import PPOBatch, PPOLearner


def batch(learner: PPOLearner, rows: int = 259, seed: int = 0) -> PPOBatch:
    """Steps whose old log-probabilities are near the current ones: some ratios clipped, most not."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(rows, 4)).astype(np.float32)
    actions = rng.integers(0, 2, rows)
    with torch.no_grad():
        logits, _ = learner.module(torch.from_numpy(obs))
        logp = torch.log_softmax(logits, -1)[torch.arange(rows), torch.from_numpy(actions)].numpy()
    return PPOBatch(
        obs=obs,
        actions=actions,
        action_logp=(logp + rng.normal(scale=0.3, size=rows)).astype(np.float32),
        vf_preds=rng.normal(size=rows).astype(np.float32),
        advantages=rng.normal(size=rows).astype(np.float32),
        value_targets=rng.normal(scale=3.0, size=rows).astype(np.float32),
    )
