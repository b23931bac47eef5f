"""Policies (``from rltrainer.policy import Policy, PolicySpec``), also at RLlib's paths:
``rltrainer.policy.policy`` (``Policy``, ``PolicySpec``) and ``rltrainer.policy.sample_batch``
(``SampleBatch``, ``DEFAULT_POLICY_ID``).

Imported on first use: ``Policy`` imports torch, ``PolicySpec`` does not.
"""

from typing import TYPE_CHECKING

from rltrainer.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from rltrainer.policy.policy import Policy, pack_state
    from rltrainer.policy_spec import PolicySpec

__all__ = ["Policy", "PolicySpec", "pack_state"]
__getattr__ = lazy_exports(
    __name__,
    {
        "Policy": "rltrainer.policy.policy",
        "pack_state": "rltrainer.policy.policy",
        "PolicySpec": "rltrainer.policy_spec",
    },
)
