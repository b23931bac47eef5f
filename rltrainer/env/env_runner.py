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
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, NamedTuple

import numpy as np

from rltrainer.algorithms.callbacks import EPISODE_HOOKS, call_hook, overrides
from rltrainer.core import compiled
from rltrainer.core.exploration import Exploration
from rltrainer.core.filters import NoFilter
from rltrainer.env.env_runner_core import (
    EnvRunnerCore,
    EnvStepError,
    EpisodePlan,
    fake_gpu_inference,
    get_global_worker,
    inference_device,
    prepare_runner_process,
)
from rltrainer.env.episode import EpisodeTracker
from rltrainer.env.finite_guard import FiniteGuard
from rltrainer.env.recurrent_sampling import RecurrentInputs
from rltrainer.env.registry import RestartOnCrash
from rltrainer.env.rollout import EpisodeStats, Rollout
from rltrainer.env.runner_envs import RunnerEnvs
from rltrainer.errors import ConfigError, EnvError
from rltrainer.offline.offline_input import make_offline_input
from rltrainer.offline.output_writer import make_output_writer
from rltrainer.utils.sample_batch import SampleBatch, written_columns

logger = logging.getLogger(__name__)

_CRASHED_MASK = "_" + RestartOnCrash.CRASHED  # SyncVectorEnv's info mask of recreated envs


@contextmanager
def sampling_threads(config: Any) -> Iterator[None]:
    """Torch's threads set to ``num_cpus_per_env_runner`` (at least 1) while sampling, and put
    back after (docs/design/sampling.md: inference on one observation per env gains nothing
    from a second thread and loses much when the cores are busy)."""
    import torch

    threads, wanted = torch.get_num_threads(), max(1, int(config.num_cpus_per_env_runner))
    if threads == wanted:
        yield
        return
    torch.set_num_threads(wanted)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


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


class EnvRunner(RunnerEnvs, EnvRunnerCore):
    """Samples rollouts from vectorized envs; the config decides envs, filter and batch mode."""

    def _build(self) -> None:
        """Make the envs and the policy (``EnvRunnerCore.__init__`` calls this after the set-up)."""
        config, worker_index, in_evaluation = self.config, self.worker_index, self.in_evaluation
        self.env = self._make_envs()
        self.num_envs = self.env.num_envs
        self.observation_space = config.observation_space or self.env.single_observation_space
        self.action_space = config.action_space or self.env.single_action_space
        try:
            policy_class = config.get_policy_class()  # the algorithm's Policy subclass
            self.policy = policy_class(self.observation_space, self.action_space, config, seed=self._seed())
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
        self.filter = self._place_policy(self.policy, config)
        self._unfiltered = type(self.filter) is NoFilter  # (MeanStdFilter subclasses it)
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
        self._taken: _Step | None = None  # a step taken for the next fragment (_one_step_rollout)
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
                with sampling_threads(self.config):
                    rollout = self._fragment(steps, explore, complete)
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
        call_hook(self.callbacks, "on_sample_end", self._where, worker=self, env_runner=self, samples=samples)
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

    def _run_episodes(self, plan: EpisodePlan) -> tuple[list[EpisodeStats], int]:
        quota, num_timesteps, explore, force_reset, update_filter = plan
        if force_reset or self._obs is None:
            self._reset()
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

    def _for_driver(self, batch: Rollout) -> Rollout:
        """With ``compress_observations`` the observations travel lz4-compressed."""
        if self.config.compress_observations:
            from rltrainer.utils.compression import pack_rollout

            return pack_rollout(batch)
        return batch

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

    def _fragment(self, num_steps: int, explore: bool, complete_episodes: bool) -> Rollout:
        """``_rollout``, or ``_one_step_rollout`` where it applies."""
        if (
            num_steps == 1
            and not complete_episodes
            and self._obs is not None
            and self._tracker is None
            and self._recurrent is None
        ):
            return self._one_step_rollout(explore)
        return self._rollout(num_steps, explore, complete_episodes=complete_episodes)

    def _one_step_rollout(self, explore: bool) -> Rollout:
        """``_rollout``'s one-step fragment (no episode callbacks, no recurrent state): a step
        valid in every env makes it without the loop and the stacking (docs/design/sampling.md:
        the columns are views of the step's arrays, ``T = 1``); any other is the loop's first."""
        step = self._step(explore, True)  # (update_filter: a training fragment's)
        if self._recreated is not None or not step.valid.all():  # an env resets: it needs a second step
            self._taken = step
            return self._rollout(1, explore)
        last_obs = self._observe(update_filter=False)
        batch: dict[str, Any] = {name: column[None] for name, column in zip(_Step._fields, step, strict=True)}
        if self._guard.end_fragment():  # NaN/inf seen with on_nonfinite="skip_batch": no step counts
            batch["valid"] = np.zeros_like(batch["valid"])
        raw_rewards = batch["rewards"].astype(np.float32, copy=False)
        valid, dones = batch["valid"], step.terminateds | step.truncateds
        if compiled.for_batch(self.num_envs) is None:
            ended = self._close_one_step(raw_rewards[0], valid[0], dones)
        else:
            ended = self._close_episodes(raw_rewards, valid, dones[None])
        self._episodes.extend(episode for _, episode in ended)
        batch["rewards"] = self.clip_rewards(raw_rewards)
        return Rollout(**batch, last_obs=last_obs)

    def _close_one_step(
        self, rewards: np.ndarray, valid: np.ndarray, dones: np.ndarray
    ) -> list[tuple[int, EpisodeStats]]:
        """``_close_episodes`` of one step (``[N]`` arrays): the same float64 running sums."""
        returns = np.where(valid, rewards, 0.0) + self._ep_return
        lengths = self._ep_len + valid
        ended = np.flatnonzero(dones)
        reported = ended[valid[ended]]
        episodes = list(
            zip(
                reported.tolist(),
                map(EpisodeStats, returns[reported].tolist(), lengths[reported].tolist()),
                strict=True,
            )
        )
        returns[ended] -= returns[ended]  # an ended episode's sums start again (as _close_episodes)
        lengths[ended] -= lengths[ended]
        self._ep_return, self._ep_len = returns, lengths
        return episodes

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
        A step ``_one_step_rollout`` took and handed on (``_taken``) is returned as this one.
        """
        if self._taken is not None:
            step, self._taken = self._taken, None
            return step
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

    def get_policy(self, policy_id: str = "default_policy") -> Any:
        """The policy this runner acts with (RLlib's ``RolloutWorker.get_policy``): its only one,
        ``default_policy`` (``KeyError`` for another id, as a multi-agent runner's)."""
        if policy_id != "default_policy":
            raise KeyError(f"no policy {policy_id!r}; policies: default_policy")
        return self.policy

    def foreach_policy_to_train(self, fn: Callable[..., Any]) -> list[Any]:
        """``[fn(policy, "default_policy")]``: the one policy learns."""
        return self.foreach_policy(fn)

    @property
    def filters(self) -> dict[str, Any]:
        """``{"default_policy": observation filter}`` (RLlib's ``RolloutWorker.filters``)."""
        return {"default_policy": self.filter}

    def get_weights(self) -> dict[str, np.ndarray]:
        return self.policy.get_weights()

    def set_weights(self, weights: dict[str, Any]) -> None:
        with self.inference_lock:
            self.policy.set_weights(weights)

    def _close_envs(self) -> None:
        self.env.close()


__all__ = [  # the shared names are re-exported where they were defined before the core existed
    "EnvRunner",
    "EnvStepError",
    "EpisodeStats",
    "Rollout",
    "fake_gpu_inference",
    "get_global_worker",
    "inference_device",
    "prepare_runner_process",
]
