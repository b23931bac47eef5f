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

import dataclasses
import logging
import os
import random
import secrets
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from rltrainer.algorithms import driver_weights
from rltrainer.algorithms.algorithm_config import AlgorithmConfig
from rltrainer.algorithms.callbacks import call_hook, make_callbacks
from rltrainer.algorithms.driver_weights import DriverWeights
from rltrainer.algorithms.evaluation_loop import Evaluation
from rltrainer.algorithms.resource_checks import connect_and_reserve
from rltrainer.algorithms.trainable import (
    SHOULD_CHECKPOINT,
    TUNE_FIELDS,
    TrainableSlot,
    become_trainable,
    tune_trainable,
)
from rltrainer.checkpoint_store import apply_retention, checkpoint_uri, open_checkpoint, upload_checkpoint
from rltrainer.checkpoints import Checkpoint, write_checkpoint
from rltrainer.core.cluster import algorithm_bundles, release
from rltrainer.core.learner import Learner, make_learner
from rltrainer.core.learner_group import LearnerGroup
from rltrainer.core.torch_compile import check_compile_settings
from rltrainer.env.env_runner import EpisodeStats, Rollout
from rltrainer.env.env_runner_group import EnvRunnerGroup
from rltrainer.env.episode import index_obs
from rltrainer.env.spaces import space_to_json
from rltrainer.env.video import resolve_videos
from rltrainer.errors import CheckpointError, ConfigError
from rltrainer.models.catalog import ModelCatalog
from rltrainer.offline.output_writer import redirect_output, resolve_output
from rltrainer.policy import Policy, pack_state
from rltrainer.results import ResultLogger, add_rllib_keys, flatten, perf_metrics, result_keys_for
from rltrainer.storage import (
    StorageError,
    check_experiment_name,
    check_storage_path,
    is_remote,
    join_uri,
    open_storage,
    parent_uri,
)

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Counters:
    """Lifetime counters; checkpoints store them so a restored run continues its curve."""

    training_iteration: int = 0
    timesteps_total: int = 0
    episodes_total: int = 0
    time_total_s: float = 0.0
    num_env_steps_trained: int = 0
    agent_timesteps_total: int = 0  # multi-agent: agent steps sampled
    num_agent_steps_trained: int = 0


class Algorithm(TrainableSlot):  # Tune's Trainable once ray.tune is imported
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
        self.callbacks = make_callbacks(config.callbacks_class)
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
    def result_keys(cls) -> list[str]:
        """Every numeric key ``train()`` reports (what stop criteria may name)."""
        return result_keys_for(getattr(cls.learner_class, "STAT_KEYS", ()))

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
                result["checkpoint_path"] = self.save()
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
            "num_healthy_env_runners": sum(1 for r in self.env_runner_group.remote_workers if r is not None),
            "num_env_runner_restarts": self.env_runner_group.num_restarts,
            "num_learner_restarts": self.learner_group.num_restarts,
            **stats,
            "timers": {
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

    # --- inference ----------------------------------------------------------------------
    def get_weights(self, policies: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """``{policy id: {parameter name: array}}`` of the policies (all, or those named), as
        RLlib's ``Algorithm.get_weights``."""
        return driver_weights.get_weights(self, policies)

    def set_weights(self, weights: dict[str, dict[str, Any]]) -> None:
        """Load ``{policy id: {parameter name: array}}`` (``get_weights()``'s form) into the
        policies, the learners and every env runner: the next ``train()`` continues from them."""
        driver_weights.set_weights(self, weights)

    def get_policy(self, policy_id: str = "default_policy") -> Policy:
        """The policy the env runners act with (weights as of the last update); in a
        multi-agent algorithm the one named ``policy_id``."""
        local = self.env_runner_group.local_worker()
        return local.get_policy(policy_id) if self._multi_agent else local.policy

    def add_policy(
        self,
        policy_id: str,
        policy_cls: Any = None,
        policy: Policy | None = None,
        *,
        observation_space: Any = None,
        action_space: Any = None,
        config: dict[str, Any] | None = None,
        policy_spec: Any = None,
        policy_mapping_fn: Any = None,
        policies_to_train: Any = None,
        policy_state: dict[str, Any] | None = None,
        **kwargs: Any,  # noqa: ARG002 - RLlib's other arguments (evaluation_workers, ...): always all runners
    ) -> Policy:
        """Add a policy to a multi-agent algorithm at run time (RLlib's ``Algorithm.add_policy``):
        every env runner (training and evaluation) gets it, with ``policy``'s weights (e.g. a
        snapshot: ``add_policy("main_v1", policy=algo.get_policy("main"))``) or
        ``policy_state={"weights": ...}``, else freshly initialized ones. It learns only when
        ``policies_to_train`` names it. ``policy_mapping_fn`` replaces the mapping, from each
        env's next episode. Returns the driver's copy of the policy."""
        from rltrainer.algorithms.multi_agent import add_policy
        from rltrainer.policy_spec import PolicySpec

        self._require_multi_agent("add_policy")
        if policy_spec is None:
            source = policy
            policy_spec = PolicySpec(
                policy_cls,
                observation_space or (source.observation_space if source is not None else None),
                action_space or (source.action_space if source is not None else None),
                dict(config or {}),
            )
        weights = None
        if policy is not None:
            weights = policy.get_weights()
        elif policy_state is not None:
            weights = policy_state.get("weights", policy_state)
        to_train = None if policies_to_train is None else list(policies_to_train)
        trainable = to_train is not None and policy_id in to_train
        added = add_policy(self, policy_id, policy_spec, weights, trainable, policy_mapping_fn, to_train)
        self._driver_weights.mark_synced()
        return added

    def remove_policy(
        self,
        policy_id: str = "default_policy",
        *,
        policy_mapping_fn: Any = None,
        policies_to_train: Any = None,
        **kwargs: Any,  # noqa: ARG002 - RLlib's other arguments: always all runners
    ) -> None:
        """Remove a policy from every env runner and stop training it (RLlib's ``remove_policy``)."""
        from rltrainer.algorithms.multi_agent import remove_policy

        self._require_multi_agent("remove_policy")
        remove_policy(
            self, policy_id, policy_mapping_fn, None if policies_to_train is None else list(policies_to_train)
        )

    def _require_multi_agent(self, what: str) -> None:
        if not self._multi_agent:
            raise ConfigError(
                f"{what}: this algorithm trains one policy on a single-agent env; policies are added to "
                "multi-agent configs (.multi_agent(policies=..., policy_mapping_fn=...) with a MultiAgentEnv)"
            )

    def compute_single_action(
        self,
        observation: Any,
        state: list[Any] | None = None,
        prev_action: Any = None,
        prev_reward: float | None = None,
        info: dict | None = None,  # noqa: ARG002
        policy_id: str = "default_policy",
        full_fetch: bool = False,
        explore: bool | None = None,
    ) -> Any:
        """The action for one raw env observation (same preprocessing and filter as training).

        With ``full_fetch``, a ``state``, or an LSTM policy (RLlib's RNN form) returns
        ``(action, state_out, extra)``: ``state_out`` is ``[h, c]`` for an LSTM policy (pass it
        back as ``state``; ``get_policy().get_initial_state()`` starts an episode) and ``[]``
        otherwise; ``extra`` holds ``action_logp``, ``action_dist_inputs`` and ``vf_preds``, as
        RLlib does. ``prev_action`` (an env action) and ``prev_reward`` feed an LSTM that uses them.
        """
        actions, state_out, extra = self._compute(
            [observation],
            None if state is None else [[part] for part in state],
            None if prev_action is None else [prev_action],
            None if prev_reward is None else [prev_reward],
            explore,
            policy_id,
        )
        action = index_obs(actions, 0)  # a Dict/Tuple action's parts, too
        if not full_fetch and state is None and not state_out:
            return action
        return action, [part[0] for part in state_out], {key: value[0] for key, value in extra.items()}

    compute_action = compute_single_action  # the Trainer-era name

    def compute_actions(
        self,
        observations: Any,
        state: list[Any] | None = None,
        prev_action: Any = None,
        prev_reward: Any = None,
        explore: bool | None = None,
        full_fetch: bool = False,
        policy_id: str = "default_policy",
        **kwargs: Any,  # noqa: ARG002 - RLlib's info, episodes, unsquash_actions, ...
    ) -> Any:
        """Actions for a list (or dict by key, e.g. ``{agent_id: obs}``) of raw observations,
        all computed by policy ``policy_id``. For an LSTM policy, ``state``
        is ``[h_batch, c_batch]`` (``None``: initial states) and the result is ``(actions,
        state_out, extra)``, as with ``full_fetch``."""
        if not isinstance(state, (list, tuple, type(None))):  # the older form compute_actions(obs, explore)
            state, explore = None, state
        keys = list(observations) if isinstance(observations, dict) else None
        items = [observations[k] for k in keys] if keys is not None else list(observations)
        actions, state_out, extra = self._compute(items, state, prev_action, prev_reward, explore, policy_id)
        if isinstance(actions, dict | tuple):  # a Dict/Tuple action per observation
            actions = [index_obs(actions, i) for i in range(len(items))]
        if keys is not None:
            actions = dict(zip(keys, actions, strict=True))
        if not full_fetch and state is None and not state_out:
            return actions
        return actions, state_out, extra

    def _compute(
        self,
        items: list[Any],
        state: Any,
        prev_actions: Any,
        prev_rewards: Any,
        explore: bool | None,
        policy_id: str = "default_policy",
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        """Env actions, state outs and extra fetches for raw observations."""
        runner = self.env_runner_group.local_worker()
        policy = self.get_policy(policy_id)
        observation_filter = runner.filter.filters[policy_id] if self._multi_agent else runner.filter
        flat = observation_filter(
            np.concatenate([policy.preprocessor.transform_one(o) for o in items]), update=False
        )
        explore = self.config.explore if explore is None else explore
        if getattr(policy, "custom_compute", False):  # a policy class with its own compute_actions
            actions, _, extra = policy.compute_actions(flat, explore=explore)
            return np.asarray(actions), [], extra
        if not policy.recurrent:
            out = policy.compute(flat, explore)
            return out["env_actions"], [], policy.extra_fetches(flat, out)
        try:
            packed = pack_state(state, len(items))
            if prev_actions is not None:
                prev_actions = policy.from_env_actions(list(prev_actions))
            if prev_rewards is not None:
                prev_rewards = np.asarray(prev_rewards, dtype=np.float32).reshape(len(items))
            out = policy.compute(flat, explore, packed, prev_actions, prev_rewards)
        except ValueError as err:
            raise ConfigError(f"compute_single_action/compute_actions: {err}") from None
        state_out = out["state_out"]
        return out["env_actions"], list(state_out.transpose(1, 0, 2)), policy.extra_fetches(flat, out)

    def export_policy_model(
        self,
        export_dir: str,
        policy_id: str = "default_policy",
        onnx: int | None = None,
    ) -> str:
        """RLlib's ``Algorithm.export_policy_model``: ``get_policy(policy_id).export_model(export_dir,
        onnx)`` (the observation filter included); returns the model file's path."""
        return self.get_policy(policy_id).export_model(export_dir, onnx=onnx)

    # --- checkpoints ----------------------------------------------------------------------
    def save(self, checkpoint_dir: str | None = None) -> Any:
        """Write a checkpoint (default: ``<trial_dir>/checkpoint_<iteration>``); returns its path or URI.

        An ``s3://`` target is written to a temporary folder, then uploaded: files first,
        manifest last. Saves into the trial folder then apply ``num_to_keep``. Raises
        ``StorageError`` when the upload fails after retries. Under Tune, Tune's
        ``Trainable.save`` (Tune's checkpoint folders, holding the files ``save_checkpoint`` writes).
        """
        if self._under_tune:
            return tune_trainable().save(self, checkpoint_dir)
        default = checkpoint_dir is None
        if checkpoint_dir is None:
            checkpoint_dir = join_uri(self.trial_uri, f"checkpoint_{self.counters.training_iteration:06d}")
        path = self._write_checkpoint(checkpoint_dir)
        if default and self.config.num_to_keep is not None:
            self._apply_retention()
        return path

    def save_checkpoint(self, checkpoint_dir: str) -> str:
        """Write this algorithm's checkpoint files into ``checkpoint_dir`` (Tune's hook; no pickle)."""
        return self._write_checkpoint(checkpoint_dir)

    def _write_checkpoint(self, checkpoint_dir: str) -> str:
        if self._multi_agent:
            from rltrainer.algorithms.multi_agent import checkpoint_parts

            policy_meta, policy_tensors, policy_arrays = checkpoint_parts(self)
            state = {"extra": policy_meta.pop("learner")}
        else:
            state = self.learner_group.get_state()
            policy_meta = {
                "observation_space": space_to_json(self.observation_space),
                "action_space": space_to_json(self.action_space),
            }
            policy_tensors = {
                "policy.safetensors": state["weights"],
                "optimizer.safetensors": state["optimizer"],
            }
            policy_arrays = {"filter.npz": self.env_runner_group.local_worker().get_filter_state()}
        metadata = {
            "algorithm": type(self).__name__,
            "config": self.config.to_dict(),
            **policy_meta,
            "counters": dataclasses.asdict(self.counters),
            "learning_curve": {
                "episode_returns": [e.episode_return for e in self._episodes],
                "episode_lens": [e.episode_len for e in self._episodes],
            },
            "learner": state["extra"],
            "observation_filter": self.config.observation_filter,
            "created_at": datetime.now().astimezone().isoformat(timespec="seconds"),
            "saved_at": time.time(),
            "score": self._checkpoint_score(),
        }
        files = {"tensors": policy_tensors, "arrays": {**policy_arrays, **self.checkpoint_arrays()}}
        if is_remote(checkpoint_dir):
            with tempfile.TemporaryDirectory(prefix="rltrainer_save_") as tmp:
                write_checkpoint(tmp, metadata, **files)
                path = upload_checkpoint(tmp, checkpoint_dir, self.config.storage_options)
        else:
            path = write_checkpoint(checkpoint_dir, metadata, **files)
        return path

    def checkpoint_arrays(self) -> dict[str, dict[str, np.ndarray]]:
        """Extra ``{file name: arrays}`` a checkpoint stores (off-policy: the replay buffer)."""
        return {}

    def restore_arrays(self, checkpoint: Checkpoint) -> None:
        """Read back what ``checkpoint_arrays`` saved (called after the weights are restored)."""

    def _checkpoint_score(self) -> dict[str, Any] | None:
        """``checkpoint_score_attribute`` and its value in the last result (saved for retention)."""
        attribute = self.config.checkpoint_score_attribute
        if attribute is None:
            return None
        value = flatten(self._last_result or {}).get(attribute)
        finite = isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value)
        return {"attribute": attribute, "value": float(value) if finite else None}

    def _apply_retention(self) -> None:
        cfg = self.config
        order = cfg.checkpoint_score_order if cfg.checkpoint_score_attribute else None
        try:
            deleted = apply_retention(self.trial_uri, cfg.num_to_keep, order, cfg.storage_options)
        except StorageError as err:
            logger.warning("old checkpoints not deleted (tried again after the next save): %s", err)
            return
        for uri in deleted:
            logger.info("deleted checkpoint %s (num_to_keep=%d)", uri, cfg.num_to_keep)

    save_to_path = save

    def restore(self, checkpoint_path: Any) -> None:
        """Load weights, optimizer, filter, counters and learning curve from a checkpoint.

        ``checkpoint_path`` may be ``s3://...``: it is downloaded and verified first. Tune's
        checkpoint objects (a result's ``checkpoint``) are accepted too.
        """
        if not isinstance(checkpoint_path, str | Path):  # Tune's Checkpoint or training result
            if self._under_tune:
                tune_trainable().restore(self, checkpoint_path)  # Tune's counters, then load_checkpoint()
                return
            checkpoint_path = checkpoint_uri(checkpoint_path)
        with open_checkpoint(str(checkpoint_path), self.config.storage_options) as checkpoint:
            self._restore_from(checkpoint)

    def load_checkpoint(self, checkpoint: Any) -> None:
        """Restore from a local checkpoint folder (Tune's hook, given the folder Tune fetched)."""
        with open_checkpoint(str(checkpoint), self.config.storage_options) as opened:
            self._restore_from(opened)

    def resume_from(self, checkpoint_path: str) -> None:
        """Restore a checkpoint of this experiment and keep writing to its trial folder."""
        self.restore(checkpoint_path)
        self._resumed_at = (self.counters.training_iteration, self.counters.timesteps_total)
        if self._result_logger is not None:
            self._result_logger.close()
            self._result_logger = None
        self._remove_cache()
        self._trial_uri = parent_uri(checkpoint_path)
        if self.config.output == "logdir":  # the sampled batches go to the resumed trial's folder too
            self.config._output_path = resolve_output("logdir", lambda: self.trial_uri)
            self.env_runner_group.foreach_worker(partial(redirect_output, path=self.config._output_path))

    restore_from_path = restore

    @classmethod
    def from_checkpoint(cls, checkpoint_path: Any, config_overrides: dict | None = None) -> Algorithm:
        """Rebuild the algorithm a checkpoint was written by, from the checkpoint alone.

        ``checkpoint_path`` may be ``s3://...`` (S3 settings: ``config_overrides["storage_options"]``
        over the AWS environment); it is downloaded and verified first. A Tune checkpoint
        (``result_grid.get_best_result(...).checkpoint``) works too, local or on S3.
        """
        checkpoint_path = checkpoint_uri(checkpoint_path)
        options = (config_overrides or {}).get("storage_options")
        with open_checkpoint(checkpoint_path, options) as checkpoint:
            return cls._build_from(checkpoint, checkpoint_path, config_overrides)

    @classmethod
    def _build_from(
        cls, checkpoint: Checkpoint, checkpoint_path: str, config_overrides: dict | None
    ) -> Algorithm:
        from rltrainer.algorithms.registry import get_algorithm_class

        algo_class = get_algorithm_class(checkpoint.metadata["algorithm"])
        if not issubclass(algo_class, cls):
            raise CheckpointError(
                f"{checkpoint_path!r} is a {algo_class.__name__} checkpoint, not {cls.__name__}"
            )
        try:
            config = algo_class.config_class.from_dict(checkpoint.metadata["config"])
        except ConfigError as err:
            raise CheckpointError(f"checkpoint {checkpoint_path!r} has an invalid config: {err}") from None
        if config_overrides:
            config.update_from_dict(config_overrides)
        algo = algo_class(config)
        try:
            algo._restore_from(checkpoint)
        except BaseException:
            algo.stop()
            raise
        return algo

    def _restore_from(self, checkpoint: Checkpoint) -> None:
        meta = checkpoint.metadata
        if meta["algorithm"] != type(self).__name__:
            raise CheckpointError(
                f"cannot restore a {meta['algorithm']} checkpoint into {type(self).__name__}"
            )
        saved_filter = meta.get("observation_filter", "NoFilter")
        if saved_filter != self.config.observation_filter:
            raise CheckpointError(
                f"checkpoint {checkpoint.source!r} was trained with observation_filter="
                f"{saved_filter!r}; set env_runners(observation_filter={saved_filter!r}) to restore it"
            )
        if self._multi_agent:
            from rltrainer.algorithms.multi_agent import restore

            restore(self, checkpoint)
        else:
            self._restore_policy(checkpoint)
        self.counters = Counters(**meta["counters"])
        self.restore_arrays(checkpoint)
        curve = meta.get("learning_curve", {})
        self._episodes.clear()
        self._episodes.extend(
            EpisodeStats(r, n)
            for r, n in zip(curve.get("episode_returns", []), curve.get("episode_lens", []), strict=True)
        )
        self._driver_weights.mark_synced()
        call_hook(self.callbacks, "on_checkpoint_loaded", algorithm=self)

    def _restore_policy(self, checkpoint: Checkpoint) -> None:
        """A single-agent checkpoint's weights, optimizer and filter (checked before any is loaded)."""
        meta = checkpoint.metadata
        if "policies" in meta:
            raise CheckpointError(
                f"checkpoint {checkpoint.source!r} is multi-agent (policies {', '.join(meta['policies'])}); "
                "restore it into an algorithm with the same multi_agent() config"
            )
        # Check everything that can fail before changing any state: no half-restored algorithm.
        for key, space in (
            ("observation_space", self.observation_space),
            ("action_space", self.action_space),
        ):
            if meta.get(key) != space_to_json(space):
                raise CheckpointError(
                    f"checkpoint {checkpoint.source!r} was trained with {key} {meta.get(key)}, "
                    f"but this env has {space_to_json(space)}"
                )
        learner = self.learner_group.local_learner
        weights = checkpoint.tensors("policy.safetensors")
        expected = {name: tuple(t.shape) for name, t in learner.module.state_dict().items()}
        if {name: tuple(t.shape) for name, t in weights.items()} != expected:
            raise CheckpointError(
                f"checkpoint {checkpoint.source!r} holds a different network than this config builds "
                f"(model={self.config.model.model_dump()}); restore with the checkpoint's model settings"
            )
        state = {
            "weights": weights,
            "optimizer": checkpoint.tensors("optimizer.safetensors"),
            "extra": meta["learner"],
        }
        filter_state = checkpoint.arrays("filter.npz")
        self.learner_group.set_state(state)
        self.env_runner_group.sync_weights(self.learner_group.get_weights())
        self.env_runner_group.set_filter_state(filter_state)

    # --- results folder -------------------------------------------------------------------
    @property
    def experiment_uri(self) -> str:
        """``<storage_path>/<experiment_name>``: a directory or an ``s3://`` URI."""
        name = self.config.experiment_name
        if name is None:
            return join_uri(self.config.storage_path, f"{type(self).__name__}_{self.config.env_name}")
        return join_uri(self.config.storage_path, check_experiment_name(name, "experiment_name"))

    @property
    def trial_uri(self) -> str:
        """``<storage_path>/<experiment_name>/<trial_id>``: where results and checkpoints go."""
        if self._trial_uri is None:
            stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
            trial_id = f"{type(self).__name__}_{self.config.env_name}_{stamp}_{secrets.token_hex(2)}"
            self._trial_uri = join_uri(self.experiment_uri, trial_id)
        return self._trial_uri

    @property
    def trial_dir(self) -> Path:
        """The local folder results are written to: ``trial_uri`` itself, or for ``s3://``
        storage a temporary cache uploaded after every iteration (removed by ``stop()``)."""
        if not is_remote(self.trial_uri):
            return Path(self.trial_uri)
        if self._cache_dir is None:
            self._cache_dir = Path(tempfile.mkdtemp(prefix="rltrainer_trial_"))
        return self._cache_dir

    logdir = trial_dir

    def _log_result(self, result: dict[str, Any]) -> None:
        if self._result_logger is None:
            remote = is_remote(self.trial_uri)
            storage = open_storage(self.trial_uri, self.config.storage_options) if remote else None
            self._result_logger = ResultLogger(
                self.trial_dir,
                self.config.to_dict(),
                storage,
                self.config.logger_config,
                resumed_at=self._resumed_at,
            )
        self._result_logger.log(result)

    def _remove_cache(self) -> None:
        if self._cache_dir is not None:
            shutil.rmtree(self._cache_dir, ignore_errors=True)
            self._cache_dir = None

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


def episode_metrics(episodes: Any, keep_per_episode_custom_metrics: bool = False) -> dict[str, Any]:
    """Mean/min/max return and mean length of ``episodes`` (NaN when there are none), the
    callbacks' ``custom_metrics`` (``<name>_mean|min|max``, or per-episode lists) and
    ``hist_stats``: each episode's return and length (RLlib's ``episode_reward`` and
    ``episode_lengths``) and each callbacks' ``hist_data`` list, concatenated over the episodes."""
    if not episodes:
        nan = float("nan")
        return {
            "episode_return_mean": nan,
            "episode_return_min": nan,
            "episode_return_max": nan,
            "episode_len_mean": nan,
            "custom_metrics": {},
            "hist_stats": {"episode_reward": [], "episode_lengths": []},
        }
    returns = np.array([e.episode_return for e in episodes])
    metrics: dict[str, Any] = {
        "episode_return_mean": float(returns.mean()),
        "episode_return_min": float(returns.min()),
        "episode_return_max": float(returns.max()),
        "episode_len_mean": float(np.mean([e.episode_len for e in episodes])),
        "custom_metrics": custom_metric_summary(episodes, keep_per_episode_custom_metrics),
    }
    # RLlib's histograms of the smoothing window's episodes, then the callbacks' hist_data.
    hist: dict[str, list] = {
        "episode_reward": returns.tolist(),
        "episode_lengths": [e.episode_len for e in episodes],
    }
    for episode in episodes:
        for name, values in (episode.hist_data or {}).items():
            hist.setdefault(name, []).extend(values if isinstance(values, list | tuple) else [values])
    metrics["hist_stats"] = hist
    return metrics


def custom_metric_summary(episodes: Any, keep_per_episode: bool = False) -> dict[str, Any]:
    """``{name}_mean``, ``_min`` and ``_max`` over the episodes that set the metric (RLlib's
    rule: values that are not finite numbers are left out), or each name's list of values."""
    values: dict[str, list] = {}
    for episode in episodes:
        for name, value in (episode.custom_metrics or {}).items():
            values.setdefault(name, []).append(value)
    if keep_per_episode:
        return values
    summary: dict[str, float] = {}
    for name, items in values.items():
        numbers = [
            float(v) for v in items if isinstance(v, int | float | np.number) and not isinstance(v, bool)
        ]
        numbers = [v for v in numbers if np.isfinite(v)]
        if numbers:
            summary[f"{name}_mean"] = float(np.mean(numbers))
            summary[f"{name}_min"] = float(np.min(numbers))
            summary[f"{name}_max"] = float(np.max(numbers))
    return summary
