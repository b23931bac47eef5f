"""PG's config; it imports no torch (the operator validates experiments with it)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from rltrainer.algorithms.algorithm_config import ALIASES, AlgorithmConfig

#: Settings of A2C (RLlib's A3C family) that a policy without a value function cannot take.
CRITIC_SETTINGS = ("use_critic", "use_gae", "lambda_", "vf_loss_coeff", "entropy_coeff", "microbatch_size")


class PGConfig(AlgorithmConfig):
    """Vanilla policy gradient (REINFORCE, Williams 1992), RLlib's PG: one gradient step per
    train batch on ``-mean(log pi(a|s) * R)``, ``R`` the discounted return from each step on.

    There is no value function, so no baseline and no bootstrapping: ``R`` sums the rewards
    of the step's episode up to the end of its rollout fragment (the value after a fragment
    cut or a time-limit truncation counts as 0, RLlib's ``last_r=0.0``).
    ``batch_mode="complete_episodes"`` makes every ``R`` a full episode's return.
    Defaults follow RLlib's ``PGConfig``: ``lr=0.0004``, ``train_batch_size=200``."""

    ALGORITHM = "PG"
    STAT_KEYS = ("policy_loss", "policy_entropy", "grad_gnorm", "cur_lr")

    lr: Any = 0.0004
    """Learning rate, or a piecewise-linear schedule ``[[timestep, value], ...]``."""
    train_batch_size: int = Field(200, ge=1)
    """Env steps collected per training iteration (one gradient step on all of them)."""

    def _suggestion(self, key: str, allowed: tuple[str, ...]) -> str:
        if ALIASES.get(key, key) in CRITIC_SETTINGS:
            return (
                " (PG has no value function or entropy bonus, so it does not apply: "
                "A2CConfig has it, A2C being PG with a critic)"
            )
        return super()._suggestion(key, allowed)
