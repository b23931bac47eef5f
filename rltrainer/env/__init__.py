"""Env specs, creation and the env runners that sample from them."""

from rltrainer.env.env_context import EnvContext
from rltrainer.env.registry import make_env, make_vector_env, register_env, registered_envs

__all__ = ["EnvContext", "make_env", "make_vector_env", "register_env", "registered_envs"]
