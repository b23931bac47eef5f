"""Bad input, everywhere a user can give it: one clear line (or one typed exception), never a
traceback, never a hang, nothing written or corrupted.

Five families, each one parametrized table: the CLI's flags and experiment files, the config
API, checkpoints (missing, truncated, tampered, pickled, symlinked, of another algorithm), envs
(raising, wrong shapes, unsupported spaces) and storage (local paths; S3 through a real S3 server,
SeaweedFS, on 127.0.0.1: no bucket, no credentials, a key that may only read, endpoint down).
Every CLI case must exit 2 with exactly one ``error:`` line holding the expected words, and leave
its storage folder without a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.dqn import DQNConfig
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.cli import main
from rltrainer.errors import CheckpointError, ConfigError, EnvError, RLTrainerError
from rltrainer_operator.testing.s3_server import UNMADE_BUCKET
from tests.conftest import use_s3_identity

STOP1 = '{"training_iteration": 1}'
SMALL = '{"train_batch_size": 64, "minibatch_size": 64, "num_epochs": 1, "model": {"fcnet_hiddens": [8]}}'


def one_error_line(err: str, words: str) -> str:
    """The stderr of a refused command: no traceback, one ``error:`` line holding ``words``."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    assert words in lines[0], f"{words!r} not in {lines[0]!r}"
    return lines[0]


def no_files_under(folder: Path) -> None:
    written = [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []
    assert not written, written


# --- envs the cases use ---------------------------------------------------------------------


class _Base(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict | None = None) -> None:
        self.config = config or {}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {}


class RaisesInReset(_Base):
    def reset(self, *, seed=None, options=None):
        raise RuntimeError("the simulator is not running")


class RaisesInStep(_Base):
    def step(self, action):
        raise KeyError("joint_7")


class WrongShape(_Base):
    def reset(self, *, seed=None, options=None):
        return np.zeros(5, np.float32), {}


class GraphObservations(_Base):
    observation_space = gym.spaces.Graph(node_space=gym.spaces.Box(0, 1, (2,)), edge_space=None)


class TextActions(_Base):
    action_space = gym.spaces.Text(4)


class NoSpaces(gym.Env):
    def __init__(self, config: dict | None = None) -> None:
        pass

    def reset(self, *, seed=None, options=None):
        return 0, {}


class RaisesInInit(_Base):
    def __init__(self, config: dict | None = None) -> None:
        raise ValueError("missing map file")


ENVS = "tests.test_bad_input"


# --- the CLI ------------------------------------------------------------------------------------


def _train(*args: str) -> list[str]:
    return ["train", *args]


def _ppo(*args: str, env: str = "CartPole-v1") -> list[str]:
    return ["train", "--algo", "PPO", "--env", env, "--stop", STOP1, *args]


#: id -> (argv, the words the error line must hold). ``{tmp}`` is the test's temporary folder.
CLI: dict[str, tuple[list[str], str]] = {
    # what to train
    "no-algo": (_train("--env", "CartPole-v1"), "--algo"),
    "unknown-algo": (_train("--algo", "PPO2", "--env", "CartPole-v1"), "PPO2"),
    "algo-lowercase-typo": (_train("--algo", "ppoo", "--env", "CartPole-v1"), "ppoo"),
    "no-env": (_train("--algo", "PPO"), "--env"),
    "unknown-gym-id": (_ppo(env="CartPol-v1"), "CartPol-v1"),
    "env-module-missing": (_ppo(env="no_such_module:Env"), "no_such_module"),
    "env-class-missing": (_ppo(env=f"{ENVS}:Nope"), "Nope"),
    "env-not-an-env": (_ppo(env=f"{ENVS}:one_error_line"), "one_error_line"),
    "env-raises-in-init": (_ppo(env=f"{ENVS}:RaisesInInit"), "missing map file"),
    "env-raises-in-reset": (_ppo(env=f"{ENVS}:RaisesInReset"), "the simulator is not running"),
    "env-raises-in-step": (_ppo(env=f"{ENVS}:RaisesInStep"), "joint_7"),
    "env-wrong-shape": (_ppo(env=f"{ENVS}:WrongShape"), "observation"),
    "env-graph-space": (_ppo(env=f"{ENVS}:GraphObservations"), "unsupported observation space Graph"),
    "env-text-actions": (_ppo(env=f"{ENVS}:TextActions"), "action space"),
    "env-without-spaces": (_ppo(env=f"{ENVS}:NoSpaces"), "space"),
    "dqn-continuous-actions": (
        ["train", "--algo", "DQN", "--env", "Pendulum-v1", "--stop", STOP1],
        "Discrete",
    ),
    # --config
    "config-not-json": (_ppo("--config", "{lr: 1}"), "--config"),
    "config-a-list": (_ppo("--config", "[1, 2]"), "--config"),
    "config-a-number": (_ppo("--config", "3"), "--config"),
    "config-unknown-key": (_ppo("--config", '{"learning_rate": 0.1}'), "learning_rate"),
    "config-key-typo-hint": (_ppo("--config", '{"num_epoch": 3}'), "num_epochs"),
    "config-lr-string": (_ppo("--config", '{"lr": "fast"}'), "lr"),
    "config-lr-negative": (_ppo("--config", '{"lr": -0.1}'), "lr"),
    "config-lr-schedule-unsorted": (_ppo("--config", '{"lr": [[100, 0.1], [0, 0.2]]}'), "lr"),
    "config-gamma-above-1": (_ppo("--config", '{"gamma": 1.5}'), "gamma"),
    "config-clip-negative": (_ppo("--config", '{"clip_param": -1}'), "clip_param"),
    "config-minibatch-too-big": (
        _ppo("--config", '{"train_batch_size": 64, "minibatch_size": 128}'),
        "minibatch_size",
    ),
    "config-envs-zero": (_ppo("--config", '{"num_envs_per_env_runner": 0}'), "num_envs_per_env_runner"),
    "config-runners-negative": (_ppo("--config", '{"num_env_runners": -1}'), "num_env_runners"),
    "config-hiddens-not-list": (_ppo("--config", '{"model": {"fcnet_hiddens": 64}}'), "fcnet_hiddens"),
    "config-unknown-model-key": (_ppo("--config", '{"model": {"fcnet_hidden": [64]}}'), "fcnet_hidden"),
    "config-activation-unknown": (
        _ppo("--config", '{"model": {"fcnet_activation": "swishy"}}'),
        "fcnet_activation",
    ),
    "config-filter-unknown": (_ppo("--config", '{"observation_filter": "Zscore"}'), "Zscore"),
    "config-batch-mode-unknown": (_ppo("--config", '{"batch_mode": "episodes"}'), "batch_mode"),
    "config-log-level-unknown": (_ppo("--config", '{"log_level": "LOUD"}'), "log_level"),
    "config-on-nonfinite-unknown": (_ppo("--config", '{"on_nonfinite": "ignore"}'), "on_nonfinite"),
    "config-credentials-in-options": (
        _ppo("--config", '{"storage_options": {"aws_secret_access_key": "x"}}'),
        "does not belong in storage_options",
    ),
    "config-storage-option-unknown": (_ppo("--config", '{"storage_options": {"bucket": "x"}}'), "bucket"),
    "config-callbacks-missing": (_ppo("--config", '{"callbacks_class": "nowhere:Callbacks"}'), "nowhere"),
    "config-exploration-unknown": (
        _ppo("--config", '{"exploration_config": {"type": "Curiosity2"}}'),
        "Curiosity2",
    ),
    "config-search-space-bad-value": (_ppo("--config", '{"lr": {"grid_search": [0.001, -1]}}'), "-1"),
    "config-horizon-not-positive": (_ppo("--config", '{"horizon": 0}'), "horizon"),
    "config-soft-horizon-documented": (_ppo("--config", '{"soft_horizon": true}'), "soft_horizon"),
    "config-tf-framework": (_ppo("--config", '{"framework": "tf2"}'), "tf2"),
    # --stop
    "stop-not-json": (_train("--algo", "PPO", "--env", "CartPole-v1", "--stop", "iterations=3"), "--stop"),
    "stop-unknown-key": (
        _train("--algo", "PPO", "--env", "CartPole-v1", "--stop", '{"reward": 100}'),
        "reward",
    ),
    "stop-not-a-number": (
        _train("--algo", "PPO", "--env", "CartPole-v1", "--stop", '{"training_iteration": "ten"}'),
        "training_iteration",
    ),
    "stop-a-list": (_train("--algo", "PPO", "--env", "CartPole-v1", "--stop", "[1]"), "--stop"),
    # other flags
    "checkpoint-freq-negative": (_ppo("--checkpoint-freq", "-1"), "checkpoint"),
    "checkpoint-freq-word": (_ppo("--checkpoint-freq", "often"), "--checkpoint-freq"),
    "keep-checkpoints-zero": (_ppo("--keep-checkpoints-num", "0"), "--keep-checkpoints-num"),
    "framework-tf": (_ppo("--framework", "tf"), "tf"),
    "eager": (_ppo("--eager"), "--eager"),
    "upload-dir": (_ppo("--upload-dir", "s3://b/x"), "--upload-dir"),
    "resume-from-without-resume": (_ppo("--resume-from", "{tmp}/nothing"), "--resume-from"),
    "restore-missing": (_ppo("--restore", "{tmp}/nothing"), "nothing"),
    "num-samples-zero": (_ppo("--num-samples", "0"), "--num-samples"),
    "scheduler-unknown": (_ppo("--num-samples", "2", "--scheduler", "hyperband"), "hyperband"),
    "scheduler-config-not-json": (
        _ppo("--scheduler", "asha", "--scheduler-config", "{max_t"),
        "--scheduler-config",
    ),
    "pbt-without-mutations": (_ppo("--scheduler", "pbt"), "hyperparam_mutations"),
    "sweep-metric-unknown": (
        _ppo("--num-samples", "2", "--metric", "episode_reward_maen"),
        "episode_reward_maen",
    ),
    "sweep-mode-unknown": (_ppo("--num-samples", "2", "--mode", "maximize"), "maximize"),
    "unknown-flag": (_ppo("--learning-rate", "0.1"), "unrecognized argument --learning-rate"),
    "flag-typo-hint": (_ppo("--chekpoint-freq", "3"), "did you mean --checkpoint-freq?"),
    # experiment files
    "file-missing": (_train("file", "{tmp}/nothing.yaml"), "nothing.yaml"),
    "file-not-yaml": (_train("file", "{tmp}/broken.yaml"), "broken.yaml"),
    "file-a-list": (_train("file", "{tmp}/list.yaml"), "list.yaml"),
    "file-no-run": (_train("file", "{tmp}/norun.yaml"), "run"),
    "file-unknown-field": (_train("file", "{tmp}/unknown.yaml"), "stopp"),
    "file-two-experiments-and-flag": (_train("-f", "{tmp}/list.yaml", "file", "{tmp}/norun.yaml"), "two"),
    # evaluate and rollout
    "evaluate-missing": (["evaluate", "{tmp}/nothing"], "does not exist"),
    "evaluate-not-a-checkpoint": (["evaluate", "{tmp}"], "not an rltrainer checkpoint"),
    "evaluate-episodes-zero": (["evaluate", "{ckpt}", "--episodes", "0"], "--episodes"),
    "evaluate-episodes-word": (["evaluate", "{ckpt}", "--episodes", "many"], "--episodes"),
    "evaluate-other-env-shape": (["evaluate", "{ckpt}", "--env", "Acrobot-v1"], "observation_space"),
    "evaluate-config-unknown": (["evaluate", "{ckpt}", "--config", '{"nope": 1}'], "nope"),
    "rollout-steps-and-episodes": (["rollout", "{ckpt}", "--steps", "10", "--episodes", "2"], "--steps"),
    # checkpoints commands
    "checkpoints-list-missing": (["checkpoints", "list", "{tmp}/nothing"], "does not exist"),
    "checkpoints-list-a-file": (["checkpoints", "list", "{tmp}/list.yaml"], "is not a folder"),
    "checkpoints-inspect-missing": (["checkpoints", "inspect", "{tmp}/nothing"], "does not exist"),
    "checkpoints-download-missing": (
        ["checkpoints", "download", "{tmp}/nothing", "{tmp}/to"],
        "does not exist",
    ),
    "checkpoints-download-into-a-file": (
        ["checkpoints", "download", "{ckpt}", "{tmp}/list.yaml"],
        "already exists",
    ),
    "checkpoints-no-verb": (["checkpoints"], "checkpoints"),
}

EXPERIMENT_FILES = {
    "broken.yaml": "exp:\n  run: PPO\n  env: [unclosed\n",
    "list.yaml": "- run: PPO\n- env: CartPole-v1\n",
    "norun.yaml": "exp:\n  env: CartPole-v1\n  stop: {training_iteration: 1}\n",
    "unknown.yaml": "exp:\n  run: PPO\n  env: CartPole-v1\n  stopp: {training_iteration: 1}\n",
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    """One valid PPO CartPole checkpoint (tiny network), made once for the module."""
    folder = tmp_path_factory.mktemp("good")
    config = (
        PPOConfig.from_dict(json.loads(SMALL)).environment("CartPole-v1").reporting(storage_path=str(folder))
    )
    algo = config.build()
    try:
        algo.train()
        return algo.save()
    finally:
        algo.stop()


@pytest.mark.parametrize("case", CLI)
def test_cli(case, checkpoint, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, text in EXPERIMENT_FILES.items():
        (tmp_path / name).write_text(text)
    before = {p: p.stat().st_mtime_ns for p in Path(checkpoint).iterdir()}
    argv, words = CLI[case]
    storage = tmp_path / "out"
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{ckpt}", checkpoint) for a in argv]
    if argv[0] == "train" and "file" not in argv and "-f" not in argv:
        argv += ["--storage-path", str(storage)]
    assert main(argv) == 2
    one_error_line(capsys.readouterr().err, words)
    no_files_under(storage)
    assert {p: p.stat().st_mtime_ns for p in Path(checkpoint).iterdir()} == before  # never touched


# --- the config API -----------------------------------------------------------------------------

API: dict[str, tuple[Callable[[], object], type[Exception], str]] = {
    "training-unknown-kwarg": (lambda: PPOConfig().training(learning_rate=1.0), ConfigError, "learning_rate"),
    "training-wrong-type": (lambda: PPOConfig().training(num_epochs="3x"), ConfigError, "num_epochs"),
    "env-runners-negative": (
        lambda: PPOConfig().env_runners(num_env_runners=-2),
        ConfigError,
        "num_env_runners",
    ),
    "resources-negative-gpus": (lambda: PPOConfig().resources(num_gpus=-1), ConfigError, "num_gpus"),
    "learners-negative": (lambda: PPOConfig().resources(num_learners=-1), ConfigError, "num_learners"),
    "from-dict-unknown": (lambda: PPOConfig.from_dict({"lrr": 0.1}), ConfigError, "lrr"),
    "from-dict-not-a-dict": (lambda: PPOConfig.from_dict([("lr", 0.1)]), ConfigError, "dict"),
    "update-from-dict-wrong": (lambda: PPOConfig().update_from_dict({"gamma": "high"}), ConfigError, "gamma"),
    "build-without-env": (lambda: PPOConfig().build(), ConfigError, "env"),
    "build-unknown-env": (lambda: PPOConfig().environment("NoSuchEnv-v0").build(), EnvError, "NoSuchEnv-v0"),
    "dqn-box-actions": (lambda: DQNConfig().environment("Pendulum-v1").build(), RLTrainerError, "Discrete"),
    "dqn-unknown-buffer": (
        lambda: (
            DQNConfig()
            .environment("CartPole-v1")
            .training(replay_buffer_config={"type": "MagicBuffer"})
            .validate()
        ),
        ConfigError,
        "MagicBuffer",
    ),
    "exploration-unknown-type": (
        lambda: PPOConfig().exploration(exploration_config={"type": "Nope"}),
        ConfigError,
        "Nope",
    ),
    "evaluation-interval-negative": (
        lambda: PPOConfig().evaluation(evaluation_interval=-1),
        ConfigError,
        "evaluation",
    ),
    "evaluation-duration-unit": (
        lambda: PPOConfig().evaluation(evaluation_duration_unit="hours"),
        ConfigError,
        "hours",
    ),
    "callbacks-not-a-class": (lambda: PPOConfig().callbacks(42), ConfigError, "callbacks"),
    "checkpointing-keep-zero": (lambda: PPOConfig().checkpointing(num_to_keep=0), ConfigError, "num_to_keep"),
    "getitem-unknown": (lambda: PPOConfig()["lrr"], KeyError, "lrr"),
    "search-space-bad-value": (
        lambda: PPOConfig().training(lr={"grid_search": [0.1, "x"]}),
        ConfigError,
        "lr",
    ),
    "validate-search-space": (
        lambda: PPOConfig().environment("CartPole-v1").training(lr={"grid_search": [0.1, 0.2]}).build(),
        ConfigError,
        "search spaces are resolved by Ray Tune",
    ),
    "compute-action-wrong-shape": (
        lambda: _fresh_algo().compute_single_action(np.zeros(7)),
        EnvError,
        "an observation of shape (7,) does not fit the observation space Box(",
    ),
    "compute-action-a-dict": (
        lambda: _fresh_algo().compute_single_action({"x": 1}),
        EnvError,
        "dict {'x': 1} does not fit the observation space",
    ),
}


def _fresh_algo() -> Algorithm:
    algo = PPOConfig.from_dict(json.loads(SMALL)).environment("CartPole-v1").build()
    _BUILT.append(algo)
    return algo


_BUILT: list[Algorithm] = []


@pytest.mark.parametrize("case", API)
def test_config_api(case):
    make, error, words = API[case]
    try:
        with pytest.raises(error) as err:
            make()
        assert words in str(err.value), str(err.value)
        assert "Traceback" not in str(err.value)
    finally:
        while _BUILT:
            _BUILT.pop().stop()


# --- checkpoints --------------------------------------------------------------------------------


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "rltrainer_checkpoint.json").read_text())


def _write_manifest(folder: Path, manifest: dict) -> None:
    (folder / "rltrainer_checkpoint.json").write_text(json.dumps(manifest))


def _rehash(folder: Path, name: str) -> None:
    """Make the manifest agree with a tampered file, so the content check itself is tested."""
    data = (folder / name).read_bytes()
    manifest = _manifest(folder)
    manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    _write_manifest(folder, manifest)


def _pickle_payload(name: str) -> Callable[[Path], None]:
    def tamper(folder: Path) -> None:
        (folder / name).write_bytes(pickle.dumps({"__reduce__": "os.system"}))
        _rehash(folder, name)

    return tamper


def _edit_manifest(**changes) -> Callable[[Path], None]:
    def tamper(folder: Path) -> None:
        manifest = _manifest(folder)
        for key, value in changes.items():
            manifest[key] = value(manifest) if callable(value) else value
        _write_manifest(folder, manifest)

    return tamper


def _files(entries: Callable[[dict], dict]) -> Callable[[Path], None]:
    return _edit_manifest(files=lambda m: entries(m["files"]))


def _truncate(folder: Path) -> None:
    path = folder / "policy.safetensors"
    path.write_bytes(path.read_bytes()[:100])


def _truncate_rehashed(folder: Path) -> None:
    _truncate(folder)
    _rehash(folder, "policy.safetensors")


def _flip_byte(folder: Path) -> None:
    path = folder / "optimizer.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def _symlink_out(folder: Path) -> None:
    (folder / "policy.safetensors").unlink()
    os.symlink("/etc/hostname", folder / "policy.safetensors")
    _rehash(folder, "policy.safetensors")


def _object_array(folder: Path) -> None:
    with open(folder / "filter.npz", "wb") as f:
        np.savez(f, mean=np.array([{"a": 1}], dtype=object))
    _rehash(folder, "filter.npz")


def _other_network(folder: Path) -> None:
    import torch
    from safetensors.torch import save_file

    save_file({"bogus": torch.zeros(3)}, str(folder / "policy.safetensors"))
    _rehash(folder, "policy.safetensors")


def _empty(folder: Path) -> None:
    for path in folder.iterdir():
        path.unlink()


#: id -> (how to spoil a copy of the good checkpoint, the words the error must hold)
CHECKPOINTS: dict[str, tuple[Callable[[Path], None], str]] = {
    "empty-folder": (_empty, "not an rltrainer checkpoint"),
    "no-manifest": (lambda f: (f / "rltrainer_checkpoint.json").unlink(), "not an rltrainer checkpoint"),
    "manifest-not-json": (lambda f: (f / "rltrainer_checkpoint.json").write_text("{"), "corrupted"),
    "manifest-pickled": (
        lambda f: (f / "rltrainer_checkpoint.json").write_bytes(pickle.dumps({})),
        "corrupted",
    ),
    "format-version-unknown": (_edit_manifest(format_version=99), "format version 99"),
    "format-version-missing": (_edit_manifest(format_version=None), "format version None"),
    "no-config": (_edit_manifest(config=lambda m: m.pop("config") and None), "config"),
    "file-missing": (lambda f: (f / "optimizer.safetensors").unlink(), "optimizer.safetensors is missing"),
    "truncated": (_truncate, "policy.safetensors does not match its recorded sha256"),
    "truncated-rehashed": (_truncate_rehashed, "cannot read policy.safetensors"),
    "byte-flipped": (_flip_byte, "optimizer.safetensors does not match its recorded sha256"),
    "manifest-dotdot": (_files(lambda f: {**f, "../outside": f["policy.safetensors"]}), "'../outside'"),
    "manifest-absolute": (_files(lambda f: {**f, "/etc/passwd": f["policy.safetensors"]}), "'/etc/passwd'"),
    "manifest-subfolder": (_files(lambda f: {**f, "sub/x": f["policy.safetensors"]}), "'sub/x'"),
    "symlink-out-of-folder": (_symlink_out, "symbolic link"),
    "pickle-in-policy": (_pickle_payload("policy.safetensors"), "cannot read policy.safetensors"),
    "pickle-in-optimizer": (_pickle_payload("optimizer.safetensors"), "cannot read optimizer.safetensors"),
    "pickle-in-filter": (_pickle_payload("filter.npz"), "cannot read filter.npz"),
    "object-array-in-filter": (_object_array, "cannot read filter.npz"),
    "other-network": (_other_network, "holds a different network"),
    "unknown-algorithm": (_edit_manifest(algorithm="PPO2"), "PPO2"),
    "invalid-config": (_edit_manifest(config=lambda m: {**m["config"], "lr": "fast"}), "invalid config"),
    "other-observation-space": (
        _edit_manifest(observation_space={"type": "Discrete", "n": 3, "start": 0, "dtype": "int64"}),
        "observation_space",
    ),
}


@pytest.mark.parametrize("case", CHECKPOINTS)
def test_checkpoint(case, checkpoint, tmp_path, capsys):
    spoil, words = CHECKPOINTS[case]
    folder = tmp_path / "checkpoint_000001"
    shutil.copytree(checkpoint, folder, symlinks=True)
    spoil(folder)
    files = {p.name: p.read_bytes() for p in folder.iterdir() if not p.is_symlink()}
    assert main(["evaluate", str(folder), "--episodes", "1"]) == 2
    one_error_line(capsys.readouterr().err, words)
    with pytest.raises((CheckpointError, ConfigError, EnvError)) as err:
        Algorithm.from_checkpoint(str(folder)).stop()
    assert words in str(err.value)
    assert {p.name: p.read_bytes() for p in folder.iterdir() if not p.is_symlink()} == files  # untouched


def test_another_algorithms_checkpoint(checkpoint):
    algo = DQNConfig().environment("CartPole-v1").build()
    try:
        with pytest.raises(CheckpointError, match="PPO checkpoint.*DQN|DQN.*PPO"):
            algo.restore(checkpoint)
    finally:
        algo.stop()


# --- storage: local paths and S3 ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def s3(real_s3):
    """The real S3 server (its bucket ``exists``), the pods' identity in the environment."""
    with pytest.MonkeyPatch.context() as mp:
        use_s3_identity(mp, real_s3)
        yield real_s3


FAST_S3 = '{"storage_options": {"max_attempts": 2, "retry_delay_s": 0.01, "connect_timeout": 1}}'

STORAGE: dict[str, tuple[list[str], str]] = {
    "local-missing-parent": (
        _ppo("--storage-path", "/proc/nothing/runs"),
        "is not a folder rltrainer can write to",
    ),
    "local-a-file": (_ppo("--storage-path", "{tmp}/afile"), "is not a folder rltrainer can write to"),
    "local-under-a-file": (
        _ppo("--storage-path", "{tmp}/afile/runs"),
        "is not a folder rltrainer can write to",
    ),
    "s3-no-bucket-name": (_ppo("--storage-path", "s3:///runs", "--config", FAST_S3), "names no bucket"),
    "s3-missing-bucket": (
        _ppo("--storage-path", f"s3://{UNMADE_BUCKET}/runs", "--config", FAST_S3),
        "NoSuchBucket",
    ),
    "s3-endpoint-down": (
        _ppo(
            "--storage-path",
            "s3://exists/runs",
            "--config",
            FAST_S3.replace("2,", '2, "endpoint_url": "{down}",'),
        ),
        "cannot",
    ),
    "s3-no-credentials": (_ppo("--storage-path", "s3://exists/runs", "--config", FAST_S3), "credentials"),
    "s3-evaluate-missing": (["evaluate", "s3://exists/nothing/checkpoint_000001"], "does not exist"),
    "s3-inspect-missing-bucket": (["checkpoints", "inspect", f"s3://{UNMADE_BUCKET}/x"], "NoSuchBucket"),
    "s3-read-only-key": (
        _ppo("--storage-path", "s3://exists/runs", "--config", FAST_S3),
        "PutObject: AccessDenied",
    ),
    "s3-download-missing": (["checkpoints", "download", "s3://exists/nothing", "{tmp}/to"], "does not exist"),
}


@pytest.mark.parametrize("case", STORAGE)
def test_storage(case, s3, tmp_path, capsys, monkeypatch):

    (tmp_path / "afile").write_text("x")
    if case == "s3-read-only-key":
        use_s3_identity(monkeypatch, s3, "reader")
    if case == "s3-no-credentials":
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    argv, words = STORAGE[case]
    down = f"http://127.0.0.1:{_free_port()}"
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{down}", down) for a in argv]
    assert main(argv) == 2
    line = one_error_line(capsys.readouterr().err, words)
    assert all(identity.secret_key not in line for identity in s3.identities.values())
    listing = s3.client("admin").list_objects_v2(Bucket="exists", Prefix="runs/")
    assert listing.get("KeyCount", 0) == 0  # nothing written
    assert {p.name for p in tmp_path.iterdir()} <= {"afile", "to"}


def test_the_suite_has_at_least_100_cases():
    assert len(CLI) + len(API) + len(CHECKPOINTS) + len(STORAGE) + 1 >= 100
