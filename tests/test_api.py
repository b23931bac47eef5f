"""The Algorithm Training API: inference, policies, workers, evaluation, train() results, results folder."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from rltrainer.algorithms.ppo import PPO, PPOConfig
from rltrainer.env import register_env
from rltrainer.errors import RLTrainerError
from tests import envs

RESULT_KEYS = [
    "training_iteration",
    "timesteps_total",
    "time_this_iter_s",
    "time_total_s",
    "episode_return_mean",
    "episode_return_min",
    "episode_return_max",
    "episode_len_mean",
    "episodes_this_iter",
    "num_env_steps_sampled",
    "num_env_steps_trained",
    "policy_loss",
    "vf_loss",
    "entropy",
    "kl",
    "cur_lr",
]

EPISODE_LEN = 10
register_env("test-recording", lambda ctx: envs.RecordingEnv({"length": EPISODE_LEN, **ctx}))


def tiny_config(tmp_path, env="CartPole-v1") -> PPOConfig:
    return (
        PPOConfig()
        .environment(env)
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1, model={"fcnet_hiddens": [8]})
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )


@pytest.fixture
def algo(tmp_path):
    algo = tiny_config(tmp_path).build()
    yield algo
    algo.stop()


def cartpole_observations(n: int = 5) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.uniform(-0.05, 0.05, 4).astype(np.float32) for _ in range(n)]


# --- inference -----------------------------------------------------------------------


def test_compute_single_action_explore_false_is_deterministic(algo):
    obs = cartpole_observations(1)[0]
    actions = {int(algo.compute_single_action(obs, explore=False)) for _ in range(20)}
    assert len(actions) == 1
    assert actions <= {0, 1}


def test_compute_single_action_explore_true_samples(algo):
    obs = cartpole_observations(1)[0]
    # The initial policy is nearly uniform: 50 samples contain both actions.
    actions = {int(algo.compute_single_action(obs, explore=True)) for _ in range(50)}
    assert actions == {0, 1}
    assert algo.compute_single_action(obs) in algo.action_space  # explore from the config


def test_compute_single_action_full_fetch(algo):
    algo.train()
    for obs in cartpole_observations():
        action, state, extra = algo.compute_single_action(obs, explore=False, full_fetch=True)
        assert state == []
        assert set(extra) >= {"action_logp", "action_dist_inputs", "vf_preds"}
        logits = np.asarray(extra["action_dist_inputs"], dtype=np.float64)
        assert logits.shape == (2,)
        assert action == int(np.argmax(logits))
        log_softmax = logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
        assert float(extra["action_logp"]) == pytest.approx(log_softmax[action], abs=1e-5)
        assert np.ndim(extra["vf_preds"]) == 0
        assert math.isfinite(float(extra["vf_preds"]))
        assert action == algo.compute_single_action(obs, explore=False)


def test_compute_actions_list_and_dict(algo):
    observations = cartpole_observations(4)
    singles = [algo.compute_single_action(obs, explore=False) for obs in observations]
    actions = algo.compute_actions(observations, explore=False)
    assert len(actions) == 4
    assert [int(a) for a in actions] == [int(a) for a in singles]
    by_key = algo.compute_actions({f"agent{i}": obs for i, obs in enumerate(observations)}, explore=False)
    assert isinstance(by_key, dict)
    assert list(by_key) == ["agent0", "agent1", "agent2", "agent3"]
    assert [int(by_key[f"agent{i}"]) for i in range(4)] == [int(a) for a in singles]


def test_an_unknown_policy_id_is_named_not_ignored(algo):
    """A single-agent algorithm has one policy, ``default_policy``: another id is a mistake (a
    multi-agent id in single-agent code), refused as a multi-agent algorithm refuses it."""
    obs = [0.0, 0.0, 0.0, 0.0]
    assert algo.get_policy("default_policy") is algo.get_policy()
    for call in (
        lambda: algo.get_policy("main"),
        lambda: algo.compute_single_action(obs, policy_id="main"),
        lambda: algo.compute_actions([obs], policy_id="main"),
        lambda: algo.env_runner_group.local_worker().get_policy("main"),
    ):
        with pytest.raises(KeyError, match="no policy 'main'; policies: default_policy"):
            call()


def test_compute_actions_full_fetch(algo):
    actions, state, extra = algo.compute_actions(cartpole_observations(3), explore=False, full_fetch=True)
    assert len(actions) == 3
    assert state == []
    assert np.shape(extra["action_logp"]) == (3,)
    assert np.shape(extra["action_dist_inputs"]) == (3, 2)
    assert np.shape(extra["vf_preds"]) == (3,)


def test_compute_single_action_dict_observation(tmp_path):
    algo = tiny_config(tmp_path, env=envs.DictObsEnv).build()
    try:
        space = envs.DictObsEnv.observation_space
        space.seed(0)
        for _ in range(3):
            assert algo.compute_single_action(space.sample(), explore=False) in algo.action_space
    finally:
        algo.stop()


# --- policy and workers ------------------------------------------------------------------


def test_policy_weights_round_trip(algo):
    policy = algo.get_policy()
    assert isinstance(policy.model, torch.nn.Module)
    assert policy.dist_class is not None
    weights = policy.get_weights()
    assert {"pi.0.weight", "pi.0.bias", "vf.0.weight"} <= set(weights)
    assert all(isinstance(v, np.ndarray) for v in weights.values())
    shifted = {k: v + 0.5 for k, v in weights.items()}
    policy.set_weights(shifted)
    for key, value in policy.get_weights().items():
        np.testing.assert_array_equal(value, shifted[key], err_msg=key)
    # get_weights returns copies: changing them does not change the policy.
    got = policy.get_weights()
    got["pi.0.weight"][:] = 0.0
    np.testing.assert_array_equal(policy.get_weights()["pi.0.weight"], shifted["pi.0.weight"])
    policy.set_weights(weights)
    for key, value in policy.get_weights().items():
        np.testing.assert_array_equal(value, weights[key], err_msg=key)


def test_set_weights_changes_actions(algo):
    policy = algo.get_policy()
    weights = policy.get_weights()
    obs = cartpole_observations(1)[0]
    for preferred in (0, 1):
        forced = {k: np.zeros_like(v) for k, v in weights.items()}
        last_bias = max(
            (k for k in weights if k.startswith("pi.") and k.endswith(".bias")),
            key=lambda k: int(k.split(".")[1]),
        )
        forced[last_bias][preferred] = 5.0
        policy.set_weights(forced)
        assert algo.compute_single_action(obs, explore=False) == preferred


def test_workers_api(algo):
    local = algo.workers.local_worker()
    assert local is algo.env_runner_group.local_worker()
    assert local.policy is algo.get_policy()
    indices = algo.workers.foreach_worker(lambda worker: worker.worker_index)
    assert isinstance(indices, list)
    assert indices == [0]
    pairs = algo.workers.foreach_worker_with_index(lambda worker, index: (worker.worker_index, index))
    assert isinstance(pairs, list)
    assert pairs == [(0, 0)]
    spaces = algo.workers.foreach_worker(lambda worker: worker.observation_space)
    assert spaces == [algo.observation_space]


# --- evaluation ------------------------------------------------------------------------------


def recording_config(tmp_path, **evaluation) -> PPOConfig:
    return tiny_config(tmp_path, env="test-recording").evaluation(**evaluation)


@pytest.mark.parametrize("explore", [False, True])
def test_evaluate_respects_explore(tmp_path, explore):
    config = recording_config(tmp_path, evaluation_duration=5, evaluation_config={"explore": explore})
    algo = config.build()
    try:
        envs.RECORDED_ACTIONS.clear()
        result = algo.evaluate()
        assert result["evaluation"]["episodes_this_iter"] == 5
        actions = set(envs.RECORDED_ACTIONS)
        assert len(envs.RECORDED_ACTIONS) >= 5 * EPISODE_LEN
        # The observation is constant: the greedy action never changes; sampling gives both.
        assert actions == (
            {0, 1} if explore else {int(algo.compute_single_action([0.5, 0.5], explore=False))}
        )
    finally:
        algo.stop()


@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("duration", [1, 4])
def test_evaluate_duration_in_episodes(tmp_path, num_envs, duration):
    config = recording_config(tmp_path, evaluation_duration=duration, evaluation_duration_unit="episodes")
    algo = config.env_runners(num_envs_per_env_runner=num_envs).build()
    try:
        evaluation = algo.evaluate()["evaluation"]
        assert evaluation["episodes_this_iter"] == duration
        assert len(evaluation["episode_returns"]) == duration
        assert evaluation["episode_len_mean"] == EPISODE_LEN
        assert evaluation["num_env_steps_sampled"] >= duration * EPISODE_LEN
        for key in ("episode_return_mean", "episode_return_min", "episode_return_max"):
            assert 0 <= evaluation[key] <= EPISODE_LEN
    finally:
        algo.stop()


@pytest.mark.parametrize("num_envs", [1, 2])
def test_evaluate_duration_in_timesteps(tmp_path, num_envs):
    config = recording_config(tmp_path, evaluation_duration=25, evaluation_duration_unit="timesteps")
    algo = config.env_runners(num_envs_per_env_runner=num_envs).build()
    try:
        evaluation = algo.evaluate()["evaluation"]
        assert 25 <= evaluation["num_env_steps_sampled"] < 25 + num_envs
        # One env: 25 steps hold two whole 10-step episodes; two envs: 13 steps each, one each.
        assert evaluation["episodes_this_iter"] == 2
        assert evaluation["episode_len_mean"] == EPISODE_LEN
    finally:
        algo.stop()


def test_evaluate_does_not_update_filter(tmp_path):
    algo = tiny_config(tmp_path).env_runners(observation_filter="MeanStdFilter").build()
    try:
        algo.train()
        before = algo.workers.local_worker().get_filter_state()
        algo.evaluate()
        after = algo.workers.local_worker().get_filter_state()
        for key in before:
            np.testing.assert_array_equal(before[key], after[key])
    finally:
        algo.stop()


def test_evaluation_interval_adds_evaluation_to_results(tmp_path):
    config = tiny_config(tmp_path).evaluation(evaluation_interval=2, evaluation_duration=2)
    algo = config.build()
    try:
        first, second = algo.train(), algo.train()
        assert "evaluation" not in first
        evaluation = second["evaluation"]
        assert evaluation["episodes_this_iter"] == 2
        assert math.isfinite(evaluation["episode_return_mean"])
    finally:
        algo.stop()


def test_evaluation_interval_one(tmp_path):
    algo = tiny_config(tmp_path).evaluation(evaluation_interval=1, evaluation_duration=1).build()
    try:
        assert "evaluation" in algo.train()
    finally:
        algo.stop()


# --- train() results -------------------------------------------------------------------------


def test_train_result_keys(algo):
    first = algo.train()
    second = algo.train()
    for key in RESULT_KEYS:
        assert key in second, key
        assert isinstance(second[key], (int, float)), key
    assert first["training_iteration"] == 1
    assert second["training_iteration"] == 2
    assert second["timesteps_total"] == first["num_env_steps_sampled"] + second["num_env_steps_sampled"]
    assert second["num_env_steps_trained"] == second["num_env_steps_sampled"]
    assert second["time_this_iter_s"] > 0
    assert second["time_total_s"] == pytest.approx(first["time_this_iter_s"] + second["time_this_iter_s"])
    assert second["episode_return_min"] <= second["episode_return_mean"] <= second["episode_return_max"]
    assert second["episodes_this_iter"] >= 1
    assert second["cur_lr"] == pytest.approx(5e-5)
    for key in ("policy_loss", "vf_loss", "entropy", "kl"):
        assert math.isfinite(second[key]), key


def test_result_keys_lists_stop_criteria():
    keys = PPO.result_keys()
    for key in RESULT_KEYS:
        assert key in keys
    assert "evaluation/episode_return_mean" in keys


@pytest.mark.parametrize("num_envs", [1, 4])
def test_train_samples_train_batch_size_env_steps(tmp_path, num_envs):
    """One iteration collects at least train_batch_size env steps (short episodes: many resets)."""
    config = tiny_config(tmp_path, env=envs.FixedLengthEnv).environment(env_config={"length": 5})
    algo = config.env_runners(num_envs_per_env_runner=num_envs).build()
    try:
        result = algo.train()
        assert result["num_env_steps_sampled"] >= 64
        assert result["num_env_steps_trained"] == result["num_env_steps_sampled"]
        assert result["episodes_this_iter"] >= 64 // 5
    finally:
        algo.stop()


def test_min_sample_timesteps_per_iteration(tmp_path):
    algo = tiny_config(tmp_path).reporting(min_sample_timesteps_per_iteration=300).build()
    try:
        result = algo.train()
        assert result["num_env_steps_sampled"] >= 300
        assert result["timesteps_total"] == result["num_env_steps_sampled"]
        assert result["num_env_steps_trained"] == result["num_env_steps_sampled"]
        assert result["training_iteration"] == 1
    finally:
        algo.stop()


def test_min_time_s_per_iteration(tmp_path):
    algo = tiny_config(tmp_path).reporting(min_time_s_per_iteration=0.3).build()
    try:
        result = algo.train()
        assert result["time_this_iter_s"] >= 0.3
        assert result["num_env_steps_sampled"] > 64  # several training steps in one iteration
    finally:
        algo.stop()


def test_lr_schedule_changes_cur_lr(tmp_path):
    schedule = [[0, 1e-3], [256, 1e-4]]
    algo = tiny_config(tmp_path).training(lr=schedule).build()
    try:
        results = [algo.train() for _ in range(3)]
        for result in results:
            expected = np.interp(result["timesteps_total"], [0, 256], [1e-3, 1e-4])
            assert result["cur_lr"] == pytest.approx(expected)
        lrs = [r["cur_lr"] for r in results]
        assert lrs[0] > lrs[1] > lrs[2] >= 1e-4
    finally:
        algo.stop()


@pytest.mark.parametrize("num_envs", [1, 2])
def test_complete_episodes_batch_mode(tmp_path, num_envs):
    config = tiny_config(tmp_path, env=envs.FixedLengthEnv).environment(env_config={"length": 7})
    config.env_runners(batch_mode="complete_episodes", num_envs_per_env_runner=num_envs)
    algo = config.build()
    try:
        for _ in range(2):
            result = algo.train()
            # Each env runs whole 7-step episodes until it has its 64 / num_envs steps: 70 in all.
            assert result["num_env_steps_sampled"] == 70
            assert result["episodes_this_iter"] == 10
            assert result["episode_len_mean"] == 7
    finally:
        algo.stop()


def test_complete_episodes_cartpole(tmp_path):
    algo = tiny_config(tmp_path).env_runners(batch_mode="complete_episodes").build()
    try:
        result = algo.train()
        assert result["num_env_steps_sampled"] >= 64
        # Only whole episodes: the steps sampled are exactly those of the episodes completed.
        assert result["num_env_steps_sampled"] == pytest.approx(
            result["episodes_this_iter"] * result["episode_len_mean"]
        )
    finally:
        algo.stop()


def test_seeded_runs_are_identical(tmp_path):
    results = []
    for _ in range(2):
        algo = tiny_config(tmp_path).build()
        try:
            results.append(algo.train())
        finally:
            algo.stop()
    varying = {
        "time_this_iter_s",
        "time_total_s",
        "timestamp",
        "num_env_steps_sampled_per_s",
        "timers",
        "perf",
    }
    first, second = ({k: v for k, v in r.items() if k not in varying} for r in results)
    assert first == second


def test_different_seeds_differ(tmp_path):
    results = []
    for seed in (0, 1):
        algo = tiny_config(tmp_path).debugging(seed=seed).build()
        try:
            results.append(algo.train())
        finally:
            algo.stop()
    assert results[0]["policy_loss"] != results[1]["policy_loss"]


# --- results folder --------------------------------------------------------------------------


def test_results_folder(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = tiny_config(tmp_path).reporting(experiment_name="my_exp").evaluation(evaluation_interval=1)
    algo = config.build()
    try:
        results = [algo.train() for _ in range(3)]
    finally:
        algo.stop()
    trial_dir = algo.trial_dir
    assert trial_dir.parent == tmp_path / "my_exp"
    assert trial_dir.name.startswith("PPO_CartPole-v1_")
    assert sorted(p.name for p in (tmp_path / "my_exp").iterdir()) == [trial_dir.name]

    params = json.loads((trial_dir / "params.json").read_text())
    assert params["train_batch_size"] == 64
    assert params["env"] == "CartPole-v1"
    assert params["lambda"] == config.lambda_

    lines = (trial_dir / "result.json").read_text().splitlines()
    assert len(lines) == 3
    rows = [json.loads(line) for line in lines]
    assert [row["training_iteration"] for row in rows] == [1, 2, 3]
    for row, result in zip(rows, results, strict=True):
        assert row["timesteps_total"] == result["timesteps_total"]
        assert row["episode_return_mean"] == pytest.approx(result["episode_return_mean"])
        assert "evaluation" in row
        for key in RESULT_KEYS:
            assert key in row

    with open(trial_dir / "progress.csv", newline="") as f:
        csv_rows = list(csv.DictReader(f))
    assert len(csv_rows) == 3
    assert [int(row["training_iteration"]) for row in csv_rows] == [1, 2, 3]
    assert "evaluation/episode_return_mean" in csv_rows[0]
    for key in RESULT_KEYS:
        assert key in csv_rows[0]

    event_files = list(trial_dir.glob("events.out.tfevents.*"))
    assert len(event_files) == 1
    accumulator = EventAccumulator(str(trial_dir))
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]
    for key in ("episode_return_mean", "policy_loss", "cur_lr", "evaluation/episode_return_mean"):
        assert f"rltrainer/{key}" in tags
    iterations = accumulator.Scalars("rltrainer/training_iteration")
    assert [event.value for event in iterations] == [1, 2, 3]
    assert [event.step for event in iterations] == [r["timesteps_total"] for r in results]


def test_default_experiment_name(tmp_path):
    algo = tiny_config(tmp_path).build()
    try:
        algo.train()
        assert algo.trial_dir.parent == tmp_path / "PPO_CartPole-v1"
        assert (algo.trial_dir / "result.json").is_file()
    finally:
        algo.stop()


def test_nan_metrics_are_valid_json(tmp_path):
    """An iteration with no finished episode reports NaN returns; result.json stays strict JSON."""
    config = tiny_config(tmp_path, env=envs.FixedLengthEnv).environment(env_config={"length": 1000})
    algo = config.build()
    try:
        result = algo.train()
        assert math.isnan(result["episode_return_mean"])
    finally:
        algo.stop()
    row = json.loads((algo.trial_dir / "result.json").read_text().splitlines()[0])
    assert row["episode_return_mean"] is None


def test_progress_csv_gains_columns_that_appear_later(tmp_path):
    """Evaluation every second iteration: its columns still reach progress.csv."""
    algo = tiny_config(tmp_path).evaluation(evaluation_interval=2, evaluation_duration=1).build()
    try:
        results = [algo.train() for _ in range(3)]
    finally:
        algo.stop()
    with open(algo.trial_dir / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(row["training_iteration"]) for row in rows] == [1, 2, 3]
    assert [row["evaluation/episode_return_mean"] for row in rows[::2]] == ["", ""]
    evaluated = float(rows[1]["evaluation/episode_return_mean"])
    assert evaluated == pytest.approx(results[1]["evaluation"]["episode_return_mean"])
    assert float(rows[2]["episode_return_mean"]) == pytest.approx(results[2]["episode_return_mean"])


def test_env_name_with_slash_stays_one_folder_level(tmp_path):
    register_env("team/Recording-v0", lambda ctx: envs.RecordingEnv(ctx))
    algo = tiny_config(tmp_path, env="team/Recording-v0").build()
    try:
        algo.train()
    finally:
        algo.stop()
    assert algo.trial_dir.parent.parent == tmp_path
    assert (algo.trial_dir / "result.json").is_file()


def test_a_stopped_algorithm_refuses_to_train_or_evaluate(tmp_path):
    """After stop() the runners, learners and result files are released: train() and evaluate()
    say so instead of training on with what is left; saving and acting still work."""
    algo = PPOConfig().environment("CartPole-v1").reporting(storage_path=str(tmp_path)).build()
    algo.stop()
    for call, name in ((algo.train, "train()"), (algo.evaluate, "evaluate()")):
        with pytest.raises(
            RLTrainerError, match=rf"{re.escape(name)}: this PPO was stopped .*from_checkpoint"
        ):
            call()
    assert algo.compute_single_action([0.0, 0.0, 0.0, 0.0], explore=False) in (0, 1)
    assert Path(algo.save(str(tmp_path / "checkpoint"))).is_dir()
    algo.stop()  # twice is harmless
