"""Vector envs: ``num_envs`` copies of an env stepped together.

Gymnasium ids without a registered creator use the env's ``vector_entry_point`` when it has one
(one batched env instead of N Python objects), Atari games gymnasium's batched ALE env, anything
else a ``SyncVectorEnv`` of copies (``registry.make_sub_env``); with ``remote_worker_envs`` each
copy is a Ray actor of its own (``rltrainer.env.remote_vector_env``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import gymnasium as gym

from rltrainer.env.atari import is_atari, make_atari_vector
from rltrainer.env.env_context import EnvContext
from rltrainer.env.registry import is_registered, make_sub_env
from rltrainer.errors import EnvError


def make_vector_env(
    env: Any,
    ctx: EnvContext,
    num_envs: int,
    restart_failed: bool = False,
    sub_envs: bool = False,
    horizon: int | None = None,
    remote: bool = False,
    worker_env_vars: dict[str, str] | None = None,
    first_render_mode: str | None = None,
) -> gym.vector.VectorEnv:
    """Create ``num_envs`` copies stepped together (next-step autoreset, gymnasium's default).

    With ``restart_failed`` each copy is wrapped in ``RestartOnCrash`` (native batched envs,
    made from a ``vector_entry_point``, have no separate copies to recreate). ``sub_envs``
    asks for a ``SyncVectorEnv`` of env objects even where a native batched env exists.
    ``horizon`` (RLlib's): each copy's episodes are truncated after that many steps (a
    ``TimeLimit`` on each, so copies, not a native batched env). ``remote``
    (``remote_worker_envs``): each copy lives in its own Ray actor, which gets
    ``worker_env_vars`` in its environment (``RemoteVectorEnv``; always copies).
    ``first_render_mode``: copy 0 is made with it (``record_env``/``render_env``; copies).
    """
    if remote:  # imported here: it imports Ray, which only remote_worker_envs needs
        from rltrainer.env.remote_vector_env import RemoteVectorEnv

        return RemoteVectorEnv(env, ctx, num_envs, restart_failed, horizon, worker_env_vars)
    sub_envs = sub_envs or horizon is not None or first_render_mode is not None
    if not is_registered(env) and not sub_envs and is_atari(env):
        return make_atari_vector(env, num_envs, dict(ctx))
    if isinstance(env, str) and env in gym.registry and not is_registered(env) and not sub_envs:
        spec = gym.spec(env)
        if spec.vector_entry_point is not None:
            try:
                return gym.make_vec(env, num_envs=num_envs, vectorization_mode="vector_entry_point", **ctx)
            except TypeError as err:
                raise EnvError(f"could not create env {env!r} with env_config {dict(ctx)}: {err}") from err
    return gym.vector.SyncVectorEnv(
        [
            partial(make_sub_env, env, ctx, i, restart_failed, horizon, first_render_mode if i == 0 else None)
            for i in range(num_envs)
        ]
    )
