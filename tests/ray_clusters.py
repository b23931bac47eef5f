"""Helpers for the suite's local Ray clusters (``ray.cluster_utils.Cluster``)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import ray
from ray.exceptions import RayActorError

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def checkout_on_pythonpath() -> Iterator[None]:
    """Processes started inside (a cluster's raylets, and the workers they start later) have the
    checkout on ``PYTHONPATH``, so actors import test helpers (``tests.envs``) by module path. A
    job ``runtime_env`` with it would start every worker through Ray's ``setup_worker.py`` first:
    ~0.5 s more CPU per actor."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        yield


def kill_actor(actor, within_s: float = 30) -> None:
    """``ray.kill`` and wait until the actor is gone: the kill is asynchronous, so a call sent
    just after it may still be served (seen in CI: a step after the kill succeeded)."""
    ray.kill(actor)
    wait_until_dead(actor, within_s)


def wait_until_dead(actor, within_s: float = 30) -> None:
    """Returns once ``actor`` no longer answers; fails if it still does after ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=within_s)
        except RayActorError:
            return
        assert time.monotonic() < deadline, f"{actor} still answers {within_s} s after the kill"
        time.sleep(0.05)
