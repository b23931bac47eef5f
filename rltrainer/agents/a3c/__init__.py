"""Trainer-era A3C (``from rltrainer.agents.a3c import A3CTrainer, A2CTrainer, DEFAULT_CONFIG``):
re-exports of ``rltrainer.algorithms.a3c`` (``A3CTrainer`` is ``A3C``; ``DEFAULT_CONFIG`` is
``A3CConfig().to_dict()``), and A2C where RLlib 1.x kept it (``A2CTrainer``, ``A2C_DEFAULT_CONFIG``)."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents import trainer_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.a2c.a2c import A2C as A2CTrainer  # noqa: N811
    from rltrainer.algorithms.a3c.a3c import A3C
    from rltrainer.algorithms.a3c.a3c import A3C as A3CTrainer  # noqa: N811 - the Trainer-era name
    from rltrainer.algorithms.a3c.a3c_config import A3CConfig

    DEFAULT_CONFIG: dict[str, Any]
    A2C_DEFAULT_CONFIG: dict[str, Any]

__all__ = ["A2C_DEFAULT_CONFIG", "DEFAULT_CONFIG", "A3C", "A2CTrainer", "A3CConfig", "A3CTrainer"]
_a3c = trainer_exports(
    __name__, "rltrainer.algorithms.a3c.a3c:A3C", "rltrainer.algorithms.a3c.a3c_config:A3CConfig"
)
_a2c = trainer_exports(
    __name__, "rltrainer.algorithms.a2c.a2c:A2C", "rltrainer.algorithms.a2c.a2c_config:A2CConfig"
)


def __getattr__(name: str) -> Any:
    if name == "A2C_DEFAULT_CONFIG":
        return _a2c("DEFAULT_CONFIG")
    return _a2c(name) if name.startswith("A2C") else _a3c(name)
