"""Integer-only execution of int8 recurrent step graphs (RNN, GRU, LSTM), as a microcontroller runs them.

Taken from the static int8 ONNX model: the int8 weights (symmetric, per output channel), their
scales, and the calibrated scale and zero point of every MatMul/Gemm input. Everything else is
fixed here and is the same in the C code `firmware_sim.cemit` writes, operation for operation,
in 32-bit arithmetic only (a Cortex-M0+ has no 64-bit multiply):

- A reading enters as int32 fixed point with a number of fractional bits chosen per channel
  from the range the model's int8 input covers (`in_frac`, up to 40; a pressure channel in Pa
  gets about 12, an accelerometer in g 24): value x 2^in_frac. Readings are clamped to
  +-(2^30 - 1) first. A channel whose int8 step is finer than what an int32 can resolve over
  its range is refused (`InputFormatError`, naming it). A model with an input transform
  (asinh(reading / scale) before its normalisation) maps the fixed point to its int8 input by
  a table of 255 thresholds per channel instead (`intgraph.asinh_thresholds`).
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
check of every constant the step holds (`check_int_model`) in `firmware_sim.intcheck`, what
every integer model reads from its graph alike (`MatMulQ`, the reading's fixed point, the
checks before any constant) in `firmware_sim.intgraph`; this module holds the model and reads
it from the graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgeseq.errors import ModelFileError
from firmware_sim.intcheck import (  # noqa: F401  (importable from here, as before)
    ACT_SPAN, INT32_MAX, INT32_MIN, SHIFT_MAX, _bad, _entry, _multiplier, check_int_model, int8_zero_point, q12,
    real_scale)
from firmware_sim.intgraph import (  # noqa: F401  (importable from here, as before)
    NORM_RTOL, QBIAS_LIMIT, QUANT_OPS, THRESHOLDS, AsinhReading, FixedPointReading, InputFormatError, MatMulQ,
    _activation, _bias, _check_graph_integers, _check_normalization, _meta_error, _weights, asinh_boundaries,
    asinh_thresholds, check_int8, check_quantization, checked_graph, graph_normalization, graph_reading, input_format,
    model_meta, reading_format)
from firmware_sim.intmath import (  # noqa: F401  (importable from here, as before)
    IN_FRAC_MAX, IN_LIMIT, LUT_SHIFT, LUT_SIZE, MULT_BITS, ONE_Q15, Q, SIGMOID, TANH, lut, multiplier, requant)


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
    asinh: object = None     # intgraph.AsinhReading: the input transform's threshold table; None: none

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
        raise contract.ArchMismatchError(f"'{path}': metadata {contract.META_ARCH} says '{arch}' ({GATES[arch]} "
                                         f"gate block(s) per layer{' and a bh0 bias' if arch == 'gru' else ''}) but "
                                         f"the graph's recurrent weights have {have}; export it again")
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


def run_stream(model: IntModel, X_fx: np.ndarray) -> np.ndarray:
    """X_fx [N, T, F] (fixed point, `IntModel.to_fixed`) -> logits Q12 [T, N, C], each row its own stream."""
    N, T, _ = X_fx.shape
    state = model.init_state(N)
    out = np.zeros((T, N, len(model.labels)), np.int64)
    for t in range(T):
        out[t], state = model.step(X_fx[:, t], state)
    return out


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
