"""One check for every integer path: `check_int_model` (every constant of the integer step fits
the C type it is written into, every int32 it computes fits whatever the readings) and the
checked readers `from_parts` takes each quantization constant through (`real_scale`,
`int8_zero_point`, `q12`). Firmware emit, check, simulate and measure and the native int8 step
all build their integer model with `firmware_sim.intsim.from_parts`, which ends with
`check_int_model`; `firmware_sim.cemit.emit` checks again the model it is handed."""

from __future__ import annotations

import numpy as np

from edgeseq.errors import ModelFileError, UsageError
from firmware_sim.intmath import IN_LIMIT, MULT_BITS, Q, multiplier

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
ACT_SPAN = 255              # the largest |a - zp| of an int8 activation a and an int8 zero point
SHIFT_MAX = 62              # `multiplier`'s shifts: 1 ..= 62


def _bad(path, what: str) -> ModelFileError:
    return ModelFileError(f"'{path}': {what}; the integer step cannot hold it: export it again with --int8")


def _entry(name: str, a: np.ndarray, i: int) -> str:
    return name if a.size == 1 else f"{name}[{i}]"


def real_scale(path, name: str, value) -> np.ndarray:
    """A scale as float64 [n]: every entry finite and > 0, else ModelFileError naming it."""
    a = np.asarray(value)
    if a.dtype.kind != "f":
        raise _bad(path, f"scale {name} is {a.dtype}, not a float number")
    a = a.astype(np.float64).reshape(-1)
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(a) & (a > 0))
    if not a.size or bad.any():
        i = int(np.argmax(bad)) if a.size else 0
        raise _bad(path, f"scale {_entry(name, a, i)} is {a[i]:g} (a scale must be a finite number > 0)"
                   if a.size else f"scale {name} holds no value")
    return a


def int8_zero_point(path, name: str, value) -> np.ndarray:
    """A zero point as int64 [n]: of type int8 (the integer step's activations and weights are
    signed), else ModelFileError naming it and its type."""
    a = np.asarray(value)
    if a.dtype != np.int8:
        shown = ", ".join(str(v) for v in a.reshape(-1)[:3]) + (", ..." if a.size > 3 else "")
        raise _bad(path, f"zero point {name} is {a.dtype} ({shown}) where the integer step takes int8 "
                   "(signed activations and weights, zero points in -128..127)")
    return a.astype(np.int64).reshape(-1)


def q12(path, name: str, value) -> np.ndarray:
    """Real values as the integer step's Q12 int64: finite, and within int32 once rounded, else
    ModelFileError naming the entry and its value."""
    a = np.asarray(value, np.float64)
    flat = a.reshape(-1)
    bad = ~np.isfinite(flat)
    if bad.any():
        i = int(np.argmax(bad))
        raise _bad(path, f"{_entry(name, flat, i)} is {flat[i]:g}, not a finite number")
    with np.errstate(over="ignore"):
        q = np.round(a * (1 << Q))
    out = (q < INT32_MIN) | (q > INT32_MAX)
    if out.any():
        i = int(np.argmax(out.reshape(-1)))
        raise _bad(path, f"{_entry(name, flat, i)} is {flat[i]:.9g}, {q.reshape(-1)[i]:.0f} in Q12: beyond int32")
    return q.astype(np.int64)


def _multiplier(real: float, name: str, path) -> tuple:
    if not (np.isfinite(real) and real > 0):
        raise _bad(path, f"{name} has a ratio of {real:g}, not a finite number > 0")
    try:
        return multiplier(real)
    except UsageError:
        raise _bad(path, f"{name} has a ratio of {real:g}, beyond the {MULT_BITS}-bit multiplier") from None


def _fits(path, what: str, a, lo: int = INT32_MIN, hi: int = INT32_MAX, ctype: str = "int32") -> None:
    a = np.asarray(a, np.int64).reshape(-1)
    out = (a < lo) | (a > hi)
    if out.any():
        i = int(np.argmax(out))
        raise _bad(path, f"{what if a.size == 1 else f'{what}[{i}]'} is {int(a[i])}, beyond {ctype}")


def _requant_ok(path, what: str, m, s) -> None:
    m, s = np.asarray(m, np.int64).reshape(-1), np.asarray(s, np.int64).reshape(-1)
    _fits(path, f"{what}'s multiplier", m, 1, (1 << MULT_BITS) - 1, f"1..{(1 << MULT_BITS) - 1}")
    _fits(path, f"{what}'s shift", s, 1, SHIFT_MAX, f"1..{SHIFT_MAX}")


def _requant_fits(path, what: str, bound: int, ms: tuple) -> None:
    """A requantization (m, s) of values up to |bound| to an int8 input: m and s in range, and
    |bound| within int32 once scaled up for a shift below 16."""
    _requant_ok(path, what, *ms)
    _fits(path, f"{what} before requantization", int(bound) << max(16 - int(ms[1]), 0))


def check_reading(m, path) -> None:
    """The reading's fixed point of any integer model (a `FixedPointReading`): in_frac int8,
    means within +-2^30, multipliers and shifts in range, and a reading's offset from its mean
    within int32 before requantization. A model with an input transform (`m.asinh`): its
    threshold table instead, 255 per channel, ascending, within +-2^30."""
    _fits(path, "a channel's fractional bits (in_frac)", m.in_frac, -128, 127, "int8")
    if getattr(m, "asinh", None) is not None:
        thr = np.asarray(m.asinh.thr, np.int64)
        if thr.shape != (len(m.in_frac), 255):
            raise _bad(path, f"the reading's threshold table is {list(thr.shape)}, not [{len(m.in_frac)}, 255]")
        _fits(path, "a reading's threshold", thr, -(1 << 30), 1 << 30, "+-2^30")
        if (np.diff(thr, axis=1) < 0).any():
            f = int(np.argmax((np.diff(thr, axis=1) < 0).any(1)))
            raise _bad(path, f"channel {f}'s reading thresholds are not ascending")
        return
    _fits(path, "a channel's mean in fixed point", m.mean_fx, -(1 << 30), 1 << 30, "+-2^30")
    _requant_ok(path, "the reading's quantization", m.feat_m, m.feat_s)
    d = IN_LIMIT + np.abs(np.asarray(m.mean_fx, np.int64))
    _fits(path, "a reading's offset before requantization", d << np.maximum(16 - np.asarray(m.feat_s, np.int64), 0))


def _reach(path, mm, bias, bias_name: str) -> np.ndarray:
    """The largest |output| (Q12, int64 [out]) product `mm` (an `intgraph.MatMulQ`) plus `bias`
    can give for any int8 input, every int32 on the way checked: the zero point folded out of
    the sum, the sum before requantization (scaled up for a shift below 16), and the output
    with its bias."""
    name = mm.name or "a product"
    _fits(path, f"{name}'s input zero point", mm.in_zp, -128, 127, "int8")
    _requant_ok(path, name, mm.m, mm.s)
    _fits(path, f"{name}'s folded zero point", mm.wsum_zp)
    w = np.abs(mm.w.astype(np.int64)).sum(0)
    acc = w * ACT_SPAN
    _fits(path, f"{name}'s largest sum", acc)
    _fits(path, f"{name}'s largest sum before requantization", acc << np.maximum(16 - mm.s, 0))
    reach = ((acc * mm.m) >> mm.s) + 1
    if bias is None:
        return reach
    b = np.asarray(bias, np.int64).reshape(-1)
    total = reach + np.abs(b)
    over = total > INT32_MAX
    if over.any():
        o = int(np.argmax(over))
        raise _bad(path, f"{_entry(bias_name, b, o)} is {b[o] / (1 << Q):.9g} ({b[o]} in Q12): added to {name}'s "
                         f"output, up to {int(reach[o])}, it reaches {int(total[o])}, beyond int32")
    return total


def check_int_model(m, path="<model>") -> None:
    """Every constant of the integer step `m` (an `intsim.IntModel`) fits the C type it is
    written into, and every int32 the step computes from them fits int32 whatever the readings:
    the reading's fixed point (in_frac int8, means within +-2^30, multipliers 1..2^15-1, shifts
    1..62), each product's zero points (int8), folded zero points, sums and outputs with their
    Q12 biases, the sum of a layer's two products, and the requantizations of the state.
    ModelFileError (one line, naming the tensor and the value) otherwise. `from_parts` calls
    it; so does `firmware_sim.cemit.emit`, before it writes C."""
    check_reading(m, path)
    for layer, cell in enumerate(m.cells):
        gx = _reach(path, cell["x"], cell["b"], cell.get("b_name", f"b{layer}"))
        gh = _reach(path, cell["h"], cell["bh"], cell.get("bh_name", f"bh{layer}"))
        over = gx + gh > INT32_MAX
        if over.any():
            o = int(np.argmax(over))
            raise _bad(path, f"layer {layer}'s pre-activation {o} can reach {int(gx[o] + gh[o])} in Q12 "
                             f"({cell['x'].name} and {cell['h'].name} with their biases), beyond int32")
        _requant_ok(path, f"layer {layer}'s state quantization", *cell["hq"])
        if layer > 0:
            _requant_ok(path, f"layer {layer}'s input quantization", *cell["aq"])
    _reach(path, m.head, m.head_b, m.head_b_name)
    _requant_ok(path, "the head's input quantization", *m.head_hq)
