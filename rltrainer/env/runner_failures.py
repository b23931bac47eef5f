"""What ``EnvRunnerGroup`` does when remote env runners fail (RLlib's fault tolerance): results
collected with a timeout, failures counted against ``num_consecutive_env_runner_failures_tolerance``,
failed runners dropped or restarted in their bundle after ``delay_between_env_runner_restarts_s``
with the current weights, filter and curriculum tasks.

A runner's start-up (its process importing torch, building its envs and model) is not counted
against the timeouts meant for a running one: a new runner only samples once it has answered its
first health probe, and it has ``env_runner_startup_timeout_s`` to do so. Training goes on with
the other runners while a replacement starts (on a busy machine a start can take minutes; a
replacement killed for being slow would only start again).
"""

from __future__ import annotations

import logging
import time
from typing import Any, NamedTuple

import numpy as np

from rltrainer.env.env_runner import EnvRunner
from rltrainer.errors import CallbackError, NumericalError, WorkerError

logger = logging.getLogger(__name__)


class Starting(NamedTuple):
    """A runner started and not yet answering its first health probe."""

    actor: Any
    probe: Any  # the ping's object ref
    started_at: float
    replacement: bool  # replaces a failed runner (gets the current weights, filter and tasks)


class RunnerFailures:
    """``EnvRunnerGroup``'s failure handling (the group inherits it; its state, ``_remote``,
    ``_restart_at``, ``_failures`` and the curriculum's, is the group's)."""

    config: Any
    _remote: list[Any]
    _restart_at: dict[int, float]
    _failures: Any
    _starting: dict[int, Starting]  # by runner index
    num_restarts: int

    def _live(self) -> dict[int, Any]:
        """Runners that can sample now, after starting replacements that are due (when none can,
        waits for the next one to come up)."""
        while True:
            self._restart_due()
            live = {i: runner for i, runner in enumerate(self._remote) if runner is not None}
            if live:
                return live
            if not self._restart_at and not self._starting:
                raise WorkerError("every env runner has failed and none is being restarted")
            self._wait_for_replacement(float("inf"))

    @property
    def restarting(self) -> bool:
        """Whether a failed runner's replacement is due or starting (a round with no sample is
        then expected, not a sign of runners that stopped answering)."""
        return bool(self._restart_at or self._starting)

    def _wait_for_replacement(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for a replacement to come up or become due."""
        wait = min(timeout, self.config.env_runner_health_probe_timeout_s)
        if self._restart_at:
            wait = min(wait, max(0.0, min(self._restart_at.values()) - time.monotonic()))
        if self._starting:
            self._admit_started(wait)
        else:
            time.sleep(wait)

    def _restart_due(self) -> None:
        """Start the replacements that are due and probe them for up to
        ``env_runner_health_probe_timeout_s`` (they usually join in this round); one still
        starting then is probed again each round, as RLlib re-probes unhealthy runners, not
        killed: on a busy machine a start can outlast the probe."""
        import ray

        started = []
        for index, due in sorted(self._restart_at.items()):
            if due > time.monotonic():
                continue
            del self._restart_at[index]
            self._start(index, replacement=True)
            started.append(self._starting[index].probe)
        if started:
            cfg = self.config
            probe = min(cfg.env_runner_health_probe_timeout_s, cfg.env_runner_startup_timeout_s)
            ray.wait(started, num_returns=len(started), timeout=probe)
        self._admit_started(0.0)

    def probe_unhealthy_env_runners(self, timeout_seconds: float | None = None) -> list[int]:
        """Start the replacements that are due and wait up to ``timeout_seconds`` (default
        ``env_runner_health_probe_timeout_s``) for the starting ones to answer their health
        probe; returns the worker indices of those that came up (RLlib's method)."""
        before = {i for i, runner in enumerate(self._remote) if runner is not None}
        self._restart_due()
        wait = self.config.env_runner_health_probe_timeout_s if timeout_seconds is None else timeout_seconds
        deadline = time.monotonic() + wait
        while self._starting and deadline > time.monotonic():
            self._admit_started(deadline - time.monotonic())
        return [
            self._worker_index(i)
            for i, runner in enumerate(self._remote)
            if runner is not None and i not in before
        ]

    probe_unhealthy_workers = probe_unhealthy_env_runners  # the old API stack's name

    def _start(self, index: int, replacement: bool) -> None:
        actor = self._create_actor(index)
        self._starting[index] = Starting(actor, actor.ping.remote(), time.monotonic(), replacement)

    def _await_first_start(self) -> None:
        """Block until every runner started at build has come up or failed (RLlib's
        ``validate_env_runners_after_construction``): sampling timeouts start after start-up, and
        every runner samples from the first round on, so results do not depend on start-up times."""
        started = time.monotonic()
        while self._starting:
            self._admit_started(self.config.env_runner_health_probe_timeout_s)
            if self._starting:
                logger.info(
                    "waiting for env runner(s) %s to start (%.0f s so far; env_runner_startup_timeout_s=%g)",
                    sorted(self._worker_index(i) for i in self._starting),
                    time.monotonic() - started,
                    self.config.env_runner_startup_timeout_s,
                )

    def _admit_started(self, wait: float) -> None:
        """Runners that answered their first probe (waiting at most ``wait`` s for one) take calls
        from now on; one that died starting, or is still starting after
        ``env_runner_startup_timeout_s``, is a failure."""
        if not self._starting:
            return
        import ray

        limit = self.config.env_runner_startup_timeout_s
        first_deadline = min(start.started_at for start in self._starting.values()) + limit
        wait = max(0.0, min(wait, first_deadline - time.monotonic()))
        by_ref = {start.probe: index for index, start in self._starting.items()}
        ready, _ = ray.wait(list(by_ref), num_returns=1, timeout=wait)
        if ready:
            ready, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=0)
        failures: dict[int, str] = {}
        for ref in ready:
            index = by_ref[ref]
            start = self._starting.pop(index)
            _, failure = self._result_or_failure(ref, "start-up")
            if failure is not None:
                ray.kill(start.actor)
                failures[index] = failure
            else:
                self._join(index, start)
        for index, start in list(self._starting.items()):
            if time.monotonic() - start.started_at > limit:
                del self._starting[index]
                ray.kill(start.actor)
                failures[index] = f"did not start within env_runner_startup_timeout_s={limit:g}"
        self._handle_failures(failures)

    def _join(self, index: int, start: Starting) -> None:
        """A runner that came up takes calls; a replacement first gets the current weights,
        filter and curriculum tasks."""
        import ray

        actor = start.actor
        self._remote[index] = actor
        if not start.replacement:
            return
        if self._runner_class is not EnvRunner:  # multi-agent: every policy's, frozen ones too
            actor.set_weights.remote(ray.put(_as_numpy(self._local.get_weights())))
        elif self._weights_ref is not None:
            actor.set_weights.remote(self._weights_ref)
        state = self._local.get_filter_state()
        if state:
            actor.set_filter_state.remote(ray.put(state))
        if index in self._env_tasks:  # the curriculum goes on where its predecessor was...
            actor.set_env_tasks.remote(self._env_tasks[index])
        if index in self._missed_task_call:  # ...and catches up with the call it missed
            actor.apply_env_task_fn.remote(self._env_task_fn, self._task_results)
        self.num_restarts += 1
        logger.warning(
            "env runner %d restarted (%d restarts so far)", self._worker_index(index), self.num_restarts
        )

    def _handle_failures(self, failures: dict[int, str]) -> None:
        import ray

        if not failures:
            return
        ft = self.config
        if not ft.restart_failed_env_runners and not ft.ignore_env_runner_failures:
            first = min(failures)
            ids = sorted(self._worker_index(i) for i in failures)
            raise WorkerError(f"env runner(s) {ids} {failures[first]}")
        for index, reason in sorted(failures.items()):
            self._failures[index] += 1
            if self._failures[index] >= ft.num_consecutive_env_runner_failures_tolerance:
                raise WorkerError(
                    f"env runner {self._worker_index(index)} failed {self._failures[index]} times in a row "
                    f"(num_consecutive_env_runner_failures_tolerance={ft.num_consecutive_env_runner_failures_tolerance})"
                    f"; last: {reason}"
                )
            if self._remote[index] is not None:
                ray.kill(self._remote[index])
                self._remote[index] = None
            if ft.restart_failed_env_runners:
                pending = len(self._restart_at) + len(self._starting)
                if self.num_restarts + pending >= ft.max_num_env_runner_restarts:
                    raise WorkerError(
                        f"env runner {self._worker_index(index)} {reason}, and max_num_env_runner_restarts="
                        f"{ft.max_num_env_runner_restarts} restarts are used up"
                    )
                self._restart_at[index] = time.monotonic() + ft.delay_between_env_runner_restarts_s
                logger.warning(
                    "env runner %d %s; restarting it in %.0f s",
                    self._worker_index(index),
                    reason,
                    ft.delay_between_env_runner_restarts_s,
                )
            else:
                logger.warning("env runner %d %s; going on without it", self._worker_index(index), reason)

    def _collect(
        self,
        refs: dict[int, Any],
        what: str,
        timeout: float | None = -1.0,
        timeout_setting: str = "sample_timeout_s",
    ) -> tuple[dict, dict]:
        """Results of remote calls by runner index, and why the others failed (died, raised, silent)."""
        import ray

        timeout = self.config.sample_timeout_s if timeout == -1.0 else timeout
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
        ready = set(ready)
        results, failures = {}, {}
        for index, ref in refs.items():
            if ref not in ready:
                failures[index] = f"did not finish {what} within {timeout_setting}={timeout}"
                continue
            result, failure = self._result_or_failure(ref, what)
            if failure is None:
                results[index] = result
            else:
                failures[index] = failure
        return results, failures

    @staticmethod
    def _result_or_failure(ref: Any, what: str) -> tuple[Any, str | None]:
        """``(the value of a finished call, None)``, or ``(None, why the runner failed)``. Errors
        of the user's callbacks and non-finite env data are raised: restarting would not help."""
        import ray
        from ray.exceptions import ObjectLostError, RayActorError, RayTaskError

        try:
            return ray.get(ref), None
        except CallbackError as err:  # the user's code, not the runner, failed: no restart
            raise CallbackError(str(getattr(err, "cause", None) or err)) from None
        except NumericalError as err:  # the env's data, not the runner: no restart either
            raise NumericalError(str(getattr(err, "cause", None) or err)) from None
        except RayActorError as err:
            return None, f"died during {what}: {_first_line(err)}"
        except ObjectLostError as err:  # its result lost with its node: the runner's node is gone
            return None, f"lost its result of {what} with its node: {_first_line(err)}"
        except RayTaskError as err:
            return None, f"raised during {what}: {_first_line(err.cause if err.cause else err)}"


def _as_numpy(weights: dict[str, Any]) -> dict[str, Any]:
    """Weights as numpy arrays for the object store (``{policy id: weights}`` nested, too)."""
    return {
        name: _as_numpy(value) if isinstance(value, dict) else np.asarray(value)
        for name, value in weights.items()
    }


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
