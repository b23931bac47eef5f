"""Kopf handlers: thin wrappers that hand the body to the reconciler and write what it decides.

Run with ``kopf run --standalone -m rltrainer_operator.handlers --all-namespaces`` (or
``--namespace=NS`` per namespace). Create, resume (operator start), spec updates and a timer
all run the same level-triggered ``Reconciler.reconcile``; a per-object lock keeps a timer tick
and an event handler from reconciling one experiment at the same time.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections import defaultdict
from typing import Any

import kopf

from rltrainer_operator.kube import Kube, make_api_client
from rltrainer_operator.metrics import Metrics
from rltrainer_operator.models import GROUP, PLURAL, VERSION
from rltrainer_operator.progress import progress_reader
from rltrainer_operator.reconciler import Reconciler
from rltrainer_operator.settings import Settings

RESOURCE = (GROUP, VERSION, PLURAL)
FINALIZER = "rltrainer.io/finalizer"
#: Read once at import: kopf's timer interval is fixed when the handler is registered.
POLL_INTERVAL_S = Settings.from_env().poll_interval_s


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    operator_settings = Settings.from_env()
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # Our own events say what happened; kopf's per-handler chatter is posted only for problems.
    settings.posting.level = logging.WARNING
    memo.settings = operator_settings
    memo.api_client = make_api_client()
    memo.metrics = Metrics()
    memo.metrics.serve(operator_settings.metrics_port, operator_settings.metrics_host)
    memo.reconciler = Reconciler(Kube(memo.api_client), operator_settings, progress_reader(operator_settings))
    memo.locks = defaultdict(threading.Lock)


@kopf.on.cleanup()
def cleanup(memo: kopf.Memo, **_: Any) -> None:
    memo.metrics.close()
    memo.api_client.close()


@kopf.on.probe(id="experiments")
def experiments_probe(memo: kopf.Memo, **_: Any) -> int:
    """Liveness detail: how many experiments this operator tracks."""
    return len(memo.locks)


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
@kopf.timer(*RESOURCE, interval=POLL_INTERVAL_S)
def reconcile(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    uid = body["metadata"]["uid"]
    with memo.locks[uid]:
        started = time.monotonic()
        try:
            outcome = memo.reconciler.reconcile(_plain(body))
        except Exception:
            memo.metrics.reconcile_errors.inc()
            raise
        finally:
            memo.metrics.reconcile_seconds.observe(time.monotonic() - started)
    if outcome.deleted:
        memo.metrics.observe_phase(uid, None)
        return
    if outcome.status is not None:
        old_restarts = (body.get("status") or {}).get("restarts") or 0
        if outcome.status.get("restarts", 0) > old_restarts:
            memo.metrics.restarts.inc(outcome.status["restarts"] - old_restarts)
        patch.status.update(outcome.status)
        memo.metrics.observe_phase(uid, outcome.status.get("phase"))
    for event in outcome.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)


@kopf.on.delete(*RESOURCE)
def finalize(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Stop the job and delete the RayCluster; the checkpoints in S3 are kept."""
    memo.reconciler.finalize(_plain(body))
    memo.metrics.observe_phase(body["metadata"]["uid"], None)
    memo.locks.pop(body["metadata"]["uid"], None)


def _plain(body: kopf.Body) -> dict[str, Any]:
    """A deep copy of kopf's live body view as plain dicts (the reconciler and pydantic want data)."""
    return copy.deepcopy({key: body[key] for key in body})
