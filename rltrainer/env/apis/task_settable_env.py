"""``TaskSettableEnv``: an env whose task (level, goal, difficulty) can be read and set.

RLlib's curriculum API. With ``.environment(env_task_fn=fn)`` the algorithm calls
``fn(train_results, task_settable_env, env_ctx) -> task`` after every ``train()`` iteration
for each sub-env of every env runner (remote ones included) and calls ``set_task`` where the
returned task differs from ``get_task()``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rltrainer.errors import ConfigError

TaskType = Any  # whatever the env understands: an int level, a dict of parameters, ...

#: ``env_task_fn(train_results, task_settable_env, env_ctx) -> new task``.
EnvTaskFn = Callable[[dict[str, Any], "TaskSettableEnv", Any], TaskType]


class TaskSettableEnv(gym.Env):
    """A gymnasium env with a settable task: implement ``get_task`` and ``set_task``.

    A new task should take effect at the env's next ``reset()``, so the episode in progress
    finishes on the task it started with. ``sample_tasks`` is for meta-learning and optional.
    """

    def sample_tasks(self, n_tasks: int) -> list[TaskType]:
        """``n_tasks`` tasks drawn from the env's task distribution."""
        raise NotImplementedError

    def set_task(self, task: TaskType) -> None:
        """Switch the env to ``task``."""
        raise NotImplementedError

    def get_task(self) -> TaskType:
        """The task the env is set to."""
        raise NotImplementedError


def find_task_settable(env: gym.Env) -> TaskSettableEnv | None:
    """``env`` itself, or the first env it wraps that is a ``TaskSettableEnv`` (through
    gymnasium wrappers such as ``TimeLimit``); ``None`` when there is none."""
    while not isinstance(env, TaskSettableEnv):
        if not isinstance(env, gym.Wrapper):
            return None
        env = env.env
    return env


def carry_task(old_env: gym.Env, new_env: gym.Env) -> None:
    """Set a recreated env to the task of the env it replaces (when both have tasks and the old
    one can still tell its task), so that a crash does not send it back to its first task."""
    old, new = find_task_settable(old_env), find_task_settable(new_env)
    if old is None or new is None:
        return
    try:
        task = old.get_task()
    except Exception:  # noqa: BLE001 - a crashed env may not answer; the new one keeps its own task
        return
    new.set_task(task)


def env_task_fn_path(fn: Any) -> str:
    """``"package.module:qualname"`` of a function (what ``AlgorithmConfig.to_dict()`` writes)."""
    module = getattr(fn, "__module__", None) or type(fn).__module__
    name = getattr(fn, "__qualname__", None) or f"<{type(fn).__qualname__} object>"
    return f"{module}:{name}"


def resolve_env_task_fn(spec: Any) -> EnvTaskFn | None:
    """The function an ``env_task_fn`` setting names (``None`` when unset); raises ``ConfigError``."""
    if spec is None or callable(spec):
        return spec
    module_name, _, qualname = str(spec).partition(":")
    if "<" in qualname:
        raise ConfigError(
            f"env_task_fn {spec!r} names a lambda, a nested function or a callable object, which "
            "cannot be imported by name: define the function at module level, or pass the function "
            "itself (e.g. Algorithm.from_checkpoint(path, config_overrides={'env_task_fn': fn}))"
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"env_task_fn {spec!r}: cannot import module {module_name!r} ({err})") from None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ConfigError(f"env_task_fn {spec!r}: module {module_name!r} has no attribute {qualname!r}")
    if not callable(obj):
        raise ConfigError(f"env_task_fn {spec!r} is a {type(obj).__name__}, not a function")
    return obj
