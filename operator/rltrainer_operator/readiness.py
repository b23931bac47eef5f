"""The readiness endpoint: ``GET /readyz`` answers 200 while the operator can work, else 503 with why.

Liveness stays kopf's (``--liveness``): a Pod whose operator runs but lacks an RBAC rule is alive
(a restart would not help) and not ready, which ``kubectl get pods`` shows. Served on every
interface (the kubelet asks the Pod's address); while its replica follows, the leader elector
answers 200 on the same port (``leader_election``: a standby is ready to take over).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PATH = "/readyz"


class ReadinessServer:
    """Serves ``PATH`` on ``port`` until ``close``: 200 ``ok`` while ``problem()`` is None, else
    503 with the problem."""

    def __init__(self, port: int, problem: Callable[[], str | None]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?")[0] != PATH:
                    self.send_error(404)
                    return
                found = problem()
                body = (found or "ok").encode()
                self.send_response(503 if found else 200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("", port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="readiness", daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
