"""``AlgorithmConfig``: the typed, validated builder every algorithm is configured with.

The shape follows RLlib's Training APIs (``.environment()``, ``.env_runners()``,
``.training()``, ... each returning ``self``), but every field is declared once, with a
type and a docstring, and every builder method accepts exactly the fields of its section:
an unknown key or a value of the wrong type raises ``ConfigError`` (a ``ValueError``)
naming the key and what is allowed.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, ClassVar, Literal

import gymnasium as gym
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveInt,
    PrivateAttr,
    ValidationError,
    field_validator,
)

from rltrainer.algorithms.aliases import _DICT_NAMES, ALIASES, DOCUMENTED_SETTINGS, AnyOf
from rltrainer.core.cluster import REMOTE_ENVS_WITHOUT_TASKS, uses_remote_envs
from rltrainer.errors import ConfigError
from rltrainer.tune.search_space import candidates, holds_search_space
from rltrainer.utils.import_paths import object_path

# JSON and YAML give [timestep, value] pairs as lists; strict validation wants tuples.
PiecewiseSchedule = list[
    Annotated[
        tuple[int, float], BeforeValidator(lambda pair: tuple(pair) if isinstance(pair, list) else pair)
    ]
]

#: ``environment()``'s default: the env is left as it is (``None`` sets no env, as in RLlib).
NOT_PROVIDED: Any = object()


def _positive_sizes(sizes: list[int]) -> list[int]:
    if any(s < 1 for s in sizes):
        raise ValueError("every hidden layer size must be >= 1")
    return sizes


#: Sizes of hidden layers, each >= 1.
LayerSizes = Annotated[list[int], AfterValidator(_positive_sizes)]


Activation = Literal["tanh", "relu", "elu", "silu", "linear"]

#: ``torch.compile``'s modes.
CompileMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


def _conv_filters(value: list[Any] | None) -> list[Any] | None:
    from rltrainer.models.conv_filters import parse_filter

    if value is not None:
        if not value:
            raise ValueError("conv_filters needs at least one layer (or None for the defaults)")
        for i, layer in enumerate(value):
            try:
                parse_filter(i, layer)
            except ConfigError as err:
                raise ValueError(str(err).removeprefix("model.conv_filters: ")) from None
    return value


class ModelConfig(BaseModel):
    """The policy/value network (RLlib's ``model`` dict): an MLP over flat observations, a conv
    stack over image observations (a rank-3 ``Box``), or a custom model."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)

    fcnet_hiddens: LayerSizes = Field(default_factory=lambda: [256, 256])
    """Sizes of the hidden layers."""
    fcnet_activation: Activation = "tanh"
    """Activation after each hidden layer."""
    vf_share_layers: bool = False
    """Share the hidden layers (the conv stack for images) between the policy and the value head."""
    conv_filters: Annotated[list[Any] | None, AfterValidator(_conv_filters)] = None
    """Conv layers for image observations, ``[[out_channels, kernel, stride], ...]``; ``None``:
    RLlib's defaults for 84x84, 42x42, 64x64, 96x96 and 10x10 frames."""
    conv_activation: Activation = "relu"
    """Activation after each conv layer."""
    post_fcnet_hiddens: LayerSizes = Field(default_factory=list)
    """Fully connected layers after the conv stack, before the heads."""
    post_fcnet_activation: Activation = "relu"
    """Activation after each of ``post_fcnet_hiddens``."""
    free_log_std: bool = True
    """Box actions: the log standard deviation is a free parameter, not an output of the network
    (RLlib's default is False)."""
    use_lstm: bool = False
    """An LSTM between the encoder and the heads (PPO): the policy carries a state per env."""
    lstm_cell_size: PositiveInt = 256
    """The LSTM's cell size (with ``use_lstm``)."""
    max_seq_len: PositiveInt = 20
    """Longest sequence trained through the LSTM (with ``use_lstm``)."""
    lstm_use_prev_action: bool = False
    """Feed the previous action to the LSTM (with ``use_lstm``)."""
    lstm_use_prev_reward: bool = False
    """Feed the previous reward to the LSTM (with ``use_lstm``)."""
    action_mask_key: str | None = "action_mask"
    """With a Dict observation holding this key (1 = allowed, one entry per Discrete action),
    masked actions are never taken (their logits / Q-values get a large negative number);
    ``None``: no masking."""
    custom_model: Any = None
    """A ``TorchModelV2`` subclass: a name given to ``ModelCatalog.register_custom_model``, a
    ``"package.module:Class"`` path, or the class."""
    custom_model_config: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the custom model's constructor."""

    @field_validator("custom_model")
    @classmethod
    def _custom_model(cls, value: Any) -> Any:
        if value is None or isinstance(value, type) or (isinstance(value, str) and value):
            return value
        raise ValueError(
            "custom_model must be a registered name, a 'package.module:Class' path or a class, "
            f"got {value!r:.60}"
        )


class AlgorithmConfig(BaseModel):
    """Settings shared by all algorithms; subclasses add their ``training()`` fields."""

    # Strict: "100" is not an int and 1 is not a bool (ints are still fine as floats).
    model_config = ConfigDict(
        validate_assignment=True,
        extra="forbid",
        strict=True,
        arbitrary_types_allowed=True,
        use_attribute_docstrings=True,
        protected_namespaces=(),
    )

    #: The registry name of the algorithm ``build()`` creates (``None``: pass ``algo_class``).
    ALGORITHM: ClassVar[str | None] = None
    #: The statistics the algorithm's learner reports in every result (its ``STAT_KEYS``).
    STAT_KEYS: ClassVar[tuple[str, ...]] = ()

    #: Whether ``multi_agent()`` configs train (PPO and the replay-based algorithms).
    SUPPORTS_MULTI_AGENT: ClassVar[bool] = False

    #: Builder method name -> the fields it sets. Subclasses extend "training".
    SECTIONS: ClassVar[dict[str, tuple[str, ...]]] = {
        "environment": (
            "env",
            "env_config",
            "observation_space",
            "action_space",
            "clip_rewards",
            "normalize_actions",
            "clip_actions",
            "env_task_fn",
            "disable_env_checking",
            "render_env",
            "record_env",
        ),
        "env_runners": (
            "num_env_runners",
            "num_envs_per_env_runner",
            "rollout_fragment_length",
            "batch_mode",
            "observation_filter",
            "sample_timeout_s",
            "horizon",
            "compress_observations",
            "remote_worker_envs",
        ),
        "training": ("gamma", "lr", "grad_clip", "grad_clip_by", "train_batch_size", "model"),
        "evaluation": (
            "evaluation_interval",
            "evaluation_duration",
            "evaluation_duration_unit",
            "off_policy_estimation_methods",
            "evaluation_sample_timeout_s",
            "evaluation_parallel_to_training",
            "evaluation_force_reset_envs_before_iteration",
            "evaluation_config",
            "evaluation_num_env_runners",
            "custom_evaluation_function",
            "always_attach_evaluation_results",
        ),
        "exploration": ("explore", "exploration_config"),
        "reporting": (
            "metrics_num_episodes_for_smoothing",
            "min_time_s_per_iteration",
            "min_sample_timesteps_per_iteration",
            "storage_path",
            "storage_options",
            "experiment_name",
            "keep_per_episode_custom_metrics",
        ),
        "checkpointing": (
            "checkpoint_frequency",
            "checkpoint_at_end",
            "num_to_keep",
            "checkpoint_score_attribute",
            "checkpoint_score_order",
            "store_buffer_in_checkpoints",
        ),
        "callbacks": ("callbacks_class",),
        "python_environment": ("extra_python_environs_for_driver", "extra_python_environs_for_worker"),
        "multi_agent": (
            "policies",
            "policy_mapping_fn",
            "policies_to_train",
            "count_steps_by",
            "policy_states_are_swappable",
            "observation_fn",
        ),
        "debugging": ("log_level", "seed", "logger_config", "on_nonfinite"),
        "offline_data": (
            "input_",
            "input_config",
            "shuffle_buffer_size",
            "actions_in_input_normalized",
            "output",
            "output_config",
            "output_max_file_size",
        ),
        "fault_tolerance": (
            "restart_failed_env_runners",
            "ignore_env_runner_failures",
            "max_num_env_runner_restarts",
            "delay_between_env_runner_restarts_s",
            "restart_failed_sub_environments",
            "num_consecutive_env_runner_failures_tolerance",
            "env_runner_health_probe_timeout_s",
            "restart_failed_learners",
            "max_num_learner_restarts",
            "learner_restart_timeout_s",
        ),
        "framework": (
            "framework_str",
            "torch_compile_learner",
            "torch_compile_learner_what_to_compile",
            "torch_compile_learner_dynamo_backend",
            "torch_compile_learner_dynamo_mode",
            "torch_compile_worker",
            "torch_compile_worker_dynamo_backend",
            "torch_compile_worker_dynamo_mode",
        ),
        "resources": (
            "num_gpus",
            "num_cpus_for_main_process",
            "num_cpus_per_env_runner",
            "num_gpus_per_env_runner",
            "custom_resources_per_env_runner",
            "num_learners",
            "num_gpus_per_learner",
            "num_cpus_per_learner",
            "custom_resources_per_learner",
            "placement_strategy",
            "placement_timeout_s",
            "fake_gpus",
        ),
    }

    # --- environment -------------------------------------------------------------
    env: Any = None
    """A registered name, a gymnasium id, ``"package.module:Class"``, or a ``gym.Env`` subclass."""
    env_config: dict[str, Any] = Field(default_factory=dict)
    """Passed to the env creator inside an ``EnvContext``."""
    observation_space: Any = None
    """Override the env's observation space (rarely needed)."""
    action_space: Any = None
    """Override the env's action space (rarely needed)."""
    clip_rewards: bool | float | None = None
    """``True``: sign of the reward; a float c: clip to [-c, c]; ``None``/``False``: unchanged."""
    normalize_actions: bool = True
    """Box actions: the policy acts in [-1, 1], rescaled to the space's bounds."""
    clip_actions: bool = False
    """Box actions: clip to the space's bounds before stepping the env."""
    disable_env_checking: bool = False
    """Skip the env check at ``build()`` (one seeded reset and one step of an extra env in the
    driver, checked against the spaces and gymnasium's API: ``rltrainer.env.env_checker``)."""
    render_env: bool = False
    """Render the first sub-env of one env runner (the driver's when it samples, else runner 1)
    on screen while training (gymnasium ids are made with ``render_mode="human"``)."""
    record_env: bool | str = False
    """Record videos (mp4) of the first sub-env's episodes on one env runner, as gymnasium's
    ``RecordVideo`` picks them (episodes 0, 1, 8, 27, ..., then every 1000th): ``True``: into
    ``<trial folder>/videos``; a string: into that folder. RLlib 1.x's ``monitor``."""
    env_task_fn: Any = None
    """Curriculum: ``fn(train_results, task_settable_env, env_ctx) -> task``, called after every
    ``train()`` for each sub-env of every env runner, which is set to the task returned where it
    differs; the env must be a ``TaskSettableEnv``. A function or ``"package.module:function"``."""

    # --- env runners -------------------------------------------------------------
    num_env_runners: int = Field(0, ge=0)
    """Remote env-runner actors; 0 samples in the driver process without starting Ray."""
    num_envs_per_env_runner: int = Field(1, ge=1)
    """Vectorized envs stepped together by each env runner (batched inference)."""
    rollout_fragment_length: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    """Steps per env per sample call; "auto" divides ``train_batch_size`` evenly."""
    batch_mode: Literal["truncate_episodes", "complete_episodes"] = "truncate_episodes"
    """Cut rollouts at the fragment length (bootstrapping values) or only at episode ends."""
    observation_filter: Literal["NoFilter", "MeanStdFilter"] = "NoFilter"
    """Normalize observations with running mean/std statistics."""
    sample_timeout_s: float = Field(60.0, gt=0)
    """How long to wait for remote env runners' samples before failing."""
    compress_observations: bool = False
    """Remote env runners send their rollouts' observations lz4-compressed (the driver unpacks
    them): less to move between nodes for pixel observations, at the cost of compressing (see
    the README's figures); nothing changes without remote env runners."""
    horizon: int | None = Field(None, gt=0)
    """Truncate every episode after this many env steps (RLlib's; a ``TimeLimit`` on each env
    copy, so the truncated episodes bootstrap); ``None``: episodes end when the env ends them."""
    remote_worker_envs: bool = False
    """With ``num_envs_per_env_runner > 1``: each of a runner's envs lives in its own Ray actor
    (no CPU reserved) and they step in parallel, each step waiting for all of them. Only worth
    its overheads (a round trip per env and step) for envs slow to step or reset; single-agent
    envs only, without ``env_task_fn`` (see ``rltrainer.env.remote_vector_env``)."""

    # --- training ----------------------------------------------------------------
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    """Discount factor."""
    lr: float | PiecewiseSchedule = 5e-5
    """Learning rate, or a piecewise-linear schedule ``[[timestep, value], ...]``."""
    grad_clip: float | None = Field(None, gt=0)
    """Clip gradients (see ``grad_clip_by``); ``None`` disables clipping."""
    grad_clip_by: Literal["value", "norm", "global_norm"] = "global_norm"
    """Clip each element, each tensor's norm, or the norm over all tensors."""
    train_batch_size: int = Field(4000, ge=1)
    """Env steps collected per training iteration."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """Network architecture; ``training(model={...})`` updates only the keys given."""

    # --- evaluation --------------------------------------------------------------
    evaluation_interval: int | None = Field(None, ge=0)
    """Evaluate every this many ``train()`` calls; ``None`` (or 0) never evaluates automatically."""
    evaluation_duration: Annotated[int, Field(ge=1)] | Literal["auto"] = 10
    """How many episodes (or timesteps, see the unit) one evaluation runs, split among the
    evaluation env runners; ``"auto"`` (with ``evaluation_parallel_to_training``): as long as
    the training step runs."""
    evaluation_duration_unit: Literal["episodes", "timesteps"] = "episodes"
    """Unit of ``evaluation_duration``."""
    off_policy_estimation_methods: dict[str, Any] = Field(default_factory=dict)
    """``{name: {"type": "is" | "wis" | "dm" | "dr", "q_model_config": {...}}}``: estimate the
    current policy's return from recorded episodes at each evaluation (``evaluation_duration``
    of them), reported under ``evaluation/off_policy_estimator/<name>/`` (see
    ``rltrainer.offline.estimators``)."""
    evaluation_sample_timeout_s: float = Field(120.0, gt=0)
    """How long to wait for remote evaluation runners' samples: a runner that misses it is
    handled per the fault-tolerance settings and the evaluation ends with what arrived."""
    evaluation_parallel_to_training: bool = False
    """Evaluate on the remote evaluation runners while the training step runs, with the
    weights from before that step (needs ``evaluation_num_env_runners >= 1``)."""
    evaluation_force_reset_envs_before_iteration: bool = True
    """Reset the evaluation envs before each evaluation; ``False`` continues the episodes the
    last evaluation left running (their returns then mix older weights in)."""
    evaluation_config: dict[str, Any] | None = None
    """Config overrides for evaluation, e.g. ``{"explore": False}`` or
    ``{"env_config": {...}}`` (any setting; ``num_env_runners`` is ``evaluation_num_env_runners``)."""
    evaluation_num_env_runners: int = Field(0, ge=0)
    """Remote evaluation env-runner actors (own placement-group bundles, restarted like the
    training ones); 0 evaluates in the driver."""
    custom_evaluation_function: Any = None
    """``fn(algorithm, eval_workers) -> dict`` of metrics, run instead of the built-in
    evaluation (``eval_workers``: the evaluation ``EnvRunnerGroup``, weights already synced).
    A function or ``"package.module:function"``."""
    always_attach_evaluation_results: bool = False
    """Report the latest evaluation results in iterations that do not evaluate too."""

    # --- exploration -------------------------------------------------------------
    explore: bool = True
    """Sample actions stochastically; ``False`` takes the distribution's mode."""
    exploration_config: dict[str, Any] = Field(default_factory=lambda: {"type": "StochasticSampling"})
    """``{"type": ..., **ctor_args}``: a built-in name (``EpsilonGreedy``, ``SoftQ``,
    ``StochasticSampling``, ``GaussianNoise``, ``OrnsteinUhlenbeckNoise``, ``Random``), an
    ``Exploration`` subclass or ``"package.module:Class"``; keys given without a new type
    update the current ones."""

    # --- reporting ---------------------------------------------------------------
    metrics_num_episodes_for_smoothing: int = Field(100, ge=1)
    """Episodes averaged in ``episode_return_mean`` and friends."""
    min_time_s_per_iteration: float = Field(0.0, ge=0)
    """Repeat training steps within one ``train()`` until this much time passed."""
    min_sample_timesteps_per_iteration: int = Field(0, ge=0)
    """Repeat training steps within one ``train()`` until this many env steps were sampled."""
    storage_path: str = "~/rltrainer_results"
    """Where ``<experiment_name>/<trial_id>/`` results and checkpoints go: a directory or ``s3://bucket/prefix``."""
    storage_options: dict[str, Any] = Field(default_factory=dict)
    """S3 settings over the AWS environment and config files: ``endpoint_url``, ``region_name``,
    ``profile_name``, ``verify``, ``connect_timeout``, ``read_timeout``, ``max_attempts``,
    ``retry_delay_s`` (never credentials: the config is saved in every checkpoint)."""
    experiment_name: str | None = None
    """Results folder name; defaults to ``<ALGO>_<env>``."""
    keep_per_episode_custom_metrics: bool = False
    """Report each custom metric's per-episode values (``custom_metrics/<name>``, a list)
    instead of their ``_mean``, ``_min`` and ``_max``."""

    # --- callbacks -----------------------------------------------------------------
    callbacks_class: Any = Field(default_factory=lambda: _default_callbacks())
    """A ``DefaultCallbacks`` subclass (or a list of them, run in order, or
    ``"package.module:Class"``) whose hooks run in the driver, env runners and learners."""

    # --- python environment (RLlib's) -------------------------------------------------
    extra_python_environs_for_driver: dict[str, str] = Field(default_factory=dict)
    """Environment variables set in the driver process when the algorithm is built."""
    extra_python_environs_for_worker: dict[str, str] = Field(default_factory=dict)
    """Environment variables set in every remote env runner (training and evaluation) as it
    starts, before its envs are made (e.g. an env's own settings, thread counts)."""

    # --- multi-agent ---------------------------------------------------------------
    policies: Any = None
    """``None``: one policy (``"default_policy"``, for every agent of a multi-agent env); a set of
    policy ids (spaces inferred from the agents mapped to each) or ``{id: PolicySpec(...)}``."""
    policy_mapping_fn: Any = None
    """``fn(agent_id, episode, worker, **kwargs) -> policy id``, asked once per agent and
    episode; a function or ``"package.module:function"``. Needed with more than one policy."""
    policies_to_train: Any = None
    """The policies that learn: ``None`` (all), a list of ids, or ``fn(policy_id, batch) -> bool``;
    the others act with fixed weights (opponents, snapshots)."""
    count_steps_by: Literal["env_steps", "agent_steps"] = "env_steps"
    """What ``train_batch_size`` and ``rollout_fragment_length`` count in a multi-agent env: env
    steps, or agent steps (each agent's action is one)."""
    policy_states_are_swappable: bool = False
    """RLlib's hint for swapping policies in and out of a capped policy map; rltrainer keeps every
    policy in memory, so it changes nothing (accepted for compatibility)."""
    observation_fn: Any = None
    """``fn(agent_obs, worker, base_env, policies, episode) -> agent_obs``: rewrite each env's
    observation dict before the policies see it (e.g. add other agents' observations)."""

    # --- checkpointing -----------------------------------------------------------
    checkpoint_frequency: int = Field(0, ge=0)
    """Save a checkpoint every this many ``train()`` calls (0: never automatically)."""
    checkpoint_at_end: bool = False
    """Save a checkpoint when an experiment run by ``rltrainer train`` stops."""
    num_to_keep: int | None = Field(None, ge=1)
    """Keep this many checkpoints of the trial (the newest, or the best by score); ``None``: all."""
    checkpoint_score_attribute: str | None = None
    """Result key ranking checkpoints for ``num_to_keep`` (``episode_return_mean``); ``None``: recency."""
    checkpoint_score_order: Literal["max", "min"] = "max"
    """Whether a higher or a lower ``checkpoint_score_attribute`` is better."""
    store_buffer_in_checkpoints: bool = False
    """Off-policy algorithms: save the replay buffer's contents in checkpoints (``replay_buffer.npz``)."""

    # --- debugging ---------------------------------------------------------------
    log_level: Literal["DEBUG", "INFO", "WARN", "WARNING", "ERROR"] = "WARN"
    """Level of the ``rltrainer`` logger."""
    on_nonfinite: Literal["stop", "skip_batch"] = "stop"
    """NaN or infinity in an env's observations or rewards, or in a loss: ``"stop"`` ends training
    with a ``NumericalError`` saying where (env runner, sub-env and step; or the loss terms);
    ``"skip_batch"`` warns and drops it (the fragment's steps, or the gradient step) instead."""
    seed: int | None = None
    """Seeds torch, numpy and the envs (each env gets its own derived seed), in the driver, the
    env runners and the learners: the same seed and config give the same results."""
    logger_config: dict[str, Any] | None = None
    """Result writers: ``{"type": NAME or [NAME, ...]}``, a NAME being ``"json"`` (result.json),
    ``"csv"`` (progress.csv), ``"tensorboard"`` (event file), Tune's ``JsonLogger``,
    ``CSVLogger``, ``TBXLogger`` or ``UnifiedLogger`` (all three), or a class
    (``"package.module:Class"``; see ``rltrainer.results``); ``None``: all three."""

    # --- offline data ------------------------------------------------------------
    input_: Any = "sampler"
    """Where training batches come from: ``"sampler"`` (the envs), a path, glob, directory or
    ``s3://`` prefix of recorded Parquet / JSON-lines files (or a list of those), or
    ``{source: probability}`` mixing sources (see ``rltrainer.offline.input_reader``)."""
    input_config: dict[str, Any] = Field(default_factory=dict)
    """``{"format": "parquet" | "json"}``: read every input file as that format (default: by
    each file's suffix, .parquet or .jsonl/.json)."""
    shuffle_buffer_size: int = Field(0, ge=0)
    """Rows of recorded episode pieces held to draw from at random (0: read in file order)."""
    actions_in_input_normalized: bool = False
    """Box actions in the input are already the policy's (normalized to [-1, 1], as rltrainer's
    output writer records them); ``False``: they are in the env's units and get normalized."""
    output: str | None = None
    """Write every sampled batch to: ``None`` (nowhere), ``"logdir"`` (``<trial folder>/output``),
    a directory, or ``"s3://bucket/prefix"`` (see ``rltrainer.offline.output_writer``)."""
    output_config: dict[str, Any] = Field(default_factory=dict)
    """``{"format": "parquet" | "json", "compression": ...}``; Parquet (snappy) by default,
    ``"json"`` writes JSON lines; Parquet codecs: snappy, zstd, gzip, brotli, lz4, none."""
    output_max_file_size: int = Field(64 * 1024 * 1024, ge=1)
    """Bytes after which an output file is complete and the next one begins."""

    # --- fault tolerance (RLlib's names and meanings) ------------------------------
    restart_failed_env_runners: bool = True
    """Replace a remote env runner that died or timed out (its sample for that round is lost)."""
    ignore_env_runner_failures: bool = False
    """Without restarts: drop failed env runners and go on with the others."""
    max_num_env_runner_restarts: int = Field(1000, ge=0)
    """Restarts allowed over the whole run before a failure is fatal."""
    delay_between_env_runner_restarts_s: float = Field(60.0, ge=0)
    """Wait this long after a failure before starting the replacement (training goes on meanwhile)."""
    restart_failed_sub_environments: bool = False
    """Recreate an env runner's envs when one raises, instead of failing the runner."""
    num_consecutive_env_runner_failures_tolerance: int = Field(100, ge=1)
    """Failures in a row of one env runner after which training stops with an error."""
    env_runner_health_probe_timeout_s: float = Field(30.0, gt=0)
    """How long a restarted env runner has to answer its first health probe."""
    restart_failed_learners: bool = True
    """Replace the learner actors when one dies (all of them, in their bundles, from the driver's
    copy of the last update's state) and run the failed update again."""
    max_num_learner_restarts: int = Field(1000, ge=0)
    """Learner-group restarts allowed over the whole run before a dead learner is fatal."""
    learner_restart_timeout_s: float = Field(600.0, gt=0)
    """How long restarted learners have to come up (a lost node's bundle waits for a new node)."""

    # --- resources ---------------------------------------------------------------
    num_gpus: float = Field(0, ge=0)
    """GPUs for the driver's local learner."""
    num_cpus_for_main_process: int = Field(1, ge=1)
    """CPUs of the driver process; also its torch threads (one is fastest for small networks)."""
    num_cpus_per_env_runner: float = Field(1, ge=0)
    """CPUs reserved for each remote env runner."""
    num_gpus_per_env_runner: float = Field(0, ge=0)
    """GPUs reserved for each remote env runner."""
    custom_resources_per_env_runner: dict[str, float] = Field(default_factory=dict)
    """Custom Ray resources each env runner requires (ties them to rollout nodes)."""
    num_learners: int = Field(0, ge=0)
    """Remote learner actors; 0 trains in the driver."""
    num_gpus_per_learner: float = Field(0, ge=0)
    """GPUs per learner (fractions allowed)."""
    num_cpus_per_learner: float = Field(1, ge=0)
    """CPUs per learner."""
    custom_resources_per_learner: dict[str, float] = Field(default_factory=dict)
    """Custom Ray resources each learner requires (ties them to learner nodes)."""
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    """Strategy of the algorithm's placement group."""
    placement_timeout_s: float = Field(60.0, gt=0)
    """How long to wait for the cluster to place all bundles before failing."""
    fake_gpus: bool = False
    """RLlib's ``_fake_gpus``: the GPU settings' layout on a machine without GPUs. Nothing asks
    Ray for a GPU, learners and inference stay on the CPU, and env runners given
    ``num_gpus_per_env_runner`` act through the GPU's code path (one torch call per batch)
    instead of numpy: to test a GPU config where there is none."""

    framework_str: Literal["torch"] = "torch"
    """Only torch is supported; ``.framework("torch")`` is accepted for compatibility."""
    torch_compile_learner: bool = False
    """Run the learners' training forward pass through ``torch.compile`` (see
    ``torch_compile_learner_what_to_compile``)."""
    torch_compile_learner_what_to_compile: Literal["forward_train", "complete_update"] = "forward_train"
    """``"forward_train"``: the module's forward pass; ``"complete_update"``: the whole loss of a
    minibatch (forward pass and loss terms; their backward is compiled with them), for the
    learners that compute one (PPO, APPO, IMPALA, A2C/A3C, PG, MARWIL/BC, DQN)."""
    torch_compile_learner_dynamo_backend: str = "inductor"
    """The ``torch.compile`` backend of the learners (``torch._dynamo.list_backends()``)."""
    torch_compile_learner_dynamo_mode: CompileMode | None = None
    """The ``torch.compile`` mode of the learners (None: torch's default)."""
    torch_compile_worker: bool = False
    """Env runners act through a ``torch.compile``d model (one torch call per batch) instead of
    numpy inference."""
    torch_compile_worker_dynamo_backend: str = "inductor"
    """The ``torch.compile`` backend of the env runners (RLlib's default ``"onnxrt"`` is not a
    backend of torch 2.13)."""
    torch_compile_worker_dynamo_mode: CompileMode | None = None
    """The ``torch.compile`` mode of the env runners (None: torch's default)."""

    _algo_class: type | None = PrivateAttr(default=None)
    # ``output`` as the driver resolved it ("logdir" -> <trial folder>/output), set by the algorithm.
    _output_path: str | None = PrivateAttr(default=None)
    # ``record_env``'s folder as the driver resolved it (True -> <trial folder>/videos).
    _video_dir: str | None = PrivateAttr(default=None)
    # ``input_`` with its files listed, set by the algorithm in the driver (resolve_input).
    _input_sources: list[Any] | None = PrivateAttr(default=None)
    # Tune search spaces by field (``training(lr=tune.grid_search([...]))``): ``to_dict()`` hands
    # them to Tune; the field keeps its value until a trial's config resolves them.
    _search_space: dict[str, Any] = PrivateAttr(default_factory=dict)
    # Whether the env is a MultiAgentEnv (created once to find out; None: not asked yet).
    _env_is_multi_agent: bool | None = PrivateAttr(default=None)

    def __init__(self, algo_class: type | None = None, **data: Any) -> None:
        super().__init__(**data)
        self._algo_class = algo_class

    # --- builder methods -----------------------------------------------------------
    def environment(self, env: Any = NOT_PROVIDED, **kwargs: Any) -> AlgorithmConfig:
        """Which env to train on and how its observations, actions and rewards are treated
        (``env=None``: none, for configs that only read ``offline_data(input_=...)``)."""
        if env is not NOT_PROVIDED:
            kwargs["env"] = env
        return self._update("environment", kwargs)

    def env_runners(self, **kwargs: Any) -> AlgorithmConfig:
        """How many env runners sample, with how many vectorized envs, in what batch mode."""
        return self._update("env_runners", kwargs)

    rollouts = env_runners  # the name of RLlib 2.x's documents (with num_rollout_workers=...)

    def training(self, **kwargs: Any) -> AlgorithmConfig:
        """Optimization settings (subclasses add their algorithm's own)."""
        return self._update("training", kwargs)

    def evaluation(self, **kwargs: Any) -> AlgorithmConfig:
        """When and how long to evaluate, with which config overrides."""
        return self._update("evaluation", kwargs)

    def exploration(self, **kwargs: Any) -> AlgorithmConfig:
        """Whether actions are sampled (explore) or the distribution's mode is taken."""
        return self._update("exploration", kwargs)

    def reporting(self, **kwargs: Any) -> AlgorithmConfig:
        """Metric smoothing, iteration length, and where results are written."""
        return self._update("reporting", kwargs)

    def checkpointing(self, **kwargs: Any) -> AlgorithmConfig:
        """Automatic checkpoints during and at the end of training."""
        return self._update("checkpointing", kwargs)

    def fault_tolerance(self, **kwargs: Any) -> AlgorithmConfig:
        """What happens when a remote env runner (or one of its envs) fails."""
        return self._update("fault_tolerance", kwargs)

    def callbacks(self, callbacks_class: Any = None, **kwargs: Any) -> AlgorithmConfig:
        """Which ``DefaultCallbacks`` subclass (or list of them) runs at the hooks of training."""
        if callbacks_class is not None:
            kwargs["callbacks_class"] = callbacks_class
        return self._update("callbacks", kwargs)

    def python_environment(self, **kwargs: Any) -> AlgorithmConfig:
        """Environment variables for the driver and the remote env runners (RLlib's section)."""
        return self._update("python_environment", kwargs)

    def multi_agent(self, **kwargs: Any) -> AlgorithmConfig:
        """Several policies: which exist, which agent acts with which, which learn (README,
        "Multi-agent training")."""
        return self._update("multi_agent", kwargs)

    def debugging(self, **kwargs: Any) -> AlgorithmConfig:
        """Log level, random seed and result writers."""
        return self._update("debugging", kwargs)

    def offline_data(self, **kwargs: Any) -> AlgorithmConfig:
        """Where and how env runners write the trajectories they sample."""
        return self._update("offline_data", kwargs)

    def resources(self, **kwargs: Any) -> AlgorithmConfig:
        """CPUs, GPUs and custom resources for learners and env runners."""
        return self._update("resources", kwargs)

    def framework(self, framework: str = "torch", **kwargs: Any) -> AlgorithmConfig:
        """Accepted for RLlib compatibility: only ``"torch"`` is supported (``eager_tracing=False``
        and the other ``DOCUMENTED_SETTINGS`` as there)."""
        return self._update("framework", {"framework_str": framework, **kwargs})

    # --- dict round trip -----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """All settings as a flat, JSON-serializable dict (``from_dict`` reads it back)."""
        from rltrainer.env.spaces import space_to_json

        out = self.model_dump(exclude={"model"})
        out["model"] = self.model.model_dump()
        if isinstance(self.model.custom_model, type):
            out["model"]["custom_model"] = object_path(self.model.custom_model)
        if "lambda_" in out:
            out["lambda"] = out.pop("lambda_")
        out["input"] = out.pop("input_")  # the documents' key (``input_`` only in Python calls)
        if callable(self.input_):  # a function of the IOContext (e.g. making a PolicyServerInput)
            out["input"] = object_path(self.input_)
        out["framework"] = out.pop("framework_str")
        if isinstance(self.env, type):
            out["env"] = object_path(self.env)
        from rltrainer.policy_spec import policies_to_json

        out["policies"] = policies_to_json(self.policies)
        for key in (
            "env_task_fn",
            "custom_evaluation_function",
            "policy_mapping_fn",
            "policies_to_train",
            "observation_fn",
        ):
            if callable(getattr(self, key)):
                out[key] = object_path(getattr(self, key))
        from rltrainer.algorithms.callbacks import callbacks_to_json

        out["callbacks_class"] = callbacks_to_json(self.callbacks_class)
        if self.logger_config is not None:
            from rltrainer.results import logger_config_to_json

            out["logger_config"] = logger_config_to_json(self.logger_config)
        kind = self.exploration_config.get("type")
        if isinstance(kind, type):
            out["exploration_config"]["type"] = object_path(kind)
        for key in ("observation_space", "action_space"):
            if out[key] is not None:
                out[key] = space_to_json(out[key])
        out["lr"] = self.lr if isinstance(self.lr, float) else [list(p) for p in self.lr]
        for key, space in self._search_space.items():
            out[_DICT_NAMES.get(key, key)] = space
        return out

    @property
    def search_space(self) -> dict[str, Any]:
        """The settings given as Tune search spaces (empty: a plain config, ``build()`` works)."""
        return dict(self._search_space)

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> AlgorithmConfig:
        """Build a config from a flat dict (``to_dict`` output or RLlib-style keys)."""
        return cls().update_from_dict(config)

    def update_from_dict(self, config: dict[str, Any]) -> AlgorithmConfig:
        """Set every key of a flat dict, validating each; RLlib's older names are accepted."""
        if not isinstance(config, dict):
            raise ConfigError(f"a config must be a dict of settings, got {type(config).__name__}")
        from rltrainer.env.spaces import space_from_json

        values = {}
        for key, value in config.items():
            name = ALIASES.get(key, key)
            if name in ("observation_space", "action_space") and isinstance(value, dict):
                value = space_from_json(value)
            values[name] = value
        return self._update("config", values, allowed=tuple(self._all_fields()))

    # RLlib's dict access (``config["lr"]``, ``config["num_workers"] = 2``), older names included.
    def __getitem__(self, key: str) -> Any:
        if key not in self:
            raise KeyError(key)
        return getattr(self, ALIASES.get(key, key))

    def __setitem__(self, key: str, value: Any) -> None:
        self.update_from_dict({key: value})

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and ALIASES.get(key, key) in type(self).model_fields

    def get(self, key: str, default: Any = None) -> Any:
        """``config[key]`` if ``key`` is a setting (or an older name of one), else ``default``."""
        try:
            return self[key]
        except KeyError:
            return default

    def copy(self, copy_frozen: bool | None = None) -> AlgorithmConfig:  # noqa: ARG002
        """An independent deep copy (RLlib's ``copy_frozen`` argument is accepted and ignored)."""
        return self.model_copy(deep=True)

    # --- building ------------------------------------------------------------------
    @property
    def algo_class(self) -> type | None:
        """The algorithm ``build()`` creates: the one given, else the registry's ``ALGORITHM``."""
        if self._algo_class is None and self.ALGORITHM is not None:
            from rltrainer.algorithms.registry import get_algorithm_class

            return get_algorithm_class(self.ALGORITHM)
        return self._algo_class

    @classmethod
    def result_keys(cls) -> list[str]:
        """Every numeric key the algorithm's ``train()`` reports (what stop criteria may name)."""
        from rltrainer.results import result_keys_for

        return result_keys_for(cls.STAT_KEYS)

    def build(self, env: Any = None) -> Any:
        """Validate and create the algorithm (RLlib's ``build_algo``)."""
        if env is not None:
            self.environment(env)
        if self.algo_class is None:
            raise ConfigError(
                "this config has no algorithm: build from an algorithm's config, e.g. PPOConfig()"
            )
        return self.algo_class(config=self.copy())

    build_algo = build

    def validate(self) -> None:  # type: ignore[override]
        """Check settings that depend on each other; raises ``ConfigError`` saying what to change."""
        if self._search_space:
            raise ConfigError(
                f"{', '.join(sorted(self._search_space))}: search spaces are resolved by Ray Tune; run "
                f'this config with tune.Tuner("{self.ALGORITHM or "PPO"}", param_space=config) or '
                "`rltrainer train`, which runs a sweep"
            )
        if self.env is None and not self.trains_without_env:
            raise ConfigError(
                "no env set: call .environment('CartPole-v1') (or another env); a config that only "
                "reads offline_data(input_=...) may set env=None with observation_space and action_space"
            )
        if isinstance(self.lr, list):
            _check_schedule("lr", self.lr)
        if self.evaluation_config:
            unknown = self._unknown_keys(self.evaluation_config)
            if unknown:
                raise ConfigError(
                    f"evaluation_config has unknown key(s) {unknown}; "
                    f"allowed: {', '.join(self._all_fields())}"
                )
            try:
                self.get_evaluation_config()
            except ConfigError as err:
                raise ConfigError(f"evaluation_config: {str(err).removeprefix('config(): ')}") from None
        _check_evaluation(self)
        _check_offline(self)
        if self.env_task_fn is not None and uses_remote_envs(self):
            raise ConfigError(REMOTE_ENVS_WITHOUT_TASKS)
        if self.policies is not None or self.policy_mapping_fn is not None:
            check_multi_agent(self, imports=False)  # (a MultiAgentEnv alone: checked at build())

    @property
    def is_multi_agent(self) -> bool:
        """Whether this config trains in a multi-agent env: ``multi_agent(policies=...)`` or
        ``policy_mapping_fn`` was set, or the env is a ``MultiAgentEnv`` (or a PettingZoo env)."""
        if self.policies is not None or self.policy_mapping_fn is not None:
            return True
        if self._env_is_multi_agent is None:
            from rltrainer.env.registry import env_is_multi_agent

            self._env_is_multi_agent = env_is_multi_agent(self.env)
        return self._env_is_multi_agent

    def get_multi_agent_setup(self) -> dict[str, Any]:
        """``{policy id: PolicySpec}`` of a multi-agent config (``{"default_policy": ...}`` when
        no ``policies`` were given)."""
        from rltrainer.policy_spec import DEFAULT_POLICY_ID, PolicySpec

        return dict(self.policies) if self.policies is not None else {DEFAULT_POLICY_ID: PolicySpec()}

    def policy_config(self, policy_id: str) -> AlgorithmConfig:
        """This config with policy ``policy_id``'s own settings (its ``PolicySpec.config``) applied."""
        spec = self.get_multi_agent_setup().get(policy_id)
        if spec is None or not spec.config:
            return self
        overrides = dict(spec.config)
        if isinstance(overrides.get("model"), dict):
            overrides["model"] = {**self.model.model_dump(), **overrides["model"]}
        clone = self.copy()
        try:
            clone.update_from_dict(overrides)
        except ConfigError as err:
            raise ConfigError(
                f"policy {policy_id!r}'s config: {str(err).removeprefix('config(): ')}"
            ) from None
        return clone

    def get_rollout_fragment_length(self) -> int:
        """Steps per env per sample call, deriving "auto" from the train batch size."""
        if self.rollout_fragment_length != "auto":
            return self.rollout_fragment_length
        envs = max(self.num_env_runners, 1) * self.num_envs_per_env_runner
        return max(1, -(-self.train_batch_size // envs))

    def get_output_path(self) -> str | None:
        """Where env runners write sampled batches: ``output`` as the algorithm resolved it in the
        driver (``"logdir"``: ``<trial folder>/output``; ``None`` before one was built)."""
        if self.output == "logdir":
            return self._output_path
        return self._output_path or self.output

    @property
    def is_offline(self) -> bool:
        """Whether training batches come from ``input_`` (files, a policy server, a function)
        rather than, or as well as, the envs."""
        from rltrainer.offline.input_sources import SAMPLER

        return not isinstance(self.input_, str) or self.input_ != SAMPLER

    @property
    def trains_without_env(self) -> bool:
        """``input_`` has no ``"sampler"`` source and the spaces are given: no env is needed."""
        from rltrainer.offline.input_sources import SAMPLER, parse_input

        sampled = any(isinstance(s, str) and s == SAMPLER for s, _ in parse_input(self.input_))
        return not sampled and self.observation_space is not None and self.action_space is not None

    def get_input_sources(self) -> list[Any]:
        """``input_`` as ``InputSource``s with their files listed (listed here if the algorithm
        has not done it in the driver yet)."""
        if self._input_sources is None:
            from rltrainer.offline.input_sources import resolve_input

            self._input_sources = resolve_input(self.input_, self.input_config, self.storage_options)
        return self._input_sources

    def get_evaluation_config(self) -> AlgorithmConfig:
        """This config with ``evaluation_config`` applied (``env_config`` is merged into the
        training one, as RLlib does: keys not given keep their values)."""
        clone = self.copy()
        if self.evaluation_config:
            overrides = dict(self.evaluation_config)
            if isinstance(overrides.get("env_config"), dict):
                overrides["env_config"] = _deep_merge(self.env_config, overrides["env_config"])
            clone.update_from_dict(overrides)
        return clone

    @property
    def env_name(self) -> str:
        """A short name of the env, safe as part of a folder name ("ALE/Pong-v5" -> "ALE-Pong-v5")."""
        if isinstance(self.env, type):
            return self.env.__name__
        return str(self.env).rsplit(":", 1)[-1].replace("/", "-").replace("\\", "-")

    # --- internals -----------------------------------------------------------------
    def _unknown_keys(self, settings: dict[str, Any]) -> list[str]:
        """The keys of ``settings`` that name no setting (nor an older name of one), sorted."""
        return sorted(set(settings) - set(self._all_fields()) - set(ALIASES))

    @classmethod
    def _all_fields(cls) -> list[str]:
        return [name for name in cls.model_fields if name != "framework_str"] + ["framework_str"]

    def _update(
        self, section: str, kwargs: dict[str, Any], allowed: tuple[str, ...] | None = None
    ) -> AlgorithmConfig:
        allowed = allowed if allowed is not None else self.SECTIONS[section]
        for key, value in kwargs.items():
            if key not in allowed and ALIASES.get(key) in allowed:
                key = ALIASES[key]  # noqa: PLW2901 - RLlib's older name for the field
            if key in DOCUMENTED_SETTINGS:
                _check_documented_setting(section, key, value)
                continue
            if key not in allowed:
                suggestion = self._suggestion(key, allowed)
                raise ConfigError(
                    f"{section}(): unknown key '{key}'{suggestion}; allowed: {_shown(section, allowed)}"
                )
            if holds_search_space(value):
                self._set_search_space(section, key, value, allowed)
                continue
            self._search_space.pop(key, None)
            if key in ("input_", "input_config"):
                self._input_sources = None  # listed again from the new setting
            if key == "model":
                value = self._merged_model(value)
            if key == "exploration_config":
                value = self._merged_exploration_config(section, value)
            try:
                setattr(self, key, value)
            except ValidationError as err:
                problem = err.errors()[0]["msg"]
                expected = type(self).model_fields[key].description or ""
                # storage_options might hold secrets by mistake: never echo their values.
                got = (
                    f"keys {sorted(value)}"
                    if key == "storage_options" and isinstance(value, dict)
                    else repr(value)
                )
                raise ConfigError(
                    f"{section}(): invalid value for '{key}': {problem} (got {got}). {key}: {expected}"
                ) from None
        if "log_level" in kwargs:
            from rltrainer.utils.debugging import set_log_level

            set_log_level(self.log_level)
        return self

    def _set_search_space(self, section: str, key: str, space: Any, allowed: tuple[str, ...]) -> None:
        """Keep a Tune search space for ``key`` once every value it can take is valid here."""
        for candidate in candidates(space):
            try:
                self.copy()._update(section, {key: candidate}, allowed)
            except ConfigError as err:
                detail = str(err).removeprefix(f"{section}(): ")
                raise ConfigError(
                    f"{section}(): the search space of '{key}' can take {candidate!r}, which is not "
                    f"allowed: {detail}"
                ) from None
        if key == "model":  # Tune resolves the nested spaces inside the full model dict
            space = {**self.model.model_dump(), **space}
        self._search_space[key] = space

    def _suggestion(self, key: str, allowed: tuple[str, ...]) -> str:
        """Where an unknown key belongs: another builder method's field (or RLlib's older name
        of one), else the closest allowed name."""
        name = ALIASES.get(key, key)
        owner = next((section for section, fields in self.SECTIONS.items() if name in fields), None)
        if owner is not None:
            older = f"RLlib's older name of '{name}', " if name != key else ""
            return f" ({older}set by .{owner}())"
        hint = difflib.get_close_matches(key, allowed, n=1)
        return f" (did you mean '{hint[0]}'?)" if hint else ""

    def _merged_exploration_config(self, section: str, value: Any) -> dict[str, Any]:
        """RLlib's rule: the same (or no) type updates the current settings, a new type replaces them."""
        from rltrainer.core.exploration import check_exploration_config

        if not isinstance(value, dict):
            raise ConfigError(f"{section}(): 'exploration_config' must be a dict, got {type(value).__name__}")
        current = self.exploration_config
        same_type = "type" not in value or value["type"] == current.get("type")
        merged = {**current, **value} if same_type else dict(value)
        try:
            check_exploration_config(merged)
        except ValueError as err:
            raise ConfigError(f"{section}(): {err}") from None
        return merged

    def get_policy_class(self) -> type:
        """The ``Policy`` subclass env runners act with: the algorithm's ``policy_class``, looked
        up in the registry for a registered algorithm (env-runner and learner actors call this:
        importing the algorithm would import Ray Tune in each, 0.7 s of its start)."""
        from rltrainer.policy import Policy

        if self._algo_class is None and self.ALGORITHM is not None:
            from rltrainer.algorithms.registry import get_policy_class

            return get_policy_class(self.ALGORITHM)
        return getattr(self.algo_class, "policy_class", Policy)

    def _merged_model(self, value: Any) -> ModelConfig:
        if isinstance(value, ModelConfig):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"training(): 'model' must be a dict, got {type(value).__name__}")
        merged = {**self.model.model_dump(), **value}
        try:
            return ModelConfig(**merged)
        except ValidationError as err:
            problem = err.errors()[0]
            where = ".".join(str(p) for p in problem["loc"])
            if problem["type"] == "extra_forbidden":
                hint = difflib.get_close_matches(where, list(ModelConfig.model_fields), n=1)
                guess = f" (did you mean '{hint[0]}'?)" if hint else ""
                raise ConfigError(
                    f"training(): unknown model setting '{where}'{guess}; "
                    f"allowed keys: {', '.join(ModelConfig.model_fields)}"
                ) from None
            message = problem["msg"].removeprefix("Value error, ")
            raise ConfigError(f"training(): invalid model setting '{where}': {message}") from None

    @field_validator("env")
    @classmethod
    def _env_spec(cls, env: Any) -> Any:
        if env is None or isinstance(env, str) or (isinstance(env, type) and issubclass(env, gym.Env)):
            return env
        raise ValueError('must be an env name, "package.module:Class", or a gymnasium.Env subclass')

    @field_validator("env_task_fn")
    @classmethod
    def _env_task_fn(cls, fn: Any) -> Any:
        if fn is None or callable(fn) or (isinstance(fn, str) and ":" in fn.strip(":")):
            return fn  # a name is imported when the algorithm is built (not by the operator)
        raise ValueError(
            'must be a function (train_results, env, env_ctx) -> task, or "package.module:function"'
        )

    @field_validator("policies", mode="before")
    @classmethod
    def _policies(cls, value: Any) -> Any:
        from rltrainer.policy_spec import parse_policies

        return parse_policies(value)

    @field_validator("policies_to_train", mode="before")
    @classmethod
    def _policies_to_train(cls, value: Any) -> Any:
        from rltrainer.policy_spec import parse_policies_to_train

        return parse_policies_to_train(value)

    @field_validator("policy_mapping_fn")
    @classmethod
    def _policy_mapping_fn(cls, fn: Any) -> Any:
        from rltrainer.policy_spec import check_callable_setting

        return check_callable_setting(fn, "(agent_id, episode, worker, **kwargs) -> policy id")

    @field_validator("observation_fn")
    @classmethod
    def _observation_fn(cls, fn: Any) -> Any:
        from rltrainer.policy_spec import check_callable_setting

        return check_callable_setting(fn, "(agent_obs, worker, base_env, policies, episode) -> agent_obs")

    @field_validator("custom_evaluation_function")
    @classmethod
    def _custom_evaluation_function(cls, fn: Any) -> Any:
        if fn is None or callable(fn) or (isinstance(fn, str) and ":" in fn.strip(":")):
            return fn  # a name is imported when the algorithm is built (not by the operator)
        raise ValueError('must be a function (algorithm, eval_workers) -> dict, or "package.module:function"')

    @field_validator("callbacks_class")
    @classmethod
    def _callbacks_class(cls, value: Any) -> Any:
        from rltrainer.algorithms.callbacks import check_callbacks_class

        try:
            return check_callbacks_class(value)
        except ConfigError as err:
            raise ValueError(str(err).removeprefix("callbacks(): ")) from None

    @field_validator("logger_config")
    @classmethod
    def _logger_config(cls, config: dict[str, Any] | None) -> dict[str, Any] | None:
        from rltrainer.results import check_logger_config

        return config if config is None else check_logger_config(config)

    @field_validator("output")
    @classmethod
    def _output(cls, output: str | None) -> str | None:
        if output is not None and not output.strip():
            raise ValueError("must be None, 'logdir', a directory or 's3://bucket/prefix', not empty")
        return output

    @field_validator("input_", mode="before")
    @classmethod
    def _input(cls, input_: Any) -> Any:
        from rltrainer.offline.input_sources import parse_input

        parse_input(input_)
        return input_

    @field_validator("off_policy_estimation_methods")
    @classmethod
    def _estimators(cls, methods: dict[str, Any]) -> dict[str, Any]:
        from rltrainer.offline.estimators import check_estimators

        return check_estimators(methods)

    @field_validator("input_config")
    @classmethod
    def _input_config(cls, config: dict[str, Any]) -> dict[str, Any]:
        from rltrainer.offline.input_sources import check_input_config

        return check_input_config(config)

    @field_validator("output_config")
    @classmethod
    def _output_config(cls, config: dict[str, Any]) -> dict[str, Any]:
        from rltrainer.offline.output_writer import check_output_config

        return check_output_config(config)

    @field_validator("storage_options")
    @classmethod
    def _storage_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        from rltrainer.storage import check_storage_options

        return check_storage_options(options)

    @field_validator("lr")
    @classmethod
    def _non_negative_lr(cls, lr: Any) -> Any:
        values = [lr] if isinstance(lr, float) else [v for _, v in lr]
        if any(v < 0 for v in values):
            raise ValueError("learning rates must be >= 0")
        return lr

    @field_validator("observation_space", "action_space")
    @classmethod
    def _space(cls, space: Any) -> Any:
        if space is None or isinstance(space, gym.Space):
            return space
        raise ValueError("must be a gymnasium.spaces.Space")


def _shown(section: str, allowed: tuple[str, ...]) -> str:
    """The allowed keys as the caller writes them: a dict's (``lambda``, ``framework``) for
    ``from_dict``/``--config``, the builder's keyword arguments (``lambda_``) otherwise."""
    names = [_DICT_NAMES.get(name, name) for name in allowed] if section == "config" else allowed
    return ", ".join(names)


def _check_documented_setting(section: str, key: str, value: Any) -> None:
    """Accept ``value`` when it is what rltrainer does anyway, else say why it cannot be had."""
    accepted, reason = DOCUMENTED_SETTINGS[key]
    choices = accepted if isinstance(accepted, AnyOf) else (accepted,)
    if any(value == choice and type(value) is type(choice) for choice in choices):
        return
    raise ConfigError(
        f"{section}(): {key}={value!r} cannot take effect in rltrainer ({reason}); "
        f"remove it or set {key}={choices[0]!r}"
    )


def _default_callbacks() -> type:
    from rltrainer.algorithms.callbacks import DefaultCallbacks

    return DefaultCallbacks


def _deep_merge(base: dict[str, Any], updates: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``updates``, nested dicts merged key by key."""
    merged = dict(base)
    for key, value in updates.items():
        old = merged.get(key)
        merged[key] = _deep_merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return merged


def _check_evaluation(config: AlgorithmConfig) -> None:
    """RLlib's rules: parallel evaluation needs remote evaluation runners; "auto" needs parallel."""
    if config.evaluation_parallel_to_training and config.evaluation_num_env_runners == 0:
        raise ConfigError(
            "evaluation_parallel_to_training=True needs remote evaluation runners: set "
            "evaluation_num_env_runners >= 1, or evaluation_parallel_to_training=False"
        )
    if config.evaluation_duration == "auto" and not config.evaluation_parallel_to_training:
        raise ConfigError(
            "evaluation_duration='auto' (evaluate as long as the training step runs) needs "
            "evaluation_parallel_to_training=True; otherwise give a number of episodes or timesteps"
        )


def _check_offline(config: AlgorithmConfig) -> None:
    """What offline input cannot be combined with (files hold filtered, flattened rows)."""
    from rltrainer.offline.input_sources import SAMPLER, SERVER, parse_input

    if config.off_policy_estimation_methods and not _recorded_input(config):
        raise ConfigError(
            "off_policy_estimation_methods estimate from recorded episodes: set "
            "offline_data(input_=PATH) or evaluation_config={'input_': PATH}"
        )
    if not config.is_offline:
        return
    if config.env is None and config.evaluation_interval and not config.off_policy_estimation_methods:
        raise ConfigError(
            "evaluation runs episodes in an env, and this config has none (env=None): set "
            ".environment(ENV), off_policy_estimation_methods (estimates from recorded episodes), "
            "or evaluation_interval=None"
        )
    files = [
        s for s, _ in parse_input(config.input_) if isinstance(s, str | list) and s not in (SAMPLER, SERVER)
    ]
    if files and config.observation_filter != "NoFilter":
        raise ConfigError(
            f"offline_data(input_=...) reads observations as they were recorded, so "
            f"observation_filter={config.observation_filter!r} cannot apply to them; set "
            "observation_filter='NoFilter'"
        )
    if config.model.use_lstm:
        raise ConfigError(
            "offline_data(input_=...) does not feed recurrent policies (model.use_lstm=True): "
            "recorded rows carry no LSTM states; train from input_='sampler' or without use_lstm"
        )


def check_multi_agent(config: AlgorithmConfig, imports: bool = True) -> None:
    """What a multi-agent config must hold together (spaces and the mapping are checked when
    the env runners are built, against the env's agents). ``imports=False`` (``validate()``, which
    the operator runs) imports no user code: the mapping and ``observation_fn`` are imported by
    the driver, at ``build()``."""
    from rltrainer.policy_spec import mapping_function

    name = config.ALGORITHM or type(config).__name__
    if not config.SUPPORTS_MULTI_AGENT:
        raise ConfigError(
            f"{name} trains one policy on single-agent envs; multi-agent configs (policies, "
            "policy_mapping_fn, or a MultiAgentEnv) train with PPO, DQN, SAC, DDPG or TD3"
        )
    policies = config.get_multi_agent_setup()
    if isinstance(config.policies_to_train, list):
        unknown = [pid for pid in config.policies_to_train if pid not in policies]
        if unknown:
            raise ConfigError(
                f"multi_agent(): policies_to_train names unknown policy {unknown[0]!r}; "
                f"policies: {', '.join(policies)}"
            )
    if imports:
        from rltrainer.utils.import_paths import resolve_function

        mapping_function(config)  # ConfigError: several policies without a mapping, or a bad name
        resolve_function("observation_fn", config.observation_fn)
    elif config.policy_mapping_fn is None and len(policies) > 1:
        mapping_function(config)  # its ConfigError: several policies need a mapping
    use_lstm = config.model.use_lstm
    for pid, spec in policies.items():
        if spec.config:
            unknown = config._unknown_keys(spec.config)
            if unknown:
                raise ConfigError(
                    f"policy {pid!r}'s config has unknown key(s) {unknown}; allowed: any setting of "
                    f"{type(config).__name__} (e.g. lr, gamma, model)"
                )
            use_lstm = use_lstm or config.policy_config(pid).model.use_lstm
    if use_lstm:
        raise ConfigError(
            "model.use_lstm: recurrent policies train on single-agent envs only; multi-agent "
            "policies are feed-forward (set use_lstm=False)"
        )
    if config.is_offline:
        raise ConfigError(
            "offline_data(input_=...) feeds single-agent training; multi-agent configs sample their envs"
        )
    if config.compress_observations:
        raise ConfigError(
            "compress_observations compresses single-agent rollouts; multi-agent runners send theirs as "
            "they are: remove it"
        )
    if config.env_task_fn is not None:
        raise ConfigError(
            "env_task_fn sets tasks on single-agent TaskSettableEnvs; a multi-agent config cannot use it"
        )
    if config.remote_worker_envs:
        raise ConfigError(
            "remote_worker_envs puts single-agent envs in actors of their own; multi-agent runners step "
            "their envs in their own process: remove it (or add env runners for slow envs)"
        )


def _recorded_input(config: AlgorithmConfig) -> bool:
    """Whether the training or the evaluation ``input_`` names recorded files."""
    from rltrainer.offline.input_sources import SAMPLER, SERVER, parse_input

    overrides = config.evaluation_config or {}
    inputs = [config.input_, overrides.get("input_", overrides.get("input"))]
    return any(
        isinstance(source, str | list) and source not in (SAMPLER, SERVER)
        for input_ in inputs
        if input_ is not None
        for source, _ in parse_input(input_)
    )


def _check_schedule(name: str, schedule: PiecewiseSchedule) -> None:
    steps = [t for t, _ in schedule]
    if not schedule or steps != sorted(steps) or steps[0] < 0:
        raise ConfigError(
            f"{name} schedule must be a non-empty list of [timestep, value] pairs with "
            f"non-negative, increasing timesteps; got {schedule}"
        )


__all__ = ["ALIASES", "DOCUMENTED_SETTINGS", "AlgorithmConfig", "ModelConfig"]  # the tables: re-exported
