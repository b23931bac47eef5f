"""Ape-X DQN and DDPG: RLlib's defaults, per-runner exploration, asynchronous sampling into the
driver's prioritized replay, weight broadcasts every max_weight_sync_delay steps, bad settings."""

from __future__ import annotations

import time

import numpy as np
import pytest

from rltrainer.algorithms.apex import ApexDDPGConfig, ApexDQNConfig
from rltrainer.algorithms.registry import get_algorithm_class


def test_rllib_names_and_defaults():
    assert get_algorithm_class("APEX").__name__ == "ApexDQN"
    assert get_algorithm_class("apex_ddpg").__name__ == "ApexDDPG"
    dqn = ApexDQNConfig()
    assert (dqn.num_env_runners, dqn.n_step, dqn.train_batch_size) == (32, 3, 512)
    assert dqn.rollout_fragment_length == 50 and dqn.max_weight_sync_delay == 400
    assert dqn.replay_buffer_config["capacity"] == 2_000_000
    assert dqn.exploration_config["type"] == "PerWorkerEpsilonGreedy"
    assert ApexDDPGConfig().exploration_config["type"] == "PerWorkerOrnsteinUhlenbeckNoise"


def small(config_class, env: str, runners: int, **training):
    return (
        config_class()
        .environment(env)
        .env_runners(num_env_runners=runners, num_envs_per_env_runner=1, rollout_fragment_length=25)
        .training(
            num_steps_sampled_before_learning_starts=200,
            train_batch_size=32,
            replay_buffer_config={"capacity": 5_000},
            **training,
        )
        .reporting(min_sample_timesteps_per_iteration=400, min_time_s_per_iteration=0)
        .debugging(seed=0)
    )


def test_replay_shards_are_one_buffer_of_the_whole_capacity_in_one_logged_line(caplog):
    """RLlib's tuned examples set num_replay_buffer_shards: 2 (replay actors, each a share of the
    capacity); the driver's one buffer holds the whole capacity, and says so."""
    with caplog.at_level("WARNING", logger="rltrainer.algorithms.apex.apex"):
        algo = small(ApexDQNConfig, "CartPole-v1", 0, num_replay_buffer_shards=2).build()
    try:
        assert algo.replay_buffer.capacity == 5_000
        (record,) = caplog.records
        assert record.getMessage().startswith(
            "num_replay_buffer_shards=2: rltrainer's Ape-X keeps one replay buffer in the driver, "
            "holding the whole capacity (5000 transitions)"
        )
    finally:
        algo.stop()


def test_without_remote_runners_it_is_the_synchronous_off_policy_step():
    algo = small(ApexDQNConfig, "CartPole-v1", 0).build()
    try:
        result = algo.train()
        assert result["num_env_steps_sampled"] >= 400 and np.isfinite(result["qf_loss"])
        assert result["num_env_steps_trained"] > 0
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_runners_explore_with_their_own_epsilon_and_sample_asynchronously():
    algo = small(ApexDQNConfig, "CartPole-v1", 3, max_weight_sync_delay=100).build()
    try:
        epsilons = algo.workers.foreach_worker(lambda w: w.policy.exploration.epsilon(0), local_worker=False)
        np.testing.assert_allclose(epsilons, [0.4, 0.4**4.5, 0.4**8], rtol=1e-6)  # 0.4^(1 + 7i/(N-1))
        broadcasts = []
        group = algo.env_runner_group
        sync = group.sync_weights
        group.sync_weights = lambda weights: (broadcasts.append(1), sync(weights))[1]
        sampled = trained = 0
        for _ in range(2):  # learning starts in the first; the second is all asynchronous
            result = algo.train()
            sampled += result["num_env_steps_sampled"]
            trained += result["num_env_steps_trained"]
        assert trained > 0 and np.isfinite(result["qf_loss"])
        # Weights go out once per 100 sampled env steps, not after every gradient step.
        updates = trained // 32
        assert 1 <= len(broadcasts) <= sampled // 100 + 1 < updates, (len(broadcasts), sampled, updates)
        assert group.num_in_flight() == 3 * 2  # max_requests_in_flight_per_env_runner, always queued
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_apex_ddpg_trains_with_per_runner_noise():
    algo = small(ApexDDPGConfig, "Pendulum-v1", 2).build()
    try:
        scales = algo.workers.foreach_worker(lambda w: w.policy.exploration.scale(0), local_worker=False)
        np.testing.assert_allclose(scales, [0.4, 0.4**8], rtol=1e-6)
        result = algo.train()
        assert np.isfinite(result["critic_loss"]) and result["num_env_steps_trained"] > 0
    finally:
        algo.stop()


@pytest.mark.e2e_only("test_runners_explore_with_their_own_epsilon_and_sample_asynchronously")
@pytest.mark.usefixtures("local_ray")
def test_apex_dqn_learns_cartpole_with_two_runners():
    config = (
        ApexDQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=2, num_envs_per_env_runner=4, rollout_fragment_length=16)
        .training(
            lr=1e-3,
            n_step=3,
            train_batch_size=64,
            training_intensity=8,
            target_network_update_freq=1000,
            num_steps_sampled_before_learning_starts=1000,
            replay_buffer_config={"capacity": 50_000},
            model={"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"},
            hiddens=[64],
            max_weight_sync_delay=200,
        )
        .reporting(min_sample_timesteps_per_iteration=1000, min_time_s_per_iteration=0)
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        started, best = time.monotonic(), 0.0
        while time.monotonic() - started < 90 and best < 150:
            best = max(best, algo.train()["episode_return_mean"])
        assert best >= 150, f"Ape-X DQN reached {best:.0f} in 90 s"
    finally:
        algo.stop()
