"""Trainer-era CQL (``from rltrainer.agents.cql import CQLTrainer, DEFAULT_CONFIG``): re-exports of
``rltrainer.algorithms.cql`` (``CQLTrainer`` is ``CQL``; ``DEFAULT_CONFIG`` is ``CQLConfig().to_dict()``)."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents import trainer_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.cql.cql import CQL
    from rltrainer.algorithms.cql.cql import CQL as CQLTrainer  # noqa: N811 - the Trainer-era name
    from rltrainer.algorithms.cql.cql_config import CQLConfig

    DEFAULT_CONFIG: dict[str, Any]

__all__ = ["CQL", "DEFAULT_CONFIG", "CQLConfig", "CQLTrainer"]
__getattr__ = trainer_exports(
    __name__, "rltrainer.algorithms.cql.cql:CQL", "rltrainer.algorithms.cql.cql_config:CQLConfig"
)
