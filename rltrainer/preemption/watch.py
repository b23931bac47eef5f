"""The driver's side: ``PreemptionWatch`` notices a hook's request or a SIGTERM between
iterations, and answers the hooks (see the package's doc)."""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import signal
import sys
import threading
import time
import uuid
from typing import Any

from rltrainer.preemption.gcs import DRIVER_PREFIX, REQUEST_PREFIX, RESULT_PREFIX, GcsKeys, pod_name

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class PreemptionRequest:
    """A request to checkpoint and stop: a hook's (through the GCS) or a SIGTERM's."""

    reason: str
    pod: str
    requested_at: float
    """When it was asked (``time.time()`` of the asking pod)."""
    noticed_at: float = 0.0
    """When the driver saw it (between iterations)."""


class PreemptionWatch:
    """The driver's side: notices a hook's request or a SIGTERM, and answers the hooks.

    ``start()`` installs a SIGTERM handler (in the main thread only; a second SIGTERM acts as
    before) and, when this process is connected to Ray, registers the driver in the GCS.
    ``poll()`` between iterations returns the request, if any. ``iteration_done()`` keeps the
    timings (and refreshes the GCS record), ``answer()`` tells the hooks, ``close()`` undoes
    ``start()``. Ctrl-C (SIGINT) is left alone: it stays a ``KeyboardInterrupt``.
    """

    def __init__(self, experiment: str = "") -> None:
        self.experiment = experiment
        self.id = uuid.uuid4().hex[:16]
        self.record: dict[str, Any] = {}
        self.gcs: GcsKeys | None = None
        self._signalled: PreemptionRequest | None = None
        self._previous_handler: Any = None
        self._installed = False
        self._answered = False
        self._gcs_failing = False
        self._iteration_s: collections.deque[float] = collections.deque(maxlen=10)
        self._checkpoint_s: float | None = None

    def start(self) -> PreemptionWatch:
        main_thread = threading.current_thread() is threading.main_thread()
        if main_thread and signal.getsignal(signal.SIGTERM) != signal.SIG_IGN:  # ignored: stays so
            self._previous_handler = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._on_sigterm)
            self._installed = True
        ray = sys.modules.get("ray")  # not imported: not connected
        if ray is None or not ray.is_initialized():
            return self
        from ray.experimental.internal_kv import internal_kv_get_gcs_client

        client = internal_kv_get_gcs_client()
        if client is None:  # Ray Client mode: no GCS client in this process
            return self
        self.gcs = GcsKeys(client)
        self.record = {
            "job_id": ray.get_runtime_context().get_job_id(),
            "pid": os.getpid(),
            "host": pod_name(),
            "experiment": self.experiment,
            "submitted": "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ,  # a Ray job's entrypoint
            "started_at": time.time(),
        }
        self._refresh()
        return self

    def _on_sigterm(self, _signum: int, _frame: Any) -> None:
        self._signalled = PreemptionRequest("SIGTERM", pod_name(), time.time())
        self._restore_handler()  # a second SIGTERM acts as before

    def poll(self) -> PreemptionRequest | None:
        """The request to act on now, if any (a SIGTERM's first, else a hook's)."""
        found = self._signalled
        if found is None and self.gcs is not None:
            asked = self._gcs_call(self.gcs.get, REQUEST_PREFIX + self.id)
            if asked:
                found = PreemptionRequest(
                    str(asked.get("reason", "preStop")),
                    str(asked.get("pod", "")),
                    float(asked["requested_at"]),
                )
        if found is not None:
            found.noticed_at = found.noticed_at or time.time()
            logger.warning(
                "preemption requested (%s, by %s): checkpointing and stopping", found.reason, found.pod
            )
        return found

    def iteration_done(self, result: dict[str, Any], wall_s: float) -> None:
        """Count an iteration's time (a periodic checkpoint in it counts as a checkpoint's)."""
        step_s = result.get("time_this_iter_s")
        if "checkpoint_path" in result and isinstance(step_s, int | float):
            self._checkpoint_s = max(wall_s - step_s, 0.0)
            wall_s = step_s
        self._iteration_s.append(wall_s)
        self.record["iteration"] = result.get("training_iteration")
        self._refresh()

    def checkpoint_done(self, seconds: float) -> None:
        self._checkpoint_s = seconds

    def timings(self) -> dict[str, float | None]:
        """``seconds_per_iteration`` (the longest of the last 10) and ``seconds_per_checkpoint``
        (the last save): a grace period shorter than their sum can lose the checkpoint."""
        longest = max(self._iteration_s) if self._iteration_s else None
        return {
            "seconds_per_iteration": None if longest is None else round(longest, 3),
            "seconds_per_checkpoint": None if self._checkpoint_s is None else round(self._checkpoint_s, 3),
        }

    def answer(
        self, request: PreemptionRequest, checkpoint: str | None, iteration: int, error: str | None = None
    ) -> dict[str, Any]:
        """Tell the hooks that the checkpoint is written (or failed); returns the record said."""
        written_at = time.time() if error is None else None
        preempted = {
            "reason": request.reason,
            "pod": request.pod,
            "requested_at": request.requested_at,
            "noticed_at": request.noticed_at,
            "checkpoint_written_at": written_at,
            "iteration": iteration,
            "seconds_to_checkpoint": None
            if written_at is None
            else round(written_at - request.requested_at, 3),
            "checkpoint": checkpoint,
            "error": error,
        }
        self._tell("failed" if error is not None else "checkpointed", preempted)
        return preempted

    def close(self, checkpoint: str | None = None) -> None:
        """Restore the SIGTERM handler; answer a request not acted on, and leave the GCS."""
        if self._installed and signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            self._restore_handler()
        self._installed = False
        if self.gcs is None:
            return
        if not self._answered and self._gcs_call(self.gcs.get, REQUEST_PREFIX + self.id):
            self._tell("ended", {"checkpoint": checkpoint})
        self._gcs_call(self.gcs.delete, DRIVER_PREFIX + self.id)  # after the answer: hooks read it first
        self._gcs_call(self.gcs.delete, REQUEST_PREFIX + self.id)
        self.gcs = None

    def _restore_handler(self) -> None:
        previous = self._previous_handler  # None: one not installed from Python
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)

    def _tell(self, outcome: str, said: dict[str, Any]) -> None:
        self._answered = True
        if self.gcs is not None:
            answer = {"outcome": outcome, "driver": self.id, **said, **self.timings()}
            self._gcs_call(self.gcs.put, RESULT_PREFIX + self.id, answer)

    def _refresh(self) -> None:
        if self.gcs is not None:
            record = {**self.record, **self.timings(), "heartbeat_at": time.time()}
            self._gcs_call(self.gcs.put, DRIVER_PREFIX + self.id, record)

    def _gcs_call(self, method: Any, *args: Any) -> Any:
        """A GCS call that may fail: training goes on (warned once until it works again)."""
        try:
            value = method(*args)
        except Exception as err:  # noqa: BLE001 - requests through the GCS are a bonus, not a need
            if not self._gcs_failing:
                logger.warning("preemption watch: no answer from the GCS (tried every iteration): %s", err)
            self._gcs_failing = True
            return None
        self._gcs_failing = False
        return value
