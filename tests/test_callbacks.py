"""Callbacks: where each hook runs, what it sees, what it may change, and how failures read."""

from __future__ import annotations

import csv
import json
import os
import warnings

import numpy as np
import pytest

from rltrainer.algorithms import Algorithm
from rltrainer.algorithms.callbacks import DefaultCallbacks, MultiCallbacks, make_multi_callbacks
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.env.env_runner import EnvRunner
from rltrainer.errors import CallbackError, ConfigError

DRIVER_PID = os.getpid()


class EpisodeMetrics(DefaultCallbacks):
    """Custom metrics from episode hooks, checked against the runner's own statistics."""

    def on_episode_start(self, *, episode, env_index, **kwargs):
        assert episode.length == 0 and episode.env_index == env_index
        episode.user_data["first_obs"] = episode.last_observation
        episode.user_data["angles"] = []

    def on_episode_step(self, *, episode, **kwargs):
        episode.user_data["angles"].append(abs(float(episode.last_observation[2])))

    def on_episode_end(self, *, episode, **kwargs):
        assert len(episode.user_data["angles"]) == episode.length
        assert episode.last_info is not None and (episode.terminated or episode.truncated)
        episode.custom_metrics["length"] = episode.length
        episode.custom_metrics["reward"] = episode.total_reward  # CartPole: 1 per step
        episode.custom_metrics["max_angle"] = max(episode.user_data["angles"])
        episode.custom_metrics["pid"] = os.getpid()
        episode.hist_data["lengths"] = [episode.length]


class EndOnly(DefaultCallbacks):
    def on_episode_end(self, *, episode, **kwargs):
        episode.custom_metrics["length"] = episode.length


def small_ppo(tmp_path, callbacks, **runners):
    runners = {"num_env_runners": 0, "num_envs_per_env_runner": 4, "rollout_fragment_length": 64, **runners}
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(**runners)
        .training(train_batch_size=256, minibatch_size=128, num_epochs=2)
        .reporting(storage_path=str(tmp_path), metrics_num_episodes_for_smoothing=1000)
        .callbacks(callbacks)
        .debugging(seed=0)
    )


def check_episode_metrics(result):
    custom = result["custom_metrics"]
    assert custom["length_mean"] == pytest.approx(result["episode_len_mean"])
    assert custom["reward_mean"] == pytest.approx(result["episode_return_mean"])
    assert custom["length_min"] == result["episode_return_min"]
    assert custom["length_max"] == result["episode_return_max"]
    assert 0 < custom["max_angle_mean"] < 0.25  # CartPole ends at 0.2095 rad
    assert sorted(result["hist_stats"]["lengths"])[-1] == result["episode_return_max"]


def test_episode_hooks_in_the_driver_feed_custom_metrics(tmp_path):
    algo = small_ppo(tmp_path, EpisodeMetrics).build()
    try:
        for _ in range(3):
            result = algo.train()
        check_episode_metrics(result)
        assert result["custom_metrics"]["pid_min"] == DRIVER_PID
        # result.json keeps the nesting; progress.csv and TensorBoard get flat keys
        last = json.loads((algo.trial_dir / "result.json").read_text().splitlines()[-1])
        assert last["custom_metrics"]["length_mean"] == result["custom_metrics"]["length_mean"]
        with open(algo.trial_dir / "progress.csv") as f:
            assert "custom_metrics/length_mean" in next(csv.reader(f))
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_episode_hooks_run_inside_remote_env_runners(tmp_path):
    algo = small_ppo(tmp_path, EpisodeMetrics, num_env_runners=2, num_envs_per_env_runner=2).build()
    try:
        for _ in range(2):
            result = algo.train()
        check_episode_metrics(result)
        assert result["custom_metrics"]["pid_min"] != DRIVER_PID
    finally:
        algo.stop()


def test_episode_end_only_keeps_the_vectorized_path_and_keep_per_episode(tmp_path):
    config = small_ppo(tmp_path, EndOnly).reporting(keep_per_episode_custom_metrics=True)
    algo = config.build()
    try:
        runner = algo.workers.local_worker()
        assert runner._tracker is not None and not runner._tracker.per_step
        result = algo.train()
        lengths = result["custom_metrics"]["length"]
        assert isinstance(lengths, list) and np.mean(lengths) == pytest.approx(result["episode_len_mean"])
    finally:
        algo.stop()


def test_no_callbacks_no_tracker(tmp_path):
    algo = small_ppo(tmp_path, DefaultCallbacks).build()
    try:
        assert algo.workers.local_worker()._tracker is None
        assert algo.train()["custom_metrics"] == {}
    finally:
        algo.stop()


class TenfoldRewards(DefaultCallbacks):
    """Rewrites each episode piece's rewards; records what each piece looked like."""

    pieces: list = []

    def on_postprocess_trajectory(self, *, postprocessed_batch, original_batches, episode, **kwargs):
        batch = postprocessed_batch
        assert set(np.unique(batch["eps_id"])) == {episode.episode_id}
        dones = batch["terminateds"] | batch["truncateds"]
        assert not dones[:-1].any()  # an episode's piece: only its last step may end it
        (_, _, original) = original_batches["agent0"]
        TenfoldRewards.pieces.append((len(batch["rewards"]), bool(dones[-1])))
        batch["rewards"] = original["rewards"] * 10.0


def test_postprocess_trajectory_rewrites_rewards_per_episode_piece(tmp_path):
    TenfoldRewards.pieces = []
    config = small_ppo(tmp_path, TenfoldRewards, num_envs_per_env_runner=3, rollout_fragment_length=100)
    runner = EnvRunner(config)
    try:
        rollout, episodes = runner.sample()
        valid = rollout.valid
        assert (rollout.rewards[valid] == 10.0).all()
        assert sum(n for n, _ in TenfoldRewards.pieces) == valid.sum()
        assert sum(ended for _, ended in TenfoldRewards.pieces) == len(episodes) > 0
        assert [e.episode_return for e in episodes] == [float(e.episode_len) for e in episodes]  # raw
    finally:
        runner.stop()


class LearnAndTrainHooks(DefaultCallbacks):
    calls: list = []

    def on_algorithm_init(self, *, algorithm, **kwargs):
        LearnAndTrainHooks.calls.append(("init", algorithm.counters.training_iteration))

    def on_sample_end(self, *, samples, **kwargs):
        assert samples.count == samples["valid"].sum() > 0
        samples["rewards"] = np.zeros_like(samples["rewards"])

    def on_learn_on_batch(self, *, policy, train_batch, result, **kwargs):
        assert policy.model is policy.module
        result["batch_rewards_seen"] = float(np.abs(train_batch["value_targets"]).max())
        result["train_batch_rows"] = len(train_batch)

    def on_train_result(self, *, algorithm, result, **kwargs):
        result["my_key"] = result["training_iteration"] * 2

    def on_checkpoint_loaded(self, *, algorithm, **kwargs):
        LearnAndTrainHooks.calls.append(("loaded", algorithm.counters.training_iteration))


def test_sample_learn_train_init_and_checkpoint_hooks(tmp_path):
    LearnAndTrainHooks.calls = []
    algo = small_ppo(tmp_path, LearnAndTrainHooks).build()
    try:
        result = algo.train()
        assert result["my_key"] == 2
        assert result["train_batch_rows"] == result["num_env_steps_trained"] >= 256
        # on_sample_end zeroed every reward: the value targets are the bootstrapped values only,
        # which start near 0 (a fresh value head)
        assert result["batch_rewards_seen"] < 1.0
        last = json.loads((algo.trial_dir / "result.json").read_text().splitlines()[-1])
        assert last["my_key"] == 2
        checkpoint = algo.save()
    finally:
        algo.stop()
    assert Algorithm.from_checkpoint(checkpoint).config.callbacks_class is LearnAndTrainHooks
    assert LearnAndTrainHooks.calls == [("init", 0), ("init", 0), ("loaded", 1)]


class SeesEnvs(DefaultCallbacks):
    def on_environment_created(self, *, env_runner, env, env_context, **kwargs):
        env_runner.created = [env.num_envs]

    def on_sub_environment_created(self, *, worker, sub_environment, env_context, env_index, **kwargs):
        assert env_context.vector_index == env_index and env_context.worker_index == worker.worker_index
        worker.created.append(sub_environment.spec.id)


def test_environment_hooks_see_each_env_object(tmp_path):
    # CartPole is natively batched; a hook that wants each env object gets a vector of copies.
    runner = EnvRunner(small_ppo(tmp_path, SeesEnvs), worker_index=2)
    try:
        assert runner.created == [4, "CartPole-v1", "CartPole-v1", "CartPole-v1", "CartPole-v1"]
        assert runner.sample()[0].num_steps >= 256
    finally:
        runner.stop()


class First(DefaultCallbacks):
    def on_train_result(self, *, result, **kwargs):
        result["order"] = ["first"]


class Second(DefaultCallbacks):
    def on_train_result(self, *, result, **kwargs):
        result["order"].append("second")


@pytest.mark.parametrize("spec", [[First, Second], make_multi_callbacks([First, Second])])
def test_a_list_of_callbacks_runs_in_order_and_saves_as_class_paths(tmp_path, spec):
    config = small_ppo(tmp_path, spec)
    assert config.to_dict()["callbacks_class"] == [
        "tests.test_callbacks:First",
        "tests.test_callbacks:Second",
    ]
    algo = config.build()
    try:
        assert isinstance(algo.callbacks, MultiCallbacks)
        assert algo.train()["order"] == ["first", "second"]
    finally:
        algo.stop()


def test_callbacks_from_a_class_path_and_the_older_key():
    config = PPOConfig.from_dict({"callbacks": "tests.test_callbacks:First"})
    assert config.callbacks_class is First
    assert PPOConfig().callbacks("tests.test_callbacks.Second").callbacks_class is Second
    with pytest.raises(ConfigError, match=r"callbacks_class.*cannot import 'tests.nowhere:X'"):
        PPOConfig().callbacks("tests.nowhere:X")
    with pytest.raises(ConfigError, match="DefaultCallbacks subclass"):
        PPOConfig().callbacks(dict)


def test_a_misspelled_hook_is_a_typo_warning():
    class Typo(DefaultCallbacks):
        def on_episode_ned(self, **kwargs):
            pass

    with pytest.warns(UserWarning, match=r"Typo.on_episode_ned is not a callback hook.*'on_episode_end'"):
        PPOConfig().callbacks(Typo)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PPOConfig().callbacks(EpisodeMetrics)


class FailsAtEpisodeEnd(DefaultCallbacks):
    def on_episode_end(self, *, episode, **kwargs):
        raise KeyError("missing_metric")


class FailsAtTrainResult(DefaultCallbacks):
    def on_train_result(self, **kwargs):
        raise RuntimeError("boom")


def test_a_failing_hook_names_the_hook_and_class(tmp_path):
    algo = small_ppo(tmp_path, FailsAtEpisodeEnd, rollout_fragment_length=200).build()
    try:
        with pytest.raises(
            CallbackError,
            match=r"FailsAtEpisodeEnd.on_episode_end raised KeyError: 'missing_metric' in env runner 0",
        ):
            algo.train()
    finally:
        algo.stop()
    algo = small_ppo(tmp_path, FailsAtTrainResult).build()
    try:
        with pytest.raises(
            CallbackError, match=r"FailsAtTrainResult.on_train_result raised RuntimeError: boom$"
        ):
            algo.train()
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_a_failing_hook_in_a_remote_runner_stops_training_without_restarts(tmp_path):
    config = small_ppo(tmp_path, FailsAtEpisodeEnd, num_env_runners=1, rollout_fragment_length=200)
    algo = config.build()
    try:
        with pytest.raises(
            CallbackError, match=r"FailsAtEpisodeEnd.on_episode_end raised KeyError.*env runner 1"
        ):
            algo.train()
        assert algo.workers.num_restarts == 0
    finally:
        algo.stop()


def test_custom_metrics_may_be_stop_criteria():
    from rltrainer.experiment import reached_stop, resolve_stop

    stop = resolve_stop({"custom_metrics/length_mean": 20}, PPOConfig)
    assert reached_stop({"custom_metrics": {"length_mean": 25.0}}, stop) == "custom_metrics/length_mean"
    assert reached_stop({"custom_metrics": {}}, stop) is None


class EvaluationHooks(EndOnly):
    def on_evaluate_start(self, *, algorithm, **kwargs):
        algorithm.evaluations_started = getattr(algorithm, "evaluations_started", 0) + 1

    def on_evaluate_end(self, *, algorithm, evaluation_metrics, **kwargs):
        evaluation_metrics["evaluation"]["seen_by_hook"] = algorithm.evaluations_started


def test_evaluation_hooks_and_evaluation_custom_metrics(tmp_path):
    config = small_ppo(tmp_path, EvaluationHooks).evaluation(evaluation_interval=1, evaluation_duration=3)
    algo = config.build()
    try:
        evaluation = algo.train()["evaluation"]
        assert evaluation["seen_by_hook"] == 1 and evaluation["episodes_this_iter"] == 3
        assert evaluation["custom_metrics"]["length_mean"] == pytest.approx(evaluation["episode_len_mean"])
    finally:
        algo.stop()
