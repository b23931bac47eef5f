"""PPO's gradients written out (``rltrainer.algorithms.ppo.manual_gradients``) are bitwise
autograd's: the loss, the statistics, every gradient and a whole update; other settings
still go through autograd."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from rltrainer.algorithms.ppo import PPOConfig, manual_gradients
from rltrainer.algorithms.ppo.ppo_learner import PPOBatch, PPOLearner
from rltrainer.core.learner import make_learner
from tests.ppo_batches import batch

CARTPOLE = gym.make("CartPole-v1")
SPACES = (CARTPOLE.observation_space, CARTPOLE.action_space)


def config(**training) -> PPOConfig:
    settings = {"entropy_coeff": 0.0, "kl_coeff": 0.0, "vf_clip_param": None, "num_epochs": 3}
    return PPOConfig().environment("CartPole-v1").training(**{**settings, **training})


def learner(cfg: PPOConfig, spaces=SPACES) -> PPOLearner:
    torch.manual_seed(0)
    return make_learner(PPOLearner, *spaces, cfg, "cpu")


def tensors(learner: PPOLearner, data: PPOBatch) -> PPOBatch:
    return PPOBatch(*(learner.to_tensor(column) for column in data))


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("hiddens", [[64, 64], [16], []])
@pytest.mark.parametrize("vf_clip_param", [None, 2.0])
def test_loss_stats_and_gradients_are_autograds(activation, hiddens, vf_clip_param) -> None:
    model = {"fcnet_hiddens": hiddens, "fcnet_activation": activation}
    ppo = learner(config(model=model, vf_clip_param=vf_clip_param, vf_loss_coeff=0.5, clip_param=0.2))
    assert ppo.gradients_by_hand()
    mb = tensors(ppo, batch(ppo))
    params = list(ppo.module.parameters())
    for with_stats in (True, False):
        loss, stats = ppo.compute_loss(mb, with_stats)
        ppo.flat_params.zero_grad()
        loss.backward()
        expected = [p.grad.clone() for p in params]
        ppo.flat_params.grad.fill_(float("nan"))  # every gradient is written, none accumulated
        by_hand, by_hand_stats = manual_gradients.loss_and_gradients(ppo, mb, with_stats)
        assert torch.equal(by_hand, loss.detach())
        if with_stats:
            assert torch.equal(by_hand_stats, stats)
        else:
            assert by_hand_stats is None
        for (name, _), grad, param in zip(ppo.module.named_parameters(), expected, params, strict=True):
            assert torch.equal(param.grad, grad), name


def test_ties_of_the_clipped_surrogate_are_autograds() -> None:
    """The first epoch's ratios are exactly 1 (surr1 == surr2: autograd splits the gradient of
    the minimum half and half); a zero advantage ties the two terms out of the clip range too."""
    ppo = learner(config(model={"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"}, clip_param=0.2))
    data = batch(ppo)
    with torch.no_grad():
        logits, _ = ppo.module(torch.from_numpy(data.obs))
        logp = torch.log_softmax(logits, -1).gather(-1, torch.from_numpy(data.actions).unsqueeze(-1))
    action_logp = logp.squeeze(-1).numpy().copy()
    advantages = data.advantages.copy()
    action_logp[:40] += 1.0  # ratio e^-1: out of range
    advantages[:20] = 0.0  # ... and tied there
    advantages[100:120] = 0.0  # tied in range as well
    mb = tensors(ppo, data._replace(action_logp=action_logp, advantages=advantages))
    loss, _ = ppo.compute_loss(mb, False)
    ppo.flat_params.zero_grad()
    loss.backward()
    expected = [p.grad.clone() for p in ppo.module.parameters()]
    _, expected_stats = ppo.compute_loss(mb, True)
    by_hand, stats = manual_gradients.loss_and_gradients(ppo, mb, True)
    assert torch.equal(by_hand, loss.detach()) and torch.equal(stats, expected_stats)
    for (name, param), grad in zip(ppo.module.named_parameters(), expected, strict=True):
        assert torch.equal(param.grad, grad), name


def test_an_update_is_autograds_bit_for_bit(monkeypatch) -> None:
    cfg = config(model={"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"}, grad_clip=0.5)
    by_hand, autograd = learner(cfg), learner(cfg)
    monkeypatch.setattr(autograd, "gradients_by_hand", lambda: False)
    data = batch(by_hand)
    for timestep in (0, 1000):
        results = []
        for ppo in (by_hand, autograd):
            torch.manual_seed(timestep)  # the same minibatches
            results.append(ppo.update_from_batch(data, timestep))
        assert results[0] == results[1]
    for (name, mine), theirs in zip(
        by_hand.module.state_dict().items(), autograd.module.state_dict().values(), strict=True
    ):
        assert torch.equal(mine, theirs), name


@pytest.mark.parametrize(
    "training",
    [
        {"entropy_coeff": 0.01},
        {"kl_coeff": 0.2},
        {"model": {"vf_share_layers": True}},
        {"model": {"fcnet_activation": "elu"}},
    ],
)
def test_other_settings_go_through_autograd(training) -> None:
    assert not learner(config(**training)).gradients_by_hand()


def test_a_subclass_with_its_own_backward_goes_through_autograd() -> None:
    class NoisyGradients(PPOLearner):
        def apply_gradients(self, loss):
            super().apply_gradients(loss)

    torch.manual_seed(0)
    assert not make_learner(NoisyGradients, *SPACES, config(), "cpu").gradients_by_hand()


def test_a_compiled_loss_goes_through_autograd() -> None:
    ppo = learner(config())
    ppo.config = config().framework(torch_compile_learner=True)  # what the check reads (not compiled here)
    assert not ppo.gradients_by_hand()


def test_a_continuous_policy_goes_through_autograd() -> None:
    pendulum = gym.make("Pendulum-v1")
    ppo = learner(config().environment("Pendulum-v1"), (pendulum.observation_space, pendulum.action_space))
    assert not ppo.gradients_by_hand()
