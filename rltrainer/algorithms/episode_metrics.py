"""Episode metrics of a result: returns, lengths, the callbacks' custom metrics and histograms.

Training (``Algorithm.step``) and evaluation (``evaluation_loop``) both summarize their
episodes with ``episode_metrics``.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def episode_metrics(episodes: Any, keep_per_episode_custom_metrics: bool = False) -> dict[str, Any]:
    """Mean/min/max return and mean length of ``episodes`` (NaN when there are none), the
    callbacks' ``custom_metrics`` (``<name>_mean|min|max``, or per-episode lists) and
    ``hist_stats``: each episode's return and length (RLlib's ``episode_reward`` and
    ``episode_lengths``) and each callbacks' ``hist_data`` list, concatenated over the episodes."""
    if not episodes:
        nan = float("nan")
        return {
            "episode_return_mean": nan,
            "episode_return_min": nan,
            "episode_return_max": nan,
            "episode_len_mean": nan,
            "custom_metrics": {},
            "hist_stats": {"episode_reward": [], "episode_lengths": []},
        }
    returns = np.array([e.episode_return for e in episodes])
    metrics: dict[str, Any] = {
        "episode_return_mean": float(returns.mean()),
        "episode_return_min": float(returns.min()),
        "episode_return_max": float(returns.max()),
        "episode_len_mean": float(np.mean([e.episode_len for e in episodes])),
        "custom_metrics": custom_metric_summary(episodes, keep_per_episode_custom_metrics),
    }
    # RLlib's histograms of the smoothing window's episodes, then the callbacks' hist_data.
    hist: dict[str, list] = {
        "episode_reward": returns.tolist(),
        "episode_lengths": [e.episode_len for e in episodes],
    }
    for episode in episodes:
        for name, values in (episode.hist_data or {}).items():
            hist.setdefault(name, []).extend(values if isinstance(values, list | tuple) else [values])
    metrics["hist_stats"] = hist
    return metrics


def custom_metric_summary(episodes: Any, keep_per_episode: bool = False) -> dict[str, Any]:
    """``{name}_mean``, ``_min`` and ``_max`` over the episodes that set the metric (RLlib's
    rule: values that are not finite numbers are left out), or each name's list of values."""
    values: dict[str, list] = {}
    for episode in episodes:
        for name, value in (episode.custom_metrics or {}).items():
            values.setdefault(name, []).append(value)
    if keep_per_episode:
        return values
    summary: dict[str, float] = {}
    for name, items in values.items():
        numbers = [
            float(v) for v in items if isinstance(v, int | float | np.number) and not isinstance(v, bool)
        ]
        numbers = [v for v in numbers if np.isfinite(v)]
        if numbers:
            summary[f"{name}_mean"] = float(np.mean(numbers))
            summary[f"{name}_min"] = float(np.min(numbers))
            summary[f"{name}_max"] = float(np.max(numbers))
    return summary
