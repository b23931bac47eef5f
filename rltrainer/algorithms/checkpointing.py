"""Writing and reading an algorithm's checkpoints: ``save``, ``restore``, ``from_checkpoint``,
``resume_from``, and Tune's ``save_checkpoint``/``load_checkpoint`` hooks.

A checkpoint is a folder of pickle-free files (``rltrainer.checkpoints``): JSON metadata (the
algorithm, its config, spaces, counters and learning curve), the policy's weights and optimizer
state in safetensors, the observation filter and an algorithm's extra arrays (a replay buffer)
in npz. ``s3://`` targets are written to a temporary folder and uploaded, files first and the
manifest last (``rltrainer.checkpoint_store``).

``Checkpointing`` is a mixin of ``Algorithm``; ``Counters`` are the lifetime counters a
checkpoint carries.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Self

import numpy as np

from rltrainer.algorithms.callbacks import call_hook, loadable_config
from rltrainer.algorithms.trainable import tune_trainable
from rltrainer.checkpoint_store import apply_retention, checkpoint_uri, open_checkpoint, upload_checkpoint
from rltrainer.checkpoints import Checkpoint, write_checkpoint
from rltrainer.env.env_runner import EpisodeStats
from rltrainer.env.spaces import space_to_json
from rltrainer.errors import CheckpointError, ConfigError
from rltrainer.offline.output_writer import redirect_output, resolve_output
from rltrainer.results import flatten
from rltrainer.storage import StorageError, is_remote, join_uri, parent_uri

logger = logging.getLogger(__name__)


class SavedCheckpoint(str):
    """What ``save()`` returns: the checkpoint's folder or ``s3://`` URI, a plain ``str`` for
    ``restore()``, ``from_checkpoint()`` and the CLI. It also answers RLlib's forms of a save's
    result: ``result.checkpoint.path`` (the same string) and ``result.metrics`` (the training
    result the checkpoint was written after, ``{}`` before the first ``train()``)."""

    metrics: dict[str, Any]

    def __new__(cls, path: str, metrics: dict[str, Any] | None = None) -> SavedCheckpoint:
        saved = super().__new__(cls, path)
        saved.metrics = dict(metrics or {})
        return saved

    @property
    def checkpoint(self) -> SavedCheckpoint:
        """RLlib's ``save()`` result holds a checkpoint object; here it is the path itself."""
        return self

    @property
    def path(self) -> str:
        """The checkpoint's folder or URI (RLlib's ``checkpoint.path``)."""
        return str(self)


@dataclasses.dataclass
class Counters:
    """Lifetime counters; checkpoints store them so a restored run continues its curve."""

    training_iteration: int = 0
    timesteps_total: int = 0
    episodes_total: int = 0
    time_total_s: float = 0.0
    num_env_steps_trained: int = 0
    agent_timesteps_total: int = 0  # multi-agent: agent steps sampled
    num_agent_steps_trained: int = 0


class Checkpointing:
    """``Algorithm``'s checkpoint methods (see the module docstring)."""

    def save(self, checkpoint_dir: str | None = None) -> Any:
        """Write a checkpoint (default: ``<trial_dir>/checkpoint_<iteration>``); returns its path or
        URI, a ``SavedCheckpoint`` (a ``str`` that also has RLlib's ``.checkpoint.path``).

        An ``s3://`` target is written to a temporary folder, then uploaded: files first,
        manifest last. Saves into the trial folder then apply ``num_to_keep``. Raises
        ``StorageError`` when the upload fails after retries. Under Tune, Tune's
        ``Trainable.save`` (Tune's checkpoint folders, holding the files ``save_checkpoint`` writes).
        """
        if self._under_tune:
            return tune_trainable().save(self, checkpoint_dir)
        default = checkpoint_dir is None
        if checkpoint_dir is None:
            checkpoint_dir = join_uri(self.trial_uri, f"checkpoint_{self.counters.training_iteration:06d}")
        path = self._write_checkpoint(checkpoint_dir)
        if default and self.config.num_to_keep is not None:
            self._apply_retention()
        return SavedCheckpoint(path, self._last_result)

    def save_checkpoint(self, checkpoint_dir: str) -> str:
        """Write this algorithm's checkpoint files into ``checkpoint_dir`` (Tune's hook; no pickle)."""
        return self._write_checkpoint(checkpoint_dir)

    def _write_checkpoint(self, checkpoint_dir: str) -> str:
        if self._multi_agent:
            from rltrainer.algorithms.multi_agent import checkpoint_parts

            policy_meta, policy_tensors, policy_arrays = checkpoint_parts(self)
            state = {"extra": policy_meta.pop("learner")}
        else:
            state = self.learner_group.get_state()
            policy_meta = {
                "observation_space": space_to_json(self.observation_space),
                "action_space": space_to_json(self.action_space),
            }
            policy_tensors = {
                "policy.safetensors": state["weights"],
                "optimizer.safetensors": state["optimizer"],
            }
            policy_arrays = {"filter.npz": self.env_runner_group.local_worker().get_filter_state()}
        metadata = {
            "algorithm": type(self).__name__,
            "config": self.config.to_dict(),
            **policy_meta,
            "counters": dataclasses.asdict(self.counters),
            "learning_curve": {
                "episode_returns": [e.episode_return for e in self._episodes],
                "episode_lens": [e.episode_len for e in self._episodes],
            },
            "learner": state["extra"],
            "observation_filter": self.config.observation_filter,
            "created_at": datetime.now().astimezone().isoformat(timespec="seconds"),
            "saved_at": time.time(),
            "score": self._checkpoint_score(),
        }
        files = {"tensors": policy_tensors, "arrays": {**policy_arrays, **self.checkpoint_arrays()}}
        if is_remote(checkpoint_dir):
            with tempfile.TemporaryDirectory(prefix="rltrainer_save_") as tmp:
                write_checkpoint(tmp, metadata, **files)
                path = upload_checkpoint(tmp, checkpoint_dir, self.config.storage_options)
        else:
            path = write_checkpoint(checkpoint_dir, metadata, **files)
        return path

    def checkpoint_arrays(self) -> dict[str, dict[str, np.ndarray]]:
        """Extra ``{file name: arrays}`` a checkpoint stores (off-policy: the replay buffer)."""
        return {}

    def restore_arrays(self, checkpoint: Checkpoint) -> None:
        """Read back what ``checkpoint_arrays`` saved (called after the weights are restored)."""

    def _checkpoint_score(self) -> dict[str, Any] | None:
        """``checkpoint_score_attribute`` and its value in the last result (saved for retention)."""
        attribute = self.config.checkpoint_score_attribute
        if attribute is None:
            return None
        value = flatten(self._last_result or {}).get(attribute)
        finite = isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value)
        return {"attribute": attribute, "value": float(value) if finite else None}

    def _apply_retention(self) -> None:
        cfg = self.config
        order = cfg.checkpoint_score_order if cfg.checkpoint_score_attribute else None
        try:
            deleted = apply_retention(self.trial_uri, cfg.num_to_keep, order, cfg.storage_options)
        except StorageError as err:
            logger.warning("old checkpoints not deleted (tried again after the next save): %s", err)
            return
        for uri in deleted:
            logger.info("deleted checkpoint %s (num_to_keep=%d)", uri, cfg.num_to_keep)

    save_to_path = save

    def restore(self, checkpoint_path: Any) -> None:
        """Load weights, optimizer, filter, counters and learning curve from a checkpoint.

        ``checkpoint_path`` may be ``s3://...``: it is downloaded and verified first. Tune's
        checkpoint objects (a result's ``checkpoint``) are accepted too.
        """
        if not isinstance(checkpoint_path, str | Path):  # Tune's Checkpoint or training result
            if self._under_tune:
                tune_trainable().restore(self, checkpoint_path)  # Tune's counters, then load_checkpoint()
                return
            checkpoint_path = checkpoint_uri(checkpoint_path)
        with open_checkpoint(str(checkpoint_path), self.config.storage_options) as checkpoint:
            self._restore_from(checkpoint)

    def load_checkpoint(self, checkpoint: Any) -> None:
        """Restore from a local checkpoint folder (Tune's hook, given the folder Tune fetched)."""
        with open_checkpoint(str(checkpoint), self.config.storage_options) as opened:
            self._restore_from(opened)

    def resume_from(self, checkpoint_path: str) -> None:
        """Restore a checkpoint of this experiment and keep writing to its trial folder."""
        self.restore(checkpoint_path)
        self._resumed_at = (self.counters.training_iteration, self.counters.timesteps_total)
        if self._result_logger is not None:
            self._result_logger.close()
            self._result_logger = None
        self._remove_cache()
        self._trial_uri = parent_uri(checkpoint_path)
        if self.config.output == "logdir":  # the sampled batches go to the resumed trial's folder too
            self.config._output_path = resolve_output("logdir", lambda: self.trial_uri)
            self.env_runner_group.foreach_worker(partial(redirect_output, path=self.config._output_path))

    restore_from_path = restore

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint_path: Any,
        config_overrides: dict | None = None,
        *,
        policy_ids: Any = None,
        policy_mapping_fn: Any = None,
        policies_to_train: Any = None,
    ) -> Self:
        """Rebuild the algorithm a checkpoint was written by, from the checkpoint alone.

        ``checkpoint_path`` may be ``s3://...`` (S3 settings: ``config_overrides["storage_options"]``
        over the AWS environment); it is downloaded and verified first. A Tune checkpoint
        (``result_grid.get_best_result(...).checkpoint``) works too, local or on S3.

        For a multi-agent checkpoint, as RLlib's: ``policy_ids`` restores only these policies,
        ``policy_mapping_fn`` maps agents from now on, ``policies_to_train`` says which learn
        (default: those that learned and are kept).
        """
        checkpoint_path = checkpoint_uri(checkpoint_path)
        options = (config_overrides or {}).get("storage_options")
        selection = {
            "policy_ids": policy_ids,
            "policy_mapping_fn": policy_mapping_fn,
            "policies_to_train": policies_to_train,
        }
        with open_checkpoint(checkpoint_path, options) as checkpoint:
            return cls._build_from(checkpoint, checkpoint_path, config_overrides, selection)

    @classmethod
    def _build_from(
        cls,
        checkpoint: Checkpoint,
        checkpoint_path: str,
        config_overrides: dict | None,
        selection: dict[str, Any] | None = None,
    ) -> Self:
        from rltrainer.algorithms.multi_agent import select_policies
        from rltrainer.algorithms.registry import get_algorithm_class

        algo_class = get_algorithm_class(checkpoint.metadata["algorithm"])
        if not issubclass(algo_class, cls):
            raise CheckpointError(
                f"{checkpoint_path!r} is a {algo_class.__name__} checkpoint, not {cls.__name__}"
            )
        try:
            config = algo_class.config_class.from_dict(
                loadable_config(checkpoint.metadata["config"], config_overrides)
            )
        except ConfigError as err:
            raise CheckpointError(f"checkpoint {checkpoint_path!r} has an invalid config: {err}") from None
        if config_overrides:
            config.update_from_dict(config_overrides)
        kept = select_policies(config, checkpoint, **(selection or {}))
        algo = algo_class(config)
        try:
            algo._restore_from(checkpoint, kept)
        except BaseException:
            algo.stop()
            raise
        return algo

    def _restore_from(self, checkpoint: Checkpoint, policy_ids: list[str] | None = None) -> None:
        """The checkpoint's state (``policy_ids``: of a multi-agent one, only these policies')."""
        meta = checkpoint.metadata
        if meta["algorithm"] != type(self).__name__:
            raise CheckpointError(
                f"cannot restore a {meta['algorithm']} checkpoint into {type(self).__name__}"
            )
        saved_filter = meta.get("observation_filter", "NoFilter")
        if saved_filter != self.config.observation_filter:
            raise CheckpointError(
                f"checkpoint {checkpoint.source!r} was trained with observation_filter="
                f"{saved_filter!r}; set env_runners(observation_filter={saved_filter!r}) to restore it"
            )
        if self._multi_agent:
            from rltrainer.algorithms.multi_agent import restore

            restore(self, checkpoint, policy_ids)
        else:
            self._restore_policy(checkpoint)
        self.counters = Counters(**meta["counters"])
        self.restore_arrays(checkpoint)
        curve = meta.get("learning_curve", {})
        self._episodes.clear()
        self._episodes.extend(
            EpisodeStats(r, n)
            for r, n in zip(curve.get("episode_returns", []), curve.get("episode_lens", []), strict=True)
        )
        self._driver_weights.mark_synced()
        call_hook(self.callbacks, "on_checkpoint_loaded", algorithm=self)

    def _restore_policy(self, checkpoint: Checkpoint) -> None:
        """A single-agent checkpoint's weights, optimizer and filter (checked before any is loaded)."""
        meta = checkpoint.metadata
        if "policies" in meta:
            raise CheckpointError(
                f"checkpoint {checkpoint.source!r} is multi-agent (policies {', '.join(meta['policies'])}); "
                "restore it into an algorithm with the same multi_agent() config"
            )
        # Check everything that can fail before changing any state: no half-restored algorithm.
        for key, space in (
            ("observation_space", self.observation_space),
            ("action_space", self.action_space),
        ):
            if meta.get(key) != space_to_json(space):
                raise CheckpointError(
                    f"checkpoint {checkpoint.source!r} was trained with {key} {meta.get(key)}, "
                    f"but this env has {space_to_json(space)}"
                )
        learner = self.learner_group.local_learner
        weights = checkpoint.tensors("policy.safetensors")
        expected = {name: tuple(t.shape) for name, t in learner.module.state_dict().items()}
        if {name: tuple(t.shape) for name, t in weights.items()} != expected:
            raise CheckpointError(
                f"checkpoint {checkpoint.source!r} holds a different network than this config builds "
                f"(model={self.config.model.model_dump()}); restore with the checkpoint's model settings"
            )
        state = {
            "weights": weights,
            "optimizer": checkpoint.tensors("optimizer.safetensors"),
            "extra": meta["learner"],
        }
        filter_state = checkpoint.arrays("filter.npz")
        self.learner_group.set_state(state)
        self.env_runner_group.sync_weights(self.learner_group.get_weights())
        self.env_runner_group.set_filter_state(filter_state)
