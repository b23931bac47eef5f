"""Replay buffers for off-policy algorithms: fixed-capacity numpy storage, vectorized sampling.

``transitions_from_rollout`` turns an env runner's ``[T, N]`` rollout into flat n-step
transitions; ``ReplayBuffer`` stores them in preallocated circular arrays and samples
uniformly; ``PrioritizedReplayBuffer`` samples proportionally to priorities kept in a
sum-tree (Schaul et al. 2016, "Prioritized Experience Replay"). The TD target for a sample
is ``rewards + discounts * (1 - terminateds) * V(next_obs)``.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import numpy as np

from rltrainer.utils.postprocessing import compute_n_step_returns


class Transitions(NamedTuple):
    """A flat batch of ``B`` n-step transitions, as stored in a replay buffer."""

    obs: np.ndarray  # [B, *obs_shape] the observation the action was taken in
    actions: np.ndarray  # [B, *action_shape]
    rewards: np.ndarray  # [B] float32, sum_j gamma**j r_{t+j} over the k steps used
    next_obs: np.ndarray  # [B, *obs_shape] the observation after those k steps
    terminateds: np.ndarray  # [B] float32, 1.0 where the k-th step ended the episode terminally
    discounts: np.ndarray  # [B] float32, gamma**k


class ReplayBatch(NamedTuple):
    """A sampled batch: the target is ``rewards + discounts * (1 - terminateds) * V(next_obs)``."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray  # float32
    next_obs: np.ndarray
    terminateds: np.ndarray  # float32
    discounts: np.ndarray  # float32, gamma**k for the k-step return used
    weights: np.ndarray  # float32 importance weights (ones for uniform sampling)
    indices: np.ndarray  # int64 buffer slots, for ``update_priorities``


class RolloutLike(Protocol):
    """What ``transitions_from_rollout`` reads (``rltrainer.env.env_runner.Rollout`` has it)."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminateds: np.ndarray
    truncateds: np.ndarray
    valid: np.ndarray
    last_obs: np.ndarray


def transitions_from_rollout(rollout: RolloutLike, n_step: int, gamma: float) -> Transitions:
    """Every valid step of a ``[T, N]`` rollout as one n-step transition (time-major order).

    A window stops at an episode end: after a termination nothing is bootstrapped
    (``terminateds=1``); after a truncation it bootstraps from the truncated episode's final
    observation. A window that would run past the end of the fragment is cut to the
    ``k < n_step`` steps available, with ``discounts = gamma**k`` and ``next_obs`` the
    observation after the last available step (``last_obs`` for the final step). So nothing
    is carried between fragments and no transition is dropped. Invalid (reset) steps neither
    become transitions nor enter a window.
    """
    valid = np.asarray(rollout.valid, dtype=bool)
    if n_step == 1 and len(valid) == 1 and valid.all():  # a one-step fragment: its row per env as is
        return Transitions(
            obs=rollout.obs[0],
            actions=rollout.actions[0],
            rewards=rollout.rewards[0].astype(np.float32),
            next_obs=rollout.last_obs,
            terminateds=rollout.terminateds[0].astype(np.float32),
            discounts=np.full(valid.shape[1], gamma, dtype=np.float32),
        )
    all_obs = np.concatenate([rollout.obs, rollout.last_obs[None]], axis=0)  # all_obs[t + 1]: after step t
    t_idx, env_idx = np.nonzero(valid)
    if n_step == 1:  # each window is its own step: the same transitions without the window walk
        return Transitions(
            obs=rollout.obs[t_idx, env_idx],
            actions=rollout.actions[t_idx, env_idx],
            rewards=rollout.rewards[t_idx, env_idx].astype(np.float32),
            next_obs=all_obs[t_idx + 1, env_idx],
            terminateds=rollout.terminateds[t_idx, env_idx].astype(np.float32),
            discounts=np.full(len(t_idx), gamma, dtype=np.float32),
        )
    returns, steps = compute_n_step_returns(
        rollout.rewards, rollout.terminateds, rollout.truncateds, rollout.valid, n_step, gamma
    )
    k = steps[t_idx, env_idx]
    terminateds = np.asarray(rollout.terminateds, dtype=bool)[t_idx + k - 1, env_idx]
    return Transitions(
        obs=rollout.obs[t_idx, env_idx],
        actions=rollout.actions[t_idx, env_idx],
        rewards=returns[t_idx, env_idx],
        next_obs=all_obs[t_idx + k, env_idx],
        terminateds=terminateds.astype(np.float32),
        discounts=(gamma ** k.astype(np.float64)).astype(np.float32),
    )


class ReplayBuffer:
    """Uniform replay over ``capacity`` preallocated slots; the oldest are overwritten first.

    ``obs`` and ``next_obs`` are stored separately (simple, at twice the observation memory).
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype: Any = np.float32,
        action_shape: tuple[int, ...] = (),
        action_dtype: Any = np.int64,
        seed: int | None = None,
    ) -> None:
        if int(capacity) < 1:
            raise ValueError(f"replay buffer capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._storage = Transitions(
            obs=np.zeros((self.capacity, *obs_shape), dtype=obs_dtype),
            actions=np.zeros((self.capacity, *action_shape), dtype=action_dtype),
            rewards=np.zeros(self.capacity, dtype=np.float32),
            next_obs=np.zeros((self.capacity, *obs_shape), dtype=obs_dtype),
            terminateds=np.zeros(self.capacity, dtype=np.float32),
            discounts=np.zeros(self.capacity, dtype=np.float32),
        )
        self._pos = 0  # the next slot to write
        self._size = 0
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self._size

    def add(self, transitions: Transitions) -> np.ndarray:
        """Store a batch (at most two slice copies per column); returns the slots written."""
        count = len(transitions.rewards)
        if count > self.capacity:  # only the newest ``capacity`` would survive anyway
            transitions = Transitions(*(column[-self.capacity :] for column in transitions))
            count = self.capacity
        first = min(count, self.capacity - self._pos)  # up to the end of the storage
        if first == count:  # no wrap-around (one slice per column: a transition per env step)
            for stored, new in zip(self._storage, transitions, strict=True):
                stored[self._pos : self._pos + count] = new
            slots = np.arange(self._pos, self._pos + count)
        else:
            for stored, new in zip(self._storage, transitions, strict=True):
                stored[self._pos : self._pos + first] = new[:first]
                stored[: count - first] = new[first:]
            slots = (self._pos + np.arange(count)) % self.capacity
        self._pos = (self._pos + count) % self.capacity
        self._size = min(self._size + count, self.capacity)
        return slots

    def sample(self, batch_size: int) -> ReplayBatch:
        """``batch_size`` slots drawn uniformly with replacement."""
        self._check_can_sample(batch_size)
        indices = self.rng.integers(0, self._size, size=batch_size, dtype=np.int64)
        return self._batch(indices, np.ones(batch_size, dtype=np.float32))

    def _check_can_sample(self, batch_size: int) -> None:
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")

    def _batch(self, indices: np.ndarray, weights: np.ndarray) -> ReplayBatch:
        # Rows of a 2-D (or wider) column through np.take: the same rows as fancy indexing at a
        # fifth of its cost for small rows (observations, actions); 1-D columns index directly.
        return ReplayBatch(
            *(
                column[indices] if column.ndim == 1 else np.take(column, indices, axis=0)
                for column in self._storage
            ),
            weights=weights,
            indices=indices,
        )

    # --- state (numpy arrays and ints only, so it can be saved as npz without pickle) ------
    def get_state(self) -> dict[str, Any]:
        """The stored transitions (only the filled slots) and the write position."""
        columns = self._storage._asdict().items()
        state: dict[str, Any] = {name: column[: self._size].copy() for name, column in columns}
        state.update(capacity=self.capacity, pos=self._pos, size=self._size)
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        capacity, size = int(state["capacity"]), int(state["size"])
        if capacity != self.capacity:
            raise ValueError(f"replay buffer state has capacity {capacity}, this buffer {self.capacity}")
        for name, column in self._storage._asdict().items():
            column[:size] = state[name]
        self._pos, self._size = int(state["pos"]), size


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016) over a numpy sum-tree.

    ``P(i) = p_i / sum_k p_k`` with ``p_i = (|td_i| + eps) ** alpha``; importance weights are
    ``(N * P(i)) ** -beta / max_j (N * P(j)) ** -beta``. New transitions get the largest
    priority seen so far, so each is replayed at least once soon. ``beta`` may be changed
    between samples (e.g. annealed towards 1).
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype: Any = np.float32,
        action_shape: tuple[int, ...] = (),
        action_dtype: Any = np.int64,
        seed: int | None = None,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
    ) -> None:
        super().__init__(capacity, obs_shape, obs_dtype, action_shape, action_dtype, seed)
        if alpha < 0 or beta < 0 or eps <= 0:
            raise ValueError(f"need alpha >= 0, beta >= 0 and eps > 0; got {alpha=}, {beta=}, {eps=}")
        self.alpha, self.beta, self.eps = float(alpha), float(beta), float(eps)
        self._tree = SumMinTree(self.capacity)
        self._max_priority = 1.0  # |td| + eps, before the alpha exponent (RLlib's convention)

    @property
    def total_priority(self) -> float:
        return self._tree.total

    def priorities(self, indices: np.ndarray) -> np.ndarray:
        """``p_i = (|td_i| + eps) ** alpha`` of the given slots."""
        return self._tree.leaves[np.asarray(indices, dtype=np.int64)]

    def add(self, transitions: Transitions) -> np.ndarray:
        slots = super().add(transitions)
        self._tree.set(slots, np.full(len(slots), self._max_priority**self.alpha))
        return slots

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """Set ``p_i = (|td_i| + eps) ** alpha`` for the sampled slots (last one wins on repeats)."""
        raw = np.abs(np.asarray(td_errors, dtype=np.float64)) + self.eps
        self._max_priority = max(self._max_priority, float(raw.max(initial=0.0)))
        self._tree.set(np.asarray(indices, dtype=np.int64), raw**self.alpha)

    def sample(self, batch_size: int) -> ReplayBatch:
        """Stratified: one uniform draw in each of ``batch_size`` equal parts of the total priority."""
        self._check_can_sample(batch_size)
        total = self._tree.total
        targets = (np.arange(batch_size) + self.rng.random(batch_size)) * (total / batch_size)
        indices = self._tree.find(targets)
        # (N P(i))^-beta / (N P_min)^-beta == (p_i / p_min)^-beta
        weights = (self._tree.leaves[indices] / self._tree.min) ** -self.beta
        return self._batch(indices, weights.astype(np.float32))

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        state["priorities"] = self._tree.leaves[: self._size].copy()
        state["max_priority"] = self._max_priority
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._tree = SumMinTree(self.capacity)
        self._tree.set(np.arange(self._size), np.asarray(state["priorities"], dtype=np.float64))
        self._max_priority = float(state["max_priority"])


class SumMinTree:
    """Sums and minimums over ``capacity`` leaves, for proportional sampling (a binary tree).

    Complete binary trees in arrays: node ``i`` has children ``2i`` and ``2i + 1``, the root
    is 1 and leaf ``s`` is node ``leaf_offset + s``. Sampling and updates are numpy operations
    vectorized over the batch, one level at a time. Leaves must be filled as a prefix of
    positive values (the replay buffer's filled slots); empty ones hold 0 and inf.
    """

    def __init__(self, capacity: int) -> None:
        self._leaf_offset = 1 << max(capacity - 1, 0).bit_length()
        self._depth = self._leaf_offset.bit_length() - 1
        self._sums = np.zeros(2 * self._leaf_offset, dtype=np.float64)
        self._mins = np.full(2 * self._leaf_offset, np.inf, dtype=np.float64)
        self._filled = 0  # one past the highest leaf ever set

    @property
    def leaves(self) -> np.ndarray:
        return self._sums[self._leaf_offset :]

    @property
    def total(self) -> float:
        return float(self._sums[1])

    @property
    def min(self) -> float:
        return float(self._mins[1])

    def set(self, slots: np.ndarray, values: np.ndarray) -> None:
        """``leaves[slots] = values`` (last one wins on repeats), then the nodes above them."""
        nodes = self._leaf_offset + slots
        self._sums[nodes] = values
        self._mins[nodes] = values
        self._filled = max(self._filled, int(slots.max(initial=-1)) + 1)
        for _ in range(self._depth):
            # Repeated parents just compute the same value twice: cheaper than deduplicating.
            nodes = nodes >> 1
            left = nodes << 1
            right = left + 1
            self._sums[nodes] = self._sums[left] + self._sums[right]
            self._mins[nodes] = np.minimum(self._mins[left], self._mins[right])

    def find(self, targets: np.ndarray) -> np.ndarray:
        """For each target in ``[0, total)``, the leaf whose cumulative-sum interval holds it.

        A target that rounding pushes past the last filled leaf (into empty leaves, which
        only lie to its right) ends on that leaf.
        """
        targets = np.array(targets, dtype=np.float64)
        nodes = np.ones(len(targets), dtype=np.int64)
        for _ in range(self._depth):  # descend the tree for the whole batch at once
            nodes <<= 1
            left_sum = self._sums[nodes]
            go_right = targets >= left_sum
            targets -= left_sum * go_right
            nodes += go_right
        return np.minimum(nodes - self._leaf_offset, self._filled - 1)


_BUFFER_TYPES: dict[str, type[ReplayBuffer]] = {
    "ReplayBuffer": ReplayBuffer,
    "PrioritizedReplayBuffer": PrioritizedReplayBuffer,
    # RLlib's names for the same buffers (single-agent here).
    "MultiAgentReplayBuffer": ReplayBuffer,
    "MultiAgentPrioritizedReplayBuffer": PrioritizedReplayBuffer,
    "EpisodeReplayBuffer": ReplayBuffer,
    "PrioritizedEpisodeReplayBuffer": PrioritizedReplayBuffer,
    "MultiAgentEpisodeReplayBuffer": ReplayBuffer,
    "MultiAgentPrioritizedEpisodeReplayBuffer": PrioritizedReplayBuffer,
}
#: RLlib's buffers that sample otherwise than uniformly or by priority, and why each is refused.
_REFUSED_TYPES: dict[str, str] = {
    "ReservoirReplayBuffer": (
        "it keeps a uniform sample of everything ever added (reservoir sampling), and rltrainer's "
        "buffers overwrite the oldest transitions"
    ),
    "MultiAgentMixInReplayBuffer": (
        "it mixes each new batch into the next replayed one (replay_ratio), and rltrainer's buffers "
        "replay from the buffer only; IMPALA and APPO mix in replay with replay_proportion"
    ),
    "FifoReplayBuffer": (
        "it hands each added batch back once, in order (no replay), and rltrainer's off-policy "
        "algorithms sample from a replay buffer"
    ),
}
#: RLlib's module of its buffers: ``ray.rllib.utils.replay_buffers[.<module>].<name>`` is ``<name>``.
_RLLIB_MODULE = "ray.rllib.utils.replay_buffers."
_CONFIG_KEYS = ("type", "capacity", "alpha", "beta", "eps")


def check_replay_buffer_config(
    replay_buffer_config: dict[str, Any],
) -> tuple[type[ReplayBuffer], int, dict[str, float]]:
    """``(class, capacity, prioritized kwargs)`` of an RLlib-style replay_buffer_config.

    ``type`` is one of ``_BUFFER_TYPES``' names (also as RLlib's full path,
    ``ray.rllib.utils.replay_buffers.<name>``) or a ``ReplayBuffer`` subclass (default
    ``"ReplayBuffer"``); ``capacity`` defaults to 50_000. RLlib's other keys of the dict are
    translated before (``rltrainer.algorithms.rllib_keys``). ``alpha``, ``beta`` and ``eps``
    configure a prioritized buffer and are ignored by a uniform one, so switching ``type``
    alone works. RLlib's buffers that sample otherwise (``_REFUSED_TYPES``) are refused saying
    why. Raises ``ValueError`` naming the bad key and what is allowed.
    """
    unknown = sorted(set(replay_buffer_config) - set(_CONFIG_KEYS))
    if unknown:
        raise ValueError(f"unknown replay_buffer_config key(s) {unknown}; allowed: {list(_CONFIG_KEYS)}")
    buffer_type = replay_buffer_config.get("type", "ReplayBuffer")
    if isinstance(buffer_type, str) and buffer_type.startswith(_RLLIB_MODULE):
        buffer_type = buffer_type.rsplit(".", 1)[1]
    if isinstance(buffer_type, type) and issubclass(buffer_type, ReplayBuffer):
        cls = buffer_type
    elif isinstance(buffer_type, str) and buffer_type in _BUFFER_TYPES:
        cls = _BUFFER_TYPES[buffer_type]
    elif isinstance(buffer_type, str) and buffer_type in _REFUSED_TYPES:
        raise ValueError(
            f"replay_buffer_config type {buffer_type!r} is not built: {_REFUSED_TYPES[buffer_type]}; "
            f"allowed: {list(_BUFFER_TYPES)} or a ReplayBuffer subclass"
        )
    else:
        raise ValueError(
            f"unknown replay_buffer_config type {buffer_type!r}; allowed: {list(_BUFFER_TYPES)} "
            "or a ReplayBuffer subclass"
        )
    capacity = replay_buffer_config.get("capacity", 50_000)
    if isinstance(capacity, bool) or not isinstance(capacity, int | np.integer) or capacity < 1:
        raise ValueError(f"replay_buffer_config capacity must be a positive int, got {capacity!r}")
    kwargs: dict[str, float] = {}
    if issubclass(cls, PrioritizedReplayBuffer):
        for key in ("alpha", "beta", "eps"):
            if key not in replay_buffer_config:
                continue
            value = replay_buffer_config[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"replay_buffer_config needs a number {key} >= 0, got {value!r}")
            kwargs[key] = float(value)
        if kwargs.get("eps", 1.0) <= 0:
            raise ValueError("replay_buffer_config eps must be > 0")
    return cls, int(capacity), kwargs


def make_replay_buffer(
    replay_buffer_config: dict[str, Any],
    obs_shape: tuple[int, ...],
    obs_dtype: Any = np.float32,
    action_shape: tuple[int, ...] = (),
    action_dtype: Any = np.int64,
    seed: int | None = None,
) -> ReplayBuffer:
    """A buffer from an RLlib-style ``{"type": ..., "capacity": ..., "alpha": ..., "beta": ...}``
    (see ``check_replay_buffer_config``)."""
    cls, capacity, kwargs = check_replay_buffer_config(replay_buffer_config)
    return cls(capacity, obs_shape, obs_dtype, action_shape, action_dtype, seed=seed, **kwargs)
