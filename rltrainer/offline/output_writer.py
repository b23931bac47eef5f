"""``OutputWriter``: an env runner's sampled batches as rows of columnar files.

``.offline_data(output=...)`` makes every env runner that samples for training own one
writer; ``EnvRunner.sample()`` hands it each rollout fragment. A row is one valid env step
(next-step-autoreset steps and the steps of crashed episodes are left out), rows of one env
stay in step order, and each row carries its episode's id and its index ``t`` in the
episode, which the writer keeps per env across fragments (from the done flags and valid
mask alone), so episodes that span fragments keep one id.

Files are Parquet (fragments buffered into row groups of ~8 MB) or JSON lines, named
``output-<time>_worker-<index>_<token>_<number>.parquet`` (``.jsonl``), and roll over to a new
file once one holds ``output_max_file_size`` bytes. A file gets its name when it is complete
(rolled over, or the runner stopped): until then it is written under a hidden name (a leading
``.``) that Arrow and pandas skip when reading the folder. With an ``s3://`` output, complete
files are uploaded (with the storage layer's retries; a failed upload is tried again at the
next roll-over) and deleted locally.

The columns (the README's "Logging, seeds and trajectory output" documents them too):
``eps_id`` (int64: from a random block per writer, so unique across runners and runs),
``agent_index`` (int32, 0: one agent), ``t`` (int64), ``obs`` and ``new_obs`` (float32 lists:
the flattened, filtered observations before and after the step; after a step that ended an
episode ``new_obs`` is its final observation), ``actions`` (the policy's actions, before
rescaling to a Box's bounds: int64 for Discrete, lists for vector actions), ``action_logp``
(float32), ``rewards`` (float32, after ``clip_rewards``), ``terminateds`` and ``truncateds``
(bool).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rltrainer.errors import ConfigError
from rltrainer.storage import StorageError, is_remote, join_uri, open_storage, writable_folder

logger = logging.getLogger(__name__)

#: ``output_config["format"]`` -> file suffix.
OUTPUT_FORMATS: dict[str, str] = {"parquet": ".parquet", "json": ".jsonl"}
#: Parquet codecs ``output_config["compression"]`` may name ("none": uncompressed).
PARQUET_COMPRESSIONS = ("snappy", "zstd", "gzip", "brotli", "lz4", "none")
#: Every key ``output_config`` may hold, with its default.
OUTPUT_CONFIG_DEFAULTS: dict[str, str] = {"format": "parquet", "compression": "snappy"}
#: The columns of every file, in order.
COLUMNS = (
    "eps_id",
    "agent_index",
    "t",
    "obs",
    "new_obs",
    "actions",
    "action_logp",
    "rewards",
    "terminateds",
    "truncateds",
)


def check_output_config(config: dict[str, Any]) -> dict[str, Any]:
    """Raise ``ValueError`` naming an unknown key or value; returns ``config``."""
    unknown = sorted(set(config) - set(OUTPUT_CONFIG_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}; allowed: {', '.join(OUTPUT_CONFIG_DEFAULTS)}")
    fmt = config.get("format", "parquet")
    if fmt not in OUTPUT_FORMATS:
        raise ValueError(f"unknown format {fmt!r}; allowed: {', '.join(OUTPUT_FORMATS)}")
    compression = config.get("compression")
    if compression is not None and (fmt != "parquet" or compression not in PARQUET_COMPRESSIONS):
        allowed = (
            ", ".join(PARQUET_COMPRESSIONS) if fmt == "parquet" else "none (JSON lines are not compressed)"
        )
        raise ValueError(f"compression {compression!r} is not available for {fmt}; allowed: {allowed}")
    return config


def resolve_output(output: str, trial_uri: Callable[[], str]) -> str:
    """Where ``output`` points, decided once in the driver: ``"logdir"`` is ``<trial folder>/output``
    (created with the first file) and a relative path is relative to the driver's working
    directory. A directory given is created now, so that one that cannot be written fails at
    ``build()`` (``ConfigError``)."""
    if output == "logdir":
        return join_uri(trial_uri(), "output")
    if is_remote(output):
        return output
    folder, problem = writable_folder(output)
    if problem is not None:
        raise ConfigError(
            f"offline_data(): output {output!r} cannot be written ({problem}); "
            "allowed: None, 'logdir', a writable directory, or 's3://bucket/prefix'"
        )
    return str(folder)


def make_output_writer(config: Any, worker_index: int, num_envs: int) -> OutputWriter | None:
    """The writer ``config.offline_data()`` asks for (``None`` without ``output``)."""
    if config.output is None:
        return None
    options = {**OUTPUT_CONFIG_DEFAULTS, **config.output_config}
    return OutputWriter(
        config.get_output_path(),
        worker_index=worker_index,
        num_envs=num_envs,
        format=options["format"],
        compression=options["compression"],
        max_file_size=config.output_max_file_size,
        storage_options=config.storage_options,
    )


def redirect_output(runner: Any, path: str) -> None:
    """Point an env runner's writer at another folder (``foreach_worker`` on a resumed trial)."""
    if runner.output_writer is not None:
        runner.output_writer.set_path(path)


class OutputWriter:
    """Writes ``Rollout`` fragments of ``num_envs`` envs as rows (see the module docstring)."""

    def __init__(
        self,
        path: str | None,
        *,
        worker_index: int = 0,
        num_envs: int = 1,
        format: str = "parquet",
        compression: str = "snappy",
        max_file_size: int = 64 * 1024 * 1024,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        check_output_config({"format": format, "compression": compression if format == "parquet" else None})
        self.path = path
        self.worker_index = worker_index
        self.format = format
        self.compression = None if compression == "none" else compression
        self.max_file_size = max_file_size
        self.storage_options = storage_options or {}
        self.files_written: list[str] = []  # complete files, as paths or URIs
        self._prefix = (
            f"output-{time.strftime('%Y-%m-%d_%H-%M-%S')}_worker-{worker_index}_{secrets.token_hex(2)}"
        )
        self._file: _ParquetFile | _JsonFile | None = None
        self._pending: list[Path] = []  # complete local files not uploaded yet (s3:// output)
        self._staging: Path | None = None  # local folder for s3:// output
        # Episode ids: a random 31-bit block per writer, then a counter (unique across runners and runs).
        self._next_id = secrets.randbits(31) << 32
        self._eps_id = np.arange(self._next_id, self._next_id + num_envs, dtype=np.int64)
        self._next_id += num_envs
        self._t = np.zeros(num_envs, dtype=np.int64)  # valid steps so far in each env's episode

    # --- writing -------------------------------------------------------------------
    def write(self, rollout: Any) -> None:
        """Append a fragment's valid steps (``rollout``: a ``Rollout`` of ``[T, N]`` arrays)."""
        columns = self.rows(rollout)
        if not len(columns["t"]):
            return
        if self._file is None:
            self._file = self._open()
        self._file.write(columns)
        if self._file.size >= self.max_file_size:
            self._finish()

    def rows(self, rollout: Any) -> dict[str, np.ndarray]:
        """A fragment's valid steps as columns (env by env, each in step order); advances the
        per-env episode ids and step counters."""
        valid = np.asarray(rollout.valid)
        dones = np.asarray(rollout.terminateds) | np.asarray(rollout.truncateds)
        eps_id, t = self._episode_steps(dones.T, valid.T)
        env_index, step = np.nonzero(valid.T)  # env-major: each env's steps together, in order
        obs = np.asarray(rollout.obs)
        new_obs = np.concatenate([obs[1:], np.asarray(rollout.last_obs)[None]])
        rows = len(step)
        return {
            "eps_id": eps_id[env_index, step],
            "agent_index": np.zeros(rows, dtype=np.int32),
            "t": t[env_index, step],
            "obs": _flat_rows(obs[step, env_index]).astype(np.float32, copy=False),
            "new_obs": _flat_rows(new_obs[step, env_index]).astype(np.float32, copy=False),
            "actions": _flat_rows(np.asarray(rollout.actions)[step, env_index]),
            "action_logp": np.asarray(rollout.action_logp)[step, env_index].astype(np.float32, copy=False),
            "rewards": np.asarray(rollout.rewards)[step, env_index].astype(np.float32, copy=False),
            "terminateds": np.asarray(rollout.terminateds)[step, env_index].astype(bool, copy=False),
            "truncateds": np.asarray(rollout.truncateds)[step, env_index].astype(bool, copy=False),
        }

    def _episode_steps(self, dones: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``eps_id`` and ``t`` of every ``[N, T]`` step. A done step ends its env's episode (valid
        or not: a crashed env's truncation is not), and the next step begins a new one."""
        ends = dones.astype(np.int64)
        before = np.cumsum(ends, axis=1) - ends  # episodes of this env ended before each step
        num_ended = ends.sum(axis=1)
        first_new = self._next_id + np.cumsum(num_ended) - num_ended  # each env's first new id
        eps_id = np.where(before == 0, self._eps_id[:, None], first_new[:, None] + before - 1)
        counted = np.cumsum(valid, axis=1, dtype=np.int64)  # valid steps up to each step, inclusive
        # Valid steps counted at the last end before each step (0 while in the carried episode).
        at_end = np.maximum.accumulate(np.where(dones, counted, 0), axis=1)
        at_last_end = np.zeros_like(at_end)
        at_last_end[:, 1:] = at_end[:, :-1]
        carried = before == 0
        t = counted - valid - at_last_end + np.where(carried, self._t[:, None], 0)
        continues = num_ended == 0
        self._t = np.where(continues, self._t, 0) + counted[:, -1] - at_end[:, -1]
        self._eps_id = np.where(continues, self._eps_id, first_new + num_ended - 1)
        self._next_id += int(num_ended.sum())
        return eps_id, t

    def new_episodes(self) -> None:
        """Every env starts a new episode (its envs were reset)."""
        num_envs = len(self._eps_id)
        self._eps_id = np.arange(self._next_id, self._next_id + num_envs, dtype=np.int64)
        self._next_id += num_envs
        self._t[:] = 0

    # --- files ----------------------------------------------------------------------
    def set_path(self, path: str) -> None:
        """Finish the current file and write the next ones to ``path``."""
        self._finish()
        self._upload_pending()
        self.path = path

    def close(self) -> None:
        """Finish the current file (and upload what is pending); the writer may go on after."""
        self._finish()
        self._upload_pending()
        if self._staging is not None and not self._pending:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None

    def _open(self) -> _ParquetFile | _JsonFile:
        if self.path is None:
            raise ConfigError(
                "offline_data(output='logdir') writes into an algorithm's trial folder: build the "
                "algorithm from the config, or give output a directory"
            )
        if is_remote(self.path):
            if self._staging is None:
                self._staging = Path(tempfile.mkdtemp(prefix="rltrainer_output_"))
            folder = self._staging
        else:
            folder = Path(self.path)
            folder.mkdir(parents=True, exist_ok=True)
        name = f"{self._prefix}_{len(self.files_written):05d}{OUTPUT_FORMATS[self.format]}"
        if self.format == "parquet":
            return _ParquetFile(folder, name, self.compression)
        return _JsonFile(folder, name)

    def _finish(self) -> None:
        """Close the current file and give it its name (or queue it for upload)."""
        if self._file is None:
            return
        done, self._file = self._file.close(), None
        assert self.path is not None
        self.files_written.append(join_uri(self.path, done.name))
        if is_remote(self.path):
            self._pending.append(done)
            self._upload_pending()

    def _upload_pending(self) -> None:
        if not self._pending or self.path is None:
            return
        storage = open_storage(self.path, self.storage_options)
        try:
            while self._pending:
                storage.upload_file(self._pending[0], self._pending[0].name)
                self._pending.pop(0).unlink()
        except StorageError as err:
            logger.warning("offline output not uploaded yet (tried again at the next file): %s", err)


def _flat_rows(values: np.ndarray) -> np.ndarray:
    """``[rows]`` stays; ``[rows, ...]`` becomes ``[rows, size]`` (one list per row)."""
    return values if values.ndim == 1 else values.reshape(len(values), int(np.prod(values.shape[1:])))


#: Fragments are buffered into row groups of about this many (uncompressed) bytes. A row group
#: per fragment cost ~1.7 KB of metadata per group: SAC's one-step fragments made a 4,000-step
#: Pendulum file 7 MB instead of 0.2 MB, and 6x slower to read.
ROW_GROUP_BYTES = 8 * 1024 * 1024


class _ParquetFile:
    """One Parquet file being written: fragments buffered into row groups of about
    ``ROW_GROUP_BYTES`` (the file is not readable before ``close()`` writes its footer anyway)."""

    def __init__(self, folder: Path, name: str, compression: str | None) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._pa, self._pq = pa, pq
        self.folder, self.name, self.compression = folder, name, compression
        self._sink = pa.OSFile(str(folder / f".{name}"), "wb")
        self._writer: Any = None
        self._buffered: list[Any] = []  # tables not written yet
        self._buffered_bytes = 0

    @property
    def size(self) -> int:
        """Bytes written, and buffered (uncompressed) for the next row group."""
        return self._sink.tell() + self._buffered_bytes

    def write(self, columns: dict[str, np.ndarray]) -> None:
        table = self._pa.table({name: self._array(values) for name, values in columns.items()})
        self._buffered.append(table)
        self._buffered_bytes += table.nbytes
        if self._buffered_bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        """Write the buffered fragments as one row group."""
        if not self._buffered:
            return
        table = self._pa.concat_tables(self._buffered)
        if self._writer is None:
            self._writer = self._pq.ParquetWriter(self._sink, table.schema, compression=self.compression)
        self._writer.write_table(table, row_group_size=table.num_rows)
        self._buffered, self._buffered_bytes = [], 0

    def _array(self, values: np.ndarray) -> Any:
        if values.ndim == 1:
            return self._pa.array(values)
        return self._pa.FixedSizeListArray.from_arrays(self._pa.array(values.ravel()), values.shape[1])

    def close(self) -> Path:
        self._flush()
        if self._writer is not None:
            self._writer.close()
        self._sink.close()
        final = self.folder / self.name
        os.replace(self.folder / f".{self.name}", final)
        return final


class _JsonFile:
    """One JSON-lines file being written: a JSON object per row."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder, self.name = folder, name
        self._file = open(folder / f".{name}", "w")  # noqa: SIM115 (closed in close())

    @property
    def size(self) -> int:
        return self._file.tell()

    def write(self, columns: dict[str, np.ndarray]) -> None:
        names = list(columns)
        values = [column.tolist() for column in columns.values()]
        self._file.write(
            "".join(
                json.dumps(dict(zip(names, row, strict=True))) + "\n" for row in zip(*values, strict=True)
            )
        )
        self._file.flush()

    def close(self) -> Path:
        self._file.close()
        final = self.folder / self.name
        os.replace(self.folder / f".{self.name}", final)
        return final


__all__ = [
    "COLUMNS",
    "OUTPUT_CONFIG_DEFAULTS",
    "OUTPUT_FORMATS",
    "OutputWriter",
    "check_output_config",
    "make_output_writer",
    "redirect_output",
    "resolve_output",
]
