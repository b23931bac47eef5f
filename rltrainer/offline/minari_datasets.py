"""Local Minari datasets: the optional ``minari`` package imported with a message saying how to
install it, and the check that a dataset is on this machine (nothing is ever downloaded)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rltrainer.errors import InputError


def import_minari() -> Any:
    try:
        import minari
    except ImportError:
        raise InputError(
            "offline_data(input_='minari:...') needs the minari package: pip install 'rltrainer[minari]'"
        ) from None
    return minari


def _datasets_path() -> str:
    return os.environ.get("MINARI_DATASETS_PATH", str(Path("~/.minari/datasets").expanduser()))


def check_dataset(dataset_id: str) -> None:
    """``InputError`` unless ``dataset_id`` is a dataset on this machine."""
    minari = import_minari()
    local = minari.list_local_datasets()
    if dataset_id not in local:
        known = ", ".join(sorted(local)) or "none"
        raise InputError(
            f"offline_data(): Minari dataset {dataset_id!r} is not on this machine (MINARI_DATASETS_PATH="
            f"{_datasets_path()}; local datasets: {known}); nothing is downloaded: create it or copy it there"
        )
