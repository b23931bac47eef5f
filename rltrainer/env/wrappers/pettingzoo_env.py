"""PettingZoo envs as ``MultiAgentEnv``s (RLlib's ``PettingZooEnv`` and ``ParallelPettingZooEnv``).

PettingZoo is optional (``pip install 'rltrainer[multiagent]'``): these wrappers only use the
env objects they are given, so this module does not import it.

Observations pass through unchanged, including the classic games' ``{"observation": ...,
"action_mask": ...}`` dicts: the policies mask their logits with the ``"action_mask"`` part.
"""

from __future__ import annotations

from typing import Any

from rltrainer.env.multi_agent_contract import (
    ALL,
    AgentID,
    MultiAgentDict,
    MultiAgentEnv,
    check_action_dict,
    episode_end_flags,
    require_action_dict,
)
from rltrainer.errors import EnvError

StepResult = tuple[MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict]


class _PettingZooBase(MultiAgentEnv):
    """What both wrappers share: agents and spaces read from the PettingZoo env."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.possible_agents = list(env.possible_agents)
        # PettingZoo envs give each agent's spaces by method; agents may differ.
        self.observation_spaces = {agent: env.observation_space(agent) for agent in self.possible_agents}
        self.action_spaces = {agent: env.action_space(agent) for agent in self.possible_agents}
        self.metadata = getattr(env, "metadata", {})
        self.render_mode = getattr(env, "render_mode", None)
        self._all_terminated = True  # whether every agent done so far ended by termination

    @property
    def agents(self) -> list[AgentID]:  # type: ignore[override]
        """The agents alive now (none before the first ``reset``)."""
        try:
            return list(self.env.agents)
        except AttributeError:  # PettingZoo's order enforcing: no agents before reset()
            return []

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


class PettingZooEnv(_PettingZooBase):
    """A turn-based PettingZoo ``AECEnv`` as a ``MultiAgentEnv`` (RLlib's wrapper's semantics).

    - Observations: after ``reset`` and after each ``step`` the dict holds the agent whose turn
      it is (``env.agent_selection``), plus the final observation of each agent that became done.
    - Actions: ``step`` takes a dict with exactly the agent whose turn it is.
    - Rewards: an agent's rewards add up in PettingZoo's ``_cumulative_rewards`` from its last
      action on, and reach it (from ``env.last()``) with its next observation, either when its
      turn comes again or when it is done: every reward of the game reaches its agent once.
    - Done agents: when the turn passes to a terminated or truncated agent, the wrapper reports
      it done (with its final observation and reward) and steps it with ``None``, as PettingZoo
      requires, until a live agent's turn comes or no agent is left.
    - The episode ends (``"__all__"``) when ``env.agents`` is empty: ``terminateds["__all__"]``
      when every agent ended by termination, ``truncateds["__all__"]`` otherwise.
    """

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[MultiAgentDict, MultiAgentDict]:
        self.env.reset(seed=seed, options=options)
        self._all_terminated = True
        agent = self.env.agent_selection
        return {agent: self.env.observe(agent)}, {agent: dict(self.env.infos.get(agent, {}))}

    def step(self, action_dict: MultiAgentDict) -> StepResult:
        turn = [self.env.agent_selection] if self.agents else []  # none once the game is over
        check_action_dict(self, action_dict, turn)
        self.env.step(action_dict[turn[0]])
        return self._until_live_turn()

    def _until_live_turn(self) -> StepResult:
        """Collect the selected agent's ``last()``; while it is done, step it out with ``None``."""
        obs, rewards, terminateds, truncateds, infos = {}, {}, {}, {}, {}
        while self.env.agents:
            agent = self.env.agent_selection
            if agent in obs:  # a done agent stepped with None must leave env.agents
                raise EnvError(
                    f"PettingZoo env {type(self.env).__name__} selected done agent {agent!r} again after "
                    "its step(None); its dead step must remove it from env.agents"
                )
            obs[agent], reward, terminated, truncated, infos[agent] = self.env.last()
            rewards[agent] = float(reward)
            terminateds[agent], truncateds[agent] = bool(terminated), bool(truncated)
            if not (terminated or truncated):
                break
            self._all_terminated = self._all_terminated and bool(terminated)
            self.env.step(None)
        terminateds[ALL], truncateds[ALL] = episode_end_flags(not self.env.agents, self._all_terminated)
        return obs, rewards, terminateds, truncateds, infos


class ParallelPettingZooEnv(_PettingZooBase):
    """A PettingZoo ``ParallelEnv`` (every live agent acts at each step) as a ``MultiAgentEnv``.

    ``reset`` and ``step`` pass the env's dicts through (copied) and add ``"__all__"`` to the
    flags: the episode ends when every agent of the step is done or ``env.agents`` is empty;
    ``terminateds["__all__"]`` when every agent ended by termination, ``truncateds["__all__"]``
    otherwise.
    """

    @property
    def par_env(self) -> Any:
        """The wrapped ``ParallelEnv`` (RLlib's name for it)."""
        return self.env

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[MultiAgentDict, MultiAgentDict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        self._all_terminated = True
        return dict(obs), dict(infos)

    def step(self, action_dict: MultiAgentDict) -> StepResult:
        require_action_dict(self, action_dict)  # the env's own checks judge the agents
        obs, rewards, terminations, truncations, infos = self.env.step(action_dict)
        terminateds = {agent: bool(flag) for agent, flag in terminations.items()}
        truncateds = {agent: bool(flag) for agent, flag in truncations.items()}
        done = [
            agent
            for agent in set(terminateds) | set(truncateds)
            if terminateds.get(agent) or truncateds.get(agent)
        ]
        for agent in done:
            self._all_terminated = self._all_terminated and terminateds.get(agent, False)
        all_done = not self.agents or len(done) == len(set(terminateds) | set(truncateds))
        terminateds[ALL], truncateds[ALL] = episode_end_flags(all_done, self._all_terminated)
        return dict(obs), dict(rewards), terminateds, truncateds, dict(infos)


__all__ = ["ParallelPettingZooEnv", "PettingZooEnv"]
