"""Episode objects for callbacks, and the tracker that keeps one per env of a runner.

Only runners whose callbacks override an episode hook (``EPISODE_HOOKS``) make a tracker;
the others never touch this module. Per env step the tracker does two array operations over
all envs and one ``dones.any()``; Python work per env happens where an episode starts or
ends, and per env and step only when ``on_episode_step`` is overridden.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rltrainer.algorithms.callbacks import DefaultCallbacks, call_hook, overrides
from rltrainer.env.episode_names import CurrentEpisodeNames
from rltrainer.utils.sample_batch import SampleBatch, written_columns

AGENT_ID = "agent0"  # RLlib's agent id of single-agent envs
POLICY_ID = "default_policy"


class Episode(CurrentEpisodeNames):
    """One env's episode as callbacks see it (RLlib's ``Episode``; ``get_return()``,
    ``get_length()`` and ``custom_data`` as RLlib's current episodes have them).

    ``user_data`` is yours to fill between hooks; ``custom_metrics`` (name -> number) are
    averaged into results as ``custom_metrics/<name>_mean|min|max``; ``hist_data`` (name ->
    list of numbers) is reported under ``hist_stats/<name>``. ``length`` and
    ``total_reward`` (raw env rewards) are up to date in every hook.
    """

    def __init__(self, episode_id: int, env_index: int) -> None:
        self.episode_id = episode_id
        self.env_index = env_index
        self.length = 0
        self.total_reward = 0.0
        self.user_data: dict[str, Any] = {}
        self.custom_metrics: dict[str, float] = {}
        self.hist_data: dict[str, list[float]] = {}
        self.media: dict[str, Any] = {}
        self.last_observation: Any = None
        self.last_action: Any = None
        self.last_reward: float | None = None
        self.last_info: dict[str, Any] = {}
        self.terminated = False
        self.truncated = False

    @property
    def env_id(self) -> int:
        return self.env_index

    # RLlib's per-agent accessors (single agent: the agent id is ignored)
    def last_observation_for(self, agent_id: Any = AGENT_ID) -> Any:  # noqa: ARG002
        return self.last_observation

    last_raw_obs_for = last_observation_for

    def last_action_for(self, agent_id: Any = AGENT_ID) -> Any:  # noqa: ARG002
        return self.last_action

    def last_reward_for(self, agent_id: Any = AGENT_ID) -> float | None:  # noqa: ARG002
        return self.last_reward

    prev_reward_for = last_reward_for

    def last_info_for(self, agent_id: Any = AGENT_ID) -> dict[str, Any]:  # noqa: ARG002
        return self.last_info

    def __repr__(self) -> str:
        return f"Episode(id={self.episode_id}, env_index={self.env_index}, length={self.length})"


def index_obs(batched: Any, i: int) -> Any:
    """Env ``i``'s entry of a vector env's batched observation (nested dicts and tuples too)."""
    if isinstance(batched, dict):
        return {key: index_obs(value, i) for key, value in batched.items()}
    if isinstance(batched, tuple):
        return tuple(index_obs(value, i) for value in batched)
    return batched[i]


def index_info(infos: dict[str, Any], i: int) -> dict[str, Any]:
    """Env ``i``'s info dict from gymnasium's vector infos (values plus ``_key`` masks)."""
    out = {}
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get("_" + key)
        if mask is not None and not mask[i]:
            continue
        out[key] = index_info(value, i) if isinstance(value, dict) else value[i]
    return out


class EpisodeTracker:
    """Keeps an ``Episode`` per env of one env runner and calls the episode hooks."""

    def __init__(self, runner: Any, callbacks: DefaultCallbacks) -> None:
        self.runner = runner
        self.callbacks = callbacks
        self.per_step = overrides(callbacks, "on_episode_step")
        self.postprocesses = overrides(callbacks, "on_postprocess_trajectory")
        self.where = f" in env runner {runner.worker_index}"
        n = runner.num_envs
        self._returns = np.zeros(n, dtype=np.float64)
        self._lengths = np.zeros(n, dtype=np.int64)
        self._count = 0
        self.current: list[Episode] = []
        self.completed: list[Episode] = []  # ended episodes not yet paired with their stats
        # Per env: the episodes with steps in the current fragment, oldest first (for postprocessing).
        self.fragment: list[list[Episode]] = []

    # --- what the env runner calls ---------------------------------------------------------
    def before_reset(self) -> None:
        """All envs are about to be reset: unfinished episodes are dropped, new ones created."""
        n = self.runner.num_envs
        self._returns = np.zeros(n, dtype=np.float64)
        self._lengths = np.zeros(n, dtype=np.int64)
        self.completed = []  # (a fragment that failed midway reports none of its episodes)
        self.current = [self._create(i) for i in range(n)]
        self.fragment = [[episode] for episode in self.current]

    def after_reset(self, obs: Any, infos: dict[str, Any]) -> None:
        for i, episode in enumerate(self.current):
            self._start(episode, obs, infos, i)

    def start_fragment(self) -> None:
        self.fragment = [[episode] for episode in self.current]

    def after_step(
        self,
        next_obs: Any,
        env_actions: np.ndarray,
        rewards: np.ndarray,
        dones: np.ndarray,
        terminateds: np.ndarray,
        valid: np.ndarray,
        resetting: np.ndarray,
        infos: dict[str, Any],
    ) -> None:
        """Account for one step of every env (rewards are the env's raw ones)."""
        self._returns += np.where(valid, rewards, 0.0)
        self._lengths += valid
        if resetting.any():  # next-step autoreset: these envs just began their new episode
            for i in np.flatnonzero(resetting):
                self._start(self.current[i], next_obs, infos, i)
        if self.per_step:
            for i in np.flatnonzero(valid):
                episode = self._observe(i, next_obs, env_actions, rewards, infos)
                self._call("on_episode_step", episode, i)
        if not dones.any():
            return
        for i in np.flatnonzero(dones):
            if valid[i]:
                episode = self._observe(i, next_obs, env_actions, rewards, infos)
                episode.terminated, episode.truncated = bool(terminateds[i]), not terminateds[i]
                self._call("on_episode_end", episode, i)
                self.completed.append(episode)
            elif self.fragment[i] and self.fragment[i][-1] is self.current[i]:
                self.fragment[i].pop()  # a crashed or frozen env's episode: dropped unreported
            self._returns[i], self._lengths[i] = 0.0, 0
            self.current[i] = self._create(i)
            self.fragment[i].append(self.current[i])

    def pop_completed(self) -> list[Episode]:
        completed, self.completed = self.completed, []
        return completed

    def postprocess(self, columns: dict[str, np.ndarray], last_obs: np.ndarray) -> None:
        """``on_postprocess_trajectory`` for each episode's valid steps in a ``[T, N]`` fragment.

        ``columns`` (obs, actions, rewards, ...) are rewritten in place with what the hook wrote.
        """
        valid = columns["valid"]
        dones = (columns["terminateds"] | columns["truncateds"]) & valid
        next_obs = np.concatenate([columns["obs"][1:], last_obs[None]])
        policies = {POLICY_ID: self.runner.policy}
        writable = ("obs", "actions", "action_logp", "rewards", "terminateds", "truncateds")
        for i in range(valid.shape[1]):
            steps = np.flatnonzero(valid[:, i])
            pieces = np.split(steps, np.searchsorted(steps, np.flatnonzero(dones[:, i]), side="right"))
            for episode, t in zip(self.fragment[i], pieces, strict=False):
                if not len(t):
                    continue
                batch = SampleBatch({name: columns[name][t, i] for name in writable})
                batch[SampleBatch.NEXT_OBS] = next_obs[t, i]
                batch[SampleBatch.EPS_ID] = np.full(len(t), episode.episode_id, dtype=np.int64)
                original = batch.copy()
                call_hook(
                    self.callbacks,
                    "on_postprocess_trajectory",
                    self.where,
                    worker=self.runner,
                    episode=episode,
                    agent_id=AGENT_ID,
                    policy_id=POLICY_ID,
                    policies=policies,
                    postprocessed_batch=batch,
                    original_batches={AGENT_ID: (POLICY_ID, self.runner.policy, original)},
                )
                shapes = {name: original[name].shape for name in writable}
                for name, value in written_columns(batch, shapes, "on_postprocess_trajectory").items():
                    columns[name][t, i] = value

    # --- internals ---------------------------------------------------------------------------
    def _create(self, i: int) -> Episode:
        self._count += 1
        episode = Episode((self.runner.worker_index << 40) + self._count, i)
        self._call("on_episode_created", episode, i)
        return episode

    def _start(self, episode: Episode, obs: Any, infos: dict[str, Any], i: int) -> None:
        episode.last_observation = index_obs(obs, i)
        episode.last_info = index_info(infos, i)
        self._call("on_episode_start", episode, i)

    def _observe(
        self, i: int, next_obs: Any, env_actions: np.ndarray, rewards: np.ndarray, infos: dict
    ) -> Episode:
        episode = self.current[i]
        episode.length = int(self._lengths[i])
        episode.total_reward = float(self._returns[i])
        episode.last_observation = index_obs(next_obs, i)
        episode.last_action = index_obs(env_actions, i)
        episode.last_reward = float(rewards[i])
        episode.last_info = index_info(infos, i)
        return episode

    def _call(self, hook: str, episode: Episode, i: int) -> None:
        call_hook(
            self.callbacks,
            hook,
            self.where,
            worker=self.runner,
            env_runner=self.runner,
            base_env=self.runner.env,
            env=self.runner.env,
            policies={POLICY_ID: self.runner.policy},
            episode=episode,
            env_index=i,
        )
