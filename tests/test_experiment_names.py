"""Experiment names are one folder under ``storage_path``: none of them leads out of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.cli import main
from rltrainer.errors import ConfigError
from rltrainer.storage import EXPERIMENT_NAME_RULE, check_experiment_name
from rltrainer.tune.sweep_settings import SweepSettings, check_sweep

ESCAPES = ["../../escape", "..", ".", "a/b", "a\\b", "nul\0byte", ".hidden", "x/../../y", ""]


@pytest.mark.parametrize("name", ESCAPES)
def test_names_that_are_not_one_folder_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="one folder name"):
        check_experiment_name(name)


@pytest.mark.parametrize("name", ["cartpole", "PPO_CartPole-v1", "sweep.v2", "my run"])
def test_ordinary_names_pass(name: str) -> None:
    assert check_experiment_name(name) == name


def test_cli_name_cannot_write_outside_the_storage_path(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    storage = tmp_path / "runs" / "T"
    code = main(
        ["train", "--algo", "PPO", "--env", "CartPole-v1", "--storage-path", str(storage),
         "--name", "../../escape", "--stop", '{"training_iteration": 1}']
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and EXPERIMENT_NAME_RULE in err and "'../../escape'" in err
    assert not (tmp_path / "escape").exists()


def test_config_experiment_name_is_checked_at_build(tmp_path: Path) -> None:
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .update_from_dict({"storage_path": str(tmp_path / "T"), "experiment_name": "../out"})
    )
    with pytest.raises(ConfigError, match="experiment_name '../out' is not allowed"):
        config.build()
    assert not (tmp_path / "out").exists()


def test_s3_prefix_from_a_name_is_checked_too() -> None:
    config = PPOConfig().environment("CartPole-v1")
    config.update_from_dict({"storage_path": "s3://bucket/runs", "experiment_name": "../../other-bucket"})
    settings = SweepSettings(num_samples=2)
    with pytest.raises(ConfigError, match="one folder name"):
        check_sweep(config, {"training_iteration": 1}, settings)


def test_operator_refuses_such_a_name() -> None:
    from rltrainer_operator.validation import InvalidSpec, validate_experiment

    body = {
        "apiVersion": "rltrainer.io/v1alpha1",
        "kind": "RLExperiment",
        "metadata": {"name": "a..b", "namespace": "default"},
        "spec": {
            "algorithm": "PPO",
            "env": "CartPole-v1",
            "checkpoint": {"uri": "s3://checkpoints/rl"},
        },
    }
    with pytest.raises(InvalidSpec) as raised:
        validate_experiment(body)
    assert raised.value.field == "metadata.name"
    body["metadata"]["name"] = "cartpole"
    assert validate_experiment(body).spec.algorithm == "PPO"
