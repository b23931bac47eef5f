"""A3C: a runner's gradient applied in the driver is A2C's step, learning CartPole with two
asynchronous runners, RLlib's names and bad settings."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from rltrainer.algorithms.a2c.a2c_learner import A2CLearner
from rltrainer.algorithms.a3c import A3CConfig
from rltrainer.algorithms.a3c.a3c import A3CLearner, runner_gradient
from rltrainer.core.learner import make_learner
from rltrainer.errors import ConfigError


def test_a_runner_gradient_applied_in_the_driver_is_a2cs_step():
    config = (
        A3CConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=2, rollout_fragment_length=16)
        .training(grad_clip=0.5)  # clipping happens in the runner, as A2C clips before its step
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        runner = algo.env_runner_group.local_worker()
        driver = algo.learner_group.local_learner
        space = (runner.observation_space, runner.action_space)
        a2c = make_learner(A2CLearner, *space, config, "cpu")
        weights = {k: v.numpy() for k, v in driver.get_weights().items()}
        a2c.set_weights(weights)
        (gradient, stats, steps), _, _ = runner_gradient(runner, weights)
        assert steps == 32 and np.isfinite(stats["policy_loss"])
        driver.apply_gradient(gradient, timestep=0)
        # A2C on the same fragment: the runner's learner kept it (the last rollout it sampled)
        rollout = runner._a3c_learner.last_rollout
        a2c.update([rollout], timestep=0)
        for name, value in a2c.get_weights().items():
            torch.testing.assert_close(driver.get_weights()[name], value, rtol=1e-5, atol=1e-6)
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_learns_cartpole_with_two_asynchronous_runners():
    config = (
        A3CConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=2, num_envs_per_env_runner=4, rollout_fragment_length=16)
        .training(lr=5e-4, model={"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"})
        .reporting(min_time_s_per_iteration=1, metrics_num_episodes_for_smoothing=20)
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        started, best = time.monotonic(), 0.0
        while time.monotonic() - started < 90 and best < 150:
            result = algo.train()
            best = max(best, result["episode_return_mean"])
        assert best >= 150, f"A3C reached {best:.0f} in 90 s"
        assert result["num_gradient_updates"] > 10 and result["gradient_lag_updates"] >= 0
        # The driver's runner acts with the newest weights (compute_single_action).
        local = algo.get_policy().get_weights()
        for name, value in algo.learner_group.get_weights().items():
            np.testing.assert_array_equal(local[name], value.numpy())
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("change", "message"),
    [({"microbatch_size": 8}, "microbatch_size"), ({"num_learners": 1}, "num_learners=0")],
)
def test_bad_settings_fail_at_build(change, message):
    with pytest.raises(ConfigError, match=message):
        A3CConfig().environment("CartPole-v1").update_from_dict(change).validate()


def test_rllib_defaults():
    config = A3CConfig()
    assert (config.rollout_fragment_length, config.lr, config.grad_clip) == (10, 0.0001, 40.0)
    assert (config.vf_loss_coeff, config.entropy_coeff, config.min_time_s_per_iteration) == (0.5, 0.01, 5.0)
    assert issubclass(A3CLearner, A2CLearner)
