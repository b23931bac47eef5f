"""Small deterministic-length envs the tests train on (importable as ``tests.envs:ClassName``)."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

# Actions taken by every ``RecordingEnv`` in this process, in order (tests clear it first).
RECORDED_ACTIONS: list[Any] = []


class FixedLengthEnv(gym.Env):
    """Random observations from ``observation_space``, reward 1 for action 1, ``length`` steps.

    ``config`` (an ``EnvContext`` or dict) may set ``length``; subclasses pick the space.
    """

    observation_space: spaces.Space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space: spaces.Space = spaces.Discrete(2)

    def __init__(self, config: dict | None = None) -> None:
        self.length = int((config or {}).get("length", 10))
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:  # noqa: ARG002
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        assert self.action_space.contains(action), action
        self.t += 1
        reward = float(action == 1) if isinstance(self.action_space, spaces.Discrete) else 0.0
        return self.observation_space.sample(), reward, self.t >= self.length, False, {}


class BoxObsEnv(FixedLengthEnv):
    observation_space = spaces.Box(-1.0, 1.0, (2, 3), np.float32)


class DiscreteObsEnv(FixedLengthEnv):
    observation_space = spaces.Discrete(5, start=2)


class MultiDiscreteObsEnv(FixedLengthEnv):
    observation_space = spaces.MultiDiscrete([2, 3, 4])


class DictObsEnv(FixedLengthEnv):
    observation_space = spaces.Dict(
        {
            "position": spaces.Box(-1.0, 1.0, (2,), np.float32),
            "mode": spaces.Discrete(3),
            "flags": spaces.MultiDiscrete([2, 2]),
        }
    )


class TupleObsEnv(FixedLengthEnv):
    observation_space = spaces.Tuple(
        (spaces.Discrete(4), spaces.Box(0.0, 1.0, (2,), np.float32), spaces.MultiDiscrete([3]))
    )


class RecordingEnv(FixedLengthEnv):
    """Appends every action it is given to ``RECORDED_ACTIONS``; observations are constant."""

    observation_space = spaces.Box(0.0, 1.0, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:  # noqa: ARG002
        super().reset(seed=seed)
        return np.full(2, 0.5, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        RECORDED_ACTIONS.append(int(action))
        _, reward, terminated, truncated, info = super().step(action)
        return np.full(2, 0.5, np.float32), reward, terminated, truncated, info


class RecordingActionsWrapper(gym.Wrapper):
    """Records the (continuous) actions an env receives into ``RECORDED_ACTIONS``."""

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        RECORDED_ACTIONS.append(np.array(action, copy=True))
        return self.env.step(action)


class NotAnEnv:
    """A class that is not a ``gymnasium.Env`` (env specs naming it must be rejected)."""

    def __init__(self, config: dict | None = None) -> None:
        self.config = config


class SlowEnv(FixedLengthEnv):
    """Sleeps ``delay_s`` per step (to exercise sample timeouts)."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(config)
        self.delay_s = float((config or {}).get("delay_s", 0.1))

    def step(self, action):
        time.sleep(self.delay_s)
        return super().step(action)


class FailingEnv(FixedLengthEnv):
    """Raises in ``step`` every ``fail_every``-th call across the process (to exercise restarts)."""

    calls = 0

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(config)
        self.fail_every = int((config or {}).get("fail_every", 5))

    def step(self, action):
        FailingEnv.calls += 1
        if FailingEnv.calls % self.fail_every == 0:
            raise RuntimeError("simulated env crash")
        return super().step(action)
