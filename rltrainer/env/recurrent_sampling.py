"""An env runner's recurrent inputs: each env's LSTM state and previous action and reward,
carried across steps and fragments, and what a training fragment records of them.

The state an env's step reads is zeroed before the first step of each episode: with
gymnasium's next-step autoreset, after the reset step that follows an episode's end (the reset
step itself still reads the finished episode's state, so the value of the episode's final
observation, which a truncated episode bootstraps from, is the episode's own).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rltrainer.core.recurrent import RecurrentColumns


class RecurrentInputs:
    """Per-env recurrent inputs of one env runner (``policy.recurrent`` policies only)."""

    def __init__(self, policy: Any, num_envs: int, model_config: Any) -> None:
        self.policy = policy
        self.max_seq_len = model_config.max_seq_len
        self.use_prev_action = model_config.lstm_use_prev_action
        self.use_prev_reward = model_config.lstm_use_prev_reward
        rows = len(policy.get_initial_state())  # h, c (and the value function's h, c)
        self.state = np.zeros((num_envs, rows, model_config.lstm_cell_size), np.float32)
        self.prev_actions: np.ndarray | None = None  # None: zeros (no action taken yet)
        self.prev_rewards = np.zeros(num_envs, np.float32)
        self.resets = np.zeros(num_envs, dtype=bool)  # the state was zeroed before the next step
        self._recording: dict[str, list[np.ndarray]] | None = None

    def reset_all(self) -> None:
        """Every env starts an episode (the envs were reset)."""
        self.state[:] = 0.0
        self.prev_actions = None
        self.prev_rewards[:] = 0.0
        self.resets[:] = False  # the recorded state is zeros already

    def inputs(self) -> dict[str, Any]:
        """``Policy.compute``'s recurrent arguments for the next step of every env."""
        return {
            "state": self.state,
            "prev_actions": self.prev_actions if self.use_prev_action else None,
            "prev_rewards": self.prev_rewards if self.use_prev_reward else None,
        }

    def after_step(self, out: dict[str, np.ndarray], rewards: np.ndarray, resetting: np.ndarray) -> None:
        """Advance to the next step: ``out`` is ``Policy.compute``'s result, ``rewards`` the
        step's (clipped) rewards, ``resetting`` the envs whose step was a reset step (their
        next step begins an episode)."""
        if self._recording is not None:
            self._record(out)
        self.state = out["state_out"]
        actions = np.array(out["actions"])
        self.prev_rewards = np.asarray(rewards, dtype=np.float32).copy()
        if resetting.any():
            self.state[resetting] = 0.0
            actions[resetting] = 0
            self.prev_rewards[resetting] = 0.0
        self.prev_actions = actions
        self.resets = resetting.copy()

    # --- what a training fragment records ----------------------------------------------
    def start_fragment(self) -> None:
        self._recording = {name: [] for name in ("state_in", "state_resets", "vf_preds", "prev_actions")}
        self._recording["prev_rewards"] = []

    def _record(self, out: dict[str, np.ndarray]) -> None:
        rec = self._recording
        if len(rec["state_resets"]) % self.max_seq_len == 0:  # a sequence starts at this step
            rec["state_in"].append(self.state.copy())
        rec["state_resets"].append(self.resets)
        rec["vf_preds"].append(out["vf_preds"])
        if self.use_prev_action:
            prev = self.prev_actions
            rec["prev_actions"].append(np.zeros_like(out["actions"]) if prev is None else prev)
        if self.use_prev_reward:
            rec["prev_rewards"].append(self.prev_rewards)

    def finish_fragment(self, last_obs: np.ndarray) -> RecurrentColumns:
        """The fragment's columns; ``last_obs`` (the observations after its last step) gets its
        values from the state the envs' next steps will read."""
        rec, self._recording = self._recording, None
        inputs = self.inputs()
        if inputs["prev_actions"] is None and self.use_prev_action:
            inputs["prev_actions"] = np.zeros_like(rec["prev_actions"][0])
        last_values = self.policy.recurrent_values(last_obs, **inputs)
        return RecurrentColumns(
            state_in=np.stack(rec["state_in"]),
            state_resets=np.stack(rec["state_resets"]),
            vf_preds=np.stack(rec["vf_preds"]).astype(np.float32, copy=False),
            last_vf_preds=last_values,
            prev_actions=np.stack(rec["prev_actions"]) if self.use_prev_action else None,
            prev_rewards=np.stack(rec["prev_rewards"]) if self.use_prev_reward else None,
        )
