"""Trainer-era IMPALA (``from rltrainer.agents.impala import IMPALATrainer, DEFAULT_CONFIG``): re-exports
of ``rltrainer.algorithms.impala`` (``IMPALATrainer`` is ``IMPALA``; ``DEFAULT_CONFIG`` is
``IMPALAConfig().to_dict()``)."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents import trainer_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.impala.impala import IMPALA
    from rltrainer.algorithms.impala.impala import IMPALA as IMPALATrainer  # noqa: N811 - the Trainer-era name
    from rltrainer.algorithms.impala.impala import IMPALA as ImpalaTrainer  # noqa: N811 - RLlib 1.x's spelling
    from rltrainer.algorithms.impala.impala_config import IMPALAConfig

    DEFAULT_CONFIG: dict[str, Any]

__all__ = ["DEFAULT_CONFIG", "IMPALA", "IMPALAConfig", "IMPALATrainer", "ImpalaTrainer"]
_exports = trainer_exports(
    __name__,
    "rltrainer.algorithms.impala.impala:IMPALA",
    "rltrainer.algorithms.impala.impala_config:IMPALAConfig",
)


def __getattr__(name: str) -> Any:
    return _exports("IMPALATrainer" if name == "ImpalaTrainer" else name)
