"""C99 for the integer-only windowed Transformer step (`firmware_sim.intxf`), with the RNNs' API shape.

`emit(model, out, prefix)` (called by `firmware_sim.cemit.emit` for a transformer) writes
`<prefix>_model.h` (sizes, the state type: ring position and the int16 KV ring of `window` rows
per layer, `<prefix>_reset`, `<prefix>_step`, `<prefix>_argmax`, `<prefix>_in_frac`),
`<prefix>_model.c` (weights once, `static const`, in es_k_matvec's blocks of four rows, and the
step), the shared kernels `es_kernels.h`, `es_ssm_int.h` (LayerNorm) and `es_xf_int.h`, the
shared tables `es_tables.c`, `es_ssm_tables.c` (1/sqrt for LayerNorm; with `-Wl,--gc-sections`
the SSM's other tables are dropped) and `es_xf_tables.c` (exp and Phi), and a host
`<prefix>_example.c`. As for every model `firmware_sim.cemit` emits: the caller passes
`<PREFIX>_SCRATCH_WORDS` int32 words of working memory; no float, no libm, no malloc, no 64-bit
arithmetic; bit-exact with the simulator.
"""

from __future__ import annotations

from pathlib import Path

from firmware_sim.cemit_common import (KERNELS, TABLES, _arr, _matrix, argmax_text, check_prefix, header_text,
                                       kernel_text, pad4, reading_flash, rq_mode, source_head, step_head, tables_text,
                                       write_model)
from firmware_sim.cemit_ssm import SSM_KERNELS, SSM_TABLES, _ln, embed_lines, head_lines
from firmware_sim.intssm import RSQRT
from firmware_sim.intxf import EXP, PHI, XFIntModel, check_xf_model

XF_KERNELS = kernel_text("es_xf_int.h")

XF_TABLES = tables_text(
    "/* edgeseq: the tables of the integer Transformer step: exp over [-16, 0] (softmax) and Phi, the\n"
    "   normal CDF, over [-8, 8] (GELU), 2049 Q15 knots each. Compile this file once per firmware. */\n",
    "es_xf_int.h", {"es_exp_q15": EXP, "es_phi_q15": PHI})


def pad2(n: int) -> int:
    return (n + 1) & ~1


def layout(m: XFIntModel) -> dict:
    """Bytes of the step's buffers: int32 u, v, y [D], qkv [3D], h [d_ff], scores [window]; the
    widened activations of the DSP product; int16 q [heads x even head_dim] and weights [even
    window]; int8 a. And the state (ring position and count, 8 B, plus the KV ring: `cache`)
    and io bytes."""
    D, F, W, H = m.d_model, m.n_features, m.window, m.heads
    n_a = max(pad4(F), pad4(D), pad4(m.d_ff))
    hs_p, w_p = pad2(m.head_dim), pad2(W)
    parts = {"u": 4 * D, "v": 4 * D, "qkv": 12 * D, "y": 4 * D, "h": 4 * m.d_ff, "scores": 4 * W,
             "widened": 2 * n_a, "q": 2 * H * hs_p, "weights": 2 * w_p, "a": n_a}
    cache = m.layers * 2 * (W * H * hs_p + D * w_p)
    return {**parts, "scratch": sum(parts.values()), "cache": cache, "state": 8 + cache,
            "io": 4 * F + 4 * len(m.labels)}


def header(m: XFIntModel, p: str) -> str:
    P = p.upper()
    title = (f"integer-only windowed Transformer step,\n   {m.layers} layer(s), d_model {m.d_model}, {m.heads} head(s), "
             f"d_ff {m.d_ff}, window {m.window}.")
    kshift = ", ".join(str(c["kk"]) for c in m.cells)
    vshift = ", ".join(str(c["kv"]) for c in m.cells)
    state = (f"  int32_t slot;   /* the ring row the next reading writes */\n"
             f"  int32_t n;      /* rows written since the reset, at most {P}_WINDOW */\n"
             f"  int16_t k[{P}_LAYERS][{P}_WINDOW][{P}_KEY_ROW];   /* keys, a row per reading, Q12 >> {kshift} */\n"
             f"  int16_t v[{P}_LAYERS][{P}_D_MODEL][{P}_WINDOW_PAD];   /* values, a column per reading, Q12 >> {vshift} */\n")
    defines = [("D_MODEL", m.d_model), ("HEADS", m.heads), ("D_FF", m.d_ff), ("WINDOW", m.window),
               ("KEY_ROW", m.heads * pad2(m.head_dim)), ("WINDOW_PAD", pad2(m.window))]
    return header_text(m, p, title, defines, state, layout(m)["scratch"])


def source(m: XFIntModel, p: str) -> str:
    P = p.upper()
    D, W, H, FF = m.d_model, m.window, m.heads, m.d_ff
    hs, hs_p, w_p = m.head_dim, pad2(m.head_dim), pad2(W)
    lay = layout(m)
    n_a = lay["a"]
    g = source_head(m, p, ['#include "es_xf_int.h"']) + [_matrix(p, "enc", m.enc, m.enc_b)]
    for i, c in enumerate(m.cells):
        g.append(_ln(p, f"lna{i}", c["ln1"]) + _matrix(p, f"qkv{i}", c["qkv"], c["bqkv"])
                 + _matrix(p, f"proj{i}", c["proj"], c["bproj"]) + _ln(p, f"lnb{i}", c["ln2"])
                 + _matrix(p, f"fca{i}", c["fc1"], c["bfc1"]) + _matrix(p, f"fcb{i}", c["fc2"], c["bfc2"]))
    for i, c in enumerate(m.cells):
        if c["alibi"] is not None:                 # ALiBi: each head's integer slope and the distance it caps at
            g.append(_arr("int32_t", f"{p}_alibi{i}_slope", c["alibi"][0]) + _arr("int32_t", f"{p}_alibi{i}_dcap", c["alibi"][1]))
    g.append(_ln(p, "lnf", m.ln_f) + _matrix(p, "head", m.head, m.head_b))
    g.append(f"""void {p}_reset({p}_state_t *st) {{
  int l, r, c;
  st->slot = 0;
  st->n = 0;
  for (l = 0; l < {P}_LAYERS; l++) {{
    for (r = 0; r < {P}_WINDOW; r++)
      for (c = 0; c < {P}_KEY_ROW; c++) st->k[l][r][c] = 0;
    for (r = 0; r < {P}_D_MODEL; r++)
      for (c = 0; c < {P}_WINDOW_PAD; c++) st->v[l][r][c] = 0;
  }}
}}

""" + argmax_text(p))
    L = step_head(m, p, [f"  int32_t *u = scratch, *v = u + {D}, *qkv = v + {D}, *y = qkv + {3 * D}, *h = y + {D}, "
                         f"*sc = h + {FF};",
                         f"  int32_t *xb = sc + {W};",
                         f"  int16_t *q16 = (int16_t *)(xb + {n_a // 2}), *pw = q16 + {H * hs_p};",
                         f"  int8_t *a = (int8_t *)(pw + {w_p});",
                         f"  int f, hh, slot = st->slot, n = st->n < {W} ? st->n + 1 : {W};"], n_a) + embed_lines(m, p)
    for i, c in enumerate(m.cells):
        qkv, proj, fc1, fc2 = c["qkv"], c["proj"], c["fc1"], c["fc2"]
        L += [f"  es_k_layernorm(u, {D}, {p}_lna{i}_c, {p}_lna{i}_g, {p}_lna{i}_b, v);",
              f"  es_k_quantize32(v, {D}, {pad4(D)}, {c['qkv_q'][0]}, {c['qkv_q'][1]}, {qkv.in_zp}, a);",
              f"  es_k_matvec(a, xb, {p}_qkv{i}_w, {p}_qkv{i}_q, {pad4(D)}, {3 * D}, {rq_mode(qkv.s)}, qkv);",
              f"  es_k_xf_write(qkv, {D}, {H}, {hs}, {hs_p}, {c['q_m']}, {c['q_s']}, {c['qlim']}, {c['kk']}, {c['kv']}, q16, "
              f"st->k[{i}][slot], &st->v[{i}][0][0], {w_p}, slot);",
              f"  for (hh = 0; hh < {H}; hh++)",
              f"    es_k_xf_head(q16 + hh * {hs_p}, &st->k[{i}][0][hh * {hs_p}], {H * hs_p}, &st->v[{i}][hh * {hs}][0], "
              f"{w_p}, n, {hs}, {hs_p}, {c['j']}, {_alibi_args(p, i, c, W)}, sc, pw, y + hh * {hs});",
              f"  es_k_quantize32(y, {D}, {pad4(D)}, {c['y_q'][0]}, {c['y_q'][1]}, {proj.in_zp}, a);",
              f"  es_k_matvec(a, xb, {p}_proj{i}_w, {p}_proj{i}_q, {pad4(D)}, {D}, {rq_mode(proj.s)}, v);",
              f"  es_k_residual(u, v, {D}, {m.u_lim});",
              f"  es_k_layernorm(u, {D}, {p}_lnb{i}_c, {p}_lnb{i}_g, {p}_lnb{i}_b, v);",
              f"  es_k_quantize32(v, {D}, {pad4(D)}, {c['fc1_q'][0]}, {c['fc1_q'][1]}, {fc1.in_zp}, a);",
              f"  es_k_matvec(a, xb, {p}_fca{i}_w, {p}_fca{i}_q, {pad4(D)}, {FF}, {rq_mode(fc1.s)}, h);",
              f"  es_k_xf_gelu(h, {FF}, {pad4(FF)}, {c['fc2_q'][0]}, {c['fc2_q'][1]}, {fc2.in_zp}, a);",
              f"  es_k_matvec(a, xb, {p}_fcb{i}_w, {p}_fcb{i}_q, {pad4(FF)}, {D}, {rq_mode(fc2.s)}, v);",
              f"  es_k_residual(u, v, {D}, {m.u_lim});"]
    L += [f"  st->slot = slot + 1 == {W} ? 0 : slot + 1;",
          "  st->n = n;"] + head_lines(m, p)
    g.append("\n".join(L) + "\n")
    return "\n".join(g)


def _alibi_args(p: str, i: int, c: dict, W: int) -> str:
    """es_k_xf_head's slope, dcap, slot and ring length for layer i (slope 0: no recency bias)."""
    if c["alibi"] is None:
        return f"0, 0, slot, {W}"
    return f"{p}_alibi{i}_slope[hh], {p}_alibi{i}_dcap[hh], slot, {W}"


def matrices(m: XFIntModel) -> list:
    """Every int8 product of the step, in order."""
    return [m.enc] + [c[k] for c in m.cells for k in ("qkv", "proj", "fc1", "fc2")] + [m.head]


def kernel_macs(m: XFIntModel) -> int:
    """Multiply-accumulates es_k_matvec executes per step (inputs and outputs padded to 4)."""
    return int(sum(pad4(x.w.shape[0]) * pad4(x.w.shape[1]) for x in matrices(m)))


def attention_macs(m: XFIntModel, rows: int | None = None) -> int:
    """Multiply-accumulates of attention per step over `rows` cached rows (default: a full
    window), as `Transformer.macs_per_reading` counts them: 2 x rows x d_model per layer."""
    return 2 * m.layers * (m.window if rows is None else rows) * m.d_model


def macs(m: XFIntModel) -> int:
    """int8 products (unpadded) plus attention at a full window: `macs_per_reading(window - 1)`."""
    return int(sum(x.w.size for x in matrices(m))) + attention_macs(m)


ALIBI_VALUES = 0.5   # ALiBi's bias of one softmax entry, in element-wise values: 18.5-19.4 cycles an entry measured
                    # on the emulated M4 at -O2 (windows 16, 50, 256; an element-wise value is fitted at 37 there)


def cost_features(m: XFIntModel) -> list:
    """What a step at a full window costs, for `firmware check`'s fitted cost: [MACs as
    es_k_matvec runs them, attention MACs as the head kernel runs them (padded head and window),
    softmax entries (layers x heads x window), element-wise values (LayerNorms, requantized
    values, GELU, residuals, and ALiBi's bias: ALIBI_VALUES per softmax entry), 1]."""
    D, L, W, H = m.d_model, m.layers, m.window, m.heads
    attn = L * (W * H * pad2(m.head_dim) + D * pad2(W))
    outputs = sum(x.w.shape[1] for x in matrices(m))
    elementwise = outputs + m.n_features + L * (8 * D + m.d_ff) + 2 * D
    elementwise += ALIBI_VALUES * sum(W * int((c["alibi"][0] > 0).sum()) for c in m.cells if c["alibi"] is not None)
    return [float(kernel_macs(m)), float(attn), float(L * H * W), float(elementwise), 1.0]


def flash_bytes(m: XFIntModel) -> dict:
    """Read-only bytes of the emitted model: weights (blocks of 4 rows), per-output constants
    (16 B), per-feature (13 B) and LayerNorm constants (8 B a channel, 12 B each), tables
    (1/sqrt, exp, Phi)."""
    D = m.d_model
    weights = sum(pad4(x.w.shape[0]) * pad4(x.w.shape[1]) for x in matrices(m))
    constants = sum(16 * x.w.shape[1] for x in matrices(m)) + 13 * m.n_features + (2 * m.layers + 1) * (8 * D + 12)
    tables = 2 * (RSQRT.size + EXP.size + PHI.size)
    return reading_flash(m, {"weights": int(weights), "constants": int(constants), "tables": int(tables)})


def emit(m: XFIntModel, out, prefix: str = "es", protect=(), force: bool = False) -> dict:
    """As `firmware_sim.cemit.emit`, for a transformer: writes `<prefix>_model.h`,
    `<prefix>_model.c`, `<prefix>_example.c`, `es_kernels.h`, `es_ssm_int.h`, `es_xf_int.h`,
    `es_tables.c`, `es_ssm_tables.c` and `es_xf_tables.c` into `out`, all or nothing. Returns
    sizes (source bytes, int8 weights, table bytes, scratch, state (with the KV ring: `cache`)
    and io bytes, window, fractional bits of the readings). UsageError for a bad prefix or a
    file that would land on `protect`; ModelFileError for a constant the step cannot hold."""
    p = check_prefix(prefix)
    check_xf_model(m, protect[0] if protect else "<model>")
    lay, fb = layout(m), flash_bytes(m)
    shared = {"es_kernels.h": KERNELS, "es_ssm_int.h": SSM_KERNELS, "es_xf_int.h": XF_KERNELS, "es_tables.c": TABLES,
              "es_ssm_tables.c": SSM_TABLES, "es_xf_tables.c": XF_TABLES}
    return write_model(m, Path(out), p, header(m, p), source(m, p), shared, protect, force,
                       {"int8_weights": fb["weights"], "tables_bytes": fb["tables"], "kind": m.kind,
                        "window": m.window, "scratch_bytes": lay["scratch"], "state_bytes": lay["state"],
                        "cache_bytes": lay["cache"], "io_bytes": lay["io"]})
