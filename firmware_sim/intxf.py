"""Integer-only execution of the int8 windowed causal Transformer step (`edgeseq.models.transformer`),
as a microcontroller runs it, operation for operation as the C that `firmware_sim.cemit_xf` writes
(kernels in `kernels/es_xf_int.h`), in 32-bit arithmetic only.

Taken from the static int8 ONNX model: the int8 weights of every projection (embedding, qkv,
proj, the two MLP layers, head; symmetric, per output channel), the calibrated scale and zero
point of each projection's input, the calibrated range of the qkv products (their
QuantizeLinear), and the float constants (LayerNorm weights, biases). Formats:

- the reading enters as for the RNNs (int32 fixed point, `in_frac` per channel) and becomes the
  embedding's int8 input; every product is int8 x int8 into int32, requantized by a 15-bit
  multiplier and shift (`intmath.requant`) to Q12; the residual stream u is int32 Q12 clamped
  to +-`u_lim`, the LayerNorms are the SSM's (`intssm.LayerNormQ`);
- the KV cache is a ring of `window` rows per layer, int16: k = k_q12 >> kk, v = v_q12 >> kv
  (saturating), the shifts chosen from the calibrated qkv range with 4x headroom; q is
  requantized so that q.k is the score (1/sqrt(head_dim) folded in) with 12 + j fractional
  bits, clamped to +-`qlim` so a head's dot product stays within +-2^30. A stream's `n` counts the
  rows written since its reset (at most `window`), `slot` is the row the next reading writes:
  the first readings after a reset attend only to the rows that exist;
- with positions "alibi", a head's score of the row d readings back loses ALiBi's recency
  bias slope_q x d (slope_q = round(slope x 2^(12 + j)); 2^30 where d > dcap = 2^30 // slope_q),
  the biased score clamped to -2^30: int32 throughout;
- softmax per head: scores q.k in int32, minus the row maximum, >> j to Q12, exp from a
  2049-knot Q15 table over [-16, 0] (`EXP`, interpolated; below -16 it is 0), summed in int32, the
  reciprocal R = floor(2^30 / sum) by integer division, weights p = (e R + 2^14) >> 15 (Q15,
  at most 32767); the output y = sum_t p_t v_t in int32, requantized to proj's int8 input;
- GELU(h) = h x Phi(h), Phi from a 2049-knot Q15 table over [-8, 8] (`PHI`), the product exact
  (`mul_q15`), requantized to the second MLP layer's int8 input;
- the head gives Q12 logits, as the RNNs' do.

An unbounded window (0) and sinusoidal positions are refused in one line: a static ring needs a
window, and the step holds no position signal (ALiBi needs none: only distances).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeseq.errors import DataError, ModelFileError
from firmware_sim.intcheck import _fits, _multiplier, _reach, _requant_fits, _requant_ok, check_reading
from firmware_sim.intmath import LUT_SHIFT, LUT_SIZE, ONE_Q15, Q, lut, requant
from firmware_sim.intgraph import checked_graph
from firmware_sim.intssm import (HEADROOM, LAYOUT_ERRORS, LayeredIntModel, _Graph, _lut_table, _qfrac, int8_products,
                                 layered_fields, layernorm_of, mul_q15, not_laid_out, quantize, to_int8)

WINDOW_MAX = 4096            # rows of the ring: beyond it the weights' sum could leave int32
EXP_SPAN = 16 << Q           # exp is read over [-16, 0] (Q12); below it a weight is 0
BIAS_CAP = 1 << 30           # ALiBi's integer bias at most, and a biased score at least its negative
NO_WINDOW = ("an unbounded cache (window 0) cannot be a static ring buffer; train with a window "
             "(`edgeseq train --arch transformer --set window=N`) and export that")


def _exp_table() -> np.ndarray:
    x = (np.arange(LUT_SIZE + 1) * (1 << LUT_SHIFT) - EXP_SPAN) / (1 << Q)             # knots -16 .. 0
    return np.clip(np.round(np.exp(x) * ONE_Q15), 0, ONE_Q15 - 1).astype(np.int16)


def _phi(x):
    from math import erf, sqrt
    return 0.5 * (1.0 + np.vectorize(erf)(np.asarray(x) / sqrt(2.0)))


EXP = _exp_table()
PHI = _lut_table(_phi, ONE_Q15)                           # Q15, 32767 at the top


def exp_q15(d12) -> np.ndarray:
    """d12 int <= 0 (Q12) -> exp(d) in Q15 from `EXP`, interpolated (d clamped to [-16, -1/4096])."""
    u = np.clip(np.asarray(d12, np.int64), -EXP_SPAN, -1) + EXP_SPAN                    # 0 .. 65535
    i, f = u >> LUT_SHIFT, u & ((1 << LUT_SHIFT) - 1)
    lo, hi = EXP[i].astype(np.int64), EXP[i + 1].astype(np.int64)
    return lo + (((hi - lo) * f) >> LUT_SHIFT)


def softmax_q15(scores, n, j: int) -> np.ndarray:
    """scores int [..., T] (int32, 12 + j fractional bits), n int [...] (rows valid from 0) ->
    weights int [..., T] Q15 (0 past n): the integer softmax the step runs."""
    sc = np.asarray(scores, np.int64)
    valid = np.arange(sc.shape[-1]) < np.asarray(n)[..., None]
    mx = np.where(valid, sc, -(1 << 62)).max(-1, keepdims=True)
    e = np.where(valid, exp_q15((sc - mx) >> j), 0)
    total = e.sum(-1, keepdims=True)
    r = (1 << 30) // np.maximum(total, 1)
    return np.minimum((e * r + (1 << 14)) >> 15, ONE_Q15 - 1)


@dataclass(kw_only=True)
class XFIntModel(LayeredIntModel):
    """kind "transformer"."""
    heads: int
    d_ff: int
    window: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    def init_state(self, B: int = 1) -> dict:
        """The state of B streams after a reset: slot, n int [B]; per layer k, v int [B, window, D]."""
        W, D = self.window, self.d_model
        return {"slot": np.zeros(B, np.int64), "n": np.zeros(B, np.int64),
                "k": [np.zeros((B, W, D), np.int64) for _ in range(self.layers)],
                "v": [np.zeros((B, W, D), np.int64) for _ in range(self.layers)]}

    def step(self, x_fx: np.ndarray, state: dict):
        """x_fx int [B, F] (readings in fixed point, `to_fixed`) -> (logits Q12 int [B, C], new
        state: slot, n int [B]; k, v per layer int [B, window, D], int16 values)."""
        lim, D, H, hs, W = self.u_lim, self.d_model, self.heads, self.head_dim, self.window
        B = x_fx.shape[0]
        rows = np.arange(B)
        slot = state["slot"]
        n = np.minimum(state["n"] + 1, W)
        u = np.clip(self.enc(self.quantize_reading(x_fx)) + self.enc_b, -lim, lim)
        ks, vs = [], []
        for c, kc, vc in zip(self.cells, state["k"], state["v"]):
            v = c["ln1"](u)
            mq = c["qkv"]
            qkv = mq(quantize(v, *c["qkv_q"], mq.in_zp)) + c["bqkv"]
            q16 = np.clip(requant(qkv[:, :D], c["q_m"], c["q_s"]), -c["qlim"], c["qlim"])
            kc, vc = kc.copy(), vc.copy()
            kc[rows, slot] = np.clip(qkv[:, D:2 * D] >> c["kk"], -32768, 32767)
            vc[rows, slot] = np.clip(qkv[:, 2 * D:] >> c["kv"], -32768, 32767)
            ks.append(kc)
            vs.append(vc)
            y = np.zeros((B, D), np.int64)
            for h in range(H):
                sl = slice(h * hs, (h + 1) * hs)
                sc = np.einsum("bc,btc->bt", q16[:, sl], kc[:, :, sl])
                if c["alibi"] is not None and c["alibi"][0][h] > 0:
                    sc = np.maximum(sc - alibi_bias(c["alibi"][0][h], c["alibi"][1][h], slot, W), -BIAS_CAP)
                p = softmax_q15(sc, n, c["j"])
                y[:, sl] = np.einsum("bt,btc->bc", p, vc[:, :, sl])
            mp = c["proj"]
            u = np.clip(u + mp(quantize(y, *c["y_q"], mp.in_zp)) + c["bproj"], -lim, lim)
            v = c["ln2"](u)
            m1, m2 = c["fc1"], c["fc2"]
            hdn = m1(quantize(v, *c["fc1_q"], m1.in_zp)) + c["bfc1"]
            g = mul_q15(hdn, lut(PHI, hdn))
            u = np.clip(u + m2(quantize(g, *c["fc2_q"], m2.in_zp)) + c["bfc2"], -lim, lim)
        vf = self.ln_f(u)
        logits = self.head(quantize(vf, *self.head_hq, self.head.in_zp)) + self.head_b
        new = {"slot": np.where(slot + 1 == W, 0, slot + 1), "n": n, "k": ks, "v": vs}
        return logits, new


def alibi_bias(slope_q: int, dcap: int, slot, W: int) -> np.ndarray:
    """int64 [B, W]: the integer recency bias of each ring row for streams at `slot` (int [B], the
    row this reading wrote): slope_q x d for the row d = slot - t (mod W) readings back, BIAS_CAP
    past d > dcap."""
    d = (np.asarray(slot, np.int64)[:, None] - np.arange(W)) % W
    return np.where(d > dcap, BIAS_CAP, int(slope_q) * d)


def alibi_ints(slopes: np.ndarray, j: int) -> tuple:
    """(slope_q int64 [H], dcap int64 [H]) of float slopes [H] for scores with 12 + j fractional
    bits: slope_q = round(slope x 2^(12 + j)), dcap = 2^30 // slope_q (2^30 for a slope of 0)."""
    sq = np.round(np.asarray(slopes, np.float64) * 2.0 ** (Q + j)).astype(np.int64)
    return sq, np.where(sq > 0, BIAS_CAP // np.maximum(sq, 1), BIAS_CAP)


def graph_slopes(initializers: dict, nodes, H: int, path, positions) -> np.ndarray | None:
    """ALiBi's slopes float [H] from the step graph, the constant of the Mul whose product the
    attention mask subtracts, where the metadata's `positions` is "alibi"; None where the graph
    has none and the metadata does not say alibi. ModelFileError (one line) when the graph and
    the metadata disagree or the graph has more than one set."""
    producer = {o: n for n in nodes for o in n.output}
    found = set()
    for n in nodes:
        if n.op_type != "Sub" or len(n.input) != 2 or n.input[1] not in producer:
            continue
        mul = producer[n.input[1]]
        if mul.op_type != "Mul":
            continue
        for i in mul.input:
            v = initializers.get(i)
            if v is not None and np.asarray(v).dtype.kind == "f" and np.asarray(v).size == H:
                found.add(tuple(np.asarray(v, np.float64).reshape(-1).tolist()))
    if positions != "alibi":
        if not found:
            return None
        says = f"says positions {positions!r}" if positions is not None else "names no positions"
        raise ModelFileError(f"'{path}' has a recency bias (ALiBi's slopes) in its attention mask but its metadata "
                             f"{says}; export it again with --int8")
    if len(found) != 1:
        raise ModelFileError(f"'{path}' says positions 'alibi' but has {len(found)} sets of {H} recency slopes "
                             "in its attention mask; export it again with --int8")
    slopes = np.array(found.pop())
    if not np.isfinite(slopes).all() or (slopes < 0).any():
        raise ModelFileError(f"'{path}' has recency slopes {slopes.tolist()}: finite, >= 0 expected; export it again")
    return slopes


def _qlim(hs: int) -> int:
    """The largest |q| (int16) such that a head's dot product with int16 keys stays within +-2^30."""
    return int(min(32767, (1 << 30) // (hs * 32768)))


def _shift_within(real_max: float, frac: int, top: int) -> int:
    """Right shift bringing |real| <= HEADROOM x real_max (with `frac` fractional bits) within +-top."""
    big = HEADROOM * max(real_max, 1e-6) * 2.0 ** frac
    return int(min(max(0, np.ceil(np.log2(big / top))), 30))


def check_window(cfg: dict, path) -> int:
    """The window of a transformer's config, or DataError (one line) for one a static ring cannot hold."""
    if cfg.get("positions", "none") not in ("none", "alibi"):
        raise DataError(f"'{path}' adds {cfg.get('positions')} positions; the integer step holds no position "
                        "signal: train it with positions 'alibi' or 'none'")
    W = int(cfg.get("window", 0) or 0)
    if W <= 0:
        raise DataError(f"'{path}' attends to an unbounded window: {NO_WINDOW}")
    if W > WINDOW_MAX:
        raise DataError(f"'{path}' attends to {W:,} readings; the integer step's ring holds at most {WINDOW_MAX:,}")
    return W


def from_parts(meta, initializers: dict, nodes, path="<model>") -> XFIntModel:
    """The integer model of a static int8 Transformer step graph (`edgeseq export --int8`), from
    its initializers (name -> numpy array) and nodes (op_type, input, output, attrs, in graph
    order). DataError (one line) for an unbounded window, positions, or a float or dynamic int8
    file; ModelFileError (one line) for a graph not laid out as edgeseq's int8 export writes it
    (a projection kept float included) or a constant the integer step cannot hold."""
    cfg = meta.config or {}
    proto = checked_graph(meta, initializers, nodes, path, then=lambda: check_window(cfg, path))
    W = check_window(cfg, path)                     # checked already (after int8, before the graph); its value
    try:
        init = {k: np.asarray(v) for k, v in initializers.items()}
        gr = _Graph(init, proto.graph.node)
        prods = int8_products(init, proto.graph.node, path, attention=True)

        def make(p, frac=Q):
            return p.matmul(path, frac)

        def layernorm(p, what):
            return layernorm_of(gr, p, what, path)[0]

        def q_to_int8(frac, mq, what):
            return to_int8(frac, mq, what, path)

        L = (len(prods) - 2) // 4
        if len(prods) != 4 * L + 2 or L < 1 or L != int(cfg.get("layers", L)):
            raise ModelFileError(f"'{path}': {len(prods)} int8 projections where a transformer of "
                                 f"{cfg.get('layers')} layer(s) has 4 per layer and 2 more; export it again with --int8")
        enc, head = make(prods[0]), make(prods[-1])
        D, F, C = enc.w.shape[1], enc.w.shape[0], head.w.shape[1]
        H = int(cfg.get("heads", 1))
        if F != len(meta.features) or C != len(meta.labels) or head.w.shape[0] != D or D % H:
            raise ModelFileError(f"'{path}': the embedding ({F} -> {D}), head ({head.w.shape[0]} -> {C}) and "
                                 f"{H} heads do not fit {len(meta.features)} features and {len(meta.labels)} labels; "
                                 "export it again")
        hs = D // H
        qlim = _qlim(hs)
        slopes = graph_slopes(init, proto.graph.node, H, path, cfg.get("positions"))
        cells = []
        for i in range(L):
            pq, pp, p1, p2 = prods[1 + 4 * i: 5 + 4 * i]
            qkv, proj, fc1, fc2 = make(pq), make(pp), make(p1), make(p2)
            FF = fc1.w.shape[1]
            if qkv.w.shape != (D, 3 * D) or proj.w.shape != (D, D) or fc1.w.shape[0] != D or fc2.w.shape != (FF, D):
                raise ModelFileError(f"'{path}': layer {i}'s projections do not fit d_model {D}; export it again "
                                     "with --int8")
            bqkv = gr.bias_of(pq.node, 3 * D)
            rng = pq.out_range if pq.out_range is not None else 8.0
            rq, rk, rv = (rng + float(np.abs(bqkv[j * D:(j + 1) * D]).max()) for j in range(3))
            kk, kv = _shift_within(rk, Q, 32767), _shift_within(rv, Q, 32767)
            # q x 2^(kk + j) / sqrt(hs): q.k is then the score with 12 + j fractional bits
            j = int(np.clip(np.floor(np.log2(qlim * np.sqrt(hs) / (HEADROOM * max(rq, 1e-6)))) - kk, 0,
                            max(0, 11 - kk)))                       # the factor below 1/2: no left shift
            q_m, q_s = _multiplier(2.0 ** (kk + j - Q) / np.sqrt(hs), f"layer {i}'s queries (1/sqrt(head_dim))", path)
            cells.append({
                "ln1": layernorm(pq, f"layer {i}'s first LayerNorm"), "ln2": layernorm(p1, f"layer {i}'s second LayerNorm"),
                "qkv": qkv, "proj": proj, "fc1": fc1, "fc2": fc2, "kk": kk, "kv": kv, "qlim": qlim, "j": j,
                "q_m": q_m, "q_s": q_s, "alibi": None if slopes is None else alibi_ints(slopes, j),
                "bqkv": _qfrac(path, f"layer {i}'s qkv bias", bqkv, Q),
                "bproj": _qfrac(path, f"layer {i}'s proj bias", gr.bias_of(pp.node, D), Q),
                "bfc1": _qfrac(path, f"layer {i}'s first MLP bias", gr.bias_of(p1.node, FF), Q),
                "bfc2": _qfrac(path, f"layer {i}'s second MLP bias", gr.bias_of(p2.node, D), Q),
                "qkv_q": q_to_int8(Q, qkv, "LayerNorm out"), "fc1_q": q_to_int8(Q, fc1, "LayerNorm out"),
                "y_q": _multiplier(2.0 ** (kv - Q - 15) / proj.in_scale, f"scale {proj.in_name} (attention out)", path),
                "fc2_q": q_to_int8(Q, fc2, "GELU out")})
        ln_f = layernorm(prods[-1], "the final LayerNorm")
        model = XFIntModel(heads=H, d_ff=cells[0]["fc1"].w.shape[1], window=W, layers=L, cells=cells, **layered_fields(
            meta, proto, init, path, "transformer", enc, ("model.embed.bias", prods[0].bias), ln_f, head,
            ("model.head.bias", prods[-1].bias), window=W))
    except LAYOUT_ERRORS as e:
        raise not_laid_out(path, "transformer", e) from None
    check_xf_model(model, path)
    return model


def check_xf_model(m: XFIntModel, path="<model>") -> None:
    """Every constant of the integer Transformer step fits its C type and every int32 the step
    computes fits int32 whatever the readings (the clamps of u, q and the cache bound the rest).
    ModelFileError (one line, naming the tensor and the value) otherwise."""
    check_reading(m, path)

    def q8(what, bound, ms):
        _requant_fits(path, what, bound, ms)

    def ln_ok(what, ln):
        return ln.check(path, what)

    _reach(path, m.enc, m.enc_b, "model.embed.bias")
    y_max = (ONE_Q15 + m.window) * 32768                   # sum_t p_t |v_t|, sum_t p_t <= 2^15 + window / 2
    for i, c in enumerate(m.cells):
        q8(f"layer {i}'s first LayerNorm out", ln_ok(f"layer {i}'s first LayerNorm", c["ln1"]), c["qkv_q"])
        q = _reach(path, c["qkv"], c["bqkv"], f"layer {i}'s qkv bias")
        _requant_ok(path, f"layer {i}'s queries", c["q_m"], c["q_s"])
        _fits(path, f"layer {i}'s queries before requantization", int(q.max()) << max(16 - c["q_s"], 0))
        q8(f"layer {i}'s attention out", y_max, c["y_q"])
        if c["alibi"] is not None:
            _fits(path, f"layer {i}'s recency slopes", c["alibi"][0], 0, BIAS_CAP, "0 .. 2^30")
        o = _reach(path, c["proj"], c["bproj"], f"layer {i}'s proj bias")
        _fits(path, f"layer {i}'s residual sum", m.u_lim + o)
        q8(f"layer {i}'s second LayerNorm out", ln_ok(f"layer {i}'s second LayerNorm", c["ln2"]), c["fc1_q"])
        h = _reach(path, c["fc1"], c["bfc1"], f"layer {i}'s first MLP bias")
        q8(f"layer {i}'s GELU out", h.max(), c["fc2_q"])                   # |GELU(h)| <= |h|
        o = _reach(path, c["fc2"], c["bfc2"], f"layer {i}'s second MLP bias")
        _fits(path, f"layer {i}'s residual sum", m.u_lim + o)
    q8("the head's input", ln_ok("the final LayerNorm", m.ln_f), m.head_hq)
    _reach(path, m.head, m.head_b, "model.head.bias")
