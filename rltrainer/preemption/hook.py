"""The preStop hook: ``python -m rltrainer.preemption hook`` asks every driver watching the
cluster for a checkpoint and waits for the answers (see the package's doc)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from typing import Any

from rltrainer.preemption.gcs import (
    DEFAULT_RAY_PORT,
    DRIVER_PREFIX,
    REQUEST_PREFIX,
    RESULT_PREFIX,
    GcsKeys,
    GcsUnavailableError,
    default_gcs_address,
    pod_name,
)

#: The hook's default ``--timeout`` (seconds); else ``DEFAULT_TIMEOUT_S``.
TIMEOUT_ENV = "RLTRAINER_PREEMPTION_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 600.0
_POLL_S = 0.25  # the hook's polling interval
_JOB_ENDED = ("SUCCEEDED", "FAILED", "STOPPED")


@dataclasses.dataclass
class HookOutcome:
    """What a hook saw: ``status`` is ``no-gcs``, ``no-driver``, ``no-request``, ``checkpointed``, ``failed``,
    ``ended``, ``timed-out`` or ``lost-gcs``; ``line`` says it in one line."""

    status: str
    line: str
    checkpoint: str | None = None
    waited_s: float = 0.0


def request_checkpoint(
    address: str | None = None,
    timeout_s: float | None = None,
    reason: str = "preStop",
    pod: str | None = None,
    follow_s: float | None = None,
) -> HookOutcome:
    """The hook: ask every driver watching the cluster for a checkpoint and wait for their answers.

    Returns at once when no GCS answers or no driver is watching; else when every driver
    answered (checkpoint written or failed) or ended, or after ``timeout_s``. A driver started
    as a Ray job is also waited for until its job has ended, so that the job's final status and
    last line are recorded before the pod goes.

    ``follow_s`` (a worker pod's hook): ask nothing; wait up to ``follow_s`` for another pod's
    request (the head's, when the whole cluster goes: Kueue's preemption, a spot node with the
    head) and then for its answers as the asker does, so that this worker serves the iteration
    in flight until the checkpoint is written. With no request by then, return at once: a worker
    lost alone is replaced in the running job (env runner or learner restarts), no checkpoint
    or driver restart needed.
    """
    address = address or default_gcs_address()
    timeout_s = _default_timeout() if timeout_s is None else timeout_s
    start = time.monotonic()
    deadline = start + timeout_s
    try:
        gcs = GcsKeys.connect(address, min(timeout_s, 5.0))
        drivers = _live_drivers(gcs)
    except GcsUnavailableError as err:
        waited = time.monotonic() - start
        return HookOutcome(
            "no-gcs", f"rltrainer preemption hook: {err}: nothing to checkpoint (waited {waited:.1f} s)"
        )
    if not drivers:
        waited = time.monotonic() - start
        return HookOutcome(
            "no-driver",
            f"rltrainer preemption hook: no driver is watching on {address} (waited {waited:.1f} s)",
        )
    request = {"pod": pod or pod_name(), "reason": reason, "requested_at": time.time()}
    answers: dict[str, dict[str, Any]] = {}
    try:
        if follow_s is not None:
            if not _requested(gcs, drivers, min(start + follow_s, deadline)):
                waited = time.monotonic() - start
                return HookOutcome(
                    "no-request",
                    f"rltrainer preemption hook: no checkpoint was asked for within {follow_s:.0f} s: "
                    f"this pod goes alone (waited {waited:.1f} s)",
                )
        else:
            for driver_id in drivers:  # the first hook's request stays: it says who asked first
                gcs.put(REQUEST_PREFIX + driver_id, request, overwrite=False)
        while len(answers) < len(drivers) and time.monotonic() < deadline:
            for driver_id, record in drivers.items():
                if driver_id not in answers:
                    answer = _answer(gcs, driver_id, record)
                    if answer is not None:
                        answers[driver_id] = answer
            if len(answers) < len(drivers):
                time.sleep(_POLL_S)
        for driver_id, answer in answers.items():  # a submitted job: until its end is recorded
            if answer["outcome"] != "ended" and drivers[driver_id].get("submitted"):
                answer["exited"] = _wait_until_ended(gcs, drivers[driver_id]["job_id"], deadline)
    except Exception as err:  # noqa: BLE001 - the head went first: say what is known
        waited = time.monotonic() - start
        known = "".join(f"; {_said(i, drivers[i], answer, timeout_s)}" for i, answer in answers.items())
        line = f"rltrainer preemption hook: lost the GCS after {waited:.1f} s ({err}){known}"
        return HookOutcome("lost-gcs", line, _checkpoint(answers), waited)
    return _outcome(drivers, answers, time.monotonic() - start, timeout_s)


def _requested(gcs: GcsKeys, drivers: dict[str, dict[str, Any]], until: float) -> bool:
    """Whether another pod asked any of ``drivers`` for a checkpoint by ``until``: its request
    is there, or already taken (the driver's answer is there, or the driver has gone)."""
    while True:
        for driver_id in drivers:
            if (
                gcs.get(REQUEST_PREFIX + driver_id) is not None
                or gcs.get(RESULT_PREFIX + driver_id) is not None
            ):
                return True
            if gcs.get(DRIVER_PREFIX + driver_id) is None:
                return True
        if time.monotonic() >= until:
            return False
        time.sleep(_POLL_S)


def _default_timeout() -> float:
    try:
        return float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)
    except ValueError:
        return DEFAULT_TIMEOUT_S


def _live_drivers(gcs: GcsKeys) -> dict[str, dict[str, Any]]:
    """The drivers watching, by id; keys of drivers whose Ray job is dead are removed."""
    drivers = {}
    for key in gcs.keys(DRIVER_PREFIX):
        record = gcs.get(key)
        if record is None:
            continue
        if gcs.job_state(record.get("job_id", ""))[0]:
            drivers[key.removeprefix(DRIVER_PREFIX)] = record
        else:  # killed before it could remove its key
            gcs.delete(key)
    return drivers


def _answer(gcs: GcsKeys, driver_id: str, record: dict[str, Any]) -> dict[str, Any] | None:
    answer = gcs.get(RESULT_PREFIX + driver_id)
    if answer is not None:
        return answer
    if gcs.get(DRIVER_PREFIX + driver_id) is None or not gcs.job_state(record["job_id"])[0]:
        # Gone; its answer may have been written just before its key was removed.
        gcs.delete(REQUEST_PREFIX + driver_id)
        return gcs.get(RESULT_PREFIX + driver_id) or {"outcome": "ended"}
    return None


def _wait_until_ended(gcs: GcsKeys, job_id: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        alive, status = gcs.job_state(job_id)
        if not alive and (not status or status in _JOB_ENDED):
            return True
        time.sleep(_POLL_S)
    return False


def _outcome(
    drivers: dict[str, dict[str, Any]], answers: dict[str, dict[str, Any]], waited: float, timeout_s: float
) -> HookOutcome:
    said = [
        _said(driver_id, record, answers.get(driver_id), timeout_s) for driver_id, record in drivers.items()
    ]
    statuses = [answer["outcome"] for answer in answers.values()]
    statuses += ["timed-out"] * (len(drivers) - len(answers))
    status = next((s for s in ("timed-out", "failed", "ended") if s in statuses), "checkpointed")
    line = f"rltrainer preemption hook: {'; '.join(said)} (waited {waited:.1f} s)"
    return HookOutcome(status, line, _checkpoint(answers), waited)


def _checkpoint(answers: dict[str, dict[str, Any]]) -> str | None:
    return next((a.get("checkpoint") for a in answers.values() if a["outcome"] == "checkpointed"), None)


def _said(driver_id: str, record: dict[str, Any], answer: dict[str, Any] | None, timeout_s: float) -> str:
    if answer is None:
        pace = "".join(
            f"; {key.removeprefix('seconds_per_')}: {record[key]:.1f} s"
            for key in ("seconds_per_iteration", "seconds_per_checkpoint")
            if record.get(key) is not None
        )
        return (
            f"timed out after {timeout_s:.0f} s waiting for driver {driver_id} "
            f"(at iteration {record.get('iteration')}{pace})"
        )
    exited = {True: "; the driver exited", False: "; the driver had not exited"}.get(answer.get("exited"), "")
    if answer["outcome"] == "checkpointed":
        seconds = answer.get("seconds_to_checkpoint")
        after = f", {seconds:.1f} s after the request" if seconds is not None else ""
        at = f"at iteration {answer.get('iteration')}"
        return f"checkpoint {answer.get('checkpoint')} written {at}{after}{exited}"
    if answer["outcome"] == "failed":
        return f"the driver's checkpoint failed: {answer.get('error')}{exited}"
    newest = f"; its newest checkpoint: {answer['checkpoint']}" if answer.get("checkpoint") else ""
    return f"driver {driver_id} ended without a checkpoint for this request{newest}"


def main(argv: list[str] | None = None) -> int:
    """``python -m rltrainer.preemption hook ...``: prints one line; the exit status is always 0
    (a failing preStop hook only makes an event, and delays nothing useful)."""
    parser = argparse.ArgumentParser(
        prog="python -m rltrainer.preemption", description="Checkpoint before the pods go."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    hook = commands.add_parser(
        "hook",
        help="ask the training driver for a checkpoint; wait for it",
        description="Ask every training driver of this Ray cluster for a checkpoint and wait until "
        "it is written (or failed), the driver ended, or the timeout; exits 0 always.",
    )
    hook.add_argument(
        "--address",
        metavar="HOST:PORT",
        help="the Ray GCS (default: $FQ_RAY_IP:$RAY_PORT on a KubeRay worker pod, else "
        f"127.0.0.1:$RAY_PORT; RAY_PORT defaults to {DEFAULT_RAY_PORT})",
    )
    hook.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=float,
        help=f"wait at most this long (default: ${TIMEOUT_ENV}, else {DEFAULT_TIMEOUT_S:.0f})",
    )
    hook.add_argument("--reason", default="preStop", help="said in the driver's log and progress.json")
    hook.add_argument(
        "--follow",
        metavar="SECONDS",
        type=float,
        help="a worker pod's hook: ask nothing, but when another pod asks within SECONDS, wait "
        "for the checkpoint as it does (this pod then serves the iteration in flight)",
    )
    try:
        args = parser.parse_args(argv)
    except SystemExit:  # --help, or a usage error argparse printed
        return 0
    try:
        outcome = request_checkpoint(args.address, args.timeout, args.reason, follow_s=args.follow)
    except Exception as err:  # noqa: BLE001 - a preStop hook never fails the pod's deletion
        print(f"rltrainer preemption hook: error: {err!r}", flush=True)
        return 0
    print(outcome.line, flush=True)
    return 0
