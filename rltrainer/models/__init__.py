"""Models: the custom-model registry and base class (``from rltrainer.models import ModelCatalog``).

Imported on first use: ``ModelCatalog`` imports no torch, ``TorchModelV2`` does.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.models.catalog import ModelCatalog
    from rltrainer.models.torch.torch_modelv2 import TorchModelV2

__all__ = ["ModelCatalog", "TorchModelV2"]
__getattr__ = lazy_exports(
    __name__,
    {"ModelCatalog": "rltrainer.models.catalog", "TorchModelV2": "rltrainer.models.torch.torch_modelv2"},
)
