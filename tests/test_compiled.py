"""The compiled (numba) inference kernels agree with the numpy path they replace."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from rltrainer.core import compiled
from rltrainer.core.distributions import Categorical
from rltrainer.core.models import ActorCritic

kernels = compiled.kernels()


def actor_critic(obs_size: int, num_outputs: int, hiddens: list[int], activation: str) -> ActorCritic:
    return ActorCritic(obs_size, num_outputs, hiddens, activation, vf_share_layers=False, free_log_std=False)


def test_the_dev_install_uses_the_kernels():
    # The dev extras include rltrainer[fast]: CI runs the compiled path (the numpy one too, below).
    assert kernels is not None
    assert compiled.warm_up()


EDGES = [0.0, -0.0, 1e-8, -1e-8, 0.5, -0.5, 7.9053111, -7.9053111, 8.0, -8.0, 100.0, -100.0, 3.0e38, -3.0e38]


@pytest.mark.parametrize("activation", ["tanh", "relu", "linear"])
def test_bias_activation_matches_numpy(activation):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(scale=4.0, size=(63, 14)), [EDGES]]).astype(np.float32)
    bias = rng.normal(size=14).astype(np.float32)
    bias[-4:] = 0.0  # keep the extreme edges extreme
    reference = {"tanh": np.tanh, "relu": lambda v: np.maximum(v, 0.0), "linear": lambda v: v}[activation]
    expected = reference(x + bias)
    out = x.copy()
    kernels.bias_activation(out, bias, compiled.ACTIVATION_CODES[activation])
    tolerance = 4e-7 if activation == "tanh" else 0.0
    np.testing.assert_allclose(out, expected, rtol=0, atol=tolerance)


@pytest.mark.parametrize("explore", [True, False])
def test_categorical_sampling_matches_numpy(explore):
    rng = np.random.default_rng(1)
    logits = rng.normal(scale=3.0, size=(4096, 5)).astype(np.float32)
    uniforms = rng.random(4096, dtype=np.float32)
    actions, logp = np.empty(4096, dtype=np.int64), np.empty(4096, dtype=np.float32)
    kernels.categorical_sample(logits, uniforms, explore, actions, logp)
    # The numpy path's inverse-CDF sampling with the same uniforms.
    shifted = logits - logits.max(axis=1, keepdims=True)
    cdf = np.exp(shifted).cumsum(axis=1)
    thresholds = (uniforms * cdf[:, -1])[:, None]
    expected = (cdf < thresholds).sum(axis=1) if explore else shifted.argmax(axis=1)
    # Float rounding may move a threshold that sits within 1e-5 of a CDF entry.
    near_tie = (np.abs(cdf - thresholds) < 1e-5 * cdf[:, -1:]).any(axis=1) & explore
    assert (actions[~near_tie] == expected[~near_tie]).all() and near_tie.mean() < 0.01
    log_softmax = shifted - np.log(cdf[:, -1:])
    np.testing.assert_allclose(logp, log_softmax[np.arange(4096), actions], atol=1e-5)
    assert actions.dtype == np.int64 and logp.dtype == np.float32


def test_sampling_frequencies_follow_the_probabilities():
    logits = np.log(np.array([[0.1, 0.6, 0.3]], dtype=np.float32)).repeat(20000, axis=0)
    actions, _ = Categorical.sample_numpy(logits, True, np.random.default_rng(2))
    np.testing.assert_allclose(np.bincount(actions, minlength=3) / 20000, [0.1, 0.6, 0.3], atol=0.015)


@pytest.mark.parametrize("activation", ["tanh", "relu", "elu"])
def test_numpy_policy_with_and_without_kernels(monkeypatch, activation):
    torch.manual_seed(0)
    model = actor_critic(6, 3, [32, 16], activation)
    obs = np.random.default_rng(3).normal(size=(64, 6)).astype(np.float32)
    compiled_out = model.numpy_policy()(obs)
    monkeypatch.setattr(compiled, "kernels", lambda: None)
    numpy_out = model.numpy_policy()(obs)
    with torch.no_grad():
        torch_out = model(torch.from_numpy(obs))[0].numpy()
    np.testing.assert_allclose(compiled_out, numpy_out, atol=2e-6)
    np.testing.assert_allclose(compiled_out, torch_out, atol=2e-6)


@pytest.mark.parametrize("vf_share_layers", [False, True])
def test_network_and_sampling_in_one_call_match_the_numpy_path(monkeypatch, vf_share_layers):
    torch.manual_seed(0)
    model = ActorCritic(5, 4, [32, 32], "tanh", vf_share_layers=vf_share_layers, free_log_std=False)
    mlp = model.numpy_policy()
    obs = np.asfortranarray(np.random.default_rng(4).normal(size=(256, 5)).astype(np.float32))
    actions, logp, logits = Categorical.sample_mlp(mlp, obs, True, np.random.default_rng(5))
    monkeypatch.setattr(compiled, "kernels", lambda: None)
    ref_actions, ref_logp, ref_logits = Categorical.sample_mlp(mlp, obs, True, np.random.default_rng(5))
    np.testing.assert_allclose(logits, ref_logits, atol=2e-6)
    assert (actions != ref_actions).mean() < 0.01  # the same uniforms; rounding may flip near-ties
    same = actions == ref_actions
    np.testing.assert_allclose(logp[same], ref_logp[same], atol=1e-5)


def test_kernels_see_optimizer_updates():
    # NumpyMLP views the torch parameters: in-place updates reach the compiled path too.
    model = actor_critic(4, 2, [8], "tanh")
    policy = model.numpy_policy()
    obs = np.ones((compiled.MIN_BATCH, 4), dtype=np.float32)
    before = policy(obs)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    assert not np.allclose(policy(obs), before)
    with torch.no_grad():
        np.testing.assert_allclose(policy(obs), model(torch.from_numpy(obs))[0].numpy(), atol=2e-6)


@pytest.mark.parametrize("value", ["0", "off", "false"])
def test_environment_variable_turns_the_kernels_off(value):
    code = "from rltrainer.core import compiled; assert compiled.kernels() is None and not compiled.warm_up()"
    env = {**os.environ, compiled.ENV_VAR: value}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)


SMALL_RUN = """
import sys
from rltrainer.algorithms.ppo import PPOConfig
config = PPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=8)
algo = config.training(train_batch_size=256).reporting(storage_path=sys.argv[1]).build()
algo.train()
algo.compute_single_action(algo.env_runner_group.local_worker().env.observation_space.sample()[0])
algo.stop()
assert "numba" not in sys.modules, "numba was loaded"
"""


def test_small_batches_never_load_numba(tmp_path):
    # Loading numba costs ~0.5 s per process: runs with few envs per runner don't pay it.
    assert compiled.for_batch(compiled.MIN_BATCH - 1) is None
    assert compiled.for_batch(compiled.MIN_BATCH) is kernels
    subprocess.run([sys.executable, "-c", SMALL_RUN, str(tmp_path)], check=True, timeout=120)
