/* edgeseq kernels of the integer-only state-space step (firmware_sim/intssm.py computes the same
   integers): LayerNorm in Q12, the fixed and the selective state update, and the gated output.
   C99, 32-bit arithmetic only, no float, no libm, no malloc; the products are es_kernels.h's. */
#ifndef ES_SSM_INT_H
#define ES_SSM_INT_H
#include "es_kernels.h"

/* defined once in es_ssm_tables.c: 1/sqrt(x) over [1, 4] (193 Q15 knots); softplus over [-8, 8]
   (2049 Q12 knots); 1 - exp(-z) over z in [0, 16] (2049 Q15 knots) */
extern const int16_t es_rsqrt_q15[193];
extern const int16_t es_softplus_q12[2049];
extern const int16_t es_decay_gain_q15[2049];

#define ES_S_LIMIT 1073741823       /* the state and its input stay within +-(2^30 - 1) */
#define ES_SOFTPLUS_LINEAR 32768    /* 8 in Q12: above it softplus(x) = x */

static inline int es_k_bitlen(uint32_t x) {
  int n = 0;
  while (x) {
    x >>= 1;
    n++;
  }
  return n;
}

/* d x 2^e for e >= 0 (no overflow: |d| x 2^e < 2^15), floor(d / 2^-e) otherwise */
static inline int32_t es_k_scale2(int32_t d, int e) { return e >= 0 ? d * ((int32_t)1 << e) : d >> -e; }

/* v = LayerNorm(u) over n channels, u and v Q12, n |u| < 2^30. c = {r = ceil(log2 n), e_cap,
   eps_cap}: the deviations n u - sum(u) (exact) are scaled by 2^e so the largest has 15 bits
   (e <= e_cap), their squares summed >> r, eps added at that scale (eps_cap >> 2(e_cap - e)), and
   1/sqrt of the sum read from es_rsqrt_q15 after scaling it into [2^28, 2^30) by a power of 4.
   gamma (Q12, times sqrt(n / 2^r)) and beta (Q12) per channel. */
static inline void es_k_layernorm(const int32_t *u, int n, const int32_t *c, const int32_t *gamma,
                                  const int32_t *beta, int32_t *v) {
  int32_t sum = 0, w, rs, lo;
  uint32_t maxd = 0, di;
  int k, e, j, sh, r = (int)c[0], drop;
  for (k = 0; k < n; k++) sum += u[k];
  for (k = 0; k < n; k++) {
    int32_t d = n * u[k] - sum;
    uint32_t ad = d < 0 ? (uint32_t)0 - (uint32_t)d : (uint32_t)d;
    if (ad > maxd) maxd = ad;
  }
  if (maxd == 0) {
    for (k = 0; k < n; k++) v[k] = beta[k];
    return;
  }
  e = 15 - es_k_bitlen(maxd);
  if (e > (int)c[1]) e = (int)c[1];
  w = 0;
  for (k = 0; k < n; k++) {
    int32_t t = es_k_scale2(n * u[k] - sum, e);
    w += (t * t) >> r;
  }
  drop = 2 * ((int)c[1] - e);
  w += c[2] >> (drop > 31 ? 31 : drop);
  j = 0;
  while (w >= ((int32_t)1 << 30)) {
    w >>= 2;
    j++;
  }
  while (w < ((int32_t)1 << 28)) {
    w *= 4;
    j--;
  }
  di = (uint32_t)(w - ((int32_t)1 << 28));
  lo = es_rsqrt_q15[di >> 22];
  rs = lo + ((((int32_t)es_rsqrt_q15[(di >> 22) + 1] - lo) * (int32_t)((di >> 7) & 0x7FFFu)) >> 15);
  sh = 17 + j;
  for (k = 0; k < n; k++) {
    int32_t t = es_k_scale2(n * u[k] - sum, e);
    int32_t q = (t * rs + ((int32_t)1 << (sh - 1))) >> sh;
    v[k] = ((q * gamma[k] + 2048) >> 12) + beta[k];
  }
}

/* int32 values -> int8 input of a product: clamp(round(v x m / 2^s) + zp), zeros to n_pad */
ES_INLINE void es_k_quantize32(const int32_t *v, int n, int n_pad, int32_t m, int32_t s, int32_t zp, int8_t *a) {
  int k;
  for (k = 0; k < n; k++) a[k] = (int8_t)ES_SAT8(es_k_requant(v[k], m, s) + zp);
  for (; k < n_pad; k++) a[k] = 0;
}

/* fixed decay: s' = s - floor(floor(s bm / 2^15) / 2^bk) + x, b = 1 - a = bm / 2^(15 + bk) */
static inline void es_k_ssm_fixed(int32_t *s, const int32_t *x, const int32_t *bm, const int32_t *bk, int n) {
  int k;
  for (k = 0; k < n; k++) {
    int32_t xk = es_k_clamp(x[k], -ES_S_LIMIT, ES_S_LIMIT);
    s[k] = es_k_clamp(s[k] - (es_k_mulq15(s[k], bm[k]) >> bk[k]) + xk, -ES_S_LIMIT, ES_S_LIMIT);
  }
}

/* selective decay: Δ = softplus(δ) (Q12), z = λΔ, b = 1 - exp(-z) (Q15), s' = s + floor((x - s) b / 2^15) */
static inline void es_k_ssm_selective(int32_t *s, const int32_t *x, const int32_t *delta, const int32_t *lam_m,
                                      const int32_t *lam_s, int n) {
  int k;
  for (k = 0; k < n; k++) {
    int32_t xk = es_k_clamp(x[k], -ES_S_LIMIT, ES_S_LIMIT);
    int32_t dl = delta[k];
    int32_t sp = dl >= ES_SOFTPLUS_LINEAR ? dl : es_k_lut(es_softplus_q12, dl);
    int32_t z = es_k_requant(sp, lam_m[k], lam_s[k]);
    int32_t b = es_k_lut(es_decay_gain_q15, z - ES_SOFTPLUS_LINEAR);
    s[k] = s[k] + es_k_mulq15(xk - s[k], b);
  }
}

/* the gated output as the output projection's int8 input: y = r + D v (Q12), SiLU(g) = g sigmoid(g)
   (Q12), both shifted into int16 (ky, kg), their product requantized (m, sh) plus zp */
static inline void es_k_ssm_gate(const int32_t *r, const int32_t *v, const int32_t *skip, const int32_t *g, int n,
                                 int n_pad, int ky, int kg, int32_t m, int32_t sh, int32_t zp, int8_t *a) {
  int k;
  for (k = 0; k < n; k++) {
    int32_t y = r[k] + ((v[k] * skip[k] + 2048) >> 12);
    int32_t silu = es_k_mulq15(g[k], es_k_lut(es_sigmoid_q15, g[k]));
    int32_t y16 = ES_SAT16(y >> ky), s16 = ES_SAT16(silu >> kg);
    a[k] = (int8_t)ES_SAT8(es_k_requant(y16 * s16, m, sh) + zp);
  }
  for (; k < n_pad; k++) a[k] = 0;
}

/* the residual: u = clamp(u + o, +-lim) */
static inline void es_k_residual(int32_t *u, const int32_t *o, int n, int32_t lim) {
  int k;
  for (k = 0; k < n; k++) u[k] = es_k_clamp(u[k] + o[k], -lim, lim);
}

#endif /* ES_SSM_INT_H */
