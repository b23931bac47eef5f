"""Env specs (gymnasium ids, registered creators, import strings, classes) and observation/action spaces."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from rltrainer.algorithms.ppo import PPO, PPOConfig
from rltrainer.env import EnvContext, register_env, registered_envs
from rltrainer.errors import EnvError
from tests import envs


def tiny_config(tmp_path, env, **env_kwargs) -> PPOConfig:
    return (
        PPOConfig()
        .environment(env, **env_kwargs)
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1, model={"fcnet_hiddens": [8]})
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )


def train_once(config: PPOConfig) -> tuple[PPO, dict]:
    algo = config.build()
    try:
        result = algo.train()
    finally:
        algo.stop()
    return algo, result


def assert_trained(result: dict) -> None:
    # How many steps one iteration samples is tested in test_api.py; here: something was trained.
    assert result["training_iteration"] == 1
    assert result["num_env_steps_sampled"] > 0
    assert result["timesteps_total"] == result["num_env_steps_sampled"]
    assert result["num_env_steps_trained"] == result["num_env_steps_sampled"]
    assert np.isfinite(result["policy_loss"])
    assert np.isfinite(result["vf_loss"])


def test_gymnasium_id(tmp_path):
    algo, result = train_once(tiny_config(tmp_path, "CartPole-v1"))
    assert_trained(result)
    assert algo.observation_space == gym.spaces.Box(
        algo.observation_space.low, algo.observation_space.high, (4,), np.float32
    )
    assert algo.action_space == gym.spaces.Discrete(2)


def test_gymnasium_id_gets_env_config(tmp_path):
    config = tiny_config(tmp_path, "CartPole-v1", env_config={"sutton_barto_reward": True})
    _, result = train_once(config)
    # With Sutton and Barto's reward every step before termination is worth 0 and termination -1.
    assert result["episode_return_max"] <= 0


def test_registered_creator_receives_env_context(tmp_path):
    seen: list[EnvContext] = []

    def creator(ctx: EnvContext) -> gym.Env:
        seen.append(ctx)
        return envs.FixedLengthEnv(ctx)

    register_env("test-env-context", creator)
    assert "test-env-context" in registered_envs()
    config = tiny_config(tmp_path, "test-env-context", env_config={"length": 4, "tag": "x"})
    config.env_runners(num_envs_per_env_runner=3)
    _, result = train_once(config)
    assert_trained(result)
    assert result["episode_len_mean"] == 4
    assert len(seen) == 3
    for ctx in seen:
        assert isinstance(ctx, EnvContext)
        assert dict(ctx) == {"length": 4, "tag": "x"}
        assert ctx["tag"] == "x"
        assert ctx.worker_index == 0
        assert ctx.num_workers == 0
    assert sorted(ctx.vector_index for ctx in seen) == [0, 1, 2]


def test_import_string(tmp_path):
    _, result = train_once(tiny_config(tmp_path, "tests.envs:DictObsEnv", env_config={"length": 5}))
    assert_trained(result)
    assert result["episode_len_mean"] == 5


def test_env_class(tmp_path):
    algo, result = train_once(tiny_config(tmp_path, envs.TupleObsEnv, env_config={"length": 6}))
    assert_trained(result)
    assert result["episode_len_mean"] == 6
    assert algo.observation_space == envs.TupleObsEnv.observation_space


def test_unknown_env_suggests_names(tmp_path):
    with pytest.raises(ValueError, match=r"unknown env 'CartPol-v1'.*Did you mean: CartPole-v1"):
        tiny_config(tmp_path, "CartPol-v1").build()


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("tests.no_such_module:Env", "cannot import module 'tests.no_such_module'"),
        ("tests.envs:NoSuchEnv", "has no attribute 'NoSuchEnv'"),
        ("tests.envs:NotAnEnv", "is not a gymnasium.Env subclass"),
    ],
)
def test_bad_import_string(tmp_path, spec, match):
    with pytest.raises(ValueError, match=match):
        tiny_config(tmp_path, spec).build()


def test_creator_returning_non_env_fails(tmp_path):
    register_env("test-not-an-env", lambda ctx: envs.NotAnEnv(ctx))
    with pytest.raises(ValueError, match="not a gymnasium.Env"):
        tiny_config(tmp_path, "test-not-an-env").build()


def test_only_the_creators_an_actor_needs_travel_to_it():
    """An actor gets its env's creator and those of registered names in its env_config, not every
    creator of the driver (another script's creator may import Ray Tune, or fail to unpickle)."""
    from rltrainer.env.registry import creators_for

    def outer(ctx):
        return envs.FixedLengthEnv(ctx)

    register_env("test-travel-outer", outer)
    register_env("test-travel-inner", lambda ctx: envs.FixedLengthEnv(ctx))
    register_env("test-travel-other", lambda ctx: envs.FixedLengthEnv(ctx))
    both = creators_for("test-travel-outer", {"inner": "test-travel-inner", "length": 3, "id": "CartPole-v1"})
    assert sorted(both) == ["test-travel-inner", "test-travel-outer"]
    assert both["test-travel-outer"] is outer
    assert creators_for("CartPole-v1", None) == {}
    assert creators_for(envs.FixedLengthEnv, {}) == {}


def test_register_env_rejects_non_callable():
    with pytest.raises(ValueError, match="must be callable"):
        register_env("test-bad-creator", "CartPole-v1")


@pytest.mark.parametrize(
    "env_class",
    [envs.BoxObsEnv, envs.DiscreteObsEnv, envs.MultiDiscreteObsEnv, envs.DictObsEnv, envs.TupleObsEnv],
)
@pytest.mark.parametrize("num_envs", [1, 2])
def test_observation_spaces_train(tmp_path, env_class, num_envs):
    config = tiny_config(tmp_path, env_class, env_config={"length": 5})
    config.env_runners(num_envs_per_env_runner=num_envs)
    algo = config.build()
    try:
        result = algo.train()
        assert_trained(result)
        assert result["episode_len_mean"] == 5
        space = env_class.observation_space
        space.seed(0)
        for _ in range(3):
            assert algo.compute_single_action(space.sample()) in algo.action_space
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("normalize_actions", "clip_actions"), [(True, False), (False, True)], ids=["normalize", "clip"]
)
def test_box_actions_stay_within_bounds(tmp_path, normalize_actions, clip_actions):
    register_env("test-recording-pendulum", lambda _: envs.RecordingActionsWrapper(gym.make("Pendulum-v1")))
    config = tiny_config(
        tmp_path,
        "test-recording-pendulum",
        normalize_actions=normalize_actions,
        clip_actions=clip_actions,
    )
    # A wide initial policy (log std 0 on a [-1, 1] scale) makes out-of-bounds samples certain.
    config.training(train_batch_size=128, minibatch_size=64)
    envs.RECORDED_ACTIONS.clear()
    algo = config.build()
    try:
        result = algo.train()
        assert_trained(result)
        actions = np.array(envs.RECORDED_ACTIONS)
        assert actions.shape == (len(actions), 1)
        assert len(actions) >= result["num_env_steps_sampled"]
        assert actions.min() >= -2.0
        assert actions.max() <= 2.0
        assert actions.std() > 0.1  # explores rather than sitting on a bound
        obs = np.array([1.0, 0.0, 0.0], np.float32)
        for explore in (True, False):
            action = algo.compute_single_action(obs, explore=explore)
            assert action.shape == (1,)
            assert -2.0 <= action[0] <= 2.0
    finally:
        algo.stop()


def test_box_actions_rescaled_to_bounds(tmp_path):
    """With normalize_actions the policy's [-1, 1] maps linearly onto [low, high]."""
    algo = tiny_config(tmp_path, "Pendulum-v1").build()
    try:
        policy = algo.get_policy()
        np.testing.assert_allclose(
            policy.to_env_actions(np.array([[-1.0], [0.0], [0.5], [1.0], [3.0]], np.float32)),
            [[-2.0], [0.0], [1.0], [2.0], [2.0]],
        )
    finally:
        algo.stop()


NO_RAY_SCRIPT = """
import sys
from rltrainer.algorithms.ppo import PPOConfig
config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0)
          .training(train_batch_size=128, minibatch_size=64, num_epochs=1)
          .evaluation(evaluation_interval=1, evaluation_duration=1).reporting(storage_path=sys.argv[1]))
algo = config.build()
algo.train()
algo.save()
algo.stop()
import ray
print("ray initialized:", ray.is_initialized())
"""


def test_no_ray_without_env_runners(tmp_path):
    # In a fresh process: the distributed tests keep a session-wide Ray connection in this one.
    done = subprocess.run(
        [sys.executable, "-c", NO_RAY_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "ray initialized: False" in done.stdout


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])  # with and without a vector entry point
def test_env_config_the_env_does_not_accept(tmp_path, env):
    with pytest.raises(ValueError, match=f"could not create env '{env}' with env_config {{'bogus': 1}}"):
        tiny_config(tmp_path, env, env_config={"bogus": 1}).build()


def test_failed_sub_environment_is_recreated_and_its_episode_dropped(tmp_path):
    # 10-step episodes in 2 envs; a crash every 25 steps (counted across the process).
    envs.FailingEnv.calls = 0
    config = tiny_config(tmp_path, "tests.envs:FailingEnv", env_config={"fail_every": 25})
    config.env_runners(num_envs_per_env_runner=2).fault_tolerance(restart_failed_sub_environments=True)
    algo = config.build()
    try:
        results = [algo.train() for _ in range(4)]
        runner = algo.workers.local_worker()
        assert envs.FailingEnv.calls >= 4 * 25  # several crashes happened
        # Every reported episode is a whole one: crashed episodes are dropped, not cut short.
        assert all(r["episode_len_mean"] == 10 for r in results)
        assert all(r["num_env_steps_sampled"] >= 64 for r in results)
        rollout, _ = runner.sample()
        assert rollout.num_steps >= 64
    finally:
        algo.stop()


def test_failing_env_without_restarts_names_the_error(tmp_path):
    envs.FailingEnv.calls = 0  # the check at build() takes step 1; sampling crashes at step 3
    algo = tiny_config(tmp_path, "tests.envs:FailingEnv", env_config={"fail_every": 3}).build()
    try:
        # One line (an EnvError: the CLI says it without a traceback), with where the env raised.
        expected = (
            r"env 'tests.envs:FailingEnv': step\(\) raised RuntimeError: simulated env crash "
            r"\(at .*envs.py:\d+ in step\)"
        )
        with pytest.raises(EnvError, match=expected):
            algo.train()
    finally:
        algo.stop()
