"""Off-policy estimation: what the current (target) policy would return, estimated from episodes
another (behaviour) policy recorded, without running it in an env (RLlib's
``off_policy_estimation_methods``).

``.evaluation(off_policy_estimation_methods={"is": {"type": "is"}, "dr": {"type": "dr"}})``: at
every evaluation, each estimator reads ``evaluation_duration`` recorded episodes (the next ones
in its own pass over the files) and reports, under ``evaluation/off_policy_estimator/<name>/``,
``v_behavior`` (the mean discounted return of the recorded episodes), ``v_target`` (the estimate
for the current policy), their ``_std`` over the episodes, ``v_delta`` (target - behaviour) and
``v_gain`` (target / behaviour).

Per episode of rewards r_t, behaviour probabilities mu_t (``exp(action_logp)``, which the files
must hold) and target probabilities pi_t of the recorded actions:

- ``is``, ``ImportanceSampling`` (per-decision): sum_t gamma^t p_t r_t, p_t = prod_{k<=t} pi_k/mu_k.
- ``wis``, ``WeightedImportanceSampling``: the same with p_t divided by its mean over the
  episodes that reach step t (biased, far less variance).
- ``dm``, ``DirectMethod``: sum_a pi(a|s_0) Q(s_0, a), Q fitted to the target policy by Fitted Q
  Evaluation (FQE) on the recorded transitions (Discrete actions).
- ``dr``, ``DoublyRobust`` (Jiang & Li 2016): backwards, v = V(s_t) + (pi_t/mu_t) (r_t + gamma v -
  Q(s_t, a_t)), V(s) = sum_a pi(a|s) Q(s, a), with the same FQE.

FQE (``q_model_config``, RLlib's names): ``n_iters`` passes over each evaluation's transitions
(1), ``lr`` (1e-3), ``minibatch_size`` (``None``: all), ``tau`` (target network update, 1.0),
``fcnet_hiddens`` ([32, 32]); the Q network persists across evaluations, so it keeps learning.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from rltrainer.core.optim import Adam, FlatParameters
from rltrainer.errors import ConfigError, InputError

ESTIMATORS = {
    "is": "ImportanceSampling",
    "wis": "WeightedImportanceSampling",
    "dm": "DirectMethod",
    "dr": "DoublyRobust",
}
FQE_DEFAULTS: dict[str, Any] = {
    "n_iters": 1,
    "lr": 1e-3,
    "minibatch_size": None,
    "tau": 1.0,
    "fcnet_hiddens": [32, 32],
}


class ImportanceSampling:
    """``{"type": ImportanceSampling}``: RLlib's class names name the estimators (the estimation
    itself is ``OffPolicyEstimation``'s)."""


class WeightedImportanceSampling(ImportanceSampling):
    """Names the ``wis`` estimator."""


class DirectMethod(ImportanceSampling):
    """Names the ``dm`` estimator (FQE)."""


class DoublyRobust(ImportanceSampling):
    """Names the ``dr`` estimator (FQE)."""


def estimator_kind(spec: Any) -> str:
    """``"is"``, ``"wis"``, ``"dm"`` or ``"dr"`` for an estimator spec's ``type`` (a short name,
    RLlib's class name or import path, or our class); ``ValueError`` otherwise."""
    kind = spec.get("type") if isinstance(spec, dict) else None
    if isinstance(kind, type):
        kind = kind.__name__
    if isinstance(kind, str):
        name = kind.rsplit(".", 1)[-1].rsplit(":", 1)[-1]
        for short, class_name in ESTIMATORS.items():
            if name in (short, class_name):
                return short
    allowed = ", ".join(f"{k!r} ({v})" for k, v in ESTIMATORS.items())
    raise ValueError(f"each estimator needs a 'type': one of {allowed}; got {spec!r}")


def check_estimators(methods: dict[str, Any]) -> dict[str, Any]:
    """Check ``off_policy_estimation_methods``; raises ``ValueError`` saying what is wrong.
    Returns them with classes given as ``type`` named by their (RLlib) class name (JSON-able)."""
    methods = {name: dict(spec) if isinstance(spec, dict) else spec for name, spec in methods.items()}
    for name, spec in methods.items():
        kind = estimator_kind(spec)
        if isinstance(spec["type"], type):
            spec["type"] = ESTIMATORS[kind]
        unknown = sorted(set(spec) - {"type", "q_model_config"})
        if unknown:
            raise ValueError(f"estimator {name!r}: unknown key(s) {unknown}; allowed: type, q_model_config")
        q_config = spec.get("q_model_config", {})
        if q_config and kind in ("is", "wis"):
            raise ValueError(f"estimator {name!r}: q_model_config is for 'dm' and 'dr' (FQE)")
        unknown = sorted(set(q_config) - set(FQE_DEFAULTS))
        if unknown:
            raise ValueError(
                f"estimator {name!r}: unknown q_model_config key(s) {unknown}; "
                f"allowed: {', '.join(FQE_DEFAULTS)}"
            )
    return methods


class Episode:
    """One recorded episode's columns (``obs``, ``actions``, ``rewards``, ``behaviour_logp``,
    ``new_obs``, ``terminateds``)."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns["rewards"])


def discounted(rewards: np.ndarray, gamma: float) -> float:
    return float(np.sum(rewards * gamma ** np.arange(len(rewards))))


class EpisodeSource:
    """Whole recorded episodes from files, in passes over them (episodes whose rows span files
    are joined; ones that never end in the data are left out)."""

    def __init__(self, files: tuple[str, ...], load: Callable[[str], dict[str, np.ndarray]]) -> None:
        self.files = list(files)
        self.load = load
        self._queue: list[Episode] = []
        self._open: dict[int, list[dict[str, np.ndarray]]] = {}
        self._next_file = 0

    def take(self, count: int) -> list[Episode]:
        episodes: list[Episode] = []
        empty_files = 0
        while len(episodes) < count:
            if not self._queue:
                if empty_files > len(self.files):
                    if not episodes:
                        raise InputError("off-policy estimation: the input files hold no complete episode")
                    break
                found = self._read(self.files[self._next_file % len(self.files)])
                self._next_file += 1
                empty_files = 0 if found else empty_files + 1
                continue
            episodes.append(self._queue.pop(0))
        return episodes

    def read_all(self) -> list[Episode]:
        """Every complete episode of one pass over the files."""
        for uri in self.files:
            self._read(uri)
            self._next_file += 1
        episodes, self._queue = self._queue, []
        return episodes

    def _read(self, uri: str) -> int:
        columns = self.load(uri)
        if self._next_file % len(self.files) == 0:
            self._open.clear()  # a new pass: pieces of the last pass's open episodes are stale
        order = (
            np.lexsort((columns["t"], columns["eps_id"]))
            if "t" in columns
            else np.argsort(columns["eps_id"], kind="stable")
        )
        columns = {name: values[order] for name, values in columns.items()}
        done = columns["terminateds"] | columns["truncateds"]
        ids = columns["eps_id"]
        bounds = np.flatnonzero(np.diff(ids)) + 1
        found = 0
        for start, stop in zip(np.r_[0, bounds], np.r_[bounds, len(ids)], strict=True):
            piece = {name: values[start:stop] for name, values in columns.items()}
            parts = self._open.setdefault(int(ids[start]), [])
            parts.append(piece)
            if done[stop - 1]:
                del self._open[int(ids[start])]
                joined = {name: np.concatenate([p[name] for p in parts]) for name in piece}
                if "t" in joined and joined["t"][0] != 0:
                    continue  # its start was in a file of an earlier pass
                self._queue.append(Episode(joined))
                found += 1
        return found


class FittedQ:
    """FQE: a Q network over the recorded transitions, for the target policy's action choices."""

    def __init__(
        self, obs_size: int, num_actions: int, options: dict[str, Any], gamma: float, seed: int | None
    ) -> None:
        import torch
        from torch import nn

        self.options = {**FQE_DEFAULTS, **options}
        self.gamma = gamma
        generator = torch.Generator().manual_seed(seed or 0)
        layers: list[nn.Module] = []
        size = obs_size
        for hidden in self.options["fcnet_hiddens"]:
            layers += [nn.Linear(size, hidden), nn.ReLU()]
            size = hidden
        layers.append(nn.Linear(size, num_actions))
        self.q = nn.Sequential(*layers)
        with torch.no_grad():
            for parameter in self.q.parameters():  # seeded, independent of the global torch RNG
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)
        self.target = copy.deepcopy(self.q)
        self.flat = FlatParameters(self.q)
        self.optimizer = Adam(self.flat, lr=self.options["lr"])

    def train(
        self, obs: Any, actions: Any, rewards: Any, new_obs: Any, terminateds: Any, next_probs: Any
    ) -> float:
        """``n_iters`` passes of minibatch regression onto r + gamma * sum_a' pi(a'|s') Q'(s', a')."""
        import torch

        size = len(rewards)
        minibatch = self.options["minibatch_size"] or size
        loss_value = float("nan")
        for _ in range(self.options["n_iters"]):
            with torch.no_grad():
                next_v = (self.target(new_obs) * next_probs).sum(-1)
                targets = rewards + self.gamma * (1.0 - terminateds) * next_v
            order = torch.randperm(size)
            for start in range(0, size, minibatch):
                rows = order[start : start + minibatch]
                q = self.q(obs[rows]).gather(1, actions[rows, None]).squeeze(1)
                loss = (q - targets[rows]).pow(2).mean()
                self.flat.zero_grad()
                loss.backward()
                self.flat.clip_grad(100.0, "global_norm")  # RLlib's FQE clips at 100
                self.optimizer.step()
                loss_value = float(loss.detach())
            tau = self.options["tau"]
            with torch.no_grad():
                for target, online in zip(self.target.parameters(), self.q.parameters(), strict=True):
                    target.mul_(1.0 - tau).add_(tau * online)
        return loss_value


class OffPolicyEstimation:
    """The configured estimators of an algorithm, run at each evaluation in the driver."""

    def __init__(self, algo: Any) -> None:
        cfg = algo.config
        self.algo = algo
        self.methods = {
            name: estimator_kind(spec) for name, spec in cfg.off_policy_estimation_methods.items()
        }
        self.specs = cfg.off_policy_estimation_methods
        eval_config = cfg.get_evaluation_config()
        files = [f for s in eval_config.get_input_sources() for f in s.files] or [
            f for s in cfg.get_input_sources() for f in s.files
        ]
        if not files:
            raise ConfigError(
                "off_policy_estimation_methods estimate from recorded episodes: set "
                "offline_data(input_=PATH) or evaluation_config={'input_': PATH}"
            )
        from rltrainer.offline.rows import RowLayout, check_columns, load_file

        runner = algo.env_runner_group.local_worker()
        policy = runner.policy
        normalize = _is_box(policy) and not cfg.actions_in_input_normalized
        layout = RowLayout(
            runner.observation_space,
            runner.action_space,
            policy.preprocessor.size,
            np.float32,
            policy.from_env_actions if normalize else None,
            runner.clip_rewards,
        )
        fmt = cfg.input_config.get("format")

        def load(uri: str) -> dict[str, np.ndarray]:
            columns = load_file(uri, fmt, cfg.storage_options)
            for needed in ("action_logp", "eps_id"):
                if needed not in columns:
                    raise InputError(
                        f"offline input {uri}: off-policy estimation needs the column {needed!r} (the "
                        "behaviour policy's log-probabilities and episode ids, as rltrainer's writer "
                        "records them)"
                    )
            return check_columns(columns, uri, layout)

        self.source = EpisodeSource(tuple(dict.fromkeys(files)), load)
        self.fqe: dict[str, FittedQ] = {}

    def run(self) -> dict[str, dict[str, float]]:
        import torch

        cfg = self.algo.config
        count = (
            cfg.evaluation_duration
            if cfg.evaluation_duration_unit == "episodes" and cfg.evaluation_duration != "auto"
            else 10
        )
        episodes = self.source.take(int(count))
        policy = self.algo.get_policy()
        gamma = cfg.gamma
        # Every episode's rows through the target policy at once: probabilities of the recorded
        # actions, and of every action (for FQE's expectations over the target policy).
        columns = {
            name: np.concatenate([e.columns[name] for e in episodes])
            for name in ("obs", "new_obs", "rewards", "terminateds", "action_logp")
        }
        actions = np.concatenate([np.asarray(e.columns["actions"]) for e in episodes])
        lengths = [len(e) for e in episodes]
        with torch.no_grad():
            obs = torch.as_tensor(columns["obs"], dtype=torch.float32)
            new_obs = torch.as_tensor(columns["new_obs"], dtype=torch.float32)
            dist = policy.dist_class(policy.torch_dist_inputs(obs))
            target_logp = dist.log_prob(torch.as_tensor(actions)).numpy()
        ratios = np.exp(np.clip(target_logp - columns["action_logp"], -30, 30))
        splits = np.cumsum(lengths)[:-1]
        rewards = np.split(columns["rewards"], splits)
        step_ratios = np.split(ratios, splits)
        v_behavior = np.array([discounted(r, gamma) for r in rewards])
        results: dict[str, dict[str, float]] = {}
        for name, kind in self.methods.items():
            if kind in ("is", "wis"):
                cumulative = [np.cumprod(p) for p in step_ratios]
                if kind == "wis":
                    horizon = max(lengths)
                    sums, counts = np.zeros(horizon), np.zeros(horizon)
                    for c in cumulative:
                        sums[: len(c)] += c
                        counts[: len(c)] += 1
                    means = sums / np.maximum(counts, 1)
                    cumulative = [c / np.maximum(means[: len(c)], 1e-12) for c in cumulative]
                v_target = np.array(
                    [discounted(c * r, gamma) for c, r in zip(cumulative, rewards, strict=True)]
                )
            else:
                v_target = self._fqe_estimate(
                    name, kind, policy, columns, actions, obs, new_obs, step_ratios, lengths
                )
            results[name] = _summary(v_behavior, v_target)
        return results

    def _fqe_estimate(
        self,
        name: str,
        kind: str,
        policy: Any,
        columns: dict,
        actions: Any,
        obs: Any,
        new_obs: Any,
        step_ratios: list,
        lengths: list,
    ) -> np.ndarray:
        """DM's or DR's per-episode estimates, after training this estimator's FQE on the rows."""
        import torch
        from gymnasium import spaces

        if not isinstance(policy.action_space, spaces.Discrete):
            raise ConfigError(
                f"off-policy estimator {name!r} ({kind}) fits a Q function over Discrete actions; "
                f"this policy's actions are {policy.action_space}"
            )
        num_actions = int(policy.action_space.n)
        if name not in self.fqe:
            options = self.specs[name].get("q_model_config", {})
            self.fqe[name] = FittedQ(
                obs.shape[1], num_actions, options, self.algo.config.gamma, self.algo.config.seed
            )
        fqe = self.fqe[name]
        with torch.no_grad():
            probs = torch.softmax(policy.torch_dist_inputs(obs), -1)
            next_probs = torch.softmax(policy.torch_dist_inputs(new_obs), -1)
        actions_t = torch.as_tensor(actions, dtype=torch.int64)
        fqe.train(
            obs,
            actions_t,
            torch.as_tensor(columns["rewards"]),
            new_obs,
            torch.as_tensor(columns["terminateds"], dtype=torch.float32),
            next_probs,
        )
        with torch.no_grad():
            q_all = fqe.q(obs)
            v = (q_all * probs).sum(-1).numpy()
            q = q_all.gather(1, actions_t[:, None]).squeeze(1).numpy()
        splits = np.cumsum(lengths)[:-1]
        if kind == "dm":
            starts = np.r_[0, splits]
            return v[starts]
        gamma = self.algo.config.gamma
        estimates = []
        rewards = np.split(columns["rewards"], splits)
        for r, ratio, v_e, q_e in zip(
            rewards, step_ratios, np.split(v, splits), np.split(q, splits), strict=True
        ):
            value = 0.0
            for t in reversed(range(len(r))):
                value = v_e[t] + ratio[t] * (r[t] + gamma * value - q_e[t])
            estimates.append(value)
        return np.array(estimates)


def _is_box(policy: Any) -> bool:
    from gymnasium import spaces

    return isinstance(policy.action_space, spaces.Box) and policy.config.normalize_actions


def _summary(v_behavior: np.ndarray, v_target: np.ndarray) -> dict[str, float]:
    behavior, target = float(np.mean(v_behavior)), float(np.mean(v_target))
    return {
        "v_behavior": behavior,
        "v_behavior_std": float(np.std(v_behavior)),
        "v_target": target,
        "v_target_std": float(np.std(v_target)),
        "v_delta": target - behavior,
        "v_gain": target / behavior if behavior != 0 else math.nan,
    }


__all__ = [
    "DirectMethod",
    "DoublyRobust",
    "ImportanceSampling",
    "WeightedImportanceSampling",
    "ESTIMATORS",
    "FQE_DEFAULTS",
    "EpisodeSource",
    "FittedQ",
    "OffPolicyEstimation",
    "check_estimators",
    "estimator_kind",
]
