"""Trainer-era SAC (``from rltrainer.agents.sac import SACTrainer, DEFAULT_CONFIG``): re-exports of
``rltrainer.algorithms.sac`` (``SACTrainer`` is ``SAC``; ``DEFAULT_CONFIG`` is ``SACConfig().to_dict()``)."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents import trainer_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.sac.sac import SAC
    from rltrainer.algorithms.sac.sac import SAC as SACTrainer  # noqa: N811 - the Trainer-era name
    from rltrainer.algorithms.sac.sac_config import SACConfig

    DEFAULT_CONFIG: dict[str, Any]

__all__ = ["DEFAULT_CONFIG", "SAC", "SACConfig", "SACTrainer"]
__getattr__ = trainer_exports(
    __name__, "rltrainer.algorithms.sac.sac:SAC", "rltrainer.algorithms.sac.sac_config:SACConfig"
)
