"""Reads the driver's ``progress.json`` from the experiment's S3 folder.

The operator reads it with its own identity (the chart's S3 credentials or its service
account's workload identity), never with the experiment's Secret: the operator has no
permission to read Secrets at all.
"""

from __future__ import annotations

import json
from typing import Any

from rltrainer.experiment import PROGRESS_FILE
from rltrainer.storage import open_storage
from rltrainer_operator.builders.job import experiment_uri
from rltrainer_operator.models import ExperimentSpec
from rltrainer_operator.settings import Settings

#: Fail fast: progress is polled again at the next tick.
_QUICK = {"max_attempts": 1, "connect_timeout": 3, "read_timeout": 5}


def progress_reader(settings: Settings):
    """``read(spec, namespace, name) -> dict | None`` (None: no progress written yet)."""

    def read(spec: ExperimentSpec, namespace: str, name: str) -> dict[str, Any] | None:
        storage = open_storage(
            experiment_uri(spec, namespace, name), {**settings.s3_options(spec.storage), **_QUICK}
        )
        try:
            raw = storage.read_bytes(PROGRESS_FILE)
        except FileNotFoundError:
            return None
        progress = json.loads(raw)
        return progress if isinstance(progress, dict) else None

    return read
