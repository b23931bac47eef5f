"""Return and advantage math, as pure functions over ``[T, N]`` arrays (time, envs)."""

from __future__ import annotations

import numpy as np


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    terminateds: np.ndarray,
    dones: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    lambda_: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimation (Schulman et al. 2016) for ``T`` steps of ``N`` envs.

    ``values[t]`` is V(s_t); the value of the state after step t is ``values[t + 1]``
    (``last_values`` after the final step). ``terminateds[t]``: step t ended the episode
    in a terminal state, so nothing is bootstrapped. ``dones[t]``: the episode ended at
    step t for any reason (terminated or truncated), so advantages do not flow back
    across it; a truncated step still bootstraps from the value of its final observation,
    which with next-step autoreset is exactly ``values[t + 1]``.

    Returns ``(advantages, value_targets)``, both ``[T, N]`` float32.
    """
    horizon = rewards.shape[0]
    next_values = np.concatenate([values[1:], last_values[None]], axis=0)
    deltas = rewards + gamma * (1.0 - terminateds) * next_values - values
    carry = gamma * lambda_ * (1.0 - dones)
    advantages = np.zeros_like(deltas)
    running = np.zeros_like(last_values)
    for t in reversed(range(horizon)):  # a recursion over time; vectorized over envs
        running = deltas[t] + carry[t] * running
        advantages[t] = running
    return advantages.astype(np.float32), (advantages + values).astype(np.float32)
