"""Prometheus metrics: experiments by phase, restarts, reconcile errors and latency."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from rltrainer_operator.models import Phase


class Metrics:
    """One registry per operator (tests build their own: no global state)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.experiments = Gauge(
            "rltrainer_experiments", "RLExperiments by phase", ["phase"], registry=self.registry
        )
        self.restarts = Counter(
            "rltrainer_experiment_restarts",
            "Experiment restarts (failed job or lost cluster)",
            registry=self.registry,
        )
        self.reconcile_errors = Counter(
            "rltrainer_reconcile_errors", "Reconciles that raised", registry=self.registry
        )
        self.reconcile_seconds = Histogram(
            "rltrainer_reconcile_duration_seconds", "Time per reconcile", registry=self.registry
        )
        self._phases: dict[str, str] = {}
        self._lock = threading.Lock()
        for phase in Phase:
            self.experiments.labels(phase.value).set(0)

    def observe_phase(self, uid: str, phase: str | None) -> None:
        """Record an experiment's phase (None: it is gone)."""
        with self._lock:
            if phase is None:
                self._phases.pop(uid, None)
            else:
                self._phases[uid] = phase
            counts = {p.value: 0 for p in Phase}
            for value in self._phases.values():
                counts[value] = counts.get(value, 0) + 1
            for value, count in counts.items():
                self.experiments.labels(value).set(count)

    def serve(self, port: int, host: str) -> None:
        """Expose ``/metrics`` on ``host:port`` until ``close()`` (no-op for port 0)."""
        if port:
            self._server, _thread = start_http_server(port, addr=host, registry=self.registry)

    def close(self) -> None:
        server = getattr(self, "_server", None)
        if server is not None:
            server.shutdown()
            server.server_close()
            self._server = None
