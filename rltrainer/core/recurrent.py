"""Recurrent policies (``model={"use_lstm": True}``): an LSTM between the encoder and the heads.

The encoder (the MLP of ``fcnet_hiddens``, or the conv stack for image observations) reads each
observation; its features, with the previous action (one-hot for discrete spaces) and the
previous reward when ``lstm_use_prev_action`` / ``lstm_use_prev_reward`` are set, feed an LSTM of
``lstm_cell_size``; the policy head reads the LSTM's output. With ``vf_share_layers`` the value
head reads it too (RLlib's LSTM wrapper); without (the default) the value function has its own
encoder and LSTM (SB3's ``RecurrentPPO`` default, ``enable_critic_lstm``), which learned
stateless CartPole in far fewer steps here.

The recurrent state of a batch of envs is one array ``[B, 2, lstm_cell_size]`` (h, then c;
``[B, 4, ...]`` with the value function's own h and c after them); zeros at an episode's
start. Env runners act with ``step`` (one step of every env) and carry the state across steps
and fragments; learners replay sequences with ``forward``, each from the state the sampler had
at its first step and none spanning an episode's start (``rltrainer.algorithms.ppo.sequences``),
so the log-probabilities the learner computes before its first update are the ones the sampler
drew with.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rltrainer.core.composite_actions import action_parts, is_composite, part_columns
from rltrainer.core.models import ACTIVATIONS, ModelV2Calls, input_dict_rows, mlp


class RecurrentColumns(NamedTuple):
    """What a recurrent policy's rollout adds (``Rollout.recurrent``); ``[T, N, ...]`` arrays
    except ``state_in`` (``[S, N, rows, cell]``: the state at steps 0, L, 2L, ... with L =
    ``max_seq_len``) and ``last_vf_preds`` (``[N]``: the values of ``Rollout.last_obs``)."""

    state_in: np.ndarray
    state_resets: np.ndarray  # True where the state was zeroed before the step (an episode began)
    vf_preds: np.ndarray  # the values the sampler computed (the learner cannot without the state)
    last_vf_preds: np.ndarray
    prev_actions: np.ndarray | None  # with lstm_use_prev_action
    prev_rewards: np.ndarray | None  # with lstm_use_prev_reward


def prev_action_size(space: spaces.Space) -> int:
    """Columns the previous action takes in the LSTM's input: one-hot for discrete spaces (and
    discrete parts of Dict/Tuple actions, whose parts sit side by side)."""
    if is_composite(space):
        return sum(prev_action_size(part) for _, part in action_parts(space))
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    return int(np.prod(space.shape))


class MLPEncoder(nn.Module):
    """``fcnet_hiddens`` with their activation after every layer (``out_size`` features)."""

    def __init__(self, obs_size: int, hiddens: list[int], activation: str) -> None:
        super().__init__()
        self.layers = mlp([obs_size, *hiddens], activation, out_gain=np.sqrt(2))
        if hiddens:
            self.layers.append(ACTIVATIONS[activation]())
        self.out_size = hiddens[-1] if hiddens else obs_size

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.layers(obs.float())


class RecurrentActorCritic(ModelV2Calls, nn.Module):
    """Encoder -> LSTM -> policy and value heads (see the module doc)."""

    is_recurrent = True

    def __init__(
        self,
        encoder: nn.Module,
        action_space: spaces.Space,
        num_outputs: int,
        cell_size: int,
        use_prev_action: bool,
        use_prev_reward: bool,
        free_log_std: bool,
        mask_columns: slice | None = None,
        vf_encoder: nn.Module | None = None,
    ) -> None:
        """``vf_encoder``: the value function's own encoder (it then has its own LSTM too);
        ``None``: the value head reads the policy's LSTM."""
        super().__init__()
        self.encoder = encoder
        self.action_space = action_space
        self.cell_size = cell_size
        self.prev_action_size = prev_action_size(action_space) if use_prev_action else 0
        self.use_prev_reward = use_prev_reward
        self.free_log_std = free_log_std
        self.mask_columns = mask_columns
        pi_outputs = num_outputs // 2 if free_log_std else num_outputs
        extra_inputs = self.prev_action_size + int(use_prev_reward)
        self.lstm = nn.LSTM(encoder.out_size + extra_inputs, cell_size)
        self.vf_encoder = vf_encoder
        self.vf_lstm = None if vf_encoder is None else nn.LSTM(vf_encoder.out_size + extra_inputs, cell_size)
        self.state_rows = 2 if vf_encoder is None else 4  # h, c (and the value function's h, c)
        self.pi = mlp([cell_size, pi_outputs], "linear", out_gain=0.01)
        self.vf = mlp([cell_size, 1], "linear", out_gain=1.0)
        if free_log_std:
            self.log_std = nn.Parameter(torch.zeros(pi_outputs))

    def get_initial_state(self) -> list[np.ndarray]:
        """RLlib's initial state: ``[h, c]`` (then the value function's ``h, c`` when it has its
        own LSTM), zeros of ``[lstm_cell_size]`` each."""
        return [np.zeros(self.cell_size, np.float32) for _ in range(self.state_rows)]

    # --- the computation ---------------------------------------------------------------
    def _inputs(
        self, encoder: nn.Module, obs: torch.Tensor, prev_actions: Any, prev_rewards: Any
    ) -> torch.Tensor:
        """``[M, in]`` LSTM inputs for ``M`` flat observations."""
        parts = [encoder(obs)]
        if self.prev_action_size:
            parts.append(self._encode_actions(prev_actions, obs.shape[0], obs.device))
        if self.use_prev_reward:
            rewards = torch.zeros(obs.shape[0], device=obs.device) if prev_rewards is None else prev_rewards
            parts.append(torch.as_tensor(rewards, device=obs.device).float().reshape(obs.shape[0], 1))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    def _encode_actions(self, actions: Any, rows: int, device: torch.device) -> torch.Tensor:
        if actions is None:
            return torch.zeros(rows, self.prev_action_size, device=device)
        actions = torch.as_tensor(actions, device=device)
        if not is_composite(self.action_space):
            return _encode_action(self.action_space, actions, rows, device)
        # A Dict/Tuple action's row: each part's columns, encoded as that part alone would be.
        row, parts = actions.reshape(rows, -1), action_parts(self.action_space)
        encoded = [
            _encode_action(part, row[:, columns], rows, device)
            for (_, part), columns in zip(parts, part_columns(parts), strict=True)
        ]
        return torch.cat(encoded, dim=-1)

    def _towers(self) -> list[tuple[nn.Module, nn.LSTM]]:
        """(encoder, LSTM) pairs: the policy's, then the value function's own if it has one."""
        towers = [(self.encoder, self.lstm)]
        if self.vf_encoder is not None:
            towers.append((self.vf_encoder, self.vf_lstm))
        return towers

    def _heads(
        self, pi_out: torch.Tensor, vf_out: torch.Tensor, obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        dist_inputs = self.pi(pi_out)
        if self.free_log_std:
            dist_inputs = torch.cat([dist_inputs, self.log_std.expand_as(dist_inputs)], dim=-1)
        if self.mask_columns is not None:
            from rltrainer.core.action_masks import penalty

            dist_inputs = dist_inputs + penalty(obs, self.mask_columns)
        return dist_inputs, self.vf(vf_out).squeeze(-1)

    def step(
        self, obs: torch.Tensor, state: torch.Tensor, prev_actions: Any = None, prev_rewards: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step of ``B`` envs: ``obs [B, D]``, ``state [B, rows, cell]`` (rows: 2, or 4 with
        the value function's LSTM) -> ``(dist_inputs [B, out], values [B], state_out)``."""
        outs, states = [], []
        for i, (encoder, lstm) in enumerate(self._towers()):
            x = self._inputs(encoder, obs, prev_actions, prev_rewards)
            h = state[:, 2 * i].unsqueeze(0).contiguous()
            c = state[:, 2 * i + 1].unsqueeze(0).contiguous()
            out, (h, c) = lstm(x.unsqueeze(0), (h, c))
            outs.append(out[0])
            states += [h[0], c[0]]
        dist_inputs, values = self._heads(outs[0], outs[-1], obs)
        return dist_inputs, values, torch.stack(states, dim=1)

    def forward(
        self,
        obs: Any,
        state: Any = None,
        seq_lens: Any = None,  # noqa: ARG002 - RLlib's call; sequences here are [B, L]
        prev_actions: Any = None,
        prev_rewards: Any = None,
    ) -> tuple[torch.Tensor, Any]:
        """Sequences within one episode each: ``obs [B, L, D]``, ``state [B, rows, cell]`` (each
        sequence's first state), previous actions ``[B, L, ...]`` and rewards ``[B, L]`` ->
        ``(dist_inputs [B, L, out], values [B, L])``.

        RLlib's call ``model({"obs": rows, "prev_actions": ..., "prev_rewards": ...}, state)``
        runs one step per row and returns ``(dist_inputs, [h, c])``."""
        if isinstance(obs, dict):
            return self._call_input_dict(obs, state)
        batch, length = obs.shape[:2]
        flat_obs = obs.reshape(batch * length, -1)
        flat = None if prev_actions is None else prev_actions.reshape(batch * length, -1)
        rewards = None if prev_rewards is None else prev_rewards.reshape(batch * length)
        outs = []
        for i, (encoder, lstm) in enumerate(self._towers()):
            x = self._inputs(encoder, flat_obs, flat, rewards).reshape(batch, length, -1).transpose(0, 1)
            h = state[:, 2 * i].unsqueeze(0).contiguous()
            c = state[:, 2 * i + 1].unsqueeze(0).contiguous()
            out = lstm(x, (h, c))[0]
            outs.append(out.transpose(0, 1).reshape(batch * length, -1))
        dist_inputs, values = self._heads(outs[0], outs[-1], flat_obs)
        return dist_inputs.reshape(batch, length, -1), values.reshape(batch, length)

    def _call_input_dict(self, input_dict: dict, state: Any) -> tuple[torch.Tensor, list]:
        rows = input_dict_rows(self, input_dict)
        if state is None or len(state) == 0:
            packed = torch.zeros(len(rows), self.state_rows, self.cell_size, device=rows.device)
        else:
            parts = [torch.as_tensor(np.asarray(s, np.float32)).reshape(len(rows), -1) for s in state]
            packed = torch.stack(parts, dim=1).to(rows.device)
        dist_inputs, self._last_values, state_out = self.step(
            rows, packed, input_dict.get("prev_actions"), input_dict.get("prev_rewards")
        )
        return dist_inputs, list(state_out.unbind(1))

    def numpy_policy(self) -> None:
        """Recurrent modules act through ``Policy`` with their state; no stateless shortcut."""
        return None


def _encode_action(
    space: spaces.Space, actions: torch.Tensor, rows: int, device: torch.device
) -> torch.Tensor:
    """``[rows, in]`` LSTM inputs for actions of ``space`` (not Dict/Tuple): one-hot indices for
    Discrete and MultiDiscrete, the values for the others."""
    if isinstance(space, spaces.Discrete):
        return _one_hot(actions.reshape(-1), int(space.n), device)
    if isinstance(space, spaces.MultiDiscrete):
        columns = actions.reshape(rows, -1)
        nvec = np.asarray(space.nvec).reshape(-1)
        return torch.cat([_one_hot(columns[:, i], int(n), device) for i, n in enumerate(nvec)], -1)
    return actions.reshape(rows, -1).float()


def _one_hot(indices: torch.Tensor, n: int, device: torch.device) -> torch.Tensor:
    """``[M] -> [M, n]`` one-hot rows, by comparison (``one_hot`` fixes the batch size in exports)."""
    return (indices.long().unsqueeze(-1) == torch.arange(n, device=device)).float()
