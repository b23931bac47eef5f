"""``.debugging()``: ``log_level`` in the driver, env runners and learners (``-v``/``-vv`` on the
command line), ``seed`` reproducible with remote actors, and ``logger_config``'s result writers."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import pytest

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.cli import main
from rltrainer.errors import ConfigError
from rltrainer.results import CSVLogger, JsonLogger, TBXLogger, logger_classes


@pytest.fixture(autouse=True)
def _restore_log_level():
    log = logging.getLogger("rltrainer")
    level = log.level
    yield
    log.setLevel(level)


def tiny(tmp_path: Path) -> PPOConfig:
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=16)
        .training(train_batch_size=32, minibatch_size=32, num_epochs=1, model={"fcnet_hiddens": [8]})
        .reporting(storage_path=str(tmp_path))
    )


# --- seeds and log levels with remote env runners and learners -----------------------------


def seeded_run(tmp_path: Path) -> dict:
    """Two iterations with 2 env-runner actors and a learner actor; what should repeat."""
    config = (
        tiny(tmp_path)
        .env_runners(num_env_runners=2, observation_filter="MeanStdFilter")
        .training(train_batch_size=64, minibatch_size=32, num_epochs=2)  # shuffled minibatches
        .resources(num_learners=1)
        .debugging(seed=11, log_level="INFO")
    )
    algo = config.build()
    try:
        results = [algo.train() for _ in range(2)]
        return {
            "curve": [(r["timesteps_total"], r["episodes_total"], r["episode_return_mean"]) for r in results],
            "weights": algo.get_policy().get_weights(),
            "runner_levels": algo.workers.foreach_worker(
                lambda _: (logging.getLogger("rltrainer").level, logging.getLogger("rltrainer").hasHandlers())
            ),
            "learner_levels": algo.learner_group.foreach_learner(
                lambda _: logging.getLogger("rltrainer").level
            ),
        }
    finally:
        algo.stop()


@pytest.fixture(scope="module")
def two_seeded_runs(local_ray, tmp_path_factory) -> tuple[dict, dict]:  # noqa: ARG001 - Ray for the actors
    return seeded_run(tmp_path_factory.mktemp("first")), seeded_run(tmp_path_factory.mktemp("second"))


def test_same_seed_same_curve_and_weights_with_remote_actors(two_seeded_runs) -> None:
    first, second = two_seeded_runs
    assert first["curve"] == second["curve"]
    assert first["curve"][-1][1] > 0  # episodes finished: the returns are compared, not NaNs
    assert first["weights"].keys() == second["weights"].keys()
    for name, value in first["weights"].items():
        np.testing.assert_array_equal(value, second["weights"][name], err_msg=name)


def test_log_level_applies_in_remote_env_runners_and_learners(two_seeded_runs) -> None:
    first, _ = two_seeded_runs
    # The driver's runner, then the two actors: INFO everywhere, each able to emit its records.
    assert first["runner_levels"] == [(logging.INFO, True)] * 3
    assert first["learner_levels"] == [logging.INFO]


@pytest.mark.usefixtures("local_ray")
def test_vv_shows_remote_env_runners_debug_records(tmp_path: Path, capfd) -> None:
    config = {"num_env_runners": 1, "train_batch_size": 32, "minibatch_size": 32, "num_epochs": 1}
    argv = ["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop", '{"training_iteration": 1}']
    argv += ["--config", json.dumps(config), "--storage-path", str(tmp_path), "-vv"]
    assert main(argv) == 0
    assert logging.getLogger("rltrainer").level == logging.DEBUG
    seen = ""
    deadline = time.monotonic() + 10  # Ray forwards the actor's stderr asynchronously
    while "DEBUG rltrainer.env.env_runner: env runner 1: 1 x CartPole-v1" not in seen:
        assert time.monotonic() < deadline, seen[-2000:]
        time.sleep(0.2)
        out, err = capfd.readouterr()
        seen += out + err


def test_warning_is_a_log_level() -> None:
    PPOConfig().debugging(log_level="WARNING")
    assert logging.getLogger("rltrainer").level == logging.WARNING


# --- logger_config ----------------------------------------------------------------------------


class RecordingLogger:
    """A result writer with Tune's ``Logger`` interface, recording what it was given."""

    calls: list[tuple] = []

    def __init__(self, config: dict, logdir: str) -> None:
        RecordingLogger.calls.append(("init", config["env"], logdir))

    def on_result(self, result: dict) -> None:
        RecordingLogger.calls.append(("result", result["training_iteration"]))

    def close(self) -> None:
        RecordingLogger.calls.append(("close",))


def trial_files(config: PPOConfig) -> tuple[set[str], str]:
    algo = config.build()
    algo.train()
    algo.stop()
    names = {
        "events" if p.name.startswith("events.out.tfevents") else p.name for p in algo.trial_dir.iterdir()
    }
    return names, str(algo.trial_dir)


def test_default_writes_json_csv_and_tensorboard(tmp_path: Path) -> None:
    names, _ = trial_files(tiny(tmp_path))
    assert names == {"params.json", "result.json", "progress.csv", "events"}


def test_logger_config_chooses_the_writers(tmp_path: Path) -> None:
    names, _ = trial_files(tiny(tmp_path).debugging(logger_config={"type": "json"}))
    assert names == {"params.json", "result.json"}
    RecordingLogger.calls.clear()
    config = tiny(tmp_path).debugging(logger_config={"type": ["csv", "tests.test_logging:RecordingLogger"]})
    names, trial_dir = trial_files(config)
    assert names == {"params.json", "progress.csv"}
    assert RecordingLogger.calls == [("init", "CartPole-v1", trial_dir), ("result", 1), ("close",)]


def test_logger_config_accepts_classes_and_tune_names() -> None:
    assert logger_classes({"type": "ray.tune.logger.UnifiedLogger"}) == [JsonLogger, CSVLogger, TBXLogger]
    assert logger_classes({"type": ["TBXLogger", "tensorboard", RecordingLogger]}) == [
        TBXLogger,
        RecordingLogger,
    ]
    config = PPOConfig().debugging(logger_config={"type": [RecordingLogger, "json"]})
    data = json.loads(json.dumps(config.to_dict()))  # checkpoints store it as JSON
    assert data["logger_config"] == {"type": ["tests.test_logging:RecordingLogger", "json"]}
    assert logger_classes(PPOConfig.from_dict(data).logger_config) == [RecordingLogger, JsonLogger]


def test_a_resumed_trial_holds_every_iteration_once(tmp_path: Path) -> None:
    """Killed after writing iteration 3's result, before its checkpoint (made here by
    checkpointing every 2nd iteration): resumed from checkpoint 2, the files hold 1, 2, 3, 4 once."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    algo = tiny(tmp_path).checkpointing(checkpoint_frequency=2).build()
    for _ in range(3):
        algo.train()
    algo.stop()
    time.sleep(1.1)  # the next event file's name (seconds) must differ, as after a real restart
    resumed = tiny(tmp_path).build()
    resumed.resume_from(str(algo.trial_dir / "checkpoint_000002"))
    resumed.train()
    last = resumed.train()
    resumed.stop()
    assert resumed.trial_dir == algo.trial_dir and last["training_iteration"] == 4
    lines = (algo.trial_dir / "result.json").read_text().splitlines()
    assert [json.loads(line)["training_iteration"] for line in lines] == [1, 2, 3, 4]
    rows = (algo.trial_dir / "progress.csv").read_text().splitlines()
    column = rows[0].split(",").index("training_iteration")
    assert [int(row.split(",")[column]) for row in rows[1:]] == [1, 2, 3, 4]
    events = EventAccumulator(str(algo.trial_dir))
    events.Reload()
    iterations = events.Scalars("rltrainer/training_iteration")
    assert [event.value for event in iterations] == [1, 2, 3, 4]  # the first run's 3 is purged


@pytest.mark.parametrize(
    ("logger_config", "message"),
    [
        ({"type": "no_such_module:Writer"}, r"'no_such_module:Writer' cannot be imported \(No module named"),
        ({"type": "xml"}, r"'xml' is not a result writer; allowed: json, csv, tensorboard, JsonLogger"),
        ({"type": "json", "logdir": "/tmp"}, r"logger_config takes one key, 'type'"),
        ({"type": "logging:Logger"}, r"'logging:Logger' is not a result writer"),
    ],
)
def test_bad_logger_config_says_what_is_allowed(logger_config: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PPOConfig().debugging(logger_config=logger_config)
