"""Integer-only execution of the int8 state-space step (`edgeseq.models.ssm`, fixed and selective
decay), as a microcontroller runs it, operation for operation as the C that
`firmware_sim.cemit_ssm` writes (kernels in `kernels/es_ssm_int.h`), in 32-bit arithmetic only.

Taken from the static int8 ONNX model: the int8 weights of every projection (symmetric, per
output channel) and the calibrated scale and zero point of each projection's input (the static
export calibrates them on the training data, as for the RNNs), the calibrated ranges of the
gate and readout outputs (their QuantizeLinear), and the float constants (LayerNorm weights,
biases, decays, rates, skip). Formats:

- the reading enters as for the RNNs (int32 fixed point, `in_frac` per channel) and becomes the
  encoder's int8 input; every product is int8 x int8 into int32, requantized by a 15-bit
  multiplier and shift (`intmath.requant`) to Q12 (12 fractional bits), or for the state's
  input to the state's format;
- the residual stream u and LayerNorm outputs v are int32 Q12 (u clamped to +-`u_lim`);
- LayerNorm (`LayerNormQ`): exact deviations D u - sum(u) (no rounded mean), scaled by a
  power of two so the largest has 15 bits, their squares summed in 32 bits, eps added at the
  same scale, and 1/sqrt from a 193-knot int16 table over [1, 4] (`RSQRT`, linearly
  interpolated, Q15) after scaling by a power of four; gamma and beta in Q12;
- the state is int32 with `qs` fractional bits per layer (from the readout input's calibrated
  range), clamped to +-(2^30 - 1). Fixed decay: s' = s - floor(floor(s b_m / 2^15) / 2^b_k) + x,
  with b = 1 - a = b_m / 2^(15 + b_k) precomputed per state (the input gain 1 - a is already
  in the exported x weights). Selective: Δ = softplus(δ) from a 2049-knot Q12 table over
  [-8, 8] (δ itself above 8), z = λΔ by multiplier, b = 1 - exp(-z) from a 2049-knot Q15
  table over [0, 16], and s' = s + floor((x - s) b / 2^15);
- SiLU(g) = g x sigmoid(g) (the RNNs' sigmoid table, Q15); y = C s + D ⊙ v; y and SiLU(g) are
  brought to int16 by shifts chosen from their calibrated ranges (4x headroom, saturating),
  multiplied exactly, and the product requantized to the output projection's int8 input;
- the head gives Q12 logits, as the RNNs' do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from edgeseq.errors import ModelFileError
from edgeseq.runtime.quant import strip_copies
from firmware_sim.intcheck import INT32_MAX, _bad, _fits, _multiplier, _reach, _requant_fits, _requant_ok, check_reading
from firmware_sim.intmath import LUT_SHIFT, LUT_SIZE, ONE_Q15, Q, SIGMOID, lut, requant
from firmware_sim.intgraph import (FixedPointReading, MatMulQ, _activation, _bias, _weights, checked_graph, model_meta,
                                   reading_format)

S_LIMIT = (1 << 30) - 1          # the state and its input are clamped to +-S_LIMIT
RSQRT_KNOTS = 193                # 1/sqrt(x) over x in [1, 4], steps of 1/64
HEADROOM = 4                     # y and SiLU(g) reach int16 saturation at 4x their calibrated range
SOFTPLUS_LINEAR = 8 << Q         # above it softplus(δ) = δ (the difference is below 3.4e-4)


def _rsqrt_table() -> np.ndarray:
    x = 1.0 + np.arange(RSQRT_KNOTS) / 64.0
    return np.minimum(np.round(ONE_Q15 / np.sqrt(x)), ONE_Q15 - 1).astype(np.int16)


def _lut_table(fn, scale: int) -> np.ndarray:
    x = (np.arange(LUT_SIZE + 1) * (1 << LUT_SHIFT) - 8 * (1 << Q)) / (1 << Q)          # knots -8 .. 8
    return np.clip(np.round(fn(x) * scale), -32768, 32767).astype(np.int16)


RSQRT = _rsqrt_table()
SOFTPLUS = _lut_table(lambda x: np.logaddexp(0.0, x), 1 << Q)            # Q12 output
DECAY_GAIN = _lut_table(lambda x: -np.expm1(-(x + 8.0)), ONE_Q15)        # 1 - exp(-z), z = x + 8, Q15


def bitlen(x) -> np.ndarray:
    """Bits of non-negative int64 values below 2^32 (0 for 0), element-wise."""
    x = np.asarray(x, np.int64)
    return sum((x >> k > 0).astype(np.int64) for k in range(32))


def rsqrt_q15(w) -> tuple:
    """w int [...] in [2^28, 2^30) -> 2^15 / sqrt(w / 2^28), table-interpolated (Q15)."""
    d = np.asarray(w, np.int64) - (1 << 28)
    i, f = d >> 22, (d >> 7) & 0x7FFF
    lo, hi = RSQRT[i].astype(np.int64), RSQRT[i + 1].astype(np.int64)
    return lo + (((hi - lo) * f) >> 15)


@dataclass
class LayerNormQ:
    """A LayerNorm over D channels in Q12: see `layernorm`."""
    r: int                   # squares are summed >> r, r = ceil(log2 D)
    e_cap: int               # the deviations are scaled by at most 2^e_cap ...
    eps_cap: int             # ... where eps is eps_cap (in the squares' units)
    gamma: np.ndarray        # int64 [D] Q12: gamma x sqrt(D / 2^r)
    beta: np.ndarray         # int64 [D] Q12
    name: str = ""

    @classmethod
    def make(cls, gamma, beta, eps: float, name: str, path) -> "LayerNormQ":
        """gamma, beta float [D], eps >= 0 -> the integer LayerNorm; ModelFileError naming
        `name` for a weight or bias beyond int32 in Q12 or an epsilon too large."""
        D = len(gamma)
        r = int(np.ceil(np.log2(D))) if D > 1 else 0
        base = float(eps) * float(D) ** 3 * 2.0 ** (24 - r)    # eps in units of the squares at scale 2^0
        if base > 0:
            e_cap = min(int(np.floor(np.log2((1 << 29) / base) / 2)), 15)
            eps_cap = int(round(base * 4.0 ** e_cap))
        else:
            e_cap, eps_cap = 15, 0
        if e_cap < -15:
            raise _bad(path, f"{name}'s epsilon {eps:g} is too large for the integer LayerNorm")
        g = np.asarray(gamma, np.float64) * np.sqrt(D / 2.0 ** r)
        return cls(r, e_cap, eps_cap, _qfrac(path, f"{name} weight", g, Q), _qfrac(path, f"{name} bias", beta, Q), name)

    @property
    def n_max(self) -> int:
        """The largest |normalised value| in Q12 before gamma: sqrt(D) x sqrt(2^r / D), with a margin."""
        return int(np.ceil(np.sqrt(2.0 ** self.r) * 4096 * 1.02)) + 2

    @property
    def out_max(self) -> int:
        return int((self.n_max * np.abs(self.gamma).max() >> 12) + np.abs(self.beta).max() + 1)

    def check(self, path, what: str) -> int:
        """ModelFileError unless gamma x the largest normalised value fits int32; else `out_max`."""
        _fits(path, f"{what} weight x normalised value", self.n_max * np.abs(self.gamma).max() + 2048)
        return self.out_max

    def __call__(self, u: np.ndarray) -> np.ndarray:
        """u int [B, D] Q12 (|u| <= u_lim, so D |u| < 2^30) -> int [B, D] Q12.

        The deviations are taken exactly as d = D u - sum(u) (no rounded mean), scaled by 2^e
        so the largest has 15 bits (e <= e_cap), their squares summed >> r, eps added at that
        scale (eps_cap >> 2 (e_cap - e)), and 1/sqrt of the sum read from `RSQRT` after scaling
        it into [2^28, 2^30) by a power of 4 (`rsqrt_q15`)."""
        u = np.asarray(u, np.int64)
        d = u.shape[1] * u - u.sum(1, keepdims=True)
        maxd = np.abs(d).max(1)
        e = np.minimum(15 - bitlen(maxd), self.e_cap)[:, None]
        t = np.where(e >= 0, d << np.maximum(e, 0), d >> np.maximum(-e, 0))
        sq = ((t * t) >> self.r).sum(1, keepdims=True)
        eps = self.eps_cap >> np.minimum(2 * (self.e_cap - e), 31)
        w = sq + eps
        bl = bitlen(np.maximum(w, 1))
        j = np.where(bl >= 31, 1, -((30 - bl) // 2))            # w / 4^j in [2^28, 2^30)
        wn = np.where(j > 0, w >> 2, w << np.maximum(-2 * j, 0))
        R = rsqrt_q15(np.where(maxd[:, None] == 0, 1 << 28, wn))
        sh = 17 + j
        n = (t * R + (np.int64(1) << (sh - 1))) >> sh
        v = ((n * self.gamma + 2048) >> 12) + self.beta
        return np.where(maxd[:, None] == 0, self.beta, v)


def _qfrac(path, name: str, value, frac: int) -> np.ndarray:
    """Real values as int64 with `frac` fractional bits: finite and within int32, else ModelFileError."""
    a = np.asarray(value, np.float64).reshape(-1)
    if not np.isfinite(a).all():
        i = int(np.argmax(~np.isfinite(a)))
        raise _bad(path, f"{name}[{i}] is {a[i]:g}, not a finite number")
    q = np.round(a * 2.0 ** frac)
    if np.abs(q).max(initial=0) > INT32_MAX:
        i = int(np.argmax(np.abs(q)))
        raise _bad(path, f"{name}[{i}] is {a[i]:.9g}: beyond int32 with {frac} fractional bits")
    return q.astype(np.int64)


def _int8_range(scale: float, zp: int) -> float:
    """The largest |real value| an int8 of this scale and zero point holds."""
    return float(scale) * max(abs(-128 - zp), abs(127 - zp))


def quantize(v, m: int, s: int, zp: int) -> np.ndarray:
    """int32 values -> int8 input of a product: clamp(round(v x m / 2^s) + zp)."""
    return np.clip(requant(v, m, s) + zp, -128, 127)


def mul_q15(a, q) -> np.ndarray:
    """floor(a x q / 2^15), |q| < 2^15, as es_k_mulq15 / es_k_mul16 compute it exactly in 32 bits."""
    return (np.asarray(a, np.int64) * np.asarray(q, np.int64)) >> 15


@dataclass(kw_only=True)
class LayeredIntModel(FixedPointReading):
    """What the integer SSM and Transformer steps share: the reading's fixed-point input and
    int8 quantization, the embedding (Q12), the layers' cells, the final LayerNorm and the head."""
    kind: str
    d_model: int
    layers: int
    labels: list
    feat_m: np.ndarray
    feat_s: np.ndarray
    mean_fx: np.ndarray
    in_frac: np.ndarray
    enc: object              # MatMulQ, Q12
    enc_b: np.ndarray
    cells: list              # per layer: dict (see `from_parts`)
    ln_f: LayerNormQ
    head: object
    head_hq: tuple           # Q12 -> head's int8 input (m, s)
    head_b: np.ndarray
    u_lim: int
    logit_scale: float = 1.0 / (1 << Q)
    meta: dict = field(default_factory=dict)
    asinh: object = None     # intgraph.AsinhReading: the input transform's threshold table; None: none

    @property
    def hidden(self) -> int:
        return self.d_model

    @property
    def reading_zp(self) -> int:
        return self.enc.in_zp


@dataclass(kw_only=True)
class SSMIntModel(LayeredIntModel):
    """kind "ssm"."""
    selective: bool
    d_state: int

    def init_state(self, B: int = 1) -> list:
        return [np.zeros((B, self.d_state), np.int64) for _ in range(self.layers)]

    def step(self, x_fx: np.ndarray, state: list):
        """x_fx int [B, F] (readings in fixed point, `to_fixed`) -> (logits Q12 int [B, C], new
        state: per layer int [B, d_state] with the layer's `qs` fractional bits)."""
        lim = self.u_lim
        u = np.clip(self.enc(self.quantize_reading(x_fx)) + self.enc_b, -lim, lim)
        new = []
        for cell, s in zip(self.cells, state):
            v = cell["ln"](u)
            mx, mg = cell["x"], cell["g"]
            x = np.clip(mx(quantize(v, *cell["xq"], mx.in_zp)) + cell["bx"], -S_LIMIT, S_LIMIT)
            g = mg(quantize(v, *cell["gq"], mg.in_zp)) + cell["bg"]
            if self.selective:
                md = cell["d"]
                dl = md(quantize(v, *cell["dq"], md.in_zp)) + cell["bd"]
                sp = np.where(dl >= SOFTPLUS_LINEAR, dl, lut(SOFTPLUS, dl))
                z = requant(sp, cell["lam_m"], cell["lam_s"])
                b = lut(DECAY_GAIN, z - (8 << Q))
                s = s + mul_q15(x - s, b)
            else:
                s = np.clip(s - (mul_q15(s, cell["b_m"]) >> cell["b_k"]) + x, -S_LIMIT, S_LIMIT)
            new.append(s)
            mr, mo = cell["r"], cell["o"]
            y = mr(quantize(s, *cell["sq"], mr.in_zp)) + ((v * cell["skip"] + 2048) >> 12)
            silu = mul_q15(g, lut(SIGMOID, g))
            y16 = np.clip(y >> cell["ky"], -32768, 32767)
            s16 = np.clip(silu >> cell["kg"], -32768, 32767)
            o = mo(quantize(y16 * s16, *cell["mq"], mo.in_zp)) + cell["bo"]
            u = np.clip(u + o, -lim, lim)
        vf = self.ln_f(u)
        logits = self.head(quantize(vf, *self.head_hq, self.head.in_zp)) + self.head_b
        return logits, new


def _mm(w_q, w_scale, in_scale: float, in_zp: int, frac: int, name: str, path, in_name: str):
    """A MatMulQ whose output has `frac` fractional bits (Q12 for `frac` = 12)."""
    reals = float(in_scale) * np.broadcast_to(np.asarray(w_scale, np.float64), w_q.shape[1:]) * 2.0 ** frac
    ms = [_multiplier(float(r), f"{name} (output {o}: input scale x weight scale x 2^{frac})", path)
          for o, r in enumerate(reals)]
    return MatMulQ(w=w_q.astype(np.int8), in_scale=float(in_scale), in_zp=int(in_zp),
                   m=np.array([a for a, _ in ms], np.int64), s=np.array([b for _, b in ms], np.int64),
                   name=name, in_name=in_name)


class Product(NamedTuple):
    """One int8 product (MatMul or Gemm) of a layered step graph, as `int8_products` reads it."""
    name: str                # the weights' tensor, less "_quantized"
    node: object             # the MatMul or Gemm
    w_q: np.ndarray          # int8 [in, out]
    w_scale: np.ndarray      # per output channel
    in_scale: float          # the int8 input's calibrated scale and zero point
    in_zp: int
    in_name: str             # the input's scale tensor, for messages
    bias: np.ndarray | None  # a Gemm's bias (float [out], zeros where the exporter dropped it); None for a MatMul
    out_range: float | None  # the largest |output| of the QuantizeLinear that reads it; None without one

    def matmul(self, path, frac: int = Q):
        """Its MatMulQ, the output with `frac` fractional bits."""
        return _mm(self.w_q, self.w_scale, self.in_scale, self.in_zp, frac, self.name, path, self.in_name)


def int8_products(init: dict, nodes, path, attention: bool = False) -> list:
    """Every int8 product of the graph, in graph order (`Product`). ModelFileError (one line)
    for one whose input or weights are not dequantized int8 (a projection kept float); with
    `attention`, products of two activations (attention's, run integer by the step) are
    passed over rather than refused."""
    producer = {o: n for n in nodes for o in n.output}
    consumers = {}
    for n in nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    prods = []
    for n in nodes:
        if n.op_type not in ("MatMul", "Gemm"):
            continue
        a, w = producer.get(n.input[0]), producer.get(n.input[1])
        if attention and n.input[1] not in init and (w is None or w.op_type != "DequantizeLinear"
                                                     or w.input[0] not in init):
            continue
        if a is None or w is None or a.op_type != "DequantizeLinear" or w.op_type != "DequantizeLinear":
            what = (f"the projection {n.input[1]} is kept float" if attention or n.input[1] in init
                    else f"{n.output[0]} is not a product of int8 values")
            raise ModelFileError(f"'{path}': {what}; integer-only execution needs every projection int8: "
                                 "export it again with --int8 and no float parts")
        w_q, w_scale = _weights(path, init, w)
        bias = None
        if n.op_type == "Gemm":
            w_q = w_q.T
            bias = _bias(path, init, producer[n.input[2]]) if len(n.input) > 2 and n.input[2] else np.zeros(w_q.shape[1])
        in_scale, in_zp = _activation(path, init, producer, a)
        q = next((c for c in consumers.get(n.output[0], []) if c.op_type == "QuantizeLinear"), None)
        rng = None if q is None else _int8_range(float(np.asarray(init[q.input[1]]).reshape(-1)[0]),
                                                 int(np.asarray(init[q.input[2]]).reshape(-1)[0]))
        prods.append(Product(w.input[0].replace("_quantized", ""), n, w_q, w_scale, in_scale, in_zp, a.input[1],
                             bias, rng))
    return prods


def layernorm_of(gr, product: Product, what: str, path) -> tuple:
    """(LayerNormQ, its output tensor): the LayerNorm whose output `product` reads (weights found
    by the graph, not by name: the exporter shares equal constants between layers)."""
    n = gr.producer[gr.strip(product.node.input[0])]
    if n.op_type != "LayerNormalization":
        raise ModelFileError(f"'{path}': {product.name} does not read a LayerNormalization; export it again")
    eps = float((getattr(n, "attrs", None) or {}).get("epsilon", 1e-5))
    return LayerNormQ.make(gr.init[n.input[1]], gr.init[n.input[2]], eps, what, path), n.output[0]


def to_int8(frac: int, mq, what: str, path) -> tuple:
    """(m, s) taking values with `frac` fractional bits to the int8 input of product `mq`."""
    return _multiplier(1.0 / (2.0 ** frac * mq.in_scale), f"scale {mq.in_name} ({what})", path)


def u_limit(d_model: int) -> int:
    """The clamp of the residual stream (Q12): D x u_lim stays below 2^30 (LayerNorm's sums)."""
    return min(1 << 26, ((1 << 30) - 1) // d_model)


def layered_fields(meta, proto, init: dict, path, kind: str, enc, enc_bias: tuple, ln_f: LayerNormQ, head,
                   head_bias: tuple, **more) -> dict:
    """The fields of a LayeredIntModel that the SSM and the Transformer fill alike, from their
    embedding and head (MatMulQ) and final LayerNorm: kind, d_model, labels, the reading's
    format (`firmware_sim.intsim.reading_format`), the biases ((name, float values) each) in
    Q12, the head's input quantization, u's clamp and the metadata kept (`more` after it)."""
    D = enc.w.shape[1]
    reading = reading_format(meta, proto, init, enc, path)
    return {"kind": kind, "d_model": D, "labels": list(meta.labels), **reading, "enc": enc,
            "enc_b": _qfrac(path, *enc_bias, Q), "ln_f": ln_f, "head": head,
            "head_hq": to_int8(Q, head, "final LayerNorm out", path), "head_b": _qfrac(path, *head_bias, Q),
            "u_lim": u_limit(D), "meta": model_meta(meta, kind, **more)}


LAYOUT_ERRORS = (KeyError, IndexError, ValueError, TypeError, StopIteration, ArithmeticError)


def not_laid_out(path, kind: str, e: Exception) -> ModelFileError:
    """The one line for a graph of `kind` whose reading failed with `e` (one of LAYOUT_ERRORS)."""
    return ModelFileError(f"'{path}' is not laid out as edgeseq's int8 {kind} export writes it ({type(e).__name__}: "
                          f"{str(e)[:80]}); export it again with --int8")


def _gemm_bias(p: Product) -> np.ndarray:
    """A Gemm's bias; KeyError for a MatMul (the encoder and head are Gemms)."""
    if p.bias is None:
        raise KeyError(f"the bias of {p.name}")
    return p.bias


def _or_8(out_range) -> float:
    """A calibrated output range, 8.0 where the graph has none."""
    return 8.0 if out_range is None else out_range


def _sum_fits(mm) -> bool:
    """Whether a product's largest sum stays within int32 when requantization scales it up (shift < 16)."""
    acc = np.abs(mm.w.astype(np.int64)).sum(0) * 255 + np.abs(mm.wsum_zp)
    return bool(((acc << np.maximum(16 - mm.s, 0)) <= INT32_MAX).all())


def _shift_for(real_max: float, frac: int) -> int:
    """Right shift bringing values of |real| <= HEADROOM x real_max (with `frac` fractional
    bits) within int16."""
    top = HEADROOM * max(real_max, 1e-6) * 2.0 ** frac
    return int(min(max(0, np.ceil(np.log2(top / 32767.0))), 30))


def from_parts(meta, initializers: dict, nodes, path="<model>") -> SSMIntModel:
    """The integer model of a static int8 SSM step graph (`edgeseq export --int8`, fixed or
    selective decay), from its initializers (name -> numpy array) and nodes (op_type, input,
    output, attrs, in graph order). ModelFileError (one line) for a graph that is not laid out
    as edgeseq's int8 export writes it (a projection kept float included) or a constant the
    integer step cannot hold (`check_ssm_model`); DataError for a float or dynamic int8 file."""
    proto = checked_graph(meta, initializers, nodes, path)
    cfg = meta.config or {}
    selective = bool(cfg.get("selective", False))
    try:
        init = {k: np.asarray(v) for k, v in initializers.items()}
        mm = {p.name: p for p in int8_products(init, proto.graph.node, path)}
        gr = _Graph(init, proto.graph.node)

        def make(name, frac=Q):
            return mm[name].matmul(path, frac)

        def q_to_int8(frac, mq, what):
            return to_int8(frac, mq, what, path)

        if selective != ("ssm0_delta" in mm):
            raise ModelFileError(f"'{path}': edgeseq.config says selective {str(selective).lower()} but the graph "
                                 f"{'has no' if selective else 'has a'} step-size projection (ssm0_delta); export it "
                                 "again with --int8")
        enc, head = make("model.encoder.weight"), make("model.head.weight")
        D, F, C = enc.w.shape[1], enc.w.shape[0], head.w.shape[1]
        L = len(meta.state)
        N = int(meta.state[0].shape[1])
        if F != len(meta.features) or C != len(meta.labels) or head.w.shape[0] != D:
            raise ModelFileError(f"'{path}': the encoder ({F} -> {D}) and head ({head.w.shape[0]} -> {C}) do not fit "
                                 f"{len(meta.features)} features and {len(meta.labels)} labels; export it again")
        cells = []
        for i in range(L):
            r0 = mm[f"ssm{i}_readout"]
            qs = int(np.clip(np.floor(np.log2((1 << 30) / (16 * _int8_range(r0.in_scale, r0.in_zp)))), 8, 24))
            while qs > 8 and not _sum_fits(make(f"ssm{i}_x", qs)):     # fewer bits than the sum resolves buy nothing
                qs -= 1
            x, g, r, o = make(f"ssm{i}_x", qs), make(f"ssm{i}_gate"), make(f"ssm{i}_readout"), make(f"ssm{i}_out")
            if x.w.shape != (D, N) or g.w.shape != (D, D) or r.w.shape != (N, D) or o.w.shape != (D, D):
                raise ModelFileError(f"'{path}': layer {i}'s projections do not fit d_model {D}, d_state {N}; "
                                     "export it again with --int8")
            ln, ln_out = layernorm_of(gr, mm[f"ssm{i}_x"], f"layer {i}'s LayerNorm", path)
            skip = _qfrac(path, f"ssm{i}_skip", gr.const_of(ln_out, "Mul", D), Q)
            v_range = _int8_range(x.in_scale, x.in_zp)
            y_range = _or_8(mm[f"ssm{i}_readout"].out_range) + float(np.abs(skip).max()) / 4096 * v_range
            g_range = max(_or_8(mm[f"ssm{i}_gate"].out_range), 0.28)
            ky, kg = _shift_for(y_range, Q), _shift_for(g_range, Q)
            cell = {"ln": ln, "x": x, "g": g, "r": r, "o": o, "qs": qs, "skip": skip, "ky": ky, "kg": kg,
                    "bx": _qfrac(path, f"ssm{i}_x_bias", gr.bias_of(mm[f"ssm{i}_x"].node, N), qs),
                    "bg": _qfrac(path, f"ssm{i}_gate_bias", gr.bias_of(mm[f"ssm{i}_gate"].node, D), Q),
                    "bo": _qfrac(path, f"ssm{i}_out_bias", gr.bias_of(mm[f"ssm{i}_out"].node, D), Q),
                    "xq": q_to_int8(Q, x, "LayerNorm out"), "gq": q_to_int8(Q, g, "LayerNorm out"),
                    "sq": q_to_int8(qs, r, "state out"), "mq": q_to_int8(2 * Q - ky - kg, o, "gated output")}
            if selective:
                d = make(f"ssm{i}_delta")
                lam = gr.rate_of(mm[f"ssm{i}_delta"].node, N)
                ls = [_multiplier(float(v), f"ssm{i}_rate[{k}]", path) for k, v in enumerate(lam)]
                cell.update(d=d, bd=_qfrac(path, f"ssm{i}_delta_bias", gr.bias_of(mm[f"ssm{i}_delta"].node, N), Q),
                            dq=q_to_int8(Q, d, "LayerNorm out"), lam_m=np.array([a for a, _ in ls], np.int64),
                            lam_s=np.array([b for _, b in ls], np.int64))
            else:
                a = np.asarray(gr.const_of(meta.state[i].name, "Mul", N), np.float64).reshape(-1)
                if a.shape != (N,) or not (np.isfinite(a).all() and (a >= 0).all() and (a <= 1).all()):
                    raise _bad(path, f"ssm{i}_decay holds values outside [0, 1]")
                b = 1.0 - a
                k = np.where(b > 0, np.clip(np.floor(-np.log2(np.maximum(b, 1e-300))), 0, 31), 31).astype(np.int64)
                bm = np.minimum(np.round(b * 2.0 ** (15 + k)), ONE_Q15 - 1).astype(np.int64)
                cell.update(b_m=bm, b_k=k)
            cells.append(cell)
        ln_f = layernorm_of(gr, mm["model.head.weight"], "the final LayerNorm", path)[0]
        model = SSMIntModel(selective=selective, d_state=N, layers=L, cells=cells, **layered_fields(
            meta, proto, init, path, "ssm", enc, ("model.encoder.bias", _gemm_bias(mm["model.encoder.weight"])),
            ln_f, head, ("model.head.bias", _gemm_bias(mm["model.head.weight"])), selective=selective))
    except LAYOUT_ERRORS as e:
        raise not_laid_out(path, "ssm", e) from None
    check_ssm_model(model, path)
    return model


class _Graph:
    """The graph's producers and, for each tensor, the nodes that read it through Identity
    copies and QuantizeLinear -> DequantizeLinear pairs."""

    def __init__(self, init: dict, nodes):
        self.init = init
        self.producer = {o: n for n in nodes for o in n.output}
        self.readers = {}
        for n in nodes:
            if n.op_type in ("Identity", "QuantizeLinear", "DequantizeLinear"):
                continue
            for t in n.input:
                self.readers.setdefault(self.strip(t), []).append(n)

    def strip(self, t: str) -> str:
        return strip_copies(self.producer, self.init, t)

    def const_of(self, tensor: str, op: str, n: int) -> np.ndarray:
        """The constant [n] that an `op` node combines with `tensor`."""
        for node in self.readers.get(tensor, []):
            other = [t for t in node.input if t in self.init]
            if node.op_type == op and len(other) == 1 and np.asarray(self.init[other[0]]).size == n:
                return np.asarray(self.init[other[0]], np.float64).reshape(-1)
        raise KeyError(f"{op} of a constant with {tensor}")

    def bias_of(self, product, n: int) -> np.ndarray:
        """The constant added to a product's output, directly or after the residual Add."""
        t = product.output[0]
        for _ in range(3):
            adds = [a for a in self.readers.get(t, []) if a.op_type == "Add"]
            if not adds:
                break
            try:
                return self.const_of(t, "Add", n)
            except KeyError:
                t = adds[0].output[0]
        raise KeyError(f"the bias of {product.output[0]}")

    def rate_of(self, delta, n: int) -> np.ndarray:
        """λ of a selective layer: minus the constant that multiplies softplus(δ) (Where(δ > t,
        δ, Softplus(δ))) before its Exp."""
        t = delta.output[0]
        add = next(a for a in self.readers[t] if a.op_type == "Add")
        where = next(w for w in self.readers[add.output[0]] if w.op_type == "Where")
        lam = -self.const_of(where.output[0], "Mul", n)
        if not (np.isfinite(lam).all() and (lam > 0).all()):
            raise ValueError("a selective rate that is not a positive number")
        return lam


def check_ssm_model(m: SSMIntModel, path="<model>") -> None:
    """Every constant of the integer SSM step fits its C type and every int32 the step computes
    fits int32 whatever the readings (the clamps of u, x and the state bound the rest).
    ModelFileError (one line, naming the tensor and the value) otherwise."""
    check_reading(m, path)
    lim = m.u_lim

    def q8(what, bound, ms):
        _requant_fits(path, what, bound, ms)

    enc = _reach(path, m.enc, m.enc_b, "model.encoder.bias")
    del enc                                            # u is clamped to +-u_lim after it
    for i, c in enumerate(m.cells):
        v = c["ln"].check(path, f"layer {i}'s LayerNorm")
        for key in ("xq", "gq") + (("dq",) if m.selective else ()):
            q8(f"layer {i}'s LayerNorm out ({key})", v, c[key])
        _reach(path, c["x"], c["bx"], f"ssm{i}_x_bias")
        g = _reach(path, c["g"], c["bg"], f"ssm{i}_gate_bias")
        if m.selective:
            dl = _reach(path, c["d"], c["bd"], f"ssm{i}_delta_bias")
            sp = np.maximum(dl, SOFTPLUS_LINEAR)
            _requant_ok(path, f"ssm{i}_rate", c["lam_m"], c["lam_s"])
            _fits(path, f"ssm{i}_rate x softplus(delta) before requantization", sp << np.maximum(16 - c["lam_s"], 0))
            _fits(path, f"ssm{i}_rate x softplus(delta)", ((sp * c["lam_m"]) >> c["lam_s"]) + (8 << Q) + 1)
        q8(f"layer {i}'s state out", S_LIMIT, c["sq"])
        r = _reach(path, c["r"], None, "")
        _fits(path, f"ssm{i}_skip x LayerNorm out", v * np.abs(c["skip"]).max() + 2048)
        _fits(path, f"layer {i}'s y = C s + D v", r + ((v * np.abs(c["skip"])) >> 12) + 1, -(1 << 30), 1 << 30,
              "+-2^30")
        del g                                          # SiLU(g) = floor(g x sigmoid / 2^15) fits for any int32 g
        q8(f"layer {i}'s gated output", 1 << 30, c["mq"])
        o = _reach(path, c["o"], c["bo"], f"ssm{i}_out_bias")
        _fits(path, f"layer {i}'s residual sum", lim + o)
    q8("the head's input", m.ln_f.check(path, "the final LayerNorm"), m.head_hq)
    _reach(path, m.head, m.head_b, "model.head.bias")
