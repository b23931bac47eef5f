"""Recorded experience as rows: the data files (Parquet or JSON lines, local or ``s3://``), their
columns checked against the policy's spaces (``RowLayout``), and episode pieces laid out as the
``Rollout`` a next-step-autoreset env produces (``rollout_from_pieces``; the module doc of
``rltrainer.offline.input_reader`` says how).

Files hold the columns the output writer writes (``output_writer.COLUMNS``): ``obs``,
``new_obs``, ``actions``, ``rewards`` and ``terminateds`` (RLlib's ``dones`` is read as
``terminateds``) are needed; ``truncateds`` (default False), ``action_logp`` (default 0),
``eps_id`` and ``t`` are used when present. Without ``eps_id`` the rows of a file are taken as
consecutive steps, with episodes ending at their done flags.
"""

from __future__ import annotations

import glob
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from rltrainer.env.rollout import Rollout
from rltrainer.errors import InputError
from rltrainer.storage import StorageError, is_remote, open_storage

#: File suffix -> format (``input_config={"format": ...}`` reads any file as that format).
INPUT_SUFFIXES: dict[str, str] = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}
INPUT_FORMATS = ("parquet", "json")
REQUIRED_COLUMNS = ("obs", "new_obs", "actions", "rewards", "terminateds")
_GLOB_CHARS = "*?["


def list_input_files(
    pattern: str, fmt: str | None, storage_options: dict[str, Any] | None = None
) -> list[str]:
    """The data files ``pattern`` names (sorted; absolute paths or ``s3://`` URIs)."""

    def wanted(name: str) -> bool:
        base = name.rsplit("/", 1)[-1]
        return not base.startswith(".") and (fmt is not None or Path(base).suffix in INPUT_SUFFIXES)

    if is_remote(pattern):
        bucket_and_prefix = pattern[len("s3://") :]
        cut = min((i for i, c in enumerate(bucket_and_prefix) if c in _GLOB_CHARS), default=None)
        if cut is None:  # an object or a prefix
            root = pattern.rstrip("/")
            try:
                storage = open_storage(root, storage_options)
                if Path(root).suffix in INPUT_SUFFIXES and storage.exists(""):
                    return [root]
                return [f"{root}/{key}" for key in storage.list() if wanted(key)]
            except StorageError as err:
                raise InputError(f"offline_data(): input_ {pattern!r} cannot be listed: {err}") from None
        root = "s3://" + bucket_and_prefix[:cut].rsplit("/", 1)[0]
        try:
            keys = open_storage(root, storage_options).list()
        except StorageError as err:
            raise InputError(f"offline_data(): input_ {pattern!r} cannot be listed: {err}") from None
        uris = [f"{root}/{key}" for key in keys]
        return [uri for uri in uris if fnmatch(uri, pattern) and wanted(uri)]
    path = Path(pattern).expanduser()
    if any(c in pattern for c in _GLOB_CHARS):
        matches = [Path(p) for p in glob.glob(str(path.absolute()), recursive=True)]
        return sorted(str(p) for p in matches if p.is_file() and wanted(p.as_posix()))
    path = path.absolute()
    if path.is_dir():
        found = [p for p in path.rglob("*") if p.is_file()]
        return sorted(
            str(p)
            for p in found
            if not any(part.startswith(".") for part in p.relative_to(path).parts) and wanted(p.as_posix())
        )
    if path.is_file():
        if fmt is None and path.suffix not in INPUT_SUFFIXES:
            raise InputError(
                f"offline_data(): input_ {pattern!r} is neither Parquet (.parquet) nor JSON lines "
                "(.jsonl, .json); name its format with input_config={'format': 'parquet' | 'json'}"
            )
        return [str(path)]
    return []


def load_file(
    uri: str, fmt: str | None, storage_options: dict[str, Any] | None = None
) -> dict[str, np.ndarray]:
    """A data file's columns as numpy arrays (``[rows]`` or ``[rows, width]``); ``InputError``
    naming the file when it cannot be read."""
    fmt = fmt or INPUT_SUFFIXES.get(Path(uri).suffix, "parquet")
    if is_remote(uri):
        parent, _, name = uri.rpartition("/")
        with tempfile.TemporaryDirectory(prefix="rltrainer_input_") as tmp:
            local = Path(tmp) / name
            try:
                open_storage(parent, storage_options).download_file(name, local)
            except (StorageError, FileNotFoundError) as err:
                raise InputError(f"offline input {uri}: cannot be downloaded ({err})") from None
            return _read_local(local, fmt, uri)
    return _read_local(Path(uri), fmt, uri)


def _read_local(path: Path, fmt: str, uri: str) -> dict[str, np.ndarray]:
    try:
        return _read_parquet(path, uri) if fmt == "parquet" else _read_json_lines(path, uri)
    except FileNotFoundError:
        raise InputError(f"offline input {uri}: the file is gone") from None


def _read_parquet(path: Path, uri: str) -> dict[str, np.ndarray]:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"offline input {uri}: not a readable Parquet file ({err})") from None
    columns = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if column.null_count:
            raise InputError(f"offline input {uri}: column {name!r} has missing values")
        if (
            pa.types.is_list(column.type)
            or pa.types.is_large_list(column.type)
            or pa.types.is_fixed_size_list(column.type)
        ):
            lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
            if len(lengths) and (lengths != lengths[0]).any():
                raise InputError(f"offline input {uri}: column {name!r} has rows of different lengths")
            width = int(lengths[0]) if len(lengths) else 0
            values = column.flatten().to_numpy(zero_copy_only=False)
            columns[name] = values.reshape(len(column), width)
        elif (
            pa.types.is_integer(column.type)
            or pa.types.is_floating(column.type)
            or pa.types.is_boolean(column.type)
        ):
            columns[name] = column.to_numpy(zero_copy_only=False)
        # other columns (e.g. infos as strings) are not read
    return columns


def _read_json_lines(path: Path, uri: str) -> dict[str, np.ndarray]:
    rows: dict[str, list[Any]] = {}
    count = 0
    with open(path) as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"offline input {uri} line {number}: not valid JSON ({err.msg})") from None
            if not isinstance(row, dict):
                raise InputError(f"offline input {uri} line {number}: a row must be a JSON object")
            for name in set(rows) | set(row):
                if name not in row or (name not in rows and count):
                    raise InputError(
                        f"offline input {uri} line {number}: rows have different keys ({name!r})"
                    )
                rows.setdefault(name, []).append(row[name])
            count += 1
    columns = {}
    for name, values in rows.items():
        try:
            array = np.asarray(values)
        except ValueError:
            raise InputError(f"offline input {uri}: column {name!r} has rows of different lengths") from None
        if array.dtype.kind in "biuf":
            columns[name] = array
    return columns


def check_columns(columns: dict[str, np.ndarray], uri: str, layout: RowLayout) -> dict[str, np.ndarray]:
    """The columns a reader uses, checked against the env's spaces and converted to the
    learner's dtypes; ``InputError`` naming the file and column otherwise."""
    if "terminateds" not in columns and "dones" in columns:  # RLlib's older name
        columns["terminateds"] = columns.pop("dones")
    missing = [name for name in REQUIRED_COLUMNS if name not in columns]
    if missing:
        raise InputError(
            f"offline input {uri}: no column(s) {missing}; offline files need the columns "
            f"{', '.join(REQUIRED_COLUMNS)} as rltrainer's output writer writes them (docs/guide/offline.md)"
        )
    rows = len(columns["rewards"])
    for name, column in columns.items():
        if len(column) != rows:
            raise InputError(f"offline input {uri}: column {name!r} has {len(column)} rows, 'rewards' {rows}")
    out: dict[str, np.ndarray] = {}
    for name in ("obs", "new_obs"):
        values = columns[name]
        values = values.reshape(rows, -1) if values.ndim == 1 else values
        if values.ndim != 2 or values.shape[1] != layout.obs_size:
            raise InputError(
                f"offline input {uri}: column {name!r} holds {values.shape[1:]} values per row, but "
                f"this env's observations {layout.observation_space} flatten to {layout.obs_size}"
            )
        out[name] = values.astype(layout.obs_dtype, copy=False)
    out["actions"] = layout.actions(columns["actions"], uri)
    out["rewards"] = columns["rewards"].astype(np.float32, copy=False)
    for name in ("rewards", "obs", "new_obs"):
        if not np.isfinite(out[name]).all():
            raise InputError(f"offline input {uri}: column {name!r} holds NaN or infinity")
    out["terminateds"] = columns["terminateds"].astype(bool)
    out["truncateds"] = (
        columns["truncateds"].astype(bool) if "truncateds" in columns else np.zeros(rows, bool)
    )
    logp = columns.get("action_logp")
    out["action_logp"] = np.zeros(rows, np.float32) if logp is None else logp.astype(np.float32, copy=False)
    for name in ("eps_id", "t"):
        if name in columns:
            if columns[name].ndim != 1 or columns[name].dtype.kind not in "iu":
                raise InputError(f"offline input {uri}: column {name!r} must hold one integer per row")
            out[name] = columns[name].astype(np.int64, copy=False)
    return out


@dataclass
class RowLayout:
    """What a reader's rows must look like for this env runner's policy."""

    observation_space: Any
    action_space: Any
    obs_size: int
    obs_dtype: Any
    convert_actions: Callable[[np.ndarray], np.ndarray] | None  # env units -> the policy's
    clip_rewards: Callable[[np.ndarray], np.ndarray]

    def actions(self, values: np.ndarray, uri: str) -> np.ndarray:
        space = self.action_space
        if isinstance(space, spaces.Discrete):
            if values.ndim != 1 or (values.dtype.kind == "f" and not np.all(np.mod(values, 1) == 0)):
                raise InputError(
                    f"offline input {uri}: column 'actions' must hold one integer per row ({space})"
                )
            values = values.astype(np.int64)
            if len(values) and (values.min() < 0 or values.max() >= space.n):
                raise InputError(
                    f"offline input {uri}: column 'actions' holds {values.min()}..{values.max()}, but the "
                    f"policy's actions of {space} are 0..{space.n - 1}"
                )
            return values
        if isinstance(space, spaces.Box):
            width = int(np.prod(space.shape))
            values = values.reshape(len(values), -1)
            if values.shape[1] != width:
                raise InputError(
                    f"offline input {uri}: column 'actions' holds {values.shape[1]} values per row, "
                    f"but the action space {space} has {width}"
                )
            values = values.reshape(len(values), *space.shape).astype(np.float32, copy=False)
            if not np.isfinite(values).all():
                raise InputError(f"offline input {uri}: column 'actions' holds NaN or infinity")
            return self.convert_actions(values) if self.convert_actions is not None else values
        raise InputError(f"offline input reads Discrete and Box actions; this env's action space is {space}")


class Piece:
    """Consecutive rows ``start:stop`` of one episode in ``columns`` (a loaded file's, or a
    policy server episode's)."""

    __slots__ = ("columns", "start", "stop")

    def __init__(self, columns: dict[str, np.ndarray], start: int, stop: int) -> None:
        self.columns, self.start, self.stop = columns, start, stop

    def __len__(self) -> int:
        return self.stop - self.start


def episode_pieces(columns: dict[str, np.ndarray]) -> list[Piece]:
    """A file's rows ordered by episode and step (stable: rows keep their order otherwise),
    cut into pieces at episode ends, episode-id changes and gaps in ``t``."""
    rows = len(columns["rewards"])
    if not rows:
        return []
    if "eps_id" in columns:
        keys = (columns["t"], columns["eps_id"]) if "t" in columns else (columns["eps_id"],)
        order = np.lexsort(keys)
        if (order != np.arange(rows)).any():
            for name in list(columns):
                columns[name] = columns[name][order]
    starts = np.zeros(rows, dtype=bool)
    starts[0] = True
    starts[1:] |= columns["terminateds"][:-1] | columns["truncateds"][:-1]
    if "eps_id" in columns:
        starts[1:] |= columns["eps_id"][1:] != columns["eps_id"][:-1]
    if "t" in columns:
        starts[1:] |= columns["t"][1:] != columns["t"][:-1] + 1
    bounds = np.append(np.flatnonzero(starts), rows)
    return [Piece(columns, int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def rollout_from_pieces(pieces: list[Piece]) -> Rollout:
    """A ``[T, 1]`` ``Rollout`` of episode pieces, laid out as a next-step-autoreset env: each
    piece's rows, then (but after the last piece) a reset row holding its final observation; a
    piece that does not end its episode ends ``truncated``."""
    parts: dict[str, list[np.ndarray]] = {
        name: []
        for name in ("obs", "actions", "action_logp", "rewards", "terminateds", "truncateds", "valid")
    }
    for index, piece in enumerate(pieces):
        columns, rows = piece.columns, slice(piece.start, piece.stop)
        terminateds = columns["terminateds"][rows]
        truncateds = columns["truncateds"][rows].copy()
        truncateds[-1] |= not terminateds[-1]  # a piece cut short bootstraps from its last new_obs
        for name in ("obs", "actions", "action_logp", "rewards"):
            parts[name].append(columns[name][rows])
        parts["terminateds"].append(terminateds)
        parts["truncateds"].append(truncateds)
        parts["valid"].append(np.ones(len(piece), dtype=bool))
        if index < len(pieces) - 1:  # the reset row: its observation is the piece's final one
            parts["obs"].append(columns["new_obs"][piece.stop - 1 : piece.stop])
            parts["actions"].append(np.zeros_like(columns["actions"][:1]))
            for name in ("action_logp", "rewards"):
                parts[name].append(np.zeros(1, dtype=np.float32))
            for name in ("terminateds", "truncateds", "valid"):
                parts[name].append(np.zeros(1, dtype=bool))
    batch = {name: np.concatenate(values)[:, None] for name, values in parts.items()}
    last = pieces[-1]
    return Rollout(**batch, last_obs=last.columns["new_obs"][last.stop - 1 : last.stop])
