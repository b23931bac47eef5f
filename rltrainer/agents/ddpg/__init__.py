"""Trainer-era DDPG and TD3 (``from rltrainer.agents.ddpg import DDPGTrainer, TD3Trainer,
DEFAULT_CONFIG``): re-exports of ``rltrainer.algorithms.ddpg``. ``DEFAULT_CONFIG`` is DDPG's
(``DDPGConfig().to_dict()``), ``TD3_DEFAULT_CONFIG`` TD3's, as in ``ray.rllib.agents.ddpg``."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents import trainer_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.ddpg.ddpg import DDPG, TD3
    from rltrainer.algorithms.ddpg.ddpg import DDPG as DDPGTrainer  # noqa: N811 - the Trainer-era name
    from rltrainer.algorithms.ddpg.ddpg import TD3 as TD3Trainer  # noqa: N811
    from rltrainer.algorithms.ddpg.ddpg_config import DDPGConfig, TD3Config

    DEFAULT_CONFIG: dict[str, Any]
    TD3_DEFAULT_CONFIG: dict[str, Any]

__all__ = [
    "DDPG",
    "DEFAULT_CONFIG",
    "TD3",
    "TD3_DEFAULT_CONFIG",
    "DDPGConfig",
    "DDPGTrainer",
    "TD3Config",
    "TD3Trainer",
]
_ALGORITHMS, _CONFIGS = "rltrainer.algorithms.ddpg.ddpg", "rltrainer.algorithms.ddpg.ddpg_config"
_ddpg = trainer_exports(__name__, f"{_ALGORITHMS}:DDPG", f"{_CONFIGS}:DDPGConfig")
_td3 = trainer_exports(__name__, f"{_ALGORITHMS}:TD3", f"{_CONFIGS}:TD3Config")


def __getattr__(name: str) -> Any:
    if name == "TD3_DEFAULT_CONFIG":
        return _td3("DEFAULT_CONFIG")
    return _td3(name) if name.startswith("TD3") else _ddpg(name)
