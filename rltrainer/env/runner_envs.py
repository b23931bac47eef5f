"""How an ``EnvRunner`` makes its vector env (``record_env``/``render_env`` on the first copy,
sub-envs in actors of their own with ``remote_worker_envs``, the creation callbacks), checks it
at build, recreates it after a crash (``restart_failed_sub_environments``), and sets curriculum
tasks on its sub-envs (``env_task_fn``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rltrainer.algorithms.callbacks import call_hook, overrides
from rltrainer.core.cluster import REMOTE_ENVS_WITHOUT_TASKS, uses_remote_envs
from rltrainer.env.apis.task_settable_env import TaskSettableEnv, carry_task, find_task_settable
from rltrainer.env.env_checker import check_env
from rltrainer.env.env_runner_core import creation_error
from rltrainer.env.registry import RestartOnCrash, make_env
from rltrainer.env.vector_env import make_vector_env
from rltrainer.env.video import EpisodeVideos, video_role
from rltrainer.errors import ConfigError, RLTrainerError

logger = logging.getLogger("rltrainer.env.env_runner")  # the env runners' log

_noted_single_remote_env = False  # remote_worker_envs with one env per runner was logged


def _not_task_settable(spec: Any, env: gym.Env, batched: bool) -> str:
    """What ``env_task_fn`` needs, said about an env that is not a ``TaskSettableEnv``."""
    name = f"{spec.__module__}:{spec.__qualname__}" if isinstance(spec, type) else spec
    why = (
        " (a gymnasium id with a vector_entry_point is stepped as one batched env, which has no "
        "sub-envs to set tasks on)"
        if batched
        else ""
    )
    return (
        "environment(): env_task_fn needs envs that are rltrainer.env.TaskSettableEnv subclasses "
        f"(with get_task() and set_task(task)), but env {name!r} creates "
        f"{type(env.unwrapped).__name__}{why}; subclass TaskSettableEnv or remove env_task_fn"
    )


class RunnerEnvs:
    """``EnvRunner``'s vector env: made, checked, recreated, given tasks (``EnvRunner`` inherits it)."""

    config: Any
    env: Any
    callbacks: Any
    worker_index: int
    in_evaluation: bool
    _ctx: Any
    _where: str
    _obs: Any

    def _recreate_envs(self) -> None:
        failed = self._sub_envs()
        try:
            self.env.close()
        except Exception:  # noqa: BLE001 - a broken env may fail to close too
            logger.debug("closing a failed env raised", exc_info=True)
        self.env = self._make_envs()
        for old, new in zip(failed, self._sub_envs(), strict=True):
            carry_task(old, new)  # TaskSettableEnvs keep their (curriculum) tasks
        self._obs = None

    def _check_env(self) -> None:
        """RLlib's env check at build (``rltrainer.env.env_checker``) on the first env copy
        (sampling resets it before use), or, for a natively batched env or remote sub-envs
        (``remote_worker_envs``), on one more env made here."""
        copies = getattr(self.env, "envs", None)
        env = copies[0] if copies else make_env(self.config.env, self._ctx)
        if isinstance(env, EpisodeVideos):  # the check's reset and step are no episode to record
            env = env.env
        try:
            mask_key = self.config.model.action_mask_key
            check_env(env, self.config.env_name, seed=self.config.seed or 0, action_mask_key=mask_key)
        finally:
            if not copies:
                env.close()

    def _make_envs(self) -> gym.vector.VectorEnv:
        if self.config.env is None:  # trains from input_ only (the config checked the spaces)
            from rltrainer.env.no_env import NoEnv

            return NoEnv(
                self.config.observation_space, self.config.action_space, self.config.num_envs_per_env_runner
            )
        per_env = overrides(self.callbacks, "on_sub_environment_created")
        remote = self._remote_envs()
        render_mode = video_role(self.config, self.worker_index, self._ctx.num_workers)
        if remote and render_mode is not None:
            raise ConfigError(
                "record_env/render_env show the first sub-env, and with remote_worker_envs=True it lives "
                "in an actor of its own: set remote_worker_envs=False to record or render"
            )
        if remote and per_env:
            raise ConfigError(
                f"{type(self.callbacks).__name__}.on_sub_environment_created gets each sub-env object, but "
                "with remote_worker_envs=True they live in actors of their own: set remote_worker_envs=False "
                "or use on_environment_created (its env's actors attribute holds the actors)"
            )
        try:
            env = make_vector_env(
                self.config.env,
                self._ctx,
                self.config.num_envs_per_env_runner,
                restart_failed=self.config.restart_failed_sub_environments,
                sub_envs=per_env,  # the hook gets each env object, so no natively batched env
                horizon=self.config.horizon,
                remote=remote,
                worker_env_vars=self.config.extra_python_environs_for_worker,
                first_render_mode=render_mode,
            )
            if render_mode is not None:
                self._show_first_env(env, render_mode)
        except RLTrainerError:
            raise
        except Exception as err:  # the env's own constructor: say where, in one line
            raise creation_error(self.config.env, err) from err
        call_hook(
            self.callbacks,
            "on_environment_created",
            self._where,
            env_runner=self,
            env=env,
            env_context=self._ctx,
        )
        if per_env:
            for index, sub_env in enumerate(env.envs):
                call_hook(
                    self.callbacks,
                    "on_sub_environment_created",
                    self._where,
                    worker=self,
                    sub_environment=sub_env,
                    env_context=self._ctx.copy_with_overrides(vector_index=index),
                    env_index=index,
                )
        return env

    def _show_first_env(self, env: gym.vector.SyncVectorEnv, render_mode: str) -> None:
        """Wrap copy 0 to record its episodes (``record_env``) or draw them (``render_env``)."""
        from rltrainer.env.video import check_renders

        first = env.envs[0]
        setting = "record_env" if render_mode == "rgb_array" else "render_env"
        check_renders(first.unwrapped, self.config.env_name, render_mode, setting)
        if render_mode == "human":  # such an env draws itself in reset() and step() (gymnasium's API)
            return
        folder = self.config._video_dir
        if folder is None:  # an env runner made outside an algorithm (tests, tools)
            raise ConfigError("record_env: no video folder was resolved (build the algorithm to record)")
        where = "evaluation" if self.in_evaluation else "training"
        env.envs[0] = EpisodeVideos(first, os.path.join(folder, where), f"runner-{self.worker_index}")

    def _remote_envs(self) -> bool:
        """Whether the sub-envs live in actors of their own: ``remote_worker_envs`` with more than
        one env per runner (RLlib ignores it for one env, and so does this, saying so once)."""
        global _noted_single_remote_env  # noqa: PLW0603 - said once per process
        if uses_remote_envs(self.config):
            return True
        if self.config.remote_worker_envs and not _noted_single_remote_env:
            logger.info("remote_worker_envs=True is ignored with num_envs_per_env_runner=1 (as in RLlib)")
            _noted_single_remote_env = True
        return False

    def _sub_envs(self) -> list[gym.Env]:
        """The sub-envs as their creator made them (without ``RestartOnCrash``), or the batched env;
        with ``remote_worker_envs`` their actors' handles (RLlib's ``get_sub_environments()``)."""
        envs = getattr(self.env, "envs", None)
        if envs is None:
            return list(getattr(self.env, "actors", None) or [self.env])
        return [env.env if isinstance(env, RestartOnCrash) else env for env in envs]

    # --- tasks (curriculum learning) ----------------------------------------------------
    def task_settable_envs(self) -> list[TaskSettableEnv]:
        """Each sub-env's ``TaskSettableEnv`` (found through gymnasium wrappers).

        Raises ``ConfigError`` naming the env when one is not: what ``env_task_fn`` needs.
        """
        if self._remote_envs():
            raise ConfigError(REMOTE_ENVS_WITHOUT_TASKS)
        sub_envs = self._sub_envs()
        found = [find_task_settable(env) for env in sub_envs]
        if None in found:
            missing = sub_envs[found.index(None)]
            raise ConfigError(_not_task_settable(self.config.env, missing, batched=missing is self.env))
        return found

    def apply_env_task_fn(self, env_task_fn: Callable[..., Any], train_results: dict[str, Any]) -> list[Any]:
        """Set each sub-env to ``env_task_fn(train_results, env, env_ctx)`` where that differs
        from its current task (RLlib's rule); returns the sub-envs' tasks."""
        tasks = []
        for index, env in enumerate(self.task_settable_envs()):
            task = env_task_fn(train_results, env, self._ctx.copy_with_overrides(vector_index=index))
            if task != env.get_task():
                env.set_task(task)
            tasks.append(task)
        return tasks

    def set_env_tasks(self, tasks: list[Any]) -> None:
        """Set sub-env i to ``tasks[i]`` (a replacement runner takes over its predecessor's tasks)."""
        for env, task in zip(self.task_settable_envs(), tasks, strict=True):
            env.set_task(task)
