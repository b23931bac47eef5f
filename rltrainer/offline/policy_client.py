"""``PolicyClient``: the application's side of the external application API (RLlib's).

The application owns its env and drives episodes::

    client = PolicyClient("http://127.0.0.1:9900", inference_mode="remote")
    episode_id = client.start_episode()
    obs, _ = env.reset()
    while True:
        action = client.get_action(episode_id, obs)
        obs, reward, terminated, truncated, _ = env.step(action)
        client.log_returns(episode_id, reward)
        if terminated or truncated:
            client.end_episode(episode_id, obs, truncated=truncated)
            break

``inference_mode="remote"``: every call is one request to the server. ``"local"``: the client
builds its own copy of the server's policy (``GET_POLICY``, then ``GET_WEIGHTS`` every
``update_interval`` seconds), acts without a round trip, and sends what happened in batches
(``EVENTS``: at each episode's end and at every weight pull). Only the standard library's
HTTP client and JSON travel the wire; weights come as base64 safetensors, never pickle.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import secrets
import time
import urllib.parse
from typing import Any

import numpy as np

from rltrainer.errors import RLTrainerError

TOKEN_ENV = "RLTRAINER_POLICY_SERVER_TOKEN"


class PolicyClientError(RLTrainerError):
    """The server refused a request (its status and message) or could not be reached."""


def _to_json(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {key: _to_json(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_to_json(item) for item in value]
    return value


class PolicyClient:
    """Asks a policy server for actions and logs rewards (RLlib's ``PolicyClient``)."""

    def __init__(
        self,
        address: str = "http://127.0.0.1:9900",
        inference_mode: str = "remote",
        update_interval: float | None = 10.0,
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        """``address``: the server's URL (``http://host:port``). ``token``: the bearer token, by
        default from the ``RLTRAINER_POLICY_SERVER_TOKEN`` environment variable (never logged).
        ``update_interval``: local mode's seconds between weight pulls (``None``: only on
        ``update_policy_weights()``). ``timeout_s``: how long to wait for an answer, and for a
        server that is not listening yet (it is tried again until then)."""
        if inference_mode not in ("remote", "local"):
            raise ValueError(f"inference_mode must be 'remote' or 'local', got {inference_mode!r}")
        url = urllib.parse.urlsplit(address if "://" in address else f"http://{address}")
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"address must be http://host:port, got {address!r}")
        self.address = f"http://{url.hostname}:{url.port or 80}"
        self._host, self._port = url.hostname, url.port or 80
        self._token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self._timeout = timeout_s
        self._connection: http.client.HTTPConnection | None = None
        self.inference_mode = inference_mode
        self.update_interval = update_interval
        self._events: list[dict[str, Any]] = []  # local mode: what the server has not heard yet
        self._policy: Any = None
        self._filter: Any = None
        self._last_pull = 0.0
        if inference_mode == "local":
            self._build_local_policy()
            self.update_policy_weights()

    # --- the API ------------------------------------------------------------------------
    def start_episode(self, episode_id: str | None = None, training_enabled: bool = True) -> str:
        """Begin an episode; returns its id (``episode_id``, or one the server makes up).
        ``training_enabled=False``: acted on, not learned from."""
        if self.inference_mode == "local":
            episode_id = episode_id or secrets.token_hex(8)
            self._events.append(
                {"command": "START_EPISODE", "episode_id": episode_id, "training_enabled": training_enabled}
            )
            return episode_id
        request = {"command": "START_EPISODE", "episode_id": episode_id, "training_enabled": training_enabled}
        return self._call(request)["episode_id"]

    def get_action(self, episode_id: str, observation: Any) -> Any:
        """The policy's action for ``observation`` (an int for Discrete actions, a list for Box)."""
        if self.inference_mode == "remote":
            request = {
                "command": "GET_ACTION",
                "episode_id": episode_id,
                "observation": _to_json(observation),
            }
            return self._call(request)["action"]
        self._maybe_pull()
        flat = self._policy.preprocessor.transform(self._batch(observation))
        out = self._policy.compute(self._filter(flat, update=False), self._policy.config.explore)
        action = _to_json(out["env_actions"][0])
        self._events.append(
            {
                "command": "LOG_ACTION",
                "episode_id": episode_id,
                "observation": _to_json(observation),
                "action": action,
                "policy_action": _to_json(out["actions"][0]),
                "action_logp": float(out["action_logp"][0]),
            }
        )
        return action

    def log_action(self, episode_id: str, observation: Any, action: Any) -> None:
        """Record an action the application chose itself (off-policy data)."""
        event = {
            "command": "LOG_ACTION",
            "episode_id": episode_id,
            "observation": _to_json(observation),
            "action": _to_json(action),
        }
        self._send(event)

    def log_returns(
        self, episode_id: str, reward: float, info: Any = None, multiagent_done_dict: Any = None
    ) -> None:
        """Add ``reward`` to the last action's (``info`` and ``multiagent_done_dict``: RLlib's
        signature; not used)."""
        del info, multiagent_done_dict
        self._send({"command": "LOG_RETURNS", "episode_id": episode_id, "reward": float(reward)})

    def end_episode(self, episode_id: str, observation: Any, truncated: bool = False) -> None:
        """End the episode with its last observation (``truncated``: cut by a time limit, so the
        learner bootstraps from this observation's value)."""
        event = {
            "command": "END_EPISODE",
            "episode_id": episode_id,
            "observation": _to_json(observation),
            "truncated": truncated,
        }
        self._send(event)
        if self.inference_mode == "local":
            self.flush()

    def update_policy_weights(self) -> None:
        """Local mode: fetch the server's current weights and observation filter (and send what
        is pending first, so the server learns from it before the new weights act)."""
        if self.inference_mode != "local":
            return
        self.flush()
        from safetensors.numpy import load

        reply = self._call({"command": "GET_WEIGHTS"})
        self._policy.set_weights(load(base64.b64decode(reply["weights"])))
        if reply["filter"]:
            self._filter.set_state({key: np.asarray(value) for key, value in reply["filter"].items()})
        self._last_pull = time.monotonic()

    def flush(self) -> None:
        """Local mode: send the events not sent yet."""
        if self._events:
            events, self._events = self._events, []
            self._call({"command": "EVENTS", "events": events})

    def close(self) -> None:
        self.flush()
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals ----------------------------------------------------------------------
    def _send(self, event: dict[str, Any]) -> None:
        if self.inference_mode == "local":
            self._events.append(event)
        else:
            self._call(event)

    def _maybe_pull(self) -> None:
        if self.update_interval is not None and time.monotonic() - self._last_pull >= self.update_interval:
            self.update_policy_weights()

    def _batch(self, observation: Any) -> Any:
        from rltrainer.offline.policy_service import batch_of_one, obs_from_json

        space = self._policy.observation_space
        return batch_of_one(space, obs_from_json(space, _to_json(observation)))

    def _build_local_policy(self) -> None:
        from rltrainer.algorithms.registry import get_config_class
        from rltrainer.core.filters import make_filter
        from rltrainer.env.spaces import space_from_json

        described = self._call({"command": "GET_POLICY"})
        config = get_config_class(described["algorithm"]).from_dict(described["config"])
        observation_space = space_from_json(described["observation_space"])
        action_space = space_from_json(described["action_space"])
        self._policy = config.get_policy_class()(observation_space, action_space, config)
        self._filter = make_filter(config.observation_filter, self._policy.preprocessor.size)

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(request).encode()
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        deadline = time.monotonic() + self._timeout
        retried_stale = False
        while True:
            reused = self._connection is not None
            try:
                if self._connection is None:
                    self._connection = http.client.HTTPConnection(
                        self._host, self._port, timeout=self._timeout
                    )
                self._connection.request("POST", "/", body=body, headers=headers)
                response = self._connection.getresponse()
                payload = response.read()
                if response.getheader("Connection", "").lower() == "close":
                    self._connection.close()
                    self._connection = None
                break
            except (ConnectionError, http.client.HTTPException, OSError) as err:
                if self._connection is not None:
                    self._connection.close()
                    self._connection = None
                # Tried again: a server not listening yet (nothing was sent), until timeout_s; and a
                # kept-alive connection the server had closed before reading the request, once. Any
                # other failure may have happened after the server applied the request.
                if isinstance(err, ConnectionRefusedError) and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                stale = reused and isinstance(err, http.client.RemoteDisconnected | BrokenPipeError)
                if stale and not retried_stale:
                    retried_stale = True
                    continue
                raise PolicyClientError(f"policy server {self.address} cannot be reached: {err}") from None
        try:
            reply = json.loads(payload)
        except json.JSONDecodeError:
            reply = {"error": payload[:200].decode(errors="replace")}
        if response.status != 200:
            raise PolicyClientError(
                f"policy server {self.address} refused {request.get('command')} "
                f"({response.status}): {reply.get('error', reply)}"
            )
        return reply


__all__ = ["PolicyClient", "PolicyClientError"]
