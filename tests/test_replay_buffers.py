"""Replay buffers and n-step transitions against hand-computed numbers."""

from __future__ import annotations

import io

import numpy as np
import pytest

from rltrainer.env.env_runner import Rollout
from rltrainer.utils.postprocessing import compute_n_step_returns
from rltrainer.utils.replay_buffers import (
    PrioritizedReplayBuffer,
    ReplayBuffer,
    SumMinTree,
    Transitions,
    make_replay_buffer,
    transitions_from_rollout,
)

GAMMA = 0.9

# --- n-step transitions -----------------------------------------------------------------


def _rollout() -> Rollout:
    """T=5, N=2. Env 0: terminates at t=1, t=2 is its reset step. Env 1: truncated at t=2,
    t=3 is its reset step. Reset steps carry junk rewards (100, 99) that must never be used.
    obs[t, n] = [100 n + t], actions[t, n] = 10 t + n."""
    t, n = np.meshgrid(np.arange(5), np.arange(2), indexing="ij")
    rewards = np.array([[1, 10], [2, 20], [100, 30], [3, 99], [4, 40]], dtype=np.float32)
    terminateds = np.zeros((5, 2), dtype=bool)
    truncateds = np.zeros((5, 2), dtype=bool)
    terminateds[1, 0] = True
    truncateds[2, 1] = True
    valid = np.ones((5, 2), dtype=bool)
    valid[2, 0] = valid[3, 1] = False
    return Rollout(
        obs=(100 * n + t)[..., None].astype(np.float32),
        actions=10 * t + n,
        action_logp=np.zeros((5, 2), dtype=np.float32),
        rewards=rewards,
        terminateds=terminateds,
        truncateds=truncateds,
        valid=valid,
        last_obs=np.array([[5.0], [105.0]], dtype=np.float32),
    )


# Valid steps in time-major order: (t, env).
STEPS = [(0, 0), (0, 1), (1, 0), (1, 1), (2, 1), (3, 0), (4, 0), (4, 1)]


def test_one_step_transitions():
    tr = transitions_from_rollout(_rollout(), n_step=1, gamma=GAMMA)
    assert tr.actions.tolist() == [10 * t + n for t, n in STEPS]
    assert tr.obs[:, 0].tolist() == [100 * n + t for t, n in STEPS]
    np.testing.assert_allclose(tr.rewards, [1, 10, 2, 20, 30, 3, 4, 40])
    # After the termination, obs[2, 0] = 2 is env 0's final observation; after the
    # truncation, obs[3, 1] = 103 is env 1's; after the last step it is last_obs.
    np.testing.assert_allclose(tr.next_obs[:, 0], [1, 101, 2, 102, 103, 4, 5, 105])
    np.testing.assert_array_equal(tr.terminateds, [0, 0, 1, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(tr.discounts, [0.9] * 8, rtol=1e-6)


@pytest.mark.parametrize("t", [1, 4])
def test_one_step_fragments_transitions_are_the_general_ones(t):
    # A one-step fragment valid in every env takes its rows as they are: the same transitions
    # as the index walk's, which the same step gets inside a longer fragment.
    full = _rollout()
    step = full._replace(
        **{name: getattr(full, name)[t : t + 1] for name in ("obs", "actions", "action_logp", "rewards")},
        **{name: getattr(full, name)[t : t + 1] for name in ("terminateds", "truncateds", "valid")},
        last_obs=full.obs[t + 1] if t + 1 < len(full.obs) else full.last_obs,
    )
    assert step.valid.all()
    fast = transitions_from_rollout(step, n_step=1, gamma=GAMMA)
    walked = transitions_from_rollout(full, n_step=1, gamma=GAMMA)
    rows = [i for i, (step_t, _) in enumerate(STEPS) if step_t == t]
    for name, column in fast._asdict().items():
        expected = getattr(walked, name)[rows]
        assert column.dtype == expected.dtype and column.shape == expected.shape, name
        np.testing.assert_array_equal(column, expected, err_msg=name)


def test_three_step_transitions():
    tr = transitions_from_rollout(_rollout(), n_step=3, gamma=GAMMA)
    expected_rewards = [
        1 + 0.9 * 2,  # (0, 0): stops at the termination, k = 2
        10 + 0.9 * 20 + 0.81 * 30,  # (0, 1): full window, ends on the truncated step
        2,  # (1, 0): the terminating step itself
        20 + 0.9 * 30,  # (1, 1): stops at the truncation, k = 2
        30,  # (2, 1): the truncated step itself
        3 + 0.9 * 4,  # (3, 0): cut by the fragment end, k = 2
        4,  # (4, 0)
        40,  # (4, 1)
    ]
    np.testing.assert_allclose(tr.rewards, expected_rewards, rtol=1e-6)
    np.testing.assert_allclose(tr.discounts, [0.81, 0.729, 0.9, 0.81, 0.9, 0.81, 0.9, 0.9], rtol=1e-6)
    np.testing.assert_allclose(tr.next_obs[:, 0], [2, 103, 2, 103, 103, 5, 5, 105])
    np.testing.assert_array_equal(tr.terminateds, [1, 0, 1, 0, 0, 0, 0, 0])
    assert tr.obs[:, 0].tolist() == [100 * n + t for t, n in STEPS]


def test_n_step_returns_window_lengths():
    r = _rollout()
    returns, steps = compute_n_step_returns(r.rewards, r.terminateds, r.truncateds, r.valid, 3, GAMMA)
    np.testing.assert_array_equal(steps, [[2, 3], [1, 2], [0, 1], [2, 0], [1, 1]])
    assert returns[2, 0] == 0 and returns[3, 1] == 0  # reset steps get nothing
    with pytest.raises(ValueError, match="n_step"):
        compute_n_step_returns(r.rewards, r.terminateds, r.truncateds, r.valid, 0, GAMMA)


def _reference_n_step(rewards, terminateds, truncateds, valid, n_step, gamma):
    """Per-transition loops, straight from the definition."""
    returns, steps = np.zeros(rewards.shape), np.zeros(rewards.shape, dtype=int)
    for t, env in zip(*np.nonzero(valid), strict=True):
        for j in range(n_step):
            returns[t, env] += gamma**j * rewards[t + j, env]
            steps[t, env] += 1
            end = terminateds[t + j, env] or truncateds[t + j, env]
            if end or t + j + 1 == len(rewards) or not valid[t + j + 1, env]:
                break
    return returns, steps


@pytest.mark.parametrize("n_step", [1, 2, 3, 7])
def test_n_step_returns_match_reference_on_random_autoreset_rollouts(n_step):
    rng = np.random.default_rng(n_step)
    horizon, num_envs = 30, 4
    rewards = rng.normal(size=(horizon, num_envs)).astype(np.float32)
    terminateds = rng.random((horizon, num_envs)) < 0.1
    truncateds = rng.random((horizon, num_envs)) < 0.1
    valid = np.ones((horizon, num_envs), dtype=bool)
    valid[1:] = ~(terminateds[:-1] | truncateds[:-1])  # next-step autoreset
    terminateds &= valid
    truncateds &= valid
    returns, steps = compute_n_step_returns(rewards, terminateds, truncateds, valid, n_step, 0.95)
    expected_returns, expected_steps = _reference_n_step(
        rewards, terminateds, truncateds, valid, n_step, 0.95
    )
    np.testing.assert_array_equal(steps, expected_steps)
    np.testing.assert_allclose(returns, expected_returns, rtol=1e-5, atol=1e-6)


# --- uniform buffer -----------------------------------------------------------------------


def _transitions(values) -> Transitions:
    values = np.asarray(values)
    count = len(values)
    return Transitions(
        obs=np.repeat(values[:, None], 2, axis=1).astype(np.float32),
        actions=values.astype(np.int64),
        rewards=values.astype(np.float32),
        next_obs=np.repeat(values[:, None] + 0.5, 2, axis=1).astype(np.float32),
        terminateds=np.zeros(count, dtype=np.float32),
        discounts=np.full(count, GAMMA, dtype=np.float32),
    )


def test_wrap_around_overwrites_oldest_and_state_round_trip():
    buffer = ReplayBuffer(4, (2,), seed=0)
    assert len(buffer) == 0
    np.testing.assert_array_equal(buffer.add(_transitions([0, 1, 2])), [0, 1, 2])
    np.testing.assert_array_equal(buffer.add(_transitions([3, 4, 5])), [3, 0, 1])
    assert len(buffer) == 4
    assert buffer.get_state()["actions"].tolist() == [4, 5, 2, 3]
    # More than the capacity at once: only the newest 4 stay, written from slot 2 on.
    buffer.add(_transitions(range(6, 12)))
    state = buffer.get_state()
    assert state["actions"].tolist() == [10, 11, 8, 9]
    assert state["next_obs"][:, 1].tolist() == [10.5, 11.5, 8.5, 9.5]
    assert (state["pos"], state["size"], len(buffer)) == (2, 4, 4)

    file = io.BytesIO()  # through npz without pickle, as a checkpoint stores it
    np.savez(file, **state)
    file.seek(0)
    with np.load(file, allow_pickle=False) as loaded:
        restored = ReplayBuffer(4, (2,), seed=0)
        restored.set_state(dict(loaded))
    assert len(restored) == 4
    for a, b in zip(restored.sample(16), buffer.sample(16), strict=True):
        np.testing.assert_array_equal(a, b)
    restored.add(_transitions([12]))
    assert restored.get_state()["actions"].tolist() == [10, 11, 12, 9]
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(5, (2,)).set_state(state)


def test_partial_state_round_trip():
    buffer = ReplayBuffer(10, (2,))
    buffer.add(_transitions([7, 8]))
    state = buffer.get_state()
    assert state["obs"].shape == (2, 2)  # only the filled slots are saved
    restored = ReplayBuffer(10, (2,))
    restored.set_state(state)
    restored.add(_transitions([9]))
    assert restored.get_state()["actions"].tolist() == [7, 8, 9]


def test_uniform_sampling_returns_only_stored_slots():
    buffer = ReplayBuffer(10, (2,), seed=1)
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(4)
    buffer.add(_transitions([5, 6, 7]))
    batch = buffer.sample(3000)
    assert set(batch.indices.tolist()) == {0, 1, 2}
    np.testing.assert_array_equal(batch.actions, batch.indices + 5)  # fields come from the same slot
    np.testing.assert_array_equal(batch.next_obs[:, 0], batch.indices + 5.5)
    np.testing.assert_array_equal(batch.weights, np.ones(3000))
    counts = np.bincount(batch.indices, minlength=3)
    assert np.all(np.abs(counts - 1000) < 120)


# --- prioritized buffer ------------------------------------------------------------------


def _prioritized(**kwargs) -> PrioritizedReplayBuffer:
    """capacity 5; slots 0-3 with priorities [2, 1, 3, 1] (alpha=0.5, eps=0.5)."""
    buffer = PrioritizedReplayBuffer(5, (2,), seed=3, alpha=0.5, eps=0.5, **kwargs)
    buffer.add(_transitions([0, 1, 2, 3]))
    # (|td| + eps) ** alpha: (3.5 + 0.5) ** 0.5 = 2, (8.5 + 0.5) ** 0.5 = 3
    buffer.update_priorities(np.array([0, 2]), np.array([-3.5, 8.5]))
    return buffer


def test_sum_tree_totals_and_max_priority_for_new_items():
    buffer = PrioritizedReplayBuffer(5, (2,), alpha=0.5, eps=0.5)
    buffer.add(_transitions([0, 1, 2, 3]))
    assert buffer.total_priority == pytest.approx(4.0)  # new items get max priority 1 ** alpha
    buffer.update_priorities(np.array([0, 2]), np.array([-3.5, 8.5]))
    np.testing.assert_allclose(buffer.priorities(np.arange(4)), [2, 1, 3, 1])
    assert buffer.total_priority == pytest.approx(7.0)
    buffer.add(_transitions([4]))  # the largest |td| + eps so far is 9: 9 ** 0.5 = 3
    np.testing.assert_allclose(buffer.priorities(np.arange(5)), [2, 1, 3, 1, 3])
    assert buffer.total_priority == pytest.approx(10.0)
    buffer.add(_transitions([5]))  # wraps onto slot 0: 10 - 2 + 3
    assert buffer.total_priority == pytest.approx(11.0)
    buffer.update_priorities(np.array([1, 1]), np.array([0.5, 0.5]))  # repeats: priority 1
    assert buffer.total_priority == pytest.approx(11.0)


def test_sampling_frequencies_proportional_to_priorities():
    buffer = _prioritized()
    buffer.add(_transitions([4]))  # priorities [2, 1, 3, 1, 3], total 10
    draws = np.concatenate([buffer.sample(100).indices for _ in range(500)])
    expected = 50_000 * np.array([0.2, 0.1, 0.3, 0.1, 0.3])
    chi2 = (((np.bincount(draws, minlength=5) - expected) ** 2) / expected).sum()
    assert chi2 < 18.5  # 4 degrees of freedom, p = 0.001

    # Slot 1 rises from 1 to (5.5 + 0.5) ** 0.5 = 6 ** 0.5.
    buffer.update_priorities(np.array([1]), np.array([5.5]))
    draws = np.concatenate([buffer.sample(100).indices for _ in range(500)])
    priorities = np.array([2, 6**0.5, 3, 1, 3])
    expected = 50_000 * priorities / priorities.sum()
    chi2 = (((np.bincount(draws, minlength=5) - expected) ** 2) / expected).sum()
    assert chi2 < 18.5


def test_importance_weights_hand_computed():
    buffer = _prioritized(beta=0.5)
    buffer.add(_transitions([4]))
    # N = 5, P = [.2, .1, .3, .1, .3]; w = (N P)^-0.5 / (N P_min)^-0.5 = (p_min / p)^0.5
    expected = np.array([0.5**0.5, 1.0, (1 / 3) ** 0.5, 1.0, (1 / 3) ** 0.5])
    batch = buffer.sample(200)
    assert set(batch.indices.tolist()) == {0, 1, 2, 3, 4}
    np.testing.assert_allclose(batch.weights, expected[batch.indices], rtol=1e-6)
    np.testing.assert_array_equal(batch.actions, batch.indices)
    buffer.beta = 1.0  # annealed
    np.testing.assert_allclose(buffer.sample(50).weights.max(), 1.0)
    batch = buffer.sample(200)
    np.testing.assert_allclose(batch.weights, (expected**2)[batch.indices], rtol=1e-6)


@pytest.mark.parametrize("capacity", [1, 2, 3, 63, 64, 65, 4097, 300_000])
def test_sum_min_tree_matches_a_cumulative_sum_search(capacity):
    """Around powers of two: totals, minimums and the leaf found for each target agree with
    a brute-force search over the cumulative sums, with only part of the leaves filled."""
    rng = np.random.default_rng(capacity)
    tree = SumMinTree(capacity)
    filled = max(1, capacity * 2 // 3)
    values = rng.uniform(0.01, 5.0, size=filled)
    tree.set(np.arange(filled), values)
    repeats = rng.integers(0, filled, size=50)  # updates with repeated slots: the last one wins
    tree.set(np.concatenate([repeats, repeats]), np.concatenate([np.zeros(50) + 9.0, values[repeats]]))
    assert tree.total == pytest.approx(values.sum(), rel=1e-12)
    assert tree.min == pytest.approx(values.min())
    cumulative = np.cumsum(values)
    targets = np.concatenate(
        [rng.uniform(0, cumulative[-1], size=2000), [0.0, cumulative[-1]]]
    )  # and both ends
    expected = np.minimum(np.searchsorted(cumulative, targets, side="right"), filled - 1)
    assert np.array_equal(tree.find(targets), expected)


def test_prioritized_never_samples_empty_slots():
    buffer = PrioritizedReplayBuffer(1000, (2,), seed=0)
    buffer.add(_transitions(np.arange(3)))
    assert set(buffer.sample(5000).indices.tolist()) == {0, 1, 2}


def test_prioritized_state_round_trip():
    buffer = _prioritized()
    restored = PrioritizedReplayBuffer(5, (2,), seed=3, alpha=0.5, eps=0.5)
    restored.set_state(buffer.get_state())
    assert restored.total_priority == pytest.approx(7.0)
    restored.add(_transitions([4]))  # max priority survives the round trip
    np.testing.assert_allclose(restored.priorities(np.arange(5)), [2, 1, 3, 1, 3])


# --- config --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("buffer_type", "cls"),
    [
        ("ReplayBuffer", ReplayBuffer),
        ("MultiAgentReplayBuffer", ReplayBuffer),
        ("PrioritizedReplayBuffer", PrioritizedReplayBuffer),
        ("MultiAgentPrioritizedReplayBuffer", PrioritizedReplayBuffer),
        (PrioritizedReplayBuffer, PrioritizedReplayBuffer),
    ],
)
def test_make_replay_buffer_types(buffer_type, cls):
    config = {"type": buffer_type, "capacity": 100, "alpha": 0.7, "beta": 0.5}
    buffer = make_replay_buffer(config, (3,), np.float32, (), np.int64, seed=0)
    assert type(buffer) is cls and buffer.capacity == 100
    if cls is PrioritizedReplayBuffer:
        assert (buffer.alpha, buffer.beta) == (0.7, 0.5)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"type": "Bogus"}, r"unknown replay_buffer_config type 'Bogus'; allowed: \['ReplayBuffer'"),
        (
            {"capacity": 10, "prioritized_replay_alpha": 0.6},
            r"key\(s\) \['prioritized_replay_alpha'\]; allowed",
        ),
        ({"capacity": 0}, "capacity must be a positive int, got 0"),
        ({"capacity": 1.5}, "capacity must be a positive int"),
        ({"type": "PrioritizedReplayBuffer", "alpha": -1.0}, "alpha >= 0"),
    ],
)
def test_make_replay_buffer_rejects_bad_configs(config, message):
    with pytest.raises(ValueError, match=message):
        make_replay_buffer(config, (3,))
