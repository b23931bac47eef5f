"""``rltrainer checkpoints list|download|inspect``: checkpoints in a folder or under ``s3://``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rltrainer.commands.common import UsageError, check_not_trial_dir, writable_folder

CHECKPOINTS_EXAMPLES = """\
examples:
  rltrainer checkpoints list ~/rltrainer_results/PPO_CartPole-v1
  rltrainer checkpoints list s3://bucket/runs/cp/<trial>
  rltrainer checkpoints download s3://bucket/runs/cp/<trial>/checkpoint_000100 ./ckpt
  rltrainer checkpoints inspect s3://bucket/runs/cp/<trial>/checkpoint_000100

Only checkpoints with a valid manifest (rltrainer_checkpoint.json) are listed; downloads and
inspect verify every file's size and sha256.
"""


def add_parser(commands: Any) -> None:
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
    check_not_trial_dir(args.uri)
    writable_folder("download folder", args.dir)
    checkpoint = download_checkpoint(args.uri, target)
    size = sum(f["size"] for f in checkpoint.metadata["files"].values())
    files = len(checkpoint.metadata["files"])
    print(f"downloaded {args.uri} to {target} ({files} files, {_size(size)}, sha256 verified)")
    return 0


def _checkpoints_inspect(args: argparse.Namespace) -> int:
    import tempfile

    from rltrainer.checkpoint_store import download_checkpoint, read_manifest
    from rltrainer.errors import CheckpointError

    check_not_trial_dir(args.uri)
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
