"""RLlib's ``ray.rllib.policy.sample_batch`` path: ``SampleBatch`` (the columns of recorded and
postprocessed experience) and ``DEFAULT_POLICY_ID``."""

from rltrainer.policy_spec import DEFAULT_POLICY_ID
from rltrainer.utils.sample_batch import SampleBatch

__all__ = ["DEFAULT_POLICY_ID", "SampleBatch"]
