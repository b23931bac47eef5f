"""Weights set on the driver's policy are what the next ``train()`` samples with and learns from
(RLlib's local policy is the one that learns): through ``get_policy().set_weights``,
``workers.local_worker().set_weights``, ``workers.foreach_policy`` and ``Algorithm.set_weights``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.errors import ConfigError
from tests.tuned_ppo import train_to, tuned_ppo_config

NUM_ENVS = 4


@pytest.fixture(scope="module")
def expert(tmp_path_factory: pytest.TempPathFactory) -> tuple[PPOConfig, dict[str, np.ndarray]]:
    """The tuned PPO example trained (seed 0) to a 20-episode mean return of 450: its config and weights."""
    config = tuned_ppo_config(tmp_path_factory.mktemp("results"))
    with config.build() as algo:
        train_to(algo, 450)
        return config, algo.get_policy().get_weights()


def _student(expert_config: PPOConfig, **runners: Any) -> Any:
    """The expert's config with a learning rate too small to matter, sampling whole expert
    episodes (500 steps) in every env each iteration, averaging over one iteration's episodes."""
    config = expert_config.copy(copy_frozen=False)
    config.update_from_dict(
        {
            "lr": 1e-9,
            "num_envs_per_env_runner": NUM_ENVS,
            "rollout_fragment_length": 520,
            "train_batch_size": NUM_ENVS * 520 * max(1, runners.get("num_env_runners", 0)),
            "num_epochs": 1,
            "metrics_num_episodes_for_smoothing": NUM_ENVS,
            **runners,
        }
    )
    return config.build()


def _set_on_policy(algo: Any, weights: dict) -> None:
    algo.get_policy().set_weights(weights)


def _set_on_local_worker(algo: Any, weights: dict) -> None:
    algo.workers.local_worker().set_weights(weights)


def _set_through_foreach_policy(algo: Any, weights: dict) -> None:
    # RLlib's idiom: every runner's policies (the driver's among them).
    algo.workers.foreach_policy(lambda policy, _pid: policy.set_weights(weights))


def _set_on_algorithm(algo: Any, weights: dict) -> None:
    algo.set_weights({"default_policy": weights})


@pytest.mark.parametrize(
    "set_weights", [_set_on_policy, _set_on_local_worker, _set_through_foreach_policy, _set_on_algorithm]
)
def test_weights_set_on_the_driver_are_trained_on(expert, set_weights) -> None:
    expert_config, weights = expert
    with _student(expert_config) as student:
        set_weights(student, weights)
        first = student.train()
        second = student.train()  # samples with what the learner holds after the first update
        learned = student.learner_group.get_weights()
    assert first["episode_return_mean"] >= 400, first["hist_stats"]["episode_reward"]
    assert second["episode_return_mean"] >= 400, second["hist_stats"]["episode_reward"]
    for name, value in weights.items():  # the learner started from the expert (lr 1e-9 moved nothing)
        np.testing.assert_allclose(learned[name].numpy(), value, atol=1e-5)


def test_remote_env_runners_get_them_too(expert, local_ray) -> None:  # noqa: ARG001
    expert_config, weights = expert
    with _student(expert_config, num_env_runners=1) as student:
        _set_on_policy(student, weights)
        student.train()
        second = student.train()
    assert second["episode_return_mean"] >= 400, second["hist_stats"]["episode_reward"]


def test_get_and_set_weights_round_trip(expert) -> None:
    expert_config, weights = expert
    with _student(expert_config) as student:
        before = student.get_weights()
        assert list(before) == ["default_policy"]
        assert student.get_weights(["other"]) == {}
        student.set_weights({"default_policy": weights})
        after = student.get_weights()["default_policy"]
        for name, value in weights.items():
            np.testing.assert_array_equal(after[name], value)
        with pytest.raises(ConfigError, match="no policy 'main'"):
            student.set_weights({"main": weights})


def test_the_driver_acts_with_the_learners_module_when_both_are_local(expert) -> None:
    """One PPO policy sampled and trained in the driver on the CPU: no weights are copied after
    an update, the driver's policy acts with the learner's module (its numpy views) itself."""
    expert_config, _ = expert
    with _student(expert_config, lr=1e-3) as student:
        learner = student.learner_group.local_learner
        before = student.get_policy().get_weights()
        student.train()
        assert student.get_policy().model is learner.module
        after = student.get_policy().get_weights()
        learned = student.learner_group.get_weights()
        assert student.train()["timers"]["synch_weights_time_ms"] == 0.0
        # and it acts with what the learner holds now
        obs = np.random.default_rng(0).uniform(-0.2, 0.2, (16, 4)).astype(np.float32)
        logits, _ = learner.module(torch.from_numpy(obs))
        acted = [student.compute_single_action(row, explore=False) for row in obs]
        assert acted == logits.argmax(-1).tolist()
    assert any(not np.array_equal(before[name], after[name]) for name in before)  # it learned
    for name, value in after.items():
        np.testing.assert_array_equal(value, learned[name].numpy())


def test_rllibs_sync_weights_and_env_runner_names(expert, local_ray) -> None:  # noqa: ARG001
    """RLlib's ``env_runner_group.sync_weights()`` (no weights: the driver's runner's, to the
    remote ones), ``foreach_env_runner`` and the healthy-runner counts."""
    expert_config, weights = expert
    config = expert_config.copy().env_runners(num_env_runners=2, num_envs_per_env_runner=1)
    algo = config.training(train_batch_size=64, minibatch_size=64).build()
    try:
        group = algo.env_runner_group
        group.local_env_runner.set_weights(weights)
        group.sync_weights(to_worker_indices=[2])
        first = lambda runner: runner.get_weights()["pi.0.weight"]  # noqa: E731
        local, one, two = group.foreach_env_runner(first)
        np.testing.assert_array_equal(local, weights["pi.0.weight"])
        np.testing.assert_array_equal(two, weights["pi.0.weight"])
        assert not np.array_equal(one, weights["pi.0.weight"])
        group.sync_weights(["other_policy"])  # RLlib's sync_weights(policies): not this one
        assert not np.array_equal(group.foreach_env_runner(first, local_env_runner=False)[0], local)
        group.sync_weights()
        assert all(np.array_equal(w, local) for w in group.foreach_env_runner(first, local_env_runner=False))
        assert group.num_remote_env_runners() == group.num_healthy_remote_env_runners() == 2
    finally:
        algo.stop()
