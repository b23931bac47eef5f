"""Trainer-era DQN (``from rltrainer.agents.dqn import DQNTrainer, DEFAULT_CONFIG``): re-exports of
``rltrainer.algorithms.dqn`` (``DQNTrainer`` is ``DQN``; ``DEFAULT_CONFIG`` is ``DQNConfig().to_dict()``)."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents import trainer_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.dqn.dqn import DQN
    from rltrainer.algorithms.dqn.dqn import DQN as DQNTrainer  # noqa: N811 - the Trainer-era name
    from rltrainer.algorithms.dqn.dqn_config import DQNConfig

    DEFAULT_CONFIG: dict[str, Any]

__all__ = ["DEFAULT_CONFIG", "DQN", "DQNConfig", "DQNTrainer"]
__getattr__ = trainer_exports(
    __name__, "rltrainer.algorithms.dqn.dqn:DQN", "rltrainer.algorithms.dqn.dqn_config:DQNConfig"
)
