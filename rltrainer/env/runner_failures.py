"""What ``EnvRunnerGroup`` does when remote env runners fail (RLlib's fault tolerance): results
collected with a timeout, failures counted against ``num_consecutive_env_runner_failures_tolerance``,
failed runners dropped or restarted in their bundle after ``delay_between_env_runner_restarts_s``
with the current weights, filter and curriculum tasks, and each restart's health probe.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from rltrainer.env.env_runner import EnvRunner
from rltrainer.errors import CallbackError, NumericalError, WorkerError

logger = logging.getLogger(__name__)


class RunnerFailures:
    """``EnvRunnerGroup``'s failure handling (the group inherits it; its state, ``_remote``,
    ``_restart_at``, ``_failures`` and the curriculum's, is the group's)."""

    config: Any
    _remote: list[Any]
    _restart_at: dict[int, float]
    _failures: Any
    num_restarts: int

    def _live(self) -> dict[int, Any]:
        """Runners that can sample now, after starting replacements that are due."""
        while True:
            self._restart_due()
            live = {i: runner for i, runner in enumerate(self._remote) if runner is not None}
            if live:
                return live
            if not self._restart_at:
                raise WorkerError("every env runner has failed and none is being restarted")
            time.sleep(max(0.0, min(self._restart_at.values()) - time.monotonic()))

    def _restart_due(self) -> None:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        for index, due in sorted(self._restart_at.items()):
            if due > time.monotonic():
                continue
            del self._restart_at[index]
            actor = self._create_actor(index)
            try:
                ray.get(actor.ping.remote(), timeout=self.config.env_runner_health_probe_timeout_s)
            except (GetTimeoutError, RayActorError) as err:
                ray.kill(actor)
                self._handle_failures({index: f"did not pass its health probe ({type(err).__name__})"})
                continue
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
            self._remote[index] = actor
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
                if self.num_restarts + len(self._restart_at) >= ft.max_num_env_runner_restarts:
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
