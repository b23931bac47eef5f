"""The exploration API: schedules, the explore switch, config resolution, custom classes."""

from __future__ import annotations

import re

import numpy as np
import pytest
from gymnasium import spaces

from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.core.distributions import ActionDistribution, Categorical, DiagGaussian
from rltrainer.core.exploration import (
    EpsilonGreedy,
    GaussianNoise,
    OrnsteinUhlenbeckNoise,
    Random,
    SoftQ,
    StochasticSampling,
    exploration_class,
    linear_schedule,
    make_exploration,
)
from rltrainer.errors import ConfigError

DISCRETE = spaces.Discrete(4)
BOX = spaces.Box(-1.0, 1.0, (2,), np.float32)


def q_dist(batch: int = 1000, seed: int = 0) -> ActionDistribution:
    """Q-values whose greedy action is 2 in every row."""
    inputs = np.tile(np.array([0.0, 1.0, 5.0, 2.0], dtype=np.float32), (batch, 1))
    return ActionDistribution(Categorical, inputs, np.random.default_rng(seed))


def gaussian_dist(batch: int = 1000) -> ActionDistribution:
    inputs = np.tile(np.array([0.5, -0.25, -1.0, -1.0], dtype=np.float32), (batch, 1))
    return ActionDistribution(DiagGaussian, inputs, np.random.default_rng(0))


@pytest.mark.parametrize(
    ("timestep", "expected"),
    [(0, 1.0), (50, 1.0), (100, 1.0), (150, 0.55), (200, 0.1), (10_000, 0.1)],
)
def test_linear_schedule_with_warmup(timestep, expected):
    assert linear_schedule(1.0, 0.1, 100, timestep, start=100) == pytest.approx(expected)


def test_epsilon_greedy_schedule_and_frequencies():
    exploration = EpsilonGreedy(
        DISCRETE,
        initial_epsilon=1.0,
        final_epsilon=0.1,
        epsilon_timesteps=1000,
        rng=np.random.default_rng(0),
    )
    assert exploration.epsilon(0) == 1.0
    assert exploration.epsilon(500) == pytest.approx(0.55)
    assert exploration.epsilon(5000) == pytest.approx(0.1)
    actions, logp = exploration.get_exploration_action(q_dist(20_000), timestep=5000, explore=True)
    # greedy with probability 1 - eps, plus eps / n when the random action happens to be 2
    assert np.mean(actions == 2) == pytest.approx(0.9 + 0.1 / 4, abs=0.01)
    assert np.all(logp == 0)
    actions, _ = exploration.get_exploration_action(q_dist(20_000), timestep=0, explore=True)
    assert np.bincount(actions, minlength=4) / 20_000 == pytest.approx([0.25] * 4, abs=0.02)
    greedy, _ = exploration.get_exploration_action(q_dist(), timestep=0, explore=False)
    assert np.all(greedy == 2)


def test_soft_q_temperature():
    hot = SoftQ(DISCRETE, temperature=100.0)
    cold = SoftQ(DISCRETE, temperature=0.01)
    hot_actions, _ = hot.get_exploration_action(q_dist(20_000), 0, explore=True)
    cold_actions, _ = cold.get_exploration_action(q_dist(20_000), 0, explore=True)
    assert len(np.unique(hot_actions)) == 4 and np.mean(hot_actions == 2) < 0.3
    assert np.all(cold_actions == 2)
    assert np.all(hot.get_exploration_action(q_dist(), 0, explore=False)[0] == 2)


def test_stochastic_sampling_random_timesteps():
    exploration = StochasticSampling(DISCRETE, random_timesteps=100, rng=np.random.default_rng(1))
    early, logp = exploration.get_exploration_action(q_dist(20_000), timestep=10, explore=True)
    assert np.bincount(early, minlength=4) / 20_000 == pytest.approx([0.25] * 4, abs=0.02)
    late, logp = exploration.get_exploration_action(q_dist(20_000), timestep=100, explore=True)
    # softmax([0, 1, 5, 2]) puts about 93% on action 2
    assert np.mean(late == 2) == pytest.approx(np.exp(5) / np.exp([0, 1, 5, 2]).sum(), abs=0.01)
    assert logp.shape == (20_000,) and np.all(logp < 0)


def test_gaussian_noise_random_then_annealed():
    exploration = GaussianNoise(
        BOX, random_timesteps=10, stddev=0.5, initial_scale=1.0, final_scale=0.0, scale_timesteps=100
    )
    random, _ = exploration.get_exploration_action(gaussian_dist(), timestep=0, explore=True)
    assert random.min() < -0.9 and random.max() > 0.9  # uniform over [-1, 1]
    noisy, _ = exploration.get_exploration_action(gaussian_dist(), timestep=10, explore=True)
    # Full scale right after the random phase: N(0.5, 0.5) clipped to [-1, 1] (the clip at one
    # stddev above the mean narrows it to about 0.41).
    clipped = np.clip(0.5 + 0.5 * np.random.default_rng(1).standard_normal(200_000), -1.0, 1.0)
    assert noisy[:, 0].std() == pytest.approx(clipped.std(), rel=0.1)
    assert np.all(np.abs(noisy) <= 1.0)
    assert exploration.scale(60) == pytest.approx(0.5)
    quiet, _ = exploration.get_exploration_action(gaussian_dist(), timestep=110, explore=True)
    assert np.allclose(quiet, [0.5, -0.25])
    greedy, _ = exploration.get_exploration_action(gaussian_dist(), timestep=10, explore=False)
    assert np.allclose(greedy, [0.5, -0.25])


def test_ornstein_uhlenbeck_noise_is_correlated_and_resets():
    exploration = OrnsteinUhlenbeckNoise(BOX, random_timesteps=0, ou_base_scale=1.0)
    first, _ = exploration.get_exploration_action(gaussian_dist(4), timestep=0, explore=True)
    state = exploration.state.copy()
    assert np.allclose(first, np.clip(np.array([0.5, -0.25]) + state, -1, 1))
    exploration.get_exploration_action(gaussian_dist(4), timestep=1, explore=True)
    exploration.on_episodes_done(np.array([True, False, False, False]))
    assert np.all(exploration.state[0] == 0) and np.any(exploration.state[1] != 0)


def test_random_ignores_the_distribution_unless_greedy():
    exploration = Random(DISCRETE, rng=np.random.default_rng(0))
    actions, _ = exploration.get_exploration_action(q_dist(20_000), 0, explore=True)
    assert np.bincount(actions, minlength=4) / 20_000 == pytest.approx([0.25] * 4, abs=0.02)
    assert np.all(exploration.get_exploration_action(q_dist(), 0, explore=False)[0] == 2)


class AlwaysZero(EpsilonGreedy):
    """A subclass of a built-in with an extra argument."""

    def __init__(self, action_space, *, bias: int = 0, **kwargs):
        super().__init__(action_space, **kwargs)
        self.bias = bias

    def get_exploration_action(self, action_distribution, timestep, explore):
        actions, logp = super().get_exploration_action(action_distribution, timestep, explore)
        return np.full_like(actions, self.bias) if explore else actions, logp


@pytest.mark.parametrize("spec", ["EpsilonGreedy", EpsilonGreedy, "rltrainer.core.exploration:EpsilonGreedy"])
def test_type_by_name_class_or_import_path(spec):
    assert exploration_class(spec) is EpsilonGreedy


def test_subclass_of_a_builtin_with_its_own_and_inherited_arguments():
    exploration = make_exploration(
        {"type": f"{__name__}:AlwaysZero", "bias": 3, "epsilon_timesteps": 10}, DISCRETE
    )
    assert isinstance(exploration, AlwaysZero) and exploration.epsilon_timesteps == 10
    assert np.all(exploration.get_exploration_action(q_dist(), 0, explore=True)[0] == 3)


@pytest.mark.parametrize(
    ("exploration_config", "message"),
    [
        (
            {"type": "EpsilonGreedyy"},
            "unknown exploration_config type 'EpsilonGreedyy'; allowed: EpsilonGreedy",
        ),
        ({"type": "EpsilonGreedy", "epsilon": 0.1}, "has no argument(s) ['epsilon']; allowed:"),
        ({"type": "no.such.module:Thing"}, "cannot be imported"),
        ({"type": int}, "not a subclass of rltrainer's Exploration"),
    ],
)
def test_bad_exploration_configs_are_rejected_at_once(exploration_config, message):
    with pytest.raises(ConfigError, match=None) as err:
        PPOConfig().exploration(exploration_config=exploration_config)
    assert message in str(err.value)
    assert "exploration" in str(err.value)


def test_exploration_config_updates_keys_and_replaces_on_a_new_type():
    config = PPOConfig().exploration(exploration_config={"random_timesteps": 5})
    assert config.exploration_config == {"type": "StochasticSampling", "random_timesteps": 5}
    config.exploration(exploration_config={"type": "Random"})
    assert config.exploration_config == {"type": "Random"}
    config.exploration(exploration_config={"type": AlwaysZero, "bias": 1})
    round_trip = PPOConfig.from_dict(config.to_dict())
    assert round_trip.exploration_config == {"type": f"{__name__}:AlwaysZero", "bias": 1}


def test_wrong_space_is_a_config_error_at_build():
    config = PPOConfig().environment("Pendulum-v1").exploration(exploration_config={"type": "EpsilonGreedy"})
    with pytest.raises(ConfigError, match="EpsilonGreedy needs a Discrete action space"):
        config.build()


def test_explore_switch_in_compute_single_action(tmp_path):
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=64, minibatch_size=64, num_epochs=1, model={"fcnet_hiddens": [8]})
        .exploration(
            explore=False, exploration_config={"type": AlwaysZero, "bias": 1, "epsilon_timesteps": 1}
        )
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        obs = np.zeros(4, dtype=np.float32)
        greedy = algo.compute_single_action(obs)  # explore=None: the config's explore (False)
        assert algo.compute_single_action(obs, explore=False) == greedy
        assert algo.compute_single_action(obs, explore=True) == 1  # an explicit value overrides it
        assert algo.compute_actions([obs, obs], explore=True).tolist() == [1, 1]
    finally:
        algo.stop()


def test_evaluation_uses_evaluation_config_exploration(tmp_path):
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .training(train_batch_size=64, minibatch_size=64, num_epochs=1, model={"fcnet_hiddens": [8]})
        .exploration(exploration_config={"type": "Random"})
        .evaluation(
            evaluation_duration=2,
            evaluation_config={"explore": True, "exploration_config": {"type": AlwaysZero, "bias": 0}},
        )
        .reporting(storage_path=str(tmp_path))
    )
    algo = config.build()
    try:
        algo.evaluate()
        assert isinstance(algo.evaluation_workers.local_worker().policy.exploration, AlwaysZero)
        assert type(algo.get_policy().exploration).__name__ == "Random"
        # CartPole always pushed left falls within a few steps
        assert algo.evaluate()["evaluation"]["episode_len_mean"] < 15
    finally:
        algo.stop()


# --- the documents' import paths, the per-worker variants, memory tracking -----------------


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("rltrainer.utils.exploration.epsilon_greedy.EpsilonGreedy", "EpsilonGreedy"),
        ("rltrainer.utils.exploration.soft_q.SoftQ", "SoftQ"),
        ("rltrainer.utils.exploration.gaussian_noise:GaussianNoise", "GaussianNoise"),
        (
            "rltrainer.utils.exploration.per_worker_epsilon_greedy.PerWorkerEpsilonGreedy",
            "PerWorkerEpsilonGreedy",
        ),
        ("rltrainer.utils.exploration.PerWorkerOrnsteinUhlenbeckNoise", "PerWorkerOrnsteinUhlenbeckNoise"),
    ],
)
def test_classes_by_the_documents_module_paths(path, name):
    from rltrainer.core import exploration

    assert exploration_class(path) is getattr(exploration, name)


def test_the_documents_imports():
    import rltrainer.utils.exploration.stochastic_sampling as sampling
    from rltrainer.utils.exploration.exploration import Exploration
    from rltrainer.utils.exploration.ornstein_uhlenbeck_noise import OrnsteinUhlenbeckNoise as Noise

    assert Noise is OrnsteinUhlenbeckNoise and issubclass(Noise, Exploration)
    assert sampling.StochasticSampling is StochasticSampling


def test_per_worker_constants_are_ape_xs():
    from rltrainer.core.exploration import PerWorkerEpsilonGreedy, PerWorkerGaussianNoise, per_worker_constant

    assert [per_worker_constant(i, 3) for i in range(4)] == pytest.approx([0.0, 0.4, 0.4**4.5, 0.4**8])
    assert per_worker_constant(1, 1) == pytest.approx(0.4)
    greedy = PerWorkerEpsilonGreedy(DISCRETE, epsilon_timesteps=100)
    greedy.set_worker(0, 0)  # no remote runners: the usual schedule
    assert greedy.epsilon(0) == 1.0 and greedy.epsilon(100) == pytest.approx(0.05)
    greedy.set_worker(2, 3)
    assert greedy.epsilon(0) == greedy.epsilon(10**6) == pytest.approx(0.4**4.5)
    noise = PerWorkerGaussianNoise(BOX, random_timesteps=0)
    noise.set_worker(0, 2)  # the driver's runner with remote ones: greedy
    actions, _ = noise.get_exploration_action(gaussian_dist(10), timestep=5)
    np.testing.assert_allclose(actions, np.tile([0.5, -0.25], (10, 1)), rtol=1e-6)


@pytest.mark.usefixtures("local_ray")
def test_each_remote_runner_explores_with_its_own_epsilon(tmp_path):
    from rltrainer.algorithms.dqn import DQNConfig

    algo = (
        DQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=2, num_envs_per_env_runner=1, rollout_fragment_length=4)
        .exploration(exploration_config={"type": "rltrainer.utils.exploration.PerWorkerEpsilonGreedy"})
        .training(model={"fcnet_hiddens": [8]}, hiddens=[], num_steps_sampled_before_learning_starts=0)
        .reporting(storage_path=str(tmp_path), min_sample_timesteps_per_iteration=16)
        .build()
    )
    try:
        algo.train()
        epsilons = algo.workers.foreach_worker(lambda runner: runner.policy.exploration.epsilon(10**6))
        assert epsilons == pytest.approx([0.0, 0.4, 0.4**8])  # the driver's runner, then 1 and 2
    finally:
        algo.stop()


def test_memory_tracking_callbacks_report_the_runner_and_its_top_lines(tmp_path):
    from rltrainer.agents.callbacks import MemoryTrackingCallbacks

    algo = (
        PPOConfig()
        .environment("CartPole-v1")
        .callbacks(MemoryTrackingCallbacks)
        .training(train_batch_size=256, minibatch_size=128, num_epochs=1)
        .reporting(storage_path=str(tmp_path))
        .build()
    )
    try:
        metrics = algo.train()["custom_metrics"]
    finally:
        algo.stop()
        import tracemalloc

        tracemalloc.stop()
    assert (
        metrics["worker_rss_mean"] > 10_000_000 and metrics["worker_vss_mean"] >= metrics["worker_rss_mean"]
    )
    # each episode's 10 largest allocation sites (which sites differs between episodes)
    lines = [key for key in metrics if key.endswith("_size_mean")]
    assert lines and all(re.fullmatch(r".+:\d+_size_mean", key) for key in lines)


@pytest.mark.parametrize("kind", ["Curiosity", "ParameterNoise"])
def test_rllibs_whole_exploration_table_is_built(kind):
    from rltrainer.core import exploration

    assert exploration_class(
        f"rltrainer.utils.exploration.{kind.lower().replace('noise', '_noise')}.{kind}"
    ) is (getattr(exploration, kind))


# --- ParameterNoise ---------------------------------------------------------------------------
def parameter_noise_dqn(tmp_path, **exploration):
    from rltrainer.algorithms.dqn import DQNConfig

    config = (
        DQNConfig()
        .environment("CartPole-v1")
        .exploration(exploration_config={"type": "ParameterNoise", "random_timesteps": 0, **exploration})
        .training(num_steps_sampled_before_learning_starts=0, train_batch_size=32)
        .reporting(storage_path=str(tmp_path), min_sample_timesteps_per_iteration=100)
        .debugging(seed=0)
    )
    return config.build()


def test_parameter_noise_acts_with_perturbed_weights_that_never_reach_the_learner(tmp_path):
    algo = parameter_noise_dqn(tmp_path, initial_stddev=0.5)
    try:
        policy = algo.get_policy()
        noise = policy.exploration
        assert isinstance(
            noise, exploration_class("rltrainer.utils.exploration.parameter_noise.ParameterNoise")
        )
        learner = algo.learner_group.local_learner
        assert policy.model is learner.module  # the driver's runner acts with the learner's module
        before = {k: v.clone() for k, v in learner.module.state_dict().items()}
        obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
        clean = policy._numpy_policy(obs)
        noisy = policy.compute(obs, explore=True)["action_dist_inputs"]
        assert not np.allclose(noisy, clean)
        np.testing.assert_allclose(policy.compute(obs, explore=False)["action_dist_inputs"], clean)
        assert np.array_equal(policy.compute(obs, explore=True)["action_dist_inputs"], noisy)  # one draw
        episodes = algo.workers.local_worker().sample_episodes(num_episodes=2, explore=True)[0]
        assert len(episodes) == 2  # each end: a new draw, an adapted stddev
        assert all(np.array_equal(v, before[k]) for k, v in learner.module.state_dict().items())
        assert noise.stddev != 0.5
        assert round(np.log(noise.stddev / 0.5) / np.log(1.01)) == pytest.approx(
            np.log(noise.stddev / 0.5) / np.log(1.01), abs=1e-6
        )  # moved in steps of 1.01
        assert not np.array_equal(policy.compute(obs, explore=True)["action_dist_inputs"], noisy)
        result = algo.train()
        assert np.isfinite(result["episode_return_mean"])
    finally:
        algo.stop()


@pytest.mark.parametrize(("stddev", "direction"), [(5.0, "down"), (1e-4, "up")])
def test_parameter_noise_adapts_towards_epsilon_greedys_distance(stddev, direction):
    """Discrete actions: the stddev grows while the perturbed policy's KL from the clean one is
    below -log(1 - eps + eps / n) (eps 0.01 after the random phase) and shrinks above it."""
    from rltrainer.algorithms.dqn import DQNConfig

    config = DQNConfig().environment("CartPole-v1")
    config.exploration(
        exploration_config={"type": "ParameterNoise", "random_timesteps": 0, "initial_stddev": stddev}
    )
    policy = config.get_policy_class()(
        spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(2), config, seed=0
    )
    noise = policy.exploration
    obs = np.random.default_rng(1).normal(size=(32, 4)).astype(np.float32)
    policy.global_timestep = 100
    policy.compute(obs, explore=True)
    assert noise._delta() == pytest.approx(-np.log(1 - 0.01 + 0.01 / 2))
    noise.on_episodes_done(np.array([True]))
    assert noise.stddev == pytest.approx(stddev / 1.01 if direction == "down" else stddev * 1.01)


def test_parameter_noise_on_continuous_actions_uses_ornstein_uhlenbeck_after_it(tmp_path):
    from rltrainer.algorithms.ddpg import DDPGConfig
    from rltrainer.core.exploration import OrnsteinUhlenbeckNoise

    config = (
        DDPGConfig()
        .environment("Pendulum-v1")
        .exploration(exploration_config={"type": "ParameterNoise", "random_timesteps": 50})
        .training(num_steps_sampled_before_learning_starts=50, train_batch_size=32)
        .reporting(storage_path=str(tmp_path), min_sample_timesteps_per_iteration=250)
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        noise = algo.get_policy().exploration
        assert isinstance(noise.sub_exploration, OrnsteinUhlenbeckNoise)
        algo.train()  # one Pendulum episode (200 steps) ended: one adaptation
        assert noise.stddev in (pytest.approx(1.01), pytest.approx(1 / 1.01))
    finally:
        algo.stop()


def test_parameter_noise_refuses_what_it_cannot_perturb():
    with pytest.raises(ConfigError, match="ParameterNoise perturbs feed-forward networks; remove use_lstm"):
        PPOConfig().environment("CartPole-v1").training(model={"use_lstm": True}).exploration(
            exploration_config={"type": "ParameterNoise"}
        ).build()
    with pytest.raises(ConfigError, match="ParameterNoise needs a Discrete or Box action space"):
        PPOConfig().environment("CartPole-v1").environment(action_space=spaces.MultiBinary(3)).exploration(
            exploration_config={"type": "ParameterNoise"}
        ).build()


# --- Curiosity ----------------------------------------------------------------------------------
OPEN_LAKE = {  # RLlib's Curiosity test: 14 right/down moves to the goal, 16 steps to make them
    "desc": ["SFFFFFFF", "FFFFFFFF", "FFFFFFFF", "FFFFFFFF", "FFFFFFFF", "FFFFFFFF", "FFFFFFFF", "FFFFFFFG"],
    "is_slippery": False,
    "max_episode_steps": 16,
}
CURIOSITY = {
    "type": "Curiosity",
    "eta": 0.2,
    "lr": 1e-3,
    "feature_dim": 128,
    "feature_net_config": {"fcnet_hiddens": []},
}


def curious_ppo(tmp_path, **exploration):
    config = (
        PPOConfig()
        .environment("FrozenLake-v1", env_config=OPEN_LAKE)
        .env_runners(num_envs_per_env_runner=8)
        .training(lr=1e-3, train_batch_size=2048, minibatch_size=256, num_epochs=10, entropy_coeff=0.0)
        .exploration(exploration_config={**CURIOSITY, **exploration})
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )
    return config.build()


def test_curiosity_adds_intrinsic_rewards_and_its_forward_model_learns(tmp_path):
    algo = curious_ppo(tmp_path)
    try:
        runner = algo.workers.local_worker()
        curiosity = runner.policy.exploration
        rollout, episodes = runner.sample()
        assert rollout.rewards[rollout.valid].min() > 0.0  # every step pays a little (no goal yet)
        assert all(e.episode_return == 0.0 for e in episodes)  # results keep the env's rewards
        first = curiosity.last_intrinsic_mean
        for _ in range(5):  # the same few start states again and again: less and less surprising
            runner.sample()
        assert curiosity.last_intrinsic_mean < first
    finally:
        algo.stop()


def test_curiosity_finds_the_goal_of_a_sparse_reward_lake(tmp_path):
    """RLlib's test: with curiosity PPO reaches the far corner (reward 1) within the budget;
    random actions take 16 steps to it about once in 10^4 episodes (seed 0 without curiosity
    does not in 20 iterations)."""
    algo = curious_ppo(tmp_path)
    try:
        for _ in range(14):
            result = algo.train()
            if result["episode_return_max"] > 0.0:
                break
        assert result["episode_return_max"] == 1.0
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"env": "Pendulum-v1"}, "Curiosity needs a Discrete action space"),
        (
            {"num_env_runners": 1},
            "Curiosity trains its models in the env runner that samples: set num_env_runners=0",
        ),
    ],
)
@pytest.mark.usefixtures("local_ray")  # (num_env_runners=1 starts Ray before the policy refuses)
def test_curiosity_refuses_what_rllibs_refuses(setting, message):
    config = PPOConfig().environment("CartPole-v1").exploration(exploration_config=CURIOSITY)
    with pytest.raises(ConfigError, match=message):
        config.update_from_dict(setting).build()
