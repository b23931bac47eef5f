"""The network of a policy (RLlib's ``model`` dict): ``training(model={...})``'s ``ModelConfig``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PositiveInt, field_validator

from rltrainer.errors import ConfigError


def _positive_sizes(sizes: list[int]) -> list[int]:
    if any(s < 1 for s in sizes):
        raise ValueError("every hidden layer size must be >= 1")
    return sizes


#: Sizes of hidden layers, each >= 1.
LayerSizes = Annotated[list[int], AfterValidator(_positive_sizes)]


Activation = Literal["tanh", "relu", "elu", "silu", "linear"]


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

    model_config = ConfigDict(extra="forbid", strict=True)

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
