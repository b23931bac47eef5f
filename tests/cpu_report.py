"""Where the suite's CPU goes, per test and per file: an opt-in pytest plugin and its summary.

Durations mislead on a busy machine: the same file took 48 s in one run of ``make test`` and
178 s in another, as the other worker's load came and went. CPU seconds do not: each pytest
process (each xdist worker) moves itself into a cgroup of its own at start, so everything it
starts later (Ray's raylets and actors, control planes, S3, kubectl) is counted with it, and each
test is charged what its worker's cgroup used from its setup to its teardown (a session
fixture's start and end land on the test that started or ended it; a cluster idling under a test,
on that test). Containers the kubelet starts live in the kubelet's cgroups: not counted.

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


class CpuReport:
    """Appends one JSON line per test: ``{"test", "cpu_s", "wall_s", "worker"}``."""

    def __init__(self, out: Path, worker: str) -> None:
        self.out, self.worker = out, worker
        self.cgroup = _Cgroup(f"rltrainer-tests-{os.getpid()}")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):  # noqa: ARG002
        cpu, wall = self.cgroup.usage(), time.monotonic()
        yield
        line = {
            "test": item.nodeid,
            "cpu_s": round(self.cgroup.usage() - cpu, 2),
            "wall_s": round(time.monotonic() - wall, 2),
            "worker": self.worker,
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


def _table(first: str, items: list) -> list[str]:
    rows = [f"| {first} | CPU s | worker s | tests |", "|---|---:|---:|---:|"]
    rows += [f"| {name} | {cpu:,.0f} | {wall:,.0f} | {count:.0f} |" for name, (cpu, wall, count) in items]
    return rows


def summary(lines: list[dict]) -> str:
    """Per tier, then the 25 costliest files: CPU seconds, wall (worker) seconds, tests."""
    tiers: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for line in lines:
        for key, table in ((tier_of(line["test"]), tiers), (line["test"].split("::")[0], files)):
            table[key][0] += line["cpu_s"]
            table[key][1] += line["wall_s"]
            table[key][2] += 1
    total = [sum(values[i] for values in tiers.values()) for i in range(3)]
    by_cpu = sorted(tiers.items(), key=lambda item: -item[1][0])
    rows = [*_table("tier", [*by_cpu, ("all", total)]), ""]
    rows += _table("file", sorted(files.items(), key=lambda item: -item[1][0])[:25])
    return "\n".join(rows)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.cpu_report FILE (the JSON lines of RLTRAINER_TEST_CPU_REPORT)")
    with open(sys.argv[1]) as found:
        print(summary([json.loads(line) for line in found if line.strip()]))
