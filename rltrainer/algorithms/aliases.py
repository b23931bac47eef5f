"""The documents' other names for settings, in one table (STYLE.md point 3).

``ALIASES`` maps RLlib's older and alternative names to the field they set;
``DOCUMENTED_SETTINGS`` lists settings of RLlib's documents that have no field here because
rltrainer always behaves one way: their accepted value(s) and the reason. ``AlgorithmConfig``,
the CLI and the operator's validation all read these tables, so a name is added in one place.
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
    "eager_tracing": (False, "it is a TensorFlow setting and rltrainer is torch only"),
    "soft_horizon": (False, _ENV_ENDS),
    "no_done_at_end": (False, _ENV_ENDS),
}


__all__ = ["ALIASES", "DOCUMENTED_SETTINGS", "AnyOf"]
