"""DQN (``from rltrainer.algorithms.dqn import DQN, DQNConfig``).

Imported on first use: ``DQN`` imports torch, ``DQNConfig`` (in ``dqn_config``) does not.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.dqn.dqn import DQN
    from rltrainer.algorithms.dqn.dqn_config import DQNConfig

__all__ = ["DQN", "DQNConfig"]
__getattr__ = lazy_exports(
    __name__, {"DQN": "rltrainer.algorithms.dqn.dqn", "DQNConfig": "rltrainer.algorithms.dqn.dqn_config"}
)
