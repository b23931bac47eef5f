"""Operator speed (issue 5): latency to a RayCluster and to status, throughput, steady-state load.

    python -m bench.operator
    python -m bench.operator --experiments 100 --poll-interval 10 --steady-s 30

The real kopf runtime and handlers (``testing.runner``) against a real Kubernetes control plane
(``testing.envtest``: etcd, kube-apiserver and kube-controller-manager v1.32 on 127.0.0.1, with
our CRD and KubeRay's), a fake Ray job API and a fake KubeRay that marks each RayCluster ready
as soon as it appears (``testing.fakes``). Figures:

- one experiment: seconds from ``create`` to its RayCluster existing, to the first status
  (Provisioning), and to Running (the fake KubeRay is ready within ~0.2 s);
- ``--experiments`` applied at once: seconds until every one has a RayCluster and until every
  one is Running, and reconciles per second over that stretch;
- steady state: with everything Running, API requests per experiment per minute made by the
  operator (kopf's and its own, told apart by user agent in the API server's audit log) over
  ``--steady-s`` seconds, and Ray
  job API calls; a hot loop would show here. (Each tick also reads ``progress.json`` from S3:
  one small GET per experiment per tick, not measured here: there is no S3 in this benchmark.)

Everything shares the machine's cores with the control plane, so the figures are upper bounds
on the operator's own costs.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

from bench.common import median, print_json_line
from rltrainer_operator.kube import USER_AGENT
from rltrainer_operator.settings import Settings
from rltrainer_operator.testing.envtest import MISSING_ASSETS, ControlPlane, find_assets
from rltrainer_operator.testing.fakes import FakeKubeRay, FakeRayJobs
from rltrainer_operator.testing.local_stack import install_crds
from rltrainer_operator.testing.runner import OperatorRunner

NAMESPACE = "bench"


def manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "rltrainer.io/v1alpha1",
        "kind": "RLExperiment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "algorithm": "PPO",
            "env": "CartPole-v1",
            "checkpoint": {"uri": "s3://bench/rl"},
            "rollouts": {"replicas": 2},
        },
    }


def wait(check, timeout_s: float) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout_s:
            raise SystemExit(f"timed out after {timeout_s}s")
        time.sleep(0.02)
    return time.monotonic() - start


def operator_requests(plane: ControlPlane) -> int:
    agents = ("kopf/", USER_AGENT.split("/")[0] + "/")
    return sum(1 for event in plane.audit_events() if event.get("userAgent", "").startswith(agents))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.operator", description=__doc__.split("\n")[0])
    parser.add_argument("--experiments", type=int, default=100)
    parser.add_argument("--singles", type=int, default=5, help="single-experiment latency samples")
    parser.add_argument("--poll-interval", type=float, default=10.0, help="the operator's timer (s)")
    parser.add_argument("--steady-s", type=float, default=30.0)
    args = parser.parse_args()

    assets = find_assets()
    if assets is None:
        raise SystemExit(MISSING_ASSETS)
    ray_jobs = FakeRayJobs()
    with ControlPlane(assets) as plane:
        import kubernetes

        install_crds(plane)
        plane.kubectl_run("create", "namespace", NAMESPACE)
        api_client = kubernetes.config.new_client_from_config(config_file=str(plane.kubeconfig))
        client = kubernetes.client.CustomObjectsApi(api_client)
        kuberay = FakeKubeRay(client, ray_jobs.port)
        stop_kuberay = kuberay.run_in_background([NAMESPACE], interval_s=0.5)
        settings = dataclasses.replace(
            Settings(), poll_interval_s=args.poll_interval, metrics_port=0, ray_token_key="bench-key"
        )
        runner = OperatorRunner(
            kubeconfig=plane.kubeconfig, namespaces=[NAMESPACE], settings=settings
        ).start()
        # No S3 here: progress reads (one small GET per experiment per tick) are left out.
        runner.memo.reconciler.read_progress = lambda _spec, _namespace, _name: None
        try:
            figures = measure(args, plane, client, kuberay, runner, ray_jobs)
        finally:
            runner.stop()
            stop_kuberay.set()
            ray_jobs.close()
            api_client.close()
    print_json_line(figures)


def phase(client: Any, name: str) -> str | None:
    body = client.get_namespaced_custom_object("rltrainer.io", "v1alpha1", NAMESPACE, "rlexperiments", name)
    return (body.get("status") or {}).get("phase")


def measure(
    args: Any, plane: ControlPlane, client: Any, kuberay: FakeKubeRay, runner: Any, ray_jobs: FakeRayJobs
) -> dict:
    to_cluster, to_status, to_running = [], [], []
    for i in range(args.singles):
        name = f"single-{i}"
        start = time.monotonic()
        client.create_namespaced_custom_object(
            "rltrainer.io", "v1alpha1", NAMESPACE, "rlexperiments", manifest(name)
        )
        wait(lambda n=name: kuberay.get(NAMESPACE, f"rlx-{n}"), 60)
        to_cluster.append(time.monotonic() - start)
        wait(lambda n=name: phase(client, n) is not None, 60)
        to_status.append(time.monotonic() - start)
        wait(lambda n=name: phase(client, n) == "Running", 60)
        to_running.append(time.monotonic() - start)
    print(
        f"one experiment: RayCluster after {median(to_cluster):.3f}s, first status after "
        f"{median(to_status):.3f}s, Running after {median(to_running):.3f}s (median of {args.singles})"
    )

    count_before = _reconcile_count(runner)
    start = time.monotonic()
    names = [f"exp-{i:03d}" for i in range(args.experiments)]
    for name in names:
        client.create_namespaced_custom_object(
            "rltrainer.io", "v1alpha1", NAMESPACE, "rlexperiments", manifest(name)
        )
    applied = time.monotonic() - start

    def clusters() -> int:
        return len(kuberay.list(NAMESPACE))

    all_clusters = wait(lambda: clusters() >= args.experiments + args.singles, 600) + applied

    def running() -> int:
        items = client.list_namespaced_custom_object("rltrainer.io", "v1alpha1", NAMESPACE, "rlexperiments")[
            "items"
        ]
        return sum(1 for item in items if (item.get("status") or {}).get("phase") == "Running")

    all_running = wait(lambda: running() >= args.experiments + args.singles, 600) + all_clusters
    reconciles = _reconcile_count(runner) - count_before
    print(
        f"{args.experiments} experiments applied in {applied:.2f}s: "
        f"all RayClusters after {all_clusters:.2f}s, all Running after {all_running:.2f}s; "
        f"{reconciles} reconciles, {reconciles / all_running:.1f}/s"
    )

    total = args.experiments + args.singles
    requests_before, jobs_before = operator_requests(plane), ray_jobs.requests
    time.sleep(args.steady_s)
    steady = operator_requests(plane) - requests_before
    per_minute = steady / total / (args.steady_s / 60)
    job_calls = (ray_jobs.requests - jobs_before) / total / (args.steady_s / 60)
    print(
        f"steady state ({total} Running, timer every {args.poll_interval:g}s): {steady} API requests in "
        f"{args.steady_s:g}s = {per_minute:.2f} per experiment per minute; Ray job API "
        f"{job_calls:.2f} per experiment per minute"
    )
    return {
        "experiments": args.experiments,
        "poll_interval_s": args.poll_interval,
        "create_to_raycluster_s": round(median(to_cluster), 4),
        "create_to_first_status_s": round(median(to_status), 4),
        "create_to_running_s": round(median(to_running), 4),
        "bulk_apply_s": round(applied, 3),
        "bulk_all_rayclusters_s": round(all_clusters, 3),
        "bulk_all_running_s": round(all_running, 3),
        "bulk_reconciles": reconciles,
        "bulk_reconciles_per_s": round(reconciles / all_running, 2),
        "steady_api_requests_per_experiment_per_min": round(per_minute, 3),
        "steady_window_s": args.steady_s,
        "steady_job_api_calls_per_experiment_per_min": round(
            (ray_jobs.requests - jobs_before) / total / (args.steady_s / 60), 3
        ),
    }


def _reconcile_count(runner: Any) -> int:
    for metric in runner.memo.metrics.reconcile_seconds.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count"):
                return int(sample.value)
    return 0


if __name__ == "__main__":
    main()
