"""V-trace (Espeholt et al. 2018, "IMPALA", section 4.1) over ``[B, T]`` trajectories.

Off-policy value targets and policy-gradient advantages for trajectories sampled by an older
behaviour policy mu and trained under the current target policy pi:

    v_s = V(x_s) + sum_{t>=s} gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t,
    delta_t = rho_t (r_t + gamma V(x_{t+1}) - V(x_t)),
    rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t)),  c_i = min(c_bar, pi / mu),

computed backwards as ``v_s - V(x_s) = delta_s + gamma c_s (v_{s+1} - V(x_{s+1}))``; the
policy-gradient advantage is ``rho_pg_s (r_s + gamma v_{s+1} - V(x_s))`` with its own clip.
On-policy (pi = mu, thresholds >= 1) ``v_s`` is the n-step return bootstrapped at the end.

Rows follow the env runners' next-step-autoreset layout (see ``Rollout``): the row after an
episode's last step is invalid and holds that episode's final observation. Its correction is
forced to 0, so its ``v`` is the plain value of the final observation: a truncated step
bootstraps from it, a terminated one does not (discount 0), and nothing flows back from the next
episode across the invalid row.
"""

from __future__ import annotations

import torch


def vtrace(
    log_rhos: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_values: torch.Tensor,
    discounts: torch.Tensor,
    valid: torch.Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    clip_c_threshold: float | None = 1.0,
    lambda_: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(vs, pg_advantages)``, both ``[B, T]``, without gradients.

    ``log_rhos``: ``log pi(a_t|x_t) - log mu(a_t|x_t)``; ``values``: ``V(x_t)``;
    ``bootstrap_values``: ``[B]`` values of the observations after the last step;
    ``discounts``: ``gamma`` where the step does not end in a terminal state, 0 where it does;
    ``valid``: False for rows that are no real step (their advantage is 0). A ``None``
    threshold does not clip. ``lambda_`` scales the traces (``c_i = lambda min(c_bar, rho_i)``,
    the paper's remark 2); on-policy with no clipping ``vs - values`` is then GAE(lambda).
    """
    with torch.no_grad():
        rhos = log_rhos.exp()
        clipped_rhos = rhos if clip_rho_threshold is None else rhos.clamp(max=clip_rho_threshold)
        cs = rhos if clip_c_threshold is None else rhos.clamp(max=clip_c_threshold)
        valid = valid.to(values.dtype)
        clipped_rhos = clipped_rhos * valid
        cs = cs * valid * lambda_
        next_values = torch.cat([values[:, 1:], bootstrap_values[:, None]], dim=1)
        deltas = clipped_rhos * (rewards + discounts * next_values - values)
        carry = discounts * cs
        corrections = torch.empty_like(values)
        acc = torch.zeros_like(bootstrap_values)
        for t in reversed(range(values.shape[1])):  # a recursion over time, vectorized over B
            acc = deltas[:, t] + carry[:, t] * acc
            corrections[:, t] = acc
        vs = values + corrections
        next_vs = torch.cat([vs[:, 1:], bootstrap_values[:, None]], dim=1)
        pg_rhos = rhos if clip_pg_rho_threshold is None else rhos.clamp(max=clip_pg_rho_threshold)
        pg_advantages = pg_rhos * valid * (rewards + discounts * next_vs - values)
        return vs, pg_advantages
