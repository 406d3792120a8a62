"""What every integer model reads from a static int8 graph alike, RNN, GRU and LSTM
(`firmware_sim.intsim`), SSM (`intssm`) and Transformer (`intxf`): the checks it runs before
it reads a constant (`checked_graph`), its products (`MatMulQ`, from `_weights`, `_activation`
and `_bias`) and the reading's int32 fixed point (`FixedPointReading`, `reading_format`).
Below those three modules, which take these from here; `intsim` re-exports them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeseq.errors import DataError
from firmware_sim.intcheck import _bad, _entry, _multiplier, int8_zero_point, real_scale
from firmware_sim.intmath import IN_FRAC_MAX, IN_LIMIT, Q, requant

QUANT_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "QLinearMatMul",
             "ConvInteger", "QLinearConv"}
NORM_RTOL = 1e-6            # metadata normalisation vs the graph's float32 constants: a few float32 steps
THRESHOLDS = 255            # an input transform's reading -> int8 map: q = -128 + #{k : x_fx >= thr[k]}
THR_REACH = 1 << 29         # the largest |threshold| in fixed point (as input_format's reach)
THR_GAP_MIN = 4             # fixed-point units between neighbouring thresholds at least
THR_SAT = 1 << 30           # a threshold beyond the reading's int32 reach: +THR_SAT is never reached by a reading
                            # clamped to +-IN_LIMIT, -THR_SAT always
Z_COVER = 3.0               # ... but the boundaries within this many standard deviations of the training data's
                            # transformed values must be within THR_REACH (`asinh_thresholds`)


@dataclass
class MatMulQ:
    """int8 weights W [in, out] and everything to turn the int32 dot product into Q12."""
    w: np.ndarray            # int8 [in, out]
    in_scale: float
    in_zp: int
    m: np.ndarray            # int64 [out] multipliers
    s: np.ndarray            # int64 [out] shifts
    name: str = ""           # the weights' tensor in the model file, for messages
    in_name: str = ""        # its input's scale tensor, for messages

    @classmethod
    def make(cls, w_q: np.ndarray, w_scale: np.ndarray, in_scale: float, in_zp: int, name: str = "",
             path="<model>", in_name: str = "") -> "MatMulQ":
        """The product of int8 activations (scale `in_scale`, zero point `in_zp`) with `w_q`
        (per output channel scales `w_scale`). ModelFileError naming `name` when a channel's
        scale ratio is beyond the 15-bit multiplier; the rest is `check_int_model`'s."""
        with np.errstate(over="ignore"):
            reals = float(in_scale) * np.broadcast_to(np.asarray(w_scale, np.float64), w_q.shape[1:]) * (1 << Q)
        ms = [_multiplier(float(r), f"{name} (output {o}: input scale x weight scale x 4096)", path)
              for o, r in enumerate(reals)]
        m = np.array([a for a, _ in ms], np.int64)
        s = np.array([b for _, b in ms], np.int64)
        return cls(w=w_q.astype(np.int8), in_scale=float(in_scale), in_zp=int(in_zp), m=m, s=s, name=name,
                   in_name=in_name)

    @property
    def wsum_zp(self) -> np.ndarray:
        """zp x sum_k w[k, o]: the input zero point folded out of the dot product (int32 [out])."""
        return self.in_zp * self.w.astype(np.int64).sum(0)

    def __call__(self, a_q: np.ndarray) -> np.ndarray:
        acc = a_q.astype(np.int64) @ self.w.astype(np.int64) - self.wsum_zp     # int32 range
        return requant(acc, self.m, self.s)

    def quantize_q15(self, h_q15: np.ndarray, hm: int, hs: int) -> np.ndarray:
        """Q15 state -> this MatMul's int8 input."""
        return np.clip(requant(h_q15, hm, hs) + self.in_zp, -128, 127)


@dataclass
class AsinhReading:
    """The reading -> int8 map of a model with an input transform (t = asinh(x / scale), then
    (t - mean) / std): monotonic but not affine, so it is a threshold table, per channel 255
    ascending int32 thresholds in the reading's fixed point, and the int8 input is
    q = -128 + #{k : x_fx >= thr[f, k]} (`es_k_thresh8`: a binary search, 8 comparisons).
    See `asinh_thresholds` for how they are computed."""
    scale: np.ndarray        # float64 [F]: the graph's asinh scale
    mean: np.ndarray         # float64 [F]: the graph's mean of asinh(x / scale)
    std: np.ndarray          # float64 [F]: the graph's std (the metadata's std x input_scale)
    in_scale: float          # the first product's int8 input: scale, zero point
    in_zp: int
    thr: np.ndarray          # int64 [F, 255]

    def quantize(self, x_fx: np.ndarray) -> np.ndarray:
        """Fixed-point readings int [B, F] -> int8 inputs int64 [B, F]: -128 + the thresholds a
        reading clamped to +-IN_LIMIT reaches."""
        x = np.clip(np.asarray(x_fx, np.int64), -IN_LIMIT, IN_LIMIT)
        out = np.empty(x.shape, np.int64)
        for f in range(self.thr.shape[0]):
            out[..., f] = np.searchsorted(self.thr[f], x[..., f], side="right") - 128
        return out

    def real(self, q) -> np.ndarray:
        """float64 [..., F]: the raw reading whose int8 input is exactly q (the centre of its step)."""
        with np.errstate(over="ignore"):
            return self.scale * np.sinh(self.mean + self.std * self.in_scale * (np.asarray(q, np.float64)
                                                                                   - self.in_zp))


class FixedPointReading:
    """What every integer model does with a reading before its first product (RNN, SSM,
    Transformer alike): the int32 fixed point it takes (`in_frac` fractional bits per channel,
    `mean_fx`) and the requantization (`feat_m`, `feat_s`) to the int8 input of the first
    product, whose zero point is `reading_zp`. A model with an input transform (`asinh`, an
    `AsinhReading`) maps the fixed point to its int8 input by threshold table instead; its
    `mean_fx`, `feat_m` and `feat_s` are zeros, unused."""

    asinh = None             # AsinhReading, or None: the models' own field overrides this

    @property
    def reading_zp(self) -> int:
        """The zero point of the first product's int8 input (what a reading becomes)."""
        raise NotImplementedError

    @property
    def n_features(self) -> int:
        return len(self.mean_fx)

    def to_fixed(self, readings) -> np.ndarray:
        """Float readings [..., F] -> the int32 fixed point the step reads (value x 2^in_frac,
        rounded, saturated to int32): what a sensor driver hands over."""
        x = np.round(np.asarray(readings, np.float64) * np.exp2(self.in_frac.astype(np.float64)))
        return np.clip(x, -(1 << 31), (1 << 31) - 1).astype(np.int64)

    def input_range(self) -> tuple:
        """(low, high) float64 [F]: the raw readings the int8 input covers (it saturates beyond):
        those of its int8 inputs -128 and 127 (with an input transform: at most what an int32
        reading holds)."""
        if self.asinh is not None:                 # within what an int32 reading holds (+-IN_LIMIT)
            held = IN_LIMIT / np.exp2(self.in_frac.astype(np.float64))
            return (np.maximum(self.asinh.real(np.full(self.n_features, -128.0)), -held),
                    np.minimum(self.asinh.real(np.full(self.n_features, 127.0)), held))
        real = self.feat_m.astype(np.float64) / np.exp2(self.feat_s.astype(np.float64))   # int8 steps per fixed-point unit
        step = 1.0 / (real * np.exp2(self.in_frac.astype(np.float64)))                     # raw units per int8 step
        mean = self.mean_fx / np.exp2(self.in_frac.astype(np.float64))
        return mean + step * (-128 - self.reading_zp), mean + step * (127 - self.reading_zp)

    def quantize_reading(self, x_fx: np.ndarray) -> np.ndarray:
        """Fixed-point readings int [B, F] -> the first product's int8 input, int64 [B, F]:
        clamped to +-IN_LIMIT, then offset and requantized, or searched in the threshold table
        where the model has an input transform (`AsinhReading.quantize`)."""
        if self.asinh is not None:
            return self.asinh.quantize(x_fx)
        d = np.clip(np.asarray(x_fx, np.int64), -IN_LIMIT, IN_LIMIT) - self.mean_fx
        return np.clip(requant(d, self.feat_m, self.feat_s) + self.reading_zp, -128, 127)


def _meta_error(path, key: str, what: str):
    from edgeseq.contract import MetadataError
    raise MetadataError(key, f"'{path}': metadata {key} {what}; export it again")


def check_quantization(meta, proto, path) -> None:
    """MetadataError (key edgeseq.quantization) when the metadata's int8 claim and the graph
    disagree: int8 metadata on a graph without quantization nodes (static: without both
    QuantizeLinear and DequantizeLinear), or float metadata on a graph that has them."""
    from edgeseq.contract import META_QUANT
    ops = {n.op_type for n in proto.graph.node}
    q = meta.quantization
    if q:
        scheme = q.get("scheme", "")
        if not ops & QUANT_OPS or scheme == "static" and not {"QuantizeLinear", "DequantizeLinear"} <= ops:
            nodes = "QuantizeLinear/DequantizeLinear" if scheme == "static" else "quantization"
            _meta_error(path, META_QUANT, f"says int8 ({scheme or 'no scheme'}) but the graph is float (no {nodes} "
                                          "nodes)")
    elif ops & QUANT_OPS:
        _meta_error(path, META_QUANT, f"says float but the graph is int8 (it has {', '.join(sorted(ops & QUANT_OPS))} "
                                      "nodes)")


def graph_normalization(proto, init: dict, n_features: int, path) -> tuple:
    """(mean, std) float64 [F] from the graph's own first `reading - mean` (Sub) and `/ std`
    (Div, or Mul by 1 / std) with constant initializers: what the graph really computes (std
    there is the metadata's std x input_scale). The Sub reads the reading, or the output of
    the graph's input transform (`graph_reading`)."""
    return graph_reading(proto, init, n_features, path)[:2]


def graph_reading(proto, init: dict, n_features: int, path) -> tuple:
    """(mean, std, asinh_scale) float64 [F] each, asinh_scale None where the graph has no input
    transform: `graph_normalization`'s mean and std, after the optional `Div(reading, scale)`
    -> `Asinh` (scale a constant initializer, one finite value > 0 per feature) they then
    normalise. ModelFileError (one line) for a graph that starts otherwise."""
    from edgeseq import contract
    from edgeseq.errors import ModelFileError

    def bad(what):
        raise ModelFileError(f"'{path}' does not normalise its reading as edgeseq's export does ({what}); "
                             "export it again with --int8")
    nodes = list(proto.graph.node)
    first, asinh = contract.READING, None
    div = next((n for n in nodes if n.op_type == "Div" and list(n.input[:1]) == [contract.READING]), None)
    if div is not None:                                   # the input transform: Div(reading, scale) -> Asinh
        ash = next((n for n in nodes if n.op_type == "Asinh" and list(n.input[:1]) == [div.output[0]]), None)
        if ash is None or len(div.input) < 2 or div.input[1] not in init:
            bad("a Div of the reading that is not asinh(reading / constant scale)")
        try:
            asinh = np.broadcast_to(np.asarray(init[div.input[1]], np.float64).reshape(-1), (n_features,)).copy()
        except ValueError:
            bad(f"its asinh scale is not one per feature of {n_features}")
        if not (np.isfinite(asinh).all() and (asinh > 0).all()):
            bad("its asinh scale is not finite and above 0")
        first = ash.output[0]
    sub = next((n for n in nodes if n.op_type == "Sub" and list(n.input[:1]) == [first]), None)
    if sub is None or len(sub.input) < 2 or sub.input[1] not in init:
        bad("no Sub of constant means from the reading" + (" after its asinh" if asinh is not None else ""))
    scale = next((n for n in nodes if n.op_type in ("Div", "Mul") and list(n.input[:1]) == [sub.output[0]]), None)
    if scale is None or len(scale.input) < 2 or scale.input[1] not in init:
        bad("no Div by constant standard deviations after that Sub")
    try:
        mean = np.broadcast_to(np.asarray(init[sub.input[1]], np.float64).reshape(-1), (n_features,)).copy()
        d = np.broadcast_to(np.asarray(init[scale.input[1]], np.float64).reshape(-1), (n_features,)).copy()
    except ValueError:
        bad(f"its mean and std constants are not one per feature of {n_features}")
    with np.errstate(divide="ignore"):
        std = d if scale.op_type == "Div" else 1.0 / d
    if not (np.isfinite(mean).all() and np.isfinite(std).all() and (std > 0).all()):
        bad("its mean and std constants are not finite with std > 0")
    return mean, std, asinh


def _check_normalization(meta, mean, std, path, asinh=None) -> None:
    """The metadata's mean, std x input_scale and asinh_scale (the input transform's; None:
    none) must be the graph's, within float32 rounding."""
    from edgeseq.contract import META_NORM
    norm = meta.normalization
    if norm is None:
        _meta_error(path, META_NORM, "is null but the graph normalises the reading")
    m_mean = np.asarray(norm["mean"], np.float64)
    m_std = np.asarray(norm["std"], np.float64) * np.asarray(norm.get("input_scale", np.ones(len(m_mean))), np.float64)
    scaled = " x input_scale" if "input_scale" in norm else ""
    m_asinh = norm.get("asinh_scale")
    if (m_asinh is None) != (asinh is None):
        _meta_error(path, META_NORM, "has no asinh_scale but the graph takes asinh(reading / scale) first"
                    if m_asinh is None else "has an asinh_scale but the graph does not transform its reading")
    pairs = [("mean", m_mean, mean), ("std" + scaled, m_std, std)]
    if asinh is not None:
        pairs.append(("asinh_scale", np.asarray(m_asinh, np.float64), np.asarray(asinh, np.float64)))
    for what, want, got in pairs:
        if want.shape != got.shape:
            _meta_error(path, META_NORM, f"has {want.size} {what} values for the graph's {got.size} features")
        off = np.abs(want - got) > NORM_RTOL * np.abs(got) + 1e-30
        if off.any():
            f = int(np.argmax(off))
            _meta_error(path, META_NORM, f"gives {what} {want[f]:.7g} for feature '{meta.features[f]}' but the graph "
                                         f"computes with {got[f]:.7g}")


def check_int8(meta, path):
    from edgeseq.errors import DataError
    if meta.arch not in ("rnn", "gru", "lstm", "ssm", "transformer"):  # first: no export makes another one fit
        raise DataError(f"integer-only execution covers the rnn, gru and lstm step graphs, the ssm and the windowed "
                        f"transformer exported static int8, not {meta.arch}; "
                        "`edgeseq firmware check` still plans its memory and cost")
    if (meta.normalization or {}).get("gain_floor") is not None:
        raise DataError(f"'{path}' reads its input through the gain stage (input_transform gain), which integer-only "
                        "execution does not run; train it with --set input_transform=asinh for the firmware")
    if not meta.quantization:
        raise DataError(f"'{path}' is a float model; integer-only execution needs int8: "
                        f"export it with `edgeseq export RUN --int8 --out ...`")
    if meta.quantization.get("scheme") != "static":
        raise DataError(f"'{path}' is int8 {meta.quantization.get('scheme')}: its activation scales are computed "
                        "at run time; integer-only execution needs fixed scales: export with --int8-scheme static")


def checked_graph(meta, initializers: dict, nodes, path, then=None):
    """The graph's nodes as the checks read them (`proto.graph.node`), once the checks every
    integer step runs before it reads a constant have passed: the metadata's int8 claim
    (`check_quantization`), a static int8 file of a covered architecture (`check_int8`),
    `then()` where given (a check of the architecture's own), the quantization parameters'
    shapes (`edgeseq.runtime.quant.check_qdq`) and the graph's integers
    (`_check_graph_integers`)."""
    from types import SimpleNamespace

    from edgeseq.runtime.quant import check_qdq

    proto = SimpleNamespace(graph=SimpleNamespace(node=list(nodes)))       # what the checks read
    check_quantization(meta, proto, path)
    check_int8(meta, path)
    if then is not None:
        then()
    check_qdq(initializers, proto.graph.node, path)
    _check_graph_integers(initializers, proto.graph.node, path)
    return proto


def reading_format(meta, proto, init: dict, first, path) -> dict:
    """The fields of a `FixedPointReading` (in_frac, feat_m, feat_s, mean_fx) for a graph whose
    first product is `first` (a MatMulQ): the normalisation the graph computes (checked
    against the metadata's), the fractional bits per channel (`input_format`), and per channel
    the multiplier and shift to the int8 input, a channel's fractional bits lowered where its
    shift would pass 31. A graph with an input transform gets `asinh` (an `AsinhReading`: the
    threshold table of `asinh_thresholds`, with its fractional bits) and zeros for the rest."""
    mean, std, asinh = graph_reading(proto, init, len(meta.features), path)
    _check_normalization(meta, mean, std, path, asinh)
    if asinh is not None:                  # the input transform: a threshold table (`asinh_thresholds`)
        reach = meta.normalization.get("asinh_reach")
        in_frac, thr = asinh_thresholds(meta.features, asinh, mean, std, first.in_scale, first.in_zp,
                                        np.asarray(meta.normalization["std"], np.float64),
                                        None if reach is None else np.asarray(reach, np.float64))
        zeros = np.zeros(len(in_frac), np.int64)
        return {"feat_m": zeros, "feat_s": zeros.copy(), "mean_fx": zeros.copy(), "in_frac": in_frac,
                "asinh": AsinhReading(scale=asinh, mean=mean, std=std, in_scale=float(first.in_scale),
                                      in_zp=int(first.in_zp), thr=thr)}
    in_frac = input_format(meta.features, mean, std, first.in_scale, first.in_zp)
    feat = []
    for f, (sd, k) in enumerate(zip(std, in_frac)):
        what = f"channel '{meta.features[f]}''s quantization"
        m, sh = _multiplier(1.0 / (sd * first.in_scale * 2.0 ** k), what, path)
        if sh > 31:
            in_frac[f] = k = k - (sh - 31)
            m, sh = _multiplier(1.0 / (sd * first.in_scale * 2.0 ** k), what, path)
        feat.append((m, sh))
    return {"feat_m": np.array([m for m, _ in feat], np.int64), "feat_s": np.array([s for _, s in feat], np.int64),
            "mean_fx": np.round(mean * np.exp2(in_frac)).astype(np.int64), "in_frac": in_frac}


def model_meta(meta, arch: str, **more) -> dict:
    """What an integer model keeps of its file's metadata (`IntModel.meta`), `more` after it."""
    return {"arch": arch, "features": meta.features, "quantization": meta.quantization, "data": meta.data,
            "data_sha256": meta.data_sha256, "decision": getattr(meta, "decision", None),
            "task": getattr(meta, "task", None), "normalization": meta.normalization, **more}


class InputFormatError(DataError):
    """A channel's range cannot be held by int32 fixed point at the resolution its int8 input needs."""


def input_format(features, mean, std, in_scale: float, in_zp: int) -> np.ndarray:
    """Fractional bits per channel (int64 [F]) for int32 readings.

    The int8 input of channel f covers raw values mean + std x in_scale x (q - zp), q in
    -128..127 (beyond them it saturates); its step is std x in_scale. The format gives that
    range (and the mean) at most 2^29 (so reading - mean never overflows) with as many
    fractional bits as fit, up to IN_FRAC_MAX. Raises InputFormatError naming the channel
    when the resulting resolution 2^-frac is coarser than a quarter of the int8 step."""
    step = np.asarray(std, np.float64) * in_scale
    lo, hi = mean + step * (-128 - in_zp), mean + step * (127 - in_zp)
    reach = np.maximum.reduce([np.abs(lo), np.abs(hi), np.abs(mean)])
    frac = np.minimum(np.floor(np.log2((1 << 29) / np.maximum(reach, 1e-30))), IN_FRAC_MAX).astype(np.int64)
    for f, name in enumerate(features):
        if not np.isfinite(reach[f]) or 2.0 ** -frac[f] > step[f] / 4:
            raise InputFormatError(
                f"channel '{name}' reaches {reach[f]:.4g} with an int8 step of {step[f]:.3g}: an int32 reading "
                f"cannot resolve that (resolution {2.0 ** -float(frac[f]):.3g}); offset or rescale the channel "
                "in the data (e.g. subtract a constant) and train again")
    return frac


def asinh_boundaries(scale, mean, std, in_scale: float, in_zp: int) -> np.ndarray:
    """float64 [F, 255]: the raw readings where the int8 input of a model with an input
    transform steps from q - 1 to q, q = -127..127. The graph computes z = (asinh(x / scale) -
    mean) / std and q = clamp(round(z / in_scale) + zp); the boundary is z / in_scale = q - zp
    - 1/2, so y_q = mean + std x in_scale x (q - zp - 1/2) and x_q = scale x sinh(y_q),
    ascending (sinh is). Inf where sinh overflows float64."""
    q = np.arange(-127, 128, dtype=np.float64)
    y = (np.asarray(mean, np.float64)[:, None]
         + np.asarray(std, np.float64)[:, None] * float(in_scale) * (q[None, :] - in_zp - 0.5))
    with np.errstate(over="ignore"):
        return np.asarray(scale, np.float64)[:, None] * np.sinh(y)


def _thr_at(x, frac: int) -> np.ndarray:
    """int64: boundaries x (float64) as thresholds with `frac` fractional bits, ceil(x x 2^frac),
    saturated to +-THR_SAT."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.clip(np.ceil(x * 2.0 ** frac), -THR_SAT, THR_SAT).astype(np.int64)


def _thr_gap(t) -> float:
    """The smallest step between neighbouring thresholds within the reach (+-THR_SAT exclusive)."""
    inside = (np.abs(t[:-1]) < THR_SAT) & (np.abs(t[1:]) < THR_SAT)
    return float(np.diff(t)[inside].min()) if inside.any() else np.inf


def asinh_thresholds(features, scale, mean, std, in_scale: float, in_zp: int, spread=None, cover=None) -> tuple:
    """(in_frac int64 [F], thresholds int64 [F, 255]) of a model with an input transform.

    Computed in float64 from the graph's own constants (`asinh_boundaries`' x_q, the reading
    where the int8 input steps from q - 1 to q): t_q = ceil(x_q x 2^frac), the smallest
    fixed-point reading at or beyond the boundary, so that q = -128 + #{k : x_fx >= t_k} (x_fx
    clamped to +-IN_LIMIT first) is the int8 input of the real value x_fx / 2^frac, rounded
    half up where it lies exactly on a boundary. onnxruntime's QuantizeLinear rounds half to
    even, after float32 Div, Asinh, Sub and Div: the two part only within float32 rounding of
    a boundary (tests: under 1% of readings, by one step).

    The fractional bits per channel: as many as fit with the largest |x_q| x 2^frac within
    2^29 (at most IN_FRAC_MAX), where neighbouring thresholds then lie at least 4 fixed-point
    units apart. Where they would not (the steps near 0 too fine for an int32 that also holds
    the largest boundary: sinh spans many decades, more so where the first product's int8
    scale is shared with wider channels), resolution comes first: the fewest fractional bits
    that keep 4 units between neighbouring thresholds, the thresholds beyond the int32's
    reach saturated to +-2^30 (never / always reached by a clamped reading: readings beyond
    +-(2^30 - 1) / 2^frac saturate there, as every integer model's do), provided the training
    readings stay within 2^29: `cover` [F], their largest |value| per channel (the metadata's
    asinh_reach), or where a file lacks it the boundaries within Z_COVER standard deviations of
    the training data's transformed values (mean +- Z_COVER x spread: the metadata's std,
    before input_scale; default `std`). InputFormatError (one line, naming the channel and what
    to do) otherwise."""
    x = asinh_boundaries(scale, mean, std, in_scale, in_zp)
    thr = np.zeros(x.shape, np.int64)
    fracs = np.zeros(x.shape[0], np.int64)
    remedy = ("train it again with --set input_transform=asinh (every channel transformed, so no channel's "
              "range stretches the int8 input the channels share) or --set input_transform=none")
    for f, name in enumerate(features):
        xf, a = x[f], float(scale[f])
        reach = float(np.abs(xf).max())
        k = int(min(np.floor(np.log2(THR_REACH / max(reach, 1e-300))), IN_FRAC_MAX)) if np.isfinite(reach) else None
        if k is None or _thr_gap(_thr_at(xf, k)) < THR_GAP_MIN:           # resolution first
            with np.errstate(invalid="ignore"):
                steps = np.diff(xf)
            fine = float(steps[np.isfinite(steps)].min()) if np.isfinite(steps).any() else 0.0
            if not fine > 0:
                raise InputFormatError(f"channel '{name}': its int8 input's steps through the input transform "
                                       f"asinh(x / {a:.3g}) are beyond float64; {remedy}")
            k = int(np.ceil(np.log2(THR_GAP_MIN / fine)))
            while k <= IN_FRAC_MAX and _thr_gap(_thr_at(xf, k)) < THR_GAP_MIN:
                k += 1
            m_f, s_f = float(mean[f]), float(std[f])     # the transformed values Z_COVER stds out, in the int8's range
            sd = s_f if spread is None else float(spread[f])
            y = np.clip(m_f + Z_COVER * sd * np.array([-1.0, 1.0]), m_f + s_f * in_scale * (-128 - in_zp),
                        m_f + s_f * in_scale * (127 - in_zp))
            with np.errstate(over="ignore"):
                need = float(np.abs(a * np.sinh(y)).max()) if cover is None else float(cover[f])
            what = (f"its training readings reach {need:.3g}" if cover is not None else
                    f"it reaches readings of {need:.3g} within {Z_COVER:g} standard deviations of its training data")
            held = THR_REACH / 2.0 ** min(k, IN_FRAC_MAX)
            if k > IN_FRAC_MAX or not need <= held:
                raise InputFormatError(
                    f"channel '{name}': through its input transform asinh(x / {a:.3g}) its int8 input has steps as "
                    f"fine as {fine:.3g} and {what}: an int32 reading cannot hold both (at the {k} fractional bits "
                    f"those steps need it holds {held:.3g}); {remedy}")
        thr[f], fracs[f] = _thr_at(xf, k), k
    return fracs, thr


def _activation(path, init: dict, producer: dict, dq) -> tuple:
    """(scale, zero point) of the int8 activation a DequantizeLinear reads: one of each, the
    zero point int8, and the QuantizeLinear that made it with the same ones."""
    if len(dq.input) < 3 or not dq.input[2]:
        raise _bad(path, f"{dq.input[0]} has no zero point, so it is uint8 where the integer step takes int8")
    scale = real_scale(path, dq.input[1], init[dq.input[1]])
    zero = int8_zero_point(path, dq.input[2], init[dq.input[2]])
    if scale.size != 1 or zero.size != 1:
        raise _bad(path, f"{dq.input[0]} has {scale.size} scales where the integer step takes one per activation")
    q = producer.get(dq.input[0])
    if q is not None and q.op_type == "QuantizeLinear":
        if len(q.input) < 3 or not q.input[2]:
            raise _bad(path, f"{q.input[0]} is quantized without a zero point (uint8) but dequantized as int8")
        qs = np.asarray(init[q.input[1]], np.float64).reshape(-1)
        qz = np.asarray(init[q.input[2]])
        if qs.shape != scale.shape or qs[0] != scale[0] or qz.dtype != np.int8 or int(qz.reshape(-1)[0]) != zero[0]:
            raise _bad(path, f"{q.input[0]} is quantized with scale {q.input[1]} = {qs.reshape(-1)[0]:g} and zero "
                             f"point {q.input[2]} but dequantized with {dq.input[1]} = {scale[0]:g} and "
                             f"{dq.input[2]} = {int(zero[0])}")
    return float(scale[0]), int(zero[0])


def _weights(path, init: dict, dq) -> tuple:
    """(int8 weights, per-channel scales) of a DequantizeLinear of constant weights: int8,
    symmetric (zero points 0)."""
    w = np.asarray(init[dq.input[0]])
    if w.dtype != np.int8:
        raise _bad(path, f"weights {dq.input[0]} are {w.dtype} where the integer step takes int8")
    scale = real_scale(path, dq.input[1], init[dq.input[1]])
    if len(dq.input) > 2 and dq.input[2]:
        zero = int8_zero_point(path, dq.input[2], init[dq.input[2]])
        if np.any(zero):
            i = int(np.argmax(zero != 0))
            raise _bad(path, f"zero point {_entry(dq.input[2], zero, i)} of weights {dq.input[0]} is {int(zero[i])} "
                             "where the integer step takes symmetric weights (zero points 0)")
    return w, scale


def _bias(path, init: dict, dq) -> np.ndarray:
    """A DequantizeLinear of a constant int32 bias as its real values, (q - zero point) x scale."""
    q = np.asarray(init[dq.input[0]])
    if q.dtype.kind not in "iu":
        raise _bad(path, f"bias {dq.input[0]} is {q.dtype}, not integers")
    scale = real_scale(path, dq.input[1], init[dq.input[1]])
    zero = np.asarray(init[dq.input[2]], np.int64).reshape(-1) if len(dq.input) > 2 and dq.input[2] else 0
    return (q.astype(np.int64).reshape(-1) - zero).astype(np.float64) * scale


QBIAS_LIMIT = 1 << 30        # a quantized int32 bias beyond this overflows onnxruntime's int32 sum of products


def _check_graph_integers(initializers: dict, nodes, path) -> None:
    """What the graph itself computes must be what the integer step computes: every
    Quantize/DequantizeLinear zero point int8 (the step's activations and weights are signed;
    a uint8 zero point anywhere, even on a tensor the step requantizes its own way, means other
    numbers), and every int32 tensor a DequantizeLinear reads (a quantized bias) within
    +-2^30, so that onnxruntime's int32 sum of products and bias cannot wrap. ModelFileError
    (one line, naming the tensor) otherwise."""
    for n in nodes:
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        q = np.asarray(initializers[n.input[0]]) if n.op_type == "DequantizeLinear" and n.input[0] in initializers \
            else None
        zp = initializers.get(n.input[2]) if len(n.input) > 2 else None
        if q is not None and q.dtype == np.int32:                      # a quantized bias: zero point 0
            if zp is not None and np.asarray(zp).any():
                raise _bad(path, f"zero point {n.input[2]} of the quantized bias {n.input[0]} is not 0")
        elif zp is not None:
            int8_zero_point(path, n.input[2], zp)
        if q is not None and q.dtype == np.int32:
            if q.size and int(np.abs(q.astype(np.int64)).max()) > QBIAS_LIMIT:
                i = int(np.argmax(np.abs(q.astype(np.int64)).reshape(-1)))
                raise _bad(path, f"{_entry(n.input[0], q.reshape(-1), i)} is {int(q.reshape(-1)[i])}: a "
                                 "quantized bias beyond +-2^30 overflows the int32 sum it is added to")
