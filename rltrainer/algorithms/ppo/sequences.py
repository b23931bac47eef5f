"""PPO's train batch for recurrent policies: each env's fragment cut into sequences.

GAE runs over the fragment (``[T, N]``) with the values the sampler computed, as for any policy;
then every env's column is cut into sequences of ``max_seq_len`` steps, the last one padded,
each starting from the state the sampler recorded at that step (``RecurrentColumns.state_in``).
Then each sequence is split where an episode begins inside it (``split_at_resets``): the part
after the split becomes a sequence of its own, starting from zeros, so that no sequence holds a
reset and the LSTM runs over the whole batch in one call (one call per step otherwise: 5x
slower here). Minibatches are whole sequences; the loss reads the valid steps only (``mask``:
not padding, not reset steps). The learner replays the sampler's computation step for step.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

#: ``[B, L, ...]`` sequences (numpy from the learner's batching, tensors inside it): PPOBatch's
#: columns, then ``mask`` (the steps the loss reads), ``state_in`` (``[B, rows, cell]``: each
#: sequence's first state), ``resets`` (where the sampler zeroed the state: what the split reads;
#: none remain after it), ``prev_actions`` / ``prev_rewards`` (``None`` unless the LSTM reads them).
RecurrentPPOBatch = NamedTuple(  # noqa: UP014 - fields shared with PPOBatch by name
    "RecurrentPPOBatch",
    [
        (name, Any)
        for name in (
            *("obs", "actions", "action_logp", "vf_preds", "advantages", "value_targets"),
            *("mask", "state_in", "resets", "prev_actions", "prev_rewards"),
        )
    ],
)


def to_sequences(column: np.ndarray, length: int) -> np.ndarray:
    """``[T, N, ...]`` -> ``[N * S, L, ...]`` with ``S = ceil(T / L)``: env n's sequence s at
    row ``n * S + s``; the last sequence of each env zero-padded."""
    steps, envs = column.shape[:2]
    count = -(-steps // length)
    pad = count * length - steps
    if pad:
        column = np.concatenate([column, np.zeros((pad, envs, *column.shape[2:]), column.dtype)])
    column = column.reshape(count, length, envs, *column.shape[2:])
    return np.moveaxis(column, 2, 0).reshape(envs * count, length, *column.shape[3:])


def sequence_batch(
    rollout: Any, advantages: np.ndarray, value_targets: np.ndarray, length: int
) -> RecurrentPPOBatch:
    """One rollout's sequences (those holding at least one valid step)."""
    rec = rollout.recurrent
    columns = {
        "obs": rollout.obs,
        "actions": rollout.actions,
        "action_logp": rollout.action_logp,
        "vf_preds": rec.vf_preds,
        "advantages": advantages,
        "value_targets": value_targets,
        "mask": rollout.valid,
        "resets": rec.state_resets,
        "prev_actions": rec.prev_actions,
        "prev_rewards": rec.prev_rewards,
    }
    seqs = {name: None if value is None else to_sequences(value, length) for name, value in columns.items()}
    seqs["state_in"] = np.moveaxis(rec.state_in, 1, 0).reshape(-1, *rec.state_in.shape[2:])
    seqs = split_at_resets(seqs)
    keep = seqs["mask"].any(axis=1)
    if not keep.all():
        seqs = {name: None if value is None else value[keep] for name, value in seqs.items()}
    return RecurrentPPOBatch(**seqs)


def split_at_resets(seqs: dict[str, np.ndarray | None]) -> dict[str, np.ndarray | None]:
    """Sequences ``[B, L, ...]`` -> ``[B', L, ...]`` where each reset after a sequence's first
    step starts a new sequence (left-aligned, zero-padded, from the zero state)."""
    resets = seqs["resets"]
    starts = resets.copy()
    starts[:, 0] = True
    if starts.sum() == len(starts):  # no episode begins inside a sequence
        return seqs
    rows, length = starts.shape
    segment = np.cumsum(starts.reshape(-1)) - 1  # each step's new sequence
    steps = np.arange(rows * length)
    first = np.maximum.accumulate(np.where(starts.reshape(-1), steps, 0))  # its first step
    position = steps - first
    count = int(segment[-1]) + 1
    out: dict[str, np.ndarray | None] = {}
    for name, value in seqs.items():
        if value is None or name == "state_in":
            continue
        flat = value.reshape(rows * length, *value.shape[2:])
        column = np.zeros((count, length, *value.shape[2:]), value.dtype)
        column[segment, position] = flat
        out[name] = column
    state_in = np.zeros((count, *seqs["state_in"].shape[1:]), seqs["state_in"].dtype)
    state_in[segment.reshape(rows, length)[:, 0]] = seqs["state_in"]  # later parts start from zeros
    out["state_in"] = state_in
    out["resets"][:, 0] = False  # their state is zeros already
    return {name: out.get(name) for name in seqs}


def concatenate(parts: list[RecurrentPPOBatch]) -> RecurrentPPOBatch:
    if len(parts) == 1:
        return parts[0]
    return RecurrentPPOBatch(
        *(None if column[0] is None else np.concatenate(column) for column in zip(*parts, strict=True))
    )
