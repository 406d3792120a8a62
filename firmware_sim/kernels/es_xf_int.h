/* edgeseq kernels of the integer-only windowed Transformer step (firmware_sim/intxf.py computes the
   same integers): the KV ring's write, one head's attention (int16 dot products, integer softmax,
   the weighted sum of values) and GELU. C99, 32-bit arithmetic only, no float, no libm, no malloc;
   LayerNorm is es_ssm_int.h's and the products are es_kernels.h's. With the DSP extension the dot
   products run on SMLAD over int16 pairs (the cache rows and the weights are 4-byte aligned). */
#ifndef ES_XF_INT_H
#define ES_XF_INT_H
#include "es_ssm_int.h"

/* defined once in es_xf_tables.c: exp(x) over [-16, 0] and Phi(x) (the normal CDF) over [-8, 8],
   2049 Q15 knots each */
extern const int16_t es_exp_q15[2049];
extern const int16_t es_phi_q15[2049];

#define ES_EXP_SPAN 65536           /* 16 in Q12: exp is read over [-16, 0] */
#define ES_XF_BIAS_CAP (1 << 30)    /* ALiBi's bias at most, and the biased score at least its negative */

/* sum_k a[k] b[k] over n (even) int16 pairs; a and b 4-byte aligned */
static inline int32_t es_k_dot16(const int16_t *a, const int16_t *b, int n) {
  int32_t acc = 0;
  int k = 0;
#if ES_DSP
  for (; k + 4 <= n; k += 4) {
    int32_t a0, a1, b0, b1;           /* int16 pairs as the signed words __smlad takes */
    ES_MEMCPY(&a0, a + k, 4);
    ES_MEMCPY(&b0, b + k, 4);
    ES_MEMCPY(&a1, a + k + 2, 4);
    ES_MEMCPY(&b1, b + k + 2, 4);
    acc = __smlad(a0, b0, acc);
    acc = __smlad(a1, b1, acc);
  }
  if (k < n) {
    int32_t a0, b0;
    ES_MEMCPY(&a0, a + k, 4);
    ES_MEMCPY(&b0, b + k, 4);
    acc = __smlad(a0, b0, acc);
  }
#else
  for (; k < n; k += 2) acc += a[k] * b[k] + a[k + 1] * b[k + 1];
#endif
  return acc;
}

/* floor(2^30 / d) for 2^14 < d < 2^30 (the quotient has at most 16 bits): the divide instruction
   where the core has one, else shift and subtract (no helper) */
static inline int32_t es_k_recip30(uint32_t d) {
#if defined(__ARM_FEATURE_IDIV) || !defined(__arm__)
  return (int32_t)(((uint32_t)1 << 30) / d);
#else
  uint32_t q = 0, r = (uint32_t)1 << 14;       /* 2^30 >> 16: the numerator's bits above the quotient's */
  int i;
  for (i = 15; i >= 0; i--) {
    r <<= 1;
    if (r >= d) {
      r -= d;
      q |= (uint32_t)1 << i;
    }
  }
  return (int32_t)q;
#endif
}

/* exp(d / 4096) in Q15 for d <= 0, from es_exp_q15 (d clamped to [-16, -1/4096]), interpolated */
static inline int32_t es_k_exp(int32_t d) {
  int32_t u = (d < -ES_EXP_SPAN ? -ES_EXP_SPAN : (d > -1 ? -1 : d)) + ES_EXP_SPAN;
  int32_t i = u >> ES_LUT_SHIFT, f = u & ((1 << ES_LUT_SHIFT) - 1);
  return (int32_t)es_exp_q15[i] + ((((int32_t)es_exp_q15[i + 1] - (int32_t)es_exp_q15[i]) * f) >> ES_LUT_SHIFT);
}

/* The cache rows of this reading: from qkv (Q12, [q | k | v], d channels each, heads of hs),
   q16 = clamp(round(q x qm / 2^qs), +-qlim) (so that q16.k16 is the score with 12 + j fractional
   bits) and the key row k >> kk (int16, saturating), each head padded to hs_p (even) channels;
   the value column v >> kv at `slot` of vt ([d][w_p]). */
static inline void es_k_xf_write(const int32_t *qkv, int d, int heads, int hs, int hs_p, int32_t qm, int32_t qs,
                                 int32_t qlim, int kk, int kv, int16_t *q16, int16_t *krow, int16_t *vt, int w_p,
                                 int slot) {
  int h, c;
  for (h = 0; h < heads; h++) {
    for (c = 0; c < hs; c++) {
      q16[h * hs_p + c] = (int16_t)es_k_clamp(es_k_requant(qkv[h * hs + c], qm, qs), -qlim, qlim);
      krow[h * hs_p + c] = (int16_t)ES_SAT16(qkv[d + h * hs + c] >> kk);
    }
    for (; c < hs_p; c++) q16[h * hs_p + c] = krow[h * hs_p + c] = 0;
  }
  for (c = 0; c < d; c++) vt[c * w_p + slot] = (int16_t)ES_SAT16(qkv[2 * d + c] >> kv);
}

/* One head over the n rows 0..n-1 of the ring: scores q.k (k rows ldk apart, 12 + j fractional
   bits), less ALiBi's recency bias where slope > 0 (the row d readings back, d = slot - t mod w:
   slope x d, 2^30 past d > dcap; the biased score clamped to -2^30), softmax (score minus the
   row maximum, >> j to Q12, exp by table, weights (e R + 2^14) >> 15 with R = floor(2^30 / sum
   e)), then y[c] = sum_t p[t] vt[c][t] for the hs channels (columns ldv apart). sc: n int32, p:
   n rounded up to even int16 (4-byte aligned) of scratch. */
ES_INLINE void es_k_xf_head(const int16_t *q, const int16_t *k, int ldk, const int16_t *vt, int ldv, int n, int hs,
                            int hs_p, int j, int32_t slope, int32_t dcap, int slot, int w, int32_t *sc, int16_t *p,
                            int32_t *y) {
  int32_t mx = 0, total = 0, r;
  int t, c, n2 = (n + 1) & ~1;
  for (t = 0; t < n; t++) {
    int32_t a = es_k_dot16(q, k + t * ldk, hs_p);
    if (slope > 0) {
      int d = slot - t < 0 ? slot - t + w : slot - t;
      int32_t b = d > dcap ? ES_XF_BIAS_CAP : slope * d;
      a = a - b < -ES_XF_BIAS_CAP ? -ES_XF_BIAS_CAP : a - b;
    }
    sc[t] = a;
    if (t == 0 || a > mx) mx = a;
  }
  for (t = 0; t < n; t++) {
    int32_t e = es_k_exp((sc[t] - mx) >> j);
    sc[t] = e;
    total += e;
  }
  r = es_k_recip30((uint32_t)total);
  for (t = 0; t < n; t++) {
    int32_t wt = (sc[t] * r + (1 << 14)) >> 15;
    p[t] = (int16_t)(wt > 32767 ? 32767 : wt);
  }
  if (n < n2) p[n] = 0;
  for (c = 0; c < hs; c++) y[c] = es_k_dot16(p, vt + c * ldv, n2);
}

/* GELU(h) = h x Phi(h) (Q12), as the next product's int8 input: clamp(round(g x m / 2^s) + zp),
   zeros to n_pad */
static inline void es_k_xf_gelu(const int32_t *h, int n, int n_pad, int32_t m, int32_t s, int32_t zp, int8_t *a) {
  int k;
  for (k = 0; k < n; k++) {
    int32_t g = es_k_mulq15(h[k], es_k_lut(es_phi_q15, h[k]));
    a[k] = (int8_t)ES_SAT8(es_k_requant(g, m, s) + zp);
  }
  for (; k < n_pad; k++) a[k] = 0;
}

#endif /* ES_XF_INT_H */
