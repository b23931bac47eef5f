"""Where the suite's CPU goes, per test and per file: an opt-in pytest plugin and its summary.

Durations mislead on a busy machine: the same file took 48 s in one run of ``make test`` and
178 s in another, as the other worker's load came and went. CPU seconds do not: each pytest
process (each xdist worker) moves itself into a cgroup of its own at start, so everything it
starts later (Ray's raylets and actors, control planes, S3, kubectl) is counted with it, and each
test is charged what its worker's cgroup used from its setup to its teardown (a session
fixture's start and end land on the test that started or ended it; a cluster idling under a test,
on that test). Containers the kubelet starts live in the kubelet's cgroups: not counted. Each
line also counts the Ray instances and worker processes (actors, task workers) the test started,
from the log files Ray leaves under the worker's ``RAY_TMPDIR``/ray: a Ray worker that imports torch
pays 2.1 CPU-s for that import alone, an instance about 10 to start.

Run (root, Linux; cgroup v1's ``cpuacct`` or cgroup v2)::

    RLTRAINER_TEST_CPU_REPORT=/tmp/cpu.jsonl make test
    python -m tests.cpu_report /tmp/cpu.jsonl      # per tier and the costliest files

Loaded by ``tests/conftest.py``; without the variable it does nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

ENV = "RLTRAINER_TEST_CPU_REPORT"
#: Tiers of the budget table (docs/design/testing.md), by the test's folder.
TIERS = {"tests/node": "node", "tests/operator": "operator", "tests/e2e": "e2e", "tests/charts": "charts"}


class _Cgroup:
    """This process's own CPU-accounting cgroup (v1 ``cpuacct`` or v2), its usage in seconds."""

    def __init__(self, name: str) -> None:
        v1 = Path("/sys/fs/cgroup/cpuacct")
        if v1.is_dir():
            self.path, self.usage = v1 / name, self._v1_usage
        else:
            self.path, self.usage = Path("/sys/fs/cgroup") / name, self._v2_usage
        self.path.mkdir(exist_ok=True)
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def _v1_usage(self) -> float:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def _v2_usage(self) -> float:
        for line in (self.path / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise RuntimeError(f"{self.path}/cpu.stat has no usage_usec")

    def leave(self) -> None:
        """Back to the parent cgroup; this one goes once its last process has."""
        (self.path.parent / "cgroup.procs").write_text(str(os.getpid()))
        with contextlib.suppress(OSError):  # a process the suite started lives on: the cgroup stays
            self.path.rmdir()


def ray_started(root: Path) -> tuple[int, int]:
    """How many Ray instances (session folders) and worker processes (a core worker log each,
    moved to ``old/`` once the worker has ended) have been started under ``root`` so far."""
    sessions = [path for path in root.glob("session_2*") if path.is_dir()]
    logs = ("logs/python-core-worker-*.log", "logs/old/python-core-worker-*.log")
    return len(sessions), sum(len(list(session.glob(pattern))) for session in sessions for pattern in logs)


class CpuReport:
    """Appends one JSON line per test:
    ``{"test", "cpu_s", "wall_s", "worker", "ray_instances", "ray_workers"}``."""

    def __init__(self, out: Path, worker: str) -> None:
        self.out, self.worker = out, worker
        self.cgroup = _Cgroup(f"rltrainer-tests-{os.getpid()}")
        self.ray_root = Path(os.environ.get("RAY_TMPDIR", "/tmp"), "ray")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):  # noqa: ARG002
        cpu, wall = self.cgroup.usage(), time.monotonic()
        instances, workers = ray_started(self.ray_root)
        yield
        instances_after, workers_after = ray_started(self.ray_root)
        line = {
            "test": item.nodeid,
            "cpu_s": round(self.cgroup.usage() - cpu, 2),
            "wall_s": round(time.monotonic() - wall, 2),
            "worker": self.worker,
            "ray_instances": instances_after - instances,
            "ray_workers": workers_after - workers,
        }
        with self.out.open("a") as out:  # one short write per line: workers may share the file
            out.write(json.dumps(line) + "\n")

    def pytest_unconfigure(self) -> None:
        self.cgroup.leave()


def pytest_configure(config: pytest.Config) -> None:
    out = os.environ.get(ENV)
    if not out:
        return
    try:
        report = CpuReport(Path(out), os.environ.get("PYTEST_XDIST_WORKER", "main"))
    except OSError as err:
        raise pytest.UsageError(f"{ENV}: cannot make a CPU-accounting cgroup (root, Linux): {err}") from None
    config.pluginmanager.register(report, "rltrainer-cpu-report")


def tier_of(test: str) -> str:
    return next((tier for prefix, tier in TIERS.items() if test.startswith(prefix + "/")), "lib")


COLUMNS = ("cpu_s", "wall_s", "tests", "ray_instances", "ray_workers")


def _table(first: str, items: list) -> list[str]:
    rows = [
        f"| {first} | CPU s | worker s | tests | Ray instances | Ray workers |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    rows += [
        f"| {name} | " + " | ".join(f"{value:,.0f}" for value in values) + " |" for name, values in items
    ]
    return rows


def summary(lines: list[dict]) -> str:
    """Per tier, then the 25 costliest files: CPU seconds, wall (worker) seconds, tests, and the
    Ray instances and worker processes started."""
    tiers: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(COLUMNS))
    files: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(COLUMNS))
    for line in lines:
        values = [line["cpu_s"], line["wall_s"], 1, line.get("ray_instances", 0), line.get("ray_workers", 0)]
        for key, table in ((tier_of(line["test"]), tiers), (line["test"].split("::")[0], files)):
            table[key] = [a + b for a, b in zip(table[key], values, strict=True)]
    total = [sum(values[i] for values in tiers.values()) for i in range(len(COLUMNS))]
    by_cpu = sorted(tiers.items(), key=lambda item: -item[1][0])
    rows = [*_table("tier", [*by_cpu, ("all", total)]), ""]
    rows += _table("file", sorted(files.items(), key=lambda item: -item[1][0])[:25])
    return "\n".join(rows)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.cpu_report FILE (the JSON lines of RLTRAINER_TEST_CPU_REPORT)")
    with open(sys.argv[1]) as found:
        print(summary([json.loads(line) for line in found if line.strip()]))
