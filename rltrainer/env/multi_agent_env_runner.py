"""``MultiAgentEnvRunner``: samples multi-agent envs with one batched inference per policy and step.

The single-agent ``EnvRunner`` keeps its own stepping loop (a vector env, arrays for every
column); both are ``EnvRunnerCore``s (``env_runner_core``: process set-up, placing policies,
filters, the actor's interface) and share the building blocks (``Policy``, filters,
preprocessors, ``Rollout``). Here payloads are keyed by policy id: ``sample()`` returns a
``MultiAgentBatch``, weights and filter states are per policy.

Each step, the agents that must act in every env copy are grouped by policy
(``policy_mapping_fn``, asked once per agent and episode) and each policy computes the actions
of its group in one call. Each agent's transitions are kept (``AgentTrack``) until a fragment
ends; then every policy gets one ``Rollout`` in the offline reader's layout
(``rollout_from_pieces``: each agent's piece of an episode, then a reset row holding its next
observation; a piece that does not end its episode ends truncated, so it bootstraps). So the
learners read multi-agent data with the code they already have. See the README's design notes.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from rltrainer.algorithms.callbacks import call_hook, overrides
from rltrainer.env.env_context import EnvContext
from rltrainer.env.env_runner_core import EnvRunnerCore, EnvStepError, EpisodePlan, creation_error
from rltrainer.env.episode import index_obs
from rltrainer.env.multi_agent_episode import AgentTrack, MultiAgentEpisode
from rltrainer.env.multi_agent_policies import PolicyFilters, PolicyMap
from rltrainer.env.policy_stacks import build_stacks, observation_groups
from rltrainer.env.registry import env_is_multi_agent, resolve_creator
from rltrainer.env.rollout import EpisodeStats, Rollout
from rltrainer.errors import ConfigError, EnvError, RLTrainerError
from rltrainer.offline.rows import Piece, rollout_from_pieces
from rltrainer.policy_spec import PolicySpec, mapping_function, trainable_policies
from rltrainer.utils.import_paths import resolve_function

logger = logging.getLogger(__name__)

ALL = "__all__"


class MultiAgentBatch(NamedTuple):
    """One fragment of a multi-agent env runner: a ``Rollout`` per policy that had steps."""

    policy_batches: dict[str, Rollout]
    env_steps: int
    agent_steps: int
    count: int
    """What ``train_batch_size`` counts (``count_steps_by``): ``env_steps`` or ``agent_steps``."""

    @property
    def num_steps(self) -> int:
        """The steps that count towards ``train_batch_size`` (as ``Rollout.num_steps``)."""
        return self.count


def make_multi_agent_env(env: Any, ctx: EnvContext) -> Any:
    """One multi-agent env from the config's ``env`` (PettingZoo envs wrapped); ``EnvError``."""
    from rltrainer.env.multi_agent_env import to_multi_agent_env

    creator = resolve_creator(env)
    try:
        created = creator(ctx)
    except RLTrainerError:
        raise
    except Exception as err:
        raise creation_error(env, err) from err
    return to_multi_agent_env(created)


class MultiAgentEnvRunner(PolicyMap, EnvRunnerCore):
    """Samples ``num_envs_per_env_runner`` multi-agent env copies with a map of policies."""

    def _build(self) -> None:
        """Make the env copies and the policies (``EnvRunnerCore.__init__`` calls this after the set-up)."""
        config, worker_index, in_evaluation = self.config, self.worker_index, self.in_evaluation
        self.num_envs = config.num_envs_per_env_runner
        self.envs = [
            make_multi_agent_env(config.env, self._ctx.copy_with_overrides(vector_index=i))
            for i in range(self.num_envs)
        ]
        self.env = self.envs[0]  # what RLlib's examples reach for (e.g. the env's spaces)
        if worker_index == 0 and not in_evaluation and not config.disable_env_checking:
            from rltrainer.env.multi_agent_env import check_multi_agent_env

            check_multi_agent_env(self.envs[0], config.env_name)
        self._mapping_fn = mapping_function(config)
        self._known_agents = frozenset(getattr(self.envs[0], "possible_agents", None) or ())
        self.policy_mapping_fn_setting: Any = None
        """The mapping given to ``add_policy``/``remove_policy`` (``None``: the config's)."""
        self._observation_fn = resolve_function("observation_fn", config.observation_fn)
        self.policy_map: dict[str, Any] = {}
        """Policy id -> ``Policy`` (RLlib's ``worker.policy_map``)."""
        self.policy_specs: dict[str, PolicySpec] = {}
        """Policy id -> its ``PolicySpec`` with the spaces filled in."""
        self.filter = PolicyFilters({})
        for pid, spec in self._infer_specs(config.get_multi_agent_setup()).items():
            self._add(pid, spec)
        self.policies_to_train = trainable_policies(config, list(self.policy_map))
        self._ended: list[tuple[int, EpisodeStats]] = []  # (env index, stats) since the last pop
        self._seeded_envs = [False] * self.num_envs
        self._rows: list[dict[Any, np.ndarray]] = [{} for _ in range(self.num_envs)]  # agents to act
        self._tracks: list[dict[Any, AgentTrack]] = [{} for _ in range(self.num_envs)]
        self._finished: list[AgentTrack] = []  # done agents' tracks with steps not yet handed over
        self._episode: list[MultiAgentEpisode | None] = [None] * self.num_envs  # None: reset first
        self._rng = np.random.default_rng(self._seed())
        self._calls = {
            hook: overrides(self.callbacks, hook)
            for hook in ("on_episode_start", "on_episode_step", "on_episode_end")
        }
        self.global_timestep = 0
        self._stacks: dict[str, Any] | None = None  # see _policy_stacks
        self._stacked_policies: list[tuple[str, Any]] = []
        self._stack_list: list[Any] = []
        self._obs_groups: dict[str, int] = {}  # see _flat_rows_grouped

    # --- sampling ----------------------------------------------------------------------
    def sample(self, explore: bool | None = None) -> tuple[MultiAgentBatch, list[EpisodeStats]]:
        """One fragment: ``rollout_fragment_length`` env steps of every env copy (or that many
        agent steps per copy with ``count_steps_by="agent_steps"``), plus the episodes ended.
        With ``batch_mode="complete_episodes"`` each copy then runs until its episode ends."""
        explore = self.config.explore if explore is None else explore
        wanted = self.config.get_rollout_fragment_length() * self.num_envs
        by_agents = self.config.count_steps_by == "agent_steps"
        complete = self.config.batch_mode == "complete_episodes"
        env_steps = agent_steps = 0
        frozen = [False] * self.num_envs
        while True:
            reached = (agent_steps if by_agents else env_steps) >= wanted
            if reached:
                if not complete:
                    break
                frozen = [f or self._episode[i] is None for i, f in enumerate(frozen)]
                if all(frozen):
                    break
            stepped, acted = self._step(explore, update_filter=True, frozen=frozen, record=True)
            env_steps += stepped
            agent_steps += acted
        count = agent_steps if by_agents else env_steps
        batch = MultiAgentBatch(self._take_rollouts(), env_steps, agent_steps, count)
        return batch, self.pop_episodes()

    def _run_episodes(self, plan: EpisodePlan) -> tuple[list[EpisodeStats], int]:
        quota, num_timesteps, explore, force_reset, update_filter = plan
        # nothing is recorded for learning here
        if force_reset:
            self._episode = [None] * self.num_envs
        counted = [0] * self.num_envs
        episodes: list[EpisodeStats] = []
        steps = 0
        saved, self._ended = self._ended, []
        try:
            while (quota is None or any(c < q for c, q in zip(counted, quota, strict=True))) and (
                num_timesteps is None or steps < num_timesteps
            ):
                frozen = [quota is not None and counted[i] >= quota[i] for i in range(self.num_envs)]
                steps += self._step(explore, update_filter=update_filter, frozen=frozen, record=False)[0]
                for i, stats in self._ended:
                    if quota is None or counted[i] < quota[i]:
                        counted[i] += 1
                        episodes.append(stats)
                self._ended = []
        finally:
            self._ended = saved
        return episodes, steps

    def pop_episodes(self) -> list[EpisodeStats]:
        """The episodes ended since the last call."""
        ended, self._ended = self._ended, []
        return [stats for _, stats in ended]

    def _step(self, explore: bool, update_filter: bool, frozen: list[bool], record: bool) -> tuple[int, int]:
        """One step of every env copy that is not frozen (resetting those between episodes
        first); returns the env steps and agent steps taken."""
        live = [i for i in range(self.num_envs) if not frozen[i]]
        for i in live:
            if self._episode[i] is None:
                self._reset(i, update_filter, record)
        # 1. the asking agents' actions: one compute call per policy, across agents and envs
        groups: dict[str, list[tuple[int, Any]]] = {}
        for i in live:
            episode = self._episode[i]
            for agent in self._rows[i]:
                groups.setdefault(episode.policy_for(agent), []).append((i, agent))
        actions: list[dict[Any, Any]] = [{} for _ in range(self.num_envs)]
        stacked = self._compute_stacked(groups, explore, actions) if len(self.policy_map) > 1 else ()
        for pid, members in groups.items():
            if pid in stacked:
                continue
            out = self._compute(pid, np.array([self._rows[i][agent] for i, agent in members]), explore)
            self._act(members, out["env_actions"], out["actions"], out["action_logp"], actions)
        # 2. step every env; what each agent observes next, batched per policy
        observed: dict[str, list[tuple[int, Any, Any]]] = {}
        outcomes = []
        for i in live:
            outcome = self._env_step(i, actions[i])
            outcomes.append(outcome)
            episode = self._episode[i]
            for agent, agent_obs in outcome.obs.items():
                observed.setdefault(episode.policy_for(agent), []).append((i, agent, agent_obs))
        self._observe(observed, update_filter, record, outcomes)
        for outcome in outcomes:
            if self._calls["on_episode_step"]:
                self._hook("on_episode_step", outcome.env_index)
            if outcome.all_done:
                self._close_episode(outcome.env_index)
        acted = sum(len(a) for a in actions)
        if update_filter:  # training steps advance the exploration schedules; evaluation doesn't
            self.global_timestep += acted
            for policy in self.policy_map.values():
                policy.global_timestep = self.global_timestep
        return len(live), acted

    def _act(
        self,
        members: list[tuple[int, Any]],
        env_actions: Any,
        policy_actions: np.ndarray,
        logp: np.ndarray,
        actions: list[dict[Any, Any]],
    ) -> None:
        """Hand ``members`` (env index, agent) their actions and record them in their tracks."""
        tracks = self._tracks
        logp = logp.tolist()
        for k, (i, agent) in enumerate(members):
            actions[i][agent] = index_obs(env_actions, k)
            track = tracks[i].get(agent)
            if track is not None:
                track.act(policy_actions[k], logp[k])

    def _compute_stacked(
        self, groups: dict[str, list[tuple[int, Any]]], explore: bool, actions: list[dict[Any, Any]]
    ) -> set[str]:
        """The actions of the groups whose policies share a ``PolicyStack``, one kernel call per
        stack (also when only one of its policies acts now); returns the policy ids it handled."""
        stacks = self._policy_stacks()
        chosen: dict[int, tuple[Any, list[tuple[str, int]]]] = {}
        for pid in groups:
            entry = stacks.get(pid)
            if entry is None:
                continue
            stack, slot = entry
            policy = stack.policies[slot]
            if explore and policy.global_timestep < policy.exploration.random_timesteps:
                continue  # exploration's random actions first: compute() draws them
            chosen.setdefault(id(stack), (stack, []))[1].append((pid, slot))
        handled: set[str] = set()
        rows_of = self._rows
        for stack, entries in chosen.values():
            members, starts = [], [0]
            for pid, _ in entries:
                members += groups[pid]
                starts.append(len(members))
            # np.array of equal rows is np.stack at a fifth of its cost for a few rows
            rows = np.array([rows_of[i][agent] for i, agent in members])
            if rows.dtype != np.float32:  # e.g. a custom filter's float64: compute() takes numpy
                continue
            policy_actions, logp = stack.compute(rows, starts, [slot for _, slot in entries], explore)
            self._act(members, policy_actions, policy_actions, logp, actions)
            handled.update(pid for pid, _ in entries)
        return handled

    def _policy_stacks(self) -> dict[str, Any]:
        """``{policy id: (PolicyStack, slot)}``, rebuilt when the policies or their inference
        changed (``add_policy``, ``remove_policy``, ``set_device``, ``share_model``)."""
        stacks, policies = self._stacks, self._stacked_policies
        if (
            stacks is not None
            and len(policies) == len(self.policy_map)
            and all(self.policy_map.get(pid) is policy for pid, policy in policies)
            and all(stack.current() for stack in self._stack_list)
        ):
            return stacks
        self._stacks = stacks = build_stacks(self.policy_map)
        self._obs_groups = observation_groups(self.policy_map)
        self._stack_list = list({id(stack): stack for stack, _ in stacks.values()}.values())
        self._stacked_policies = list(self.policy_map.items())
        return stacks

    def _env_step(self, i: int, actions: dict[Any, Any]) -> _Outcome:
        env, episode = self.envs[i], self._episode[i]
        try:
            obs, rewards, terminateds, truncateds, infos = env.step(actions)
        except RLTrainerError:
            raise
        except Exception as err:
            raise EnvStepError.of(self.config.env, "step()", err, "its agents' observation spaces") from err
        if self._observation_fn is not None:
            obs = self._observation_fn(
                agent_obs=obs, worker=self, base_env=env, policies=self.policy_map, episode=episode
            )
        self._check_agents(obs, rewards, "step()")
        episode.length += 1
        episode.add_rewards(rewards)
        tracks = self._tracks[i]
        for agent, reward in rewards.items():
            track = tracks.get(agent)
            if track is not None:
                track.pending_reward += float(reward)
        episode._last_action.update(actions)
        for agent, info in (infos or {}).items():
            if agent != ALL:
                episode._last_info[agent] = info
        all_terminated = bool(terminateds.get(ALL, False))
        all_done = all_terminated or bool(truncateds.get(ALL, False))
        if not all_done and self.config.horizon is not None and episode.length >= self.config.horizon:
            all_done = True  # RLlib's horizon: every agent's episode is truncated here
        ended = {
            agent: bool(terminateds.get(agent, False)) or (all_done and all_terminated)
            for agent in set(terminateds) | set(truncateds)
            if agent != ALL and (terminateds.get(agent) or truncateds.get(agent))
        }
        if all_done:  # every agent still in the episode ends with it
            for agent in set(tracks) | set(self._rows[i]) | set(obs):
                ended.setdefault(agent, all_terminated)
        self._rows[i] = {}  # the agents in this step's observations act next, and only they
        return _Outcome(i, obs, ended, all_done)

    def _observe(
        self,
        observed: dict[str, list[tuple[int, Any, Any]]],
        update_filter: bool,
        record: bool,
        outcomes: list[_Outcome],
    ) -> None:
        """Flatten and filter the new observations per policy, give them to the agents' tracks,
        end the agents (and episodes) that are done."""
        ended_of = {outcome.env_index: outcome.ended for outcome in outcomes}
        flat_of = self._flat_rows_grouped(observed, update_filter) if len(observed) > 1 else {}
        for pid, items in observed.items():
            rows = flat_of.get(pid)
            if rows is None:
                rows = self._flat_rows(
                    pid, [agent_obs for _, _, agent_obs in items], [a for _, a, _ in items], update_filter
                )
            for (i, agent, _), row in zip(items, rows, strict=True):
                track = self._tracks[i].get(agent)
                if agent in ended_of[i]:
                    if track is not None:
                        track.finish(row, ended_of[i][agent])
                    continue
                if track is None and record and pid in self.policies_to_train:
                    track = self._tracks[i][agent] = AgentTrack(pid)
                if track is not None:
                    track.observe(row)
                self._rows[i][agent] = row
        for outcome in outcomes:
            i = outcome.env_index
            for agent, terminated in outcome.ended.items():
                self._rows[i].pop(agent, None)
                track = self._tracks[i].pop(agent, None)
                if track is not None:
                    if not track.done:  # no final observation came with its end
                        track.finish(None, terminated)
                    self._finished.append(track)

    def _reset(self, i: int, update_filter: bool, record: bool) -> None:
        seed = None
        if not self._seeded_envs[i] and self.config.seed is not None:
            seed = self.config.seed + 1000 * self.worker_index + i
        self._seeded_envs[i] = True
        for track in self._tracks[i].values():  # an episode cut short (force_reset): hand over its steps
            if track.num_complete() > 0:
                track.done = True
                self._finished.append(track)
        self._tracks[i], self._rows[i] = {}, {}
        try:
            obs, infos = self.envs[i].reset(seed=seed)
        except RLTrainerError:
            raise
        except Exception as err:
            raise EnvStepError.of(self.config.env, "reset()", err, "its agents' observation spaces") from err
        episode = self._episode[i] = MultiAgentEpisode(
            int(self._rng.integers(2**62)), i, self._mapping_fn_with_worker, self
        )
        if self._observation_fn is not None:
            obs = self._observation_fn(
                agent_obs=obs, worker=self, base_env=self.envs[i], policies=self.policy_map, episode=episode
            )
        self._check_agents(obs, {}, "reset()")
        for agent, info in (infos or {}).items():
            episode._last_info[agent] = info
        observed: dict[str, list[tuple[int, Any, Any]]] = {}
        for agent, agent_obs in obs.items():
            episode._last_obs[agent] = agent_obs
            observed.setdefault(episode.policy_for(agent), []).append((i, agent, agent_obs))
        self._observe(observed, update_filter, record, [_Outcome(i, obs, {}, False)])
        if self._calls["on_episode_start"]:
            self._hook("on_episode_start", i)

    def _close_episode(self, i: int) -> None:
        episode = self._episode[i]
        if self._calls["on_episode_end"]:
            self._hook("on_episode_end", i)
        policy_returns = tuple((pid, ret) for (_, pid), ret in episode.agent_rewards.items())
        stats = EpisodeStats(
            episode.total_reward,
            episode.length,
            episode.custom_metrics or None,
            episode.hist_data or None,
            policy_returns,
        )
        self._ended.append((i, stats))
        self._episode[i] = None
        self._rows[i] = {}

    def _hook(self, hook: str, i: int) -> None:
        call_hook(
            self.callbacks,
            hook,
            self._where,
            worker=self,
            env_runner=self,
            base_env=self.envs[i],
            env=self.envs[i],
            policies=self.policy_map,
            episode=self._episode[i],
            env_index=i,
        )

    def _compute(self, pid: str, rows: np.ndarray, explore: bool) -> dict[str, np.ndarray]:
        policy = self.policy_map[pid]
        if not policy.custom_compute:
            return policy.compute(rows, explore)
        actions, _, _ = policy.compute_actions(rows, explore=explore)  # e.g. a heuristic opponent
        actions = np.asarray(actions)
        return {"actions": actions, "env_actions": actions, "action_logp": np.zeros(len(rows), np.float32)}

    def _flat_rows(self, pid: str, raw: list[Any], agents: list[Any], update_filter: bool) -> np.ndarray:
        """Observations of agents acting with ``pid``: flattened, checked, filtered rows."""
        policy = self.policy_map[pid]
        preprocessor = policy.preprocessor
        try:
            if not isinstance(preprocessor.space, spaces.Dict | spaces.Tuple):
                flat = preprocessor.transform(np.stack(raw))
            else:
                flat = np.concatenate([preprocessor.transform_one(o) for o in raw])
            if flat.shape != (len(raw), preprocessor.size):
                raise ValueError(f"flattened to shape {flat.shape[1:]}")
        except (ValueError, TypeError, KeyError, IndexError, EnvError):
            for agent, obs in zip(agents, raw, strict=True):  # name the agent whose observation is wrong
                try:
                    preprocessor.transform_one(obs)
                except EnvError as err:
                    raise EnvError(
                        f"env {self.config.env!r}: agent {agent!r} (policy {pid!r}): {err}"
                    ) from None
            raise
        return self.filter.filters[pid](flat, update=update_filter)

    def _flat_rows_grouped(
        self, observed: dict[str, list[tuple[int, Any, Any]]], update_filter: bool
    ) -> dict[str, np.ndarray]:
        """``_flat_rows`` for the policies whose observations flatten alike, one ``transform``
        per group (``observation_groups``); each policy's filter then gets its own rows.
        Anything unexpected leaves the policy to ``_flat_rows``, which names the bad agent."""
        self._policy_stacks()  # (rebuilds the groups too when the policies changed)
        groups: dict[int, list[str]] = {}
        for pid in observed:
            group = self._obs_groups.get(pid)
            if group is not None:
                groups.setdefault(group, []).append(pid)
        flat_of: dict[str, np.ndarray] = {}
        for pids in groups.values():
            if len(pids) < 2:
                continue
            preprocessor = self.policy_map[pids[0]].preprocessor
            raw = [agent_obs for pid in pids for _, _, agent_obs in observed[pid]]
            try:
                flat = preprocessor.transform(np.array(raw))  # ragged: ValueError, as np.stack
            except (ValueError, TypeError, KeyError, IndexError, EnvError):
                continue
            if flat.shape != (len(raw), preprocessor.size):
                continue
            start = 0
            for pid in pids:
                end = start + len(observed[pid])
                flat_of[pid] = self.filter.filters[pid](flat[start:end], update=update_filter)
                start = end
        return flat_of

    def _check_agents(self, obs: Any, rewards: Any, call: str) -> None:
        """Dicts, naming only agents the env declares (``possible_agents``, when it has them)."""
        if not isinstance(obs, dict) or not isinstance(rewards, dict):
            raise EnvError(
                f"env {self.config.env!r}: {call} of a multi-agent env returns dicts keyed by agent id; "
                f"got {type(obs).__name__} observations"
            )
        if self._known_agents and not (
            obs.keys() <= self._known_agents and rewards.keys() <= self._known_agents
        ):
            unknown = sorted(map(repr, (set(obs) | set(rewards)) - self._known_agents))
            raise EnvError(
                f"env {self.config.env!r}: {call} names agent {unknown[0]}, which is not one of its "
                f"possible_agents {sorted(self._known_agents, key=str)}"
            )

    def _take_rollouts(self) -> dict[str, Rollout]:
        """Every trained policy's complete transitions as one ``Rollout`` (see the module docstring)."""
        pieces: dict[str, list[Piece]] = {}
        tracks = self._finished + [track for env_tracks in self._tracks for track in env_tracks.values()]
        for track in tracks:
            columns = track.take_piece()
            if columns is not None:
                pieces.setdefault(track.policy_id, []).append(Piece(columns, 0, len(columns["rewards"])))
        self._finished = []
        return {pid: rollout_from_pieces(policy_pieces) for pid, policy_pieces in pieces.items()}

    # --- weights, filters, helpers --------------------------------------------------------
    def get_weights(self, policies: list[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
        """``{policy id: weights}`` (all policies, or those named)."""
        return {
            pid: p.get_weights() for pid, p in self.policy_map.items() if policies is None or pid in policies
        }

    def set_weights(self, weights: dict[str, dict[str, Any]]) -> None:
        """Load ``{policy id: weights}`` (the policies given; unknown ids are ignored: a policy
        removed meanwhile)."""
        for pid, policy_weights in weights.items():
            policy = self.policy_map.get(pid)
            if policy is not None:
                policy.set_weights(policy_weights)

    def weights_written_in_place(self) -> None:
        """The policies' parameters were written without bumping their version counters (a
        learner's optimizer stepping the flat buffer of a module these policies share): the
        stacked copies are taken again before the next inference."""
        for stack in self._stack_list:
            stack.invalidate()

    def set_global_timestep(self, timestep: int) -> None:
        self.global_timestep = int(timestep)
        super().set_global_timestep(timestep)

    def _sub_envs(self) -> list[Any]:
        return self.envs

    def task_settable_envs(self) -> list[Any]:
        raise ConfigError(
            "env_task_fn sets tasks on single-agent TaskSettableEnvs; a multi-agent env has none"
        )

    def _close_envs(self) -> None:
        for env in self.envs:
            env.close()


class _Outcome(NamedTuple):
    """What one env's step did: its observations, the agents that ended (-> terminated?)."""

    env_index: int
    obs: dict[Any, Any]
    ended: dict[Any, bool]
    all_done: bool


__all__ = ["MultiAgentBatch", "MultiAgentEnvRunner", "PolicyFilters", "env_is_multi_agent"]
