"""Results folders Tune and TensorBoard users know: ``<storage>/<name>/<trial_id>/``.

``params.json`` (the full config), ``result.json`` (one JSON object per iteration),
``progress.csv`` and a TensorBoard event file with every numeric metric.

``logger_config={"type": ...}`` chooses the result writers: ``JsonLogger``, ``CSVLogger``,
``TBXLogger`` (all three by default), or any class with Tune's ``Logger`` interface:
``Class(config: dict, logdir: str)`` (the config as ``to_dict()`` gives it, and the trial
folder), ``on_result(result: dict)`` after every iteration, ``close()`` at the end, and
optionally ``flush()``. Files it writes into the trial folder are uploaded with the others.

With an ``s3://`` storage path the files are written to a local cache folder and uploaded
whole to the trial's prefix after every iteration (and at ``close()``); an upload that fails
logs a warning and is tried again after the next iteration. A resumed trial first downloads
its ``result.json`` and ``progress.csv``, so they go on growing in place.

A trial resumed from a checkpoint (``Algorithm.resume_from``, ``--resume``) first drops the
rows of iterations after that checkpoint from ``result.json`` and ``progress.csv``: a run
killed between writing an iteration's result and its checkpoint trains that iteration again,
and its files then hold every iteration once, with no gap. The TensorBoard file gets a
``SessionLog.START`` event at the restored step, TensorBoard's own way of discarding what a
crashed run wrote after it.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import logging
import math
import os
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

from rltrainer.storage import Storage, StorageError
from rltrainer.utils.import_paths import import_object, object_path


@functools.cache
def _import_tensorboardx() -> tuple[type, type, Any]:
    """tensorboardX's ``Summary`` and ``Event`` protos and its record checksum, without its
    optional S3 writer: that imports boto3 eagerly (~0.1 s of every run's start-up), and
    rltrainer uploads result files itself (see ResultLogger). Imported when the first
    ResultLogger is made: the operator reads this module's key tables without it."""
    hidden = "boto3" not in sys.modules
    if hidden:
        sys.modules["boto3"] = None  # type: ignore[assignment]  # makes `import boto3` fail fast
    try:
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary
        from tensorboardX.record_writer import masked_crc32c
    finally:
        if hidden:
            del sys.modules["boto3"]
    return Summary, Event, masked_crc32c


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


logger = logging.getLogger(__name__)

#: Numeric keys of every ``Algorithm.train()`` result, besides its learner's ``STAT_KEYS``.
BASE_RESULT_KEYS: tuple[str, ...] = (
    "training_iteration",
    "timesteps_total",
    "time_this_iter_s",
    "time_total_s",
    "episode_return_mean",
    "episode_return_min",
    "episode_return_max",
    "episode_len_mean",
    "episodes_this_iter",
    "episodes_total",
    "num_env_steps_sampled",
    "num_env_steps_trained",
    "num_env_steps_sampled_lifetime",
    "num_env_steps_sampled_per_s",
    "num_healthy_env_runners",
    "num_env_runner_restarts",
    "num_learner_restarts",
)

#: Numeric keys under ``evaluation/`` (results of iterations that evaluated).
EVALUATION_KEYS: tuple[str, ...] = (
    "episode_return_mean",
    "episode_return_min",
    "episode_return_max",
    "episode_len_mean",
    "episodes_this_iter",
    "num_env_steps_sampled",
    "num_healthy_env_runners",
    "num_env_runner_restarts",
)


#: RLlib's (old API stack) names of our episode statistics.
EPISODE_ALIASES: dict[str, str] = {
    "episode_return_mean": "episode_reward_mean",
    "episode_return_min": "episode_reward_min",
    "episode_return_max": "episode_reward_max",
}
#: What RLlib groups under ``sampler_results`` and ``env_runners`` (with ``custom_metrics``
#: and ``hist_stats``).
SAMPLER_KEYS: tuple[str, ...] = (*EPISODE_ALIASES, "episode_len_mean", "episodes_this_iter")
#: ``timers/...`` of every result: milliseconds spent in this iteration.
TIMER_KEYS: tuple[str, ...] = (
    "training_iteration_time_ms",
    "sample_time_ms",
    "learn_time_ms",
    "synch_weights_time_ms",
)
#: ``perf/...``: the machine's CPU and memory use (percent), as RLlib reports them.
PERF_KEYS: tuple[str, ...] = ("cpu_util_percent", "ram_util_percent")


#: What multi-agent results add (per-policy returns are ``policy_reward_mean/<policy id>``).
MULTI_AGENT_KEYS: tuple[str, ...] = (
    "num_agent_steps_sampled",
    "num_agent_steps_sampled_lifetime",
    "agent_timesteps_total",
    "num_agent_steps_trained",
)


def _rllib_names(keys: tuple[str, ...] | list[str], prefix: str = "") -> list[str]:
    """The RLlib-named keys ``add_rllib_keys`` derives from ``keys`` (for stop criteria)."""
    old = [EPISODE_ALIASES[k] for k in EPISODE_ALIASES if k in keys]
    sampler = [EPISODE_ALIASES.get(k, k) for k in SAMPLER_KEYS]
    return [
        *(prefix + k for k in old),
        *(f"{prefix}sampler_results/{k}" for k in sampler),
        *(f"{prefix}env_runners/{k}" for k in dict.fromkeys([*SAMPLER_KEYS, *sampler])),
    ]


def result_keys_for(stat_keys: tuple[str, ...] = ()) -> list[str]:
    """Every numeric key ``train()`` reports with a learner reporting ``stat_keys`` (what stop
    criteria may name), RLlib's names for them included."""
    return [
        *BASE_RESULT_KEYS,
        *stat_keys,
        *(f"evaluation/{k}" for k in EVALUATION_KEYS),
        *_rllib_names(BASE_RESULT_KEYS),
        "num_env_steps_sampled_this_iter",
        "num_env_steps_trained_this_iter",
        "num_env_steps_trained_lifetime",
        *MULTI_AGENT_KEYS,
        "info/num_env_steps_sampled",
        "info/num_env_steps_trained",
        *(f"info/learner/default_policy/learner_stats/{k}" for k in stat_keys),
        *(f"timers/{k}" for k in TIMER_KEYS),
        *(f"perf/{k}" for k in PERF_KEYS),
        *_rllib_names(EVALUATION_KEYS, "evaluation/"),
    ]


def add_rllib_keys(metrics: dict[str, Any], learner_stats: dict[str, Any] | None = None) -> dict[str, Any]:
    """Add RLlib's names and groupings of the same numbers to a result (or to its
    ``evaluation`` metrics): ``episode_reward_mean|min|max``, ``sampler_results/...`` and
    ``env_runners/...``, and with ``learner_stats`` (``{policy id: stats}``)
    ``info/learner/<policy id>/learner_stats/...``.
    Derived from what is there, never computed a second time. Returns ``metrics``."""
    for ours, theirs in EPISODE_ALIASES.items():
        if ours in metrics:
            metrics[theirs] = metrics[ours]
    grouped = {key: metrics[key] for key in (*SAMPLER_KEYS, "custom_metrics", "hist_stats") if key in metrics}
    metrics["sampler_results"] = {EPISODE_ALIASES.get(key, key): value for key, value in grouped.items()}
    metrics["env_runners"] = {**grouped, **metrics["sampler_results"]}
    if learner_stats is not None:
        metrics["info"] = {
            "learner": {pid: {"learner_stats": dict(stats)} for pid, stats in learner_stats.items()},
            "num_env_steps_sampled": metrics["num_env_steps_sampled_lifetime"],
            "num_env_steps_trained": metrics["num_env_steps_trained_lifetime"],
        }
    return metrics


def perf_metrics() -> dict[str, float]:
    """CPU use since the last call and memory use of the machine, in percent (RLlib's ``perf``)."""
    import psutil

    return {"cpu_util_percent": psutil.cpu_percent(), "ram_util_percent": psutil.virtual_memory().percent}


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
        self._summary, self._event, self._crc = _import_tensorboardx()
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"
        self._file = open(Path(logdir) / name, "ab", buffering=0)  # noqa: SIM115 (closed in close())
        self._write(self._event(wall_time=time.time(), file_version="brain.Event:2"))

    def restart_at(self, step: int) -> None:
        """Tell TensorBoard the run restarted at ``step``: it discards what earlier event files
        hold at this step and later (a crashed run's orphans, as for a restarted TF job)."""
        from tensorboardX.proto.event_pb2 import SessionLog

        start = SessionLog(status=SessionLog.START)
        self._write(self._event(wall_time=time.time(), step=step, session_log=start))

    def on_result(self, result: dict[str, Any]) -> None:
        values = [
            self._summary.Value(tag=f"rltrainer/{key}", simple_value=float(value))
            for key, value in flatten(result).items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        ]
        step = int(result.get("timesteps_total", 0))
        self._write(self._event(wall_time=time.time(), step=step, summary=self._summary(value=values)))

    def _write(self, event: Any) -> None:
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        crc = self._crc
        append_whole(
            self._file, header + struct.pack("<I", crc(header)) + data + struct.pack("<I", crc(data))
        )

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


class ResultLogger:
    """Appends each iteration's result to the trial folder's files, through the writers
    ``logger_config`` chooses (see the module docstring)."""

    def __init__(
        self,
        trial_dir: Path,
        params: dict[str, Any],
        storage: Storage | None = None,
        logger_config: dict[str, Any] | None = None,
        resumed_at: tuple[int, int] | None = None,
    ) -> None:
        """``resumed_at``: ``(training_iteration, timesteps_total)`` of the checkpoint a
        resumed trial continues from: results written after it are dropped (module doc)."""
        self.trial_dir = trial_dir
        self.storage = storage
        try:
            trial_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StorageError(f"cannot write results to {trial_dir}: {err.strerror or err}") from None
        if storage is not None:
            self._download_existing(storage)
        if resumed_at is not None:
            try:
                dropped = rewind_results(trial_dir, resumed_at[0])
            except OSError as err:
                logger.warning("results after iteration %d not dropped: %s", resumed_at[0], err)
            else:
                if dropped:
                    logger.info(
                        "dropped %d result row(s) after iteration %d, the checkpoint resumed from",
                        dropped,
                        resumed_at[0],
                    )
        try:
            (trial_dir / "params.json").write_text(json.dumps(_json_safe(params), indent=2, sort_keys=True))
        except OSError as err:
            logger.warning("params.json not written to %s: %s", trial_dir, err.strerror or err)
        self.writers = [cls(params, str(trial_dir)) for cls in logger_classes(logger_config)]
        self._failing: set[Any] = set()
        if resumed_at is not None:
            for writer in self.writers:
                if isinstance(writer, TBXLogger):
                    writer.restart_at(resumed_at[1] + 1)

    def log(self, result: dict[str, Any]) -> None:
        """Give ``result`` to every writer. A writer that cannot write (a full disk) is warned
        about once, and retried at every next result; training goes on."""
        for writer in self.writers:
            try:
                writer.on_result(result)
            except OSError as err:
                if writer not in self._failing:
                    self._failing.add(writer)
                    logger.warning(
                        "%s could not write to %s (tried again every iteration): %s",
                        type(writer).__name__,
                        self.trial_dir,
                        err.strerror or err,
                    )
                continue
            if writer in self._failing:
                self._failing.discard(writer)
                logger.info("%s writes again", type(writer).__name__)
        if self.storage is not None:
            for writer in self.writers:
                if callable(getattr(writer, "flush", None)):
                    writer.flush()
            self.upload()

    def upload(self) -> bool:
        """Copy every file of the trial folder to the storage; warns and returns False on failure."""
        assert self.storage is not None
        try:
            for file in sorted(self.trial_dir.iterdir()):
                if file.is_file():
                    self.storage.upload_file(file, file.name)
        except StorageError as err:
            logger.warning("results not uploaded (tried again after the next iteration): %s", err)
            return False
        return True

    def _download_existing(self, storage: Storage) -> None:
        """A resumed trial's result.json and progress.csv, to append to."""
        try:
            for name in ("result.json", "progress.csv"):
                if not (self.trial_dir / name).exists() and storage.exists(name):
                    storage.download_file(name, self.trial_dir / name)
        except StorageError as err:
            logger.warning("could not fetch earlier results from %s: %s", storage.uri, err)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
        if self.storage is not None:
            self.upload()
