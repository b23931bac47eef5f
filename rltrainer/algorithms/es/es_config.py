"""ES's and ARS's configs; they import no torch (the operator validates experiments with them)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from rltrainer.algorithms.algorithm_config import AlgorithmConfig
from rltrainer.errors import ConfigError


class _DerivativeFree(AlgorithmConfig):
    """What ES and ARS share: a noise table, perturbed rollouts, occasional evaluations."""

    noise_stdev: float = Field(0.02, gt=0)
    """Standard deviation of the parameter perturbations."""
    noise_size: int = Field(250_000_000, ge=1)
    """Entries of the shared Gaussian noise table (float32; RLlib's default is ~1 GB)."""
    report_length: int = Field(10, ge=1)
    """Iterations the reported evaluation return is averaged over."""
    num_envs_per_env_runner: int = Field(1, ge=1, le=1)
    """One env per runner: each episode runs with its own perturbed weights."""
    num_env_runners: int = Field(2, ge=0)
    rollout_fragment_length: Any = "auto"
    observation_filter: Literal["NoFilter", "MeanStdFilter"] = "MeanStdFilter"
    """Observation normalization, learned from the perturbed episodes (RLlib's default)."""

    def validate(self) -> None:
        super().validate()
        if self.num_learners > 0:
            raise ConfigError(f"{self.ALGORITHM} updates its weights in the driver: set num_learners=0")
        if self.model.use_lstm:
            raise ConfigError(f"{self.ALGORITHM} perturbs feed-forward policies: remove use_lstm")


class ESConfig(_DerivativeFree):
    """Evolution strategies (Salimans et al. 2017); defaults follow RLlib's ES."""

    ALGORITHM = "ES"
    STAT_KEYS = ("weights_norm", "grad_norm", "update_ratio", "episodes_this_iter", "perturbations")
    SECTIONS: ClassVar[dict[str, tuple[str, ...]]] = {
        **AlgorithmConfig.SECTIONS,
        "training": AlgorithmConfig.SECTIONS["training"]
        + (
            "action_noise_std",
            "l2_coeff",
            "noise_stdev",
            "episodes_per_batch",
            "eval_prob",
            "return_proc_mode",
            "stepsize",
            "noise_size",
            "report_length",
        ),
    }

    action_noise_std: float = Field(0.01, ge=0)
    """Gaussian noise added to Box actions in the perturbed rollouts."""
    l2_coeff: float = Field(0.005, ge=0)
    """Weight decay added to the gradient."""
    episodes_per_batch: int = Field(1000, ge=1)
    """Perturbed episodes (at least) per iteration; with ``train_batch_size`` env steps."""
    eval_prob: float = Field(0.003, ge=0, le=1)
    """Chance of an evaluation episode (unperturbed weights) before each perturbation."""
    return_proc_mode: Literal["centered_rank"] = "centered_rank"
    """Returns are replaced by their centered ranks (in [-0.5, 0.5])."""
    stepsize: float = Field(0.01, gt=0)
    """Adam's step size."""
    train_batch_size: int = Field(10_000, ge=1)
    num_env_runners: int = Field(10, ge=0)


class ARSConfig(_DerivativeFree):
    """Augmented random search (Mania et al. 2018); defaults follow RLlib's ARS."""

    ALGORITHM = "ARS"
    STAT_KEYS = ("weights_norm", "grad_norm", "update_ratio", "episodes_this_iter", "perturbations")
    SECTIONS: ClassVar[dict[str, tuple[str, ...]]] = {
        **AlgorithmConfig.SECTIONS,
        "training": AlgorithmConfig.SECTIONS["training"]
        + (
            "noise_stdev",
            "num_rollouts",
            "rollouts_used",
            "sgd_stepsize",
            "noise_size",
            "eval_prob",
            "report_length",
            "offset",
        ),
    }

    num_rollouts: int = Field(32, ge=1)
    """Perturbation directions per iteration (each evaluated at +noise and -noise)."""
    rollouts_used: int = Field(32, ge=1)
    """The best directions (by their larger return) the update uses."""
    sgd_stepsize: float = Field(0.01, gt=0)
    """Step size of the plain gradient step."""
    eval_prob: float = Field(0.03, ge=0, le=1)
    """Chance of an evaluation episode (unperturbed weights) before each direction."""
    offset: float = 0.0
    """Subtracted from every step's reward in the perturbed rollouts (RLlib's ARS ``offset``)."""

    def validate(self) -> None:
        super().validate()
        if self.rollouts_used > self.num_rollouts:
            raise ConfigError(
                f"rollouts_used ({self.rollouts_used}) must be <= num_rollouts ({self.num_rollouts})"
            )


__all__ = ["ARSConfig", "ESConfig"]
