"""The integer-only step's fixed-point arithmetic, shared by `firmware_sim.intsim` and the C that
`firmware_sim.cemit` writes: the formats (Q12 pre-activations and logits, Q15 state, readings
clamped to +-IN_LIMIT), the 15-bit multipliers with `requant`, and the sigmoid and tanh tables
read by `lut`. numpy only."""

from __future__ import annotations

import numpy as np

from edgeseq.errors import UsageError

Q = 12                      # fractional bits of pre-activations and logits
LUT_SIZE = 2048             # table intervals over [-8, 8]: step 1/128, 2049 knots
LUT_SHIFT = 5               # Q12 -> table index: (x + 8 * 4096) >> 5
ONE_Q15 = 1 << 15


MULT_BITS = 15              # multiplier mantissa: m in [2^14, 2^15), so 16-bit halves of acc x m fit 32 bits
IN_FRAC_MAX = 40            # most fractional bits of a reading (a channel of values near 1e-6 needs about 29)
IN_LIMIT = (1 << 30) - 1    # readings are clamped to +-IN_LIMIT, so reading - mean fits an int32


def multiplier(real: float) -> tuple:
    """real > 0 -> (m, s), m in [2^14, 2^15), real ~= m / 2^s, 1 <= s <= 62 (`requant` brings s
    into 16..31 with a shift of the accumulator). UsageError for a ratio of 2^15 or more."""
    if not real > 0:
        return 0, 16
    s = MULT_BITS - 1 - int(np.floor(np.log2(real)))
    m = int(round(real * 2.0 ** s))
    if m >= 1 << MULT_BITS:
        m, s = m // 2, s - 1
    if s > 62:
        m, s = max(1, int(round(real * 2.0 ** 62))), 62
    if s < 1:
        raise UsageError(f"scale ratio {real:g} is too large for a {MULT_BITS}-bit multiplier")
    return m, s


def requant(acc, m, s):
    """round(acc x m / 2^s) (half up) as the C computes it in 32 bits, element-wise; m, s
    scalars or per-channel arrays. s < 16: acc is first multiplied by 2^(16-s) (the caller
    guarantees it fits, see `MatMulQ.make`); s > 31: acc is first shifted right by s-31
    (arithmetic). Then with acc = ah x 2^16 + al: (ah x m + ((al x m + 2^(s-1)) >> 16)) >> (s-16),
    which equals round(acc x m / 2^s) exactly."""
    acc = np.asarray(acc, np.int64)
    m = np.asarray(m, np.int64)
    s = np.asarray(s, np.int64)
    left = np.maximum(16 - s, 0)
    acc = acc << left
    s = s + left
    right = np.maximum(s - 31, 0)
    acc = acc >> right
    s = s - right
    return (acc * m + (np.int64(1) << (s - 1))) >> s


def _table(fn) -> np.ndarray:
    x = (np.arange(LUT_SIZE + 1) * (1 << LUT_SHIFT) - 8 * (1 << Q)) / (1 << Q)          # knots -8 .. 8
    return np.clip(np.round(fn(x) * ONE_Q15), -ONE_Q15, ONE_Q15 - 1).astype(np.int16)


SIGMOID = _table(lambda x: 1 / (1 + np.exp(-x)))
TANH = _table(np.tanh)


def lut(table: np.ndarray, x_q12) -> np.ndarray:
    """Table lookup with linear interpolation between knots (integer only)."""
    u = np.clip(np.asarray(x_q12, np.int64), -8 << Q, (8 << Q) - 1) + (8 << Q)           # 0 .. 65535
    i, f = u >> LUT_SHIFT, u & ((1 << LUT_SHIFT) - 1)
    lo, hi = table[i].astype(np.int64), table[i + 1].astype(np.int64)
    return lo + (((hi - lo) * f) >> LUT_SHIFT)
