"""A checkpoint before the pods go: a pod's ``preStop`` hook asks the training driver for one.

When Kubernetes deletes a Ray pod (Kueue preemption, ``kubectl drain``, a spot node going), the
kubelet runs the container's ``preStop`` hook and waits for it (up to the pod's
``terminationGracePeriodSeconds``) before it sends SIGTERM, which stops Ray at once. The hook is::

    python -m rltrainer.preemption hook [--address HOST:PORT] [--timeout SECONDS] [--reason TEXT]

It writes a request into Ray's GCS key-value store (namespace ``rltrainer``), reachable from
every pod of the cluster, and waits until the driver (``run_experiment``, through
``PreemptionWatch``) answers that its checkpoint is written, or failed; then it prints one
line and exits 0, always. The driver checks for requests between iterations: the iteration in
flight finishes, then ``algo.save()`` runs, so the grace period must cover one iteration plus
one checkpoint (``progress.json`` says how long each takes: ``seconds_per_iteration``,
``seconds_per_checkpoint``). A SIGTERM sent to the driver process itself does the same (a
second SIGTERM acts as it did before); Ctrl-C stays a ``KeyboardInterrupt``.

The hook's GCS is ``--address``, else ``$FQ_RAY_IP:$RAY_PORT`` (a KubeRay worker pod), else
``127.0.0.1:$RAY_PORT`` (the head pod; ``RAY_PORT`` defaults to 6379), and it waits at most
``--timeout``, else ``$RLTRAINER_PREEMPTION_TIMEOUT_S``, else 600 s: give it a little less than
the grace period. It connects with the Ray container's environment, so a cluster with token
authentication (``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN``) is answered as Ray's own clients
are. A driver started as a Ray job is waited for until its job's end is recorded (after its
last line), so the pod does not take the job's final status with it.

The keys (values are JSON objects):

- ``preemption/driver/<driver id>``: a driver is watching (its Ray job id, pid, host, the
  iteration, timings), written when training starts, refreshed every iteration, removed when
  it ends. A driver whose Ray job is dead counts as gone, so a key left by a killed driver
  never makes a hook wait.
- ``preemption/request/<driver id>``: the first hook's request to that driver (pod, reason,
  time); later hooks (every pod of a deleted cluster runs one) leave it as it is.
- ``preemption/result/<driver id>``: the driver's answer: ``outcome`` is ``checkpointed``,
  ``failed`` or ``ended`` (it finished otherwise), with the checkpoint and timings.

This package imports no torch and Ray only when it talks to the GCS, so the hook starts in a
fraction of a second; without a reachable GCS it does not import Ray at all.
"""

from rltrainer.preemption.gcs import (
    DEFAULT_RAY_PORT,
    DRIVER_PREFIX,
    EXIT_PREEMPTED,
    NAMESPACE,
    PREEMPTED_LINE_PREFIX,
    REQUEST_PREFIX,
    RESULT_PREFIX,
    GcsKeys,
    GcsUnavailableError,
    default_gcs_address,
    pod_name,
    preempted_line,
)
from rltrainer.preemption.hook import DEFAULT_TIMEOUT_S, TIMEOUT_ENV, HookOutcome, main, request_checkpoint
from rltrainer.preemption.watch import PreemptionRequest, PreemptionWatch

__all__ = [
    "DEFAULT_RAY_PORT",
    "DEFAULT_TIMEOUT_S",
    "DRIVER_PREFIX",
    "EXIT_PREEMPTED",
    "NAMESPACE",
    "PREEMPTED_LINE_PREFIX",
    "REQUEST_PREFIX",
    "RESULT_PREFIX",
    "TIMEOUT_ENV",
    "GcsKeys",
    "GcsUnavailableError",
    "HookOutcome",
    "PreemptionRequest",
    "PreemptionWatch",
    "default_gcs_address",
    "main",
    "pod_name",
    "preempted_line",
    "request_checkpoint",
]
