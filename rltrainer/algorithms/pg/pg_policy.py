"""PG's policy (its own module, so that env runners and learners load it without the algorithm,
and so without Ray Tune)."""

from __future__ import annotations

from rltrainer.policy.policy import Policy


class PGPolicy(Policy):
    """PPO's network; its value head is never trained nor read (PG has no value function)."""

    has_value_function = False
