/* edgeseq kernels: the integer-only building blocks of an int8 recurrent step. C99, 32-bit
   arithmetic only, no float, no libm, no malloc. Portable C everywhere; with the DSP extension
   (__ARM_FEATURE_DSP: Cortex-M4, M7, M33) the dot product runs on SXTB16 + SMLAD, two
   multiply-accumulates per instruction. Define ES_PORTABLE to force the portable path; both
   give the same integers. */
#ifndef ES_KERNELS_H
#define ES_KERNELS_H
#include <stdint.h>

#if defined(__GNUC__)
#define ES_MEMCPY __builtin_memcpy     /* inlined even with -ffreestanding */
#else
#include <string.h>
#define ES_MEMCPY memcpy
#endif

/* sigmoid and tanh: 2049 Q15 knots over [-8, 8], defined once in es_tables.c for every model */
extern const int16_t es_sigmoid_q15[2049];
extern const int16_t es_tanh_q15[2049];

#define ES_LUT_SHIFT 5              /* Q12 -> table index: (x + 8 x 4096) >> 5 */

#if defined(__ARM_FEATURE_DSP) && !defined(ES_PORTABLE)
#include <arm_acle.h>
#define ES_DSP 1
/* bytes 1 and 3 of v, sign-extended to two int16 (one instruction: SXTB16 with ROR #8) */
static inline int32_t es_k_sxtb16_ror8(int32_t v) {
#if defined(__GNUC__)
  int32_t r;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(v));
  return r;
#else
  return __sxtb16((int32_t)(((uint32_t)v >> 8) | ((uint32_t)v << 24)));
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
/* gcc's __ssat stores __builtin_arm_ssat's unsigned result in an int32_t: -Wsign-conversion
   would flag every use, so the two wrappers quiet that one warning (same instruction). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-conversion"
static inline int32_t es_k_ssat16(int32_t v) { return __ssat(v, 16); }
static inline int32_t es_k_ssat8(int32_t v) { return __ssat(v, 8); }
#pragma GCC diagnostic pop
#define ES_SAT16(v) es_k_ssat16(v)
#define ES_SAT8(v) es_k_ssat8(v)
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

/* The int8 input of a reading by threshold table (a model with an input transform, asinh(x / scale)
   before its normalisation, whose map from the reading to its int8 input is monotonic but not
   affine): -128 + the number of the 255 ascending (non-decreasing) thresholds t[0..254] that x
   reaches (x >= t[k]). A binary search of 8 comparisons, each index from the ones before. */
static inline int32_t es_k_thresh8(const int32_t *t, int32_t x) {
  int32_t c = 0;
  c += (int32_t)(x >= t[c + 127]) << 7;
  c += (int32_t)(x >= t[c + 63]) << 6;
  c += (int32_t)(x >= t[c + 31]) << 5;
  c += (int32_t)(x >= t[c + 15]) << 4;
  c += (int32_t)(x >= t[c + 7]) << 3;
  c += (int32_t)(x >= t[c + 3]) << 2;
  c += (int32_t)(x >= t[c + 1]) << 1;
  c += (int32_t)(x >= t[c]);
  return c - 128;
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
    int32_t v;                                 /* four int8 as the signed word the ACLE intrinsics take */
    ES_MEMCPY(&v, a + i, 4);
    xbuf[i / 2] = __sxtb16(v);
    xbuf[i / 2 + 1] = es_k_sxtb16_ror8(v);
  }
  for (o = 0; o < out; o += 4) {               /* four outputs share each widened activation */
    const int32_t *xp = xbuf, *xend = xbuf + n / 2;
    int32_t acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;
    while (xp < xend) {
      int32_t v0, v1, v2, v3;
      int32_t even = xp[0], odd = xp[1];
      ES_MEMCPY(&v0, wp, 4);
      ES_MEMCPY(&v1, wp + 4, 4);
      ES_MEMCPY(&v2, wp + 8, 4);
      ES_MEMCPY(&v3, wp + 12, 4);
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
