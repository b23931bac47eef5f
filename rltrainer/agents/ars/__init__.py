"""Trainer-era ARS (``from rltrainer.agents.ars import ARSTrainer, DEFAULT_CONFIG``): re-exports
of ``rltrainer.algorithms.es`` (``ARSTrainer`` is ``ARS``; ``DEFAULT_CONFIG`` is
``ARSConfig().to_dict()``)."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents import trainer_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.es.es import ARS
    from rltrainer.algorithms.es.es import ARS as ARSTrainer  # noqa: N811 - the Trainer-era name
    from rltrainer.algorithms.es.es_config import ARSConfig

    DEFAULT_CONFIG: dict[str, Any]

__all__ = ["DEFAULT_CONFIG", "ARS", "ARSConfig", "ARSTrainer"]
__getattr__ = trainer_exports(
    __name__, "rltrainer.algorithms.es.es:ARS", "rltrainer.algorithms.es.es_config:ARSConfig"
)
