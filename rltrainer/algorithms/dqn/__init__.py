"""DQN (``from rltrainer.algorithms.dqn import DQN, DQNConfig``)."""

from rltrainer.algorithms.dqn.dqn import DQN, DQNConfig

__all__ = ["DQN", "DQNConfig"]
