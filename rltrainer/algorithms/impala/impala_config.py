"""IMPALA's config; it imports no torch (the operator validates experiments with it)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from rltrainer.algorithms.algorithm_config import AlgorithmConfig, PiecewiseSchedule
from rltrainer.algorithms.config_sections.section import check_schedule
from rltrainer.errors import ConfigError


class IMPALAConfig(AlgorithmConfig):
    """IMPALA's settings (Espeholt et al. 2018); defaults follow RLlib's IMPALA.

    Env runners sample asynchronously: each keeps ``max_requests_in_flight_per_env_runner``
    sample requests queued, and the learner trains on whatever arrived, never waiting for the
    slowest runner. V-trace corrects for the policy lag between the weights a runner sampled
    with and the learner's.
    """

    ALGORITHM = "IMPALA"
    STAT_KEYS = (
        "policy_loss",
        "vf_loss",
        "entropy",
        "total_loss",
        "vf_explained_var",
        "mean_rho",
        "cur_lr",
        "curr_entropy_coeff",
        "learner_queue_size",
        "policy_lag_env_steps",
        "num_env_steps_trained_per_s",
        "num_learner_updates",
    )
    SECTIONS = {
        **AlgorithmConfig.SECTIONS,
        "training": AlgorithmConfig.SECTIONS["training"]
        + (
            "vtrace",
            "vtrace_clip_rho_threshold",
            "vtrace_clip_pg_rho_threshold",
            "vf_loss_coeff",
            "entropy_coeff",
            "num_epochs",
            "minibatch_size",
            "minibatch_buffer_size",
            "replay_proportion",
            "replay_buffer_num_slots",
            "learner_queue_size",
            "learner_queue_timeout",
            "max_requests_in_flight_per_env_runner",
            "broadcast_interval",
            "opt_type",
        ),
    }

    vtrace: bool = True
    """V-trace off-policy correction (IMPALA always uses it)."""
    vtrace_clip_rho_threshold: float | None = Field(1.0, gt=0)
    """rho-bar: the importance weights in the value targets are clipped at this (``None``: not clipped)."""
    vtrace_clip_pg_rho_threshold: float | None = Field(1.0, gt=0)
    """The importance weights of the policy-gradient advantages are clipped at this."""
    vf_loss_coeff: float = Field(0.5, ge=0)
    """Weight of the value loss (0.5 * mean squared error to the V-trace targets)."""
    entropy_coeff: float | PiecewiseSchedule = 0.01
    """Weight of the entropy bonus, or a ``[[timestep, value], ...]`` schedule."""
    num_epochs: int = Field(1, ge=1)
    """Passes over each train batch (with ``minibatch_buffer_size``: RLlib's ``num_sgd_iter``)."""
    minibatch_size: int | Literal["auto"] = "auto"
    """Env steps per gradient step, in whole trajectories (``"auto"``: the train batch)."""
    minibatch_buffer_size: int = Field(1, ge=1)
    """Train batches kept for repeated passes: each is trained on ``num_epochs`` times, in turn
    with the others in the buffer."""
    replay_proportion: float = Field(0.0, ge=0)
    """Replay: for each new rollout, on average this many stored ones are trained on too."""
    replay_buffer_num_slots: int = Field(0, ge=0)
    """Rollouts kept for replay (the oldest is replaced first)."""
    learner_queue_size: int = Field(16, ge=1)
    """Train batches waiting for the learner; when full, samples wait in the env runners."""
    learner_queue_timeout: float = Field(300.0, gt=0)
    """Seconds the learner waits for a train batch before the run fails."""
    max_requests_in_flight_per_env_runner: int = Field(2, ge=1)
    """Sample requests queued on each remote env runner."""
    broadcast_interval: int = Field(1, ge=1)
    """Learner updates between weight broadcasts to the env runners."""
    opt_type: Literal["adam"] = "adam"
    """The optimizer (Adam; RLlib's ``"rmsprop"`` is not available)."""

    # RLlib's IMPALA defaults for the shared settings.
    lr: Any = 0.0005
    grad_clip: float | None = Field(40.0, gt=0)
    train_batch_size: int = Field(500, ge=1)
    rollout_fragment_length: Any = 50
    num_env_runners: int = Field(2, ge=0)
    min_time_s_per_iteration: float = Field(10.0, ge=0)

    def validate(self) -> None:
        super().validate()
        if isinstance(self.entropy_coeff, list):
            check_schedule("entropy_coeff", self.entropy_coeff)
        self._check_vtrace()
        if self.replay_proportion > 0 and self.replay_buffer_num_slots == 0:
            raise ConfigError(
                f"replay_proportion={self.replay_proportion} needs replay_buffer_num_slots > 0 "
                "(rollouts kept for replay); set both, or replay_proportion=0 for no replay"
            )
        if self.minibatch_size != "auto" and self.minibatch_size > self.train_batch_size:
            raise ConfigError(
                f"minibatch_size ({self.minibatch_size}) must be <= train_batch_size "
                f"({self.train_batch_size}), or 'auto'"
            )
        if self.model.use_lstm:
            raise ConfigError(
                f"{self.ALGORITHM} trains feed-forward policies here: set model={{'use_lstm': False}} "
                "(recurrent policies train with PPO)"
            )
        if self.is_offline:
            raise ConfigError(
                f"{self.ALGORITHM} learns from its env runners' samples: input_ must be 'sampler' "
                "(learn from recorded data with BC, MARWIL or CQL)"
            )

    def _check_vtrace(self) -> None:
        if not self.vtrace:
            raise ConfigError(
                "IMPALA needs vtrace=True; for GAE advantages without V-trace use APPO with "
                "vtrace=False, or A2C"
            )


ImpalaConfig = IMPALAConfig  # RLlib's older name

__all__ = ["IMPALAConfig", "ImpalaConfig"]
