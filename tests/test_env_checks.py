"""The env check at build() (and disable_env_checking), envs of the old gym API, and horizon."""

from __future__ import annotations

import numpy as np
import pytest

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.env.env_checker import OldGymApi, uses_old_gym_api
from rltrainer.errors import ConfigError, EnvError
from tests.envs import DuckTypedOldEnv, FixedLengthEnv, OldApiEnv


def ppo(env, **env_config) -> PPOConfig:
    return (
        PPOConfig()
        .environment(env, env_config=env_config)
        .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=16)
        .training(train_batch_size=32, minibatch_size=32, num_epochs=1, model={"fcnet_hiddens": [8]})
        .debugging(seed=0)
    )


def test_the_old_apis_reset_and_step_are_adapted():
    env = OldGymApi(OldApiEnv({"length": 2, "truncate": True}))
    obs, info = env.reset(seed=7)
    assert obs.shape == (3,) and info == {} and env.env.seeded == 7
    assert env.step(1)[1:4] == (1.0, False, False)
    _, _, terminated, truncated, info = env.step(0)
    assert (terminated, truncated, info) == (False, True, {"TimeLimit.truncated": True})  # gym's TimeLimit
    env = OldGymApi(OldApiEnv({"length": 1}))
    env.reset()
    assert env.step(1)[2:4] == (True, False)  # any other done terminates
    assert uses_old_gym_api(OldApiEnv()) and not uses_old_gym_api(FixedLengthEnv())


@pytest.mark.parametrize("env", [OldApiEnv, "tests.envs:OldApiEnv", "tests.envs:DuckTypedOldEnv"])
def test_envs_of_the_old_gym_api_train_as_they_are(tmp_path, env):
    algo = ppo(env, length=5).reporting(storage_path=str(tmp_path)).build()
    try:
        result = algo.train()
        assert result["episode_len_mean"] == 5 and result["episode_return_mean"] >= 0
        assert algo.compute_single_action(np.zeros(3, np.float32), explore=False) in (0, 1)
    finally:
        algo.stop()


def test_a_duck_typed_env_is_no_gymnasium_env_but_runs():
    assert not isinstance(DuckTypedOldEnv(), __import__("gymnasium").Env)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ("tests.envs:BadRewardEnv", "step()'s reward must be a number, got str '1.0'"),
        ("tests.envs:WrongShapeEnv", "reset()'s observation has shape (4,), not (3,)"),
    ],
)
def test_a_broken_env_fails_the_check_at_build_saying_how_to_skip_it(tmp_path, env, message):
    with pytest.raises(EnvError) as err:
        ppo(env).reporting(storage_path=str(tmp_path)).build()
    assert message in str(err.value) and "disable_env_checking=True" in str(err.value)
    assert "failed the env check at build()" in str(err.value)


def test_disable_env_checking_skips_the_check(tmp_path):
    algo = ppo("tests.envs:BadRewardEnv").environment(disable_env_checking=True)
    algo = algo.reporting(storage_path=str(tmp_path)).build()  # the check would refuse it
    algo.stop()


def test_horizon_truncates_every_episode(tmp_path):
    algo = ppo("CartPole-v1").env_runners(horizon=5).reporting(storage_path=str(tmp_path)).build()
    try:
        result = algo.train()
        assert max(result["hist_stats"]["episode_lengths"]) <= 5 and result["episodes_this_iter"] >= 6
    finally:
        algo.stop()


@pytest.mark.parametrize("horizon", [0, -3])
def test_a_horizon_below_one_is_a_config_error(horizon):
    with pytest.raises(ConfigError, match="horizon"):
        PPOConfig().env_runners(horizon=horizon)
