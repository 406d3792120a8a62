/* edgeseq kernels of the state-space step (edgeseq.models.ssm, exported by export/step.py's
   SSMStep) for the host backend, float32 and static int8, batched over streams by _es_ssm.c.

   Per layer, v = LayerNorm(u):
     x = P_x(v), g = P_g(v) (selective: δ = P_δ(v))
     fixed:      s' = decay ⊙ s + x                    (1 - a folded into P_x by the export)
     selective:  a = exp(-λ ⊙ softplus(δ)), s' = a ⊙ s + (1 - a) ⊙ x
     u' = (u + P_o((P_r(s') + D ⊙ v) ⊙ SiLU(g))) + b_out
   then LayerNorm and the head P_h. Every P is an es_s_proj_t: a float product (float32
   models), or the arithmetic of onnxruntime's QDQ int8 graph (static int8 models):
     - a MatMul whose input and output carry QuantizeLinear/DequantizeLinear pairs (which
       onnxruntime fuses into QLinearMatMul): the input quantized to int8 (x / scale, rounded
       half to even, saturated), int8 x int8 products summed exactly (float32 holds every
       partial sum while K x 255 x max|w| < 2^24; ssm.py checks it and otherwise binds the
       dequantized form below), the sum scaled by (a_scale x w_scale / y_scale) as float32,
       rounded and saturated to int8 and dequantized: the same integers as onnxruntime's;
     - a Gemm (the input projection and the head, which onnxruntime runs as float products of
       dequantized values): the input quantized and dequantized, dequantized weights and bias,
       float products, the output quantized and dequantized.
   The decay, the state update, the layer norms, SiLU and the state between calls stay
   float32 in both, as in the graph. exp and sigmoid are es_float.h's; log1p is a series.
   No allocation: the caller owns every buffer. */
#ifndef ES_SSM_H
#define ES_SSM_H
#include "es_float.h"

#define ES_S_IN_FLOAT 0             /* the input as it is */
#define ES_S_IN_FQ 1                /* quantized and dequantized: (q - z) x scale */
#define ES_S_IN_INT 2               /* quantized, the zero point taken off: q - z (an integer product) */

/* y[o] = post[o] + OUT(m[o] x (bias[o] + sum_k IN(a)[k] W[k][o])), o < out; m NULL: 1;
   OUT: the value itself, or with out_q: (sat8(round(t / out_d) + out_z) - out_z) x out_s;
   post NULL: 0. */
typedef struct {
  es_f_dense_t f;                   /* W [K][np], bias [np]: one block of all np columns */
  int32_t blk[4];
  int K, out;
  int in_mode;                      /* ES_S_IN_* */
  float in_s, in_z;
  const float *m, *post;
  int out_q;
  float out_d, out_z, out_s;
  /* an exact integer product (ES_S_IN_INT, integer weights, no bias) where the host runs int8
     dot products: W as int8 in words of four inputs [k4][np], and per column
     (z + 128) x its weights' sum (the inputs run as unsigned q + 128); NULL otherwise */
  int32_t *vw, *vcorr;
  int k4;
  int exact;                        /* ES_S_IN_INT, integer weights, no bias: integer sums, exact in float */
} es_s_proj_t;

/* round half to even for |v| <= 2^22 (the default rounding mode; no -ffast-math) */
ES_F_INLINE float es_s_round(float v) { return (v + 12582912.0f) - 12582912.0f; }

/* QuantizeLinear to int8 (scale s, zero point z) less z, times dq: onnxruntime's order
   (divide, saturate, round half to even); NaN stays NaN */
ES_F_INLINE void es_s_quantize(const float *ES_F_RESTRICT x, int n, float s, float z, float dq,
                               float *ES_F_RESTRICT out) {
  const float lo = -128.0f - z, hi = 127.0f - z;
  int k;
  for (k = 0; k < n; k++) {
    float t = x[k] / s;
    t = t < lo ? lo : t;
    t = t > hi ? hi : t;
    out[k] = es_s_round(t) * dq;
  }
}

/* the output stage of one row: m, OUT and post (see es_s_proj_t) */
ES_F_INLINE void es_s_out(const es_s_proj_t *p, float *ES_F_RESTRICT y) {
  const int n = p->out;
  const float *ES_F_RESTRICT m = p->m, *ES_F_RESTRICT post = p->post;
  int k;
  if (p->out_q) {
    const float lo = -128.0f - p->out_z, hi = 127.0f - p->out_z, d = p->out_d, s = p->out_s;
    if (m && d == 1.0f) {             /* QLinearMatMul: the sum scaled once, no division */
      for (k = 0; k < n; k++) {
        float t = y[k] * m[k];
        t = t < lo ? lo : t;
        t = t > hi ? hi : t;
        y[k] = es_s_round(t) * s;     /* stored before the bias is added: no fused multiply-add, */
      }                               /* the dequantized value rounded as the graph rounds it */
    } else {
      if (m)
        for (k = 0; k < n; k++) y[k] *= m[k];
      for (k = 0; k < n; k++) {
        float t = y[k] / d;
        t = t < lo ? lo : t;
        t = t > hi ? hi : t;
        y[k] = es_s_round(t) * s;
      }
    }
  } else if (m) {
    for (k = 0; k < n; k++) y[k] *= m[k];
  }
  if (post)
    for (k = 0; k < n; k++) y[k] += post[k];
}

#if defined(__GNUC__) && !defined(ES_NO_VECTOR_EXT)
/* one row of an exact integer product (es_s_proj_t.exact): y[0 .. np) = b + sum over k of
   a[k] W[k][:] in four partial sums (k mod 4), added up at the end. Every partial sum is an
   exact integer, so the result is the one-chain sum's to the bit, at a quarter of its chain of
   dependent multiply-adds (what one stream waits on). */
ES_F_INLINE void es_s_exact_row(const float *ES_F_RESTRICT a, int K, const float *ES_F_RESTRICT w, int np,
                                const float *ES_F_RESTRICT b, float *ES_F_RESTRICT y) {
  int j, k;
  for (j = 0; j < np; j += ES_F_NB) {
    const es_v8 z = {0};
    es_v8 p0 = es_v8_load(b + j), q0 = es_v8_load(b + j + 8), p1 = z, q1 = z, p2 = z, q2 = z, p3 = z, q3 = z;
    const float *wj = w + j;
    for (k = 0; k + 4 <= K; k += 4) {
      const float *w0 = wj + (size_t)k * np;
      p0 += a[k] * es_v8_load(w0), q0 += a[k] * es_v8_load(w0 + 8);
      p1 += a[k + 1] * es_v8_load(w0 + np), q1 += a[k + 1] * es_v8_load(w0 + np + 8);
      p2 += a[k + 2] * es_v8_load(w0 + 2 * np), q2 += a[k + 2] * es_v8_load(w0 + 2 * np + 8);
      p3 += a[k + 3] * es_v8_load(w0 + 3 * np), q3 += a[k + 3] * es_v8_load(w0 + 3 * np + 8);
    }
    for (; k < K; k++) p0 += a[k] * es_v8_load(wj + (size_t)k * np), q0 += a[k] * es_v8_load(wj + (size_t)k * np + 8);
    es_v8_store(y + j, (p0 + p1) + (p2 + p3));
    es_v8_store(y + j + 8, (q0 + q1) + (q2 + q3));
  }
}
#define ES_S_EXACT_ROW 1
#else
#define ES_S_EXACT_ROW 0
#endif

/* y[r][0 .. out) = P(a[r][0 .. K)) for rows r < rows (row strides lda, ldy); qa: rows x K
   floats for the quantized inputs, ap: rows x K for es_f_dense's packed inputs */
ES_F_INLINE void es_s_proj(const es_s_proj_t *p, const float *a, int lda, int rows, float *qa, float *ap, float *y,
                           int ldy) {
  const int K = p->K;
  int r;
  if (p->in_mode != ES_S_IN_FLOAT) {
    const float dq = p->in_mode == ES_S_IN_FQ ? p->in_s : 1.0f;
    for (r = 0; r < rows; r++) es_s_quantize(a + (size_t)r * lda, K, p->in_s, p->in_z, dq, qa + (size_t)r * K);
    a = qa, lda = K;
  }
#if ES_S_EXACT_ROW
  if (p->exact) {                   /* full tiles of ES_F_MB rows as es_f_dense runs them, then single rows */
    const int full = rows - rows % ES_F_MB;
    if (full) es_f_dense(&p->f, K, a, lda, a, lda, full, ap, y, ldy);
    for (r = full; r < rows; r++) es_s_exact_row(a + (size_t)r * lda, K, p->f.w, p->f.np, p->f.b, y + (size_t)r * ldy);
  } else
#endif
    es_f_dense(&p->f, K, a, lda, a, lda, rows, ap, y, ldy);
  if (p->m || p->out_q || p->post)
    for (r = 0; r < rows; r++) es_s_out(p, y + (size_t)r * ldy);
}

/* sum over k < n of (x[k] - c)^p, p 1 or 2, in eight lanes (k mod 8) added up in a fixed order
   at the end: one chain of dependent adds would cost more than the products at these widths,
   and the order is the same for a row wherever it lies (streams stay independent) */
ES_F_INLINE float es_s_sum(const float *ES_F_RESTRICT x, int n, float c, int p) {
  float lane[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  int k, j;
  for (k = 0; k + 8 <= n; k += 8)
    for (j = 0; j < 8; j++) {
      float d = x[k + j] - c;
      lane[j] += p == 2 ? d * d : d;
    }
  for (j = 0; k < n; k++, j++) {
    float d = x[k] - c;
    lane[j] += p == 2 ? d * d : d;
  }
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

/* LayerNormalization over the last axis, as the graph's: (x - mean) / sqrt(var + eps) g + b, the
   division as a multiplication by the one reciprocal (within a rounding of the graph's) */
ES_F_INLINE void es_s_layernorm(const float *ES_F_RESTRICT x, int n, const float *g, const float *b, float eps,
                                float *ES_F_RESTRICT out) {
  const float mean = es_s_sum(x, n, 0.0f, 1) / (float)n;
  const float rs = 1.0f / sqrtf(es_s_sum(x, n, mean, 2) / (float)n + eps);    /* one division, not n */
  int k;
  for (k = 0; k < n; k++) out[k] = (x[k] - mean) * rs * g[k] + b[k];
}

/* log(1 + t) for 0 <= t <= 1: 2 atanh(z), z = t / (2 + t) <= 1/3, to float32 precision */
ES_F_INLINE float es_s_log1p01(float t) {
  float z = t / (2.0f + t), w = z * z;
  float p = ((((((1.0f / 13) * w + 1.0f / 11) * w + 1.0f / 9) * w + 1.0f / 7) * w + 1.0f / 5) * w + 1.0f / 3) * w;
  return 2.0f * z + 2.0f * z * p;
}

/* the graph's Where(δ > thr, δ, Softplus(δ)), Softplus(δ) = max(δ, 0) + log1p(exp(-|δ|)) */
ES_F_INLINE float es_s_softplus(float d, float thr) {
  float sp = (d > 0.0f ? d : 0.0f) + es_s_log1p01(es_f_exp(-fabsf(d)));
  return d > thr ? d : sp;
}

/* fixed decay: s' = decay ⊙ s + x */
ES_F_INLINE void es_s_fixed(const float *ES_F_RESTRICT decay, const float *ES_F_RESTRICT s,
                            const float *ES_F_RESTRICT x, int n, float *ES_F_RESTRICT out) {
  int k;
  for (k = 0; k < n; k++) out[k] = decay[k] * s[k] + x[k];
}

/* selective: a = exp(nrate ⊙ softplus(δ)) (nrate = -λ), s' = a ⊙ s + (1 - a) ⊙ x */
ES_F_INLINE void es_s_selective(const float *ES_F_RESTRICT nrate, float thr, const float *ES_F_RESTRICT d,
                                const float *ES_F_RESTRICT s, const float *ES_F_RESTRICT x, int n,
                                float *ES_F_RESTRICT out) {
  int k;
  for (k = 0; k < n; k++) {
    float a = es_f_exp(nrate[k] * es_s_softplus(d[k], thr));
    out[k] = a * s[k] + (1.0f - a) * x[k];
  }
}

/* the gated readout: m = (r + skip ⊙ v) ⊙ SiLU(g) */
ES_F_INLINE void es_s_gate(const float *ES_F_RESTRICT r, const float *ES_F_RESTRICT skip,
                           const float *ES_F_RESTRICT v, const float *ES_F_RESTRICT g, int n,
                           float *ES_F_RESTRICT out) {
  int k;
  for (k = 0; k < n; k++) out[k] = (r[k] + skip[k] * v[k]) * (g[k] * es_f_sigmoid(g[k]));
}

/* the residual: u = (u + o) + b */
ES_F_INLINE void es_s_residual(float *ES_F_RESTRICT u, const float *ES_F_RESTRICT o, const float *ES_F_RESTRICT b,
                               int n) {
  int k;
  for (k = 0; k < n; k++) u[k] = (u[k] + o[k]) + b[k];
}

/* -- sixteen streams at a time, one per vector lane --------------------------------------------
   At many streams a chunk of ES_S_L streams runs with its activations stored feature-major,
   [feature][ES_S_L] (lane i = stream i): the products are register tiles of ES_S_TO outputs x
   16 streams over all the inputs, and every norm, gate and decay runs a whole vector per
   feature, with no per-row loops or horizontal sums. Each lane computes what es_s_proj and the
   row kernels above compute for its stream, operation for operation (bias first, then one
   multiply-add per input in increasing order; the norm's sums in the same eight partial sums,
   added up in the same order), so a stream's results do not depend on which path ran it.
   GNU vector extensions only; other compilers run every stream through the rows. */
#if defined(__GNUC__) && !defined(ES_NO_VECTOR_EXT)
#define ES_S_LANES 1
#define ES_S_L 16                   /* streams per lane chunk */
#define ES_S_TO 8                   /* outputs per product tile: widths are padded to 16 */
typedef float es_s_v __attribute__((vector_size(4 * ES_S_L)));
typedef int32_t es_s_vi __attribute__((vector_size(4 * ES_S_L)));

/* x in every lane (as a shuffle of lane 0: gcc builds a vector of sixteen copies lane by lane) */
ES_F_INLINE es_s_v es_s_splat(float x) {
  es_s_v v = {0};
  v[0] = x;
  return __builtin_shuffle(v, (es_s_vi){0});
}
ES_F_INLINE es_s_v es_s_vload(const float *p) {
  es_s_v v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* t < lo ? lo : t, then t > hi ? hi : t, lane by lane (NaN stays NaN) */
ES_F_INLINE es_s_v es_s_vclamp(es_s_v t, float lo, float hi) {
  const es_s_v l = es_s_splat(lo), h = es_s_splat(hi);
  es_s_vi m = t < l;
  t = (es_s_v)(((es_s_vi)t & ~m) | ((es_s_vi)l & m));
  m = t > h;
  return (es_s_v)(((es_s_vi)t & ~m) | ((es_s_vi)h & m));
}

/* y[o] = bias[o] + sum over k < K of w[k][o] a[k], o < ES_S_TO */
ES_F_INLINE void es_s_ltile(const es_s_v *ES_F_RESTRICT a, int K, const float *ES_F_RESTRICT w, int ldw,
                            const float *ES_F_RESTRICT b, es_s_v *ES_F_RESTRICT y) {
  es_s_v c0 = es_s_splat(b[0]), c1 = es_s_splat(b[1]), c2 = es_s_splat(b[2]), c3 = es_s_splat(b[3]);
  es_s_v c4 = es_s_splat(b[4]), c5 = es_s_splat(b[5]), c6 = es_s_splat(b[6]), c7 = es_s_splat(b[7]);
  int k;
  for (k = 0; k < K; k++) {
    const float *wk = w + (size_t)k * ldw;
    const es_s_v ak = a[k];
    c0 += wk[0] * ak, c1 += wk[1] * ak, c2 += wk[2] * ak, c3 += wk[3] * ak;
    c4 += wk[4] * ak, c5 += wk[5] * ak, c6 += wk[6] * ak, c7 += wk[7] * ak;
  }
  y[0] = c0, y[1] = c1, y[2] = c2, y[3] = c3, y[4] = c4, y[5] = c5, y[6] = c6, y[7] = c7;
}

/* es_s_quantize, lane-wise */
ES_F_INLINE void es_s_lquantize(const es_s_v *ES_F_RESTRICT x, int n, float s, float z, float dq,
                                es_s_v *ES_F_RESTRICT out) {
  const float lo = -128.0f - z, hi = 127.0f - z;
  int k;
  for (k = 0; k < n; k++) out[k] = ((es_s_vclamp(x[k] / s, lo, hi) + 12582912.0f) - 12582912.0f) * dq;
}

/* es_s_out, lane-wise: y[o] for o < out */
ES_F_INLINE void es_s_lout(const es_s_proj_t *p, es_s_v *ES_F_RESTRICT y) {
  const int n = p->out;
  const float *m = p->m, *post = p->post;
  int k;
  if (p->out_q) {
    const float lo = -128.0f - p->out_z, hi = 127.0f - p->out_z, d = p->out_d, sc = p->out_s;
    for (k = 0; k < n; k++) {
      es_s_v t = y[k];
      if (m && d == 1.0f) {
        t = t * m[k];
      } else {
        if (m) t = t * m[k];
        t = t / d;
      }
      y[k] = ((es_s_vclamp(t, lo, hi) + 12582912.0f) - 12582912.0f) * sc;
    }
  } else if (m) {
    for (k = 0; k < n; k++) y[k] = y[k] * m[k];
  }
  if (post)
    for (k = 0; k < n; k++) y[k] = y[k] + post[k];
}

/* the same for two chunks at once, a0 -> y0 and a1 -> y1: each output's weight read once for
   both (16 accumulators: for machines with 32 vector registers) */
ES_F_INLINE void es_s_ltile2(const es_s_v *ES_F_RESTRICT a0, const es_s_v *ES_F_RESTRICT a1, int K,
                             const float *ES_F_RESTRICT w, int ldw, const float *ES_F_RESTRICT b,
                             es_s_v *ES_F_RESTRICT y0, es_s_v *ES_F_RESTRICT y1) {
  es_s_v c0 = es_s_splat(b[0]), c1 = es_s_splat(b[1]), c2 = es_s_splat(b[2]), c3 = es_s_splat(b[3]);
  es_s_v c4 = es_s_splat(b[4]), c5 = es_s_splat(b[5]), c6 = es_s_splat(b[6]), c7 = es_s_splat(b[7]);
  es_s_v d0 = c0, d1 = c1, d2 = c2, d3 = c3, d4 = c4, d5 = c5, d6 = c6, d7 = c7;
  int k;
  for (k = 0; k < K; k++) {
    const float *wk = w + (size_t)k * ldw;
    const es_s_v ak = a0[k], bk = a1[k];
    float t;
    t = wk[0], c0 += t * ak, d0 += t * bk;
    t = wk[1], c1 += t * ak, d1 += t * bk;
    t = wk[2], c2 += t * ak, d2 += t * bk;
    t = wk[3], c3 += t * ak, d3 += t * bk;
    t = wk[4], c4 += t * ak, d4 += t * bk;
    t = wk[5], c5 += t * ak, d5 += t * bk;
    t = wk[6], c6 += t * ak, d6 += t * bk;
    t = wk[7], c7 += t * ak, d7 += t * bk;
  }
  y0[0] = c0, y0[1] = c1, y0[2] = c2, y0[3] = c3, y0[4] = c4, y0[5] = c5, y0[6] = c6, y0[7] = c7;
  y1[0] = d0, y1[1] = d1, y1[2] = d2, y1[3] = d3, y1[4] = d4, y1[5] = d5, y1[6] = d6, y1[7] = d7;
}

/* es_s_proj, lane-wise, for nch (1 or 2) chunks: y[h][0 .. out) = P(a[h][0 .. K)), a[h] already
   quantized (es_s_lquantize) where the projection quantizes its input. y[h] holds out rounded up
   to ES_S_TO (the padding columns of W and bias are zero). */
typedef struct {
  int wide;                         /* es_s_ltile2 for two chunks */
  /* the int8 dot products of a projection with vw (see es_s_proj_t), or NULL: y[h] from the
     quantized a[h], h < nch; u: scratch of 2 x k4 x ES_S_L words */
  void (*dot8)(const es_s_proj_t *p, es_s_v *const *a, es_s_v *const *y, int nch, int32_t *u);
  int32_t *u;
} es_s_lctx_t;

ES_F_INLINE void es_s_lproj_q(const es_s_proj_t *p, es_s_v *const *a, es_s_v *const *y, int nch,
                              const es_s_lctx_t *cx) {
  int o, h;
  if (p->vw && cx->dot8) {
    cx->dot8(p, a, y, nch, cx->u);
  } else if (nch == 2 && cx->wide) {
    for (o = 0; o < p->out; o += ES_S_TO)
      es_s_ltile2(a[0], a[1], p->K, p->f.w + o, p->f.np, p->f.b + o, y[0] + o, y[1] + o);
  } else {
    for (h = 0; h < nch; h++)
      for (o = 0; o < p->out; o += ES_S_TO) es_s_ltile(a[h], p->K, p->f.w + o, p->f.np, p->f.b + o, y[h] + o);
  }
  if (p->m || p->out_q || p->post)
    for (h = 0; h < nch; h++) es_s_lout(p, y[h]);
}

/* es_s_lquantize of each chunk's a[h] as p quantizes its input, into qa[h] */
ES_F_INLINE void es_s_lquantize_in(const es_s_proj_t *p, es_s_v *const *a, es_s_v *const *qa, int nch) {
  int h;
  for (h = 0; h < nch; h++)
    es_s_lquantize(a[h], p->K, p->in_s, p->in_z, p->in_mode == ES_S_IN_FQ ? p->in_s : 1.0f, qa[h]);
}

/* es_s_proj, lane-wise; qa[h]: K vectors of scratch */
ES_F_INLINE void es_s_lproj(const es_s_proj_t *p, es_s_v *const *a, es_s_v *const *qa, es_s_v *const *y, int nch,
                            const es_s_lctx_t *cx) {
  if (p->in_mode != ES_S_IN_FLOAT) {
    es_s_lquantize_in(p, a, qa, nch);
    a = qa;
  }
  es_s_lproj_q(p, a, y, nch, cx);
}

/* a 16 x 16 block transposed in place: its off-diagonal blocks of 8, then 4, 2 and 1 swapped */
static const es_s_vi es_s_t8lo = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
static const es_s_vi es_s_t8hi = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
static const es_s_vi es_s_t4lo = {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27};
static const es_s_vi es_s_t4hi = {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31};
static const es_s_vi es_s_t2lo = {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29};
static const es_s_vi es_s_t2hi = {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31};
static const es_s_vi es_s_t1lo = {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30};
static const es_s_vi es_s_t1hi = {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31};
#define ES_S_TSTAGE(d, lo, hi)                                                                   \
  for (i = 0; i < 16; i++)                                                                      \
    if (!(i & (d))) {                                                                           \
      es_s_v a = r[i], b = r[i + (d)];                                                          \
      r[i] = __builtin_shuffle(a, b, lo);                                                       \
      r[i + (d)] = __builtin_shuffle(a, b, hi);                                                 \
    }
ES_F_INLINE void es_s_transpose16(es_s_v *r) {
  int i;
  ES_S_TSTAGE(8, es_s_t8lo, es_s_t8hi)
  ES_S_TSTAGE(4, es_s_t4lo, es_s_t4hi)
  ES_S_TSTAGE(2, es_s_t2lo, es_s_t2hi)
  ES_S_TSTAGE(1, es_s_t1lo, es_s_t1hi)
}
#undef ES_S_TSTAGE

/* rows [ES_S_L][ld] -> lanes [n][ES_S_L], and back */
ES_F_INLINE void es_s_to_lanes(const float *ES_F_RESTRICT x, size_t ld, int n, es_s_v *ES_F_RESTRICT out) {
  int i, k = 0;
  for (; k + 16 <= n; k += 16) {
    for (i = 0; i < 16; i++) out[k + i] = es_s_vload(x + i * ld + k);
    es_s_transpose16(out + k);
  }
  for (i = 0; i < ES_S_L; i++) {
    int j;
    for (j = k; j < n; j++) out[j][i] = x[i * ld + j];
  }
}
ES_F_INLINE void es_s_to_rows(const es_s_v *ES_F_RESTRICT x, int n, float *ES_F_RESTRICT out, size_t ld) {
  int i, k = 0;
  for (; k + 16 <= n; k += 16) {
    es_s_v t[16];
    for (i = 0; i < 16; i++) t[i] = x[k + i];
    es_s_transpose16(t);
    for (i = 0; i < 16; i++) memcpy(out + i * ld + k, &t[i], sizeof t[i]);
  }
  for (i = 0; i < ES_S_L; i++) {
    int j;
    for (j = k; j < n; j++) out[i * ld + j] = x[j][i];
  }
}

/* es_s_sum, lane-wise (the same eight partial sums, k mod 8, added up in the same order) */
ES_F_INLINE es_s_v es_s_lsum(const es_s_v *ES_F_RESTRICT x, int n, es_s_v c, int p) {
  es_s_v l0 = {0}, l1 = {0}, l2 = {0}, l3 = {0}, l4 = {0}, l5 = {0}, l6 = {0}, l7 = {0}, d;
  int k;
#define ES_S_LSUM_ADD(l) (d = x[k++] - c, l += p == 2 ? d * d : d)
  for (k = 0; k + 8 <= n;) {
    ES_S_LSUM_ADD(l0), ES_S_LSUM_ADD(l1), ES_S_LSUM_ADD(l2), ES_S_LSUM_ADD(l3);
    ES_S_LSUM_ADD(l4), ES_S_LSUM_ADD(l5), ES_S_LSUM_ADD(l6), ES_S_LSUM_ADD(l7);
  }
  if (k < n) ES_S_LSUM_ADD(l0);
  if (k < n) ES_S_LSUM_ADD(l1);
  if (k < n) ES_S_LSUM_ADD(l2);
  if (k < n) ES_S_LSUM_ADD(l3);
  if (k < n) ES_S_LSUM_ADD(l4);
  if (k < n) ES_S_LSUM_ADD(l5);
  if (k < n) ES_S_LSUM_ADD(l6);
#undef ES_S_LSUM_ADD
  return ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7));
}

/* es_s_layernorm, lane-wise */
ES_F_INLINE void es_s_llayernorm(const es_s_v *ES_F_RESTRICT x, int n, const float *g, const float *b, float eps,
                                 es_s_v *ES_F_RESTRICT out) {
  const es_s_v mean = es_s_lsum(x, n, es_s_splat(0.0f), 1) / (float)n;
  float t[ES_S_L];
  es_s_v sd = es_s_lsum(x, n, mean, 2) / (float)n + eps;
  int k;
  memcpy(t, &sd, sizeof t);
  for (k = 0; k < ES_S_L; k++) t[k] = sqrtf(t[k]);
  memcpy(&sd, t, sizeof t);
  sd = 1.0f / sd;
  for (k = 0; k < n; k++) out[k] = (x[k] - mean) * sd * g[k] + b[k];
}

/* the normalised readings of ES_S_L streams (rows of F), as es_f_normalize */
ES_F_INLINE void es_s_lnormalize(const float *ES_F_RESTRICT x, int F, const float *mean, const float *std,
                                 es_s_v *ES_F_RESTRICT out) {
  int f;
  es_s_to_lanes(x, F, F, out);
  for (f = 0; f < F; f++) out[f] = (out[f] - mean[f]) / std[f];
}

ES_F_INLINE void es_s_lfixed(const float *ES_F_RESTRICT decay, const es_s_v *ES_F_RESTRICT s,
                             const es_s_v *ES_F_RESTRICT x, int n, es_s_v *ES_F_RESTRICT out) {
  int k;
  for (k = 0; k < n; k++) out[k] = decay[k] * s[k] + x[k];
}

/* each feature's lanes as a loop over floats, which the compiler vectorizes as it does the rows' */
ES_F_INLINE void es_s_lselective(const float *ES_F_RESTRICT nrate, float thr, const es_s_v *ES_F_RESTRICT d,
                                 const es_s_v *ES_F_RESTRICT s, const es_s_v *ES_F_RESTRICT x, int n,
                                 es_s_v *ES_F_RESTRICT out) {
  int k, i;
  for (k = 0; k < n; k++) {         /* the softplus first, into out: fewer live constants per loop */
    const float *ES_F_RESTRICT dk = (const float *)(const void *)(d + k);
    float *ES_F_RESTRICT ok = (float *)(void *)(out + k);
    for (i = 0; i < ES_S_L; i++) ok[i] = es_s_softplus(dk[i], thr);
  }
  for (k = 0; k < n; k++) {
    const float nr = nrate[k];
    const float *ES_F_RESTRICT sk = (const float *)(const void *)(s + k), *ES_F_RESTRICT xk =
        (const float *)(const void *)(x + k);
    float *ES_F_RESTRICT ok = (float *)(void *)(out + k);
    for (i = 0; i < ES_S_L; i++) {
      float a = es_f_exp(nr * ok[i]);
      ok[i] = a * sk[i] + (1.0f - a) * xk[i];
    }
  }
}

ES_F_INLINE void es_s_lgate(const es_s_v *ES_F_RESTRICT r, const float *ES_F_RESTRICT skip,
                            const es_s_v *ES_F_RESTRICT v, const es_s_v *ES_F_RESTRICT g, int n,
                            es_s_v *ES_F_RESTRICT out) {
  int k, i;
  for (k = 0; k < n; k++) {
    const float sk = skip[k];
    const float *ES_F_RESTRICT rk = (const float *)(const void *)(r + k), *ES_F_RESTRICT vk =
        (const float *)(const void *)(v + k), *ES_F_RESTRICT gk = (const float *)(const void *)(g + k);
    float *ES_F_RESTRICT ok = (float *)(void *)(out + k);
    for (i = 0; i < ES_S_L; i++) ok[i] = (rk[i] + sk * vk[i]) * (gk[i] * es_f_sigmoid(gk[i]));
  }
}

ES_F_INLINE void es_s_lresidual(es_s_v *ES_F_RESTRICT u, const es_s_v *ES_F_RESTRICT o, const float *ES_F_RESTRICT b,
                                int n) {
  int k;
  for (k = 0; k < n; k++) u[k] = (u[k] + o[k]) + b[k];
}

/* es_f_softmax, lane-wise: logits [C] -> probs [C]; returns a mask of the lanes whose logits
   are all finite (bit i: lane i), the only lanes whose probs it writes */
ES_F_INLINE unsigned es_s_lsoftmax(const es_s_v *ES_F_RESTRICT logits, int C, es_s_v *ES_F_RESTRICT probs) {
  es_s_v m = logits[0], s = {0};
  es_s_vi ok = (es_s_vi){0} == (es_s_vi){0};
  unsigned good = 0;
  int c, i;
  for (c = 0; c < C; c++) {
    es_s_v v = logits[c];
    es_s_vi bigger = v > m;
    ok &= (v - v) == es_s_splat(0.0f);
    m = (es_s_v)(((es_s_vi)v & bigger) | ((es_s_vi)m & ~bigger));
  }
  for (c = 0; c < C; c++) {
    const float *ES_F_RESTRICT lk = (const float *)(const void *)(logits + c), *ES_F_RESTRICT mk =
        (const float *)(const void *)&m;
    float *ES_F_RESTRICT pk = (float *)(void *)(probs + c);
    for (i = 0; i < ES_S_L; i++) pk[i] = es_f_exp(lk[i] - mk[i]);
    s += probs[c];
  }
  s = 1.0f / s;
  for (c = 0; c < C; c++) probs[c] *= s;
  for (i = 0; i < ES_S_L; i++) good |= (ok[i] != 0) << i;
  return good;
}
#else
#define ES_S_LANES 0
#endif

#endif /* ES_SSM_H */
