"""A real S3 server for the platform on one machine: SeaweedFS (``make seaweedfs``), with
identities that have their own keys and bucket permissions, as a platform team runs it.

``weed server`` runs SeaweedFS's master, volume server, filer and S3 gateway in one process,
every port on ``host`` (a free one each), its data in ``root``, its telemetry off (it would
report to seaweedfs.com) and its Iceberg and Lance endpoints off. Every request is signed
(SigV4) and checked against ``identities.json``; there is no anonymous access. The identities,
their keys made fresh for each server:

- ``admin``: every action on every bucket (the harness: it creates the buckets and inspects
  what was written);
- ``operator``: read and list the buckets (the operator reads each experiment's progress);
- ``trainer``: read, list and write the buckets (the experiment's pods write checkpoints);
- ``reader``: read and list only (a key without write permission);
- ``nobody``: a valid key with no rights at all.

Their rights cover the ``buckets`` and ``UNMADE_BUCKET``, which nobody creates: a bucket a
policy names that does not exist (S3 answers NoSuchBucket, not AccessDenied, there).

::

    with S3Server(parts.build("seaweedfs"), tmp, buckets=["rl-checkpoints"]) as s3:
        boto3.client("s3", endpoint_url=s3.endpoint, **s3.identity("trainer").boto())
"""

from __future__ import annotations

import functools
import json
import logging
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rltrainer_operator.testing.envtest import free_port

logger = logging.getLogger(__name__)

REGION = "us-east-1"
#: What each identity may do, per bucket (SeaweedFS's actions: ``Read``, ``List``, ``Write``, ...).
ROLES: dict[str, tuple[str, ...]] = {
    "admin": ("Admin", "Read", "List", "Tagging", "Write"),
    "operator": ("Read", "List"),
    "trainer": ("Read", "List", "Write"),
    "reader": ("Read", "List"),
    "nobody": (),
}
#: A bucket every identity may use and that is never created.
UNMADE_BUCKET = "rltrainer-unmade-bucket"
#: ``weed server`` comes up in ~3 s on an idle machine; a loaded 2-core one takes longer.
START_TIMEOUT_S = 120.0


class S3ServerError(RuntimeError):
    """The server did not come up; the message ends with its log."""


@dataclass(frozen=True)
class Identity:
    name: str
    access_key: str
    secret_key: str

    def env(self) -> dict[str, str]:
        """The standard AWS variables for this identity (for a process or a Secret)."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

    def boto(self) -> dict[str, str]:
        """Keyword arguments for ``boto3.client``."""
        return {"aws_access_key_id": self.access_key, "aws_secret_access_key": self.secret_key}

    def __repr__(self) -> str:  # never the secret, in a log or an assertion message
        return f"Identity({self.name!r}, access_key={self.access_key!r})"


class S3Server:
    """SeaweedFS's ``weed server`` with its S3 gateway; a context manager. ``endpoint`` once
    started; ``identity(name)`` for each of ``ROLES``; ``buckets`` exist (made by ``admin``)."""

    def __init__(self, binary: Path, root: Path, *, host: str = "127.0.0.1", buckets: list[str] = ()) -> None:
        self.binary = Path(binary)
        self.root = Path(root)
        self.host = host
        self.buckets = list(buckets)
        self.identities = {
            name: Identity(name, f"RLT{secrets.token_hex(8).upper()}", secrets.token_urlsafe(30))
            for name in ROLES
        }
        self.endpoint = ""
        self._process: subprocess.Popen | None = None
        self._log: Any = None

    def identity(self, name: str) -> Identity:
        return self.identities[name]

    def start(self) -> S3Server:
        data = self.root / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.root / "identities.json"
        config.write_text(json.dumps(self._identities_config(), indent=2))
        config.chmod(0o600)
        ports = {name: free_port(self.host) for name in ("master", "volume", "filer", "s3")}
        grpc = {name: free_port(self.host) for name in ports}
        command = [
            str(self.binary),
            "server",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            f"-dir={data}",
            "-filer",
            "-s3",
            f"-s3.config={config}",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",  # small volumes: a test writes megabytes
            "-master.defaultReplication=000",
            "-volume.max=32",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-s3.autoCreateBucket=false",
            *(f"-{name}.port={port}" for name, port in ports.items()),
            *(f"-{name}.port.grpc={port}" for name, port in grpc.items()),
            f"-filer.localSocket={self.root / 'filer.sock'}",
            f"-s3.localSocket={self.root / 's3.sock'}",
        ]
        self._log = (self.root / "weed.log").open("wb")
        self._process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.root
        )
        self.endpoint = f"http://{self.host}:{ports['s3']}"
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _identities_config(self) -> dict[str, Any]:
        def actions(name: str) -> list[str]:
            if name == "admin":
                return list(ROLES[name])
            granted = [*self.buckets, UNMADE_BUCKET]
            return [f"{action}:{bucket}" for action in ROLES[name] for bucket in granted]

        return {
            "identities": [
                {
                    "name": identity.name,
                    "credentials": [{"accessKey": identity.access_key, "secretKey": identity.secret_key}],
                    "actions": actions(identity.name),
                }
                for identity in self.identities.values()
            ]
        }

    def client(self, identity: str = "admin") -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            config=Config(retries={"max_attempts": 1}, connect_timeout=3, read_timeout=30),
            **self.identity(identity).boto(),
        )

    def _wait_ready(self) -> None:
        """Until the admin can list, then make and write to every bucket: the gateway answers,
        and the filer and a volume server have registered with the master."""
        from botocore.exceptions import BotoCoreError, ClientError

        admin = self.client("admin")
        steps = [admin.list_buckets, *(functools.partial(_make_bucket, admin, b) for b in self.buckets)]
        deadline = time.monotonic() + START_TIMEOUT_S
        while steps:
            if self._process.poll() is not None:
                raise S3ServerError(f"weed server exited with {self._process.returncode}:\n{self.log_tail()}")
            try:
                steps[0]()
                steps.pop(0)
            except (ClientError, BotoCoreError) as err:
                status = getattr(err, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 500)
                if status < 500:  # refused, not starting (an invalid bucket name, a bad key)
                    raise S3ServerError(f"S3 refused the harness's admin: {err}") from None
                if time.monotonic() > deadline:
                    raise S3ServerError(
                        f"S3 not ready after {START_TIMEOUT_S:.0f} s ({err}):\n{self.log_tail()}"
                    ) from None
                time.sleep(0.3)

    def log_tail(self, lines: int = 40) -> str:
        path = self.root / "weed.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, graceful: bool = True) -> None:
        """End the server: SIGTERM and up to 15 s to exit unless not ``graceful``, then SIGKILL."""
        if self._process is not None and self._process.poll() is None:
            if graceful:
                self._process.terminate()
            else:
                self._process.kill()
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def remove(self) -> None:
        """Stop, then delete the data folder. At once: SeaweedFS takes the whole 15 s to end on
        SIGTERM (measured: every platform's teardown waited them out), for data about to go."""
        self.stop(graceful=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _make_bucket(admin: Any, bucket: str) -> None:
    """Create ``bucket`` (made on an earlier try is fine) and write to it once."""
    from botocore.exceptions import ClientError

    try:
        admin.create_bucket(Bucket=bucket)
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
            raise
    admin.put_object(Bucket=bucket, Key=".ready", Body=b"")
    admin.delete_object(Bucket=bucket, Key=".ready")
