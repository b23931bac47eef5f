"""Where results and checkpoints live: a local directory or ``s3://bucket/prefix``.

``open_storage(uri, options)`` returns a ``Storage`` rooted at ``uri``; every method takes a
``/``-separated path relative to that root. S3 goes through boto3, configured the standard
way (``AWS_*`` environment variables, ``~/.aws/config`` and ``~/.aws/credentials``; botocore
reads ``AWS_ENDPOINT_URL`` too), with ``storage_options`` overriding: see
``STORAGE_OPTIONS``. Credentials never go in ``storage_options`` (the config is saved in
every checkpoint and ``params.json``), and no message or ``repr`` here contains them.

Transient S3 failures (throttling, 5xx answers, refused or reset connections, timeouts) are
retried ``max_attempts`` times in all, waiting ``retry_delay_s`` and then twice as long
after each failure; other errors (access denied, no such bucket) fail at once. What still
fails raises ``StorageError``; a missing object raises ``FileNotFoundError``.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from rltrainer.errors import ConfigError, RLTrainerError

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: ``storage_options`` keys: where each one goes, and what it means.
STORAGE_OPTIONS: dict[str, str] = {
    "endpoint_url": "S3 endpoint, e.g. http://minio:9000 (default: AWS, or AWS_ENDPOINT_URL)",
    "region_name": "S3 region (default: AWS_DEFAULT_REGION or the AWS config file)",
    "profile_name": "a profile of the AWS config files (default: AWS_PROFILE or 'default')",
    "verify": "TLS verification: false, or a CA bundle path",
    "connect_timeout": "seconds to wait for a connection (default 5)",
    "read_timeout": "seconds to wait for an answer (default 30)",
    "max_attempts": "tries per S3 request, counting the first (default 4)",
    "retry_delay_s": "wait before the first retry, doubling after each (default 0.5)",
}
_CREDENTIAL_KEYS = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
_TRANSIENT_CODES = {
    "Throttling",
    "ThrottlingException",
    "SlowDown",
    "RequestTimeout",
    "RequestTimeoutException",
    "RequestLimitExceeded",
    "InternalError",
    "ServiceUnavailable",
}


class StorageError(RLTrainerError):
    """A storage operation failed (after retries, for transient S3 errors)."""


def check_storage_options(options: dict[str, Any]) -> dict[str, Any]:
    """Raise ``ValueError`` for unknown keys or credentials; returns ``options``."""
    for key in options:
        if key in _CREDENTIAL_KEYS:
            raise ValueError(
                f"{key} does not belong in storage_options (the config is saved with every "
                "checkpoint): set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or use an AWS profile"
            )
        if key not in STORAGE_OPTIONS:
            raise ValueError(f"unknown storage option {key!r}; allowed: {', '.join(STORAGE_OPTIONS)}")
    return options


#: How ``check_storage_path`` says an S3 storage_path cannot be used (the operator's condition
#: reason ``StorageUnusable`` keys on it in the driver's last line).
STORAGE_UNUSABLE = "cannot be used:"
#: The write probe's object name (an empty object, deleted at once) under an S3 storage_path.
PROBE_PREFIX = ".rltrainer_probe_"

#: The rule every experiment name follows: it names one folder under ``storage_path``.
EXPERIMENT_NAME_RULE = (
    "an experiment name is one folder name: no '/', '\\', '..' or NUL character, and no leading '.'"
)


def check_experiment_name(name: str, what: str = "experiment name") -> str:
    """``name`` when it is one path component (``EXPERIMENT_NAME_RULE``), else ``ConfigError``:
    results, checkpoints and S3 prefixes are built as ``<storage_path>/<name>/...``, and a name
    such as ``../../x`` would put them outside ``storage_path``."""
    if (
        not isinstance(name, str)
        or not name
        or name.startswith(".")
        or ".." in name
        or any(char in name for char in "/\\\0")
    ):
        raise ConfigError(f"{what} {name!r} is not allowed: {EXPERIMENT_NAME_RULE}")
    return name


def is_remote(uri: str | Path) -> bool:
    return str(uri).startswith("s3://")


def join_uri(base: str | Path, *parts: str) -> str:
    """``base/part/...`` for paths and URIs alike."""
    if not is_remote(base):
        return str(Path(base).expanduser().joinpath(*parts))
    return "/".join([str(base).rstrip("/"), *(p.strip("/") for p in parts if p)])


def parent_uri(uri: str) -> str:
    if not is_remote(uri):
        return str(Path(uri).expanduser().parent)
    return uri.rstrip("/").rsplit("/", 1)[0]


def writable_folder(path: str | Path) -> tuple[Path, str | None]:
    """``path`` as an absolute folder, created if missing, and why it cannot be written (None
    when it can): what settings naming a local output folder check at ``build()``."""
    folder = Path(path).expanduser().absolute()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(f"no write permission on {folder}")
    except OSError as err:
        return folder, str(err.strerror or err)
    return folder, None


def check_storage_path(
    uri: str | Path, options: dict[str, Any] | None = None, *, write: bool = False
) -> None:
    """Make sure ``storage_path`` can be used before training starts, else ``StorageError``
    saying why: a local one must be a folder this process can write to (created if needed);
    for ``s3://`` the bucket must answer a listing of the prefix with these credentials (a
    missing bucket, missing credentials or an endpoint that is down fail here, naming the bucket
    and the S3 call refused) and, with ``write`` (a run about to train: ``run_experiment``),
    take and delete a small object under it, so that a key that may only read fails before the
    first iteration, not at the first checkpoint. Without ``write``, read-only keys pass: an
    algorithm built from a checkpoint to evaluate it needs no more."""
    if is_remote(uri):
        storage = S3Storage(str(uri), options or {})
        try:
            storage.probe(write=write)
        except StorageError as err:
            raise StorageError(f"storage_path {str(uri)!r} {STORAGE_UNUSABLE} {err}") from None
        return
    folder = Path(uri).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".rltrainer_probe_"):
            pass
    except OSError as err:
        where = f" ({err.filename})" if err.filename and str(err.filename) != str(folder) else ""
        raise StorageError(
            f"storage_path {str(uri)!r} is not a folder rltrainer can write to: "
            f"{err.strerror or err}{where}; pass a writable folder or s3://bucket/prefix"
        ) from None


def open_storage(uri: str | Path, options: dict[str, Any] | None = None) -> Storage:
    """A ``Storage`` rooted at a local directory or ``s3://bucket/prefix``."""
    if is_remote(uri):
        return S3Storage(str(uri), options or {})
    return LocalStorage(Path(uri).expanduser())


class Storage:
    """Files under one root; paths are relative and ``/``-separated."""

    uri: str

    def write_bytes(self, path: str, data: bytes) -> None:
        raise NotImplementedError

    def upload_file(self, local: Path, path: str) -> None:
        raise NotImplementedError

    def read_bytes(self, path: str) -> bytes:
        raise NotImplementedError

    def download_file(self, path: str, local: Path) -> None:
        raise NotImplementedError

    def list(self, path: str = "") -> list[str]:
        """Every file under ``path`` (recursively), relative to the root, sorted."""
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def delete(self, path: str) -> None:
        """Delete one file (no error if it is gone)."""
        raise NotImplementedError

    def delete_tree(self, path: str) -> None:
        """Delete every file under ``path``."""
        for name in self.list(path):
            self.delete(name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"


class LocalStorage(Storage):
    """Files under a local folder. Writes that fail (a full disk, a permission lost) raise
    ``StorageError`` and leave no partial file behind, as S3's puts do."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.uri = str(root)

    def write_bytes(self, path: str, data: bytes) -> None:
        with self._writing(path) as tmp:
            tmp.write_bytes(data)

    def upload_file(self, local: Path, path: str) -> None:
        with self._writing(path) as tmp:
            shutil.copyfile(local, tmp)

    @contextmanager
    def _writing(self, path: str) -> Iterator[Path]:
        """A temporary file beside ``path``, moved into place once written (whole or not at all)."""
        target = self.root / path
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            yield tmp
            os.replace(tmp, target)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            raise StorageError(f"cannot write {target}: {err.strerror or err}") from None

    def read_bytes(self, path: str) -> bytes:
        return (self.root / path).read_bytes()

    def download_file(self, path: str, local: Path) -> None:
        shutil.copyfile(self.root / path, local)

    def list(self, path: str = "") -> list[str]:
        base = self.root / path
        if not base.is_dir():
            return []
        # os.walk skips a folder it cannot list (not readable, or deleted meanwhile: checkpoints
        # rotated by a running trial) and os.path.isfile an entry it cannot stat, where rglob and
        # Path.is_file raise.
        found = []
        for folder, _, names in os.walk(base):
            found.extend(Path(folder, name) for name in names if os.path.isfile(os.path.join(folder, name)))
        return sorted(p.relative_to(self.root).as_posix() for p in found)

    def exists(self, path: str) -> bool:
        return (self.root / path).is_file()

    def delete(self, path: str) -> None:
        (self.root / path).unlink(missing_ok=True)

    def delete_tree(self, path: str) -> None:
        shutil.rmtree(self.root / path, ignore_errors=True)


class S3Storage(Storage):
    """Objects under ``s3://bucket/prefix``; transient errors are retried with backoff."""

    def __init__(self, uri: str, options: dict[str, Any], client: Any = None) -> None:
        check_storage_options(options)
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        if not bucket:
            raise StorageError(f"{uri!r} names no bucket: expected s3://bucket/prefix")
        self.uri = uri.rstrip("/")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.options = options
        self.max_attempts = int(options.get("max_attempts", 4))
        self.retry_delay_s = float(options.get("retry_delay_s", 0.5))
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = _cached_client(self.options)
        return self._client

    def _key(self, path: str) -> str:
        return "/".join(p for p in (self.prefix, path.strip("/")) if p)

    def write_bytes(self, path: str, data: bytes) -> None:
        key = self._key(path)
        self._call("write", path, lambda: self.client.put_object(Bucket=self.bucket, Key=key, Body=data))

    def upload_file(self, local: Path, path: str) -> None:
        key = self._key(path)

        def put() -> Any:
            with open(local, "rb") as f:
                return self.client.put_object(Bucket=self.bucket, Key=key, Body=f)

        self._call("upload", path, put)

    def read_bytes(self, path: str) -> bytes:
        key = self._key(path)
        return self._call(
            "read", path, lambda: self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        )

    def download_file(self, path: str, local: Path) -> None:
        key = self._key(path)

        def get() -> None:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
            with open(local, "wb") as f:
                for chunk in iter(lambda: body.read(1 << 20), b""):
                    f.write(chunk)

        self._call("download", path, get)

    def list(self, path: str = "") -> list[str]:
        prefix = self._key(path)
        prefix = f"{prefix}/" if prefix else ""
        strip = f"{self.prefix}/" if self.prefix else ""

        def list_all() -> list[str]:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
            return [obj["Key"] for page in pages for obj in page.get("Contents", [])]

        return sorted(key.removeprefix(strip) for key in self._call("list", path, list_all))

    def exists(self, path: str) -> bool:
        key = self._key(path)
        try:
            self._call("check", path, lambda: self.client.head_object(Bucket=self.bucket, Key=key))
        except FileNotFoundError:
            return False
        return True

    def delete(self, path: str) -> None:
        key = self._key(path)
        self._call("delete", path, lambda: self.client.delete_object(Bucket=self.bucket, Key=key))

    def probe(self, write: bool = False) -> None:
        """List at most one key under the prefix: the bucket, credentials and endpoint work. With
        ``write``, also put an empty object there and delete it: the credentials may write."""
        prefix = f"{self.prefix}/" if self.prefix else ""
        self._call(
            "list", "", lambda: self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix, MaxKeys=1)
        )
        if write:
            path = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
            self.write_bytes(path, b"")
            self.delete(path)

    def _call(self, verb: str, path: str, operation: Callable[[], T]) -> T:
        """Run ``operation``, retrying transient errors; translate the rest."""
        from botocore.exceptions import BotoCoreError, ClientError

        where = join_uri(self.uri, path) if path else self.uri
        delay = self.retry_delay_s
        for attempt in range(1, self.max_attempts + 1):
            try:
                return operation()
            except ClientError as err:
                error = err.response.get("Error", {})
                code = str(error.get("Code", ""))
                status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
                if code in ("NoSuchKey", "404", "NotFound"):
                    raise FileNotFoundError(f"{where} does not exist") from None
                reason = f"{err.operation_name}: {code}: {error.get('Message') or 'HTTP ' + str(status)}"
                if code not in _TRANSIENT_CODES and status < 500:
                    raise StorageError(f"cannot {verb} {where}: {reason}") from None
            except BotoCoreError as err:
                if not _is_transient(err):
                    raise StorageError(f"cannot {verb} {where}: {err}") from None
                reason = str(err)
            if attempt < self.max_attempts:
                logger.info("%s %s failed (%s); retrying in %.2f s", verb, where, reason, delay)
                time.sleep(delay)
                delay *= 2
        raise StorageError(f"cannot {verb} {where} after {self.max_attempts} attempts: {reason}")


def _is_transient(err: Exception) -> bool:
    from botocore.exceptions import ConnectionError, HTTPClientError

    return isinstance(err, ConnectionError | HTTPClientError)


# One client per configuration: making one re-reads the S3 service model (~0.1 s), which
# doubled the cost of every small checkpoint. Clients are thread-safe; making them is not.
_CLIENTS: dict[tuple, Any] = {}
_CLIENTS_LOCK = threading.Lock()
_CLIENT_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
)


def _cached_client(options: dict[str, Any]) -> Any:
    key = (
        tuple(sorted((name, repr(value)) for name, value in options.items())),
        tuple(os.environ.get(name) for name in _CLIENT_ENV),
    )
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = _make_client(options)
    return client


def _make_client(options: dict[str, Any]) -> Any:
    import boto3
    from botocore.config import Config

    # botocore's own retries off: ours are bounded and configurable (max_attempts, retry_delay_s).
    config = Config(
        connect_timeout=float(options.get("connect_timeout", 5)),
        read_timeout=float(options.get("read_timeout", 30)),
        retries={"max_attempts": 1, "mode": "standard"},
    )
    session = boto3.session.Session(profile_name=options.get("profile_name"))
    kwargs = {key: options[key] for key in ("endpoint_url", "region_name", "verify") if key in options}
    return session.client("s3", config=config, **kwargs)


__all__ = [
    "STORAGE_OPTIONS",
    "LocalStorage",
    "S3Storage",
    "Storage",
    "StorageError",
    "check_storage_options",
    "check_storage_path",
    "is_remote",
    "join_uri",
    "open_storage",
    "parent_uri",
]
