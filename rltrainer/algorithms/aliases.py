"""The documents' other names for settings, in one place (STYLE.md point 3).

``ALIASES`` maps RLlib's older and alternative names to the field they set; ``PATH_ALIASES``
does the same where one side is inside a dict setting (``replay_buffer_config.learning_starts``,
``buffer_size`` -> ``replay_buffer_config.capacity``). ``NO_EFFECT`` lists switches of RLlib's
that change nothing about what is computed here (accepted with one logged line), and
``DOCUMENTED_SETTINGS`` settings that have no field here because rltrainer always behaves one
way: their accepted value(s) and the reason. ``AlgorithmConfig`` (through
``rltrainer.algorithms.rllib_keys``), the CLI and the operator's validation all read these
tables, so a name is added in one place; ``rltrainer.algorithms.tuned_example_keys`` renders
them as the migration table.
"""

from __future__ import annotations

from typing import Any

# Names the RLlib docs and older tuned examples use for the same settings.
# Fields whose ``to_dict()`` key differs from the field name.
_DICT_NAMES = {"lambda_": "lambda", "framework_str": "framework"}

ALIASES: dict[str, str] = {
    "num_workers": "num_env_runners",
    "num_rollout_workers": "num_env_runners",
    "num_envs_per_worker": "num_envs_per_env_runner",
    "num_cpus_per_worker": "num_cpus_per_env_runner",
    "num_gpus_per_worker": "num_gpus_per_env_runner",
    "custom_resources_per_worker": "custom_resources_per_env_runner",
    "num_sgd_iter": "num_epochs",
    "sgd_minibatch_size": "minibatch_size",
    "lambda": "lambda_",
    "input": "input_",
    "framework": "framework_str",
    "ignore_worker_failures": "ignore_env_runner_failures",
    "recreate_failed_workers": "restart_failed_env_runners",
    "recreate_failed_env_runners": "restart_failed_env_runners",
    "callbacks": "callbacks_class",
    "evaluation_num_workers": "evaluation_num_env_runners",
    "evaluation_num_episodes": "evaluation_duration",  # counted in episodes, the default unit
    # RLlib 1.x: env steps sampled before an iteration may end (later min_sample_timesteps_per_reporting).
    "timesteps_per_iteration": "min_sample_timesteps_per_iteration",
    "_fake_gpus": "fake_gpus",
    # RLlib 1.x: videos of episodes (gym's Monitor), later record_env.
    "monitor": "record_env",
    # RLlib 1.x Trainer-era names of today's settings.
    "min_iter_time_s": "min_time_s_per_iteration",
    "metrics_smoothing_episodes": "metrics_num_episodes_for_smoothing",
    "learning_starts": "num_steps_sampled_before_learning_starts",
    "custom_eval_function": "custom_evaluation_function",
    "num_cpus_for_driver": "num_cpus_for_main_process",
    "max_sample_requests_in_flight_per_worker": "max_requests_in_flight_per_env_runner",
    # SAC's (and CQL's) 1.x names of its two networks' layers and its three learning rates.
    "Q_model": "q_model_config",
    "policy_model": "policy_model_config",
    "optimization": "optimization_config",
    # RLlib 2.x names of the learner settings (before num_learners and ..._per_learner).
    "num_learner_workers": "num_learners",
    "num_gpus_per_learner_worker": "num_gpus_per_learner",
    "num_cpus_per_learner_worker": "num_cpus_per_learner",
}

#: Names where one side lies inside a dict setting, written ``parent.key``: RLlib's 1.x flat
#: replay keys became ``replay_buffer_config`` keys, 2.0 kept ``learning_starts`` there, Ape-X's
#: ``optimizer`` dict held two of its settings, and 1.x's ``multiagent`` dict held today's
#: ``multi_agent()`` settings. The value of ``prioritized_replay`` picks a buffer type
#: (``PATH_VALUES``).
PATH_ALIASES: dict[str, str] = {
    "buffer_size": "replay_buffer_config.capacity",
    "prioritized_replay": "replay_buffer_config.type",
    "prioritized_replay_alpha": "replay_buffer_config.alpha",
    "prioritized_replay_beta": "replay_buffer_config.beta",
    "prioritized_replay_eps": "replay_buffer_config.eps",
    "replay_buffer_config.prioritized_replay_alpha": "replay_buffer_config.alpha",
    "replay_buffer_config.prioritized_replay_beta": "replay_buffer_config.beta",
    "replay_buffer_config.prioritized_replay_eps": "replay_buffer_config.eps",
    "replay_buffer_config.learning_starts": "num_steps_sampled_before_learning_starts",
    # RLlib 2.0-2.1's name of learning_starts, a constructor argument of its replay buffers.
    "replay_buffer_config.min_size_for_sampling": "num_steps_sampled_before_learning_starts",
    "replay_buffer_config.buffer_size": "replay_buffer_config.capacity",
    # RLlib 2.x's DDPG and Ape-X DDPG defaults gave the capacity under this name.
    "replay_buffer_config.capacity_ts": "replay_buffer_config.capacity",
    # Settings rltrainer has one value of (DOCUMENTED_SETTINGS), checked under their flat name.
    "replay_buffer_config.replay_sequence_length": "replay_sequence_length",
    "replay_buffer_config.worker_side_prioritization": "worker_side_prioritization",
    "replay_buffer_config.storage_unit": "storage_unit",
    "replay_buffer_config.replay_burn_in": "replay_burn_in",
    "burn_in": "replay_burn_in",  # RLlib 1.x's R2D2
    "replay_buffer_config.replay_mode": "replay_mode",
    "multiagent.replay_mode": "replay_mode",  # RLlib 1.x
    "replay_buffer_config.replay_batch_size": "replay_batch_size",
    "replay_buffer_config.underlying_buffer_config": "underlying_buffer_config",
    "replay_buffer_config.batch_length_T": "batch_length_T",
    "replay_buffer_config.replay_ratio": "replay_ratio",  # RLlib's MultiAgentMixInReplayBuffer
    "optimizer.num_replay_buffer_shards": "num_replay_buffer_shards",
    "optimizer.max_weight_sync_delay": "max_weight_sync_delay",
    # RLlib 1.x: PPO's top-level switch, later the model's.
    "vf_share_layers": "model.vf_share_layers",
    # RLlib 1.x: a schedule replaced the constant (it wins over ``lr`` in the same dict).
    "lr_schedule": "lr",
    "entropy_coeff_schedule": "entropy_coeff",
    # RLlib 2.x: ``input: dataset`` reads the files ``input_config: {paths: ...}`` names.
    "input_config.paths": "input_",
    # RLlib 1.x: the off-policy estimators by name (``[is, wis]``; ``[]``: none).
    "input_evaluation": "off_policy_estimation_methods",
    "multiagent.policies": "policies",
    "multiagent.policy_mapping_fn": "policy_mapping_fn",
    "multiagent.policies_to_train": "policies_to_train",
    "multiagent.count_steps_by": "count_steps_by",
    "multiagent.observation_fn": "observation_fn",
}

#: ``PATH_ALIASES`` whose value is translated too: RLlib's switch -> the value it stands for.
PATH_VALUES: dict[str, dict[Any, Any]] = {
    "prioritized_replay": {True: "PrioritizedReplayBuffer", False: "ReplayBuffer"},
}

#: ``PATH_ALIASES`` that replace a setting given in the same dict (RLlib ignored ``lr`` when
#: ``lr_schedule`` was set); ``None`` (RLlib's default: no schedule) sets nothing.
SCHEDULES = ("lr_schedule", "entropy_coeff_schedule")

_TF_ONLY = "a TensorFlow setting, and rltrainer is torch only"
_ONE_STACK = "RLlib's switch between its old and new internals; rltrainer has one implementation"
_DRIVER_REPLAY = "the replay buffer lives in the driver, so there is nothing to place"
_NO_SEQUENCES = "it sets up recurrent states of replayed sequences, and replay holds single transitions"
_SINGLE_TRANSITIONS = (
    "replay stores and samples single (n-step) transitions: no sequences, episodes or fragments"
)

#: RLlib switches that change nothing about what rltrainer computes, with the reason: accepted
#: (any value) with one logged line saying so. Only switches of implementation, never math.
NO_EFFECT: dict[str, str] = {
    "eager_tracing": _TF_ONLY,
    "tf_session_args": _TF_ONLY,
    "local_tf_session_args": _TF_ONLY,
    "_tf_policy_handles_more_than_one_loss": _TF_ONLY,
    "enable_connectors": f"{_ONE_STACK} (observation filters and clipping always apply as configured)",
    "_disable_execution_plan_api": f"{_ONE_STACK} (a training step is always one training_step)",
    "_enable_learner_api": _ONE_STACK,
    "_enable_rl_module_api": _ONE_STACK,
    "enable_rl_module_and_learner": _ONE_STACK,
    "enable_env_runner_and_connector_v2": _ONE_STACK,
    "simple_optimizer": "the learner updates the same way with or without RLlib's multi-GPU loader",
    "num_multi_gpu_tower_stacks": "RLlib's GPU loader buffers; the learner loads each batch itself",
    "num_data_loader_buffers": "RLlib's GPU loader buffers; the learner loads each batch itself",
    "collect_metrics_timeout": "episode metrics come back with every sample, without a wait",
    "metrics_episode_collection_timeout_s": "episode metrics come back with every sample, without a wait",
    "optimizer.debug": "Ape-X's optimizer debug statistics; the result holds the replay statistics",
    "replay_buffer_config.no_local_replay_buffer": _DRIVER_REPLAY,
    "replay_buffer_shards_colocated_with_driver": _DRIVER_REPLAY,
    "replay_buffer_config.replay_buffer_shards_colocated_with_driver": _DRIVER_REPLAY,
    "prioritized_replay_beta_annealing_timesteps": (
        "beta stays constant (final_prioritized_replay_beta must equal it), so there is nothing to anneal"
    ),
    "replay_buffer_config._enable_replay_buffer_api": (
        "RLlib's switch between its old and new replay buffer code; rltrainer has one replay buffer"
    ),
    "replay_buffer_config.prioritized_replay": (
        "RLlib 2.x's replay buffers ignore it too: replay_buffer_config's type picks prioritized replay"
    ),
    "replay_buffer_config.num_shards": _DRIVER_REPLAY,
    "no_local_replay_buffer": _DRIVER_REPLAY,
    "replay_buffer_config.replay_zero_init_states": _NO_SEQUENCES,
    "replay_zero_init_states": _NO_SEQUENCES,
    "zero_init_states": _NO_SEQUENCES,  # RLlib 1.x's R2D2
    "replay_buffer_config.replay_sequence_override": _NO_SEQUENCES,
    "replay_buffer_config.batch_size_B": (
        "the replayed batch is train_batch_size transitions (RLlib's DQN passes its size to sample() too)"
    ),
    "replay_buffer_config.metrics_num_episodes_for_smoothing": (
        "the replay buffer keeps no episode statistics; results smooth over the top-level "
        "metrics_num_episodes_for_smoothing"
    ),
    "v_min": "the support of a distributional Q head; rltrainer's DQN has none (num_atoms=1)",
    "v_max": "the support of a distributional Q head; rltrainer's DQN has none (num_atoms=1)",
}


_ENV_ENDS = "episodes end when the env ends them (terminated or truncated; truncated ones bootstrap)"


class AnyOf(tuple):
    """Several values of a documented setting that all describe what rltrainer does."""


#: Settings of RLlib's documents that have no field here, because rltrainer always behaves one
#: way: that value (or those of an ``AnyOf``) is accepted (nothing to set); any other is refused,
#: saying why and what to use instead (never accepted and silently ignored).
DOCUMENTED_SETTINGS: dict[str, tuple[Any, str]] = {
    "postprocess_inputs": (
        AnyOf((False, True)),
        "learners always compute returns and advantages from the recorded rewards, as RLlib's "
        "postprocess_inputs=True does; recorded advantages are never used",
    ),
    "output_compress_columns": (
        AnyOf((["obs", "new_obs"], [])),
        "Parquet output is compressed whole (output_config={'compression': ...}); JSON lines are not",
    ),
    "create_env_on_driver": (True, "the driver always creates its own env runner's envs"),
    "soft_horizon": (False, _ENV_ENDS),
    "no_done_at_end": (False, _ENV_ENDS),
    "use_pytorch": (True, "rltrainer is torch only (use_pytorch is RLlib's older framework: torch)"),
    "vtrace_drop_last_ts": (
        False,
        "V-trace uses every timestep of a fragment and bootstraps from the value of the next "
        "observation (RLlib's vtrace_drop_last_ts=False)",
    ),
    "sample_async": (
        False,
        "env runners sample in step with training; for asynchronous sampling use IMPALA or APPO",
    ),
    "num_aggregation_workers": (0, "sample batches are put together in the driver (no aggregation actors)"),
    "worker_side_prioritization": (
        False,
        "new transitions enter the replay buffer with the highest priority seen and get their TD "
        "errors from the driver's learner",
    ),
    "replay_sequence_length": (1, "replay holds single transitions (no recurrent replay)"),
    "storage_unit": ("timesteps", _SINGLE_TRANSITIONS),
    "batch_length_T": (1, _SINGLE_TRANSITIONS),
    "replay_burn_in": (0, "replay holds single transitions, so there is no recurrent state to burn in"),
    "replay_mode": (
        "independent",
        "each policy samples its own replay buffer (RLlib's independent); lockstep replay is not built",
    ),
    "replay_ratio": (
        AnyOf((1.0, 1)),
        "replayed batches are drawn from the buffer only (RLlib's MixIn buffer with replay_ratio=1.0); "
        "for new samples mixed into each batch, IMPALA and APPO have replay_proportion",
    ),
    "replay_batch_size": (
        None,
        "the replayed batch is train_batch_size transitions (RLlib's derivation too)",
    ),
    "underlying_buffer_config": (
        None,
        "each policy's buffer is the one replay_buffer_config describes: set its type, capacity, alpha "
        "and beta there",
    ),
    "num_atoms": (1, "rltrainer's DQN learns expected Q values; there is no distributional head"),
    "noisy": (False, "rltrainer's DQN has no noisy layers; explore with exploration_config: ParameterNoise"),
    "adam_epsilon": (1e-5, "the learners' Adam epsilon is fixed at 1e-5 (SB3's and CleanRL's)"),
    "_separate_vf_optimizer": (False, "policy and value function share one optimizer and lr"),
}


__all__ = ["ALIASES", "DOCUMENTED_SETTINGS", "NO_EFFECT", "PATH_ALIASES", "PATH_VALUES", "SCHEDULES", "AnyOf"]
