"""What ``Algorithm`` offers for acting and for the policies themselves: ``get_policy``,
``get_weights``/``set_weights``, ``add_policy``/``remove_policy`` (multi-agent),
``compute_single_action``/``compute_actions`` and ``export_policy_model`` (RLlib's names).

A mixin of ``Algorithm``: it uses the algorithm's env runners (``env_runner_group``), whose
driver-side runner holds the policies users reach, and its config.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rltrainer.algorithms import driver_weights
from rltrainer.env.episode import index_obs
from rltrainer.errors import ConfigError
from rltrainer.policy.policy import Policy, pack_state


class PolicyAccess:
    """``Algorithm``'s policy and inference methods (see the module docstring)."""

    def get_weights(self, policies: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """``{policy id: {parameter name: array}}`` of the policies (all, or those named), as
        RLlib's ``Algorithm.get_weights``."""
        return driver_weights.get_weights(self, policies)

    def set_weights(self, weights: dict[str, dict[str, Any]]) -> None:
        """Load ``{policy id: {parameter name: array}}`` (``get_weights()``'s form) into the
        policies, the learners and every env runner: the next ``train()`` continues from them."""
        driver_weights.set_weights(self, weights)

    def get_policy(self, policy_id: str = "default_policy") -> Policy:
        """The policy the env runners act with (weights as of the last update); in a
        multi-agent algorithm the one named ``policy_id``. ``KeyError`` naming the policies for
        an id the algorithm does not have (a single-agent one has ``default_policy``)."""
        return self.env_runner_group.local_worker().get_policy(policy_id)

    def get_module(self, module_id: str = "default_policy") -> Any:
        """RLlib's new-stack ``Algorithm.get_module``: the driver's policy ``module_id`` as an
        ``RLModule`` (``rltrainer.core.rl_module.rl_module``), to act with
        ``forward_inference({"obs": ...})``. ``KeyError`` naming the modules for an unknown id."""
        from rltrainer.core.rl_module.rl_module import RLModule

        return RLModule(self.get_policy(module_id), module_id)

    def add_policy(
        self,
        policy_id: str,
        policy_cls: Any = None,
        policy: Policy | None = None,
        *,
        observation_space: Any = None,
        action_space: Any = None,
        config: dict[str, Any] | None = None,
        policy_spec: Any = None,
        policy_mapping_fn: Any = None,
        policies_to_train: Any = None,
        policy_state: dict[str, Any] | None = None,
        **kwargs: Any,  # noqa: ARG002 - RLlib's other arguments (evaluation_workers, ...): always all runners
    ) -> Policy:
        """Add a policy to a multi-agent algorithm at run time (RLlib's ``Algorithm.add_policy``):
        every env runner (training and evaluation) gets it, with ``policy``'s weights (e.g. a
        snapshot: ``add_policy("main_v1", policy=algo.get_policy("main"))``) or
        ``policy_state={"weights": ...}``, else freshly initialized ones. It learns only when
        ``policies_to_train`` names it. ``policy_mapping_fn`` replaces the mapping, from each
        env's next episode. Returns the driver's copy of the policy."""
        from rltrainer.algorithms.multi_agent import add_policy
        from rltrainer.policy_spec import PolicySpec

        self._require_multi_agent("add_policy")
        if policy_spec is None:
            source = policy
            policy_spec = PolicySpec(
                policy_cls,
                observation_space or (source.observation_space if source is not None else None),
                action_space or (source.action_space if source is not None else None),
                dict(config or {}),
            )
        weights = None
        if policy is not None:
            weights = policy.get_weights()
        elif policy_state is not None:
            weights = policy_state.get("weights", policy_state)
        to_train = None if policies_to_train is None else list(policies_to_train)
        trainable = to_train is not None and policy_id in to_train
        added = add_policy(self, policy_id, policy_spec, weights, trainable, policy_mapping_fn, to_train)
        self._driver_weights.mark_synced()
        return added

    def remove_policy(
        self,
        policy_id: str = "default_policy",
        *,
        policy_mapping_fn: Any = None,
        policies_to_train: Any = None,
        **kwargs: Any,  # noqa: ARG002 - RLlib's other arguments: always all runners
    ) -> None:
        """Remove a policy from every env runner and stop training it (RLlib's ``remove_policy``)."""
        from rltrainer.algorithms.multi_agent import remove_policy

        self._require_multi_agent("remove_policy")
        remove_policy(
            self, policy_id, policy_mapping_fn, None if policies_to_train is None else list(policies_to_train)
        )

    def _require_multi_agent(self, what: str) -> None:
        if not self._multi_agent:
            raise ConfigError(
                f"{what}: this algorithm trains one policy on a single-agent env; policies are added to "
                "multi-agent configs (.multi_agent(policies=..., policy_mapping_fn=...) with a MultiAgentEnv)"
            )

    def compute_single_action(
        self,
        observation: Any,
        state: list[Any] | None = None,
        prev_action: Any = None,
        prev_reward: float | None = None,
        info: dict | None = None,  # noqa: ARG002
        policy_id: str = "default_policy",
        full_fetch: bool = False,
        explore: bool | None = None,
    ) -> Any:
        """The action for one raw env observation (same preprocessing and filter as training).

        With ``full_fetch``, a ``state``, or an LSTM policy (RLlib's RNN form) returns
        ``(action, state_out, extra)``: ``state_out`` is ``[h, c]`` for an LSTM policy (pass it
        back as ``state``; ``get_policy().get_initial_state()`` starts an episode) and ``[]``
        otherwise; ``extra`` holds ``action_logp``, ``action_dist_inputs`` and ``vf_preds``, as
        RLlib does. ``prev_action`` (an env action) and ``prev_reward`` feed an LSTM that uses them.
        """
        actions, state_out, extra = self._compute(
            [observation],
            None if state is None else [[part] for part in state],
            None if prev_action is None else [prev_action],
            None if prev_reward is None else [prev_reward],
            explore,
            policy_id,
        )
        action = index_obs(actions, 0)  # a Dict/Tuple action's parts, too
        if not full_fetch and state is None and not state_out:
            return action
        return action, [part[0] for part in state_out], {key: value[0] for key, value in extra.items()}

    compute_action = compute_single_action  # the Trainer-era name

    def compute_actions(
        self,
        observations: Any,
        state: list[Any] | None = None,
        prev_action: Any = None,
        prev_reward: Any = None,
        explore: bool | None = None,
        full_fetch: bool = False,
        policy_id: str = "default_policy",
        **kwargs: Any,  # noqa: ARG002 - RLlib's info, episodes, unsquash_actions, ...
    ) -> Any:
        """Actions for a list (or dict by key, e.g. ``{agent_id: obs}``) of raw observations,
        all computed by policy ``policy_id``. For an LSTM policy, ``state``
        is ``[h_batch, c_batch]`` (``None``: initial states) and the result is ``(actions,
        state_out, extra)``, as with ``full_fetch``."""
        if not isinstance(state, (list, tuple, type(None))):  # the older form compute_actions(obs, explore)
            state, explore = None, state
        keys = list(observations) if isinstance(observations, dict) else None
        items = [observations[k] for k in keys] if keys is not None else list(observations)
        actions, state_out, extra = self._compute(items, state, prev_action, prev_reward, explore, policy_id)
        if isinstance(actions, dict | tuple):  # a Dict/Tuple action per observation
            actions = [index_obs(actions, i) for i in range(len(items))]
        if keys is not None:
            actions = dict(zip(keys, actions, strict=True))
        if not full_fetch and state is None and not state_out:
            return actions
        return actions, state_out, extra

    def _compute(
        self,
        items: list[Any],
        state: Any,
        prev_actions: Any,
        prev_rewards: Any,
        explore: bool | None,
        policy_id: str = "default_policy",
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        """Env actions, state outs and extra fetches for raw observations."""
        runner = self.env_runner_group.local_worker()
        policy = self.get_policy(policy_id)
        observation_filter = runner.filter.filters[policy_id] if self._multi_agent else runner.filter
        flat = observation_filter(
            np.concatenate([policy.preprocessor.transform_one(o) for o in items]), update=False
        )
        explore = self.config.explore if explore is None else explore
        if getattr(policy, "custom_compute", False):  # a policy class with its own compute_actions
            actions, _, extra = policy.compute_actions(flat, explore=explore)
            return np.asarray(actions), [], extra
        if not policy.recurrent:
            out = policy.compute(flat, explore)
            return out["env_actions"], [], policy.extra_fetches(flat, out)
        try:
            packed = pack_state(state, len(items))
            if prev_actions is not None:
                prev_actions = policy.from_env_actions(list(prev_actions))
            if prev_rewards is not None:
                prev_rewards = np.asarray(prev_rewards, dtype=np.float32).reshape(len(items))
            out = policy.compute(flat, explore, packed, prev_actions, prev_rewards)
        except ValueError as err:
            raise ConfigError(f"compute_single_action/compute_actions: {err}") from None
        state_out = out["state_out"]
        return out["env_actions"], list(state_out.transpose(1, 0, 2)), policy.extra_fetches(flat, out)

    def export_policy_model(
        self,
        export_dir: str,
        policy_id: str = "default_policy",
        onnx: int | None = None,
    ) -> str:
        """RLlib's ``Algorithm.export_policy_model``: ``get_policy(policy_id).export_model(export_dir,
        onnx)`` (the observation filter included); returns the model file's path."""
        return self.get_policy(policy_id).export_model(export_dir, onnx=onnx)
