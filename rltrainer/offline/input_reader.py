"""Reading recorded experience: ``.offline_data(input_=...)``.

``input_`` names where training batches come from:

- ``"sampler"`` (the default): the env runners' envs;
- a path, a glob (``data/*.parquet``, ``**`` included), a directory, ``s3://bucket/prefix``
  (every Parquet / JSON-lines object under it) or a list of those: recorded files;
- ``{source: probability, ...}``: each fragment comes from one source, drawn with these
  probabilities (``"sampler"`` may be one of them).

The driver resolves the sources to file lists once (``resolve_input``: missing or empty
inputs fail at ``build()``); every training env runner then owns an ``OfflineInput`` that, on
each ``sample()``, picks a source and, for a file source, has its ``InputReader`` return a
``Rollout`` of ``[T, 1]`` arrays laid out as a next-step-autoreset env produces them: each
episode piece's rows, then one invalid row whose observation is the piece's last ``new_obs``
(the README's design notes say why). A piece ends where its episode ends or is cut (at a
file's end or the batch's end): a cut piece ends ``truncated``, so it bootstraps from the
value of its last observation.

Files hold the columns the output writer writes (``output_writer.COLUMNS``): ``obs``,
``new_obs``, ``actions``, ``rewards`` and ``terminateds`` (RLlib's ``dones`` is read as
``terminateds``) are needed; ``truncateds`` (default False), ``action_logp`` (default 0),
``eps_id`` and ``t`` are used when present. Without ``eps_id`` the rows of a file are taken as
consecutive steps, with episodes ending at their done flags.
"""

from __future__ import annotations

import glob
import json
import logging
import math
import tempfile
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from rltrainer.errors import ConfigError, InputError
from rltrainer.storage import StorageError, is_remote, open_storage

logger = logging.getLogger(__name__)

SAMPLER = "sampler"
#: File suffix -> format (``input_config={"format": ...}`` reads any file as that format).
INPUT_SUFFIXES: dict[str, str] = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}
INPUT_FORMATS = ("parquet", "json")
#: The keys ``input_config`` may hold for files (a policy server's: ``SERVER_CONFIG_DEFAULTS``).
INPUT_CONFIG_KEYS = ("format",)
REQUIRED_COLUMNS = ("obs", "new_obs", "actions", "rewards", "terminateds")
_GLOB_CHARS = "*?["


SERVER = "server"
MINARI_PREFIX = "minari:"


@dataclass(frozen=True)
class InputSource:
    """One source of ``input_``: the sampler, recorded files, a policy server, or a function of
    the ``IOContext`` that makes a reader (RLlib's ``input_=lambda ioctx: ...``)."""

    name: str  # as the user wrote it (for messages)
    probability: float
    files: tuple[str, ...] = ()
    make_reader: Any = None  # a callable source

    @property
    def is_sampler(self) -> bool:
        return self.name == SAMPLER and self.make_reader is None

    @property
    def is_server(self) -> bool:
        return self.name == SERVER and self.make_reader is None

    @property
    def minari_dataset(self) -> str | None:
        """The id of the local Minari dataset this source reads (``input_="minari:<id>"``)."""
        if self.make_reader is None and self.name.startswith(MINARI_PREFIX):
            return self.name.removeprefix(MINARI_PREFIX)
        return None


@dataclass
class IOContext:
    """What an ``input_`` function gets (RLlib's ``IOContext``): the env runner it reads for."""

    log_dir: str | None
    config: Any
    worker_index: int
    worker: Any


# --- config ---------------------------------------------------------------------------
def parse_input(input_: Any) -> list[tuple[Any, float]]:
    """``input_`` as ``[(source, probability)]`` (a source: ``"sampler"``, a path or a list of
    paths); raises ``ValueError`` saying what is allowed."""
    if input_ is None:
        return [(SAMPLER, 1.0)]
    if callable(input_):
        return [(input_, 1.0)]
    if isinstance(input_, str | list):
        _check_paths(input_)
        return [(input_, 1.0)]
    if isinstance(input_, dict):
        if not input_:
            raise ValueError("a dict of sources needs at least one {source: probability} entry")
        parsed = []
        for source, probability in input_.items():
            if not isinstance(source, str):
                raise ValueError(
                    f"the sources of a dict must be strings (paths or 'sampler'), got {source!r}"
                )
            _check_paths(source)
            if isinstance(probability, bool) or not isinstance(probability, int | float):
                raise ValueError(f"the probability of {source!r} must be a number, got {probability!r}")
            if not 0.0 <= probability <= 1.0 or not math.isfinite(probability):
                raise ValueError(f"the probability of {source!r} must be in [0, 1], got {probability}")
            parsed.append((source, float(probability)))
        total = sum(p for _, p in parsed)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"the probabilities of the sources must add up to 1, they add up to {total:g}")
        return parsed
    raise ValueError(
        "input_ takes 'sampler', a path, glob, directory or s3:// URI, a list of those, or a dict "
        f"{{source: probability}}; got {type(input_).__name__}"
    )


def _check_paths(source: str | list[Any]) -> None:
    paths = source if isinstance(source, list) else [source]
    if not paths:
        raise ValueError("an empty list of input paths")
    for path in paths:
        if not isinstance(path, str) or not path.strip():
            raise ValueError(f"input paths must be non-empty strings, got {path!r}")
        if isinstance(source, list) and path in (SAMPLER, SERVER):
            raise ValueError(f"{path!r} cannot be one of a list of paths; use {{{path!r}: p, PATH: 1 - p}}")


def check_input_config(config: dict[str, Any]) -> dict[str, Any]:
    """Raise ``ValueError`` naming an unknown key or format; returns ``config``."""
    from rltrainer.offline.policy_server import SERVER_CONFIG_DEFAULTS

    unknown = sorted(set(config) - set(INPUT_CONFIG_KEYS) - set(SERVER_CONFIG_DEFAULTS))
    if unknown:
        allowed = ", ".join((*INPUT_CONFIG_KEYS, *SERVER_CONFIG_DEFAULTS))
        raise ValueError(f"unknown key(s) {unknown}; allowed: {allowed}")
    fmt = config.get("format")
    if fmt is not None and fmt not in INPUT_FORMATS:
        raise ValueError(f"unknown format {fmt!r}; allowed: {', '.join(INPUT_FORMATS)}")
    return config


def resolve_input(
    input_: Any, input_config: dict[str, Any], storage_options: dict[str, Any] | None = None
) -> list[InputSource]:
    """The sources of ``input_`` with their files listed (in the driver, once): a source that
    matches no file raises ``InputError`` naming it."""
    fmt = input_config.get("format")
    sources = []
    for source, probability in parse_input(input_):
        if callable(source):
            name = getattr(source, "__qualname__", repr(source))
            sources.append(InputSource(name, probability, make_reader=source))
            continue
        if source in (SAMPLER, SERVER):
            sources.append(InputSource(source, probability))
            continue
        if isinstance(source, str) and source.startswith(MINARI_PREFIX):
            from rltrainer.offline.minari_data import check_dataset

            check_dataset(source.removeprefix(MINARI_PREFIX))
            sources.append(InputSource(source, probability))
            continue
        files: list[str] = []
        for pattern in source if isinstance(source, list) else [source]:
            found = list_input_files(pattern, fmt, storage_options)
            if not found:
                kinds = f"{fmt} files" if fmt else f"files ending in {', '.join(INPUT_SUFFIXES)}"
                raise InputError(
                    f"offline_data(): input_ {pattern!r} matches no {kinds} (hidden files, such as the "
                    "output writer's incomplete ones, are skipped)"
                )
            files.extend(found)
        sources.append(InputSource(str(source), probability, tuple(dict.fromkeys(files))))
    return sources


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


# --- files ----------------------------------------------------------------------------
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
            f"{', '.join(REQUIRED_COLUMNS)} as rltrainer's output writer writes them (see the README)"
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


# --- reading ----------------------------------------------------------------------------
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


def rollout_from_pieces(pieces: list[Piece]) -> Any:
    """A ``[T, 1]`` ``Rollout`` of episode pieces, laid out as a next-step-autoreset env: each
    piece's rows, then (but after the last piece) a reset row holding its final observation; a
    piece that does not end its episode ends ``truncated``."""
    from rltrainer.env.env_runner import Rollout

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


class InputReader:
    """Hands out ``[T, 1]`` rollouts of exactly the asked number of rows from recorded files,
    looping over them (each pass in a new order when shuffling).

    ``shuffle_buffer_size`` rows of episode pieces are held, and each piece is drawn from
    them at random (0: pieces in file order). The files are read one at a time, in this
    reader's own seeded order, starting at a different file for each env runner."""

    def __init__(
        self,
        files: tuple[str, ...],
        layout: RowLayout,
        *,
        fmt: str | None = None,
        shuffle_buffer_size: int = 0,
        worker_index: int = 0,
        seed: int | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        self.files = list(files)
        self.layout = layout
        self.fmt = fmt
        self.shuffle_buffer_size = shuffle_buffer_size
        self.storage_options = storage_options
        self.rng = np.random.default_rng(None if seed is None else [seed, worker_index])
        self._order: list[str] = []
        self._start = worker_index  # runners begin at different files
        self._pieces: deque[Piece] = deque()
        self._buffered = 0  # rows in self._pieces
        self._empty_passes = 0
        self.rows_read = 0

    def next(self, num_rows: int) -> Any:
        """A ``Rollout`` holding ``num_rows`` valid rows."""
        taken: list[Piece] = []
        need = num_rows
        while need > 0:
            self._fill(need)
            piece = self._take()
            if len(piece) > need:  # the rest goes back for a later batch
                self._give_back(Piece(piece.columns, piece.start + need, piece.stop))
                piece = Piece(piece.columns, piece.start, piece.start + need)
            taken.append(piece)
            need -= len(piece)
        self.rows_read += num_rows
        return rollout_from_pieces(taken)

    def _fill(self, need: int) -> None:
        while self._buffered < max(need, self.shuffle_buffer_size, 1):
            if not self._order:
                self._order = self._next_pass()
            uri = self._order.pop(0)
            columns = self.load(uri)
            columns["rewards"] = self.layout.clip_rewards(columns["rewards"])
            pieces = episode_pieces(columns)
            self._empty_passes = 0 if pieces else self._empty_passes + 1
            if self._empty_passes > len(self.files):
                raise InputError(f"offline input: none of the {len(self.files)} file(s) holds a row")
            self._pieces.extend(pieces)
            self._buffered += sum(len(p) for p in pieces)
            logger.debug("offline input: read %d rows from %s", int(sum(len(p) for p in pieces)), uri)

    def load(self, uri: str) -> dict[str, np.ndarray]:
        """One item's rows as checked columns (here a file; ``MinariReader``: some episodes)."""
        return check_columns(load_file(uri, self.fmt, self.storage_options), uri, self.layout)

    def _next_pass(self) -> list[str]:
        if self.shuffle_buffer_size > 0:
            return [self.files[i] for i in self.rng.permutation(len(self.files))]
        start = self._start % len(self.files)
        return self.files[start:] + self.files[:start]

    def _take(self) -> Piece:
        if self.shuffle_buffer_size > 0:  # a random piece: swap it to the end and pop
            index = int(self.rng.integers(len(self._pieces)))
            self._pieces[index], self._pieces[-1] = self._pieces[-1], self._pieces[index]
            piece = self._pieces.pop()
        else:
            piece = self._pieces.popleft()
        self._buffered -= len(piece)
        return piece

    def _give_back(self, piece: Piece) -> None:
        self._pieces.appendleft(piece)
        self._buffered += len(piece)


class OfflineInput:
    """An env runner's ``input_``: which source each fragment comes from, and their readers."""

    def __init__(self, sources: list[InputSource], make_reader: Callable[[InputSource], Any], seed: Any):
        self.sources = sources
        self.readers: list[Any] = []
        try:
            for source in sources:
                self.readers.append(None if source.is_sampler else make_reader(source))
        except BaseException:
            self.stop()
            raise
        self.probabilities = np.array([s.probability for s in sources])
        self.rng = np.random.default_rng(seed)

    def next(self, num_rows: int) -> tuple[Any, list[Any]] | None:
        """``(rollout, ended episodes)`` of ``num_rows`` rows from a reader (a policy server also
        reports the episodes its clients ended), or ``None``: sample this fragment from the envs."""
        index = 0 if len(self.sources) == 1 else int(self.rng.choice(len(self.sources), p=self.probabilities))
        reader = self.readers[index]
        if reader is None:
            return None
        rollout = reader.next(num_rows)
        pop = getattr(reader, "pop_episodes", None)
        return rollout, (pop() if pop is not None else [])

    def stop(self) -> None:
        """Stop the readers that hold something (a policy server's socket and thread)."""
        for reader in self.readers:
            stop = getattr(reader, "stop", None)
            if stop is not None:
                stop()


def make_offline_input(config: Any, runner: Any) -> OfflineInput | None:
    """The ``OfflineInput`` of a training env runner (``None`` when it only samples)."""
    sources = config.get_input_sources()
    if all(source.is_sampler for source in sources):
        return None
    if runner.worker_index == 0 and config.num_env_runners > 0:
        return None  # the remote runners sample (and serve, each on its own port); the driver's does not
    policy = runner.policy
    normalize = (
        isinstance(runner.action_space, spaces.Box)
        and config.normalize_actions
        and not config.actions_in_input_normalized
    )
    layout = RowLayout(
        observation_space=runner.observation_space,
        action_space=runner.action_space,
        obs_size=policy.preprocessor.size,
        obs_dtype=policy.preprocessor.dtype,
        convert_actions=policy.from_env_actions if normalize else None,
        clip_rewards=runner.clip_rewards,
    )
    seed = None if config.seed is None else [config.seed, runner.worker_index, 1]

    def make_reader(source: InputSource) -> Any:
        if source.is_server:
            from rltrainer.offline.policy_server import serve_runner

            return serve_runner(runner, config.input_config)
        if source.minari_dataset is not None:
            from rltrainer.offline.minari_data import MinariReader

            return MinariReader(
                source.minari_dataset,
                layout,
                runner.policy,
                shuffle_buffer_size=config.shuffle_buffer_size,
                worker_index=runner.worker_index,
                seed=None if config.seed is None else config.seed + sources.index(source),
            )
        if source.make_reader is not None:
            ioctx = IOContext(config.get_output_path(), config, runner.worker_index, runner)
            reader = source.make_reader(ioctx)
            if not callable(getattr(reader, "next", None)):
                raise ConfigError(
                    f"offline_data(): input_ function {source.name!r} returned {type(reader).__name__}, "
                    "which has no next(num_rows) returning a Rollout (e.g. PolicyServerInput)"
                )
            return reader
        return InputReader(
            source.files,
            layout,
            fmt=config.input_config.get("format"),
            shuffle_buffer_size=config.shuffle_buffer_size,
            worker_index=runner.worker_index,
            seed=None if config.seed is None else config.seed + sources.index(source),
            storage_options=config.storage_options,
        )

    return OfflineInput(sources, make_reader, seed)


__all__ = [
    "INPUT_SUFFIXES",
    "SAMPLER",
    "SERVER",
    "IOContext",
    "InputReader",
    "InputSource",
    "OfflineInput",
    "RowLayout",
    "check_input_config",
    "episode_pieces",
    "list_input_files",
    "load_file",
    "make_offline_input",
    "parse_input",
    "resolve_input",
]
