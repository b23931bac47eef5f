"""Checkpoints in a ``Storage``: atomic uploads, verified downloads, listing and retention.

A checkpoint is a folder of files plus its manifest, ``rltrainer_checkpoint.json`` (the
metadata, listing every file with its size and sha256). Uploads put the files first and the
manifest last, after deleting any manifest already at that place; deletions remove the
manifest first. So a folder without a valid manifest is not a checkpoint for any reader,
and "latest" and "best" are found by listing manifests, never through a pointer object.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from rltrainer.checkpoints import FORMAT_VERSION, METADATA_FILE, Checkpoint, check_file_names, describe_file
from rltrainer.errors import CheckpointError
from rltrainer.storage import Storage, StorageError, is_remote, join_uri, open_storage

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class CheckpointInfo:
    """One checkpoint found by listing manifests."""

    uri: str
    metadata: dict[str, Any]

    @property
    def iteration(self) -> int:
        return int(self.metadata.get("counters", {}).get("training_iteration", 0))

    @property
    def timesteps(self) -> int:
        return int(self.metadata.get("counters", {}).get("timesteps_total", 0))

    @property
    def score(self) -> float | None:
        """The value of ``checkpoint_score_attribute`` when it was saved (``None``: not set or NaN)."""
        value = (self.metadata.get("score") or {}).get("value")
        return float(value) if isinstance(value, int | float) and math.isfinite(value) else None

    @property
    def size(self) -> int:
        return sum(int(f.get("size", 0)) for f in self.metadata.get("files", {}).values())

    @property
    def created_at(self) -> str:
        return str(self.metadata.get("created_at", ""))

    @property
    def order(self) -> tuple[float, int]:
        """Sort key: newest last (save time, then iteration)."""
        saved = self.metadata.get("saved_at")
        if not isinstance(saved, int | float):
            try:
                saved = datetime.fromisoformat(self.created_at).timestamp()
            except ValueError:
                saved = 0.0
        return float(saved), self.iteration


def checkpoint_uri(checkpoint: Any) -> str:
    """A checkpoint's path or ``s3://`` URI, from a path, a URI, or Ray Tune's objects: a
    ``Checkpoint`` (``result.checkpoint``: a path on a pyarrow filesystem) or a training
    result holding one."""
    if isinstance(checkpoint, str | Path):
        return str(checkpoint)
    checkpoint = getattr(checkpoint, "checkpoint", checkpoint)  # Tune's _TrainingResult
    path, filesystem = getattr(checkpoint, "path", None), getattr(checkpoint, "filesystem", None)
    if not isinstance(path, str):
        raise CheckpointError(
            f"not a checkpoint: {type(checkpoint).__name__}; pass a checkpoint folder, an s3:// URI "
            "or a Tune checkpoint (result.checkpoint)"
        )
    kind = getattr(filesystem, "type_name", "local")
    if kind == "s3":
        return f"s3://{path}"
    if kind != "local":
        raise CheckpointError(
            f"checkpoints on a {kind!r} filesystem are not supported; use a folder or s3://"
        )
    return path


def upload_checkpoint(local_dir: str | Path, uri: str, options: dict[str, Any] | None = None) -> str:
    """Copy a written checkpoint to ``uri``: its files first, the manifest last."""
    local = Path(local_dir)
    storage = open_storage(uri, options)
    storage.delete(METADATA_FILE)  # a checkpoint being replaced stops existing first
    manifest = json.loads((local / METADATA_FILE).read_text())
    for name in manifest["files"]:
        storage.upload_file(local / name, name)
    storage.upload_file(local / METADATA_FILE, METADATA_FILE)
    return storage.uri


def read_manifest(uri: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """A checkpoint's metadata (without verifying its files); ``CheckpointError`` if it has none."""
    return _read_manifest(open_storage(uri, options), uri)


def _read_manifest(storage: Storage, uri: str) -> dict[str, Any]:
    try:
        text = storage.read_bytes(METADATA_FILE)
    except FileNotFoundError:
        if storage.list():
            raise CheckpointError(
                f"{uri!r} is not an rltrainer checkpoint: it has no {METADATA_FILE}"
            ) from None
        raise CheckpointError(f"checkpoint {uri!r} does not exist") from None
    try:
        metadata = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"checkpoint {uri!r}: {METADATA_FILE} is corrupted ({err})") from None
    if not isinstance(metadata, dict) or not isinstance(metadata.get("files"), dict):
        raise CheckpointError(f"checkpoint {uri!r}: {METADATA_FILE} lists no files")
    check_file_names(metadata, uri)
    return metadata


def download_checkpoint(uri: str, directory: str | Path, options: dict[str, Any] | None = None) -> Checkpoint:
    """Download ``uri`` into ``directory`` and verify every file's size and sha256."""
    storage = open_storage(uri, options)
    metadata = _read_manifest(storage, uri)
    target = Path(directory).expanduser()
    target.mkdir(parents=True, exist_ok=True)
    for name, expected in metadata["files"].items():
        try:
            storage.download_file(name, target / name)
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint {uri!r} is incomplete: {name} is missing") from None
        if describe_file(target / name) != expected:
            raise CheckpointError(
                f"checkpoint {uri!r} is corrupted: {name} does not match its recorded sha256"
            )
    (target / METADATA_FILE).write_text(json.dumps(metadata, indent=2))
    return Checkpoint.load(target, source=uri)


@contextmanager
def open_checkpoint(uri: str, options: dict[str, Any] | None = None) -> Iterator[Checkpoint]:
    """A verified ``Checkpoint``; remote ones are downloaded to a temporary folder first."""
    if not is_remote(uri):
        yield Checkpoint.load(uri)
        return
    with tempfile.TemporaryDirectory(prefix="rltrainer_checkpoint_") as tmp:
        yield download_checkpoint(uri, tmp, options)


def list_checkpoints(uri: str, options: dict[str, Any] | None = None) -> list[CheckpointInfo]:
    """Every checkpoint with a valid manifest under ``uri`` (any depth), newest last."""
    storage = open_storage(uri, options)
    found = []
    for name in storage.list():
        if name != METADATA_FILE and not name.endswith(f"/{METADATA_FILE}"):
            continue
        folder = name.rsplit("/", 1)[0] if "/" in name else ""
        try:
            metadata = json.loads(storage.read_bytes(name))
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            continue  # deleted meanwhile, or not a manifest
        if isinstance(metadata, dict) and metadata.get("format_version") == FORMAT_VERSION:
            found.append(CheckpointInfo(join_uri(storage.uri, folder) if folder else storage.uri, metadata))
    return sorted(found, key=lambda info: info.order)


def latest_checkpoint(uri: str, options: dict[str, Any] | None = None) -> CheckpointInfo | None:
    checkpoints = list_checkpoints(uri, options)
    return checkpoints[-1] if checkpoints else None


def delete_checkpoint(uri: str, options: dict[str, Any] | None = None) -> None:
    """Delete the manifest first (the checkpoint stops existing), then the files."""
    storage = open_storage(uri, options)
    storage.delete(METADATA_FILE)
    storage.delete_tree("")


def apply_retention(
    trial_uri: str,
    num_to_keep: int,
    score_order: str | None = None,
    options: dict[str, Any] | None = None,
) -> list[str]:
    """Keep the newest ``num_to_keep`` checkpoints (or the best by score, plus the newest).

    With ``score_order`` (``"max"``/``"min"``) checkpoints rank by their saved score, those
    without one last; the newest is always kept too, so a resumed run never goes back.
    Returns the deleted URIs.
    """
    checkpoints = list_checkpoints(trial_uri, options)
    if len(checkpoints) <= num_to_keep:
        return []
    newest = checkpoints[-1]
    if score_order is None:
        keep = checkpoints[-num_to_keep:]
    else:
        sign = 1.0 if score_order == "max" else -1.0

        def rank(info: CheckpointInfo) -> tuple[bool, float, tuple[float, int]]:
            score = info.score
            return score is not None, sign * score if score is not None else 0.0, info.order

        keep = sorted(checkpoints, key=rank)[-num_to_keep:]
    kept = {info.uri for info in keep} | {newest.uri}
    deleted = []
    for info in checkpoints:
        if info.uri not in kept:
            delete_checkpoint(info.uri, options)
            deleted.append(info.uri)
    return deleted


__all__ = [
    "checkpoint_uri",
    "CheckpointInfo",
    "StorageError",
    "apply_retention",
    "delete_checkpoint",
    "download_checkpoint",
    "latest_checkpoint",
    "list_checkpoints",
    "open_checkpoint",
    "read_manifest",
    "upload_checkpoint",
]
