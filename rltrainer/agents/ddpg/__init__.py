"""Trainer-era DDPG and TD3 (``from rltrainer.agents.ddpg import DDPGTrainer, TD3Trainer,
DEFAULT_CONFIG``): re-exports of ``rltrainer.algorithms.ddpg``. ``DEFAULT_CONFIG`` is DDPG's
(``DDPGConfig().to_dict()``), ``TD3_DEFAULT_CONFIG`` TD3's, ``ApexDDPGTrainer`` and
``APEX_DDPG_DEFAULT_CONFIG`` Ape-X DDPG's, as in ``ray.rllib.agents.ddpg``."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents import trainer_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.ddpg.ddpg import DDPG, TD3
    from rltrainer.algorithms.ddpg.ddpg import DDPG as DDPGTrainer  # noqa: N811 - the Trainer-era name
    from rltrainer.algorithms.ddpg.ddpg import TD3 as TD3Trainer  # noqa: N811
    from rltrainer.algorithms.ddpg.ddpg_config import DDPGConfig, TD3Config

    DEFAULT_CONFIG: dict[str, Any]
    TD3_DEFAULT_CONFIG: dict[str, Any]
    APEX_DDPG_DEFAULT_CONFIG: dict[str, Any]
    from rltrainer.algorithms.apex.apex import ApexDDPG as ApexDDPGTrainer  # noqa: N811

__all__ = [
    "APEX_DDPG_DEFAULT_CONFIG",
    "DDPG",
    "DEFAULT_CONFIG",
    "TD3",
    "TD3_DEFAULT_CONFIG",
    "DDPGConfig",
    "ApexDDPGTrainer",
    "DDPGTrainer",
    "TD3Config",
    "TD3Trainer",
]
_ALGORITHMS, _CONFIGS = "rltrainer.algorithms.ddpg.ddpg", "rltrainer.algorithms.ddpg.ddpg_config"
_ddpg = trainer_exports(__name__, f"{_ALGORITHMS}:DDPG", f"{_CONFIGS}:DDPGConfig")
_td3 = trainer_exports(__name__, f"{_ALGORITHMS}:TD3", f"{_CONFIGS}:TD3Config")


_apex = trainer_exports(
    __name__,
    "rltrainer.algorithms.apex.apex:ApexDDPG",
    "rltrainer.algorithms.apex.apex_config:ApexDDPGConfig",
)


def __getattr__(name: str) -> Any:
    if name in ("ApexDDPGTrainer", "APEX_DDPG_DEFAULT_CONFIG"):
        return _apex("DEFAULT_CONFIG" if name.endswith("CONFIG") else name)
    if name == "TD3_DEFAULT_CONFIG":
        return _td3("DEFAULT_CONFIG")
    return _td3(name) if name.startswith("TD3") else _ddpg(name)
