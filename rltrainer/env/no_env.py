"""``NoEnv``: what an env runner holds when the config has no env (``env=None``) because every
training batch comes from ``offline_data(input_=...)`` (recorded files, or a policy server whose
clients own the env). It has the config's spaces and refuses to be stepped."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from rltrainer.errors import EnvError


class NoEnv(gym.vector.VectorEnv):
    """A vector env of ``num_envs`` copies of nothing: spaces only."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, num_envs: int = 1) -> None:
        self.num_envs = num_envs
        self.single_observation_space = observation_space
        self.single_action_space = action_space
        self.observation_space = gym.vector.utils.batch_space(observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(action_space, num_envs)

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:  # noqa: ARG002
        raise EnvError(
            "this config has no env (env=None): it trains from offline_data(input_=...) only, so it "
            "cannot sample or evaluate in an env; set .environment(ENV) for that"
        )

    def step(self, actions: Any) -> Any:  # noqa: ARG002
        return self.reset()

    def close(self, **kwargs: Any) -> None:
        pass
