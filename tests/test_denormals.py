"""Learner updates flush denormal floats (``rltrainer.core.denormals``), and only they do."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rltrainer.algorithms.callbacks import DefaultCallbacks
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.algorithms.ppo.ppo_learner import PPOLearner
from rltrainer.core.denormals import flush_denormals, flushing
from rltrainer.core.learner_group import LearnerActor
from rltrainer.core.optim import Adam, FlatParameters
from rltrainer.env.multi_agent_examples import MultiAgentCartPole, policy_per_agent

pytestmark = pytest.mark.skipif(not torch.set_flush_denormal(False), reason="this CPU has no flush mode")


def test_the_mode_is_on_in_the_block_only_and_nests():
    assert not flushing()
    with flush_denormals():
        assert flushing()
        with flush_denormals():
            assert flushing()
        assert flushing()  # the inner block leaves the outer one's mode alone
    assert not flushing()


def test_a_mode_set_before_is_kept():
    torch.set_flush_denormal(True)
    try:
        with flush_denormals():
            assert flushing()
        assert flushing()
    finally:
        torch.set_flush_denormal(False)


def dead_unit_moments(steps: int) -> torch.Tensor:
    """Adam's first moments after ``steps`` steps in which half the gradients are exactly zero
    (a dead ReLU unit's parameters) after one step where all were not."""
    net = nn.Linear(4, 8)
    flat = FlatParameters(net)
    adam = Adam(flat, lr=1e-3)
    flat.grad.fill_(1e-3)
    adam.step()
    for _ in range(steps):
        flat.grad.normal_()
        flat.grad[: flat.grad.numel() // 2] = 0
        adam.step()
    return adam.exp_avg


def denormal_count(t: torch.Tensor) -> int:
    return int(((t != 0) & (t.abs() < torch.finfo(t.dtype).tiny)).sum())


def test_adams_moments_of_dead_units_become_denormal_unless_flushed():
    # 0.9 ** 800 * 1e-4 is about 1e-41: a denormal in float32
    assert denormal_count(dead_unit_moments(800)) > 0
    with flush_denormals():
        moments = dead_unit_moments(800)
    assert denormal_count(moments) == 0
    assert (moments[: moments.numel() // 2] == 0).all()


class RecordsTheMode(DefaultCallbacks):
    modes: list[bool] = []

    def on_learn_on_batch(self, **kwargs):  # noqa: ARG002 - the mode is all it records
        RecordsTheMode.modes.append(flushing())


def train_once(config: PPOConfig, storage) -> None:
    algo = config.reporting(storage_path=str(storage)).build()
    try:
        algo.train()
    finally:
        algo.stop()


def test_an_update_flushes_and_the_driver_does_not_after(tmp_path):
    RecordsTheMode.modes = []
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=32)
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
        .callbacks(RecordsTheMode)
    )
    train_once(config, tmp_path)
    assert RecordsTheMode.modes == [True]
    assert not flushing()


def test_a_stacked_multi_agent_update_flushes(tmp_path, monkeypatch):
    modes = []
    update_stacked = PPOLearner.update_stacked

    def recording(learners, rollouts, timestep):
        modes.append(flushing())
        return update_stacked(learners, rollouts, timestep)

    monkeypatch.setattr(PPOLearner, "update_stacked", staticmethod(recording))
    config = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .env_runners(rollout_fragment_length=32)
        .training(train_batch_size=32, minibatch_size=32, num_epochs=1)
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=policy_per_agent)
    )
    train_once(config, tmp_path)
    assert modes == [True]  # both policies in one stack, updated once
    assert not flushing()


class ModeReportingLearner:
    def update_from_batch(self, batch, timestep):  # noqa: ARG002 - a stand-in learner
        return {"flushing": flushing()}


def test_a_learner_actors_update_flushes():
    actor = object.__new__(LearnerActor)  # the method alone: no Ray actor needed
    actor.learner = ModeReportingLearner()
    assert actor.update_from_batch(None, 0) == {"flushing": True}
    assert not flushing()
