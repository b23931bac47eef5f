"""RLlib's import path of ``PolicyClient`` (``ray.rllib.env.policy_client``); it lives in
``rltrainer.offline.policy_client``."""

from rltrainer.offline.policy_client import PolicyClient, PolicyClientError

__all__ = ["PolicyClient", "PolicyClientError"]
