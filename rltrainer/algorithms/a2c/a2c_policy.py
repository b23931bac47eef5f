"""A2C's policy (its own module, so that env runners and learners load it without the algorithm,
and so without Ray Tune)."""

from __future__ import annotations

from rltrainer.policy.policy import Policy


class A2CPolicy(Policy):
    """PPO's actor-critic network; without ``use_critic`` its value head is not used."""

    @property
    def has_value_function(self) -> bool:  # type: ignore[override]
        return bool(self.config.use_critic)
