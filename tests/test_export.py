"""Policy export (``rltrainer.export``): the exported model, run without rltrainer (onnxruntime,
or torch.jit for TorchScript), gives the actions ``compute_single_action(explore=False)`` gives."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rltrainer.algorithms.ddpg import TD3Config
from rltrainer.algorithms.dqn import DQNConfig
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.algorithms.sac import SACConfig
from rltrainer.cli import main
from rltrainer.env.memory_envs import StatelessCartPole
from rltrainer.models.preprocessors import get_preprocessor
from tests.envs import BrightSideEnv

ort = pytest.importorskip("onnxruntime")


def observations(space, count: int, seed: int = 0) -> list:
    space.seed(seed)
    return [space.sample() for _ in range(count)]


def rows(policy, obs: list) -> np.ndarray:
    prep = get_preprocessor(policy.observation_space)(policy.observation_space)
    return np.stack([prep.transform(o) for o in obs]).astype(np.float32)


def test_onnx_gives_the_same_actions_as_compute_single_action(tmp_path):
    """PPO on CartPole with a MeanStdFilter (the filter's statistics are in the graph)."""
    algo = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(observation_filter="MeanStdFilter")
        .debugging(seed=0)
        .build()
    )
    algo.train()
    path = algo.export_policy_model(str(tmp_path), onnx=18)
    obs = [np.random.default_rng(0).uniform(-2, 2, 4).astype(np.float32) for _ in range(1000)]
    expected = np.array([algo.compute_single_action(o, explore=False) for o in obs])
    session = ort.InferenceSession(path)
    actions, logits = session.run(["actions", "dist_inputs"], {"obs": rows(algo.get_policy(), obs)})
    np.testing.assert_array_equal(actions, expected)
    assert logits.shape == (1000, 2)
    manifest = json.loads((tmp_path / "export.json").read_text())
    assert manifest["inputs"] == {"obs": {"shape": ["batch", 4], "dtype": "float32"}}
    assert (
        manifest["outputs"] == ["actions", "dist_inputs"]
        and manifest["observation_filter"] == "MeanStdFilter"
    )
    algo.stop()


def test_an_lstm_exports_with_its_state(tmp_path):
    """The state goes in and out: 100 envs stepped 10 times through onnxruntime match
    compute_actions with the same states."""
    algo = (
        PPOConfig()
        .environment(StatelessCartPole)
        .training(
            model={
                "use_lstm": True,
                "lstm_cell_size": 16,
                "fcnet_hiddens": [16],
                "lstm_use_prev_action": True,
            }
        )
        .debugging(seed=0)
        .build()
    )
    policy = algo.get_policy()
    session = ort.InferenceSession(algo.export_policy_model(str(tmp_path), onnx=18))
    state = np.zeros((100, 4, 16), np.float32)
    prev = np.zeros(100, np.int64)
    for step in range(10):
        obs = observations(policy.observation_space, 100, seed=step)
        expected, state_out, _ = algo.compute_actions(
            obs, state=list(state.transpose(1, 0, 2)), prev_action=prev, explore=False
        )
        actions, _, onnx_state = session.run(
            None, {"obs": rows(policy, obs), "state_in": state, "prev_actions": prev}
        )
        np.testing.assert_array_equal(actions, expected)
        np.testing.assert_allclose(onnx_state, np.stack(state_out, axis=1), atol=1e-5)
        state, prev = onnx_state, actions
    algo.stop()


@pytest.mark.parametrize(
    "config",
    [
        PPOConfig().environment("Pendulum-v1"),  # Box actions, rescaled to [-2, 2]
        PPOConfig().environment(BrightSideEnv).training(model={"vf_share_layers": True}),  # uint8 frames
        DQNConfig().environment("CartPole-v1"),
        SACConfig().environment("Pendulum-v1"),
        TD3Config().environment("Pendulum-v1").training(actor_hiddens=[32], critic_hiddens=[32]),
    ],
    ids=["ppo-box", "ppo-conv", "dqn", "sac", "td3"],
)
def test_torchscript_gives_the_same_actions(tmp_path, config):
    algo = config.debugging(seed=0).build()
    policy = algo.get_policy()
    path = policy.export_model(str(tmp_path))
    model = torch.jit.load(path)
    obs = observations(policy.observation_space, 200)
    expected = np.array([algo.compute_single_action(o, explore=False) for o in obs])
    with torch.no_grad():
        actions, _ = model(torch.from_numpy(rows(policy, obs)))
    np.testing.assert_allclose(actions.numpy(), expected.reshape(actions.shape), rtol=1e-5, atol=1e-5)
    algo.stop()


def test_cli_export(tmp_path, capsys):
    checkpoint = tmp_path / "ckpt"
    algo = DQNConfig().environment("CartPole-v1").debugging(seed=0).build()
    algo.save(str(checkpoint))
    obs = observations(algo.get_policy().observation_space, 100)
    expected = np.array([algo.compute_single_action(o, explore=False) for o in obs])
    algo.stop()
    out = tmp_path / "exported"
    assert main(["export", str(checkpoint), "--format", "onnx", "--out", str(out)]) == 0, (
        capsys.readouterr().err
    )
    assert "exported DQN policy to" in capsys.readouterr().out
    session = ort.InferenceSession(str(out / "model.onnx"))
    np.testing.assert_array_equal(session.run(["actions"], {"obs": np.stack(obs)})[0], expected)
    assert (
        main(["export", str(checkpoint), "--format", "torchscript", "--opset", "17", "--out", str(out)]) == 2
    )
    assert "--opset is an ONNX setting" in capsys.readouterr().err
    assert main(["export", str(checkpoint), "--format", "tflite", "--out", str(out)]) == 2
    assert "invalid choice: 'tflite'" in capsys.readouterr().err
