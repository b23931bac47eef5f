"""Env specs, creation and the env runners that sample from them."""

from rltrainer.env.apis.task_settable_env import TaskSettableEnv
from rltrainer.env.env_context import EnvContext
from rltrainer.env.multi_agent_env import MultiAgentEnv, make_multi_agent
from rltrainer.env.registry import make_env, register_env, registered_envs
from rltrainer.env.vector_env import make_vector_env

__all__ = [
    "EnvContext",
    "MultiAgentEnv",
    "TaskSettableEnv",
    "make_env",
    "make_multi_agent",
    "make_vector_env",
    "register_env",
    "registered_envs",
]
