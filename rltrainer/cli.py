"""The ``rltrainer`` command: ``train``, ``evaluate`` (RLlib's ``rllib train|evaluate``), ``serve`` (a
checkpoint's policy over HTTP, see ``rltrainer.offline.policy_server``) and
``checkpoints list|download|inspect``. Paths may be ``s3://bucket/prefix`` URIs (S3 settings
from the standard AWS environment variables and config files, e.g. ``AWS_ENDPOINT_URL``).

User mistakes (unknown algorithm, env, config key or stop key; malformed JSON or YAML; a
missing or invalid checkpoint) print one ``rltrainer: error: ...`` line and exit 2. Any
other exception is a bug and keeps its traceback. Ctrl-C exits 130.

Heavy modules (torch, gymnasium) are imported inside the commands, so ``--help`` and
argument errors answer at once instead of after ~2 s of imports.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import shlex
import sys
from pathlib import Path
from typing import IO, Any

import yaml

from rltrainer import __version__
from rltrainer.cli_compat import (
    add_rollout_flags,
    add_train_flags,
    non_negative_int,
    positive_int,
    ray_flag_conflict,
    ray_session,
    train_settings,
)
from rltrainer.errors import ConfigError, RLTrainerError, WorkerError
from rltrainer.storage import check_experiment_name

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C

TRAIN_EXAMPLES = """\
examples:
  rltrainer train --algo PPO --env CartPole-v1
  rltrainer train --algo PPO --env CartPole-v1 --stop '{"episode_return_mean": 475}' \\
      --config '{"lr": 0.0003, "num_env_runners": 2}' --checkpoint-freq 10 --checkpoint-at-end
  rltrainer train file tuned_examples/ppo_cartpole.yaml --stop '{"training_iteration": 5}'
  rltrainer train --algo PPO --env CartPole-v1 --storage-path s3://bucket/runs --name cp \\
      --checkpoint-freq 5 --resume
  rltrainer train --run DQN --env CartPole-v1 --framework torch --local-dir ./results \\
      --checkpoint-freq 5 --keep-checkpoints-num 2 --checkpoint-score-attr episode_reward_mean
  rltrainer train -f tuned_examples/ppo_cartpole.yaml --ray-num-cpus 8

--config keys are the algorithm config's fields (RLlib names such as num_workers or lambda
work too). --stop ends training after the first iteration where ANY key reaches its value;
keys are result keys such as training_iteration, timesteps_total, episode_return_mean
(alias episode_reward_mean) or evaluation/episode_return_mean. Without --stop (and no stop
in the file), training stops at {"training_iteration": 100}.
"""

FILE_EXAMPLES = """\
The file holds one experiment, as in RLlib's tuned examples:

  cartpole-ppo:            # the experiment name (results folder)
    env: CartPole-v1
    run: PPO               # or algo: PPO
    stop: {episode_return_mean: 475, timesteps_total: 150000}
    config: {lr: 0.0003, num_epochs: 20}

Command-line flags override the file: --stop replaces its stop, --config is merged over
its config, --algo/--env/--name replace run/env/name.

example:
  rltrainer train file tuned_examples/ppo_cartpole.yaml --stop '{"training_iteration": 10}'
"""

EVALUATE_EXAMPLES = """\
examples:
  rltrainer evaluate ~/rltrainer_results/PPO_CartPole-v1/<trial>/checkpoint_000100
  rltrainer evaluate s3://bucket/runs/cp/<trial>/checkpoint_000100
  rltrainer evaluate CHECKPOINT --episodes 3 --video videos/
  rltrainer evaluate CHECKPOINT --steps 2000 --explore
  rltrainer evaluate CHECKPOINT --env my_pkg.envs:HarderCartPole --config '{"env_config": {"level": 3}}'

Actions are greedy unless --explore is given or the checkpoint's evaluation_config sets
explore. Prints each episode's return and length, then the mean return.
"""

ROLLOUT_EXAMPLES = """\
examples:
  rltrainer rollout CHECKPOINT --run PPO --env CartPole-v1 --steps 10000 --out rollouts.jsonl
  rltrainer rollout CHECKPOINT --episodes 5 --video-dir videos/ --no-render

The flags of 'rltrainer evaluate' work too (--explore, --config). --run is checked against the
checkpoint's algorithm; --env replaces its env (same spaces). --out FILE gets one JSON line per
episode as it ends: {"episode": 0, "return": 500.0, "length": 500, "finished": true, "video":
null}. Without --steps or --episodes, 10 episodes run.
"""

CHECKPOINTS_EXAMPLES = """\
examples:
  rltrainer checkpoints list ~/rltrainer_results/PPO_CartPole-v1
  rltrainer checkpoints list s3://bucket/runs/cp/<trial>
  rltrainer checkpoints download s3://bucket/runs/cp/<trial>/checkpoint_000100 ./ckpt
  rltrainer checkpoints inspect s3://bucket/runs/cp/<trial>/checkpoint_000100

Only checkpoints with a valid manifest (rltrainer_checkpoint.json) are listed; downloads and
inspect verify every file's size and sha256.
"""

FILE_SHAPE = "one experiment: NAME: {env: ..., run: ALGO, stop: {...}, config: {...}}"
EXPERIMENT_KEYS = ("env", "run", "algo", "stop", "config")


class UsageError(RLTrainerError):
    """Bad command-line input: malformed JSON or YAML, a wrong file shape, a missing flag."""


# --- argument parsing -------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rltrainer",
        description="Train RL algorithms and evaluate their checkpoints (RLlib-style).",
        epilog="Run 'rltrainer train --help' or 'rltrainer evaluate --help' for details.",
    )
    parser.add_argument("--version", action="version", version=f"rltrainer {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{train,evaluate,rollout,export,serve,checkpoints}"
    )

    train = commands.add_parser(
        "train",
        usage="rltrainer train --algo ALGO --env ENV [options]\n"
        "       rltrainer train file PATH [options]\n"
        "       rltrainer train -f PATH [options]",
        help="train an algorithm on an env",
        description="Train an algorithm on an env, writing results and checkpoints.",
        epilog=TRAIN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_train_options(train)
    train.add_argument(
        "-f",
        "--config-file",
        dest="config_file",
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="train the experiment in this YAML file (the same as 'train file PATH')",
    )
    train_from = train.add_subparsers(dest="train_source", title="or train from a file", metavar="file PATH")
    train_file = train_from.add_parser(
        "file",
        prog="rltrainer train file",
        help="train the experiment in a YAML file (RLlib tuned-example format)",
        description="Train the experiment in a YAML file (RLlib's tuned-example format).",
        epilog=FILE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train_file.add_argument("path", help="the YAML experiment file")
    _add_train_options(train_file)
    train.set_defaults(handler=_train)

    evaluate = commands.add_parser(
        "evaluate",
        help="roll out a checkpoint's policy and report episode returns",
        description="Roll out a checkpoint's policy in one env and report episode returns.",
        epilog=EVALUATE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_evaluate_options(evaluate)
    evaluate.add_argument("--video", metavar="DIR", help="write each episode to DIR/episode_000.mp4, ...")
    evaluate.set_defaults(handler=_evaluate, out=None)
    rollout = commands.add_parser(
        "rollout",
        usage="rltrainer rollout CHECKPOINT [--run ALGO] [--env ENV] [--steps N | --episodes N] "
        "[--out FILE] [options]",
        help="RLlib's older name of evaluate (same engine), with --out FILE",
        description="Roll out a checkpoint's policy (RLlib's 'rllib rollout'; the engine of "
        "'rltrainer evaluate').",
        epilog=ROLLOUT_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_evaluate_options(rollout)
    add_rollout_flags(rollout)
    rollout.set_defaults(handler=_rollout)
    export = commands.add_parser(
        "export",
        help="write a checkpoint's policy as an ONNX or TorchScript model",
        description="Write a checkpoint's deterministic policy (observation filter, model, action "
        "rescaling) as model.onnx or model.pt, with export.json describing its inputs and outputs.",
    )
    export.add_argument("checkpoint", help="a checkpoint folder or s3:// URI")
    export.add_argument("--format", choices=("onnx", "torchscript"), default="onnx", help="default: onnx")
    export.add_argument("--out", required=True, metavar="DIR", help="the folder to write into")
    export.add_argument("--opset", type=int, default=None, help="ONNX opset (default 18)")
    export.add_argument(
        "--policy-id", default=None, metavar="ID", help="the policy of a multi-agent checkpoint to export"
    )
    export.set_defaults(handler=_export)
    serve = commands.add_parser(
        "serve",
        help="serve a checkpoint's policy over HTTP for inference (the external application API)",
        description="Serve a checkpoint's policy to PolicyClient applications (remote inference; "
        "logged actions and rewards are accepted and not learned from). Binds 127.0.0.1 unless --host "
        "says otherwise; any other address needs a bearer token (--token-env or --token-file).",
    )
    serve.add_argument("checkpoint", help="a checkpoint folder or s3:// URI")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=non_negative_int, default=9900, help="default 9900 (0: any free port)")
    serve.add_argument("--explore", action="store_true", help="sample actions (default: greedy)")
    serve.add_argument(
        "--policy-id", default=None, metavar="ID", help="the policy of a multi-agent checkpoint to serve"
    )
    serve.add_argument(
        "--token-env",
        default="RLTRAINER_POLICY_SERVER_TOKEN",
        metavar="NAME",
        help="environment variable holding the bearer token (default RLTRAINER_POLICY_SERVER_TOKEN)",
    )
    serve.add_argument("--token-file", metavar="PATH", help="file holding the bearer token")
    serve.add_argument(
        "--max-request-bytes",
        type=positive_int,
        default=1 << 20,
        help="larger requests get 413 (default 1 MiB)",
    )
    serve.set_defaults(handler=_serve)
    _add_checkpoints_command(commands)
    return parser


def _add_evaluate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a checkpoint directory (checkpoint_000010/) or s3:// URI")
    parser.add_argument("--env", help="evaluate on this env instead (same observation/action spaces)")
    duration = parser.add_mutually_exclusive_group()
    duration.add_argument("--episodes", metavar="N", type=positive_int, help="episodes to run (default: 10)")
    duration.add_argument(
        "--steps",
        metavar="N",
        type=positive_int,
        help="env steps to run; reports the episodes that finished",
    )
    parser.add_argument(
        "--explore",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="sample actions instead of taking the most likely one "
        "(default: the checkpoint's evaluation_config explore, else off)",
    )
    parser.add_argument(
        "--config", metavar="JSON", help="config overrides for the restored algorithm, e.g. env_config"
    )


def _add_checkpoints_command(commands: Any) -> None:
    checkpoints = commands.add_parser(
        "checkpoints",
        help="list, download or inspect checkpoints (local or s3://)",
        description="List, download or inspect checkpoints in a directory or under an s3:// URI.",
        epilog=CHECKPOINTS_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = checkpoints.add_subparsers(dest="action", required=True, metavar="{list,download,inspect}")
    listing = actions.add_parser("list", help="checkpoints under an experiment or trial folder, newest last")
    listing.add_argument("uri", help="an experiment or trial folder (or s3:// URI)")
    listing.set_defaults(handler=_checkpoints_list)
    download = actions.add_parser("download", help="download a checkpoint and verify it")
    download.add_argument("uri", help="a checkpoint (s3:// URI or directory)")
    download.add_argument("dir", help="where to put it (must not exist, or be empty)")
    download.set_defaults(handler=_checkpoints_download)
    inspect = actions.add_parser("inspect", help="metadata, spaces, config and integrity of a checkpoint")
    inspect.add_argument("uri", help="a checkpoint (s3:// URI or directory)")
    inspect.set_defaults(handler=_checkpoints_inspect)


def _add_train_options(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS defaults: `train --stop X file f.yaml` and `train file f.yaml --stop X` both
    # work, because the nested `file` parser never overwrites a value with its default.
    add = parser.add_argument
    nothing = argparse.SUPPRESS
    add("--algo", "--run", dest="algo", default=nothing, help="algorithm name, e.g. PPO")
    add("--env", default=nothing, help="gymnasium id, registered name, or 'package.module:Class'")
    add("--config", metavar="JSON", default=nothing, help="JSON dict of config settings")
    add(
        "--stop",
        metavar="JSON",
        default=nothing,
        help='JSON dict of stop criteria (default: {"training_iteration": 100})',
    )
    add(
        "--checkpoint-freq",
        metavar="N",
        type=non_negative_int,
        default=nothing,
        help="checkpoint every N iterations",
    )
    add("--checkpoint-at-end", action="store_true", default=nothing, help="checkpoint when training stops")
    add(
        "--storage-path",
        "--local-dir",
        dest="storage_path",
        metavar="DIR",
        default=nothing,
        help="results root: a directory or s3://bucket/prefix (default: ~/rltrainer_results)",
    )
    add(
        "--name",
        "--experiment-name",
        default=nothing,
        help="experiment name: the results folder under the storage path",
    )
    add(
        "--resume",
        action="store_true",
        default=nothing,
        help="continue from the experiment's newest checkpoint (start fresh if there is none)",
    )
    add(
        "--resume-from",
        metavar="CHECKPOINT",
        default=nothing,
        help="with --resume: try this checkpoint first (the newest valid one if it does not verify)",
    )
    add(
        "-v",
        "--verbose",
        action="count",
        default=nothing,
        help="-v: INFO logs, -vv: DEBUG logs (driver, env runners and learners)",
    )
    add_train_flags(parser)


def _json_dict(flag: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(
            f"{flag} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno} (got {text!r})"
        ) from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object like '{{\"key\": 1}}', got {text!r}")
    return value


# --- train --------------------------------------------------------------------------------


def _train(args: argparse.Namespace) -> int:
    from rltrainer.experiment import INTERRUPTED, resolve_stop, run_experiment

    config, stop, stop_is_default = _train_setup(args)
    options = vars(args)
    sweep_asked = options.get("num_samples", 1) > 1 or options.get("scheduler", "fifo") != "fifo"
    if config.search_space or sweep_asked:
        return _sweep(config, stop, options)
    stop = resolve_stop(stop, config.algo_class)
    criteria = " or ".join(f"{key} >= {value}" for key, value in stop.items()) or "never (Ctrl-C ends it)"
    intro = f"training {config.algo_class.__name__} on {config.env_name}; stopping when {criteria}"
    intro += " (the default; set --stop)" if stop_is_default else ""
    resume, resume_from = _resume_options(options, config.algo_class.__name__)
    tty = sys.stdout.isatty()
    reporter = ProgressReporter(sys.stdout, tty=tty, intro=intro, restore=options.get("restore"))
    with ray_session(options):
        result = run_experiment(config, stop, reporter=reporter, resume=resume, resume_from=resume_from)
    if result.stopped_by == INTERRUPTED:
        print(f"rltrainer: interrupted after {result.iterations} iteration(s)", file=sys.stderr, flush=True)
    _print_summary(result, stop)
    return EXIT_INTERRUPTED if result.stopped_by == INTERRUPTED else 0


def _sweep(config: Any, stop: dict[str, Any], options: dict[str, Any]) -> int:
    """Run a Tune sweep (the config holds search spaces, or --num-samples/--scheduler ask)."""
    from rltrainer.tune.sweep_settings import SweepSettings, check_sweep

    for flag in ("restore", "resume_from"):
        if options.get(flag):
            raise UsageError(
                f"--{flag.replace('_', '-')} continues one trial; a sweep continues with --resume"
            )
    settings = SweepSettings(
        num_samples=options.get("num_samples", 1),
        max_concurrent_trials=options.get("max_concurrent_trials"),
        scheduler=options.get("scheduler", "fifo"),
        scheduler_config=_json_dict("--scheduler-config", options.get("scheduler_config", "{}")),
        metric=options.get("metric", "episode_return_mean"),
        mode=options.get("mode", "max"),
    )
    check_sweep(config, stop, settings)  # bad input: one line before Ray starts
    spaces = ", ".join(sorted(config.search_space)) or "none"
    print(
        f"sweeping {config.algo_class.__name__} on {config.env_name} with Ray Tune: search spaces: "
        f"{spaces}; {settings.num_samples} sample(s); scheduler {settings.scheduler}",
        flush=True,
    )
    from rltrainer.tune.sweep import run_sweep  # imports Ray Tune

    with ray_session(options):
        result = run_sweep(config, stop, settings, resume=options.get("resume", False))
    states = ", ".join(f"{count} {state}" for state, count in sorted(result.trials.items()))
    print(f"trials: {states}")
    for error in result.errors:
        print(f"  error: {error}")
    if result.best_trial is not None:
        metric = f"{result.best_metric:.2f}" if result.best_metric is not None else "n/a"
        print(f"best trial: {result.best_trial} ({settings.metric} {metric})")
        searched = (
            {key: result.best_config.get(key) for key in config.search_space} if result.best_config else {}
        )
        if searched:
            print(f"best config: {json.dumps(searched, default=str)}")
    print(f"results: {result.experiment_path}")
    if result.best_checkpoint is not None:
        print(f"best checkpoint: {result.best_checkpoint}")
        print(f"evaluate it with: rltrainer evaluate {shlex.quote(result.best_checkpoint)}")
    sys.stdout.flush()
    return 1 if result.errors else 0


def _resume_options(options: dict[str, Any], algo: str) -> tuple[bool, str | None]:
    """``(resume, resume_from)`` from ``--resume``, ``--resume-from`` and RLlib's ``--restore``."""
    from rltrainer.checkpoint_store import read_manifest

    resume_from = options.get("resume_from")
    if resume_from and not options.get("resume"):
        raise UsageError("--resume-from needs --resume")
    restore = options.get("restore")
    if restore is None:
        return options.get("resume", False), resume_from
    if resume_from is not None:
        raise UsageError("--restore CHECKPOINT is --resume --resume-from CHECKPOINT: pass one of them")
    _check_not_trial_dir(restore)
    written_by = read_manifest(restore)["algorithm"]  # no checkpoint there: an error, not a fresh start
    if written_by != algo:
        raise UsageError(f"--restore {restore}: that checkpoint is {written_by}'s, not {algo}'s")
    return True, restore


def _print_summary(result: Any, stop: dict[str, float]) -> None:
    from rltrainer.experiment import INTERRUPTED
    from rltrainer.results import flatten

    if result.stopped_by != INTERRUPTED:
        reached = flatten(result.last_result)[result.stopped_by]
        reached = f"{reached:.2f}" if isinstance(reached, float) else reached
        print(f"stopped: {result.stopped_by} reached {reached} (>= {stop[result.stopped_by]})")
    print(f"results: {result.trial_dir}")
    if result.checkpoint_path is not None:
        print(f"checkpoint: {result.checkpoint_path}")
        print(f"evaluate it with: rltrainer evaluate {shlex.quote(result.checkpoint_path)}")
    else:
        print("no checkpoint saved (use --checkpoint-at-end or --checkpoint-freq N)")
    sys.stdout.flush()


def _train_setup(args: argparse.Namespace) -> tuple[Any, dict[str, Any], bool]:
    """The config (file < --config < flags) and the stop dict; whether the stop is the default."""
    from rltrainer.algorithms.registry import get_algorithm_class
    from rltrainer.experiment import DEFAULT_STOP

    options = vars(args)
    path = options.get("path")
    if options.get("config_file") is not None:
        if path is not None:
            raise UsageError(f"two experiment files: -f {options['config_file']} and file {path}; pass one")
        path = options["config_file"]
    name, spec = read_experiment_file(path) if path is not None else (None, {})
    algo = options.get("algo") or spec.get("run") or spec.get("algo")
    if not algo:
        raise _missing("algorithm", "--algo PPO", "run", path)
    config = get_algorithm_class(algo).config_class()
    for source, values in (
        (f"{path} ({name}.config)", spec.get("config")),
        ("--config", _json_dict("--config", options["config"]) if "config" in options else None),
    ):
        if values:
            try:
                config.update_from_dict(values)
            except ConfigError as err:
                raise ConfigError(f"in {source}: {err}") from None
    env = options.get("env") or spec.get("env")
    if env:
        config.environment(env)
    if config.env is None:
        raise _missing("env", "--env CartPole-v1", "env", path)
    flags = {  # the file's experiment name names the results folder unless its config does
        "storage_path": options.get("storage_path"),
        "experiment_name": options.get("name") or (name if not config.experiment_name else None),
        "checkpoint_frequency": options.get("checkpoint_freq"),
        "checkpoint_at_end": options.get("checkpoint_at_end"),
        **train_settings(options),
    }
    config.update_from_dict({key: value for key, value in flags.items() if value is not None})
    if config.experiment_name is not None:  # --name, the file's name or its config's experiment_name
        check_experiment_name(config.experiment_name)
    _configure_logging(config, options.get("verbose", 0))
    if "stop" in options:
        return config, _json_dict("--stop", options["stop"]), False
    if "stop" in spec:
        return config, spec["stop"], False
    return config, dict(DEFAULT_STOP), True


def _missing(what: str, example: str, file_key: str, path: str | None) -> UsageError:
    in_file = f" or set {file_key}: in {path}" if path is not None else ""
    return UsageError(f"no {what} given: pass {example.split()[0]} (e.g. {example}){in_file}")


def read_experiment_file(path: str) -> tuple[str, dict[str, Any]]:
    """``(name, {env, run, stop, config})`` from an RLlib tuned-example YAML file."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise UsageError(f"cannot read experiment file {path!r}: {err.strerror}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise UsageError(f"{path}: invalid YAML{where}: {problem}") from None
    if not isinstance(document, dict) or len(document) != 1:
        raise UsageError(f"{path}: expected {FILE_SHAPE}; got {_yaml_kind(document)}")
    ((name, spec),) = document.items()
    if not isinstance(spec, dict):
        raise UsageError(f"{path}: expected {FILE_SHAPE}; {name!r} holds {_yaml_kind(spec)}")
    unknown = sorted(set(spec) - set(EXPERIMENT_KEYS))
    if unknown:
        raise UsageError(f"{path}: unknown key(s) {unknown} in {name!r}; expected {FILE_SHAPE}")
    for key in ("stop", "config"):
        if key in spec and not isinstance(spec[key], dict):
            raise UsageError(f"{path}: {name}.{key} must be a mapping; expected {FILE_SHAPE}")
    return str(name), spec


def _yaml_kind(value: Any) -> str:
    if isinstance(value, dict):
        return f"{len(value)} top-level keys"
    kinds = {type(None): "nothing", list: "a list", str: "a string", bool: "a boolean"}
    return kinds.get(type(value), "a number")


def _configure_logging(config: Any, verbosity: int) -> None:
    """``-v``: INFO, ``-vv``: DEBUG, in the driver and (through the config) every env runner and
    learner; without either, the config's ``log_level`` (WARN by default)."""
    from rltrainer.utils.debugging import LOG_FORMAT

    logging.basicConfig(format=LOG_FORMAT)
    if verbosity:
        config.debugging(log_level="DEBUG" if verbosity > 1 else "INFO")
    else:  # the config's level (from --config or the file) still applies
        config.debugging(log_level=config.log_level)


class ProgressReporter:
    """One line per iteration: an aligned table on a terminal, ``key=value`` lines otherwise."""

    COLUMNS = (  # header, result key, format, table width
        ("iter", "training_iteration", "{:.0f}", 6),
        ("timesteps", "timesteps_total", "{:.0f}", 11),
        ("return", "episode_return_mean", "{:.2f}", 10),
        ("steps/s", "num_env_steps_sampled_per_s", "{:.0f}", 9),
        ("time s", "time_total_s", "{:.1f}", 9),
    )

    def __init__(self, out: IO[str], tty: bool, intro: str = "", restore: str | None = None) -> None:
        self.out = out
        self.tty = tty
        self.intro = intro
        self.restore = restore
        """``--restore``'s checkpoint: training must start from it, never fresh or from another."""
        self._header_done = False

    def on_resume(self, checkpoint: str | None) -> None:
        if self.restore is not None and checkpoint != self.restore:
            raise UsageError(f"--restore {self.restore}: not restored (the warning above says why)")
        if checkpoint is None:
            print("no checkpoint to resume from: starting fresh", file=self.out, flush=True)
        else:
            print(f"resuming from {checkpoint}", file=self.out, flush=True)

    def on_start(self, trial_dir: Path | str) -> None:
        if self.intro:
            print(self.intro, file=self.out)
        print(f"trial directory: {trial_dir}", file=self.out, flush=True)

    def on_result(self, result: dict[str, Any]) -> None:
        cells = [fmt.format(result.get(key, float("nan"))) for _, key, fmt, _ in self.COLUMNS]
        if not self.tty:
            line = " ".join(
                f"{header.replace(' ', '_')}={cell}"
                for (header, *_), cell in zip(self.COLUMNS, cells, strict=True)
            )
        else:
            if not self._header_done:
                print(" ".join(h.rjust(w) for h, _, _, w in self.COLUMNS), file=self.out)
                self._header_done = True
            line = " ".join(cell.rjust(w) for (*_, w), cell in zip(self.COLUMNS, cells, strict=True))
        print(line, file=self.out, flush=True)


# --- evaluate ---------------------------------------------------------------------------


def _export(args: argparse.Namespace) -> int:
    from rltrainer.evaluation import load_checkpoint
    from rltrainer.export import export_policy

    _check_not_trial_dir(args.checkpoint)
    if args.opset is not None and args.format != "onnx":
        raise ConfigError("--opset is an ONNX setting: use it with --format onnx")
    algo = load_checkpoint(args.checkpoint)
    try:
        runner = algo.env_runner_group.local_worker()
        if algo._multi_agent:  # one policy per export
            pid = _policy_id_of(args.policy_id, list(runner.policy_map))
            policy, observation_filter = runner.get_policy(pid), runner.filter.filters[pid]
        else:
            policy, observation_filter = runner.policy, runner.filter
        path = export_policy(
            policy, observation_filter, args.out, args.format, opset=args.opset, source=args.checkpoint
        )
    finally:
        algo.stop()
    print(
        f"exported {type(algo).__name__} policy to {path} (inputs and outputs: {path.parent / 'export.json'})"
    )
    return 0


def _policy_id_of(policy_id: str | None, policies: list[str]) -> str:
    """The ``--policy-id`` of a multi-agent checkpoint's command (only one policy: that one)."""
    if policy_id is None and len(policies) == 1:
        return policies[0]
    if policy_id not in policies:
        given = "no --policy-id" if policy_id is None else f"--policy-id {policy_id}"
        raise UsageError(
            f"this checkpoint is multi-agent ({given}): choose one of its policies with --policy-id "
            f"({', '.join(policies)})"
        )
    return policy_id


def _serve(args: argparse.Namespace) -> int:
    import signal
    import threading

    from rltrainer.offline.policy_server import InferenceServer
    from rltrainer.policy import Policy

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _check_not_trial_dir(args.checkpoint)
    policy = Policy.from_checkpoint(args.checkpoint)
    if isinstance(policy, dict):  # a multi-agent checkpoint: one policy per server
        policy = policy[_policy_id_of(args.policy_id, list(policy))]
    server = InferenceServer(
        policy,
        policy.observation_filter,
        explore=args.explore,
        address=args.host,
        port=args.port,
        token_env=args.token_env,
        token_file=args.token_file,
        max_request_bytes=args.max_request_bytes,
    )
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    print(f"serving the {policy.config.ALGORITHM} policy of {args.checkpoint} on {server.url}", flush=True)
    try:
        stopped.wait()
    finally:
        server.stop()
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from rltrainer.evaluation import evaluate, load_checkpoint

    overrides = _json_dict("--config", args.config) if args.config is not None else None
    _check_not_trial_dir(args.checkpoint)
    if args.video is not None:
        _writable_folder("--video", args.video)
    out = _open_out(args.out) if args.out is not None else None
    if args.video is not None:  # frames are drawn off-screen; keeps SDL from probing for a display
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    algo = load_checkpoint(args.checkpoint, env=args.env, config_overrides=overrides)
    try:
        cfg = algo.config
        print(
            f"checkpoint: {args.checkpoint} ({type(algo).__name__}, iteration "
            f"{algo.counters.training_iteration}, {algo.counters.timesteps_total} env steps)",
            flush=True,
        )
        result = evaluate(
            algo,
            episodes=args.episodes,
            steps=args.steps,
            explore=args.explore,
            video_dir=args.video,
            on_episode=lambda e: _report_episode(e, out),
        )
    finally:
        algo.stop()
        if out is not None:
            out.close()
    finished = result.finished
    if args.steps is not None and not finished:
        print(f"no episode of {cfg.env_name} finished within {args.steps} steps; raise --steps")
    episodes = "episode" if len(finished) == 1 else "episodes"
    print(f"mean return over {len(finished)} {episodes}: {result.mean_return:.2f}")
    return 0


def _rollout(args: argparse.Namespace) -> int:
    """RLlib's ``rllib rollout``: ``evaluate``, checking ``--run`` against the checkpoint."""
    from rltrainer.algorithms.registry import get_algorithm_class
    from rltrainer.checkpoint_store import read_manifest

    if args.track_progress and args.out is None:
        raise UsageError("--track-progress needs --out FILE (FILE gains a line as each episode ends)")
    if args.run is not None:
        _check_not_trial_dir(args.checkpoint)
        written_by = read_manifest(args.checkpoint)["algorithm"]
        if written_by != get_algorithm_class(args.run).__name__:
            raise UsageError(
                f"--run {args.run} disagrees with the checkpoint, which {written_by} wrote: "
                f"pass --run {written_by} or leave --run out"
            )
    return _evaluate(args)


def _open_out(path: str) -> IO[str]:
    try:
        return open(Path(path).expanduser(), "w")  # noqa: SIM115 (closed by _evaluate)
    except OSError as err:
        raise UsageError(f"cannot write --out {path!r}: {err.strerror}") from None


def _writable_folder(flag: str, path: str) -> Path:
    """``path`` as a folder this process can write into (created now), else a ``UsageError``
    naming the folder and why (the same check ``storage_path`` and ``output`` get)."""
    from rltrainer.storage import writable_folder

    folder, problem = writable_folder(path)
    if problem is not None:
        raise UsageError(
            f"{flag} {path!r}: cannot write into {str(folder)!r} ({problem}); pass a writable folder"
        )
    return folder


def _report_episode(episode: Any, out: IO[str] | None) -> None:
    print(_episode_line(episode), flush=True)
    if out is not None:
        video = str(episode.video_path) if episode.video_path is not None else None
        line = {
            "episode": episode.index,
            "return": episode.episode_return,
            "length": episode.length,
            "finished": episode.finished,
            "video": video,
        }
        if episode.policy_returns:
            line["policy_returns"] = episode.policy_returns
        out.write(json.dumps(line) + "\n")
        out.flush()


def _check_not_trial_dir(path: str) -> None:
    """A results folder instead of a checkpoint: name the checkpoints inside it."""
    from rltrainer.checkpoint_store import list_checkpoints
    from rltrainer.checkpoints import METADATA_FILE
    from rltrainer.storage import is_remote, open_storage

    if not is_remote(path):
        folder = Path(path).expanduser()
        if not folder.is_dir() or (folder / METADATA_FILE).is_file():
            return
    elif open_storage(path).exists(METADATA_FILE):
        return
    inside = list_checkpoints(path)
    if inside:
        raise UsageError(
            f"{path!r} is a results folder, not a checkpoint; newest checkpoint: {inside[-1].uri}"
        )


def _episode_line(episode: Any) -> str:
    status = "" if episode.finished else " (unfinished: out of steps)"
    video = f" video={episode.video_path}" if episode.video_path is not None else ""
    policies = "".join(f" {pid}={value:.2f}" for pid, value in (episode.policy_returns or {}).items())
    return (
        f"episode {episode.index + 1}: return={episode.episode_return:.2f}{policies} "
        f"length={episode.length}{status}{video}"
    )


# --- checkpoints ----------------------------------------------------------------------------


def _checkpoints_list(args: argparse.Namespace) -> int:
    from rltrainer.checkpoint_store import list_checkpoints
    from rltrainer.storage import is_remote

    if not is_remote(args.uri) and not Path(args.uri).expanduser().is_dir():
        problem = "is not a folder" if Path(args.uri).expanduser().exists() else "does not exist"
        raise UsageError(
            f"{args.uri} {problem}: pass a checkpoint, a trial or experiment folder, or s3://..."
        )
    found = list_checkpoints(args.uri)
    if not found:
        print(f"no checkpoints under {args.uri}")
        return 0
    print(
        f"{'iter':>6} {'timesteps':>10} {'score':>10} {'size':>9} {'train s':>9}  {'created':<25} checkpoint"
    )
    for info in found:
        score = f"{info.score:.2f}" if info.score is not None else "-"
        train_s = float(info.metadata.get("counters", {}).get("time_total_s", 0.0))
        print(
            f"{info.iteration:>6} {info.timesteps:>10} {score:>10} {_size(info.size):>9} {train_s:>9.1f}  "
            f"{info.created_at:<25} {info.uri}"
        )
    return 0


def _checkpoints_download(args: argparse.Namespace) -> int:
    from rltrainer.checkpoint_store import download_checkpoint

    target = Path(args.dir).expanduser()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{args.dir!r} already exists and is not an empty directory")
    _check_not_trial_dir(args.uri)
    _writable_folder("download folder", args.dir)
    checkpoint = download_checkpoint(args.uri, target)
    size = sum(f["size"] for f in checkpoint.metadata["files"].values())
    files = len(checkpoint.metadata["files"])
    print(f"downloaded {args.uri} to {target} ({files} files, {_size(size)}, sha256 verified)")
    return 0


def _checkpoints_inspect(args: argparse.Namespace) -> int:
    import tempfile

    from rltrainer.checkpoint_store import download_checkpoint, read_manifest
    from rltrainer.errors import CheckpointError

    _check_not_trial_dir(args.uri)
    metadata, problem = read_manifest(args.uri), None
    with tempfile.TemporaryDirectory(prefix="rltrainer_inspect_") as tmp:
        try:
            download_checkpoint(args.uri, tmp)
        except CheckpointError as err:
            problem = str(err)
    counters = metadata.get("counters", {})
    print(f"checkpoint: {args.uri}")
    print(f"algorithm: {metadata.get('algorithm')}  format version: {metadata.get('format_version')}")
    print(f"created: {metadata.get('created_at')}")
    print(
        f"iteration: {counters.get('training_iteration')}  timesteps: {counters.get('timesteps_total')}  "
        f"episodes: {counters.get('episodes_total')}"
    )
    if metadata.get("score"):
        print(f"score: {metadata['score'].get('attribute')} = {metadata['score'].get('value')}")
    if "policies" in metadata:  # multi-agent: each policy's spaces
        for pid, spec in metadata["policies"].items():
            print(f"policy {pid}: observation_space: {json.dumps(spec.get('observation_space'))}")
            print(f"policy {pid}: action_space: {json.dumps(spec.get('action_space'))}")
    else:
        print(f"observation_space: {json.dumps(metadata.get('observation_space'))}")
        print(f"action_space: {json.dumps(metadata.get('action_space'))}")
    print(f"versions: {json.dumps(metadata.get('versions', {}))}")
    for name, described in metadata.get("files", {}).items():
        print(f"file: {name} {_size(described['size'])} sha256={described['sha256']}")
    print(f"config: {json.dumps(metadata.get('config'), sort_keys=True)}")
    if problem is not None:
        print(f"integrity: FAILED: {problem}")
        return 1
    print(f"integrity: OK ({len(metadata.get('files', {}))} files, sizes and sha256 verified)")
    return 0


def _size(num_bytes: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if num_bytes < 1024:
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024
    return f"{num_bytes:.1f} GiB"


# --- entry point ----------------------------------------------------------------------------


def _unknown_option(parser: argparse.ArgumentParser, argv: list[str]) -> int | None:
    """An unknown ``--flag`` of a command, said as such (exit 2). argparse would otherwise take
    the flag's value for ``train``'s ``file`` subcommand and say "invalid choice: '0.1'"."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    if not argv or argv[0] not in commands:
        return None
    command = commands[argv[0]]
    known: set[str] = set()
    for sub in [command, *(getattr(a, "choices", None) or {} for a in command._actions)]:
        for value in sub.values() if isinstance(sub, dict) else [sub]:
            if isinstance(value, argparse.ArgumentParser):
                known.update(s for a in value._actions for s in a.option_strings)
    for arg in argv[1:]:
        name = arg.split("=", 1)[0]
        if name.startswith("--") and name not in known:
            hint = difflib.get_close_matches(name, sorted(known), n=1)
            print(f"usage: {command.format_usage().removeprefix('usage: ').strip()}", file=sys.stderr)
            suggestion = f" (did you mean {hint[0]}?)" if hint else ""
            print(f"{command.prog}: error: unrecognized argument {name}{suggestion}", file=sys.stderr)
            return EXIT_USAGE
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the ``rltrainer`` command; returns the exit status."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    unknown = _unknown_option(parser, argv)
    if unknown is not None:
        return unknown
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a usage error argparse reported
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    refused = getattr(args, "refused", None) or [ray_flag_conflict(vars(args))]
    if refused[0] is not None:  # a documented RLlib flag rltrainer does not support: say why
        print(f"rltrainer: error: {refused[0]}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return args.handler(args)
    except RLTrainerError as err:
        print(f"rltrainer: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except WorkerError as err:  # a remote env runner or learner died or hung: not a usage error
        print(f"rltrainer: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rltrainer: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
