"""The RLExperiment state machine, level-triggered: look at the world, take the next step.

``Reconciler.reconcile(body)`` reads the experiment, its RayCluster and its Ray job, does at
most one step (create the cluster, submit a job, restart, finish, ...) and returns the new
status and the events to record. Everything it decides is derived from the resource's status
and what exists, never from memory, so a restarted operator carries on where the last one
stopped; names and job ids are deterministic and creates are idempotent, so no step is ever
done twice.

    Pending -> Provisioning -> Running -> Succeeded
                    |             |
                    +--> Restarting (backoff) --> Provisioning / Running ... -> Failed
    any (unfinished) <-> Suspended            deadline exceeded -> Failed
    Pending / Provisioning / Running / Restarting <-> Queued (Kueue holds the RayCluster)

Queued (``queueing``): the experiment's RayCluster is labelled for a Kueue LocalQueue and Kueue
holds it suspended, waiting for quota or preempted. Nothing counts while it waits: the
provisioning timeout starts at admission and the deadline at (re)admission, as a Kubernetes
Job's ``activeDeadlineSeconds`` does. Preempted or otherwise disrupted (a drain, an eviction, a
spot node's end), the driver writes a checkpoint on the pods' preStop hook; the experiment
resumes from it and ``status.disruptions`` counts it, not ``restarts``.

The Kubernetes API is reached only through ``kube.Kube``, Ray only through ``ray_jobs``, S3 only
through the progress reader; all three are injected so tests can drive every transition.

Refused calls (``kube.Refused``: 403, an RBAC rule missing; 401, the operator's credentials no
longer accepted): the step is dropped, the phase stays, and Ready is False with the refusal as
its reason and message (whose call, what was refused, what to do) until a reconcile goes
through; the handler retries with backoff.

Ray token authentication (``rayAuth.mode: token``): a cluster's token Secret is created just
before the cluster (``builders.ray_token``), and the token is derived again from the operator's
key and the experiment's uid for every job API call: nothing secret is kept or read back.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import math
from collections.abc import Callable
from typing import Any

from rltrainer.preemption import PREEMPTED_LINE_PREFIX
from rltrainer.storage import STORAGE_UNUSABLE
from rltrainer_operator import queueing
from rltrainer_operator.builders import job as job_builder
from rltrainer_operator.builders.disruption_budget import build_disruption_budget
from rltrainer_operator.builders.naming import job_id, raycluster_name
from rltrainer_operator.builders.ray_token import build_token_secret, ray_token
from rltrainer_operator.builders.raycluster import (
    RAY_STOP_RESERVE_S,
    ROLLOUTS_GROUP,
    build_raycluster,
    scale_patch,
    worker_replicas,
)
from rltrainer_operator.kube import CredentialsRefused, Kube, PermissionDenied, Refused
from rltrainer_operator.models import (
    CONDITION_TYPES,
    KIND,
    Condition,
    ExperimentSpec,
    ExperimentStatus,
    Phase,
    TrialCounts,
)
from rltrainer_operator.pod_problems import pod_problems, ray_oom_problem
from rltrainer_operator.ray_jobs import (
    JobInfo,
    RayAuthError,
    RayJobClient,
    RayJobError,
    RayUnreachableError,
)
from rltrainer_operator.settings import Settings
from rltrainer_operator.sweep import is_sweep
from rltrainer_operator.validation import InvalidSpec, validate_experiment

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime.datetime]
ProgressReader = Callable[[ExperimentSpec, str, str], "dict[str, Any] | None"]
#: ``(address, token=...) -> client`` (``RayJobClient``).
JobClientFactory = Callable[..., RayJobClient]
#: ``(namespace, name) -> the RayCluster as the operator's watch last saw it, or None``.
ClusterCache = Callable[[str, str], "dict[str, Any] | None"]
#: Ready's reasons while the API server refuses the operator's calls.
REFUSAL_REASONS = frozenset({Refused.reason, PermissionDenied.reason, CredentialsRefused.reason})
#: Failures that a new spec generation retries (the spec may have been fixed).
RETRIED_ON_SPEC_CHANGE = frozenset({"InvalidSpec", "RayTokenKeyMissing"})
#: Why an experiment with rayAuth.mode token cannot run on an operator without a key.
TOKEN_KEY_MISSING = (
    "spec.rayAuth.mode is token, but the operator has no RLTRAINER_OPERATOR_RAY_TOKEN_KEY to "
    "derive the cluster's Ray token from (the Helm chart sets it: rayToken.create, or "
    "rayToken.existingSecret); give the operator the key and then edit the spec or recreate "
    "the experiment, or set spec.rayAuth.mode: disabled"
)


@dataclasses.dataclass
class Event:
    """A Kubernetes Event to record on the experiment."""

    type: str  # Normal | Warning
    reason: str
    message: str


@dataclasses.dataclass
class Outcome:
    """What one reconcile decided: the status to write (None: unchanged) and events to record."""

    status: dict[str, Any] | None
    events: list[Event]
    deleted: bool = False  # the experiment itself was deleted (ttlSecondsAfterFinished)
    refused: Refused | None = None  # the API server refused a call: try again later


def rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def cluster_condition(raycluster: dict[str, Any], kind: str) -> bool:
    """Whether the RayCluster's ``kind`` condition (HeadPodReady, RayClusterProvisioned) is True."""
    for condition in (raycluster.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition.get("status") == "True"
    return False


def cluster_ready(raycluster: dict[str, Any]) -> bool:
    """Ready for a job: provisioned and the head is up (from conditions, not the deprecated state)."""
    return cluster_condition(raycluster, "HeadPodReady") and cluster_condition(
        raycluster, "RayClusterProvisioned"
    )


class Reconciler:
    """Drives one experiment per call; holds only clients and settings (no per-experiment state)."""

    def __init__(
        self,
        kube: Kube,
        settings: Settings,
        read_progress: ProgressReader,
        job_client: JobClientFactory = RayJobClient,
        clock: Clock = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.read_progress = read_progress
        self.job_client = job_client
        self.clock = clock

    # --- entry points ------------------------------------------------------------------------
    def reconcile(
        self,
        body: dict[str, Any],
        clusters: ClusterCache | None = None,
        pods_due: Callable[[], bool] | None = None,
    ) -> Outcome:
        """One step for the experiment ``body``. ``clusters``: the RayClusters as the operator's
        watch keeps them, read instead of the API where a copy may be a little old (``_Step._cluster``).
        ``pods_due``: asked before a provisioning cluster's Pods are read for problems to report
        (the handler's cadence; None: at every step)."""
        step = _Step(self, body, clusters, pods_due)
        try:
            step.permitted()
            step.run()
        except Refused as err:
            # An RBAC rule missing, or the credentials refused: what this step changed is
            # dropped (the next try does it again) and the status says what was refused.
            step = _Step(self, body, clusters, pods_due)
            step.refused(err)
        if not step.meta.get("deletionTimestamp"):
            # Every generation is observed, even one that changes nothing now (a config edit
            # applies at the next restart): GitOps tools wait for observedGeneration.
            step.status.observedGeneration = step.generation
        return step.outcome()

    def finalize(self, body: dict[str, Any]) -> None:
        """The experiment is being deleted: stop its job and delete its cluster (checkpoints stay)."""
        meta = body["metadata"]
        status = body.get("status") or {}
        cluster_name = status.get("rayClusterName") or raycluster_name(meta["name"])
        self.stop(meta["namespace"], cluster_name, status.get("jobId"), delete=True)

    # --- helpers shared by the steps ---------------------------------------------------------
    def dashboard_url(self, raycluster: dict[str, Any]) -> str:
        """The job API address: KubeRay's head service (status.head) and dashboard endpoint."""
        status = raycluster.get("status") or {}
        head = status.get("head") or {}
        port = (status.get("endpoints") or {}).get("dashboard") or self.settings.dashboard_port
        host = head.get("serviceIP") or head.get("podIP")
        if not host:
            service = head.get("serviceName") or f"{raycluster['metadata']['name']}-head-svc"
            host = f"{service}.{raycluster['metadata']['namespace']}.svc.{self.settings.cluster_domain}"
        return f"http://{host}:{port}"

    def stop(self, namespace: str, cluster_name: str, submission_id: str | None, delete: bool) -> None:
        """Stop the job on the cluster (when it is up), then delete the cluster if ``delete``."""
        cluster = self.kube.get_raycluster(namespace, cluster_name)
        if cluster is None:
            return
        self.stop_job(cluster, submission_id)
        if delete:
            self.kube.delete_raycluster(namespace, cluster_name)

    def job_api(self, raycluster: dict[str, Any]) -> RayJobClient:
        """The cluster's job API client, with the cluster's token when it wants one."""
        return self.job_client(self.dashboard_url(raycluster), token=self.cluster_token(raycluster))

    def cluster_token(self, raycluster: dict[str, Any]) -> str | None:
        """The Ray token of a cluster created with ``authOptions.mode: token`` (the mode it was
        created with, whatever the spec says now): derived from its owning experiment's uid."""
        auth = (raycluster.get("spec") or {}).get("authOptions") or {}
        owners = raycluster["metadata"].get("ownerReferences") or []
        uid = next((ref.get("uid") for ref in owners if ref.get("kind") == KIND), None)
        if auth.get("mode") != "token" or not uid or not self.settings.ray_token_key:
            return None
        return ray_token(self.settings.ray_token_key, uid)

    def stop_job(self, raycluster: dict[str, Any], submission_id: str | None) -> None:
        """Ask the cluster's job API to stop the job (best effort: a dead head has no job to stop)."""
        if not submission_id or not cluster_ready(raycluster):
            return
        try:
            self.job_api(raycluster).stop(submission_id)
        except (RayUnreachableError, RayJobError) as err:
            logger.info("could not stop job %s: %s", submission_id, err)


class _Step:
    """One reconcile of one experiment: reads once, decides, records the transition."""

    def __init__(
        self,
        reconciler: Reconciler,
        body: dict[str, Any],
        clusters: ClusterCache | None = None,
        pods_due: Callable[[], bool] | None = None,
    ) -> None:
        self.r = reconciler
        self.body = body
        self.clusters = clusters
        self.pods_due = pods_due
        self.meta = body["metadata"]
        self.namespace, self.name = self.meta["namespace"], self.meta["name"]
        self.generation = self.meta.get("generation")
        self.now = reconciler.clock()
        raw_status = body.get("status") or {}
        self.old_status = raw_status
        try:
            self.status = ExperimentStatus.model_validate(
                {k: v for k, v in raw_status.items() if k in ExperimentStatus.model_fields}
            )
        except ValueError:  # an unreadable status (edited by hand): start from what we can trust
            self.status = ExperimentStatus()
        self.events: list[Event] = []
        self.deleted = False
        self.spec: ExperimentSpec | None = None
        self.refusal: Refused | None = None
        self._preempted: dict[str, Any] | None = None  # progress.json's preemption record, once read

    # --- bookkeeping -----------------------------------------------------------------------
    def outcome(self) -> Outcome:
        new = self.status.model_dump(mode="json")
        old = {k: self.old_status.get(k) for k in new}
        changed = json.dumps(new, sort_keys=True) != json.dumps(old, sort_keys=True)
        return Outcome(new if changed else None, self.events, self.deleted, self.refusal)

    def transition(self, phase: Phase, reason: str, message: str, warning: bool = False) -> None:
        """Enter ``phase``: conditions, message and an event, all saying why."""
        self.status.phase = phase
        self.status.message = message
        self.status.observedGeneration = self.generation
        self._set_conditions(phase, reason, message)
        self.events.append(Event("Warning" if warning else "Normal", reason, message))
        logger.info("%s/%s: %s (%s): %s", self.namespace, self.name, phase.value, reason, message)

    def _set_conditions(self, phase: Phase, reason: str, message: str) -> None:
        # Provisioned is Unknown while a cluster is being provisioned: its lastTransitionTime
        # then says since when, which the provisioning timeout is measured from.
        provisioned = self._condition_true("Provisioned")
        wanted = {
            "Ready": phase == Phase.RUNNING,
            "Provisioned": (
                None
                if phase == Phase.PROVISIONING
                else provisioned
                if phase == Phase.RESTARTING
                else phase == Phase.RUNNING
            ),
            "Running": phase == Phase.RUNNING,
            "Succeeded": phase == Phase.SUCCEEDED,
            "Failed": phase == Phase.FAILED,
            "Suspended": phase == Phase.SUSPENDED,
            "Restarting": phase == Phase.RESTARTING,
            "Queued": phase == Phase.QUEUED,
        }
        by_type = {c.type: c for c in self.status.conditions}
        conditions = []
        for kind in CONDITION_TYPES:
            status = "Unknown" if wanted[kind] is None else "True" if wanted[kind] else "False"
            old = by_type.get(kind)
            changed = old is None or old.status != status
            conditions.append(
                {
                    "type": kind,
                    "status": status,
                    "reason": reason if (changed or wanted[kind] is not False) else old.reason,
                    "message": message if (changed or wanted[kind] is not False) else old.message,
                    "lastTransitionTime": rfc3339(self.now) if changed else old.lastTransitionTime,
                    "observedGeneration": self.generation,
                }
            )
        self.status = self.status.model_copy(
            update={"conditions": ExperimentStatus.model_validate({"conditions": conditions}).conditions}
        )

    # --- refusals (403: an RBAC rule missing; 401: credentials refused) -----------------------
    def refused(self, err: Refused) -> None:
        """Ready is False with the refusal's reason and message (whose call, what, what to do),
        said once by a Warning event; the phase stays: nothing is known to have changed."""
        message = str(err)
        ready = self._condition("Ready")
        if ready is None or (ready.reason, ready.message) != (err.reason, message):
            self.events.append(Event("Warning", err.reason, message))
        self._set_ready(False, err.reason, message)
        self.status.message = message
        self.refusal = err

    def permitted(self) -> None:
        """After a refusal, Ready and the message are the phase's again (this reconcile's own
        refusal, if any, says otherwise)."""
        ready = self._condition("Ready")
        if ready is None or ready.reason not in REFUSAL_REASONS:
            return
        kind = "Provisioned" if self.status.phase == Phase.PROVISIONING else self.status.phase.value
        phase = self._condition(kind)
        if phase is None:  # Pending: no transition yet, so no conditions before the refusal
            self.status.conditions = [c for c in self.status.conditions if c.type != "Ready"]
            self.status.message = None
        else:
            self._set_ready(self.status.phase == Phase.RUNNING, phase.reason, phase.message)
            self.status.message = phase.message
        again = "the API server accepts the operator's requests again"
        self.events.append(Event("Normal", "Permitted", again))
        logger.info("%s/%s: %s", self.namespace, self.name, again)

    def _set_ready(self, ready: bool, reason: str, message: str) -> None:
        status = "True" if ready else "False"
        old = self._condition("Ready")
        since = rfc3339(self.now) if old is None or old.status != status else old.lastTransitionTime
        condition = Condition(
            type="Ready",
            status=status,
            reason=reason,
            message=message,
            lastTransitionTime=since,
            observedGeneration=self.generation,
        )
        others = [c for c in self.status.conditions if c.type != "Ready"]
        self.status.conditions = [condition, *others]  # Ready first, as CONDITION_TYPES orders them

    def _condition(self, kind: str) -> Condition | None:
        return next((c for c in self.status.conditions if c.type == kind), None)

    def _cluster_name(self) -> str:
        return self.status.rayClusterName or raycluster_name(self.name)

    def _cluster(self, name: str, trusted: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        """The RayCluster ``name``: the watch's copy when ``trusted`` accepts it (a live cluster
        in the state this step goes on with), else read from the API. A step never acts on the
        watch's word alone that a cluster is gone, going or failing: a copy that says so may be
        a moment older than the cluster (the event that changes it on its way), so it is read
        again before anything is deleted or restarted. With 1,000 experiments this is what
        keeps a tick from costing a GET each (docs/benchmarks.md#scale)."""
        cached = self.clusters(self.namespace, name) if self.clusters is not None else None
        if cached is not None and not cached["metadata"].get("deletionTimestamp") and trusted(cached):
            return cached
        return self.r.kube.get_raycluster(self.namespace, name)

    def _condition_true(self, kind: str) -> bool:
        return any(c.type == kind and c.status == "True" for c in self.status.conditions)

    def _condition_since(self, kind: str) -> datetime.datetime | None:
        for c in self.status.conditions:
            if c.type == kind:
                return parse_time(c.lastTransitionTime)
        return None

    # --- the state machine -------------------------------------------------------------------
    def run(self) -> None:
        if self.meta.get("deletionTimestamp"):
            return  # the finalizer handles it
        phase = self.status.phase
        if phase == Phase.FAILED and not self._fixable_failure_was_changed():
            return self._finished()
        if phase == Phase.SUCCEEDED:
            return self._finished()
        try:
            self.spec = validate_experiment(self.body).spec
        except InvalidSpec as err:
            return self._fail("InvalidSpec", str(err))
        if self.spec.suspend:
            return self._suspend()
        if self.spec.rayAuth.mode == "token" and not self.r.settings.ray_token_key:
            return self._fail("RayTokenKeyMissing", TOKEN_KEY_MISSING)
        if phase == Phase.SUSPENDED or (phase == Phase.FAILED):
            # Resumed (suspend: false) or fixed after InvalidSpec: start over, from the newest checkpoint.
            self.status.startTime = None
            return self._start("Resumed" if phase == Phase.SUSPENDED else "SpecFixed")
        if self._deadline_exceeded():
            return self._fail("DeadlineExceeded", self._deadline_message(), cleanup=True)
        handler = {
            Phase.PENDING: self._start,
            Phase.QUEUED: self._start,
            Phase.PROVISIONING: self._provisioning,
            Phase.RUNNING: self._running,
            Phase.RESTARTING: self._restarting,
        }[phase]
        handler()

    def _fixable_failure_was_changed(self) -> bool:
        """Failed for an invalid spec (or a missing token key), and the spec changed since (it
        may be fixed now)."""
        return any(
            c.type == "Failed"
            and c.reason in RETRIED_ON_SPEC_CHANGE
            and c.observedGeneration != self.generation
            for c in self.status.conditions
        )

    # Pending / Queued -> Provisioning
    def _start(self, reason: str = "Provisioning") -> None:
        cluster = self._ensure_cluster()
        if cluster is not None and queueing.held(cluster):
            return self._queued(cluster)
        if self.status.startTime is None:
            self.status.startTime = rfc3339(self.now)
        if cluster is not None and cluster_ready(cluster):
            return self._submit(cluster)
        if self.status.phase == Phase.QUEUED:
            reason = "Admitted"
            message = f"admitted by Kueue: starting RayCluster {self.status.rayClusterName}"
        else:
            message = f"creating RayCluster {self.status.rayClusterName}"
        self.transition(Phase.PROVISIONING, reason, message)

    def _queued(self, cluster: dict[str, Any]) -> None:
        """Kueue holds the cluster: say why (its Workload's conditions), once per new reason.
        The deadline starts again at admission (``startTime`` is cleared)."""
        queue = (cluster["metadata"].get("labels") or {}).get(queueing.QUEUE_NAME_LABEL, "")
        workload = self.r.kube.cluster_workload(self.namespace, cluster["metadata"].get("uid", ""))
        state = queueing.queue_state(workload, queue)
        self.status.startTime = None
        self.status.nextAttemptTime = None
        if self.status.phase != Phase.QUEUED or self.status.message != state.message:
            self.transition(Phase.QUEUED, state.reason, state.message, warning=state.warning)

    def _ensure_cluster(self) -> dict[str, Any] | None:
        """The experiment's RayCluster, created when absent; None while an old one is still going away."""
        name = raycluster_name(self.name)
        self.status.rayClusterName = name
        cluster = self._cluster(name, trusted=lambda _cluster: True)
        if cluster is not None and (cluster["metadata"].get("deletionTimestamp") or not self._owns(cluster)):
            return None  # going away, or a deleted namesake's cluster the GC has yet to remove
        if cluster is None:
            if self.spec.rayAuth.mode == "token":  # the Secret first: the pods read it at start
                token = ray_token(self.r.settings.ray_token_key, self.meta["uid"])
                self.r.kube.create_secret(build_token_secret(self.body, name, token))
            cluster = self.r.kube.create_raycluster(build_raycluster(self.body, self.spec, self.r.settings))
            if self.spec.preemption.podDisruptionBudget:
                self.r.kube.create_disruption_budget(build_disruption_budget(self.body, name))
        return cluster

    def _owns(self, cluster: dict[str, Any]) -> bool:
        owners = cluster["metadata"].get("ownerReferences") or []
        return any(ref.get("uid") == self.meta["uid"] for ref in owners)

    # Provisioning -> Running (or Restarting when it takes too long)
    def _provisioning(self) -> None:
        cluster = self._ensure_cluster()
        if cluster is not None and queueing.held(cluster):
            return self._queued(cluster)
        if cluster is not None and cluster_ready(cluster):
            return self._submit(cluster)
        # None: the old cluster still going, held up only by Pods on a node that does not answer.
        if self.pods_due is None or self.pods_due():
            self._report_pod_problems(lost_nodes_only=cluster is None)
        since = self._condition_since("Provisioned") or self.now
        waited = (self.now - since).total_seconds()
        if waited > self.r.settings.provision_timeout_s:
            self._restart(
                "ProvisioningTimeout",
                f"RayCluster {self.status.rayClusterName} not ready after {waited:.0f}s",
                cluster_lost=True,
            )

    def _report_pod_problems(self, phase: Phase = Phase.PROVISIONING, lost_nodes_only: bool = False) -> None:
        """While the cluster is not ready, say why when its Pods show it (once per new reason);
        ``lost_nodes_only``: only Pods held by a node that does not answer (``NodeLost``)."""
        pods = self.r.kube.list_cluster_pods(self.namespace, self._cluster_name())
        problems = pod_problems(pods, now=self.now)
        if lost_nodes_only:
            problems = [problem for problem in problems if problem.reason == "NodeLost"]
        if problems and self.status.message != problems[0].message:
            self.transition(phase, problems[0].reason, problems[0].message, warning=True)

    def _ray_oom(self, cluster: dict[str, Any], job: JobInfo) -> Any:
        """Whether Ray killed a process for memory (its words are in the driver's output, of
        which the job's message keeps only the last lines): the pod where, as a problem."""
        if "out of memory" not in job.message.lower():
            return None
        try:
            logs = self.r.job_api(cluster).logs(job.submission_id)
        except (RayUnreachableError, RayJobError):
            logs = ""
        pods = self.r.kube.list_cluster_pods(self.namespace, self._cluster_name())
        return ray_oom_problem(f"{logs}\n{job.message}", pods)

    def _crash_looping(self) -> bool:
        """While the job runs, a Ray container that keeps dying (crash loop, killed for memory):
        said in the conditions at once; restarted ``crash_loop_restarts`` times, the experiment
        restarts (Failed past its backoff limit), as a driver would wait for that pod forever.
        True when it restarted."""
        pods = self.r.kube.list_cluster_pods(self.namespace, self._cluster_name())
        failing = [p for p in pod_problems(pods) if p.reason in ("CrashLoopBackOff", "OOMKilled")]
        if not failing:
            return False
        worst = max(failing, key=lambda problem: problem.restarts)
        if worst.restarts >= self.r.settings.crash_loop_restarts:
            message = f"{worst.message} (restarted {worst.restarts} times)"
            self._restart(worst.reason, message, cluster_lost=True)
            return True
        if self.status.message != worst.message:
            self.transition(Phase.RUNNING, worst.reason, worst.message, warning=True)
        return False

    def _submit(self, cluster: dict[str, Any]) -> None:
        """Start the next driver attempt on the (ready) ``cluster``."""
        # The newest checkpoint first: one written on a preemption's signal may be seconds old.
        self._update_progress()
        attempt = _attempt_of(self.status.jobId) + 1
        submission_id = job_id(self.namespace, self.name, self.meta["uid"], attempt)
        body = job_builder.submission(
            self.spec, self.namespace, self.name, self.r.settings, submission_id, self.status.lastCheckpoint
        )
        try:
            self.r.job_api(cluster).submit(body)
        except (RayUnreachableError, RayJobError) as err:
            logger.info("%s/%s: job API not answering yet: %s", self.namespace, self.name, err)
            # A rejected token does not go away by waiting: said once, as a warning (the
            # provisioning timeout then restarts the experiment, as for any unready cluster).
            rejected = isinstance(err, RayAuthError)
            if self.status.phase != Phase.PROVISIONING or (rejected and self.status.message != str(err)):
                reason = "RayTokenRejected" if rejected else "WaitingForJobAPI"
                self.transition(Phase.PROVISIONING, reason, str(err), warning=rejected)
            return
        self.status.jobId = submission_id
        resumed = f", resuming from {self.status.lastCheckpoint}" if self.status.lastCheckpoint else ""
        self.transition(Phase.RUNNING, "JobSubmitted", f"driver job {submission_id} submitted{resumed}")

    # Running -> Succeeded | Restarting
    def _running(self) -> None:
        cluster = self._cluster(self._cluster_name(), trusted=_healthy)
        if cluster is None or cluster["metadata"].get("deletionTimestamp"):
            return self._restart("ClusterLost", f"RayCluster {self.status.rayClusterName} is gone", True)
        if queueing.held(cluster):  # Kueue preempted it: its pods' hooks had the checkpoint written
            self._update_progress()
            self.status.disruptions += 1
            return self._queued(cluster)
        if not cluster_condition(cluster, "HeadPodReady"):
            if self._checkpointed_on_signal():
                return self._disrupted(f"the head of {self.status.rayClusterName} went", cluster_lost=True)
            return self._restart("ClusterLost", f"the head of {self.status.rayClusterName} is down", True)
        try:
            job = self.r.job_api(cluster).get(self.status.jobId or "")
        except (RayUnreachableError, RayJobError) as err:
            logger.info("%s/%s: job API: %s (will retry)", self.namespace, self.name, err)
            return
        self._update_progress()
        if job is None:
            return self._restart("JobLost", f"the cluster has no job {self.status.jobId}", True)
        if job.status == "SUCCEEDED":
            return self._succeed(cluster)
        if job.finished:
            if _job_last_line(job).startswith(PREEMPTED_LINE_PREFIX):
                head_going = any(_is_head(pod) for pod in self._terminating_pods())
                return self._disrupted(f"a pod of {self.status.rayClusterName} went", cluster_lost=head_going)
            oom = self._ray_oom(cluster, job)
            if oom is not None:
                return self._restart(oom.reason, f"{oom.message} ({_job_message(job)})", cluster_lost=False)
            return self._restart(_job_failure_reason(job), _job_message(job), cluster_lost=False)
        if _workers_short(cluster) and self._crash_looping():
            return
        self._rescale(cluster, job)

    def _rescale(self, cluster: dict[str, Any], job: JobInfo) -> None:
        """Live scaling: patch the rollout group, then restart the driver on the new shape.

        Not for a sweep: Tune restores its trials with the resources they started with, so a
        sweep keeps its cluster's shape until it is recreated (README, "Sweeps")."""
        if is_sweep(self.spec):
            return
        wanted = self.spec.rollouts.replicas
        current = worker_replicas(cluster).get(ROLLOUTS_GROUP)
        if current is None or current == wanted:
            return
        # The patch replaces the whole list of worker groups: from the whole cluster as it is now
        # (the watch's copy holds only what the steps read).
        fresh = self.r.kube.get_raycluster(self.namespace, self.status.rayClusterName)
        if fresh is None:
            return  # gone meanwhile: the next step sees it
        cluster = self.r.kube.patch_raycluster(
            self.namespace, self.status.rayClusterName, scale_patch(fresh, ROLLOUTS_GROUP, wanted)
        )
        # The running driver has a fixed number of env runners: continue from the newest
        # checkpoint with the new count (not a failure: restarts is not incremented).
        self.r.stop_job(cluster, job.submission_id)
        self.events.append(
            Event("Normal", "Rescaled", f"rollouts scaled from {current} to {wanted} replicas")
        )
        self._submit(cluster)

    def _succeed(self, cluster: dict[str, Any]) -> None:
        self.status.completionTime = rfc3339(self.now)
        if self.spec.shutdownAfterFinish:
            self.r.kube.delete_raycluster(self.namespace, cluster["metadata"]["name"])
        self.transition(Phase.SUCCEEDED, "JobSucceeded", f"training finished (job {self.status.jobId})")

    # disruptions: pods taken away after the driver's checkpoint on the signal
    def _checkpointed_on_signal(self) -> bool:
        """Whether the current driver wrote a checkpoint on a pod's preStop hook (its
        ``progress.json`` says so, with a request newer than the job's submission)."""
        self._update_progress()
        record = self._preempted
        submitted = self._condition_since("Running")
        requested = record.get("requested_at") if record else None
        return isinstance(requested, int | float) and (
            submitted is None or requested >= submitted.timestamp() - 1
        )

    def _terminating_pods(self) -> list[dict[str, Any]]:
        pods = self.r.kube.list_cluster_pods(self.namespace, self._cluster_name())
        return [pod for pod in pods if (pod.get("metadata") or {}).get("deletionTimestamp")]

    def _disrupted(self, what: str, cluster_lost: bool) -> None:
        """Resume at once from the checkpoint the driver wrote on the signal; not a failure
        (``restarts`` and the backoff are untouched). Progress has been read by the caller."""
        record = self._preempted or {}
        if cluster_lost:
            self.r.kube.delete_raycluster(self.namespace, self._cluster_name())
        self.status.disruptions += 1
        self.status.nextAttemptTime = rfc3339(self.now)
        written = record.get("seconds_to_checkpoint")
        timing = f" {written:.1f} s after the signal" if isinstance(written, int | float) else ""
        self.transition(
            Phase.RESTARTING,
            "Disrupted",
            f"{what}; the driver wrote checkpoint {self.status.lastCheckpoint}{timing}: resuming from it",
        )

    # failures
    def _restart(self, reason: str, message: str, cluster_lost: bool) -> None:
        limit = self.spec.faultTolerance.backoffLimit
        if self.status.restarts >= limit:
            return self._fail("BackoffLimitExceeded", f"{message}; restarted {limit} time(s) already", True)
        if cluster_lost:
            self.r.kube.delete_raycluster(self.namespace, self._cluster_name())
        else:
            self.r.stop(self.namespace, self._cluster_name(), self.status.jobId, delete=False)
        self.status.restarts += 1
        delay = min(
            self.r.settings.backoff_base_s * 2 ** (self.status.restarts - 1), self.r.settings.backoff_max_s
        )
        self.status.nextAttemptTime = rfc3339(self.now + datetime.timedelta(seconds=delay))
        self.transition(
            Phase.RESTARTING,
            reason,
            f"{message}; restart {self.status.restarts}/{limit} in {delay:.0f}s from the newest checkpoint",
            warning=True,
        )

    def _restarting(self) -> None:
        due = parse_time(self.status.nextAttemptTime)
        if due is not None and self.now < due:
            return
        self.status.nextAttemptTime = None  # _submit reads the newest checkpoint to resume from
        cluster = self._ensure_cluster()
        if cluster is not None and queueing.held(cluster):
            return self._queued(cluster)
        if cluster is not None and self._terminating_pods():
            # A disrupted pod still going: its replacement is what the next driver needs.
            return self._report_pod_problems(Phase.RESTARTING, lost_nodes_only=True)
        if cluster is not None and cluster_ready(cluster):
            return self._submit(cluster)
        self.transition(
            Phase.PROVISIONING, "Provisioning", f"recreating RayCluster {self.status.rayClusterName}"
        )

    def _fail(self, reason: str, message: str, cleanup: bool = False) -> None:
        if cleanup and self.spec is not None:
            delete = self.spec.shutdownAfterFinish
            self.r.stop(self.namespace, self._cluster_name(), self.status.jobId, delete=delete)
        self.status.completionTime = rfc3339(self.now)
        self.status.nextAttemptTime = None
        self.transition(Phase.FAILED, reason, message, warning=True)

    # suspend / deadline / ttl
    def _suspend(self) -> None:
        if self.status.phase == Phase.SUSPENDED:
            return
        self._update_progress()
        self.r.stop(self.namespace, self._cluster_name(), self.status.jobId, delete=True)
        self.status.nextAttemptTime = None
        self.transition(Phase.SUSPENDED, "Suspended", "suspended: job stopped and RayCluster deleted")

    def _deadline_exceeded(self) -> bool:
        deadline = self.spec.activeDeadlineSeconds
        start = parse_time(self.status.startTime)
        return deadline is not None and start is not None and (self.now - start).total_seconds() > deadline

    def _deadline_message(self) -> str:
        return f"ran longer than activeDeadlineSeconds={self.spec.activeDeadlineSeconds}"

    def _finished(self) -> None:
        """Succeeded/Failed: only the TTL is left to honour."""
        ttl = (self.body.get("spec") or {}).get("ttlSecondsAfterFinished")
        done = parse_time(self.status.completionTime)
        if ttl is not None and done is not None and (self.now - done).total_seconds() >= ttl:
            self.deleted = self.r.kube.delete_experiment(self.namespace, self.name)

    # progress
    def _update_progress(self) -> None:
        try:
            progress = self.r.read_progress(self.spec, self.namespace, self.name)
        except Exception as err:  # noqa: BLE001 - progress is best effort; training is unaffected
            logger.info("%s/%s: progress unreadable: %s", self.namespace, self.name, err)
            return
        if not progress:
            return
        self.status.iteration = progress.get("iteration", self.status.iteration)
        self.status.timesteps = progress.get("timesteps", self.status.timesteps)
        self.status.episodeReturnMean = progress.get("episode_return_mean", self.status.episodeReturnMean)
        self.status.lastCheckpoint = progress.get("last_checkpoint") or self.status.lastCheckpoint
        self._preempted = progress.get("preempted") if isinstance(progress.get("preempted"), dict) else None
        self._check_grace_period(progress)
        env_runner_restarts = progress.get("num_env_runner_restarts")
        self._count_restarts("envRunnerRestarts", "driverEnvRunnerRestarts", env_runner_restarts)
        self._count_restarts("learnerRestarts", "driverLearnerRestarts", progress.get("num_learner_restarts"))
        self.status.healthyEnvRunners = progress.get("num_healthy_env_runners")
        if progress.get("sweep") is True:
            self._mirror_sweep(progress)

    def _check_grace_period(self, progress: dict[str, Any]) -> None:
        """Warn once when the driver's measured iteration plus checkpoint (plus ``ray stop``'s
        reserve) does not fit in ``preemption.gracePeriodSeconds``: a preemption would then
        lose everything since the previous checkpoint."""
        iteration, checkpoint = progress.get("seconds_per_iteration"), progress.get("seconds_per_checkpoint")
        if not isinstance(iteration, int | float) or not isinstance(checkpoint, int | float):
            return
        needed = math.ceil(iteration + checkpoint + RAY_STOP_RESERVE_S)
        grace = self.spec.preemption.gracePeriodSeconds
        before = self.status.gracePeriodNeededSeconds
        self.status.gracePeriodNeededSeconds = needed
        if needed > grace and (before is None or before <= grace):
            self.events.append(
                Event(
                    "Warning",
                    "GracePeriodTooShort",
                    f"preemption.gracePeriodSeconds is {grace}, but one iteration ({iteration:.1f} s) "
                    f"and one checkpoint ({checkpoint:.1f} s) take about {needed} s with Ray's stop: "
                    f"a preemption now loses the work since the last periodic checkpoint; raise "
                    f"gracePeriodSeconds to at least {needed}",
                )
            )

    def _mirror_sweep(self, progress: dict[str, Any]) -> None:
        """A sweep's ``progress.json`` (``rltrainer.tune.sweep.SweepProgress``): trials by state,
        the best trial, its metric and checkpoint. A best trial is kept until the driver names
        one again (a resumed driver has seen no result yet)."""
        states = progress.get("trials") if isinstance(progress.get("trials"), dict) else {}
        counts = {name: int(states.get(state) or 0) for state, name in _TRIAL_STATES.items()}
        self.status.trials = TrialCounts(**counts)
        best = progress.get("best_trial")
        if best:
            same = best == self.status.bestTrial
            metric = progress.get("best_metric")
            self.status.bestTrial = str(best)
            self.status.bestMetric = float(metric) if isinstance(metric, int | float) else None
            kept = self.status.bestCheckpoint if same else None
            self.status.bestCheckpoint = progress.get("best_checkpoint") or kept

    def _count_restarts(self, total_field: str, driver_field: str, driver_count: int | None) -> None:
        """Add the driver's new restarts to the experiment's total (``status.<total_field>``;
        the driver's own count as last read in ``status.<driver_field>``).

        Each driver attempt counts from 0, and ``progress.json`` keeps the previous driver's
        numbers until the new one writes: so, like a Prometheus counter, the total grows by
        the increase since the last read, and a count below the last one is a new driver's
        (a reset), all of it new. A status from before this field counted the current driver.
        """
        if driver_count is None:
            return
        total = getattr(self.status, total_field) or 0
        last = getattr(self.status, driver_field)
        if last is None:
            last = total
        increase = driver_count - last if driver_count >= last else driver_count
        setattr(self.status, total_field, total + increase)
        setattr(self.status, driver_field, driver_count)


#: Ray Tune's trial states -> the status's ``trials`` fields.
_TRIAL_STATES = {
    "PENDING": "pending",
    "RUNNING": "running",
    "PAUSED": "paused",
    "TERMINATED": "terminated",
    "ERROR": "errored",
}


def _attempt_of(submission_id: str | None) -> int:
    """The attempt number at the end of a job id (0 when there is none)."""
    if not submission_id:
        return 0
    tail = submission_id.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _job_failure_reason(job: JobInfo) -> str:
    """``StorageUnusable`` when the driver could not use the experiment's S3 folder (the bucket
    missing, credentials refused, no write permission: its last line names the bucket and the
    S3 call), else ``JobFailed``."""
    last = job.message.strip().splitlines()[-1] if job.message.strip() else ""
    return "StorageUnusable" if "storage_path 's3://" in last and STORAGE_UNUSABLE in last else "JobFailed"


def _healthy(raycluster: dict[str, Any]) -> bool:
    """Up and not held by Kueue: what a running experiment's step goes on with."""
    return cluster_condition(raycluster, "HeadPodReady") and not queueing.held(raycluster)


def _workers_short(raycluster: dict[str, Any]) -> bool:
    """Whether KubeRay counts fewer ready workers than the cluster wants: one restarting, crash
    looping or pending, which only its Pods tell apart (KubeRay counts them from the Pods' Ready
    condition and reconciles the cluster on every change of its Pods, so a worker's crash shows
    here). True when there are no counts (a status KubeRay has not written yet); KubeRay leaves
    out a count of 0."""
    status = raycluster.get("status") or {}
    desired = status.get("desiredWorkerReplicas")
    return desired is None or (status.get("readyWorkerReplicas") or 0) < desired


def _is_head(pod: dict[str, Any]) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get("ray.io/node-type") == "head"


def _job_last_line(job: JobInfo) -> str:
    return job.message.strip().splitlines()[-1] if job.message.strip() else ""


def _job_message(job: JobInfo) -> str:
    message = job.message.strip().splitlines()[-1] if job.message.strip() else ""
    return f"driver job {job.submission_id} {job.status.lower()}" + (f": {message[:300]}" if message else "")
