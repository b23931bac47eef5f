"""Checkpoint directories: JSON metadata, tensors in safetensors, arrays in npz. No pickle.

Layout::

    checkpoint_000010/
      rltrainer_checkpoint.json   format version, algorithm, config, spaces, counters,
                                  library versions, and every other file's size and sha256
      policy.safetensors          the policy/value network (plain torch state-dict names)
      optimizer.safetensors       optimizer state tensors
      filter.npz                  observation-filter statistics (loaded with allow_pickle=False)

The metadata file is written last, through a rename, so a directory without it (or with
files that do not match their hashes) is never mistaken for a checkpoint. It is the
checkpoint's manifest in storage too (``rltrainer.checkpoint_store``: S3 uploads, listing,
retention).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from safetensors import SafetensorError

if TYPE_CHECKING:
    import torch

from rltrainer.errors import CheckpointError
from rltrainer.storage import StorageError

FORMAT_VERSION = 1
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]+")
METADATA_FILE = "rltrainer_checkpoint.json"


def library_versions() -> dict[str, str]:
    import gymnasium
    import torch

    from rltrainer.version import __version__

    return {
        "rltrainer": __version__,
        "torch": torch.__version__,
        "gymnasium": gymnasium.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def write_checkpoint(
    directory: str | os.PathLike,
    metadata: dict[str, Any],
    tensors: dict[str, dict[str, torch.Tensor]],
    arrays: dict[str, dict[str, np.ndarray]],
) -> str:
    """Write the files, then the metadata naming them with their hashes; returns the path.

    A write that fails (a full disk, a permission lost) raises ``StorageError`` naming the
    folder and the reason, after removing what it wrote: the folder when it made it, else the
    files it names (a checkpoint being replaced has stopped existing by then: its manifest goes
    first)."""
    from safetensors.torch import save_file  # torch: only where tensors are written or read

    path = Path(directory).expanduser()
    created = not path.exists()
    names = [*tensors, *arrays, METADATA_FILE, f".{METADATA_FILE}.tmp"]
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / METADATA_FILE).unlink(missing_ok=True)  # a checkpoint being replaced stops existing first
        for name, named_tensors in tensors.items():
            save_file({k: v.contiguous() for k, v in named_tensors.items()}, str(path / name))
        for name, named_arrays in arrays.items():
            with open(path / name, "wb") as f:
                np.savez(f, **named_arrays)
        files = {name: describe_file(path / name) for name in [*tensors, *arrays]}
        full = {"format_version": FORMAT_VERSION, **metadata, "versions": library_versions(), "files": files}
        tmp = path / f".{METADATA_FILE}.tmp"
        tmp.write_text(json.dumps(full, indent=2, allow_nan=False))
        os.replace(tmp, path / METADATA_FILE)
    except (OSError, SafetensorError) as err:
        _remove_partial(path, created, names)
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise StorageError(f"cannot write checkpoint {path}: {reason}") from None
    return str(path)


def _remove_partial(path: Path, created: bool, names: list[str]) -> None:
    if created:
        shutil.rmtree(path, ignore_errors=True)
        return
    for name in names:
        with contextlib.suppress(OSError):
            (path / name).unlink(missing_ok=True)


def check_file_names(metadata: dict[str, Any], where: str) -> None:
    """Checkpoint files are plain names in one folder; anything else (``../x``, ``/etc/x``, a
    sub-folder) in a manifest is rejected before a reader opens or a download writes it."""
    for name in metadata.get("files") or {}:
        if not isinstance(name, str) or name in (".", "..") or not _PLAIN_NAME.fullmatch(name):
            raise CheckpointError(f"checkpoint {where!r}: the manifest names an invalid file {name!r}")


class Checkpoint:
    """A verified checkpoint directory: metadata plus loaders for its files."""

    def __init__(self, path: Path, metadata: dict[str, Any], source: str | None = None) -> None:
        self.path = path
        self.metadata = metadata
        self.source = source or str(path)
        """Where it came from (an ``s3://`` URI for a downloaded one): what messages name."""

    @classmethod
    def load(cls, directory: str | os.PathLike, source: str | None = None) -> Checkpoint:
        """Open and verify a checkpoint; raises ``CheckpointError`` saying what is wrong.

        ``source`` names it in messages (the URI a downloaded checkpoint came from).
        """
        path = Path(directory).expanduser()
        where = source or str(path)
        if not path.exists():
            raise CheckpointError(f"checkpoint {where!r} does not exist")
        meta_path = path / METADATA_FILE
        if not meta_path.is_file():
            raise CheckpointError(f"{where!r} is not an rltrainer checkpoint: it has no {METADATA_FILE}")
        try:
            metadata = json.loads(meta_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise CheckpointError(f"checkpoint {where!r}: {METADATA_FILE} is corrupted ({err})") from None
        version = metadata.get("format_version") if isinstance(metadata, dict) else None
        if version != FORMAT_VERSION:
            raise CheckpointError(
                f"checkpoint {where!r} has format version {version!r}; this rltrainer "
                f"reads version {FORMAT_VERSION}"
            )
        for key in ("algorithm", "config", "files"):
            if key not in metadata:
                raise CheckpointError(f"checkpoint {where!r}: metadata lacks {key!r}")
        check_file_names(metadata, where)
        for name, expected in metadata["files"].items():
            file = path / name
            if file.is_symlink():  # it could point anywhere: only the folder's own files are read
                raise CheckpointError(
                    f"checkpoint {where!r}: {name} is a symbolic link; checkpoint files must be plain files"
                )
            if not file.is_file():
                raise CheckpointError(f"checkpoint {where!r} is incomplete: {name} is missing")
            if describe_file(file) != expected:
                raise CheckpointError(
                    f"checkpoint {where!r} is corrupted: {name} does not match its recorded sha256"
                )
        return cls(path, metadata, where)

    def tensors(self, name: str) -> dict[str, torch.Tensor]:
        from safetensors.torch import load_file

        try:
            return load_file(str(self.path / name))
        except (SafetensorError, OSError) as err:
            raise CheckpointError(f"checkpoint {str(self.path)!r}: cannot read {name} ({err})") from None

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        try:
            with np.load(self.path / name, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        except (ValueError, OSError) as err:
            raise CheckpointError(f"checkpoint {str(self.path)!r}: cannot read {name} ({err})") from None


def describe_file(file: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return {"sha256": digest.hexdigest(), "size": file.stat().st_size}
