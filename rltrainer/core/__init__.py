"""Building blocks shared by all algorithms: models, distributions, filters, learners.

The ids RLlib's ``ray.rllib.core`` names, for a single-agent algorithm's one module and agent."""

DEFAULT_MODULE_ID = "default_policy"
DEFAULT_POLICY_ID = DEFAULT_MODULE_ID
DEFAULT_AGENT_ID = "default_agent"
