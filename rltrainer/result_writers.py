"""The result writers of a trial folder (``logger_config={"type": ...}``): ``result.json``
(``JsonLogger``), ``progress.csv`` (``CSVLogger``), a TensorBoard event file (``TBXLogger``),
the choice among them, and the rewinding of their files to a checkpoint's iteration. The
module doc of ``rltrainer.results`` describes the folder; ``ResultLogger`` drives the writers.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

from rltrainer.utils import tfevents
from rltrainer.utils.import_paths import import_object, object_path


def append_whole(file: Any, data: bytes) -> None:
    """Append ``data`` to an unbuffered binary ``file`` whole or not at all: a write that fails
    part way (a full disk) is cut back off, so the file never ends in half a record and the
    next append starts clean. Raises the ``OSError``."""
    start = os.fstat(file.fileno()).st_size
    try:
        view = memoryview(data)
        while view:
            view = view[file.write(view) :]
    except OSError:
        os.ftruncate(file.fileno(), start)
        raise


def flatten(result: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> one level with ``/``-joined keys (``evaluation/episode_return_mean``)."""
    flat: dict[str, Any] = {}
    for key, value in result.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def rewind_results(trial_dir: Path, iteration: int) -> int:
    """Drop the rows of ``training_iteration > iteration`` from ``result.json`` and
    ``progress.csv`` in ``trial_dir`` (each rewritten through a temporary file and a rename, so
    a failure leaves it as it was); returns how many rows were dropped. Lines that do not parse
    (a file cut short by a crash) go too."""
    dropped = 0
    json_path = trial_dir / "result.json"
    if json_path.is_file():
        lines = json_path.read_bytes().splitlines(keepends=True)
        kept = [line for line in lines if _json_iteration(line) <= iteration]
        if len(kept) < len(lines):
            dropped = len(lines) - len(kept)
            _replace(json_path, b"".join(kept))
    csv_path = trial_dir / "progress.csv"
    if csv_path.is_file():
        with open(csv_path, newline="") as f:
            reader = csv.DictReader(f)
            fields, rows = reader.fieldnames or [], list(reader)
        kept_rows = [row for row in rows if _csv_iteration(row) <= iteration]
        if len(kept_rows) < len(rows):
            dropped = max(dropped, len(rows) - len(kept_rows))
            text = io.StringIO()
            writer = csv.DictWriter(text, fieldnames=fields)
            writer.writeheader()
            writer.writerows(kept_rows)
            _replace(csv_path, text.getvalue().encode())
    return dropped


def _json_iteration(line: bytes) -> float:
    try:
        return float(json.loads(line)["training_iteration"])
    except (ValueError, KeyError, TypeError):
        return math.inf  # not a whole result line: dropped


def _csv_iteration(row: dict[str, Any]) -> float:
    try:
        return float(row.get("training_iteration") or "inf")
    except ValueError:
        return math.inf


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _csv_header(path: Path) -> list[str]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return next(csv.reader(f), [])


class JsonLogger:
    """``result.json``: one JSON object per iteration (non-finite numbers as ``null``), each
    line appended whole or not at all."""

    def __init__(self, config: dict[str, Any], logdir: str | Path) -> None:  # noqa: ARG002
        self._file = open(Path(logdir) / "result.json", "ab", buffering=0)  # noqa: SIM115 (closed in close())

    def on_result(self, result: dict[str, Any]) -> None:
        append_whole(self._file, (json.dumps(_json_safe(result), allow_nan=False) + "\n").encode())

    def close(self) -> None:
        self._file.close()


class CSVLogger:
    """``progress.csv``: the flattened result keys; rewritten wider (through a temporary file
    and a rename) when new keys appear. Rows are appended whole or not at all."""

    def __init__(self, config: dict[str, Any], logdir: str | Path) -> None:  # noqa: ARG002
        self._csv_path = Path(logdir) / "progress.csv"
        self._csv_fields = _csv_header(self._csv_path)
        self._csv_file = open(self._csv_path, "ab", buffering=0)  # noqa: SIM115 (closed in close())

    def on_result(self, result: dict[str, Any]) -> None:
        flat = flatten(result)
        new_keys = [key for key in flat if key not in self._csv_fields]
        if new_keys:
            self._widen_csv([*self._csv_fields, *new_keys])
        text = io.StringIO()
        csv.DictWriter(text, fieldnames=self._csv_fields).writerow(flat)
        append_whole(self._csv_file, text.getvalue().encode())

    def _widen_csv(self, fields: list[str]) -> None:
        """Rewrite progress.csv with more columns (keys that first appear later, e.g.
        evaluation); the old file stays as it was when this fails."""
        with open(self._csv_path, newline="") as f:
            rows = list(csv.DictReader(f))
        tmp = self._csv_path.with_name(".progress.csv.tmp")
        try:
            with open(tmp, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=fields)
                writer.writeheader()
                writer.writerows(rows)
            os.replace(tmp, self._csv_path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        self._csv_file.close()
        self._csv_file = open(self._csv_path, "ab", buffering=0)  # noqa: SIM115
        self._csv_fields = fields

    def close(self) -> None:
        self._csv_file.close()


class TBXLogger:
    """A TensorBoard event file: every finite number as ``rltrainer/<key>`` at ``timesteps_total``.

    Written in this thread, one whole record per iteration (TensorBoard's TFRecord framing),
    not through tensorboardX's writer thread: that thread dies on a write error (a full disk)
    and its bounded queue then blocks the next iterations forever."""

    def __init__(self, config: dict[str, Any], logdir: str | Path) -> None:  # noqa: ARG002
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"
        self._file = open(Path(logdir) / name, "ab", buffering=0)  # noqa: SIM115 (closed in close())
        self._write(tfevents.event(time.time(), file_version="brain.Event:2"))

    def restart_at(self, step: int) -> None:
        """Tell TensorBoard the run restarted at ``step``: it discards what earlier event files
        hold at this step and later (a crashed run's orphans, as for a restarted TF job)."""
        self._write(tfevents.event(time.time(), step, session_start=True))

    def on_result(self, result: dict[str, Any]) -> None:
        scalars = {
            f"rltrainer/{key}": float(value)
            for key, value in flatten(result).items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        }
        step = int(result.get("timesteps_total", 0))
        self._write(tfevents.event(time.time(), step, scalars=scalars))

    def _write(self, event: bytes) -> None:
        append_whole(self._file, tfevents.record(event))

    def close(self) -> None:
        self._file.close()


#: ``logger_config`` type names -> the writers they stand for (Tune's names, dotted or not).
LOGGER_NAMES: dict[str, tuple[type, ...]] = {
    "json": (JsonLogger,),
    "csv": (CSVLogger,),
    "tensorboard": (TBXLogger,),
    **{
        f"{prefix}{name}": classes
        for name, classes in {
            "JsonLogger": (JsonLogger,),
            "CSVLogger": (CSVLogger,),
            "TBXLogger": (TBXLogger,),
            "UnifiedLogger": (JsonLogger, CSVLogger, TBXLogger),
        }.items()
        for prefix in ("", "ray.tune.logger.")
    },
}
_LOGGER_ALLOWED = "json, csv, tensorboard, JsonLogger, CSVLogger, TBXLogger, UnifiedLogger"


def logger_classes(config: dict[str, Any] | None) -> list[type]:
    """The result writers a ``logger_config`` names (``None``: all three built-ins), in order;
    ``ValueError`` saying what is wrong and what is allowed."""
    if config is None:
        return list(LOGGER_NAMES["UnifiedLogger"])
    if not isinstance(config, dict) or set(config) - {"type"}:
        raise ValueError(
            f"logger_config takes one key, 'type' ({_LOGGER_ALLOWED} or a class); got {config!r}"
        )
    kinds = config.get("type", "UnifiedLogger")
    classes: list[type] = []
    for kind in kinds if isinstance(kinds, list) else [kinds]:
        classes.extend(cls for cls in _logger_class(kind) if cls not in classes)
    return classes


def _logger_class(kind: Any) -> tuple[type, ...]:
    if isinstance(kind, str) and kind in LOGGER_NAMES:
        return LOGGER_NAMES[kind]
    cls = kind
    if isinstance(kind, str) and (":" in kind or "." in kind):
        try:
            cls = import_object(kind)
        except (ImportError, AttributeError, ValueError) as err:
            raise ValueError(f"logger_config type {kind!r} cannot be imported ({err})") from None
    if (
        isinstance(cls, type)
        and cls.__module__.startswith("ray.tune.logger")
        and cls.__name__ in LOGGER_NAMES
    ):
        return LOGGER_NAMES[cls.__name__]  # Tune's own would pickle the config (params.pkl)
    if not (isinstance(cls, type) and callable(getattr(cls, "on_result", None))):
        raise ValueError(
            f"logger_config type {kind!r} is not a result writer; allowed: {_LOGGER_ALLOWED}, or a "
            "class (or 'package.module:Class') taking (config, logdir) with on_result(result) and close()"
        )
    return (cls,)


def check_logger_config(config: dict[str, Any]) -> dict[str, Any]:
    """Raise ``ValueError`` unless every writer ``config`` names exists; returns ``config``."""
    logger_classes(config)
    return config


def logger_config_to_json(config: dict[str, Any]) -> dict[str, Any]:
    """The ``to_dict()`` form: classes as ``"module:qualname"``."""

    def name(kind: Any) -> Any:
        return object_path(kind) if isinstance(kind, type) else kind

    kinds = config.get("type")
    return {**config, "type": [name(k) for k in kinds] if isinstance(kinds, list) else name(kinds)}
