"""The simulated cluster of ``bench.operator_scale`` works, with 100 experiments on 100 KWOK
nodes, and real Kueue queues and preempts experiments on it: ``make test``'s check of what
``tests/node/test_shared_cluster.py`` (``make e2e``) shows on real Pods.

Real here: the control plane, KWOK's nodes, the kube-scheduler, KubeRay's operator, Kueue's
controller with its webhooks (``testing.kueue``) and our operator in a process of its own
(``testing.sim_cluster``); the job API is the only stand-in. One cluster for the module (starting
one takes about a minute): 100 nodes, 10 of them with 8 GPUs each. A control plane of its own:
its nodes and scheduler would otherwise place other tests' Pods that are meant to stay Pending.
Skips, saying what to build, without KWOK, KubeRay, Kueue or the scheduler.

- 100 experiments: every one reaches Running with the Pods KubeRay made, placed by the scheduler
  (GPU learners on GPU nodes, the rest on CPU nodes) and made Ready by KWOK; every job went to its
  own head's address; progress reaches the statuses; the request counts are those of an operator
  that works (a few per experiment, no loop). A check of the harness, not a timing.
- Kueue, in a namespace of its own with its own operator (the first test's experiments stay, as
  a shared cluster's other teams' would). The queues are the Pod test's: a ClusterQueue whose
  quota holds one ``nvidia.com/gpu`` (and more CPU and memory than two experiments ask for, so
  that the GPU is what binds), a LocalQueue, two WorkloadPriorityClasses. Each experiment asks
  for a GPU learner, so one runs at a time:

  - labelled for a LocalQueue that does not exist: Queued, Kueue's words, no hang nor timeout;
  - a low-priority one is admitted and runs (KWOK makes its Pods Running, the job API stand-in
    reports progress); a second of its priority waits, Queued for the GPU, with no Pods;
  - a high-priority one preempts the first (Queued, reason Preempted, one disruption) and runs;
  - once the high one and the waiting one are deleted, the preempted one is admitted again,
    runs a new driver job and Succeeds when that job does (the stand-in's job is ended by hand).

  Not here, as nothing runs in the Pods: the preStop hook's checkpoint and the driver resuming
  from it (the Pod test's).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from rltrainer_operator.builders.naming import raycluster_name
from rltrainer_operator.handlers import PROGRESS_WRITE_TICKS
from rltrainer_operator.queueing import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from rltrainer_operator.testing import kueue as kueue_objects
from rltrainer_operator.testing.kueue import KueueController
from rltrainer_operator.testing.sim_cluster import SimulatedCluster, experiment, missing_parts
from tests.conftest import built_part, timeout_scale

EXPERIMENTS = 100
NAMESPACES = ["sim-a", "sim-b"]
NS = "shared"  # the Kueue test's
QUEUE = "team-gpus"
CLUSTER_QUEUE = "gpus"
GROUP, VERSION, PLURAL = "rltrainer.io", "v1alpha1", "rlexperiments"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatedCluster]:
    """100 nodes (10 with GPUs); each job trains an iteration a second."""
    missing = missing_parts()
    if missing:
        pytest.skip(missing)
    with SimulatedCluster(100, [*NAMESPACES, NS], iteration_s=1) as cluster:
        yield cluster


def wait_until(what: str, check, timeout_s: float):
    deadline = time.monotonic() + timeout_s * timeout_scale()
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def wait_for_all(what: str, count, total: int, stall_s: float) -> None:
    """Until ``count()`` reaches ``total``, for as long as it grows: a busy machine slows the
    pace, it does not stop the progress; none more for ``stall_s`` seconds fails, naming how
    many got there (pytest's timeout is the last guard)."""
    best, grew_at = -1, time.monotonic()
    while (done := count()) < total:
        if done > best:
            best, grew_at = done, time.monotonic()
        elif time.monotonic() - grew_at > stall_s * timeout_scale():
            raise AssertionError(f"{what}: {best} of {total}, and none more for {stall_s:.0f} s")
        time.sleep(1)


def test_100_experiments_run_on_100_simulated_nodes(sim: SimulatedCluster) -> None:
    manifests = [experiment(f"exp-{i:03d}", NAMESPACES[i % 2], gpu=i % 4 != 3) for i in range(EXPERIMENTS)]
    # The chart's 10 s timer.
    with sim.operator(namespaces=NAMESPACES) as operator:
        assert len(sim.gpu_nodes()) == 10
        since = sim.audit_offset()
        sim.create_experiments(manifests)

        def running() -> int:
            phases = sim.phases(NAMESPACES)
            unexpected = set(phases) - {None, "Pending", "Provisioning", "Running"}
            assert not unexpected, (phases, operator.log_tail())
            return phases.get("Running", 0)

        wait_for_all("experiments Running", running, EXPERIMENTS, 90)

        pods = sim.pods(NAMESPACES)
        assert len(pods) == 4 * EXPERIMENTS  # a head, a learner, two rollout workers each
        assert all(pod.status.phase == "Running" and pod.status.pod_ip for pod in pods)
        on_gpu = Counter(
            (pod.metadata.labels["ray.io/group"], pod.spec.node_name in sim.gpu_nodes()) for pod in pods
        )
        assert on_gpu == {
            ("headgroup", False): 100,
            ("rollouts", False): 200,
            ("learners", True): 75,
            ("learners", False): 25,
        }

        # One job per experiment, each sent to the address KubeRay gives its own head.
        heads = {
            pod.metadata.labels["ray.io/cluster"]: pod.status.pod_ip
            for pod in pods
            if pod.metadata.labels["ray.io/node-type"] == "head"
        }
        assert len(sim.jobs.submissions) == EXPERIMENTS
        for item in sim.experiments(NAMESPACES):
            address = sim.jobs.addresses[item["status"]["jobId"]]
            assert address.split(":")[0] == heads[item["status"]["rayClusterName"]], address

        # The stand-in's progress reaches every status: at once after a phase's write, but a status
        # whose write had to be tried again waits for the next progress write, a minute (the
        # handlers' PROGRESS_WRITE_TICKS of the 10 s timer) and a tick later; the stall allowed
        # is twice that, as the timer's ticks lag on a busy machine.
        def with_progress() -> int:
            return sum(item["status"].get("iteration") is not None for item in sim.experiments(NAMESPACES))

        wait_for_all(
            "statuses with progress", with_progress, EXPERIMENTS, 2 * (PROGRESS_WRITE_TICKS + 1) * 10
        )

        operator_requests = [r for r in sim.requests(since) if r["client"] == "operator"]
        per_experiment = len(operator_requests) / EXPERIMENTS
        assert 3 <= per_experiment <= 60, Counter((r["verb"], r["resource"]) for r in operator_requests)
        assert operator.rss_bytes() > 0 and operator.cpu_seconds() > 0


# --- Kueue ---------------------------------------------------------------------------------


def queued_experiment(name: str, priority: str, queue: str = QUEUE) -> dict[str, Any]:
    """The simulated cluster's experiment (a GPU learner, a head, two rollouts: 5 CPUs, 12 GiB,
    one GPU), labelled for ``queue`` at ``priority``."""
    body = experiment(name, NS, gpu=True)
    body["metadata"]["labels"] = {QUEUE_NAME_LABEL: queue, PRIORITY_CLASS_LABEL: priority}
    return body


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


class Watcher:
    """The experiments' statuses; every wait ends on the state it waits for and fails at once
    on one that cannot lead there (an experiment Failed or restarted)."""

    def __init__(self, sim: SimulatedCluster, logs: list[Any]) -> None:
        self.custom = kubernetes.client.CustomObjectsApi(sim.api)
        self.logs = logs

    def status(self, name: str) -> dict[str, Any]:
        body = self.custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
        return body.get("status") or {}

    def create(self, body: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)

    def wait(self, what: str, name: str, check, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s * timeout_scale()
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            for item in self.custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["items"]:
                other = item.get("status") or {}
                if other.get("phase") == "Failed" or other.get("restarts"):
                    raise AssertionError(f"{item['metadata']['name']} failed: {other}\n{self.tails()}")
            status = self.status(name)
            if check(status):
                return status
            time.sleep(0.5)
        raise AssertionError(
            f"timed out after {timeout_s:.0f} s waiting for {what}: {status}\n{self.tails()}"
        )

    def tails(self) -> str:
        return "\n".join(part.log_tail(20) for part in self.logs)


def test_kueue_queues_and_preempts_on_a_simulated_cluster(sim: SimulatedCluster) -> None:
    binary = built_part("kueue")
    # The quota's one GPU binds, not the nodes; this operator watches the queued namespace only
    # and ticks every second.
    with (
        KueueController(sim.plane, binary) as kueue,
        sim.operator(name="queued-operator", poll_interval_s=1, namespaces=[NS]) as operator,
    ):
        kueue.apply_queues(*kueue_objects.one_gpu_queues(NS, QUEUE, CLUSTER_QUEUE))
        watcher = Watcher(sim, [operator, kueue])
        core = kubernetes.client.CoreV1Api(sim.api)

        def pods_of(name: str) -> list[Any]:
            selector = f"ray.io/cluster={raycluster_name(name)}"
            return core.list_namespaced_pod(NS, label_selector=selector).items

        def running_pods(name: str) -> int:  # a head, a learner, two rollout workers
            return sum(1 for pod in pods_of(name) if pod.status.phase == "Running")

        # A queue that does not exist: said in Kueue's words, never a hang nor a timeout.
        watcher.create(queued_experiment("lost", "low", queue="no-such-queue"))
        watcher.create(queued_experiment("low-a", "low"))

        # Queued at once (no Workload yet), Inadmissible once Kueue has considered its Workload.
        def inadmissible(status: dict[str, Any]) -> bool:
            queued = status.get("phase") == "Queued"
            return queued and condition(status, "Queued").get("reason") == "Inadmissible"

        lost = watcher.wait("lost Queued as Inadmissible", "lost", inadmissible, 60)
        assert "no-such-queue" in lost["message"] and "doesn't exist" in lost["message"], lost
        running = watcher.wait(
            "low-a Running with progress", "low-a",
            lambda s: s.get("phase") == "Running" and s.get("iteration") is not None, 90,
        )  # fmt: skip
        assert condition(running, "Queued").get("status") == "False", running
        first_job = running["jobId"]
        watcher.wait("low-a's Pods Running", "low-a", lambda _: running_pods("low-a") == 4, 30)
        learner = [pod for pod in pods_of("low-a") if pod.metadata.labels["ray.io/group"] == "learners"]
        assert len(learner) == 1 and learner[0].spec.node_name in sim.gpu_nodes(), learner

        # The same priority: it waits for the GPU, saying so in Kueue's words; KubeRay makes no Pods.
        watcher.create(queued_experiment("low-b", "low"))
        waiting = watcher.wait(
            "low-b Queued for the GPU", "low-b",
            lambda s: s.get("phase") == "Queued" and "nvidia.com/gpu" in (s.get("message") or ""), 60,
        )  # fmt: skip
        assert condition(waiting, "Queued")["status"] == "True", waiting
        assert pods_of("low-b") == []

        # A higher priority preempts the first, and runs.
        watcher.create(queued_experiment("high", "high"))
        preempted = watcher.wait(
            "low-a preempted", "low-a",
            lambda s: s.get("phase") == "Queued" and s.get("disruptions") == 1, 60,
        )  # fmt: skip
        assert condition(preempted, "Queued")["reason"] == "Preempted", preempted
        watcher.wait("high Running", "high", lambda s: s.get("phase") == "Running", 60)
        watcher.wait("low-a's Pods gone", "low-a", lambda _: pods_of("low-a") == [], 30)
        assert pods_of("low-b") == []
        assert watcher.status("low-b")["phase"] == "Queued"

        # They have shown what they must; the GPU frees as they go (the waiting one first, so
        # that the quota the high one leaves goes to the preempted one).
        watcher.delete("low-b")
        watcher.delete("high")

        resumed = watcher.wait(
            "low-a Running again, a new job", "low-a",
            lambda s: s.get("phase") == "Running" and s.get("jobId") != first_job, 90,
        )  # fmt: skip
        assert resumed["disruptions"] == 1 and not resumed.get("restarts"), resumed
        assert condition(resumed, "Queued").get("status") == "False", resumed
        watcher.wait("low-a's new Pods Running", "low-a", lambda _: running_pods("low-a") == 4, 30)

        # The stand-in's job ends as a driver does at its stop: the experiment Succeeds.
        sim.jobs.set(resumed["jobId"], "SUCCEEDED")
        done = watcher.wait("low-a Succeeded", "low-a", lambda s: s.get("phase") == "Succeeded", 30)
        assert done["disruptions"] == 1 and not done.get("restarts"), done
        assert watcher.status("lost")["phase"] == "Queued"  # still waiting for its queue
