"""Resolving env specs and creating envs, one at a time (``make_env``) or as a vector env's copy
(``make_sub_env``); ``rltrainer.env.vector_env`` steps copies together.

An env spec is one of: a name given to ``register_env``; a gymnasium id; a
``"package.module:ClassName"`` string; a ``gymnasium.Env`` subclass.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rltrainer.env.apis.task_settable_env import carry_task
from rltrainer.env.atari import AtariEnv, is_atari
from rltrainer.env.env_checker import OldGymApi, uses_old_gym_api
from rltrainer.env.env_context import EnvContext
from rltrainer.env.multi_agent_contract import MultiAgentEnv, is_multi_agent_env
from rltrainer.errors import EnvError
from rltrainer.utils.import_paths import import_object

logger = logging.getLogger(__name__)

EnvCreator = Callable[[EnvContext], gym.Env]

_REGISTRY: dict[str, EnvCreator] = {}


def register_env(name: str, env_creator: EnvCreator) -> None:
    """Register ``env_creator(env_context) -> gym.Env`` under ``name``."""
    if not isinstance(name, str) or not name:
        raise EnvError(f"register_env: name must be a non-empty string, got {name!r}")
    if not callable(env_creator):
        raise EnvError(f"register_env: the creator for {name!r} must be callable")
    _REGISTRY[name] = env_creator


def registered_envs() -> list[str]:
    """Names given to ``register_env`` in this process."""
    return sorted(_REGISTRY)


def is_registered(env: Any) -> bool:
    """Whether ``env`` is a name given to ``register_env`` in this process, or to Ray Tune's
    ``ray.tune.registry.register_env`` (RLlib's documented way; adopted here on first sight)."""
    if not isinstance(env, str):
        return False
    if env not in _REGISTRY:
        creator = _tune_registered_creator(env)
        if creator is not None:
            _REGISTRY[env] = creator  # from here on it travels to env runners like our own names
    return env in _REGISTRY


def _tune_registered_creator(name: str) -> EnvCreator | None:
    """``name``'s creator in Ray Tune's registry, if a script registered it there. Tune's registry
    is only read when the script imported it (so it may hold names); it keeps the creator
    in-process until Ray starts, then in the cluster's key-value store, where Tune's trial actors
    read it too."""
    tune_registry = sys.modules.get("ray.tune.registry")
    if tune_registry is None:
        return None
    registry, category = tune_registry._global_registry, tune_registry.ENV_CREATOR
    if not registry.contains(category, name):
        return None
    return registry.get(category, name)


def creators_for(env: Any, env_config: Any = None) -> dict[str, EnvCreator]:
    """The ``register_env`` entries an actor making ``env`` needs: ``env``'s own and any registered
    name among ``env_config``'s values (a wrapper's inner env). Only these travel (RLlib's actors
    get the env's creator): unpickling a creator imports its module, which may be heavy (a
    training script's imports, Ray Tune), and another test's or script's creator has no business
    in this actor."""
    names = {env} if isinstance(env, str) else set()
    if isinstance(env_config, dict):
        names.update(value for value in env_config.values() if isinstance(value, str))
    return {name: _REGISTRY[name] for name in names if is_registered(name)}


def resolve_creator(env: Any) -> EnvCreator:
    """Turn an env spec into a creator taking an ``EnvContext``; raises ``EnvError``."""
    if isinstance(env, type):
        if not (issubclass(env, gym.Env) or _env_like(env)):
            raise EnvError(f"env class {env.__name__} is not a gymnasium.Env subclass")
        return lambda ctx: env(ctx)
    if not isinstance(env, str) or not env:
        raise EnvError(f"env must be a name, 'package.module:Class' or a gym.Env class, got {env!r}")
    if is_registered(env):
        return _REGISTRY[env]
    if ":" in env and env not in gym.registry:
        module_name, _, name = env.partition(":")
        _import_module(env, module_name)
        if name in gym.registry:  # gymnasium's "module:env-id" form (the import registers the id)
            return lambda ctx: gym.make(name, **ctx)
        cls = _import_class(env)
        return lambda ctx: cls(ctx)
    register_namespace(env)
    if env in gym.registry:
        return lambda ctx: gym.make(env, **ctx)
    raise EnvError(_unknown_env_message(env))


#: gymnasium namespaces whose package registers its ids only when asked: namespace ->
#: (module, its registering function, what to install). ALE's are in ``rltrainer.env.atari``.
_NAMESPACES = {
    "MinAtar/": ("minatar.gym", "register_envs", "pip install 'rltrainer[minatar]' (the minatar package)"),
}


def register_namespace(env: str) -> None:
    """Register the ids of ``env``'s namespace (``MinAtar/Breakout-v1``) with gymnasium on first
    sight, in whichever process makes the env; ``EnvError`` saying what to install."""
    for prefix, (module_name, function, install) in _NAMESPACES.items():
        if env.startswith(prefix) and env not in gym.registry:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                raise EnvError(f"env {env!r} needs the {prefix.rstrip('/')} games: {install}") from None
            getattr(module, function)()


class MultiAgentEnvFoundError(EnvError):
    """A single-agent env runner was given a multi-agent env (a registered creator returned a
    ``MultiAgentEnv`` or a PettingZoo env): ``EnvRunnerGroup`` samples it with multi-agent runners."""


#: Registered names whose creator returned a multi-agent env in this process.
_MULTI_AGENT_NAMES: set[str] = set()


def is_known_multi_agent(name: str) -> bool:
    """Whether ``name``'s creator returned a multi-agent env in this process (nothing is created)."""
    return name in _MULTI_AGENT_NAMES


def note_multi_agent(env: Any) -> None:
    """Remember that ``env``'s creator returns a multi-agent env (e.g. found in another process)."""
    if isinstance(env, str):
        _MULTI_AGENT_NAMES.add(env)


def env_is_multi_agent(env: Any) -> bool:
    """Whether ``env`` makes multi-agent envs: a ``MultiAgentEnv`` class (or path), or a
    registered creator that returned one (or a PettingZoo env) in this process. Nothing is
    created here: a creator's first env tells ``EnvRunnerGroup`` (``MultiAgentEnvFoundError``)."""
    if env is None or not isinstance(env, str | type):
        return False
    if isinstance(env, str) and not is_registered(env) and (":" not in env or env in gym.registry):
        return False  # a gymnasium id: single-agent, nothing to import or create
    if isinstance(env, type):
        return issubclass(env, MultiAgentEnv)
    if is_registered(env):  # known once its creator made one (EnvRunnerGroup)
        return is_known_multi_agent(env)
    return _names_multi_agent_class(env)


def _names_multi_agent_class(path: str) -> bool:
    try:
        obj = import_object(path)
    except (ImportError, AttributeError, ValueError):
        return False
    return isinstance(obj, type) and issubclass(obj, MultiAgentEnv)


def _refuse_multi_agent(created: Any, env: Any) -> None:
    if is_multi_agent_env(created):
        note_multi_agent(env)
        close = getattr(created, "close", None)
        if callable(close):
            close()
        raise MultiAgentEnvFoundError(
            f"env {env!r} is a multi-agent env (it samples with MultiAgentEnvRunner)"
        )


def make_env(env: Any, ctx: EnvContext, render_mode: str | None = None) -> gym.Env:
    """Create one env; ``render_mode`` is passed to gymnasium ids (e.g. for videos). Atari
    games come preprocessed (``rltrainer.env.atari``)."""
    if not is_registered(env) and is_atari(env):
        return AtariEnv(env, dict(ctx))
    if render_mode is not None and isinstance(env, str) and env in gym.registry and not is_registered(env):
        return _checked(gym.make(env, render_mode=render_mode, **ctx), env)
    creator = resolve_creator(env)
    try:
        created = creator(ctx)
    except EnvError:
        raise
    except TypeError as err:
        raise EnvError(f"could not create env {env!r} with env_config {dict(ctx)}: {err}") from err
    _refuse_multi_agent(created, env)
    if _env_like(created) and (uses_old_gym_api(created) or not isinstance(created, gym.Env)):
        created = OldGymApi(created)  # reset() -> obs, step() -> 4-tuple: gymnasium's API over it
    return _checked(created, env)


class RestartOnCrash(gym.Wrapper):
    """Recreates the wrapped env when ``step()`` raises; that step ends the episode (truncated)
    with the new env's first observation and ``info[CRASHED] = True`` so the runner drops it.
    A ``TaskSettableEnv`` is set to the crashed env's task."""

    CRASHED = "rltrainer_env_recreated"

    def __init__(self, env: gym.Env, make: Callable[[], gym.Env]) -> None:
        super().__init__(env)
        self._make = make

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        try:
            return self.env.step(action)
        except Exception as err:  # noqa: BLE001 - any crash of user env code
            logger.warning(
                "an env raised %s: %s; recreating it and dropping its episode", type(err).__name__, err
            )
            try:
                self.env.close()
            except Exception:  # noqa: BLE001 - a broken env may fail to close too
                logger.debug("closing the crashed env raised", exc_info=True)
            crashed, self.env = self.env, self._make()
            carry_task(crashed, self.env)  # a TaskSettableEnv keeps its (curriculum) task
            obs, info = self.env.reset()
            return obs, 0.0, False, True, {**info, self.CRASHED: True}


def make_sub_env(
    env: Any,
    ctx: EnvContext,
    index: int,
    restart_failed: bool = False,
    horizon: int | None = None,
    render_mode: str | None = None,
) -> gym.Env:
    """Copy ``index`` of a vector env: ``env`` made with ``vector_index=index`` (and
    ``render_mode`` where ``make_env`` passes one), in a ``TimeLimit`` when ``horizon`` is set,
    in ``RestartOnCrash`` with ``restart_failed`` (module level, so that a
    ``remote_worker_envs`` actor makes its copy with it too)."""

    def make_one() -> gym.Env:
        created = make_env(env, ctx.copy_with_overrides(vector_index=index), render_mode=render_mode)
        return created if horizon is None else gym.wrappers.TimeLimit(created, max_episode_steps=horizon)

    created = make_one()
    return RestartOnCrash(created, make_one) if restart_failed else created


def _checked(created: Any, env: Any) -> gym.Env:
    if not isinstance(created, gym.Env):
        raise EnvError(f"the creator of env {env!r} returned {type(created).__name__}, not a gymnasium.Env")
    return created


def _import_module(path: str, module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ImportError as err:
        raise EnvError(f"env {path!r}: cannot import module {module_name!r} ({err})") from None


def _import_class(path: str) -> type:
    module_name, _, class_name = path.partition(":")
    obj = _import_module(path, module_name)
    for part in class_name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise EnvError(f"env {path!r}: module {module_name!r} has no attribute {class_name!r}")
    if not (isinstance(obj, type) and (issubclass(obj, gym.Env) or _env_like(obj))):
        raise EnvError(f"env {path!r} is not a gymnasium.Env subclass")
    return obj


def _env_like(obj: Any) -> bool:
    """Has what an env needs (an old gym env, or any duck-typed one ``OldGymApi`` adapts)."""
    return all(hasattr(obj, name) for name in ("reset", "step", "observation_space", "action_space"))


def _unknown_env_message(env: str) -> str:
    known = registered_envs() + sorted(gym.registry)
    close = difflib.get_close_matches(env, known, n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    examples = ", ".join(["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0", "LunarLander-v3"])
    return (
        f"unknown env {env!r}.{hint} Use a gymnasium id (e.g. {examples}), a name given to "
        f"register_env (registered: {', '.join(registered_envs()) or 'none'}), or "
        f"'package.module:ClassName'."
    )
