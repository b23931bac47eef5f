"""The operator at scale (issue 55): N experiments on M simulated nodes, measured.

    python -m bench.operator_scale --experiments 100
    python -m bench.operator_scale --experiments 1000 --nodes 1000 [--stream 10]

On a simulated cluster (``rltrainer_operator.testing.sim_cluster``: the real control plane,
KWOK's nodes, the real kube-scheduler and KubeRay's own operator; Ray's job API is the one
stand-in) with our operator in a process of its own as the chart runs it (10 s timer):

- **apply**: the N experiments created at once (8 clients) or ``--stream`` a second; seconds
  until the last one is Running, and each one's create-to-Running percentiles;
- **the operator's cost**: its RSS (peak and at the end) and CPU seconds, KubeRay's beside it;
- **API requests per experiment** from the API server's audit log (every request, with its
  user agent and user: the reliable split by client; ``apiserver_request_total`` has no client
  label), by client, verb and resource: during the apply, and per minute of steady state
  (``--steady-s``, everything Running, each job one iteration every ``--iteration-s``);
- **reconcile latency**: percentiles of one reconcile, ours (``rltrainer_reconcile_duration_seconds``)
  and KubeRay's (``controller_runtime_reconcile_time_seconds``), from their histograms;
- **restart**: with every experiment live, every job advanced 1,000 iterations (training that
  went on), the operator stopped (SIGTERM, as a rolling update does) and started again: seconds
  until every status shows the new iteration, and the operator's requests in its first minute.

Prints the figures, appends one JSON line to ``bench/results/operator_scale.jsonl`` (replacing
the line of the same N, M and stream), and prints it last. ``--profile DIR`` records the
operator with py-spy during the apply and the steady state (flame graphs, SVG).
Needs the control plane's binaries, ``make kwok kuberay`` and the node binaries' kube-scheduler.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import machine, print_json_line
from rltrainer_operator.testing.sim_cluster import (
    GPU_EXPERIMENT_SHARE,
    SimulatedCluster,
    experiment,
    interrupted_stops,
    missing_parts,
)
from rltrainer_operator.testing.usage import process_cpu_seconds, process_memory

RESULTS = Path(__file__).resolve().parent / "results" / "operator_scale.jsonl"
EXPERIMENTS_PER_NAMESPACE = 100
CLIENTS = ("operator", "kuberay", "scheduler", "kwok", "controller-manager")
MIB = 1024 * 1024


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.operator_scale", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--experiments", type=int, default=100)
    parser.add_argument("--nodes", type=int, help="simulated nodes (default: as many as experiments)")
    parser.add_argument("--stream", type=float, help="create this many a second (default: all at once)")
    parser.add_argument("--steady-s", type=float, default=120.0, help="steady state measured this long")
    parser.add_argument("--iteration-s", type=float, default=30.0, help="each job's seconds per iteration")
    parser.add_argument("--poll-interval", type=float, default=10.0, help="the operator's timer (chart: 10)")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="give up waiting for Running after")
    parser.add_argument("--no-restart", action="store_true", help="skip the operator restart")
    parser.add_argument("--no-record", action="store_true", help=f"do not write {RESULTS.name}")
    parser.add_argument(
        "--kuberay-concurrency",
        type=int,
        default=1,
        help="KubeRay's reconcileConcurrency (its chart's default: 1)",
    )
    parser.add_argument("--profile", type=Path, help="py-spy flame graphs of the operator into this folder")
    args = parser.parse_args(argv)
    if args.kuberay_concurrency < 1:
        parser.error(f"--kuberay-concurrency must be at least 1, not {args.kuberay_concurrency}")
    missing = missing_parts()
    if missing:
        raise SystemExit(f"bench.operator_scale: {missing}")
    nodes = args.nodes or args.experiments
    namespaces = [f"team-{i:02d}" for i in range(math.ceil(args.experiments / EXPERIMENTS_PER_NAMESPACE))]
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    sim = SimulatedCluster(
        nodes, namespaces, iteration_s=args.iteration_s, kuberay_concurrency=args.kuberay_concurrency
    )
    with interrupted_stops(), sim:
        print(f"{nodes} simulated nodes, KubeRay and the scheduler up in {time.monotonic() - started:.0f} s")
        figures = measure(args, sim, namespaces)
    figures["load_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    row = record(args, nodes, figures)
    print_json_line(row)


def measure(args: Any, sim: SimulatedCluster, namespaces: list[str]) -> dict[str, Any]:
    n = args.experiments
    manifests = [
        experiment(f"exp-{i:04d}", namespaces[i // EXPERIMENTS_PER_NAMESPACE], gpu=_gpu(i)) for i in range(n)
    ]
    operator = sim.operator(poll_interval_s=args.poll_interval).start()
    time.sleep(5)  # its startup's requests and imports settle
    idle_rss = operator.rss_bytes()
    figures: dict[str, Any] = {"operator_idle_rss_mib": round(idle_rss / MIB)}

    # --- apply --------------------------------------------------------------------------------
    before = _readings(sim, operator)
    profile = _profile(args, operator, "apply")
    t0 = time.monotonic()
    applied = sim.create_experiments(manifests, rate_per_s=args.stream)
    last_running = _wait_all_running(sim, n, t0, args.timeout_s)
    _stop(profile)
    after = _readings(sim, operator)
    latencies = _create_to_running(sim)
    figures.update(
        apply_s=round(applied, 1),
        all_running_s=round(last_running, 1),
        create_to_running_p50_s=_percentile(latencies, 50),
        create_to_running_p90_s=_percentile(latencies, 90),
        create_to_running_max_s=_percentile(latencies, 100),
    )
    figures.update(_window("apply", before, after, n, minutes=None))
    how = "at once" if args.stream is None else f"{args.stream:g}/s"
    print(
        f"{n} experiments created in {applied:.1f} s ({how}): the last Running after {last_running:.1f} s; "
        f"create to Running p50 {figures['create_to_running_p50_s']} s, "
        f"p90 {figures['create_to_running_p90_s']} s, max {figures['create_to_running_max_s']} s"
    )
    _check_placement(sim, n)

    # --- steady state -------------------------------------------------------------------------
    time.sleep(max(0.0, args.poll_interval * 2 - (time.monotonic() - t0 - last_running)))
    before = _readings(sim, operator)
    profile = _profile(args, operator, "steady")
    time.sleep(args.steady_s)
    _stop(profile)
    after = _readings(sim, operator)
    figures.update(_window("steady", before, after, n, minutes=args.steady_s / 60))
    figures["operator_rss_mib"] = round(operator.rss_bytes() / MIB)
    figures["operator_peak_rss_mib"] = round(operator.peak_rss_bytes() / MIB)
    figures["kuberay_rss_mib"] = round(process_memory(sim.kuberay.pid)["VmRSS"] / MIB)
    _print_steady(figures, n)

    # --- restart ------------------------------------------------------------------------------
    if not args.no_restart:
        figures.update(_restart(sim, operator, n))
    operator.stop()
    return figures


def _gpu(index: int) -> bool:
    """Three experiments in four ask for a GPU learner (``GPU_EXPERIMENT_SHARE``), spread evenly."""
    return math.floor((index + 1) * GPU_EXPERIMENT_SHARE) > math.floor(index * GPU_EXPERIMENT_SHARE)


def _wait_all_running(sim: SimulatedCluster, n: int, t0: float, timeout_s: float) -> float:
    """Seconds from ``t0`` until all ``n`` are Running (printing progress every 10 s)."""
    shown = 0.0
    while True:
        phases = sim.phases()
        elapsed = time.monotonic() - t0
        if phases.get("Running", 0) >= n:
            return elapsed
        if elapsed > timeout_s:
            raise SystemExit(f"not all Running after {timeout_s:.0f} s: {dict(phases)}")
        if elapsed - shown >= 10:
            shown = elapsed
            lagging = sim.nodes_not_ready()
            nodes = f" ({lagging} nodes not Ready: KWOK renewed their leases too late)" if lagging else ""
            print(f"  {elapsed:5.0f} s: {dict(sorted(phases.items(), key=str))}{nodes}", flush=True)
        time.sleep(1)


def _readings(sim: SimulatedCluster, operator: Any) -> dict[str, Any]:
    """What a window is measured between: the audit log's end, CPU seconds, histograms, job API calls."""
    return {
        "time": time.monotonic(),
        "audit": sim.audit_offset(),
        "operator_cpu": operator.cpu_seconds(),
        "kuberay_cpu": process_cpu_seconds(sim.kuberay.pid),
        "operator_hist": _histogram(operator.metrics(), "rltrainer_reconcile_duration_seconds"),
        "kuberay_hist": _histogram(
            _get(f"http://127.0.0.1:{sim.kuberay.metrics_port}/metrics"),
            "controller_runtime_reconcile_time_seconds",
            {"controller": "raycluster"},
        ),
        "job_api": sim.jobs.requests,
        "sim": sim,
    }


def _window(name: str, before: dict[str, Any], after: dict[str, Any], n: int, minutes: float | None) -> dict:
    """Requests by client (per experiment, per minute when ``minutes``), CPU, reconcile percentiles."""
    sim = before["sim"]
    requests = sim.requests(before["audit"], after["audit"])
    scale = n * (minutes or 1)
    by_client = Counter(r["client"] for r in requests)
    split = Counter((r["client"], r["verb"], r["resource"]) for r in requests if r["client"] in CLIENTS[:2])
    unit = "_per_experiment_per_min" if minutes else "_per_experiment"
    figures: dict[str, Any] = {
        f"{name}_requests{unit}": {client: round(by_client[client] / scale, 2) for client in CLIENTS},
        f"{name}_requests_split{unit}": {
            f"{client} {verb} {resource}": round(count / scale, 3)
            for (client, verb, resource), count in sorted(split.items())
        },
        f"{name}_operator_cpu_s": round(after["operator_cpu"] - before["operator_cpu"], 1),
        f"{name}_kuberay_cpu_s": round(after["kuberay_cpu"] - before["kuberay_cpu"], 1),
        f"{name}_job_api_calls{unit}": round((after["job_api"] - before["job_api"]) / scale, 2),
        f"{name}_window_s": round(after["time"] - before["time"], 1),
    }
    for who in ("operator", "kuberay"):
        buckets = _difference(after[f"{who}_hist"], before[f"{who}_hist"])
        figures[f"{name}_{who}_reconciles"] = int(buckets[-1][1]) if buckets else 0
        for q in (50, 90, 99):
            figures[f"{name}_{who}_reconcile_p{q}_ms"] = _quantile(buckets, q / 100)
    return figures


def _print_steady(figures: dict[str, Any], n: int) -> None:
    per_min = figures["steady_requests_per_experiment_per_min"]
    print(
        f"steady state, {n} Running: API requests per experiment per minute: "
        + ", ".join(f"{client} {value}" for client, value in per_min.items())
    )
    for key, value in figures["steady_requests_split_per_experiment_per_min"].items():
        print(f"    {key}: {value}")
    latency = "/".join(str(figures[f"steady_operator_reconcile_p{q}_ms"]) for q in (50, 90, 99))
    print(
        f"  operator: {figures['steady_operator_cpu_s']} CPU s in {figures['steady_window_s']} s, "
        f"RSS {figures['operator_rss_mib']} MiB (peak {figures['operator_peak_rss_mib']}), reconcile "
        f"p50/p90/p99 {latency} ms; KubeRay: {figures['steady_kuberay_cpu_s']} CPU s, "
        f"RSS {figures['kuberay_rss_mib']} MiB"
    )


def _restart(sim: SimulatedCluster, operator: Any, n: int) -> dict[str, Any]:
    """Stop the operator, advance every job, start it again: time to current statuses, its burst."""
    operator.stop()
    sim.advance(1000)
    progress = {
        (item["metadata"]["namespace"], item["metadata"]["name"]): sim.progress(
            item["metadata"]["namespace"], item["metadata"]["name"]
        )
        for item in sim.experiments()
    }
    jobless = sorted(f"{namespace}/{name}" for (namespace, name), p in progress.items() if p is None)
    if jobless:
        raise SystemExit(f"{len(jobless)} experiment(s) Running without a job at the job API: {jobless[:5]}")
    wanted = {key: p["iteration"] for key, p in progress.items()}
    offset, t0 = sim.audit_offset(), time.monotonic()
    operator.start()
    started_s = time.monotonic() - t0
    while True:
        stale = [
            key
            for item in sim.experiments()
            if ((item.get("status") or {}).get("iteration") or 0)
            < wanted[(key := (item["metadata"]["namespace"], item["metadata"]["name"]))]
        ]
        current_s = time.monotonic() - t0
        if not stale or current_s > 600:
            break
        time.sleep(0.5)
    time.sleep(max(0.0, 60 - (time.monotonic() - t0)))
    burst = [r for r in sim.requests(offset, sim.audit_offset()) if r["client"] == "operator"]
    split = Counter(f"{r['verb']} {r['resource']}" for r in burst)
    figures = {
        "restart_process_ready_s": round(started_s, 1),
        "restart_all_current_s": round(current_s, 1) if not stale else None,
        "restart_stale_after_600_s": len(stale),
        "restart_first_minute_requests_per_experiment": round(len(burst) / n, 2),
        "restart_first_minute_split_per_experiment": {k: round(v / n, 3) for k, v in sorted(split.items())},
        # The new process a minute in: what stays, without the creation's transient peak.
        "restart_rss_mib": round(operator.rss_bytes() / MIB),
    }
    print(
        f"restart with {n} live: process up after {started_s:.1f} s, every status current after "
        f"{figures['restart_all_current_s']} s; {len(burst)} requests in its first minute "
        f"({figures['restart_first_minute_requests_per_experiment']} per experiment), "
        f"RSS {figures['restart_rss_mib']} MiB a minute in: "
        + ", ".join(f"{k} {v}" for k, v in figures["restart_first_minute_split_per_experiment"].items())
    )
    return figures


def _create_to_running(sim: SimulatedCluster) -> list[float]:
    """Each experiment's seconds from creation to its Running condition (1 s resolution)."""
    found = []
    for item in sim.experiments():
        created = _time(item["metadata"]["creationTimestamp"])
        for condition in (item.get("status") or {}).get("conditions") or []:
            if condition["type"] == "Running" and condition["status"] == "True":
                found.append(_time(condition["lastTransitionTime"]) - created)
    return found


def _check_placement(sim: SimulatedCluster, n: int) -> None:
    """Every Pod Running on a node; GPU learners on GPU nodes, the rest on CPU nodes."""
    pods = sim.pods()
    gpu_nodes = sim.gpu_nodes()
    wrong = [
        pod.metadata.name
        for pod in pods
        if (pod.spec.node_name in gpu_nodes)
        != any("nvidia.com/gpu" in (c.resources.requests or {}) for c in pod.spec.containers)
    ]
    running = sum(1 for pod in pods if pod.status.phase == "Running")
    print(f"  {len(pods)} Pods ({len(pods) / n:.1f} per experiment), {running} Running, {len(wrong)} astray")
    if wrong:
        raise SystemExit(f"Pods on the wrong kind of node: {wrong[:5]}")


def _histogram(text: str, name: str, labels: dict[str, str] | None = None) -> list[tuple[float, float]]:
    """A Prometheus histogram's cumulative buckets ``[(le, count), ...]``, summed over series
    matching ``labels``."""
    from prometheus_client.parser import text_string_to_metric_families

    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name != f"{name}_bucket":
                continue
            if any(sample.labels.get(k) != v for k, v in (labels or {}).items()):
                continue
            le = float(sample.labels["le"])
            buckets[le] = buckets.get(le, 0.0) + sample.value
    return sorted(buckets.items())


def _difference(
    after: list[tuple[float, float]], before: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    old = dict(before)
    return [(le, count - old.get(le, 0.0)) for le, count in after]


def _quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """``histogram_quantile``: linear within the bucket holding the ``q`` quantile, in ms."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank, lower, below = q * buckets[-1][1], 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return round(lower * 1000, 1)
            share = (rank - below) / (count - below) if count > below else 1.0
            return round((lower + (le - lower) * share) * 1000, 1)
        lower, below = le, count
    return None


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1)], 1)


def _time(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read().decode()


def _profile(args: Any, operator: Any, phase: str) -> subprocess.Popen | None:
    """py-spy recording the operator (its threads and idle time too) until ``_stop``."""
    if args.profile is None:
        return None
    args.profile.mkdir(parents=True, exist_ok=True)
    py_spy = Path(sys.executable).with_name("py-spy")
    out = args.profile / f"operator-{args.experiments}-{phase}.svg"
    return subprocess.Popen(
        [
            str(py_spy),
            "record",
            "--pid",
            str(operator.pid),
            "--rate",
            "50",
            "--output",
            str(out),
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop(profile: subprocess.Popen | None) -> None:
    if profile is not None:
        profile.send_signal(2)  # SIGINT: py-spy writes its flame graph and exits
        profile.wait(60)


#: The figures of the benchmarks page's table (every figure is in the row's ``detail``).
HEADLINE = (
    "all_running_s",
    "create_to_running_p50_s",
    "operator_peak_rss_mib",
    "steady_operator_cpu_percent",
    "steady_operator_requests_per_experiment_per_min",
    "steady_kuberay_requests_per_experiment_per_min",
    "steady_operator_reconcile_p50_ms",
    "steady_operator_reconcile_p99_ms",
    "restart_all_current_s",
    "restart_first_minute_requests_per_experiment",
    "load_1min",
)


def record(args: Any, nodes: int, figures: dict[str, Any]) -> dict[str, Any]:
    """The result row (headline figures, ``detail``: all of them; date, machine, command),
    written into ``RESULTS`` unless ``--no-record``."""
    about = machine()
    command = "python -m bench.operator_scale " + shlex.join(sys.argv[1:] if sys.argv[1:] else [])
    steady = figures["steady_requests_per_experiment_per_min"]
    figures["steady_operator_requests_per_experiment_per_min"] = steady["operator"]
    figures["steady_kuberay_requests_per_experiment_per_min"] = steady["kuberay"]
    figures["steady_operator_cpu_percent"] = round(
        100 * figures["steady_operator_cpu_s"] / figures["steady_window_s"], 1
    )
    row = {
        "experiments": args.experiments,
        "nodes": nodes,
        "stream_per_s": args.stream,
        "kuberay_concurrency": args.kuberay_concurrency,
        **{key: figures.get(key) for key in HEADLINE},
        "detail": figures,
        "date": datetime.date.today().isoformat(),
        "machine": f"{about['cores']}-core {about['cpu']}, 1-min load {figures['load_1min'][0]} at the start",
        "command": command.strip(),
    }
    if not args.no_record:
        lines = RESULTS.read_text().splitlines() if RESULTS.exists() else []
        rows = [json.loads(line) for line in lines if line.strip()]
        rows = sorted([*(old for old in rows if _key(old) != _key(row)), row], key=_order)
        RESULTS.write_text("".join(f"{json.dumps(each)}\n" for each in rows))
    return row


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    """What a row measures (a new measurement of it replaces the old)."""
    return row["experiments"], row["nodes"], row.get("stream_per_s"), row.get("kuberay_concurrency", 1)


def _order(row: dict[str, Any]) -> tuple[Any, ...]:
    """Rows by size, the ones applied at once first."""
    return row["experiments"], row["nodes"], row.get("stream_per_s") or 0, row.get("kuberay_concurrency", 1)


if __name__ == "__main__":
    main()
