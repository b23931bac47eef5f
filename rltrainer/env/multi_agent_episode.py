"""A multi-agent env's episode: what callbacks and mapping functions see, and each agent's steps.

``MultiAgentEpisode`` is RLlib's episode object of multi-agent sampling (``episode_id``,
``length``, ``total_reward``, ``agent_rewards``, ``custom_metrics``, ``user_data``, the
per-agent accessors). ``AgentTrack`` holds one agent's transitions of one episode until a
fragment hands them to the learners (``rltrainer.env.multi_agent_env_runner``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rltrainer.env.episode_names import CurrentEpisodeNames


class MultiAgentEpisode(CurrentEpisodeNames):
    """One episode of one multi-agent env copy, as callbacks and ``policy_mapping_fn`` see it.

    ``agent_rewards`` maps ``(agent_id, policy_id)`` to that agent's return so far;
    ``user_data``, ``custom_metrics`` and ``hist_data`` work as in single-agent episodes.
    """

    def __init__(self, episode_id: int, env_index: int, mapping_fn: Any, worker: Any) -> None:
        self.episode_id = episode_id
        self.env_index = env_index
        self.length = 0
        """Env steps so far."""
        self.total_reward = 0.0
        """The sum of every agent's rewards so far (the env's return)."""
        self.agent_rewards: dict[tuple[Any, str], float] = {}
        self.user_data: dict[str, Any] = {}
        self.custom_metrics: dict[str, float] = {}
        self.hist_data: dict[str, list[float]] = {}
        self.media: dict[str, Any] = {}
        self._mapping_fn = mapping_fn
        self._worker = worker
        self._policy_of: dict[Any, str] = {}
        self._last_obs: dict[Any, Any] = {}
        self._last_info: dict[Any, Any] = {}
        self._last_action: dict[Any, Any] = {}
        self._last_reward: dict[Any, float] = {}

    @property
    def env_id(self) -> int:
        return self.env_index

    def policy_for(self, agent_id: Any) -> str:
        """The policy ``agent_id`` acts with in this episode (``policy_mapping_fn``, asked once)."""
        pid = self._policy_of.get(agent_id)
        if pid is None:
            pid = self._mapping_fn(agent_id, self, self._worker)
            self._policy_of[agent_id] = pid
        return pid

    def get_agents(self) -> list[Any]:
        """The agents seen in this episode so far."""
        return list(self._policy_of)

    def last_observation_for(self, agent_id: Any) -> Any:
        return self._last_obs.get(agent_id)

    last_raw_obs_for = last_observation_for

    def last_info_for(self, agent_id: Any) -> Any:
        return self._last_info.get(agent_id)

    def last_action_for(self, agent_id: Any) -> Any:
        return self._last_action.get(agent_id)

    def last_reward_for(self, agent_id: Any) -> float | None:
        return self._last_reward.get(agent_id)

    def add_rewards(self, rewards: dict[Any, float]) -> None:
        for agent_id, reward in rewards.items():
            reward = float(reward)
            self.total_reward += reward
            self._last_reward[agent_id] = reward
            key = (agent_id, self.policy_for(agent_id))
            self.agent_rewards[key] = self.agent_rewards.get(key, 0.0) + reward


class AgentTrack:
    """One agent's rows, actions and rewards in one episode, not yet handed to a learner.

    ``rows[j]`` is the (flattened, filtered) observation the agent acted on with ``actions[j]``;
    transition j is complete once ``rows[j + 1]`` (its next observation, or its final one)
    arrived, and its reward is what the env paid the agent in between: turn-based envs pay an
    agent after the others moved.
    """

    __slots__ = ("policy_id", "rows", "actions", "logp", "rewards", "pending_reward", "done", "terminated")

    def __init__(self, policy_id: str) -> None:
        self.policy_id = policy_id
        self.rows: list[np.ndarray] = []
        self.actions: list[np.ndarray] = []
        self.logp: list[float] = []
        self.rewards: list[float] = []
        self.pending_reward = 0.0
        self.done = False
        self.terminated = False

    def observe(self, row: np.ndarray) -> None:
        """The agent's next observation: it closes the open transition (if any)."""
        if self.actions and len(self.actions) == len(self.rows):  # the last action waited for this
            self.rewards.append(self.pending_reward)
            self.pending_reward = 0.0
        self.rows.append(row)

    def act(self, action: np.ndarray, logp: float) -> None:
        self.actions.append(action)
        self.logp.append(logp)

    def finish(self, final_row: np.ndarray | None, terminated: bool) -> None:
        """The agent's episode ended (its final observation, or ``None``: the env gave none)."""
        if len(self.actions) == len(self.rows) and self.rows:  # an action waits for its outcome
            self.observe(self.rows[-1] if final_row is None else final_row)
        self.done, self.terminated = True, terminated

    def num_complete(self) -> int:
        return min(len(self.actions), len(self.rows) - 1)

    def take_piece(self) -> dict[str, np.ndarray] | None:
        """The complete transitions as one piece's columns (``rollout_from_pieces``' form), which
        are then dropped from the track; ``None`` when there are none."""
        n = self.num_complete()
        if n <= 0:
            return None
        ends_episode = self.done and n == len(self.actions)
        terminateds = np.zeros(n, dtype=bool)
        truncateds = np.zeros(n, dtype=bool)
        if ends_episode and self.terminated:
            terminateds[-1] = True
        else:
            truncateds[-1] = True  # cut here (or truncated): bootstraps from new_obs
        piece = {
            "obs": np.array(self.rows[:n]),  # flat rows of one shape: np.stack, faster
            "actions": np.stack(self.actions[:n]),
            "action_logp": np.asarray(self.logp[:n], dtype=np.float32),
            "rewards": np.asarray(self.rewards[:n], dtype=np.float32),
            "terminateds": terminateds,
            "truncateds": truncateds,
            "new_obs": np.array(self.rows[1 : n + 1]),
        }
        del self.rows[:n], self.actions[:n], self.logp[:n], self.rewards[:n]
        return piece


__all__ = ["AgentTrack", "MultiAgentEpisode"]
