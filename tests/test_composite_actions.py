"""Dict and Tuple action spaces (#16 item 6): one distribution per part (``MultiAction``), one
float32 row per action in training, the space's structure for the env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from gymnasium import spaces

from rltrainer.algorithms.algorithm import Algorithm
from rltrainer.algorithms.dqn import DQNConfig
from rltrainer.algorithms.ppo import PPOConfig
from rltrainer.algorithms.sac import SACConfig
from rltrainer.core.composite_actions import CompositeActions, multi_action
from rltrainer.core.distributions import Categorical, DiagGaussian, multi_categorical
from rltrainer.core.exploration import uniform_actions
from rltrainer.errors import ConfigError
from tests.envs import ControlPanelEnv
from tests.test_recurrent import replay

SPACE = ControlPanelEnv().action_space  # Dict: aim Box(2), buttons MultiBinary(2), move Discrete(3, start=-1)


def panel_ppo(**env_config) -> PPOConfig:
    return (
        PPOConfig()
        .environment(ControlPanelEnv, env_config=env_config)
        .env_runners(num_envs_per_env_runner=8, rollout_fragment_length=32)
        .training(train_batch_size=256, minibatch_size=64, lr=1e-3)
        .debugging(seed=0)
    )


def test_the_distribution_adds_up_its_parts():
    dist_class = multi_action(SPACE)
    assert dist_class.required_inputs(SPACE) == 4 + 4 + 3  # Gaussian 2x2, two 2-way categoricals, 3-way
    inputs = torch.randn(5, 11)
    dist, other = dist_class(inputs), dist_class(torch.randn(5, 11))
    parts = [
        DiagGaussian(inputs[:, :4]),
        multi_categorical((2, 2))(inputs[:, 4:8]),
        Categorical(inputs[:, 8:]),
    ]
    actions = dist.sample()
    assert actions.shape == (5, 2 + 2 + 1) and actions.dtype == torch.float32
    expected = (
        parts[0].log_prob(actions[:, :2])
        + parts[1].log_prob(actions[:, 2:4])
        + parts[2].log_prob(actions[:, 4])
    )
    torch.testing.assert_close(dist.logp(actions), expected)
    torch.testing.assert_close(dist.entropy(), sum(p.entropy() for p in parts))
    assert (dist.kl(other) >= 0).all() and torch.allclose(dist.kl(dist), torch.zeros(5), atol=1e-6)
    torch.testing.assert_close(dist.sampled_action_logp(), dist.logp(actions))
    # The env runners' numpy sampling gives the log-probabilities the learner computes.
    rows, logp = dist_class.sample_numpy(inputs.numpy(), True, np.random.default_rng(0))
    torch.testing.assert_close(dist.logp(torch.from_numpy(rows)), torch.from_numpy(logp))
    greedy, _ = dist_class.sample_numpy(inputs.numpy(), False, np.random.default_rng(0))
    torch.testing.assert_close(torch.from_numpy(greedy), dist.deterministic_sample())


def test_rows_and_env_actions_convert_both_ways():
    composite = CompositeActions(SPACE, normalize_actions=True, clip_actions=False)
    rows = np.array([[-1.0, 1.0, 1, 0, 0], [0.0, 0.5, 0, 1, 2]], np.float32)
    env = composite.to_env(rows)
    np.testing.assert_allclose(env["aim"], [[-2.0, 2.0], [0.0, 1.0]])
    assert env["buttons"].dtype == np.int8 and env["move"].tolist() == [-1, 1]  # Discrete's start added
    assert all(SPACE.contains({key: value[i] for key, value in env.items()}) for i in range(2))
    np.testing.assert_allclose(composite.from_env(env), rows)
    random = uniform_actions(composite.policy_space(), 1000, np.random.default_rng(0))
    assert random.shape == (1000, 5) and np.abs(random[:, :2]).max() <= 1.0
    assert set(np.unique(random[:, 4])) == {0.0, 1.0, 2.0}


def test_ppo_learns_dict_actions_and_acts_in_the_space(tmp_path):
    algo = panel_ppo().reporting(storage_path=str(tmp_path)).build()
    try:
        returns: list[float] = []
        for _ in range(25):  # until it reaches 10 (from seed 0: in about 11 iterations)
            returns.append(algo.train()["episode_return_mean"])
            if returns[-1] >= 10:
                break
        assert returns[0] < 5 and max(returns) >= 10, returns  # the env raises on an action outside the space
        action = algo.compute_single_action(np.zeros(3, np.float32), explore=False)
        assert SPACE.contains(action) and action["buttons"][0] == 1
        batch = algo.compute_actions([np.zeros(3, np.float32), np.ones(3, np.float32)], explore=False)
        assert len(batch) == 2 and all(SPACE.contains(a) for a in batch) and batch[1]["move"] == 1
        rows, _, extra = algo.get_policy().compute_actions(np.zeros((4, 3), np.float32), explore=False)
        assert rows["move"].tolist() == [0] * 4  # the distribution's terms: from 0, before the start
        assert extra["action_logp"].shape == (4,)
        row, _, _ = algo.get_policy().compute_single_action(np.zeros(3, np.float32), explore=False)
        assert row["move"] == rows["move"][0] and np.allclose(row["aim"], rows["aim"][0])
        checkpoint = algo.save()
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(checkpoint)
    try:
        again = restored.compute_single_action(np.zeros(3, np.float32), explore=False)
        assert again["move"] == action["move"] and np.allclose(again["aim"], action["aim"])
    finally:
        restored.stop()


def test_tuple_actions_random_exploration_evaluation_and_output(tmp_path):
    config = (
        panel_ppo(tuple_actions=True)
        .exploration(exploration_config={"type": "StochasticSampling", "random_timesteps": 300})
        .evaluation(evaluation_interval=1, evaluation_duration=2)
        .offline_data(output=str(tmp_path / "out"))
    )
    algo = config.build()
    try:
        for _ in range(2):
            result = algo.train()
        assert np.isfinite(result["evaluation"]["episode_return_mean"])
        action = algo.compute_single_action(np.zeros(3, np.float32))
        assert isinstance(action, tuple) and algo.get_policy().action_space.contains(action)
    finally:
        algo.stop()
    table = pq.read_table(sorted((tmp_path / "out").rglob("*.parquet"))[0])
    assert len(table.column("actions")[0].as_py()) == 5  # one row: aim, aim, button, button, move


def test_an_lstm_reads_previous_dict_actions_and_replays_the_sampler_exactly():
    """Previous actions reach the LSTM part by part (one-hot discrete parts, Box values); before
    any update the learner's log-probabilities and values are the sampler's."""
    model = {"use_lstm": True, "lstm_cell_size": 16, "max_seq_len": 8, "lstm_use_prev_action": True}
    algo = panel_ppo().training(model=model).build()
    try:
        assert algo.get_policy().model.prev_action_size == 2 + 2 + 3  # aim, buttons, one-hot move
        runner = algo.env_runner_group.local_worker()
        for _ in range(2):
            rollout, _ = runner.sample()
        logp, sampled_logp, values, sampled_values = replay(algo, rollout)
        np.testing.assert_allclose(logp, sampled_logp, atol=2e-5)
        np.testing.assert_allclose(values, sampled_values, atol=2e-5)
        algo.train()
        state = algo.get_policy().get_initial_state()
        first, state, _ = algo.compute_single_action(np.zeros(3, np.float32), state=state)
        second, _, _ = algo.compute_single_action(
            np.zeros(3, np.float32), state=state, prev_action=first, prev_reward=1.0
        )
        assert SPACE.contains(second)
    finally:
        algo.stop()


@pytest.mark.usefixtures("local_ray")
def test_dict_actions_with_remote_runners_and_an_lstm():
    algo = (
        panel_ppo()
        .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
        .training(model={"use_lstm": True, "lstm_cell_size": 16, "max_seq_len": 8})
        .build()
    )
    try:
        for _ in range(2):
            result = algo.train()
        assert result["num_env_steps_sampled"] >= 256
        action, state, _ = algo.compute_single_action(
            np.zeros(3, np.float32), state=algo.get_policy().get_initial_state()
        )
        assert SPACE.contains(action) and len(state) == 4
    finally:
        algo.stop()


class TextActionEnv(gym.Env):
    observation_space = spaces.Box(-1, 1, (2,))
    action_space = spaces.Dict({"say": spaces.Text(5), "go": spaces.Discrete(2)})

    def __init__(self, config: dict | None = None) -> None:
        pass


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (DQNConfig().environment(ControlPanelEnv), "DQN needs a Discrete action space"),
        (SACConfig().environment(ControlPanelEnv), "SAC needs a Discrete or a 1-D Box action space"),
        (PPOConfig().environment(TextActionEnv), r"action part 'say' is Text"),
    ],
    ids=["dqn", "sac", "text-part"],
)
def test_what_cannot_take_composite_actions_fails_at_build(config, message):
    with pytest.raises(ConfigError, match=message):
        config.build()


class SignedChoiceEnv(gym.Env):
    """``Discrete(3, start=-1)`` actions; reward 1 for -1; raises on an action outside the space."""

    observation_space = spaces.Box(-1, 1, (2,), np.float32)
    action_space = spaces.Discrete(3, start=-1)

    def __init__(self, config: dict | None = None) -> None:  # noqa: ARG002 - env classes get the EnvContext
        self.t = 0

    def reset(self, *, seed=None, options=None):  # noqa: ARG002
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"action {action} is not in {self.action_space}")
        self.t += 1
        return np.zeros(2, np.float32), float(action == -1), self.t >= 10, False, {}


@pytest.mark.parametrize(
    "config",
    [
        PPOConfig()
        .exploration(exploration_config={"type": "StochasticSampling", "random_timesteps": 200})
        .training(train_batch_size=200, minibatch_size=100, lr=1e-2),
        DQNConfig().training(num_steps_sampled_before_learning_starts=100),
    ],
    ids=["ppo", "dqn"],
)
def test_a_discrete_space_with_a_start_gets_actions_from_its_start(config):
    """Sampled and random actions alike count from 0 inside and from the space's start outside."""
    algo = config.environment(SignedChoiceEnv).debugging(seed=0).build()
    try:
        iterations = 8 if isinstance(config, PPOConfig) else 2  # DQN: random actions, then its own
        returns = [algo.train()["episode_return_mean"] for _ in range(iterations)]  # the env raises on 2
        assert algo.compute_single_action(np.zeros(2, np.float32), explore=False) in (-1, 0, 1)
        if isinstance(config, PPOConfig):
            assert max(returns) > 6, returns  # learned to press -1 (at random: 3.3)
            assert algo.compute_single_action(np.zeros(2, np.float32), explore=False) == -1
    finally:
        algo.stop()
