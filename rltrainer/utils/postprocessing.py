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
    if deltas.shape[1:] == (1,):
        # One env (a multi-agent policy's column): numpy scalars of the same dtype, the same
        # arithmetic at a fifth of the cost of 1-element array ops.
        column, delta, decay, running = advantages[:, 0], list(deltas[:, 0]), list(carry[:, 0]), running[0]
        for t in reversed(range(horizon)):
            running = delta[t] + decay[t] * running
            column[t] = running
    else:
        for t in reversed(range(horizon)):  # a recursion over time; vectorized over envs
            running = deltas[t] + carry[t] * running
            advantages[t] = running
    return advantages.astype(np.float32), (advantages + values).astype(np.float32)


def compute_n_step_returns(
    rewards: np.ndarray,
    terminateds: np.ndarray,
    truncateds: np.ndarray,
    valid: np.ndarray,
    n_step: int,
    gamma: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Discounted n-step reward sums for ``T`` steps of ``N`` envs (next-step autoreset).

    For each step t the window holds steps ``t, t + 1, ..., t + k - 1`` and
    ``returns[t] = sum_j gamma**j * rewards[t + j]``. The window stops early (``k < n_step``)
    after a step that ended its episode (terminated or truncated), before an invalid step,
    and at the end of the fragment, so an invalid (reset) step is never part of a window.
    The state to bootstrap from is the observation after step ``t + k - 1``; with next-step
    autoreset that is ``obs[t + k]`` (``last_obs`` when ``t + k == T``), also for a truncated
    episode, whose final observation it is.

    Returns ``(returns, steps)``: ``[T, N]`` float32 sums and ``[T, N]`` int64 window
    lengths ``k`` (0 where ``valid[t]`` is False).
    """
    if n_step < 1:
        raise ValueError(f"n_step must be >= 1, got {n_step}")
    horizon = rewards.shape[0]
    valid = np.asarray(valid, dtype=bool)
    dones = np.asarray(terminateds, dtype=bool) | np.asarray(truncateds, dtype=bool)
    returns = np.zeros(rewards.shape, dtype=np.float64)
    steps = np.zeros(rewards.shape, dtype=np.int64)
    active = valid.copy()  # active[t]: step t + j is in the window of step t
    for j in range(min(n_step, horizon)):  # a loop over the window; vectorized over time and envs
        rows = horizon - j
        window = active[:rows]
        returns[:rows] += np.where(window, gamma**j * rewards[j:], 0.0)
        steps[:rows] += window
        # The window of t goes on to step t + j + 1 if step t + j did not end the episode
        # and step t + j + 1 exists in this fragment and is valid.
        grows = window[: rows - 1] & ~dones[j : horizon - 1] & valid[j + 1 :]
        active = np.zeros_like(active)
        active[: rows - 1] = grows
    return returns.astype(np.float32), steps
