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

/* LayerNormalization over the last axis, as the graph's: (x - mean) / sqrt(var + eps) g + b */
ES_F_INLINE void es_s_layernorm(const float *ES_F_RESTRICT x, int n, const float *g, const float *b, float eps,
                                float *ES_F_RESTRICT out) {
  const float mean = es_s_sum(x, n, 0.0f, 1) / (float)n;
  const float sd = sqrtf(es_s_sum(x, n, mean, 2) / (float)n + eps);
  int k;
  for (k = 0; k < n; k++) out[k] = (x[k] - mean) / sd * g[k] + b[k];
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

#endif /* ES_SSM_H */
