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
  /* 1 / in_s where the division-free quantization (es_ssm_avx2.h, ssm_recip_exact) gives x / in_s
     to the bit for every x, else 0 (the lanes then divide) */
  float in_r;
  const float *m, *post;
  int out_q;
  float out_d, out_z, out_s;
  /* an exact integer product (ES_S_IN_INT, integer weights, no bias) where the host runs int8
     dot products: W as int8 in words of four inputs [k4][np], and per column
     (z + 128) x its weights' sum (the inputs run as unsigned q + 128); NULL otherwise */
  int32_t *vw, *vcorr;
  int k4;
  /* the same where the host runs int16 pair products (AVX2's vpmaddwd): W in words of two
     inputs' int16 weights [k2][np], input 2k in the low half; the inputs run signed, q - z */
  int32_t *vw2;
  int k2;
  int exact;                        /* ES_S_IN_INT, integer weights, no bias: integer sums, exact in float */
  /* where its int8 output feeds the gate's SiLU or the selective decay and AVX2 runs the pairs: what
     each of the output's 256 codes gives there, tab[o][code] (code = the rounded output less its
     lowest value, -128 - out_z); the pairs' output stage then writes codes. NULL otherwise */
  float *tab;
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

/* fixed decay: s' = decay ⊙ s + x; T float for a row (es_s_fixed), a vector of ES_S_L lanes, one
   per stream, for a chunk (es_s_lfixed, es_ssm_lanes.h): the same operations either way */
#define ES_S_FIXED(name, T)                                                                         \
  ES_F_INLINE void name(const float *ES_F_RESTRICT decay, const T *ES_F_RESTRICT s, const T *ES_F_RESTRICT x, \
                        int n, T *ES_F_RESTRICT out) {                                             \
    int k;                                                                                          \
    for (k = 0; k < n; k++) out[k] = decay[k] * s[k] + x[k];                                        \
  }
ES_S_FIXED(es_s_fixed, float)

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

/* the residual: u = (u + o) + b; T as ES_S_FIXED's (es_s_residual, es_s_lresidual) */
#define ES_S_RESIDUAL(name, T)                                                                      \
  ES_F_INLINE void name(T *ES_F_RESTRICT u, const T *ES_F_RESTRICT o, const float *ES_F_RESTRICT b, int n) { \
    int k;                                                                                          \
    for (k = 0; k < n; k++) u[k] = (u[k] + o[k]) + b[k];                                            \
  }
ES_S_RESIDUAL(es_s_residual, float)

/* -- a chunk of streams at a time, one per vector lane -------------------------------------------
   At many streams a chunk of ES_S_L streams runs with its activations stored feature-major,
   [feature][ES_S_L] (lane i = stream i): the products are register tiles of ES_S_TO outputs x
   ES_S_L streams over all the inputs, and every norm, gate and decay runs a whole vector per
   feature, with no per-row loops or horizontal sums. Each lane computes what es_s_proj and the
   row kernels above compute for its stream, operation for operation (bias first, then one
   multiply-add per input in increasing order; the norm's sums in the same eight partial sums,
   added up in the same order), so a stream's results do not depend on which path ran it, nor on
   the chunk's width.

   es_ssm_lanes.h holds the lane kernels once, for ES_S_L streams a chunk, and is included once
   per width: 16 (one 512-bit register per feature, for hosts with AVX-512: x86-64 builds, chosen
   at run time) and 8 (one 256-bit register, or two 128-bit ones: every other host). A chunk as
   wide as two or four of the host's registers would spill the product tiles' accumulators to
   memory. Each name below is the width's own (es_s_v is es_s_v16 or es_s_v8 where ES_S_L is 16
   or 8). GNU vector extensions only; other compilers run every stream through the rows. */
#if defined(__GNUC__) && !defined(ES_NO_VECTOR_EXT)
#define ES_S_LANES 1
#define ES_S_TO 8                   /* outputs per product tile: widths are padded to 16 */
#define ES_S_CAT_(a, b) a##b
#define ES_S_CAT(a, b) ES_S_CAT_(a, b)
#define ES_S_LNAME(name) ES_S_CAT(name, ES_S_L)
#define es_s_v ES_S_LNAME(es_s_v)
#define es_s_vi ES_S_LNAME(es_s_vi)
#define es_s_splat ES_S_LNAME(es_s_splat)
#define es_s_vload ES_S_LNAME(es_s_vload)
#define es_s_vclamp ES_S_LNAME(es_s_vclamp)
#define es_s_ltile ES_S_LNAME(es_s_ltile)
#define es_s_lquantize ES_S_LNAME(es_s_lquantize)
#define es_s_lout ES_S_LNAME(es_s_lout)
#define es_s_lcodes ES_S_LNAME(es_s_lcodes)
#define es_s_ltile2 ES_S_LNAME(es_s_ltile2)
#define es_s_ltile2_6 ES_S_LNAME(es_s_ltile2_6)
#define es_s_ltile2_5 ES_S_LNAME(es_s_ltile2_5)
#define es_s_ltile2_4 ES_S_LNAME(es_s_ltile2_4)
#define es_s_lctx_t ES_S_LNAME(es_s_lctx_t)
#define es_s_lproj_q ES_S_LNAME(es_s_lproj_q)
#define es_s_lproj_qr ES_S_LNAME(es_s_lproj_qr)
#define es_s_lproj_residual ES_S_LNAME(es_s_lproj_residual)
#define es_s_lquantize_in ES_S_LNAME(es_s_lquantize_in)
#define es_s_lproj ES_S_LNAME(es_s_lproj)
#define es_s_lproj_group ES_S_LNAME(es_s_lproj_group)
#define es_s_transpose ES_S_LNAME(es_s_transpose)
#define es_s_to_lanes ES_S_LNAME(es_s_to_lanes)
#define es_s_to_rows ES_S_LNAME(es_s_to_rows)
#define es_s_lrows ES_S_LNAME(es_s_lrows)
#define es_s_lsum ES_S_LNAME(es_s_lsum)
#define es_s_llayernorm ES_S_LNAME(es_s_llayernorm)
#define es_s_lsum2 ES_S_LNAME(es_s_lsum2)
#define es_s_lrsd ES_S_LNAME(es_s_lrsd)
#define es_s_llayernorms ES_S_LNAME(es_s_llayernorms)
#define es_s_lnormalize ES_S_LNAME(es_s_lnormalize)
#define es_s_lfixed ES_S_LNAME(es_s_lfixed)
#define es_s_lselective ES_S_LNAME(es_s_lselective)
#define es_s_lgate ES_S_LNAME(es_s_lgate)
#define es_s_lresidual ES_S_LNAME(es_s_lresidual)
#define es_s_lsoftmax ES_S_LNAME(es_s_lsoftmax)
#define ssm_lanes ES_S_LNAME(ssm_lanes)
#if defined(__x86_64__) || defined(__i386__)
#define ES_S_HAVE16 1
#define ES_S_L 16
#include "es_ssm_lanes.h"
#undef ES_S_L
#else
#define ES_S_HAVE16 0
#endif
#define ES_S_L 8
#include "es_ssm_lanes.h"
#undef ES_S_L
#else
#define ES_S_LANES 0
#endif

#endif /* ES_SSM_H */
