"""RLlib's type aliases (``from rltrainer.utils.typing import MultiAgentDict, PolicyID``), for
code that annotates with them; plain aliases, nothing is checked at run time."""

from __future__ import annotations

from typing import Any

import numpy as np

AgentID = Any
"""An agent's id in a multi-agent env (a string or an int)."""
PolicyID = str
"""A policy's id (``"default_policy"`` for a single-agent algorithm)."""
EnvID = Any
"""A sub-env's index in a vector env."""
MultiAgentDict = dict[AgentID, Any]
"""``{agent id: value}``: a multi-agent env's observations, rewards, dones or infos."""
ModelConfigDict = dict[str, Any]
"""The ``model`` settings as a dict (``fcnet_hiddens``, ``custom_model``, ...)."""
AlgorithmConfigDict = dict[str, Any]
"""An algorithm's config as a dict (``AlgorithmConfig.to_dict()``)."""
PartialAlgorithmConfigDict = dict[str, Any]
"""Some of an algorithm's settings as a dict."""
EnvConfigDict = dict[str, Any]
"""``env_config``."""
ResultDict = dict[str, Any]
"""What ``Algorithm.train()`` returns."""
TensorType = Any
"""A torch tensor or a numpy array."""
TensorStructType = Any
"""A tensor, or a (nested) dict, list or tuple of them."""
EnvType = Any
"""A gymnasium env, a ``MultiAgentEnv`` or a vector env."""
EnvCreator = Any
"""A function of ``env_config`` that returns an env (what ``register_env`` takes)."""
SampleBatchType = Any
"""A ``SampleBatch`` of experience."""
ObsType = np.ndarray
ActionType = Any

__all__ = [
    "ActionType",
    "AgentID",
    "AlgorithmConfigDict",
    "EnvConfigDict",
    "EnvCreator",
    "EnvID",
    "EnvType",
    "ModelConfigDict",
    "MultiAgentDict",
    "ObsType",
    "PartialAlgorithmConfigDict",
    "PolicyID",
    "ResultDict",
    "SampleBatchType",
    "TensorStructType",
    "TensorType",
]
