"""Trainer-era PG (``from rltrainer.agents.pg import PGTrainer, DEFAULT_CONFIG``): re-exports of
``rltrainer.algorithms.pg`` (``PGTrainer`` is ``PG``; ``DEFAULT_CONFIG`` is ``PGConfig().to_dict()``),
as in ``ray.rllib.agents.pg``."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents import trainer_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.pg.pg import PG
    from rltrainer.algorithms.pg.pg import PG as PGTrainer  # noqa: N811 - the Trainer-era name
    from rltrainer.algorithms.pg.pg_config import PGConfig

    DEFAULT_CONFIG: dict[str, Any]

__all__ = ["DEFAULT_CONFIG", "PG", "PGConfig", "PGTrainer"]
__getattr__ = trainer_exports(
    __name__, "rltrainer.algorithms.pg.pg:PG", "rltrainer.algorithms.pg.pg_config:PGConfig"
)
