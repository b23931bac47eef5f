"""RLlib's framework helpers (``from rltrainer.utils.framework import try_import_torch``), for
custom models written as RLlib's examples write them: ``torch, nn = try_import_torch()``."""

from __future__ import annotations

from types import ModuleType


def try_import_torch(error: bool = False) -> tuple[ModuleType, ModuleType]:  # noqa: ARG001 - RLlib's
    """``(torch, torch.nn)``: rltrainer is built on torch, so both are always there."""
    import torch
    from torch import nn

    return torch, nn


def try_import_tf(error: bool = False) -> tuple[None, None, None]:
    """``(None, None, None)``, as RLlib answers where TensorFlow is not installed: rltrainer runs
    torch only. ``error=True`` raises ``ImportError`` saying so."""
    if error:
        raise ImportError("rltrainer runs torch only: write the model with try_import_torch()")
    return None, None, None


__all__ = ["try_import_tf", "try_import_torch"]
