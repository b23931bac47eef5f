"""``EnvRunner``: steps a vector of envs with batched policy inference and returns batches.

One runner owns ``num_envs_per_env_runner`` envs in a gymnasium vector env (next-step
autoreset), the policy copy used for inference and the observation filter. The same class
runs in the driver (``num_env_runners=0``) and as a Ray actor.

Next-step autoreset: after a step that ends an episode, the following ``step`` call resets
that env and ignores its action. Such reset steps are recorded with ``valid=False`` and
dropped from the train batch; they still carry the value of the episode's final
observation, which is what a truncated episode bootstraps from.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from rltrainer.algorithms.callbacks import EPISODE_HOOKS, call_hook, make_callbacks, overrides
from rltrainer.core import compiled
from rltrainer.core.cluster import REMOTE_ENVS_WITHOUT_TASKS, uses_remote_envs
from rltrainer.core.exploration import Exploration
from rltrainer.core.filters import NoFilter, make_filter
from rltrainer.core.torch_compile import worker_compile_kwargs
from rltrainer.env.apis.task_settable_env import TaskSettableEnv, carry_task, find_task_settable
from rltrainer.env.env_checker import check_env
from rltrainer.env.env_context import EnvContext
from rltrainer.env.episode import EpisodeTracker
from rltrainer.env.finite_guard import FiniteGuard
from rltrainer.env.recurrent_sampling import RecurrentInputs
from rltrainer.env.registry import RestartOnCrash, make_env, register_env
from rltrainer.env.rollout import EpisodeStats, Rollout
from rltrainer.env.vector_env import make_vector_env
from rltrainer.env.video import EpisodeVideos, video_role
from rltrainer.errors import ConfigError, EnvError, RLTrainerError
from rltrainer.errors import raised_at as _raised_at
from rltrainer.models.catalog import ModelCatalog
from rltrainer.offline.offline_input import make_offline_input
from rltrainer.offline.output_writer import make_output_writer
from rltrainer.utils.debugging import apply_debugging
from rltrainer.utils.sample_batch import SampleBatch, written_columns

logger = logging.getLogger(__name__)

_CRASHED_MASK = "_" + RestartOnCrash.CRASHED  # SyncVectorEnv's info mask of recreated envs

_noted_single_remote_env = False  # remote_worker_envs with one env per runner was logged

# The env runner of this process (RLlib's global worker): the newest training runner made here,
# else the newest evaluation runner.
_global_worker: weakref.ref[EnvRunner] | None = None


def get_global_worker() -> EnvRunner | None:
    """The env runner of the current process: in the driver its local (training) one, in an
    env-runner actor that actor's runner (RLlib's ``get_global_worker()``)."""
    return _global_worker() if _global_worker is not None else None


def _set_global_worker(runner: EnvRunner) -> None:
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


def _stack_steps(steps: list[np.ndarray]) -> np.ndarray:
    """``np.stack(steps)`` for arrays of one shape, at a third of its cost (no per-array views)."""
    return np.concatenate(steps).reshape(len(steps), *steps[0].shape)


class _Step(NamedTuple):
    """One step of every env: a row of each ``Rollout`` column."""

    obs: np.ndarray
    actions: np.ndarray
    action_logp: np.ndarray
    rewards: np.ndarray
    terminateds: np.ndarray
    truncateds: np.ndarray
    valid: np.ndarray


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


def _not_task_settable(spec: Any, env: gym.Env, batched: bool) -> str:
    """What ``env_task_fn`` needs, said about an env that is not a ``TaskSettableEnv``."""
    name = f"{spec.__module__}:{spec.__qualname__}" if isinstance(spec, type) else spec
    why = (
        " (a gymnasium id with a vector_entry_point is stepped as one batched env, which has no "
        "sub-envs to set tasks on)"
        if batched
        else ""
    )
    return (
        "environment(): env_task_fn needs envs that are rltrainer.env.TaskSettableEnv subclasses "
        f"(with get_task() and set_task(task)), but env {name!r} creates "
        f"{type(env.unwrapped).__name__}{why}; subclass TaskSettableEnv or remove env_task_fn"
    )


def prepare_runner_process(
    config: Any, remote: bool, env_creators: dict[str, Any] | None, custom_models: dict[str, type] | None
) -> None:
    """What an env runner's process needs before it makes envs: the driver's ``register_env`` and
    ``register_custom_model`` entries (they are per process, so remote runners receive them) and,
    in a remote runner, ``extra_python_environs_for_worker``."""
    for name, creator in (env_creators or {}).items():
        register_env(name, creator)
    ModelCatalog.register_all(custom_models)
    if remote:
        os.environ.update(config.extra_python_environs_for_worker)


class EnvRunner:
    """Samples rollouts from vectorized envs; the config decides envs, filter and batch mode."""

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
        self._policy_config: dict[str, Any] | None = None
        apply_debugging(config, seed_offset=1000 * worker_index)  # log level; seeds in an actor
        self.worker_index = worker_index
        self._ctx = EnvContext(config.env_config, worker_index, 0, num_workers, remote=remote)
        self.callbacks = make_callbacks(config.callbacks_class)
        self._where = f" in env runner {worker_index}"  # for callback errors
        self.env = self._make_envs()
        self.num_envs = self.env.num_envs
        self.observation_space = config.observation_space or self.env.single_observation_space
        self.action_space = config.action_space or self.env.single_action_space
        try:
            seed = None if config.seed is None else config.seed + 1000 * worker_index
            policy_class = config.get_policy_class()  # the algorithm's Policy subclass
            self.policy = policy_class(self.observation_space, self.action_space, config, seed=seed)
        except ConfigError:
            raise
        except ValueError as err:
            raise EnvError(f"env {config.env!r}: {err}") from None
        if (
            worker_index == 0
            and not in_evaluation
            and not config.disable_env_checking
            and config.env is not None
        ):
            self._check_env()  # once, in the driver, before any runner samples (spaces known good)
        self.policy.exploration.set_worker(worker_index, num_workers)
        self.policy.set_device(
            inference_device(config, worker_index),
            gpu_code_path=fake_gpu_inference(config, worker_index),
            compile_kwargs=worker_compile_kwargs(config),
        )
        self.filter = make_filter(config.observation_filter, self.policy.preprocessor.size)
        self._unfiltered = type(self.filter) is NoFilter  # (MeanStdFilter subclasses it)
        self.policy.observation_filter = self.filter
        # An LSTM policy's per-env state and previous action/reward (None: a stateless policy).
        self._recurrent = None
        if self.policy.recurrent:
            self._recurrent = RecurrentInputs(self.policy, self.num_envs, config.model)
        self._obs: Any = None
        self._prev_done = np.zeros(self.num_envs, dtype=bool)
        self._ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self._ep_len = np.zeros(self.num_envs, dtype=np.int64)
        self._episodes: list[EpisodeStats] = []
        self._recreated: np.ndarray | None = None  # envs recreated after a crash in the last step
        self._guard = FiniteGuard(
            config.on_nonfinite,
            worker_index,
            config.env_name,
            config.num_consecutive_env_runner_failures_tolerance,
        )
        # Only explorations that override the hook (e.g. OU noise) are told about episode ends.
        self._notify_episode_ends = (
            type(self.policy.exploration).on_episodes_done is not Exploration.on_episodes_done
        )
        self._seeded = False
        self.output_writer = make_output_writer(config, worker_index, self.num_envs)  # offline_data()
        # Held while the policy's weights change: a policy server's request threads act with them.
        self.inference_lock: Any = nullcontext()
        # offline_data(input_=...): recorded rows instead of (or mixed with) the envs' steps
        self.offline_input = None if in_evaluation else make_offline_input(config, self)
        logger.debug("env runner %d: %d x %s, seed %s", worker_index, self.num_envs, config.env, config.seed)
        # Episode objects for callbacks, only when an episode hook is overridden (see EpisodeTracker).
        self._tracker: EpisodeTracker | None = None
        if any(overrides(self.callbacks, hook) for hook in EPISODE_HOOKS):
            self._tracker = EpisodeTracker(self, self.callbacks)
        self._calls_sample_end = overrides(self.callbacks, "on_sample_end")
        self._postprocesses_rollouts = hasattr(self.policy.exploration, "postprocess_rollout")
        _set_global_worker(self)

    # --- sampling ------------------------------------------------------------------
    def sample(self, explore: bool | None = None) -> tuple[Rollout, list[EpisodeStats]]:
        """One rollout fragment per env, plus the episodes completed meanwhile.

        With ``restart_failed_sub_environments`` an env that raises is recreated (with its
        siblings in the vector env) and the fragment sampled again, up to
        ``num_consecutive_env_runner_failures_tolerance`` times in a row.
        """
        explore = self.config.explore if explore is None else explore
        steps = self.config.get_rollout_fragment_length()
        if self.offline_input is not None:
            recorded = self.offline_input.next(steps * self.num_envs)
            if recorded is not None:
                return recorded
        complete = self.config.batch_mode == "complete_episodes"
        failures = 0
        while True:
            try:
                rollout = self._rollout(steps, explore, complete_episodes=complete)
            except EnvStepError as err:
                failures += 1
                tolerance = self.config.num_consecutive_env_runner_failures_tolerance
                if not self.config.restart_failed_sub_environments or failures >= tolerance:
                    raise
                logger.warning("env runner %d: %s; recreating its envs", self.worker_index, err)
                self._recreate_envs()
                continue
            if self._postprocesses_rollouts:  # e.g. Curiosity: intrinsic rewards added
                rollout = self.policy.exploration.postprocess_rollout(rollout)
            if self._calls_sample_end:
                rollout = self._sample_end(rollout)
            if self.output_writer is not None:
                self.output_writer.write(rollout)
            return rollout, self.pop_episodes()

    def _sample_end(self, rollout: Rollout) -> Rollout:
        """``on_sample_end`` with the fragment as a ``SampleBatch`` of ``[T, N]`` columns."""
        columns = rollout._asdict()
        recurrent = columns.pop("recurrent")
        samples = SampleBatch(columns)
        call_hook(self.callbacks, "on_sample_end", self._where, worker=self, samples=samples)
        shapes = {name: value.shape for name, value in columns.items()}
        return Rollout(**written_columns(samples, shapes, "on_sample_end"), recurrent=recurrent)

    def _with_custom_metrics(self, episodes: Any) -> list[EpisodeStats]:
        """Ended episodes' statistics, with the custom metrics callbacks set on each."""
        episodes = list(episodes)
        if self._tracker is None:
            return episodes
        tracked = self._tracker.pop_completed()  # the same episodes, in the same (step, env) order
        return [
            EpisodeStats(stats[0], stats[1], episode.custom_metrics or None, episode.hist_data or None)
            for stats, episode in zip(episodes, tracked, strict=True)
        ]

    def _recreate_envs(self) -> None:
        failed = self._sub_envs()
        try:
            self.env.close()
        except Exception:  # noqa: BLE001 - a broken env may fail to close too
            logger.debug("closing a failed env raised", exc_info=True)
        self.env = self._make_envs()
        for old, new in zip(failed, self._sub_envs(), strict=True):
            carry_task(old, new)  # TaskSettableEnvs keep their (curriculum) tasks
        self._obs = None

    def _check_env(self) -> None:
        """RLlib's env check at build (``rltrainer.env.env_checker``) on the first env copy
        (sampling resets it before use), or, for a natively batched env or remote sub-envs
        (``remote_worker_envs``), on one more env made here."""
        copies = getattr(self.env, "envs", None)
        env = copies[0] if copies else make_env(self.config.env, self._ctx)
        if isinstance(env, EpisodeVideos):  # the check's reset and step are no episode to record
            env = env.env
        try:
            mask_key = self.config.model.action_mask_key
            check_env(env, self.config.env_name, seed=self.config.seed or 0, action_mask_key=mask_key)
        finally:
            if not copies:
                env.close()

    def _make_envs(self) -> gym.vector.VectorEnv:
        if self.config.env is None:  # trains from input_ only (the config checked the spaces)
            from rltrainer.env.no_env import NoEnv

            return NoEnv(
                self.config.observation_space, self.config.action_space, self.config.num_envs_per_env_runner
            )
        per_env = overrides(self.callbacks, "on_sub_environment_created")
        remote = self._remote_envs()
        render_mode = video_role(self.config, self.worker_index, self._ctx.num_workers)
        if remote and render_mode is not None:
            raise ConfigError(
                "record_env/render_env show the first sub-env, and with remote_worker_envs=True it lives "
                "in an actor of its own: set remote_worker_envs=False to record or render"
            )
        if remote and per_env:
            raise ConfigError(
                f"{type(self.callbacks).__name__}.on_sub_environment_created gets each sub-env object, but "
                "with remote_worker_envs=True they live in actors of their own: set remote_worker_envs=False "
                "or use on_environment_created (its env's actors attribute holds the actors)"
            )
        try:
            env = make_vector_env(
                self.config.env,
                self._ctx,
                self.config.num_envs_per_env_runner,
                restart_failed=self.config.restart_failed_sub_environments,
                sub_envs=per_env,  # the hook gets each env object, so no natively batched env
                horizon=self.config.horizon,
                remote=remote,
                worker_env_vars=self.config.extra_python_environs_for_worker,
                first_render_mode=render_mode,
            )
            if render_mode is not None:
                self._show_first_env(env, render_mode)
        except RLTrainerError:
            raise
        except Exception as err:  # the env's own constructor: say where, in one line
            raise EnvError(
                f"env {self.config.env!r}: creating it raised {type(err).__name__}: {err}{_raised_at(err)}"
            ) from err
        call_hook(
            self.callbacks,
            "on_environment_created",
            self._where,
            env_runner=self,
            env=env,
            env_context=self._ctx,
        )
        if per_env:
            for index, sub_env in enumerate(env.envs):
                call_hook(
                    self.callbacks,
                    "on_sub_environment_created",
                    self._where,
                    worker=self,
                    sub_environment=sub_env,
                    env_context=self._ctx.copy_with_overrides(vector_index=index),
                    env_index=index,
                )
        return env

    def _show_first_env(self, env: gym.vector.SyncVectorEnv, render_mode: str) -> None:
        """Wrap copy 0 to record its episodes (``record_env``) or draw them (``render_env``)."""
        from rltrainer.env.video import check_renders

        first = env.envs[0]
        setting = "record_env" if render_mode == "rgb_array" else "render_env"
        check_renders(first.unwrapped, self.config.env_name, render_mode, setting)
        if render_mode == "human":  # such an env draws itself in reset() and step() (gymnasium's API)
            return
        folder = self.config._video_dir
        if folder is None:  # an env runner made outside an algorithm (tests, tools)
            raise ConfigError("record_env: no video folder was resolved (build the algorithm to record)")
        where = "evaluation" if self.in_evaluation else "training"
        env.envs[0] = EpisodeVideos(first, os.path.join(folder, where), f"runner-{self.worker_index}")

    def _remote_envs(self) -> bool:
        """Whether the sub-envs live in actors of their own: ``remote_worker_envs`` with more than
        one env per runner (RLlib ignores it for one env, and so does this, saying so once)."""
        global _noted_single_remote_env  # noqa: PLW0603 - said once per process
        if uses_remote_envs(self.config):
            return True
        if self.config.remote_worker_envs and not _noted_single_remote_env:
            logger.info("remote_worker_envs=True is ignored with num_envs_per_env_runner=1 (as in RLlib)")
            _noted_single_remote_env = True
        return False

    def sample_episodes(
        self,
        num_episodes: int | None = None,
        num_timesteps: int | None = None,
        explore: bool | None = None,
        force_reset: bool = True,
        update_filter: bool = False,
    ) -> tuple[list[EpisodeStats], int]:
        """Run episodes (e.g. for evaluation), by default without touching the filter statistics
        (``update_filter=True``: they learn from these episodes too, as ES's rollouts do).

        Returns the completed episodes and the env steps taken.
        With ``num_episodes``, env i contributes ``(num_episodes + i) // num_envs`` of them
        (SB3's ``evaluate_policy`` scheme): taking whichever episodes finish first would
        favour short, failed ones. ``force_reset=False`` continues the episodes the last call
        left running instead of resetting the envs first.
        """
        explore = self.config.explore if explore is None else explore
        if force_reset or self._obs is None:
            self._reset()
        quota = None
        if num_episodes is not None:
            quota = np.array([(num_episodes + i) // self.num_envs for i in range(self.num_envs)])
        counted = np.zeros(self.num_envs, dtype=np.int64)
        episodes: list[EpisodeStats] = []
        steps = 0
        while (quota is None or (counted < quota).any()) and (num_timesteps is None or steps < num_timesteps):
            step = self._step(explore, update_filter=update_filter)
            steps += int(step.valid.sum())
            dones = step.terminateds | step.truncateds
            ended = self._close_episodes(np.asarray(step.rewards)[None], step.valid[None], dones[None])
            for env_index, episode in zip(
                (index for index, _ in ended), self._with_custom_metrics(e for _, e in ended), strict=True
            ):
                if quota is None or counted[env_index] < quota[env_index]:
                    counted[env_index] += 1
                    episodes.append(episode)
        return episodes, steps

    def sample_with_filter_delta(self) -> tuple[Rollout, list[EpisodeStats], dict[str, np.ndarray]]:
        """``sample()`` plus the observation statistics gathered meanwhile (for remote runners);
        with ``compress_observations`` the observations travel lz4-compressed."""
        rollout, episodes = self.sample()
        if self.config.compress_observations:
            from rltrainer.utils.compression import pack_rollout

            rollout = pack_rollout(rollout)
        return rollout, episodes, self.filter.pop_delta()

    def pop_episodes(self) -> list[EpisodeStats]:
        episodes, self._episodes = self._episodes, []
        return episodes

    def _reset(self) -> None:
        seed = None
        if not self._seeded and self.config.seed is not None:
            seed = self.config.seed + 1000 * self.worker_index
        self._seeded = True
        if self._tracker is not None:
            self._tracker.before_reset()
        try:
            self._obs, infos = self.env.reset(seed=seed)
        except Exception as err:
            raise EnvStepError.of(self.config.env, "reset()", err, self.observation_space) from err
        if self._tracker is not None:
            self._tracker.after_reset(self._obs, infos)
        self._prev_done[:] = False
        if self._recurrent is not None:
            self._recurrent.reset_all()
        self._ep_return[:] = 0.0
        self._ep_len[:] = 0
        if self.output_writer is not None:
            self.output_writer.new_episodes()

    def _rollout(
        self, num_steps: int, explore: bool, complete_episodes: bool = False, update_filter: bool = True
    ) -> Rollout:
        if self._obs is None or complete_episodes:
            self._reset()
        if self._tracker is not None:
            self._tracker.start_fragment()
        if self._recurrent is not None:
            self._recurrent.start_fragment()
        # complete_episodes: envs that finished their share (None otherwise: nothing to mask per step)
        frozen = np.zeros(self.num_envs, dtype=bool) if complete_episodes else None
        columns: dict[str, list[np.ndarray]] = {k: [] for k in _Step._fields}
        obs, actions, logp, rewards, terminateds, truncateds, valid = columns.values()  # the lists
        # Reset steps (next-step autoreset) don't count: each env steps until it has num_steps
        # real ones (and, for complete_episodes, until its episode ends). So the first num_steps
        # iterations need no count (None until then).
        steps_taken = np.zeros(self.num_envs, dtype=np.int64) if complete_episodes else None
        t = 0
        while True:
            if t >= num_steps:
                if steps_taken is None:
                    steps_taken = np.sum(columns["valid"], axis=0)
                if steps_taken.min() >= num_steps and (frozen is None or frozen.all()):
                    break
            step = self._step(explore, update_filter, frozen)
            obs.append(step.obs)
            actions.append(step.actions)
            logp.append(step.action_logp)
            rewards.append(step.rewards)
            terminateds.append(step.terminateds)
            truncateds.append(step.truncateds)
            valid.append(step.valid)
            if steps_taken is not None:
                steps_taken += step.valid
            if self._recreated is not None:
                self._drop_crashed_episodes(columns, np.flatnonzero(self._recreated), steps_taken)
            if frozen is not None:
                frozen |= (step.terminateds | step.truncateds) & step.valid & (steps_taken >= num_steps)
            t += 1
        last_obs = self._observe(update_filter=False)
        batch: dict[str, Any] = {k: _stack_steps(v) for k, v in columns.items()}
        if self._recurrent is not None:
            batch["recurrent"] = self._recurrent.finish_fragment(last_obs)
        if self._guard.end_fragment():  # NaN/inf seen with on_nonfinite="skip_batch": no step counts
            batch["valid"] = np.zeros_like(batch["valid"])
        raw_rewards = batch["rewards"].astype(np.float32, copy=False)
        ended = self._close_episodes(raw_rewards, batch["valid"], batch["terminateds"] | batch["truncateds"])
        self._episodes.extend(self._with_custom_metrics(episode for _, episode in ended))
        batch["rewards"] = self.clip_rewards(raw_rewards)
        if self._tracker is not None and self._tracker.postprocesses:
            if batch["rewards"] is raw_rewards:
                batch["rewards"] = raw_rewards.copy()  # (a view of the env's rewards otherwise)
            self._tracker.postprocess(batch, last_obs)
        return Rollout(**batch, last_obs=last_obs)

    @staticmethod
    def _drop_crashed_episodes(
        columns: dict[str, list[np.ndarray]], envs: np.ndarray, steps_taken: np.ndarray | None
    ):
        """Mark the steps of each crashed env's current episode (in this fragment) invalid."""
        for i in envs:
            t = len(columns["valid"]) - 1  # the crash step (truncated): its episode began after the last end
            while t > 0 and not (columns["terminateds"][t - 1][i] or columns["truncateds"][t - 1][i]):
                t -= 1
            for step_valid in columns["valid"][t:]:
                if steps_taken is not None:
                    steps_taken[i] -= step_valid[i]
                step_valid[i] = False

    def _step(self, explore: bool, update_filter: bool, frozen: np.ndarray | None = None) -> _Step:
        """Act in every env once; returns what a rollout records about this step.

        Only what the next step depends on happens here (the hot path of sampling);
        episode returns and lengths are summed per rollout by ``_close_episodes``.
        """
        flat = self._observe(update_filter)
        if self._recurrent is None:
            out = self.policy.compute(flat, explore)
        else:
            out = self.policy.compute(flat, explore, **self._recurrent.inputs())
        try:
            next_obs, rewards, terminateds, truncateds, infos = self.env.step(out["env_actions"])
        except Exception as err:
            raise EnvStepError.of(self.config.env, "step()", err, self.observation_space) from err
        rewards = self._guard.check("reward", np.asarray(rewards), self.policy.global_timestep)
        valid = ~self._prev_done if frozen is None else ~self._prev_done & ~frozen
        if update_filter:  # training steps advance the exploration schedules; evaluation doesn't
            self.policy.global_timestep += np.count_nonzero(valid)
        # Envs recreated after a crash (RestartOnCrash) end their episode unreported.
        self._recreated = infos.get(_CRASHED_MASK)  # SyncVectorEnv's mask, if any
        if self._recreated is not None:
            self._recreated = self._recreated & valid
            valid = valid & ~self._recreated
            if not self._recreated.any():
                self._recreated = None
        resetting, self._prev_done = self._prev_done, terminateds | truncateds
        if self._recurrent is not None:
            self._recurrent.after_step(out, self.clip_rewards(rewards.astype(np.float32)), resetting)
        if self._notify_episode_ends and self._prev_done.any():
            self.policy.exploration.on_episodes_done(self._prev_done)
        self._obs = next_obs
        if self._tracker is not None:
            self._tracker.after_step(
                next_obs, out["env_actions"], rewards, self._prev_done, terminateds, valid, resetting, infos
            )
        return _Step(flat, out["actions"], out["action_logp"], rewards, terminateds, truncateds, valid)

    def _observe(self, update_filter: bool) -> np.ndarray:
        """The envs' current observations, flattened and filtered."""
        flat = self._guard.check(
            "observation", self.policy.preprocessor.transform(self._obs), self.policy.global_timestep
        )
        return flat if self._unfiltered else self.filter(flat, update=update_filter)

    def _close_episodes(
        self, rewards: np.ndarray, valid: np.ndarray, dones: np.ndarray
    ) -> list[tuple[int, EpisodeStats]]:
        """Episode accounting for ``[T, N]`` steps at once (a rollout, or one step).

        Adds the valid steps' rewards to each env's running episode; every done step closes
        its env's episode, which is reported (as ``(env index, stats)``, in step order) only
        when that step is valid: a crashed env's truncation closes its episode unreported.
        """
        kernels = compiled.for_batch(self.num_envs)
        if kernels is not None:  # the same walk, compiled
            ended = kernels.close_episodes(rewards, valid, dones, self._ep_return, self._ep_len)
        else:
            ended = self._close_episodes_numpy(rewards, valid, dones)
        env_index, episode_return, episode_len = (column.tolist() for column in ended)
        return list(zip(env_index, map(EpisodeStats, episode_return, episode_len), strict=True))

    def _close_episodes_numpy(
        self, rewards: np.ndarray, valid: np.ndarray, dones: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``_close_episodes`` with cumulative sums: env index, return and length per episode."""
        returns = np.cumsum(np.where(valid, rewards, 0.0), axis=0, dtype=np.float64)
        returns += self._ep_return  # running sums [T, N], carried over from earlier steps
        lengths = np.cumsum(valid, axis=0, dtype=np.int64)
        lengths += self._ep_len
        t_end, env_end = np.nonzero(dones)
        self._ep_return, self._ep_len = returns[-1].copy(), lengths[-1].copy()
        if not len(t_end):
            return t_end, np.zeros(0), t_end
        by_env = np.lexsort((t_end, env_end))  # each env's ends in step order
        t_end, env_end = t_end[by_env], env_end[by_env]
        return_at_end, length_at_end = returns[t_end, env_end], lengths[t_end, env_end]
        # An episode's sums are the running sums at its end minus those at its env's previous end.
        follows = np.zeros(len(t_end), dtype=bool)
        follows[1:] = env_end[1:] == env_end[:-1]
        episode_return, episode_len = return_at_end.copy(), length_at_end.copy()
        episode_return[1:] -= np.where(follows[1:], return_at_end[:-1], 0.0)
        episode_len[1:] -= np.where(follows[1:], length_at_end[:-1], 0)
        last = np.ones(len(t_end), dtype=bool)
        last[:-1] = ~follows[1:]
        self._ep_return[env_end[last]] -= return_at_end[last]
        self._ep_len[env_end[last]] -= length_at_end[last]
        reported = np.flatnonzero(valid[t_end, env_end])
        reported = reported[np.lexsort((env_end[reported], t_end[reported]))]  # step order
        return env_end[reported], episode_return[reported], episode_len[reported]

    def clip_rewards(self, rewards: np.ndarray) -> np.ndarray:
        """Rewards as the learner sees them (``clip_rewards``: signs, or clipped at a bound)."""
        clip = self.config.clip_rewards
        if clip is True:
            return np.sign(rewards)
        if clip:  # a float bound
            return np.clip(rewards, -clip, clip)
        return rewards

    # --- weights, filters, helpers ------------------------------------------------------
    @property
    def policy_map(self) -> dict[str, Any]:
        """``{"default_policy": policy}``: the Trainer-era ``local_worker().policy_map``."""
        return {"default_policy": self.policy}

    def get_policy(self, policy_id: str = "default_policy") -> Any:  # noqa: ARG002
        """The policy this runner acts with (RLlib's ``RolloutWorker.get_policy``)."""
        return self.policy

    def foreach_policy(self, fn: Callable[..., Any]) -> list[Any]:
        """``[fn(policy, "default_policy")]`` (RLlib's ``foreach_policy``; one policy here)."""
        return [fn(self.policy, "default_policy")]

    foreach_policy_to_train = foreach_policy

    @property
    def preprocessors(self) -> dict[str, Any]:
        """``{"default_policy": preprocessor}`` (RLlib's ``RolloutWorker.preprocessors``)."""
        return {"default_policy": self.policy.preprocessor}

    @property
    def filters(self) -> dict[str, Any]:
        """``{"default_policy": observation filter}`` (RLlib's ``RolloutWorker.filters``)."""
        return {"default_policy": self.filter}

    @property
    def policy_config(self) -> dict[str, Any]:
        """The config as a dict (``to_dict()``) plus ``in_evaluation`` (RLlib's
        ``RolloutWorker.policy_config``); computed once per runner."""
        if self._policy_config is None:
            self._policy_config = {**self.config.to_dict(), "in_evaluation": self.in_evaluation}
        return self._policy_config

    def get_weights(self) -> dict[str, np.ndarray]:
        return self.policy.get_weights()

    def set_weights(self, weights: dict[str, Any]) -> None:
        with self.inference_lock:
            self.policy.set_weights(weights)

    def set_global_timestep(self, timestep: int) -> None:
        """The algorithm's env-step count, which exploration schedules follow."""
        self.policy.global_timestep = int(timestep)

    def get_filter_state(self) -> dict[str, np.ndarray]:
        return self.filter.get_state()

    def set_filter_state(self, state: dict[str, np.ndarray]) -> None:
        self.filter.set_state(state)

    def ping(self) -> bool:
        """Health probe for restarted remote runners."""
        return True

    def apply(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(self, *args)``: how ``foreach_worker`` reaches remote runners."""
        return fn(self, *args)

    def foreach_env(self, fn: Callable[[gym.Env], Any]) -> list[Any]:
        """``fn`` applied to each sub-env (or to the batched env when it is one object; with
        ``remote_worker_envs``, to each sub-env's actor handle, as RLlib)."""
        return [fn(env) for env in self._sub_envs()]

    def foreach_env_with_context(self, fn: Callable[[gym.Env, EnvContext], Any]) -> list[Any]:
        """``fn(env, env_ctx)`` for each sub-env, with the ``EnvContext`` it was created with
        (``worker_index``, its own ``vector_index``); a batched env is one object (index 0)."""
        return [
            fn(env, self._ctx.copy_with_overrides(vector_index=i)) for i, env in enumerate(self._sub_envs())
        ]

    def _sub_envs(self) -> list[gym.Env]:
        """The sub-envs as their creator made them (without ``RestartOnCrash``), or the batched env;
        with ``remote_worker_envs`` their actors' handles (RLlib's ``get_sub_environments()``)."""
        envs = getattr(self.env, "envs", None)
        if envs is None:
            return list(getattr(self.env, "actors", None) or [self.env])
        return [env.env if isinstance(env, RestartOnCrash) else env for env in envs]

    # --- tasks (curriculum learning) ----------------------------------------------------
    def task_settable_envs(self) -> list[TaskSettableEnv]:
        """Each sub-env's ``TaskSettableEnv`` (found through gymnasium wrappers).

        Raises ``ConfigError`` naming the env when one is not: what ``env_task_fn`` needs.
        """
        if self._remote_envs():
            raise ConfigError(REMOTE_ENVS_WITHOUT_TASKS)
        sub_envs = self._sub_envs()
        found = [find_task_settable(env) for env in sub_envs]
        if None in found:
            missing = sub_envs[found.index(None)]
            raise ConfigError(_not_task_settable(self.config.env, missing, batched=missing is self.env))
        return found

    def apply_env_task_fn(self, env_task_fn: Callable[..., Any], train_results: dict[str, Any]) -> list[Any]:
        """Set each sub-env to ``env_task_fn(train_results, env, env_ctx)`` where that differs
        from its current task (RLlib's rule); returns the sub-envs' tasks."""
        tasks = []
        for index, env in enumerate(self.task_settable_envs()):
            task = env_task_fn(train_results, env, self._ctx.copy_with_overrides(vector_index=index))
            if task != env.get_task():
                env.set_task(task)
            tasks.append(task)
        return tasks

    def set_env_tasks(self, tasks: list[Any]) -> None:
        """Set sub-env i to ``tasks[i]`` (a replacement runner takes over its predecessor's tasks)."""
        for env, task in zip(self.task_settable_envs(), tasks, strict=True):
            env.set_task(task)

    def stop(self) -> None:
        if self.offline_input is not None:
            self.offline_input.stop()  # a policy server's socket
        if self.output_writer is not None:
            self.output_writer.close()  # its last file gets its name (or is uploaded)
        self.env.close()
