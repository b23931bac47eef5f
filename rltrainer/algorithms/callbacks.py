"""Callbacks: user code run at fixed points of training (RLlib's ``DefaultCallbacks``).

Subclass ``DefaultCallbacks``, override the hooks you need (all take keyword arguments and
``**kwargs``), and set the class with ``config.callbacks(MyCallbacks)`` (or a list of
classes, run in order). Each process that runs hooks makes its own instance: the driver
(algorithm hooks), every env runner (env and episode hooks, remote ones included) and every
learner (``on_learn_on_batch``). Checkpoints store the class path, never the object.

Where each hook runs:

- driver: ``on_algorithm_init``, ``on_train_result`` (may add keys to the result),
  ``on_evaluate_start``, ``on_evaluate_end``, ``on_checkpoint_loaded``;
- env runners: ``on_environment_created``, ``on_sub_environment_created``,
  ``on_episode_created``, ``on_episode_start``, ``on_episode_step``, ``on_episode_end``,
  ``on_postprocess_trajectory`` (may rewrite the columns of the batch it gets, e.g. rewards,
  before the learner computes advantages), ``on_sample_end``;
- learners: ``on_learn_on_batch`` (before the update; may add keys to ``result``).

A hook that raises ends training with a ``CallbackError`` naming the hook, the class and,
for env-runner hooks, the runner.

RLlib's current forms work too: ``RLlibCallback`` is ``DefaultCallbacks``' current name, and
``config.callbacks(on_episode_end=fn)`` (a function or a list of them per hook in
``FUNCTION_HOOKS``) runs functions after the class's hook, in the same places, with the same
keyword arguments (``FunctionCallbacks``).
"""

from __future__ import annotations

import difflib
import logging
import warnings
from typing import Any

from rltrainer.errors import CallbackError, ConfigError
from rltrainer.utils.import_paths import import_object, object_path, resolve_function

logger = logging.getLogger(__name__)

#: Every hook rltrainer calls.
HOOKS: tuple[str, ...] = (
    "on_algorithm_init",
    "on_environment_created",
    "on_sub_environment_created",
    "on_episode_created",
    "on_episode_start",
    "on_episode_step",
    "on_episode_end",
    "on_postprocess_trajectory",
    "on_sample_end",
    "on_learn_on_batch",
    "on_train_result",
    "on_evaluate_start",
    "on_evaluate_end",
    "on_checkpoint_loaded",
)
#: Hooks that make an env runner track episodes (the only ones that cost per-step work).
EPISODE_HOOKS: tuple[str, ...] = (
    "on_episode_created",
    "on_episode_start",
    "on_episode_step",
    "on_episode_end",
    "on_postprocess_trajectory",
)
#: Hooks ``config.callbacks(on_<hook>=fn)`` takes functions for (RLlib's callback functions).
FUNCTION_HOOKS: tuple[str, ...] = (
    "on_algorithm_init",
    "on_train_result",
    "on_evaluate_start",
    "on_evaluate_end",
    "on_checkpoint_loaded",
    "on_environment_created",
    "on_episode_created",
    "on_episode_start",
    "on_episode_step",
    "on_episode_end",
    "on_sample_end",
)
#: RLlib hooks rltrainer does not call, with what to use instead.
NOT_CALLED: dict[str, str] = {
    "on_trainer_init": "its current name is on_algorithm_init",
    "on_create_policy": "rltrainer has one policy per algorithm; use on_algorithm_init",
    "on_workers_recreated": "restarts are reported as num_env_runner_restarts in every result",
    "on_env_runners_recreated": "restarts are reported as num_env_runner_restarts in every result",
}


class DefaultCallbacks:
    """No-op hooks; subclass and override the ones you need (see the module docstring)."""

    def __init__(self, legacy_callbacks_dict: dict[str, Any] | None = None) -> None:  # noqa: ARG002
        pass

    # --- driver ------------------------------------------------------------------------
    def on_algorithm_init(self, *, algorithm: Any, **kwargs: Any) -> None:
        """The algorithm is built (env runners and learners exist, weights synced)."""

    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        """After each ``train()`` iteration's result is complete; keys added here are reported."""

    def on_evaluate_start(self, *, algorithm: Any, **kwargs: Any) -> None:
        """Before an evaluation."""

    def on_evaluate_end(self, *, algorithm: Any, evaluation_metrics: dict, **kwargs: Any) -> None:
        """After an evaluation, with its metrics (``{"evaluation": {...}}``; may be changed)."""

    def on_checkpoint_loaded(self, *, algorithm: Any, **kwargs: Any) -> None:
        """After ``restore()`` / ``from_checkpoint()`` loaded a checkpoint into ``algorithm``."""

    # --- env runners ---------------------------------------------------------------------
    def on_environment_created(self, *, env_runner: Any, env: Any, env_context: Any, **kwargs: Any) -> None:
        """An env runner created (or recreated) its vector env."""

    def on_sub_environment_created(
        self,
        *,
        worker: Any,
        sub_environment: Any,
        env_context: Any,
        env_index: int | None = None,
        **kwargs: Any,
    ) -> None:
        """Each env copy of a runner's vector env, with its own ``EnvContext`` (``vector_index``)."""

    def on_episode_created(
        self, *, worker: Any, base_env: Any, policies: dict, episode: Any, env_index: int, **kwargs: Any
    ) -> None:
        """A new episode object exists, before its env is reset."""

    def on_episode_start(
        self, *, worker: Any, base_env: Any, policies: dict, episode: Any, env_index: int, **kwargs: Any
    ) -> None:
        """The episode's env was reset (``episode.last_observation`` is the first observation)."""

    def on_episode_step(
        self, *, worker: Any, base_env: Any, policies: dict, episode: Any, env_index: int, **kwargs: Any
    ) -> None:
        """After every env step of the episode (costs a Python call per env and step)."""

    def on_episode_end(
        self, *, worker: Any, base_env: Any, policies: dict, episode: Any, env_index: int, **kwargs: Any
    ) -> None:
        """The episode ended (terminated or truncated); set ``episode.custom_metrics`` here."""

    def on_postprocess_trajectory(
        self,
        *,
        worker: Any,
        episode: Any,
        agent_id: Any,
        policy_id: str,
        policies: dict,
        postprocessed_batch: Any,
        original_batches: dict,
        **kwargs: Any,
    ) -> None:
        """One episode's piece of a sampled fragment; rewrite ``postprocessed_batch`` columns in place."""

    def on_sample_end(self, *, worker: Any, samples: Any, **kwargs: Any) -> None:
        """An env runner finished a fragment (``samples``: ``[T, N]`` columns, may be rewritten)."""

    # --- learners --------------------------------------------------------------------------
    def on_learn_on_batch(self, *, policy: Any, train_batch: Any, result: dict, **kwargs: Any) -> None:
        """Before a learner updates on ``train_batch``; keys added to ``result`` are reported."""


class MemoryTrackingCallbacks(DefaultCallbacks):
    """RLlib's memory debugging callbacks: at every episode end, the runner process's memory
    (``worker_vss``, ``worker_rss``, bytes) and the 10 source lines holding the most memory
    allocated since the runner started (tracemalloc: ``<file>:<line>_size`` and ``_count``)
    become custom metrics, so ``custom_metrics/..._mean`` shows what grows. tracemalloc slows
    the process down several times: for finding a leak, not for training runs."""

    TOP_LINES = 10

    def __init__(self, legacy_callbacks_dict: dict[str, Any] | None = None) -> None:
        super().__init__(legacy_callbacks_dict)
        import tracemalloc

        if not tracemalloc.is_tracing():
            tracemalloc.start(10)  # frames per allocation, as RLlib's

    def on_episode_end(self, *, episode: Any, **kwargs: Any) -> None:  # noqa: ARG002 - the hook's other arguments
        import tracemalloc

        import psutil

        for stat in tracemalloc.take_snapshot().statistics("lineno")[: self.TOP_LINES]:
            frame = stat.traceback[0]
            where = f"{frame.filename}:{frame.lineno}"
            episode.custom_metrics[f"{where}_size"] = stat.size
            episode.custom_metrics[f"{where}_count"] = stat.count
        memory = psutil.Process().memory_info()
        episode.custom_metrics["worker_vss"] = memory.vms
        episode.custom_metrics["worker_rss"] = memory.rss


RLlibCallback = DefaultCallbacks
"""RLlib's current name of ``DefaultCallbacks`` (``ray.rllib.callbacks.callbacks.RLlibCallback``)."""


class MultiCallbacks(DefaultCallbacks):
    """Runs several callbacks classes' hooks in order (RLlib's ``MultiCallbacks``); an item may
    also be an instance (``make_callbacks`` chains the functions of ``callbacks(on_<hook>=...)``)."""

    def __init__(self, callback_class_list: list[Any]) -> None:
        super().__init__()
        self._callback_list = [
            item if isinstance(item, DefaultCallbacks) else item() for item in callback_class_list
        ]

    def overrides(self, hook: str) -> bool:
        return any(overrides(callbacks, hook) for callbacks in self._callback_list)


def _forward(hook: str) -> Any:
    def run_all(self: MultiCallbacks, **kwargs: Any) -> None:
        for callbacks in self._callback_list:
            try:
                getattr(callbacks, hook)(**kwargs)
            except (CallbackError, _HookFailedError):
                raise
            except Exception as err:  # noqa: BLE001 - user code: call_hook names it
                raise _HookFailedError(f"callback {type(callbacks).__qualname__}.{hook}", err) from err

    run_all.__name__ = hook
    return run_all


for _hook in HOOKS:
    setattr(MultiCallbacks, _hook, _forward(_hook))


class FunctionCallbacks(DefaultCallbacks):
    """The functions of ``config.callbacks(on_<hook>=fn or [fn, ...])``, called in order with
    the hook's keyword arguments."""

    def __init__(self, functions: dict[str, list[Any]]) -> None:
        super().__init__()
        self._functions = {hook: list(fns) for hook, fns in functions.items() if fns}

    def overrides(self, hook: str) -> bool:
        return hook in self._functions


class _HookFailedError(Exception):
    """One of several callbacks raised: ``call_hook`` names it (a class of a list, a function),
    not the ``MultiCallbacks`` or ``FunctionCallbacks`` that ran it, and where it ran."""

    def __init__(self, name: str, error: Exception) -> None:
        super().__init__(name)
        self.name, self.error = name, error


def _call_functions(hook: str) -> Any:
    def run(self: FunctionCallbacks, **kwargs: Any) -> None:
        for function in self._functions.get(hook, ()):
            try:
                function(**kwargs)
            except CallbackError:
                raise
            except Exception as err:  # noqa: BLE001 - user code: call_hook names it
                name = getattr(function, "__qualname__", repr(function))
                raise _HookFailedError(f"callback function {name} (callbacks({hook}=...))", err) from err

    run.__name__ = hook
    return run


for _hook in FUNCTION_HOOKS:
    setattr(FunctionCallbacks, _hook, _call_functions(_hook))


def make_multi_callbacks(callback_class_list: list[type[DefaultCallbacks]]) -> type[DefaultCallbacks]:
    """A callbacks class running each of ``callback_class_list`` in order."""
    classes = list(callback_class_list)

    class _MultiCallbacks(MultiCallbacks):
        callback_classes = classes  # what configs and checkpoints store (a list of class paths)

        def __init__(self) -> None:
            super().__init__(classes)

    return _MultiCallbacks


def overrides(callbacks: DefaultCallbacks, hook: str) -> bool:
    """Whether ``callbacks`` does something in ``hook`` (what decides the env runner's fast path)."""
    if isinstance(callbacks, MultiCallbacks | FunctionCallbacks):
        return callbacks.overrides(hook)
    return getattr(type(callbacks), hook) is not getattr(DefaultCallbacks, hook)


def call_hook(callbacks: DefaultCallbacks, hook: str, where: str = "", **kwargs: Any) -> None:
    """``callbacks.<hook>(**kwargs)``; anything it raises becomes one ``CallbackError``."""
    try:
        getattr(callbacks, hook)(**kwargs)
    except CallbackError:
        raise
    except _HookFailedError as failed:
        err = failed.error
        raise CallbackError(f"{failed.name} raised {type(err).__name__}: {err}{where}") from err
    except Exception as err:  # noqa: BLE001 - user code: any error ends training with its name
        raise CallbackError(
            f"callback {type(callbacks).__qualname__}.{hook} raised {type(err).__name__}: {err}{where}"
        ) from err


def make_callbacks(callbacks_class: Any, functions: dict[str, Any] | None = None) -> DefaultCallbacks:
    """An instance of the config's ``callbacks_class`` (a class or a list of classes), followed
    by ``functions`` (``{hook: function, "module:function" or a list of them}``) if any."""
    if isinstance(callbacks_class, list):
        instance = MultiCallbacks(callbacks_class)
    else:
        try:
            instance = callbacks_class()
        except Exception as err:  # noqa: BLE001 - user code
            raise CallbackError(f"callbacks class {callbacks_class.__qualname__}() raised {err!r}") from err
    resolved = {hook: callback_functions(hook, value) for hook, value in (functions or {}).items()}
    if not any(resolved.values()):
        return instance
    return MultiCallbacks([instance, FunctionCallbacks(resolved)])


def config_callbacks(config: Any) -> DefaultCallbacks:
    """The callbacks a config asks for: its class(es), then its ``callbacks(on_<hook>=...)`` functions."""
    return make_callbacks(config.callbacks_class, config.callback_functions())


def callback_functions(hook: str, value: Any) -> list[Any]:
    """``callbacks(<hook>=value)``'s functions: ``value`` is a function, ``"module:function"``,
    a list of those, or ``None``; ``ConfigError`` saying what is wrong."""
    items = value if isinstance(value, list | tuple) else [value]
    return [resolve_function(f"callbacks({hook}=...)", item) for item in items if item is not None]


def loadable_config(config: Any, overrides: dict[str, Any] | None = None) -> Any:
    """A checkpoint's ``config`` dict without the callbacks this process cannot import (a class
    or function defined in the training script: ``"__main__:MyCallbacks"``, a lambda), each
    dropped with a warning, so that the checkpoint still loads (to evaluate, serve, go on
    training) without them; those that ``overrides`` sets are replaced, not imported."""
    if not isinstance(config, dict):
        return config  # a broken checkpoint: from_dict says what is wrong
    config = dict(config)
    overrides = overrides or {}
    for key in ("callbacks_class", *(f"callbacks_{hook}" for hook in FUNCTION_HOOKS)):
        if key not in config:
            continue
        if key in overrides or (key == "callbacks_class" and "callbacks" in overrides):
            del config[key]  # the caller's value replaces it
            continue
        try:
            if key == "callbacks_class":
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # unknown hooks were reported when it trained
                    check_callbacks_class(config[key])
            else:
                callback_functions(key.removeprefix("callbacks_"), config[key])
        except ConfigError as err:
            value = config.pop(key)
            logger.warning(
                "the checkpoint's %s %r cannot be loaded here, so it is not run (%s); to run it, pass "
                "config_overrides={%r: ...} with the class or function itself",
                key,
                value,
                err,
                key,
            )
    return config


# --- config values: classes <-> "module:Class" paths -----------------------------------------
def check_callbacks_class(value: Any) -> Any:
    """A ``DefaultCallbacks`` subclass or a list of them; ``"module:Class"`` strings are imported.

    Warns about ``on_*`` methods that are no hook (typos never run).
    """
    if isinstance(value, list | tuple):
        return [check_callbacks_class(item) for item in value]
    if isinstance(value, str):
        value = _import_class(value)
    if isinstance(value, type) and issubclass(value, MultiCallbacks) and hasattr(value, "callback_classes"):
        return check_callbacks_class(value.callback_classes)  # make_multi_callbacks([...])
    if not (isinstance(value, type) and issubclass(value, DefaultCallbacks)):
        raise ConfigError(
            f"callbacks(): expected a DefaultCallbacks subclass, a list of them, or "
            f"'package.module:ClassName'; got {value!r}"
        )
    _warn_unknown_hooks(value)
    return value


def callbacks_to_json(value: Any) -> Any:
    """The ``to_dict()`` form: class and function paths instead of classes and functions."""
    if isinstance(value, list):
        return [callbacks_to_json(item) for item in value]
    return value if isinstance(value, str) else object_path(value)


def _import_class(path: str) -> Any:
    try:
        return import_object(path)  # "package.module:Class" or RLlib's dotted form
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"callbacks: cannot import {path!r} ({err})") from None


def _warn_unknown_hooks(cls: type) -> None:
    for name in dir(cls):
        if not name.startswith("on_") or name in HOOKS:
            continue
        if name in NOT_CALLED:
            message = f"rltrainer never calls {cls.__qualname__}.{name}: {NOT_CALLED[name]}"
        else:
            hint = difflib.get_close_matches(name, HOOKS, n=1)
            suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
            message = f"{cls.__qualname__}.{name} is not a callback hook and is never called{suggestion}"
        warnings.warn(message, UserWarning, stacklevel=4)


__all__ = [
    "EPISODE_HOOKS",
    "FUNCTION_HOOKS",
    "HOOKS",
    "DefaultCallbacks",
    "FunctionCallbacks",
    "MemoryTrackingCallbacks",
    "MultiCallbacks",
    "RLlibCallback",
    "call_hook",
    "config_callbacks",
    "make_callbacks",
    "make_multi_callbacks",
    "overrides",
]
