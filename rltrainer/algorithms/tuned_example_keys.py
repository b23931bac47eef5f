"""The config keys of RLlib's tuned examples, and what each does in rltrainer: the migration table.

``COMMON_KEYS`` are the keys RLlib's tuned examples (``rllib/tuned_examples``: the 1.x
Trainer-era YAML files and the 2.x AlgorithmConfig-era YAML and Python files) use across
algorithms; ``ALGORITHM_KEYS`` those of each algorithm rltrainer has. A key inside a dict
setting is written ``parent.key``. ``describe`` sorts a key with the tables of
``rltrainer.algorithms.aliases``: the same setting, another name of one, a switch with no
effect here, or a setting rltrainer has one value of. ``markdown()`` renders the table of
``docs/migrating/tuned-example-keys.md`` (regenerate it with
``python -m rltrainer.algorithms.tuned_example_keys > docs/migrating/tuned-example-keys.md``; a
test checks the page matches).
"""

from __future__ import annotations

from typing import NamedTuple

from rltrainer.algorithms.aliases import ALIASES, DOCUMENTED_SETTINGS, NO_EFFECT, PATH_ALIASES, AnyOf
from rltrainer.algorithms.rllib_keys import FINAL_BETA, PARENTS

#: Keys RLlib's tuned examples set for every kind of algorithm.
COMMON_KEYS: tuple[str, ...] = (
    "_disable_execution_plan_api",
    "_enable_learner_api",
    "_enable_rl_module_api",
    "_fake_gpus",
    "always_attach_evaluation_results",
    "batch_mode",
    "clip_actions",
    "clip_rewards",
    "collect_metrics_timeout",
    "create_env_on_driver",
    "disable_env_checking",
    "eager_tracing",
    "enable_connectors",
    "enable_env_runner_and_connector_v2",
    "enable_rl_module_and_learner",
    "env_config",
    "evaluation_config",
    "evaluation_config.explore",
    "evaluation_duration",
    "evaluation_duration_unit",
    "evaluation_interval",
    "evaluation_num_env_runners",
    "evaluation_num_episodes",
    "evaluation_num_workers",
    "evaluation_parallel_to_training",
    "explore",
    "framework",
    "gamma",
    "horizon",
    "ignore_worker_failures",
    "log_level",
    "lr",
    "metrics_num_episodes_for_smoothing",
    "metrics_smoothing_episodes",
    "min_iter_time_s",
    "min_sample_timesteps_per_iteration",
    "min_time_s_per_iteration",
    "model",
    "model.fcnet_activation",
    "model.fcnet_hiddens",
    "no_done_at_end",
    "normalize_actions",
    "num_cpus_for_driver",
    "num_cpus_per_learner_worker",
    "num_cpus_per_worker",
    "num_env_runners",
    "num_envs_per_env_runner",
    "num_envs_per_worker",
    "num_gpus",
    "num_gpus_per_learner_worker",
    "num_gpus_per_worker",
    "num_learner_workers",
    "num_rollout_workers",
    "num_workers",
    "observation_filter",
    "recreate_failed_workers",
    "rollout_fragment_length",
    "seed",
    "simple_optimizer",
    "soft_horizon",
    "timesteps_per_iteration",
    "train_batch_size",
)

#: The replay keys of RLlib 1.x: its flat settings, R2D2's and the multiagent dict's.
_REPLAY_1X = (
    "buffer_size",
    "burn_in",
    "final_prioritized_replay_beta",
    "learning_starts",
    "multiagent.replay_mode",
    "no_local_replay_buffer",
    "prioritized_replay",
    "prioritized_replay_alpha",
    "prioritized_replay_beta",
    "prioritized_replay_beta_annealing_timesteps",
    "prioritized_replay_eps",
    "replay_batch_size",
    "replay_sequence_length",
    "replay_zero_init_states",
    "worker_side_prioritization",
    "zero_init_states",
)
#: The replay keys of RLlib 2.x: its settings, and the constructor arguments of its replay buffer
#: classes (``rllib/utils/replay_buffers``: ReplayBuffer, PrioritizedReplayBuffer, the MultiAgent
#: ones and the Episode ones) that ``replay_buffer_config`` passes them.
_REPLAY_2X = (
    "num_steps_sampled_before_learning_starts",
    "replay_buffer_config",
    "replay_buffer_config._enable_replay_buffer_api",
    "replay_buffer_config.alpha",
    "replay_buffer_config.batch_length_T",
    "replay_buffer_config.batch_size_B",
    "replay_buffer_config.beta",
    "replay_buffer_config.buffer_size",
    "replay_buffer_config.capacity",
    "replay_buffer_config.capacity_ts",
    "replay_buffer_config.learning_starts",
    "replay_buffer_config.metrics_num_episodes_for_smoothing",
    "replay_buffer_config.min_size_for_sampling",
    "replay_buffer_config.num_shards",
    "replay_buffer_config.prioritized_replay",
    "replay_buffer_config.prioritized_replay_alpha",
    "replay_buffer_config.prioritized_replay_beta",
    "replay_buffer_config.prioritized_replay_eps",
    "replay_buffer_config.replay_batch_size",
    "replay_buffer_config.replay_burn_in",
    "replay_buffer_config.replay_mode",
    "replay_buffer_config.replay_ratio",
    "replay_buffer_config.replay_sequence_length",
    "replay_buffer_config.replay_sequence_override",
    "replay_buffer_config.replay_zero_init_states",
    "replay_buffer_config.storage_unit",
    "replay_buffer_config.type",
    "replay_buffer_config.underlying_buffer_config",
    "replay_buffer_config.worker_side_prioritization",
    "store_buffer_in_checkpoints",
    "training_intensity",
)
_DQN = (
    *_REPLAY_1X,
    *_REPLAY_2X,
    "adam_epsilon",
    "double_q",
    "dueling",
    "exploration_config",
    "exploration_config.epsilon_timesteps",
    "exploration_config.final_epsilon",
    "exploration_config.initial_epsilon",
    "exploration_config.type",
    "grad_clip",
    "hiddens",
    "lr_schedule",
    "n_step",
    "noisy",
    "num_atoms",
    "target_network_update_freq",
    "td_error_loss_fn",
    "v_max",
    "v_min",
)
_SAC = (
    *_REPLAY_1X,
    *_REPLAY_2X,
    "Q_model",
    "Q_model.fcnet_activation",
    "Q_model.fcnet_hiddens",
    "grad_clip",
    "initial_alpha",
    "n_step",
    "optimization",
    "optimization.actor_learning_rate",
    "optimization.critic_learning_rate",
    "optimization.entropy_learning_rate",
    "optimization_config",
    "policy_model",
    "policy_model.fcnet_activation",
    "policy_model.fcnet_hiddens",
    "policy_model_config",
    "q_model_config",
    "target_entropy",
    "target_network_update_freq",
    "tau",
    "twin_q",
)
_DDPG = (
    *_REPLAY_1X,
    *_REPLAY_2X,
    "actor_hidden_activation",
    "actor_hiddens",
    "actor_lr",
    "critic_hidden_activation",
    "critic_hiddens",
    "critic_lr",
    "exploration_config",
    "exploration_config.final_scale",
    "exploration_config.initial_scale",
    "exploration_config.random_timesteps",
    "exploration_config.scale_timesteps",
    "exploration_config.type",
    "huber_threshold",
    "l2_reg",
    "n_step",
    "policy_delay",
    "smooth_target_policy",
    "target_network_update_freq",
    "target_noise",
    "target_noise_clip",
    "tau",
    "twin_q",
    "use_huber",
)
_ACTOR_CRITIC = (
    "entropy_coeff",
    "grad_clip",
    "lambda",
    "lr_schedule",
    "microbatch_size",
    "sample_async",
    "use_critic",
    "use_gae",
    "vf_loss_coeff",
)
_IMPALA = (
    "broadcast_interval",
    "entropy_coeff",
    "entropy_coeff_schedule",
    "grad_clip",
    "learner_queue_size",
    "learner_queue_timeout",
    "lr_schedule",
    "max_sample_requests_in_flight_per_worker",
    "minibatch_buffer_size",
    "num_aggregation_workers",
    "num_data_loader_buffers",
    "num_multi_gpu_tower_stacks",
    "num_sgd_iter",
    "opt_type",
    "replay_buffer_num_slots",
    "replay_proportion",
    "vf_loss_coeff",
    "vtrace",
    "vtrace_clip_pg_rho_threshold",
    "vtrace_clip_rho_threshold",
    "vtrace_drop_last_ts",
    "_separate_vf_optimizer",
)
_OFFLINE = (
    "actions_in_input_normalized",
    "evaluation_config.input",
    "input",
    "input_config",
    "input_config.format",
    "input_config.paths",
    "input_evaluation",
    "off_policy_estimation_methods",
    "postprocess_inputs",
    "shuffle_buffer_size",
)
_MARWIL = (
    *_OFFLINE,
    "beta",
    "bc_logstd_coeff",
    "grad_clip",
    "moving_average_sqd_adv_norm_start",
    "moving_average_sqd_adv_norm_update_rate",
    "vf_coeff",
)

#: Keys of each algorithm's tuned examples beyond ``COMMON_KEYS``.
ALGORITHM_KEYS: dict[str, tuple[str, ...]] = {
    "A2C": _ACTOR_CRITIC,
    "A3C": (*(key for key in _ACTOR_CRITIC if key != "microbatch_size"), "use_pytorch"),
    "APEX": (
        *_DQN,
        "optimizer",
        "optimizer.debug",
        "optimizer.max_weight_sync_delay",
        "optimizer.num_replay_buffer_shards",
        "replay_buffer_config.no_local_replay_buffer",
        "replay_buffer_config.replay_buffer_shards_colocated_with_driver",
        "replay_buffer_shards_colocated_with_driver",
    ),
    "APPO": (
        *_IMPALA,
        "clip_param",
        "kl_coeff",
        "kl_target",
        "lambda",
        "tau",
        "target_network_update_freq",
        "use_critic",
        "use_gae",
        "use_kl_loss",
    ),
    "ARS": (
        "eval_prob",
        "model.fcnet_hiddens",
        "noise_size",
        "noise_stdev",
        "num_rollouts",
        "offset",
        "report_length",
        "rollouts_used",
        "sgd_stepsize",
    ),
    "BC": _MARWIL,
    "CQL": (
        *_SAC,
        *_OFFLINE,
        "bc_iters",
        "lagrangian",
        "lagrangian_thresh",
        "min_q_weight",
        "num_actions",
        "temperature",
    ),
    "DDPG": (
        *_DDPG,
        "exploration_config.ou_base_scale",
        "exploration_config.ou_sigma",
        "exploration_config.ou_theta",
    ),
    "DQN": (*_DQN, "exploration_config.initial_stddev", "exploration_config.random_timesteps"),
    "ES": (
        "action_noise_std",
        "episodes_per_batch",
        "eval_prob",
        "l2_coeff",
        "noise_size",
        "noise_stdev",
        "report_length",
        "return_proc_mode",
        "stepsize",
    ),
    "IMPALA": _IMPALA,
    "MARWIL": _MARWIL,
    "PG": ("lr_schedule",),
    "PPO": (
        "clip_param",
        "entropy_coeff",
        "grad_clip",
        "kl_coeff",
        "kl_target",
        "lambda",
        "lr_schedule",
        "minibatch_size",
        "model.free_log_std",
        "model.lstm_cell_size",
        "model.lstm_use_prev_action",
        "model.lstm_use_prev_reward",
        "model.max_seq_len",
        "model.use_lstm",
        "model.vf_share_layers",
        "num_epochs",
        "num_sgd_iter",
        "sgd_minibatch_size",
        "use_gae",
        "vf_clip_param",
        "vf_loss_coeff",
        "vf_share_layers",
    ),
    "SAC": _SAC,
    "TD3": (*_DDPG, "exploration_config.stddev"),
}

#: What a key that is rltrainer's setting too cannot do, where it can take fewer values.
NOTES: dict[str, str] = {
    "final_prioritized_replay_beta": (
        "only the value of the beta in effect: beta stays constant (no annealing); others are refused"
    ),
    "optimizer.num_replay_buffer_shards": (
        "one buffer in the driver holds the whole capacity RLlib splits across the shards; a count "
        "above 1 logs one line saying so"
    ),
    "replay_buffer_config.type": (
        "ReplayBuffer, PrioritizedReplayBuffer and RLlib's MultiAgent/Episode names of the same buffers "
        "(also as `ray.rllib.utils.replay_buffers.` paths); RLlib's ReservoirReplayBuffer, "
        "MultiAgentMixInReplayBuffer and FifoReplayBuffer are refused, each saying why"
    ),
    "replay_buffer_config.capacity_ts": (
        "the name RLlib 2.x's DDPG and Ape-X DDPG defaults gave the capacity (RLlib's buffers did not "
        "read it and kept their default capacity)"
    ),
    "replay_buffer_config.alpha": "RLlib's new-stack name, and rltrainer's",
    "replay_buffer_config.beta": "RLlib's new-stack name, and rltrainer's",
    "input": (
        "sampler, or files/folders of recorded JSON or Parquet (RLlib's format); RLlib 2.x's "
        "`dataset`: the files of `input_config.paths`"
    ),
    "framework": "torch only: `--framework torch` overrides a file's framework, as RLlib's CLI does",
}


class Row(NamedTuple):
    """One line of the migration table."""

    key: str
    algorithms: str
    kind: str
    what: str


def describe(algorithm: str, key: str) -> tuple[str, str]:
    """``(kind, what)``: how rltrainer's ``algorithm`` takes RLlib's config key ``key``.

    Kinds: ``same`` (the setting of that name), ``renamed`` (another name of a setting),
    ``no effect`` (accepted, one logged line), ``one value`` (rltrainer always does what one
    value says; others are refused with the reason). Raises ``KeyError`` for a key that is none.
    """
    from rltrainer.algorithms.registry import get_algorithm_class

    fields = get_algorithm_class(algorithm).config_class.model_fields
    note = NOTES.get(key, "")
    if key in NO_EFFECT:
        return "no effect", NO_EFFECT[key]
    if key in DOCUMENTED_SETTINGS:
        accepted, reason = DOCUMENTED_SETTINGS[key]
        values = " or ".join(f"`{v!r}`" for v in (accepted if isinstance(accepted, AnyOf) else (accepted,)))
        return "one value", f"{values}: {reason}"
    if key == FINAL_BETA:
        return "one value", note
    if key in PARENTS and key not in fields:
        return "renamed", f"a dict whose keys are read one by one (the `{key}.` rows)"
    if key in PATH_ALIASES:
        target = PATH_ALIASES[key]
        if target in DOCUMENTED_SETTINGS:
            return describe(algorithm, target)
        return "renamed", _joined(f"`{target}`", note)
    if ALIASES.get(key, key) in fields:
        target = _shown(ALIASES.get(key, key))
        return ("renamed", _joined(f"`{target}`", note)) if target != key else ("same", note)
    parent, _, child = key.partition(".")
    target = ALIASES.get(parent, parent)
    if child and target in fields and _has_key(target, child):
        return ("renamed", _joined(f"`{target}.{child}`", note)) if target != parent else ("same", note)
    raise KeyError(f"RLlib's {key!r} is nothing in rltrainer's {algorithm}")


def _shown(field: str) -> str:
    return {"lambda_": "lambda", "input_": "input", "framework_str": "framework"}.get(field, field)


def _has_key(field: str, key: str) -> bool:
    """Whether a key of the dict setting ``field`` is one rltrainer reads (the model's are
    fixed; the others are checked by the setting's own validation)."""
    if field == "model":
        from rltrainer.algorithms.algorithm_config import ModelConfig

        return key in ModelConfig.model_fields
    return True


def _joined(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


def keys_by_algorithm() -> dict[str, tuple[str, ...]]:
    """Every algorithm's keys: ``COMMON_KEYS`` and its own, sorted."""
    return {name: tuple(sorted({*COMMON_KEYS, *keys})) for name, keys in sorted(ALGORITHM_KEYS.items())}


def rows() -> list[Row]:
    """The table, sorted by key: one row per key, with the algorithms whose examples use it."""
    used: dict[str, list[str]] = {}
    for name, keys in sorted(ALGORITHM_KEYS.items()):
        for key in keys:
            used.setdefault(key, []).append(name)
    table = [Row(key, "all", *describe("PPO", key)) for key in COMMON_KEYS]
    for key, names in used.items():
        if key not in COMMON_KEYS:
            table.append(Row(key, ", ".join(names), *describe(names[0], key)))
    return sorted(table, key=lambda row: (row.key.lower(), row.key))


PAGE_INTRO = """\
# RLlib's tuned-example keys in rltrainer

RLlib's tuned examples (`rllib/tuned_examples`: the YAML files of the Trainer era, 1.x, and the
YAML and Python files of the AlgorithmConfig era, 2.x) run as written with
`rltrainer train -f FILE --framework torch`: `--framework torch` overrides the file's
`framework: tf` (as RLlib's CLI does). Every config key those examples use for the algorithms
rltrainer has is below, with what it does here, and every replay key of both eras beside them
(the constructor arguments of RLlib's replay buffer classes, which `replay_buffer_config` passes):

- **same**: the setting of that name, with RLlib's meaning;
- **renamed**: RLlib's other name of a setting (a `parent.key` is a key inside a dict setting);
- **no effect**: a switch of RLlib's internals that changes nothing here; accepted, and one
  line is logged saying so;
- **one value**: rltrainer always does what that value says; another value is refused with
  the reason and what to use instead.

Generated from `rltrainer/algorithms/tuned_example_keys.py` (the key lists) and
`rltrainer/algorithms/aliases.py` (the tables); `tests/test_rllib_tuned_files.py` trains an
experiment file of each algorithm holding all of its keys.
"""


def markdown() -> str:
    """The migration page: the introduction and the table."""
    lines = [PAGE_INTRO, "| RLlib key | algorithms | in rltrainer | what it does |", "|---|---|---|---|"]
    lines += [f"| `{row.key}` | {row.algorithms} | {row.kind} | {row.what} |" for row in rows()]
    return "\n".join(lines) + "\n"


__all__ = [
    "ALGORITHM_KEYS",
    "COMMON_KEYS",
    "NOTES",
    "Row",
    "describe",
    "keys_by_algorithm",
    "markdown",
    "rows",
]


if __name__ == "__main__":
    print(markdown(), end="")
