"""Policy export: what ``compute_actions(explore=False)`` computes, as one model file that runs
without rltrainer (ONNX for onnxruntime and other runtimes, or TorchScript for torch).

The exported graph takes preprocessed observation rows (``get_preprocessor(space)(space)
.transform(obs)``, the row the policy reads: Discrete one-hot, Dict and Tuple concatenated,
frames flattened) and returns the env actions, rescaled to the action space as the env
receives them, and the action distribution's inputs (logits, Q-values for DQN). The
observation filter (``MeanStdFilter``'s statistics at export time) is in the graph. An LSTM
policy's graph takes and returns its state (``state_in`` / ``state_out``: ``[B, rows, cell]``;
rows 2, or 4 with the value function's own LSTM) and, with ``lstm_use_prev_action`` /
``lstm_use_prev_reward``, the previous (distribution-space) actions and rewards.

A Dict or Tuple action space gives one output per part instead of ``actions``, in the space's
order (``space_parts``: Dict keys as the space iterates them, Tuple positions, nested), each what
the env gets for that part: int64 ``[B]`` for ``Discrete`` (plus its ``start``), int64
``[B, *shape]`` for ``MultiDiscrete`` (plus its ``start``) and ``MultiBinary``, float32
``[B, *shape]`` for ``Box`` (rescaled or clipped as the env receives it). A part's output is
named ``actions.<path>``: its ``space_parts`` path with ``/`` as ``.`` and any character other
than an ASCII letter, digit or ``_`` as ``_`` (``Tuple(Discrete, Dict(grip=...))`` gives
``actions.0`` and ``actions.1.grip``); a name already taken gets ``_2``, ``_3``, ... An LSTM
that reads previous actions takes them as the distribution's float32 row ``[B, columns]``: the
parts' columns side by side (a discrete part's index from 0, a normalized Box part's values in
[-1, 1]).

Next to the model, ``export.json`` says what the inputs and outputs are (names, shapes,
dtypes), the spaces, and which checkpoint it came from; for a Dict or Tuple action space,
``action_parts`` says which part each ``actions.*`` output is (its path, space, shape, dtype and
columns in the row). Nothing in it is pickled.
"""

from __future__ import annotations

import json
import logging
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rltrainer.core.composite_actions import CompositeActions
from rltrainer.core.filters import CLIP, MeanStdFilter
from rltrainer.env.spaces import space_to_json
from rltrainer.errors import ConfigError
from rltrainer.storage import writable_folder

FORMATS = ("onnx", "torchscript")
DEFAULT_OPSET = 18
#: The lowest opset torch's exporter converts its models down to (it writes 18, converts where
#: each op allows, and leaves 18 where one does not or for lower opsets).
MIN_OPSET = 14


class ExportedPolicy(nn.Module):
    """The policy's deterministic action computation as one torch module (see the module doc)."""

    def __init__(self, policy: Any, observation_filter: Any) -> None:
        super().__init__()
        self.policy_model = policy.model
        self._dist_inputs = policy.torch_dist_inputs
        self.dist_class = policy.dist_class
        self.recurrent = policy.recurrent
        self.prev_actions = self.recurrent and policy.config.model.lstm_use_prev_action
        self.prev_rewards = self.recurrent and policy.config.model.lstm_use_prev_reward
        self.normalize = isinstance(observation_filter, MeanStdFilter)
        if self.normalize:
            stats = observation_filter.stats
            self.register_buffer("obs_mean", torch.as_tensor(stats.mean, dtype=torch.float32))
            self.register_buffer("obs_std", torch.as_tensor(stats.std, dtype=torch.float32))
        composite = policy.composite_actions
        if composite is None:
            rescale = _torch_rescaler(policy.action_space, policy.config)
            self._to_env = lambda a: (rescale(a),)
        else:
            self._to_env = _torch_composite_to_env(composite, policy.config)

    def forward(
        self,
        obs: torch.Tensor,
        state_in: torch.Tensor | None = None,
        prev_actions: torch.Tensor | None = None,
        prev_rewards: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        obs = obs.float()
        if self.normalize:
            obs = torch.clamp((obs - self.obs_mean) / self.obs_std, -CLIP, CLIP)
        if not self.recurrent:
            dist_inputs = self._dist_inputs(obs)
            return *self._to_env(self.dist_class(dist_inputs).deterministic_sample()), dist_inputs
        dist_inputs, _, state_out = self.policy_model.step(obs, state_in, prev_actions, prev_rewards)
        actions = self.dist_class(dist_inputs).deterministic_sample()
        return *self._to_env(actions), dist_inputs, state_out


def _torch_rescaler(space: spaces.Space, config: Any):
    """``Policy.to_env_actions`` in torch: distribution actions -> env actions."""
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        start = torch.as_tensor(np.asarray(getattr(space, "start", 0)).reshape(-1))
        if isinstance(space, spaces.Discrete):
            start = start.reshape(())
        return lambda a: a + start.to(a.dtype)
    if not isinstance(space, spaces.Box):
        return lambda a: a
    low = torch.as_tensor(space.low, dtype=torch.float32)
    high = torch.as_tensor(space.high, dtype=torch.float32)
    bounded = bool(torch.isfinite(low).all() and torch.isfinite(high).all())
    if config.normalize_actions and bounded:
        return lambda a: low + (torch.clamp(a, -1.0, 1.0) + 1.0) * 0.5 * (high - low)
    if config.clip_actions:
        return lambda a: torch.minimum(torch.maximum(a, low), high)
    return lambda a: a


def _torch_composite_to_env(composite: CompositeActions, config: Any):
    """``CompositeActions.to_env`` in torch: the distribution's ``[B, columns]`` rows -> one
    tensor per part (see the module doc), each through ``_torch_rescaler`` of its space."""
    parts = [
        (part, columns, _torch_rescaler(part, config))
        for (_, part), columns in zip(composite.parts, composite.columns, strict=True)
    ]

    def to_env(rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs = []
        for part, columns, rescale in parts:
            values = rows[:, columns]
            if isinstance(part, spaces.Box):
                outputs.append(rescale(values.reshape(-1, *part.shape)))
            elif isinstance(part, spaces.Discrete):
                outputs.append(rescale(torch.round(values[:, 0]).long()))
            else:  # MultiDiscrete's start is per flat column: add it before the part's shape
                outputs.append(rescale(torch.round(values).long()).reshape(-1, *part.shape))
        return tuple(outputs)

    return to_env


def action_outputs(policy: Any) -> list[dict[str, Any]]:
    """The ``actions.*`` outputs of a Dict or Tuple action space, one per part in the space's
    order (name, path, space, shape, dtype, columns; what ``export.json`` lists as
    ``action_parts``); ``[]`` for the other spaces (one ``actions`` output)."""
    composite = policy.composite_actions
    if composite is None:
        return []
    outputs, taken = [], set()
    for (path, part), columns in zip(composite.parts, composite.columns, strict=True):
        base = "actions." + ".".join(re.sub(r"[^A-Za-z0-9_]", "_", key) for key in path.split("/"))
        name, count = base, 1
        while name in taken:
            count += 1
            name = f"{base}_{count}"
        taken.add(name)
        shape = [] if isinstance(part, spaces.Discrete) else list(part.shape)
        outputs.append(
            {
                "output": name,
                "path": path,
                "space": space_to_json(part),
                "shape": ["batch", *shape],
                "dtype": "float32" if isinstance(part, spaces.Box) else "int64",
                "columns": [columns.start, columns.stop],
            }
        )
    return outputs


def example_inputs(policy: Any, batch: int = 2) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Example inputs by name (for tracing) and the output names of ``ExportedPolicy``."""
    size = policy.preprocessor.size
    inputs = {"obs": torch.zeros(batch, size, dtype=torch.float32)}
    parts = [part["output"] for part in action_outputs(policy)]
    outputs = [*(parts or ["actions"]), "dist_inputs"]
    if policy.recurrent:
        model = policy.model
        inputs["state_in"] = torch.zeros(batch, model.state_rows, model.cell_size)
        if policy.config.model.lstm_use_prev_action and policy.composite_actions is not None:
            inputs["prev_actions"] = torch.zeros(batch, policy.composite_actions.width)
        elif policy.config.model.lstm_use_prev_action:
            sample = np.asarray(policy.policy_action_space().sample())
            dtype = torch.int64 if sample.dtype.kind in "iu" else torch.float32
            inputs["prev_actions"] = torch.zeros(batch, *sample.shape, dtype=dtype)
        if policy.config.model.lstm_use_prev_reward:
            inputs["prev_rewards"] = torch.zeros(batch, dtype=torch.float32)
        outputs.append("state_out")
    return inputs, outputs


def export_policy(
    policy: Any,
    observation_filter: Any,
    export_dir: str | Path,
    fmt: str = "onnx",
    opset: int | None = None,
    source: str | None = None,
) -> Path:
    """Write ``model.onnx`` (or ``model.pt``, TorchScript) and ``export.json`` into
    ``export_dir``; returns the model file's path. ``ConfigError`` for an unknown format or a
    missing exporter package."""
    if fmt not in FORMATS:
        raise ConfigError(f"export format {fmt!r} is not one of {', '.join(FORMATS)}")
    export_dir, problem = writable_folder(export_dir)
    if problem is not None:
        raise ConfigError(f"export folder {str(export_dir)!r} cannot be written ({problem})")
    module = ExportedPolicy(policy, observation_filter).eval()
    inputs, outputs = example_inputs(policy)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporters' deprecation and tracing notices
        if fmt == "onnx":
            path = export_dir / "model.onnx"
            _export_onnx(module, inputs, outputs, path, opset or DEFAULT_OPSET)
        else:
            path = export_dir / "model.pt"
            torch.jit.trace(module, example_kwarg_inputs=inputs).save(str(path))
    manifest = {
        "format": fmt,
        "file": path.name,
        "opset": (opset or DEFAULT_OPSET) if fmt == "onnx" else None,
        "inputs": {name: _describe(tensor) for name, tensor in inputs.items()},
        "outputs": outputs,
        "observation_space": space_to_json(policy.observation_space),
        "action_space": space_to_json(policy.action_space),
        "observation_filter": type(observation_filter).__name__,
        "deterministic": True,
        "source": source,
    }
    if policy.composite_actions is not None:
        manifest["action_parts"] = action_outputs(policy)
    (export_dir / "export.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return path


def _describe(tensor: torch.Tensor) -> dict[str, Any]:
    shape: list[Any] = ["batch", *tensor.shape[1:]]
    return {"shape": shape, "dtype": str(tensor.dtype).removeprefix("torch.")}


def _export_onnx(
    module: nn.Module, inputs: dict[str, torch.Tensor], output_names: list[str], path: Path, opset: int
) -> None:
    try:
        import onnx  # the exporter needs it; say so here rather than deep inside torch
        import onnxscript  # noqa: F401
    except ImportError:
        raise ConfigError(
            "ONNX export needs onnx and onnxscript: pip install 'rltrainer[export]' "
            "(or use the torchscript format)"
        ) from None
    batch = torch.export.Dim("batch", min=1)
    # torch.onnx's notices about optional torchvision ops; onnxscript's traceback of a failed
    # opset conversion (checked below, in one line).
    quiet = [logging.getLogger(name) for name in ("torch.onnx", "onnxscript")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.CRITICAL)
    try:
        _onnx_export(module, inputs, output_names, path, opset, batch)
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)
    written = _onnx_opset(path)
    if written != opset:  # the exporter falls back to its own opset where it cannot convert
        for leftover in (path, path.with_name(path.name + ".data")):
            leftover.unlink(missing_ok=True)
        raise ConfigError(
            f"ONNX opset {opset}: torch's exporter cannot write this policy at it (it wrote opset "
            f"{written}); opsets {DEFAULT_OPSET} to {onnx.defs.onnx_opset_version()} always work, "
            f"{MIN_OPSET} to {DEFAULT_OPSET - 1} where each of the policy's ops converts"
        )


def _onnx_opset(path: Path) -> int | None:
    """The default (``ai.onnx``) domain's opset the model file at ``path`` declares."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), None)


def _onnx_export(
    module: nn.Module,
    inputs: dict[str, torch.Tensor],
    output_names: list[str],
    path: Path,
    opset: int,
    batch: Any,
) -> None:
    torch.onnx.export(
        module,
        (),
        str(path),
        kwargs=inputs,
        input_names=list(inputs),
        output_names=output_names,
        dynamic_shapes={name: {0: batch} for name in inputs},
        opset_version=opset,
        dynamo=True,
        verbose=False,
        report=False,
    )
