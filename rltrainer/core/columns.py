"""RLlib's ``ray.rllib.core.columns.Columns``: the names of an RLModule's inputs and outputs."""

from __future__ import annotations


class Columns:
    """Keys of the batches ``RLModule.forward_*`` take and return (RLlib's spelling)."""

    OBS = "obs"
    ACTIONS = "actions"
    REWARDS = "rewards"
    TERMINATEDS = "terminateds"
    TRUNCATEDS = "truncateds"
    ACTION_DIST_INPUTS = "action_dist_inputs"
    ACTION_LOGP = "action_logp"
    VF_PREDS = "vf_preds"
    STATE_IN = "state_in"
    STATE_OUT = "state_out"
