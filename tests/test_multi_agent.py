"""Multi-agent training (issue 17): sampling, per-policy learning, the API, checkpoints, bad input.

Examples learn with real envs: two CartPoles with a policy each, MPE's simple_spread (PettingZoo
Parallel API) with one shared policy, rock-paper-scissors (PettingZoo AEC) against a frozen
heuristic.
"""

# ruff: noqa: ARG001, ARG002, ARG005 - env and mapping signatures are the APIs' own
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltrainer.algorithms.dqn import DQN, DQNConfig
from rltrainer.algorithms.impala import IMPALAConfig
from rltrainer.algorithms.ppo import PPO, PPOConfig
from rltrainer.algorithms.sac import SACConfig
from rltrainer.env.multi_agent_env import MultiAgentEnv
from rltrainer.env.multi_agent_env_runner import MultiAgentBatch
from rltrainer.env.multi_agent_episode import AgentTrack
from rltrainer.env.multi_agent_examples import (
    AlwaysSameHeuristic,
    MultiAgentCartPole,
    MultiAgentPendulum,
    RockPaperScissors,
    SimpleSpread,
    learner_vs_opponent,
    policy_per_agent,
    shared_policy,
)
from rltrainer.errors import CheckpointError, ConfigError, EnvError
from rltrainer.policy import Policy, PolicySpec
from tests.ray_clusters import kill_actor

# The two-CartPole tuned example's settings (tuned_examples/ppo_multi_cartpole.yaml).
TWO_CARTPOLES = dict(
    train_batch_size=512,
    minibatch_size=128,
    num_epochs=10,
    lr=1e-3,
    gamma=0.99,
    lambda_=0.95,
    entropy_coeff=0.0,
    kl_coeff=0.0,
    vf_clip_param=None,
    model={"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"},
)


def two_cartpoles(tmp_path, **multi_agent) -> PPOConfig:
    return (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .env_runners(num_envs_per_env_runner=8, rollout_fragment_length=64)
        .training(**TWO_CARTPOLES)
        .reporting(metrics_num_episodes_for_smoothing=20, storage_path=str(tmp_path))
        .multi_agent(**{"policies": {"p0", "p1"}, "policy_mapping_fn": policy_per_agent, **multi_agent})
    )


def one_quick_update(config: PPOConfig) -> PPOConfig:
    """One fragment and one Adam step per policy a ``train()``: enough where the test needs
    trained weights, not learning."""
    config.env_runners(num_envs_per_env_runner=2, rollout_fragment_length=64)
    return config.training(train_batch_size=128, minibatch_size=128, num_epochs=1)


def get_weights(learner):
    return learner.get_weights()


def weights_of(policy: Policy) -> dict[str, np.ndarray]:
    return {k: v.copy() for k, v in policy.get_weights().items()}


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)


# --- examples that learn -----------------------------------------------------------------------
def test_two_cartpoles_each_policy_solves(tmp_path):
    algo = two_cartpoles(tmp_path).debugging(seed=0).build()
    try:
        while True:
            result = algo.train()
            returns = result["policy_reward_mean"]
            if min(returns.values()) >= 475 or result["timesteps_total"] >= 150_000:
                break
        assert min(returns.values()) >= 475, returns
        assert set(result["info"]["learner"]) == {"p0", "p1"}
        assert "policy_loss" in result["info"]["learner"]["p0"]["learner_stats"]
        assert result["agent_timesteps_total"] > result["timesteps_total"]  # two agents per env step
        assert not same_weights(algo.get_policy("p0").get_weights(), algo.get_policy("p1").get_weights())
    finally:
        algo.stop()


def test_shared_policy_learns_simple_spread(tmp_path):
    """One policy for both agents of MPE's cooperative navigation (PettingZoo Parallel API)."""
    config = (
        PPOConfig()
        .environment(SimpleSpread, env_config={"N": 2})
        .env_runners(num_envs_per_env_runner=8)
        .training(
            lr=1e-3, vf_clip_param=None, train_batch_size=2000, minibatch_size=500, num_epochs=10, gamma=0.95
        )
        .multi_agent(policies={"shared"}, policy_mapping_fn=shared_policy)
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        first = algo.train()
        start = first["policy_reward_mean"]["shared"]
        for _ in range(11):  # seed 0 gains 4 after 6 iterations, 6 after 12
            result = algo.train()
            end = result["policy_reward_mean"]["shared"]
            if end >= start + 4.0:
                break
        assert result["num_agent_steps_sampled"] == 2 * result["num_env_steps_sampled"]
        assert end >= start + 4.0, (start, end)  # about -21 (random) to -15 in 24k env steps
    finally:
        algo.stop()


def test_rock_paper_scissors_learner_beats_a_frozen_heuristic(tmp_path):
    """PettingZoo's turn-based (AEC) RPS: only the learner trains; the heuristic keeps its move."""
    config = (
        PPOConfig()
        .environment(RockPaperScissors)
        .env_runners(num_envs_per_env_runner=8)
        .training(lr=1e-3, train_batch_size=1200, minibatch_size=300, num_epochs=10, entropy_coeff=0.0)
        .multi_agent(
            policies={"learner": PolicySpec(), "opponent": PolicySpec(policy_class=AlwaysSameHeuristic)},
            policy_mapping_fn=learner_vs_opponent,
            policies_to_train=["learner"],
        )
        .reporting(storage_path=str(tmp_path))
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        opponent = weights_of(algo.get_policy("opponent"))
        for _ in range(10):  # seed 0 passes 10 after 7 iterations
            result = algo.train()
            if result["policy_reward_mean"]["learner"] >= 10.0:
                break
        assert result["policy_reward_mean"]["learner"] >= 10.0  # of 15 rounds (+1 a win, -1 a loss)
        assert result["policy_reward_mean"]["opponent"] == -result["policy_reward_mean"]["learner"]
        assert set(result["info"]["learner"]) == {"learner"}
        assert same_weights(opponent, algo.get_policy("opponent").get_weights())
        # the greedy learner beats the heuristic's move every time it has seen it
        move = algo.get_policy("opponent").move
        seen = np.zeros(4, dtype=np.float32)
        seen[move] = 1.0
        beats = {0: 1, 1: 2, 2: 0}  # rock < paper < scissors < rock
        assert algo.compute_single_action(seen.argmax(), policy_id="learner", explore=False) == beats[move]
    finally:
        algo.stop()


# --- sampling ---------------------------------------------------------------------------------
def test_a_fragment_counts_env_or_agent_steps_and_lays_out_each_agents_pieces(tmp_path):
    algo = two_cartpoles(tmp_path).env_runners(num_envs_per_env_runner=2, rollout_fragment_length=50).build()
    try:
        runner = algo.env_runner_group.local_worker()
        batch, _ = runner.sample()
        assert isinstance(batch, MultiAgentBatch)
        assert batch.env_steps == 100 and batch.count == 100
        assert batch.agent_steps == sum(r.num_steps for r in batch.policy_batches.values())
        rollout = batch.policy_batches["p0"]
        assert (
            rollout.obs.shape[1] == 1 and rollout.obs.shape[2] == 4
        )  # [T, 1, obs]: pieces one after another
        # a piece ends terminated (the pole fell) or truncated (cut: bootstraps); reset rows are invalid
        ends = rollout.terminateds | rollout.truncateds
        assert ends[rollout.valid].sum() >= 2 and not ends[~rollout.valid].any()
        algo.config.count_steps_by = "agent_steps"
        batch, _ = runner.sample()
        assert batch.count == batch.agent_steps >= 100 and batch.env_steps < batch.agent_steps
    finally:
        algo.stop()


def test_a_turn_based_reward_reaches_the_action_that_earned_it():
    track = AgentTrack("p")
    track.observe(np.zeros(2, np.float32))
    track.act(np.int64(1), -0.5)
    track.pending_reward += 1.0  # paid after the other player moved
    track.pending_reward += 0.5
    track.observe(np.ones(2, np.float32))  # its next turn closes the transition
    track.act(np.int64(0), -0.7)
    piece = track.take_piece()
    assert piece["rewards"].tolist() == [1.5]
    assert piece["new_obs"].tolist() == [[1.0, 1.0]] and piece["truncateds"].tolist() == [True]
    assert track.take_piece() is None  # the second action waits for its outcome
    track.pending_reward = -1.0
    track.finish(np.full(2, 2.0, np.float32), terminated=True)
    piece = track.take_piece()
    assert piece["rewards"].tolist() == [-1.0] and piece["terminateds"].tolist() == [True]


# --- learning on several processes, off-policy -----------------------------------------------
@pytest.mark.usefixtures("local_ray")
def test_remote_runners_and_data_parallel_learners_per_policy(tmp_path):
    config = two_cartpoles(tmp_path).env_runners(num_env_runners=1, num_envs_per_env_runner=2)
    config.resources(num_learners=2, num_cpus_per_learner=0.5, num_cpus_per_env_runner=0.5)
    config.training(train_batch_size=256, minibatch_size=64, num_epochs=2)
    algo = config.build()
    try:
        result = algo.train()
        assert set(result["info"]["learner"]) == {"p0", "p1"} and result["num_healthy_env_runners"] == 1
        for pid, group in algo.learner_group.groups.items():
            import ray

            rank0, rank1 = ray.get([learner.apply.remote(get_weights) for learner in group.remote_learners])
            assert same_weights(rank0, rank1), pid  # DDP keeps a policy's learners identical
            remote = ray.get(algo.env_runner_group.remote_workers[0].get_weights.remote())
            assert same_weights(remote[pid], rank0)  # and the runners act with them
    finally:
        algo.stop()


def test_dqn_and_sac_train_a_replay_buffer_per_policy(tmp_path):
    dqn = (
        DQNConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=policy_per_agent, policies_to_train=["p0"])
        .training(num_steps_sampled_before_learning_starts=64, train_batch_size=32)
        .reporting(min_sample_timesteps_per_iteration=200, storage_path=str(tmp_path))
        .checkpointing(store_buffer_in_checkpoints=True)
        .debugging(seed=0)
    ).build()
    try:
        frozen = weights_of(dqn.get_policy("p1"))
        result = dqn.train()
        assert set(dqn.replay_buffers) == {"p0"} and len(dqn.replay_buffers["p0"]) > 0
        assert set(result["info"]["learner"]) == {"p0"}
        assert same_weights(frozen, dqn.get_policy("p1").get_weights())
        path = dqn.save(str(tmp_path / "dqn"))
        assert (tmp_path / "dqn" / "replay_buffer_p0.npz").exists()
        stored = len(dqn.replay_buffers["p0"])
    finally:
        dqn.stop()
    restored = DQN.from_checkpoint(path)
    try:
        assert len(restored.replay_buffers["p0"]) == stored
    finally:
        restored.stop()
    sac = (
        SACConfig()
        .environment(MultiAgentPendulum, env_config={"num_agents": 2})
        .multi_agent(policies={"shared"}, policy_mapping_fn=shared_policy)
        .training(num_steps_sampled_before_learning_starts=64, train_batch_size=32)
        .reporting(min_sample_timesteps_per_iteration=100, storage_path=str(tmp_path))
        .debugging(seed=0)
    ).build()
    try:
        result = sac.train()
        assert np.isfinite(result["info"]["learner"]["shared"]["learner_stats"]["critic_loss"])
        action = sac.compute_single_action(np.zeros(3, np.float32), policy_id="shared")
        assert sac.get_policy("shared").action_space.contains(np.asarray(action, np.float32))
    finally:
        sac.stop()


# --- the API ----------------------------------------------------------------------------------
def test_policy_access_compute_actions_and_foreach_policy(tmp_path):
    algo = two_cartpoles(tmp_path).build()
    try:
        obs = {0: np.zeros(4, np.float32), 1: np.ones(4, np.float32)}
        actions = algo.compute_actions(obs, policy_id="p1", explore=False)
        assert set(actions) == {0, 1}
        assert actions[1] == algo.compute_single_action(obs[1], policy_id="p1", explore=False)
        assert sorted(algo.workers.foreach_policy(lambda policy, pid: pid)) == ["p0", "p1"]
        runner = algo.workers.local_worker()
        assert set(runner.policy_map) == {"p0", "p1"} and set(runner.filters) == {"p0", "p1"}
        with pytest.raises(KeyError, match="no policy 'p9'; policies: p0, p1"):
            algo.get_policy("p9")
    finally:
        algo.stop()


def test_self_play_snapshots_join_as_frozen_opponents_and_leave(tmp_path):
    """RLlib's self-play pattern: snapshot the learning policy into a frozen opponent."""

    def mapping(agent_id, episode, worker, **kwargs):
        return "main" if agent_id == 0 else "main_v1"

    algo = one_quick_update(
        two_cartpoles(tmp_path, policies={"main", "opponent"}, policy_mapping_fn=learner_vs_opponent_ids)
    ).build()
    try:
        algo.train()
        snapshot = weights_of(algo.get_policy("main"))
        added = algo.add_policy("main_v1", policy=algo.get_policy("main"), policy_mapping_fn=mapping)
        assert same_weights(added.get_weights(), snapshot)
        algo.train()
        assert "main_v1" not in algo.learner_group.policy_ids  # frozen: acts, never learns
        assert same_weights(algo.get_policy("main_v1").get_weights(), snapshot)
        assert not same_weights(algo.get_policy("main").get_weights(), snapshot)
        path = algo.save(str(tmp_path / "selfplay"))
        assert set(algo.config.policies) == {"main", "opponent", "main_v1"}
        algo.remove_policy("opponent")
        assert "opponent" not in algo.workers.local_worker().policy_map
        algo.train()
    finally:
        algo.stop()
    restored = PPO.from_checkpoint(path, config_overrides={"policy_mapping_fn": mapping})
    try:
        assert same_weights(restored.get_policy("main_v1").get_weights(), snapshot)
        assert restored.learner_group.policy_ids == ["main", "opponent"]
    finally:
        restored.stop()


def learner_vs_opponent_ids(agent_id, episode=None, worker=None, **kwargs):
    return "main" if agent_id == 0 else "opponent"


def test_checkpoints_hold_a_file_per_policy_and_policies_load_alone(tmp_path):
    algo = one_quick_update(two_cartpoles(tmp_path, policies_to_train=["p0"])).build()
    try:
        algo.train()
        path = algo.save(str(tmp_path / "ckpt"))
        obs = np.array([0.01, -0.02, 0.03, 0.04], np.float32)
        expected = {
            pid: algo.compute_single_action(obs, policy_id=pid, explore=False) for pid in ("p0", "p1")
        }
        weights = {pid: weights_of(algo.get_policy(pid)) for pid in ("p0", "p1")}
    finally:
        algo.stop()
    names = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert names == [
        "filter_p0.npz",
        "filter_p1.npz",
        "optimizer_p0.safetensors",  # only the trainable policy has an optimizer
        "policy_p0.safetensors",
        "policy_p1.safetensors",
        "rltrainer_checkpoint.json",
    ]
    policies = Policy.from_checkpoint(path)
    assert set(policies) == {"p0", "p1"}
    single = Policy.from_checkpoint(path, policy_id="p1")
    assert same_weights(single.get_weights(), weights["p1"])
    restored = PPO.from_checkpoint(path)  # the mapping is importable: no overrides needed
    try:
        for pid in ("p0", "p1"):
            assert restored.compute_single_action(obs, policy_id=pid, explore=False) == expected[pid]
        assert restored.learner_group.policy_ids == ["p0"]
        assert restored.evaluate()["evaluation"]["policy_reward_mean"].keys() == {"p0", "p1"}
    finally:
        restored.stop()


def test_a_lambda_mapping_is_asked_for_when_restoring(tmp_path):
    algo = two_cartpoles(tmp_path, policy_mapping_fn=lambda agent_id, episode, worker, **kw: f"p{agent_id}")
    algo = algo.build()
    try:
        path = algo.save(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    with pytest.raises(ConfigError, match="policy_mapping_fn .* names a lambda.*config_overrides"):
        PPO.from_checkpoint(path)
    restored = PPO.from_checkpoint(path, config_overrides={"policy_mapping_fn": policy_per_agent})
    restored.stop()


# --- bad input --------------------------------------------------------------------------------
class TwoShapes(MultiAgentEnv):
    """Agent "a" sees 3 numbers, agent "b" 5; both pick one of 2 actions."""

    def __init__(self, config=None):
        super().__init__()
        self.possible_agents = ["a", "b"]
        self.agents = list(self.possible_agents)
        self.observation_spaces = {
            "a": gym.spaces.Box(-1, 1, (3,), np.float32),
            "b": gym.spaces.Box(-1, 1, (5,), np.float32),
        }
        self.action_spaces = {agent: gym.spaces.Discrete(2) for agent in self.possible_agents}

    def reset(self, *, seed=None, options=None):
        return {agent: self.observation_spaces[agent].sample() for agent in self.agents}, {}

    def step(self, action_dict):
        obs = {agent: self.observation_spaces[agent].sample() for agent in self.agents}
        done = {"__all__": False}
        return obs, dict.fromkeys(self.agents, 0.0), done, done, {}


@pytest.mark.parametrize(
    ("multi_agent", "message"),
    [
        (
            {"policies": {"p0", "p1"}, "policy_mapping_fn": lambda agent_id, *a, **k: "nobody"},
            "policy_mapping_fn maps agent 'a' to 'nobody', which is not a policy; policies: p0, p1",
        ),
        (
            {"policies": {"shared"}, "policy_mapping_fn": shared_policy},
            "policy 'shared': agent 'b' has observation space Box.*but agent 'a' says Box",
        ),
        (
            {"policies": {"p0", "p1"}, "policy_mapping_fn": policy_per_agent, "policies_to_train": ["p2"]},
            "policies_to_train names unknown policy 'p2'; policies: p0, p1",
        ),
        ({"policies": {"p0", "p1"}}, "2 policies \\(p0, p1\\) need a policy_mapping_fn"),
        ({"policies": {"bad id"}}, "policy id 'bad id': use letters, digits"),
    ],
)
def test_bad_multi_agent_settings_fail_at_build_naming_agent_and_policy(tmp_path, multi_agent, message):
    config = PPOConfig().environment(TwoShapes).reporting(storage_path=str(tmp_path))
    with pytest.raises(ConfigError, match=message):
        config.multi_agent(**multi_agent).build()


def test_algorithms_without_multi_agent_support_say_which_have_it():
    config = IMPALAConfig().environment(MultiAgentCartPole).multi_agent(policies={"p0", "p1"})
    config.multi_agent(policy_mapping_fn=policy_per_agent)
    with pytest.raises(
        ConfigError, match="IMPALA trains one policy .* train with PPO, DQN, SAC, DDPG or TD3"
    ):
        config.build()


def test_a_multi_agent_env_alone_trains_one_shared_default_policy(tmp_path):
    config = PPOConfig().environment(MultiAgentCartPole).reporting(storage_path=str(tmp_path))
    algo = config.training(train_batch_size=128, minibatch_size=128, num_epochs=1).build()
    try:
        assert list(algo.workers.local_worker().policy_map) == ["default_policy"]
        result = algo.train()
        assert set(result["policy_reward_mean"]) == {"default_policy"}
        assert isinstance(algo.get_policy().model, torch.nn.Module)
    finally:
        algo.stop()


class ComingsAndGoings(MultiAgentEnv):
    """Agent "a" acts from the start and leaves after 3 steps (terminated); "b" appears after
    step 2; the episode is truncated after step 6. Observations count the steps."""

    def __init__(self, config=None):
        super().__init__()
        self.possible_agents = ["a", "b"]
        space = gym.spaces.Box(-1000.0, 1000.0, (1,), np.float32)
        self.observation_spaces = dict.fromkeys(self.possible_agents, space)
        self.action_spaces = dict.fromkeys(self.possible_agents, gym.spaces.Discrete(2))

    def reset(self, *, seed=None, options=None):
        self.t, self.agents = 0, ["a"]
        return {"a": np.zeros(1, np.float32)}, {}

    def step(self, action_dict):
        assert set(action_dict) == set(self.agents)
        self.t += 1
        obs = dict.fromkeys(self.agents, np.full(1, self.t, np.float32))
        rewards = dict.fromkeys(self.agents, 1.0)
        terminateds, truncateds = {"__all__": False}, {"__all__": self.t == 6}
        if self.t == 2:
            self.agents.append("b")
            obs["b"] = np.full(1, self.t, np.float32)
        if self.t == 3:
            terminateds["a"] = True
            self.agents.remove("a")
        return obs, rewards, terminateds, truncateds, {}


def by_name(agent_id, episode=None, worker=None, **kwargs):
    return f"p{agent_id}"


def plus_100(agent_obs, worker, base_env, policies, episode):
    return {agent: obs + 100.0 for agent, obs in agent_obs.items()}


@pytest.mark.parametrize("observation_fn", [None, plus_100])
def test_agents_that_appear_and_leave_get_their_own_pieces(tmp_path, observation_fn):
    algo = (
        PPOConfig()
        .environment(ComingsAndGoings)
        .env_runners(rollout_fragment_length=6)
        .training(train_batch_size=6, minibatch_size=6)
        .multi_agent(policies={"pa", "pb"}, policy_mapping_fn=by_name, observation_fn=observation_fn)
        .reporting(storage_path=str(tmp_path))
        .build()
    )
    try:
        batch, episodes = algo.workers.local_worker().sample()
        shift = 0.0 if observation_fn is None else 100.0
        a, b = batch.policy_batches["pa"], batch.policy_batches["pb"]
        assert a.obs[a.valid].ravel().tolist() == [shift, 1 + shift, 2 + shift]
        assert a.terminateds[a.valid].tolist() == [False, False, True]
        assert b.obs[b.valid].ravel().tolist() == [2 + shift, 3 + shift, 4 + shift, 5 + shift]
        assert b.truncateds[b.valid].tolist() == [False, False, False, True]  # bootstraps from ...
        assert b.last_obs.ravel().tolist() == [6 + shift]  # ... its final observation
        assert b.rewards[b.valid].tolist() == [1.0] * 4
        assert batch.agent_steps == 7 and batch.env_steps == 6
        (episode,) = episodes
        assert episode.episode_return == 7.0 and dict(episode.policy_returns) == {"pa": 3.0, "pb": 4.0}
        algo.train()
    finally:
        algo.stop()


class Intruder(ComingsAndGoings):
    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        return {**obs, "z": np.zeros(1, np.float32)}, rewards, terminateds, truncateds, infos


def test_an_agent_the_env_never_declared_is_named(tmp_path):
    config = (
        PPOConfig()
        .environment(Intruder, disable_env_checking=True)  # past build(): the first step names it
        .multi_agent(policies={"pa", "pb"}, policy_mapping_fn=by_name)
        .reporting(storage_path=str(tmp_path))
    )
    algo = config.build()
    try:
        with pytest.raises(
            EnvError, match="step\\(\\) names agent 'z', which is not one of its possible_agents"
        ):
            algo.train()
    finally:
        algo.stop()


def everyone_plays_p1(agent_id, episode=None, worker=None, **kwargs):
    return "p1"


def test_from_checkpoint_restores_a_subset_of_policies_with_a_new_mapping(tmp_path):
    """RLlib's ``Algorithm.from_checkpoint(path, policy_ids=..., policy_mapping_fn=...,
    policies_to_train=...)``: only the kept policies are built and loaded, mapped and trained
    as asked; an id the checkpoint lacks is named."""
    algo = one_quick_update(two_cartpoles(tmp_path, policies_to_train=["p0"])).build()
    try:
        algo.train()
        path = algo.save(str(tmp_path / "ckpt"))
        saved_p1 = weights_of(algo.get_policy("p1"))
    finally:
        algo.stop()
    restored = PPO.from_checkpoint(
        path, policy_ids=["p1"], policy_mapping_fn=everyone_plays_p1, policies_to_train=["p1"]
    )
    try:
        assert list(restored.env_runner_group.local_worker().policy_map) == ["p1"]
        assert same_weights(weights_of(restored.get_policy("p1")), saved_p1)
        assert restored.learner_group.policy_ids == ["p1"]
        restored.train()
        assert not same_weights(weights_of(restored.get_policy("p1")), saved_p1)  # p1 learns now
        with pytest.raises(KeyError, match="no policy 'p0'"):
            restored.get_policy("p0")
    finally:
        restored.stop()
    kept = PPO.from_checkpoint(path, policy_ids=["p0", "p1"])  # as saved: p0 learns, p1 does not
    try:
        assert kept.learner_group.policy_ids == ["p0"]
    finally:
        kept.stop()
    with pytest.raises(CheckpointError, match="holds no policy 'p9'; policies: p0, p1"):
        PPO.from_checkpoint(path, policy_ids=["p9"])


def test_evaluating_a_multi_agent_checkpoint_reports_each_policy(tmp_path):
    from rltrainer.evaluation import evaluate, load_checkpoint

    algo = two_cartpoles(tmp_path).build()
    try:
        path = algo.save(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    loaded = load_checkpoint(path)
    try:
        result = evaluate(loaded, episodes=2)
        assert len(result.finished) == 2
        for episode in result.episodes:
            assert set(episode.policy_returns) == {"p0", "p1"}
            assert episode.episode_return == pytest.approx(sum(episode.policy_returns.values()))
        with pytest.raises(EnvError, match="videos record single-agent envs"):
            evaluate(loaded, episodes=1, video_dir=tmp_path / "videos")
    finally:
        loaded.stop()


def test_the_cli_exports_one_policy_of_a_multi_agent_checkpoint(tmp_path, capsys):
    from rltrainer.cli import main

    algo = two_cartpoles(tmp_path).build()
    try:
        path = algo.save(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    assert main(["export", path, "--out", str(tmp_path / "out"), "--format", "torchscript"]) == 2
    assert "multi-agent (no --policy-id): choose one of its policies with --policy-id (p0, p1)" in (
        capsys.readouterr().err
    )
    assert (
        main(["export", path, "--out", str(tmp_path / "out"), "--format", "torchscript", "--policy-id", "p1"])
        == 0
    )
    assert (tmp_path / "out" / "model.pt").exists()
    assert main(["checkpoints", "inspect", path]) == 0
    assert "policy p1: action_space" in capsys.readouterr().out


@pytest.mark.usefixtures("local_ray")
def test_a_replaced_runner_gets_the_frozen_policies_weights_too(tmp_path):
    import ray

    config = one_quick_update(two_cartpoles(tmp_path, policies_to_train=["p0"]))
    config.env_runners(num_env_runners=1)
    config.fault_tolerance(delay_between_env_runner_restarts_s=0.0).resources(num_cpus_per_env_runner=0.5)
    algo = config.build()
    try:
        frozen = weights_of(algo.get_policy("p1"))
        kill_actor(algo.workers.remote_workers[0])
        while algo.workers.num_restarts == 0:
            algo.train()
        algo.train()
        remote = ray.get(algo.workers.remote_workers[0].get_weights.remote())
        assert same_weights(remote["p1"], frozen)  # not the replacement's own initialization
        assert same_weights(remote["p0"], algo.get_policy("p0").get_weights())
    finally:
        algo.stop()


def test_a_registered_creator_of_a_pettingzoo_env_is_found_multi_agent(tmp_path):
    """The creator's first env says it is multi-agent: no extra env is made to find out."""
    import pettingzoo

    from rltrainer.env import register_env

    made = []

    def creator(config):
        made.append(config)
        return pettingzoo.make("aec", "classic/rps-v2", max_cycles=5)

    register_env("raw_rps_for_test", creator)
    algo = PPOConfig().environment("raw_rps_for_test").reporting(storage_path=str(tmp_path))
    algo = algo.training(train_batch_size=100, minibatch_size=50).build()
    try:
        assert list(algo.workers.local_worker().policy_map) == ["default_policy"]  # shared by both players
        assert algo.train()["policy_reward_mean"]["default_policy"] == 0.0  # a zero-sum game against itself
        assert len(made) == 2  # the first (closed once found multi-agent), then the runner's own
    finally:
        algo.stop()


def test_compressed_observations_are_refused_for_multi_agent_configs(tmp_path):
    config = two_cartpoles(tmp_path).env_runners(compress_observations=True)
    with pytest.raises(ConfigError, match="compress_observations compresses single-agent rollouts"):
        config.build()
