"""Encoders beyond the flat MLP, and the actor-critic and Q heads over them.

Convolutional encoders read image observations (a rank-3 ``Box``: height x width x channels);
``ComplexEncoder`` reads Dict and Tuple observations that hold images among other parts.

The env runners hand every model a flat row per observation (``Preprocessor``); for an image
space that row keeps the space's dtype (``uint8`` frames stay ``uint8`` from the env to the
learner) and ``ConvEncoder`` reshapes it back to ``[B, H, W, C]``, scales it (``1/255`` for a
``uint8`` space, decided by the space so that a float32 copy of the same frame gives the same
features), runs the conv stack in channels-first order, flattens, and applies
``post_fcnet_hiddens``.

``conv_filters`` and their defaults per frame size: ``rltrainer.models.conv_filters``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rltrainer.core.models import ACTIVATIONS, ModelV2Calls, mlp, torch_inference
from rltrainer.models.conv_filters import conv_layers


class ConvEncoder(nn.Module):
    """Flat rows of an image space -> features ``[B, out_size]`` (see the module doc)."""

    def __init__(
        self,
        space: spaces.Box,
        conv_filters: list | None,
        conv_activation: str,
        post_hiddens: list[int],
        post_activation: str,
    ) -> None:
        super().__init__()
        self.frame_shape = tuple(int(n) for n in space.shape)
        self.scale = 1.0 / 255.0 if space.dtype == np.uint8 else 1.0
        channels = self.frame_shape[2]
        size = self.frame_shape[:2]
        layers: list[nn.Module] = []
        for out_channels, kernel, stride, padding in conv_layers(space, conv_filters):
            # The conv's own padding is symmetric: half of "same"'s, rounded up where it is odd
            # (one zero row before instead of after: the same output size at strides of 2 or
            # more; a pad layer cost a third of the convolutions' time). At stride 1 an odd
            # amount needs the pad layer.
            if any(total % 2 and s == 1 for total, s in zip(padding, stride, strict=True)):
                (top, bottom), (left, right) = [(t // 2, t - t // 2) for t in padding]
                layers.append(nn.ZeroPad2d((left, right, top, bottom)))
                size = tuple(n + t for n, t in zip(size, padding, strict=True))
                padding = (0, 0)
            conv_class = nn.Conv2d
            if tuple(kernel) == size and not any(padding):  # one output position: a matmul
                conv_class = WholeFrameConv2d
            conv = conv_class(
                channels, out_channels, kernel, stride, padding=tuple(-(-t // 2) for t in padding)
            )
            size = conv_output_size(size, kernel, stride, padding)
            nn.init.orthogonal_(conv.weight, gain=np.sqrt(2))
            nn.init.zeros_(conv.bias)
            layers += [conv, ACTIVATIONS[conv_activation]()]
            channels = out_channels
        self.convs = nn.Sequential(*layers)
        with torch.no_grad():  # the flattened size, from one empty frame
            height, width, channels_in = self.frame_shape
            features = self.convs(torch.zeros(1, channels_in, height, width)).numel()
        if post_hiddens:
            self.post = mlp([features, *post_hiddens], post_activation, out_gain=np.sqrt(2))
            self.post.append(ACTIVATIONS[post_activation]())
            features = post_hiddens[-1]
        else:
            self.post = None
        self.out_size = features

    def forward(self, flat_obs: torch.Tensor) -> torch.Tensor:
        # Float frames [B, H, W, C] in one contiguous conversion (copied: the caller's float rows
        # stay as they are), seen as [B, C, H, W] in torch's channels-last memory format:
        # oneDNN's CPU convolutions run on it directly (RLlib's 84x84 stack, 256-frame minibatch,
        # 2 threads: 120 ms per update against 190 for contiguous channels-first frames), where
        # the strided view of the rows themselves was about 4x slower.
        height, width, channels = self.frame_shape
        frames = flat_obs.reshape(-1, height, width, channels).to(torch.float32, copy=True)
        if self.scale != 1.0:
            frames.mul_(self.scale)
        x = self.convs(frames.permute(0, 3, 1, 2)).flatten(1)
        return x if self.post is None else self.post(x)


def conv_output_size(size: tuple, kernel: tuple, stride: tuple, padding: tuple) -> tuple[int, int]:
    """A conv layer's output height and width (``padding``: the total zero rows and columns,
    half of them (rounded up) on each side as ``ConvEncoder`` pads)."""
    return tuple(
        (n + 2 * -(-p // 2) - k) // s + 1 for n, k, s, p in zip(size, kernel, stride, padding, strict=True)
    )


class WholeFrameConv2d(nn.Conv2d):
    """A convolution whose kernel covers its whole unpadded input (RLlib's last 11x11 layer on
    84x84 and 42x42 frames), run as the matrix product it is: one output position per frame,
    the same weights, bias and output ``[B, out_channels, 1, 1]``. oneDNN's convolution kernels
    take this shape at a fraction of a GEMM's speed (AVX2: 3x slower forward and backward)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Channels-first order for the rows: the weight's own, so it is used without a copy.
        rows = x.contiguous().flatten(1)
        return nn.functional.linear(rows, self.weight.flatten(1), self.bias)[:, :, None, None]


class ComplexEncoder(nn.Module):
    """Rows of a Dict or Tuple space that holds images -> features ``[B, out_size]``, one encoder
    per kind of part (RLlib's ``ComplexInputNetwork``): each image (rank-3 ``Box``) through its
    own conv stack (``conv_filters``, or the defaults for its size), the other parts (vectors,
    one-hot discrete values, masks) together through ``fcnet_hiddens``, then all of it
    concatenated through ``post_fcnet_hiddens``. Rows are float32 here (a uint8 image is scaled
    by ``1/255`` all the same: the space decides)."""

    def __init__(self, space: spaces.Dict | spaces.Tuple, model: Any) -> None:
        super().__init__()
        from rltrainer.env.preprocessors import leaf_columns
        from rltrainer.models.conv_filters import is_image_space

        self.images = nn.ModuleList()
        self.image_columns: list[tuple[int, int]] = []
        self.vector_columns: list[tuple[int, int]] = []  # merged where parts are adjacent
        for _, leaf, start, stop in leaf_columns(space):
            if is_image_space(leaf):
                self.images.append(ConvEncoder(leaf, model.conv_filters, model.conv_activation, [], "relu"))
                self.image_columns.append((start, stop))
            elif self.vector_columns and self.vector_columns[-1][1] == start:
                self.vector_columns[-1] = (self.vector_columns[-1][0], stop)
            else:
                self.vector_columns.append((start, stop))
        features = sum(encoder.out_size for encoder in self.images)
        self.vector = None
        if self.vector_columns:
            width = sum(stop - start for start, stop in self.vector_columns)
            hiddens = list(model.fcnet_hiddens)
            self.vector = nn.Identity()
            if hiddens:
                self.vector = mlp([width, *hiddens], model.fcnet_activation, out_gain=np.sqrt(2))
                self.vector.append(ACTIVATIONS[model.fcnet_activation]())
            features += hiddens[-1] if hiddens else width
        self.post = None
        if model.post_fcnet_hiddens:
            self.post = mlp([features, *model.post_fcnet_hiddens], model.post_fcnet_activation, np.sqrt(2))
            self.post.append(ACTIVATIONS[model.post_fcnet_activation]())
            features = model.post_fcnet_hiddens[-1]
        self.out_size = features

    def forward(self, flat_obs: torch.Tensor) -> torch.Tensor:
        flat_obs = flat_obs.float()
        parts = [
            encoder(flat_obs[:, a:b]) for encoder, (a, b) in zip(self.images, self.image_columns, strict=True)
        ]
        if self.vector is not None:
            parts.append(self.vector(torch.cat([flat_obs[:, a:b] for a, b in self.vector_columns], dim=-1)))
        x = torch.cat(parts, dim=-1)
        return x if self.post is None else self.post(x)


class EncoderActorCritic(ModelV2Calls, nn.Module):
    """``ActorCritic``'s interface over an encoder (``make_encoder()`` -> a module with
    ``out_size``): policy and value heads are one linear layer each on its features. With
    ``vf_share_layers`` one encoder (``trunk``) feeds both heads; otherwise the value function
    has its own (``vf_encoder``, as RLlib's vision network builds a second conv stack)."""

    def __init__(
        self, make_encoder: Any, num_outputs: int, vf_share_layers: bool, free_log_std: bool
    ) -> None:
        super().__init__()
        self.free_log_std = free_log_std
        pi_outputs = num_outputs // 2 if free_log_std else num_outputs
        self.trunk = make_encoder()
        self.vf_encoder = None if vf_share_layers else make_encoder()
        self.pi = mlp([self.trunk.out_size, pi_outputs], "linear", out_gain=0.01)
        self.vf = mlp([self.trunk.out_size, 1], "linear", out_gain=1.0)
        if free_log_std:
            self.log_std = nn.Parameter(torch.zeros(pi_outputs))

    def forward(self, obs: torch.Tensor, state: Any = None, seq_lens: Any = None) -> tuple[torch.Tensor, Any]:  # noqa: ARG002
        """``(dist_inputs [B, num_outputs], values [B])``, or RLlib's call (``ModelV2Calls``)."""
        if isinstance(obs, dict):
            return self._call_input_dict(obs, state)
        features = self.trunk(obs)
        vf_features = features if self.vf_encoder is None else self.vf_encoder(obs)
        return self._dist_inputs(features), self.vf(vf_features).squeeze(-1)

    def values(self, obs: torch.Tensor) -> torch.Tensor:
        encoder = self.trunk if self.vf_encoder is None else self.vf_encoder
        return self.vf(encoder(obs)).squeeze(-1)

    def _dist_inputs(self, features: torch.Tensor) -> torch.Tensor:
        out = self.pi(features)
        if self.free_log_std:
            out = torch.cat([out, self.log_std.expand_as(out)], dim=-1)
        return out

    def numpy_policy(self):
        """``obs (numpy) -> dist_inputs (numpy)``, run with torch (see ``torch_inference``)."""
        return torch_inference(lambda obs: self._dist_inputs(self.trunk(obs)), self)
