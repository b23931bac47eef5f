"""``TaskSettableEnv``: an env whose task (level, goal, difficulty) can be read and set.

RLlib's curriculum API. With ``.environment(env_task_fn=fn)`` the algorithm calls
``fn(train_results, task_settable_env, env_ctx) -> task`` after every ``train()`` iteration
for each sub-env of every env runner (remote ones included) and calls ``set_task`` where the
returned task differs from ``get_task()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rltrainer.utils.import_paths import resolve_function

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


def resolve_env_task_fn(spec: Any) -> EnvTaskFn | None:
    """The function an ``env_task_fn`` setting names (``None`` when unset); raises ``ConfigError``."""
    return resolve_function("env_task_fn", spec)
