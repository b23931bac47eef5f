"""A sweep at scale (issue 55): one experiment of 200 trials on the simulated cluster, measured.

    python -m bench.operator_sweep --trials 200 --concurrency 20

The simulated cluster of ``bench.operator_scale`` (the real control plane, KWOK's nodes, the
real kube-scheduler and KubeRay's own operator, our operator in a process of its own with the
chart's 10 s timer; Ray's job API and the driver's ``progress.json`` the stand-ins) runs one
RLExperiment with ``spec.tune.numSamples`` trials, ``maxConcurrentTrials`` at once: the operator
sizes the RayCluster for the trials that run at once (a learner and two rollout workers per
trial, the head with a driver CPU per trial), KubeRay makes the Pods, the scheduler places them
(learners on GPU nodes). The stand-in driver (``sim_cluster.SimulatedSweep``) runs the trials
``--concurrency`` at a time, each ``--trial-iterations`` iterations of ``--iteration-s``, reports
them by state and the best one as the real driver's Tune callback does, and its job succeeds
once every trial has terminated. Measured:

- the RayCluster: seconds until all its Pods are Running, the Pods KubeRay made against the
  trials at once times the Pods per trial, where the scheduler put them;
- the sweep: seconds until the status shows every trial terminated, and after the driver's
  end; the status's counts over time; Succeeded, and the cluster's Pods gone;
- the operator: its API requests (the audit log, by verb and resource) while provisioning,
  per minute while the trials run (its permission check's apart: a fixed number a minute,
  whatever the experiments), and at the end; its RSS and CPU seconds; the status's size.

Prints the figures, appends one JSON line to ``bench/results/operator_sweep.jsonl`` (replacing
the line of the same trials, concurrency and nodes), and prints it last.
Needs what ``bench.operator_scale`` needs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import machine, print_json_line
from bench.operator_scale import MIB, _readings, _window
from rltrainer_operator.testing.sim_cluster import (
    SimulatedCluster,
    experiment,
    interrupted_stops,
    missing_parts,
)

RESULTS = Path(__file__).resolve().parent / "results" / "operator_sweep.jsonl"
NAMESPACE = "sweeps"
NAME = "sweep"
#: The operator's permission check (``permissions.PermissionCheck``): a SelfSubjectAccessReview
#: per call it needs, once a minute whatever the experiments; counted apart from the sweep's.
PERMISSION_CHECK = "selfsubjectaccessreviews"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.operator_sweep", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--trials", type=int, default=200, help="spec.tune.numSamples")
    parser.add_argument("--concurrency", type=int, default=20, help="spec.tune.maxConcurrentTrials")
    parser.add_argument("--nodes", type=int, default=100, help="simulated nodes (a tenth with 8 GPUs)")
    parser.add_argument(
        "--trial-iterations", type=int, default=3, help="each trial's stop: training_iteration"
    )
    parser.add_argument("--iteration-s", type=float, default=5.0, help="seconds per simulated iteration")
    parser.add_argument("--poll-interval", type=float, default=10.0, help="the operator's timer (chart: 10)")
    parser.add_argument("--timeout-s", type=float, default=1200.0, help="give up waiting for the end after")
    parser.add_argument("--no-record", action="store_true", help=f"do not write {RESULTS.name}")
    args = parser.parse_args(argv)
    missing = missing_parts()
    if missing:
        raise SystemExit(f"bench.operator_sweep: {missing}")
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    sim = SimulatedCluster(args.nodes, [NAMESPACE], iteration_s=args.iteration_s)
    with interrupted_stops(), sim:
        up = time.monotonic() - started
        print(f"{args.nodes} simulated nodes, KubeRay and the scheduler up in {up:.0f} s")
        figures = measure(args, sim)
    figures["load_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print_json_line(record(args, figures))


def sweep_manifest(args: Any) -> dict[str, Any]:
    """The sim's experiment (a GPU learner, two rollout workers) as a sweep of ``--trials``."""
    manifest = experiment(NAME, NAMESPACE, gpu=True)
    manifest["spec"]["tune"] = {"numSamples": args.trials, "maxConcurrentTrials": args.concurrency}
    manifest["spec"]["stop"] = {"training_iteration": args.trial_iterations}
    return manifest


def measure(args: Any, sim: SimulatedCluster) -> dict[str, Any]:
    manifest = sweep_manifest(args)
    per_trial = manifest["spec"]["learners"]["replicas"] + manifest["spec"]["rollouts"]["replicas"]
    at_once = min(args.trials, args.concurrency)
    expected_pods = 1 + at_once * per_trial
    operator = sim.operator(poll_interval_s=args.poll_interval).start()
    time.sleep(5)  # its startup's requests and imports settle
    figures: dict[str, Any] = {"operator_idle_rss_mib": round(operator.rss_bytes() / MIB)}

    marks = {"create": _readings(sim, operator)}
    seen: dict[str, float] = {}
    counts: list[dict[str, Any]] = []  # the status's trials whenever they changed
    most_pods = 0
    t0 = time.monotonic()
    sim.create_experiments([manifest])
    while "pods_gone" not in seen:
        elapsed = time.monotonic() - t0
        if elapsed > args.timeout_s:
            raise SystemExit(
                f"the sweep did not end within {args.timeout_s:.0f} s: {sorted(seen)}, {counts[-1:]}"
            )
        item = sim.experiments()[0]
        status = item.get("status") or {}
        pods = sim.pods()
        most_pods = max(most_pods, len(pods))
        running = [pod for pod in pods if pod.status.phase == "Running"]
        trials = status.get("trials")
        if trials and (not counts or counts[-1]["trials"] != trials):
            counts.append({"s": round(elapsed, 1), "trials": trials, "best": status.get("bestMetric")})
            best = f"{status.get('bestTrial')} {status.get('bestMetric')}"
            print(f"  {elapsed:5.0f} s: trials {trials}, best {best}")
        for mark, reached in (
            ("job_submitted", bool(sim.jobs.submissions)),
            ("phase_running", status.get("phase") == "Running"),
            ("pods_running", len(running) == len(pods) >= expected_pods),
            ("all_terminated", (trials or {}).get("terminated") == args.trials),
            ("succeeded", status.get("phase") == "Succeeded"),
            ("pods_gone", "succeeded" in seen and not pods),
        ):
            if reached and mark not in seen:
                seen[mark] = elapsed
                print(f"  {elapsed:5.0f} s: {mark.replace('_', ' ')}", flush=True)
                if mark == "pods_running":
                    figures.update(_placement(sim, pods))
                if mark in ("phase_running", "all_terminated", "pods_gone"):
                    marks[mark] = _readings(sim, operator)
                if mark == "succeeded":
                    figures["status_bytes"] = len(json.dumps(status, separators=(",", ":")))
                    figures["final_status"] = {
                        k: status.get(k) for k in ("trials", "bestTrial", "bestMetric")
                    }
        time.sleep(1)

    figures.update({f"{mark}_s": round(at, 1) for mark, at in seen.items()})
    waves = math.ceil(args.trials / at_once)
    driver_s = waves * args.trial_iterations * args.iteration_s  # the stand-in driver's own length
    figures.update(
        expected_pods=expected_pods,
        most_pods=most_pods,
        driver_s=driver_s,
        # From the driver's last trial's end (the stand-in's clock starts at the job's submission).
        terminated_after_driver_end_s=round(seen["all_terminated"] - seen["job_submitted"] - driver_s, 1),
        trial_counts=counts,
        most_trials_running=max((c["trials"].get("running", 0) for c in counts), default=0),
        status_trials_writes=len(counts),
    )
    for name, start, end in (
        ("provision", "create", "phase_running"),
        ("trials", "phase_running", "all_terminated"),
        ("finish", "all_terminated", "pods_gone"),
        ("whole", "create", "pods_gone"),
    ):
        window = _window(name, marks[start], marks[end], 1, minutes=None)
        figures.update({key.replace("_per_experiment", ""): value for key, value in window.items()})
    minutes = figures["trials_window_s"] / 60
    checks = figures["trials_requests_split"].get(f"operator create {PERMISSION_CHECK}", 0)
    figures["trials_operator_requests_per_min"] = round(
        (figures["trials_requests"]["operator"] - checks) / minutes, 2
    )
    figures["trials_permission_check_requests_per_min"] = round(checks / minutes, 2)
    figures["trials_job_api_calls_per_min"] = round(figures["trials_job_api_calls"] / minutes, 2)
    figures["kuberay_created_pods"] = int(figures["whole_requests_split"].get("kuberay create pods", 0))
    figures["operator_rss_mib"] = round(operator.rss_bytes() / MIB)
    figures["operator_peak_rss_mib"] = round(operator.peak_rss_bytes() / MIB)
    figures["whole_operator_cpu_percent"] = round(
        100 * figures["whole_operator_cpu_s"] / figures["whole_window_s"], 1
    )
    operator.stop()
    _print(figures, args)
    return figures


def _placement(sim: SimulatedCluster, pods: list[Any]) -> dict[str, Any]:
    """Where the scheduler put the cluster's Pods: by Ray group and node kind; GPU learners on
    GPU nodes and the rest on CPU nodes, or the run stops."""
    gpu_nodes = sim.gpu_nodes()
    placed = Counter(
        f"{pod.metadata.labels['ray.io/group']} on {'GPU' if pod.spec.node_name in gpu_nodes else 'CPU'}"
        for pod in pods
    )
    wrong = [
        pod.metadata.name
        for pod in pods
        if (pod.spec.node_name in gpu_nodes)
        != any("nvidia.com/gpu" in (c.resources.requests or {}) for c in pod.spec.containers)
    ]
    print(f"  {len(pods)} Pods Running: " + ", ".join(f"{n} {where}" for where, n in sorted(placed.items())))
    if wrong:
        raise SystemExit(f"Pods on the wrong kind of node: {wrong[:5]}")
    return {
        "placement": dict(sorted(placed.items())),
        "nodes_used": len({pod.spec.node_name for pod in pods}),
    }


def _print(figures: dict[str, Any], args: Any) -> None:
    print(
        f"{args.trials} trials, {args.concurrency} at once: {figures['kuberay_created_pods']} Pods made by "
        f"KubeRay (expected {figures['expected_pods']}), all Running after {figures['pods_running_s']} s, "
        f"the experiment Running after {figures['phase_running_s']} s; every trial terminated in the status "
        f"after {figures['all_terminated_s']} s ({figures['terminated_after_driver_end_s']} s after the "
        f"driver's end), Succeeded after {figures['succeeded_s']} s, "
        f"Pods gone after {figures['pods_gone_s']} s"
    )
    print(
        f"  operator: {figures['whole_requests']['operator']} API requests in all "
        f"({figures['provision_requests']['operator']} provisioning, "
        f"{figures['trials_operator_requests_per_min']} a minute while the trials ran, besides "
        f"{figures['trials_permission_check_requests_per_min']} of the permission check, "
        f"{figures['finish_requests']['operator']} at the end); {figures['whole_operator_cpu_s']} CPU s, "
        f"RSS {figures['operator_rss_mib']} MiB (peak {figures['operator_peak_rss_mib']}); "
        f"status {figures['status_bytes']} bytes"
    )
    for key, value in figures["whole_requests_split"].items():
        print(f"    {key}: {value}")


#: The figures of the benchmarks page's table (every figure is in the row's ``detail``).
HEADLINE = (
    "pods_running_s",
    "kuberay_created_pods",
    "expected_pods",
    "all_terminated_s",
    "terminated_after_driver_end_s",
    "succeeded_s",
    "trials_operator_requests_per_min",
    "operator_peak_rss_mib",
    "whole_operator_cpu_percent",
    "status_bytes",
    "load_1min",
)


def record(args: Any, figures: dict[str, Any]) -> dict[str, Any]:
    """The result row (headline figures, ``detail``: all of them; date, machine, command),
    written into ``RESULTS`` unless ``--no-record``."""
    about = machine()
    row = {
        "trials": args.trials,
        "concurrency": args.concurrency,
        "nodes": args.nodes,
        **{key: figures.get(key) for key in HEADLINE},
        "detail": figures,
        "date": datetime.date.today().isoformat(),
        "machine": f"{about['cores']}-core {about['cpu']}, 1-min load {figures['load_1min'][0]} at the start",
        "command": ("python -m bench.operator_sweep " + shlex.join(sys.argv[1:])).strip(),
    }
    if not args.no_record:
        key = (row["trials"], row["concurrency"], row["nodes"])
        lines = RESULTS.read_text().splitlines() if RESULTS.exists() else []
        rows = [json.loads(line) for line in lines if line.strip()]
        rows = [old for old in rows if (old["trials"], old["concurrency"], old["nodes"]) != key]
        rows = sorted([*rows, row], key=lambda r: (r["trials"], r["concurrency"], r["nodes"]))
        RESULTS.write_text("".join(f"{json.dumps(each)}\n" for each in rows))
    return row


if __name__ == "__main__":
    main()
