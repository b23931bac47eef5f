"""Where training batches come from: ``.offline_data(input_=..., input_config=...)`` parsed,
checked and resolved to sources (the config's side of ``rltrainer.offline.input_reader``).

``input_`` names where training batches come from:

- ``"sampler"`` (the default): the env runners' envs;
- a path, a glob (``data/*.parquet``, ``**`` included), a directory, ``s3://bucket/prefix``
  (every Parquet / JSON-lines object under it) or a list of those: recorded files;
- ``"server"``: a policy server the env runners open for external applications;
- ``"minari:<dataset id>"``: a local Minari dataset;
- a function of the ``IOContext`` that returns a reader (RLlib's ``input_=lambda ioctx: ...``);
- ``{source: probability, ...}``: each fragment comes from one source, drawn with these
  probabilities (``"sampler"`` may be one of them).

The driver resolves the sources to file lists once (``resolve_input``): missing or empty inputs
fail at ``build()``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rltrainer.errors import InputError
from rltrainer.offline.minari_datasets import check_dataset
from rltrainer.offline.rows import INPUT_FORMATS, INPUT_SUFFIXES, list_input_files

SAMPLER = "sampler"
SERVER = "server"
MINARI_PREFIX = "minari:"
#: The keys ``input_config`` may hold for files (a policy server's: ``SERVER_CONFIG_DEFAULTS``).
INPUT_CONFIG_KEYS = ("format",)
#: ``input_config`` keys of a policy server, with their defaults.
SERVER_CONFIG_DEFAULTS: dict[str, Any] = {
    "address": "127.0.0.1",
    "port": 9900,
    "token_env": "RLTRAINER_POLICY_SERVER_TOKEN",
    "token_file": None,
    "max_request_bytes": 1 << 20,
    "max_queued_rows": 100_000,
}


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
    unknown = sorted(set(config) - set(INPUT_CONFIG_KEYS) - set(SERVER_CONFIG_DEFAULTS))
    if unknown:
        allowed = ", ".join((*INPUT_CONFIG_KEYS, *SERVER_CONFIG_DEFAULTS))
        raise ValueError(f"unknown key(s) {unknown}; allowed: {allowed}")
    fmt = config.get("format")
    if fmt is not None and fmt not in INPUT_FORMATS:
        raise ValueError(f"unknown format {fmt!r}; allowed: {', '.join(INPUT_FORMATS)}")
    port = config.get("port", 0)
    if not is_port(port):
        raise ValueError(f"port must be an integer from 0 to 65535 (0: any free port), got {port!r}")
    for key in ("max_request_bytes", "max_queued_rows"):
        value = config.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be a positive integer, got {value!r}")
    for key in ("address", "token_env", "token_file"):
        value = config.get(key)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{key} must be a string, got {value!r}")
    return config


def is_port(value: Any) -> bool:
    """Whether ``value`` is a TCP port a server may bind (0: any free one)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 65535


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
