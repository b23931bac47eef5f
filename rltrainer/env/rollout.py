"""What sampling produces, shared by the env runners, the offline readers, the policy server and
the learners: ``Rollout`` (a fragment of steps) and ``EpisodeStats`` (one finished episode)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:  # a recurrent policy's columns; importing them would import torch
    from rltrainer.core.recurrent import RecurrentColumns


class Rollout(NamedTuple):
    """``T`` steps of ``N`` envs; every array is ``[T, N, ...]`` except ``last_obs``.

    The observation after step t is ``obs[t + 1]`` (``last_obs`` after the last step);
    after a step that ended an episode it is the episode's final observation.
    """

    obs: np.ndarray  # filtered, flattened observations
    actions: np.ndarray  # the distribution's samples (before rescaling to the env's bounds)
    action_logp: np.ndarray
    rewards: np.ndarray  # after reward clipping
    terminateds: np.ndarray
    truncateds: np.ndarray
    valid: np.ndarray  # False for next-step-autoreset steps and frozen envs
    last_obs: np.ndarray  # [N, obs_size] filtered observations after the last step
    recurrent: RecurrentColumns | None = None  # an LSTM policy's states, values and inputs

    @property
    def num_steps(self) -> int:
        """Env steps that count (the valid ones)."""
        return int(self.valid.sum())


class EpisodeStats(NamedTuple):
    episode_return: float
    episode_len: int
    custom_metrics: dict[str, float] | None = None  # set by callbacks (Episode.custom_metrics)
    hist_data: dict[str, list[float]] | None = None
    policy_returns: tuple[tuple[str, float], ...] | None = None  # multi-agent: (policy id, agent's return)
