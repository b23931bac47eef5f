"""Conv filter settings (RLlib's ``conv_filters``) checked against frame sizes, without torch.

``conv_filters`` are ``[out_channels, kernel, stride]`` triples (kernel and stride an int or
``[height, width]``); every layer but the last pads like TensorFlow's ``"same"``, the last is
``"valid"`` (``rltrainer.core.encoders.ConvEncoder`` builds them).
"""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

from rltrainer.errors import ConfigError

#: RLlib's default ``conv_filters`` per frame size (height, width).
DEFAULT_CONV_FILTERS: dict[tuple[int, int], list[list[Any]]] = {
    (96, 96): [[16, [8, 8], 4], [32, [4, 4], 2], [256, [11, 11], 2]],
    (84, 84): [[16, [8, 8], 4], [32, [4, 4], 2], [256, [11, 11], 1]],
    (64, 64): [[32, [4, 4], 2], [64, [4, 4], 2], [128, [4, 4], 2], [256, [4, 4], 2]],
    (42, 42): [[16, [4, 4], 2], [32, [4, 4], 2], [256, [11, 11], 1]],
    (10, 10): [[16, [5, 5], 2], [32, [5, 5], 2]],
}


def is_image_space(space: Any) -> bool:
    """A rank-3 ``Box`` (height, width, channels): what ``ConvEncoder`` reads."""
    return isinstance(space, spaces.Box) and len(space.shape) == 3


def image_parts(space: Any) -> list[tuple[str, spaces.Box]]:
    """The images (rank-3 ``Box``) inside a Dict or Tuple space, by path (``"camera"``)."""
    if not isinstance(space, spaces.Dict | spaces.Tuple):
        return []
    from rltrainer.env.spaces import space_parts

    return [(path, part) for path, part in space_parts(space) if is_image_space(part)]


def conv_layers(space: spaces.Box, conv_filters: list | None) -> list[tuple[int, tuple, tuple, tuple]]:
    """``(out_channels, kernel, stride, padding)`` per layer for frames of ``space`` (the
    defaults when ``conv_filters`` is None), ``padding`` being the total zero rows and columns
    that "same" adds (``(0, 0)`` on the last, "valid" layer); ``ConfigError`` naming the key when
    they do not fit."""
    height, width, _ = space.shape
    if conv_filters is None:
        conv_filters = DEFAULT_CONV_FILTERS.get((height, width))
        if conv_filters is None:
            sizes = ", ".join(f"{h}x{w}" for h, w in DEFAULT_CONV_FILTERS)
            raise ConfigError(
                f"model: no default conv_filters for {height}x{width} frames (defaults exist for "
                f"{sizes}); set model={{'conv_filters': [[out_channels, kernel, stride], ...]}}"
            )
    layers = []
    size = (height, width)
    for i, layer in enumerate(conv_filters):
        out_channels, kernel, stride = parse_filter(i, layer)
        if i == len(conv_filters) - 1:  # "valid"
            padding = (0, 0)
            size = tuple((n - k) // s + 1 for n, k, s in zip(size, kernel, stride, strict=True))
        else:  # "same"
            out = tuple(-(-n // s) for n, s in zip(size, stride, strict=True))
            padding = tuple(
                max((o - 1) * s + k - n, 0) for o, n, k, s in zip(out, size, kernel, stride, strict=True)
            )
            size = out
        if min(size) < 1:
            raise ConfigError(
                f"model.conv_filters: layer {i} {layer} shrinks the {height}x{width} frame below 1x1 "
                f"({size[0]}x{size[1]}); use smaller kernels or strides in the last layers"
            )
        layers.append((out_channels, kernel, stride, padding))
    return layers


def parse_filter(index: int, layer: Any) -> tuple[int, tuple[int, int], tuple[int, int]]:
    def pair(value: Any) -> tuple[int, int] | None:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value, value
        if (
            isinstance(value, list | tuple)
            and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)
        ):
            return int(value[0]), int(value[1])
        return None

    ok = isinstance(layer, list | tuple) and len(layer) == 3
    out_channels = layer[0] if ok else None
    kernel, stride = (pair(layer[1]), pair(layer[2])) if ok else (None, None)
    if not (isinstance(out_channels, int) and out_channels >= 1 and kernel and stride):
        raise ConfigError(
            f"model.conv_filters: layer {index} is {layer!r}; each layer is [out_channels, kernel, "
            "stride] with positive ints (kernel and stride an int or [height, width])"
        )
    return out_channels, kernel, stride
