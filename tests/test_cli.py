"""The ``rltrainer`` command line: train, checkpoint, evaluate, and one-line errors.

A few tests run ``python -m rltrainer`` as a subprocess (each pays ~2 s of imports); the
rest call ``main([...])`` in-process with tiny budgets.
"""

from __future__ import annotations

import io
import json
import logging
import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rltrainer.algorithms.registry import ALGORITHMS
from rltrainer.cli import ProgressReporter, build_parser, main
from rltrainer.errors import ConfigError
from rltrainer.experiment import INTERRUPTED, reached_stop, resolve_stop, run_experiment

REPO = Path(__file__).resolve().parents[1]
TINY = '{"train_batch_size": 256, "minibatch_size": 64, "num_epochs": 1}'
CHECKPOINT_LINE = re.compile(r"^evaluate it with: rltrainer evaluate (\S+)$", re.MULTILINE)


def rltrainer(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rltrainer", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def train_args(storage: Path, *extra: str) -> list[str]:
    return [
        "train", "--algo", "PPO", "--env", "CartPole-v1", "--storage-path", str(storage),
        "--stop", '{"training_iteration": 2}', "--config", TINY, *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A CartPole PPO checkpoint trained in-process for 2 tiny iterations."""
    storage = tmp_path_factory.mktemp("results")
    assert main(train_args(storage, "--checkpoint-at-end")) == 0
    (path,) = storage.glob("PPO_CartPole-v1/*/checkpoint_000002")
    return str(path)


# --- end to end, as a user runs it ------------------------------------------------------


def test_train_checkpoint_evaluate_with_video(tmp_path: Path) -> None:
    train = rltrainer(*train_args(tmp_path, "--checkpoint-at-end", "--name", "smoke"))
    assert train.returncode == 0, train.stderr
    lines = train.stdout.splitlines()
    trial_dir = Path(next(line for line in lines if line.startswith("trial directory: ")).split(": ", 1)[1])
    assert trial_dir.parent == tmp_path / "smoke"
    progress = [line for line in lines if line.startswith("iter=")]
    assert len(progress) == 2  # stdout is a pipe: plain key=value lines, one per iteration
    row = r"iter=2 timesteps=\d+ return=(\d+\.\d\d|nan) steps/s=\d+ time_s=\d+\.\d"
    assert re.fullmatch(row, progress[1])
    for name in ("params.json", "result.json", "progress.csv"):
        assert (trial_dir / name).stat().st_size > 0, name
    assert list(trial_dir.glob("events.out.tfevents.*"))
    assert len((trial_dir / "result.json").read_text().splitlines()) == 2
    checkpoint = CHECKPOINT_LINE.search(train.stdout).group(1)
    assert Path(checkpoint) == trial_dir / "checkpoint_000002"

    videos = tmp_path / "videos"
    evaluate = rltrainer("evaluate", checkpoint, "--episodes", "1", "--video", str(videos))
    assert evaluate.returncode == 0, evaluate.stderr
    assert re.search(r"^episode 1: return=\d+\.00 length=\d+", evaluate.stdout, re.MULTILINE)
    assert re.search(r"^mean return over 1 episode: \d+\.00$", evaluate.stdout, re.MULTILINE)
    assert [p.name for p in videos.iterdir()] == ["episode_000.mp4"]
    assert (videos / "episode_000.mp4").stat().st_size > 1000


def test_ctrl_c_stops_cleanly_with_a_checkpoint(tmp_path: Path) -> None:
    args = train_args(tmp_path, "--checkpoint-at-end")
    args[args.index("--stop") + 1] = '{"training_iteration": 1000000}'
    proc = subprocess.Popen(
        [sys.executable, "-m", "rltrainer", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C's default disposition in the child, whatever this process inherited: a suite
        # started in the background by a non-interactive shell runs with SIGINT ignored, which
        # every child inherits, and Python then installs no KeyboardInterrupt handler.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("*/*/result.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "interrupted after" in stderr
    checkpoint = Path(CHECKPOINT_LINE.search(stdout).group(1))
    assert (checkpoint / "rltrainer_checkpoint.json").is_file()


def test_user_error_from_the_command_has_no_traceback(tmp_path: Path) -> None:
    proc = rltrainer("train", "--algo", "PPO", "--env", "CartPol-v1", "--storage-path", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.startswith("rltrainer: error: unknown env 'CartPol-v1'")
    assert "CartPole-v1" in proc.stderr
    assert "Traceback" not in proc.stderr


# --- train --------------------------------------------------------------------------------


def test_train_file_tuned_example_with_overrides(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(
        [
            "train", "file", str(REPO / "tuned_examples/ppo_cartpole.yaml"),
            "--stop", '{"training_iteration": 1}', "--config", '{"gamma": 0.9}',
            "--storage-path", str(tmp_path),
        ]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    # The experiment's name is the folder: one trial folder, and the progress.json beside it.
    (trial_dir,) = [p for p in (tmp_path / "cartpole-ppo").iterdir() if p.is_dir()]
    params = json.loads((trial_dir / "params.json").read_text())
    assert params["gamma"] == 0.9  # --config over the file
    assert params["lambda"] == 0.9  # the file's config
    assert params["model"]["fcnet_hiddens"] == [64, 64]
    out = capsys.readouterr().out
    assert "stopping when training_iteration >= 1\n" in out  # --stop replaced the file's stop
    assert "no checkpoint saved" in out


def test_flags_may_come_before_or_after_file() -> None:
    argv = ["train", "-v", "--stop", "{}", "file", "x.yaml", "--name", "n", "--checkpoint-at-end"]
    args = vars(build_parser().parse_args(argv))
    assert {k: args[k] for k in ("verbose", "stop", "path", "name", "checkpoint_at_end")} == {
        "verbose": 1, "stop": "{}", "path": "x.yaml", "name": "n", "checkpoint_at_end": True
    }  # fmt: skip


def test_default_stop_is_100_iterations_and_vv_is_debug() -> None:
    from rltrainer.cli import _train_setup

    rltrainer_logger = logging.getLogger("rltrainer")
    level = rltrainer_logger.level
    try:
        args = build_parser().parse_args(["train", "--algo", "ppo", "--env", "CartPole-v1", "-vv"])
        config, stop, is_default = _train_setup(args)
        assert rltrainer_logger.level == logging.DEBUG
    finally:
        rltrainer_logger.setLevel(level)
    assert (stop, is_default) == ({"training_iteration": 100}, True)
    assert config.log_level == "DEBUG"


def test_progress_table_on_a_terminal() -> None:
    out = io.StringIO()
    reporter = ProgressReporter(out, tty=True)
    for i, mean_return in ((1, math.nan), (2, 21.5)):
        reporter.on_result(
            {
                "training_iteration": i,
                "timesteps_total": 4000 * i,
                "episode_return_mean": mean_return,
                "num_env_steps_sampled_per_s": 9000.4,
                "time_total_s": 1.25 * i,
            }
        )
    header, first, second = out.getvalue().splitlines()
    assert header.split() == ["iter", "timesteps", "return", "steps/s", "time", "s"]
    assert first.split() == ["1", "4000", "nan", "9000", "1.2"]
    assert second.split() == ["2", "8000", "21.50", "9000", "2.5"]
    assert len(header) == len(first) == len(second)  # aligned columns


# --- stop criteria and the experiment loop ------------------------------------------------


def test_stop_keys_accept_rllib_spellings() -> None:
    from rltrainer.algorithms.ppo import PPO

    stop = {"episode_reward_mean": 400, "env_runners/episode_return_mean": 450, "timesteps_total": 10}
    assert resolve_stop(stop, PPO) == stop  # results carry these names too
    assert resolve_stop({"env_runners/episode_reward_max": 9}, PPO) == {"env_runners/episode_reward_max": 9}
    assert resolve_stop({"episode_return_mean": 1}, PPO) == {"episode_return_mean": 1}
    with pytest.raises(ConfigError, match="must be a number"):
        resolve_stop({"training_iteration": "10"}, PPO)


def test_an_unknown_stop_key_names_the_closest_and_lists_our_names_only() -> None:
    """A typo gets the key it was meant to be; the list is rltrainer's own names (RLlib's names of
    the same numbers are summarized, not listed: they would triple the message)."""
    from rltrainer.algorithms.ppo import PPO, PPOConfig

    for keys_of in (PPO, PPOConfig):
        with pytest.raises(ConfigError) as raised:
            resolve_stop({"training_iterations": 5}, keys_of)
        message = str(raised.value)
        assert "unknown stop key 'training_iterations' (did you mean 'training_iteration'" in message
        assert "evaluation/episode_return_mean" in message and "RLlib's names of these" in message
        assert "sampler_results/episode_reward_mean" not in message and len(message) < 1600, message


def test_stop_when_any_key_reaches_its_value() -> None:
    stop = {"episode_return_mean": 475, "training_iteration": 10, "evaluation/episode_return_mean": 500}
    assert reached_stop({"training_iteration": 3, "episode_return_mean": math.nan}, stop) is None
    assert reached_stop({"training_iteration": 10, "episode_return_mean": 20.0}, stop) == "training_iteration"
    nested = {"training_iteration": 1, "evaluation": {"episode_return_mean": 500.0}}
    assert reached_stop(nested, stop) == "evaluation/episode_return_mean"


def test_interrupt_saves_a_checkpoint_at_end(tmp_path: Path) -> None:
    from rltrainer.algorithms.ppo import PPOConfig

    class InterruptSecond:
        def on_start(self, trial_dir: Path) -> None:
            self.trial_dir = trial_dir

        def on_result(self, result: dict) -> None:
            if result["training_iteration"] == 2:
                raise KeyboardInterrupt

    config = PPOConfig().environment("CartPole-v1").update_from_dict(json.loads(TINY))
    config.update_from_dict({"storage_path": str(tmp_path), "checkpoint_at_end": True})
    reporter = InterruptSecond()
    result = run_experiment(config, {"training_iteration": 100}, reporter=reporter)
    assert result.stopped_by == INTERRUPTED
    assert result.trial_dir == reporter.trial_dir
    assert result.last_result["training_iteration"] == result.iterations == 2
    assert result.checkpoint_path == str(result.trial_dir / "checkpoint_000002")


# --- evaluate -------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:.*CartPole-v0 is out of date")
def test_evaluate_steps_and_env_override(checkpoint: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["evaluate", checkpoint, "--steps", "30", "--env", "CartPole-v0", "--explore"]) == 0
    out = capsys.readouterr().out
    lengths = [int(n) for n in re.findall(r"length=(\d+)", out)]
    assert sum(lengths) == 30
    finished = len(re.findall(r"^episode \d+: .*length=\d+$", out, re.MULTILINE))
    assert out.splitlines()[-1].startswith(f"mean return over {finished} episode")


def test_evaluate_defaults_to_ten_greedy_episodes(checkpoint: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["evaluate", checkpoint]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"^episode \d+: return=", out, re.MULTILINE)) == 10
    assert re.search(r"^mean return over 10 episodes: \d+\.\d\d$", out, re.MULTILINE)

    from rltrainer.evaluation import default_explore, load_checkpoint

    algo = load_checkpoint(checkpoint, config_overrides={"evaluation_config": {"explore": True}})
    try:
        assert default_explore(algo) is True
    finally:
        algo.stop()


def test_evaluate_video_needs_rgb_array_rendering(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    env = "tests.envs:FixedLengthEnv"  # renders nothing
    train = [
        "train", "--algo", "PPO", "--env", env, "--stop", '{"training_iteration": 1}', "--checkpoint-at-end",
        "--config", '{"train_batch_size": 32, "minibatch_size": 32, "num_epochs": 1}',
        "--storage-path", str(tmp_path),
    ]  # fmt: skip
    assert main(train) == 0
    (checkpoint,) = tmp_path.glob("*/*/checkpoint_000001")
    capsys.readouterr()
    assert main(["evaluate", str(checkpoint), "--video", str(tmp_path / "videos")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rltrainer: error: env 'FixedLengthEnv' cannot record video")
    assert "rgb_array" in err
    assert not (tmp_path / "videos").exists()


# --- user mistakes: one line on stderr, exit 2 ----------------------------------------------


def _bad_yaml(tmp_path: Path) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text("exp:\n  env: CartPole-v1\n   run: PPO\n")  # run: indented too far
    return str(path)


def _two_experiments(tmp_path: Path) -> str:
    path = tmp_path / "two.yaml"
    path.write_text("a: {env: CartPole-v1, run: PPO}\nb: {env: CartPole-v1, run: PPO}\n")
    return str(path)


def _stop_not_a_mapping(tmp_path: Path) -> str:
    path = tmp_path / "stop.yaml"
    path.write_text("a: {env: CartPole-v1, run: PPO, stop: 10}\n")
    return str(path)


def _not_a_checkpoint(tmp_path: Path) -> str:
    (tmp_path / "empty").mkdir()
    return str(tmp_path / "empty")


def _train(*args: str):
    return lambda tmp_path: ["train", "--storage-path", str(tmp_path), *args]


def _file(make_file):
    return lambda tmp_path: ["train", "file", make_file(tmp_path)]


CARTPOLE = ("--algo", "PPO", "--env", "CartPole-v1")

# name: (tmp_path -> argv, words the message must contain)
USER_ERRORS = {
    "unknown algo": (
        _train("--algo", "DQNX", "--env", "CartPole-v1"),
        ["unknown algorithm 'DQNX'", f"available: {', '.join(sorted(ALGORITHMS))}"],
    ),
    "unknown env": (
        _train("--algo", "PPO", "--env", "NoSuchEnv-v0"),
        ["unknown env 'NoSuchEnv-v0'", "CartPole-v1"],
    ),
    "no algo": (_train("--env", "CartPole-v1"), ["no algorithm", "--algo"]),
    "no env": (_train("--algo", "PPO"), ["no env", "--env"]),
    "config json": (
        _train(*CARTPOLE, "--config", '{"lr": 0.1,}'),
        ["--config is not valid JSON", "line 1, column 12"],
    ),
    "stop json": (
        _train(*CARTPOLE, "--stop", "{training_iteration: 1}"),
        ["--stop is not valid JSON", "line 1, column 2"],
    ),
    "config not a dict": (_train(*CARTPOLE, "--config", "[1]"), ["--config must be a JSON object"]),
    "unknown config key": (
        _train(*CARTPOLE, "--config", '{"lrr": 1}'),
        ["--config", "unknown key 'lrr'", "did you mean 'lr'", "allowed:"],
    ),
    "invalid config value": (
        _train(*CARTPOLE, "--config", '{"gamma": 2}'),
        ["--config", "invalid value for 'gamma'"],
    ),
    "inconsistent config": (
        _train(*CARTPOLE, "--config", '{"minibatch_size": 9999}'),
        ["minibatch_size (9999) must be <= train_batch_size"],
    ),
    "unknown stop key": (
        _train(*CARTPOLE, "--stop", '{"reward": 1}'),
        ["unknown stop key 'reward'", "allowed:", "episode_return_mean"],
    ),
    "evaluation stop key without evaluation": (
        _train(*CARTPOLE, "--stop", '{"evaluation/episode_return_mean": 1}'),
        ["evaluation_interval"],
    ),
    "malformed yaml": (_file(_bad_yaml), ["bad.yaml: invalid YAML at line 3, column 7"]),
    "two experiments": (_file(_two_experiments), ["expected one experiment", "2 top-level keys"]),
    "stop not a mapping": (_file(_stop_not_a_mapping), ["a.stop must be a mapping"]),
    "missing file": (_file(lambda p: str(p / "nope.yaml")), ["cannot read experiment file", "nope.yaml"]),
    "missing checkpoint": (lambda p: ["evaluate", str(p / "nope")], ["checkpoint", "does not exist"]),
    "not a checkpoint": (
        lambda p: ["evaluate", _not_a_checkpoint(p)],
        ["is not an rltrainer checkpoint", "rltrainer_checkpoint.json"],
    ),
    "evaluate config json": (lambda p: ["evaluate", str(p), "--config", "{"], ["--config is not valid JSON"]),
}


@pytest.mark.parametrize("case", USER_ERRORS)
def test_user_errors_are_one_line(case: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    make_args, words = USER_ERRORS[case]
    assert main(make_args(tmp_path)) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("rltrainer: error: ")
    assert captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
    for word in words:
        assert word in captured.err
    assert not list(tmp_path.glob("*/*/result.json"))  # nothing trained


def test_checkpoint_of_other_spaces_is_refused(checkpoint: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["evaluate", checkpoint, "--env", "Pendulum-v1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rltrainer: error: checkpoint ") and "observation_space" in err


def test_results_folder_instead_of_checkpoint(checkpoint: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["evaluate", str(Path(checkpoint).parent)]) == 2
    assert f"newest checkpoint: {checkpoint}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--help"], ["train", "evaluate"]),
        (
            ["train", "--help"],
            ["--algo", "--stop", "--checkpoint-freq", "examples:", '{"training_iteration": 100}'],
        ),
        (["train", "file", "--help"], ["run: PPO", "--stop replaces"]),
        (["evaluate", "--help"], ["--episodes", "--steps", "--video", "--explore", "examples:"]),
    ],
)
def test_help(args: list[str], words: list[str], capsys: pytest.CaptureFixture) -> None:
    assert main(args) == 0
    out = capsys.readouterr().out
    for word in words:
        assert word in out


@pytest.mark.parametrize(
    "args",
    [[], ["evaluate", "x", "--episodes", "1", "--steps", "5"], ["train", "--checkpoint-freq", "-1"], ["fly"]],
)
def test_argparse_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture) -> None:
    assert main(args) == 2
    assert "usage:" in capsys.readouterr().err


def test_a_port_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture) -> None:
    assert main(["serve", "checkpoint", "--port", "70000"]) == 2
    err = capsys.readouterr().err
    assert "--port: must be a port from 0 to 65535, got 70000" in err and "Traceback" not in err
