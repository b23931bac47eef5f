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

Sources are parsed and resolved in ``rltrainer.offline.input_sources``, files read and laid out
as rows in ``rltrainer.offline.rows`` (the columns a file holds are described there), and each
env runner's ``OfflineInput`` is made in ``rltrainer.offline.offline_input``; this module is the
file reader, and keeps the names users and older code import from it.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import numpy as np

from rltrainer.errors import InputError
from rltrainer.offline.input_sources import (
    INPUT_CONFIG_KEYS,
    MINARI_PREFIX,
    SAMPLER,
    SERVER,
    InputSource,
    IOContext,
    check_input_config,
    parse_input,
    resolve_input,
)
from rltrainer.offline.rows import (
    INPUT_FORMATS,
    INPUT_SUFFIXES,
    REQUIRED_COLUMNS,
    Piece,
    RowLayout,
    check_columns,
    episode_pieces,
    list_input_files,
    load_file,
    rollout_from_pieces,
)

logger = logging.getLogger(__name__)


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


__all__ = [
    "INPUT_CONFIG_KEYS",
    "INPUT_FORMATS",
    "INPUT_SUFFIXES",
    "MINARI_PREFIX",
    "REQUIRED_COLUMNS",
    "SAMPLER",
    "SERVER",
    "IOContext",
    "InputReader",
    "InputSource",
    "Piece",
    "RowLayout",
    "check_columns",
    "check_input_config",
    "episode_pieces",
    "list_input_files",
    "load_file",
    "parse_input",
    "resolve_input",
    "rollout_from_pieces",
]
