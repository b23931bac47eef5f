"""The simulated cluster of ``bench.operator_scale`` works: 100 experiments on 100 KWOK nodes.

A check of the harness (``rltrainer_operator.testing.sim_cluster``), not a timing: the real
control plane, KWOK's nodes, the real kube-scheduler and KubeRay's own operator, our operator in
a process of its own, and the job API stand-in. Every experiment reaches Running with the Pods
KubeRay made, placed by the scheduler (GPU learners on GPU nodes, the rest on CPU nodes) and made
Ready by KWOK; every job went to its own head's address; progress reaches the statuses; the
request counts are those of an operator that works (a few per experiment, no loop). Skips,
saying what to build, without KWOK, KubeRay or the scheduler. A control plane of its own: 100
nodes and a scheduler would otherwise place other tests' Pods that are meant to stay Pending.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from rltrainer_operator.testing.sim_cluster import SimulatedCluster, experiment, missing_parts
from tests.conftest import timeout_scale

EXPERIMENTS = 100
NAMESPACES = ["sim-a", "sim-b"]


def wait_until(what: str, check, timeout_s: float):
    deadline = time.monotonic() + timeout_s * timeout_scale()
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def test_100_experiments_run_on_100_simulated_nodes():
    missing = missing_parts()
    if missing:
        pytest.skip(missing)
    manifests = [experiment(f"exp-{i:03d}", NAMESPACES[i % 2], gpu=i % 4 != 3) for i in range(EXPERIMENTS)]
    # The chart's 10 s timer; each job one iteration every 2 s.
    with SimulatedCluster(100, NAMESPACES, iteration_s=2) as sim, sim.operator() as operator:
        assert len(sim.gpu_nodes()) == 10
        since = sim.audit_offset()
        sim.create_experiments(manifests)

        def all_running() -> bool:
            phases = sim.phases()
            unexpected = set(phases) - {None, "Pending", "Provisioning", "Running"}
            assert not unexpected, (phases, operator.log_tail())
            return phases.get("Running") == EXPERIMENTS

        wait_until(f"{EXPERIMENTS} experiments Running", all_running, 180)

        pods = sim.pods()
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
        for item in sim.experiments():
            address = sim.jobs.addresses[item["status"]["jobId"]]
            assert address.split(":")[0] == heads[item["status"]["rayClusterName"]], address

        # The stand-in's progress reaches every status (the first at once, then once a minute).
        wait_until(
            "progress in every status",
            lambda: all(item["status"].get("iteration") is not None for item in sim.experiments()),
            60,
        )

        operator_requests = [r for r in sim.requests(since) if r["client"] == "operator"]
        per_experiment = len(operator_requests) / EXPERIMENTS
        assert 3 <= per_experiment <= 60, Counter((r["verb"], r["resource"]) for r in operator_requests)
        assert operator.rss_bytes() > 0 and operator.cpu_seconds() > 0
