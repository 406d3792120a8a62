/* edgeseq float32 kernels of the causal Transformer step (edgeseq.models.transformer, as
   export/step.py writes its step graph) for the host backend, batched over streams.

   Per stream and layer the KV cache is a ring of R rows of d_model floats (keys, then values),
   stored channel by channel ([D][R]): the reading a stream saw at position p (counted from its
   start or last reset) lies in row p mod R. A step writes its own key and value into row `position mod R` and attends over
   that row and the m rows before it, m = min(position, history, R - 1): exactly the keys the
   graph's mask lets through (its own last `position` rows, within the window), since R is the
   window or the history bound, whichever is smaller (an unbounded ring grows by doubling
   before a step would need more rows; the caller grows it).

   Every product runs through es_float.h's tiles (bias + sum in increasing input order). A
   static int8 model's products run as its QDQ graph computes them: the input quantized to its
   int8 grid (round half to even, saturate), the integer sum of the int8 weights exact in
   float32, scaled per output column and, where the graph quantizes the product's output,
   requantized onto that grid (es_a_linear_t). LayerNorm runs in double as onnxruntime's
   does (mean and mean square), GELU with libm's erf (torch's exact GELU), softmax and exp as
   es_float.h's.

   No allocation: the caller owns every buffer (es_attn_t) and sizes the scratch with
   es_attn_scratch(). A step that gives a stream NaN or Inf logits changes no position and no
   history; the rows it wrote are ones no later step reads (row position mod R is outside
   every window until a step at that position is adopted and writes it again). */
#ifndef ES_ATTN_H
#define ES_ATTN_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "es_float.h"

#define ES_A_MAX_LAYERS 16
#define ES_A_CHUNK 24               /* streams per chunk, 4 of es_float.h's 6-row tiles */

/* One product y = x @ W (+ bias), as the graph computes it.
   float:  d.w = W [K][np], d.b = bias (zeros where the graph has none).
   int8:   d.w = the int8 weights as floats, d.b = zeros; the input x is first put on its grid,
           a = clamp(rint(x / in_s) + in_z, -128, 127) - in_z (integers, as floats), then per
           column c: v = (sum + acc_bias[c]) * mul[c]; with out_q, v = (clamp(rint(v) + out_z,
           -128, 127) - out_z) * out_s (mul[c] = in_s w_s[c] / out_s), else mul[c] = in_s w_s[c];
           then v + bias[c] (the Add after a MatMul). */
typedef struct {
  es_f_dense_t d;
  int K, N, quant, out_q;
  float in_s, in_z, out_s, out_z;
  const float *acc_bias, *mul, *bias;   /* int8: [N] each; acc_bias, bias may be NULL */
} es_a_linear_t;

typedef struct {
  const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
  float ln1_eps, ln2_eps;
  es_a_linear_t qkv, proj, fc1, fc2;
} es_a_layer_t;

typedef struct {
  int B, F, D, NH, HD, L, FF, C;
  int64_t R;                        /* ring rows per stream and layer */
  int64_t max_history;              /* 0: no bound */
  int full_error;                   /* 1: a full history refuses the step (-4) instead of sliding */
  int growable;                     /* 1: R grows (the caller's job): a step needing more rows returns -5 */
  float score_div;                  /* scores = q . k / score_div (the graph's constant, sqrt(head_dim)) */
  float gelu_div, gelu_one, gelu_half;   /* x * (half * (one + erf(x / div))) */
  const float *mean, *std;          /* the reading's normalisation, [F] */
  const float *asinh;               /* the input transform's scale [F], or NULL */
  const float *freq;                /* sinusoid positions: [D / 2] angle per position, or NULL */
  const float *slopes;              /* ALiBi: [NH] score subtracted per reading back, or NULL */
  es_a_linear_t embed, head;
  es_a_layer_t layer[ES_A_MAX_LAYERS];
  const float *lnf_w, *lnf_b;
  float lnf_eps;
  /* bound buffers */
  const float *x;                   /* [B][F] raw readings */
  float *logits, *probs;            /* [B][C] */
  int64_t *pos;                     /* [B] readings each stream has seen (advanced on success) */
  int64_t *hist;                    /* [1] history rows the cache holds (the onnxruntime backend's T) */
  float *ring;                      /* [L][2][B][D][R]: keys, then values, of each layer, channel by channel */
  /* scratch (es_attn_scratch floats) */
  float *scratch;
  int k_max, np_max;
} es_attn_t;

/* floats of scratch a step needs */
static inline size_t es_attn_scratch(const es_attn_t *a) {
  return (size_t)ES_A_CHUNK * ((size_t)a->F + a->D + 3 * (size_t)a->k_max + a->np_max) + (size_t)a->NH * (a->R + 1) +
         64;
}

/* -- pieces --------------------------------------------------------------------------------- */

/* LayerNormalization over the last axis (onnxruntime's: mean and mean square in double) */
ES_F_INLINE void es_a_layernorm(const float *ES_F_RESTRICT x, int D, const float *w, const float *b, float eps,
                                float *ES_F_RESTRICT y) {
  double mean = 0.0, sq = 0.0, inv;
  int k;
  for (k = 0; k < D; k++) {
    mean += x[k];
    sq += (double)x[k] * x[k];
  }
  mean /= D;
  inv = 1.0 / sqrt(sq / D - mean * mean + (double)eps);
  for (k = 0; k < D; k++) y[k] = (float)(((double)x[k] - mean) * inv * w[k] + b[k]);
}

/* a residual connection: h += y */
ES_F_INLINE void es_a_residual(float *ES_F_RESTRICT h, const float *ES_F_RESTRICT y, int D) {
  int k;
  for (k = 0; k < D; k++) h[k] += y[k];
}

/* the input of an int8 product on its grid, minus the zero point (an integer, as a float) */
ES_F_INLINE float es_a_q(float x, float s, float z) {
  float q = rintf(x / s) + z;
  q = q > 127.0f ? 127.0f : q;
  q = q < -128.0f ? -128.0f : q;
  return q - z;
}

/* y [rows][ldy] = the product of a [rows][lda] (columns 0 .. K); t, ap: rows x K scratch */
ES_F_INLINE void es_a_linear(const es_a_linear_t *p, const float *a, int lda, int rows, float *t, float *ap, float *y,
                             int ldy) {
  const int K = p->K, N = p->N;
  int r, c;
  if (!p->quant) {
    es_f_dense(&p->d, K, a, lda, a, lda, rows, ap, y, ldy);
    return;
  }
  for (r = 0; r < rows; r++)
    for (c = 0; c < K; c++) t[(size_t)r * K + c] = es_a_q(a[(size_t)r * lda + c], p->in_s, p->in_z);
  es_f_dense(&p->d, K, t, K, t, K, rows, ap, y, ldy);
  for (r = 0; r < rows; r++) {
    float *yr = y + (size_t)r * ldy;
    for (c = 0; c < N; c++) {
      float v = (yr[c] + (p->acc_bias ? p->acc_bias[c] : 0.0f)) * p->mul[c];
      if (p->out_q) {
        float q = rintf(v) + p->out_z;
        q = q > 127.0f ? 127.0f : q;
        q = q < -128.0f ? -128.0f : q;
        v = (q - p->out_z) * p->out_s;
      }
      yr[c] = p->bias ? v + p->bias[c] : v;
    }
  }
}

ES_F_INLINE void es_a_gelu(float *ES_F_RESTRICT v, int n, float div, float one, float half) {
  int k;
  for (k = 0; k < n; k++) v[k] = v[k] * (half * (one + erff(v[k] / div)));
}

/* Sums, dot products and maxima along a row with 8 partial results side by side (lane l takes
   elements l, l + 8, ...; the tail, then the lanes pairwise): a fixed order, so they
   vectorize without -ffast-math and a stream's result never depends on its neighbours. */
#if defined(__GNUC__) && !defined(ES_NO_VECTOR_EXT)
typedef int32_t es_a_v8i __attribute__((vector_size(32)));

ES_F_INLINE float es_a_lanes(es_v8 acc, float tail) {
  float t[8];
  memcpy(t, &acc, sizeof t);
  return (((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]))) + tail;
}

ES_F_INLINE float es_a_dot(const float *a, const float *b, int64_t n) {
  es_v8 acc = {0, 0, 0, 0, 0, 0, 0, 0};
  float tail = 0.0f;
  int64_t i;
  for (i = 0; i + 8 <= n; i += 8) acc += es_v8_load(a + i) * es_v8_load(b + i);
  for (; i < n; i++) tail += a[i] * b[i];
  return es_a_lanes(acc, tail);
}

/* es_a_dot of a with four rows b0 .. b3 at once, out[j] = es_a_dot(a, bj, n) to the bit (the same
   operations in the same order for each): four chains of dependent multiply-adds in flight where
   one waits on its latency */
ES_F_INLINE void es_a_dot4(const float *a, const float *b0, const float *b1, const float *b2, const float *b3,
                           int64_t n, float *out) {
  es_v8 c0 = {0, 0, 0, 0, 0, 0, 0, 0}, c1 = c0, c2 = c0, c3 = c0;
  float t0 = 0.0f, t1 = 0.0f, t2 = 0.0f, t3 = 0.0f;
  int64_t i;
  for (i = 0; i + 8 <= n; i += 8) {
    const es_v8 ai = es_v8_load(a + i);
    c0 += ai * es_v8_load(b0 + i), c1 += ai * es_v8_load(b1 + i);
    c2 += ai * es_v8_load(b2 + i), c3 += ai * es_v8_load(b3 + i);
  }
  for (; i < n; i++) t0 += a[i] * b0[i], t1 += a[i] * b1[i], t2 += a[i] * b2[i], t3 += a[i] * b3[i];
  out[0] = es_a_lanes(c0, t0), out[1] = es_a_lanes(c1, t1), out[2] = es_a_lanes(c2, t2), out[3] = es_a_lanes(c3, t3);
}

ES_F_INLINE float es_a_sum(const float *a, int64_t n) {
  es_v8 acc = {0, 0, 0, 0, 0, 0, 0, 0};
  float tail = 0.0f;
  int64_t i;
  for (i = 0; i + 8 <= n; i += 8) acc += es_v8_load(a + i);
  for (; i < n; i++) tail += a[i];
  return es_a_lanes(acc, tail);
}

/* the largest of a[0 .. n), n >= 1 (a NaN is skipped as a comparison skips it, unless first) */
ES_F_INLINE float es_a_max(const float *a, int64_t n) {
  float m = a[0], t[8];
  int64_t i;
  int l;
  if (n >= 8) {
    es_v8 acc = es_v8_load(a);
    for (i = 8; i + 8 <= n; i += 8) {
      es_v8 v = es_v8_load(a + i);
      es_a_v8i gt = v > acc;
      acc = (es_v8)((gt & (es_a_v8i)v) | (~gt & (es_a_v8i)acc));
    }
    memcpy(t, &acc, sizeof t);
    for (l = 0; l < 8; l++) m = t[l] > m ? t[l] : m;
  } else {
    i = 1;
  }
  for (; i < n; i++) m = a[i] > m ? a[i] : m;
  return m;
}
#else
ES_F_INLINE float es_a_dot(const float *a, const float *b, int64_t n) {
  float s = 0.0f;
  int64_t i;
  for (i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}
ES_F_INLINE void es_a_dot4(const float *a, const float *b0, const float *b1, const float *b2, const float *b3,
                           int64_t n, float *out) {
  out[0] = es_a_dot(a, b0, n), out[1] = es_a_dot(a, b1, n), out[2] = es_a_dot(a, b2, n), out[3] = es_a_dot(a, b3, n);
}
ES_F_INLINE float es_a_sum(const float *a, int64_t n) {
  float s = 0.0f;
  int64_t i;
  for (i = 0; i < n; i++) s += a[i];
  return s;
}
ES_F_INLINE float es_a_max(const float *a, int64_t n) {
  float m = a[0];
  int64_t i;
  for (i = 1; i < n; i++) m = a[i] > m ? a[i] : m;
  return m;
}
#endif

/* One stream, one layer: q, k, v [D] (this reading's), the stream's rings K, V [D][R] (channel
   by channel: a head's scores and sums then run along rows, which vectorizes for any head
   size). Writes k and v into row `slot` and out [D] = softmax(q K^T / div) V per head over
   rows slot - m .. slot (mod R), in time order; with ALiBi slopes, a head's score of the row d
   readings back less slope x d (the graph rounds the product first; a fused multiply-add here
   differs by an ulp of it). sc: NH (m + 1) floats of scratch. */
ES_F_INLINE void es_a_attend(const es_attn_t *a, const float *q, const float *k, const float *v, float *K, float *V,
                             int64_t slot, int64_t m, float *sc, float *ES_F_RESTRICT out) {
  const int D = a->D, NH = a->NH, HD = a->HD;
  const int64_t R = a->R, n = m + 1;
  const int64_t start = slot - m < 0 ? slot - m + R : slot - m;
  const int64_t n1 = n < R - start ? n : R - start;      /* rows start .. start + n1, then 0 .. n - n1 */
  const float div = a->score_div;
  int64_t i;
  int h, e, c;
  for (c = 0; c < D; c++) {
    K[(size_t)c * R + slot] = k[c];
    V[(size_t)c * R + slot] = v[c];
  }
  for (h = 0; h < NH; h++) {
    float *ES_F_RESTRICT p = sc + (size_t)h * n;
    float mx, sum;
    for (i = 0; i < n; i++) p[i] = 0.0f;
    for (e = 0; e < HD; e++) {
      const float qe = q[h * HD + e];
      const float *ES_F_RESTRICT kr = K + (size_t)(h * HD + e) * R;
      for (i = 0; i < n1; i++) p[i] += qe * kr[start + i];
      for (i = n1; i < n; i++) p[i] += qe * kr[i - n1];
    }
    if (a->slopes) {                       /* int rows: AVX2 converts int32, not int64, to float in a vector */
      const float sl = a->slopes[h];
      const int nn = (int)n;
      int ii;
      for (ii = 0; ii < nn; ii++) p[ii] = p[ii] / div - sl * (float)(nn - 1 - ii);
    } else {
      for (i = 0; i < n; i++) p[i] = p[i] / div;
    }
    mx = es_a_max(p, n);
    for (i = 0; i < n; i++) p[i] = es_f_exp(p[i] - mx);
    sum = 1.0f / es_a_sum(p, n);
    for (i = 0; i < n; i++) p[i] *= sum;
    for (e = 0; e + 4 <= HD; e += 4) {     /* four channels at a time, each as es_a_dot alone */
      const float *v0 = V + (size_t)(h * HD + e) * R, *v1 = v0 + R, *v2 = v1 + R, *v3 = v2 + R;
      float o1[4], o2[4];
      es_a_dot4(p, v0 + start, v1 + start, v2 + start, v3 + start, n1, o1);
      es_a_dot4(p + n1, v0, v1, v2, v3, n - n1, o2);
      for (c = 0; c < 4; c++) out[h * HD + e + c] = o1[c] + o2[c];
    }
    for (; e < HD; e++) {
      const float *vr = V + (size_t)(h * HD + e) * R;
      out[h * HD + e] = es_a_dot(p, vr + start, n1) + es_a_dot(p + n1, vr, n - n1);
    }
  }
}

/* the step's history after the slide: rows the next reading may attend to, at most */
ES_F_INLINE int64_t es_a_history(const es_attn_t *a) {
  int64_t T = a->hist[0];
  return a->max_history && T >= a->max_history ? a->max_history - 1 : T;
}

/* -- the step ------------------------------------------------------------------------------- */

/* Advance every stream one reading. -1: adopted (positions + 1, history + 1 after the slide);
   i >= 0: stream i gave NaN/Inf logits, nothing adopted; -4: the history is full and full_error
   is set; -5: the ring needs more rows (growable): grow it and call again. -4 and -5 write
   nothing. */
ES_F_INLINE int es_attn_step(es_attn_t *a) {
  const int B = a->B, F = a->F, D = a->D, L = a->L, C = a->C, FF = a->FF, NH = a->NH;
  const int km = a->k_max, npm = a->np_max;
  const int64_t R = a->R, T = es_a_history(a);
  float *xn = a->scratch, *hr = xn + (size_t)ES_A_CHUNK * F, *t = hr + (size_t)ES_A_CHUNK * D;
  float *tq = t + (size_t)ES_A_CHUNK * km, *ap = tq + (size_t)ES_A_CHUNK * km, *y = ap + (size_t)ES_A_CHUNK * km;
  float *sc = y + (size_t)ES_A_CHUNK * npm;
  int r0, r, l, bad = -1;
  if (a->full_error && a->max_history && a->hist[0] >= a->max_history) return -4;
  if (a->growable && T + 1 > R) return -5;
  for (r0 = 0; r0 < B; r0 += ES_A_CHUNK) {
    const int rows = B - r0 < ES_A_CHUNK ? B - r0 : ES_A_CHUNK;
    es_f_normalize(a->x + (size_t)r0 * F, rows, F, a->mean, a->std, a->asinh, xn);
    es_a_linear(&a->embed, xn, F, rows, tq, ap, y, npm);
    for (r = 0; r < rows; r++) {
      float *h = hr + (size_t)r * D;
      memcpy(h, y + (size_t)r * npm, sizeof(float) * D);
      if (a->freq) {                       /* + [sin(p w), cos(p w)], the angle rounded to float as the graph's */
        const float p = (float)a->pos[r0 + r];
        int i;
        for (i = 0; i < D / 2; i++) {
          const float ang = p * a->freq[i];
          h[i] += (float)sin((double)ang);
          h[D / 2 + i] += (float)cos((double)ang);
        }
      }
    }
    for (l = 0; l < L; l++) {
      const es_a_layer_t *ly = &a->layer[l];
      float *Kl = a->ring + (size_t)(2 * l) * B * R * D, *Vl = a->ring + (size_t)(2 * l + 1) * B * R * D;
      for (r = 0; r < rows; r++) es_a_layernorm(hr + (size_t)r * D, D, ly->ln1_w, ly->ln1_b, ly->ln1_eps, t + (size_t)r * km);
      es_a_linear(&ly->qkv, t, km, rows, tq, ap, y, npm);
      for (r = 0; r < rows; r++) {
        const int b = r0 + r;
        const int64_t p = a->pos[b];
        const int64_t m = p < T ? (p < R - 1 ? p : R - 1) : (T < R - 1 ? T : R - 1);
        const float *yr = y + (size_t)r * npm;
        es_a_attend(a, yr, yr + D, yr + 2 * D, Kl + (size_t)b * R * D, Vl + (size_t)b * R * D, p % R, m, sc,
                    t + (size_t)r * km);
      }
      es_a_linear(&ly->proj, t, km, rows, tq, ap, y, npm);
      for (r = 0; r < rows; r++) {
        float *h = hr + (size_t)r * D;
        es_a_residual(h, y + (size_t)r * npm, D);
        es_a_layernorm(h, D, ly->ln2_w, ly->ln2_b, ly->ln2_eps, t + (size_t)r * km);
      }
      es_a_linear(&ly->fc1, t, km, rows, tq, ap, y, npm);
      for (r = 0; r < rows; r++) {
        float *tr = t + (size_t)r * km;
        memcpy(tr, y + (size_t)r * npm, sizeof(float) * FF);
        es_a_gelu(tr, FF, a->gelu_div, a->gelu_one, a->gelu_half);
      }
      es_a_linear(&ly->fc2, t, km, rows, tq, ap, y, npm);
      for (r = 0; r < rows; r++) es_a_residual(hr + (size_t)r * D, y + (size_t)r * npm, D);
    }
    for (r = 0; r < rows; r++) es_a_layernorm(hr + (size_t)r * D, D, a->lnf_w, a->lnf_b, a->lnf_eps, t + (size_t)r * km);
    es_a_linear(&a->head, t, km, rows, tq, ap, y, npm);
    for (r = 0; r < rows; r++) {
      float *lo = a->logits + (size_t)(r0 + r) * C;
      memcpy(lo, y + (size_t)r * npm, sizeof(float) * C);
      if (!es_f_softmax(lo, C, a->probs + (size_t)(r0 + r) * C) && bad < 0) bad = r0 + r;
    }
  }
  (void)NH;
  if (bad >= 0) return bad;
  for (r = 0; r < B; r++) a->pos[r]++;
  a->hist[0] = T + 1;
  return -1;
}

#endif /* ES_ATTN_H */
