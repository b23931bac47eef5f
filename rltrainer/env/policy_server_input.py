"""RLlib's import path of ``PolicyServerInput`` (``ray.rllib.env.policy_server_input``); it lives
in ``rltrainer.offline.policy_server``."""

from rltrainer.offline.policy_server import PolicyServerInput

__all__ = ["PolicyServerInput"]
