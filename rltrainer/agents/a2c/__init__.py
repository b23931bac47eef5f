"""Trainer-era A2C (``from rltrainer.agents.a2c import A2CTrainer, DEFAULT_CONFIG``): re-exports of
``rltrainer.algorithms.a2c`` (``A2CTrainer`` is ``A2C``; ``DEFAULT_CONFIG`` and its RLlib 1.x name
``A2C_DEFAULT_CONFIG`` are ``A2CConfig().to_dict()``). RLlib 1.x kept A2C in ``ray.rllib.agents.a3c``
(``A2CTrainer``, ``A2C_DEFAULT_CONFIG``); rltrainer has no A3C."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents import trainer_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.a2c.a2c import A2C
    from rltrainer.algorithms.a2c.a2c import A2C as A2CTrainer  # noqa: N811 - the Trainer-era name
    from rltrainer.algorithms.a2c.a2c_config import A2CConfig

    DEFAULT_CONFIG: dict[str, Any]
    A2C_DEFAULT_CONFIG: dict[str, Any]

__all__ = ["A2C", "A2C_DEFAULT_CONFIG", "DEFAULT_CONFIG", "A2CConfig", "A2CTrainer"]
_a2c = trainer_exports(
    __name__, "rltrainer.algorithms.a2c.a2c:A2C", "rltrainer.algorithms.a2c.a2c_config:A2CConfig"
)


def __getattr__(name: str) -> Any:
    return _a2c("DEFAULT_CONFIG" if name == "A2C_DEFAULT_CONFIG" else name)
