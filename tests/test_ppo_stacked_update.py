"""PPO's update of several policies at once (``rltrainer.algorithms.ppo.stacked_update``) gives
each policy the weights, Adam state and statistics of its own one-at-a-time update; policies
that do not qualify update alone, as before."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltrainer.algorithms.callbacks import DefaultCallbacks
from rltrainer.algorithms.ppo import PPOConfig, stacked_update
from rltrainer.algorithms.ppo.ppo_learner import PPOBatch, PPOLearner
from rltrainer.core.learner import make_learner
from rltrainer.core.learner_group import LearnerGroup
from rltrainer.core.multi_agent_learner_group import MultiAgentLearnerGroup
from tests.ppo_batches import batch

CARTPOLE = gym.make("CartPole-v1")
SPACES = (CARTPOLE.observation_space, CARTPOLE.action_space)
ROWS = (300, 90, 200)  # 2, 1 (the whole batch) and 1 minibatch(es) of 128 per epoch


def config(**training) -> PPOConfig:
    settings = {"num_epochs": 4, "minibatch_size": 128, "train_batch_size": 400, "lr": 1e-3}
    return PPOConfig().environment("CartPole-v1").training(**{**settings, **training})


def learners(cfgs: list[PPOConfig]) -> list[PPOLearner]:
    made = []
    for seed, cfg in enumerate(cfgs):
        torch.manual_seed(seed)
        learner = make_learner(PPOLearner, *SPACES, cfg, "cpu")
        learner.build_batch = lambda rollouts: rollouts[0].batch  # the tests hand over train batches
        made.append(learner)
    return made


class Rows:
    """A "rollout" that is a train batch (the test learners' ``build_batch`` passes it on)."""

    def __init__(self, batch: PPOBatch) -> None:
        self.batch, self.num_steps = batch, len(batch.obs)


def fragments(batches: list[PPOBatch]) -> list[list[Rows]]:
    return [[Rows(b)] for b in batches]


def state(learner: PPOLearner) -> list[torch.Tensor]:
    opt = learner.optimizer
    return [learner.flat_params.data, opt.exp_avg, opt.exp_avg_sq, torch.tensor(float(opt.step_count))]


SETTINGS = {
    "defaults (KL penalty)": {},
    "entropy, value clip": {"entropy_coeff": 0.01, "vf_clip_param": 2.0, "kl_coeff": 0.0},
    "clip by global norm": {"grad_clip": 0.5, "grad_clip_by": "global_norm"},
    "clip by norm": {"grad_clip": 0.5, "grad_clip_by": "norm", "model": {"fcnet_activation": "relu"}},
    "clip by value": {"grad_clip": 0.01, "grad_clip_by": "value", "model": {"fcnet_hiddens": [16]}},
    "full batch": {"minibatch_size": 400},
}


@pytest.mark.parametrize("settings", SETTINGS.values(), ids=SETTINGS.keys())
def test_stacked_update_is_the_one_at_a_time_update(settings) -> None:
    check_stacked_is_alone(settings)


def test_minibatches_gathered_an_epoch_at_a_time_give_the_same_update(monkeypatch) -> None:
    """Large observations: the minibatches are gathered an epoch at a time, not all at once."""
    monkeypatch.setattr(stacked_update, "GATHERED_VALUES", 1)
    check_stacked_is_alone({})


def check_stacked_is_alone(settings: dict) -> None:
    # Unequal row counts and learning rates, two updates (Adam's state carries over).
    cfgs = [config(**settings), config(**settings), config(**{**settings, "lr": 3e-4})]
    alone, stacked = learners(cfgs), learners(cfgs)
    assert len({learner.stack_key() for learner in stacked}) == 1
    for update in range(2):
        batches = [
            batch(learner, rows, seed=10 * update + i)
            for i, (learner, rows) in enumerate(zip(alone, ROWS, strict=False))
        ]
        torch.manual_seed(update)
        expected = [
            learner.update_from_batch(b, timestep=0) for learner, b in zip(alone, batches, strict=False)
        ]
        torch.manual_seed(update)
        got = PPOLearner.update_stacked(stacked, fragments(batches), timestep=0)
        for want, have in zip(expected, got, strict=False):
            assert want.keys() == have.keys()
            np.testing.assert_allclose(list(have.values()), list(want.values()), rtol=1e-5, atol=1e-6)
        for one, other in zip(alone, stacked, strict=False):
            assert one.optimizer.step_count == other.optimizer.step_count
            assert one.kl_coeff == other.kl_coeff
            for a, b in zip(state(one), state(other), strict=False):
                torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_a_policy_without_a_step_takes_no_adam_step() -> None:
    """The second step of each epoch exists for the 300-row policy only: the others' weights,
    moments and step counts move once per epoch."""
    stacked = learners([config(), config(), config()])
    batches = [
        batch(learner, rows, seed=i) for i, (learner, rows) in enumerate(zip(stacked, ROWS, strict=False))
    ]
    PPOLearner.update_stacked(stacked, fragments(batches), timestep=0)
    assert [learner.optimizer.step_count for learner in stacked] == [8, 4, 4]


def test_a_non_finite_loss_skips_that_policys_step() -> None:
    stacked = learners([config().debugging(on_nonfinite="skip_batch")] * 2)
    batches = [
        batch(learner, rows, seed=i) for i, (learner, rows) in enumerate(zip(stacked, ROWS, strict=False))
    ]
    batches[1] = batches[1]._replace(obs=np.full_like(batches[1].obs, np.nan))
    before = stacked[1].flat_params.data.clone()
    stats = PPOLearner.update_stacked(stacked, fragments(batches), timestep=0)
    assert stacked[1].optimizer.step_count == 0 and torch.equal(stacked[1].flat_params.data, before)
    assert stacked[0].optimizer.step_count == 8 and np.isfinite(stats[0]["total_loss"])
    assert np.isnan(stats[1]["total_loss"])


class Recording(LearnerGroup):
    """A ``LearnerGroup`` that records its own (one-at-a-time) updates."""

    updated: list[str] = []

    def __init__(self, pid: str, learner: PPOLearner) -> None:
        self.pid, self._local, self.config = pid, learner, learner.config
        self._remote, self.num_restarts = [], 0

    def update(self, rollouts, timestep):
        Recording.updated.append(self.pid)
        return super().update(rollouts, timestep)


class Fragment:
    def __init__(self, batches: dict) -> None:
        self.policy_batches = batches


def test_policies_that_do_not_qualify_update_alone_as_before() -> None:
    """A policy of another architecture (or settings) updates through its own ``LearnerGroup``,
    bit for bit the update it had alone; the two of one architecture are stacked."""
    cfgs = {
        "a": config(),
        "b": config(model={"fcnet_hiddens": [32]}),
        "c": config(),
        "d": config(num_epochs=2),
    }
    made = dict(zip(cfgs, learners(list(cfgs.values())), strict=False))
    reference = dict(zip(cfgs, learners(list(cfgs.values())), strict=False))
    group = MultiAgentLearnerGroup(lambda pid, _: Recording(pid, made[pid]), list(cfgs))
    assert group._stacks(list(cfgs)) == [["a", "c"], ["b"], ["d"]]
    batches = {
        pid: batch(made[pid], rows, seed=i)
        for i, (pid, rows) in enumerate(zip(cfgs, (300, 90, 200, 150), strict=False))
    }
    Recording.updated = []
    torch.manual_seed(0)
    stats = group.update([Fragment({pid: Rows(b) for pid, b in batches.items()})], timestep=0)
    assert list(stats) == ["a", "b", "c", "d"] and Recording.updated == ["b", "d"]
    # Policies b and d drew their permutations after the stack's: the one-at-a-time reference
    # draws in the same order.
    torch.manual_seed(0)
    for pid in ("a", "c", "b", "d"):
        reference[pid].update_from_batch(batches[pid], timestep=0)
    for pid in ("b", "d"):
        assert torch.equal(made[pid].flat_params.data, reference[pid].flat_params.data), pid
    for pid in ("a", "c"):
        torch.testing.assert_close(
            made[pid].flat_params.data, reference[pid].flat_params.data, rtol=1e-5, atol=1e-6
        )


class SeesEachBatch(DefaultCallbacks):
    def on_learn_on_batch(self, *, policy, train_batch, result, **kwargs) -> None:  # noqa: ARG002
        result["rows_seen"] = len(train_batch.obs)


def test_a_learner_with_an_on_learn_on_batch_callback_updates_alone() -> None:
    """The callback sees each policy's own train batch, as without stacking."""
    plain, seen = learners([config(), config().callbacks(SeesEachBatch)])
    assert plain.stack_key() is not None
    assert seen.stack_key() is None


def test_a_subclass_of_the_learner_updates_alone() -> None:
    """A subclass may change the loss: it is never stacked."""

    class OwnLoss(PPOLearner):
        pass

    (plain,) = learners([config()])
    plain.__class__ = OwnLoss
    assert plain.stack_key() is None
