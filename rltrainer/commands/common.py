"""What the ``rltrainer`` commands share: the usage error, JSON flags, and checks of the
paths they are given (a checkpoint, not its results folder; a folder they can write into)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rltrainer.errors import RLTrainerError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


class UsageError(RLTrainerError):
    """Bad command-line input: malformed JSON or YAML, a wrong file shape, a missing flag."""


def json_dict(flag: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(
            f"{flag} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno} (got {text!r})"
        ) from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object like '{{\"key\": 1}}', got {text!r}")
    return value


def check_not_trial_dir(path: str) -> None:
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


def policy_id_of(policy_id: str | None, policies: list[str]) -> str:
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


def writable_folder(flag: str, path: str) -> Path:
    """``path`` as an absolute folder this process can write into, else a ``UsageError`` naming
    the folder and why (the check ``storage_path`` and ``output`` get). Folders the check
    creates are removed again: the command makes them when it writes (and may fail before)."""
    from rltrainer.storage import writable_folder

    folder = Path(path).expanduser().absolute()
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    folder, problem = writable_folder(folder)
    for created in missing:  # deepest first
        try:
            created.rmdir()
        except OSError:
            break
    if problem is not None:
        raise UsageError(
            f"{flag} {path!r}: cannot write into {str(folder)!r} ({problem}); pass a writable folder"
        )
    return folder
