"""Which distribution class acts in an action space: the one map from every supported space to
its class, above both ``distributions`` (the single spaces') and ``composite_actions`` (Dict and
Tuple spaces, built from those)."""

from __future__ import annotations

from gymnasium import spaces

from rltrainer.core.composite_actions import multi_action
from rltrainer.core.distributions import Categorical, DiagGaussian, multi_categorical, nvec_of


def dist_class_for(space: spaces.Space) -> type:
    """The distribution class for an action space."""
    if isinstance(space, spaces.Discrete):
        return Categorical
    if isinstance(space, spaces.Box):
        return DiagGaussian
    if isinstance(space, (spaces.MultiDiscrete, spaces.MultiBinary)):
        return multi_categorical(tuple(int(n) for n in nvec_of(space)))
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        return multi_action(space)
    raise ValueError(
        f"unsupported action space {space}: use Discrete, MultiDiscrete, MultiBinary, Box, "
        "or Dict/Tuple of those"
    )
