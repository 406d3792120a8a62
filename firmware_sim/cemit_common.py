"""The C every emitted model shares, whatever its architecture (the RNN cells in
`firmware_sim.cemit`, the SSM in `cemit_ssm`, the Transformer in `cemit_xf`): the kernels and
tables copied next to it, the header and the first parts of its source, the decision, anomaly
and regression layers, and the all-or-nothing writer (`write_emitted`, `write_model`; see
`firmware_sim.cemit`'s docstring). Below the three emitters, which take these from here;
`cemit` re-exports them."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

from edgeseq.errors import UsageError, printable
from firmware_sim.intsim import IN_LIMIT, LUT_SHIFT, SIGMOID, TANH, Q

assert LUT_SHIFT == 5, "es_kernels.h holds ES_LUT_SHIFT 5"


def kernel_text(name: str) -> str:
    """The text of `kernels/<name>`, as emit copies it next to the model."""
    return (Path(__file__).resolve().parent / "kernels" / name).read_text()


KERNELS = kernel_text("es_kernels.h")   # one file, shared with the host backend
DECIDE = kernel_text("es_decide_q15.h")  # the integer decision layer (models with decision settings)
ANOMALY = kernel_text("es_anomaly_q8.h")  # the integer anomaly score and baseline (anomaly models)

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
    printf("%d", {p}_argmax(logits));
#ifdef {P}_DECISION
    {{  /* the decision layer: the class that ended, the class that started (-1: none), its run */
      static {p}_decision_t dec;
      static int fresh = 1;
      int32_t probs[{P}_CLASSES], ended, started, run;
      if (fresh) {p}_decision_reset(&dec), fresh = 0;
      {p}_decide(logits, &dec, probs, &ended, &started, &run);
      printf(" %ld %ld %ld", (long)ended, (long)started, (long)run);
    }}
#endif
#ifdef {P}_REGRESS
    {{  /* the targets in their units x {p}_target_scale */
      int32_t values[{P}_CLASSES];
      {p}_targets(logits, values);
      for (c = 0; c < {P}_CLASSES; c++) printf(" %ld", (long)values[c]);
    }}
#endif
#ifdef {P}_ANOMALY
    {{  /* the anomaly layer: candidate, the class that ended, started (-1: none), its run */
      static {p}_anomaly_t an;
      static int fresh = 1;
      int32_t cand, ended, started, run;
      if (fresh) {p}_anomaly_reset(&an), fresh = 0;
      {p}_anomaly(x, logits, &an, &cand, &ended, &started, &run);
      printf(" %ld %ld %ld %ld", (long)cand, (long)ended, (long)started, (long)run);
    }}
#endif
    printf("\n");
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
        raise UsageError(f"prefix '{printable(prefix)}' must be a C name: a lower-case letter, then letters, digits or '_' "
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


def rq_mode(shifts) -> str:
    """The requantization variant every shift of a product allows (see es_kernels.h)."""
    s = np.asarray(shifts)
    if s.min() >= 1 and s.max() <= 16:
        return "ES_RQ_LO"
    if s.min() >= 16 and s.max() <= 31:
        return "ES_RQ_HI"
    return "ES_RQ_ANY"


def source_head(m, p: str, includes: list) -> list:
    """The first parts of every `<prefix>_model.c`: the generated line, the includes (the model's
    header, then `includes`) and the reading's constants (in_frac, mean, multipliers, shifts; a
    model with an input transform: in_frac and its threshold table `<prefix>_thr`)."""
    decided = model_decision(m) is not None
    watched = model_anomaly(m) is not None
    reading = (thr_table(m, p) if getattr(m, "asinh", None) is not None else
               _arr("int32_t", f"{p}_mean", m.mean_fx) + _arr("int32_t", f"{p}_feat_m", m.feat_m)
               + _arr("int32_t", f"{p}_feat_s", m.feat_s))
    return [f"/* Generated by edgeseq firmware emit: weights and step of {p}_model.h. */",
            f'#include "{p}_model.h"', *includes, *(['#include "es_decide_q15.h"'] if decided else []),
            *(['#include "es_anomaly_q8.h"'] if watched else []), "",
            decision_source(m, p), anomaly_source(m, p), regress_source(m, p),
            _arr("int8_t", f"{p}_in_frac", m.in_frac, static=False), reading]


def reading_flash(m, fb: dict) -> dict:
    """`flash_bytes`' dict `fb` for a model with an input transform: its per-channel reading
    constants are in_frac (1 B) and the threshold table (`reading_table`, 4 x 255 B), not the
    mean, multiplier and shift (12 B) `constants` counts; `fb` as it is for other models."""
    if getattr(m, "asinh", None) is None:
        return fb
    thr = np.asarray(m.asinh.thr)
    return {**fb, "constants": int(fb["constants"] - 12 * m.n_features), "reading_table": int(4 * thr.size)}


def thr_table(m, p: str) -> str:
    """`static const int32_t <prefix>_thr[F][255]`: the threshold table of a model with an input
    transform (`firmware_sim.intgraph.asinh_thresholds`), one row a channel, which es_k_thresh8
    searches."""
    a = m.asinh
    thr = np.asarray(a.thr, np.int64)
    rows = []
    for f, name in enumerate((m.meta or {}).get("features") or [f"f{i}" for i in range(len(thr))]):
        flat = [str(int(v)) for v in thr[f]]
        body = ",\n   ".join(", ".join(flat[i:i + 12]) for i in range(0, len(flat), 12))
        rows.append(f"  /* {comment_text(name)}: asinh(x / {float(a.scale[f]):.9g}), mean {float(a.mean[f]):.9g}, "
                    f"std {float(a.std[f]):.9g} */\n  {{{body}}}")
    return (f"/* The reading's int8 input: -128 + the thresholds it reaches (es_k_thresh8), in the reading's fixed "
            f"point;\n   the boundaries of round((asinh(x / scale) - mean) / std / {m.asinh.in_scale:.9g}) + "
            f"({m.asinh.in_zp}), half up. */\n"
            f"static const int32_t {p}_thr[{len(thr)}][{thr.shape[1]}] = {{\n" + ",\n".join(rows) + "\n};\n")


def model_decision(m):
    """The model's decision settings (`edgeseq.decision`) as a DecisionSpec, or None."""
    d = (m.meta or {}).get("decision")
    if d is None:
        return None
    from edgeseq.runtime.decision import DecisionSpec
    return DecisionSpec.from_json(d, m.labels)


def decision_header(m, p: str) -> str:
    """The decision layer's API in `<prefix>_model.h` (empty for a model without settings)."""
    spec = model_decision(m)
    if spec is None:
        return ""
    P = p.upper()
    from firmware_sim.intdecide import params
    W = params(spec)["window"]
    ring = (f"\n  int32_t ring[{W}][{P}_CLASSES];   /* the moving mean's last {W} readings, Q15 */"
            f"\n  int32_t sum[{P}_CLASSES], head, n;" if W else "")
    return f"""
/* The decision layer (edgeseq calibrate: {comment_text(spec.describe())}), in integer
   arithmetic (es_decide_q15.h). Call {p}_decide after each step: it returns the events that
   fired (0, 1 or 2); *ended / *started get the class of an event that ended / started (-1: none),
   *run the readings the started class had been the candidate; probs_q15 gets the Q15 probabilities. */
#define {P}_DECISION 1
typedef struct {{
  int32_t s[{P}_CLASSES];   /* smoothed probabilities, Q15 */
  int32_t started, run_cls, run_len, active, cool, gone;{ring}
}} {p}_decision_t;
void {p}_decision_reset({p}_decision_t *d);
int {p}_decide(const int32_t logits_q12[{P}_CLASSES], {p}_decision_t *d, int32_t probs_q15[{P}_CLASSES],
               int32_t *ended, int32_t *started, int32_t *run);
"""


def decision_source(m, p: str) -> str:
    """The decision layer's constants and functions in `<prefix>_model.c` (empty without settings)."""
    spec = model_decision(m)
    if spec is None:
        return ""
    from firmware_sim.intdecide import EXP_Q15, params
    q = params(spec)
    P = p.upper()
    W = q["window"]
    clear = (f"\n  for (c = 0; c < {W} * {P}_CLASSES; c++) d->ring[c / {P}_CLASSES][c % {P}_CLASSES] = 0;"
             f"\n  for (c = 0; c < {P}_CLASSES; c++) d->sum[c] = 0;\n  d->head = 0, d->n = 0;" if W else "")
    ring_in = ("  st.ring = &d->ring[0][0], st.sum = d->sum, st.head = d->head, st.n = d->n;" if W else
               "  st.ring = 0, st.sum = 0, st.head = 0, st.n = 0;")
    ring_out = "\n  d->head = st.head, d->n = st.n;" if W else ""
    return (_arr("int32_t", f"{p}_dec_thr", q["threshold_q15"]) + _arr("int32_t", f"{p}_dec_min", q["min_duration"])
            + _arr("uint16_t", f"{p}_dec_exp", EXP_Q15) + f"""
void {p}_decision_reset({p}_decision_t *d) {{
  int c;
  for (c = 0; c < {P}_CLASSES; c++) d->s[c] = 0;
  d->started = 0, d->run_cls = -1, d->run_len = 0, d->active = -1, d->cool = 0, d->gone = 0;{clear}
}}

int {p}_decide(const int32_t logits_q12[{P}_CLASSES], {p}_decision_t *d, int32_t probs_q15[{P}_CLASSES],
               int32_t *ended, int32_t *started, int32_t *run) {{
  static const es_dec_params prm = {{{P}_CLASSES, {q['alpha_q15']}, {p}_dec_thr, {p}_dec_min, {q['refractory']},
                                     {q['release']}, {p}_dec_exp, {W}}};
  es_dec_state st;
  int n;
  st.s = d->s, st.started = d->started, st.run_cls = d->run_cls, st.run_len = d->run_len;
  st.active = d->active, st.cool = d->cool, st.gone = d->gone;
{ring_in}
  n = es_dec_step(&prm, &st, logits_q12, probs_q15, ended, started, run);
  d->started = st.started, d->run_cls = st.run_cls, d->run_len = st.run_len;
  d->active = st.active, d->cool = st.cool, d->gone = st.gone;{ring_out}
  return n;
}}

""")


def model_regress(m):
    """A regression model's integer output conversion: (scale, mean, std), int64 [K] each, with
    target k's value x scale[k] = mean[k] + round(logit_q12 x std[k] / 4096); scale[k] a power of
    10 that holds the target's std in at least 1,000 steps (1 to 10^9); None for other models.
    Raises UsageError where a target's mean and range (64 std) do not fit int32 at its scale.
    """
    task = (m.meta or {}).get("task")
    if not task or task.get("kind") != "regress":
        return None
    mean, std = np.asarray(task["target_mean"], np.float64), np.asarray(task["target_std"], np.float64)
    digits = np.clip(np.ceil(3 - np.log10(std)), 0, 9).astype(np.int64)
    scale = 10 ** digits
    over = (np.abs(mean) + 64 * std) * scale >= 2 ** 31          # in float: no int64 overflow on the way
    if over.any():
        k = int(np.argmax(over))
        raise UsageError(f"regression target '{task['targets'][k]}' (mean {mean[k]:.6g}, std {std[k]:.6g}) does not "
                         f"fit the firmware's int32 once scaled by {scale[k]:,} to hold its std in 1,000 steps: its "
                         f"mean is {abs(mean[k]) / std[k]:.3g} stds from 0, at most about 2 million fit; train on it "
                         "with an offset subtracted")
    return scale, np.round(mean * scale).astype(np.int64), np.round(std * scale).astype(np.int64)


def targets_fixed(logits_q12: np.ndarray, q) -> np.ndarray:
    """The emitted `<prefix>_targets`: int32 [..., K], each target x its scale, from Q12 logits
    [..., K] (`model_regress`'s q), rounding half up as the C does."""
    scale, mean_i, std_i = q
    return (mean_i + ((np.asarray(logits_q12, np.int64) * std_i + (1 << (Q - 1))) >> Q)).astype(np.int32)


def regress_header(m, p: str) -> str:
    """A regression model's output conversion in `<prefix>_model.h` (empty for other models)."""
    q = model_regress(m)
    if q is None:
        return ""
    P = p.upper()
    names = ", ".join(f"{comment_text(t)} x {int(k):,}" for t, k in zip(m.meta["task"]["targets"], q[0]))
    return f"""
/* Regression: {p}_targets turns the step's Q12 outputs into the targets in their own units, each
   times its {p}_target_scale ({names}), in integer arithmetic: mean + round(logit x std / 4096). */
#define {P}_REGRESS 1
extern const int32_t {p}_target_scale[{P}_CLASSES];
void {p}_targets(const int32_t logits_q12[{P}_CLASSES], int32_t out[{P}_CLASSES]);
"""


def regress_source(m, p: str) -> str:
    """`<prefix>_targets` and its constants in `<prefix>_model.c` (empty for other models)."""
    q = model_regress(m)
    if q is None:
        return ""
    P = p.upper()
    return (_arr("int32_t", f"{p}_target_scale", q[0], static=False) + _arr("int32_t", f"{p}_t_mean", q[1])
            + _arr("int32_t", f"{p}_t_std", q[2]) + f"""
void {p}_targets(const int32_t logits_q12[{P}_CLASSES], int32_t out[{P}_CLASSES]) {{
  int c;
  for (c = 0; c < {P}_CLASSES; c++)   /* arithmetic shift of a signed value, as gcc and clang define it */
    out[c] = {p}_t_mean[c] + (int32_t)(((int64_t)logits_q12[c] * {p}_t_std[c] + {1 << (Q - 1)}) >> {Q});
}}
""")


def model_anomaly(m):
    """The integer anomaly constants (`firmware_sim.intanomaly.params`) of an anomaly model, or None."""
    task = (m.meta or {}).get("task")
    if not task or task.get("kind") != "anomaly":
        return None
    from firmware_sim.intanomaly import model_params
    return model_params(m)


def anomaly_header(m, p: str) -> str:
    """The anomaly layer's API in `<prefix>_model.h` (empty for other models)."""
    q = model_anomaly(m)
    if q is None:
        return ""
    from edgeseq.runtime.anomaly import AnomalySpec
    P = p.upper()
    return f"""
/* The anomaly layer ({comment_text(AnomalySpec.from_json(m.meta["task"]).describe())}), in integer
   arithmetic (es_anomaly_q8.h): the surprise of each reading under the forecast the step made
   before it, a baseline this device learns itself, and events. Call {p}_anomaly after each step with
   the same reading and its logits: it returns the events that fired (0, 1 or 2); *cand is 1 where
   the reading is a candidate; *ended / *started get 1 where an anomaly ended / started (-1: none),
   *run the readings it had been a candidate. Keep {p}_anomaly_t with the step's state. */
#define {P}_ANOMALY 1
typedef struct {{
  int32_t mu[{P}_FEATURES], logvar[{P}_FEATURES];   /* the last forecast, Q12 */
  int32_t seen, s, n, mean;                        /* readings, smoothed score and its mean (Q8), learnt */
  int64_t var;                                     /* while learning its sum of squares, then its variance (Q16) */
  int32_t dec_s[2], started, run_cls, run_len, active, cool, gone;
}} {p}_anomaly_t;
void {p}_anomaly_reset({p}_anomaly_t *a);
int {p}_anomaly(const int32_t reading[{P}_FEATURES], const int32_t logits_q12[{P}_CLASSES], {p}_anomaly_t *a,
                int32_t *cand, int32_t *ended, int32_t *started, int32_t *run);
"""


def anomaly_source(m, p: str) -> str:
    """The anomaly layer's constants and functions in `<prefix>_model.c` (empty for other models)."""
    q = model_anomaly(m)
    if q is None:
        return ""
    from firmware_sim.intanomaly import EXPNV_Q16, LIM
    from firmware_sim.intdecide import EXP_Q15, NEVER
    P = p.upper()
    arrays = "".join(_arr("int32_t", f"{p}_an_{k}", q[k]) for k in ("mean_fx", "dmax", "pre", "mult", "post"))
    return (arrays + _arr("uint32_t", f"{p}_an_expnv", EXPNV_Q16) + _arr("uint32_t", f"{p}_an_lim", LIM)
            + _arr("int32_t", f"{p}_an_thr", [NEVER, 16384]) + _arr("int32_t", f"{p}_an_min", [0, q["min_duration"]])
            + _arr("uint16_t", f"{p}_an_exp", EXP_Q15) + f"""
static const es_anom_params {p}_an = {{{P}_FEATURES, {q['alpha_q10']}, {q['learn']}, {q['warm']}, {q['adapt_shift']},
  {q['sig2_q8']}, {p}_an_mean_fx, {p}_an_dmax, {p}_an_pre, {p}_an_mult, {p}_an_post, {p}_an_expnv, {p}_an_lim,
  {{2, 32768, {p}_an_thr, {p}_an_min, {q['refractory']}, {q['release']}, {p}_an_exp, 0}}}};

static void {p}_an_in(const {p}_anomaly_t *a, es_anom_state *st, int32_t *mu, int32_t *lv, int32_t *s2) {{
  int f;
  for (f = 0; f < {P}_FEATURES; f++) mu[f] = a->mu[f], lv[f] = a->logvar[f];
  st->mu = mu, st->logvar = lv, st->seen = a->seen, st->s = a->s, st->n = a->n, st->mean = a->mean;
  st->var = a->var, s2[0] = a->dec_s[0], s2[1] = a->dec_s[1], st->dec.s = s2;
  st->dec.started = a->started, st->dec.run_cls = a->run_cls, st->dec.run_len = a->run_len;
  st->dec.active = a->active, st->dec.cool = a->cool, st->dec.gone = a->gone;
  st->dec.ring = 0, st->dec.sum = 0, st->dec.head = 0, st->dec.n = 0;
}}

static void {p}_an_out(const es_anom_state *st, {p}_anomaly_t *a) {{
  int f;
  for (f = 0; f < {P}_FEATURES; f++) a->mu[f] = st->mu[f], a->logvar[f] = st->logvar[f];
  a->seen = st->seen, a->s = st->s, a->n = st->n, a->mean = st->mean, a->var = st->var;
  a->dec_s[0] = st->dec.s[0], a->dec_s[1] = st->dec.s[1];
  a->started = st->dec.started, a->run_cls = st->dec.run_cls, a->run_len = st->dec.run_len;
  a->active = st->dec.active, a->cool = st->dec.cool, a->gone = st->dec.gone;
}}

void {p}_anomaly_reset({p}_anomaly_t *a) {{
  es_anom_state st;
  int32_t mu[{P}_FEATURES], lv[{P}_FEATURES];
  st.mu = mu, st.logvar = lv;
  es_anom_reset(&{p}_an, &st);
  {p}_an_out(&st, a);
}}

int {p}_anomaly(const int32_t reading[{P}_FEATURES], const int32_t logits_q12[{P}_CLASSES], {p}_anomaly_t *a,
                int32_t *cand, int32_t *ended, int32_t *started, int32_t *run) {{
  es_anom_state st;
  int32_t mu[{P}_FEATURES], lv[{P}_FEATURES], s2[2];
  int n;
  {p}_an_in(a, &st, mu, lv, s2);
  n = es_anom_step(&{p}_an, &st, reading, logits_q12, cand, ended, started, run);
  {p}_an_out(&st, a);
  return n;
}}

""")


def argmax_text(p: str) -> str:
    """`<prefix>_argmax`, the same C for every model."""
    P = p.upper()
    return f"""int {p}_argmax(const int32_t logits_q12[{P}_CLASSES]) {{
  int best = 0, c;
  for (c = 1; c < {P}_CLASSES; c++)
    if (logits_q12[c] > logits_q12[best]) best = c;
  return best;
}}
"""


def step_head(m, p: str, buffers: list, n_a: int) -> list:
    """The first lines of every `<prefix>_step`: the signature, `buffers` (the lines that lay
    the scratch out and declare the locals, `f` among them), and the reading quantized into
    the int8 buffer `a`, zero-padded to `n_a` (a model with an input transform: by its
    threshold table, es_k_thresh8)."""
    P = p.upper()
    if getattr(m, "asinh", None) is not None:          # the input transform: by threshold table
        return [f"void {p}_step(const int32_t reading[{P}_FEATURES], {p}_state_t *st, "
                f"int32_t logits_q12[{P}_CLASSES], int32_t *scratch) {{", *buffers,
                f"  for (f = 0; f < {m.n_features}; f++)",
                f"    a[f] = (int8_t)es_k_thresh8({p}_thr[f], es_k_clamp(reading[f], {-IN_LIMIT}, {IN_LIMIT}));",
                f"  for (; f < {n_a}; f++) a[f] = 0;"]
    return [f"void {p}_step(const int32_t reading[{P}_FEATURES], {p}_state_t *st, int32_t logits_q12[{P}_CLASSES], "
            "int32_t *scratch) {", *buffers,
            f"  for (f = 0; f < {m.n_features}; f++) {{",
            f"    int32_t d = es_k_clamp(reading[f], {-IN_LIMIT}, {IN_LIMIT}) - {p}_mean[f];",
            f"    a[f] = (int8_t)ES_SAT8(es_k_requant(d, {p}_feat_m[f], {p}_feat_s[f]) + ({m.reading_zp}));",
            "  }",
            f"  for (; f < {n_a}; f++) a[f] = 0;"]


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


def header_text(m, p: str, title: str, defines: list, state: str, scratch: int) -> str:
    """The model header every integer step emits (RNN, GRU, LSTM, SSM): `title` after "Generated
    by edgeseq firmware emit: ", the reading and logit scales, the labels, `defines` ((name,
    value) after FEATURES and CLASSES), the state struct's field lines `state`, the bytes of the
    step's `scratch` (its layout's), and the one step API (reset, step, argmax, in_frac)."""
    P = p.upper()
    channels = ", ".join(f"{comment_text(f)} {int(k)}" for f, k in zip(m.meta.get("features", []), m.in_frac))
    lines = "".join(f"#define {P}_{name} {value}\n" for name, value in defines)
    transform = ("\n   The model takes asinh(value / scale) per channel first: the step reads its int8 input from "
                 f"a table\n   of 255 thresholds per channel ({p}_thr), so pass the raw values as above."
                 if getattr(m, "asinh", None) is not None else "")
    return f"""/* Generated by edgeseq firmware emit: {title}
   reading[f] = round(value_f x 2^{p}_in_frac[f]) as int32 (fractional bits per channel: {channels});
   values beyond +-(2^30 - 1) are clamped. logits are Q12 (value x 4096).{transform}
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
#define {P}_SCRATCH_WORDS {scratch // 4}   /* the step's working memory (int32 words), from the caller */

typedef struct {{
{state}}} {p}_state_t;

void {p}_reset({p}_state_t *st);
void {p}_step(const int32_t reading[{P}_FEATURES], {p}_state_t *st, int32_t logits_q12[{P}_CLASSES], int32_t *scratch);
int {p}_argmax(const int32_t logits_q12[{P}_CLASSES]);
extern const int8_t {p}_in_frac[{P}_FEATURES];
{decision_header(m, p)}{anomaly_header(m, p)}{regress_header(m, p)}
#ifdef __cplusplus
}}
#endif
#endif /* {P}_MODEL_H */
"""


GENERATED = "Generated by edgeseq firmware emit"       # on the first line of every file emit writes
MARKER = f"/* {GENERATED}: edits are lost when it runs again (delete this line to keep a file). */\n"


def marked(text: str) -> str:
    """`text` with `GENERATED` on its first line: as it is where it has it (the model's .h and
    .c), else after a `MARKER` line (kernels, tables, example)."""
    return text if GENERATED in text.split("\n", 1)[0] else MARKER + text


def _emits_own(path: Path, text: str) -> bool:
    """Whether the existing file `path` is one emit wrote: `GENERATED` on its first line, or
    exactly `text` (what emit writes now) without it. An unreadable file is not."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
            if GENERATED.encode() in head.split(b"\n", 1)[0]:
                return True
            data = head + f.read(len(text.encode()) + 1 - len(head))
    except OSError:
        return False
    return data == text.encode()


def write_emitted(out, files: dict, protect=(), force: bool = False) -> list:
    """Write {name: C text} into the directory `out` (created, parents too), each with
    `GENERATED` on its first line (`marked`), all or nothing. Refused with a UsageError before
    anything is written (no folder created either) when a name would land on a path of
    `protect` (the model being read), links followed; when `out` holds a directory or other
    non-file of one of the names; or, unless `force`, when `out` holds a file of one of the
    names that emit did not write (`_emits_own`): a user's own file, or an emitted one whose
    marker line was deleted to keep it. Returns the names of the files replaced.

    All or nothing: every file is first written and flushed into a working directory in `out`
    (`.emit.<pid>.<random>.tmp`), then each is renamed into place, a link to the file it
    replaces kept meanwhile; a failure at any point (a full disk, a rename refused) puts back
    what was replaced, removes what was added (and the folders this call made) and raises the
    OSError naming the target. A killed run's working directory, and the per-file temporary
    files older versions wrote (`.<name>.<pid>.<random>.tmp`), are removed by the next emit."""
    from edgeseq.runtime.statefile import TEMP_SUFFIX, remove_leftovers, temp_prefix

    out = Path(out)
    for name in files:
        for other in protect:
            if os.path.realpath(out / name) == os.path.realpath(other) or _same_file(out / name, other):
                raise UsageError(f"--out '{out}' would write {name} over '{other}', which this command reads; "
                                 "choose another --out or --prefix")
    present = [name for name in files if os.path.lexists(out / name)]
    for name in present:
        if (out / name).is_dir() or (out / name).exists() and not (out / name).is_file():
            raise UsageError(f"--out '{out}' holds '{name}', which is not a file (a directory?), where emit writes "
                             f"its {name}; move it away or choose another --out")
    if not force:
        theirs = [name for name in present if not _emits_own(out / name, files[name])]
        if theirs:
            more = f" (and {', '.join(theirs[1:])})" if len(theirs) > 1 else ""
            raise UsageError(f"'{out / theirs[0]}'{more} was not written by firmware emit (its first line lacks "
                             f"'{GENERATED}'), and emit would replace it; pass --force to replace it, or choose "
                             "another --out")
    created = [d for d in (out, *out.parents) if not os.path.lexists(d)]
    out.mkdir(parents=True, exist_ok=True)
    for name in files:
        remove_leftovers(out / name)
    remove_leftovers(out / "emit")
    work = None
    try:
        try:
            work = Path(tempfile.mkdtemp(prefix=temp_prefix(out / "emit"), suffix=TEMP_SUFFIX, dir=out))
        except OSError as e:
            raise OSError(e.errno, e.strerror or str(e), str(out)) from None
        for name, text in files.items():
            try:
                with open(work / name, "xb") as f:        # the umask's mode, as a plainly written file
                    f.write(marked(text).encode())
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:
                raise OSError(e.errno, e.strerror or str(e), str(out / name)) from None
        _install(work, out, list(files))
    except BaseException:
        for d in created:                                 # the folders this call made, deepest first
            if d == out and work is not None:
                shutil.rmtree(work, ignore_errors=True)
                work = None
            try:
                d.rmdir()                                 # only while empty: never another's file
            except OSError:
                break
        raise
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    return present


def _install(work: Path, out: Path, names: list) -> None:
    """Rename work/<name> to out/<name> for every name; on a failure, put back the files
    replaced so far (kept as work/<name>.old, a hard link, or the file itself moved there where
    the file system has no links) and remove those added, then raise naming the target."""
    done = []                                                # (name, its old file in `work` or None)
    try:
        for name in names:
            target, old = out / name, None
            if os.path.lexists(target):
                old = work / f"{name}.old"
                try:
                    os.link(target, old, follow_symlinks=False)
                except OSError:
                    os.replace(target, old)
            done.append((name, old))
            try:
                os.replace(work / name, target)
            except OSError as e:
                raise OSError(e.errno, e.strerror or str(e), str(target)) from None
    except BaseException:
        for name, old in reversed(done):
            with contextlib.suppress(OSError):
                if old is not None:
                    os.replace(old, out / name)
                elif os.path.lexists(work / name):           # never renamed: nothing of ours there
                    continue
                else:
                    os.unlink(out / name)
        raise


def _shareable(mode: int) -> int:
    """`mode` less the process umask: what a plainly created file would get."""
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def tables_text(comment: str, include: str, tables: dict) -> str:
    """A shared tables file (`es_tables.c` and the like): `comment`, `#include "<include>"` and
    each table of `tables` ({C name: int16 values}) as a global const array."""
    return (comment + f'#include "{include}"\n\n'
            + "".join(_arr("int16_t", name, values, static=False) for name, values in tables.items()))


TABLES = tables_text("/* edgeseq: the sigmoid and tanh tables every emitted model reads (2049 Q15 knots over [-8, 8]).\n"
                     "   Compile this file once per firmware, whatever the number of models. */\n",
                     "es_kernels.h", {"es_sigmoid_q15": SIGMOID, "es_tanh_q15": TANH})


def _same_file(a, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def write_model(m, out, p: str, h: str, c: str, shared: dict, protect, force: bool, sizes: dict) -> dict:
    """Write the model's header `h` and source `c`, the `shared` files ({name: text}: kernels
    and tables, the same for every model) and the host example (built with every `*tables.c`
    of `shared`) into `out`, all or nothing (`write_emitted`). Returns emit's dict: path,
    prefix, files, source bytes, `sizes` (as given), the readings' fractional bits and the
    files replaced."""
    tables = " ".join(name for name in shared if name.endswith("tables.c"))
    if model_decision(m) is not None:
        shared = {**shared, "es_decide_q15.h": DECIDE}
    if model_anomaly(m) is not None:
        shared = {**shared, "es_decide_q15.h": DECIDE, "es_anomaly_q8.h": ANOMALY}
    files = {f"{p}_model.h": h, f"{p}_model.c": c, **shared,
             f"{p}_example.c": EXAMPLE.format(p=p, P=p.upper()).replace("es_tables.c", tables)}
    replaced = write_emitted(out, files, protect, force)
    if getattr(m, "asinh", None) is not None:              # an input transform: its threshold table's flash
        sizes = {**sizes, "reading_table_bytes": int(4 * np.asarray(m.asinh.thr).size)}
    return {"path": str(out), "prefix": p, "files": list(files), "source_bytes": len(c.encode()) + len(h.encode()),
            **sizes, "in_frac": [int(k) for k in np.asarray(m.in_frac)], "replaced": replaced}
