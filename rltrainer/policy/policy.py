"""``Policy``: the model, its action distribution, and the mapping to env actions."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rltrainer.core.action_masks import valid_actions
from rltrainer.core.composite_actions import CompositeActions, is_composite
from rltrainer.core.distributions import ActionDistribution, Categorical
from rltrainer.core.exploration import Exploration, StochasticSampling, make_exploration
from rltrainer.core.filters import make_filter
from rltrainer.core.models import NumpyMLP, torch_inference
from rltrainer.core.tensors import as_tensor
from rltrainer.env.episode import index_obs
from rltrainer.env.preprocessors import Preprocessor
from rltrainer.errors import CheckpointError, ConfigError
from rltrainer.policy_models import PolicyModels
from rltrainer.policy_spec import PolicySpec, parse_policies
from rltrainer.utils.import_paths import import_object


def pack_state(state: Any, rows: int) -> np.ndarray | None:
    """RLlib's state form (a list ``[h, c, ...]``, each ``[cell]`` for one row or ``[B, cell]``)
    -> the ``[B, len(state), cell]`` array recurrent modules take; ``None`` or ``[]``: initial
    states."""
    if state is None or len(state) == 0:
        return None
    try:
        return np.stack([np.asarray(part, dtype=np.float32).reshape(rows, -1) for part in state], axis=1)
    except ValueError:
        shapes = [np.shape(part) for part in state]
        raise ValueError(f"an LSTM's state is a list of equally shaped arrays; got shapes {shapes}") from None


class Policy(PolicyModels):
    """Computes actions from flat observations; holds the torch ``model`` and ``dist_class``.

    For Box actions with ``normalize_actions`` the distribution lives in [-1, 1] and
    ``to_env_actions`` rescales to the space's bounds (RLlib's unsquashing).

    Algorithms supply their own policy by subclassing (``Algorithm.policy_class``) and
    overriding ``make_model`` (the torch module the learner trains; its ``numpy_policy()``
    maps observations to distribution inputs) and ``make_dist_class`` (``PolicyModels``, in
    ``rltrainer.policy_models``, builds the default ones). Actions come from the
    ``exploration`` object built from the config's ``exploration_config``.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        config: Any,
        seed: int | None = None,
    ) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config
        self.preprocessor = Preprocessor(observation_space)
        self.composite_actions: CompositeActions | None = None
        """For a Dict or Tuple action space: its rows <-> the env's structure."""
        if is_composite(action_space):
            try:
                self.composite_actions = CompositeActions(
                    action_space, config.normalize_actions, config.clip_actions
                )
            except ValueError as err:
                raise ConfigError(f"action space {action_space}: {err}") from None
        self.dist_class = self.make_dist_class()
        self._mask_columns = self.action_mask_columns()  # before make_model, which masks with them
        self.model = self.make_model()
        self.recurrent = bool(getattr(self.model, "is_recurrent", False))
        """An LSTM policy: ``compute`` takes and returns each env's state (``get_initial_state``)."""
        self._rescale = self._action_rescaler(action_space, config)
        self.rng = np.random.default_rng(seed)
        try:
            self.exploration: Exploration = make_exploration(
                config.exploration_config, self.policy_action_space(), self.rng
            )
            self.exploration.attach(self)
        except ValueError as err:
            raise ConfigError(f"exploration_config {config.exploration_config}: {err}") from None
        self._perturbs = self.exploration.perturbs_parameters  # ParameterNoise: its own network
        self.observation_filter: Any = None
        """The env runner's observation filter (set by the runner; exports bake it in)."""
        self.global_timestep = 0
        """Env steps sampled so far, as the exploration schedules see them (synced by the algorithm)."""
        # Inference runs in numpy on views of the parameters (see NumpyMLP): on the CPU this
        # beats torch for RL-sized networks. ``set_device`` moves it to a GPU (torch there).
        self.device = torch.device("cpu")
        """Where inference runs: the CPU unless the env runner was given a GPU (``set_device``)."""
        self._gpu_code_path = False
        self._compile_kwargs: dict[str, Any] | None = None
        self._set_inference()

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint_path: Any,
        storage_options: dict[str, Any] | None = None,
        policy_id: str | None = None,
        policy_ids: list[str] | None = None,
    ) -> Any:
        """A checkpoint's policy, from the checkpoint alone (no env, learner or Ray): the
        algorithm's policy class with the checkpoint's config, spaces and weights, and its
        observation filter as ``observation_filter``. ``checkpoint_path``: a folder, an
        ``s3://`` URI (``storage_options`` as the config's) or a Tune checkpoint.

        A multi-agent checkpoint gives ``{policy id: Policy}`` (all, or ``policy_ids``), or with
        ``policy_id`` that one policy."""
        from rltrainer.algorithms.callbacks import loadable_config
        from rltrainer.algorithms.registry import get_config_class
        from rltrainer.checkpoint_store import checkpoint_uri, open_checkpoint
        from rltrainer.env.spaces import space_from_json

        path = checkpoint_uri(checkpoint_path)
        with open_checkpoint(path, storage_options) as checkpoint:
            meta = checkpoint.metadata
            try:
                config = get_config_class(meta["algorithm"]).from_dict(loadable_config(meta["config"]))
            except ConfigError as err:
                raise CheckpointError(f"checkpoint {path!r} has an invalid config: {err}") from None
            if "policies" in meta:  # multi-agent: one file set per policy
                if policy_id is not None:
                    return load_policy(checkpoint, policy_id, config)
                return {pid: load_policy(checkpoint, pid, config) for pid in policy_ids or meta["policies"]}
            spaces_ = (space_from_json(meta["observation_space"]), space_from_json(meta["action_space"]))
            policy = config.get_policy_class()(*spaces_, config)
            if not issubclass(type(policy), cls):
                raise CheckpointError(f"{path!r} holds a {type(policy).__name__}, not a {cls.__name__}")
            try:
                policy.set_weights(checkpoint.tensors("policy.safetensors"))
            except RuntimeError as err:  # load_state_dict: missing keys or other shapes
                raise CheckpointError(
                    f"checkpoint {path!r}: its weights do not fit its config ({err})"
                ) from None
            observation_filter = make_filter(config.observation_filter, policy.preprocessor.size)
            observation_filter.set_state(checkpoint.arrays("filter.npz"))
            policy.observation_filter = observation_filter
        return policy

    # --- inference -------------------------------------------------------------------
    def policy_action_space(self) -> spaces.Space:
        """The space the distribution's actions live in: [-1, 1] for normalized Box actions."""
        space = self.action_space
        if self.composite_actions is not None:
            return self.composite_actions.policy_space()
        if not isinstance(space, spaces.Box) or not self.config.normalize_actions:
            return space
        if np.isfinite(space.low).all() and np.isfinite(space.high).all():
            return spaces.Box(-1.0, 1.0, shape=space.shape, dtype=np.float32)
        return space

    def compute(
        self,
        flat_obs: np.ndarray,
        explore: bool,
        state: np.ndarray | None = None,
        prev_actions: np.ndarray | None = None,
        prev_rewards: np.ndarray | None = None,
    ) -> dict[str, np.ndarray]:
        """Actions for ``[B, obs_size]`` observations.

        Returns ``actions`` (the distribution's samples, what the learner sees),
        ``env_actions`` (rescaled/clipped for the env), ``action_logp`` and
        ``action_dist_inputs``, all numpy. A recurrent policy also takes each env's ``state``
        (``[B, rows, lstm_cell_size]``; ``None``: initial states) and previous action and reward,
        and returns ``state_out`` and ``vf_preds`` too.
        """
        timestep = self.global_timestep
        extra: dict[str, np.ndarray] = {}
        if self.recurrent:
            dist_inputs, values, state_out = self._recurrent_step(flat_obs, state, prev_actions, prev_rewards)
            extra = {"state_out": state_out, "vf_preds": values}
            actions, logp = self._explore(dist_inputs, flat_obs, explore, timestep)
        elif self._samples_from_mlp and (not explore or timestep >= self.exploration.random_timesteps):
            # What StochasticSampling does, with the network and the sampling in one compiled
            # call where possible (the env runners' hot path).
            mlp, rng = self._numpy_policy, self.rng
            actions, logp, dist_inputs = Categorical.sample_mlp(mlp, flat_obs, explore, rng)
        elif self._perturbs:
            dist_inputs = self.exploration.forward(self._numpy_policy, flat_obs, explore, timestep)
            actions, logp = self._explore(dist_inputs, flat_obs, explore, timestep)
        else:
            dist_inputs = self._numpy_policy(flat_obs)
            actions, logp = self._explore(dist_inputs, flat_obs, explore, timestep)
        return {
            "actions": actions,
            "env_actions": self.to_env_actions(actions),
            "action_logp": logp,
            "action_dist_inputs": dist_inputs,
            **extra,
        }

    def _explore(
        self, dist_inputs: np.ndarray, flat_obs: np.ndarray, explore: bool, timestep: int
    ) -> tuple[np.ndarray, np.ndarray]:
        distribution = ActionDistribution(self.dist_class, dist_inputs, self.rng)
        if self._mask_columns is not None:  # random actions of exploration draw among these
            distribution.valid = valid_actions(flat_obs, self._mask_columns)
        return self.exploration.get_exploration_action(distribution, timestep, explore)

    @torch.inference_mode()
    def _recurrent_step(
        self, flat_obs: np.ndarray, state: Any, prev_actions: Any, prev_rewards: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One LSTM step of every row: ``(dist_inputs, values, state_out)``, numpy."""
        device = next(self.model.parameters()).device
        obs = as_tensor(flat_obs).to(device)
        shape = (len(flat_obs), self.model.state_rows, self.model.cell_size)
        if state is None:
            state = np.zeros(shape, np.float32)
        elif np.shape(state) != shape:
            names = "[h, c]" if shape[1] == 2 else "[h, c, value h, value c]"
            raise ValueError(
                f"this policy's LSTM state is {names} with {shape[2]} values each per observation "
                f"(lstm_cell_size; get_initial_state() gives one); got {np.shape(state)[1:]}"
            )
        dist_inputs, values, state_out = self._model_step(
            obs, as_tensor(state).to(device), prev_actions, prev_rewards
        )
        return dist_inputs.float().cpu().numpy(), values.cpu().numpy(), state_out.cpu().numpy()

    def recurrent_values(
        self, flat_obs: np.ndarray, state: Any, prev_actions: Any = None, prev_rewards: Any = None
    ) -> np.ndarray:
        """A recurrent policy's values of ``[B, obs_size]`` observations given each env's state."""
        return self._recurrent_step(flat_obs, state, prev_actions, prev_rewards)[1]

    def get_initial_state(self) -> list[np.ndarray]:
        """The state of one env at an episode's start: ``[h, c]`` (zeros of ``lstm_cell_size``)
        for an LSTM policy, ``[]`` otherwise (RLlib's ``Policy.get_initial_state``)."""
        return self.model.get_initial_state() if self.recurrent else []

    def is_recurrent(self) -> bool:
        """Whether the policy carries state between steps (RLlib's ``Policy.is_recurrent``)."""
        return self.recurrent

    def compute_actions(
        self,
        obs_batch: Any,
        state_batches: Any = None,
        prev_action_batch: Any = None,
        prev_reward_batch: Any = None,
        info_batch: Any = None,  # noqa: ARG002 - RLlib's signature
        episodes: Any = None,  # noqa: ARG002
        explore: bool | None = None,
        timestep: int | None = None,
        **kwargs: Any,  # noqa: ARG002
    ) -> tuple[np.ndarray, list[Any], dict[str, np.ndarray]]:
        """RLlib's ``Policy.compute_actions``: ``(actions, state_outs, extra_fetches)`` for a batch
        of preprocessed (flattened, filtered) observations; ``actions`` are the distribution's
        (before rescaling to a Box space's bounds), ``state_outs`` is ``[h_batch, c_batch]`` for
        an LSTM policy (then the value LSTM's h and c, if it has one; ``state_batches`` in the
        same form; ``None``: initial states) and ``[]`` otherwise, ``extra_fetches`` holds
        ``action_logp``, ``action_dist_inputs`` and ``vf_preds`` (per algorithm). ``explore``
        defaults to the config's, ``timestep`` to the policy's."""
        flat = np.asarray(obs_batch, dtype=np.float32)
        flat = flat.reshape(len(flat), -1)
        if timestep is not None:
            self.global_timestep = int(timestep)
        explore = self.config.explore if explore is None else explore
        if not self.recurrent:
            out = self.compute(flat, explore)
            return self._structured(out["actions"]), [], self.extra_fetches(flat, out)
        out = self.compute(
            flat, explore, pack_state(state_batches, len(flat)), prev_action_batch, prev_reward_batch
        )
        state_out = out["state_out"]
        return (
            self._structured(out["actions"]),
            list(state_out.transpose(1, 0, 2)),
            self.extra_fetches(flat, out),
        )

    def compute_single_action(
        self,
        obs: Any = None,
        state: list[Any] | None = None,
        *,
        prev_action: Any = None,
        prev_reward: Any = None,
        info: Any = None,  # noqa: ARG002 - RLlib's signature
        input_dict: dict[str, Any] | None = None,
        episode: Any = None,  # noqa: ARG002
        explore: bool | None = None,
        timestep: int | None = None,
        **kwargs: Any,  # noqa: ARG002
    ) -> tuple[Any, list[Any], dict[str, Any]]:
        """RLlib's ``Policy.compute_single_action``: ``compute_actions`` for one preprocessed
        observation (or ``input_dict["obs"]``), returning that row: ``(action, state_out,
        extra_fetches)``; ``state`` is one env's ``get_initial_state()``-shaped list."""
        if input_dict is not None:
            obs = input_dict.get("obs", obs)
        if obs is None:
            raise ValueError("compute_single_action needs an observation: obs=... or input_dict={'obs': ...}")
        actions, state_out, extra = self.compute_actions(
            [np.asarray(obs, dtype=np.float32).reshape(-1)],
            None if state is None else [np.asarray(s)[None] for s in state],
            None if prev_action is None else np.asarray([prev_action]),
            None if prev_reward is None else np.asarray([prev_reward], dtype=np.float32),
            explore=explore,
            timestep=timestep,
        )
        return index_obs(actions, 0), [s[0] for s in state_out], {k: v[0] for k, v in extra.items()}

    def _structured(self, actions: np.ndarray) -> Any:
        """A composite action's rows as the space's structure of batches (distribution terms)."""
        if self.composite_actions is None:
            return actions
        return self.composite_actions.to_env(actions, rescale=False)

    @torch.inference_mode()
    def compute_values(self, flat_obs: np.ndarray) -> np.ndarray:
        """State values of ``[B, obs_size]`` observations."""
        device = next(self.model.parameters()).device
        return self.model.values(torch.from_numpy(flat_obs).to(device)).cpu().numpy()

    def from_env_actions(self, env_actions: np.ndarray) -> np.ndarray:
        """Env actions -> the distribution's (``to_env_actions`` undone; clipping cannot be)."""
        space = self.action_space
        if self.composite_actions is not None:  # a batch: a structure of batches, or a list of actions
            if isinstance(env_actions, list | np.ndarray):
                return np.concatenate([self.composite_actions.from_env_one(a) for a in env_actions])
            return self.composite_actions.from_env(env_actions)
        env_actions = np.asarray(env_actions)
        if isinstance(space, (spaces.MultiDiscrete, spaces.MultiBinary)):
            start = np.asarray(getattr(space, "start", 0)).reshape(-1)
            return env_actions.reshape(len(env_actions), -1) - start
        if isinstance(space, spaces.Discrete):
            return env_actions - int(space.start)
        if self._rescale is None or not self.config.normalize_actions:
            return env_actions
        low, high = space.low.astype(np.float32), space.high.astype(np.float32)
        return (2.0 * (env_actions - low) / (high - low) - 1.0).astype(np.float32)

    def to_env_actions(self, actions: np.ndarray) -> np.ndarray:
        """Policy outputs -> actions the env accepts (rescaled / clipped for Box spaces)."""
        return self._rescale(actions) if self._rescale is not None else actions

    def torch_dist_inputs(self, flat_obs: torch.Tensor) -> torch.Tensor:
        """The distribution's inputs for ``[B, obs_size]`` rows, in torch (what exports trace)."""
        return self.model(flat_obs)[0]

    def export_model(self, export_dir: str, onnx: int | None = None) -> str:
        """RLlib's ``Policy.export_model``: the deterministic policy (observation filter, model,
        action rescaling) as ``model.onnx`` with ONNX opset ``onnx``, or without it as
        TorchScript ``model.pt``, plus ``export.json`` (``rltrainer.export``); returns the path."""
        from rltrainer.export import export_policy

        fmt = "onnx" if onnx else "torchscript"
        return str(export_policy(self, self.observation_filter, export_dir, fmt, opset=onnx or None))

    # --- weights -----------------------------------------------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        """The model's parameters as numpy arrays, by name."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.model.state_dict().items()}

    def set_device(
        self,
        device: str | torch.device,
        gpu_code_path: bool = False,
        compile_kwargs: dict[str, Any] | None = None,
    ) -> None:
        """Run inference on ``device``: the model moves there and actions come from one torch
        call per batch (``torch_dist_inputs``); observations travel as they are (uint8 frames
        stay uint8) and only the distribution inputs come back. ``"cpu"`` returns to numpy, unless
        ``gpu_code_path`` (``fake_gpus``: the torch call on the CPU) or ``compile_kwargs``
        (``torch_compile_worker``: that call through ``torch.compile(**compile_kwargs)``)."""
        self.device = torch.device(device)
        self.model.to(self.device)
        self._gpu_code_path = gpu_code_path
        self._compile_kwargs = compile_kwargs
        self._set_inference()

    def share_model(self, model: torch.nn.Module) -> None:
        """Act with ``model`` itself (e.g. the driver's learner's module on the CPU): the numpy
        inference views its parameters, so every optimizer step is seen without syncing."""
        self.model = model
        self._set_inference()

    def _set_inference(self) -> None:
        """Numpy inference on views of the parameters, or one torch call per batch (see
        ``set_device``); an LSTM always steps in torch (``_recurrent_step``)."""
        compile_kwargs = self._compile_kwargs
        self._model_step = self.model.step if self.recurrent else None
        if compile_kwargs is not None and self.recurrent:
            self._model_step = torch.compile(self.model.step, **compile_kwargs)
        torch_call = self.device.type != "cpu" or self._gpu_code_path or compile_kwargs
        if not torch_call or self.recurrent:
            self._set_numpy_policy(self.model.numpy_policy())
            return
        forward = self.torch_dist_inputs
        if compile_kwargs is not None:
            forward = torch.compile(forward, **compile_kwargs)
        self._set_numpy_policy(torch_inference(forward, self.model))

    def _set_numpy_policy(self, numpy_policy: Any) -> None:
        self._numpy_policy = numpy_policy
        self._samples_from_mlp = (
            type(self.exploration) is StochasticSampling
            and self.dist_class is Categorical
            and isinstance(numpy_policy, NumpyMLP)
        )

    def set_weights(self, weights: dict[str, Any]) -> None:
        """Load parameters given as numpy arrays or tensors, by name (all, or a subset)."""
        _, unexpected = self.model.load_state_dict(
            {k: as_tensor(v) for k, v in weights.items()}, strict=False
        )
        if unexpected:
            raise KeyError(f"weights for parameters this policy does not have: {unexpected}")

    def _action_rescaler(self, space: spaces.Space, config: Any):
        if self.composite_actions is not None:
            return self.composite_actions.to_env
        if isinstance(space, spaces.Discrete):  # the distribution counts from 0, the env from its start
            start = int(space.start)
            return None if start == 0 else lambda a: a + start
        if isinstance(space, (spaces.MultiDiscrete, spaces.MultiBinary)):
            # The distribution's [B, d] columns from 0 -> the space's shape (and MultiDiscrete's start)
            start = np.asarray(getattr(space, "start", 0)).reshape(-1)  # MultiBinary has none: 0
            return lambda a: (a + start).reshape(len(a), *space.shape).astype(space.dtype)
        if not isinstance(space, spaces.Box):
            return None
        low, high = space.low.astype(np.float32), space.high.astype(np.float32)
        bounded = bool(np.all(np.isfinite(low)) and np.all(np.isfinite(high)))
        if config.normalize_actions and bounded:

            def rescale(a: np.ndarray) -> np.ndarray:
                return low + (np.clip(a, -1.0, 1.0) + 1.0) * 0.5 * (high - low)

            return rescale
        if config.clip_actions:
            return lambda a: np.clip(a, low, high)
        return None


# --- multi-agent checkpoints: the files of each policy ----------------------------------
def policy_file(policy_id: str) -> str:
    return f"policy_{policy_id}.safetensors"


def optimizer_file(policy_id: str) -> str:
    return f"optimizer_{policy_id}.safetensors"


def filter_file(policy_id: str) -> str:
    return f"filter_{policy_id}.npz"


def policy_class_of(spec: PolicySpec, default: type) -> type[Policy]:
    """The policy class of ``spec``: ``default`` (the algorithm's) when it names none; a path is
    imported; ``ConfigError`` unless it is a ``Policy`` subclass."""
    cls = spec.policy_class
    if cls is None:
        return default
    if isinstance(cls, str):
        try:
            cls = import_object(cls)
        except (ImportError, AttributeError, ValueError) as err:
            raise ConfigError(
                f"multi_agent(): cannot import policy_class {spec.policy_class!r} ({err})"
            ) from None
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise ConfigError(
            f"multi_agent(): policy_class {spec.policy_class!r} is not a rltrainer.policy.Policy subclass"
        )
    return cls


def load_policy(checkpoint: Any, policy_id: str, config: Any) -> Any:
    """Policy ``policy_id`` of a multi-agent checkpoint, with its weights and filter."""
    specs = parse_policies(checkpoint.metadata["policies"])
    if policy_id not in specs:
        raise CheckpointError(
            f"checkpoint {checkpoint.source!r} has no policy {policy_id!r}; policies: {', '.join(specs)}"
        )
    spec = specs[policy_id]
    policy_config = config.policy_config(policy_id)
    policy = policy_class_of(spec, config.get_policy_class())(
        spec.observation_space, spec.action_space, policy_config
    )
    policy.set_weights(checkpoint.tensors(policy_file(policy_id)))
    observation_filter = make_filter(policy_config.observation_filter, policy.preprocessor.size)
    observation_filter.set_state(checkpoint.arrays(filter_file(policy_id)))
    policy.observation_filter = observation_filter
    return policy


__all__ = ["Policy", "PolicySpec", "as_tensor", "load_policy", "pack_state", "policy_class_of"]
