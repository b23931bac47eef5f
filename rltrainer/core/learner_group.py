"""``LearnerGroup``: where updates happen, in the driver or on learner actors.

``num_learners=0`` trains the driver's learner. ``num_learners >= 1`` creates that many
learner actors (each with ``num_gpus_per_learner`` / ``num_cpus_per_learner``, pinned to its
placement-group bundle). The driver's learner then only builds train batches (values and
advantages with the current weights) and mirrors the trained weights; each update splits
the batch evenly so every learner takes the same number of synchronized (DDP) steps.

A learner actor that dies is replaced with the whole group (``restart_failed_learners``): see
``LearnerGroup._with_restarts`` and the README's design notes, "Learner restarts".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rltrainer.core.cluster import Placement, learner_bundle
from rltrainer.core.denormals import flush_denormals
from rltrainer.core.learner import Learner
from rltrainer.errors import NumericalError, WorkerError

logger = logging.getLogger(__name__)

LearnerFactory = Callable[[str], Learner]  # device -> learner

#: How long to look for a dead learner among the others after one raised: a DDP peer's death
#: also fails the survivors' collectives, and that error may arrive before the death does.
DEATH_GRACE_S = 10.0


class _LearnerDiedError(Exception):
    """A learner actor died (internal: the group restarts, or raises ``WorkerError``)."""


class LearnerActor:
    """Runs one learner in a Ray actor; its device comes from the resources it was given."""

    def __init__(self, factory: LearnerFactory) -> None:
        import ray

        gpu_ids = ray.get_gpu_ids()
        device = "cuda" if gpu_ids and torch.cuda.is_available() else "cpu"
        self.learner = factory(device)

    def address(self) -> tuple[str, int]:
        """An address and free port for the process group's rendezvous (used on rank 0)."""
        import socket

        import ray

        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def setup_data_parallel(self, init_method: str, rank: int, world_size: int) -> None:
        self.learner.setup_data_parallel(init_method, rank, world_size)

    @flush_denormals()
    def update_from_batch(self, batch: Any, timestep: int, with_state: bool = False) -> Any:
        """Stats of one update; with ``with_state``, ``(stats, state after the update)``."""
        stats = self.learner.update_from_batch(batch, timestep)
        return (stats, self.get_state()) if with_state else stats

    def device(self) -> str:
        return str(self.learner.device)

    def apply(self, fn: Callable[[Learner], Any]) -> Any:
        return fn(self.learner)

    def get_state(self) -> dict[str, Any]:
        return LearnerGroup.get_state_of(self.learner)

    def set_state(self, state: dict[str, Any]) -> None:
        LearnerGroup.set_state_of(self.learner, state)


class LearnerGroup:
    """Runs updates on the learner(s) and hands out the trained weights and state."""

    def __init__(
        self,
        factory: LearnerFactory,
        config: Any,
        placement: Placement | None = None,
        local_device: str = "cpu",
    ) -> None:
        self.config = config
        self._factory = factory
        self._placement = placement
        self._local = factory(local_device)
        self._remote: list[Any] = []
        self.num_restarts = 0
        # With learner actors: their state after the last update (or set_state), what restarted
        # learners start from. Every learner starts from the driver's freshly built weights.
        self._state: dict[str, Any] = {}
        if config.num_learners > 0:
            if placement is None:
                raise ValueError("learner actors need the algorithm's placement group")
            self._state = self.get_state_of(self._local)
            self._with_restarts(lambda: None)

    # --- learner actors and their restarts -----------------------------------------------
    def _start_actors(self) -> None:
        """Learner actors in their bundles, in one process group, holding ``self._state``."""
        import ray

        bundle = learner_bundle(self.config)
        self._remote = [
            ray.remote(LearnerActor)
            .options(**self._placement.actor_options(bundle, self._placement.learner_bundle(i)))
            .remote(self._factory)
            for i in range(self.config.num_learners)
        ]
        # Up and running (a bundle on a lost node waits for Ray to place it again), within bounds.
        self._get([a.device.remote() for a in self._remote], timeout_s=self.config.learner_restart_timeout_s)
        if len(self._remote) > 1:
            host, port = self._get([self._remote[0].address.remote()])[0]
            init_method = f"tcp://{host}:{port}"
            self._get(
                [
                    a.setup_data_parallel.remote(init_method, rank, len(self._remote))
                    for rank, a in enumerate(self._remote)
                ]
            )
        ref = ray.put(self._state)
        self._get([learner.set_state.remote(ref) for learner in self._remote])

    def _with_restarts(self, call: Callable[[], Any]) -> Any:
        """``call()`` on running learner actors. When one dies (at any point: while starting,
        updating, loading state), all are replaced from ``self._state`` and ``call`` runs again,
        as long as ``restart_failed_learners`` and ``max_num_learner_restarts`` allow."""
        while True:
            try:
                if not self._remote:
                    self._start_actors()
                return call()
            except _LearnerDiedError as died:
                self._kill_actors()  # the survivors too: stuck in a collective or mid-update
                self._count_restart(str(died))

    def _count_restart(self, cause: str) -> None:
        config = self.config
        if not config.restart_failed_learners:
            raise WorkerError(f"a learner actor died: {cause} (restart_failed_learners=False)")
        if self.num_restarts >= config.max_num_learner_restarts:
            raise WorkerError(
                f"a learner actor died: {cause}; max_num_learner_restarts="
                f"{config.max_num_learner_restarts} restarts are used up"
            )
        self.num_restarts += 1
        logger.warning(
            "a learner actor died (%s): restarting the %d learner(s) from the last update's state "
            "and running that call again (restart %d of at most %d)",
            cause,
            config.num_learners,
            self.num_restarts,
            config.max_num_learner_restarts,
        )

    def _kill_actors(self) -> None:
        import ray

        for learner in self._remote:
            ray.kill(learner, no_restart=True)
        self._remote = []

    @property
    def local_learner(self) -> Learner:
        """The driver's learner: it trains when ``num_learners=0``, else mirrors the weights."""
        return self._local

    @property
    def remote_learners(self) -> list[Any]:
        return list(self._remote)

    @flush_denormals()
    def update(self, rollouts: Any, timestep: int) -> dict[str, float]:
        if not self.config.num_learners:
            return self._local.update(rollouts, timestep)
        import ray

        batch, extra = self._local.on_learn_on_batch(self._local.build_batch(rollouts))
        shards = [ray.put(shard) for shard in _even_shards(batch, self.config.num_learners)]

        def run() -> tuple[dict[str, float], dict[str, Any]]:
            results = self._get(
                [
                    learner.update_from_batch.remote(shard, timestep, with_state=rank == 0)
                    for rank, (learner, shard) in enumerate(zip(self._remote, shards, strict=True))
                ]
            )
            return results[0]  # rank 0's stats (already averaged across learners) and state

        stats, self._state = self._with_restarts(run)
        self._local.set_weights(self._state["weights"])
        return {**stats, **extra}

    def get_weights(self) -> dict[str, torch.Tensor]:
        return self._local.get_weights()

    def foreach_learner(self, fn: Callable[[Learner], Any]) -> list[Any]:
        """``fn(learner)`` on every learner that trains (the actors, or the local one)."""
        if not self.config.num_learners:
            return [fn(self._local)]

        def run() -> tuple[list[Any], dict[str, Any]]:
            results = self._get([learner.apply.remote(fn) for learner in self._remote])
            return results, self._get([self._remote[0].get_state.remote()])[0]  # what fn changed

        results, self._state = self._with_restarts(run)
        return results

    # --- checkpoint state ---------------------------------------------------------------
    @staticmethod
    def get_state_of(learner: Learner) -> dict[str, Any]:
        return {
            "weights": learner.get_weights(),
            "optimizer": learner.get_optimizer_state(),
            "extra": learner.get_extra_state(),
        }

    @staticmethod
    def set_state_of(learner: Learner, state: dict[str, Any]) -> None:
        learner.set_weights(state["weights"])
        learner.set_optimizer_state(state["optimizer"])
        learner.set_extra_state(state["extra"])

    def get_state(self) -> dict[str, Any]:
        """Weights, optimizer state and algorithm extras of the (first) training learner."""
        if not self.config.num_learners:
            return self.get_state_of(self._local)
        return self._state

    def set_state(self, state: dict[str, Any]) -> None:
        self.set_state_of(self._local, state)
        if not self.config.num_learners:
            return
        import ray

        self._state = state
        ref = ray.put(state)
        self._with_restarts(lambda: self._get([learner.set_state.remote(ref) for learner in self._remote]))

    def stop(self) -> None:
        if self._remote:
            self._kill_actors()

    def _get(self, refs: list[Any], timeout_s: float | None = None) -> list[Any]:
        """The values of ``refs`` (learner calls), or the first failure as soon as it is known."""
        import ray

        died = _death_errors()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pending = list(refs)
        try:
            while pending:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                ready, pending = ray.wait(pending, num_returns=1, timeout=left)
                if not ready:
                    raise WorkerError(
                        f"{len(pending)} learner actor(s) did not start within learner_restart_timeout_s="
                        f"{timeout_s:g} s (their placement-group bundles wait for a node with free resources)"
                    )
                try:
                    ray.get(ready[0])
                except died:
                    raise
                except Exception:
                    _raise_first_death(pending)
                    raise
            return ray.get(list(refs))
        except NumericalError as err:  # a non-finite loss: the data or the settings, not the actor
            raise NumericalError(str(getattr(err, "cause", None) or err)) from None
        except died as err:
            raise _LearnerDiedError(str(err).strip().splitlines()[0]) from None


def _death_errors() -> tuple[type[Exception], ...]:
    """What a learner call raises when its learner died: the actor's death, or the call's result
    lost with the learner's node (a large result lives in that node's object store, and actor
    calls are not retried)."""
    from ray.exceptions import ObjectLostError, RayActorError

    return (RayActorError, ObjectLostError)


def _raise_first_death(pending: list[Any]) -> None:
    """Raise ``RayActorError`` (or ``ObjectLostError``) if one of ``pending`` learner calls ends
    that way within ``DEATH_GRACE_S`` (a learner's error that is a consequence of a peer's death)."""
    import ray

    ready, _ = ray.wait(pending, num_returns=len(pending), timeout=DEATH_GRACE_S) if pending else ([], [])
    for ref in ready:
        try:
            ray.get(ref)
        except _death_errors():
            raise
        except Exception:  # noqa: S112 - the first learner's own error is the one reported
            continue


def _even_shards(batch: Any, count: int) -> list[Any]:
    """``count`` equally sized, disjoint random shards of a batch of equal-length columns
    (rows are steps, or sequences for an LSTM policy; ``None`` columns stay ``None``)."""
    size = len(batch[0]) // count * count
    order = np.random.permutation(len(batch[0]))[:size].reshape(count, -1)
    return [
        type(batch)(*(None if column is None else np.asarray(column)[rows] for column in batch))
        for rows in order
    ]
