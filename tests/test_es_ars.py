"""ES and ARS: the gradient estimates against direct computations, learning CartPole, remote
runners, Box actions with action noise, checkpoints and bad settings."""

from __future__ import annotations

import numpy as np
import pytest

from rltrainer.algorithms.es import ARS, ES, ARSConfig, ESConfig
from rltrainer.algorithms.es.es import centered_ranks, flatten, unflatten, weighted_noise
from rltrainer.errors import ConfigError


def test_centered_ranks_and_flattening():
    np.testing.assert_allclose(
        centered_ranks(np.array([[3.0, -1.0], [10.0, 0.0]])), [[1 / 6, -0.5], [0.5, -1 / 6]]
    )
    weights = {"b": np.ones((2, 3)), "a": np.arange(4.0), "steps": np.array(7)}
    vector = flatten(weights)
    np.testing.assert_array_equal(vector[:4], np.arange(4.0))  # by sorted name, integers left out
    back = unflatten(vector, weights)
    assert set(back) == {"a", "b"} and back["b"].shape == (2, 3)


def fake_results(algo_class, config, noise, offsets, returns, lengths):
    algo = algo_class.__new__(algo_class)
    algo.config, algo.noise = config, noise
    return algo.gradient(offsets, returns, lengths, dim=3)


def test_es_gradient_is_centered_rank_antithetic_differences():
    noise = np.arange(10, dtype=np.float32)
    offsets, returns = np.array([0, 5]), np.array([[1.0, 2.0], [4.0, 3.0]])
    ranks = centered_ranks(returns)  # [[-0.5, -1/6], [0.5, 1/6]]
    expected = ((ranks[0, 0] - ranks[0, 1]) * noise[0:3] + (ranks[1, 0] - ranks[1, 1]) * noise[5:8]) / 4
    got = fake_results(ES, ESConfig(), noise, offsets, returns, np.ones((2, 2)))
    np.testing.assert_allclose(got, expected)


def test_ars_gradient_uses_the_best_directions_scaled_by_their_std():
    noise = np.arange(10, dtype=np.float32)
    offsets = np.array([0, 2, 5])
    returns = np.array([[1.0, 0.0], [9.0, 3.0], [2.0, 5.0]])  # best by max: 1 (9), 2 (5)
    config = ARSConfig(num_rollouts=3, rollouts_used=2)
    best = returns[[2, 1]]
    expected = (best[0, 0] - best[0, 1]) * noise[5:8] + (best[1, 0] - best[1, 1]) * noise[2:5]
    expected /= 2 * (best.std() + 1e-8)
    got = fake_results(ARS, config, noise, offsets, returns, np.ones((3, 2)))
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_allclose(weighted_noise(noise, offsets[:1], np.array([2.0]), 3), [0.0, 2.0, 4.0])


def cartpole(config_class, **training):
    return (
        config_class()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .training(noise_size=1_000_000, model={"fcnet_hiddens": [32]}, **training)
        .debugging(seed=0)
    )


@pytest.mark.parametrize(
    ("config_class", "training"),
    [
        (ESConfig, {"episodes_per_batch": 40, "train_batch_size": 1000, "stepsize": 0.02}),
        (ARSConfig, {"num_rollouts": 16, "rollouts_used": 8, "sgd_stepsize": 0.02}),
    ],
    ids=["ES", "ARS"],
)
def test_learns_cartpole(config_class, training):
    algo = cartpole(config_class, **training).build()
    try:
        best = 0.0
        for _ in range(25):
            result = algo.train()
            best = max(best, result["episode_return_mean"])
            if best >= 100:
                break
        assert best >= 100, best
        assert result["perturbations"] > 0 and result["update_ratio"] > 0
    finally:
        algo.stop()


def test_checkpoint_round_trip(tmp_path):
    algo = cartpole(ESConfig, episodes_per_batch=10, train_batch_size=100).build()
    try:
        algo.train()
        learner = algo.learner_group.local_learner
        theta, moments = learner.theta.copy(), learner.moments.copy()
        path = algo.save(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    restored = ES.from_checkpoint(path)
    try:
        learner = restored.learner_group.local_learner
        np.testing.assert_allclose(learner.theta, theta, rtol=1e-6)
        np.testing.assert_array_equal(learner.moments, moments)
        assert learner.step_count == 1
        assert restored.train()["training_iteration"] == 2
    finally:
        restored.stop()


def test_box_actions_with_action_noise():
    config = (
        ESConfig()
        .environment("Pendulum-v1")
        .env_runners(num_env_runners=0)
        .training(
            noise_size=100_000, episodes_per_batch=4, train_batch_size=200, model={"fcnet_hiddens": [8]}
        )
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        exploration = algo.env_runner_group.local_worker().policy.exploration
        result = algo.train()
        assert np.isfinite(result["grad_norm"]) and result["timesteps_total"] >= 800
        assert algo.env_runner_group.local_worker().policy.exploration is exploration  # put back
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_remote_runners_share_the_noise_table():
    config = cartpole(ARSConfig, num_rollouts=8, rollouts_used=8).env_runners(num_env_runners=2)
    algo = config.build()
    try:
        for _ in range(2):
            result = algo.train()
        assert result["perturbations"] >= 8 and result["episodes_this_iter"] >= 16
        assert np.isfinite(result["episode_return_mean"])
        # The perturbed episodes' observation statistics reached the driver's filter and, merged,
        # every runner's (ARS's observation normalization).
        states = algo.workers.foreach_worker(lambda w: w.get_filter_state())
        assert states[0]["count"][0] >= result["timesteps_total"] * 0.5  # perturbed steps, not evaluations
        for state in states[1:]:
            for name, value in states[0].items():
                np.testing.assert_allclose(state[name], value)
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_envs_per_env_runner": 2}, "num_envs_per_env_runner"),
        ({"num_learners": 1}, "num_learners=0"),
    ],
)
def test_bad_settings_fail_at_build(change, message):
    with pytest.raises(ConfigError, match=message):
        ESConfig().environment("CartPole-v1").update_from_dict(change).validate()
    with pytest.raises(ConfigError, match="rollouts_used"):
        ARSConfig(num_rollouts=4, rollouts_used=8).environment("CartPole-v1").validate()


@pytest.mark.parametrize("config_class", [ESConfig, ARSConfig])
def test_a_noise_table_smaller_than_the_weights_fails_at_build(config_class):
    """Each perturbation is a slice of the table as long as the weights: one line, not numpy's
    ``high <= 0`` from the first iteration."""
    config = (
        config_class()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .training(noise_size=100, model={"fcnet_hiddens": [8]})
    )
    with pytest.raises(ConfigError, match=r"noise_size=100 is too small for this policy's \d+ weights"):
        config.build()


def test_lean_episodes_match_the_runners_loop_and_callbacks_keep_the_loop():
    """ES rolls out on a plain env of the runner's own (``lean_episodes``): the same episode as the
    runner's sampling loop from the same seed and weights. With episode callbacks, which observe
    each step, it keeps the loop."""
    from rltrainer.algorithms.callbacks import DefaultCallbacks
    from rltrainer.algorithms.es.es import lean_episodes

    config = (
        ESConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .training(noise_size=100_000, model={"fcnet_hiddens": [16]})
        .debugging(seed=3)
    )
    algo = config.build()
    try:
        runner = algo.env_runner_group.local_worker()
        lean = lean_episodes(runner)(explore=False, update_filter=False)
        loop, _ = runner.sample_episodes(num_episodes=1, explore=False)
        assert (lean.episode_return, lean.episode_len) == (loop[0].episode_return, loop[0].episode_len)
    finally:
        algo.stop()

    class CountSteps(DefaultCallbacks):
        def on_episode_step(self, **kwargs):
            pass

    # A small batch: the loop's episodes only need to happen.
    algo = config.callbacks(CountSteps).training(episodes_per_batch=2, train_batch_size=20).build()
    try:
        assert lean_episodes(algo.env_runner_group.local_worker()) is None
        assert algo.train()["episodes_this_iter"] > 0
    finally:
        algo.stop()
