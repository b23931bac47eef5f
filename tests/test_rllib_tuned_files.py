"""RLlib's tuned-example files run as written: ``rltrainer train -f FILE --framework torch``.

The files under ``tests/data/rllib_tuned/`` are experiment files in RLlib's tuned-example
format (written for these tests from the key lists of ``rltrainer.algorithms.tuned_example_keys``,
with RLlib's values where they are cheap), together holding every key of the migration table.
All of them train one iteration through the CLI, in this process, and each key that names a
setting is checked to have set it (the trial's ``params.json``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from rltrainer.algorithms.aliases import ALIASES, PATH_ALIASES, PATH_VALUES, SCHEDULES
from rltrainer.algorithms.registry import get_algorithm_class
from rltrainer.algorithms.tuned_example_keys import (
    ALGORITHM_KEYS,
    COMMON_KEYS,
    describe,
    keys_by_algorithm,
    markdown,
    rows,
)
from rltrainer.cli import main
from rltrainer.errors import ConfigError
from rltrainer.experiment import resolve_stop

ROOT = Path(__file__).resolve().parent.parent
FILES = ROOT / "tests" / "data" / "rllib_tuned"
PAGE = ROOT / "docs" / "migrating" / "tuned-example-keys.md"
ONE_ITERATION = ("--framework", "torch", "--stop", '{"training_iteration": 1}')


def experiment(path: Path) -> tuple[str, dict[str, Any]]:
    ((name, spec),) = yaml.safe_load(path.read_text()).items()
    return name, spec


def file_keys(config: dict[str, Any]) -> dict[str, Any]:
    """A file's config keys with their values: each top-level key, and ``parent.key`` for
    the keys of a dict value."""
    keys = dict(config)
    for parent, value in config.items():
        if isinstance(value, dict):
            keys.update({f"{parent}.{key}": inner for key, inner in value.items()})
    return keys


def all_files() -> list[Path]:
    """Every file; those that record data (``output``) before those that read it."""
    paths = sorted(FILES.glob("*.yaml"))
    return sorted(paths, key=lambda path: "output" not in experiment(path)[1]["config"])


# --- the table ---------------------------------------------------------------------------------
def test_every_key_of_every_algorithm_is_something_in_rltrainer() -> None:
    for algorithm, keys in keys_by_algorithm().items():
        for key in keys:
            kind, _ = describe(algorithm, key)  # raises KeyError for a key that is nothing
            assert kind in ("same", "renamed", "no effect", "one value"), (algorithm, key)


def test_a_key_means_the_same_for_every_algorithm_using_it() -> None:
    for row in rows():
        names = list(ALGORITHM_KEYS) if row.algorithms == "all" else row.algorithms.split(", ")
        assert {describe(name, row.key) for name in names} == {(row.kind, row.what)}, row.key


def test_the_migration_page_is_the_table() -> None:
    assert PAGE.read_text() == markdown(), (
        "docs/migrating/tuned-example-keys.md is stale: python -m rltrainer.algorithms.tuned_example_keys "
        "> docs/migrating/tuned-example-keys.md"
    )


def test_the_files_hold_every_key_of_the_table() -> None:
    by_algorithm: dict[str, set[str]] = {}
    for path in all_files():
        _, spec = experiment(path)
        by_algorithm.setdefault(spec["run"], set()).update(file_keys(spec["config"]))
    assert set(by_algorithm) == set(ALGORITHM_KEYS)
    for algorithm, keys in ALGORITHM_KEYS.items():
        assert set(keys) <= by_algorithm[algorithm], (algorithm, sorted(set(keys) - by_algorithm[algorithm]))
    assert set(COMMON_KEYS) <= set().union(*by_algorithm.values())


# --- the files, through the CLI --------------------------------------------------------------
def expected_settings(algorithm: str, config: dict[str, Any]) -> dict[str, Any]:
    """``{setting path in params.json: value}`` for the file's keys that name a setting
    (same or renamed), where the value is the file's as written."""
    given = file_keys(config)
    scheduled = {PATH_ALIASES[key] for key in SCHEDULES if key in given}
    expected = {}
    for key, value in given.items():
        if (
            isinstance(value, dict)
            or key in PATH_VALUES
            or key in ("input", "input_config.paths", "input_evaluation", "output")
        ):
            continue  # dicts are checked key by key; these values take another form
        kind, _ = describe(algorithm, key)
        if kind not in ("same", "renamed"):
            continue
        parent, _, child = key.partition(".")
        target = PATH_ALIASES.get(key) or (
            f"{ALIASES.get(parent, parent)}.{child}" if child else ALIASES.get(key, key)
        )
        target = {"lambda_": "lambda", "framework_str": "framework", "input_": "input"}.get(target, target)
        if target in scheduled and key not in SCHEDULES or target == "framework":
            continue  # a schedule replaces the constant; --framework torch replaces the file's
        expected[target] = value
    return expected


def setting(params: dict[str, Any], path: str) -> Any:
    field, _, key = path.partition(".")
    return params[field][key] if key else params[field]


def test_the_files_train_one_iteration_with_their_keys_in_effect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capsys
) -> None:
    monkeypatch.chdir(tmp_path)  # the files record to and read from folders relative to here
    failures = []
    for path in all_files():
        name, spec = experiment(path)
        resolve_stop(spec["stop"], get_algorithm_class(spec["run"]))  # the file's own stop keys
        with caplog.at_level(logging.WARNING):
            code = main(["train", "-f", str(path), *ONE_ITERATION, "--local-dir", str(tmp_path / path.stem)])
        err = capsys.readouterr().err
        if code != 0:
            failures.append(f"{path.name}: exit {code}: {err[-2000:]}")
            continue
        (params_file,) = (tmp_path / path.stem / name).glob("*/params.json")
        params = json.loads(params_file.read_text())
        for target, value in expected_settings(spec["run"], spec["config"]).items():
            if setting(params, target) != value:
                failures.append(
                    f"{path.name}: {target} is {setting(params, target)!r}, the file says {value!r}"
                )
    assert not failures, "\n".join(failures)
    logged = [record.getMessage() for record in caplog.records]
    assert "enable_connectors has no effect in rltrainer: RLlib's switch" in "\n".join(logged)
    assert sum("optimizer.debug has no effect" in line for line in logged) == 1  # once, in apex's file


def test_a_tf_file_without_the_flag_is_refused_naming_it(tmp_path: Path, capsys) -> None:
    path = FILES / "pg-cartpole.yaml"
    assert main(["train", "-f", str(path), "--local-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "framework: 'tf': rltrainer is torch only; pass --framework torch" in err


@pytest.mark.parametrize("framework", ["tf", "tf2", "tfe"])
def test_the_flag_takes_only_torch(framework: str, tmp_path: Path, capsys) -> None:
    path = FILES / "pg-cartpole.yaml"
    assert main(["train", "-f", str(path), "--framework", framework, "--local-dir", str(tmp_path)]) == 2
    assert f"--framework {framework}: rltrainer is torch only" in capsys.readouterr().err


# --- what is refused, and why ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("algorithm", "settings", "message"),
    [
        ("APEX", {"optimizer": {"num_replay_buffer_shards": 1, "grads_per_step": 10}}, "'optimizer' holds"),
        (
            "DQN",
            {"final_prioritized_replay_beta": 1.0},
            "beta stays constant, at replay_buffer_config beta=0.4",
        ),
        ("DQN", {"prioritized_replay_beta": 1.0, "final_prioritized_replay_beta": 0.4}, "beta=1.0"),
        ("DQN", {"prioritized_replay": "yes"}, "prioritized_replay must be one of [True, False]"),
        ("DQN", {"num_atoms": 51}, "no distributional head"),
        ("DQN", {"noisy": True}, "no noisy layers"),
        ("DQN", {"adam_epsilon": 1e-8}, "Adam epsilon is fixed at 1e-5"),
        ("DQN", {"replay_buffer_config": {"replay_sequence_length": 20}}, "no recurrent replay"),
        ("DQN", {"replay_buffer_config": {"storage_unit": "sequences"}}, "single (n-step) transitions"),
        ("SAC", {"replay_buffer_config": {"batch_length_T": 64}}, "single (n-step) transitions"),
        ("DQN", {"replay_buffer_config": {"replay_burn_in": 20}}, "no recurrent state to burn in"),
        ("DQN", {"burn_in": 20}, "replay_burn_in=20 cannot take effect"),
        ("DQN", {"replay_buffer_config": {"replay_mode": "lockstep"}}, "lockstep replay is not built"),
        ("APEX", {"multiagent": {"replay_mode": "lockstep"}}, "lockstep replay is not built"),
        ("DDPG", {"replay_batch_size": 64}, "the replayed batch is train_batch_size transitions"),
        (
            "TD3",
            {"replay_buffer_config": {"underlying_buffer_config": {"type": "ReplayBuffer"}}},
            "set its type, capacity, alpha and beta there",
        ),
        ("DQN", {"replay_buffer_config": {"type": "SegmentTreeBuffer"}}, "unknown replay_buffer_config type"),
        ("DQN", {"replay_buffer_config": {"type": "ReservoirReplayBuffer"}}, "(reservoir sampling)"),
        (
            "SAC",
            {"replay_buffer_config": {"type": "ray.rllib.utils.replay_buffers.MultiAgentMixInReplayBuffer"}},
            "IMPALA and APPO mix in replay with replay_proportion",
        ),
        ("DDPG", {"replay_buffer_config": {"type": "FifoReplayBuffer"}}, "hands each added batch back once"),
        ("DQN", {"replay_buffer_config": {"replay_ratio": 0.66}}, "drawn from the buffer only"),
        ("SAC", {"worker_side_prioritization": True}, "TD errors from the driver's learner"),
        ("SAC", {"no_done_at_end": True}, "episodes end when the env ends them"),
        ("IMPALA", {"vtrace_drop_last_ts": True}, "bootstraps from the value of the next observation"),
        ("IMPALA", {"num_aggregation_workers": 2}, "no aggregation actors"),
        ("APPO", {"_separate_vf_optimizer": True}, "share one optimizer"),
        ("A3C", {"sample_async": True}, "use IMPALA or APPO"),
        ("A3C", {"use_pytorch": False}, "torch only"),
        ("MARWIL", {"input_evaluation": "is"}, "input_evaluation must be a list of estimator names"),
        ("PPO", {"buffer_size": 100}, "unknown key 'buffer_size'"),
        ("PPO", {"replay_buffer_config": {"learning_starts": 100}}, "unknown key 'replay_buffer_config'"),
        ("PPO", {"optimizer": {"num_replay_buffer_shards": 1}}, "unknown key 'optimizer'"),
    ],
)
def test_settings_rltrainer_cannot_honour_say_why(algorithm: str, settings: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        get_algorithm_class(algorithm).config_class.from_dict({"env": "CartPole-v1", **settings}).validate()
    assert message in str(err.value)


def test_a_refused_key_in_a_file_is_one_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "apex.yaml"
    path.write_text(
        "cartpole-apex:\n  env: CartPole-v0\n  run: APEX\n"
        "  config: {framework: tf, num_workers: 0, replay_buffer_config: {storage_unit: episodes}}\n"
    )
    assert main(["train", "-f", str(path), *ONE_ITERATION, "--local-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "storage_unit='episodes'" in err and "Traceback" not in err


# --- how the keys combine ---------------------------------------------------------------------
def test_nested_and_flat_replay_keys_update_the_current_buffer() -> None:
    config = get_algorithm_class("SAC").config_class.from_dict(
        {"buffer_size": 1000, "replay_buffer_config": {"prioritized_replay_alpha": 0.5, "learning_starts": 7}}
    )
    assert config.replay_buffer_config == {
        "type": "PrioritizedReplayBuffer",
        "capacity": 1000,
        "alpha": 0.5,
        "beta": 0.4,
    }
    assert config.num_steps_sampled_before_learning_starts == 7
    config.training(replay_buffer_config={"learning_starts": 9})  # the builder reads RLlib's keys too
    assert (
        config.num_steps_sampled_before_learning_starts == 9
        and config.replay_buffer_config["capacity"] == 1000
    )


def test_the_replay_buffer_classes_keys_set_what_they_name(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rltrainer.algorithms.rllib_keys"):
        config = get_algorithm_class("APEX").config_class.from_dict(
            {
                "env": "CartPole-v1",
                "replay_buffer_config": {
                    "type": "ray.rllib.utils.replay_buffers.MultiAgentPrioritizedReplayBuffer",
                    "min_size_for_sampling": 1000,  # RLlib 2.0-2.1's learning_starts
                    "capacity_ts": 20_000,  # RLlib 2.x's DDPG and Ape-X DDPG defaults' name
                    "replay_ratio": 1.0,  # MultiAgentMixInReplayBuffer's: replayed samples only
                    "storage_unit": "timesteps",
                    "replay_zero_init_states": False,
                    "num_shards": 2,
                },
            }
        )
    config.validate()
    assert config.num_steps_sampled_before_learning_starts == 1000
    assert config.replay_buffer_config["capacity"] == 20_000
    assert set(config.replay_buffer_config) == {"type", "capacity", "alpha", "beta"}
    assert [record.getMessage().split(":")[0] for record in caplog.records] == [
        "replay_buffer_config.replay_zero_init_states has no effect in rltrainer",
        "replay_buffer_config.num_shards has no effect in rltrainer",
    ]


PUBLISHED_APEX = ROOT / "tests" / "data" / "rllib_published" / "cartpole-apex-dqn.yaml"


def test_rllibs_published_apex_cartpole_file_trains_as_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys
) -> None:
    """RLlib's own file, unchanged: 3 env runners (they fit 2 cores), 2 replay shards, and
    replay_buffer_config's min_size_for_sampling; one iteration lasts its min_time_s_per_iteration (5 s)."""
    import ray

    try:
        with caplog.at_level(logging.WARNING):
            code = main(["train", "-f", str(PUBLISHED_APEX), *ONE_ITERATION, "--local-dir", str(tmp_path)])
    finally:
        ray.shutdown()  # the local instance its env runners started
    assert code == 0, capsys.readouterr().err[-2000:]
    (params_file,) = tmp_path.glob("cartpole-apex-dqn-training-itr/*/params.json")
    params = json.loads(params_file.read_text())
    assert params["num_steps_sampled_before_learning_starts"] == 1000
    assert params["replay_buffer_config"]["capacity"] == 20_000
    assert (params["num_env_runners"], params["num_replay_buffer_shards"]) == (3, 2)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "num_replay_buffer_shards=2: rltrainer's Ape-X keeps one replay buffer in the driver" in logged


@pytest.mark.parametrize("order", [("lr", "lr_schedule"), ("lr_schedule", "lr")])
def test_a_schedule_replaces_the_constant_in_either_order(order: tuple[str, str]) -> None:
    values = {"lr": 0.1, "lr_schedule": [[0, 0.001], [100, 0.0001]]}
    config = get_algorithm_class("PPO").config_class.from_dict({key: values[key] for key in order})
    assert [list(point) for point in config.lr] == [[0, 0.001], [100, 0.0001]]
    assert get_algorithm_class("PPO").config_class.from_dict({"lr": 0.1, "lr_schedule": None}).lr == 0.1


def test_sacs_older_names_set_its_networks_and_learning_rates() -> None:
    config = get_algorithm_class("SAC").config_class.from_dict(
        {
            "Q_model": {"fcnet_hiddens": [64]},
            "policy_model": {"fcnet_activation": "tanh"},
            "optimization": {"actor_learning_rate": 1e-3},
        }
    )
    assert config.q_model_config == {"fcnet_hiddens": [64], "fcnet_activation": "relu"}
    assert config.policy_model_config == {"fcnet_hiddens": [256, 256], "fcnet_activation": "tanh"}
    assert config.optimization_config["actor_learning_rate"] == 1e-3
    assert config["Q_model"] == config.q_model_config  # dict access by the older name


def test_a_no_effect_switch_logs_one_line_and_is_not_stored(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rltrainer.algorithms.rllib_keys"):
        config = get_algorithm_class("PPO").config_class.from_dict(
            {"enable_connectors": True, "simple_optimizer": True}
        )
    assert [record.getMessage().split(":")[0] for record in caplog.records] == [
        "enable_connectors has no effect in rltrainer",
        "simple_optimizer has no effect in rltrainer",
    ]
    assert "enable_connectors" not in config.to_dict()
    config.framework("torch", eager_tracing=True)  # a TensorFlow switch: accepted with torch


def test_rllib_1x_multiagent_dict_sets_the_multi_agent_settings() -> None:
    config = get_algorithm_class("PPO").config_class.from_dict(
        {"multiagent": {"count_steps_by": "agent_steps", "policies_to_train": ["learner"]}}
    )
    assert (config.count_steps_by, config.policies_to_train) == ("agent_steps", ["learner"])
    with pytest.raises(ConfigError, match=r"'multiagent' holds \['policy_map_capacity'\].*it reads"):
        get_algorithm_class("PPO").config_class.from_dict({"multiagent": {"policy_map_capacity": 100}})


def test_input_dataset_needs_the_paths_of_input_config() -> None:
    with pytest.raises(ConfigError, match="input='dataset' reads the files input_config names"):
        get_algorithm_class("BC").config_class.from_dict({"input": "dataset"})
