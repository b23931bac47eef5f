"""The operator of a simulated cluster (``testing.sim_cluster``): the real one, with its Ray stand-in.

``SimulatedCluster.operator()`` runs ``kopf run --standalone -m rltrainer_operator.testing.sim_operator``
in a process of its own, with the arguments and environment the Helm chart gives the operator:
the real kopf runtime and the real handlers (importing this module registers them), its own API
client, timers, watches, metrics and logs. One thing differs, because Ray does not run in the
simulated Pods and nothing answers at a head's address:

- **stand-in**: every call to the Ray job API of the head at ``http://<host>:<port>`` (the
  address the operator reads from KubeRay's RayCluster status, as always) goes to
  ``$RLTRAINER_SIM_JOB_API/heads/<host>:<port>`` instead: one ``FakeRayJobs`` answers for every
  head and records the address each job was sent to;
- **stand-in**: each experiment's progress (the driver's ``progress.json``, which the operator
  reads from S3 once per tick) is read from ``$RLTRAINER_SIM_JOB_API/progress/<namespace>/<name>``,
  one small GET as the S3 read is.

Never import this module anywhere else: its import registers a startup handler in kopf's
default registry, which would put the stand-ins into any operator run in that process.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import kopf

import rltrainer_operator.handlers  # noqa: F401 - registers the operator's handlers
from rltrainer_operator.models import ExperimentSpec
from rltrainer_operator.ray_jobs import RayJobClient

#: Where the simulated cluster's ``FakeRayJobs`` listens (``http://127.0.0.1:PORT``); the same
#: name as ``sim_cluster.JOB_API_VARIABLE`` (which must not import this module).
JOB_API_VARIABLE = "RLTRAINER_SIM_JOB_API"
#: As the S3 progress read's own bounds (``progress._QUICK``).
PROGRESS_TIMEOUT_S = 5


def job_client(address: str, **options: Any) -> RayJobClient:
    """The operator's ``RayJobClient`` for the head at ``address``, sent through the fake."""
    head = urllib.parse.urlsplit(address).netloc
    return RayJobClient(f"{os.environ[JOB_API_VARIABLE]}/heads/{head}", **options)


def read_progress(_spec: ExperimentSpec, namespace: str, name: str) -> dict[str, Any] | None:
    """The experiment's ``progress.json`` as the fake reports it (None: none written yet)."""
    url = f"{os.environ[JOB_API_VARIABLE]}/progress/{namespace}/{name}"
    try:
        with urllib.request.urlopen(url, timeout=PROGRESS_TIMEOUT_S) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


@kopf.on.startup()
def use_the_stand_ins(memo: kopf.Memo, **_: Any) -> None:
    """After the operator's own startup (which makes the reconciler): the two stand-ins."""
    if memo.get("reconciler") is None:
        raise kopf.TemporaryError("waiting for the operator's startup", delay=0.5)
    memo.reconciler.job_client = job_client
    memo.reconciler.read_progress = read_progress
