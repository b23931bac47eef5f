"""Trainer-era ES (``from rltrainer.agents.es import ESTrainer, DEFAULT_CONFIG``): re-exports
of ``rltrainer.algorithms.es`` (``ESTrainer`` is ``ES``; ``DEFAULT_CONFIG`` is
``ESConfig().to_dict()``)."""

from typing import TYPE_CHECKING, Any

from rltrainer.agents import trainer_exports

if TYPE_CHECKING:
    from rltrainer.algorithms.es.es import ES
    from rltrainer.algorithms.es.es import ES as ESTrainer  # noqa: N811 - the Trainer-era name
    from rltrainer.algorithms.es.es_config import ESConfig

    DEFAULT_CONFIG: dict[str, Any]

__all__ = ["DEFAULT_CONFIG", "ES", "ESConfig", "ESTrainer"]
__getattr__ = trainer_exports(
    __name__, "rltrainer.algorithms.es.es:ES", "rltrainer.algorithms.es.es_config:ESConfig"
)
