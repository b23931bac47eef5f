"""memory.MemoryTrim: the heap glibc keeps free after a burst goes back to the system."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time

import pytest

from rltrainer_operator.memory import MemoryTrim

GLIBC = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")

#: A burst in a process of its own: 200 MiB of 1 KiB strings, one in a hundred kept (so the heap
#: cannot shrink from its top), the rest freed; the RSS and glibc's free bytes before and after.
BURST = """
import json, sys
from rltrainer_operator.memory import MemoryTrim

def rss():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS"))

burst = [("x" * 1000) + str(i) for i in range(200_000)]
kept = burst[::100]
del burst
trim = MemoryTrim(threshold=int(sys.argv[1]))
before = {"rss": rss(), "free": trim.free_bytes()}
trimmed = trim.trim()
print(json.dumps({"before": before, "trimmed": trimmed, "after": {"rss": rss(), "free": trim.free_bytes()}}))
"""


def burst(threshold: int) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", BURST, str(threshold)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@GLIBC
def test_the_free_heap_after_a_burst_goes_back_to_the_system():
    figures = burst(threshold=32 * 2**20)
    assert figures["before"]["free"] > 150 * 2**20, figures  # freed, and still resident:
    assert figures["before"]["rss"] > 200 * 2**20, figures
    assert figures["trimmed"], figures
    assert figures["before"]["rss"] - figures["after"]["rss"] > 150 * 2**20, figures


@GLIBC
def test_little_free_heap_is_kept_for_reuse():
    figures = burst(threshold=2**40)
    assert not figures["trimmed"] and figures["before"]["rss"] - figures["after"]["rss"] < 2**20, figures


def test_it_checks_every_interval_and_stops_when_closed():
    trim = MemoryTrim(interval_s=0.05)
    calls = []
    trim.trim = lambda: calls.append(1) or False
    trim.start()
    try:
        deadline = time.monotonic() + 10
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        trim.close()
    assert len(calls) >= 3 or trim.libc is None
    assert trim._thread is None or not trim._thread.is_alive()
