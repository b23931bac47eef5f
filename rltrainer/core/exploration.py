"""The exploration API: how a policy turns an action distribution into actions (RLlib's).

``.exploration(explore=..., exploration_config={"type": ..., **ctor_args})`` picks one of the
built-ins below by name, a class, or ``"package.module:Class"``. An exploration object
implements ``get_exploration_action(action_distribution, timestep, explore=True) -> (actions,
logp)``; ``explore=False`` gives the greedy action (the distribution's mode, no noise).
Everything runs in numpy over the whole ``[B]`` batch (the env runners' hot path).

Defaults and schedules follow RLlib's ``rllib/utils/exploration/``. The strategies that act on the
distribution alone live in ``exploration_strategies`` (re-exported here); this module holds the
ones with models of their own (``ParameterNoise``, ``Curiosity``) and the choice of a strategy.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import numpy as np
from gymnasium import spaces

from rltrainer.core.exploration_strategies import (
    EpsilonGreedy,
    Exploration,
    GaussianNoise,
    OrnsteinUhlenbeckNoise,
    PerWorkerEpsilonGreedy,
    PerWorkerGaussianNoise,
    PerWorkerOrnsteinUhlenbeckNoise,
    Random,
    SoftQ,
    StochasticSampling,
    linear_schedule,
    per_worker_constant,
    uniform_actions,
)


class ParameterNoise(Exploration):
    """Parameter space noise (Plappert et al. 2018; RLlib's ``ParameterNoise``).

    While exploring, the policy acts with a copy of its network whose weights carry Gaussian
    noise ``N(0, stddev)``, drawn anew each time an episode of the env runner ends (one draw for
    all its envs); ``explore=False`` acts with the network itself, and the noise never reaches
    the weights that learn. After each episode the stddev adapts (x1.01 or /1.01) so that the
    perturbed policy stays about as far from the unperturbed one as ``sub_exploration``'s own
    noise would take it: for discrete actions the mean KL divergence of the two action
    distributions (softmax of the outputs) against ``-log(1 - eps + eps / n)``, ``eps`` the
    sub-exploration's epsilon; for continuous actions the RMS distance of the two actions against
    the sub-exploration's noise scale. ``sub_exploration`` then turns the perturbed outputs into
    actions; by default (RLlib's) epsilon-greedy with epsilon 1.0 for ``random_timesteps``, then
    0.01 (Discrete), or Ornstein-Uhlenbeck noise after ``random_timesteps`` random ones (Box).
    Feed-forward networks on the CPU (DQN, DDPG/TD3, PPO).
    """

    perturbs_parameters = True

    def __init__(
        self,
        action_space: spaces.Space,
        *,
        initial_stddev: float = 1.0,
        random_timesteps: int = 10_000,
        sub_exploration: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(action_space, **kwargs)
        if initial_stddev <= 0:
            raise ValueError(f"initial_stddev must be > 0, got {initial_stddev}")
        self.stddev = float(initial_stddev)
        self.random_timesteps = int(random_timesteps)
        if sub_exploration is None:
            if isinstance(action_space, spaces.Discrete):
                sub_exploration = {
                    "type": "EpsilonGreedy",
                    "initial_epsilon": 1.0,
                    "final_epsilon": 0.01,
                    "warmup_timesteps": self.random_timesteps,
                    "epsilon_timesteps": 1,
                }
            elif isinstance(action_space, spaces.Box):
                sub_exploration = {
                    "type": "OrnsteinUhlenbeckNoise",
                    "random_timesteps": self.random_timesteps,
                }
            else:
                raise ValueError(f"ParameterNoise needs a Discrete or Box action space, got {action_space}")
        self.sub_exploration = make_exploration(sub_exploration, action_space, self.rng)
        self._policy: Any = None
        self._noisy: Any = None  # the perturbed network's numpy inference (None: draw at next use)
        self._distances: list[float] = []
        self._timestep = 0

    def attach(self, policy: Any) -> None:
        if getattr(policy, "recurrent", False):
            raise ValueError("ParameterNoise perturbs feed-forward networks; remove use_lstm")
        self._policy = policy

    def forward(self, network: Any, flat_obs: np.ndarray, explore: bool, timestep: int) -> np.ndarray:
        clean = network(flat_obs)
        if not explore or self._policy is None:
            return clean
        if self._noisy is None:
            self._noisy = self._perturbed_network()
        noisy = self._noisy(flat_obs)
        self._distances.append(self._distance(clean, noisy))
        self._timestep = timestep
        return noisy

    def _perturbed_network(self) -> Any:
        """A copy of the policy's network (as it is now) with noise on every weight."""
        import copy

        import torch

        if self._policy.device.type != "cpu":
            raise ValueError("ParameterNoise acts on the CPU: set num_gpus_per_env_runner=0")
        model = copy.deepcopy(self._policy.model)
        with torch.no_grad():
            for parameter in model.parameters():
                noise = self.rng.standard_normal(tuple(parameter.shape)).astype(np.float32)
                parameter.add_(torch.from_numpy(noise) * self.stddev)
        return model.numpy_policy()

    def _distance(self, clean: np.ndarray, noisy: np.ndarray) -> float:
        if isinstance(self.action_space, spaces.Discrete):
            p, q = _softmax(clean), _softmax(noisy)
            return float(np.mean(np.sum(p * np.log((p + 1e-8) / (q + 1e-8)), axis=-1)))
        return float(np.sqrt(np.mean(np.square(clean - noisy))))

    def _delta(self) -> float:
        """How far the sub-exploration's own noise takes the policy now (the adaptation's target)."""
        sub, timestep = self.sub_exploration, self._timestep
        if isinstance(self.action_space, spaces.Discrete):
            epsilon = sub.epsilon(timestep) if isinstance(sub, EpsilonGreedy) else 0.01
            return float(-np.log(1.0 - epsilon + epsilon / self.action_space.n))
        if isinstance(sub, OrnsteinUhlenbeckNoise):
            return sub.scale(timestep) * sub.ou_base_scale * sub.ou_sigma
        if isinstance(sub, GaussianNoise):
            return sub.scale(timestep) * sub.stddev
        return 0.1

    def get_exploration_action(self, action_distribution, timestep, explore=True):
        return self.sub_exploration.get_exploration_action(action_distribution, timestep, explore)

    def on_episodes_done(self, dones: np.ndarray) -> None:
        self.sub_exploration.on_episodes_done(dones)
        if not dones.any():
            return
        if self._distances:
            distance = float(np.mean(self._distances))
            self.stddev = self.stddev * 1.01 if distance <= self._delta() else self.stddev / 1.01
            self._distances = []
        self._noisy = None  # the next episode acts with a new draw (and the current weights)


class Curiosity(Exploration):
    """Intrinsic rewards from an Intrinsic Curiosity Module (Pathak et al. 2017; RLlib's ``Curiosity``).

    A feature network phi, an inverse model (phi(s), phi(s') -> a) and a forward model
    (phi(s), a -> phi(s')) learn on every fragment the env runner samples (one Adam step,
    ``lr``, on ``(1 - beta) * inverse_loss + beta * forward_loss``), and each step's reward gains
    ``eta * 0.5 * ||forward(phi(s), a) - phi(s')||^2``: transitions the forward model cannot yet
    predict pay more. Episode returns in results stay the env's (extrinsic) ones; the learner
    trains on the sum. Actions come from ``sub_exploration`` (default ``StochasticSampling``).
    As RLlib, Discrete actions and sampling in the driver (``num_env_runners=0``) only: the
    modules live in that env runner and are not part of checkpoints.
    """

    def __init__(
        self,
        action_space: spaces.Space,
        *,
        feature_dim: int = 288,
        feature_net_config: dict[str, Any] | None = None,
        inverse_net_hiddens: tuple[int, ...] | list[int] = (256,),
        inverse_net_activation: str = "relu",
        forward_net_hiddens: tuple[int, ...] | list[int] = (256,),
        forward_net_activation: str = "relu",
        beta: float = 0.2,
        eta: float = 1.0,
        lr: float = 1e-3,
        sub_exploration: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(action_space, **kwargs)
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"Curiosity needs a Discrete action space (as RLlib's), got {action_space}")
        if not 0.0 <= beta <= 1.0 or eta < 0 or lr <= 0 or feature_dim < 1:
            raise ValueError(
                f"Curiosity needs 0 <= beta <= 1, eta >= 0, lr > 0 and feature_dim >= 1; got beta={beta}, "
                f"eta={eta}, lr={lr}, feature_dim={feature_dim}"
            )
        self.feature_dim, self.beta, self.eta, self.lr = int(feature_dim), float(beta), float(eta), float(lr)
        net = {"fcnet_hiddens": [256], "fcnet_activation": "relu", **(feature_net_config or {})}
        self.feature_hiddens, self.feature_activation = list(net["fcnet_hiddens"]), net["fcnet_activation"]
        self.inverse_hiddens, self.inverse_activation = list(inverse_net_hiddens), inverse_net_activation
        self.forward_hiddens, self.forward_activation = list(forward_net_hiddens), forward_net_activation
        self.sub_exploration = make_exploration(
            sub_exploration or {"type": "StochasticSampling"}, action_space, self.rng
        )
        self.modules: Any = None  # feature, inverse and forward nets (built by attach)
        self.last_intrinsic_mean = float("nan")
        """The mean intrinsic reward of the last fragment (a diagnostic)."""

    def attach(self, policy: Any) -> None:
        if policy.config.num_env_runners > 0:
            raise ValueError(
                "Curiosity trains its models in the env runner that samples: set num_env_runners=0 "
                "(as RLlib's Curiosity)"
            )
        import torch

        from rltrainer.core.models import mlp

        size, n = policy.preprocessor.size, int(self.action_space.n)
        self.modules = torch.nn.ModuleDict(
            {
                "features": mlp(
                    [size, *self.feature_hiddens, self.feature_dim], self.feature_activation, 1.0
                ),
                "inverse_model": mlp(
                    [2 * self.feature_dim, *self.inverse_hiddens, n], self.inverse_activation, 1.0
                ),
                "forward_model": mlp(
                    [self.feature_dim + n, *self.forward_hiddens, self.feature_dim],
                    self.forward_activation,
                    1.0,
                ),
            }
        )
        self.optimizer = torch.optim.Adam(self.modules.parameters(), lr=self.lr)

    def get_exploration_action(self, action_distribution, timestep, explore=True):
        return self.sub_exploration.get_exploration_action(action_distribution, timestep, explore)

    def postprocess_rollout(self, rollout: Any) -> Any:
        """The ICM's updates on the fragment's valid steps (Adam steps on chunks of at most
        ``UPDATE_ROWS``, in step order: RLlib updates once per episode piece), and those steps'
        rewards plus the intrinsic ones (each from the forward model before its chunk's step)."""
        valid = rollout.valid
        if self.modules is None or not valid.any():
            return rollout
        following = np.concatenate([rollout.obs[1:], rollout.last_obs[None]])  # s' of each row
        obs = np.asarray(rollout.obs[valid], dtype=np.float32)
        next_obs = np.asarray(following[valid], dtype=np.float32)
        actions = np.asarray(rollout.actions[valid]).astype(np.int64).reshape(-1)
        intrinsic = np.concatenate(
            [
                self._update(
                    obs[i : i + self.UPDATE_ROWS],
                    next_obs[i : i + self.UPDATE_ROWS],
                    actions[i : i + self.UPDATE_ROWS],
                )
                for i in range(0, len(actions), self.UPDATE_ROWS)
            ]
        )
        rewards = np.array(rollout.rewards, dtype=np.float32)
        rewards[valid] += intrinsic
        self.last_intrinsic_mean = float(intrinsic.mean())
        return rollout._replace(rewards=rewards)

    #: Rows per ICM update (RLlib updates on each episode piece as it is postprocessed).
    UPDATE_ROWS = 64

    def _update(self, obs: np.ndarray, next_obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """One Adam step on ``(1 - beta) * inverse + beta * forward`` loss; the rows' intrinsic rewards."""
        import torch
        import torch.nn.functional as F  # noqa: N812

        n = int(self.action_space.n)
        actions_t = torch.from_numpy(actions)
        phi = self.modules["features"](torch.from_numpy(obs))
        phi_next = self.modules["features"](torch.from_numpy(next_obs))
        predicted = self.modules["forward_model"](torch.cat([phi, F.one_hot(actions_t, n).float()], dim=1))
        forward_l2 = 0.5 * (predicted - phi_next.detach()).pow(2).sum(dim=1)
        inverse_logits = self.modules["inverse_model"](torch.cat([phi, phi_next], dim=1))
        loss = (1.0 - self.beta) * F.cross_entropy(inverse_logits, actions_t) + self.beta * forward_l2.mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return self.eta * forward_l2.detach().numpy()


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


BUILTIN: dict[str, type[Exploration]] = {
    cls.__name__: cls
    for cls in (
        EpsilonGreedy,
        SoftQ,
        StochasticSampling,
        GaussianNoise,
        OrnsteinUhlenbeckNoise,
        Random,
        PerWorkerEpsilonGreedy,
        PerWorkerGaussianNoise,
        PerWorkerOrnsteinUhlenbeckNoise,
        ParameterNoise,
        Curiosity,
    )
}


#: RLlib's built-ins that rltrainer does not have yet, with what to use meanwhile (none now).
NOT_BUILT: dict[str, str] = {}


def exploration_class(spec: Any) -> type[Exploration]:
    """A class from a class, a built-in name, or ``"package.module:Class"`` (or dotted)."""
    name = spec.rpartition(":")[2].rpartition(".")[2] if isinstance(spec, str) else None
    if name in NOT_BUILT:
        raise ValueError(f"exploration_config type {spec!r}: rltrainer has no {name} yet; {NOT_BUILT[name]}")
    if isinstance(spec, type):
        cls = spec
    elif isinstance(spec, str) and spec in BUILTIN:
        cls = BUILTIN[spec]
    elif isinstance(spec, str) and (":" in spec or "." in spec):
        module_name, _, name = spec.rpartition(":") if ":" in spec else spec.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError) as err:
            raise ValueError(f"exploration_config type {spec!r} cannot be imported: {err}") from None
    else:
        raise ValueError(
            f"unknown exploration_config type {spec!r}; allowed: {', '.join(BUILTIN)}, "
            "an Exploration subclass, or 'package.module:Class'"
        )
    if not (isinstance(cls, type) and issubclass(cls, Exploration)):
        raise ValueError(f"exploration_config type {spec!r} is not a subclass of rltrainer's Exploration")
    return cls


def check_exploration_config(config: dict[str, Any]) -> type[Exploration]:
    """The class of an ``exploration_config``; raises ``ValueError`` naming an unknown argument."""
    cls = exploration_class(config.get("type", "StochasticSampling"))
    args = {k: v for k, v in config.items() if k != "type"}
    allowed = _ctor_args(cls)
    if allowed is not None:
        unknown = sorted(set(args) - allowed)
        if unknown:
            raise ValueError(
                f"exploration_config: {cls.__name__} has no argument(s) {unknown}; "
                f"allowed: {', '.join(sorted(allowed)) or 'none'}"
            )
    return cls


def make_exploration(
    config: dict[str, Any], action_space: spaces.Space, rng: np.random.Generator | None = None
) -> Exploration:
    """The exploration object an ``exploration_config`` describes, for ``action_space``."""
    cls = check_exploration_config(config)
    args = {k: v for k, v in config.items() if k != "type"}
    try:
        return cls(action_space, rng=rng, **args)
    except TypeError as err:
        raise ValueError(f"exploration_config for {cls.__name__}: {err}") from None


def _ctor_args(cls: type) -> set[str] | None:
    """Keyword arguments ``cls`` and its bases accept (``None``: it takes any ``**kwargs``)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is object or "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters.values()
        names |= {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):  # doesn't pass others up: done
            break
        if klass is Exploration:
            break
    else:
        return None
    names -= {"self", "action_space", "rng"}
    return names


__all__ = [
    "BUILTIN",
    "Curiosity",
    "EpsilonGreedy",
    "Exploration",
    "GaussianNoise",
    "OrnsteinUhlenbeckNoise",
    "ParameterNoise",
    "PerWorkerEpsilonGreedy",
    "PerWorkerGaussianNoise",
    "PerWorkerOrnsteinUhlenbeckNoise",
    "Random",
    "SoftQ",
    "StochasticSampling",
    "check_exploration_config",
    "exploration_class",
    "linear_schedule",
    "make_exploration",
    "per_worker_constant",
    "uniform_actions",
]
