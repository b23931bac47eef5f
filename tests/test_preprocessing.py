"""Observation preprocessing, observation filters, GAE and schedules against hand-computed numbers."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from rltrainer.core.filters import MeanStdFilter, NoFilter, make_filter
from rltrainer.env.preprocessors import Preprocessor
from rltrainer.utils.postprocessing import compute_gae
from rltrainer.utils.schedules import PiecewiseSchedule

# --- Preprocessor ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("space", "obs", "expected"),
    [
        (spaces.Box(-1.0, 1.0, (3,)), np.array([0.1, -0.2, 0.3]), [0.1, -0.2, 0.3]),
        (spaces.Box(-1.0, 1.0, (2, 2)), np.array([[1.0, 2.0], [3.0, 4.0]]), [1.0, 2.0, 3.0, 4.0]),
        (spaces.Discrete(4), 2, [0, 0, 1, 0]),
        (spaces.Discrete(3, start=-1), -1, [1, 0, 0]),
        (spaces.Discrete(3, start=5), 7, [0, 0, 1]),
        (spaces.MultiDiscrete([2, 3]), np.array([1, 2]), [0, 1, 0, 0, 1]),
        (spaces.MultiDiscrete([3, 2, 2]), np.array([0, 1, 0]), [1, 0, 0, 0, 1, 1, 0]),
        (spaces.MultiBinary(3), np.array([1, 0, 1]), [1, 0, 1]),
        (
            # gymnasium sorts a Dict's keys: "a" (Box) comes before "b" (Discrete).
            spaces.Dict({"b": spaces.Discrete(3), "a": spaces.Box(-5.0, 5.0, (2,))}),
            {"b": 1, "a": np.array([4.0, -4.0])},
            [4.0, -4.0, 0, 1, 0],
        ),
        (
            spaces.Tuple((spaces.Discrete(2), spaces.Box(0.0, 1.0, (2,)), spaces.MultiDiscrete([2, 2]))),
            (1, np.array([0.25, 0.75]), np.array([1, 0])),
            [0, 1, 0.25, 0.75, 0, 1, 1, 0],
        ),
        (
            spaces.Dict(
                {
                    "inner": spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3))),
                    "x": spaces.Box(0.0, 1.0, (1,)),
                }
            ),
            {"inner": (0, 2), "x": np.array([0.5])},
            [1, 0, 0, 0, 1, 0.5],
        ),
    ],
    ids=[
        "box",
        "box-2d",
        "discrete",
        "discrete-neg-start",
        "discrete-start",
        "multidiscrete",
        "multidiscrete-3",
        "multibinary",
        "dict",
        "tuple",
        "nested",
    ],
)
def test_preprocessor_transform_one(space, obs, expected):
    preprocessor = Preprocessor(space)
    out = preprocessor.transform_one(obs)
    assert preprocessor.size == len(expected)
    assert out.dtype == np.float32
    assert out.shape == (1, len(expected))
    np.testing.assert_allclose(out[0], expected, rtol=1e-6)


def test_preprocessor_transform_batch_dict():
    space = spaces.Dict({"pos": spaces.Box(-1.0, 1.0, (2,)), "mode": spaces.Discrete(3)})
    batch = {"mode": np.array([2, 0]), "pos": np.array([[0.1, 0.2], [0.3, 0.4]], np.float32)}
    out = Preprocessor(space).transform(batch)
    # Sorted key order: "mode" (one-hot) then "pos".
    np.testing.assert_allclose(out, [[0, 0, 1, 0.1, 0.2], [1, 0, 0, 0.3, 0.4]], rtol=1e-6)


def test_preprocessor_transform_batch_tuple_and_multidiscrete():
    space = spaces.Tuple((spaces.MultiDiscrete([2, 3]), spaces.Discrete(2)))
    batch = (np.array([[0, 2], [1, 0], [1, 1]]), np.array([1, 0, 1]))
    out = Preprocessor(space).transform(batch)
    np.testing.assert_array_equal(
        out,
        [
            [1, 0, 0, 0, 1, 0, 1],
            [0, 1, 1, 0, 0, 1, 0],
            [0, 1, 0, 1, 0, 0, 1],
        ],
    )


def test_preprocessor_batch_matches_single():
    space = spaces.Dict(
        {
            "a": spaces.Box(-1.0, 1.0, (2, 2)),
            "b": spaces.MultiDiscrete([3, 4]),
            "c": spaces.Tuple((spaces.Discrete(5, start=1), spaces.MultiBinary(2))),
        }
    )
    space.seed(0)
    samples = [space.sample() for _ in range(5)]
    preprocessor = Preprocessor(space)
    batch = {
        "a": np.stack([s["a"] for s in samples]),
        "b": np.stack([s["b"] for s in samples]),
        "c": (np.array([s["c"][0] for s in samples]), np.stack([s["c"][1] for s in samples])),
    }
    singles = np.concatenate([preprocessor.transform_one(s) for s in samples])
    np.testing.assert_array_equal(preprocessor.transform(batch), singles)
    assert singles.shape == (5, 4 + 7 + 5 + 2)


def test_preprocessor_rejects_unsupported_space():
    with pytest.raises(ValueError, match="unsupported observation space"):
        Preprocessor(spaces.Text(5))


# --- observation filters ------------------------------------------------------------------


def random_rows(seed: int, n: int, size: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, size)) * [1.0, 5.0, 0.1] + [0.0, 3.0, -2.0]).astype(np.float32)


def test_no_filter_is_identity():
    rows = random_rows(0, 4)
    f = make_filter("NoFilter", 3)
    assert isinstance(f, NoFilter)
    assert f(rows) is rows
    assert f.get_state() == {}


def test_mean_std_filter_running_stats_equal_numpy():
    f = make_filter("MeanStdFilter", 3)
    assert isinstance(f, MeanStdFilter)
    chunks = [random_rows(i, n) for i, n in enumerate([1, 7, 2, 30])]
    for chunk in chunks:
        f(chunk)
    everything = np.concatenate(chunks).astype(np.float64)
    assert f.stats.count == len(everything)
    np.testing.assert_allclose(f.stats.mean, everything.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(f.stats.std, everything.std(axis=0), rtol=1e-10)


def test_mean_std_filter_normalizes_with_current_stats():
    f = MeanStdFilter(3)
    f(random_rows(0, 50))
    new = random_rows(1, 4)
    out = f(new, update=False)
    expected = (new - f.stats.mean) / f.stats.std
    np.testing.assert_allclose(out, np.clip(expected, -10, 10), rtol=1e-5)
    assert out.dtype == np.float32
    assert f.stats.count == 50  # update=False leaves the statistics alone


def test_mean_std_filter_clips_to_ten():
    f = MeanStdFilter(1)
    f(np.array([[0.0], [1.0], [0.0], [1.0]], np.float32))
    out = f(np.array([[1000.0], [-1000.0]], np.float32), update=False)
    np.testing.assert_array_equal(out, [[10.0], [-10.0]])


def test_mean_std_filter_merged_deltas_equal_one_filter():
    chunks_a = [random_rows(0, 5), random_rows(1, 11)]
    chunks_b = [random_rows(2, 3), random_rows(3, 20), random_rows(4, 1)]
    worker_a, worker_b, single = MeanStdFilter(3), MeanStdFilter(3), MeanStdFilter(3)
    for chunk in chunks_a:
        worker_a(chunk)
    for chunk in chunks_b:
        worker_b(chunk)
    for chunk in chunks_a + chunks_b:
        single(chunk)
    driver = MeanStdFilter(3)
    driver.apply_delta(worker_a.pop_delta())
    driver.apply_delta(worker_b.pop_delta())
    assert driver.stats.count == single.stats.count == 40
    np.testing.assert_allclose(driver.stats.mean, single.stats.mean, rtol=1e-10)
    np.testing.assert_allclose(driver.stats.std, single.stats.std, rtol=1e-10)
    # A popped delta is reset; applying an empty delta changes nothing.
    assert worker_a.pop_delta()["count"][0] == 0
    driver.apply_delta(worker_a.pop_delta())
    assert driver.stats.count == 40


def test_mean_std_filter_state_round_trip():
    f = MeanStdFilter(3)
    f(random_rows(0, 25))
    state = f.get_state()
    assert set(state) == {"count", "mean", "m2"}
    other = MeanStdFilter(3)
    other.set_state({k: v.copy() for k, v in state.items()})
    new = random_rows(1, 6)
    np.testing.assert_array_equal(other(new, update=False), f(new, update=False))
    for key, value in other.get_state().items():
        np.testing.assert_array_equal(value, state[key])
    # The state is a copy: training the original does not change the saved one.
    f(random_rows(2, 10))
    assert state["count"][0] == 25


# --- GAE ---------------------------------------------------------------------------------

GAMMA, LAMBDA = 0.9, 0.8


def test_compute_gae_hand_computed():
    """Two envs over 4 steps; gamma * lambda = 0.72.

    Env 0 terminates at t=1: nothing is bootstrapped there. Env 1 is truncated at t=1: it
    bootstraps from values[2] (its final observation's value) but advantages do not flow
    back across it. Both bootstrap from ``last_values`` at the fragment end (t=3).
    """
    rewards = np.array([[1, 1], [2, 1], [3, 1], [4, 1]], np.float32)
    values = np.array([[0.5, 2], [1.0, 3], [1.5, 4], [2.0, 5]], np.float32)
    terminateds = np.array([[0, 0], [1, 0], [0, 0], [0, 0]], np.float32)
    dones = np.array([[0, 0], [1, 1], [0, 0], [0, 0]], np.float32)
    last_values = np.array([3.0, 6.0], np.float32)

    # Env 0 deltas: 1 + .9 * 1 - .5 = 1.4; 2 - 1 = 1.0; 3 + .9 * 2 - 1.5 = 3.3; 4 + .9 * 3 - 2 = 4.7
    #   A3 = 4.7; A2 = 3.3 + .72 * 4.7 = 6.684; A1 = 1.0; A0 = 1.4 + .72 * 1.0 = 2.12
    # Env 1 deltas: 1 + 2.7 - 2 = 1.7; 1 + .9 * 4 - 3 = 1.6; 1 + 4.5 - 4 = 1.5; 1 + 5.4 - 5 = 1.4
    #   A3 = 1.4; A2 = 1.5 + .72 * 1.4 = 2.508; A1 = 1.6; A0 = 1.7 + .72 * 1.6 = 2.852
    expected_advantages = [[2.12, 2.852], [1.0, 1.6], [6.684, 2.508], [4.7, 1.4]]
    expected_targets = [[2.62, 4.852], [2.0, 4.6], [8.184, 6.508], [6.7, 6.4]]

    advantages, targets = compute_gae(rewards, values, terminateds, dones, last_values, GAMMA, LAMBDA)
    assert advantages.dtype == targets.dtype == np.float32
    assert advantages.shape == targets.shape == (4, 2)
    np.testing.assert_allclose(advantages, expected_advantages, rtol=1e-5)
    np.testing.assert_allclose(targets, expected_targets, rtol=1e-5)


def test_compute_gae_no_episode_end_bootstraps_from_last_value():
    """Three steps, no episode end: advantages are discounted sums of TD errors."""
    rewards = np.array([[1.0], [0.0], [2.0]], np.float32)
    values = np.array([[1.0], [2.0], [0.5]], np.float32)
    zeros = np.zeros((3, 1), np.float32)
    last_values = np.array([4.0], np.float32)
    # deltas: 1 + .9 * 2 - 1 = 1.8; 0 + .9 * .5 - 2 = -1.55; 2 + .9 * 4 - .5 = 5.1
    # A2 = 5.1; A1 = -1.55 + .72 * 5.1 = 2.122; A0 = 1.8 + .72 * 2.122 = 3.32784
    advantages, targets = compute_gae(rewards, values, zeros, zeros, last_values, GAMMA, LAMBDA)
    np.testing.assert_allclose(advantages[:, 0], [3.32784, 2.122, 5.1], rtol=1e-5)
    np.testing.assert_allclose(targets[:, 0], [4.32784, 4.122, 5.6], rtol=1e-5)


def test_compute_gae_lambda_one_is_monte_carlo():
    rewards = np.array([[1.0], [1.0], [1.0]], np.float32)
    values = np.array([[5.0], [-1.0], [2.0]], np.float32)
    terminateds = np.array([[0.0], [0.0], [1.0]], np.float32)
    advantages, targets = compute_gae(rewards, values, terminateds, terminateds, np.array([9.0]), 0.5, 1.0)
    # Discounted returns with gamma 0.5 to the termination: 1.75, 1.5, 1.
    np.testing.assert_allclose(targets[:, 0], [1.75, 1.5, 1.0], rtol=1e-6)
    np.testing.assert_allclose(advantages[:, 0], [1.75 - 5.0, 1.5 + 1.0, 1.0 - 2.0], rtol=1e-6)


# --- schedules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("timestep", "expected"),
    [(-5, 1e-3), (0, 1e-3), (50, 5.5e-4), (100, 1e-4), (150, 5e-5), (200, 0.0), (10_000, 0.0)],
)
def test_piecewise_schedule_interpolates(timestep, expected):
    schedule = PiecewiseSchedule([(0, 1e-3), (100, 1e-4), (200, 0.0)])
    assert schedule(timestep) == pytest.approx(expected, abs=1e-12)


def test_piecewise_schedule_constant():
    schedule = PiecewiseSchedule(3e-4)
    assert schedule(0) == schedule(10**9) == pytest.approx(3e-4)


def test_piecewise_schedule_single_point_and_late_start():
    assert PiecewiseSchedule([(0, 0.5)])(1000) == 0.5
    schedule = PiecewiseSchedule([[100, 1.0], [300, 3.0]])
    assert schedule(0) == 1.0
    assert schedule(200) == pytest.approx(2.0)


def test_filter_state_of_other_kind_is_rejected():
    mean_std = MeanStdFilter(3)
    mean_std(random_rows(0, 5))
    with pytest.raises(ValueError, match="observation_filter='MeanStdFilter'"):
        NoFilter(3).set_state(mean_std.get_state())
    with pytest.raises(ValueError, match="observation_filter='NoFilter'"):
        MeanStdFilter(3).set_state(NoFilter(3).get_state())
    with pytest.raises(ValueError, match="'mean' has 3 values, expected 4"):
        MeanStdFilter(4).set_state(mean_std.get_state())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compute_gae_of_one_env_is_that_env_column_of_many(dtype):
    """One env's column takes a scalar recursion (the same arithmetic): bitwise the vector one's."""
    rng = np.random.default_rng(4)
    shape = (60, 3)
    rewards, values = rng.random(shape).astype(np.float32), rng.standard_normal(shape).astype(dtype)
    terminateds = (rng.random(shape) < 0.05).astype(np.float32)
    dones = np.maximum(terminateds, (rng.random(shape) < 0.05).astype(np.float32))
    last_values = rng.standard_normal(3).astype(dtype)
    together = compute_gae(rewards, values, terminateds, dones, last_values, 0.99, 0.95)
    for env in range(3):
        alone = compute_gae(
            rewards[:, env : env + 1],
            values[:, env : env + 1],
            terminateds[:, env : env + 1],
            dones[:, env : env + 1],
            last_values[env : env + 1],
            0.99,
            0.95,
        )
        for mine, theirs in zip(alone, together, strict=True):
            assert np.array_equal(mine[:, 0], theirs[:, env])
