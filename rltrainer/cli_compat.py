"""The documents' command-line flags: RLlib's ``rllib train`` and ``rllib rollout`` options.

Each flag the RLlib documents use is either mapped to what rltrainer has (``--local-dir`` is
``--storage-path``, ``--keep-checkpoints-num`` is the config's ``num_to_keep``, ...) or
refused with one line saying why and what to use instead. A refused flag is recorded by the
``Refused`` action in ``namespace.refused`` and reported by ``rltrainer.cli.main`` as one
``rltrainer: error: ...`` line (exit 2), never argparse's usage dump.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

TORCH_ONLY = "rltrainer is torch only (drop the flag, or pass --framework torch)"
NOTHING = argparse.SUPPRESS


class Refused(argparse.Action):
    """A documented flag rltrainer does not support (for the given value, when ``accept`` is
    set): remembered in ``namespace.refused`` as the line to report."""

    def __init__(
        self,
        option_strings: list[str],
        dest: str,
        why: str,
        accept: Callable[[Any], bool] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("nargs", 0)
        super().__init__(option_strings, dest, default=NOTHING, **kwargs)
        self.why = why
        self.accept = accept

    def __call__(self, _parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        if self.accept is not None and self.accept(values):
            return
        given = f"{option_string} {values}" if self.nargs != 0 else option_string
        namespace.refused = [*getattr(namespace, "refused", []), f"{given}: {self.why}"]


class FrameworkFlag(Refused):
    """``--framework``: ``torch`` is kept in the namespace (it overrides the framework of an
    experiment file, see ``rltrainer.experiment.with_framework``); any other is refused."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        if self.accept is not None and self.accept(values):
            setattr(namespace, self.dest, values)


def add_train_flags(parser: argparse.ArgumentParser) -> None:
    """RLlib's ``rllib train`` flags beyond rltrainer's own (all default to absent)."""
    group = parser.add_argument_group(
        "RLlib's flags",
        "accepted as the RLlib documents write them; those rltrainer lacks are refused with a hint",
    )
    add = group.add_argument
    add(
        "--framework",
        action=FrameworkFlag,
        nargs=None,
        metavar="torch",
        accept=lambda value: value == "torch",
        why=TORCH_ONLY,
        help="torch (the only framework): overrides an experiment file's framework, as RLlib's does; "
        "tf, tf2, tfe are refused",
    )
    add("--torch", action=Refused, accept=lambda _: True, why="", help="accepted (torch is the default)")
    eager = f"a TensorFlow (eager mode) option; {TORCH_ONLY}"
    for flag in ("--eager", "--trace"):
        add(flag, action=Refused, why=eager, help="refused: torch only")
    add(
        "--keep-checkpoints-num",
        metavar="N",
        type=positive_int,
        default=NOTHING,
        help="keep the N newest checkpoints, or the N best with --checkpoint-score-attr (num_to_keep)",
    )
    add(
        "--checkpoint-score-attr",
        metavar="ATTR",
        default=NOTHING,
        help="result key ranking checkpoints for --keep-checkpoints-num; 'min-ATTR': lower is better",
    )
    add(
        "--restore",
        metavar="CHECKPOINT",
        default=NOTHING,
        help="continue training from CHECKPOINT, writing on into its trial folder "
        "(= --resume --resume-from CHECKPOINT)",
    )
    sweep = parser.add_argument_group(
        "sweeps (Ray Tune)",
        "a config holding grid_search values, --num-samples N or --scheduler runs a Tune sweep",
    )
    sweep.add_argument(
        "--num-samples",
        metavar="N",
        type=positive_int,
        default=NOTHING,
        help="samples of the search space (default 1)",
    )
    sweep.add_argument(
        "--max-concurrent-trials",
        metavar="N",
        type=positive_int,
        default=NOTHING,
        help="trials running at once (default: as resources allow)",
    )
    sweep.add_argument(
        "--scheduler",
        metavar="{fifo,asha,pbt}",
        type=str.lower,
        default=NOTHING,
        help="trial scheduler: asha stops bad trials early, pbt copies good ones (default fifo)",
    )
    sweep.add_argument(
        "--scheduler-config",
        metavar="JSON",
        default=NOTHING,
        help="the scheduler's settings, e.g. '{\"max_t\": 50}'",
    )
    sweep.add_argument(
        "--metric",
        default=NOTHING,
        help="what the scheduler and the best trial go by (default episode_return_mean)",
    )
    sweep.add_argument(
        "--mode", choices=("max", "min"), default=NOTHING, help="maximize or minimize --metric (default max)"
    )
    add(
        "--resources-per-trial",
        metavar="JSON",
        action=Refused,
        nargs=None,
        why="set the config's resources instead, e.g. --config "
        '\'{"num_gpus_per_learner": 1, "num_cpus_per_env_runner": 1}\'',
        help="refused: set resources in --config",
    )
    add(
        "--upload-dir",
        metavar="URI",
        action=Refused,
        nargs=None,
        why="rltrainer writes results straight to S3: pass --storage-path s3://bucket/prefix",
        help="refused: use --storage-path s3://bucket/prefix",
    )
    add(
        "--local-mode",
        action=Refused,
        why='to run everything in this process pass --config \'{"num_env_runners": 0, "num_learners": 0}\'',
        help="refused: use num_env_runners=0, num_learners=0",
    )
    _add_ray_flags(add)


def _add_ray_flags(add: Callable[..., Any]) -> None:
    add("--ray-address", metavar="ADDRESS", default=NOTHING, help="connect to the Ray cluster at ADDRESS")
    add(
        "--ray-num-cpus",
        metavar="N",
        type=positive_int,
        default=NOTHING,
        help="start a local Ray instance with N CPUs",
    )
    add(
        "--ray-num-gpus",
        metavar="N",
        type=non_negative_int,
        default=NOTHING,
        help="start a local Ray instance with N GPUs",
    )
    add(
        "--ray-object-store-memory",
        metavar="BYTES",
        type=positive_int,
        default=NOTHING,
        help="start a local Ray instance with this object store size",
    )
    add(
        "--ray-ui",
        action=Refused,
        why="rltrainer starts Ray without the dashboard; start a cluster with "
        "'ray start --head --include-dashboard=true' and pass --ray-address",
        help="refused: start your own cluster, pass --ray-address",
    )
    add(
        "--ray-num-nodes",
        metavar="N",
        action=Refused,
        nargs=None,
        why="rltrainer does not emulate a multi-node cluster; "
        "start one with 'ray start' and pass --ray-address",
        help="refused: use --ray-address",
    )


def add_rollout_flags(parser: argparse.ArgumentParser) -> None:
    """RLlib's ``rllib rollout`` flags beyond ``rltrainer evaluate``'s own."""
    add = parser.add_argument
    add("--run", "--algo", dest="run", metavar="ALGO", help="the checkpoint's algorithm (checked, if given)")
    add(
        "--out",
        metavar="FILE",
        help="write one JSON line per episode: episode, return, length, finished, video (never pickle)",
    )
    add("--video-dir", dest="video", metavar="DIR", help="write each episode to DIR/episode_000.mp4, ...")
    add("--no-render", action="store_true", help="accepted: rltrainer never renders to a window")
    add(
        "--render",
        action=Refused,
        why="rltrainer does not render to a window; record MP4s with --video-dir DIR",
        help="refused: use --video-dir DIR",
    )
    add("--local-mode", action="store_true", help="accepted: rollouts run in this process without Ray")
    add(
        "--track-progress",
        action="store_true",
        help="accepted with --out: FILE gains a line as each episode ends",
    )
    pickles = "pickle formats are not written; --out FILE writes one JSON line per episode (return, length)"
    add("--save-info", action=Refused, why=pickles, help="refused: see --out")
    add("--use-shelve", action=Refused, why=pickles, help="refused: see --out")


def train_settings(options: dict[str, Any]) -> dict[str, Any]:
    """Config settings from RLlib's checkpoint flags."""
    settings: dict[str, Any] = {}
    if "keep_checkpoints_num" in options:
        settings["num_to_keep"] = options["keep_checkpoints_num"]
    attribute = options.get("checkpoint_score_attr")
    if attribute:  # Tune's "min-" prefix: lower is better
        lower = attribute.startswith("min-")
        settings["checkpoint_score_attribute"] = attribute.removeprefix("min-")
        settings["checkpoint_score_order"] = "min" if lower else "max"
    return settings


@contextlib.contextmanager
def ray_session(options: dict[str, Any]) -> Iterator[None]:
    """Ray as ``--ray-address`` / ``--ray-num-cpus`` / ... ask (nothing when none is given;
    the algorithm then starts Ray only if it needs actors). Shut down on exit if started here."""
    instance = {
        key: options[flag]
        for key, flag in (
            ("num_cpus", "ray_num_cpus"),
            ("num_gpus", "ray_num_gpus"),
            ("object_store_memory", "ray_object_store_memory"),
        )
        if flag in options
    }
    address = options.get("ray_address")
    if address is None and not instance:
        yield
        return
    import ray

    if ray.is_initialized():  # already connected (e.g. embedded in a test or a notebook)
        yield
        return
    if address is not None:
        ray.init(address=address, log_to_driver=True)
    else:
        ray.init(address="local", include_dashboard=False, log_to_driver=True, **instance)
    try:
        yield
    finally:
        ray.shutdown()


def ray_flag_conflict(options: dict[str, Any]) -> str | None:
    local = [flag for flag in ("ray_num_cpus", "ray_num_gpus", "ray_object_store_memory") if flag in options]
    if "ray_address" in options and local:
        flag = "--" + local[0].replace("_", "-")
        return f"{flag} sizes a new local Ray instance; --ray-address connects to an existing one: pass one"
    return None


def positive_int(text: str) -> int:
    """argparse ``type``: an integer >= 1."""
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def port_number(text: str) -> int:
    """argparse ``type``: a TCP port, 0-65535 (0: any free port)."""
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 0 to 65535, got {text}")
    return value


def non_negative_int(text: str) -> int:
    """argparse ``type``: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value
