"""Envs that need memory: a memoryless (MLP) policy cannot solve them, an LSTM policy can.

The two RLlib ships for its recurrent examples, written here from their descriptions:

- ``RepeatAfterMeEnv``: each step shows a random bit; the reward is +1 for naming the bit shown
  ``repeat_delay`` steps ago, -1 otherwise (0 before there is one). A memoryless policy scores
  0 on average; the best score is ``episode_len - repeat_delay``.
- ``StatelessCartPole``: CartPole-v1 observing only the cart's position and the pole's angle
  (no velocities), so the policy must infer them from successive observations.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class RepeatAfterMeEnv(gym.Env):
    """Name the bit shown ``repeat_delay`` steps ago (``env_config``: ``episode_len`` (20),
    ``repeat_delay`` (1))."""

    observation_space = spaces.Discrete(2)
    action_space = spaces.Discrete(2)

    def __init__(self, config: dict | None = None) -> None:
        config = config or {}
        self.episode_len = int(config.get("episode_len", 20))
        self.repeat_delay = int(config.get("repeat_delay", 1))
        self._shown: deque[int] = deque(maxlen=self.repeat_delay + 1)
        self._t = 0

    def _show(self) -> int:
        bit = int(self.np_random.integers(2))
        self._shown.append(bit)
        return bit

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[int, dict]:  # noqa: ARG002
        super().reset(seed=seed)
        self._shown.clear()
        self._t = 0
        return self._show(), {}

    def step(self, action: Any) -> tuple[int, float, bool, bool, dict]:
        reward = 0.0
        if len(self._shown) > self.repeat_delay:
            reward = 1.0 if int(action) == self._shown[0] else -1.0
        self._t += 1
        return self._show(), reward, False, self._t >= self.episode_len, {}


class StatelessCartPole(gym.Wrapper):
    """CartPole-v1 without the velocities: observations are ``[x, theta]``."""

    def __init__(self, config: dict | None = None) -> None:  # noqa: ARG002 - env classes get env_config
        super().__init__(gym.make("CartPole-v1"))
        high = np.array([4.8, 0.42], np.float32)
        self.observation_space = spaces.Box(-high, high, dtype=np.float32)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        obs, info = self.env.reset(**kwargs)
        return obs[[0, 2]], info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs[[0, 2]], float(reward), terminated, truncated, info
