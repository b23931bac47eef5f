"""The external application API's protocol, apart from HTTP: its commands, observations and
actions as JSON, and ``PolicyService``, the state machine behind every request (the client's
episodes, the rows they complete for training, the policy acting for them). The HTTP server
around it is ``rltrainer.offline.policy_server``.
"""

from __future__ import annotations

import base64
import hmac
import logging
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rltrainer.env.rollout import EpisodeStats
from rltrainer.offline.input_sources import SERVER_CONFIG_DEFAULTS
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
