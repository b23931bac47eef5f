"""The ``RLExperiment`` resource as pydantic models: the one source of truth for its schema.

``crd.py`` turns these models into the CustomResourceDefinition in ``crds/`` (and the chart's
``crds/``); the operator parses every body it handles with the same models, so what the API
server admits and what the operator accepts cannot drift apart. Field names are the
resource's camelCase names (KubeRay's and Kubeflow's where they exist).

What a schema cannot check (the algorithm's own config keys, which config keys the spec owns)
is checked by ``validation.py`` with rltrainer's config validation.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from rltrainer.algorithms.registry import ALGORITHMS
from rltrainer.tune.sweep_settings import SCHEDULERS

GROUP = "rltrainer.io"
VERSION = "v1alpha1"
KIND = "RLExperiment"
PLURAL = "rlexperiments"
SINGULAR = "rlexperiment"
SHORT_NAMES = ["rlx"]

#: Ray version of the trainer image this release is tested with (rltrainer pins ray 2.60).
DEFAULT_RAY_VERSION = "2.60.0"

#: A Kubernetes resource quantity (``"2Gi"``, ``"500m"``, ``"4"``).
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$"
#: ``s3://bucket`` or ``s3://bucket/prefix`` with a DNS-compatible bucket name.
S3_URI_PATTERN = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?$"
#: A label value / DNS-1123 subdomain-ish name (Secret names).
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
#: An http(s) URL (S3-compatible endpoints).
URL_PATTERN = r"^https?://[^\s]+$"
#: An S3 region name (``us-east-1``).
REGION_PATTERN = r"^[a-z0-9-]+$"
#: A Ray release (``2.60.0``).
RAY_VERSION_PATTERN = r"^[0-9]+\.[0-9]+\.[0-9]+$"


def _quantity_as_str(value: Any) -> Any:
    """YAML reads ``cpu: 2`` as an int: accept it, as Kubernetes' int-or-string quantities do."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


#: Read as ``str``; the CRD declares it int-or-string (``crd.py`` turns the marker into ``anyOf``).
#: The pattern only binds strings on the API server: ``minimum`` rejects a negative integer there.
Quantity = Annotated[
    str,
    Field(
        pattern=QUANTITY_PATTERN,
        max_length=32,
        json_schema_extra={"x-kubernetes-int-or-string": True, "minimum": 0},
    ),
    BeforeValidator(_quantity_as_str),  # after Field: pydantic keeps the pattern in the JSON schema
]


def _cel(rule: str, message: str, field: str | None = None) -> dict[str, Any]:
    """One ``x-kubernetes-validations`` entry (a CEL rule the API server enforces).

    ``field`` (``.gpusPerLearner``) is the ``fieldPath`` the API server names in its error.
    The server also checks every rule against the schema's defaults (``learners: {}``), where
    nested defaults are not yet filled in: rules must test optional keys with ``has()``.
    """
    entry = {"rule": rule, "message": message}
    if field is not None:
        entry["fieldPath"] = field
    return entry


def _immutable(field: str) -> dict[str, Any]:
    return {"x-kubernetes-validations": [_cel("self == oldSelf", f"{field} is immutable")]}


class _Model(BaseModel):
    """Strict about unknown fields: a typo in a manifest is an error, not a silent default."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, populate_by_name=True)


# Rules that both the API server (as CEL) and the operator (as pydantic validators) enforce.
EMPTY_KEY_NEEDS_EXISTS = "a toleration with an empty key needs operator Exists"
EXISTS_TAKES_NO_VALUE = "a toleration with operator Exists takes no value"
GPUS_NEED_LEARNERS = (
    "gpusPerLearner needs replicas >= 1: with 0 learners the learner runs on the head, which has no GPU"
)
STOP_KEYS_NON_EMPTY = "stop keys must be non-empty result names"


class Toleration(_Model):
    """A Kubernetes pod toleration (core/v1 Toleration)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "(has(self.key) && size(self.key) > 0)"
                    " || (has(self.operator) && self.operator == 'Exists')",
                    EMPTY_KEY_NEEDS_EXISTS,
                    field=".key",
                ),
                _cel(
                    "!has(self.operator) || self.operator != 'Exists'"
                    " || !has(self.value) || size(self.value) == 0",
                    EXISTS_TAKES_NO_VALUE,
                    field=".value",
                ),
            ]
        }
    )

    key: str | None = Field(default=None, max_length=316)
    """The taint key; empty with operator Exists matches every taint."""
    operator: Literal["Exists", "Equal"] = "Equal"
    """Exists matches any value; Equal matches ``value``."""
    value: str | None = Field(default=None, max_length=63)
    """The taint value to match (Equal only)."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """The taint effect to match; empty matches all effects."""
    tolerationSeconds: int | None = Field(default=None, ge=0)
    """How long a NoExecute taint is tolerated before eviction."""

    @model_validator(mode="after")
    def _key_and_value(self) -> Toleration:
        if not self.key and self.operator != "Exists":
            raise ValueError(EMPTY_KEY_NEEDS_EXISTS)
        if self.operator == "Exists" and self.value:
            raise ValueError(EXISTS_TAKES_NO_VALUE)
        return self


class SecretRef(_Model):
    """A Secret in the experiment's namespace holding S3 credentials (never read by the operator)."""

    name: str = Field(pattern=NAME_PATTERN, min_length=1, max_length=253)
    """The Secret's name."""
    accessKeyIdKey: str = Field(default="AWS_ACCESS_KEY_ID", min_length=1)
    """The key holding the access key id."""
    secretAccessKeyKey: str = Field(default="AWS_SECRET_ACCESS_KEY", min_length=1)
    """The key holding the secret access key."""


class Storage(_Model):
    """How the training pods reach S3. Without ``credentialsSecretRef`` the pods' service
    account identity is used (IRSA-style workload identity)."""

    endpointURL: str | None = Field(default=None, pattern=URL_PATTERN)
    """An S3-compatible endpoint (MinIO, Ceph); empty for AWS S3."""
    region: str | None = Field(default=None, pattern=REGION_PATTERN, max_length=32)
    """The bucket's region."""
    credentialsSecretRef: SecretRef | None = None
    """Credentials from a Secret, passed to the pods as environment variables."""
    serviceAccountName: str | None = Field(default=None, pattern=NAME_PATTERN, max_length=253)
    """The service account the Ray pods run as (carries the workload identity)."""


class Checkpoint(_Model):
    """Where and how often training checkpoints."""

    uri: str = Field(pattern=S3_URI_PATTERN, max_length=1024)
    """``s3://bucket/prefix``: checkpoints go under ``<uri>/<namespace>/<name>/``."""
    frequency: int = Field(default=1, ge=0)
    """Checkpoint every N training iterations (0: only at the end)."""
    numToKeep: int | None = Field(default=None, ge=1)
    """Keep the newest N checkpoints (all when empty)."""
    atEnd: bool = True
    """Also checkpoint when training stops."""


class Learners(_Model):
    """The learner worker group: one Ray worker pod per learner."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.gpusPerLearner) || self.gpusPerLearner == 0"
                    " || !has(self.replicas) || self.replicas > 0",
                    GPUS_NEED_LEARNERS,
                    field=".gpusPerLearner",
                )
            ]
        }
    )

    replicas: int = Field(default=1, ge=0, le=64)
    """Number of learners (0: the learner runs inside the driver on the head)."""
    gpusPerLearner: int = Field(default=0, ge=0, le=8)
    """GPUs each learner pod requests (0: CPU learners)."""
    cpusPerLearner: float = Field(default=1, gt=0, le=256)
    """CPUs each learner pod requests and its learner reserves; a fraction (``0.5``) gives the pod
    a CPU request in millicores (``500m``) and Ray the whole count above it (as KubeRay does)."""
    memory: Quantity = "4Gi"
    """Memory each learner pod requests and is limited to."""
    nodeSelector: dict[str, str] = Field(default_factory=dict)
    """Node labels the learner pods must match."""
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    """Taints the learner pods tolerate (e.g. ``nvidia.com/gpu``)."""

    @model_validator(mode="after")
    def _gpus_need_learners(self) -> Learners:
        if self.gpusPerLearner > 0 and self.replicas == 0:
            raise ValueError(GPUS_NEED_LEARNERS)
        return self


class Rollouts(_Model):
    """The rollout worker group: one Ray worker pod per env runner."""

    replicas: int = Field(default=2, ge=0, le=1024)
    """Number of env runners (0: sampling runs inside the driver); can change while running."""
    cpusPerRunner: float = Field(default=1, gt=0, le=256)
    """CPUs each rollout pod requests and its env runner reserves; a fraction (``0.5``) gives the
    pod a CPU request in millicores (``500m``) and Ray the whole count above it (as KubeRay does)."""
    envsPerRunner: int = Field(default=1, ge=1, le=4096)
    """Vectorized sub-environments per env runner."""
    memory: Quantity = "2Gi"
    """Memory each rollout pod requests and is limited to."""
    nodeSelector: dict[str, str] = Field(default_factory=dict)
    """Node labels the rollout pods must match."""
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    """Taints the rollout pods tolerate."""


class Head(_Model):
    """The Ray head pod: runs the training driver (and the learner when learners.replicas is 0)."""

    cpu: Quantity = "2"
    """CPUs the head pod requests."""
    memory: Quantity = "4Gi"
    """Memory the head pod requests and is limited to."""
    nodeSelector: dict[str, str] = Field(default_factory=dict)
    """Node labels the head pod must match."""
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    """Taints the head pod tolerates."""


class FaultTolerance(_Model):
    """What the operator and the driver do when something fails."""

    backoffLimit: int = Field(default=3, ge=0, le=100)
    """Restarts of the whole experiment (failed job, lost cluster) before it is Failed."""
    restartFailedEnvRunners: bool = True
    """Recreate a crashed env runner instead of failing the iteration."""
    maxEnvRunnerRestarts: int = Field(default=1000, ge=0)
    """Env runner restarts allowed per run before the job fails."""
    envRunnerRestartDelaySeconds: int = Field(default=60, ge=0)
    """Seconds between a crashed env runner and its replacement (training goes on meanwhile;
    rltrainer's and RLlib's ``delay_between_env_runner_restarts_s``)."""
    restartFailedLearners: bool = True
    """Replace the learners when one dies (its pod lost, its process killed): the driver waits for
    the bundle to be placed again and retries the update, instead of failing the job."""
    maxLearnerRestarts: int = Field(default=1000, ge=0)
    """Learner-group restarts allowed per run before the job fails."""
    learnerRestartTimeoutSeconds: int = Field(default=600, ge=1, le=86400)
    """How long the driver waits for replaced learners to come up (a new pod for a lost one)."""


class Preemption(_Model):
    """What happens when the experiment's Ray pods are about to go: Kueue preempts its workload, a
    node is drained, a spot node is terminated, a pod is deleted. Each Ray pod's ``preStop`` hook
    asks the driver for a checkpoint and waits for it; the driver finishes the iteration in flight,
    writes the checkpoint to S3 (atomically, as every checkpoint) and only then lets Ray stop. The
    experiment resumes from it (status.disruptions counts these; restarts does not)."""

    gracePeriodSeconds: int = Field(default=60, ge=10, le=3600)
    """The Ray pods' terminationGracePeriodSeconds: the time from the signal to the pods' end. It
    must hold one iteration plus one checkpoint, else the checkpoint is not written (never half
    of one) and the experiment resumes from its previous one: the operator warns
    (GracePeriodTooShort) when the driver's measured times do not fit. Below 10 s not even Ray's
    own stop fits."""
    podDisruptionBudget: bool = False
    """Create a PodDisruptionBudget (maxUnavailable 0) over the experiment's Ray pods: evictions
    (``kubectl drain``, the cluster autoscaler) are refused while it runs, so a drain waits for the
    experiment to finish; Kueue's preemption and a spot node's end are not evictions and are
    not held back."""


class RayAuth(_Model):
    """How the operator and the Ray pods authenticate to the cluster's Ray APIs."""

    mode: Literal["token", "disabled"] = "token"
    """token: Ray's token authentication (Ray 2.52 or newer, KubeRay ``authOptions``): every
    request to the dashboard and job API needs the cluster's token, which the operator keeps
    in a Secret ``<cluster>-ray-token`` owned by the experiment; disabled: for older images."""


class Sweep(_Model):
    """How a sweep runs (Ray Tune, as ``rltrainer train`` runs it): the trials come from the search
    spaces in ``config`` (``lr: {grid_search: [0.001, 0.0001]}``) times ``numSamples``; the whole
    sweep is one Ray job, and a restart continues it (Tune's experiment restore from S3)."""

    numSamples: int = Field(default=1, ge=1, le=10000)
    """Samples of the search space (each grid combination runs this many times)."""
    maxConcurrentTrials: int | None = Field(default=None, ge=1, le=1024)
    """Trials running at once; the Ray cluster is sized for this many (all trials when empty)."""
    scheduler: str = Field(default="fifo", json_schema_extra={"enum": list(SCHEDULERS)})
    """fifo runs every trial to its stop criteria; asha stops bad trials early; pbt copies good ones."""
    schedulerConfig: dict[str, Any] = Field(default_factory=dict)
    """The scheduler's settings (asha: max_t, grace_period, reduction_factor; pbt:
    hyperparam_mutations, perturbation_interval, quantile_fraction, resample_probability, synch)."""
    metric: str = Field(default="episode_return_mean", min_length=1, max_length=253)
    """The result key the scheduler and the best trial go by."""
    mode: Literal["max", "min"] = "max"
    """Whether ``metric`` is maximized or minimized."""

    @field_validator("scheduler")
    @classmethod
    def _known_scheduler(cls, scheduler: str) -> str:
        if scheduler not in SCHEDULERS:
            raise ValueError(f"unknown scheduler {scheduler!r}; allowed: {', '.join(SCHEDULERS)}")
        return scheduler


class ExperimentSpec(_Model):
    """What to train, on which cluster shape, with what durability."""

    algorithm: str = Field(
        max_length=64,
        json_schema_extra={"enum": sorted(ALGORITHMS), **_immutable("algorithm")},
    )
    """The rltrainer algorithm (as ``rltrainer train --algo`` spells it)."""
    env: str = Field(min_length=1, max_length=253, json_schema_extra=_immutable("env"))
    """A gymnasium id (``CartPole-v1``) or ``package.module:Class`` present in the image."""
    envConfig: dict[str, Any] = Field(default_factory=dict)
    """Passed to the env creator as its EnvContext."""
    config: dict[str, Any] = Field(default_factory=dict)
    """The algorithm's config keys (``rltrainer train --config``), checked by rltrainer."""
    stop: dict[str, float] = Field(
        default_factory=lambda: {"training_iteration": 100},
        min_length=1,
        max_length=16,
        json_schema_extra={
            "x-kubernetes-validations": [_cel("self.all(k, size(k) > 0)", STOP_KEYS_NON_EMPTY)]
        },
    )
    """Stop criteria (result keys, as ``rltrainer train --stop``): the first result where any key
    reaches its value ends training."""
    checkpoint: Checkpoint
    """Where checkpoints go; restarts resume from the newest one there."""
    storage: Storage = Field(default_factory=Storage)
    """How the pods reach S3."""
    image: str | None = Field(default=None, min_length=1, max_length=512)
    """The trainer image (rltrainer + Ray); the operator's default when empty."""
    imagePullPolicy: Literal["Always", "IfNotPresent", "Never"] | None = None
    """The Ray pods' image pull policy (Kubernetes' default when empty: IfNotPresent for a
    tag other than ``latest``); ``Never`` for images loaded onto the nodes ahead of time."""
    rayVersion: str = Field(default=DEFAULT_RAY_VERSION, pattern=RAY_VERSION_PATTERN)
    """The Ray version in the image (KubeRay's rayVersion)."""
    learners: Learners = Field(default_factory=Learners)
    """The learner worker group."""
    rollouts: Rollouts = Field(default_factory=Rollouts)
    """The rollout worker group."""
    head: Head = Field(default_factory=Head)
    """The Ray head pod."""
    faultTolerance: FaultTolerance = Field(default_factory=FaultTolerance)
    """Restart policy."""
    rayAuth: RayAuth = Field(default_factory=RayAuth)
    """Authentication to the Ray cluster (token by default)."""
    preemption: Preemption = Field(default_factory=Preemption)
    """Checkpoint on preemption, drain and eviction: the grace period and a disruption budget."""
    activeDeadlineSeconds: int | None = Field(default=None, ge=1)
    """Fail the experiment (reason DeadlineExceeded) when it runs longer than this."""
    ttlSecondsAfterFinished: int | None = Field(default=None, ge=0)
    """Delete the experiment this long after it Succeeded or Failed (kept when empty)."""
    shutdownAfterFinish: bool = True
    """Delete the Ray cluster when the experiment finishes."""
    suspend: bool = False
    """true: stop the job and delete the cluster; false again: resume from the newest checkpoint."""
    tune: Sweep | None = None
    """Run a sweep (also implied by search spaces in ``config``): trials, scheduler, metric."""

    @field_validator("algorithm")
    @classmethod
    def _known_algorithm(cls, algorithm: str) -> str:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; allowed: {', '.join(sorted(ALGORITHMS))}")
        return algorithm

    @field_validator("stop")
    @classmethod
    def _stop_keys(cls, stop: dict[str, float]) -> dict[str, float]:
        if any(not key for key in stop):
            raise ValueError(STOP_KEYS_NON_EMPTY)
        return stop


class Phase(enum.StrEnum):
    PENDING = "Pending"
    QUEUED = "Queued"
    PROVISIONING = "Provisioning"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


FINISHED_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED})

#: The condition types every status carries.
CONDITION_TYPES = (
    "Ready",
    "Provisioned",
    "Running",
    "Succeeded",
    "Failed",
    "Suspended",
    "Restarting",
    "Queued",
)


class Condition(_Model):
    """A standard Kubernetes condition (metav1.Condition)."""

    type: str = Field(json_schema_extra={"enum": list(CONDITION_TYPES)})
    """What this condition is about."""
    status: Literal["True", "False", "Unknown"]
    """Whether it holds."""
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024)
    """A CamelCase machine-readable reason."""
    message: str = Field(default="", max_length=32768)
    """A human-readable explanation."""
    lastTransitionTime: str
    """When ``status`` last changed (RFC 3339)."""
    observedGeneration: int | None = Field(default=None, ge=0)
    """The spec generation this condition was computed from."""


class TrialCounts(_Model):
    """A sweep's trials by state (Ray Tune's PENDING, RUNNING, PAUSED, TERMINATED, ERROR)."""

    pending: int = Field(default=0, ge=0)
    """Trials waiting for resources."""
    running: int = Field(default=0, ge=0)
    """Trials training now."""
    paused: int = Field(default=0, ge=0)
    """Trials paused by the scheduler (PBT, ASHA)."""
    terminated: int = Field(default=0, ge=0)
    """Trials that finished (their stop criteria, or stopped early by the scheduler)."""
    errored: int = Field(default=0, ge=0)
    """Trials that failed."""


class ExperimentStatus(_Model):
    """What the operator observed; written only by the operator (status subresource)."""

    phase: Phase = Phase.PENDING
    """Where the experiment is in its life cycle."""
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Ready, Provisioned, Running, Succeeded, Failed, Suspended, Restarting, Queued."""
    observedGeneration: int | None = None
    """The spec generation the operator last acted on."""
    message: str | None = None
    """The latest transition's explanation."""
    rayClusterName: str | None = None
    """The RayCluster running this experiment."""
    jobId: str | None = None
    """The Ray job submission id of the current driver."""
    iteration: int | None = None
    """Training iterations completed (continues across restarts)."""
    timesteps: int | None = None
    """Env steps sampled so far."""
    episodeReturnMean: float | None = None
    """The latest smoothed episode return."""
    lastCheckpoint: str | None = None
    """The newest checkpoint (s3:// URI)."""
    restarts: int = 0
    """Times the experiment was restarted (failed job or lost cluster)."""
    gracePeriodNeededSeconds: int | None = None
    """What the driver measured one iteration plus one checkpoint (and Ray's stop) to take: a
    GracePeriodTooShort warning when it exceeds ``spec.preemption.gracePeriodSeconds``."""
    disruptions: int = 0
    """Times its pods were taken away (Kueue preemption, drain, eviction) after the driver wrote
    a checkpoint on the signal; it resumed from that checkpoint (not counted in restarts)."""
    envRunnerRestarts: int | None = None
    """Env runners recreated after they failed (the job went on), over every attempt."""
    driverEnvRunnerRestarts: int | None = None
    """The current driver's own count of those, as last read (each attempt starts at 0):
    envRunnerRestarts adds its increases, and a drop means a new driver (a counter reset)."""
    learnerRestarts: int | None = None
    """Learner groups replaced after a learner died (the job went on), over every attempt."""
    driverLearnerRestarts: int | None = None
    """The current driver's own count of those, as last read (see driverEnvRunnerRestarts)."""
    healthyEnvRunners: int | None = None
    """Env runners the current driver has that answer."""
    startTime: str | None = None
    """When the experiment first started provisioning (RFC 3339)."""
    completionTime: str | None = None
    """When it Succeeded or Failed (RFC 3339)."""
    nextAttemptTime: str | None = None
    """While Restarting: when the next attempt starts (exponential backoff)."""
    trials: TrialCounts | None = None
    """A sweep's trials by state (the driver's latest count)."""
    bestTrial: str | None = None
    """A sweep's best trial so far by ``spec.tune.metric``."""
    bestMetric: float | None = None
    """The best trial's value of ``spec.tune.metric``."""
    bestCheckpoint: str | None = None
    """The best trial's newest checkpoint (s3:// URI)."""


class RLExperiment(_Model):
    """The whole resource, as the operator reads it."""

    model_config = ConfigDict(extra="ignore")  # apiVersion/kind/metadata are the API server's

    spec: ExperimentSpec
    status: ExperimentStatus = Field(default_factory=ExperimentStatus)


def field_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a manifest path: ``spec.rollouts.tolerations[0].effect``."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path
