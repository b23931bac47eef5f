"""``rltrainer train``: train an algorithm on an env, from flags or an RLlib tuned-example YAML
file, or sweep it with Ray Tune when the config holds search spaces."""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from rltrainer.cli_compat import add_train_flags, non_negative_int, ray_session, train_settings
from rltrainer.commands.common import (
    EXIT_INTERRUPTED,
    UsageError,
    check_not_trial_dir,
    json_dict,
)
from rltrainer.commands.progress import ProgressReporter
from rltrainer.errors import ConfigError
from rltrainer.preemption import EXIT_PREEMPTED, preempted_line
from rltrainer.storage import check_experiment_name

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

FILE_SHAPE = "one experiment: NAME: {env: ..., run: ALGO, stop: {...}, config: {...}}"
EXPERIMENT_KEYS = ("env", "run", "algo", "stop", "config")


def add_parser(commands: Any) -> None:
    """``rltrainer train`` (and ``train file PATH``, ``train -f PATH``)."""
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


def _train(args: argparse.Namespace) -> int:
    from rltrainer.experiment import INTERRUPTED, PREEMPTED, resolve_stop, run_experiment

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
    connected = _ray_connected()
    with ray_session(options):
        result = run_experiment(config, stop, reporter=reporter, resume=resume, resume_from=resume_from)
    if result.stopped_by == INTERRUPTED:
        print(f"rltrainer: interrupted after {result.iterations} iteration(s)", file=sys.stderr, flush=True)
    _print_summary(result, stop)
    if result.stopped_by == PREEMPTED:  # the last line: the operator reads the Ray job's last line
        if not connected and _ray_connected():  # the actors' forwarded logs must not come after it
            import ray

            ray.shutdown()
        said = result.preempted
        sys.stderr.flush()
        print(
            preempted_line(said["reason"], result.checkpoint_path, result.iterations, said["error"]),
            flush=True,
        )
        return EXIT_PREEMPTED
    return EXIT_INTERRUPTED if result.stopped_by == INTERRUPTED else 0


def _ray_connected() -> bool:
    ray = sys.modules.get("ray")  # not imported: not connected
    return ray is not None and ray.is_initialized()


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
        scheduler_config=json_dict("--scheduler-config", options.get("scheduler_config", "{}")),
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
    check_not_trial_dir(restore)
    written_by = read_manifest(restore)["algorithm"]  # no checkpoint there: an error, not a fresh start
    if written_by != algo:
        raise UsageError(f"--restore {restore}: that checkpoint is {written_by}'s, not {algo}'s")
    return True, restore


def _print_summary(result: Any, stop: dict[str, float]) -> None:
    from rltrainer.experiment import INTERRUPTED, PREEMPTED
    from rltrainer.results import flatten

    if result.stopped_by not in (INTERRUPTED, PREEMPTED):
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
    from rltrainer.experiment import DEFAULT_STOP, with_framework

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
        (f"{path} ({name}.config)", with_framework(spec.get("config"), options.get("framework"), path)),
        ("--config", json_dict("--config", options["config"]) if "config" in options else None),
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
        return config, json_dict("--stop", options["stop"]), False
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
