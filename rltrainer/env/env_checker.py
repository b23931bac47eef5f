"""The env check at ``build()`` (RLlib's ``check_env``; ``disable_env_checking=True`` skips it),
and the old gym API adapter.

The driver makes one extra env, resets it with a seed, takes one step with a sampled action,
and checks what comes back against the env's spaces and gymnasium's API, so a broken env fails
with one ``EnvError`` that says what is wrong before any runner starts, instead of an
exception deep inside sampling.

``OldGymApi`` runs envs written against the old gym API that the documents' examples use
(``reset() -> obs``, ``step() -> (obs, reward, done, info)``): ``make_env`` wraps them when
their ``reset`` takes no ``seed`` (as shimmy's ``GymV21CompatibilityV0`` does for gym envs).
"""

from __future__ import annotations

import copy
import inspect
import logging
import numbers
from typing import Any

import gymnasium as gym
import numpy as np

from rltrainer.errors import EnvError

logger = logging.getLogger(__name__)

SKIP = "fix the env, or set .environment(disable_env_checking=True) to skip this check"


def uses_old_gym_api(env: Any) -> bool:
    """Whether ``env.reset`` takes no ``seed`` (the old gym API's ``reset(self)``)."""
    try:
        params = inspect.signature(env.reset).parameters.values()
    except (TypeError, ValueError):
        return False
    return not any(p.name == "seed" or p.kind is p.VAR_KEYWORD for p in params)


class OldGymApi(gym.Env):
    """gymnasium's API over an env of the old gym API: ``reset(seed, options) -> (obs, {})``,
    ``step() -> (obs, reward, terminated, truncated, info)``, where a ``done`` with
    ``info["TimeLimit.truncated"]`` is a truncation (gym's TimeLimit set it) and any other a
    termination. ``env.seed(seed)`` is called when the env has it."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self.metadata = getattr(env, "metadata", {})
        self.render_mode = getattr(env, "render_mode", None)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:  # noqa: ARG002
        if seed is not None and callable(getattr(self.env, "seed", None)):
            self.env.seed(seed)
        out = self.env.reset()
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
            return out  # reset already returns gymnasium's pair
        return out, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        out = self.env.step(action)
        if len(out) == 5:
            return out
        obs, reward, done, info = out
        truncated = bool(done and info.get("TimeLimit.truncated", False))
        return obs, reward, bool(done) and not truncated, truncated, info

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        if callable(getattr(self.env, "close", None)):
            self.env.close()


def check_env(env: gym.Env, name: str, seed: int = 0, action_mask_key: str | None = None) -> None:
    """One seeded reset and one step of ``env``, checked; ``EnvError`` naming the problem. The
    step's action is sampled among the allowed ones when a Dict observation holds a Discrete
    action space's mask under ``action_mask_key``."""

    def fail(problem: str) -> None:
        raise EnvError(f"env {name!r} failed the env check at build(): {problem}; {SKIP}")

    try:
        out = env.reset(seed=seed)
    except Exception as err:  # noqa: BLE001 - any error of user env code, reported in one line
        fail(f"reset(seed={seed}) raised {type(err).__name__}: {err}")
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        fail(f"reset() must return (observation, info dict) (gymnasium's API), got {_kind(out)}")
    _check_obs(env, out[0], "reset()", fail)
    action = _allowed_action(env.action_space, out[0], action_mask_key, seed)
    try:
        out = env.step(action)
    except Exception as err:  # noqa: BLE001
        fail(f"step({action!r}) (sampled from {env.action_space}) raised {type(err).__name__}: {err}")
    if not (isinstance(out, tuple) and len(out) == 5):
        fail(
            "step() must return (observation, reward, terminated, truncated, info) (gymnasium's API), "
            f"got {_kind(out)}"
        )
    obs, reward, terminated, truncated, info = out
    _check_obs(env, obs, "step()", fail)
    if not isinstance(reward, numbers.Real) and not (isinstance(reward, np.ndarray) and reward.shape == ()):
        fail(f"step()'s reward must be a number, got {type(reward).__name__} {reward!r}")
    for flag, value in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(value, bool | np.bool_) and value not in (0, 1):
            fail(f"step()'s {flag} must be a bool, got {type(value).__name__} {value!r}")
    if not isinstance(info, dict):
        fail(f"step()'s info must be a dict, got {type(info).__name__}")


def _check_obs(env: gym.Env, obs: Any, where: str, fail: Any) -> None:
    problem = _misfit(env.observation_space, obs)
    if problem is not None:
        fail(f"{where}'s observation {problem} (observation space {env.observation_space})")


def _misfit(space: gym.Space, obs: Any) -> str | None:
    """What keeps ``obs`` from being read as an observation of ``space`` (``None``: nothing).

    Laxer than ``space.contains``, as the runners are: float64 values for a float32 Box are
    cast, and values outside a Box's bounds are only logged (many envs overshoot them)."""
    if isinstance(space, gym.spaces.Box):
        array = np.asarray(obs)
        if array.shape != space.shape:
            return f"has shape {array.shape}, not {space.shape}"
        if not np.can_cast(array.dtype, space.dtype, "same_kind") and array.dtype != np.bool_:
            return f"has dtype {array.dtype}, which does not cast to {space.dtype}"
        if not space.contains(array.astype(space.dtype)):
            logger.warning("an observation is outside its Box's bounds %s: %s", space, array)
        return None
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, dict) or set(obs) != set(space.spaces):
            keys = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
            return f"must be a dict with keys {sorted(space.spaces)}, got {keys}"
        for key, part in space.spaces.items():
            problem = _misfit(part, obs[key])
            if problem is not None:
                return f"part {key!r} {problem}"
        return None
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(obs, tuple | list) or len(obs) != len(space.spaces):
            return f"must be a tuple of {len(space.spaces)}, got {_kind(obs)}"
        for index, part in enumerate(space.spaces):
            problem = _misfit(part, obs[index])
            if problem is not None:
                return f"part {index} {problem}"
        return None
    return None if space.contains(obs) else f"{obs!r:.200} is not in the space"


def _allowed_action(space: gym.Space, obs: Any, action_mask_key: str | None, seed: int) -> Any:
    """An action sampled from a seeded copy of ``space`` (the same one every build; the env's
    own space keeps its random state), among the allowed ones when the observation holds a
    mask (under ``action_mask_key``, or the usual ``"action_mask"`` with masking off)."""
    space = copy.deepcopy(space)
    space.seed(seed)
    mask = obs.get(action_mask_key or "action_mask") if isinstance(obs, dict) else None
    if mask is not None and isinstance(space, gym.spaces.Discrete):
        allowed = np.asarray(mask).astype(np.int8).reshape(-1)
        if allowed.shape == (space.n,) and allowed.any():
            return space.sample(mask=allowed)
    return space.sample()


def _kind(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    return f"a {type(value).__name__}"
