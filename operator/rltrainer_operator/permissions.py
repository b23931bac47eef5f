"""What the operator may do, asked of the API server, against the one table of what it needs.

``API_CALLS`` is the one table of the Kubernetes API calls the operator makes (kopf's and its
own, ``kube.py``), so the RBAC it needs: the Helm chart's rules (``templates/_helpers.tpl``)
are tested against it both ways (``tests/charts``), and the operator checks it while it runs.

At startup and every ``CHECK_INTERVAL_S`` (every ``RECHECK_MISSING_S`` while something is
missing) ``PermissionCheck`` asks a SelfSubjectAccessReview for each call in each watched
namespace (or cluster-wide). Something missing (a rule removed from the ClusterRole, a binding
deleted): one log line names each verb, resource and namespace, the identity and the
``kubectl auth can-i`` check, repeated at most once a minute; a ``PermissionDenied`` Warning
event on the operator's own Pod says the same when what is missing changes; and ``problem``
(the readiness probe's answer) is that message, so ``kubectl get pods`` shows the operator not
ready. The operator stays up meanwhile: kopf retries its own list and watch of a refused kind
(``handlers.startup``: ``settings.networking.error_backoffs``) instead of ending the process,
and once the rules are back, it carries on without a restart: a ``Permitted`` event says so.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import NamedTuple

import kopf

from rltrainer_operator.builders.event import build_pod_event
from rltrainer_operator.kube import Kube

logger = logging.getLogger(__name__)

#: (API group, resource) -> the verbs the operator uses on it, in every watched namespace (or
#: cluster-wide). kopf lists and watches RLExperiments and RayClusters, patches experiments'
#: finalizers and annotations (its state: ``--standalone``, no peering objects); the operator
#: writes their status, deletes them after ``ttlSecondsAfterFinished``, runs one RayCluster per
#: experiment, posts events on them, lists its clusters' Pods and Kueue's Workloads (why a
#: cluster is not ready, or waits), creates each experiment's Ray token Secret and its
#: PodDisruptionBudget (never reads them).
API_CALLS: dict[tuple[str, str], frozenset[str]] = {
    ("rltrainer.io", "rlexperiments"): frozenset({"list", "watch", "patch", "delete"}),
    ("rltrainer.io", "rlexperiments/status"): frozenset({"patch"}),
    ("ray.io", "rayclusters"): frozenset({"get", "list", "watch", "create", "patch", "delete"}),
    ("", "events"): frozenset({"create"}),
    ("", "secrets"): frozenset({"create"}),
    ("", "pods"): frozenset({"list"}),
    ("kueue.x-k8s.io", "workloads"): frozenset({"list"}),
    ("policy", "poddisruptionbudgets"): frozenset({"create"}),
}
#: In its own Pod's namespace (where the chart installs it): the events that say what it lacks.
OWN_NAMESPACE_CALLS: dict[tuple[str, str], frozenset[str]] = {("", "events"): frozenset({"create"})}

#: Seconds between two checks while every call is allowed: a rule removed while the operator
#: runs is told within this time (kopf's watches notice only when they are renewed, 5-10 min).
CHECK_INTERVAL_S = 60
#: Seconds between two checks while something is missing: ready again this soon after the fix.
RECHECK_MISSING_S = 10
#: The log line of what is missing comes at most this often (and whenever that changes).
SAY_INTERVAL_S = 60


class Access(NamedTuple):
    """One call: ``verb`` on ``resource`` (``plural`` or ``plural/subresource``) of API ``group``
    in ``namespace`` (None: in every namespace)."""

    verb: str
    group: str
    resource: str
    namespace: str | None

    @property
    def kind(self) -> str:
        """``rlexperiments.rltrainer.io/status``, as ``kubectl`` names it."""
        plural, _, subresource = self.resource.partition("/")
        return plural + (f".{self.group}" if self.group else "") + (f"/{subresource}" if subresource else "")

    @property
    def where(self) -> str:
        return "cluster-wide" if self.namespace is None else f"in namespace {self.namespace}"

    def can_i(self, user: str) -> str:
        """The ``kubectl auth can-i`` command that checks this call as ``user``."""
        plural, _, subresource = self.kind.partition("/")
        flags = (f" --subresource={subresource}" if subresource else "") + (
            f" -n {self.namespace}" if self.namespace else " --all-namespaces"
        )
        return f"kubectl auth can-i {self.verb} {plural}{flags}" + (f" --as={user}" if user else "")


def needed(namespaces: Sequence[str] | None, own_namespace: str | None = None) -> list[Access]:
    """Every call of ``API_CALLS`` in each of ``namespaces`` (None: cluster-wide), and those of
    ``OWN_NAMESPACE_CALLS`` in ``own_namespace`` where the others do not cover it."""
    scopes: Sequence[str | None] = [None] if namespaces is None else namespaces
    calls = [
        Access(verb, group, resource, namespace)
        for namespace in scopes
        for (group, resource), verbs in API_CALLS.items()
        for verb in sorted(verbs)
    ]
    if own_namespace is not None and namespaces is not None and own_namespace not in namespaces:
        calls += [
            Access(verb, group, resource, own_namespace)
            for (group, resource), verbs in OWN_NAMESPACE_CALLS.items()
            for verb in sorted(verbs)
        ]
    return calls


def describe(missing: Sequence[Access], user: str) -> str:
    """One line: who may not do what where, what the operator does meanwhile, and how to fix it."""
    scopes: dict[str | None, list[Access]] = {}
    for access in missing:
        scopes.setdefault(access.namespace, []).append(access)
    what = "; ".join(
        f"{', '.join(f'{a.verb} {a.kind}' for a in accesses)} {accesses[0].where}"
        for accesses in scopes.values()
    )
    return (
        f"the operator lacks RBAC permissions it needs: {user or 'its identity'} may not {what}; "
        f"the operator waits, not ready, and checks again every {RECHECK_MISSING_S} s; the Helm "
        f"chart's ClusterRole (or Role, when it watches given namespaces) grants these: restore it "
        f"(helm upgrade the release) and check with {missing[0].can_i(user)}"
    )


def own_pod() -> dict[str, str] | None:
    """The operator's Pod (``name``, ``namespace``, ``uid``), from the downward API variables the
    chart sets (``POD_NAME``, ``POD_NAMESPACE``, ``POD_UID``); None outside a Pod."""
    name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not name or not namespace:
        return None
    return {"name": name, "namespace": namespace, "uid": os.environ.get("POD_UID", "")}


class RefusedRetries(logging.Filter):
    """kopf's log line of each try of one of its refused (403) requests (``Request attempt #N
    failed; will retry: GET <url> -> APIForbiddenError(...)``), at most once a minute per
    request: ``PermissionCheck`` says why and what to do; other failures are all kept."""

    def __init__(self) -> None:
        super().__init__()
        self._said_at: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "; will retry: " not in message or " -> APIForbiddenError(" not in message:
            return True
        request = message.partition("; will retry: ")[2].partition(" -> ")[0].partition("?")[0]
        now = time.monotonic()
        if now - self._said_at.get(request, -float("inf")) < SAY_INTERVAL_S:
            return False
        self._said_at[request] = now
        return True


class PermissionCheck:
    """Checks ``needed`` now (``check``) and in a thread until ``close`` (``start``)."""

    def __init__(self, kube: Kube, namespaces: Sequence[str] | None, pod: dict[str, str] | None) -> None:
        self.kube, self.pod = kube, pod
        if namespaces == []:
            logger.warning(
                "RLTRAINER_OPERATOR_WATCH_NAMESPACES is empty while kopf watches given namespaces: "
                "the operator's permissions there are not checked"
            )
        self.needed = needed(namespaces, pod["namespace"] if pod else None)
        self.user = kube.identity()
        #: What the last check found missing; None before a check went through.
        self.missing: list[Access] | None = None
        self._said_at = -float("inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def problem(self) -> str | None:
        """Why the operator is not ready; None when every call is allowed."""
        if self.missing is None:
            return "the operator's permissions are not checked yet"
        return describe(self.missing, self.user) if self.missing else None

    def check(self) -> list[Access] | None:
        """Ask about every needed call; say what changed. The calls missing (None: unknown)."""
        try:
            missing = [access for access in self.needed if not self.kube.allowed(*access)]
        except kopf.TemporaryError as err:  # the API server unreachable, the token refused
            if self._due():
                logger.warning("cannot check the operator's permissions: %s", err)
                self._said_at = time.monotonic()
            return self.missing
        previous, changed = self.missing, missing != (self.missing or [])
        # Readiness first: it answers from this before the line is logged and the event posted.
        self.missing = missing
        if missing:
            message = describe(missing, self.user)
            if changed or self._due():
                logger.error("%s", message)
                self._said_at = time.monotonic()
            if changed:
                self._post("Warning", "PermissionDenied", message)
        elif previous:
            message = "the operator's RBAC grants every call it makes again: it carries on"
            logger.info("%s", message)
            self._post("Normal", "Permitted", message)
        return missing

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="permission check", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def _run(self) -> None:
        while not self._stop.wait(CHECK_INTERVAL_S if self.missing == [] else RECHECK_MISSING_S):
            try:
                self.check()
            except Exception:  # a bug here must not end the checks (and leave readiness stale)
                logger.exception("the operator's permission check failed")

    def _due(self) -> bool:
        return time.monotonic() - self._said_at >= SAY_INTERVAL_S

    def _post(self, type_: str, reason: str, message: str) -> None:
        if self.pod is None:  # not in a Pod (kopf run on a workstation, the tests' runner)
            return
        try:
            self.kube.create_event(build_pod_event(self.pod, type_, reason, message))
        except kopf.TemporaryError as err:
            logger.warning("cannot post the %s event on the operator's Pod: %s", reason, err)
