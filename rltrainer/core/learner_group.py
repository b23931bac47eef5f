"""``LearnerGroup``: where updates happen, in the driver or on learner actors.

``num_learners=0`` trains the driver's learner. ``num_learners >= 1`` creates that many
learner actors (each with ``num_gpus_per_learner`` / ``num_cpus_per_learner``, pinned to its
placement-group bundle). The driver's learner then only builds train batches (values and
advantages with the current weights) and mirrors the trained weights; each update splits
the batch evenly so every learner takes the same number of synchronized (DDP) steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rltrainer.core.cluster import Placement, learner_bundle
from rltrainer.core.learner import Learner
from rltrainer.errors import NumericalError, WorkerError

LearnerFactory = Callable[[str], Learner]  # device -> learner


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

    def update_from_batch(self, batch: Any, timestep: int) -> dict[str, float]:
        return self.learner.update_from_batch(batch, timestep)

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
        self._local = factory(local_device)
        self._remote: list[Any] = []
        if config.num_learners > 0:
            if placement is None:
                raise ValueError("learner actors need the algorithm's placement group")
            self._remote = self._create_actors(factory, placement)
            self.set_state(self.get_state_of(self._local))  # every learner starts from the same weights

    def _create_actors(self, factory: LearnerFactory, placement: Placement) -> list[Any]:
        import ray

        bundle = learner_bundle(self.config)
        actors = [
            ray.remote(LearnerActor)
            .options(**placement.actor_options(bundle, placement.learner_bundle(i)))
            .remote(factory)
            for i in range(self.config.num_learners)
        ]
        if len(actors) > 1:
            host, port = self._get([actors[0].address.remote()])[0]
            init_method = f"tcp://{host}:{port}"
            self._get(
                [
                    a.setup_data_parallel.remote(init_method, rank, len(actors))
                    for rank, a in enumerate(actors)
                ]
            )
        return actors

    @property
    def local_learner(self) -> Learner:
        """The driver's learner: it trains when ``num_learners=0``, else mirrors the weights."""
        return self._local

    @property
    def remote_learners(self) -> list[Any]:
        return list(self._remote)

    def update(self, rollouts: Any, timestep: int) -> dict[str, float]:
        if not self._remote:
            return self._local.update(rollouts, timestep)
        import ray

        batch, extra = self._local.on_learn_on_batch(self._local.build_batch(rollouts))
        shards = _even_shards(batch, len(self._remote))
        stats = self._get(
            [
                learner.update_from_batch.remote(ray.put(shard), timestep)
                for learner, shard in zip(self._remote, shards, strict=True)
            ]
        )
        self._local.set_weights(self._get([self._remote[0].apply.remote(lambda lrn: lrn.get_weights())])[0])
        return {**stats[0], **extra}  # stats[0]: already averaged across learners

    def get_weights(self) -> dict[str, torch.Tensor]:
        return self._local.get_weights()

    def foreach_learner(self, fn: Callable[[Learner], Any]) -> list[Any]:
        """``fn(learner)`` on every learner that trains (the actors, or the local one)."""
        if not self._remote:
            return [fn(self._local)]
        return self._get([learner.apply.remote(fn) for learner in self._remote])

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
        if not self._remote:
            return self.get_state_of(self._local)
        return self._get([self._remote[0].get_state.remote()])[0]

    def set_state(self, state: dict[str, Any]) -> None:
        self.set_state_of(self._local, state)
        if self._remote:
            import ray

            ref = ray.put(state)
            self._get([learner.set_state.remote(ref) for learner in self._remote])

    def stop(self) -> None:
        if self._remote:
            import ray

            for learner in self._remote:
                ray.kill(learner)
            self._remote = []

    def _get(self, refs: list[Any]) -> list[Any]:
        import ray
        from ray.exceptions import RayActorError

        try:
            return ray.get(refs)
        except NumericalError as err:  # a non-finite loss: the data or the settings, not the actor
            raise NumericalError(str(getattr(err, "cause", None) or err)) from None
        except RayActorError as err:
            cause = str(err).strip().splitlines()[0]
            raise WorkerError(f"a learner actor died: {cause}") from None


def _even_shards(batch: Any, count: int) -> list[Any]:
    """``count`` equally sized, disjoint random shards of a batch of equal-length columns."""
    size = len(batch[0]) // count * count
    order = np.random.permutation(len(batch[0]))[:size].reshape(count, -1)
    return [type(batch)(*(np.asarray(column)[rows] for column in batch)) for rows in order]
