"""The ``rltrainer`` command: ``train``, ``evaluate`` (RLlib's ``rllib train|evaluate``), ``serve`` (a
checkpoint's policy over HTTP, see ``rltrainer.offline.policy_server``) and
``checkpoints list|download|inspect``. Paths may be ``s3://bucket/prefix`` URIs (S3 settings
from the standard AWS environment variables and config files, e.g. ``AWS_ENDPOINT_URL``).

User mistakes (unknown algorithm, env, config key or stop key; malformed JSON or YAML; a
missing or invalid checkpoint) print one ``rltrainer: error: ...`` line and exit 2. Any
other exception is a bug and keeps its traceback. Ctrl-C exits 130; a preemption (SIGTERM, or a
pod's preStop hook: ``rltrainer.preemption``) exits 75 after a checkpoint.

Heavy modules (torch, gymnasium) are imported inside the commands, so ``--help`` and
argument errors answer at once instead of after ~2 s of imports.
"""

from __future__ import annotations

import argparse
import difflib
import sys

from rltrainer import __version__
from rltrainer.cli_compat import ray_flag_conflict
from rltrainer.commands import checkpoints, evaluate, export, serve, train
from rltrainer.commands.common import EXIT_INTERRUPTED, EXIT_USAGE, UsageError
from rltrainer.commands.progress import ProgressReporter
from rltrainer.commands.train import _train_setup, read_experiment_file
from rltrainer.errors import RLTrainerError, WorkerError


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

    train.add_parser(commands)
    evaluate.add_parsers(commands)
    export.add_parser(commands)
    serve.add_parser(commands)
    checkpoints.add_parser(commands)
    return parser


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


__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "ProgressReporter",
    "UsageError",
    "_train_setup",
    "build_parser",
    "main",
    "read_experiment_file",
]
