"""``Learner``: owns the trained module and its optimizer; algorithms add the loss.

The base class handles what every gradient-based learner shares: device placement,
Adam, the learning-rate schedule, gradient clipping, and a state that checkpoints
store as plain tensors (safetensors) and JSON.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from rltrainer.algorithms.callbacks import call_hook, config_callbacks, overrides
from rltrainer.core.optim import Adam, FlatParameters
from rltrainer.core.tensors import as_tensor
from rltrainer.errors import NumericalError
from rltrainer.utils.debugging import apply_debugging
from rltrainer.utils.sample_batch import SampleBatch, written_columns
from rltrainer.utils.schedules import PiecewiseSchedule

logger = logging.getLogger(__name__)

ADAM_EPS = 1e-5  # SB3's and CleanRL's Adam epsilon for on-policy training.


class DeferredStats(Mapping[str, float]):
    """Learner stats computed when first read: a learner that updates once per env step (DDPG,
    TD3) returns these, and only the iteration's last update's are ever read (``Algorithm.step``
    reports them as plain dicts, see ``plain_stats``). ``compute`` must read only tensors the
    later updates do not write to."""

    __slots__ = ("_compute", "_values")

    def __init__(self, compute: Callable[[], dict[str, float]]) -> None:
        self._compute: Callable[[], dict[str, float]] | None = compute
        self._values: dict[str, float] | None = None

    def _read(self) -> dict[str, float]:
        if self._values is None:
            self._values = self._compute()
            self._compute = None
        return self._values

    def __getitem__(self, key: str) -> float:
        return self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def __repr__(self) -> str:
        return f"DeferredStats({self._read()!r})"


def plain_stats(stats: Any) -> Any:
    """``stats`` (a learner's, or ``{policy id: a learner's}``) with ``DeferredStats`` computed
    into plain dicts."""
    if isinstance(stats, DeferredStats):
        return dict(stats)
    if isinstance(stats, dict) and any(isinstance(value, DeferredStats) for value in stats.values()):
        return {key: plain_stats(value) for key, value in stats.items()}
    return stats


class Learner:
    """Trains ``module`` (built by the policy) on batches; subclasses implement ``update``."""

    #: Whether ``torch_compile_learner`` has something to compile (a gradient-based learner).
    COMPILES_FORWARD: ClassVar[bool] = True
    #: Whether the learner has a per-minibatch ``compute_loss`` of tensors that
    #: ``torch_compile_learner_what_to_compile="complete_update"`` compiles.
    COMPILES_LOSS: ClassVar[bool] = False

    def __init__(self, module: nn.Module, dist_class: type, config: Any, device: str = "cpu") -> None:
        self.config = config
        apply_debugging(config)  # log level; in a learner actor also the seeds (minibatch order)
        self.device = torch.device(device)
        self._on_cpu = self.device.type == "cpu"  # batches need no copy to the device
        self.module = module.to(self.device)
        # What the loss calls: the module itself, or its DistributedDataParallel wrapper.
        self.train_module: nn.Module = self.module
        self.world_size = 1  # learners sharing each update (see setup_data_parallel)
        self.dist_class = dist_class
        self.build_optimizers()
        self.skipped_steps = 0  # gradient steps skipped for a non-finite loss (skip_batch)
        self.init_callbacks()

    def build_optimizers(self) -> None:
        """One Adam over the whole module, at the config's ``lr`` schedule (subclasses with
        several optimizers override this)."""
        self.lr_schedule = PiecewiseSchedule(self.config.lr)
        self.flat_params = FlatParameters(self.module)
        self.optimizer = Adam(self.flat_params, lr=self.lr_schedule(0), eps=ADAM_EPS)

    def init_callbacks(self) -> None:
        """This learner's instance of the config's callbacks (for ``on_learn_on_batch``)."""
        self.callbacks = config_callbacks(self.config)
        self._calls_learn_hook = overrides(self.callbacks, "on_learn_on_batch")

    def update(self, rollouts: Any, timestep: int) -> dict[str, float]:
        """Build a train batch from the env runners' rollouts and update on it."""
        batch, extra = self.on_learn_on_batch(self.build_batch(rollouts))
        stats = self.update_from_batch(batch, timestep)
        return {**stats, **extra} if extra else stats

    def stack_key(self) -> Hashable | None:
        """Learners of several policies with equal keys are updated together by
        ``update_stacked`` (``MultiAgentLearnerGroup``); ``None``: this one updates alone."""
        return None

    @staticmethod
    def update_stacked(learners: list[Learner], rollouts: list[Any], timestep: int) -> list[dict[str, float]]:
        """``[learner.update(its rollouts, timestep) for each]`` as one update of learners of
        one ``stack_key``."""
        raise NotImplementedError

    def on_learn_on_batch(self, batch: Any) -> tuple[Any, dict[str, Any]]:
        """Run the ``on_learn_on_batch`` callback on a train batch (a NamedTuple of columns).

        Returns the batch with what the callback rewrote, and the keys it added to ``result``.
        """
        if not self._calls_learn_hook:
            return batch, {}
        columns = {name: value for name, value in batch._asdict().items() if value is not None}
        train_batch = SampleBatch(columns)
        result: dict[str, Any] = {}
        call_hook(self.callbacks, "on_learn_on_batch", policy=self, train_batch=train_batch, result=result)
        shapes = {name: np.shape(value) for name, value in columns.items()}
        return batch._replace(**written_columns(train_batch, shapes, "on_learn_on_batch")), result

    def compiled_modules(self) -> list[nn.Module]:
        """The modules the loss calls, which ``torch_compile_learner`` compiles in place."""
        return [self.module]

    @property
    def model(self) -> nn.Module:
        """The trained module (what RLlib's ``policy.model`` is in ``on_learn_on_batch``)."""
        return self.module

    def build_batch(self, rollouts: Any) -> Any:
        """Rollouts -> a flat train batch (numpy). Implemented by each algorithm."""
        raise NotImplementedError

    def update_from_batch(self, batch: Any, timestep: int) -> dict[str, float]:
        """One update on a train batch; returns learner stats. Implemented by each algorithm."""
        raise NotImplementedError

    def minibatches(self, data: Any, size: int, minibatch: int) -> list[Any]:
        """``data`` (a NamedTuple of tensors with ``size`` rows; ``None`` columns stay ``None``)
        in shuffled minibatches of ``minibatch`` rows (the rest of the rows left out), or as
        itself when one minibatch holds it all (order does not matter then)."""
        if minibatch >= size:
            return [data]
        order = torch.randperm(size, device=self.device)
        return [
            type(data)(
                *(None if column is None else column[order[start : start + minibatch]] for column in data)
            )
            for start in range(0, size - minibatch + 1, minibatch)
        ]

    def setup_data_parallel(self, init_method: str, rank: int, world_size: int) -> None:
        """Join the learners' process group; gradients are then averaged across learners (DDP).

        gloo on CPU, nccl on CUDA. DDP broadcasts rank 0's parameters on construction, so
        all learners start identical, and identical averaged gradients keep them identical.
        """
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        backend = "nccl" if self.device.type == "cuda" else "gloo"
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size)
        device_ids = [self.device.index or 0] if self.device.type == "cuda" else None
        self.train_module = DistributedDataParallel(self.module, device_ids=device_ids)
        self.world_size = world_size

    def mean_across_learners(self, values: torch.Tensor) -> torch.Tensor:
        """The mean of ``values`` over all learners (itself when training alone)."""
        if self.world_size == 1:
            return values
        import torch.distributed as dist

        values = values.clone()
        dist.all_reduce(values)
        return values / self.world_size

    # --- shared pieces -----------------------------------------------------------------
    def set_lr_for(self, timestep: int) -> float:
        self.optimizer.lr = self.lr_schedule(timestep)
        return self.optimizer.lr

    def loss_is_finite(self, loss: torch.Tensor, terms: Callable[[], dict[str, float]]) -> bool:
        """Whether ``loss`` is finite (one device sync). If not, stop with a ``NumericalError``
        naming the non-finite ``terms()``, or with ``on_nonfinite="skip_batch"`` warn and return
        False: the caller skips this gradient step. With several learners they decide together
        (a learner skipping DDP's backward would leave the others waiting in its all-reduce)."""
        if self.world_size == 1:  # one host read of the loss, no other op
            if math.isfinite(loss.item()):
                return True
        else:
            import torch.distributed as dist

            finite = torch.isfinite(loss.detach()).to(torch.int32).reshape(1)
            dist.all_reduce(finite, op=dist.ReduceOp.MIN)
            if bool(finite.item()):
                return True
        values = terms()
        bad = [name for name, value in values.items() if not math.isfinite(value)]
        shown = ", ".join(f"{name}={value:.4g}" for name, value in values.items())
        named = f"{', '.join(bad)} not finite" if bad else "not finite on another learner"
        message = f"{type(self).__name__}: the loss is {named} ({shown}; lr {self.current_lr():.3g})"
        if self.config.on_nonfinite == "stop":
            raise NumericalError(
                f"{message}; lower lr, clip gradients (grad_clip), or set "
                ".debugging(on_nonfinite='skip_batch') to skip such steps"
            )
        self.skipped_steps += 1
        logger.warning("%s: gradient step skipped (on_nonfinite='skip_batch')", message)
        return False

    def current_lr(self) -> float:
        """The learning rate of the step being taken (for messages)."""
        return self.optimizer.lr

    def apply_gradients(self, loss: torch.Tensor) -> None:
        self.flat_params.zero_grad()
        loss.backward()
        self.step_with_gradients()

    def step_with_gradients(self) -> None:
        """One optimizer step with the gradients in the parameters' ``.grad``, clipped as configured."""
        if self.config.grad_clip is not None:
            self.flat_params.clip_grad(self.config.grad_clip, self.config.grad_clip_by)
        self.optimizer.step()

    def to_tensor(self, array: np.ndarray) -> torch.Tensor:
        array = np.ascontiguousarray(array)
        if not array.flags.writeable:  # e.g. from Ray's object store
            array = array.copy()
        tensor = torch.from_numpy(array)
        return tensor if self._on_cpu else tensor.to(self.device)

    # --- weights and state ----------------------------------------------------------------
    def get_weights(self) -> dict[str, torch.Tensor]:
        # Clones: the parameters are views into one flat buffer (see FlatParameters).
        return {k: v.detach().cpu().clone() for k, v in self.module.state_dict().items()}

    def set_weights(self, weights: dict[str, Any]) -> None:
        self.module.load_state_dict({k: as_tensor(v) for k, v in weights.items()})

    def get_optimizer_state(self) -> dict[str, torch.Tensor]:
        """Optimizer state as flat tensors (stored with safetensors, no pickle)."""
        return self.optimizer.state_tensors()

    def set_optimizer_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self.optimizer.load_state_tensors(tensors)

    def get_extra_state(self) -> dict[str, Any]:
        """JSON-able algorithm-specific state (e.g. PPO's adaptive KL coefficient)."""
        return {}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        pass


def make_learner(
    learner_class: type[Learner],
    observation_space: Any,
    action_space: Any,
    config: Any,
    device: str,
    custom_models: dict[str, type] | None = None,
    policy_class: type | None = None,
) -> Learner:
    """A learner with a freshly initialized network (shipped to learner actors by Ray, with
    the driver's ``ModelCatalog`` registrations); ``policy_class`` builds the network (default:
    the algorithm's)."""
    from rltrainer.models.catalog import ModelCatalog

    ModelCatalog.register_all(custom_models)
    from rltrainer.core.torch_compile import compile_learner

    policy = (policy_class or config.get_policy_class())(observation_space, action_space, config)
    learner = learner_class(policy.model, policy.dist_class, config, device=device)
    compile_learner(learner)
    return learner
