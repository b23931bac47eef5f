"""``Algorithm``: the training loop, evaluation, checkpoints and inference every algorithm shares.

Subclasses set ``config_class`` and ``learner_class`` and implement one hook,
``training_step()``: sample, update, sync weights. The base class owns ``train()``
(repeating the hook to the configured iteration length, collecting metrics, evaluating,
logging and checkpointing).

Every algorithm is a Ray Tune ``Trainable`` (as RLlib's are), so ``tune.Tuner(PPO, ...)`` runs
it as trials; Tune is imported only when it is used (``rltrainer.algorithms.trainable``).
Used directly (``config.build()``), it keeps its own contract: ``train()`` writes results to
its trial folder, ``save()`` returns a path. Created by Tune (which passes ``storage``),
``train()``/``save()``/``restore()``/``stop()`` follow Tune's contract instead: Tune writes
the results and owns the checkpoint folders, which hold our pickle-free files.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from rltrainer.algorithms.algorithm_config import AlgorithmConfig
from rltrainer.algorithms.callbacks import call_hook, config_callbacks
from rltrainer.algorithms.checkpointing import Checkpointing, Counters
from rltrainer.algorithms.driver_weights import DriverWeights
from rltrainer.algorithms.episode_metrics import custom_metric_summary, episode_metrics
from rltrainer.algorithms.evaluation_loop import Evaluation
from rltrainer.algorithms.policy_access import PolicyAccess
from rltrainer.algorithms.resource_checks import connect_and_reserve
from rltrainer.algorithms.trainable import (
    SHOULD_CHECKPOINT,
    TUNE_FIELDS,
    TrainableSlot,
    become_trainable,
    tune_trainable,
)
from rltrainer.algorithms.trial_folder import TrialFolder
from rltrainer.core.cluster import algorithm_bundles, release
from rltrainer.core.learner import Learner, make_learner, plain_stats
from rltrainer.core.learner_group import LearnerGroup
from rltrainer.core.torch_compile import check_compile_settings
from rltrainer.env.env_runner import EpisodeStats, Rollout
from rltrainer.env.env_runner_group import EnvRunnerGroup
from rltrainer.env.video import resolve_videos
from rltrainer.errors import ConfigError, RLTrainerError
from rltrainer.models.catalog import ModelCatalog
from rltrainer.offline.output_writer import resolve_output
from rltrainer.policy.policy import Policy
from rltrainer.results import TIMER_KEYS, ResultLogger, add_rllib_keys, perf_metrics, result_keys_for
from rltrainer.storage import (
    StorageError,
    check_experiment_name,
    check_storage_path,
)

logger = logging.getLogger(__name__)


class Algorithm(PolicyAccess, Checkpointing, TrialFolder, TrainableSlot):  # Trainable once Tune is imported
    """Base class of all algorithms (RLlib's ``Algorithm`` Training API; a Tune ``Trainable``)."""

    config_class: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    learner_class: ClassVar[type[Learner]] = Learner
    policy_class: ClassVar[type[Policy]] = Policy
    """What env runners act with and what builds the learner's module (``config.get_policy_class()``)."""

    def __init__(
        self,
        config: AlgorithmConfig | dict | None = None,
        env: Any = None,
        logger_creator: Any = None,  # noqa: ARG002 - RLlib's signature; Tune 2.60 passes none
        storage: Any = None,
        **kwargs: Any,  # noqa: ARG002 - what else Tune may pass a Trainable
    ) -> None:
        """``config``: this algorithm's config, or a dict of settings (RLlib's keys accepted).
        ``logger_creator`` and ``storage`` are Tune's: a trial actor gets them from Tune."""
        tune_fields: dict[str, Any] = {}
        if config is None or isinstance(config, dict):
            settings = dict(config or {})
            # What Tune adds to a trial's config for Trainable (trial info, log files).
            tune_fields = {key: settings.pop(key) for key in TUNE_FIELDS if key in settings}
            config = self.config_class().update_from_dict(settings)
        if not isinstance(config, self.config_class):
            raise ConfigError(
                f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}"
            )
        if env is not None:
            config.environment(env)
        config.validate()
        self._under_tune = storage is not None
        self._built = False
        try:
            if self._under_tune:
                # Tune's bookkeeping (trial info, trial folder, log files); it then calls setup().
                self._config_to_build = config
                tune_trainable().__init__(self, tune_fields, storage=storage)
            else:
                self._trial_info = None  # Trainable.trial_id / trial_name then say "default"
                self.setup(config)
            call_hook(self.callbacks, "on_algorithm_init", algorithm=self)
        except BaseException:
            self.cleanup()
            raise

    def setup(self, config: Any) -> None:
        """Build the env runners, evaluation runners and learners from ``config`` (Tune's
        ``Trainable.setup``). Algorithms that need more (e.g. a replay buffer) extend it and
        call ``super().setup(config)`` first."""
        if not isinstance(config, AlgorithmConfig):  # Tune passes its own (already consumed) dict
            config = self._config_to_build
        self.config = config
        check_compile_settings(config, type(self).learner_class)
        os.environ.update(config.extra_python_environs_for_driver)
        self.callbacks = config_callbacks(config)
        torch.set_num_threads(config.num_cpus_for_main_process)
        if config.seed is not None:
            random.seed(config.seed)
            np.random.seed(config.seed)
            torch.manual_seed(config.seed)
        # Under Tune, results and outputs go to the trial's folder that Tune syncs to its storage.
        self._trial_uri: str | None = str(self._logdir) if self._under_tune else None
        if not self._under_tune:
            # A bad folder or bucket fails here, not at the first result.
            check_storage_path(config.storage_path, config.storage_options)
        if config.experiment_name is not None:  # one folder under storage_path, never a way out of it
            check_experiment_name(config.experiment_name, "experiment_name")
        if config.output is not None:  # "logdir" (the trial folder) and relative paths: the driver's
            config._output_path = resolve_output(config.output, lambda: self.trial_uri)
        if config.record_env or config.render_env:
            config._video_dir = resolve_videos(config, lambda: self.trial_dir)
        if config.is_offline:  # the files are listed once, here: a missing input fails at build()
            config._input_sources = None
            config.get_input_sources()
        # Ray only when actors are needed; an existing connection (RAY_ADDRESS) is used as is.
        # GPUs and CPUs asked for are checked against what exists first.
        self._placement = connect_and_reserve(config, in_trial=self._under_tune)
        try:
            self.env_runner_group = EnvRunnerGroup(config, self._placement)
            self.workers = self.env_runner_group  # RLlib's older name
            local = self.env_runner_group.local_worker()
            self._multi_agent = self.env_runner_group.multi_agent
            # A multi-agent algorithm has no one pair of spaces: each policy has its own (get_policy(pid)).
            self.observation_space = None if self._multi_agent else local.observation_space
            self.action_space = None if self._multi_agent else local.action_space
            self._evaluation = Evaluation(self, self._placement)  # remote evaluation runners start here
            if self._multi_agent:  # a LearnerGroup per trainable policy (rltrainer.algorithms.multi_agent)
                from rltrainer.algorithms.multi_agent import build_learners

                self.learner_group = build_learners(self, self._learner_device())
            else:
                # The learner trains its own copy of the network; runners get its weights after each update.
                factory = partial(
                    make_learner,
                    type(self).learner_class,
                    self.observation_space,
                    self.action_space,
                    config,
                    custom_models=ModelCatalog.registered(),
                )
                self.learner_group = LearnerGroup(factory, config, self._placement, self._learner_device())
        except BaseException:
            if hasattr(self, "env_runner_group"):
                self.env_runner_group.stop()
            if hasattr(self, "_evaluation"):
                self._evaluation.stop()
            release(self._placement)
            self._placement = None
            raise
        self._built = True
        if self._multi_agent:  # frozen policies too: every runner acts with the driver's weights
            self.env_runner_group.sync_weights({**local.get_weights(), **self.learner_group.get_weights()})
        else:
            self.env_runner_group.sync_weights(self.learner_group.get_weights())
        self._driver_weights = DriverWeights(self)  # weights users set on the driver's policies
        self.counters = Counters()
        self._episodes: deque[EpisodeStats] = deque(maxlen=config.metrics_num_episodes_for_smoothing)
        self._iteration_samples = 0
        self._iteration_agent_steps = 0
        self._iteration_episodes: list[EpisodeStats] = []
        self._timers: dict[str, float] = {}  # seconds per phase of the current iteration
        self._cache_dir: Path | None = None  # local copy of an s3:// trial's result files
        self._result_logger: ResultLogger | None = None
        self._resumed_at: tuple[int, int] | None = None  # (iteration, timesteps) resume_from restored
        self._last_result: dict[str, Any] | None = None

    @classmethod
    def result_keys(cls, rllib_names: bool = True) -> list[str]:
        """Every numeric key ``train()`` reports (what stop criteria may name); without
        ``rllib_names``, only rltrainer's own names of them."""
        return result_keys_for(getattr(cls.learner_class, "STAT_KEYS", ()), rllib_names)

    # --- the hook ---------------------------------------------------------------------
    def training_step(self) -> dict[str, float]:
        """Sample, update, sync weights; returns learner stats. Implemented by each algorithm."""
        raise NotImplementedError

    def sample_rollouts(self, min_steps: int | None = None) -> list[Rollout]:
        """Sample ``min_steps`` (default ``train_batch_size``) env steps from the env runners."""
        wanted = self.config.train_batch_size if min_steps is None else min_steps
        with self.timed("sample"):
            rollouts, episodes = self.env_runner_group.sample(wanted)
        self.count_samples(rollouts, episodes)
        return rollouts

    def count_samples(
        self, rollouts: list[Rollout], episodes: list[EpisodeStats], steps: int | None = None
    ) -> None:
        """Add sampled rollouts (or ``steps`` env steps) and finished episodes to the counters
        and episode metrics (``sample_rollouts`` does it; algorithms that sample otherwise call
        it themselves)."""
        if steps is None:
            steps = sum(rollout.num_steps for rollout in rollouts)
        self.counters.timesteps_total += steps
        self._iteration_samples += steps
        if self._multi_agent:
            agent_steps = sum(getattr(rollout, "agent_steps", 0) for rollout in rollouts)
            self.counters.agent_timesteps_total += agent_steps
            self._iteration_agent_steps += agent_steps
        self._iteration_episodes.extend(episodes)
        self._episodes.extend(episodes)

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Add the time the block takes to this iteration's ``timers/<phase>_time_ms``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._timers[phase] = self._timers.get(phase, 0.0) + time.perf_counter() - start

    # --- training ---------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Run one training iteration; returns a flat dict of metrics (see the README).

        Writes the result to the trial folder and saves every ``checkpoint_frequency``
        iterations. Under Tune, Tune's ``Trainable.train`` runs ``step()`` and adds its fields.
        """
        if self._under_tune:
            return tune_trainable().train(self)
        result = self.step()
        self._log_result(result)
        cfg = self.config
        if cfg.checkpoint_frequency and self.counters.training_iteration % cfg.checkpoint_frequency == 0:
            try:
                result["checkpoint_path"] = str(self.save())  # a plain str in results (files, yaml)
            except StorageError as err:  # the manifest was not written: no checkpoint, not a broken one
                logger.warning(
                    "checkpoint of iteration %d not saved; training goes on and the next checkpoint "
                    "tries again: %s",
                    self.counters.training_iteration,
                    err,
                )
        return result

    def step(self) -> dict[str, Any]:
        """One training iteration: the result, without writing it anywhere (Tune's ``Trainable.step``).

        Under Tune, ``checkpoint_frequency`` asks Tune for a checkpoint (Tune's
        ``should_checkpoint``), which Tune saves into its trial folder.
        """
        self._check_not_stopped("train()")
        start = time.perf_counter()
        self._iteration_samples, self._iteration_episodes, self._timers = 0, [], {}
        self._iteration_agent_steps = 0
        trained_before = self.counters.num_env_steps_trained
        cfg = self.config
        # evaluation_parallel_to_training: evaluating (in a thread) while the training step runs.
        # Weights set on the driver's policies since the last step (get_policy().set_weights(...))
        # go to the learners and env runners before sampling, as RLlib's local policy would learn them.
        self._driver_weights.push_if_changed()
        parallel = self._evaluation.start_parallel(self.counters.training_iteration + 1)
        try:
            while True:
                stats = self.training_step()
                elapsed = time.perf_counter() - start
                if elapsed >= cfg.min_time_s_per_iteration and (
                    self._iteration_samples >= cfg.min_sample_timesteps_per_iteration
                ):
                    break
        finally:
            if parallel is not None:
                parallel.finish()  # an "auto" evaluation ends with the training step
            self._driver_weights.mark_synced()
        stats = plain_stats(stats)  # (computed now: only the last update's are reported)
        self.counters.training_iteration += 1
        self.counters.episodes_total += len(self._iteration_episodes)
        self.counters.time_total_s += elapsed
        learner_info = {"default_policy": stats}
        if self._multi_agent:  # {policy id: stats}: reported under info/learner/<policy id>/ only
            learner_info, stats = stats, {}
        result = {
            "training_iteration": self.counters.training_iteration,
            "timesteps_total": self.counters.timesteps_total,
            "time_this_iter_s": elapsed,
            "time_total_s": self.counters.time_total_s,
            **episode_metrics(self._episodes, cfg.keep_per_episode_custom_metrics),
            "episodes_this_iter": len(self._iteration_episodes),
            "episodes_total": self.counters.episodes_total,
            "num_env_steps_sampled": self._iteration_samples,
            "num_env_steps_trained": self.counters.num_env_steps_trained - trained_before,
            "num_env_steps_sampled_lifetime": self.counters.timesteps_total,
            "num_env_steps_sampled_per_s": self._iteration_samples / max(elapsed, 1e-9),
            "num_healthy_env_runners": self.env_runner_group.num_healthy_remote_env_runners(),
            "num_env_runner_restarts": self.env_runner_group.num_restarts,
            "num_learner_restarts": self.learner_group.num_restarts,
            **stats,
            "timers": {
                **dict.fromkeys(TIMER_KEYS, 0.0),  # every phase named, 0 where it did not run
                "training_iteration_time_ms": elapsed * 1000.0,
                **{f"{phase}_time_ms": seconds * 1000.0 for phase, seconds in self._timers.items()},
            },
            "perf": perf_metrics(),
        }
        # RLlib's names for these numbers (episode_reward_mean, info/learner/..., ...).
        result["num_env_steps_sampled_this_iter"] = result["num_env_steps_sampled"]
        result["num_env_steps_trained_this_iter"] = result["num_env_steps_trained"]
        result["num_env_steps_trained_lifetime"] = self.counters.num_env_steps_trained
        if self._multi_agent:
            self._add_multi_agent_metrics(result)
        add_rllib_keys(result, learner_info)
        if self._evaluation.due(self.counters.training_iteration):
            result.update(parallel.result() if parallel is not None else self.evaluate())
        elif cfg.always_attach_evaluation_results and self._evaluation.last_results is not None:
            result.update(self._evaluation.last_results)
        result["timestamp"] = int(time.time())
        call_hook(self.callbacks, "on_train_result", algorithm=self, result=result)
        if cfg.env_task_fn is not None:  # curriculum: the next iteration samples on the new tasks
            self.env_runner_group.apply_env_task_fn(result)
        self._last_result = result
        if (
            self._under_tune
            and cfg.checkpoint_frequency
            and self.counters.training_iteration % cfg.checkpoint_frequency == 0
        ):
            result[SHOULD_CHECKPOINT] = True
        return result

    def _add_multi_agent_metrics(self, result: dict[str, Any]) -> None:
        """Per-policy returns (``policy_reward_mean`` ...) and agent-step counts."""
        from rltrainer.algorithms.multi_agent import policy_metrics

        metrics = policy_metrics(self._episodes)
        result["hist_stats"].update(metrics.pop("policy_hist_stats"))
        result.update(metrics)
        trained = self.learner_group.agent_steps_trained
        result["num_agent_steps_sampled"] = self._iteration_agent_steps
        result["num_agent_steps_sampled_lifetime"] = self.counters.agent_timesteps_total
        result["agent_timesteps_total"] = self.counters.agent_timesteps_total
        result["num_agent_steps_trained"] = trained - self.counters.num_agent_steps_trained
        self.counters.num_agent_steps_trained = trained

    @property
    def iteration(self) -> int:
        """Training iterations completed, restored ones included (Tune's ``Trainable.iteration``)."""
        return self.counters.training_iteration

    training_iteration = iteration

    def get_auto_filled_metrics(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Tune's fields of a result, with the config as a plain dict (Tune logs it as JSON)."""
        metrics = tune_trainable().get_auto_filled_metrics(self, *args, **kwargs)
        metrics["config"] = self.config.to_dict()
        return metrics

    def evaluate(self, parallel_train_future: Any = None) -> dict[str, Any]:
        """Evaluate the current weights with ``evaluation_config`` applied: ``evaluation_duration``
        episodes (or timesteps) on the evaluation env runners, or the ``custom_evaluation_function``.
        Returns ``{"evaluation": metrics}`` (README, "Evaluation").

        ``parallel_train_future``: set by ``train()`` with ``evaluation_parallel_to_training``,
        the training step running meanwhile (its ``done()`` ends an ``"auto"`` evaluation;
        called directly, an ``"auto"`` evaluation runs one round).
        """
        self._check_not_stopped("evaluate()")
        call_hook(self.callbacks, "on_evaluate_start", algorithm=self)
        results = {"evaluation": add_rllib_keys(self._evaluation.run(parallel_train_future))}
        call_hook(self.callbacks, "on_evaluate_end", algorithm=self, evaluation_metrics=results)
        self._evaluation.last_results = results
        return results

    @property
    def eval_env_runner_group(self) -> EnvRunnerGroup:
        """The evaluation env runners (``evaluation_num_env_runners`` actors and a local one)."""
        return self._evaluation.group

    evaluation_workers = eval_env_runner_group  # RLlib's older name

    @property
    def env_runner(self) -> Any:
        """The driver's env runner (RLlib's ``algo.env_runner``: ``env_runner_group.local_worker()``)."""
        return self.env_runner_group.local_worker()

    @property
    def eval_env_runner(self) -> Any:
        """The driver's evaluation env runner (RLlib's ``algo.eval_env_runner``)."""
        return self.eval_env_runner_group.local_worker()

    @classmethod
    def get_default_config(cls) -> Any:
        """A new config of this algorithm with its defaults (RLlib's ``Algorithm.get_default_config()``)."""
        return cls.config_class()

    def stop(self) -> None:
        """Release envs, actors, the placement group and open files (under Tune, also Tune's
        log files: ``Trainable.stop`` calls ``cleanup()``)."""
        if self._under_tune:
            tune_trainable().stop(self)
        else:
            self.cleanup()

    def cleanup(self) -> None:
        """Release envs, actors, the placement group and open files (Tune's hook)."""
        if not self._built:  # setup() failed part way: it released what it had started
            return
        self._built = False
        self.env_runner_group.stop()
        self.learner_group.stop()
        self._evaluation.stop()
        release(self._placement)
        self._placement = None
        if self._result_logger is not None:
            self._result_logger.close()
            self._result_logger = None
        self._remove_cache()

    def _check_not_stopped(self, what: str) -> None:
        # Without this, train() after stop() went on quietly: the remote env runners gone, the
        # driver's runner sampled instead, and results were appended to the stopped trial's files.
        if not self._built:
            raise RLTrainerError(
                f"{what}: this {type(self).__name__} was stopped (stop() released its env runners, "
                "learners and result files); build a new one, or Algorithm.from_checkpoint(...) to "
                "go on from a checkpoint"
            )

    def __enter__(self) -> Algorithm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @classmethod
    def default_resource_request(cls, config: AlgorithmConfig | dict) -> Any:
        """The placement group Tune should reserve for this algorithm: driver, learner and
        env-runner bundles (``.bundles``), with the config's strategy."""
        from ray.tune import PlacementGroupFactory

        if isinstance(config, dict):
            config = cls.config_class.from_dict(config)
        return PlacementGroupFactory(algorithm_bundles(config), strategy=config.placement_strategy)

    def _learner_device(self) -> str:
        gpu = self.config.num_gpus > 0 and not self.config.fake_gpus
        return "cuda" if gpu and torch.cuda.is_available() else "cpu"


become_trainable()  # when ray.tune is already imported (else Tune's import does it)


__all__ = ["Algorithm", "Counters", "custom_metric_summary", "episode_metrics"]
