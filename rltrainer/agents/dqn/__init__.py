"""Trainer-era DQN (``from rltrainer.agents.dqn import DQNTrainer, DEFAULT_CONFIG``): re-exports of
``rltrainer.algorithms.dqn`` (``DQNTrainer`` is ``DQN``; ``DEFAULT_CONFIG`` is ``DQNConfig().to_dict()``),
and Ape-X DQN as ``ray.rllib.agents.dqn`` had it (``ApexTrainer``, ``APEX_DEFAULT_CONFIG``)."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents import trainer_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.apex.apex import ApexDQN as ApexTrainer  # noqa: N811
    from rltrainer.algorithms.dqn.dqn import DQN
    from rltrainer.algorithms.dqn.dqn import DQN as DQNTrainer  # noqa: N811 - the Trainer-era name
    from rltrainer.algorithms.dqn.dqn_config import DQNConfig

    DEFAULT_CONFIG: dict[str, Any]
    APEX_DEFAULT_CONFIG: dict[str, Any]

__all__ = ["APEX_DEFAULT_CONFIG", "DEFAULT_CONFIG", "DQN", "ApexTrainer", "DQNConfig", "DQNTrainer"]
_dqn = trainer_exports(
    __name__, "rltrainer.algorithms.dqn.dqn:DQN", "rltrainer.algorithms.dqn.dqn_config:DQNConfig"
)
_apex = trainer_exports(
    __name__, "rltrainer.algorithms.apex.apex:ApexDQN", "rltrainer.algorithms.apex.apex_config:ApexDQNConfig"
)


def __getattr__(name: str) -> Any:
    if name == "ApexTrainer":
        return _apex("ApexDQNTrainer")
    if name == "APEX_DEFAULT_CONFIG":
        return _apex("DEFAULT_CONFIG")
    return _dqn(name)
