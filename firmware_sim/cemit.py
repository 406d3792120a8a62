"""C99 for the integer-only step (`firmware_sim.intsim`), as firmware ships it.

`emit(model, out, prefix="es")` writes four files:

- `<prefix>_model.h`: the API, and nothing else: sizes as macros, the state type, and

      void <prefix>_reset(<prefix>_state_t *st);
      void <prefix>_step(const int32_t reading[<PREFIX>_FEATURES], <prefix>_state_t *st,
                         int32_t logits_q12[<PREFIX>_CLASSES], int32_t *scratch);
      int  <prefix>_argmax(const int32_t logits_q12[<PREFIX>_CLASSES]);
      extern const int8_t <prefix>_in_frac[<PREFIX>_FEATURES];   /* reading = value x 2^in_frac */

  `scratch` is the step's working memory, `<PREFIX>_SCRATCH_WORDS` int32 words, owned
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
- `es_tables.c`: the sigmoid and tanh tables (8 KB), compiled once per firmware however many
  models it holds.
- `<prefix>_example.c`: a host program streaming readings from stdin (for tests and trials).

The files are written all or nothing: each to a temporary file beside it
(`.<name>.<pid>.<random>.tmp`), renamed into place once all four are written; a failed write
(a full disk) leaves the old files as they were, and the temporary files a killed run left
are removed by the next emit to that directory.

No float, no libm, no malloc, no 64-bit arithmetic; all of it builds with
`-std=c99 -Wall -Wextra -Werror -pedantic`. The arithmetic is the simulator's, operation for
operation, so the two agree bit for bit (tests run it on the host and on emulated Cortex-M0+
and M4 cores). Arithmetic right shifts of negative values are assumed to be arithmetic, as
gcc, clang and armcc do.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from edgeseq.errors import UsageError
from firmware_sim.intsim import GATES, IN_LIMIT, LUT_SHIFT, SIGMOID, TANH, IntModel, check_int_model

assert LUT_SHIFT == 5, "es_kernels.h holds ES_LUT_SHIFT 5"

KERNELS = (Path(__file__).resolve().parent / "kernels" / "es_kernels.h").read_text()   # one file, shared with the host backend

EXAMPLE = r"""/* Streams readings through the emitted step: one reading per line on stdin, {P}_FEATURES
   integers in the step's fixed point (value x 2^{p}_in_frac[f]), separated by spaces. Prints the
   Q12 logits and the predicted class index per reading.
   gcc -std=c99 -O2 -o stream {p}_example.c {p}_model.c es_tables.c
   For a part, compile with -ffunction-sections -fdata-sections and link with -Wl,--gc-sections:
   the linker then keeps only the tables the models read (an RNN reads tanh only, 4 KB of the
   8 KB), which is what `edgeseq firmware check` and `measure` count. */
#include <stdio.h>
#include "{p}_model.h"

int main(void) {{
  static {p}_state_t st;
  static int32_t scratch[{P}_SCRATCH_WORDS];
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
    """A C identifier prefix: lower-case letters, digits and '_', starting with a letter, at most
    20 (so every name stays within C99's 31 significant characters), with no '__' anywhere and
    no trailing '_' (which would make '__' before the rest of each name): C++ reserves every
    name that holds '__' ([lex.name]), and the header is `extern "C"` for C++."""
    if not isinstance(prefix, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,19}", prefix):
        raise UsageError(f"prefix '{prefix}' must be a C name: a lower-case letter, then letters, digits or '_' "
                         "(at most 20), e.g. --prefix gesture")
    if "__" in prefix or prefix.endswith("_"):
        raise UsageError(f"prefix '{prefix}' holds '__' or ends in '_' (each name adds '_' after it): C++ reserves "
                         "names with '__'; use single underscores, e.g. --prefix gesture_v2")
    return prefix


def comment_text(text) -> str:
    """A name (feature, label) as it may stand in a C comment under -Wall -Werror -pedantic:
    printable ASCII only (others become '_'), and no `*/`, `/*` (-Wcomment), `??` (-Wtrigraphs)
    or backslash (a line splice)."""
    text = "".join(c if " " <= c <= "~" and c != "\\" else "_" for c in str(text))
    while "*/" in text or "/*" in text or "??" in text:
        text = text.replace("*/", "* /").replace("/*", "/ *").replace("??", "? ?")
    return text


def _arr(ctype: str, name: str, values, static: bool = True) -> str:
    flat = [int(v) for v in np.asarray(values).ravel()]
    rows = [", ".join(str(v) for v in flat[i:i + 24]) for i in range(0, len(flat), 24)]
    return (f"{'static ' if static else ''}const {ctype} {name}[{len(flat)}] = {{\n  "
            + ",\n  ".join(rows) + "\n};\n")


def layout(m: IntModel) -> dict:
    """Sizes of the step's buffers in bytes: the scratch and where each part lies in it."""
    if m.kind == "ssm":
        from firmware_sim.cemit_ssm import layout as ssm_layout
        return ssm_layout(m)
    if m.kind == "transformer":
        from firmware_sim.cemit_xf import layout as xf_layout
        return xf_layout(m)
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


def header_text(m, p: str, title: str, defines: list, state: str) -> str:
    """The model header every integer step emits (RNN, GRU, LSTM, SSM): `title` after "Generated
    by edgeseq firmware emit: ", the reading and logit scales, the labels, `defines` ((name,
    value) after FEATURES and CLASSES), the state struct's field lines `state`, and the one step
    API (reset, step, argmax, in_frac)."""
    P = p.upper()
    channels = ", ".join(f"{comment_text(f)} {int(k)}" for f, k in zip(m.meta.get("features", []), m.in_frac))
    lines = "".join(f"#define {P}_{name} {value}\n" for name, value in defines)
    return f"""/* Generated by edgeseq firmware emit: {title}
   reading[f] = round(value_f x 2^{p}_in_frac[f]) as int32 (fractional bits per channel: {channels});
   values beyond +-(2^30 - 1) are clamped. logits are Q12 (value x 4096).
   labels: {", ".join(comment_text(label) for label in m.labels)} */
#ifndef {P}_MODEL_H
#define {P}_MODEL_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {{
#endif

#define {P}_FEATURES {m.n_features}
#define {P}_CLASSES {len(m.labels)}
{lines}#define {P}_LAYERS {m.layers}
#define {P}_SCRATCH_WORDS {layout(m)['scratch'] // 4}   /* the step's working memory (int32 words), from the caller */

typedef struct {{
{state}}} {p}_state_t;

void {p}_reset({p}_state_t *st);
void {p}_step(const int32_t reading[{P}_FEATURES], {p}_state_t *st, int32_t logits_q12[{P}_CLASSES], int32_t *scratch);
int {p}_argmax(const int32_t logits_q12[{P}_CLASSES]);
extern const int8_t {p}_in_frac[{P}_FEATURES];

#ifdef __cplusplus
}}
#endif
#endif /* {P}_MODEL_H */
"""


def header(m: IntModel, p: str) -> str:
    P = p.upper()
    state = f"  int16_t h[{P}_LAYERS][{P}_HIDDEN];   /* hidden state, Q15 */\n"
    if m.kind == "lstm":
        state += f"  int32_t c[{P}_LAYERS][{P}_HIDDEN];   /* cell, Q15 */\n"
    return header_text(m, p, f"integer-only {m.kind.upper()} step, {m.layers} layer(s), hidden {m.hidden}.",
                       [("HIDDEN", m.hidden)], state)


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
    zero_c = "\n      st->c[l][k] = 0;" if m.kind == "lstm" else ""
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
         "int32_t *scratch) {",
         f"  int32_t *gx = scratch, *gh = gx + {G * H};",
         f"  int8_t *a = (int8_t *)(gh + {G * H}), *ah = a + {n_a};",
         f"  int32_t *xb = scratch + {(8 * G * H + n_a + h_pad) // 4};",
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
            L.append(f"    st->h[{layer}][k] = (int16_t)es_k_lut(es_tanh_q15, gx[k] + gh[k]);")
        elif m.kind == "gru":
            L += [f"    int32_t h = st->h[{layer}][k];",
                  "    int32_t r = es_k_lut(es_sigmoid_q15, gx[k] + gh[k]);",
                  f"    int32_t z = es_k_lut(es_sigmoid_q15, gx[{H} + k] + gh[{H} + k]);",
                  f"    int32_t n = es_k_lut(es_tanh_q15, gx[{2 * H} + k] + es_k_mulq15(gh[{2 * H} + k], r));",
                  f"    st->h[{layer}][k] = (int16_t)(n + ((z * (h - n)) >> 15));"]
        else:
            L += ["    int32_t i = es_k_lut(es_sigmoid_q15, gx[k] + gh[k]);",
                  f"    int32_t fg = es_k_lut(es_sigmoid_q15, gx[{H} + k] + gh[{H} + k]);",
                  f"    int32_t g = es_k_lut(es_tanh_q15, gx[{2 * H} + k] + gh[{2 * H} + k]);",
                  f"    int32_t o = es_k_lut(es_sigmoid_q15, gx[{3 * H} + k] + gh[{3 * H} + k]);",
                  f"    int32_t c = es_k_mulq15(st->c[{layer}][k], fg) + ((i * g) >> 15);",
                  f"    st->c[{layer}][k] = c;",
                  f"    st->h[{layer}][k] = (int16_t)((o * es_k_lut(es_tanh_q15, c >> 3)) >> 15);"]
        L.append("  }")
    last = len(m.cells) - 1
    L += [f"  es_k_quantize(st->h[{last}], {H}, {h_pad}, {m.head_hq[0]}, {m.head_hq[1]}, {m.head.in_zp}, ah);",
          f"  es_k_matvec(ah, xb, {p}_o_w, {p}_o_q, {h_pad}, {C}, {rq_mode(m.head.s)}, logits_q12);",
          "}"]
    g.append("\n".join(L) + "\n")
    return "\n".join(g)


def write_all(files: dict) -> None:
    """Write {path: bytes} all or nothing (`edgeseq.runtime.statefile.write_files`)."""
    from edgeseq.runtime.statefile import write_files
    write_files(files)


def _shareable(mode: int) -> int:
    """`mode` less the process umask: what a plainly created file would get."""
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def flash_bytes(m: IntModel) -> dict:
    """Read-only bytes the emitted model holds (its .rodata, before alignment): int8 weights in
    blocks of 4 rows, per-output constants (zero point, multiplier, shift, bias: 16 B),
    per-feature constants (mean, multiplier, shift: 12 B, and fractional bits: 1 B), tables."""
    if m.kind == "ssm":
        from firmware_sim.cemit_ssm import flash_bytes as ssm_flash_bytes
        return ssm_flash_bytes(m)
    if m.kind == "transformer":
        from firmware_sim.cemit_xf import flash_bytes as xf_flash_bytes
        return xf_flash_bytes(m)
    mats = [x for cell in m.cells for x in (cell["x"], cell["h"])] + [m.head]
    weights = sum(pad4(x.w.shape[0]) * pad4(x.w.shape[1]) for x in mats)
    constants = sum(16 * x.w.shape[1] for x in mats) + 13 * m.n_features
    tables = (1 if m.kind == "rnn" else 2) * SIGMOID.size * 2
    return {"weights": int(weights), "constants": int(constants), "tables": int(tables)}


TABLES = ("/* edgeseq: the sigmoid and tanh tables every emitted model reads (2049 Q15 knots over [-8, 8]).\n"
          "   Compile this file once per firmware, whatever the number of models. */\n"
          '#include "es_kernels.h"\n\n' + _arr("int16_t", "es_sigmoid_q15", SIGMOID, static=False)
          + _arr("int16_t", "es_tanh_q15", TANH, static=False))


def _same_file(a, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def emit(m: IntModel, out, prefix: str = "es", protect=()) -> dict:
    """Write `<prefix>_model.h`, `<prefix>_model.c`, `<prefix>_example.c`, and the files every
    model shares, `es_kernels.h` and `es_tables.c` (the same text for every model), into the
    directory `out` (created). Returns sizes: source bytes, int8 weights (padded), table bytes,
    scratch, state and io bytes. UsageError for a prefix that is not a C name, or when one of
    the files would land on a path of `protect` (the model being read), links followed;
    ModelFileError, before anything is written, for a constant the int32 step cannot hold
    (`firmware_sim.intsim.check_int_model`: C that builds but overflows is never written)."""
    if m.kind == "ssm":
        from firmware_sim.cemit_ssm import emit as ssm_emit
        return ssm_emit(m, out, prefix, protect)
    if m.kind == "transformer":
        from firmware_sim.cemit_xf import emit as xf_emit
        return xf_emit(m, out, prefix, protect)
    p = check_prefix(prefix)
    check_int_model(m, protect[0] if protect else "<model>")
    out = Path(out)
    names = [f"{p}_model.h", f"{p}_model.c", "es_kernels.h", "es_tables.c", f"{p}_example.c"]
    for name in names:
        for other in protect:
            if os.path.realpath(out / name) == os.path.realpath(other) or _same_file(out / name, other):
                raise UsageError(f"--out '{out}' would write {name} over '{other}', which this command reads; "
                                 "choose another --out or --prefix")
    h, c = header(m, p), source(m, p)
    files = dict(zip(names, (h, c, KERNELS, TABLES, EXAMPLE.format(p=p, P=p.upper()))))
    out.mkdir(parents=True, exist_ok=True)
    write_all({out / name: text.encode() for name, text in files.items()})
    weights = sum(pad4(x.w.shape[1]) * pad4(x.w.shape[0]) for cell in m.cells for x in (cell["x"], cell["h"]))
    weights += pad4(m.head.w.shape[1]) * pad4(m.head.w.shape[0])
    lay = layout(m)
    return {"path": str(out), "prefix": p, "files": list(files), "source_bytes": len(c.encode()) + len(h.encode()),
            "int8_weights": int(weights), "tables_bytes": int((1 if m.kind == "rnn" else 2) * SIGMOID.size * 2), "kind": m.kind,
            "scratch_bytes": lay["scratch"], "state_bytes": lay["state"], "io_bytes": lay["io"],
            "in_frac": [int(k) for k in m.in_frac]}
