"""End-to-end tests: real local Ray clusters (``LocalKubeRay``), the real operator, a real S3
server (SeaweedFS; moto's only where a test injects a fault that only moto can, and says so).

All are marked ``e2e``. A plain ``pytest`` (``make test``) runs only those marked
``in_make_test``: the journey, shortened (it trains a fixed number of iterations instead of
until CartPole is solved: about 1.5 minutes), the fault matrix's storage rows and the harness's
unit tests; ``make e2e`` runs them all, the journey in full (about 15 minutes on 2 cores);
``pytest -m "not e2e"`` leaves every one out.
"""

from __future__ import annotations

import pytest

from tests.conftest import e2e_requested
from tests.e2e.helpers import wait_for_no_marked_processes


@pytest.fixture(scope="session")
def full_e2e(request) -> bool:
    """True under ``make e2e``; False in ``make test``, where tests marked ``in_make_test`` run
    a shorter version of themselves (the suite's time budget)."""
    return e2e_requested(request.config)


def pytest_collection_modifyitems(config, items):
    """Mark every test here ``e2e``; skip those not marked ``in_make_test`` unless asked for
    (``e2e_requested``)."""
    wanted = e2e_requested(config)
    skip = pytest.mark.skip(
        reason="end to end, about 15 min in all: make e2e (or pytest -m e2e, RLTRAINER_E2E=1)"
    )
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
            if not wanted and item.get_closest_marker("in_make_test") is None:
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind():
    """After the e2e tests: not one process started by a harness of this run may survive."""
    yield
    left = wait_for_no_marked_processes(10)
    assert not left, f"local KubeRay processes left behind: {left}"
