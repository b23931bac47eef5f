"""Trainer-era MARWIL and BC (``from rltrainer.agents.marwil import MARWILTrainer, BCTrainer,
DEFAULT_CONFIG``): re-exports of ``rltrainer.algorithms.marwil``. ``DEFAULT_CONFIG`` is MARWIL's
(``MARWILConfig().to_dict()``), ``BC_DEFAULT_CONFIG`` BC's, as in ``ray.rllib.agents.marwil``."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents import trainer_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.marwil.marwil import BC, MARWIL
    from rltrainer.algorithms.marwil.marwil import BC as BCTrainer  # noqa: N811 - the Trainer-era name
    from rltrainer.algorithms.marwil.marwil import MARWIL as MARWILTrainer  # noqa: N811
    from rltrainer.algorithms.marwil.marwil_config import BCConfig, MARWILConfig

    DEFAULT_CONFIG: dict[str, Any]
    BC_DEFAULT_CONFIG: dict[str, Any]

__all__ = [
    "BC",
    "BC_DEFAULT_CONFIG",
    "DEFAULT_CONFIG",
    "MARWIL",
    "BCConfig",
    "BCTrainer",
    "MARWILConfig",
    "MARWILTrainer",
]
_ALGORITHMS, _CONFIGS = "rltrainer.algorithms.marwil.marwil", "rltrainer.algorithms.marwil.marwil_config"
_marwil = trainer_exports(__name__, f"{_ALGORITHMS}:MARWIL", f"{_CONFIGS}:MARWILConfig")
_bc = trainer_exports(__name__, f"{_ALGORITHMS}:BC", f"{_CONFIGS}:BCConfig")


def __getattr__(name: str) -> Any:
    if name == "BC_DEFAULT_CONFIG":
        return _bc("DEFAULT_CONFIG")
    return _bc(name) if name.startswith("BC") else _marwil(name)
