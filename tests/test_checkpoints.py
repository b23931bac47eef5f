"""Checkpoints: exact save/restore, plain-safetensors weights, no pickle, clear errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from safetensors.torch import load_file

from rltrainer.algorithms.ppo import PPO, PPOConfig
from rltrainer.checkpoint_store import download_checkpoint
from rltrainer.checkpoints import METADATA_FILE, Checkpoint
from rltrainer.env.spaces import space_from_json, space_to_json
from rltrainer.errors import CheckpointError
from tests import envs

HIDDENS = [16, 16]


def make_config(storage_path, env="CartPole-v1", observation_filter="MeanStdFilter") -> PPOConfig:
    return (
        PPOConfig()
        .environment(env)
        .env_runners(num_envs_per_env_runner=2, observation_filter=observation_filter)
        .training(
            train_batch_size=128,
            minibatch_size=64,
            num_epochs=2,
            lr=[[0, 1e-3], [10_000, 1e-4]],
            model={"fcnet_hiddens": HIDDENS},
        )
        .reporting(storage_path=str(storage_path))
        .debugging(seed=1)
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A PPO trained for two iterations with a MeanStdFilter, and its checkpoint."""
    storage = tmp_path_factory.mktemp("storage")
    algo = make_config(storage).build()
    for _ in range(2):
        algo.train()
    path = algo.save(str(tmp_path_factory.mktemp("ckpt") / "checkpoint"))
    yield algo, path
    algo.stop()


@pytest.fixture
def checkpoint_copy(trained, tmp_path) -> Path:
    """A copy of the checkpoint the test may damage."""
    _, path = trained
    return Path(shutil.copytree(path, tmp_path / "copy"))


def observations(n: int = 8) -> np.ndarray:
    rng = np.random.default_rng(0)
    return (rng.normal(size=(n, 4)) * [1.0, 1.0, 0.1, 1.0]).astype(np.float32)


def assert_same_state(original: PPO, restored: PPO) -> None:
    learner, restored_learner = original.learner_group.local_learner, restored.learner_group.local_learner
    weights, restored_weights = learner.get_weights(), restored_learner.get_weights()
    assert set(weights) == set(restored_weights)
    for name, tensor in weights.items():
        assert torch.equal(tensor, restored_weights[name]), name
    policy_weights = restored.get_policy().get_weights()
    assert set(policy_weights) == set(weights)
    for name, array in original.get_policy().get_weights().items():
        np.testing.assert_array_equal(array, policy_weights[name], err_msg=name)
    optimizer, restored_optimizer = learner.get_optimizer_state(), restored_learner.get_optimizer_state()
    assert set(optimizer) == set(restored_optimizer)
    assert int(optimizer["step"]) > 0
    for name, tensor in optimizer.items():
        assert torch.equal(tensor, restored_optimizer[name]), name
    assert restored_learner.kl_coeff == learner.kl_coeff
    counters, restored_counters = original.counters, restored.counters
    assert restored_counters.training_iteration == counters.training_iteration == 2
    assert restored_counters.timesteps_total == counters.timesteps_total > 0
    assert restored_counters.episodes_total == counters.episodes_total > 0
    assert restored_counters.num_env_steps_trained == counters.num_env_steps_trained
    assert restored_counters.time_total_s == counters.time_total_s
    filter_state = original.workers.local_worker().get_filter_state()
    restored_filter = restored.workers.local_worker().get_filter_state()
    assert set(filter_state) == set(restored_filter) == {"count", "mean", "m2"}
    assert filter_state["count"][0] > 0
    for name, array in filter_state.items():
        np.testing.assert_array_equal(array, restored_filter[name], err_msg=name)
    for obs in observations():
        assert original.compute_single_action(obs, explore=False) == restored.compute_single_action(
            obs, explore=False
        )
        _, _, extra = original.compute_single_action(obs, explore=False, full_fetch=True)
        _, _, restored_extra = restored.compute_single_action(obs, explore=False, full_fetch=True)
        for key, value in extra.items():
            np.testing.assert_array_equal(value, restored_extra[key], err_msg=key)


def test_from_checkpoint_restores_everything(trained):
    algo, path = trained
    restored = PPO.from_checkpoint(path)
    try:
        assert isinstance(restored, PPO)
        assert restored.config.to_dict() == algo.config.to_dict()
        assert_same_state(algo, restored)
    finally:
        restored.stop()


def test_a_single_agent_checkpoint_has_one_policy_to_select(trained):
    """RLlib's ``policy_ids`` may name the one policy; anything multi-agent is refused."""
    algo, path = trained
    restored = PPO.from_checkpoint(path, policy_ids=["default_policy"])
    try:
        assert_same_state(algo, restored)
    finally:
        restored.stop()
    with pytest.raises(CheckpointError, match="is single-agent: its one policy is 'default_policy'"):
        PPO.from_checkpoint(path, policy_ids=["main"])
    with pytest.raises(CheckpointError, match="policy_mapping_fn and policies_to_train are for multi-agent"):
        PPO.from_checkpoint(path, policies_to_train=["default_policy"])


def test_training_continues_after_restore(trained, tmp_path):
    algo, path = trained
    restored = PPO.from_checkpoint(path, config_overrides={"storage_path": str(tmp_path)})
    try:
        result = restored.train()
        assert result["training_iteration"] == 3
        assert result["timesteps_total"] == algo.counters.timesteps_total + result["num_env_steps_sampled"]
        assert result["episodes_total"] >= algo.counters.episodes_total
        assert result["time_total_s"] > algo.counters.time_total_s
        assert np.isfinite(result["episode_return_mean"])  # the learning curve came back too
        assert int(restored.learner_group.local_learner.get_optimizer_state()["step"]) > int(
            algo.learner_group.local_learner.get_optimizer_state()["step"]
        )
        assert (
            restored.workers.local_worker().get_filter_state()["count"][0]
            > (algo.workers.local_worker().get_filter_state()["count"][0])
        )
    finally:
        restored.stop()


def test_restore_into_fresh_algorithm(trained, tmp_path):
    algo, path = trained
    fresh = make_config(tmp_path).build()
    try:
        fresh.restore(path)
        assert_same_state(algo, fresh)
        assert fresh.train()["training_iteration"] == 3
    finally:
        fresh.stop()


def test_default_save_path_is_in_trial_dir(tmp_path):
    algo = make_config(tmp_path, observation_filter="NoFilter").training(num_epochs=1).build()
    try:
        algo.train()
        path = Path(algo.save())
        assert path.parent == algo.trial_dir
        assert path.name == "checkpoint_000001"
        assert path.is_relative_to(tmp_path)
        assert (path / METADATA_FILE).is_file()
    finally:
        algo.stop()


def test_save_result_answers_rllibs_checkpoint_path_and_metrics(tmp_path):
    """RLlib's ``save()`` returns a result object: ``result.checkpoint.path``, ``result.metrics``."""
    algo = make_config(tmp_path, observation_filter="NoFilter").training(num_epochs=1).build()
    try:
        assert algo.save(str(tmp_path / "untrained")).metrics == {}
        trained = algo.train()
        result = algo.save()
        assert result.checkpoint.path == str(result) == str(algo.trial_dir / "checkpoint_000001")
        assert type(result.checkpoint.path) is str
        assert result.metrics["training_iteration"] == 1
        assert result.metrics["episode_return_mean"] == trained["episode_return_mean"]
        algo.restore(result.checkpoint)
        restored = PPO.from_checkpoint(result.checkpoint.path)
        assert restored.iteration == 1
        restored.stop()
    finally:
        algo.stop()


def test_checkpoint_frequency(tmp_path):
    config = make_config(tmp_path, observation_filter="NoFilter").training(num_epochs=1)
    algo = config.checkpointing(checkpoint_frequency=2).build()
    try:
        first, second = algo.train(), algo.train()
        assert "checkpoint_path" not in first
        path = Path(second["checkpoint_path"])
        assert path == algo.trial_dir / "checkpoint_000002"
        restored = PPO.from_checkpoint(str(path))
        try:
            assert restored.counters.training_iteration == 2
        finally:
            restored.stop()
    finally:
        algo.stop()


def test_checkpoint_of_env_class(tmp_path):
    config = make_config(tmp_path, env=envs.DictObsEnv, observation_filter="NoFilter")
    algo = config.training(num_epochs=1).build()
    try:
        algo.train()
        path = algo.save(str(tmp_path / "ckpt"))
        restored = PPO.from_checkpoint(path)
        try:
            space = envs.DictObsEnv.observation_space
            space.seed(3)
            for _ in range(5):
                obs = space.sample()
                assert algo.compute_single_action(obs, explore=False) == restored.compute_single_action(
                    obs, explore=False
                )
        finally:
            restored.stop()
    finally:
        algo.stop()


def test_weights_load_into_plain_torch(tmp_path):
    algo = make_config(tmp_path, observation_filter="NoFilter").training(num_epochs=1).build()
    try:
        algo.train()
        path = Path(algo.save(str(tmp_path / "ckpt")))
        tensors = load_file(str(path / "policy.safetensors"))
        assert {"pi.0.weight", "pi.0.bias", "pi.2.weight", "pi.2.bias", "pi.4.weight", "pi.4.bias"} <= set(
            tensors
        )
        net = torch.nn.Sequential(
            torch.nn.Linear(4, HIDDENS[0]),
            torch.nn.Tanh(),
            torch.nn.Linear(HIDDENS[0], HIDDENS[1]),
            torch.nn.Tanh(),
            torch.nn.Linear(HIDDENS[1], 2),
        )
        net.load_state_dict({k.removeprefix("pi."): v for k, v in tensors.items() if k.startswith("pi.")})
        for obs in observations():
            with torch.no_grad():
                logits = net(torch.from_numpy(obs)[None])[0].numpy()
            action, _, extra = algo.compute_single_action(obs, explore=False, full_fetch=True)
            np.testing.assert_allclose(logits, np.asarray(extra["action_dist_inputs"]), rtol=1e-5, atol=1e-6)
            assert action == int(np.argmax(logits))
    finally:
        algo.stop()


def test_checkpoint_has_no_pickle(trained):
    _, path = trained
    files = {p.name for p in Path(path).iterdir()}
    assert {METADATA_FILE, "policy.safetensors", "optimizer.safetensors", "filter.npz"} <= files
    assert not [name for name in files if name.endswith((".pkl", ".pickle", ".pt", ".pth", ".tmp"))]
    metadata = json.loads((Path(path) / METADATA_FILE).read_text())
    assert metadata["format_version"] == 1
    assert metadata["algorithm"] == "PPO"
    assert metadata["counters"]["training_iteration"] == 2
    assert set(metadata["files"]) == {"policy.safetensors", "optimizer.safetensors", "filter.npz"}
    with np.load(Path(path) / "filter.npz", allow_pickle=False) as data:
        assert set(data.files) == {"count", "mean", "m2"}


def test_missing_directory(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        PPO.from_checkpoint(str(tmp_path / "nope"))


def test_missing_metadata_file(tmp_path):
    with pytest.raises(ValueError, match=f"not an rltrainer checkpoint: it has no {METADATA_FILE}"):
        PPO.from_checkpoint(str(tmp_path))


def test_corrupted_metadata(checkpoint_copy):
    (checkpoint_copy / METADATA_FILE).write_text('{"format_version": 1, "algor')
    with pytest.raises(ValueError, match=f"{METADATA_FILE} is corrupted"):
        PPO.from_checkpoint(str(checkpoint_copy))


@pytest.mark.parametrize("version", [999, None, "1"])
def test_unknown_format_version(checkpoint_copy, version):
    meta_path = checkpoint_copy / METADATA_FILE
    metadata = json.loads(meta_path.read_text())
    metadata["format_version"] = version
    meta_path.write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match=f"format version {version!r}.*reads version 1"):
        PPO.from_checkpoint(str(checkpoint_copy))


@pytest.mark.parametrize("name", ["policy.safetensors", "optimizer.safetensors", "filter.npz"])
def test_missing_file(checkpoint_copy, name):
    (checkpoint_copy / name).unlink()
    with pytest.raises(ValueError, match=f"incomplete: {name} is missing"):
        PPO.from_checkpoint(str(checkpoint_copy))


@pytest.mark.parametrize("name", ["policy.safetensors", "optimizer.safetensors", "filter.npz"])
def test_tampered_file(checkpoint_copy, name):
    file = checkpoint_copy / name
    data = bytearray(file.read_bytes())
    data[-1] ^= 0xFF
    file.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"corrupted: {name} does not match its recorded sha256"):
        PPO.from_checkpoint(str(checkpoint_copy))


def test_restore_reports_damage_too(checkpoint_copy, tmp_path):
    (checkpoint_copy / "policy.safetensors").unlink()
    algo = make_config(tmp_path).build()
    try:
        with pytest.raises(ValueError, match="policy.safetensors is missing"):
            algo.restore(str(checkpoint_copy))
    finally:
        algo.stop()


def test_restore_into_env_with_other_spaces(trained, tmp_path):
    _, path = trained
    algo = make_config(tmp_path, env="Acrobot-v1").build()
    try:
        with pytest.raises(ValueError, match="trained with observation_space .* but this env has"):
            algo.restore(path)
    finally:
        algo.stop()


def test_from_checkpoint_with_other_env_fails(trained):
    _, path = trained
    with pytest.raises(ValueError, match="observation_space"):
        PPO.from_checkpoint(path, config_overrides={"env": "Acrobot-v1"})


def test_restore_with_other_model_fails(trained, tmp_path):
    _, path = trained
    algo = make_config(tmp_path).training(model={"fcnet_hiddens": [8]}).build()
    try:
        with pytest.raises(ValueError, match="holds a different network"):
            algo.restore(path)
    finally:
        algo.stop()


def test_restore_with_other_observation_filter_fails(trained, tmp_path):
    """MeanStdFilter statistics cannot be dropped silently: the policy was trained on normalized inputs."""
    _, path = trained
    algo = make_config(tmp_path, observation_filter="NoFilter").build()
    try:
        with pytest.raises(ValueError, match="MeanStdFilter"):
            algo.restore(path)
    finally:
        algo.stop()


def test_restore_no_filter_checkpoint_into_mean_std_filter_fails(tmp_path):
    algo = make_config(tmp_path, observation_filter="NoFilter").training(num_epochs=1).build()
    try:
        algo.train()
        path = algo.save(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    with pytest.raises(ValueError, match="NoFilter"):
        PPO.from_checkpoint(path, config_overrides={"observation_filter": "MeanStdFilter"})


@pytest.mark.parametrize(
    "space",
    [
        spaces.Box(-np.inf, np.inf, (4,), np.float32),
        spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, np.inf]), dtype=np.float64),
        spaces.Box(0, 255, (2, 3, 1), np.uint8),
        spaces.Discrete(5, start=-2),
        spaces.MultiDiscrete([[2, 3], [4, 5]]),
        spaces.MultiDiscrete([3, 4], start=[-1, 2]),
        spaces.MultiBinary(3),
        spaces.MultiBinary([2, 2]),
        spaces.Dict(
            {"a": spaces.Discrete(2), "b": spaces.Tuple((spaces.Box(-1.0, 1.0, (2,)), spaces.Discrete(3)))}
        ),
    ],
    ids=[
        "box-inf",
        "box-bounds",
        "box-uint8",
        "discrete",
        "multidiscrete",
        "multidiscrete-start",
        "multibinary",
        "multibinary-2d",
        "nested",
    ],
)
def test_space_json_round_trip(space):
    data = space_to_json(space)
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert space_from_json(data) == space


@pytest.mark.parametrize(
    ("data", "match"),
    [({"type": "Graph"}, "unknown space type 'Graph'"), ({"type": "Discrete"}, "invalid space description")],
)
def test_space_from_bad_json(data, match):
    with pytest.raises(ValueError, match=match):
        space_from_json(data)


@pytest.mark.parametrize("bad_name", ["../escaped.bin", "/etc/passwd", "sub/dir.bin", ".."])
def test_manifest_naming_a_file_outside_the_checkpoint_is_rejected(tmp_path, bad_name):
    source = tmp_path / "crafted"
    source.mkdir()
    (tmp_path / "escaped.bin").write_bytes(b"x")
    manifest = {"format_version": 1, "algorithm": "PPO", "config": {}, "files": {bad_name: {"size": 1}}}
    (source / "rltrainer_checkpoint.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="the manifest names an invalid file"):
        Checkpoint.load(source)
    target = tmp_path / "deep" / "download"
    with pytest.raises(ValueError, match="the manifest names an invalid file"):
        download_checkpoint(str(source), target)
    assert not (tmp_path / "deep" / "escaped.bin").exists()


def test_listing_and_inspecting_checkpoints_never_import_torch(trained) -> None:
    """``rltrainer checkpoints list|inspect`` read manifests only: half a second, not torch's 3."""
    from tests.fresh_python import python_output

    checkpoint, trial = str(trained[1]), str(Path(trained[1]).parent)
    out = python_output(
        "import contextlib, io, sys\n"
        "from rltrainer.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as shown:\n"
        f"    codes = main(['checkpoints', 'list', {trial!r}]),"
        f" main(['checkpoints', 'inspect', {checkpoint!r}])\n"
        "print(codes, 'checkpoint_' in shown.getvalue(), 'torch' in sys.modules)\n"
    )
    assert out == "(0, 0) True False"
