"""The multi-agent env layer: ``MultiAgentEnv``'s contract, ``make_multi_agent``, the PettingZoo
wrappers on real PettingZoo games, and ``check_multi_agent_env``'s errors."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pettingzoo
import pytest

from rltrainer.env.multi_agent_env import (
    MultiAgentEnv,
    check_multi_agent_env,
    is_multi_agent_env,
    make_multi_agent,
    to_multi_agent_env,
)
from rltrainer.env.wrappers.pettingzoo_env import ParallelPettingZooEnv, PettingZooEnv
from rltrainer.errors import EnvError

ALL = "__all__"


def episode_over(terminateds: dict, truncateds: dict) -> bool:
    return bool(terminateds[ALL] or truncateds[ALL])


# --- make_multi_agent ------------------------------------------------------------------------


def test_make_multi_agent_cartpole_agents_and_spaces():
    env = make_multi_agent("CartPole-v1")({"num_agents": 2})
    single = gym.make("CartPole-v1")
    assert env.possible_agents == [0, 1]
    assert env.agents == [] and env.max_num_agents == 2
    for agent in (0, 1):
        assert env.get_observation_space(agent) == single.observation_space
        assert env.get_action_space(agent) == single.action_space
    assert is_multi_agent_env(env) and to_multi_agent_env(env) is env
    check_multi_agent_env(env, "multi-cartpole")
    obs, infos = env.reset(seed=0)
    assert set(obs) == set(infos) == {0, 1} and env.num_agents == 2


def test_make_multi_agent_done_agents_leave_and_all_ends_the_episode():
    env = make_multi_agent("CartPole-v1")({"num_agents": 2})
    obs, _ = env.reset(seed=0)
    # Agent 0 always pushes left (the pole falls within ~10 steps); agent 1 alternates and lasts longer.
    t, ended_at = 0, {}
    while True:
        actions = {agent: 0 if agent == 0 else t % 2 for agent in obs if agent not in ended_at}
        obs, rewards, terminateds, truncateds, _ = env.step(actions)
        t += 1
        assert set(rewards) == set(actions) and set(obs) == set(actions)  # final obs of a done agent too
        for agent in actions:
            if terminateds[agent] or truncateds[agent]:
                ended_at[agent] = t
        assert env.agents == [agent for agent in (0, 1) if agent not in ended_at]
        if episode_over(terminateds, truncateds):
            break
        assert not terminateds[ALL] and not truncateds[ALL]
    assert ended_at[0] < ended_at[1] == t
    assert terminateds[ALL] and not truncateds[ALL]  # both poles fell: terminated
    with pytest.raises(EnvError, match="after the episode ended; call reset"):
        env.step({1: 0})


def test_make_multi_agent_rejects_actions_of_done_or_unknown_agents():
    env = make_multi_agent("CartPole-v1")({"num_agents": 2})
    env.reset(seed=0)
    t = 0
    while True:  # agent 0's pole falls first (as above)
        _, _, terminateds, _, _ = env.step({0: 0, 1: t % 2})
        t += 1
        if terminateds[0]:
            break
    alive = env.agents
    assert alive == [1]
    with pytest.raises(EnvError, match=r"exactly the agents to act \[1\].*not acting now: \[0\]"):
        env.step({0: 0, 1: 0})
    with pytest.raises(EnvError, match=r"missing: \[1\]"):
        env.step({})
    assert env.agents == alive


def test_make_multi_agent_passes_config_and_truncates():
    # The config's rest goes to every copy (gym.make's max_episode_steps here): both truncate.
    env = make_multi_agent("CartPole-v1")({"num_agents": 2, "max_episode_steps": 5})
    env.reset(seed=1)
    for t in range(5):
        _, _, terminateds, truncateds, _ = env.step({0: t % 2, 1: t % 2})
    assert truncateds == {0: True, 1: True, ALL: True} and not terminateds[ALL]
    assert env.agents == []


def test_make_multi_agent_seeds_copy_i_with_seed_plus_i():
    env = make_multi_agent("CartPole-v1")({"num_agents": 3})
    obs, _ = env.reset(seed=7)
    for i in range(3):
        expected, _ = gym.make("CartPole-v1").reset(seed=7 + i)
        np.testing.assert_array_equal(obs[i], expected)
    again, _ = env.reset(seed=7)
    assert all(np.array_equal(obs[i], again[i]) for i in range(3))
    assert not np.array_equal(obs[0], obs[1])


def test_make_multi_agent_with_a_creator_gets_the_config_without_num_agents():
    seen = []

    def creator(config):
        seen.append(dict(config))
        return gym.make("CartPole-v1", max_episode_steps=config["horizon"])

    cls = make_multi_agent(creator)
    env = cls({"num_agents": 3, "horizon": 2})
    assert seen == [{"horizon": 2}] * 3 and env.possible_agents == [0, 1, 2]
    env.reset(seed=0)
    env.step(dict.fromkeys(range(3), 0))
    _, _, _, truncateds, _ = env.step(dict.fromkeys(range(3), 1))
    assert truncateds[ALL]


@pytest.mark.parametrize("num_agents", [0, -1, 1.5, "2", True])
def test_make_multi_agent_rejects_bad_num_agents(num_agents):
    with pytest.raises(EnvError, match="num_agents must be an int >= 1"):
        make_multi_agent("CartPole-v1")({"num_agents": num_agents})


def test_make_multi_agent_unknown_env_id_is_an_env_error():
    with pytest.raises(EnvError, match="CartPool-v1"):
        make_multi_agent("CartPool-v1")({"num_agents": 2})


# --- a custom MultiAgentEnv whose agents leave mid-episode -------------------------------------


class Countdown(MultiAgentEnv):
    """Agent ``"a"`` lives 1 step, ``"b"`` 2 and ``"c"`` 3; each observes its steps left and
    gets 1 per step. One observation space for all (no ``observation_spaces`` dict)."""

    LIFETIMES = {"a": 1, "b": 2, "c": 3}

    def __init__(self, config=None):  # noqa: ARG002 - RLlib's env classes take their config
        super().__init__()
        self.possible_agents = list(self.LIFETIMES)
        self.agents = []
        self.observation_space = gym.spaces.Discrete(4)
        self.action_spaces = {agent: gym.spaces.Discrete(2) for agent in self.possible_agents}

    def reset(self, *, seed=None, options=None):  # noqa: ARG002 - nothing random to seed
        self.t = 0
        self.agents = list(self.possible_agents)
        return {agent: self.LIFETIMES[agent] for agent in self.agents}, {}

    def step(self, action_dict):
        self.t += 1
        obs = {agent: self.LIFETIMES[agent] - self.t for agent in action_dict}
        rewards = dict.fromkeys(action_dict, 1.0)
        terminateds = {agent: obs[agent] == 0 for agent in action_dict}
        self.agents = [agent for agent in self.agents if not terminateds[agent]]
        terminateds[ALL] = not self.agents
        return obs, rewards, terminateds, {ALL: False}, {}


def test_custom_env_agents_leave_mid_episode():
    env = Countdown()
    check_multi_agent_env(env, "countdown")
    assert env.get_observation_space("c") == gym.spaces.Discrete(4)  # the single space, for all
    assert env.get_action_space("b") == gym.spaces.Discrete(2)
    obs, _ = env.reset()
    acting = []
    while True:
        acting.append(sorted(obs))
        obs, _, terminateds, truncateds, _ = env.step(dict.fromkeys(env.agents, 0))
        obs = {agent: o for agent, o in obs.items() if not terminateds.get(agent)}
        if episode_over(terminateds, truncateds):
            break
    assert acting == [["a", "b", "c"], ["b", "c"], ["c"]]
    assert env.num_agents == 0


def test_unknown_agent_space_names_the_agent_and_the_known_ones():
    env = Countdown()
    with pytest.raises(EnvError, match=r"action space for agent 'z'.*\['a', 'b', 'c'\]"):
        env.get_action_space("z")
    bare = MultiAgentEnv()
    bare.possible_agents = ["x"]
    with pytest.raises(EnvError, match=r"no observation space for agent 'x'.*known agents: \['x'\]"):
        bare.get_observation_space("x")


def test_a_dict_space_of_every_agent_gives_each_agent_its_part():
    env = Countdown()
    env.action_spaces = None
    env.action_space = gym.spaces.Dict({agent: gym.spaces.Discrete(n + 2) for n, agent in enumerate("abc")})
    assert env.get_action_space("c") == gym.spaces.Discrete(4)
    # A Dict that all agents share (its keys are not the agents) stays whole.
    env.observation_space = gym.spaces.Dict({"a": gym.spaces.Discrete(2)})
    assert env.get_observation_space("b") == env.observation_space


def test_a_gym_env_is_not_a_multi_agent_env():
    env = gym.make("CartPole-v1")
    assert not is_multi_agent_env(env) and not is_multi_agent_env("CartPole-v1")
    with pytest.raises(EnvError, match="is not a multi-agent env.*make_multi_agent"):
        to_multi_agent_env(env)


# --- PettingZoo ------------------------------------------------------------------------------
# pettingzoo.make(...) is PettingZoo's registry API; the older ``pettingzoo.classic.rps_v2.env()``
# makes the same env objects but warns that it is deprecated.


def test_pettingzoo_rps_turn_order_and_every_reward_reaches_its_player():
    raw = pettingzoo.make("aec", "classic/rps-v2", max_cycles=4)
    assert is_multi_agent_env(raw)
    env = to_multi_agent_env(raw)
    assert isinstance(env, PettingZooEnv) and env.agents == []  # before reset
    assert env.possible_agents == ["player_0", "player_1"]
    assert env.get_observation_space("player_1") == gym.spaces.Discrete(4)
    assert env.get_action_space("player_0") == gym.spaces.Discrete(3)
    check_multi_agent_env(env, "rps")
    obs, infos = env.reset(seed=0)
    assert list(obs) == list(infos) == ["player_0"]
    turns, totals = [], {"player_0": 0.0, "player_1": 0.0}
    while True:
        (agent,) = obs  # one agent's turn at a time
        turns.append(agent)
        # Player 0 always plays rock (0), player 1 paper (1): player 1 wins each round.
        obs, rewards, terminateds, truncateds, _ = env.step({agent: 0 if agent == "player_0" else 1})
        assert set(rewards) == set(obs) and not terminateds[ALL]
        for who, reward in rewards.items():
            totals[who] += reward
        if episode_over(terminateds, truncateds):
            break
    assert turns == ["player_0", "player_1"] * 4
    assert totals == {"player_0": -4.0, "player_1": 4.0}
    # The last step reports both players done (truncated at max_cycles), with their final obs.
    assert set(obs) == {"player_0", "player_1"} and obs["player_0"] == 1 and obs["player_1"] == 0
    assert truncateds == {"player_0": True, "player_1": True, ALL: True}
    assert env.agents == []


def test_pettingzoo_rps_rewards_arrive_with_the_players_next_turn():
    env = PettingZooEnv(pettingzoo.make("aec", "classic/rps-v2"))
    env.reset(seed=0)
    _, rewards, _, _, _ = env.step({"player_0": 2})  # scissors
    assert rewards == {"player_1": 0.0}
    _, rewards, _, _, _ = env.step({"player_1": 1})  # paper: the round is scored, player 0 won
    assert rewards == {"player_0": 1.0}
    _, rewards, _, _, _ = env.step({"player_0": 0})
    assert rewards == {"player_1": -1.0}  # player 1's loss reaches it at its next turn


def test_pettingzoo_aec_action_for_the_wrong_agent_names_both():
    env = PettingZooEnv(pettingzoo.make("aec", "classic/rps-v2"))
    env.reset(seed=0)
    with pytest.raises(EnvError, match=r"\['player_0'\]; got actions for \['player_1'\]"):
        env.step({"player_1": 0})
    with pytest.raises(EnvError, match=r"missing: \['player_0'\]"):
        env.step({})
    with pytest.raises(EnvError, match=r"not acting now: \['player_1'\]"):
        env.step({"player_0": 0, "player_1": 0})
    with pytest.raises(EnvError, match="takes a dict"):
        env.step(0)


def test_pettingzoo_tictactoe_scripted_win_pays_both_players():
    env = to_multi_agent_env(pettingzoo.make("aec", "classic/tictactoe-v3"))
    space = env.get_observation_space("player_1")
    assert isinstance(space, gym.spaces.Dict) and set(space.spaces) == {"observation", "action_mask"}
    obs, _ = env.reset(seed=0)
    # player_1 takes the top row (0, 1, 2); player_2 plays 3 and 4.
    for agent, square in [("player_1", 0), ("player_2", 3), ("player_1", 1), ("player_2", 4)]:
        assert list(obs) == [agent]
        obs, rewards, terminateds, truncateds, _ = env.step({agent: square})
        assert not episode_over(terminateds, truncateds)
    # The mask passes through unchanged: occupied squares are not allowed.
    np.testing.assert_array_equal(obs["player_1"]["action_mask"], [0, 0, 1, 0, 0, 1, 1, 1, 1])
    obs, rewards, terminateds, truncateds, _ = env.step({"player_1": 2})
    assert rewards == {"player_1": 1.0, "player_2": -1.0}
    assert terminateds == {"player_1": True, "player_2": True, ALL: True} and not truncateds[ALL]
    assert set(obs) == {"player_1", "player_2"} and env.agents == []


@pytest.mark.parametrize("seed", range(5))
def test_pettingzoo_tictactoe_random_game_ends_with_all(seed):
    env = PettingZooEnv(pettingzoo.make("aec", "classic/tictactoe-v3"))
    check_multi_agent_env(env, "tictactoe", seed=seed)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    totals = {"player_1": 0.0, "player_2": 0.0}
    for move in range(1, 10):
        ((agent, agent_obs),) = obs.items()
        assert agent == ("player_1" if move % 2 else "player_2")
        assert env.get_observation_space(agent).contains(agent_obs)
        square = int(rng.choice(np.flatnonzero(agent_obs["action_mask"])))
        obs, rewards, terminateds, truncateds, _ = env.step({agent: square})
        for who, reward in rewards.items():
            totals[who] += reward
        if episode_over(terminateds, truncateds):
            break
    assert terminateds[ALL] and move >= 5  # a win needs 5 moves; a draw all 9
    assert sum(totals.values()) == 0.0 and set(totals.values()) in ({0.0}, {1.0, -1.0})


def test_pettingzoo_parallel_rps():
    raw = pettingzoo.make("parallel", "classic/rps-v2", max_cycles=3)
    env = to_multi_agent_env(raw)
    assert isinstance(env, ParallelPettingZooEnv) and env.par_env is raw
    check_multi_agent_env(env, "parallel rps")
    obs, infos = env.reset(seed=0)
    assert set(obs) == set(infos) == {"player_0", "player_1"} and env.num_agents == 2
    for _ in range(2):
        obs, rewards, terminateds, truncateds, _ = env.step(
            {"player_0": 0, "player_1": 2}
        )  # rock beats scissors
        assert rewards == {"player_0": 1, "player_1": -1} and not episode_over(terminateds, truncateds)
        assert obs == {"player_0": 2, "player_1": 0}  # each sees the other's last move
    _, rewards, terminateds, truncateds, _ = env.step({"player_0": 0, "player_1": 2})
    assert truncateds == {"player_0": True, "player_1": True, ALL: True} and not terminateds[ALL]
    assert env.agents == []


# --- check_multi_agent_env's errors ----------------------------------------------------------


class Broken(Countdown):
    """``Countdown`` with one defect, chosen by ``defect``."""

    def __init__(self, defect):
        super().__init__()
        self.defect = defect
        if defect == "text space":
            self.observation_spaces = {agent: gym.spaces.Discrete(4) for agent in self.possible_agents}
            self.observation_spaces["b"] = gym.spaces.Text(5)
        if defect == "nested sequence action":
            self.action_spaces["c"] = gym.spaces.Dict(
                {"move": gym.spaces.Discrete(2), "plan": gym.spaces.Sequence(gym.spaces.Discrete(2))}
            )

    def reset(self, *, seed=None, options=None):
        obs, infos = super().reset(seed=seed, options=options)
        if self.defect == "unknown agent at reset":
            obs["ghost"] = 0
        if self.defect == "obs outside space":
            obs["b"] = 9
        return obs, infos

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        if self.defect == "unknown agent reward":
            rewards["ghost"] = 1.0
        if self.defect == "no __all__":
            del truncateds[ALL]
        return obs, rewards, terminateds, truncateds, infos


@pytest.mark.parametrize(
    ("defect", "message"),
    [
        (
            "unknown agent at reset",
            r"reset\(\)'s observations name agent 'ghost'.*possible_agents \['a', 'b', 'c'\]",
        ),
        ("unknown agent reward", r"step\(\)'s rewards name agent 'ghost'.*possible_agents \['a', 'b', 'c'\]"),
        ("text space", r"agent 'b''s observation space Text\(.*not supported.*Box, Discrete, MultiDiscrete"),
        ("nested sequence action", r"agent 'c''s action space Sequence\(.*part 'plan'.*not supported.*Tuple"),
        ("obs outside space", r"reset\(\)'s observation of agent 'b' 9 is not in the space"),
        ("no __all__", r"step\(\)'s truncateds dict has no '__all__' key"),
    ],
)
def test_checker_errors_name_the_agent_and_the_call(defect, message):
    with pytest.raises(EnvError, match=message) as err:
        check_multi_agent_env(Broken(defect), "broken")
    assert str(err.value).startswith("multi-agent env 'broken' failed the env check: ")
    assert "\n" not in str(err.value)


def test_checker_reports_a_raising_step_in_one_line():
    class Raises(Countdown):
        def step(self, action_dict):  # noqa: ARG002
            raise RuntimeError("boom")

    with pytest.raises(EnvError, match=r"step\(\{'a': .*\}\) raised RuntimeError: boom"):
        check_multi_agent_env(Raises(), "raises")


def test_pettingzoo_classic_modules_are_wrapped_too():
    # RLlib's examples use the older module API; it warns that pettingzoo.make is preferred.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from pettingzoo.classic import rps_v2

    aec, parallel = to_multi_agent_env(rps_v2.env()), to_multi_agent_env(rps_v2.parallel_env())
    assert isinstance(aec, PettingZooEnv) and isinstance(parallel, ParallelPettingZooEnv)
    check_multi_agent_env(aec, "rps_v2.env()")
    check_multi_agent_env(parallel, "rps_v2.parallel_env()")
