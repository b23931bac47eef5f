"""numba kernels behind ``rltrainer.core.compiled``; import that module, not this one.

One call runs a whole MLP (and, for discrete actions, samples from its logits), where
numpy takes two or three calls per layer, each with a microsecond or more of overhead.
They run on the env runners' per-step inference path, where the arrays are small (a few
hundred to a few thousand floats) and overhead dominates. Matrix products go to BLAS
(numba's ``np.dot`` calls SciPy's); bias, activation and sampling are fused loops.
Compiled on first use and cached next to this file (``cache=True``).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from rltrainer.core.kernel_codes import ACTIVATION_CODES

RELU, TANH = ACTIVATION_CODES["relu"], ACTIVATION_CODES["tanh"]  # anything else: linear

# tanh as an odd [13/6] rational minimax approximation on [-c, c] (the one Eigen uses for
# float32), with c where float32 tanh rounds to +-1. Unlike libm's tanhf it vectorizes;
# its error against np.tanh is below 4e-7 (tests/test_compiled.py checks).
_CLAMP = np.float32(7.90531110763549805)
_A1, _A3, _A5, _A7, _A9, _A11, _A13 = (
    np.float32(c)
    for c in (
        4.89352455891786e-03,
        6.37261928875436e-04,
        1.48572235717979e-05,
        5.12229709037114e-08,
        -8.60467152213735e-11,
        2.00018790482477e-13,
        -2.76076847742355e-16,
    )
)
_B0, _B2, _B4, _B6 = (
    np.float32(c)
    for c in (4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06)
)

# error_model="numpy": no ZeroDivisionError checks, which would keep loops from vectorizing.
# "contract" lets multiply-adds fuse; no value-changing fast-math beyond that.
_JIT = {"cache": True, "error_model": "numpy", "fastmath": {"contract"}}


@numba.njit(inline="always", **_JIT)
def _tanh(x):
    x = min(max(x, -_CLAMP), _CLAMP)
    x2 = x * x
    p = (((((_A13 * x2 + _A11) * x2 + _A9) * x2 + _A7) * x2 + _A5) * x2 + _A3) * x2 + _A1
    q = ((_B6 * x2 + _B4) * x2 + _B2) * x2 + _B0
    return x * p / q


@numba.njit(**_JIT)
def bias_activation(x, bias, activation):
    """``x = activation(x + bias)`` in place, for a C-contiguous float32 ``[B, n]`` ``x``."""
    rows, cols = x.shape
    if activation == RELU:
        for i in range(rows):
            for j in range(cols):
                x[i, j] = max(x[i, j] + bias[j], np.float32(0.0))
    elif activation == TANH:
        for i in range(rows):
            for j in range(cols):
                x[i, j] = _tanh(x[i, j] + bias[j])
    else:
        for i in range(rows):
            for j in range(cols):
                x[i, j] += bias[j]


@numba.njit(**_JIT)
def categorical_sample(logits, uniforms, explore, actions, logp):
    """Fills ``actions`` (int64 ``[B]``) and ``logp`` (float32 ``[B]``) from logits ``[B, n]``.

    Exploring, action i is the number of CDF entries below ``uniforms[i] * partition sum``
    (inverse-CDF sampling, as the numpy path does); otherwise the first argmax.
    """
    rows, n = logits.shape
    for i in range(rows):
        top = logits[i, 0]
        for j in range(1, n):
            top = max(top, logits[i, j])
        total = np.float32(0.0)
        for j in range(n):
            total += np.float32(math.exp(logits[i, j] - top))
        action = 0
        if explore:
            threshold = uniforms[i] * total
            cdf = np.float32(0.0)
            for j in range(n - 1):  # cdf[n - 1] is the total, never below the threshold
                cdf += np.float32(math.exp(logits[i, j] - top))
                if cdf < threshold:
                    action = j + 1
        else:
            for j in range(1, n):
                if logits[i, j] > logits[i, action]:
                    action = j
        actions[i] = action
        logp[i] = logits[i, action] - top - np.float32(math.log(total))


@numba.njit(**_JIT)
def mlp_forward(x, weights, biases, activations, out):
    """Fills ``out [B, out]`` with an MLP's output for ``x [B, in]``: per layer
    ``activation(h @ weight.T + bias)``.

    ``weights`` are torch's ``[out, in]`` matrices, ``biases`` and ``activations`` (codes)
    one per layer, all as tuples. Outputs are the caller's arrays: returning new ones from
    compiled code costs more than allocating them in Python.
    """
    h = np.ascontiguousarray(x)
    last = len(weights) - 1
    for layer in range(last):
        h = np.dot(h, weights[layer].T)
        bias_activation(h, biases[layer], activations[layer])
    np.dot(h, weights[last].T, out)
    bias_activation(out, biases[last], activations[last])


@numba.njit(**_JIT)
def mlp_categorical_sample(x, weights, biases, activations, uniforms, explore, logits, actions, logp):
    """``mlp_forward`` into ``logits``, then ``categorical_sample``, in one call."""
    mlp_forward(x, weights, biases, activations, logits)
    categorical_sample(logits, uniforms, explore, actions, logp)


@numba.njit(**_JIT)
def stacked_mlp_categorical_sample(
    x, starts, slots, weights, biases, activations, uniforms, explore, logits, actions, logp
):
    """Several policies of one architecture in one call: rows ``starts[k]:starts[k + 1]`` of
    ``x`` go through the MLP in slot ``slots[k]`` of the stacked parameters (``weights[layer]``
    ``[P, out, in]``, torch's layout per policy; ``biases[layer]`` ``[P, out]``) into
    ``logits``, then ``categorical_sample`` runs over all rows. Each row gets what
    ``mlp_categorical_sample`` gives it alone (the same operations in the same order)."""
    last = len(weights) - 1
    for k in range(len(slots)):
        start, end, slot = starts[k], starts[k + 1], slots[k]
        h = np.ascontiguousarray(x[start:end])
        for layer in range(last):
            h = np.dot(h, weights[layer][slot].T)
            bias_activation(h, biases[layer][slot], activations[layer])
        out = np.dot(h, weights[last][slot].T)
        bias_activation(out, biases[last][slot], activations[last])
        logits[start:end] = out
    categorical_sample(logits, uniforms, explore, actions, logp)


@numba.njit(**_JIT)
def close_episodes(rewards, valid, dones, running_return, running_len):
    """Episode accounting for ``[T, N]`` steps, step by step (``EnvRunner._close_episodes``).

    Updates ``running_return``/``running_len`` in place; returns the env index, return and
    length of each episode that ended on a valid step, in step order.
    """
    steps, envs = rewards.shape
    ended = 0
    for t in range(steps):
        for n in range(envs):
            ended += dones[t, n] and valid[t, n]
    env_index = np.empty(ended, dtype=np.int64)
    returns = np.empty(ended, dtype=np.float64)
    lengths = np.empty(ended, dtype=np.int64)
    k = 0
    for t in range(steps):
        for n in range(envs):
            if valid[t, n]:
                running_return[n] += rewards[t, n]
                running_len[n] += 1
            if dones[t, n]:
                if valid[t, n]:
                    env_index[k], returns[k], lengths[k] = n, running_return[n], running_len[n]
                    k += 1
                running_return[n] = 0.0
                running_len[n] = 0
    return env_index, returns, lengths
