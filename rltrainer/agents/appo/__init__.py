"""Trainer-era APPO (``from rltrainer.agents.appo import APPOTrainer, DEFAULT_CONFIG``): re-exports
of ``rltrainer.algorithms.appo`` (``APPOTrainer`` is ``APPO``; ``DEFAULT_CONFIG`` is
``APPOConfig().to_dict()``)."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents import trainer_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.appo.appo import APPO
    from rltrainer.algorithms.appo.appo import APPO as APPOTrainer  # noqa: N811 - the Trainer-era name
    from rltrainer.algorithms.appo.appo_config import APPOConfig

    DEFAULT_CONFIG: dict[str, Any]

__all__ = ["DEFAULT_CONFIG", "APPO", "APPOConfig", "APPOTrainer"]
__getattr__ = trainer_exports(
    __name__, "rltrainer.algorithms.appo.appo:APPO", "rltrainer.algorithms.appo.appo_config:APPOConfig"
)
