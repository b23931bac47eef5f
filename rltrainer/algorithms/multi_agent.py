"""What ``Algorithm`` does differently for multi-agent configs: per-policy learners, results,
checkpoint files and run-time policy changes (``add_policy``/``remove_policy``).

Kept out of ``algorithm.py`` so the single-agent code reads as before; each function takes the
algorithm and is called from one branch there.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import torch

from rltrainer.core.learner import make_learner
from rltrainer.core.learner_group import LearnerGroup
from rltrainer.core.multi_agent_learner_group import MultiAgentLearnerGroup
from rltrainer.env.spaces import space_to_json
from rltrainer.errors import CheckpointError, ConfigError
from rltrainer.models.catalog import ModelCatalog
from rltrainer.policy.policy import filter_file, load_policy, optimizer_file, policy_class_of, policy_file
from rltrainer.policy_spec import DEFAULT_POLICY_ID, PolicySpec, parse_policies, trainable_policies


def learner_config(config: Any, policy_id: str, num_policies: int) -> Any:
    """Policy ``policy_id``'s config, its learner actors asking for an even share of each
    learner bundle (the trainable policies' actors share the bundles)."""
    policy_config = config.policy_config(policy_id)
    if config.num_learners and num_policies > 1:
        policy_config = policy_config.copy()
        policy_config.num_cpus_per_learner = config.num_cpus_per_learner / num_policies
        policy_config.num_gpus_per_learner = config.num_gpus_per_learner / num_policies
        policy_config.custom_resources_per_learner = {
            name: amount / num_policies for name, amount in config.custom_resources_per_learner.items()
        }
    return policy_config


def build_learners(algo: Any, device: str) -> MultiAgentLearnerGroup:
    """A ``LearnerGroup`` per trainable policy, each building its module from the policy's spec."""
    local = algo.env_runner_group.local_worker()
    specs = local.policy_specs

    def make_group(pid: str, num_policies: int) -> LearnerGroup:
        spec = specs[pid]
        config = learner_config(algo.config, pid, num_policies)
        factory = partial(
            make_learner,
            type(algo).learner_class,
            spec.observation_space,
            spec.action_space,
            config,
            custom_models=ModelCatalog.registered(),
            policy_class=policy_class_of(spec, algo.config.get_policy_class()),
        )
        return LearnerGroup(factory, config, algo._placement, device)

    return MultiAgentLearnerGroup(make_group, trainable_policies(algo.config, list(specs)))


def policy_metrics(episodes: Any) -> dict[str, Any]:
    """RLlib's per-policy returns: ``policy_reward_mean|min|max`` ``{policy id: value}`` over
    each (episode, agent) pair, and ``hist_stats/policy_<id>_reward``."""
    returns: dict[str, list[float]] = {}
    for episode in episodes:
        for pid, value in episode.policy_returns or ():
            returns.setdefault(pid, []).append(value)
    return {
        "policy_reward_mean": {pid: float(np.mean(v)) for pid, v in returns.items()},
        "policy_reward_min": {pid: float(np.min(v)) for pid, v in returns.items()},
        "policy_reward_max": {pid: float(np.max(v)) for pid, v in returns.items()},
        "policy_hist_stats": {f"policy_{pid}_reward": list(v) for pid, v in returns.items()},
    }


# --- checkpoints ------------------------------------------------------------------------------
def checkpoint_parts(algo: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(metadata, tensors, arrays)`` of a multi-agent checkpoint: every policy's weights in
    ``policy_<id>.safetensors`` (the trainable ones' optimizer state beside them), the
    specs and learner extras as JSON, one filter file per policy."""
    local = algo.env_runner_group.local_worker()
    states = algo.learner_group.get_state()
    tensors: dict[str, Any] = {}
    for pid, policy in local.policy_map.items():
        state = states.get(pid)
        if state is None:  # a frozen policy: the runner's weights (numpy), as tensors
            tensors[policy_file(pid)] = {k: torch.from_numpy(v) for k, v in policy.get_weights().items()}
        else:
            tensors[policy_file(pid)] = state["weights"]
        if state is not None:
            tensors[optimizer_file(pid)] = state["optimizer"]
    metadata = {
        "policies": {pid: spec.to_json() for pid, spec in local.policy_specs.items()},
        "policies_to_train": list(algo.learner_group.policy_ids),
        "learner": {pid: state["extra"] for pid, state in states.items()},
    }
    arrays = {filter_file(pid): f.get_state() for pid, f in local.filter.filters.items()}
    return metadata, tensors, arrays


def select_policies(
    config: Any,
    checkpoint: Any,
    policy_ids: Any = None,
    policy_mapping_fn: Any = None,
    policies_to_train: Any = None,
) -> list[str] | None:
    """RLlib's ``from_checkpoint(policy_ids=..., policy_mapping_fn=..., policies_to_train=...)``:
    ``config`` (the checkpoint's) set to build only the kept policies, mapped and trained as
    asked; returns the kept policy ids (``None``: all of them, nothing was asked)."""
    if policy_ids is None and policy_mapping_fn is None and policies_to_train is None:
        return None
    meta = checkpoint.metadata
    if "policies" not in meta:
        if policy_ids is not None and list(policy_ids) != [DEFAULT_POLICY_ID]:
            raise CheckpointError(
                f"checkpoint {checkpoint.source!r} is single-agent: its one policy is {DEFAULT_POLICY_ID!r}, "
                f"not {list(policy_ids)}"
            )
        if policy_mapping_fn is not None or policies_to_train is not None:
            raise CheckpointError(
                f"checkpoint {checkpoint.source!r} is single-agent: policy_mapping_fn and policies_to_train "
                "are for multi-agent checkpoints"
            )
        return None
    saved = parse_policies(meta["policies"])
    kept = list(saved) if policy_ids is None else list(policy_ids)
    missing = [pid for pid in kept if pid not in saved]
    if missing:
        raise CheckpointError(
            f"checkpoint {checkpoint.source!r} holds no policy {missing[0]!r}; policies: {', '.join(saved)}"
        )
    settings: dict[str, Any] = {"policies": {pid: saved[pid] for pid in kept}}
    if policy_mapping_fn is not None:
        settings["policy_mapping_fn"] = policy_mapping_fn
    if policies_to_train is None:
        policies_to_train = [pid for pid in meta.get("policies_to_train", kept) if pid in kept]
    settings["policies_to_train"] = policies_to_train
    try:
        config.multi_agent(**settings)
    except ConfigError as err:
        raise CheckpointError(f"from_checkpoint({checkpoint.source!r}): {err}") from None
    return kept


def restore(algo: Any, checkpoint: Any, policy_ids: list[str] | None = None) -> None:
    """Load a multi-agent checkpoint's policies (``policy_ids``: only these): add the ones this
    algorithm lacks (policies added at run time), check the others' spaces, then load weights,
    optimizers and filters."""
    meta = checkpoint.metadata
    if "policies" not in meta:
        raise CheckpointError(
            f"checkpoint {checkpoint.source!r} holds one single-agent policy; this algorithm is multi-agent"
        )
    saved = parse_policies(meta["policies"])
    if policy_ids is not None:
        saved = {pid: spec for pid, spec in saved.items() if pid in policy_ids}
    local = algo.env_runner_group.local_worker()
    for pid, spec in saved.items():
        current = local.policy_specs.get(pid)
        if current is None:
            continue
        for kind in ("observation_space", "action_space"):
            if space_to_json(getattr(current, kind)) != space_to_json(getattr(spec, kind)):
                raise CheckpointError(
                    f"checkpoint {checkpoint.source!r}: policy {pid!r} was trained with {kind} "
                    f"{getattr(spec, kind)}, but here it has {getattr(current, kind)}"
                )
    trained = meta.get("policies_to_train", [])
    for pid, spec in saved.items():
        if pid not in local.policy_specs:
            add_policy(algo, pid, spec, trainable=pid in trained)
    states = {}
    for pid in algo.learner_group.policy_ids:
        if optimizer_file(pid) in meta["files"]:
            states[pid] = {
                "weights": checkpoint.tensors(policy_file(pid)),
                "optimizer": checkpoint.tensors(optimizer_file(pid)),
                "extra": meta["learner"].get(pid, {}),
            }
    algo.learner_group.set_state(states)
    weights = {pid: checkpoint.tensors(policy_file(pid)) for pid in saved if pid in local.policy_map}
    algo.env_runner_group.sync_weights(weights)
    filters = {}
    for pid in saved:
        for name, value in checkpoint.arrays(filter_file(pid)).items():
            filters[f"{pid}/{name}"] = value
    algo.env_runner_group.set_filter_state(filters)


# --- policies at run time -------------------------------------------------------------------
def add_policy(
    algo: Any,
    policy_id: str,
    spec: PolicySpec,
    weights: dict[str, Any] | None = None,
    trainable: bool = False,
    policy_mapping_fn: Any = None,
    policies_to_train: list[str] | None = None,
) -> Any:
    """Add ``policy_id`` to every env runner (training and evaluation) and, when ``trainable``,
    a learner for it; the new weights (``weights``, else the driver's fresh ones) reach them all."""
    local = algo.env_runner_group.local_worker()
    if policy_id in local.policy_map:
        raise ConfigError(f"add_policy: a policy {policy_id!r} exists already; remove_policy() it first")
    if trainable and algo.config.num_learners:
        raise ConfigError(
            "add_policy: a trainable policy cannot be added while learner actors run (num_learners > 0): "
            "their bundles are shared out at build(); add it as a frozen policy, or declare it in "
            "multi_agent()"
        )
    to_train = list(policies_to_train) if policies_to_train is not None else None
    if to_train is None:
        to_train = [*local.policies_to_train, policy_id] if trainable else list(local.policies_to_train)
    local.add_policy(policy_id, spec, weights, policy_mapping_fn, to_train)
    spec = local.policy_specs[policy_id]  # spaces filled in
    policy_weights = local.policy_map[policy_id].get_weights()

    def add(runner: Any) -> None:
        if policy_id not in runner.policy_map:
            runner.add_policy(policy_id, spec, policy_weights, policy_mapping_fn, to_train)

    algo.env_runner_group.foreach_worker(add, local_worker=False)
    algo._evaluation.foreach_runner(add)
    if policy_id in to_train:
        algo.learner_group.add_policy(policy_id, policy_weights)
    _record_in_config(algo.config, local)
    return local.policy_map[policy_id]


def _record_in_config(config: Any, local: Any) -> None:
    """The config says what runs now (checkpoints save it; evaluation runners made later read it)."""
    config.policies = {
        pid: PolicySpec(s.policy_class, s.observation_space, s.action_space, dict(s.config))
        for pid, s in local.policy_specs.items()
    }
    config.policies_to_train = list(local.policies_to_train)
    if local.policy_mapping_fn_setting is not None:
        config.policy_mapping_fn = local.policy_mapping_fn_setting


def remove_policy(
    algo: Any, policy_id: str, policy_mapping_fn: Any = None, policies_to_train: Any = None
) -> None:
    local = algo.env_runner_group.local_worker()
    if policy_id not in local.policy_map:
        raise KeyError(f"remove_policy: no policy {policy_id!r}; policies: {', '.join(local.policy_map)}")

    def remove(runner: Any) -> None:
        runner.remove_policy(policy_id, policy_mapping_fn, policies_to_train)

    algo.env_runner_group.foreach_worker(remove)
    algo._evaluation.foreach_runner(remove)
    algo.learner_group.remove_policy(policy_id)
    _record_in_config(algo.config, local)


__all__ = [
    "add_policy",
    "build_learners",
    "checkpoint_parts",
    "load_policy",
    "policy_metrics",
    "remove_policy",
    "restore",
]
