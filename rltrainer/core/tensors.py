"""Tensors from what sampling and Ray hand over."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def as_tensor(value: Any) -> torch.Tensor:
    """A tensor from a tensor or array; arrays are copied (Ray's object store hands out read-only ones)."""
    return value if isinstance(value, torch.Tensor) else torch.from_numpy(np.array(value))
