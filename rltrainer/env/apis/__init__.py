"""Env APIs beyond ``gymnasium.Env`` (RLlib's ``ray.rllib.env.apis``)."""

from rltrainer.env.apis.task_settable_env import TaskSettableEnv, TaskType

__all__ = ["TaskSettableEnv", "TaskType"]
