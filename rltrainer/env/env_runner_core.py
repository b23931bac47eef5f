"""What every env runner shares, single-agent (``EnvRunner``) and multi-agent
(``MultiAgentEnvRunner``): the process set-up (the driver's registered envs and models, the
worker's environment variables, log level and seeds), the placing of each policy (device,
exploration's worker index, observation filter), the env errors that name the user's code, the
runner of this process (RLlib's global worker) and the interface ``EnvRunnerGroup`` and the
algorithm call on every runner (weights' timestep, filters, health probe, ``apply``,
``foreach_env``, ``stop``). Each runner keeps only how it makes and steps its envs.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from rltrainer.algorithms.callbacks import config_callbacks
from rltrainer.core.filters import make_filter
from rltrainer.core.torch_compile import worker_compile_kwargs
from rltrainer.env.env_context import EnvContext
from rltrainer.env.registry import register_env
from rltrainer.errors import EnvError
from rltrainer.errors import raised_at as _raised_at
from rltrainer.models.catalog import ModelCatalog
from rltrainer.utils.debugging import apply_debugging

logger = logging.getLogger("rltrainer.env.env_runner")  # the env runners' log: one name, shared part included

# The env runner of this process (RLlib's global worker): the newest training runner made here,
# else the newest evaluation runner.
_global_worker: weakref.ref[EnvRunnerCore] | None = None


def get_global_worker() -> EnvRunnerCore | None:
    """The env runner of the current process: in the driver its local (training) one, in an
    env-runner actor that actor's runner (RLlib's ``get_global_worker()``)."""
    return _global_worker() if _global_worker is not None else None


def _set_global_worker(runner: EnvRunnerCore) -> None:
    global _global_worker  # noqa: PLW0603 - one per process, as RLlib's
    current = get_global_worker()
    if not runner.in_evaluation or current is None or current.in_evaluation:
        _global_worker = weakref.ref(runner)


def inference_device(config: Any, worker_index: int) -> str:
    """Where a runner's policy acts: CUDA when the config gives env runners GPUs
    (``num_gpus_per_env_runner > 0``; the local runner too when it samples, i.e. with
    ``num_env_runners=0``) and torch sees one, else the CPU (numpy inference)."""
    if config.num_gpus_per_env_runner <= 0 or (worker_index == 0 and config.num_env_runners > 0):
        return "cpu"
    if config.fake_gpus:  # the GPU's code path, on the CPU (gpu_code_path)
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    logger.warning(
        "num_gpus_per_env_runner=%s but torch sees no GPU in env runner %d; inference runs on the CPU",
        config.num_gpus_per_env_runner,
        worker_index,
    )
    return "cpu"


def fake_gpu_inference(config: Any, worker_index: int) -> bool:
    """``fake_gpus`` with GPUs given to this env runner: it acts through the GPU's code path."""
    return bool(config.fake_gpus and config.num_gpus_per_env_runner > 0) and not (
        worker_index == 0 and config.num_env_runners > 0
    )


class EnvStepError(EnvError):
    """An env raised in ``reset()`` or ``step()`` (the original error is its ``__cause__``).

    Its message is one line: the env, the call, the error and where in the user's code it was
    raised (``file:line in function``), so the CLI can say it without a traceback."""

    @classmethod
    def of(cls, env: Any, call: str, err: Exception, space: Any) -> EnvStepError:
        where = _raised_at(err)
        hint = ""
        if isinstance(err, ValueError) and "shape" in str(err):  # gymnasium's batching of observations
            hint = f"; an observation does not fit the observation space {space}"
        return cls(f"env {env!r}: {call} raised {type(err).__name__}: {err}{where}{hint}")


def creation_error(env: Any, err: Exception) -> EnvError:
    """The env's own constructor raised ``err``: say where, in one line."""
    return EnvError(f"env {env!r}: creating it raised {type(err).__name__}: {err}{_raised_at(err)}")


def prepare_runner_process(
    config: Any,
    remote: bool,
    env_creators: dict[str, Any] | None = None,
    custom_models: dict[str, type] | None = None,
) -> None:
    """What an env runner's process needs before it makes envs: the driver's ``register_env`` and
    ``register_custom_model`` entries (they are per process, so remote runners receive them) and,
    in a remote runner, ``extra_python_environs_for_worker``."""
    for name, creator in (env_creators or {}).items():
        register_env(name, creator)
    ModelCatalog.register_all(custom_models)
    if remote:
        os.environ.update(config.extra_python_environs_for_worker)


class EpisodePlan(NamedTuple):
    """What ``sample_episodes`` asked for: env i's share of the episodes in ``quota[i]``
    (``None``: no number of episodes), at most ``num_timesteps`` env steps (``None``: no limit)."""

    quota: np.ndarray | None
    num_timesteps: int | None
    explore: bool
    force_reset: bool
    update_filter: bool


class EnvRunnerCore:
    """The part of an env runner that does not step envs (see the module doc). Subclasses make
    their envs and policies in ``_build()``, which ``__init__`` calls after the process set-up,
    and provide ``policy_map``, ``filter`` (with a filter's state interface), ``sample()``,
    ``_sub_envs()`` and ``_close_envs()``."""

    filter: Any
    #: ``offline_data()``: the recorded input and the writer of sampled batches, where a runner has them.
    offline_input: Any = None
    output_writer: Any = None

    def __init__(
        self,
        config: Any,
        worker_index: int = 0,
        num_workers: int = 0,
        remote: bool = False,
        env_creators: dict[str, Any] | None = None,
        in_evaluation: bool = False,
        custom_models: dict[str, type] | None = None,
    ) -> None:
        """``in_evaluation``: a runner of the evaluation group (``policy_config["in_evaluation"]``)."""
        prepare_runner_process(config, remote, env_creators, custom_models)
        self.config = config
        self.in_evaluation = in_evaluation
        self.worker_index = worker_index
        self.num_workers = num_workers
        apply_debugging(config, seed_offset=1000 * worker_index)  # log level; seeds in an actor
        self._ctx = EnvContext(config.env_config, worker_index, 0, num_workers, remote=remote)
        self.callbacks = config_callbacks(config)
        self._where = f" in env runner {worker_index}"  # for callback errors
        self._policy_config: dict[str, Any] | None = None
        self._build()
        _set_global_worker(self)

    def _build(self) -> None:
        """Make the envs and the policies (each runner its own)."""
        raise NotImplementedError

    # --- policies ----------------------------------------------------------------------
    def _seed(self, offset: int = 0) -> int | None:
        """This runner's seed (its policies' and envs'): ``seed + 1000 * worker_index + offset``."""
        return None if self.config.seed is None else self.config.seed + 1000 * self.worker_index + offset

    def _place_policy(self, policy: Any, config: Any) -> Any:
        """Set ``policy`` up to act in this runner (``config``: its own, e.g. a multi-agent
        policy's): exploration's worker index, the inference device; returns its new observation
        filter, which the policy also keeps (``Policy.compute_single_action`` filters with it)."""
        policy.exploration.set_worker(self.worker_index, self.num_workers)
        policy.set_device(
            inference_device(self.config, self.worker_index),
            gpu_code_path=fake_gpu_inference(self.config, self.worker_index),
            compile_kwargs=worker_compile_kwargs(config),
        )
        observation_filter = make_filter(config.observation_filter, policy.preprocessor.size)
        policy.observation_filter = observation_filter
        return observation_filter

    def foreach_policy(self, fn: Callable[..., Any]) -> list[Any]:
        """``fn(policy, policy_id)`` for every policy of this runner (RLlib's ``foreach_policy``)."""
        return [fn(policy, pid) for pid, policy in self.policy_map.items()]

    @property
    def preprocessors(self) -> dict[str, Any]:
        """``{policy id: preprocessor}`` (RLlib's ``RolloutWorker.preprocessors``)."""
        return {pid: policy.preprocessor for pid, policy in self.policy_map.items()}

    @property
    def policy_config(self) -> dict[str, Any]:
        """The config as a dict (``to_dict()``) plus ``in_evaluation`` (RLlib's
        ``RolloutWorker.policy_config``); computed once per runner (and policy change)."""
        if self._policy_config is None:
            self._policy_config = {**self.config.to_dict(), "in_evaluation": self.in_evaluation}
        return self._policy_config

    def set_global_timestep(self, timestep: int) -> None:
        """The algorithm's env-step count, which exploration schedules follow."""
        for policy in self.policy_map.values():
            policy.global_timestep = int(timestep)

    # --- samples and filters -----------------------------------------------------------
    def sample(self, explore: bool | None = None) -> tuple[Any, list[Any]]:
        raise NotImplementedError

    def sample_with_filter_delta(self) -> tuple[Any, list[Any], dict[str, Any]]:
        """``sample()`` plus the observation statistics gathered meanwhile (for remote runners)."""
        batch, episodes = self.sample()
        return self._for_driver(batch), episodes, self.filter.pop_delta()

    def _for_driver(self, batch: Any) -> Any:
        """A sampled batch as it travels to the driver."""
        return batch

    def sample_episodes(
        self,
        num_episodes: int | None = None,
        num_timesteps: int | None = None,
        explore: bool | None = None,
        force_reset: bool = True,
        update_filter: bool = False,
    ) -> tuple[list[Any], int]:
        """Run episodes (e.g. for evaluation), by default without touching the filter statistics
        (``update_filter=True``: they learn from these episodes too, as ES's rollouts do).

        Returns the completed episodes and the env steps taken.
        With ``num_episodes``, env i contributes ``(num_episodes + i) // num_envs`` of them
        (SB3's ``evaluate_policy`` scheme): taking whichever episodes finish first would
        favour short, failed ones. ``force_reset=False`` continues the episodes the last call
        left running instead of resetting the envs first.
        """
        explore = self.config.explore if explore is None else explore
        quota = None
        if num_episodes is not None:
            quota = np.array([(num_episodes + i) // self.num_envs for i in range(self.num_envs)])
        return self._run_episodes(EpisodePlan(quota, num_timesteps, explore, force_reset, update_filter))

    def _run_episodes(self, plan: EpisodePlan) -> tuple[list[Any], int]:
        """``sample_episodes`` as ``plan`` says."""
        raise NotImplementedError

    def get_filter_state(self) -> dict[str, Any]:
        return self.filter.get_state()

    def set_filter_state(self, state: dict[str, Any]) -> None:
        self.filter.set_state(state)

    # --- envs and the actor's interface --------------------------------------------------
    def _sub_envs(self) -> list[Any]:
        raise NotImplementedError

    def foreach_env(self, fn: Callable[[Any], Any]) -> list[Any]:
        """``fn`` applied to each sub-env (or to the batched env when it is one object; with
        ``remote_worker_envs``, to each sub-env's actor handle, as RLlib)."""
        return [fn(env) for env in self._sub_envs()]

    def foreach_env_with_context(self, fn: Callable[[Any, EnvContext], Any]) -> list[Any]:
        """``fn(env, env_ctx)`` for each sub-env, with the ``EnvContext`` it was created with
        (``worker_index``, its own ``vector_index``); a batched env is one object (index 0)."""
        return [
            fn(env, self._ctx.copy_with_overrides(vector_index=i)) for i, env in enumerate(self._sub_envs())
        ]

    def ping(self) -> bool:
        """Health probe for restarted remote runners."""
        return True

    def apply(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(self, *args)``: how ``foreach_worker`` reaches remote runners."""
        return fn(self, *args)

    def stop(self) -> None:
        """Stop the offline input (a policy server's socket), name (or upload) the output
        writer's last file, close the envs."""
        if self.offline_input is not None:
            self.offline_input.stop()
        if self.output_writer is not None:
            self.output_writer.close()
        self._close_envs()

    def _close_envs(self) -> None:
        raise NotImplementedError
