"""Every ``.evaluation()`` option: duration and unit, remote evaluation runners (the duration
split among them, a crashed one restarted), parallel evaluation (``"auto"`` included),
``evaluation_config`` overrides, custom evaluation functions, sample timeouts, forced resets,
always-attached results, the older names, and the errors for bad settings."""

from __future__ import annotations

import json
import logging
import pathlib
import time

import numpy as np
import pytest

from rltrainer.algorithms.callbacks import DefaultCallbacks
from rltrainer.algorithms.evaluation_loop import AUTO_ROUND_STEPS, split
from rltrainer.algorithms.ppo import PPO, PPOConfig
from rltrainer.errors import ConfigError, EnvError
from tests.ray_clusters import kill_actor

FIXED_LENGTH = "tests.envs:FixedLengthEnv"


def tiny_config(tmp_path, env: str = FIXED_LENGTH, **env_config) -> PPOConfig:
    return (
        PPOConfig()
        .environment(env, env_config={"length": 10, **env_config})
        .training(train_batch_size=100, minibatch_size=50, num_epochs=1, model={"fcnet_hiddens": [8]})
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )


def my_metrics(algo, eval_workers) -> dict:
    """A custom evaluation function (importable by name: to_dict() writes it as one)."""
    episodes, _ = eval_workers.local_worker().sample_episodes(num_episodes=2)
    return {
        "worker_indices": eval_workers.foreach_worker(lambda runner: runner.worker_index),
        "my_episodes": len(episodes),
        "iteration": algo.counters.training_iteration,
    }


def returns_a_list(algo, eval_workers) -> list:  # noqa: ARG001
    return [1, 2]


# --- settings ---------------------------------------------------------------------------------


def test_older_name_maps_to_evaluation_num_env_runners():
    assert PPOConfig().evaluation(evaluation_num_workers=2).evaluation_num_env_runners == 2
    assert PPOConfig.from_dict({"evaluation_num_workers": 3}).evaluation_num_env_runners == 3


def test_split_follows_rllib():
    assert split(5, [1, 2]) == {1: 3, 2: 2}
    assert split(1, [4, 5, 6]) == {4: 1}  # runners with nothing to do are not called


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("evaluation_duration", "forever"),
        ("evaluation_duration", 0),
        ("evaluation_duration_unit", "hours"),
        ("evaluation_num_env_runners", -1),
        ("evaluation_sample_timeout_s", 0),
        ("evaluation_parallel_to_training", "yes"),
        ("custom_evaluation_function", 5),
        ("custom_evaluation_function", "no_module_path"),
    ],
)
def test_bad_values_name_the_key(key, value):
    with pytest.raises(ConfigError, match=rf"evaluation\(\): invalid value for '{key}'"):
        PPOConfig().evaluation(**{key: value})


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        (
            {"evaluation_duration": "auto"},
            r"evaluation_duration='auto' .*evaluation_parallel_to_training=True",
        ),
        ({"evaluation_parallel_to_training": True}, r"needs .*evaluation_num_env_runners >= 1"),
        ({"evaluation_config": {"explore": "no"}}, r"evaluation_config: invalid value for 'explore'"),
    ],
)
def test_inconsistent_settings_fail_validation(settings, match):
    with pytest.raises(ConfigError, match=match):
        PPOConfig().environment("CartPole-v1").evaluation(**settings).validate()


def test_evaluation_config_mistakes_fail_at_build(tmp_path):
    """A typo'd key gets the key it was meant to be; an evaluation env id that cannot be resolved
    fails at build, though the local evaluation runner is only made at the first evaluation."""
    config = PPOConfig().environment("CartPole-v1").reporting(storage_path=str(tmp_path))
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['explor'\] \(did you mean 'explore'\?\)"):
        config.copy().evaluation(evaluation_interval=1, evaluation_config={"explor": False}).build()
    with pytest.raises(EnvError, match="unknown env 'Nope-v0'"):
        config.copy().evaluation(evaluation_interval=1, evaluation_config={"env": "Nope-v0"}).build()


def test_custom_evaluation_function_is_saved_by_name(tmp_path):
    data = tiny_config(tmp_path).evaluation(custom_evaluation_function=my_metrics).to_dict()
    assert data["custom_evaluation_function"] == "tests.test_evaluation_options:my_metrics"
    json.dumps(data)  # checkpoints store this dict: JSON, never pickle
    algo = PPOConfig.from_dict(data).build()
    try:
        assert algo.evaluate()["evaluation"]["my_episodes"] == 2
    finally:
        algo.stop()
    bad = tiny_config(tmp_path).evaluation(custom_evaluation_function="tests.nowhere:fn")
    with pytest.raises(ConfigError, match=r"custom_evaluation_function 'tests.nowhere:fn': cannot import"):
        bad.build()


# --- in the driver ----------------------------------------------------------------------------


def test_custom_evaluation_function_metrics_are_reported(tmp_path):
    config = tiny_config(tmp_path).evaluation(evaluation_interval=1, custom_evaluation_function=my_metrics)
    algo = config.build()
    try:
        evaluation = algo.train()["evaluation"]
        assert evaluation["my_episodes"] == 2
        assert evaluation["iteration"] == 1
        assert evaluation["worker_indices"] == [1]  # the local evaluation runner, after runner 0
        assert (evaluation["num_healthy_env_runners"], evaluation["num_env_runner_restarts"]) == (0, 0)
    finally:
        algo.stop()


def test_custom_evaluation_function_must_return_a_dict(tmp_path):
    algo = tiny_config(tmp_path).evaluation(custom_evaluation_function=returns_a_list).build()
    try:
        with pytest.raises(
            ConfigError,
            match=r"custom_evaluation_function tests.test_evaluation_options:returns_a_list must return "
            r"a dict of metrics; it returned a list: \[1, 2\]",
        ):
            algo.evaluate()
    finally:
        algo.stop()


def test_evaluation_config_overrides_env_config_and_exploration(tmp_path):
    config = tiny_config(tmp_path, env="tests.envs:SlowEnv", delay_s=0.0).evaluation(
        evaluation_duration=3,
        evaluation_config={"env_config": {"length": 7}, "exploration_config": {"type": "Random"}},
    )
    algo = config.build()
    try:
        evaluation = algo.evaluate()["evaluation"]
        assert (evaluation["episodes_this_iter"], evaluation["episode_len_mean"]) == (3, 7)
        assert algo.train()["episode_len_mean"] == 10
        group = algo.eval_env_runner_group
        # env_config is merged into the training one (as RLlib's): delay_s keeps its value.
        assert group.foreach_env(lambda env: (env.unwrapped.length, env.unwrapped.delay_s)) == [[(7, 0.0)]]
        assert type(group.local_worker().policy.exploration).__name__ == "Random"
        assert type(algo.workers.local_worker().policy.exploration).__name__ == "StochasticSampling"
        # RLlib's current accessors of the driver's runners, and its get_default_config()
        assert algo.eval_env_runner is group.local_worker()
        assert algo.env_runner is algo.env_runner_group.local_worker() is algo.workers.local_worker()
        assert type(type(algo).get_default_config()) is type(algo.config)
    finally:
        algo.stop()


@pytest.mark.parametrize("force_reset", [True, False])
def test_force_reset_envs_before_iteration(tmp_path, force_reset):
    config = tiny_config(tmp_path).evaluation(
        evaluation_duration=5,
        evaluation_duration_unit="timesteps",
        evaluation_force_reset_envs_before_iteration=force_reset,
    )
    algo = config.build()
    try:
        first = algo.evaluate()["evaluation"]
        second = algo.evaluate()["evaluation"]
        assert first["episodes_this_iter"] == 0  # 5 steps of a 10-step episode
        # Without the reset the second evaluation finishes the episode the first one began.
        assert second["episodes_this_iter"] == (0 if force_reset else 1)
        if not force_reset:
            assert second["episode_len_mean"] == 10
    finally:
        algo.stop()


@pytest.mark.parametrize("attach", [False, True])
def test_always_attach_evaluation_results(tmp_path, attach):
    config = tiny_config(tmp_path).evaluation(
        evaluation_interval=2, evaluation_duration=1, always_attach_evaluation_results=attach
    )
    algo = config.build()
    try:
        first, second, third = algo.train(), algo.train(), algo.train()
        assert "evaluation" not in first
        assert second["evaluation"]["episodes_this_iter"] == 1
        assert ("evaluation" in third) is attach
        if attach:
            assert third["evaluation"] == second["evaluation"]
    finally:
        algo.stop()


def test_evaluation_interval_zero_never_evaluates(tmp_path):
    algo = tiny_config(tmp_path).evaluation(evaluation_interval=0).build()
    try:
        assert "evaluation" not in algo.train()
    finally:
        algo.stop()


# --- remote evaluation runners -----------------------------------------------------------------


@pytest.mark.usefixtures("local_ray")
def test_remote_runners_split_the_duration_and_a_crashed_one_is_restarted(tmp_path):
    config = (
        tiny_config(tmp_path)
        .env_runners(num_env_runners=1)
        .evaluation(
            evaluation_interval=1,
            evaluation_num_env_runners=2,
            evaluation_duration=5,
            evaluation_config={"env_config": {"length": 7}},
        )
        .fault_tolerance(delay_between_env_runner_restarts_s=0)
    )
    # Bundles: the training runner's, then one per evaluation runner (Tune adds the driver's).
    assert PPO.default_resource_request(config).bundles == [{"CPU": 1.0}] * 4
    algo = config.build()
    try:
        group = algo.eval_env_runner_group
        assert algo.evaluation_workers is group
        # Worker indices (env seeds) after the training runner's: remote 2 and 3, the local one 4.
        assert group.foreach_worker(lambda runner: runner.worker_index) == [4, 2, 3]

        evaluation = algo.train()["evaluation"]
        assert evaluation["episodes_this_iter"] == 5  # 3 + 2
        assert evaluation["episode_len_mean"] == 7  # evaluation_config's env_config, in the actors
        assert evaluation["num_env_steps_sampled"] == 5 * 7
        assert (evaluation["num_healthy_env_runners"], evaluation["num_env_runner_restarts"]) == (2, 0)

        kill_actor(group.remote_workers[0])
        result = algo.train()  # training goes on; the evaluation still runs all 5 episodes
        assert result["evaluation"]["episodes_this_iter"] == 5
        assert (result["num_healthy_env_runners"], result["num_env_runner_restarts"]) == (1, 0)
        # The replacement evaluates once it is up: within that iteration on an idle machine, later
        # on a busy one (it is probed again each round, not killed for starting slowly).
        group.probe_unhealthy_env_runners(timeout_seconds=600)

        # Both runners again, the unit switched to timesteps: 31 steps as 16 + 15.
        algo.config.evaluation(evaluation_duration_unit="timesteps", evaluation_duration=31)
        evaluation = algo.evaluate()["evaluation"]
        assert evaluation["num_env_steps_sampled"] == 31
        assert (evaluation["num_healthy_env_runners"], evaluation["num_env_runner_restarts"]) == (2, 1)
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_parallel_evaluation_runs_during_the_training_step_on_the_weights_before_it(tmp_path):
    stamps = tmp_path / "evaluation_steps.txt"
    config = (
        tiny_config(tmp_path)
        .evaluation(
            evaluation_interval=1,
            evaluation_num_env_runners=1,
            evaluation_duration=2,
            evaluation_parallel_to_training=True,
            evaluation_config={"env": "tests.envs:TimestampEnv", "env_config": {"path": str(stamps)}},
        )
        .reporting(min_time_s_per_iteration=2.0)
    )
    algo = config.build()
    try:
        group = algo.eval_env_runner_group
        group.foreach_worker(lambda runner: runner.ping(), local_worker=False)  # the actor is up
        weights_before = algo.get_policy().get_weights()
        started = time.time()
        result = algo.train()
        returned = time.time()
        training_ended = started + result["time_this_iter_s"]
        times = [float(line) for line in stamps.read_text().split()]
        assert result["evaluation"]["episodes_this_iter"] == 2
        assert len(times) == 2 * 10
        # Evaluation starts while the training step runs and train() waits for its end. (On a loaded
        # machine the evaluation actor may start late and end a little after the training step.)
        assert started < min(times) < training_ended and max(times) < returned

        (evaluated,) = group.foreach_worker(lambda runner: runner.get_weights(), local_worker=False)
        weights_after = algo.get_policy().get_weights()
        assert all(np.array_equal(evaluated[k], weights_before[k]) for k in weights_before)
        assert not all(np.array_equal(evaluated[k], weights_after[k]) for k in weights_after)
    finally:
        algo.stop()


class WaitForTwoEvaluationRounds(DefaultCallbacks):
    """Holds the training step (in the driver's env runner) until the evaluation env has stepped
    two ``"auto"`` rounds: the evaluation must go on for as long as training runs, however slow
    the machine, instead of racing a fixed training time."""

    def on_sample_end(self, *, worker, samples, **kwargs) -> None:  # noqa: ARG002
        stamps = pathlib.Path(worker.config.evaluation_config["env_config"]["path"])
        deadline = time.monotonic() + 120
        while not stamps.exists() or len(stamps.read_text().split()) < 2 * AUTO_ROUND_STEPS:
            assert time.monotonic() < deadline, "the evaluation did not run while training ran"
            time.sleep(0.01)


@pytest.mark.usefixtures("local_ray")
def test_auto_duration_evaluates_as_long_as_training_runs(tmp_path):
    stamps = tmp_path / "stamps"
    config = (
        tiny_config(tmp_path)
        .evaluation(
            evaluation_interval=1,
            evaluation_num_env_runners=1,
            evaluation_duration="auto",
            evaluation_parallel_to_training=True,
            evaluation_config={
                "env": "tests.envs:TimestampEnv",
                "env_config": {"length": 10, "path": str(stamps)},
            },
        )
        .callbacks(WaitForTwoEvaluationRounds)
    )
    algo = config.build()
    try:
        algo.eval_env_runner_group.foreach_worker(lambda runner: runner.ping(), local_worker=False)
        evaluation = algo.train()["evaluation"]
        steps = evaluation["num_env_steps_sampled"]
        # Whole rounds of AUTO_ROUND_STEPS while the training step waited for two, then the one
        # under way when it ended; nothing sampled after train() returned.
        assert steps % AUTO_ROUND_STEPS == 0
        assert 2 * AUTO_ROUND_STEPS <= steps == len(stamps.read_text().split())
        assert evaluation["episodes_this_iter"] == steps // 10
        assert evaluation["episode_len_mean"] == 10
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_evaluation_sample_timeout_ends_the_evaluation(tmp_path, caplog):
    config = tiny_config(tmp_path).evaluation(
        evaluation_num_env_runners=1,
        evaluation_duration=1,
        evaluation_sample_timeout_s=0.5,
        evaluation_config={"env": "tests.envs:SlowEnv", "env_config": {"delay_s": 0.2}},
    )
    algo = config.build()
    try:
        algo.eval_env_runner_group.foreach_worker(lambda runner: runner.ping(), local_worker=False)
        with caplog.at_level(logging.WARNING, logger="rltrainer"):
            started = time.monotonic()
            evaluation = algo.evaluate()["evaluation"]
        assert time.monotonic() - started < 5  # not the 2 s episode, nor a hang
        assert evaluation["episodes_this_iter"] == 0
        assert evaluation["num_healthy_env_runners"] == 0  # replaced after the restart delay
        assert "did not finish evaluation within evaluation_sample_timeout_s=0.5" in caplog.text
    finally:
        algo.stop()
