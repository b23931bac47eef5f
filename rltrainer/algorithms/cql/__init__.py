"""CQL (``from rltrainer.algorithms.cql import CQL, CQLConfig``).

Imported on first use: ``CQL`` imports torch, ``CQLConfig`` (in ``cql_config``) does not.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.cql.cql import CQL
    from rltrainer.algorithms.cql.cql_config import CQLConfig

__all__ = ["CQL", "CQLConfig"]
__getattr__ = lazy_exports(
    __name__, {"CQL": "rltrainer.algorithms.cql.cql", "CQLConfig": "rltrainer.algorithms.cql.cql_config"}
)
