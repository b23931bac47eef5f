"""The external application API's server: an application that owns its env asks a served policy
for actions and logs rewards over HTTP (RLlib's ``PolicyServerInput``), and what it logs is
training data.

Training: ``.offline_data(input_="server", input_config={"port": 9900})`` (or RLlib's form,
``input_=lambda ioctx: PolicyServerInput(ioctx, "127.0.0.1", 9900)``) makes every env runner
that samples for training serve its policy on ``port + worker_index - 1`` (the driver's runner
on ``port`` when there are no remote runners). Its ``sample()`` returns the rows the clients'
episodes produced, as a ``Rollout`` in the input reader's layout (``input_reader``), and the
episodes they ended. ``rltrainer serve CHECKPOINT`` serves a trained policy for inference
only (``InferenceServer``).

The wire protocol (the README's "External applications" documents it): ``POST /`` with a JSON
object ``{"command": ..., ...}``, answered with a JSON object (HTTP 200), or ``{"error": ...}``
with 400 (malformed), 401 (token), 404 (unknown episode), 411/413 (size), 405. ``GET /healthz``
answers ``{"status": "ok"}``. No pickle anywhere: observations and actions are JSON numbers
and lists, weights travel as base64 safetensors.

Security: the server binds 127.0.0.1 unless told otherwise; a bearer token (from the
environment variable ``token_env`` names, or ``token_file``; never from the config itself) is
required whenever one is set, and a server listening on any other address refuses to start
without one. Requests over ``max_request_bytes`` are refused unread.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rltrainer.errors import ConfigError
from rltrainer.offline.input_sources import SERVER_CONFIG_DEFAULTS, IOContext, is_port
from rltrainer.offline.policy_service import (
    COMMANDS,
    PolicyService,
    RequestError,
    _Policy,
    action_from_json,
    action_to_json,
    batch_of_one,
    obs_from_json,
)

logger = logging.getLogger(__name__)


def read_token(token_env: str | None, token_file: str | None) -> str | None:
    """The bearer token: the file's content (stripped) if ``token_file`` is set, else the
    environment variable ``token_env`` names (``None`` when neither holds one)."""
    if token_file:
        try:
            token = Path(token_file).expanduser().read_text().strip()
        except OSError as err:
            raise ConfigError(
                f"policy server: token_file {token_file!r} cannot be read ({err.strerror})"
            ) from None
        if not token:
            raise ConfigError(f"policy server: token_file {token_file!r} is empty")
        return token
    token = os.environ.get(token_env or "", "").strip()
    return token or None


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


# --- the HTTP side -----------------------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    server_version = "rltrainer-policy-server"
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Small request/answer pairs: Nagle's algorithm with delayed ACKs would add 40 ms to each.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        logger.debug("policy server %s: " + format, self.client_address[0], *args)

    def do_GET(self) -> None:  # noqa: N802 - http.server's hook names
        if self.path.rstrip("/") == "/healthz":
            self._reply(200, {"status": "ok"})
        else:
            self._reply(404, {"error": f"no such path {self.path!r}; POST commands to /, GET /healthz"})

    def do_POST(self) -> None:  # noqa: N802
        app: PolicyService = self.server.app  # type: ignore[attr-defined]
        try:
            app.check_token(self.headers.get("Authorization"))
            length = self.headers.get("Content-Length")
            if length is None:
                raise RequestError(411, "a Content-Length header is needed")
            try:
                size = int(length)
            except ValueError:
                raise RequestError(400, "Content-Length is not a number") from None
            if size > app.max_request_bytes:
                self.close_connection = True  # the body stays unread
                raise RequestError(
                    413, f"the request has {size} bytes; this server takes at most {app.max_request_bytes}"
                )
            body = self.rfile.read(size)
            try:
                request = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise RequestError(400, f"the body is not JSON ({err})") from None
            if not isinstance(request, dict):
                raise RequestError(400, "the body must be a JSON object with a 'command'")
            self._reply(200, app.handle(request))
        except RequestError as err:
            self._reply(err.status, {"error": str(err)})
        except Exception:  # a bug: the client gets a 500, the server keeps serving
            logger.exception("policy server: a request failed")
            self._reply(500, {"error": "internal error (see the server's log)"})

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self._headers_buffer.append(b"\r\n" + data)  # headers and body in one write
        self.flush_headers()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class PolicyServer:
    """A ``PolicyService`` listening on ``address:port`` in a background thread."""

    def __init__(
        self,
        acting: _Policy,
        *,
        address: str = "127.0.0.1",
        port: int = 9900,
        records: bool = True,
        token_env: str | None = SERVER_CONFIG_DEFAULTS["token_env"],
        token_file: str | None = None,
        max_request_bytes: int = SERVER_CONFIG_DEFAULTS["max_request_bytes"],
        max_queued_rows: int = SERVER_CONFIG_DEFAULTS["max_queued_rows"],
    ) -> None:
        if not is_port(port):
            raise ConfigError(f"policy server: port must be an integer from 0 to 65535, got {port!r}")
        token = read_token(token_env, token_file)
        if token is None and not _is_loopback(address):
            raise ConfigError(
                f"policy server: listening on {address} (not this machine only) needs a bearer token: put "
                f"it in the environment variable {token_env} or in a file named by token_file"
            )
        self.service = PolicyService(
            acting,
            records=records,
            token=token,
            max_request_bytes=max_request_bytes,
            max_queued_rows=max_queued_rows,
        )
        try:
            self.httpd = _HTTPServer((address, port), _Handler)
        except OSError as err:
            raise ConfigError(
                f"policy server: cannot listen on {address}:{port} ({err.strerror or err}); choose another "
                f"port ({'input_config={port: ...}' if records else '--port'}) or stop what holds it"
            ) from None
        self.httpd.app = self.service  # type: ignore[attr-defined]
        self.address, self.port = self.httpd.server_address[:2]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name=f"policy-server-{self.port}", daemon=True
        )
        self._thread.start()
        logger.info(
            "policy server listening on http://%s:%d (token %s)",
            self.address,
            self.port,
            "required" if token else "off",
        )

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def next(self, num_rows: int) -> Any:
        return self.service.next(num_rows)

    def pop_episodes(self) -> list[Any]:
        return self.service.pop_episodes()

    @property
    def lock(self) -> threading.Lock:
        return self.service.lock

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)


def _runner_policy(runner: Any) -> _Policy:
    """What a training server acts with: the env runner's policy and filter."""
    if getattr(runner.policy, "recurrent", False) or runner.policy.composite_actions is not None:
        raise ConfigError(
            "a policy server serves feed-forward policies with single (not Dict/Tuple) action spaces"
        )
    return _Policy(runner.policy, runner.filter, runner.config.explore)


class PolicyServerInput(PolicyServer):
    """RLlib's ``PolicyServerInput(ioctx, address, port)``: ``input_=lambda ioctx:
    PolicyServerInput(ioctx, "127.0.0.1", 9900)`` serves the env runner ``ioctx.worker`` (the
    port is used as given). Keyword options: ``token_env``, ``token_file``, ``max_request_bytes``,
    ``max_queued_rows``."""

    def __init__(
        self,
        ioctx: Any,
        address: str = "127.0.0.1",
        port: int = 9900,
        idle_timeout: float = 3.0,  # noqa: ARG002 - RLlib's signature (an HTTP server needs none)
        **options: Any,
    ) -> None:
        super().__init__(_runner_policy(ioctx.worker), address=address, port=port, **options)
        ioctx.worker.inference_lock = self.lock  # weight updates wait for requests being served


def serve_runner(runner: Any, options: dict[str, Any]) -> PolicyServer:
    """The training server of an env runner (``input_="server"``): on ``port + worker_index - 1``
    for a remote runner (RLlib's convention), on ``port`` for the driver's."""

    settings = {key: options.get(key, default) for key, default in SERVER_CONFIG_DEFAULTS.items()}
    port = int(settings.pop("port")) + max(runner.worker_index - 1, 0)
    address = settings.pop("address")
    settings["max_request_bytes"] = int(settings["max_request_bytes"])
    settings["max_queued_rows"] = int(settings["max_queued_rows"])
    ioctx = IOContext(None, runner.config, runner.worker_index, runner)
    return PolicyServerInput(ioctx, address, port, **settings)


class InferenceServer(PolicyServer):
    """``rltrainer serve``: a checkpoint's policy answering GET_ACTION / COMPUTE_ACTION; logged
    actions and rewards are accepted and dropped (it does not learn)."""

    def __init__(
        self, policy: Any, observation_filter: Any, *, explore: bool = False, **options: Any
    ) -> None:
        super().__init__(_Policy(policy, observation_filter, explore), records=False, **options)


__all__ = [
    "COMMANDS",
    "SERVER_CONFIG_DEFAULTS",
    "action_from_json",
    "action_to_json",
    "batch_of_one",
    "obs_from_json",
    "InferenceServer",
    "PolicyServer",
    "PolicyServerInput",
    "PolicyService",
    "RequestError",
    "serve_runner",
]
