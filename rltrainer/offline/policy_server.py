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

import base64
import hmac
import ipaddress
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rltrainer.env.rollout import EpisodeStats
from rltrainer.errors import ConfigError
from rltrainer.offline.input_sources import SERVER_CONFIG_DEFAULTS, IOContext
from rltrainer.offline.rows import Piece, rollout_from_pieces

logger = logging.getLogger(__name__)

#: Open episodes a server keeps; starting one more closes the oldest (abandoned ones, mostly).
MAX_OPEN_EPISODES = 10_000
COMMANDS = (
    "START_EPISODE",
    "GET_ACTION",
    "LOG_ACTION",
    "LOG_RETURNS",
    "END_EPISODE",
    "COMPUTE_ACTION",
    "EVENTS",
    "GET_POLICY",
    "GET_WEIGHTS",
)


class RequestError(Exception):
    """A request the server refuses: ``status`` and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


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


# --- observations and actions on the wire -----------------------------------------------------
def obs_from_json(space: spaces.Space, value: Any) -> Any:
    """A JSON observation as the space holds it; ``ValueError`` saying what does not fit."""
    if isinstance(space, spaces.Dict):
        if not isinstance(value, dict) or set(value) != set(space.spaces):
            raise ValueError(f"the observation must be an object with keys {sorted(space.spaces)}")
        return {key: obs_from_json(sub, value[key]) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        if not isinstance(value, list) or len(value) != len(space.spaces):
            raise ValueError(f"the observation must be a list of {len(space.spaces)} parts")
        return tuple(obs_from_json(sub, part) for sub, part in zip(space.spaces, value, strict=True))
    try:
        array = np.asarray(value, dtype=space.dtype)
    except (TypeError, ValueError):
        raise ValueError(f"the observation must hold numbers of shape {space.shape}") from None
    if array.shape != space.shape:
        raise ValueError(
            f"the observation has shape {array.shape}; this policy's observations have shape {space.shape}"
        )
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise ValueError("the observation holds NaN or infinity")
    return array


def batch_of_one(space: spaces.Space, obs: Any) -> Any:
    """One observation as a batch of one, the way a vector env batches them."""
    out = gym.vector.utils.create_empty_array(space, n=1)
    return gym.vector.utils.concatenate(space, [obs], out)


def action_to_json(action: Any) -> Any:
    return (
        action.tolist()
        if isinstance(action, np.ndarray)
        else (action.item() if hasattr(action, "item") else action)
    )


def action_from_json(space: spaces.Space, value: Any) -> np.ndarray:
    """An env action from JSON, checked against the action space (a batch of one)."""
    try:
        action = np.asarray(value, dtype=space.dtype)
    except (TypeError, ValueError):
        raise ValueError(f"the action must be a number or list of shape {space.shape}") from None
    if action.shape != space.shape or not space.contains(action if action.shape else action.item()):
        raise ValueError(f"the action {value!r} is not in the action space {space}")
    return action[None]


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


# --- episodes -----------------------------------------------------------------------------------
class _Episode:
    """A client's episode: the rows it completed (each knows its next observation) and the
    step still waiting for its next observation."""

    __slots__ = ("episode_id", "length", "pending", "rows", "total_return", "training_enabled")

    def __init__(self, episode_id: str, training_enabled: bool) -> None:
        self.episode_id = episode_id
        self.training_enabled = training_enabled  # False: its steps are acted on, not recorded
        self.rows: list[tuple] = []  # (obs, action, logp, reward, new_obs, terminated, truncated)
        self.pending: list[Any] | None = None  # [obs, action, logp, reward so far]
        self.total_return = 0.0
        self.length = 0

    def observe(self, flat_obs: np.ndarray, terminated: bool = False, truncated: bool = False) -> None:
        """The next observation arrived: the pending step becomes a row."""
        if self.pending is not None and self.training_enabled:
            obs, action, logp, reward = self.pending
            self.rows.append((obs, action, logp, reward, flat_obs, terminated, truncated))
        self.pending = None


@dataclass
class _Policy:
    """What a service acts with: a policy, its observation filter and where it learns."""

    policy: Any
    observation_filter: Any
    explore: bool


class PolicyService:
    """The protocol's state machine, shared by the training server and the inference server."""

    def __init__(
        self,
        acting: _Policy,
        *,
        records: bool,
        token: str | None,
        max_request_bytes: int,
        max_queued_rows: int = SERVER_CONFIG_DEFAULTS["max_queued_rows"],
    ) -> None:
        self.acting = acting
        self.records = records  # False: inference only, logged data is accepted and dropped
        self.token = token
        self.max_request_bytes = max_request_bytes
        self.max_queued_rows = max_queued_rows  # completed rows kept for sample(); the oldest go first
        self.dropped_rows = 0
        self.lock = threading.Lock()  # episodes, the policy, the filter
        self.ready = threading.Condition(self.lock)
        self.episodes: dict[str, _Episode] = {}
        self.finished: deque[Any] = deque()  # Pieces of completed rows waiting for sample()
        self.finished_rows = 0
        self.ended: list[Any] = []  # EpisodeStats of ended episodes, for the results
        self.weights_version = 0

    # --- requests -------------------------------------------------------------------
    def check_token(self, header: str | None) -> None:
        if self.token is None:
            return
        scheme, _, given = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            raise RequestError(401, "a valid 'Authorization: Bearer <token>' header is needed")

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        command = request.get("command")
        if command not in COMMANDS:
            raise RequestError(400, f"unknown command {command!r}; commands: {', '.join(COMMANDS)}")
        if command == "EVENTS":
            events = request.get("events")
            if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
                raise RequestError(400, "EVENTS needs 'events', a list of command objects")
            if any(e.get("command") in ("EVENTS", "GET_ACTION", "GET_WEIGHTS", "GET_POLICY") for e in events):
                raise RequestError(
                    400, "EVENTS holds START_EPISODE, LOG_ACTION, LOG_RETURNS and END_EPISODE only"
                )
            return {"results": [self.handle(event) for event in events]}
        if command == "GET_POLICY":
            return self.describe()
        if command == "GET_WEIGHTS":
            return self.weights()
        with self.lock:
            return getattr(self, f"_{command.lower()}")(request)

    def _start_episode(self, request: dict[str, Any]) -> dict[str, Any]:
        episode_id = request.get("episode_id") or secrets.token_hex(8)
        if not isinstance(episode_id, str) or len(episode_id) > 128:
            raise RequestError(400, "episode_id must be a string of at most 128 characters")
        if episode_id in self.episodes:
            raise RequestError(400, f"episode {episode_id!r} is already running")
        training = self.records and bool(request.get("training_enabled", True))
        if len(self.episodes) >= MAX_OPEN_EPISODES:  # clients that never end theirs: the oldest goes
            oldest = self.episodes.pop(next(iter(self.episodes)))
            self._release(oldest)  # its completed steps are still learned from
            logger.warning(
                "policy server: more than %d open episodes; episode %r (the oldest) was closed",
                MAX_OPEN_EPISODES,
                oldest.episode_id,
            )
        self.episodes[episode_id] = _Episode(episode_id, training)
        return {"episode_id": episode_id}

    def _get_action(self, request: dict[str, Any]) -> dict[str, Any]:
        episode = self._episode(request)
        flat = self._observe(request, episode)
        out = self.acting.policy.compute(flat, self.acting.explore)
        episode.pending = [flat[0], out["actions"][0], float(out["action_logp"][0]), 0.0]
        return {"action": action_to_json(out["env_actions"][0])}

    def _compute_action(self, request: dict[str, Any]) -> dict[str, Any]:
        flat = self._flat_obs(request, update_filter=False)
        out = self.acting.policy.compute(flat, self.acting.explore)
        return {"action": action_to_json(out["env_actions"][0])}

    def _log_action(self, request: dict[str, Any]) -> dict[str, Any]:
        episode = self._episode(request)
        policy = self.acting.policy
        try:
            env_action = action_from_json(policy.action_space, request.get("action"))
        except ValueError as err:
            raise RequestError(400, str(err)) from None
        flat = self._observe(request, episode)
        if "policy_action" in request and "action_logp" in request:  # a local-mode client's own sample
            action = np.asarray(
                request["policy_action"], dtype=np.asarray(policy.from_env_actions(env_action)).dtype
            )
            logp = float(request["action_logp"])
        else:  # the application chose it: its log-probability under the current policy
            action = policy.from_env_actions(env_action)[0]
            logp = self._logp(flat, action)
        episode.pending = [flat[0], action, logp, 0.0]
        return {}

    def _log_returns(self, request: dict[str, Any]) -> dict[str, Any]:
        episode = self._episode(request)
        reward = request.get("reward")
        if isinstance(reward, bool) or not isinstance(reward, int | float) or not np.isfinite(reward):
            raise RequestError(400, f"reward must be a finite number, got {reward!r}")
        episode.total_return += reward
        if episode.pending is not None:  # rewards belong to the last action (RLlib's rule)
            episode.pending[3] += reward
        return {}

    def _end_episode(self, request: dict[str, Any]) -> dict[str, Any]:

        episode = self._episode(request)
        truncated = bool(request.get("truncated", False))
        flat = self._flat_obs(request, update_filter=False)
        episode.observe(flat[0], terminated=not truncated, truncated=truncated)
        del self.episodes[episode.episode_id]
        self._release(episode)
        self.ended.append(EpisodeStats(episode.total_return, episode.length))
        return {}

    # --- pieces ---------------------------------------------------------------------
    def _episode(self, request: dict[str, Any]) -> _Episode:
        episode = self.episodes.get(request.get("episode_id"))  # type: ignore[arg-type]
        if episode is None:
            raise RequestError(404, f"unknown episode_id {request.get('episode_id')!r}: START_EPISODE first")
        return episode

    def _observe(self, request: dict[str, Any], episode: _Episode) -> np.ndarray:
        flat = self._flat_obs(request, update_filter=episode.training_enabled)
        episode.observe(flat[0])
        episode.length += 1
        return flat

    def _flat_obs(self, request: dict[str, Any], update_filter: bool) -> np.ndarray:
        if "observation" not in request:
            raise RequestError(400, f"{request['command']} needs an 'observation'")
        policy = self.acting.policy
        try:
            obs = obs_from_json(policy.observation_space, request["observation"])
        except ValueError as err:
            raise RequestError(400, str(err)) from None
        flat = policy.preprocessor.transform(batch_of_one(policy.observation_space, obs))
        return self.acting.observation_filter(flat, update=update_filter)

    def _logp(self, flat: np.ndarray, action: Any) -> float:
        import torch

        policy = self.acting.policy
        with torch.inference_mode():
            dist = policy.dist_class(policy.torch_dist_inputs(torch.from_numpy(flat)))
            return float(dist.log_prob(torch.as_tensor(np.asarray(action)[None])).item())

    def _release(self, episode: _Episode) -> None:
        """Hand an episode's completed rows to the training side (a piece of its episode)."""
        if not episode.rows:
            return

        obs, actions, logp, rewards, new_obs, terminateds, truncateds = zip(*episode.rows, strict=True)
        columns = {
            "obs": np.stack(obs),
            "actions": np.stack(actions),
            "action_logp": np.asarray(logp, dtype=np.float32),
            "rewards": np.asarray(rewards, dtype=np.float32),
            "new_obs": np.stack(new_obs),
            "terminateds": np.asarray(terminateds, dtype=bool),
            "truncateds": np.asarray(truncateds, dtype=bool),
        }
        episode.rows = []
        self.finished.append(Piece(columns, 0, len(rewards)))
        self.finished_rows += len(rewards)
        while self.finished_rows > self.max_queued_rows and len(self.finished) > 1:
            oldest = self.finished.popleft()  # clients outpace training: keep the freshest steps
            self.finished_rows -= len(oldest)
            if self.dropped_rows == 0:
                logger.warning(
                    "policy server: clients send steps faster than training uses them; the oldest "
                    "beyond max_queued_rows=%d are dropped",
                    self.max_queued_rows,
                )
            self.dropped_rows += len(oldest)
        self.ready.notify_all()

    # --- the training side ---------------------------------------------------------------
    def next(self, num_rows: int, wait_log_s: float = 10.0) -> Any:
        """A ``Rollout`` of ``num_rows`` rows the clients' episodes completed; waits for them (open
        episodes give up the rows they completed, as pieces cut short)."""

        with self.ready:
            waited = time.monotonic()
            while self.finished_rows + sum(len(e.rows) for e in self.episodes.values()) < num_rows:
                if not self.ready.wait(timeout=1.0) and time.monotonic() - waited > wait_log_s:
                    have = self.finished_rows + sum(len(e.rows) for e in self.episodes.values())
                    logger.info("policy server: waiting for clients (%d of %d rows)", have, num_rows)
                    waited = time.monotonic()
            if self.finished_rows < num_rows:
                for episode in list(self.episodes.values()):
                    self._release(episode)
            taken, need = [], num_rows
            while need > 0:
                piece = self.finished.popleft()
                if len(piece) > need:
                    self.finished.appendleft(Piece(piece.columns, piece.start + need, piece.stop))
                    piece = Piece(piece.columns, piece.start, piece.start + need)
                taken.append(piece)
                need -= len(piece)
            self.finished_rows -= num_rows
            return rollout_from_pieces(taken)

    def pop_episodes(self) -> list[Any]:
        with self.lock:
            ended, self.ended = self.ended, []
        return ended

    def describe(self) -> dict[str, Any]:
        """What a local-mode client builds its policy copy from."""
        from rltrainer.env.spaces import space_to_json

        policy = self.acting.policy
        config = policy.config
        return {
            "algorithm": config.ALGORITHM or "PPO",
            "config": config.to_dict(),
            "observation_space": space_to_json(policy.observation_space),
            "action_space": space_to_json(policy.action_space),
        }

    def weights(self) -> dict[str, Any]:
        """The policy's weights (base64 safetensors) and observation filter state (lists)."""
        import torch
        from safetensors.torch import save

        with self.lock:
            tensors = {k: torch.as_tensor(np.array(v)) for k, v in self.acting.policy.get_weights().items()}
            filter_state = {
                k: np.asarray(v).tolist() for k, v in self.acting.observation_filter.get_state().items()
            }
        return {
            "weights": base64.b64encode(save(tensors)).decode(),
            "filter": filter_state,
            "version": self.weights_version,
        }


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
                "port (input_config={'port': ...}) or stop what holds it"
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
    "InferenceServer",
    "PolicyServer",
    "PolicyServerInput",
    "PolicyService",
    "RequestError",
    "serve_runner",
]
