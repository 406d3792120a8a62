"""Integer-only execution of int8 recurrent step graphs (RNN, GRU, LSTM), as a microcontroller runs them.

Taken from the static int8 ONNX model: the int8 weights (symmetric, per output channel), their
scales, and the calibrated scale and zero point of every MatMul/Gemm input. Everything else is
fixed here and is the same in the C code `firmware_sim.cemit` writes, operation for operation,
in 32-bit arithmetic only (a Cortex-M0+ has no 64-bit multiply):

- A reading enters as int32 fixed point with a number of fractional bits chosen per channel
  from the range the model's int8 input covers (`in_frac`, up to 40; a pressure channel in Pa
  gets about 12, an accelerometer in g 24): value x 2^in_frac. Readings are clamped to
  +-(2^30 - 1) first. A channel whose int8 step is finer than what an int32 can resolve over
  its range is refused (`InputFormatError`, naming it).
- Each MatMul is an int8 x int8 dot product into int32 (the input zero point folded into a
  per-output constant). The accumulator becomes a Q12 pre-activation (12 fractional bits) by a
  per-channel multiplier and shift, y = round(acc x m / 2^s) with a 15-bit m, computed exactly
  from 16-bit halves of acc (`requant`). Biases are added in Q12.
- sigmoid and tanh are int16 tables of 2049 knots over [-8, 8] (steps of 1/128) with linear
  interpolation between knots (Q12 input: index x >> 5, weight x & 31), giving Q15 outputs;
  outside the range they saturate. Without interpolation the RNN lost a test sequence.
- The recurrent state h is int16 Q15; the LSTM cell c is int32 Q15 (f x c is taken exactly in
  32 bits from 16-bit halves). h is quantized to int8 with the model's calibrated scale before
  each MatMul.
- The head gives Q12 logits; the prediction is their argmax. No float on the path: floats
  appear only when the tables and multipliers are built, and when outputs are compared.

The arithmetic (`multiplier`, `requant`, the tables and `lut`) is in `firmware_sim.intmath`, the
check of every constant the step holds (`check_int_model`) in `firmware_sim.intcheck`; this
module holds the model and reads it from the graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgeseq.errors import DataError, ModelFileError
from firmware_sim.intcheck import (  # noqa: F401  (importable from here, as before)
    ACT_SPAN, INT32_MAX, INT32_MIN, SHIFT_MAX, _bad, _entry, _multiplier, check_int_model, int8_zero_point, q12,
    real_scale)
from firmware_sim.intmath import (  # noqa: F401  (importable from here, as before)
    IN_FRAC_MAX, IN_LIMIT, LUT_SHIFT, LUT_SIZE, MULT_BITS, ONE_Q15, Q, SIGMOID, TANH, lut, multiplier, requant)


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


@dataclass
class IntModel(FixedPointReading):
    """The integer RNN, GRU or LSTM step (see the module's docstring for its formats)."""
    kind: str                # rnn, gru, lstm
    hidden: int
    layers: int
    labels: list
    feat_m: np.ndarray       # reading (fixed point) -> int8 input: per-feature multiplier, shift, offset
    feat_s: np.ndarray
    mean_fx: np.ndarray      # per-feature mean in the reading's fixed point
    in_frac: np.ndarray      # per-feature fractional bits of a reading
    cells: list              # per layer: {"x": MatMulQ, "h": MatMulQ, "hq": (m, s), "b": Q12, "bh": Q12|None}
    head: MatMulQ
    head_hq: tuple
    head_b: np.ndarray
    logit_scale: float = 1.0 / (1 << Q)
    meta: dict = field(default_factory=dict)
    head_b_name: str = "the head's bias"

    def init_state(self, B: int = 1) -> list:
        st = []
        for _ in range(self.layers):
            st.append(np.zeros((B, self.hidden), np.int64))                        # h, Q15
            if self.kind == "lstm":
                st.append(np.zeros((B, self.hidden), np.int64))                    # c, Q15
        return st

    @property
    def reading_zp(self) -> int:
        return self.cells[0]["x"].in_zp

    def step(self, x_fx: np.ndarray, state: list):
        """x_fx int [B, F] (readings in fixed point, `to_fixed`) -> (logits Q12 int [B, C], new state)."""
        a = self.quantize_reading(x_fx)
        H, new, per = self.hidden, [], 2 if self.kind == "lstm" else 1
        h = None
        for layer, cell in enumerate(self.cells):
            h = state[layer * per]
            if layer > 0:
                a = cell["x"].quantize_q15(new[(layer - 1) * per], *cell["aq"])
            gx = cell["x"](a) + cell["b"]
            gh = cell["h"](cell["h"].quantize_q15(h, *cell["hq"]))
            if cell["bh"] is not None:
                gh = gh + cell["bh"]
            if self.kind == "rnn":
                h = lut(TANH, gx + gh)
                new.append(h)
            elif self.kind == "gru":
                r = lut(SIGMOID, gx[:, :H] + gh[:, :H])
                z = lut(SIGMOID, gx[:, H:2 * H] + gh[:, H:2 * H])
                n = lut(TANH, gx[:, 2 * H:] + ((r * gh[:, 2 * H:]) >> 15))
                h = n + ((z * (h - n)) >> 15)
                new.append(h)
            else:
                g = gx + gh
                i, f = lut(SIGMOID, g[:, :H]), lut(SIGMOID, g[:, H:2 * H])
                gg, o = lut(TANH, g[:, 2 * H:3 * H]), lut(SIGMOID, g[:, 3 * H:])
                c = ((f * state[layer * per + 1]) >> 15) + ((i * gg) >> 15)
                h = (o * lut(TANH, c >> 3)) >> 15
                new += [h, c]
        logits = self.head(self.head.quantize_q15(h, *self.head_hq)) + self.head_b
        return logits, new


GATES = {"rnn": 1, "gru": 3, "lstm": 4}       # gate blocks of `hidden` columns in each layer's weights
QUANT_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "QLinearMatMul",
             "ConvInteger", "QLinearConv"}
NORM_RTOL = 1e-6            # metadata normalisation vs the graph's float32 constants: a few float32 steps


def from_onnx(path) -> IntModel:
    """Build the integer model from a static int8 edgeseq model file, read once.

    Sizes (hidden, layers, features, classes) and the normalisation come from the graph itself;
    metadata that disagrees with it (arch vs the weights' gate blocks, config hidden/layers,
    normalization vs the graph's Sub/Div constants, quantization vs the graph's nodes) is
    refused with a MetadataError (a ModelFileError) naming the key; a constant the integer step
    cannot hold with a ModelFileError naming the tensor and the value (`check_int_model`). An
    SSM file gives a `firmware_sim.intssm.SSMIntModel` (checked by `check_ssm_model`)."""
    return load_int_model(path)[0]


def load_int_model(path) -> tuple:
    """(IntModel, InferenceSession, ModelMeta) of the model file at `path`, all three from one
    read of it (a file replaced meanwhile is never half the one and half the other). Raises
    as `from_onnx`."""
    from edgeseq.runtime.model import load_model

    sess, meta, loaded = load_model(path)  # a missing, corrupt or non-edgeseq file: ModelFileError
    if loaded.graph is None:
        raise ModelFileError(loaded.graph_error or f"'{path}' cannot be read; export it again")
    return from_parts(meta, loaded.graph.initializers, loaded.graph.nodes, path), sess, meta


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


def _recurrent_shape(mm: dict, init: dict, meta, path) -> tuple:
    """(hidden, layers) from the graph's recurrent weights, checked against edgeseq.arch (gate
    blocks per layer, and the GRU's bh bias), edgeseq.features, edgeseq.labels and
    edgeseq.config."""
    from edgeseq import contract
    from edgeseq.errors import ModelFileError
    arch = meta.arch
    if "wx0" not in mm or "wh0" not in mm:
        _meta_error(path, contract.META_ARCH, f"says '{arch}' but the graph has no int8 recurrent weights (wx0, wh0)")
    L = 0
    while f"wx{L}" in mm and f"wh{L}" in mm:
        L += 1
    H, cols = mm["wh0"].w.shape
    gates = cols // H if H and cols % H == 0 else 0
    named = {g: a for a, g in GATES.items()}
    if gates != GATES[arch] or (arch == "gru") != ("bh0" in init):
        have = (f"{gates} gate block(s) of hidden {H}" + (" and a bh0 bias" if "bh0" in init else "")
                + (f", as {'an' if gates == 1 else 'a'} {named[gates].upper()} has" if gates in named else ""))
        _meta_error(path, contract.META_ARCH, f"says '{arch}' ({GATES[arch]} gate block(s) per layer"
                                              f"{' and a bh0 bias' if arch == 'gru' else ''}) but the graph's "
                                              f"recurrent weights have {have}")
    for layer in range(L):
        x, h = mm[f"wx{layer}"].w.shape, mm[f"wh{layer}"].w.shape
        b, bh = init.get(f"b{layer}"), init.get(f"bh{layer}")
        if (h != (H, gates * H) or x[1] != gates * H or layer and x[0] != H or b is None or b.shape != (gates * H,)
                or (arch == "gru") != (bh is not None) or bh is not None and bh.shape != (gates * H,)):
            raise ModelFileError(f"'{path}': layer {layer}'s weights (wx {x}, wh {h}) do not fit a {arch.upper()} of "
                                 f"hidden {H}; export it again with --int8")
    head = [k for k in mm if k.startswith("model.head.weight")]
    if len(head) != 1 or mm[head[0]].w.shape[0] != H:
        raise ModelFileError(f"'{path}' has no int8 head of {H} inputs; export it again with --int8")
    F, C = mm["wx0"].w.shape[0], mm[head[0]].w.shape[1]
    if F != len(meta.features):
        _meta_error(path, contract.META_FEATURES, f"names {len(meta.features)} features but the graph's input "
                                                  f"weights read {F}")
    if C != len(meta.labels):
        _meta_error(path, contract.META_LABELS, f"has {len(meta.labels)} labels but the graph's head gives {C} classes")
    config = meta.config or {}
    for key, have in (("hidden", H), ("layers", L), ("n_features", F), ("n_classes", C)):
        if key in config and (type(config[key]) is not int or config[key] != have):
            _meta_error(path, contract.META_CONFIG, f"has {key} {_short(config[key])} but the graph's weights give "
                                                    f"{have}")
    return H, L


def _short(v) -> str:
    import json
    try:
        text = json.dumps(v)
    except (TypeError, ValueError):
        text = type(v).__name__
    return text if len(text) <= 40 else text[:37] + "..."


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


def run_stream(model: IntModel, X_fx: np.ndarray) -> np.ndarray:
    """X_fx [N, T, F] (fixed point, `IntModel.to_fixed`) -> logits Q12 [T, N, C], each row its own stream."""
    N, T, _ = X_fx.shape
    state = model.init_state(N)
    out = np.zeros((T, N, len(model.labels)), np.int64)
    for t in range(T):
        out[t], state = model.step(X_fx[:, t], state)
    return out


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


def from_parts(meta, initializers: dict, nodes, path="<model>") -> IntModel:
    """`from_onnx` without the onnx package: the integer model from a static int8 edgeseq graph
    given as `initializers` (name -> numpy array) and `nodes` (objects with op_type, input and
    output, in graph order), with `meta` parsed already (`edgeseq.runtime.model.open_model`).
    The checks and errors of `from_onnx` (which calls this with the graph it read): the
    quantization parameters' shapes (`edgeseq.runtime.quant.check_qdq`) and every constant the
    integer step holds (`check_int_model`). `path` only names the model in messages. Used by
    edgeseq.runtime.native too, so the firmware and the native int8 step refuse alike. An SSM
    graph (edgeseq.arch "ssm") gives `firmware_sim.intssm.from_parts`'s SSMIntModel."""
    if meta.arch == "ssm":
        from firmware_sim.intssm import from_parts as ssm_from_parts
        return ssm_from_parts(meta, initializers, nodes, path)
    if meta.arch == "transformer" and (meta.quantization or {}).get("scheme") == "static":
        from firmware_sim.intxf import from_parts as xf_from_parts
        return xf_from_parts(meta, initializers, nodes, path)
    proto = checked_graph(meta, initializers, nodes, path)
    try:
        init = {k: np.asarray(v) for k, v in initializers.items()}
        producer = {o: n for n in proto.graph.node for o in n.output}

        def dq_params(tensor):
            n = producer.get(tensor)
            if n is None or n.op_type != "DequantizeLinear":
                raise ModelFileError(f"'{path}': {tensor} is not dequantized from int8; export it again with --int8")
            return n

        mm = {}
        for n in proto.graph.node:
            if n.op_type not in ("MatMul", "Gemm"):
                continue
            a, w = dq_params(n.input[0]), dq_params(n.input[1])
            w_name = w.input[0].replace("_quantized", "")
            in_scale, in_zp = _activation(path, init, producer, a)
            w_q, w_scale = _weights(path, init, w)
            if n.op_type == "Gemm":
                w_q = w_q.T                                                         # (C, H) -> (H, C)
            mm[w_name] = MatMulQ.make(w_q, w_scale, in_scale, in_zp, w.input[0], path, a.input[1])
            if n.op_type == "Gemm":
                if len(n.input) > 2 and n.input[2]:
                    b_dq = dq_params(n.input[2])
                    mm["head.bias"] = (_bias(path, init, b_dq), n.input[2])
                else:                                  # a head bias of zeros: the exporter drops it
                    mm["head.bias"] = (np.zeros(w_q.shape[1]), "the head's bias")
        H, L = _recurrent_shape(mm, init, meta, path)
        reading = reading_format(meta, proto, init, mm["wx0"], path)
        cells = []
        for layer in range(L):
            x, h = mm[f"wx{layer}"], mm[f"wh{layer}"]
            cell = {"x": x, "h": h, "hq": _multiplier(1.0 / (ONE_Q15 * h.in_scale), f"scale {h.in_name} (Q15 state in)", path),
                    "b": q12(path, f"b{layer}", init[f"b{layer}"]), "b_name": f"b{layer}",
                    "bh": q12(path, f"bh{layer}", init[f"bh{layer}"]) if f"bh{layer}" in init else None,
                    "bh_name": f"bh{layer}"}
            if layer > 0:
                cell["aq"] = _multiplier(1.0 / (ONE_Q15 * x.in_scale), f"scale {x.in_name} (Q15 state in)", path)
            cells.append(cell)
        head = mm[next(k for k in mm if k.startswith("model.head.weight"))]
        head_b, head_b_name = mm["head.bias"]
        model = IntModel(kind=meta.arch, hidden=H, layers=L, labels=list(meta.labels), **reading, cells=cells,
                         head=head, head_hq=_multiplier(1.0 / (ONE_Q15 * head.in_scale),
                                                        f"scale {head.in_name} (Q15 state in)", path),
                         head_b=q12(path, head_b_name, head_b), head_b_name=head_b_name,
                         meta=model_meta(meta, meta.arch))
    except (KeyError, IndexError, ValueError, TypeError, StopIteration, ArithmeticError) as e:
        raise ModelFileError(f"'{path}' is not laid out as edgeseq's int8 export writes it ({type(e).__name__}: "
                             f"{str(e)[:80]}); export it again with --int8") from None
    check_int_model(model, path)
    return model
