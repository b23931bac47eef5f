"""Kopf handlers: thin wrappers that hand the body to the reconciler and write what it decides.

Run with ``kopf run --standalone -m rltrainer_operator --all-namespaces`` (or ``--namespace=NS``
per namespace); importing the package registers these handlers. Create, resume (operator
start), spec updates and a timer all run the same level-triggered ``Reconciler.reconcile``; a
per-object lock keeps a timer tick and an event handler from reconciling one experiment at the
same time.
"""

from __future__ import annotations

import copy
import datetime
import itertools
import logging
import os
import random
import threading
import time
from collections import defaultdict
from typing import Any

import kopf

from rltrainer_operator.builders.naming import EXPERIMENT_LABEL, MANAGED_BY
from rltrainer_operator.coalescing import CoalescingRunner
from rltrainer_operator.kube import Kube, Refused, make_api_client, refused_delay
from rltrainer_operator.memory import MemoryTrim
from rltrainer_operator.metrics import Metrics
from rltrainer_operator.models import GROUP, PLURAL, VERSION
from rltrainer_operator.permissions import PermissionCheck, RefusedRetries, own_pod
from rltrainer_operator.progress import progress_reader
from rltrainer_operator.readiness import ReadinessServer
from rltrainer_operator.reconciler import Event, Outcome, Reconciler
from rltrainer_operator.settings import Settings

RESOURCE = (GROUP, VERSION, PLURAL)
FINALIZER = "rltrainer.io/finalizer"
#: Read once at import: kopf's timer interval is fixed when the handler is registered.
POLL_INTERVAL_S = Settings.from_env().poll_interval_s
#: Status fields that only mirror the driver's progress (``progress.json``). The first change of
#: these alone after any other change is written at once, the next ones at most once every
#: ``PROGRESS_WRITE_TICKS`` timer ticks (a minute at the default 10 s), as after the operator's
#: first write of a status since its start; any other change (a phase, a condition, a job, a
#: restart) at once, with the progress of that moment. Mirroring every iteration would cost a
#: write per experiment and tick (docs/benchmarks.md#scale).
PROGRESS_FIELDS = frozenset(
    {
        "iteration",
        "timesteps",
        "episodeReturnMean",
        "lastCheckpoint",
        "healthyEnvRunners",
        "gracePeriodNeededSeconds",
        "trials",
        "bestTrial",
        "bestMetric",
        "bestCheckpoint",
    }
)
PROGRESS_WRITE_TICKS = 6
#: A provisioning cluster's Pods are read (for a problem to report: unschedulable, an image
#: that cannot be pulled, a crash loop) at most once every this many ticks, however many of
#: its changes wake the reconcile: with hundreds of clusters provisioning at once (KubeRay
#: makes their Pods one cluster at a time) a read at every step grew with their number times
#: the wait (docs/benchmarks.md#scale).
POD_CHECK_TICKS = 3
#: Reconciles at once (kopf's thread pool for the handlers; each holds its experiment's lock).
#: A reconcile mostly waits on the API server, the Ray job API and S3, so more of them than
#: cores keep the timers' pace with many experiments; kopf's default is the CPU count + 4.
RECONCILE_WORKERS = 16


#: Longest wait between two checks for the CRDs at startup.
CRD_RETRY_MAX_S = 60
#: The operator's exit status when the installed KubeRay is older than it supports.
EXIT_KUBERAY_TOO_OLD = 3
#: Seconds between kopf's tries of one of its own API calls that failed (a 403, a 5xx, no
#: answer): doubling as client-go's reflectors do, then every ``API_RETRY_MAX_S``, never giving up.
API_RETRY_DELAYS_S = (1, 2, 4, 8, 16)
API_RETRY_MAX_S = 30


class RetryForever:
    """kopf's ``settings.networking.error_backoffs``: its own list and watch of RLExperiments and
    RayClusters (and its patches) are tried again until they go through. kopf's default gives up
    after about a minute, and a list or watch that fails then ends the operator: a Pod restarting
    in a loop for an RBAC rule removed (403), the cause only in its log. kopf logs the tries
    (``Request attempt #N failed; will retry: ...``, a refused one once a minute:
    ``permissions.RefusedRetries``); ``permissions.PermissionCheck`` says why. kopf iterates this
    anew for each call; a watch's tries start again after ``watching.inactivity_timeout``."""

    def __iter__(self) -> itertools.chain[float]:
        return itertools.chain(API_RETRY_DELAYS_S, itertools.repeat(API_RETRY_MAX_S))


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, retry: int, **_: Any) -> None:
    # The in-process runner (testing/runner.py) puts its credentials in the memo.
    if memo.get("api_client") is None:
        memo.api_client = make_api_client(memo.get("kubeconfig"))
    # Resources are discovered once, after startup (no CRD watching: see scanning below): wait
    # here until both CRDs are served, retrying with backoff, one log line per try.
    missing = Kube(memo.api_client).missing_resources()
    if missing:
        delay = min(2 ** min(retry, 6), CRD_RETRY_MAX_S)
        raise kopf.TemporaryError(f"not installed: {'; '.join(missing)}; retrying in {delay}s", delay=delay)
    too_old = Kube(memo.api_client).kuberay_below_floor()
    if too_old:
        if memo.get("settings") is not None:  # the in-process runner: its test reads the error
            raise kopf.PermanentError(too_old)
        # Nothing has started yet and nothing the operator would do could work: one line and
        # out, not kopf's retries or its traceback of a permanent startup failure.
        logging.getLogger(__name__).critical("cannot start: %s", too_old)
        logging.shutdown()
        os._exit(EXIT_KUBERAY_TOO_OLD)
    # Settings in the memo: the in-process runner (testing/runner.py); else the environment.
    operator_settings = memo.get("settings") or Settings.from_env()
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # Our own events say what happened; kopf's per-handler chatter is posted only for problems.
    settings.posting.level = logging.WARNING
    # No watching of Namespaces and CRDs for changes: the watched namespaces come from the
    # command line, and the RBAC needs no cluster-wide read of namespaces or CRDs.
    settings.scanning.disabled = True
    # Only the RayClusters this operator made are watched (a server-side selector: the API server
    # sends no other cluster's changes, and the index holds none).
    settings.watching.label_selectors["ray.io", "rayclusters"] = f"app.kubernetes.io/managed-by={MANAGED_BY}"
    # Watch health. The API server ends each watch after server_timeout, as client-go's reflectors
    # ask (5-10 min at random; kopf takes one number, drawn once per process): watches are renewed
    # regularly and spread again over API server replicas after a rolling restart. A watch that
    # delivers nothing for watch_stall_timeout_s is dropped; kopf then watches again from the last
    # resourceVersion it saw, and the API server replays every change since, or answers 410 Gone
    # when it no longer keeps that version, on which kopf lists everything again
    # (docs/platform/fault-tolerance.md#watch-health). client_timeout is the backstop for a
    # stream the server fails to end.
    settings.watching.server_timeout = random.randint(300, 600)
    settings.watching.client_timeout = settings.watching.server_timeout + 60
    settings.watching.inactivity_timeout = operator_settings.watch_stall_timeout_s
    settings.networking.error_backoffs = RetryForever()
    settings.execution.max_workers = RECONCILE_WORKERS
    # kopf's line for each try of its refused list or watch (logged by its watching module): once
    # a minute; the permission check below says why.
    watching = logging.getLogger("kopf._cogs.clients.watching")
    if not any(isinstance(each, RefusedRetries) for each in watching.filters):
        watching.addFilter(RefusedRetries())
    memo.settings = operator_settings
    memo.metrics = Metrics()
    memo.metrics.serve(operator_settings.metrics_port, operator_settings.metrics_host)
    # What a burst of work freed goes back to the system, not kept at the burst's peak (memory.py).
    memo.memory_trim = MemoryTrim()
    memo.memory_trim.start()
    # What the operator may do, asked now and every minute: a missing rule is said (a log line,
    # an event on its Pod) and makes it not ready; it stays up and carries on once it is back.
    namespaces = operator_settings.namespaces(clusterwide=settings.peering.clusterwide)
    memo.permissions = PermissionCheck(Kube(memo.api_client), namespaces, own_pod())
    memo.permissions.check()
    memo.permissions.start()
    if operator_settings.readiness_port:
        memo.readiness = ReadinessServer(operator_settings.readiness_port, lambda: memo.permissions.problem)
    memo.reconciler = Reconciler(Kube(memo.api_client), operator_settings, progress_reader(operator_settings))
    # Re-entrant: a reconcile after a RayCluster change takes it to begin, then reconciles.
    memo.locks = defaultdict(threading.RLock)
    memo.cluster_changes = CoalescingRunner(
        settings.execution.executor, "the reconcile after a RayCluster's change"
    )
    memo.written = {}  # uid -> the status this operator last wrote
    memo.progress_written = {}  # uid -> when its last write of progress alone was (monotonic)
    memo.synced = {}  # uid -> the status the API server last accepted from this operator
    memo.pods_read = {}  # uid -> when its provisioning cluster's Pods were last read (monotonic)


@kopf.on.cleanup()
def cleanup(memo: kopf.Memo, **_: Any) -> None:
    # Startup may have stopped early (the CRDs were never installed): close what exists.
    for name in ("memory_trim", "readiness", "permissions", "metrics", "api_client"):
        if memo.get(name) is not None:
            memo[name].close()


#: How long kopf keeps the credentials of one login before it logs in again.
CREDENTIALS_TTL = datetime.timedelta(days=1)


@kopf.on.login(id="credentials")
def login(memo: kopf.Memo, settings: kopf.OperatorSettings, retry: int, **_: Any) -> kopf.ConnectionInfo:
    """kopf's credentials are the operator's own client's, once the API server accepts them.

    Refused (401: the ServiceAccount deleted, its token revoked), this retries with backoff and
    kopf logs each try in one line, holding its API calls meanwhile: the operator stays up, its
    liveness too, and carries on once the credentials are accepted. (kopf's own login would
    hand the refused token back, and kopf would stop the operator on ``LoginError``: a Pod in
    CrashLoopBackOff, the cause out of sight.) Each login is a new ``ConnectionInfo`` (its
    expiration): kopf ignores one equal to credentials it once saw refused, even when the API
    server accepts them again."""
    kube = Kube(memo.api_client)
    try:
        kube.check_credentials()
    except Refused as err:
        delay = refused_delay(retry)
        raise kopf.TemporaryError(f"{err}; trying again in {delay:.0f}s", delay=delay) from None
    expiration = datetime.datetime.now(datetime.UTC) + CREDENTIALS_TTL
    return kube.connection_info(trust_env=settings.networking.trust_env, expiration=expiration)


@kopf.on.probe(id="experiments")
def experiments_probe(memo: kopf.Memo, **_: Any) -> int:
    """Liveness detail: how many experiments this operator tracks."""
    return len(memo.locks)


@kopf.index(*RESOURCE)
def experiments_by_name(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """The latest body of every experiment, by (namespace, name), kept from kopf's watch."""
    return {(namespace, name): body}


@kopf.index("ray.io", "v1", "rayclusters", labels={"app.kubernetes.io/managed-by": MANAGED_BY})
def rayclusters_by_name(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """Every RayCluster this operator made, by (namespace, name), as its watch last saw it: the
    reconciler reads these instead of a GET per experiment and tick (``_Step._cluster``). kopf
    fills its indexes from the initial listing before any handler runs."""
    return {(namespace, name): _cluster_view(body)}


def _cluster_view(body: kopf.Body) -> dict[str, Any]:
    """What the reconcile steps read of a RayCluster: its metadata (without managedFields), its
    status, and of its spec the token mode, suspension and each worker group's replicas. The Pod
    templates and managedFields, most of a cluster's size, are left out: a thousand clusters'
    whole copies made a large part of the operator's memory (a rescale reads the whole cluster)."""
    spec = body.get("spec") or {}
    groups = [
        {"groupName": g.get("groupName"), "replicas": g.get("replicas")}
        for g in spec.get("workerGroupSpecs") or []
    ]
    return {
        "metadata": copy.deepcopy({k: v for k, v in body["metadata"].items() if k != "managedFields"}),
        "spec": {
            "authOptions": copy.deepcopy(spec.get("authOptions")),
            "suspend": spec.get("suspend"),
            "workerGroupSpecs": groups,
        },
        "status": copy.deepcopy(dict(body.get("status") or {})),
    }


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
# The first tick one interval in: creation and the operator's start reconcile at once already
# (a tick then too made two reconciles per experiment, one waiting in a thread for the other's lock).
@kopf.timer(*RESOURCE, interval=POLL_INTERVAL_S, initial_delay=POLL_INTERVAL_S)
def reconcile(
    body: kopf.Body, memo: kopf.Memo, retry: int, rayclusters_by_name: kopf.Index, **_: Any
) -> None:
    outcome = _reconcile(body, memo, rayclusters_by_name)
    _post(body, outcome)
    if outcome.refused is not None:  # kopf logs it, one line a try, and tries again with backoff
        raise kopf.TemporaryError(str(outcome.refused), delay=refused_delay(retry))


@kopf.on.event("ray.io", "v1", "rayclusters", labels={"app.kubernetes.io/managed-by": MANAGED_BY})
async def raycluster_changed(
    body: kopf.Body,
    type: str | None,
    memo: kopf.Memo,
    experiments_by_name: kopf.Index,
    rayclusters_by_name: kopf.Index,
    **_: Any,
) -> None:
    """A RayCluster we own changed (ready, head lost, deleted): reconcile its experiment now
    instead of at the next timer tick. Asked for, not awaited: one reconcile waits per
    experiment however many changes come meanwhile (coalescing.py), and kopf's worker for the
    cluster goes on to its next change at once."""
    if type is None:  # the initial listing: the timers and resume handlers cover those
        return
    key = (body.metadata.namespace, body.metadata.labels.get(EXPERIMENT_LABEL))
    for experiment in experiments_by_name.get(key, []):
        uid = experiment["metadata"]["uid"]
        memo.cluster_changes.ask(
            uid, _after_cluster_change(key, uid, memo, experiments_by_name, rayclusters_by_name)
        )


def _after_cluster_change(
    key: Any, uid: str, memo: kopf.Memo, experiments: kopf.Index, clusters: kopf.Index
) -> Any:
    """The run ``raycluster_changed`` asks for: under the experiment's lock, its latest body and
    clusters, reconciled. A refusal is left to the timer, which tries again."""

    def latest() -> Any:
        return next((each for each in experiments.get(key, []) if each["metadata"]["uid"] == uid), None)

    def run(begin: Any) -> None:
        if latest() is None:  # deleted meanwhile (its lock is gone with it)
            return
        with memo.locks[uid]:
            begin()
            experiment = latest()
            if experiment is None:
                return
            _post(experiment, _reconcile(experiment, memo, clusters))

    return run


def _post(body: kopf.Body, outcome: Outcome) -> None:
    """The reconcile's events, on the experiment."""
    for event in outcome.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)


def _reconcile(body: kopf.Body, memo: kopf.Memo, clusters: kopf.Index) -> Outcome:
    """One reconcile under the experiment's lock, its status written before the lock is released;
    returns its outcome (the events to post, a refusal). ``clusters``: ``rayclusters_by_name``.

    The status goes through ``kube``, not kopf's handler patch: kopf applies that patch after the
    handler returns, outside the lock, so a reconcile started by a RayCluster event could write a
    newer status first and kopf's older one would then undo it (a job id lost, a phase gone back)."""
    uid = body["metadata"]["uid"]
    with memo.locks[uid]:
        experiment = _latest(body, memo)
        written = memo.written.get(uid)
        started = time.monotonic()
        try:
            outcome = memo.reconciler.reconcile(
                experiment, clusters=_cluster_cache(clusters), pods_due=_pods_due(memo, uid)
            )
        except Exception:
            memo.metrics.reconcile_errors.inc()
            raise
        finally:
            memo.metrics.reconcile_seconds.observe(time.monotonic() - started)
        if outcome.deleted:
            memo.metrics.observe_phase(uid, None)
            _forget(memo, uid)
            return outcome
        status = outcome.status if outcome.status is not None else written
        if status is None or _set(status) == _set(body.get("status") or {}) or status == memo.synced.get(uid):
            return outcome  # the body may not show the last write yet: the API server has it
        if written is None or written != memo.synced.get(uid):
            # The first write since the operator started, or the last one did not go through
            # (refused): written now, progress included, so that every retry tries it again.
            memo.progress_written[uid] = time.monotonic()
        elif not _progress_only(status, written):
            memo.progress_written.pop(uid, None)
        elif _progress_due(memo.progress_written.get(uid)):
            memo.progress_written[uid] = time.monotonic()
        else:
            return outcome  # written with the next change, or once PROGRESS_WRITE_TICKS have passed
        old_restarts = (experiment.get("status") or {}).get("restarts") or 0
        if status.get("restarts", 0) > old_restarts:
            memo.metrics.restarts.inc(status["restarts"] - old_restarts)
        # Remembered before the write: should the write fail, the next reconcile still knows
        # what this one did (a submitted job), and writes it again.
        memo.written[uid] = status
        memo.metrics.observe_phase(uid, status.get("phase"))
        if _write_status(body, memo, status, outcome):
            memo.synced[uid] = status
        return outcome


def _write_status(body: kopf.Body, memo: kopf.Memo, status: dict[str, Any], outcome: Outcome) -> bool:
    """Write the status; whether it was written. Refused (403, 401), no condition can say so: a
    Warning event does (when events may still be created) and kopf's log line of each retry."""
    try:
        memo.reconciler.kube.patch_experiment_status(
            body["metadata"]["namespace"], body["metadata"]["name"], status
        )
    except Refused as err:
        outcome.events.append(Event("Warning", err.reason, str(err)))
        outcome.refused = err
        return False
    return True


def _forget(memo: kopf.Memo, uid: str) -> None:
    """The experiment is gone: drop what this operator remembers of it."""
    memo.written.pop(uid, None)
    for name in ("progress_written", "synced", "pods_read"):
        getattr(memo, name, {}).pop(uid, None)


def _pods_due(memo: kopf.Memo, uid: str) -> Any:
    """``pods_due`` for one reconcile: true (and remembered) once ``POD_CHECK_TICKS`` have passed
    since the experiment's last read of its Pods."""

    def due() -> bool:
        last = memo.pods_read.get(uid)
        if last is not None and time.monotonic() - last < POD_CHECK_TICKS * POLL_INTERVAL_S:
            return False
        memo.pods_read[uid] = time.monotonic()
        return True

    return due


def _progress_only(status: dict[str, Any], written: dict[str, Any] | None) -> bool:
    """Whether ``status`` differs from the status last written only in ``PROGRESS_FIELDS``
    (False when this operator has written none yet: after its start every status is written)."""
    if written is None:
        return False
    changed = {key for key in status.keys() | written.keys() if status.get(key) != written.get(key)}
    return changed <= PROGRESS_FIELDS


def _progress_due(last_write: float | None) -> bool:
    """Whether progress alone may be written again (``last_write``: the last such write)."""
    return last_write is None or time.monotonic() - last_write >= PROGRESS_WRITE_TICKS * POLL_INTERVAL_S


def _cluster_cache(index: kopf.Index) -> Any:
    """``(namespace, name) -> RayCluster | None`` over ``rayclusters_by_name``: the newest copy
    (a deleted cluster and its successor of the same name can both be there for a moment)."""

    def find(namespace: str, name: str) -> dict[str, Any] | None:
        copies = tuple(index.get((namespace, name), ()))
        return max(copies, key=_revision, default=None)

    return find


def _revision(body: dict[str, Any]) -> int:
    """The object's resourceVersion as a number (etcd's revision; 0 when it is not one)."""
    try:
        return int(body["metadata"].get("resourceVersion") or 0)
    except ValueError:
        return 0


def _latest(body: kopf.Body, memo: kopf.Memo) -> dict[str, Any]:
    """The experiment as plain data, with the status this operator last wrote: only this operator
    writes status, but a handler can run on a body from before that write came back through the
    watch."""
    experiment = _plain(body)
    written = memo.written.get(body["metadata"]["uid"])
    if written is not None:
        experiment["status"] = copy.deepcopy(written)
    return experiment


def _set(status: dict[str, Any]) -> dict[str, Any]:
    """A status without its unset (None) fields: what the API holds after a merge patch."""
    return {key: value for key, value in status.items() if value is not None and key != "kopf"}


@kopf.on.delete(*RESOURCE)
def finalize(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Stop the job and delete the RayCluster; the checkpoints in S3 are kept."""
    uid = body["metadata"]["uid"]
    # Under the lock and with the status last written: a reconcile that submitted a job just
    # before the deletion holds the job id the finalizer must stop.
    with memo.locks[uid]:
        memo.reconciler.finalize(_latest(body, memo))
    memo.metrics.observe_phase(uid, None)
    memo.locks.pop(uid, None)
    _forget(memo, uid)


def _plain(body: kopf.Body) -> dict[str, Any]:
    """A deep copy of kopf's live body view as plain dicts (the reconciler and pydantic want data)."""
    return copy.deepcopy({key: body[key] for key in body})
