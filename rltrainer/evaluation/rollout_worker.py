"""RLlib's ``ray.rllib.evaluation.rollout_worker`` path: ``get_global_worker()`` and
``RolloutWorker`` (today's ``EnvRunner``), re-exported from ``rltrainer.env.env_runner``."""

from rltrainer.env.env_runner import EnvRunner as RolloutWorker
from rltrainer.env.env_runner import get_global_worker

__all__ = ["RolloutWorker", "get_global_worker"]
