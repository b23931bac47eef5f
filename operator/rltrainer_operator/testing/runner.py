"""Run the operator in a background thread of this process, against any API server.

For tests and benchmarks: the real kopf runtime with the real handlers, logged in with a
``kubeconfig`` file (a real API server: ``testing/envtest.py``; any identity, e.g. the chart's
service account). The ``memo`` is shared, so a test can reach the reconciler
(``runner.memo.reconciler``).

Its credentials reach kopf through the operator's own login handler (``handlers.login``: the
client ``startup`` makes from ``memo.kubeconfig``), as in production.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from pathlib import Path

import kopf

import rltrainer_operator.handlers  # noqa: F401 - registers the handlers
from rltrainer_operator.settings import Settings


class OperatorRunner:
    """``with OperatorRunner(kubeconfig="...", namespaces=["ml"]) as op:`` runs the operator until
    the block ends. ``namespaces=None`` watches every namespace (cluster-wide)."""

    def __init__(
        self,
        kubeconfig: str | Path,
        namespaces: list[str] | None = None,
        settings: Settings | None = None,
        timeout_s: float = 30,
    ) -> None:
        # Metrics and readiness off unless asked for: several runners may share a machine (and its
        # ports).
        settings = settings or dataclasses.replace(Settings.from_env(), metrics_port=0, readiness_port=0)
        # The namespaces it watches, as the chart tells the operator's Pod.
        settings = dataclasses.replace(settings, watch_namespaces=",".join(namespaces or ()))
        self.memo = kopf.Memo(kubeconfig=str(kubeconfig), settings=settings)
        self.namespaces = namespaces
        self.timeout_s = timeout_s
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="rltrainer-operator", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(
                kopf.operator(
                    standalone=True,
                    clusterwide=self.namespaces is None,
                    namespaces=self.namespaces or (),
                    memo=self.memo,
                    stop_flag=self._stop,
                    ready_flag=self._ready,
                )
            )
        except BaseException as err:  # reported by start()/stop()
            self._error = err
            self._ready.set()

    def start(self) -> OperatorRunner:
        self._thread.start()
        if not self._ready.wait(self.timeout_s):
            self.stop()
            raise TimeoutError(f"the operator did not start within {self.timeout_s}s")
        if self._error is not None:
            raise RuntimeError(f"the operator failed to start: {self._error!r}") from self._error
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"the operator did not stop within {self.timeout_s}s")

    def __enter__(self) -> OperatorRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
