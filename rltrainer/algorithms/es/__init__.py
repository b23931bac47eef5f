"""ES and ARS (``from rltrainer.algorithms.es import ES, ESConfig, ARS, ARSConfig``).

Imported on first use: the algorithms import torch, the configs (in ``es_config``) do not.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.es.es import ARS, ES
    from rltrainer.algorithms.es.es_config import ARSConfig, ESConfig

__all__ = ["ARS", "ARSConfig", "ES", "ESConfig"]
__getattr__ = lazy_exports(
    __name__,
    {
        "ES": "rltrainer.algorithms.es.es",
        "ARS": "rltrainer.algorithms.es.es",
        "ESConfig": "rltrainer.algorithms.es.es_config",
        "ARSConfig": "rltrainer.algorithms.es.es_config",
    },
)
