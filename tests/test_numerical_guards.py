"""NaN and infinity from envs and in losses: caught where they appear, named, stopped or skipped."""

from __future__ import annotations

import logging
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltrainer.algorithms.callbacks import DefaultCallbacks
from rltrainer.algorithms.dqn import DQNConfig
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.cli import main
from rltrainer.errors import NumericalError

FAST = {"train_batch_size": 128, "minibatch_size": 64, "num_epochs": 1}


class Spoiled(gym.Wrapper):
    """CartPole whose observation (``what="obs"``) or reward (``"reward"``) turns ``value`` at
    ``at`` steps (of this env), for ``times`` steps; ``env_config={"what", "value", "at", "times"}``."""

    def __init__(self, config: dict) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.what, self.value = config.get("what", "obs"), float(config.get("value", math.nan))
        self.at, self.times, self.steps = config.get("at", 20), config.get("times", 1), 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.at <= self.steps < self.at + self.times:
            if self.what == "obs":
                obs = obs.copy()
                obs[2] = self.value
            else:
                reward = self.value
        return obs, reward, terminated, truncated, info


def config(env_config: dict, **debugging) -> PPOConfig:
    return (
        PPOConfig()
        .environment(Spoiled, env_config=env_config)
        .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=32)  # 2 fragments per batch
        .training(**FAST)
        .debugging(**debugging)
    )


@pytest.mark.parametrize(
    ("env_config", "expected"),
    [
        ({"what": "obs"}, r"env runner 0 \(Spoiled\): the observation\[2\] of sub-env \d is nan"),
        ({"what": "obs", "value": math.inf}, r"the observation\[2\] of sub-env \d is inf"),
        ({"what": "reward", "value": -math.inf}, r"the reward of sub-env \d is -inf"),
    ],
    ids=["nan-obs", "inf-obs", "inf-reward"],
)
def test_non_finite_env_data_stops_training_naming_where(env_config, expected):
    algo = config(env_config).build()
    try:
        with pytest.raises(NumericalError, match=expected) as err:
            algo.train()
        assert "on_nonfinite='skip_batch'" in str(err.value)
        assert "after" in str(err.value) and "env steps of this runner" in str(err.value)
    finally:
        algo.stop()


def test_skip_batch_drops_the_tainted_fragments_and_training_stays_finite(caplog):
    algo = config({"what": "obs", "at": 10, "times": 3}, on_nonfinite="skip_batch").build()
    try:
        with caplog.at_level(logging.WARNING, logger="rltrainer"):
            results = [algo.train() for _ in range(3)]
        dropped = [r.getMessage() for r in caplog.records if "fragment is dropped" in r.getMessage()]
        assert len(dropped) == 1, dropped  # both sub-envs' bad steps fall in one fragment
        # The dropped fragment's steps do not count; everything trained on is finite.
        assert results[0]["num_env_steps_sampled"] < 128
        for name, value in algo.get_policy().get_weights().items():
            assert np.isfinite(value).all(), name
        assert all(
            math.isfinite(r["info"]["learner"]["default_policy"]["learner_stats"]["total_loss"])
            for r in results
        )
    finally:
        algo.stop()


def test_an_env_that_never_recovers_stops_even_when_skipping():
    algo = (
        config({"what": "reward", "at": 1, "times": 10**9}, on_nonfinite="skip_batch")
        .fault_tolerance(num_consecutive_env_runner_failures_tolerance=3)
        .build()
    )
    try:
        with pytest.raises(NumericalError, match="3 fragments in a row held NaN or infinity"):
            for _ in range(5):
                algo.train()
    finally:
        algo.stop()


class SpoilAdvantages(DefaultCallbacks):
    """A buggy postprocessing step: NaN advantages reach the loss."""

    def on_learn_on_batch(self, *, train_batch, **kwargs) -> None:  # noqa: ARG002
        train_batch["advantages"] = np.full_like(train_batch["advantages"], np.nan)


def test_a_non_finite_loss_stops_naming_its_terms_or_is_skipped(caplog):
    stopping = config({"at": 10**9}).callbacks(SpoilAdvantages).build()
    try:
        before = {k: v.copy() for k, v in stopping.get_policy().get_weights().items()}
        with pytest.raises(
            NumericalError, match=r"PPOLearner: the loss is policy_loss not finite \(policy_loss=nan"
        ):
            stopping.train()
        after = stopping.get_policy().get_weights()
        assert all(np.array_equal(before[k], after[k]) for k in before)  # no NaN step was taken
    finally:
        stopping.stop()
    skipping = config({"at": 10**9}, on_nonfinite="skip_batch").callbacks(SpoilAdvantages).build()
    try:
        with caplog.at_level(logging.WARNING, logger="rltrainer"):
            skipping.train()
        assert any("gradient step skipped" in r.getMessage() for r in caplog.records)
        assert all(np.isfinite(v).all() for v in skipping.get_policy().get_weights().values())
    finally:
        skipping.stop()


def test_dqn_skips_a_non_finite_loss_without_nan_priorities():
    from rltrainer.core.learner import Learner

    algo = (
        DQNConfig()
        .environment("CartPole-v1")
        .training(num_steps_sampled_before_learning_starts=64, train_batch_size=32)
        .reporting(min_sample_timesteps_per_iteration=64)
        .debugging(on_nonfinite="skip_batch")
        .build()
    )
    learner = algo.learner_group.local_learner
    real = learner.compute_loss

    def spoiled(batch):
        loss, td_error, q_taken = real(batch)
        return loss * torch.tensor(float("nan")), td_error * torch.tensor(float("nan")), q_taken

    try:
        learner.compute_loss = spoiled
        algo.train()
        assert isinstance(learner, Learner) and learner.skipped_steps > 0
        assert np.isfinite(learner.last_td_errors).all()
        assert all(np.isfinite(v).all() for v in algo.get_policy().get_weights().values())
    finally:
        algo.stop()


def test_the_cli_says_it_in_one_line(tmp_path, capsys):
    argv = [
        "train", "--algo", "PPO", "--env", "tests.test_numerical_guards:Spoiled",
        "--config", '{"train_batch_size": 128, "minibatch_size": 64, "num_epochs": 1}',
        "--stop", '{"training_iteration": 2}', "--storage-path", str(tmp_path),
    ]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "the observation[2] of sub-env" in err, err


@pytest.mark.usefixtures("local_ray")
def test_a_remote_env_runner_stops_training_instead_of_being_restarted():
    algo = config({"what": "reward"}).env_runners(num_env_runners=1).build()
    try:
        expected = r"^env runner 1 \(Spoiled\): the reward of sub-env \d is nan"
        with pytest.raises(NumericalError, match=expected):
            algo.train()
        assert algo.env_runner_group.num_restarts == 0 and not algo.env_runner_group._restart_at
    finally:
        algo.stop()
