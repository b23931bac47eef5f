"""The flat-parameter Adam (``rltrainer.core.optim``) against ``torch.optim.Adam``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rltrainer.core.optim import Adam, FlatParameters


@pytest.mark.parametrize("fused", [False, True])
def test_adam_takes_torch_optim_adams_steps(fused):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
    reference = [p.detach().clone().requires_grad_(True) for p in net.parameters()]
    flat = FlatParameters(net)
    ours = Adam(flat, lr=1e-2, eps=1e-5, fused=fused)
    theirs = torch.optim.Adam(reference, lr=1e-2, eps=1e-5)
    for _ in range(20):
        grads = [torch.randn_like(p) for p in reference]
        for p, g in zip(reference, grads, strict=True):
            p.grad = g.clone()
        for p, g in zip(flat.params, grads, strict=True):
            p.grad.copy_(g)
        ours.step()
        theirs.step()
    for p, q in zip(flat.params, reference, strict=True):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6)
    assert ours.step_count == 20 and (ours._fused_step is not None) == fused
