"""``.environment()``: which env to train on and how its observations, actions and rewards are
treated; the env checks of ``validate()``."""

from __future__ import annotations

from typing import Any, Self

import gymnasium as gym
from pydantic import Field, PrivateAttr, field_validator

from rltrainer.algorithms.config_sections.section import ConfigSection
from rltrainer.core.cluster import REMOTE_ENVS_WITHOUT_TASKS, uses_remote_envs
from rltrainer.errors import ConfigError

#: ``environment()``'s default: the env is left as it is (``None`` sets no env, as in RLlib).
NOT_PROVIDED: Any = object()


KEYS = (
    "env",
    "env_config",
    "observation_space",
    "action_space",
    "clip_rewards",
    "normalize_actions",
    "clip_actions",
    "env_task_fn",
    "disable_env_checking",
    "render_env",
    "record_env",
)


class EnvironmentSettings(ConfigSection):
    """``environment()``'s settings."""

    env: Any = None
    """A registered name, a gymnasium id, ``"package.module:Class"``, or a ``gym.Env`` subclass."""
    env_config: dict[str, Any] = Field(default_factory=dict)
    """Passed to the env creator inside an ``EnvContext``."""
    observation_space: Any = None
    """Override the env's observation space (rarely needed)."""
    action_space: Any = None
    """Override the env's action space (rarely needed)."""
    clip_rewards: bool | float | None = None
    """``True``: sign of the reward; a float c: clip to [-c, c]; ``None``/``False``: unchanged."""
    normalize_actions: bool = True
    """Box actions: the policy acts in [-1, 1], rescaled to the space's bounds."""
    clip_actions: bool = False
    """Box actions: clip to the space's bounds before stepping the env."""
    disable_env_checking: bool = False
    """Skip the env check at ``build()`` (one seeded reset and one step of an extra env in the
    driver, checked against the spaces and gymnasium's API: ``rltrainer.env.env_checker``)."""
    render_env: bool = False
    """Render the first sub-env of one env runner (the driver's when it samples, else runner 1)
    on screen while training (gymnasium ids are made with ``render_mode="human"``)."""
    record_env: bool | str = False
    """Record videos (mp4) of the first sub-env's episodes on one env runner, as gymnasium's
    ``RecordVideo`` picks them (episodes 0, 1, 8, 27, ..., then every 1000th): ``True``: into
    ``<trial folder>/videos``; a string: into that folder. RLlib 1.x's ``monitor``."""
    env_task_fn: Any = None
    """Curriculum: ``fn(train_results, task_settable_env, env_ctx) -> task``, called after every
    ``train()`` for each sub-env of every env runner, which is set to the task returned where it
    differs; the env must be a ``TaskSettableEnv``. A function or ``"package.module:function"``."""

    # ``record_env``'s folder as the driver resolved it (True -> <trial folder>/videos).
    _video_dir: str | None = PrivateAttr(default=None)

    def environment(self, env: Any = NOT_PROVIDED, **kwargs: Any) -> Self:
        """Which env to train on and how its observations, actions and rewards are treated
        (``env=None``: none, for configs that only read ``offline_data(input_=...)``)."""
        if env is not NOT_PROVIDED:
            kwargs["env"] = env
        return self._update("environment", kwargs)

    @property
    def env_name(self) -> str:
        """A short name of the env, safe as part of a folder name ("ALE/Pong-v5" -> "ALE-Pong-v5")."""
        if isinstance(self.env, type):
            return self.env.__name__
        return str(self.env).rsplit(":", 1)[-1].replace("/", "-").replace("\\", "-")

    def _check_env_set(self) -> None:
        if self.env is None and not self.trains_without_env:
            raise ConfigError(
                "no env set: call .environment('CartPole-v1') (or another env); a config that only "
                "reads offline_data(input_=...) may set env=None with observation_space and action_space"
            )

    def _check_env_tasks(self) -> None:
        if self.env_task_fn is not None and uses_remote_envs(self):
            raise ConfigError(REMOTE_ENVS_WITHOUT_TASKS)

    @field_validator("env")
    @classmethod
    def _env_spec(cls, env: Any) -> Any:
        if env is None or isinstance(env, str) or (isinstance(env, type) and issubclass(env, gym.Env)):
            return env
        raise ValueError('must be an env name, "package.module:Class", or a gymnasium.Env subclass')

    @field_validator("env_task_fn")
    @classmethod
    def _env_task_fn(cls, fn: Any) -> Any:
        if fn is None or callable(fn) or (isinstance(fn, str) and ":" in fn.strip(":")):
            return fn  # a name is imported when the algorithm is built (not by the operator)
        raise ValueError(
            'must be a function (train_results, env, env_ctx) -> task, or "package.module:function"'
        )

    @field_validator("observation_space", "action_space")
    @classmethod
    def _space(cls, space: Any) -> Any:
        if space is None or isinstance(space, gym.Space):
            return space
        raise ValueError("must be a gymnasium.spaces.Space")
