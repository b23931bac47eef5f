"""Work asked for by watch events, at most one run waiting per key (an experiment's uid).

KubeRay writes a RayCluster's status several times while it provisions, and each change wakes
its experiment's reconcile (``handlers.raycluster_changed``). Run as kopf's synchronous handler,
every change held a place in the thread pool's queue, and kopf's worker for that cluster kept
each later change (a whole RayCluster) in its own queue meanwhile: with a thousand clusters
provisioning at once, thousands of waiting calls and watch events made most of the operator's
peak memory (docs/benchmarks.md#scale). Here a change asks for a run; while one is asked for and
has not begun, a further ask is the same ask (the run reads the cluster once it begins, so it
sees every change made before that), as client-go's work queue keeps a key once however many
changes arrive.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

#: A run: it calls ``begin()`` once it reads what it works on (changes from then on ask again).
Work = Callable[[Callable[[], None]], None]


class CoalescingRunner:
    """Runs work in ``executor`` with at most one run per key waiting to begin."""

    def __init__(self, executor: concurrent.futures.Executor, what: str) -> None:
        self._executor = executor
        self._what = what
        self._waiting: set[str] = set()
        self._lock = threading.Lock()

    def ask(self, key: str, work: Work) -> bool:
        """Queue ``work`` unless a run for ``key`` is waiting to begin; whether it was queued.
        The run gets a copy of the caller's context (kopf's event posting lives there)."""
        with self._lock:
            if key in self._waiting:
                return False
            self._waiting.add(key)
        context = contextvars.copy_context()
        try:
            future = self._executor.submit(context.run, self._run, key, work)
        except RuntimeError:  # the executor is shut down: the operator is stopping
            self._discard(key)
            return False
        future.add_done_callback(self._log_failure)
        return True

    def waiting(self, key: str) -> bool:
        """Whether a run for ``key`` is queued and has not begun."""
        with self._lock:
            return key in self._waiting

    def _run(self, key: str, work: Work) -> None:
        begun = False

        def begin() -> None:
            nonlocal begun
            if not begun:
                begun = True
                self._discard(key)

        try:
            work(begin)
        finally:
            begin()  # a run that ended before it began (nothing to work on) frees its key too

    def _discard(self, key: str) -> None:
        with self._lock:
            self._waiting.discard(key)

    def _log_failure(self, future: concurrent.futures.Future) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            logger.error("%s failed", self._what, exc_info=error)


__all__ = ["CoalescingRunner", "Work"]
