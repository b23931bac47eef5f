"""CQL's config; it imports no torch (the operator validates experiments with it)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from rltrainer.algorithms.sac.sac_config import SACConfig

CQL_TRAINING_KEYS = (
    "bc_iters",
    "temperature",
    "num_actions",
    "lagrangian",
    "lagrangian_thresh",
    "min_q_weight",
    "deterministic_backup",
)


class CQLConfig(SACConfig):
    """Conservative Q-Learning (Kumar et al. 2020, "Conservative Q-Learning for Offline
    Reinforcement Learning"), CQL(H) on top of SAC, as RLlib's CQL: usually trained from recorded
    data (``.offline_data(input_=PATH, actions_in_input_normalized=True)``) with evaluation in
    the env. Box actions only. The CQL settings' defaults are RLlib's; the rest are SAC's."""

    ALGORITHM = "CQL"
    SUPPORTS_MULTI_AGENT = False  # trains from recorded single-agent data
    STAT_KEYS = (*SACConfig.STAT_KEYS, "cql_loss", "alpha_prime_value")
    SECTIONS = {**SACConfig.SECTIONS, "training": SACConfig.SECTIONS["training"] + CQL_TRAINING_KEYS}

    bc_iters: int = Field(20_000, ge=0)
    """Gradient steps (counted by the learner, as RLlib's ``cur_iter``) during which the actor is
    trained by behaviour cloning, ``alpha * log pi(a~|s) - log pi(a_data|s)``, instead of SAC's
    ``alpha * log pi(a~|s) - Q(s, a~)``; the critics train with the CQL penalty throughout."""
    temperature: float = Field(1.0, gt=0)
    """Temperature of the penalty's log-sum-exp over sampled actions."""
    num_actions: int = Field(10, ge=1)
    """Actions sampled per state for the penalty, from each of: uniform over [-1, 1]^d, the
    policy at s, the policy at s'."""
    lagrangian: bool = False
    """Scale the penalty by a learned ``alpha_prime`` (its own Adam at the critic's learning
    rate) that grows while the penalty exceeds ``lagrangian_thresh`` and shrinks below it."""
    lagrangian_thresh: float = 5.0
    """The penalty ``alpha_prime`` steers towards (``lagrangian=True`` only)."""
    min_q_weight: float = Field(5.0, ge=0)
    """Weight of the penalty: ``min_q_weight * (temperature * logsumexp(Q / temperature) - Q(s, a_data))``."""
    deterministic_backup: bool = True
    """No entropy term in the critics' target (``r + gamma * min Q'(s', a')``); False: SAC's
    soft target ``r + gamma * (min Q'(s', a') - alpha log pi(a'|s'))``."""
    replay_buffer_config: dict[str, Any] = Field(
        default_factory=lambda: {"type": "ReplayBuffer", "capacity": 1_000_000}
    )
    """Uniform replay of the recorded rows (RLlib's CQL reads its data uniformly): the penalty
    is an unweighted mean over the batch, so prioritized replay would take it over a skewed
    sample of the data. See ``OffPolicyConfig.replay_buffer_config``."""


__all__ = ["CQLConfig"]
