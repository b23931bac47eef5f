"""The RLlib documents' command-line forms: ``train --run ALGO --env ENV`` for every algorithm
with its defaults, ``train -f``, ``rollout``, ``--framework torch``, RLlib's train flags (mapped
or refused in one line). In-process, tiny budgets."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from rltrainer import cli_compat
from rltrainer.algorithms.registry import ALGORITHMS, get_config_class
from rltrainer.algorithms.resource_checks import ACTORS_PER_CORE
from rltrainer.cli import build_parser, main
from rltrainer.core.cluster import on_started_instance

REPO = Path(__file__).resolve().parents[1]
TINY = '{"train_batch_size": 256, "minibatch_size": 64, "num_epochs": 1}'
ONE_ITERATION = '{"training_iteration": 1}'


def rllib_train(storage: Path, *extra: str) -> list[str]:
    return [
        "train", "--run", "PPO", "--env", "CartPole-v1", "--local-dir", str(storage),
        "--stop", ONE_ITERATION, "--config", TINY, *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One tiny PPO iteration, trained with RLlib's spellings of the flags."""
    storage = tmp_path_factory.mktemp("results")
    args = rllib_train(storage, "--framework", "torch", "--torch", "--experiment-name", "docs")
    assert main([*args, "--checkpoint-at-end", "--num-samples", "1"]) == 0
    (path,) = storage.glob("docs/*/checkpoint_000001")
    return str(path)


def one_error_line(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert err.startswith("rltrainer: error: ") and err.count("\n") == 1, err
    return err


# --- train ------------------------------------------------------------------------------


def test_train_dash_f_is_train_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    yaml_file = str(REPO / "tuned_examples/ppo_cartpole.yaml")
    argv = ["train", "-f", yaml_file, "--stop", ONE_ITERATION, "--local-dir", str(tmp_path)]
    assert main(argv) == 0, capsys.readouterr().err
    assert "stopping when training_iteration >= 1" in capsys.readouterr().out
    assert list((tmp_path / "cartpole-ppo").glob("*/result.json"))  # the file's experiment name
    assert vars(build_parser().parse_args(["train", "-f", "a.yaml"]))["config_file"] == "a.yaml"


def test_two_experiment_files_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    yaml_file = str(REPO / "tuned_examples/ppo_cartpole.yaml")
    assert main(["train", "-f", yaml_file, "file", yaml_file, "--local-dir", str(tmp_path)]) == 2
    assert "two experiment files: -f" in capsys.readouterr().err


def test_checkpoint_flags_map_to_the_config() -> None:
    from rltrainer.cli import _train_setup

    argv = [
        "train", "--run", "PPO", "--env", "CartPole-v1", "--local-dir", "/tmp/r", "--experiment-name", "e",
        "--keep-checkpoints-num", "3", "--checkpoint-score-attr", "min-episode_return_mean",
    ]  # fmt: skip
    config, _, _ = _train_setup(build_parser().parse_args(argv))
    assert (config.storage_path, config.experiment_name, config.num_to_keep) == ("/tmp/r", "e", 3)
    assert (config.checkpoint_score_attribute, config.checkpoint_score_order) == (
        "episode_return_mean",
        "min",
    )


def test_restore_continues_from_the_checkpoint(
    checkpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = rllib_train(tmp_path, "--restore", checkpoint)
    argv[argv.index("--stop") + 1] = '{"training_iteration": 2}'
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"resuming from {checkpoint}" in out and "iter=2 " in out and "iter=1 " not in out


# --- every algorithm, as the documents write it, with its defaults ----------------------------
#: The env the documents train each algorithm on: Pendulum for the continuous-action ones.
PENDULUM = {"DDPG", "TD3", "APEX_DDPG", "SAC", "CQL"}
#: What sizes one iteration, made small (Ape-X's lasts 30 s and 25k steps, ES's samples 1000
#: episodes, IMPALA's and APPO's last 10 s); the resources (env runners, envs, CPUs, learners)
#: stay the algorithm's defaults.
SHORTER_ITERATION = {
    "A2C": {"min_time_s_per_iteration": 0},
    "A3C": {"min_time_s_per_iteration": 0},
    "APEX": {"min_time_s_per_iteration": 0, "min_sample_timesteps_per_iteration": 1000},
    "APEX_DDPG": {"min_time_s_per_iteration": 0, "min_sample_timesteps_per_iteration": 1000},
    "APPO": {"min_time_s_per_iteration": 0},
    "ARS": {"num_rollouts": 8, "rollouts_used": 8},
    "ES": {"episodes_per_batch": 20, "train_batch_size": 500},
    "IMPALA": {"min_time_s_per_iteration": 0},
}
#: The cores of the laptop the documents' commands must run on.
LAPTOP_CORES = 2
#: The algorithms whose command ``make test`` runs: those without actors by default. Every
#: algorithm's defaults are fitted in ``make test`` (the test below, no actors started); the
#: others' commands train in ``make e2e`` (2 to 4 actors each, ~180 CPU-s in all).
TRAINED_IN_MAKE_TEST = {"PPO", "DQN", "SAC", "MARWIL", "BC", "DDPG", "TD3", "CQL", "PG"}


def documents_command(algorithm: str, storage: Path) -> list[str]:
    """``rltrainer train --run ALGO --env ENV`` for one iteration, a short one where the
    algorithm's default iteration is long (``SHORTER_ITERATION``)."""
    env = "Pendulum-v1" if algorithm in PENDULUM else "CartPole-v1"
    argv = ["train", "--run", algorithm, "--env", env, "--stop", ONE_ITERATION, "--local-dir", str(storage)]
    if algorithm in SHORTER_ITERATION:
        argv += ["--config", json.dumps(SHORTER_ITERATION[algorithm])]
    return argv


def expected_fit(algorithm: str) -> tuple[int, list[str]]:
    """The env runners a 2-core laptop runs of ``algorithm``'s default, and the logged line's
    start when that is fewer."""
    default = get_config_class(algorithm)().num_env_runners
    fitted = min(default, ACTORS_PER_CORE * LAPTOP_CORES)
    line = f"num_env_runners lowered from {default} ({algorithm}'s default) to {fitted}"
    return fitted, [line] if fitted < default else []


def lowered_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    messages = [record.getMessage() for record in caplog.records]
    return [message.split(":")[0] for message in messages if "num_env_runners lowered" in message]


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_every_algorithms_defaults_are_fitted_to_a_laptop(
    algorithm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What the command below decides before it starts Ray, for every algorithm: the defaults
    fit 2 cores once a runner count they cannot hold is lowered, in one logged line."""
    from rltrainer.algorithms.resource_checks import check_cpus, check_gpus, fit_env_runners
    from rltrainer.commands.train import _train_setup

    monkeypatch.setattr(os, "cpu_count", lambda: LAPTOP_CORES)
    config, _, _ = _train_setup(build_parser().parse_args(documents_command(algorithm, tmp_path)))
    with caplog.at_level(logging.WARNING, logger="rltrainer.algorithms.resource_checks"):
        fit_env_runners(config)
    check_cpus(config)  # raises ResourceError where the actors would not fit
    check_gpus(config, on_cluster=False)
    fitted, lines = expected_fit(algorithm)
    assert (config.num_env_runners, lowered_lines(caplog)) == (fitted, lines)


@pytest.fixture(scope="module")
def own_ray_instance() -> object:
    """The commands start Ray as a user's would (rltrainer's own local instance): the first one
    that needs actors starts it and the others run on it, so their defaults are fitted to the
    machine too. Shut down after the module."""
    import ray

    if ray.is_initialized():  # another module's connection: these commands start their own
        ray.shutdown()
    yield
    ray.shutdown()


@pytest.mark.parametrize(
    "algorithm",
    [
        pytest.param(
            algorithm,
            marks=()
            if algorithm in TRAINED_IN_MAKE_TEST
            else pytest.mark.e2e_only("test_every_algorithms_defaults_are_fitted_to_a_laptop"),
        )
        for algorithm in ALGORITHMS
    ],
)
def test_the_documents_command_trains_every_algorithm_with_its_defaults_on_a_laptop(
    algorithm: str,
    own_ray_instance: object,  # noqa: ARG001
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture,
) -> None:
    """``rltrainer train --run ALGO --env ENV``, as RLlib's documents write it, trains one
    iteration on 2 cores: a default runner count the machine cannot hold (Ape-X's 32, ES's 10) is
    lowered to what it holds, in one logged line; nothing else is changed or refused."""
    monkeypatch.setattr(os, "cpu_count", lambda: LAPTOP_CORES)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a laptop's shell: no cluster
    with caplog.at_level(logging.WARNING, logger="rltrainer.algorithms.resource_checks"):
        code = main(documents_command(algorithm, tmp_path))
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    assert "stopped: training_iteration reached 1" in out
    fitted, lines = expected_fit(algorithm)
    if fitted:  # its actors ran on the local instance rltrainer started (the first such command's)
        assert on_started_instance()
    (params,) = tmp_path.glob("*/*/params.json")
    assert json.loads(params.read_text())["num_env_runners"] == fitted
    assert lowered_lines(caplog) == lines


# name: (argv after the common train flags, words of the one error line)
REFUSED = {
    "tf": (["--framework", "tf"], ["--framework tf", "torch only"]),
    "tf2 with =": (["--framework=tf2"], ["--framework tf2", "torch only"]),
    "eager": (["--eager"], ["--eager", "torch only"]),
    "trace": (["--trace"], ["--trace", "torch only"]),
    "unknown scheduler": (["--scheduler", "hyperband"], ["unknown scheduler 'hyperband'", "fifo, asha, pbt"]),
    "pbt without mutations": (["--scheduler", "PBT"], ["pbt scheduler: set hyperparam_mutations"]),
    "unknown metric": (
        ["--num-samples", "2", "--metric", "episode_reward_maen"],
        ["unknown metric", "did you mean episode_return_mean"],
    ),
    "restore in a sweep": (["--num-samples", "2", "--restore", "x"], ["a sweep continues with --resume"]),
    "upload dir": (["--upload-dir", "s3://b/p"], ["--storage-path s3://"]),
    "local mode": (["--local-mode"], ["num_env_runners"]),
    "ray ui": (["--ray-ui"], ["--ray-address"]),
    "ray address and cpus": (["--ray-address", "auto", "--ray-num-cpus", "2"], ["pass one"]),
    "restore not a checkpoint": (["--restore", "/nonexistent/ckpt"], ["does not exist"]),
    "restore and resume-from": (["--restore", "a", "--resume", "--resume-from", "b"], ["pass one"]),
}


@pytest.mark.parametrize("case", REFUSED)
def test_unsupported_train_flags_are_one_line(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    extra, words = REFUSED[case]
    assert main(rllib_train(tmp_path, *extra)) == 2
    err = one_error_line(capsys)
    for word in words:
        assert word in err
    assert not list(tmp_path.glob("*/*/result.json"))  # nothing trained


def test_train_help_lists_the_documents_flags(capsys: pytest.CaptureFixture) -> None:
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    flags = [
        "--run", "--env", "--config", "--stop", "-f", "--framework", "--torch", "--eager", "--trace",
        "--checkpoint-freq", "--checkpoint-at-end", "--local-dir", "--storage-path", "--restore", "--resume",
        "--num-samples", "-v", "--ray-address", "--ray-num-cpus", "--ray-num-gpus", "--keep-checkpoints-num",
        "--checkpoint-score-attr", "--experiment-name", "--name", "--upload-dir", "--scheduler",
        "--local-mode", "--ray-ui",
    ]  # fmt: skip
    assert [flag for flag in flags if f"{flag} " not in out and f"{flag}," not in out] == []


def test_ray_flags_start_or_join_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    calls: list[dict] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append({"shutdown": True}))
    with cli_compat.ray_session({"ray_num_cpus": 3, "ray_num_gpus": 0}):
        pass
    with cli_compat.ray_session({"ray_address": "ray://head:10001"}):
        pass
    with cli_compat.ray_session({}):
        pass
    assert calls[0]["address"] == "local" and (calls[0]["num_cpus"], calls[0]["num_gpus"]) == (3, 0)
    assert calls[2] == {"address": "ray://head:10001", "log_to_driver": True}
    assert calls[1] == calls[3] == {"shutdown": True} and len(calls) == 4


# --- rollout ----------------------------------------------------------------------------


def test_rollout_writes_json_lines(checkpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "rollouts.jsonl"
    argv = ["rollout", checkpoint, "--run", "PPO", "--env", "CartPole-v1", "--steps", "50"]
    assert main([*argv, "--out", str(out), "--no-render", "--track-progress", "--local-mode"]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("episode ")]
    episodes = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(episodes) == len(printed) >= 1
    assert sum(e["length"] for e in episodes) == 50
    assert set(episodes[0]) == {"episode", "return", "length", "finished", "video"}
    assert [e["episode"] for e in episodes] == list(range(len(episodes)))


def test_rollout_episodes_and_video_dir(
    checkpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["rollout", checkpoint, "--episodes", "1", "--video-dir", str(tmp_path / "v")]) == 0
    assert "mean return over 1 episode:" in capsys.readouterr().out
    assert [p.name for p in (tmp_path / "v").iterdir()] == ["episode_000.mp4"]


ROLLOUT_REFUSED = {
    "other algorithm": (["--run", "DQN"], ["--run DQN disagrees", "PPO wrote"]),
    "unknown algorithm": (["--run", "XYZ"], ["unknown algorithm 'XYZ'"]),
    "other spaces": (["--env", "Pendulum-v1"], ["observation_space"]),
    "shelve": (["--use-shelve", "--out", "x"], ["pickle", "JSON line"]),
    "save info": (["--save-info"], ["pickle", "--out FILE"]),
    "render": (["--render"], ["--video-dir"]),
    "progress without out": (["--track-progress"], ["needs --out"]),
    "unwritable out": (["--out", "/nonexistent/dir/x.jsonl"], ["cannot write --out"]),
}


@pytest.mark.parametrize("case", ROLLOUT_REFUSED)
def test_rollout_mistakes_are_one_line(checkpoint: str, case: str, capsys: pytest.CaptureFixture) -> None:
    extra, words = ROLLOUT_REFUSED[case]
    assert main(["rollout", checkpoint, "--steps", "5", *extra]) == 2
    err = one_error_line(capsys)
    for word in words:
        assert word in err


def test_rollout_steps_and_episodes_exclusive(capsys: pytest.CaptureFixture) -> None:
    assert main(["rollout", "x", "--steps", "5", "--episodes", "1"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
