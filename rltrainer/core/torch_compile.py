"""``torch.compile`` for learners and env runners: RLlib's ``torch_compile_*`` settings.

- **Learners** (``torch_compile_learner``): ``"forward_train"`` compiles, in place, the modules
  the loss calls (``Learner.compiled_modules``: the whole network, or an actor-critic's actor and
  critics); ``"complete_update"`` compiles the learner's per-minibatch loss (forward pass and loss
  terms, whose backward AOTAutograd compiles with them), where the learner has one
  (``Learner.COMPILES_LOSS``). The optimizer step stays eager: it is one fused update of a flat
  parameter buffer already (``rltrainer.core.optim``).
- **Env runners** (``torch_compile_worker``): the policy acts through one compiled torch call per
  batch instead of its numpy inference (``Policy.set_device(..., compile_kwargs=...)``).

Compiling in place (``nn.Module.compile``) keeps the modules' parameter names, so weights,
checkpoints and the numpy inference that views the parameters are unchanged.
"""

from __future__ import annotations

import os
import platform
import shutil
from typing import Any

from rltrainer.errors import ConfigError


def learner_compile_kwargs(config: Any) -> dict[str, Any] | None:
    """``torch.compile``'s arguments for the learners, or None when they run eagerly."""
    if not config.torch_compile_learner:
        return None
    return _kwargs(config.torch_compile_learner_dynamo_backend, config.torch_compile_learner_dynamo_mode)


def worker_compile_kwargs(config: Any) -> dict[str, Any] | None:
    """``torch.compile``'s arguments for the env runners' inference, or None (numpy inference)."""
    if not config.torch_compile_worker:
        return None
    return _kwargs(config.torch_compile_worker_dynamo_backend, config.torch_compile_worker_dynamo_mode)


def _kwargs(backend: str, mode: str | None) -> dict[str, Any]:
    # torch.compile takes a mode for inductor only.
    return {"backend": backend, "mode": mode} if mode is not None else {"backend": backend}


def check_compile_settings(config: Any, learner_class: type) -> None:
    """Refuse, at ``build()``, compile settings that would fail later: an unknown backend, a mode
    with a backend other than inductor, inductor on the CPU without a C++ compiler, and
    ``complete_update`` (or any compiling) for a learner that has nothing to compile."""
    settings = []
    if config.torch_compile_learner:
        name = learner_class.__name__
        if not learner_class.COMPILES_FORWARD:
            raise ConfigError(
                f"torch_compile_learner: {name} takes no gradient steps, so there is nothing to "
                "compile; set torch_compile_learner=False"
            )
        whole_loss = config.torch_compile_learner_what_to_compile == "complete_update"
        if whole_loss and not learner_class.COMPILES_LOSS:
            raise ConfigError(
                f"torch_compile_learner_what_to_compile='complete_update': {name} has no per-minibatch "
                "loss to compile (PPO, APPO, IMPALA, A2C, A3C, PG, MARWIL and BC have); use 'forward_train'"
            )
        settings.append(
            (
                "torch_compile_learner",
                config.torch_compile_learner_dynamo_backend,
                config.torch_compile_learner_dynamo_mode,
            )
        )
    if config.torch_compile_worker:
        settings.append(
            (
                "torch_compile_worker",
                config.torch_compile_worker_dynamo_backend,
                config.torch_compile_worker_dynamo_mode,
            )
        )
    if not settings:
        return
    import torch._dynamo

    known = sorted(torch._dynamo.list_backends(exclude_tags=None))
    for prefix, backend, mode in settings:
        if backend not in known:
            raise ConfigError(
                f"{prefix}_dynamo_backend: unknown torch.compile backend {backend!r}; "
                f"this torch ({torch.__version__}) has: {', '.join(known)}"
            )
        if mode is not None and backend != "inductor":
            raise ConfigError(
                f"{prefix}_dynamo_mode={mode!r}: torch.compile modes are inductor's, and the backend "
                f"is {backend!r}; set the mode to None or the backend to 'inductor'"
            )
        if backend == "inductor" and not _cpp_compiler():
            raise ConfigError(
                f"{prefix}: the inductor backend compiles C++ for the CPU and no C++ compiler was "
                "found (g++, clang++ or $CXX); install one, or set "
                f"{prefix}_dynamo_backend='aot_eager' (compiled graphs without code generation)"
            )


def _cpp_compiler() -> bool:
    """Whether inductor finds a C++ compiler here (needed for CPU code; GPUs use Triton, but a
    learner or runner may still run on the CPU)."""
    names = [os.environ.get("CXX", ""), "g++", "clang++", "c++"]
    if platform.system() == "Windows":
        names.append("cl")
    return any(name and shutil.which(name) for name in names)


def compile_learner(learner: Any) -> None:
    """Compile what ``learner`` runs per minibatch, as its config says (``make_learner`` calls it
    once the learner is built: its target networks are copies of the uncompiled modules)."""
    kwargs = learner_compile_kwargs(learner.config)
    if kwargs is None:
        return
    import torch

    if learner.config.torch_compile_learner_what_to_compile == "complete_update":
        compiled = torch.compile(learner.compute_loss, **kwargs)
        if kwargs.get("mode") in CUDA_GRAPH_MODES and learner.device.type == "cuda":
            compiled = _fresh_outputs(compiled)
        # An instance attribute in front of the method: the algorithm's update loop calls it.
        learner.compute_loss = compiled
    else:
        for module in learner.compiled_modules():
            module.compile(**kwargs)


#: Modes in which inductor replays CUDA graphs, whose outputs live in memory the next replay reuses.
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def _fresh_outputs(compiled: Any) -> Any:
    """``compiled`` marking each call a new CUDA-graph step and cloning its tensor outputs: the
    update loop keeps each minibatch's diagnostics until the epoch ends, and the next replay
    would overwrite them in place."""
    import torch
    from torch.utils._pytree import tree_map

    def call(*args: Any, **kwargs: Any) -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        out = compiled(*args, **kwargs)
        return tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, out)

    return call


class LossCoefficient:
    """A float attribute of a learner that changes during training (an adaptive KL coefficient,
    a scheduled entropy coefficient), mirrored in a 0-d tensor ``<name>_tensor`` on the
    learner's device that the loss multiplies by. A compiled loss then takes the value as an
    input; reading the float would bake it in as a constant and recompile on every change."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, learner: Any, owner: type | None = None) -> Any:
        return self if learner is None else learner.__dict__[self.name]

    def __set__(self, learner: Any, value: float) -> None:
        import torch

        learner.__dict__[self.name] = value = float(value)
        tensor = learner.__dict__.get(f"{self.name}_tensor")
        if tensor is None:
            learner.__dict__[f"{self.name}_tensor"] = torch.tensor(value, device=learner.device)
        else:
            tensor.fill_(value)
