"""What older Tune analyses offered and Ray 2.60's ``ExperimentAnalysis`` no longer has.

``get_trial_checkpoints_paths(analysis, trial, metric)`` lists a trial's checkpoints with a
metric's value at each, as ``analysis.get_trial_checkpoints_paths(trial, metric)`` did.
"""

from __future__ import annotations

from typing import Any

from rltrainer.checkpoint_store import checkpoint_uri


def get_trial_checkpoints_paths(
    analysis: Any, trial: Any, metric: str = "training_iteration"
) -> list[tuple[str, Any]]:
    """``[(checkpoint path or s3:// URI, value of metric), ...]`` for ``trial``, oldest first.

    ``analysis``: the ``ExperimentAnalysis`` ``tune.run`` returned (or ``None``); ``trial`` one
    of its ``trials`` or a trial's result folder name.
    """
    if isinstance(trial, str):
        trial = next(t for t in analysis.trials if trial in (t.trial_id, t.path, str(t)))
    kept = trial.run_metadata.checkpoint_manager.best_checkpoint_results
    ordered = sorted(kept, key=lambda r: r.metrics.get("training_iteration", 0))
    return [(checkpoint_uri(r.checkpoint), r.metrics.get(metric)) for r in ordered]


__all__ = ["get_trial_checkpoints_paths"]
