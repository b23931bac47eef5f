"""Farama's Minari datasets (the offline-RL ecosystem's shared format): reading a local dataset
as ``offline_data(input_="minari:<dataset_id>")``, and exporting what rltrainer recorded to one.

Only local datasets: Minari finds them under ``MINARI_DATASETS_PATH`` (default
``~/.minari/datasets``); nothing is downloaded. Needs ``pip install 'rltrainer[minari]'``.

A Minari episode holds ``T + 1`` observations and ``T`` actions, rewards, terminations and
truncations; its rows become ``obs = observations[:-1]``, ``new_obs = observations[1:]`` (flattened
as the policy flattens them), with no behaviour log-probabilities (``action_logp`` 0: fine for
BC, MARWIL, CQL and the replay of DQN/SAC; off-policy estimation needs them and refuses).
Minari stores actions in the env's units, so Box actions are normalized for the policy unless
``actions_in_input_normalized``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rltrainer.errors import InputError
from rltrainer.offline.input_reader import InputReader
from rltrainer.offline.input_sources import resolve_input
from rltrainer.offline.minari_datasets import check_dataset, import_minari
from rltrainer.offline.rows import RowLayout, check_columns, load_file

EPISODES_PER_LOAD = 100  # episodes a reader takes from the dataset at once


class MinariReader(InputReader):
    """An ``InputReader`` over a local Minari dataset's episodes (``EPISODES_PER_LOAD`` at a time)."""

    def __init__(self, dataset_id: str, layout: RowLayout, policy: Any, **options: Any) -> None:
        minari = import_minari()
        self.dataset_id = dataset_id
        self.dataset = minari.load_dataset(dataset_id)
        self.policy = policy
        for name, ours, theirs in (
            ("observation", layout.observation_space, self.dataset.observation_space),
            ("action", layout.action_space, self.dataset.action_space),
        ):
            if ours != theirs:
                raise InputError(
                    f"Minari dataset {dataset_id!r} holds the {name} space {theirs}, but this config's "
                    f"is {ours}: train on the dataset's env (or give the config its spaces)"
                )
        ids = list(self.dataset.episode_indices)
        chunks = [ids[i : i + EPISODES_PER_LOAD] for i in range(0, len(ids), EPISODES_PER_LOAD)]
        self._chunks = {f"minari:{dataset_id}#{i}": chunk for i, chunk in enumerate(chunks)}
        super().__init__(tuple(self._chunks), layout, **options)

    def load(self, uri: str) -> dict[str, np.ndarray]:
        episodes = list(self.dataset.iterate_episodes(self._chunks[uri]))
        columns: dict[str, list[np.ndarray]] = {
            name: []
            for name in ("obs", "new_obs", "actions", "rewards", "terminateds", "truncateds", "eps_id")
        }
        transform = self.policy.preprocessor.transform
        for episode in episodes:
            flat = transform(episode.observations)  # [T + 1, size]
            steps = len(episode.rewards)
            columns["obs"].append(flat[:-1])
            columns["new_obs"].append(flat[1:])
            actions = np.asarray(episode.actions)
            columns["actions"].append(actions if actions.ndim == 1 else actions.reshape(steps, -1))
            columns["rewards"].append(np.asarray(episode.rewards, dtype=np.float32))
            columns["terminateds"].append(np.asarray(episode.terminations, dtype=bool))
            columns["truncateds"].append(np.asarray(episode.truncations, dtype=bool))
            columns["eps_id"].append(np.full(steps, int(episode.id), dtype=np.int64))
        if not episodes:
            return {}
        merged = {name: np.concatenate(values) for name, values in columns.items()}
        return check_columns(merged, f"{uri} (Minari)", self.layout)


def to_minari(
    input_: str | list[str],
    dataset_id: str,
    env: Any,
    *,
    actions_normalized: bool = True,
    algorithm_name: str | None = None,
    author: str | None = None,
    description: str | None = None,
) -> Any:
    """Write the complete episodes of recorded rltrainer files (``input_``: a path, glob,
    directory or list, as ``offline_data(input_=...)`` takes) as the local Minari dataset
    ``dataset_id`` (Arrow storage) for ``env`` (a gymnasium id or env). Observations are
    reshaped to the env's Box observation space (they must have been recorded without an
    observation filter); Box actions are rescaled from the policy's [-1, 1] to the env's bounds
    when ``actions_normalized`` (what rltrainer's writer records). Returns the Minari dataset."""
    import gymnasium as gym
    from gymnasium import spaces
    from minari.data_collector import EpisodeBuffer

    from rltrainer.offline.estimators import EpisodeSource

    minari = import_minari()
    made = isinstance(env, str)
    env_object = gym.make(env) if made else env
    try:
        obs_space, action_space = env_object.observation_space, env_object.action_space
    finally:
        if made:
            env_object.close()
    if not isinstance(obs_space, spaces.Box):
        raise InputError(f"to_minari: exports Box observation spaces; {env!r} has {obs_space}")
    files = tuple(f for source in resolve_input(input_, {}) for f in source.files)

    def load(uri: str) -> dict[str, np.ndarray]:
        columns = load_file(uri, None)
        if "eps_id" not in columns:
            raise InputError(f"offline input {uri}: to_minari needs the 'eps_id' column (episodes)")
        return columns

    episodes = EpisodeSource(files, load).read_all()
    buffers = []
    for index, episode in enumerate(episodes):
        c = episode.columns
        observations = (
            np.concatenate([c["obs"], c["new_obs"][-1:]])
            .reshape(-1, *obs_space.shape)
            .astype(obs_space.dtype)
        )
        actions = np.asarray(c["actions"])
        if isinstance(action_space, spaces.Box):
            actions = actions.reshape(len(actions), *action_space.shape).astype(np.float32)
            if actions_normalized:
                low, high = action_space.low, action_space.high
                actions = low + (np.clip(actions, -1, 1) + 1.0) * 0.5 * (high - low)
        buffers.append(
            EpisodeBuffer(
                id=index,
                observations=observations,
                actions=actions,
                rewards=np.asarray(c["rewards"], dtype=np.float64),
                terminations=np.asarray(c["terminateds"], dtype=bool),
                truncations=np.asarray(c["truncateds"], dtype=bool),
                infos={},
            )
        )
    if not buffers:
        raise InputError(f"to_minari: {input_!r} holds no complete episode")
    return minari.create_dataset_from_buffers(
        dataset_id,
        buffers,
        env=env if made else None,
        observation_space=None if made else obs_space,
        action_space=None if made else action_space,
        algorithm_name=algorithm_name,
        author=author,
        description=description,
        data_format="arrow",
    )


__all__ = ["MinariReader", "check_dataset", "to_minari"]
