"""RLlib's ``DefaultModelConfig`` (``from rltrainer.core.rl_module.default_model_config import
DefaultModelConfig``): the model settings of RLlib's new API stack, with RLlib's names and
defaults. ``config.rl_module(model_config=DefaultModelConfig(...))`` (or a dict of the same keys)
sets the equivalent ``training(model={...})`` settings; what has no equivalent is refused at the
call, saying why (``model_settings``). No torch is imported here."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from rltrainer.errors import ConfigError

#: Settings with the same name and meaning in rltrainer's ``model``.
_SAME = (
    "fcnet_hiddens",
    "fcnet_activation",
    "conv_filters",
    "conv_activation",
    "vf_share_layers",
    "free_log_std",
    "use_lstm",
    "max_seq_len",
    "lstm_cell_size",
    "lstm_use_prev_action",
    "lstm_use_prev_reward",
)
#: RLlib's activation names rltrainer spells otherwise.
_ACTIVATIONS = {"swish": "silu", None: "linear"}
#: RLlib's log-std clip, which rltrainer does not apply (it binds only beyond exp(20)).
_LOG_STD_CLIP = 20.0


@dataclasses.dataclass
class DefaultModelConfig:
    """RLlib's default networks' settings (new API stack): an encoder of ``fcnet_hiddens`` (or
    ``conv_filters`` for images), heads of ``head_fcnet_hiddens``, the value function sharing
    the encoder unless ``vf_share_layers=False``, an optional LSTM."""

    fcnet_hiddens: list[int] = dataclasses.field(default_factory=lambda: [256, 256])
    fcnet_activation: str | None = "tanh"
    fcnet_kernel_initializer: Any = None
    fcnet_kernel_initializer_kwargs: dict | None = None
    fcnet_bias_initializer: Any = None
    fcnet_bias_initializer_kwargs: dict | None = None
    conv_filters: list[Any] | None = None
    conv_activation: str | None = "relu"
    conv_kernel_initializer: Any = None
    conv_kernel_initializer_kwargs: dict | None = None
    conv_bias_initializer: Any = None
    conv_bias_initializer_kwargs: dict | None = None
    head_fcnet_hiddens: list[int] = dataclasses.field(default_factory=list)
    head_fcnet_activation: str | None = "relu"
    head_fcnet_kernel_initializer: Any = None
    head_fcnet_kernel_initializer_kwargs: dict | None = None
    head_fcnet_bias_initializer: Any = None
    head_fcnet_bias_initializer_kwargs: dict | None = None
    free_log_std: bool = False
    log_std_clip_param: float = _LOG_STD_CLIP
    vf_share_layers: bool = True
    use_lstm: bool = False
    max_seq_len: int = 20
    lstm_cell_size: int = 256
    lstm_use_prev_action: bool = False
    lstm_use_prev_reward: bool = False
    lstm_kernel_initializer: Any = None
    lstm_kernel_initializer_kwargs: dict | None = None
    lstm_bias_initializer: Any = None
    lstm_bias_initializer_kwargs: dict | None = None


def model_settings(model_config: DefaultModelConfig | dict[str, Any]) -> dict[str, Any]:
    """``model_config`` (a dict: its keys over ``DefaultModelConfig``'s defaults, as RLlib reads
    one) as rltrainer's ``model`` settings; ``ConfigError`` naming a key and why where RLlib's
    network has no equivalent here."""
    if isinstance(model_config, dict):
        names = [field.name for field in dataclasses.fields(DefaultModelConfig)]
        unknown = [key for key in model_config if key not in names]
        if unknown:
            hint = difflib.get_close_matches(str(unknown[0]), names, n=1)
            guess = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ConfigError(
                f"rl_module(): unknown model_config key {unknown[0]!r}{guess}; allowed: {', '.join(names)}"
            )
        model_config = DefaultModelConfig(**model_config)
    if not isinstance(model_config, DefaultModelConfig):
        raise ConfigError(
            "rl_module(): model_config must be a DefaultModelConfig or a dict of its keys, got "
            f"{type(model_config).__name__}"
        )
    values = dataclasses.asdict(model_config)
    for key, value in values.items():
        if "_initializer" in key and value is not None:
            raise ConfigError(
                f"rl_module(): {key}={value!r}: rltrainer initializes its layers itself (orthogonal, "
                "as SB3 does); leave it None"
            )
    if values["log_std_clip_param"] != _LOG_STD_CLIP:
        raise ConfigError(
            f"rl_module(): log_std_clip_param={values['log_std_clip_param']!r}: rltrainer does not clip "
            f"the log standard deviation; leave it at {_LOG_STD_CLIP} (where RLlib's clip does not bind "
            "in practice)"
        )
    settings = {key: values[key] for key in _SAME}
    for key in ("fcnet_activation", "conv_activation"):
        settings[key] = _ACTIVATIONS.get(settings[key], settings[key])
    head = values["head_fcnet_hiddens"]
    if head:
        head_activation = _ACTIVATIONS.get(values["head_fcnet_activation"], values["head_fcnet_activation"])
        if settings["vf_share_layers"] or head_activation != settings["fcnet_activation"]:
            raise ConfigError(
                f"rl_module(): head_fcnet_hiddens={head}: rltrainer's policy and value heads are single "
                "linear layers. With vf_share_layers=False and head_fcnet_activation equal to "
                "fcnet_activation, each head's layers are its own network's last hidden layers (set "
                "that way here); otherwise add the layers to fcnet_hiddens"
            )
        settings["fcnet_hiddens"] = [*settings["fcnet_hiddens"], *head]
    return settings


__all__ = ["DefaultModelConfig", "model_settings"]
