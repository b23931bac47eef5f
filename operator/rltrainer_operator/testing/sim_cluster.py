"""A cluster of hundreds of nodes on one machine, for the operator at scale (``bench.operator_scale``).

What runs for real:

- the control plane (``testing.envtest``: etcd, kube-apiserver with its audit log,
  kube-controller-manager), with KubeRay's CRDs and ours installed as users install them;
- **KWOK** (``make kwok``, built from its Go module) in its controller mode against that API
  server: it manages the Node objects made here (annotated ``kwok.x-k8s.io/node: fake``), makes
  them Ready and renews their leases as kubelets do (40 s leases, renewed every 10 s), and moves
  each Pod bound to them through its own "fast" stages (read from the module's
  ``kustomize/stage``, never a copy): Running and Ready, init containers completed, a Pod IP from
  the node's ``podCIDR``; deleted Pods go at once. No kubelet, no container: nothing runs;
- the nodes: 90 % CPU nodes (32 CPUs, 128 GiB, an m6i.8xlarge's allocatable) and 10 % GPU nodes
  (96 CPUs, 1,152 GiB, ``nvidia.com/gpu: 8``, a p4d.24xlarge's) with GPU feature discovery's
  label and the GPU taint the platform's learners tolerate (``local_stack.GPU_NODE_LABELS``,
  ``GPU_TAINT``), zones, instance types, pod CIDRs;
- the **real kube-scheduler** (the node binaries', ``testing.node.scheduler_command``) places
  every Pod: learners asking for a GPU on GPU nodes by their selector and toleration, heads and
  rollouts on CPU nodes;
- **KubeRay's own operator** (``testing.kuberay``) creates the Pods and head Services and writes
  the RayClusters' status from the Pods' state;
- our operator, the real kopf runtime and handlers in a process of its own
  (``OperatorProcess``: ``kopf run`` as the chart runs it, ``testing.sim_operator``).

The one stand-in: Ray. Nothing runs in the simulated Pods, so no head answers. ``FakeRayJobs``
(``testing.fakes``) answers the operator's job API calls for every head (the operator process
sends each call for ``http://<head>:<port>`` through it, which records the address), and
reports each experiment's progress, which the operator would read from ``progress.json`` in S3:
a submitted job runs until the cluster is stopped, one iteration every ``iteration_s``. A sweep's
job (``SimulatedSweep``, read from the job's command line as the driver reads it) runs its
trials ``--max-concurrent-trials`` at a time, reports them by state and the best one as the
driver's Tune callback does, and succeeds once every trial has terminated.

    with SimulatedCluster(nodes=100, namespaces=["sim"]) as sim, sim.operator() as operator:
        sim.create_experiments("sim", [experiment(f"exp-{i}", "sim") for i in range(100)])

``stop()`` ends every process it started (the operator's, KubeRay, the scheduler, KWOK) and
the control plane, also after a failure or Ctrl-C, and removes its files (its logs are kept
with ``RLTRAINER_KEEP_SIM_FILES=1``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from rltrainer.tune.search_space import holds_search_space
from rltrainer_operator.sweep import grid_size
from rltrainer_operator.testing import parts, usage
from rltrainer_operator.testing.envtest import (
    MISSING_ASSETS,
    ControlPlane,
    Processes,
    find_assets,
    free_port,
    http_ok,
)
from rltrainer_operator.testing.fakes import FakeRayJobs
from rltrainer_operator.testing.kuberay import KubeRayOperator
from rltrainer_operator.testing.local_stack import GPU_NODE_LABELS, GPU_TAINT, install_crds

#: Where the operator process finds the job API stand-in (``sim_operator`` reads it; not imported
#: from there: importing that module registers its handlers in this process's kopf).
JOB_API_VARIABLE = "RLTRAINER_SIM_JOB_API"

#: The annotation KWOK's docs give the nodes it manages (``--manage-nodes-with-annotation-selector``).
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
#: The module's own stages: nodes Ready with leases, Pods Ready at once (what ``kwokctl`` uses).
KWOK_STAGES = ("node/fast", "node/heartbeat-with-lease", "pod/fast")
#: A kubelet's lease (``--node-lease-duration-seconds``); KWOK renews it every quarter of it.
LEASE_DURATION_S = 40
#: Leases renewed and Pods moved at once (KWOK's default: 4). With hundreds of nodes on a busy
#: API server, 4 at a time fell behind: a lease older than the node-lifecycle controller's grace
#: period makes the node NotReady and marks its Pods not Ready, which no kubelet sets back here.
KWOK_PARALLELISM = 16
GPU_KEY, GPU_VALUE, GPU_EFFECT = GPU_TAINT.replace("=", ":").split(":")
GPU_TOLERATION = {"key": GPU_KEY, "operator": "Exists", "effect": GPU_EFFECT}
ZONES = ("zone-a", "zone-b", "zone-c")
#: (instance type, capacity, allocatable): EKS's reservations on an m6i.8xlarge and a p4d.24xlarge.
CPU_NODE = (
    "m6i.8xlarge",
    {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "200Gi"},
    {"cpu": "31850m", "memory": "124Gi", "pods": "110", "ephemeral-storage": "180Gi"},
)
GPU_NODE = (
    "p4d.24xlarge",
    {"cpu": "96", "memory": "1152Gi", "pods": "110", "ephemeral-storage": "8Ti", "nvidia.com/gpu": "8"},
    {"cpu": "95690m", "memory": "1120Gi", "pods": "110", "ephemeral-storage": "7Ti", "nvidia.com/gpu": "8"},
)
#: Experiments whose learner asks for a GPU (the rest learn on CPUs): 100 GPU nodes hold 800
#: learners, 1,000 experiments at this share ask for 750 GPUs.
GPU_EXPERIMENT_SHARE = 0.75


def missing_parts() -> str | None:
    """One line naming what this machine lacks for a simulated cluster (None: nothing)."""
    from rltrainer_operator.testing.node import find_node_assets

    if find_assets() is None:
        return MISSING_ASSETS
    absent = [name for name in ("kwok", "kuberay") if parts.find(name) is None]
    if absent:
        return f"{' and '.join(absent)} not built: `make {' '.join(absent)}` (Go and the module proxy)"
    if find_node_assets() is None:
        return "no kube-scheduler: the node binaries (../shared/envtest/node or NODE_ASSETS)"
    return None


def node_manifest(index: int, gpu: bool) -> dict[str, Any]:
    """Node ``index`` as a cloud's node group registers it, with its status (capacity,
    allocatable, addresses): what a kubelet would report, KWOK then keeps Ready."""
    instance, capacity, allocatable = GPU_NODE if gpu else CPU_NODE
    name = f"sim-{'gpu' if gpu else 'cpu'}-{index:04d}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": instance,
        "topology.kubernetes.io/zone": ZONES[index % len(ZONES)],
        "type": "kwok",
    }
    if gpu:
        labels.update({**GPU_NODE_LABELS, "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": dict([KWOK_ANNOTATION])},
        "spec": {
            "podCIDR": f"10.{128 + index // 256}.{index % 256}.0/24",
            "taints": [{"key": GPU_KEY, "value": GPU_VALUE, "effect": GPU_EFFECT}] if gpu else [],
        },
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "addresses": [
                {"type": "InternalIP", "address": f"172.16.{index // 256}.{index % 256}"},
                {"type": "Hostname", "address": name},
            ],
        },
    }


def experiment(name: str, namespace: str, gpu: bool = True) -> dict[str, Any]:
    """An RLExperiment as a platform team runs them: a head, a learner (on a GPU node by the GPU
    label and toleration when ``gpu``), two rollout workers; the image is never pulled."""
    learners: dict[str, Any] = {"replicas": 1}
    if gpu:
        learners.update(gpusPerLearner=1, nodeSelector=GPU_NODE_LABELS, tolerations=[GPU_TOLERATION])
    return {
        "apiVersion": "rltrainer.io/v1alpha1",
        "kind": "RLExperiment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "algorithm": "PPO",
            "env": "CartPole-v1",
            "image": "ghcr.io/rltrainer/trainer:sim",
            "checkpoint": {"uri": f"s3://sim/{namespace}"},
            "learners": learners,
            "rollouts": {"replicas": 2},
        },
    }


#: A sweep trial's iterations when its stop criteria name none (``training_iteration``).
TRIAL_ITERATIONS = 10


@dataclasses.dataclass(frozen=True)
class SimulatedSweep:
    """A sweep's driver as the stand-in plays it, from the job's command line as ``rltrainer
    train`` reads it: ``trials`` (the grid's combinations times ``--num-samples``), at most
    ``concurrency`` running at once (``--max-concurrent-trials``), each running ``iterations``
    (``--stop``'s ``training_iteration``): first in, first out, so trial ``i`` runs in wave
    ``i // concurrency``. Each trial's metric rises with its iterations at a pace of its own."""

    trials: int
    concurrency: int
    iterations: int
    prefix: str  # "<storage path>/<name>/<algorithm>": the trials' folders and names
    metric: str
    mode: str

    @classmethod
    def of(cls, entrypoint: str) -> SimulatedSweep | None:
        """The sweep the job runs (None: a single run)."""
        args = shlex.split(entrypoint)

        def flag(name: str, default: str | None = None) -> str | None:
            return args[args.index(name) + 1] if name in args else default

        config = json.loads(flag("--config", "{}"))
        if "--num-samples" not in args and not any(holds_search_space(v) for v in config.values()):
            return None
        trials = grid_size(config) * int(flag("--num-samples", "1"))
        stop = json.loads(flag("--stop", "{}"))
        return cls(
            trials=trials,
            concurrency=min(trials, int(flag("--max-concurrent-trials", str(trials)))),
            iterations=max(1, int(stop.get("training_iteration", TRIAL_ITERATIONS))),
            prefix=f"{flag('--storage-path')}/{flag('--name')}/{flag('--algo')}",
            metric=flag("--metric", "episode_return_mean"),
            mode=flag("--mode", "max"),
        )

    def progress(self, iterations: int) -> dict[str, Any]:
        """``progress.json`` (``rltrainer.tune.sweep.SweepProgress``'s fields) once the sweep
        has run ``iterations`` of its waves' iterations."""
        waves, into_wave = divmod(iterations, self.iterations)
        terminated = min(self.trials, waves * self.concurrency)
        running = min(self.concurrency, self.trials - terminated)
        reported = {i: self.iterations for i in range(terminated)}
        reported.update({i: into_wave for i in range(terminated, terminated + running) if into_wave})
        values = {i: self._metric(i, done) for i, done in reported.items()}
        sign = -1 if self.mode == "max" else 1
        best = min(values, key=lambda i: (sign * values[i], i), default=None)  # the earlier wins a tie
        return {
            "sweep": True,
            "trials": {
                "PENDING": self.trials - terminated - running,
                "RUNNING": running,
                "TERMINATED": terminated,
            },
            "metric": self.metric,
            "mode": self.mode,
            "best_trial": None if best is None else self._name(best),
            "best_metric": None if best is None else values[best],
            "best_checkpoint": None
            if best is None
            else f"{self.prefix}_{best:05d}/checkpoint_{reported[best] - 1:06d}",
            "finished": terminated == self.trials,
            "updated_at": time.time(),
        }

    def _name(self, trial: int) -> str:
        return f"{self.prefix.rsplit('/', 1)[1]}_{trial:05d}"

    def _metric(self, trial: int, iterations: int) -> float:
        pace = 1.0 + (trial * 7919 % 101) / 100  # a spread of learning speeds, fixed per trial
        return round(min(500.0, 20.0 + 4.0 * pace * iterations), 1)


def kwok_config(path: Path) -> Path:
    """KWOK's configuration: the stages of ``KWOK_STAGES``, from the module's own files, and
    ``KWOK_PARALLELISM``."""
    root = parts.module_dir("kwok") / "kustomize" / "stage"
    documents: list[dict[str, Any]] = [
        {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            # KWOK defaults none of these once a configuration is given: its own defaults
            # (SetObjectDefaults_KwokConfiguration), but for the parallelism.
            "options": {
                "cidr": "10.0.0.0/24",
                "nodeLeaseDurationSeconds": LEASE_DURATION_S,
                "nodeLeaseParallelism": KWOK_PARALLELISM,
                "nodePlayStageParallelism": KWOK_PARALLELISM,
                "podPlayStageParallelism": KWOK_PARALLELISM,
                "podsOnNodeSyncParallelism": 1,
                "enablePodsOnNodeSyncListPager": True,
                "enablePodsOnNodeSyncStreamWatch": False,
                "enableDebuggingHandlers": False,
                "enableProfilingHandler": False,
            },
        }
    ]
    for folder in KWOK_STAGES:
        kustomization = yaml.safe_load((root / folder / "kustomization.yaml").read_text())
        for resource in kustomization["resources"]:
            documents += [doc for doc in yaml.safe_load_all((root / folder / resource).read_text()) if doc]
    path.write_text(yaml.safe_dump_all(documents))
    return path


class SimulatedCluster:
    """The control plane, KWOK with ``nodes`` nodes, the scheduler, KubeRay (watching every
    namespace, as its chart does) and the job API stand-in; a context manager. ``namespaces``:
    created here, for the experiments. ``kuberay_concurrency``: KubeRay's reconcile concurrency
    (its chart's default, 1).

    Attributes once started: ``plane``, ``api`` (an admin ``ApiClient``), ``kuberay``
    (``KubeRayOperator``), ``jobs`` (the ``FakeRayJobs``), ``nodes`` (their names)."""

    def __init__(
        self,
        nodes: int = 100,
        namespaces: list[str] | tuple[str, ...] = ("sim",),
        *,
        gpu_node_share: float = 0.1,
        iteration_s: float = 30.0,
        ready_timeout_s: float = 600.0,
        kuberay_concurrency: int = 1,
    ) -> None:
        self.node_count = nodes
        self.kuberay_concurrency = kuberay_concurrency
        self.namespaces = list(namespaces)
        self.gpu_node_share = gpu_node_share
        self.iteration_s = iteration_s
        self.ready_timeout_s = ready_timeout_s
        self.root = Path(tempfile.mkdtemp(prefix="sim-cluster-"))
        self.plane: ControlPlane | None = None
        self.api: kubernetes.client.ApiClient | None = None
        self.kuberay: KubeRayOperator | None = None
        self.jobs: FakeRayJobs | None = None
        self.nodes: list[str] = []
        #: Added to every job's iteration count (``advance``): training that went on meanwhile.
        self.iterations_added = 0
        self._procs = Processes(self.root / "logs")
        self._operators: list[OperatorProcess] = []
        self._job_started: dict[tuple[str, str], float] = {}  # (namespace, name) -> its job's start
        #: (namespace, name) -> its job's id and sweep (None: a single run)
        self._job_runs: dict[tuple[str, str], tuple[str, SimulatedSweep | None]] = {}
        self._job_experiments: dict[str, tuple[str, str]] = {}  # job id -> (namespace, name)
        self._seen_submissions = 0
        self._lock = threading.Lock()
        self.start_seconds: dict[str, float] = {}  # how long each part of ``start`` took

    # ---------------------------------------------------------------------------------- life cycle

    def start(self) -> SimulatedCluster:
        missing = missing_parts()
        if missing:
            raise RuntimeError(missing)
        clock = time.monotonic()

        def took(stage: str) -> None:
            nonlocal clock
            self.start_seconds[stage] = round(time.monotonic() - clock, 1)
            clock = time.monotonic()

        try:
            self.plane = ControlPlane(find_assets(), root=self.root / "plane").start()
            install_crds(self.plane)
            self.api = kubernetes.config.new_client_from_config(config_file=str(self.plane.kubeconfig))
            core = kubernetes.client.CoreV1Api(self.api)
            for namespace in self.namespaces:
                core.create_namespace({"metadata": {"name": namespace}})
            took("control plane")
            self._start_kwok()
            self._create_nodes(core)
            took("nodes")
            self._start_scheduler()
            self.kuberay = KubeRayOperator(  # its chart's: every namespace
                self.plane, parts.find("kuberay"), reconcile_concurrency=self.kuberay_concurrency
            )
            self.kuberay.start()
            self.jobs = FakeRayJobs()
            self.jobs.progress = self.progress
            self.jobs.before_job_read = self._job_read
            took("scheduler and KubeRay")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop everything started here, newest first, then the control plane and the files."""
        for operator in reversed(self._operators):
            operator.stop()
        if self.jobs is not None:
            self.jobs.close()
        if self.kuberay is not None:
            self.kuberay.stop()
        for name in ("kube-scheduler", "kwok"):
            self._procs.end(name)
        if self.api is not None:
            self.api.close()
        if self.plane is not None:
            self.plane.stop()
        if not os.environ.get("RLTRAINER_KEEP_SIM_FILES"):
            import shutil

            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> SimulatedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start_kwok(self) -> None:
        self._procs.launch(
            "kwok",
            [
                str(parts.find("kwok")),
                f"--config={kwok_config(self.root / 'kwok.yaml')}",
                f"--kubeconfig={self.plane.kubeconfig}",
                f"--manage-nodes-with-annotation-selector={'='.join(KWOK_ANNOTATION)}",
                f"--node-lease-duration-seconds={LEASE_DURATION_S}",
            ],
        )

    def _create_nodes(self, core: Any) -> None:
        gpus = round(self.node_count * self.gpu_node_share)
        manifests = [node_manifest(i, gpu=i < gpus) for i in range(self.node_count)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(core.create_node, manifests))
        self.nodes = [m["metadata"]["name"] for m in manifests]

        def all_ready() -> bool:
            found = core.list_node(label_selector="type=kwok").items
            return sum(1 for node in found if _ready(node.status.conditions)) == self.node_count

        self._procs.wait("kwok", all_ready, self.ready_timeout_s)

    def _start_scheduler(self) -> None:
        from rltrainer_operator.testing.node import find_node_assets, scheduler_command

        self._procs.launch("kube-scheduler", scheduler_command(find_node_assets(), self.plane))

    # ------------------------------------------------------------------------------------- the operator

    def operator(self, **options: Any) -> OperatorProcess:
        """Our operator in a process of its own (not started; a context manager); ``options``:
        ``OperatorProcess``'s."""
        process = OperatorProcess(self, **options)
        self._operators.append(process)
        return process

    # ----------------------------------------------------------------------------- the Ray stand-in

    def progress(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The experiment's ``progress.json`` as its driver would write it: one iteration every
        ``iteration_s`` since its job started (None before any job). A sweep's
        (``SimulatedSweep``): its trials by state and the best one; its job succeeds once all
        have terminated (the driver exits after its last write)."""
        with self._lock:
            self._note_jobs()
            started = self._job_started.get((namespace, name))
            job_id, sweep = self._job_runs.get((namespace, name), ("", None))
        if started is None:
            return None
        iteration = int((time.time() - started) / self.iteration_s) + self.iterations_added
        if sweep is not None:
            progress = sweep.progress(iteration)
            if progress["finished"] and self.jobs.jobs.get(job_id, {}).get("status") == "RUNNING":
                self.jobs.set(job_id, "SUCCEEDED", "every trial terminated")
            return progress
        return {
            "iteration": iteration,
            "timesteps": iteration * 4000,
            "episode_return_mean": round(min(500.0, 20.0 + 4.0 * iteration), 1),
        }

    def advance(self, iterations: int) -> None:
        """Every job trains ``iterations`` more at once (as while an operator was away)."""
        self.iterations_added += iterations

    def _note_jobs(self) -> None:
        """Start the clock of each job submitted since the last call (``_lock`` held)."""
        # The job API's threads append while this reads: count what was read, not the list's
        # length afterwards (a submission appended in between would never be seen).
        new = self.jobs.submissions[self._seen_submissions :]
        for body in new:
            experiment_ = body.get("metadata", {}).get("rltrainer.io/experiment", "")
            key = tuple(experiment_.split("/", 1))
            self._job_started[key] = time.time()
            self._job_runs[key] = (body["submission_id"], SimulatedSweep.of(body["entrypoint"]))
            self._job_experiments[body["submission_id"]] = key
        self._seen_submissions += len(new)

    def _job_read(self, job_id: str) -> None:
        """Before the job API answers about ``job_id``: a sweep whose trials have all
        terminated has ended (``progress``), whether or not its progress was read since."""
        with self._lock:
            self._note_jobs()
            key = self._job_experiments.get(job_id)
            sweep = self._job_runs[key][1] if key is not None else None
        if sweep is not None:
            self.progress(*key)

    # --------------------------------------------------------------------------------- the workload

    def create_experiments(self, manifests: list[dict[str, Any]], rate_per_s: float | None = None) -> float:
        """Create the experiments (8 clients at once, or ``rate_per_s`` a second); the seconds taken."""
        custom = kubernetes.client.CustomObjectsApi(self.api)

        def create(body: dict[str, Any]) -> None:
            custom.create_namespaced_custom_object(
                "rltrainer.io", "v1alpha1", body["metadata"]["namespace"], "rlexperiments", body
            )

        started = time.monotonic()
        if rate_per_s is None:
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(create, manifests))
        else:
            for i, body in enumerate(manifests):
                time.sleep(max(0.0, started + i / rate_per_s - time.monotonic()))
                create(body)
        return time.monotonic() - started

    def experiments(self, namespaces: list[str] | None = None) -> list[dict[str, Any]]:
        """The experiments of ``namespaces`` (default: every namespace created here)."""
        custom = kubernetes.client.CustomObjectsApi(self.api)
        return [
            item
            for namespace in namespaces or self.namespaces
            for item in custom.list_namespaced_custom_object(
                "rltrainer.io", "v1alpha1", namespace, "rlexperiments", resource_version="0"
            )["items"]
        ]

    def phases(self, namespaces: list[str] | None = None) -> Counter:
        """How many experiments are in each phase (None: no status yet)."""
        return Counter((item.get("status") or {}).get("phase") for item in self.experiments(namespaces))

    def pods(self, namespaces: list[str] | None = None) -> list[Any]:
        core = kubernetes.client.CoreV1Api(self.api)
        return [
            pod
            for namespace in namespaces or self.namespaces
            for pod in core.list_namespaced_pod(namespace).items
        ]

    def nodes_not_ready(self) -> int:
        """Simulated nodes not Ready now (a lease KWOK renewed too late: their Pods are marked
        not Ready by the node-lifecycle controller, and stay so)."""
        core = kubernetes.client.CoreV1Api(self.api)
        return sum(
            1
            for node in core.list_node(label_selector="type=kwok").items
            if not _ready(node.status.conditions)
        )

    def gpu_nodes(self) -> set[str]:
        return {name for name in self.nodes if name.startswith("sim-gpu-")}

    # ---------------------------------------------------------------------------------- measuring

    def audit_offset(self) -> usage.Position:
        """Where the API server's audit log ends now (``usage.audit_offset``)."""
        return usage.audit_offset(self.plane)

    def requests(
        self, since: usage.Position = (0, 0), until: usage.Position | None = None
    ) -> list[dict[str, Any]]:
        """The requests between two ``audit_offset()``s, by client (``usage.requests``)."""
        return usage.requests(self.plane, since, until)


class OperatorProcess:
    """Our operator as the chart runs it by default (``kopf run --standalone --all-namespaces
    --log-format=json``, its settings from ``RLTRAINER_OPERATOR_*``), with the admin kubeconfig
    (its requests are told apart by user agent) and the job API stand-in
    (``testing.sim_operator``); a context manager.

    ``poll_interval_s``: the chart's default timer (10 s). ``namespaces``: watch only these (the
    chart's ``watch.namespaces``) rather than every namespace. Readings: ``pid``, ``rss_bytes()``,
    ``peak_rss_bytes()``, ``cpu_seconds()``, ``metrics()`` (its Prometheus text)."""

    def __init__(
        self,
        sim: SimulatedCluster,
        poll_interval_s: float = 10.0,
        name: str = "operator",
        namespaces: list[str] | None = None,
    ) -> None:
        self.sim = sim
        self.poll_interval_s = poll_interval_s
        self.name = name
        self.namespaces = namespaces
        self.metrics_port = 0
        self.starts = 0

    def start(self) -> OperatorProcess:
        self.metrics_port, liveness = free_port(), free_port()
        environment = {
            "KUBECONFIG": str(self.sim.plane.kubeconfig),
            "RLTRAINER_OPERATOR_POLL_INTERVAL_S": str(self.poll_interval_s),
            "RLTRAINER_OPERATOR_METRICS_PORT": str(self.metrics_port),
            "RLTRAINER_OPERATOR_METRICS_HOST": "127.0.0.1",
            "RLTRAINER_OPERATOR_READINESS_PORT": "0",
            "RLTRAINER_OPERATOR_RAY_TOKEN_KEY": "sim-cluster-token-key",
            JOB_API_VARIABLE: f"http://127.0.0.1:{self.sim.jobs.port}",
        }
        argv = [sys.executable, "-m", "kopf", "run", "--standalone", "--log-format=json"]
        argv += [
            "-m",
            "rltrainer_operator.testing.sim_operator",
            f"--liveness=http://127.0.0.1:{liveness}/healthz",
        ]
        if self.namespaces:  # as the chart passes watch.namespaces
            argv += [f"--namespace={namespace}" for namespace in self.namespaces]
            environment["RLTRAINER_OPERATOR_WATCH_NAMESPACES"] = ",".join(self.namespaces)
        else:
            argv.append("--all-namespaces")  # the chart's default (watch.clusterWide)
        self.starts += 1
        self.sim._procs.launch(self.name, argv, env=environment)
        try:
            self.sim._procs.wait(self.name, lambda: http_ok(f"http://127.0.0.1:{liveness}/healthz"), 120)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, kill: bool = False) -> None:
        """SIGTERM (as a rolling update stops a Pod), or SIGKILL with ``kill``; then wait."""
        pid = self.pid
        if kill and pid is not None:
            os.kill(pid, signal.SIGKILL)
        self.sim._procs.end(self.name)

    def __enter__(self) -> OperatorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return self.sim._procs.pid(self.name)

    def rss_bytes(self) -> int:
        return usage.process_memory(self.pid)["VmRSS"]

    def peak_rss_bytes(self) -> int:
        return usage.process_memory(self.pid)["VmHWM"]

    def cpu_seconds(self) -> float:
        return usage.process_cpu_seconds(self.pid)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as answer:
            return answer.read().decode()

    def log_tail(self, lines: int = 40) -> str:
        return self.sim._procs.log_tail(self.name, lines)


def _ready(conditions: list[Any] | None) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in conditions or [])


@contextlib.contextmanager
def interrupted_stops() -> Iterator[None]:
    """SIGTERM ends the block as Ctrl-C does (a ``SimulatedCluster`` inside then stops
    everything it started)."""

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
