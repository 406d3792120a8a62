"""C99 for the integer-only state-space step (`firmware_sim.intssm`), with the RNNs' API shape.

`emit(model, out, prefix)` (called by `firmware_sim.cemit.emit` for an SSM) writes
`<prefix>_model.h` (sizes, the state type, `<prefix>_reset`, `<prefix>_step`,
`<prefix>_argmax`, `<prefix>_in_frac`), `<prefix>_model.c` (weights once, `static const`, in
es_k_matvec's blocks of four rows, and the step), the shared kernels `es_kernels.h` and
`es_ssm_int.h`, the shared tables `es_tables.c` (sigmoid, for SiLU) and `es_ssm_tables.c`
(1/sqrt for LayerNorm; softplus and 1 - exp(-z) for the selective decay: with
`-Wl,--gc-sections` a fixed-decay model links only the first), and a host
`<prefix>_example.c`. The caller passes `<PREFIX>_SCRATCH_WORDS` int32 words of working memory.
No float, no libm, no malloc, no 64-bit arithmetic; bit-exact with the simulator.
"""

from __future__ import annotations

from pathlib import Path

from firmware_sim.cemit_common import (KERNELS, TABLES, _arr, _matrix, argmax_text, check_prefix, header_text,
                                       kernel_text, pad4, reading_flash, rq_mode, source_head, step_head, tables_text,
                                       write_model)
from firmware_sim.intssm import DECAY_GAIN, RSQRT, SOFTPLUS, SSMIntModel, check_ssm_model

SSM_KERNELS = kernel_text("es_ssm_int.h")

SSM_TABLES = tables_text(
    "/* edgeseq: the tables of the integer state-space step: 1/sqrt over [1, 4] (193 Q15 knots, LayerNorm),\n"
    "   softplus over [-8, 8] (2049 Q12 knots) and 1 - exp(-z) over [0, 16] (2049 Q15 knots, the selective\n"
    "   decay). Compile this file once per firmware; --gc-sections drops the tables no model reads. */\n",
    "es_ssm_int.h", {"es_rsqrt_q15": RSQRT, "es_softplus_q12": SOFTPLUS, "es_decay_gain_q15": DECAY_GAIN})


def layout(m: SSMIntModel) -> dict:
    """Bytes of the step's buffers: int32 u, v, x, g, δ (selective), r [D or N]; int8 a; the
    widened activations of the DSP product. And the state and io bytes."""
    D, N, F = m.d_model, m.d_state, m.n_features
    n_a = max(pad4(F), pad4(D), pad4(N))
    parts = {"u": 4 * D, "v": 4 * D, "x": 4 * N, "g": 4 * D, "delta": 4 * N if m.selective else 0,
             "r": 4 * D, "a": n_a, "widened": 2 * n_a}
    return {**parts, "scratch": sum(parts.values()), "state": 4 * m.layers * N,
            "io": 4 * F + 4 * len(m.labels)}


def _ln(p: str, name: str, ln) -> str:
    c = [ln.r, ln.e_cap, ln.eps_cap]
    return (_arr("int32_t", f"{p}_{name}_c", c) + _arr("int32_t", f"{p}_{name}_g", ln.gamma)
            + _arr("int32_t", f"{p}_{name}_b", ln.beta))


def embed_lines(m, p: str) -> list:
    """The embedding of a layered step (SSM, Transformer), after `step_head`: the product into
    u, clamped to +-u_lim."""
    D = m.d_model
    return [f"  es_k_matvec(a, xb, {p}_enc_w, {p}_enc_q, {pad4(m.n_features)}, {D}, {rq_mode(m.enc.s)}, u);",
            f"  for (f = 0; f < {D}; f++) u[f] = es_k_clamp(u[f], {-m.u_lim}, {m.u_lim});"]


def head_lines(m, p: str) -> list:
    """The end of a layered step (SSM, Transformer): the final LayerNorm of u into v and the
    head's product into the logits."""
    D = m.d_model
    return [f"  es_k_layernorm(u, {D}, {p}_lnf_c, {p}_lnf_g, {p}_lnf_b, v);",
            f"  es_k_quantize32(v, {D}, {pad4(D)}, {m.head_hq[0]}, {m.head_hq[1]}, {m.head.in_zp}, a);",
            f"  es_k_matvec(a, xb, {p}_head_w, {p}_head_q, {pad4(D)}, {len(m.labels)}, {rq_mode(m.head.s)}, "
            "logits_q12);",
            "}"]


def header(m: SSMIntModel, p: str) -> str:
    P = p.upper()
    fracs = ", ".join(str(c["qs"]) for c in m.cells)
    title = (f"integer-only SSM step ({'selective' if m.selective else 'fixed'} decay),\n"
             f"   {m.layers} layer(s), d_model {m.d_model}, d_state {m.d_state}.")
    state = f"  int32_t s[{P}_LAYERS][{P}_D_STATE];   /* state, fixed point with {fracs} fractional bits per layer */\n"
    return header_text(m, p, title, [("D_MODEL", m.d_model), ("D_STATE", m.d_state)], state, layout(m)["scratch"])


def source(m: SSMIntModel, p: str) -> str:
    P = p.upper()
    D, N = m.d_model, m.d_state
    lay = layout(m)
    n_a = lay["a"]
    g = source_head(m, p, ['#include "es_ssm_int.h"']) + [_matrix(p, "enc", m.enc, m.enc_b)]
    for i, c in enumerate(m.cells):
        part = [_ln(p, f"ln{i}", c["ln"]), _matrix(p, f"x{i}", c["x"], c["bx"]), _matrix(p, f"g{i}", c["g"], c["bg"]),
                _matrix(p, f"r{i}", c["r"]), _matrix(p, f"o{i}", c["o"], c["bo"]), _arr("int32_t", f"{p}_skip{i}", c["skip"])]
        if m.selective:
            part += [_matrix(p, f"d{i}", c["d"], c["bd"]), _arr("int32_t", f"{p}_lm{i}", c["lam_m"]),
                     _arr("int32_t", f"{p}_ls{i}", c["lam_s"])]
        else:
            part += [_arr("int32_t", f"{p}_bm{i}", c["b_m"]), _arr("int32_t", f"{p}_bk{i}", c["b_k"])]
        g.append("".join(part))
    g.append(_ln(p, "lnf", m.ln_f) + _matrix(p, "head", m.head, m.head_b))
    g.append(f"""void {p}_reset({p}_state_t *st) {{
  int l, k;
  for (l = 0; l < {P}_LAYERS; l++)
    for (k = 0; k < {P}_D_STATE; k++) st->s[l][k] = 0;
}}

""" + argmax_text(p))
    L = step_head(m, p, [f"  int32_t *u = scratch, *v = u + {D}, *x = v + {D}, *g = x + {N}, *dl = g + {D}, "
                         f"*r = dl + {lay['delta'] // 4};",
                         f"  int8_t *a = (int8_t *)(r + {D});",
                         f"  int32_t *xb = r + {D + n_a // 4};",
                         "  int f;",
                         "  (void)dl;"], n_a) + embed_lines(m, p)
    for i, c in enumerate(m.cells):
        L.append(f"  es_k_layernorm(u, {D}, {p}_ln{i}_c, {p}_ln{i}_g, {p}_ln{i}_b, v);")
        last = None
        for key, qkey, out, n_out in (("x", "xq", "x", N), ("g", "gq", "g", D)) + ((("d", "dq", "dl", N),) if m.selective else ()):
            mq = c[key]
            params = (c[qkey][0], c[qkey][1], mq.in_zp)
            if params != last:
                L.append(f"  es_k_quantize32(v, {D}, {pad4(D)}, {params[0]}, {params[1]}, {params[2]}, a);")
                last = params
            L.append(f"  es_k_matvec(a, xb, {p}_{key}{i}_w, {p}_{key}{i}_q, {pad4(D)}, {n_out}, {rq_mode(mq.s)}, {out});")
        if m.selective:
            L.append(f"  es_k_ssm_selective(st->s[{i}], x, dl, {p}_lm{i}, {p}_ls{i}, {N});")
        else:
            L.append(f"  es_k_ssm_fixed(st->s[{i}], x, {p}_bm{i}, {p}_bk{i}, {N});")
        r, o = c["r"], c["o"]
        L += [f"  es_k_quantize32(st->s[{i}], {N}, {pad4(N)}, {c['sq'][0]}, {c['sq'][1]}, {r.in_zp}, a);",
              f"  es_k_matvec(a, xb, {p}_r{i}_w, {p}_r{i}_q, {pad4(N)}, {D}, {rq_mode(r.s)}, r);",
              f"  es_k_ssm_gate(r, v, {p}_skip{i}, g, {D}, {pad4(D)}, {c['ky']}, {c['kg']}, {c['mq'][0]}, {c['mq'][1]}, "
              f"{o.in_zp}, a);",
              f"  es_k_matvec(a, xb, {p}_o{i}_w, {p}_o{i}_q, {pad4(D)}, {D}, {rq_mode(o.s)}, r);",
              f"  es_k_residual(u, r, {D}, {m.u_lim});"]
    L += head_lines(m, p)
    g.append("\n".join(L) + "\n")
    return "\n".join(g)


def matrices(m: SSMIntModel) -> list:
    """Every int8 product of the step, in order."""
    mats = [m.enc]
    for c in m.cells:
        mats += [c["x"], c["g"]] + ([c["d"]] if m.selective else []) + [c["r"], c["o"]]
    return mats + [m.head]


def kernel_macs(m: SSMIntModel) -> int:
    """Multiply-accumulates es_k_matvec executes per step (inputs and outputs padded to 4)."""
    return int(sum(pad4(x.w.shape[0]) * pad4(x.w.shape[1]) for x in matrices(m)))


def macs(m: SSMIntModel) -> int:
    """int8 multiply-accumulates of one step (unpadded)."""
    return int(sum(x.w.size for x in matrices(m)))


def cost_features(m: SSMIntModel) -> list:
    """What a step's cycles scale with, for `firmware check`'s fitted cost: [MACs as es_k_matvec
    runs them, requantized values (every product output and every value quantized to int8),
    element-wise channels (LayerNorms, gates, states), 1]."""
    D, N, L = m.d_model, m.d_state, m.layers
    outputs = sum(x.w.shape[1] for x in matrices(m))
    quantized = m.n_features + L * (2 * D + N) + D
    for c in m.cells:                                  # v is quantized again where a product's input scale differs
        keys = ("xq", "gq") + (("dq",) if m.selective else ())
        quantized += D * (len({(*c[k], c[k[0]].in_zp) for k in keys}) - 1)
    elementwise = (L + 1) * D + L * (D + N)
    return [float(kernel_macs(m)), float(outputs + quantized), float(elementwise), 1.0]


def flash_bytes(m: SSMIntModel) -> dict:
    """Read-only bytes of the emitted model: weights (blocks of 4 rows), per-output constants
    (16 B), per-channel constants (LayerNorm 8 B, skip 4 B, per state 8 B), tables."""
    D, N = m.d_model, m.d_state
    weights = sum(pad4(x.w.shape[0]) * pad4(x.w.shape[1]) for x in matrices(m))
    constants = (sum(16 * x.w.shape[1] for x in matrices(m)) + 13 * m.n_features
                 + (m.layers + 1) * (8 * D + 12) + m.layers * (4 * D + 8 * N))
    tables = 2 * (RSQRT.size + 2049 + (2 * 2049 if m.selective else 0))            # sigmoid (SiLU), rsqrt, ...
    return reading_flash(m, {"weights": int(weights), "constants": int(constants), "tables": int(tables)})


def emit(m: SSMIntModel, out, prefix: str = "es", protect=(), force: bool = False) -> dict:
    """As `firmware_sim.cemit.emit`, for an SSM: writes `<prefix>_model.h`, `<prefix>_model.c`,
    `<prefix>_example.c`, `es_kernels.h`, `es_ssm_int.h`, `es_tables.c` and `es_ssm_tables.c` into
    `out`, all or nothing. Returns sizes (source bytes, int8 weights, table bytes, scratch,
    state and io bytes, fractional bits of the readings). UsageError for a bad prefix or a file
    that would land on `protect`; ModelFileError for a constant the step cannot hold."""
    p = check_prefix(prefix)
    check_ssm_model(m, protect[0] if protect else "<model>")
    lay, fb = layout(m), flash_bytes(m)
    shared = {"es_kernels.h": KERNELS, "es_ssm_int.h": SSM_KERNELS, "es_tables.c": TABLES, "es_ssm_tables.c": SSM_TABLES}
    return write_model(m, Path(out), p, header(m, p), source(m, p), shared, protect, force,
                       {"int8_weights": fb["weights"], "tables_bytes": fb["tables"], "kind": m.kind,
                        "selective": bool(m.selective), "scratch_bytes": lay["scratch"], "state_bytes": lay["state"],
                        "io_bytes": lay["io"]})
