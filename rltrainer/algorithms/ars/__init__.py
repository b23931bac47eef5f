"""ARS and ARSConfig where RLlib 2.0-2.7's ``ray.rllib.algorithms.ars`` has them
(``from rltrainer.algorithms.ars import ARS, ARSConfig``): the classes of
``rltrainer.algorithms.es``, imported on first use."""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.es.es import ARS
    from rltrainer.algorithms.es.es_config import ARSConfig

__all__ = ["ARS", "ARSConfig"]
__getattr__ = lazy_exports(
    __name__, {"ARS": "rltrainer.algorithms.es.es", "ARSConfig": "rltrainer.algorithms.es.es_config"}
)
