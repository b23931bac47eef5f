"""RLlib's names of result keys (``from rltrainer.utils.metrics import ENV_RUNNER_RESULTS,
EPISODE_RETURN_MEAN``), for code that reads results or writes stop criteria with them:
``result[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN]``,
``stop={f"{ENV_RUNNER_RESULTS}/{EPISODE_RETURN_MEAN}": 450}``.

Only the names of keys rltrainer reports are here (``docs/guide/results.md``): importing one of
RLlib's other names fails, rather than naming a key no result has.
"""

from __future__ import annotations

# Groups of a result.
ENV_RUNNER_RESULTS = "env_runners"
EVALUATION_RESULTS = "evaluation"
LEARNER_RESULTS = "learners"
TIMERS = "timers"

# Episodes (under ENV_RUNNER_RESULTS, and at the top level).
EPISODE_RETURN_MEAN = "episode_return_mean"
EPISODE_RETURN_MIN = "episode_return_min"
EPISODE_RETURN_MAX = "episode_return_max"
EPISODE_LEN_MEAN = "episode_len_mean"
NUM_EPISODES = "num_episodes"
NUM_EPISODES_LIFETIME = "num_episodes_lifetime"

# Steps sampled (under ENV_RUNNER_RESULTS, and at the top level).
NUM_ENV_STEPS_SAMPLED = "num_env_steps_sampled"
NUM_ENV_STEPS_SAMPLED_LIFETIME = "num_env_steps_sampled_lifetime"
NUM_AGENT_STEPS_SAMPLED = "num_agent_steps_sampled"
NUM_AGENT_STEPS_SAMPLED_LIFETIME = "num_agent_steps_sampled_lifetime"
NUM_ENV_STEPS_SAMPLED_THIS_ITER = "num_env_steps_sampled_this_iter"

# Steps trained (at the top level).
NUM_ENV_STEPS_TRAINED = "num_env_steps_trained"
NUM_ENV_STEPS_TRAINED_LIFETIME = "num_env_steps_trained_lifetime"
NUM_ENV_STEPS_TRAINED_THIS_ITER = "num_env_steps_trained_this_iter"
NUM_AGENT_STEPS_TRAINED = "num_agent_steps_trained"
