"""C99 for the integer-only step (`firmware_sim.intsim`), as firmware ships it.

`emit(model, out, prefix="es")` writes four files:

- `<prefix>_model.h`: the API, and nothing else: sizes as macros, the state type, and

      void <prefix>_reset(<prefix>_state_t *st);
      void <prefix>_step(const int32_t reading[<PREFIX>_FEATURES], <prefix>_state_t *st,
                         int32_t logits_q12[<PREFIX>_CLASSES], void *scratch);
      int  <prefix>_argmax(const int32_t logits_q12[<PREFIX>_CLASSES]);
      extern const int8_t <prefix>_in_frac[<PREFIX>_FEATURES];   /* reading = value x 2^in_frac */

  `scratch` is the step's working memory, `<PREFIX>_SCRATCH_BYTES` bytes aligned to 4, owned
  by the caller (a static buffer, or one shared by tasks that never step at once): the step
  itself needs a few dozen bytes of stack.
- `<prefix>_model.c`: the weights (once, `static const`, int8 laid out [out][in] so the inner
  loop reads both operands contiguously, rows padded to a multiple of 4), scales and the step.
  Every symbol carries the prefix, so several models link into one firmware.
- `es_kernels.h`: the kernels as `static inline` functions (requantization, table lookup, Q15
  multiply, int8 matrix-vector product), shared by every model: portable C, and on cores with
  the DSP extension (`__ARM_FEATURE_DSP`: Cortex-M4, M7, M33) a dot product on SXTB16 + SMLAD,
  two multiply-accumulates per instruction. Define `ES_PORTABLE` to force the portable path.
  Both paths give the same integers.
- `example_main.c`: a host program streaming readings from stdin (for tests and trials).

No float, no libm, no malloc, no 64-bit arithmetic; all of it builds with
`-std=c99 -Wall -Wextra -Werror -pedantic`. The arithmetic is the simulator's, operation for
operation, so the two agree bit for bit (tests run it on the host and on emulated Cortex-M0+
and M4 cores). Arithmetic right shifts of negative values are assumed to be arithmetic, as
gcc, clang and armcc do.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from edgeseq.errors import UsageError
from firmware_sim.intsim import IN_LIMIT, LUT_SHIFT, SIGMOID, TANH, IntModel

assert LUT_SHIFT == 5, "es_kernels.h holds ES_LUT_SHIFT 5"

GATES = {"rnn": 1, "gru": 3, "lstm": 4}

KERNELS = r"""/* edgeseq kernels: the integer-only building blocks of an int8 recurrent step. C99, 32-bit
   arithmetic only, no float, no libm, no malloc. Portable C everywhere; with the DSP extension
   (__ARM_FEATURE_DSP: Cortex-M4, M7, M33) the dot product runs on SXTB16 + SMLAD, two
   multiply-accumulates per instruction. Define ES_PORTABLE to force the portable path; both
   give the same integers. */
#ifndef ES_KERNELS_H
#define ES_KERNELS_H
#include <stdint.h>

#define ES_LUT_SHIFT 5              /* Q12 -> table index: (x + 8 x 4096) >> 5 */

#if defined(__ARM_FEATURE_DSP) && !defined(ES_PORTABLE)
#include <arm_acle.h>
#define ES_DSP 1
/* bytes 1 and 3 of v, sign-extended to two int16 (one instruction: SXTB16 with ROR #8) */
static inline int32_t es_k_sxtb16_ror8(uint32_t v) {
#if defined(__GNUC__)
  int32_t r;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(v));
  return r;
#else
  return __sxtb16((v >> 8) | (v << 24));
#endif
}
#else
#define ES_DSP 0
#endif

/* the product kernel is inlined at each call, so its sizes are constants there */
#if defined(__GNUC__)
#define ES_INLINE static inline __attribute__((always_inline))
#else
#define ES_INLINE static inline
#endif

static inline int32_t es_k_clamp(int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* clamp to int16 / int8: one SSAT instruction where the core has it (Armv7-M and later) */
#if defined(__ARM_FEATURE_SAT) && !defined(ES_PORTABLE)
#include <arm_acle.h>
#define ES_SAT16(v) __ssat((v), 16)
#define ES_SAT8(v) __ssat((v), 8)
#else
#define ES_SAT16(v) es_k_clamp((v), -32768, 32767)
#define ES_SAT8(v) es_k_clamp((v), -128, 127)
#endif

/* round(acc x m / 2^s), half up, for m in [2^14, 2^15): exact, from the 16-bit halves of acc.
   s < 16: acc is first scaled by 2^(16-s) (the model guarantees it fits); s > 31: shifted
   right by s-31. */
static inline int32_t es_k_requant(int32_t acc, int32_t m, int32_t s) {
  int32_t ah;
  uint32_t b;
  if (s < 16) {
    acc *= (int32_t)1 << (16 - s);
    s = 16;
  } else if (s > 31) {
    acc >>= s - 31;
    s = 31;
  }
  ah = acc >> 16;
  b = ((uint32_t)acc & 0xFFFFu) * (uint32_t)m + ((uint32_t)1 << (s - 1));
  return (ah * m + (int32_t)(b >> 16)) >> (s - 16);
}

/* The same value without the branches, when every shift of a product lies on one side of 16:
   s <= 16: (acc >> s) x m + ((acc mod 2^s) x m + 2^(s-1)) >> s;  16 <= s <= 31: as above. */
static inline int32_t es_k_requant_lo(int32_t acc, int32_t m, int32_t s) {
  uint32_t low = ((uint32_t)acc & (((uint32_t)1 << s) - 1u)) * (uint32_t)m + ((uint32_t)1 << (s - 1));
  return (acc >> s) * m + (int32_t)(low >> s);
}
static inline int32_t es_k_requant_hi(int32_t acc, int32_t m, int32_t s) {
  uint32_t b = ((uint32_t)acc & 0xFFFFu) * (uint32_t)m + ((uint32_t)1 << (s - 1));
  return ((acc >> 16) * m + (int32_t)(b >> 16)) >> (s - 16);
}
#define ES_RQ_ANY 0              /* shifts on both sides of 16 (or beyond 31): es_k_requant */
#define ES_RQ_LO 1               /* every shift in 1..16 */
#define ES_RQ_HI 2               /* every shift in 16..31 */
#define ES_RQ(mode, acc, m, s) ((mode) == ES_RQ_LO ? es_k_requant_lo(acc, m, s) : \
                                (mode) == ES_RQ_HI ? es_k_requant_hi(acc, m, s) : es_k_requant(acc, m, s))

/* floor(a x q / 2^15) for 0 <= q < 2^15, exact for any int32 a */
static inline int32_t es_k_mulq15(int32_t a, int32_t q) {
  return (a >> 16) * q * 2 + (int32_t)((((uint32_t)a & 0xFFFFu) * (uint32_t)q) >> 15);
}

/* sigmoid/tanh table (2049 Q15 knots over [-8, 8]) at a Q12 input, linearly interpolated */
static inline int32_t es_k_lut(const int16_t *t, int32_t x) {
  int32_t u = ES_SAT16(x) + 32768;
  int32_t i = u >> ES_LUT_SHIFT, f = u & ((1 << ES_LUT_SHIFT) - 1);
  return (int32_t)t[i] + ((((int32_t)t[i + 1] - (int32_t)t[i]) * f) >> ES_LUT_SHIFT);
}

/* Q15 values -> int8 input of a product: clamp(round(h x m / 2^s) + zp) */
ES_INLINE void es_k_quantize(const int16_t *h, int n, int n_pad, int32_t m, int32_t s, int32_t zp, int8_t *a) {
  int k;
  for (k = 0; k < n; k++) a[k] = (int8_t)ES_SAT8(es_k_requant(h[k], m, s) + zp);
  for (; k < n_pad; k++) a[k] = 0;
}

/* y[o] = round((sum_k a[k] w[o][k] - zp[o]) x m[o] / 2^s[o]) + b[o], o < out, where
   q[4o .. 4o+3] = {zp[o], m[o], s[o], b[o]} (one load of four words per output).
   w is interleaved in blocks of 4 rows: for rows 4j..4j+3 and inputs 4g..4g+3, the 16 bytes
   w[4j][4g..4g+3], w[4j+1][4g..4g+3], w[4j+2][...], w[4j+3][...] lie together (the last block
   padded with zero rows), so one pointer walks four rows at once. n (the input length) is a
   multiple of 4; xbuf: 2n bytes of scratch (4-byte aligned) for the DSP path, which widens a
   once into SMLAD operand order. mode: ES_RQ_LO, ES_RQ_HI or ES_RQ_ANY (see ES_RQ). */
ES_INLINE void es_k_matvec(const int8_t *a, int32_t *xbuf, const int8_t *w, const int32_t *q, int n, int out, int mode,
                           int32_t *y) {
  int o, i;
#if ES_DSP
  const int8_t *wp = w;
  for (i = 0; i < n; i += 4) {                 /* (a0, a2) and (a1, a3) as int16 pairs */
    uint32_t v;
    __builtin_memcpy(&v, a + i, 4);
    xbuf[i / 2] = __sxtb16(v);
    xbuf[i / 2 + 1] = es_k_sxtb16_ror8(v);
  }
  for (o = 0; o < out; o += 4) {               /* four outputs share each widened activation */
    const int32_t *xp = xbuf, *xend = xbuf + n / 2;
    int32_t acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;
    while (xp < xend) {
      uint32_t v0, v1, v2, v3;
      int32_t even = xp[0], odd = xp[1];
      __builtin_memcpy(&v0, wp, 4);
      __builtin_memcpy(&v1, wp + 4, 4);
      __builtin_memcpy(&v2, wp + 8, 4);
      __builtin_memcpy(&v3, wp + 12, 4);
      wp += 16;
      xp += 2;
      acc0 = __smlad(__sxtb16(v0), even, acc0);
      acc0 = __smlad(es_k_sxtb16_ror8(v0), odd, acc0);
      acc1 = __smlad(__sxtb16(v1), even, acc1);
      acc1 = __smlad(es_k_sxtb16_ror8(v1), odd, acc1);
      acc2 = __smlad(__sxtb16(v2), even, acc2);
      acc2 = __smlad(es_k_sxtb16_ror8(v2), odd, acc2);
      acc3 = __smlad(__sxtb16(v3), even, acc3);
      acc3 = __smlad(es_k_sxtb16_ror8(v3), odd, acc3);
    }
    y[o] = ES_RQ(mode, acc0 - q[0], q[1], q[2]) + q[3];
    if (o + 1 < out) y[o + 1] = ES_RQ(mode, acc1 - q[4], q[5], q[6]) + q[7];
    if (o + 2 < out) y[o + 2] = ES_RQ(mode, acc2 - q[8], q[9], q[10]) + q[11];
    if (o + 3 < out) y[o + 3] = ES_RQ(mode, acc3 - q[12], q[13], q[14]) + q[15];
    q += 16;
  }
#else
  const int8_t *block = w;
  (void)xbuf;
  for (o = 0; o < out; o++) {
    const int8_t *wo = block + 4 * (o & 3);
    int32_t acc = 0;
    for (i = 0; i < n; i += 4, wo += 16)
      acc += a[i] * wo[0] + a[i + 1] * wo[1] + a[i + 2] * wo[2] + a[i + 3] * wo[3];
    y[o] = ES_RQ(mode, acc - q[0], q[1], q[2]) + q[3];
    q += 4;
    if ((o & 3) == 3) block += 4 * n;
  }
#endif
}

#endif /* ES_KERNELS_H */
"""

EXAMPLE = r"""/* Streams readings through the emitted step: one reading per line on stdin, {P}_FEATURES
   integers in the step's fixed point (value x 2^{p}_in_frac[f]), separated by spaces. Prints the
   Q12 logits and the predicted class index per reading.
   gcc -std=c99 -O2 -o stream example_main.c {p}_model.c */
#include <stdio.h>
#include "{p}_model.h"

int main(void) {{
  static {p}_state_t st;
  static int32_t scratch[({P}_SCRATCH_BYTES + 3) / 4];
  int32_t x[{P}_FEATURES], logits[{P}_CLASSES];
  int f, c;
  {p}_reset(&st);
  for (;;) {{
    for (f = 0; f < {P}_FEATURES; f++) {{
      long v;
      if (scanf("%ld", &v) != 1) return 0;
      x[f] = (int32_t)v;
    }}
    {p}_step(x, &st, logits, scratch);
    for (c = 0; c < {P}_CLASSES; c++) printf("%ld ", (long)logits[c]);
    printf("%d\n", {p}_argmax(logits));
  }}
}}
"""


def pad4(n: int) -> int:
    return (n + 3) & ~3


def check_prefix(prefix: str) -> str:
    """A C identifier prefix: lower-case letters, digits and '_', starting with a letter, at most 24."""
    if not isinstance(prefix, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,23}", prefix):
        raise UsageError(f"prefix '{prefix}' must be a C name: a lower-case letter, then letters, digits or '_' "
                         "(at most 24), e.g. --prefix gesture")
    return prefix


def _arr(ctype: str, name: str, values, static: bool = True) -> str:
    flat = [int(v) for v in np.asarray(values).ravel()]
    rows = [", ".join(str(v) for v in flat[i:i + 24]) for i in range(0, len(flat), 24)]
    return (f"{'static ' if static else ''}const {ctype} {name}[{len(flat)}] = {{\n  "
            + ",\n  ".join(rows) + "\n};\n")


def layout(m: IntModel) -> dict:
    """Sizes of the step's buffers in bytes: the scratch and where each part lies in it."""
    H, G, F = m.hidden, GATES[m.kind], m.n_features
    n_a = max(pad4(F), pad4(H))
    parts = {"gx": 4 * G * H, "gh": 4 * G * H, "a": n_a, "ah": pad4(H), "widened": 2 * n_a}
    return {**parts, "scratch": sum(parts.values()),
            "state": m.layers * H * (2 + (4 if m.kind == "lstm" else 0)),
            "io": 4 * F + 4 * len(m.labels)}


def rq_mode(shifts) -> str:
    """The requantization variant every shift of a product allows (see es_kernels.h)."""
    s = np.asarray(shifts)
    if s.min() >= 1 and s.max() <= 16:
        return "ES_RQ_LO"
    if s.min() >= 16 and s.max() <= 31:
        return "ES_RQ_HI"
    return "ES_RQ_ANY"


def _matrix(p: str, name: str, mm, bias=None) -> str:
    """One product's constants: weights in blocks of 4 rows (see es_k_matvec), and per output
    {folded zero point, multiplier, shift, Q12 bias}."""
    w = mm.w.astype(np.int64).T                                   # (out, in)
    n, rows = pad4(w.shape[1]), pad4(w.shape[0])
    wp = np.zeros((rows, n), np.int64)
    wp[:w.shape[0], :w.shape[1]] = w
    wp = wp.reshape(rows // 4, 4, n // 4, 4).transpose(0, 2, 1, 3)   # (block, group, row, k): 4 rows walk together
    b = np.zeros(w.shape[0], np.int64) if bias is None else np.asarray(bias, np.int64)
    q = np.stack([mm.wsum_zp, mm.m, mm.s, b], 1)
    return _arr("int8_t", f"{p}_{name}_w", wp) + _arr("int32_t", f"{p}_{name}_q", q)


def header(m: IntModel, p: str) -> str:
    P = p.upper()
    lay = layout(m)
    c = f"  int32_t c[{P}_LAYERS][{P}_HIDDEN];   /* cell, Q15 */\n" if m.kind == "lstm" else ""
    channels = ", ".join(f"{f} {int(k)}" for f, k in zip(m.meta.get("features", []), m.in_frac))
    return f"""/* Generated by edgeseq firmware emit: integer-only {m.kind.upper()} step, {m.layers} layer(s), hidden {m.hidden}.
   reading[f] = round(value_f x 2^{p}_in_frac[f]) as int32 (fractional bits per channel: {channels});
   values beyond +-(2^30 - 1) are clamped. logits are Q12 (value x 4096).
   labels: {", ".join(m.labels)} */
#ifndef {P}_MODEL_H
#define {P}_MODEL_H
#include <stdint.h>

#define {P}_FEATURES {m.n_features}
#define {P}_CLASSES {len(m.labels)}
#define {P}_HIDDEN {m.hidden}
#define {P}_LAYERS {m.layers}
#define {P}_SCRATCH_BYTES {lay['scratch']}   /* the step's working memory: 4-byte aligned, from the caller */

typedef struct {{
  int16_t h[{P}_LAYERS][{P}_HIDDEN];   /* hidden state, Q15 */
{c}}} {p}_state_t;

void {p}_reset({p}_state_t *st);
void {p}_step(const int32_t reading[{P}_FEATURES], {p}_state_t *st, int32_t logits_q12[{P}_CLASSES], void *scratch);
int {p}_argmax(const int32_t logits_q12[{P}_CLASSES]);
extern const int8_t {p}_in_frac[{P}_FEATURES];

#endif /* {P}_MODEL_H */
"""


def source(m: IntModel, p: str) -> str:
    P = p.upper()
    H, G, F, C = m.hidden, GATES[m.kind], m.n_features, len(m.labels)
    lay = layout(m)
    n_a, h_pad = lay["a"], lay["ah"]
    x0 = m.cells[0]["x"]
    g = [f"/* Generated by edgeseq firmware emit: weights and step of {p}_model.h. */",
         f'#include "{p}_model.h"', "#include <stddef.h>", '#include "es_kernels.h"', "",
         _arr("int8_t", f"{p}_in_frac", m.in_frac, static=False),
         _arr("int32_t", f"{p}_mean", m.mean_fx) + _arr("int32_t", f"{p}_feat_m", m.feat_m)
         + _arr("int32_t", f"{p}_feat_s", m.feat_s)]
    for layer, cell in enumerate(m.cells):
        g.append(_matrix(p, f"x{layer}", cell["x"], cell["b"]) + _matrix(p, f"h{layer}", cell["h"], cell["bh"]))
    g.append(_matrix(p, "o", m.head, m.head_b))
    if m.kind != "rnn":                                           # the RNN uses tanh only
        g.append(_arr("int16_t", f"{p}_sigmoid", SIGMOID))
    g.append(_arr("int16_t", f"{p}_tanh", TANH))
    zero_c = f"\n      st->c[l][k] = 0;" if m.kind == "lstm" else ""
    g.append(f"""void {p}_reset({p}_state_t *st) {{
  int l, k;
  for (l = 0; l < {P}_LAYERS; l++)
    for (k = 0; k < {P}_HIDDEN; k++) {{
      st->h[l][k] = 0;{zero_c}
    }}
}}

int {p}_argmax(const int32_t logits_q12[{P}_CLASSES]) {{
  int best = 0, c;
  for (c = 1; c < {P}_CLASSES; c++)
    if (logits_q12[c] > logits_q12[best]) best = c;
  return best;
}}
""")
    L = [f"void {p}_step(const int32_t reading[{P}_FEATURES], {p}_state_t *st, int32_t logits_q12[{P}_CLASSES], "
         "void *scratch) {",
         f"  int32_t *gx = (int32_t *)scratch, *gh = gx + {G * H};",
         f"  int8_t *a = (int8_t *)(gh + {G * H}), *ah = a + {n_a};",
         f"  int32_t *xb = (int32_t *)(ah + {h_pad});",
         "  int f, k;",
         f"  for (f = 0; f < {F}; f++) {{",
         f"    int32_t d = es_k_clamp(reading[f], {-IN_LIMIT}, {IN_LIMIT}) - {p}_mean[f];",
         f"    a[f] = (int8_t)ES_SAT8(es_k_requant(d, {p}_feat_m[f], {p}_feat_s[f]) + ({x0.in_zp}));",
         "  }",
         f"  for (; f < {n_a}; f++) a[f] = 0;"]
    for layer, cell in enumerate(m.cells):
        x, h = cell["x"], cell["h"]
        n_in = pad4(x.w.shape[0])
        if layer > 0:
            L.append(f"  es_k_quantize(st->h[{layer - 1}], {H}, {n_in}, {cell['aq'][0]}, {cell['aq'][1]}, {x.in_zp}, a);")
        L += [f"  es_k_matvec(a, xb, {p}_x{layer}_w, {p}_x{layer}_q, {n_in}, {G * H}, {rq_mode(x.s)}, gx);",
              f"  es_k_quantize(st->h[{layer}], {H}, {h_pad}, {cell['hq'][0]}, {cell['hq'][1]}, {h.in_zp}, ah);",
              f"  es_k_matvec(ah, xb, {p}_h{layer}_w, {p}_h{layer}_q, {h_pad}, {G * H}, {rq_mode(h.s)}, gh);",
              f"  for (k = 0; k < {H}; k++) {{"]
        if m.kind == "rnn":
            L.append(f"    st->h[{layer}][k] = (int16_t)es_k_lut({p}_tanh, gx[k] + gh[k]);")
        elif m.kind == "gru":
            L += [f"    int32_t h = st->h[{layer}][k];",
                  f"    int32_t r = es_k_lut({p}_sigmoid, gx[k] + gh[k]);",
                  f"    int32_t z = es_k_lut({p}_sigmoid, gx[{H} + k] + gh[{H} + k]);",
                  f"    int32_t n = es_k_lut({p}_tanh, gx[{2 * H} + k] + es_k_mulq15(gh[{2 * H} + k], r));",
                  f"    st->h[{layer}][k] = (int16_t)(n + ((z * (h - n)) >> 15));"]
        else:
            L += [f"    int32_t i = es_k_lut({p}_sigmoid, gx[k] + gh[k]);",
                  f"    int32_t fg = es_k_lut({p}_sigmoid, gx[{H} + k] + gh[{H} + k]);",
                  f"    int32_t g = es_k_lut({p}_tanh, gx[{2 * H} + k] + gh[{2 * H} + k]);",
                  f"    int32_t o = es_k_lut({p}_sigmoid, gx[{3 * H} + k] + gh[{3 * H} + k]);",
                  f"    int32_t c = es_k_mulq15(st->c[{layer}][k], fg) + ((i * g) >> 15);",
                  f"    st->c[{layer}][k] = c;",
                  f"    st->h[{layer}][k] = (int16_t)((o * es_k_lut({p}_tanh, c >> 3)) >> 15);"]
        L.append("  }")
    last = len(m.cells) - 1
    L += [f"  es_k_quantize(st->h[{last}], {H}, {h_pad}, {m.head_hq[0]}, {m.head_hq[1]}, {m.head.in_zp}, ah);",
          f"  es_k_matvec(ah, xb, {p}_o_w, {p}_o_q, {h_pad}, {C}, {rq_mode(m.head.s)}, logits_q12);",
          "}"]
    g.append("\n".join(L) + "\n")
    return "\n".join(g)


def flash_bytes(m: IntModel) -> dict:
    """Read-only bytes the emitted model holds (its .rodata, before alignment): int8 weights in
    blocks of 4 rows, per-output constants (zero point, multiplier, shift, bias: 16 B),
    per-feature constants (mean, multiplier, shift: 12 B, and fractional bits: 1 B), tables."""
    mats = [x for cell in m.cells for x in (cell["x"], cell["h"])] + [m.head]
    weights = sum(pad4(x.w.shape[0]) * pad4(x.w.shape[1]) for x in mats)
    constants = sum(16 * x.w.shape[1] for x in mats) + 13 * m.n_features
    tables = (1 if m.kind == "rnn" else 2) * SIGMOID.size * 2
    return {"weights": int(weights), "constants": int(constants), "tables": int(tables)}


def emit(m: IntModel, out, prefix: str = "es") -> dict:
    """Write `<prefix>_model.h`, `<prefix>_model.c`, `es_kernels.h` and `example_main.c` into the
    directory `out` (created). Returns sizes: source bytes, int8 weights (padded), table bytes,
    scratch, state and io bytes. UsageError for a prefix that is not a C name."""
    p = check_prefix(prefix)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    h, c = header(m, p), source(m, p)
    files = {f"{p}_model.h": h, f"{p}_model.c": c, "es_kernels.h": KERNELS,
             "example_main.c": EXAMPLE.format(p=p, P=p.upper())}
    for name, text in files.items():
        (out / name).write_text(text)
    weights = sum(pad4(x.w.shape[1]) * pad4(x.w.shape[0]) for cell in m.cells for x in (cell["x"], cell["h"]))
    weights += pad4(m.head.w.shape[1]) * pad4(m.head.w.shape[0])
    lay = layout(m)
    return {"path": str(out), "prefix": p, "files": list(files), "source_bytes": len(c.encode()) + len(h.encode()),
            "int8_weights": int(weights), "tables_bytes": int((1 if m.kind == "rnn" else 2) * SIGMOID.size * 2), "kind": m.kind,
            "scratch_bytes": lay["scratch"], "state_bytes": lay["state"], "io_bytes": lay["io"],
            "in_frac": [int(k) for k in m.in_frac]}
