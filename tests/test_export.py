"""Policy export (``rltrainer.export``): the exported model, run without rltrainer (onnxruntime,
or torch.jit for TorchScript), gives the actions ``compute_single_action(explore=False)`` gives."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rltrainer.algorithms.ddpg import TD3Config
from rltrainer.algorithms.dqn import DQNConfig
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.algorithms.sac import SACConfig
from rltrainer.cli import main
from rltrainer.core.composite_actions import CompositeActions
from rltrainer.env.memory_envs import StatelessCartPole
from rltrainer.env.spaces import space_from_json, space_parts
from rltrainer.export import action_outputs
from rltrainer.models.preprocessors import get_preprocessor
from tests.envs import BrightSideEnv, CompositeActionEnv

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
    # An opset torch's exporter cannot convert to (it would write its own, 18) and a folder that
    # cannot be made: one line each, no model file left that claims the wrong opset.
    low = tmp_path / "low"
    assert main(["export", str(checkpoint), "--opset", "11", "--out", str(low)]) == 2
    err = capsys.readouterr().err
    assert "ONNX opset 11: torch's exporter cannot write this policy at it (it wrote opset 18)" in err
    assert "opsets 18 to" in err and "Traceback" not in err
    assert not list(low.glob("model.onnx*"))
    assert main(["export", str(checkpoint), "--opset", "20", "--out", str(low)]) == 0
    assert json.loads((low / "export.json").read_text())["opset"] == 20
    assert main(["export", str(checkpoint), "--out", "/proc/no/export"]) == 2
    err = capsys.readouterr().err
    assert "export folder '/proc/no/export' cannot be written (No such file or directory)" in err


# --- Dict and Tuple action spaces: one output per part ---------------------------------------
COMPOSITE_OUTPUTS = {
    "dict": ["actions.aim", "actions.flags", "actions.move"],  # the Dict's (sorted) key order
    "nested": ["actions.0", "actions.1.gear", "actions.1.speed"],
}


def composite_algo(actions: str, **model):
    """PPO on ``CompositeActionEnv`` with random weights of a large scale: untrained logits are
    near ties, where the runtimes' float rounding could pick another argmax. The nested space's
    Box part is clipped (``clip_actions``), the Dict's rescaled (``normalize_actions``)."""
    config = PPOConfig().environment(CompositeActionEnv, env_config={"actions": actions})
    if actions == "nested":
        config = config.environment(normalize_actions=False, clip_actions=True)
    algo = config.training(model={"fcnet_hiddens": [32], **model}).debugging(seed=0).build()
    policy = algo.get_policy()
    rng = np.random.default_rng(0)
    policy.set_weights(
        {k: rng.normal(0, 1, v.shape).astype(np.float32) for k, v in policy.get_weights().items()}
    )
    return algo


def leaf(action, path: str):
    """A part of a Dict/Tuple action by its ``space_parts`` path."""
    for key in path.split("/"):
        action = action[int(key)] if isinstance(action, tuple) else action[key]
    return action


def assert_parts_equal(space, outputs: list[np.ndarray], expected: list) -> None:
    """Each part's output is what the env gets: exactly for discrete parts, close for Box."""
    for (path, part), values in zip(space_parts(space), outputs, strict=True):
        wanted = np.stack([np.asarray(leaf(a, path)) for a in expected])
        assert values.shape == wanted.shape, path
        if isinstance(part, spaces.Box):
            assert values.dtype == np.float32
            np.testing.assert_allclose(values, wanted, rtol=1e-5, atol=1e-5, err_msg=path)
        else:
            assert values.dtype == np.int64
            np.testing.assert_array_equal(values, wanted, err_msg=path)


@pytest.mark.parametrize("actions", ["dict", "nested"])
def test_composite_actions_export_one_output_per_part(tmp_path, actions):
    """ONNX on 1,000 observations and TorchScript on 100 give each part of
    compute_single_action(explore=False): Discrete from its start, Box rescaled or clipped."""
    algo = composite_algo(actions)
    policy = algo.get_policy()
    names = COMPOSITE_OUTPUTS[actions]
    obs = observations(policy.observation_space, 1000)
    expected = [algo.compute_single_action(o, explore=False) for o in obs]
    session = ort.InferenceSession(algo.export_policy_model(str(tmp_path / "onnx"), onnx=18))
    assert [o.name for o in session.get_outputs()] == [*names, "dist_inputs"]
    *parts, logits = session.run(None, {"obs": rows(policy, obs)})
    assert_parts_equal(policy.action_space, parts, expected)
    assert logits.shape == (1000, policy.dist_class.required_inputs(policy.action_space))
    if actions == "dict":  # Box outside its bounds and every discrete value: nothing trivial passes
        assert np.abs(parts[0]).max() == pytest.approx(2.0) and set(parts[2].tolist()) == {1, 2, 3}

    manifest = json.loads((tmp_path / "onnx" / "export.json").read_text())
    assert manifest["outputs"] == [*names, "dist_inputs"]
    described = manifest["action_parts"]
    assert [part["output"] for part in described] == names
    for part, (path, space), values in zip(described, space_parts(policy.action_space), parts, strict=True):
        assert part["path"] == path and space_from_json(part["space"]) == space
        assert part["shape"] == ["batch", *values.shape[1:]] and part["dtype"] == str(values.dtype)
    assert described[-1]["columns"][1] == policy.composite_actions.width

    model = torch.jit.load(policy.export_model(str(tmp_path / "torchscript")))
    with torch.no_grad():
        *parts, _ = model(torch.from_numpy(rows(policy, obs[:100])))
    assert_parts_equal(policy.action_space, [p.numpy() for p in parts], expected[:100])
    manifest = json.loads((tmp_path / "torchscript" / "export.json").read_text())
    assert manifest["outputs"] == [*names, "dist_inputs"] and len(manifest["action_parts"]) == 3
    algo.stop()


def test_an_lstm_with_dict_actions_exports_with_its_state(tmp_path):
    """The previous actions go in as the distribution's row (the parts' columns side by side,
    from 0, in [-1, 1]); 50 envs stepped 5 times match compute_actions with the same states."""
    algo = composite_algo("dict", use_lstm=True, lstm_cell_size=16, lstm_use_prev_action=True)
    policy = algo.get_policy()
    session = ort.InferenceSession(algo.export_policy_model(str(tmp_path), onnx=18))
    manifest = json.loads((tmp_path / "export.json").read_text())
    assert manifest["inputs"]["prev_actions"] == {"shape": ["batch", 2 + 3 + 1], "dtype": "float32"}
    assert manifest["outputs"] == [*COMPOSITE_OUTPUTS["dict"], "dist_inputs", "state_out"]
    policy.action_space.seed(0)
    prev = [policy.action_space.sample() for _ in range(50)]  # env actions (dicts)
    state, prev_rows = np.zeros((50, 4, 16), np.float32), policy.from_env_actions(prev)
    for step in range(5):
        obs = observations(policy.observation_space, 50, seed=step)
        expected, state_out, _ = algo.compute_actions(
            obs, state=list(state.transpose(1, 0, 2)), prev_action=prev, explore=False
        )
        *parts, _, onnx_state = session.run(
            None, {"obs": rows(policy, obs), "state_in": state, "prev_actions": prev_rows}
        )
        assert_parts_equal(policy.action_space, parts, expected)
        np.testing.assert_allclose(onnx_state, np.stack(state_out, axis=1), atol=1e-5)
        env_actions = dict(zip(("aim", "flags", "move"), parts, strict=True))
        state, prev, prev_rows = onnx_state, expected, policy.composite_actions.from_env(env_actions)
    algo.stop()


def test_part_output_names_are_onnx_safe_and_unique():
    space = spaces.Tuple(
        (
            spaces.Dict({"a b": spaces.Discrete(2), "a_b": spaces.Discrete(2), "x": spaces.Box(-1, 1, (2,))}),
            spaces.MultiBinary(2),
        )
    )
    policy = SimpleNamespace(composite_actions=CompositeActions(space, True, False))
    assert [part["output"] for part in action_outputs(policy)] == [
        "actions.0.a_b",
        "actions.0.a_b_2",
        "actions.0.x",
        "actions.1",
    ]
    assert action_outputs(SimpleNamespace(composite_actions=None)) == []
