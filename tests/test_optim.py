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


def test_a_flat_modules_outputs_are_a_fresh_copys_bit_for_bit():
    # The learner's module (its parameters views of one buffer) and a module loaded from its
    # weights (each parameter its own allocation) must compute the same values: a checkpoint
    # restored elsewhere acts exactly as the learner did. Unaligned views took other BLAS paths
    # and differed in the last bit for some inputs.
    torch.manual_seed(0)
    widths = [4, 16, 16, 2, 16, 16, 1]  # odd sizes: most parameters would start unaligned
    module = nn.Sequential(*(nn.Linear(a, b) for a, b in zip(widths, widths[1:], strict=False)))
    flat = FlatParameters(module)
    copy = nn.Sequential(*(nn.Linear(a, b) for a, b in zip(widths, widths[1:], strict=False)))
    copy.load_state_dict(module.state_dict())
    assert all(p.data_ptr() % 64 == 0 for p in module.parameters())
    for _ in range(50):
        x = torch.randn(1, 4)
        assert torch.equal(module(x), copy(x))
    x = torch.randn(256, 4)
    assert torch.equal(module(x), copy(x))
    # the padding between parameters stays zero through an optimizer step
    optimizer = Adam(flat, lr=1e-2)
    module(x).sum().backward()
    optimizer.step()
    used = torch.zeros_like(flat.data, dtype=torch.bool)
    for view in flat.views:
        used[view] = True
    assert not flat.data[~used].any() and not flat.grad[~used].any()
