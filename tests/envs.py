"""Small deterministic-length envs the tests train on (importable as ``tests.envs:ClassName``)."""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rltrainer.env import TaskSettableEnv

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


def cartpole_copy(config: Any) -> gym.Env:
    """An env creator (``register_env``) of CartPole-v1 copies (a gymnasium id alone would be
    CartPole's natively batched env); module level, so remote processes import only this module."""
    return gym.make("CartPole-v1", **config)


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


class SlowStepEnv(SlowEnv):
    """A ``SlowEnv`` (``delay_s`` per step, 0.05 by default) that tells its process id (``pid``)
    and when each of its steps ran (``step_times``: ``(start, end)`` on this machine's
    monotonic clock, the same in every process): shows where and how ``remote_worker_envs``
    copies step."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__({"delay_s": 0.05, **(config or {})})
        self.step_times: list[tuple[float, float]] = []

    def step(self, action):
        start = time.monotonic()
        stepped = super().step(action)
        self.step_times.append((start, time.monotonic()))
        return stepped

    @property
    def pid(self) -> int:
        return os.getpid()


class SlowOnOneRunnerEnv(FixedLengthEnv):
    """Sleeps ``delay_s`` per step in env runner ``slow_worker`` only (a straggler)."""

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        slow = getattr(config, "worker_index", None) == int((config or {}).get("slow_worker", 2))
        self.delay_s = float((config or {}).get("delay_s", 0.05)) if slow else 0.0

    def step(self, action):
        if self.delay_s:
            time.sleep(self.delay_s)
        return super().step(action)


class SlowStartEnv(FixedLengthEnv):
    """Takes ``start_delay_s`` to build in remote env runners (worker index 1 and up), as a runner
    importing torch on a busy machine does; the driver's copy builds at once."""

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        if getattr(config, "worker_index", 0) >= 1:
            time.sleep(float((config or {}).get("start_delay_s", 3.0)))


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


class LevelEnv(FixedLengthEnv, TaskSettableEnv):
    """A ``TaskSettableEnv`` whose task is its level: an episode lasts ``level`` steps.

    A new level takes effect at the next reset; each reset appends the level it starts to
    ``levels_played``. ``config`` may set the first ``level`` (default 1) and
    ``crash_at_step`` (``step`` raises from that step of this env object on).
    """

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(config)
        self.level = int((config or {}).get("level", 1))
        self.crash_at_step = (config or {}).get("crash_at_step")
        self.levels_played: list[int] = []
        self.steps = 0

    def get_task(self) -> int:
        return self.level

    def set_task(self, task: int) -> None:
        self.level = int(task)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        self.length = self.level
        self.levels_played.append(self.level)
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.steps += 1
        if self.crash_at_step is not None and self.steps >= self.crash_at_step:
            raise RuntimeError("simulated env crash")
        return super().step(action)


def level_by_timesteps(train_results: dict, env: LevelEnv, env_ctx: Any) -> int:  # noqa: ARG001
    """An ``env_task_fn``: one level up per 40 env steps sampled, from level 2."""
    return 2 + train_results["timesteps_total"] // 40


def curriculum_ending_runner_1(train_results: dict, env: LevelEnv, env_ctx: Any) -> int:
    """One level up per 40 env steps, from ``2 + vector_index``; remote runner 1's process exits
    when an env that has played gets iteration 2's results (a replacement catching up has not)."""
    if env_ctx.worker_index == 1 and train_results["training_iteration"] == 2 and env.levels_played:
        os._exit(1)
    return 2 + train_results["timesteps_total"] // 40 + env_ctx.vector_index


class Coordinator:
    """State shared by envs in every process, run as a named Ray actor: a level the driver
    sets, and how many episodes the envs started."""

    def __init__(self) -> None:
        self.level = 1
        self.episodes = 0

    def set_level(self, level: int) -> None:
        self.level = level

    def start_episode(self) -> int:
        self.episodes += 1
        return self.level

    def num_episodes(self) -> int:
        return self.episodes


class CoordinatedEnv(LevelEnv):
    """A ``LevelEnv`` that asks the named actor ``config["coordinator"]`` for its level at every
    reset (looked up at the first one, in whichever process the env lives)."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(config)
        self.coordinator_name = (config or {}).get("coordinator", "coordinator")
        self._coordinator: Any = None

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        import ray

        if self._coordinator is None:
            self._coordinator = ray.get_actor(self.coordinator_name)
        self.level = ray.get(self._coordinator.start_episode.remote())
        return super().reset(seed=seed, options=options)


class TimestampEnv(FixedLengthEnv):
    """Appends the wall-clock time of every ``step`` to the file ``config["path"]`` (one line
    each, from any process: shows when remote env runners stepped)."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(config)
        self.path = str((config or {})["path"])

    def step(self, action):
        with open(self.path, "a") as f:
            f.write(f"{time.time()!r}\n")
        return super().step(action)


class BrightSideEnv(gym.Env):
    """``uint8`` frames (``size`` x ``size`` x 2, 10x10 by default) with one bright half, left or
    right at random each step; reward 1 for naming it (0: left, 1: right), 10 steps. Only a
    model that reads the picture scores more than 5 on average; the optimum is 10."""

    action_space = spaces.Discrete(2)

    def __init__(self, config: dict | None = None) -> None:
        size = int((config or {}).get("size", 10))
        self.observation_space = spaces.Box(0, 255, (size, size, 2), np.uint8)
        self.frame_shape = (size, size, 2)
        self.t, self.side = 0, 0

    def _frame(self) -> np.ndarray:
        self.side = int(self.np_random.integers(2))
        frame = np.zeros(self.frame_shape, dtype=np.uint8)
        half = frame.shape[1] // 2
        frame[:, half * self.side : half * (self.side + 1), :] = 200
        frame += self.np_random.integers(0, 40, frame.shape, dtype=np.uint8)  # noise
        return frame

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:  # noqa: ARG002
        super().reset(seed=seed)
        self.t = 0
        return self._frame(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        reward = float(int(action) == self.side)
        self.t += 1
        return self._frame(), reward, self.t >= 10, False, {}


class MaskedChoiceEnv(gym.Env):
    """Four actions, two or three allowed per step (``action_mask``); the highest allowed one
    earns 1, another allowed one 0.1; a masked one raises (so one taken fails the test). 10 steps.
    ``config["mask_size"]`` gives the mask another length (a mistake the policy must reject)."""

    action_space = spaces.Discrete(4)

    def __init__(self, config: dict | None = None) -> None:
        size = int((config or {}).get("mask_size", 4))
        self.observation_space = spaces.Dict(
            {
                "action_mask": spaces.Box(0.0, 1.0, (size,), np.float32),
                "observations": spaces.Box(0.0, 1.0, (3,), np.float32),
            }
        )
        self.t, self.mask = 0, np.ones(4, np.float32)

    def _obs(self) -> dict:
        self.mask = np.zeros(4, np.float32)
        self.mask[self.np_random.choice(4, size=int(self.np_random.integers(2, 4)), replace=False)] = 1.0
        return {"action_mask": self.mask.copy(), "observations": self.np_random.random(3).astype(np.float32)}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:  # noqa: ARG002
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if not self.mask[int(action)]:
            raise ValueError(f"action {action} is masked ({self.mask})")
        reward = 1.0 if int(action) == int(np.flatnonzero(self.mask).max()) else 0.1
        self.t += 1
        return self._obs(), reward, self.t >= 10, False, {}


class MultiActionEnv(FixedLengthEnv):
    """MultiDiscrete([3, 2], start [1, 0]) actions (``config["kind"] == "multi_discrete"``, the
    default) or MultiBinary(3) ones; reward 1 per dimension that matches a fixed target (the
    last value of each; ``[1, 0, 1]`` for MultiBinary), over the number of dimensions."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(config)
        if (config or {}).get("kind", "multi_discrete") == "multi_binary":
            self.action_space = spaces.MultiBinary(3)
            self.target = np.array([1, 0, 1])
        else:
            self.action_space = spaces.MultiDiscrete([3, 2], start=[1, 0])
            self.target = np.array([3, 1])

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, _, terminated, truncated, info = super().step(action)
        return obs, float(np.mean(np.asarray(action) == self.target)), terminated, truncated, info


class CameraAndSwitchEnv(BrightSideEnv):
    """``Dict`` observations: a ``camera`` frame (``BrightSideEnv``'s) and a ``switch``
    (``Discrete(2)``) that swaps which action the bright side asks for. Reward 1 for the right
    one, 10 steps: reading either part alone scores 5 on average; the optimum is 10."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(config)
        self.observation_space = spaces.Dict(
            {"camera": self.observation_space, "switch": spaces.Discrete(2), "speed": spaces.Box(-1, 1, (3,))}
        )
        self.switch = 0

    def _obs(self) -> dict:
        self.switch = int(self.np_random.integers(2))
        speed = self.np_random.uniform(-1, 1, 3).astype(np.float32)  # noise the policy must ignore
        return {"camera": self._frame(), "switch": self.switch, "speed": speed}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:  # noqa: ARG002
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        reward = float(int(action) == self.side ^ self.switch)
        self.t += 1
        return self._obs(), reward, self.t >= 10, False, {}


class ControlPanelEnv(gym.Env):
    """``Dict`` actions: ``move`` (``Discrete(3, start=-1)``: the sign of ``obs[0]``), ``aim``
    (``Box(-2, 2, (2,))``: ``2 * obs[1:]``) and ``buttons`` (``MultiBinary(2)``: press the first).
    Per step up to 1 + 0 + 1; 10 steps. Raises on an action outside the space."""

    observation_space = spaces.Box(-1, 1, (3,), np.float32)

    def __init__(self, config: dict | None = None) -> None:
        tuple_actions = bool((config or {}).get("tuple_actions", False))
        parts = {
            "move": spaces.Discrete(3, start=-1),
            "aim": spaces.Box(-2, 2, (2,)),
            "buttons": spaces.MultiBinary(2),
        }
        self.action_space = spaces.Tuple(tuple(parts.values())) if tuple_actions else spaces.Dict(parts)
        self.t, self.obs = 0, np.zeros(3, np.float32)

    def _observe(self) -> np.ndarray:
        self.obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return self.obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:  # noqa: ARG002
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if not self.action_space.contains(action):
            raise ValueError(f"action {action} is not in {self.action_space}")
        move, aim, buttons = (
            action if isinstance(action, tuple) else (action["move"], action["aim"], action["buttons"])
        )
        reward = float(move == (1 if self.obs[0] > 0 else -1))
        reward -= 0.25 * float(np.abs(aim - 2 * self.obs[1:]).sum())
        reward += float(buttons[0] == 1)
        self.t += 1
        return self._observe(), reward, self.t >= 10, False, {}


class BrightSideBoxEnv(BrightSideEnv):
    """``BrightSideEnv`` with a ``Box(-1, 1, (1,))`` action: reward ``1 - |a - target| / 2`` where
    the target is -1 for a bright left half and +1 for a right one (10 steps; blind: about 5)."""

    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        target = 2.0 * self.side - 1.0
        reward = 1.0 - abs(float(np.asarray(action).reshape(-1)[0]) - target) / 2.0
        self.t += 1
        return self._frame(), reward, self.t >= 10, False, {}


class ReachTargetEnv(gym.Env):
    """A continuous contextual bandit: observe a target ``x`` in [-1, 1], act ``a`` in [-2, 2],
    reward ``-(a - 2x)^2`` (best: the target scaled to the action bounds), one step per episode.
    A deterministic-policy learner must map the observation to the rescaled action."""

    observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = spaces.Box(-2.0, 2.0, (1,), np.float32)

    def __init__(self, config: dict | None = None) -> None:  # noqa: ARG002
        self.target = np.zeros(1, np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:  # noqa: ARG002
        super().reset(seed=seed)
        self.target = self.np_random.uniform(-1.0, 1.0, (1,)).astype(np.float32)
        return self.target.copy(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        reward = -float((np.asarray(action, np.float32)[0] - 2.0 * self.target[0]) ** 2)
        return self.target.copy(), reward, True, False, {}


class OldApiEnv(gym.Env):
    """The old gym API the documents' examples use: ``reset() -> obs``, ``step() -> (obs,
    reward, done, info)``; reward 1 for action 1, ``length`` steps, then done (with gym's
    ``TimeLimit.truncated`` in the info when ``truncate`` is set)."""

    observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, config: dict | None = None) -> None:
        config = config or {}
        self.length, self.truncate = int(config.get("length", 10)), bool(config.get("truncate", False))
        self.t, self.seeded = 0, None

    def seed(self, seed: int | None = None) -> None:
        self.seeded = seed

    def reset(self):  # noqa: ANN201 - the old API: no seed, the observation alone
        self.t = 0
        return np.zeros(3, np.float32)

    def step(self, action):  # noqa: ANN001, ANN201
        self.t += 1
        done = self.t >= self.length
        info = {"TimeLimit.truncated": True} if done and self.truncate else {}
        return np.full(3, 0.1 * self.t, np.float32).clip(-1, 1), float(action == 1), done, info


class DuckTypedOldEnv:
    """An env object that is no ``gymnasium.Env`` at all (as one from the old ``gym`` package)."""

    observation_space = OldApiEnv.observation_space
    action_space = OldApiEnv.action_space
    __init__ = OldApiEnv.__init__
    reset = OldApiEnv.reset
    step = OldApiEnv.step


class BadRewardEnv(FixedLengthEnv):
    """Rewards as strings: the env check at build() must catch it."""

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        obs, _, terminated, truncated, info = super().step(action)
        return obs, "1.0", terminated, truncated, info


class WrongShapeEnv(FixedLengthEnv):
    """Observations of shape (4,) for a (3,) Box."""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed, options=options)
        return np.zeros(4, np.float32), {}


class NameTheSideEnv(gym.Env):
    """Observation: a side (``[1, 0]`` or ``[0, 1]``, at random each step, with a little noise)
    and the time left (``(5 - t) / 5``); reward 1 for naming the side (0 or 1), 5 steps. A uniform
    policy returns 2.5 on average, the best 5 (a contextual bandit with a horizon: short
    episodes for off-policy estimation, whose Q function the observation determines)."""

    observation_space = spaces.Box(-1.0, 2.0, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, config: dict | None = None) -> None:  # noqa: ARG002
        self.t, self.side = 0, 0

    def _obs(self) -> np.ndarray:
        self.side = int(self.np_random.integers(2))
        obs = np.zeros(3, np.float32)
        obs[self.side] = 1.0
        obs[:2] += self.np_random.normal(0, 0.05, 2).astype(np.float32)
        obs[2] = (5 - self.t) / 5
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:  # noqa: ARG002
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        reward = float(int(action) == self.side)
        self.t += 1
        return self._obs(), reward, self.t >= 5, False, {}


class CompositeActionEnv(FixedLengthEnv):
    """``FixedLengthEnv`` (reward 0) with a Dict or Tuple action space, by ``config["actions"]``:
    ``"dict"`` (the default) ``Dict(move=Discrete(3, start=1), aim=Box(-2, 2, (2,)),
    flags=MultiBinary(3))``, ``"nested"`` ``Tuple(Discrete(4), Dict(gear=MultiDiscrete([2, 3]),
    speed=Box(-1, 1, (2, 2))))``. Asserts every action is in the space."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(config)
        if (config or {}).get("actions", "dict") == "nested":
            inner = {"gear": spaces.MultiDiscrete([2, 3]), "speed": spaces.Box(-1, 1, (2, 2))}
            self.action_space = spaces.Tuple((spaces.Discrete(4), spaces.Dict(inner)))
        else:
            self.action_space = spaces.Dict(
                {
                    "move": spaces.Discrete(3, start=1),
                    "aim": spaces.Box(-2, 2, (2,)),
                    "flags": spaces.MultiBinary(3),
                }
            )
