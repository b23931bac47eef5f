"""``.framework()``: torch (the only framework, accepted for RLlib compatibility) and
``torch.compile`` for the learners and the env runners; ``.api_stack()``, RLlib's switches of
its internals."""

from __future__ import annotations

from typing import Any, Literal, Self

from rltrainer.algorithms.config_sections.section import ConfigSection
from rltrainer.errors import ConfigError

#: ``torch.compile``'s modes.
CompileMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


KEYS = (
    "framework_str",
    "torch_compile_learner",
    "torch_compile_learner_what_to_compile",
    "torch_compile_learner_dynamo_backend",
    "torch_compile_learner_dynamo_mode",
    "torch_compile_worker",
    "torch_compile_worker_dynamo_backend",
    "torch_compile_worker_dynamo_mode",
)

#: RLlib's ``api_stack()`` switches (no effect here: ``NO_EFFECT`` says why).
API_STACK_SWITCHES = ("enable_rl_module_and_learner", "enable_env_runner_and_connector_v2")


class FrameworkSettings(ConfigSection):
    """``framework()``'s settings."""

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

    def api_stack(self, **kwargs: Any) -> Self:
        """RLlib's switches between its old and new internals (``enable_rl_module_and_learner``,
        ``enable_env_runner_and_connector_v2``): rltrainer has one implementation, so either
        value is accepted with one logged line."""
        unknown = [key for key in kwargs if key not in API_STACK_SWITCHES]
        if unknown:
            raise ConfigError(
                f"api_stack(): unknown key '{unknown[0]}'; allowed: {', '.join(API_STACK_SWITCHES)}"
            )
        return self._update("api_stack", kwargs)

    def framework(self, framework: str = "torch", **kwargs: Any) -> Self:
        """Accepted for RLlib compatibility: only ``"torch"`` is supported (``eager_tracing=False``
        and the other ``DOCUMENTED_SETTINGS`` as there)."""
        return self._update("framework", {"framework_str": framework, **kwargs})
