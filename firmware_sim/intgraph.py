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


class FixedPointReading:
    """What every integer model does with a reading before its first product (RNN, SSM,
    Transformer alike): the int32 fixed point it takes (`in_frac` fractional bits per channel,
    `mean_fx`) and the requantization (`feat_m`, `feat_s`) to the int8 input of the first
    product, whose zero point is `reading_zp`."""

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
        """(low, high) float64 [F]: the raw readings the int8 input covers (it saturates beyond)."""
        real = self.feat_m.astype(np.float64) / np.exp2(self.feat_s.astype(np.float64))   # int8 steps per fixed-point unit
        step = 1.0 / (real * np.exp2(self.in_frac.astype(np.float64)))                     # raw units per int8 step
        mean = self.mean_fx / np.exp2(self.in_frac.astype(np.float64))
        return mean + step * (-128 - self.reading_zp), mean + step * (127 - self.reading_zp)

    def quantize_reading(self, x_fx: np.ndarray) -> np.ndarray:
        """Fixed-point readings int [B, F] -> the first product's int8 input, int64 [B, F]."""
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
    there is the metadata's std x input_scale)."""
    from edgeseq import contract
    from edgeseq.errors import ModelFileError

    def bad(what):
        raise ModelFileError(f"'{path}' does not normalise its reading as edgeseq's export does ({what}); "
                             "export it again with --int8")
    nodes = list(proto.graph.node)
    sub = next((n for n in nodes if n.op_type == "Sub" and list(n.input[:1]) == [contract.READING]), None)
    if sub is None or len(sub.input) < 2 or sub.input[1] not in init:
        bad("no Sub of constant means from the reading")
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
    return mean, std


def _check_normalization(meta, mean, std, path) -> None:
    """The metadata's mean and std x input_scale must be the graph's, within float32 rounding."""
    from edgeseq.contract import META_NORM
    norm = meta.normalization
    if norm is None:
        _meta_error(path, META_NORM, "is null but the graph normalises the reading")
    m_mean = np.asarray(norm["mean"], np.float64)
    m_std = np.asarray(norm["std"], np.float64) * np.asarray(norm.get("input_scale", np.ones(len(m_mean))), np.float64)
    scaled = " x input_scale" if "input_scale" in norm else ""
    for what, want, got in (("mean", m_mean, mean), ("std" + scaled, m_std, std)):
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
    shift would pass 31."""
    mean, std = graph_normalization(proto, init, len(meta.features), path)
    _check_normalization(meta, mean, std, path)
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
