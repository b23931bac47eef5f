"""``RemoteVectorEnv``: RLlib's ``remote_worker_envs=True``, each sub-env in its own Ray actor.

An env runner steps its ``num_envs_per_env_runner`` copies one after the other in its own
process (``SyncVectorEnv``): for envs whose ``step()`` or ``reset()`` takes long (a simulator, a
game client) sampling waits on the sum of their times. Here every copy lives in a Ray actor of
its own and ``step()`` sends every action before waiting for the results, so the copies step in
parallel and a step takes as long as the slowest copy, plus a round trip to each actor: worth it
only for slow envs (RLlib: "overheads are significant").

The actors ask for no CPU (``num_cpus=0``, as RLlib's), so they need no share of the placement
group, and they are owned by the process that made them (the env runner): they die with it, and
``close()`` kills them. Stepping is synchronous: every step waits for every copy (RLlib's
``remote_env_batch_wait_ms``, which returns whichever copies are ready, is not implemented).

What an agent sees is exactly what ``SyncVectorEnv`` gives it with next-step autoreset (the env
runner relies on it): the same per-copy factory (``registry.make_sub_env``), copy ``i`` reset
with seed ``seed + i``, a copy whose episode ended resets on the next ``step()`` (its action is
ignored; reward 0), observations batched and infos merged as there. An exception raised by the
user's env comes back as itself, carrying where it was raised (``rltrainer.errors.RAISED_AT``),
so the env runner reports it in its usual one line; a copy whose actor died is an ``EnvError``
naming it.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import ray
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate
from ray.exceptions import RayError, RayTaskError

from rltrainer.env.env_context import EnvContext
from rltrainer.env.registry import (
    MultiAgentEnvFoundError,
    creators_for,
    make_sub_env,
    note_multi_agent,
    register_env,
)
from rltrainer.errors import RAISED_AT, EnvError, raised_at

#: How long ``close()`` lets the sub-envs' own ``close()`` run before their actors are killed.
CLOSE_TIMEOUT_S = 5.0


def _located(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; an exception it raises is tagged with where it was raised (its
    traceback stays in this process)."""
    try:
        return fn(*args, **kwargs)
    except Exception as err:
        with contextlib.suppress(AttributeError, TypeError):  # e.g. an exception with __slots__
            setattr(err, RAISED_AT, raised_at(err))
        raise


class RemoteSubEnv:
    """One sub-env in its own process: the class of the actors (``ray.remote(num_cpus=0)``)."""

    def __init__(self, env_creators: dict[str, Any], worker_env_vars: dict[str, str]) -> None:
        # What an env runner's process gets (prepare_runner_process): the driver's register_env
        # entry of the env (they are per process) and extra_python_environs_for_worker.
        for name, creator in env_creators.items():
            register_env(name, creator)
        os.environ.update(worker_env_vars)
        self.env: gym.Env | None = None
        self._autoreset = False  # the last step ended an episode: the next step resets

    def make(
        self, env: Any, ctx: dict[str, Any], index: int, restart_failed: bool, horizon: int | None
    ) -> tuple[gym.Space, gym.Space, dict[str, Any], str | None]:
        """Create copy ``index`` as ``SyncVectorEnv`` would; returns its spaces, metadata and
        render mode."""
        context = EnvContext(**ctx)
        made = self.env = _located(make_sub_env, env, context, index, restart_failed, horizon)
        return made.observation_space, made.action_space, dict(made.metadata), made.render_mode

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict]:
        """The env's reset (a step after it steps the env again)."""
        self._autoreset = False
        return _located(lambda: self.env.reset(seed=seed, options=options))

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """The env's step, or (next-step autoreset) its reset after a step that ended an episode."""
        if self._autoreset:
            self._autoreset = False
            obs, info = _located(self.env.reset)
            return obs, 0.0, False, False, info
        # Ray hands numpy arguments over read-only; an env may write into its action.
        action = action if np.isscalar(action) else copy.deepcopy(action)
        obs, reward, terminated, truncated, info = _located(self.env.step, action)
        self._autoreset = bool(terminated or truncated)
        return obs, reward, terminated, truncated, info

    def call(self, name: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        """``SyncVectorEnv.call`` for this copy: the attribute, or the method's result."""
        function = self.env.get_wrapper_attr(name)
        return _located(function, *args, **kwargs) if callable(function) else function

    def set_attr(self, name: str, value: Any) -> None:
        """``SyncVectorEnv.set_attr`` for this copy."""
        self.env.set_wrapper_attr(name, value)

    def render(self) -> Any:
        """The env's rendered frame."""
        return _located(self.env.render)

    def close(self) -> None:
        """Close the env (the actor is killed next)."""
        if self.env is not None:
            self.env.close()


class RemoteVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of ``env``, each stepped in its own Ray actor (``remote_worker_envs``).

    ``actors`` holds the actor handles (RLlib's ``get_sub_environments()`` in remote mode);
    there is no ``envs`` attribute, since the env objects live in the actors. ``call``,
    ``get_attr``, ``set_attr`` and ``render`` reach them there.
    """

    def __init__(
        self,
        env: Any,
        ctx: EnvContext,
        num_envs: int,
        restart_failed: bool = False,
        horizon: int | None = None,
        worker_env_vars: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self._name = env if isinstance(env, str) else getattr(env, "__name__", repr(env))
        self.num_envs = num_envs
        actor_class = ray.remote(num_cpus=0)(RemoteSubEnv)
        creators = creators_for(env)
        env_vars = dict(worker_env_vars or {})
        self.actors: list[Any] = [actor_class.remote(creators, env_vars) for _ in range(num_envs)]
        fields = {
            "env_config": dict(ctx),
            "worker_index": ctx.worker_index,
            "vector_index": ctx.vector_index,
            "num_workers": ctx.num_workers,
            "remote": ctx.remote,
        }
        try:
            refs = [
                actor.make.remote(env, fields, index, restart_failed, horizon)
                for index, actor in enumerate(self.actors)
            ]
            made = self._gather(refs, f"creating env {env!r}")
        except BaseException as err:
            if isinstance(err, MultiAgentEnvFoundError):
                note_multi_agent(env)  # as when the driver makes it (EnvRunnerGroup switches runners)
            self.close()
            raise
        self.single_observation_space, self.single_action_space, metadata, self.render_mode = made[0]
        for index, (obs_space, action_space, _, _) in enumerate(made[1:], start=1):
            if obs_space != self.single_observation_space or action_space != self.single_action_space:
                self.close()
                raise EnvError(
                    f"env {env!r}: sub-env {index}'s spaces ({obs_space}, {action_space}) differ from "
                    f"sub-env 0's ({self.single_observation_space}, {self.single_action_space})"
                )
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = {**metadata, "autoreset_mode": AutoresetMode.NEXT_STEP}
        self._env_obs: list[Any] = [None] * num_envs
        self._observations = create_empty_array(self.single_observation_space, n=num_envs, fn=np.zeros)
        self._rewards = np.zeros((num_envs,), dtype=np.float64)
        self._terminations = np.zeros((num_envs,), dtype=np.bool_)
        self._truncations = np.zeros((num_envs,), dtype=np.bool_)

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every copy (those of ``options["reset_mask"]``, if given), copy ``i`` with
        ``seed + i`` (or ``seed[i]``), in parallel."""
        if seed is None:
            seed = [None] * self.num_envs
        elif isinstance(seed, int):
            seed = [seed + i for i in range(self.num_envs)]
        if len(seed) != self.num_envs:
            raise ValueError(
                f"If seeds are passed as a list the length must match num_envs={self.num_envs} but got "
                f"length={len(seed)}."
            )
        indices = list(range(self.num_envs))
        if options is not None and "reset_mask" in options:
            options = dict(options)
            mask = np.asarray(options.pop("reset_mask"))
            if mask.shape != (self.num_envs,) or mask.dtype != np.bool_ or not mask.any():
                raise ValueError(
                    f"options['reset_mask'] must be a bool array of shape ({self.num_envs},) with a True "
                    "value"
                )
            indices = np.flatnonzero(mask).tolist()
        refs = [self.actors[i].reset.remote(seed[i], options) for i in indices]
        infos: dict[str, Any] = {}
        for i, (obs, info) in zip(indices, self._gather(refs, "reset()", indices), strict=True):
            self._env_obs[i] = obs
            self._terminations[i] = self._truncations[i] = False
            infos = self._add_info(infos, info, i)
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        return copy.deepcopy(self._observations), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Send every copy its action, then wait for all of them (they step in parallel)."""
        refs = [
            actor.step.remote(action)
            for actor, action in zip(self.actors, iterate(self.action_space, actions), strict=True)
        ]
        infos: dict[str, Any] = {}
        for i, (obs, reward, terminated, truncated, info) in enumerate(self._gather(refs, "step()")):
            self._env_obs[i] = obs
            self._rewards[i] = reward
            self._terminations[i] = terminated
            self._truncations[i] = truncated
            infos = self._add_info(infos, info, i)
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        return (
            copy.deepcopy(self._observations),
            np.copy(self._rewards),
            np.copy(self._terminations),
            np.copy(self._truncations),
            infos,
        )

    def render(self) -> tuple[Any, ...]:
        """Each copy's rendered frame."""
        return tuple(self._gather([actor.render.remote() for actor in self.actors], "render()"))

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Each copy's ``name`` attribute, or the result of calling it with the arguments."""
        refs = [actor.call.remote(name, args, kwargs) for actor in self.actors]
        return tuple(self._gather(refs, f"call({name!r})"))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Each copy's attribute ``name``."""
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set attribute ``name`` of each copy: ``values[i]`` for copy i, or one value for all."""
        if not isinstance(values, list | tuple):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(
                "Values must be a list or tuple with length equal to the number of environments. "
                f"Got `{len(values)}` values for {self.num_envs} environments."
            )
        refs = [actor.set_attr.remote(name, value) for actor, value in zip(self.actors, values, strict=True)]
        self._gather(refs, f"set_attr({name!r})")

    def close_extras(self, **kwargs: Any) -> None:  # noqa: ARG002 - VectorEnv's signature
        """Let each copy close (for up to ``CLOSE_TIMEOUT_S``), then kill the actors."""
        actors, self.actors = self.actors, []
        if not actors or not ray.is_initialized():
            return
        refs = [actor.close.remote() for actor in actors]
        closed, _ = ray.wait(refs, num_returns=len(refs), timeout=CLOSE_TIMEOUT_S)
        for ref in closed:  # fetched, so that Ray does not log their errors (an env failing to close)
            with contextlib.suppress(Exception):
                ray.get(ref)
        for actor in actors:
            ray.kill(actor)

    def __repr__(self) -> str:
        return f"RemoteVectorEnv({self._name}, num_envs={self.num_envs})"

    def _gather(self, refs: list[Any], call: str, indices: Sequence[int] | None = None) -> list[Any]:
        """The results of ``refs`` (one per copy of ``indices``, all copies by default): the
        user's exception as raised in its actor, an ``EnvError`` for a dead actor."""
        try:
            return ray.get(refs)
        except RayError as err:
            first: BaseException = err
        failures = []  # every result is fetched (Ray logs the errors of results never fetched)
        for index, ref in zip(range(len(refs)) if indices is None else indices, refs, strict=True):
            try:
                ray.get(ref)
            except RayError as err:
                failures.append(self._error(index, call, err))
        raise (failures[0] if failures else first) from None

    def _error(self, index: int, call: str, err: RayError) -> Exception:
        """The env's own exception (``RAISED_AT`` says where it was raised), else an ``EnvError``."""
        cause = getattr(err, "cause", None) if isinstance(err, RayTaskError) else None
        if isinstance(cause, Exception) and not isinstance(cause, RayError):
            return cause
        return self._gone(index, call, err)

    @staticmethod
    def _gone(index: int, call: str, err: RayError) -> EnvError:
        """An actor that died (or an error Ray could not hand back), in one line."""
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        detail = f"{type(err).__name__}: {lines[0] if lines else ''}"
        return EnvError(f"remote sub-env {index} (remote_worker_envs) failed in {call}: {detail}")
