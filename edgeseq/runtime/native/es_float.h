/* edgeseq float32 kernels for the host backend (edgeseq.runtime.native): the float RNN, GRU and
   LSTM steps of the exported graphs, batched over streams.

   - exp, sigmoid and tanh are polynomials (Cephes' expf and tanhf, about 1 ulp) written as
     straight-line code, so the loops over a row vectorize (with -fno-trapping-math, which lets
     gcc turn their selects into blends; it changes no value). libm's expf/tanhf are calls a
     compiler vectorizes only under -ffast-math; at many streams they would cost more than the
     matrix products. Define ES_FLOAT_LIBM to use expf/tanhf instead (the reference).
   - The matrix products are y[r][:] = bias + a[r][:] @ W over a tile of 6 rows (streams) and
     16 columns, accumulators in registers: GNU vector extensions (gcc, clang: SSE/AVX on x86,
     NEON on Arm), plain loops for other compilers. W is [K][Np] row-major (K inputs, Np
     columns padded to a multiple of 16), so a tile reads each weight row as two 8-float
     vectors; the tile's inputs are first packed k-major, so one pointer walks them.
     Every output is bias + sum over k in increasing order, one multiply-add at a time, in
     every kernel: a stream's results do not depend on how many streams share the call.
   No allocation: the caller owns every buffer. */
#ifndef ES_FLOAT_H
#define ES_FLOAT_H
#include <stdint.h>
#include <string.h>
#include <math.h>

#if defined(__GNUC__)
#define ES_F_INLINE static inline __attribute__((always_inline))
#else
#define ES_F_INLINE static inline
#endif

#if defined(__GNUC__) || defined(__clang__)
#define ES_F_RESTRICT __restrict__
#else
#define ES_F_RESTRICT
#endif

#define ES_F_NB 16                  /* columns per panel: W, bias and outputs are padded to it */
#define ES_F_MB 6                   /* streams per register tile (6 x 16: 12 AVX2 registers) */

/* -- exp, sigmoid, tanh ------------------------------------------------------------------- */

#ifdef ES_FLOAT_LIBM
static inline float es_f_exp(float x) { return expf(x); }
static inline float es_f_tanh(float x) { return tanhf(x); }
#else
/* exp(x) = 2^n exp(r), n = round(x / ln 2), |r| <= ln2 / 2 (Cephes expf). x is clamped to
   [-87, 88] so 2^n stays a normal float: exp(-87) stands for anything smaller, exp(88) for
   anything larger (sigmoid and tanh saturate long before). NaN stays NaN. */
static inline float es_f_exp(float x) {
  union { int32_t i; float f; } s;
  float n, r, p;
  x = x > 88.0f ? 88.0f : x;
  x = x < -87.0f ? -87.0f : x;
  n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;     /* round to nearest, |n| <= 127 */
  r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  p = ((((( 1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r
        + 1.6666665459e-1f) * r + 5.0000001201e-1f) * (r * r) + r + 1.0f;
  s.i = ((int32_t)n + 127) << 23;
  return p * s.f;
}

/* tanh: an odd polynomial below 0.625 (Cephes tanhf), 1 - 2 / (exp(2|x|) + 1) above */
static inline float es_f_tanh(float x) {
  float ax = fabsf(x), z = x * x, e, big, small;
  small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z
           - 3.33332819422e-1f) * z * x + x;
  e = es_f_exp(2.0f * ax);
  big = copysignf(1.0f - 2.0f / (e + 1.0f), x);
  return ax < 0.625f ? small : big;
}
#endif

static inline float es_f_sigmoid(float x) { return 1.0f / (1.0f + es_f_exp(-x)); }

/* -- products --------------------------------------------------------------------------- */

/* A product: y = bias + [a1, a2] @ W, W [K][np] (K = n1 + columns of a2). The columns fall in
   blocks (col0, width, k0, k1), width a multiple of ES_F_NB: block columns read inputs
   k0 <= k < k1 only (the rest of their rows are zero and skipped: the GRU's n gate). */
typedef struct {
  const float *w;
  const float *b;
  const int32_t *blocks;            /* nblocks x {col0, width, k0, k1} */
  int nblocks, np, n1;
} es_f_dense_t;

#if defined(__GNUC__) && !defined(ES_NO_VECTOR_EXT)
typedef float es_v8 __attribute__((vector_size(32)));

ES_F_INLINE es_v8 es_v8_load(const float *p) {
  es_v8 v;
  memcpy(&v, p, sizeof v);
  return v;
}
ES_F_INLINE void es_v8_store(float *p, es_v8 v) { memcpy(p, &v, sizeof v); }

/* ROWS x (8 NV) outputs y = bias + sum over k0 <= k < k1 of ap[k][i] w[k][:], the inputs of the
   ROWS streams packed k-major (ap[k ROWS + i]: one pointer walks them) */
#define ES_F_TILE_BODY(ROWS, NV)                                                                  \
  es_v8 acc[ROWS][NV];                                                                          \
  int i, v, k;                                                                                  \
  for (i = 0; i < (ROWS); i++)                                                                  \
    for (v = 0; v < (NV); v++) acc[i][v] = es_v8_load(bias + 8 * v);                            \
  for (k = k0; k < k1; k++) {                                                                   \
    const float *wk = w + (size_t)k * ldw, *ak = ap + (size_t)k * (ROWS);                      \
    es_v8 wv[NV];                                                                               \
    for (v = 0; v < (NV); v++) wv[v] = es_v8_load(wk + 8 * v);                                  \
    for (i = 0; i < (ROWS); i++)                                                                \
      for (v = 0; v < (NV); v++) acc[i][v] += ak[i] * wv[v];                                    \
  }                                                                                             \
  for (i = 0; i < (ROWS); i++)                                                                  \
    for (v = 0; v < (NV); v++) es_v8_store(y + (size_t)i * ldy + 8 * v, acc[i][v]);
#else
#define ES_F_TILE_BODY(ROWS, NV)                                                                  \
  float acc[ROWS][8 * (NV)];                                                                    \
  int i, j, k;                                                                                  \
  for (i = 0; i < (ROWS); i++)                                                                  \
    for (j = 0; j < 8 * (NV); j++) acc[i][j] = bias[j];                                         \
  for (k = k0; k < k1; k++)                                                                     \
    for (i = 0; i < (ROWS); i++)                                                                \
      for (j = 0; j < 8 * (NV); j++) acc[i][j] += ap[(size_t)k * (ROWS) + i] * w[(size_t)k * ldw + j]; \
  for (i = 0; i < (ROWS); i++)                                                                  \
    for (j = 0; j < 8 * (NV); j++) y[(size_t)i * ldy + j] = acc[i][j];
#endif

#define ES_F_TILE(NAME, ROWS, NV)                                                                 \
  ES_F_INLINE void NAME(const float *ap, int k0, int k1, const float *w, int ldw, const float *bias, float *y, \
                        int ldy) {                                                              \
    ES_F_TILE_BODY(ROWS, NV)                                                                    \
  }

ES_F_TILE(es_f_tile_6x16, ES_F_MB, 2)     /* many streams: 12 accumulators, weights loaded once per 6 */
ES_F_TILE(es_f_tile_1x64, 1, 8)           /* one stream: 8 independent accumulators */
ES_F_TILE(es_f_tile_1x48, 1, 6)
ES_F_TILE(es_f_tile_1x32, 1, 4)
ES_F_TILE(es_f_tile_1x16, 1, 2)

/* t[k ES_F_MB + i] = input k of row i: a1[i][k] for k < n1, a2[i][k - n1] after */
ES_F_INLINE void es_f_pack6(const float *a1, int lda1, const float *a2, int lda2, int n1, int K,
                            float *ES_F_RESTRICT t) {
  const float *p0 = a1, *p1 = a1 + lda1, *p2 = a1 + 2 * (size_t)lda1, *p3 = a1 + 3 * (size_t)lda1,
              *p4 = a1 + 4 * (size_t)lda1, *p5 = a1 + 5 * (size_t)lda1;
  int k;
  for (k = 0; k < n1; k++, t += 6) {
    t[0] = p0[k], t[1] = p1[k], t[2] = p2[k], t[3] = p3[k], t[4] = p4[k], t[5] = p5[k];
  }
  p0 = a2 - n1, p1 = p0 + lda2, p2 = p1 + lda2, p3 = p2 + lda2, p4 = p3 + lda2, p5 = p4 + lda2;
  for (; k < K; k++, t += 6) {
    t[0] = p0[k], t[1] = p1[k], t[2] = p2[k], t[3] = p3[k], t[4] = p4[k], t[5] = p5[k];
  }
}

/* y[r][0 .. np) for rows r < rows; the inputs of row r are a1[r][0 .. n1) then a2[r][0 .. K - n1).
   ap: rows x K floats of scratch, where the inputs are packed first (tiles of ES_F_MB rows
   k-major, the rows left over one after another). Then panels of ES_F_NB columns run over
   all tiles while their weights are in L1. */
ES_F_INLINE void es_f_dense(const es_f_dense_t *d, int K, const float *a1, int lda1, const float *a2, int lda2,
                            int rows, float *ap, float *y, int ldy) {
  const int n1 = d->n1, full = rows - rows % ES_F_MB;
  int bi, r;
  for (r = 0; r < full; r += ES_F_MB)
    es_f_pack6(a1 + (size_t)r * lda1, lda1, a2 + (size_t)r * lda2, lda2, n1, K, ap + (size_t)r * K);
  for (; r < rows; r++) {
    float *t = ap + (size_t)r * K;
    memcpy(t, a1 + (size_t)r * lda1, sizeof(float) * n1);
    memcpy(t + n1, a2 + (size_t)r * lda2, sizeof(float) * (K - n1));
  }
  for (bi = 0; bi < d->nblocks; bi++) {
    const int32_t *blk = d->blocks + 4 * bi;
    int col0 = blk[0], end = blk[0] + blk[1], k0 = blk[2], k1 = blk[3], j;
    for (j = col0; j < end; j += ES_F_NB)
      for (r = 0; r < full; r += ES_F_MB)
        es_f_tile_6x16(ap + (size_t)r * K, k0, k1, d->w + j, d->np, d->b + j, y + (size_t)r * ldy + j, ldy);
    for (r = full; r < rows; r++) {              /* rows left over: one at a time, wide */
      const float *t = ap + (size_t)r * K;
      float *yr = y + (size_t)r * ldy;
      for (j = col0; j < end;) {
        int left = end - j;
        if (left >= 64) {
          es_f_tile_1x64(t, k0, k1, d->w + j, d->np, d->b + j, yr + j, ldy);
          j += 64;
        } else if (left == 48) {
          es_f_tile_1x48(t, k0, k1, d->w + j, d->np, d->b + j, yr + j, ldy);
          j += 48;
        } else if (left == 32) {
          es_f_tile_1x32(t, k0, k1, d->w + j, d->np, d->b + j, yr + j, ldy);
          j += 32;
        } else {
          es_f_tile_1x16(t, k0, k1, d->w + j, d->np, d->b + j, yr + j, ldy);
          j += 16;
        }
      }
    }
  }
}

/* -- cells: gates g [rows][ldg] (bias and products done) -> new state ----------------------- */

#define ES_F_RNN 0
#define ES_F_GRU 1
#define ES_F_LSTM 2

/* Each cell runs as a few passes of one simple loop over a row (in place on the gates), so the
   compiler vectorizes every pass whatever the inlined exp costs it. */
ES_F_INLINE void es_f_sigmoid_n(float *ES_F_RESTRICT v, int n) {
  int k;
  for (k = 0; k < n; k++) v[k] = es_f_sigmoid(v[k]);
}
ES_F_INLINE void es_f_tanh_n(float *ES_F_RESTRICT v, int n) {
  int k;
  for (k = 0; k < n; k++) v[k] = es_f_tanh(v[k]);
}

/* RNN: h' = tanh(g) */
ES_F_INLINE void es_f_rnn_cell(float *g, int ldg, int rows, int H, float *hn) {
  int r;
  for (r = 0; r < rows; r++) {
    float *gr = g + (size_t)r * ldg;
    es_f_tanh_n(gr, H);
    memcpy(hn + (size_t)r * H, gr, sizeof(float) * H);
  }
}

/* GRU, the graph's fused layout: g = [r z | x-part of n | h-part of n] at columns 0, H, ox, oh.
   n = tanh(xn + r hn), h' = n + z (h - n) */
ES_F_INLINE void es_f_gru_n(float *ES_F_RESTRICT n, const float *ES_F_RESTRICT r, const float *ES_F_RESTRICT hn,
                            int H) {
  int k;
  for (k = 0; k < H; k++) n[k] = n[k] + r[k] * hn[k];
}
ES_F_INLINE void es_f_gru_h(float *ES_F_RESTRICT out, const float *ES_F_RESTRICT n, const float *ES_F_RESTRICT z,
                            const float *ES_F_RESTRICT h, int H) {
  int k;
  for (k = 0; k < H; k++) out[k] = n[k] + z[k] * (h[k] - n[k]);
}
ES_F_INLINE void es_f_gru_cell(float *g, int ldg, int rows, int H, int ox, int oh, const float *h, float *hn) {
  int r;
  for (r = 0; r < rows; r++) {
    float *gr = g + (size_t)r * ldg;
    es_f_sigmoid_n(gr, 2 * H);                           /* r, z */
    es_f_gru_n(gr + ox, gr, gr + oh, H);
    es_f_tanh_n(gr + ox, H);
    es_f_gru_h(hn + (size_t)r * H, gr + ox, gr + H, h + (size_t)r * H, H);
  }
}

/* LSTM, gates i f g o: c' = f c + i tanh(g), h' = sigmoid(o) tanh(c') */
ES_F_INLINE void es_f_lstm_c(float *ES_F_RESTRICT co, float *ES_F_RESTRICT t, const float *ES_F_RESTRICT i,
                             const float *ES_F_RESTRICT f, const float *ES_F_RESTRICT c, int H) {
  int k;
  for (k = 0; k < H; k++) co[k] = t[k] = f[k] * c[k] + i[k] * t[k];
}
ES_F_INLINE void es_f_mul(float *ES_F_RESTRICT out, const float *ES_F_RESTRICT a, const float *ES_F_RESTRICT b, int H) {
  int k;
  for (k = 0; k < H; k++) out[k] = a[k] * b[k];
}
ES_F_INLINE void es_f_lstm_cell(float *g, int ldg, int rows, int H, const float *c, float *hn, float *cn) {
  int r;
  for (r = 0; r < rows; r++) {
    float *gr = g + (size_t)r * ldg, *t = gr + 2 * H;
    es_f_sigmoid_n(gr, 2 * H);                           /* i, f */
    es_f_tanh_n(t, H);                                   /* g */
    es_f_sigmoid_n(gr + 3 * H, H);                       /* o */
    es_f_lstm_c(cn + (size_t)r * H, t, gr, gr + H, c + (size_t)r * H, H);
    es_f_tanh_n(t, H);
    es_f_mul(hn + (size_t)r * H, gr + 3 * H, t, H);
  }
}

/* (t - mean) / std per feature, as the graph's Sub and Div compute it; t = asinhf(x / asinh[f]) (the
   graph's input transform, Div then Asinh) where `asinh` is not NULL, else x */
ES_F_INLINE void es_f_normalize(const float *x, int rows, int F, const float *mean, const float *std,
                                const float *asinh, float *xn) {
  int r, f;
  if (asinh) {
    for (r = 0; r < rows; r++)
      for (f = 0; f < F; f++) xn[(size_t)r * F + f] = (asinhf(x[(size_t)r * F + f] / asinh[f]) - mean[f]) / std[f];
    return;
  }
  for (r = 0; r < rows; r++)
    for (f = 0; f < F; f++) xn[(size_t)r * F + f] = (x[(size_t)r * F + f] - mean[f]) / std[f];
}

/* softmax of one row of logits; returns 0 when a logit is NaN or Inf (probs left as they are) */
ES_F_INLINE int es_f_softmax(const float *logits, int C, float *probs) {
  float m = logits[0], s = 0.0f;
  int c;
  for (c = 0; c < C; c++) {
    float v = logits[c];
    if (!(v - v == 0.0f)) return 0;
    m = v > m ? v : m;
  }
  for (c = 0; c < C; c++) {
    probs[c] = es_f_exp(logits[c] - m);
    s += probs[c];
  }
  s = 1.0f / s;
  for (c = 0; c < C; c++) probs[c] *= s;
  return 1;
}

#endif /* ES_FLOAT_H */
