"""RLlib's result keys beside ours: same numbers, in the result, its files, and stop criteria."""

from __future__ import annotations

import csv

import pytest

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.experiment import reached_stop, resolve_stop
from rltrainer.results import flatten


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=4, rollout_fragment_length=64)
        .training(train_batch_size=256, minibatch_size=256, num_epochs=2)
        .evaluation(evaluation_interval=2, evaluation_duration=3)
        .reporting(storage_path=str(tmp_path_factory.mktemp("results")))
        .debugging(seed=0)
    )
    algo = config.build()
    results = [algo.train() for _ in range(2)]
    algo.stop()
    return algo, results


def test_rllib_names_carry_the_same_numbers(trained):
    _, (_, result) = trained
    for ours, theirs in [
        ("return_mean", "reward_mean"),
        ("return_min", "reward_min"),
        ("return_max", "reward_max"),
    ]:
        assert result[f"episode_{theirs}"] == result[f"episode_{ours}"]
        assert result["sampler_results"][f"episode_{theirs}"] == result[f"episode_{ours}"]
        assert result["env_runners"][f"episode_{ours}"] == result["env_runners"][f"episode_{theirs}"]
    assert result["sampler_results"]["episode_len_mean"] == result["episode_len_mean"]
    assert result["sampler_results"]["episodes_this_iter"] == result["episodes_this_iter"]
    hist = result["hist_stats"]
    assert max(hist["episode_reward"]) == result["episode_return_max"]
    assert sum(hist["episode_lengths"]) / len(hist["episode_lengths"]) == pytest.approx(
        result["episode_len_mean"]
    )
    stats = result["info"]["learner"]["default_policy"]["learner_stats"]
    assert stats["policy_loss"] == result["policy_loss"] and stats["cur_lr"] == result["cur_lr"]
    assert result["info"]["num_env_steps_sampled"] == result["num_env_steps_sampled_lifetime"] >= 2 * 256
    assert result["num_env_steps_sampled_this_iter"] == result["num_env_steps_sampled"]
    assert result["info"]["num_env_steps_trained"] == result["num_env_steps_trained_lifetime"]


def test_rllibs_current_names_of_the_counters_and_learner_stats(trained):
    _, (_, result) = trained
    runners = result["env_runners"]
    assert runners["num_episodes"] == result["episodes_this_iter"]
    assert runners["num_episodes_lifetime"] == result["episodes_total"]
    assert runners["num_env_steps_sampled"] == result["num_env_steps_sampled"] >= 256
    assert runners["num_env_steps_sampled_lifetime"] == result["num_env_steps_sampled_lifetime"] >= 512
    assert result["learners"]["default_policy"]["policy_loss"] == result["policy_loss"]
    assert result["evaluation"]["env_runners"]["num_episodes"] == 3


def test_rllibs_metric_constants_name_keys_results_have(trained):
    """``rltrainer.utils.metrics`` holds RLlib's constants of keys rltrainer reports: each names a
    group of this result or a key a result may have (multi-agent ones included) at the top level
    or under ``env_runners/``."""
    from rltrainer.utils import metrics

    _, (_, result) = trained
    reported = set(PPOConfig.result_keys())
    names = {name: value for name, value in vars(metrics).items() if name.isupper()}
    assert {"ENV_RUNNER_RESULTS", "EPISODE_RETURN_MEAN", "NUM_ENV_STEPS_SAMPLED_LIFETIME"} <= set(names)
    for name, key in names.items():
        found = isinstance(result.get(key), dict) or key in reported or f"env_runners/{key}" in reported
        assert found, f"{name} = {key!r} names no key of a result"
    assert result[metrics.ENV_RUNNER_RESULTS][metrics.EPISODE_RETURN_MEAN] == result["episode_return_mean"]
    stop = resolve_stop({f"{metrics.ENV_RUNNER_RESULTS}/{metrics.EPISODE_RETURN_MEAN}": 1e9}, PPOConfig)
    assert reached_stop(result, stop) is None


def test_evaluation_results_carry_them_too(trained):
    _, (first, second) = trained
    assert "evaluation" not in first
    evaluation = second["evaluation"]
    assert evaluation["episode_reward_mean"] == evaluation["episode_return_mean"]
    assert evaluation["sampler_results"]["episode_reward_mean"] == evaluation["episode_return_mean"]
    assert len(evaluation["hist_stats"]["episode_reward"]) == 3


def test_timers_and_perf(trained):
    _, (_, result) = trained
    timers = result["timers"]
    assert timers["training_iteration_time_ms"] == pytest.approx(result["time_this_iter_s"] * 1000)
    phases = timers["sample_time_ms"] + timers["learn_time_ms"] + timers["synch_weights_time_ms"]
    assert 0 < phases <= timers["training_iteration_time_ms"]
    assert 0 <= result["perf"]["cpu_util_percent"] <= 100 and 0 < result["perf"]["ram_util_percent"] <= 100


def test_the_files_and_tensorboard_have_the_flat_names(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    algo, _ = trained
    with open(algo.trial_dir / "progress.csv") as f:
        header = next(csv.reader(f))
    for key in (
        "episode_reward_mean",
        "sampler_results/episode_reward_mean",
        "env_runners/episode_return_mean",
        "info/learner/default_policy/learner_stats/policy_loss",
        "timers/learn_time_ms",
        "perf/ram_util_percent",
        "evaluation/episode_reward_mean",
    ):
        assert key in header, key
    events = EventAccumulator(str(algo.trial_dir))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"rltrainer/episode_reward_mean", "rltrainer/info/learner/default_policy/learner_stats/kl"} <= tags


@pytest.mark.parametrize(
    "key",
    [
        "episode_reward_mean",
        "sampler_results/episode_reward_mean",
        "env_runners/episode_reward_mean",
        "info/learner/default_policy/learner_stats/entropy",
        "evaluation/episode_reward_mean",
        "evaluation/sampler_results/episode_reward_mean",
        "timers/training_iteration_time_ms",
        "env_runners/num_env_steps_sampled_lifetime",
        "env_runners/num_episodes_lifetime",
        "learners/default_policy/policy_loss",
        "evaluation/env_runners/num_episodes",
    ],
)
def test_stop_criteria_accept_rllib_names(trained, key):
    _, (_, result) = trained
    stop = resolve_stop({key: -1e9}, PPOConfig)
    assert reached_stop(result, stop) in stop
    assert flatten(result).get(next(iter(stop))) is not None


def test_multi_agent_stop_keys_name_a_policy_under_learners():
    stop = resolve_stop({"learners/p0/policy_loss": 1.0, "info/learner/p1/learner_stats/kl": 5.0}, PPOConfig)
    assert reached_stop({"learners": {"p0": {"policy_loss": 2.0}}}, stop) == "learners/p0/policy_loss"
    assert reached_stop({"learners": {"p0": {"policy_loss": 0.5}}}, stop) is None
