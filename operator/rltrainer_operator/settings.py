"""The operator's settings: one class, read from environment variables (set by the Helm chart)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any

from rltrainer import __version__

PREFIX = "RLTRAINER_OPERATOR_"


@dataclass(frozen=True)
class Settings:
    """Every knob, with its environment variable ``RLTRAINER_OPERATOR_<NAME upper-cased>``."""

    default_image: str = f"rltrainer/trainer:{__version__}"
    """Trainer image (images/trainer: Ray + rltrainer) for experiments that set no ``spec.image``."""
    poll_interval_s: float = 10.0
    """How often each experiment's job, cluster and progress are checked."""
    provision_timeout_s: float = 600.0
    """A cluster not ready after this long counts as lost (restart, up to backoffLimit)."""
    crash_loop_restarts: int = 3
    """A Ray container restarted this many times and still crash-looping (or killed for memory)
    while the job runs restarts the experiment (up to backoffLimit, then Failed) instead of
    letting the driver wait for it forever."""
    backoff_base_s: float = 10.0
    """First restart delay; doubles per restart."""
    backoff_max_s: float = 300.0
    """Longest restart delay."""
    watch_stall_timeout_s: float = 70.0
    """A watch (of experiments, of RayClusters) that delivers nothing for this long, not even the
    bookmark the API server sends about once a minute, counts as stalled: it is dropped and opened
    again (a half-open connection after a network fault would otherwise hang it forever)."""
    watch_namespaces: str = ""
    """The namespaces kopf watches (its ``--namespace`` arguments), comma-separated; empty with
    ``--all-namespaces``. The operator checks its permissions there (``permissions.py``)."""
    readiness_port: int = 0
    """``/readyz`` on this port, every interface (0: off): 503 while the operator lacks an RBAC
    permission it needs, so the Pod shows not ready."""
    metrics_port: int = 8081
    """Prometheus metrics on this port (0: off). Liveness is kopf's ``--liveness`` endpoint."""
    metrics_host: str = "127.0.0.1"
    """Address the metrics server binds (the chart sets 0.0.0.0 inside the pod)."""
    s3_endpoint_url: str = ""
    """S3 endpoint for experiments whose spec.storage sets none (MinIO etc.; empty: AWS)."""
    s3_region: str = ""
    """S3 region for experiments whose spec.storage sets none."""
    dashboard_port: int = 8265
    """The Ray dashboard (job API) port on the head service."""
    cluster_domain: str = "cluster.local"
    """The cluster's DNS domain, for ``<head-svc>.<namespace>.svc.<domain>``."""
    ray_token_key: str = field(default="", repr=False)
    """The secret each experiment's Ray token is derived from (``rayAuth.mode: token``): the
    chart generates it once and keeps it in a Secret. Never logged (not in ``repr``); empty:
    token-mode experiments fail, saying so."""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Settings from ``RLTRAINER_OPERATOR_*`` variables; a malformed value is an error naming it."""
        environ = os.environ if environ is None else environ
        values = {}
        for setting in fields(cls):
            name = PREFIX + setting.name.upper()
            if name not in environ:
                continue
            kind = type(setting.default)
            try:
                values[setting.name] = kind(environ[name])
            except ValueError:
                raise ValueError(f"{name}={environ[name]!r} is not a valid {kind.__name__}") from None
        return cls(**values)

    def namespaces(self, clusterwide: bool) -> list[str] | None:
        """The watched namespaces; None when kopf watches every namespace (``clusterwide``)."""
        if clusterwide:
            return None
        return [name.strip() for name in self.watch_namespaces.split(",") if name.strip()]

    def s3_options(self, storage: Any) -> dict[str, str]:
        """rltrainer's ``storage_options`` for an experiment's ``spec.storage``: its endpoint
        and region, else these settings' defaults (credentials never go here)."""
        options = {}
        if storage.endpointURL or self.s3_endpoint_url:
            options["endpoint_url"] = storage.endpointURL or self.s3_endpoint_url
        if storage.region or self.s3_region:
            options["region_name"] = storage.region or self.s3_region
        return options
