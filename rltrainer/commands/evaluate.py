"""``rltrainer evaluate`` and RLlib's older ``rltrainer rollout``: roll out a checkpoint's policy
in one env and report each episode's return (``rollout`` also writes them to ``--out FILE``)."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import IO, Any

from rltrainer.cli_compat import add_rollout_flags, positive_int
from rltrainer.commands.common import UsageError, check_not_trial_dir, json_dict, writable_folder

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


def add_parsers(commands: Any) -> None:
    """``rltrainer evaluate`` and ``rltrainer rollout``."""
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


def _evaluate(args: argparse.Namespace) -> int:
    from rltrainer.evaluation import evaluate, load_checkpoint

    overrides = json_dict("--config", args.config) if args.config is not None else None
    check_not_trial_dir(args.checkpoint)
    if args.video is not None:
        writable_folder("--video", args.video)
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
        check_not_trial_dir(args.checkpoint)
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


def _episode_line(episode: Any) -> str:
    status = "" if episode.finished else " (unfinished: out of steps)"
    video = f" video={episode.video_path}" if episode.video_path is not None else ""
    policies = "".join(f" {pid}={value:.2f}" for pid, value in (episode.policy_returns or {}).items())
    return (
        f"episode {episode.index + 1}: return={episode.episode_return:.2f}{policies} "
        f"length={episode.length}{status}{video}"
    )
