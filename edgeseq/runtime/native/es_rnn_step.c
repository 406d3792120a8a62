/* Step, the recurrent step (RNN, GRU, LSTM) in C for the host: one translation unit of
   edgeseq.runtime.native._es_native (es_native.h).

   Two constructors build a Step that holds pointers into buffers the Python side owns (bound
   once, through the buffer protocol; the Step keeps the exporting objects alive):

     float_step(kind, B, F, H, C, x, logits, probs, mean, std, bank0, bank1, layers, head[, asinh])
     int8_step(kind, B, F, H, C, x, logits, logits_q12, probs, state, feat, layers, head, sigmoid, tanh[, reference])

   Step.run() advances all B streams by one reading: no allocation, no argument parsing.
   It returns -1 when every stream's logits are finite and the step was adopted, else the
   first stream whose logits are NaN or Inf; then no state changed (the float state is two
   banks: the step writes the other one and flips only on success; int8 logits are integers).
   The int8 step is firmware_sim.intsim's arithmetic through es_kernels.h, the kernels the
   firmware emitter ships: its requantization, tables, Q15 products and quantization; its
   int8 products run either as es_k_matvec itself (reference) or as float32 products of the
   int8 values, which are exact (see es_q_dense_t) and batch over streams. Layouts are built
   by edgeseq/runtime/native/__init__.py.
   A Step is not re-entrant: the caller serializes calls (StreamSession holds a lock); a
   second call while one runs with the GIL released raises RuntimeError. */
#include "es_native.h"

/* An int8 product. Its int8 x int8 dot products run as float32 (es_float.h's tiles, batched over
   streams): each product of two int8 values is exact in float32, and so is every partial sum
   while n x 128 x 128 <= 2^24, i.e. for n <= ES_Q_EXACT_N inputs, so the float result is the
   integer accumulator exactly. Then es_kernels.h requantizes it, as es_k_matvec does. With
   `reference` (or a wider layer) the firmware's es_k_matvec itself runs, stream by stream. */
#define ES_Q_EXACT_N 1024

typedef struct {
  const void *w;                   /* float [n][np] (W^T, int8 values), or int8 in 4-row blocks (reference) */
  const int32_t *q;                /* [out][4]: zero point x column sum, m, s, bias (Q12) */
  int n, out, mode, np;
  int32_t blk[4];
  es_f_dense_t f;                  /* the float view of w */
  /* the same constants split by kind, so the requantization loop vectorizes: [out] each */
  int32_t *zc, *qm, *qs, *qb;      /* zero point x column sum, m, s, Q12 bias */
  int32_t *vc;                     /* VNNI: zc + 128 x column sum (the inputs run as unsigned a + 128) */
  int8_t *wv;                      /* VNNI: [n / 4][np][4] int8, four inputs of a column together */
  void *mem;                       /* owns zc .. wv */
} es_q_dense_t;

typedef struct {
  es_q_dense_t x, h;
  int32_t hq_m, hq_s, h_zp;        /* own h (Q15) -> int8 input of h */
  int32_t aq_m, aq_s, x_zp;        /* previous layer's h -> int8 input of x (layer > 0) */
} es_q_layer_t;

typedef struct {
  ES_STEP_HEAD
  int quant, kind, H, L, C, bank;
  float *logits, *probs;
  /* float */
  const float *mean, *std, *asinh;  /* asinh: the input transform's scale [F], NULL where there is none */
  es_f_dense_t layer[ES_MAX_LAYERS], head;
  int gru_ox[ES_MAX_LAYERS], gru_oh[ES_MAX_LAYERS], np_max, k_max;
  float *h[2][ES_MAX_LAYERS], *c[2][ES_MAX_LAYERS];
  float *scratch;                  /* normalized inputs, packed inputs, gates, head outputs of one chunk */
  /* int8 */
  int32_t *logits_q12;
  int16_t *qh[ES_MAX_LAYERS];
  int32_t *qc[ES_MAX_LAYERS];
  const double *in_scale;
  const int32_t *mean_fx, *feat_m, *feat_s;
  const int32_t *thr;              /* [F][255]: the input transform's threshold table (es_k_thresh8); NULL: none */
  int32_t zp0;
  es_q_layer_t ql[ES_MAX_LAYERS];
  es_q_dense_t qhead;
  int32_t head_m, head_s, head_zp;
  const int16_t *sigmoid, *tanh;
  int32_t *gx, *gh, *xb;
  int8_t *a, *ah;
  float *qscratch;                 /* one chunk: quantized inputs, packed inputs, products */
  float *qzero;                    /* zero "bias" of the float products: the Q12 bias comes after */
  int n_a, h_pad, reference, qnp, vnni;
  int32_t *lut_sig, *lut_tanh;     /* the tables packed: knot in the low 16 bits, the step to the next above */
  uint8_t *va, *vah;               /* VNNI, one chunk: unsigned inputs (a + 128) of x and of h products */
  int32_t *vpack, *vgx, *vgh;      /* VNNI, one chunk: packed inputs, int32 products */
} StepObject;

static void *bind(StepObject *s, PyObject *obj, Py_ssize_t itemsize, Py_ssize_t count, int writable, const char *what) {
  return es_step_bind((es_step_t *)s, obj, itemsize, count, writable, what);
}

static void step_dealloc(StepObject *s) {
  int i;
  PyMem_Free(s->scratch);
  PyMem_Free(s->gx);
  PyMem_Free(s->qscratch);
  PyMem_Free(s->qzero);
  PyMem_Free(s->lut_sig);
  PyMem_Free(s->va);
  for (i = 0; i < ES_MAX_LAYERS; i++) PyMem_Free(s->ql[i].x.mem), PyMem_Free(s->ql[i].h.mem);
  PyMem_Free(s->qhead.mem);
  es_step_free((es_step_t *)s);
}

static void *bind_item(StepObject *s, PyObject *seq, Py_ssize_t i, Py_ssize_t itemsize, Py_ssize_t count,
                       int writable, const char *what) {
  PyObject *o = PySequence_GetItem(seq, i);
  void *p;
  if (o == NULL) return NULL;
  p = bind(s, o, itemsize, count, writable, what);
  Py_DECREF(o);
  return p;
}

/* blocks of a float product: checks they lie within W [K][np] */
static int bind_dense(StepObject *s, es_f_dense_t *d, PyObject *t, int K, int n1, const char *what) {
  long np, nb;
  int i;
  if (es_check_tuple(t, 4, what) < 0 || es_get_int(t, 3, ES_F_NB, 1 << 20, &np, what) < 0) return -1;
  if (np % ES_F_NB) {
    PyErr_Format(PyExc_ValueError, "%s: columns %ld not a multiple of %d", what, np, ES_F_NB);
    return -1;
  }
  d->np = (int)np;
  d->n1 = n1;
  if (!(d->w = bind_item(s, t, 0, 4, (Py_ssize_t)K * np, 0, what))) return -1;
  if (!(d->b = bind_item(s, t, 1, 4, np, 0, what))) return -1;
  if (!(d->blocks = bind_item(s, t, 2, 4, -1, 0, what))) return -1;
  nb = (long)(s->views[s->nviews - 1].len / 16);
  if (nb < 1) {
    PyErr_Format(PyExc_ValueError, "%s: no column blocks", what);
    return -1;
  }
  d->nblocks = (int)nb;
  for (i = 0; i < nb; i++) {
    const int32_t *b = d->blocks + 4 * i;
    if (b[0] < 0 || b[1] <= 0 || b[0] % ES_F_NB || b[1] % ES_F_NB || b[0] + b[1] > np || b[2] < 0 || b[2] > b[3] ||
        b[3] > K) {
      PyErr_Format(PyExc_ValueError, "%s: block %d out of range", what, i);
      return -1;
    }
  }
  return 0;
}

/* -- the float step ----------------------------------------------------------------------- */

ES_CLONES static int float_run(StepObject *s) {
  const int B = s->B, F = s->F, H = s->H, L = s->L, C = s->C, np = s->np_max;
  const int cur = s->bank, nxt = cur ^ 1;
  float *xn = s->scratch, *ap = xn + ES_F_CHUNK * F, *g = ap + (size_t)ES_F_CHUNK * (s->k_max);
  float *y = g + (size_t)ES_F_CHUNK * np;
  int r0, l, bad = -1;
  for (r0 = 0; r0 < B; r0 += ES_F_CHUNK) {
    int rows = B - r0 < ES_F_CHUNK ? B - r0 : ES_F_CHUNK, r;
    es_f_normalize(s->x + (size_t)r0 * F, rows, F, s->mean, s->std, s->asinh, xn);
    for (l = 0; l < L; l++) {
      const float *a1 = l == 0 ? xn : s->h[nxt][l - 1] + (size_t)r0 * H;
      const float *hold = s->h[cur][l] + (size_t)r0 * H;
      float *hnew = s->h[nxt][l] + (size_t)r0 * H;
      int n_in = l == 0 ? F : H;
      es_f_dense(&s->layer[l], n_in + H, a1, n_in, hold, H, rows, ap, g, np);
      if (s->kind == ES_F_GRU)
        es_f_gru_cell(g, np, rows, H, s->gru_ox[l], s->gru_oh[l], hold, hnew);
      else if (s->kind == ES_F_LSTM)
        es_f_lstm_cell(g, np, rows, H, s->c[cur][l] + (size_t)r0 * H, hnew, s->c[nxt][l] + (size_t)r0 * H);
      else
        es_f_rnn_cell(g, np, rows, H, hnew);
    }
    {
      const float *hl = s->h[nxt][L - 1] + (size_t)r0 * H;
      es_f_dense(&s->head, H, hl, H, hl, H, rows, ap, y, s->head.np);
    }
    for (r = 0; r < rows; r++) {
      float *lo = s->logits + (size_t)(r0 + r) * C;
      memcpy(lo, y + (size_t)r * s->head.np, sizeof(float) * C);
      if (!es_f_softmax(lo, C, s->probs + (size_t)(r0 + r) * C) && bad < 0) bad = r0 + r;
    }
  }
  if (bad < 0) s->bank = nxt;
  return bad;
}

/* -- the int8 step: firmware_sim.cemit's step ------------------------------------------------ */

#define ES_IN_LIMIT 1073741823       /* firmware_sim.intsim.IN_LIMIT */

/* reading (float) -> int8 input of the first product: intsim's to_fixed (round half to even,
   saturate to int32), then the emitted step's clamp, offset and requantization; a model with an
   input transform (thr): the emitted step's threshold search instead */
ES_INLINE void q_reading(const StepObject *s, const float *x, int8_t *a, int n_pad) {
  const int F = s->F;
  int f;
  for (f = 0; f < F; f++) {
    double v = nearbyint((double)x[f] * s->in_scale[f]);
    int32_t fx = v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : v == v ? (int32_t)v : 0;
    int32_t d;
    if (s->thr) {
      a[f] = (int8_t)es_k_thresh8(s->thr + (size_t)255 * f, es_k_clamp(fx, -ES_IN_LIMIT, ES_IN_LIMIT));
      continue;
    }
    d = es_k_clamp(fx, -ES_IN_LIMIT, ES_IN_LIMIT) - s->mean_fx[f];
    a[f] = (int8_t)ES_SAT8(es_k_requant(d, s->feat_m[f], s->feat_s[f]) + s->zp0);
  }
  for (; f < n_pad; f++) a[f] = 0;
}

/* one layer's gates (Q12 pre-activations gx + gh) -> its state h (and c), in place */
/* es_k_lut from a packed table p[i] = t[i] | (t[i + 1] - t[i]) << 16: one load per lookup, so a
   loop of them vectorizes (gathers); the same integers */
ES_INLINE int32_t q_lut(const int32_t *p, int32_t x) {
  int32_t u = ES_SAT16(x) + 32768;
  int32_t i = u >> ES_LUT_SHIFT, f = u & ((1 << ES_LUT_SHIFT) - 1);
  int32_t v = p[i];
  return ((int32_t)((uint32_t)v << 16) >> 16) + (((v >> 16) * f) >> ES_LUT_SHIFT);
}

ES_INLINE void q_cell(const StepObject *s, const int32_t *ES_F_RESTRICT gx, const int32_t *ES_F_RESTRICT gh,
                      int16_t *ES_F_RESTRICT h, int32_t *ES_F_RESTRICT c) {
  const int H = s->H;
  const int32_t *sig = s->lut_sig, *th = s->lut_tanh;   /* locals: the loops below then vectorize */
  int k;
  if (s->kind == ES_F_RNN) {
    for (k = 0; k < H; k++) h[k] = (int16_t)q_lut(th, gx[k] + gh[k]);
  } else if (s->kind == ES_F_GRU) {
    for (k = 0; k < H; k++) {
      int32_t hk = h[k];
      int32_t r = q_lut(sig, gx[k] + gh[k]);
      int32_t z = q_lut(sig, gx[H + k] + gh[H + k]);
      int32_t n = q_lut(th, gx[2 * H + k] + es_k_mulq15(gh[2 * H + k], r));
      h[k] = (int16_t)(n + ((z * (hk - n)) >> 15));
    }
  } else {
    for (k = 0; k < H; k++) {
      int32_t i = q_lut(sig, gx[k] + gh[k]);
      int32_t fg = q_lut(sig, gx[H + k] + gh[H + k]);
      int32_t g = q_lut(th, gx[2 * H + k] + gh[2 * H + k]);
      int32_t o = q_lut(sig, gx[3 * H + k] + gh[3 * H + k]);
      int32_t cc = es_k_mulq15(c[k], fg) + ((i * g) >> 15);
      c[k] = cc;
      h[k] = (int16_t)((o * q_lut(th, cc >> 3)) >> 15);
    }
  }
}

ES_INLINE void q_logits(StepObject *s, int b) {
  const int C = s->C;
  const int32_t *lq = s->logits_q12 + (size_t)b * C;
  float *lo = s->logits + (size_t)b * C;
  int k;
  for (k = 0; k < C; k++) lo[k] = (float)lq[k] * (1.0f / 4096.0f);     /* exact below 2^24 / 4096 */
  es_f_softmax(lo, C, s->probs + (size_t)b * C);
}

/* reference: the firmware's es_k_matvec, one stream */
ES_INLINE void q_matvec_ref(const StepObject *s, const int8_t *a, const es_q_dense_t *d, int32_t *y) {
  switch (d->mode) {             /* the requantization variant, a constant in each copy */
    case ES_RQ_LO: es_k_matvec(a, s->xb, (const int8_t *)d->w, d->q, d->n, d->out, ES_RQ_LO, y); break;
    case ES_RQ_HI: es_k_matvec(a, s->xb, (const int8_t *)d->w, d->q, d->n, d->out, ES_RQ_HI, y); break;
    default: es_k_matvec(a, s->xb, (const int8_t *)d->w, d->q, d->n, d->out, ES_RQ_ANY, y); break;
  }
}

static void int8_stream_ref(StepObject *s, int b) {
  const int H = s->H;
  int8_t *a = s->a, *ah = s->ah;
  int l;
  q_reading(s, s->x + (size_t)b * s->F, a, s->n_a);
  for (l = 0; l < s->L; l++) {
    const es_q_layer_t *q = &s->ql[l];
    int16_t *h = s->qh[l] + (size_t)b * H;
    if (l > 0) es_k_quantize(s->qh[l - 1] + (size_t)b * H, H, q->x.n, q->aq_m, q->aq_s, q->x_zp, a);
    q_matvec_ref(s, a, &q->x, s->gx);
    es_k_quantize(h, H, s->h_pad, q->hq_m, q->hq_s, q->h_zp, ah);
    q_matvec_ref(s, ah, &q->h, s->gh);
    q_cell(s, s->gx, s->gh, h, s->kind == ES_F_LSTM ? s->qc[l] + (size_t)b * H : NULL);
  }
  es_k_quantize(s->qh[s->L - 1] + (size_t)b * H, H, s->h_pad, s->head_m, s->head_s, s->head_zp, ah);
  q_matvec_ref(s, ah, &s->qhead, s->logits_q12 + (size_t)b * s->C);
  q_logits(s, b);
}


/* es_k_requant without its branches, so a loop over outputs with their own shifts vectorizes:
   the same steps (scale up to s = 16, or down to s = 31, then the 16-bit halves), the same
   integers (firmware_sim.intsim.requant is written this way) */
ES_INLINE int32_t q_requant_any(int32_t acc, int32_t m, int32_t s) {
  int32_t left = s < 16 ? 16 - s : 0, right;
  acc = (int32_t)((uint32_t)acc << left);
  s += left;
  right = s > 31 ? s - 31 : 0;
  acc >>= right;
  s -= right;
  return es_k_requant_hi(acc, m, s);
}

/* Q15 values -> the int8 input of a product, as float (es_k_quantize, then widened) */
ES_INLINE void q_quantize_f(const int16_t *h, int n, int n_pad, int32_t m, int32_t sh, int32_t zp, float *out) {
  int k;
  for (k = 0; k < n; k++) out[k] = (float)ES_SAT8(q_requant_any(h[k], m, sh) + zp);
  for (; k < n_pad; k++) out[k] = 0.0f;
}

/* the exact float dot products as int32, requantized as es_k_matvec does */
ES_INLINE void q_requant(const es_q_dense_t *d, const float *ES_F_RESTRICT acc, int32_t *ES_F_RESTRICT y) {
  const int32_t *ES_F_RESTRICT zc = d->zc, *ES_F_RESTRICT qm = d->qm, *ES_F_RESTRICT qs = d->qs,
                *ES_F_RESTRICT qb = d->qb;
  size_t o, out = (size_t)d->out;              /* size_t: affine indices under -fwrapv too */
#define ES_Q_RQ_LOOP(RQ)                                                                        \
  for (o = 0; o < out; o++) y[o] = RQ((int32_t)acc[o] - zc[o], qm[o], qs[o]) + qb[o];
  switch (d->mode) {
    case ES_RQ_LO: ES_Q_RQ_LOOP(es_k_requant_lo) break;
    case ES_RQ_HI: ES_Q_RQ_LOOP(es_k_requant_hi) break;
    default: ES_Q_RQ_LOOP(q_requant_any) break;
  }
#undef ES_Q_RQ_LOOP
}

/* the VNNI products (int32, inputs offset by 128), requantized as es_k_matvec does */
ES_INLINE void q_requant_v(const es_q_dense_t *d, const int32_t *ES_F_RESTRICT acc, int32_t *ES_F_RESTRICT y) {
  const int32_t *ES_F_RESTRICT vc = d->vc, *ES_F_RESTRICT qm = d->qm, *ES_F_RESTRICT qs = d->qs,
                *ES_F_RESTRICT qb = d->qb;
  size_t o, out = (size_t)d->out;
#define ES_Q_RQ_LOOP(RQ) for (o = 0; o < out; o++) y[o] = RQ(acc[o] - vc[o], qm[o], qs[o]) + qb[o];
  switch (d->mode) {
    case ES_RQ_LO: ES_Q_RQ_LOOP(es_k_requant_lo) break;
    case ES_RQ_HI: ES_Q_RQ_LOOP(es_k_requant_hi) break;
    default: ES_Q_RQ_LOOP(q_requant_any) break;
  }
#undef ES_Q_RQ_LOOP
}

/* -- int8 products with AVX-512 VNNI (x86-64 with avx512_vnni, picked at run time) ----------
   vpdpbusd adds four u8 x s8 products into each int32 lane: the inputs run as unsigned a + 128
   and 128 x the column's weight sum comes off after (es_q_dense_t.vc), so the int32 sums are
   es_k_matvec's exactly (no saturation: the sums of products stay far inside int32). Weights
   [n / 4][np][4]: one 64-byte load holds four inputs of 16 columns. */
#if ES_HAVE_VNNI
/* ROWS streams x 16 NV columns: ap[k ROWS + i] holds inputs 4k .. 4k + 3 of stream i */
#define ES_V_TILE(NAME, ROWS, NV)                                                                   \
  ES_VNNI static inline void NAME(const int32_t *ap, int k4n, const int8_t *w, size_t ldw, int32_t *y, size_t ldy) { \
    __m512i acc[ROWS][NV], wv[NV], a;                                                             \
    int i, v, k;                                                                                  \
    for (i = 0; i < (ROWS); i++)                                                                  \
      for (v = 0; v < (NV); v++) acc[i][v] = _mm512_setzero_si512();                              \
    for (k = 0; k < k4n; k++) {                                                                   \
      const int8_t *wk = w + (size_t)k * ldw;                                                     \
      for (v = 0; v < (NV); v++) wv[v] = _mm512_loadu_si512((const void *)(wk + 64 * v));         \
      for (i = 0; i < (ROWS); i++) {                                                              \
        a = _mm512_set1_epi32(ap[(size_t)k * (ROWS) + i]);                                        \
        for (v = 0; v < (NV); v++) acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], a, wv[v]);          \
      }                                                                                           \
    }                                                                                             \
    for (i = 0; i < (ROWS); i++)                                                                  \
      for (v = 0; v < (NV); v++) _mm512_storeu_si512((void *)(y + (size_t)i * ldy + 16 * v), acc[i][v]); \
  }
ES_V_TILE(v_tile_6x32, 6, 2)
ES_V_TILE(v_tile_6x16, 6, 1)
ES_V_TILE(v_tile_1x64, 1, 4)
ES_V_TILE(v_tile_1x32, 1, 2)
ES_V_TILE(v_tile_1x16, 1, 1)

/* y[r][0 .. np) = sum over inputs of a8[r][k] w[k][:] (int32), rows r < rows; a8 rows of lda bytes
   (a multiple of 4), pack: 6 x n / 4 words of scratch */
ES_VNNI static void v_dense(const es_q_dense_t *d, const uint8_t *a8, size_t lda, int rows, int32_t *pack,
                            int32_t *y, size_t ldy) {
  const int k4n = d->n / 4, np = d->np, full = rows - rows % 6;
  const size_t ldw = (size_t)4 * np;
  int r, j, k, i;
  for (r = 0; r < full; r += 6) {
    for (k = 0; k < k4n; k++)
      for (i = 0; i < 6; i++) memcpy(pack + (size_t)k * 6 + i, a8 + (size_t)(r + i) * lda + 4 * (size_t)k, 4);
    for (j = 0; j + 32 <= np; j += 32) v_tile_6x32(pack, k4n, d->wv + 4 * (size_t)j, ldw, y + (size_t)r * ldy + j, ldy);
    if (j < np) v_tile_6x16(pack, k4n, d->wv + 4 * (size_t)j, ldw, y + (size_t)r * ldy + j, ldy);
  }
  for (; r < rows; r++) {
    const int32_t *row = (const int32_t *)(const void *)(a8 + (size_t)r * lda);
    int32_t *yr = y + (size_t)r * ldy;
    for (j = 0; j + 64 <= np; j += 64) v_tile_1x64(row, k4n, d->wv + 4 * (size_t)j, ldw, yr + j, ldy);
    if (j + 32 <= np) v_tile_1x32(row, k4n, d->wv + 4 * (size_t)j, ldw, yr + j, ldy), j += 32;
    if (j < np) v_tile_1x16(row, k4n, d->wv + 4 * (size_t)j, ldw, yr + j, ldy);
  }
}

/* q_cell, 16 units at a time: the same integers (the tables' loads as gathers) */
ES_VNNI static inline __m512i v_lut(const int32_t *p, __m512i x, __mmask16 m) {
  __m512i u = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(x, _mm512_set1_epi32(-32768)),
                                                _mm512_set1_epi32(32767)), _mm512_set1_epi32(32768));
  __m512i i = _mm512_srai_epi32(u, ES_LUT_SHIFT), f = _mm512_and_si512(u, _mm512_set1_epi32((1 << ES_LUT_SHIFT) - 1));
  __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, i, (const void *)p, 4);
  __m512i lo = _mm512_srai_epi32(_mm512_slli_epi32(v, 16), 16), d = _mm512_srai_epi32(v, 16);
  return _mm512_add_epi32(lo, _mm512_srai_epi32(_mm512_mullo_epi32(d, f), ES_LUT_SHIFT));
}
ES_VNNI static inline __m512i v_mulq15(__m512i a, __m512i q) {   /* es_k_mulq15 */
  __m512i hi = _mm512_slli_epi32(_mm512_mullo_epi32(_mm512_srai_epi32(a, 16), q), 1);
  __m512i lo = _mm512_srli_epi32(_mm512_mullo_epi32(_mm512_and_si512(a, _mm512_set1_epi32(0xFFFF)), q), 15);
  return _mm512_add_epi32(hi, lo);
}
#define V_LD(p, m) _mm512_maskz_loadu_epi32((m), (const void *)(p))
#define V_ADD(p, q, k, m) _mm512_add_epi32(V_LD((p) + (k), m), V_LD((q) + (k), m))
ES_VNNI static void v_cell(const StepObject *s, const int32_t *gx, const int32_t *gh, int16_t *h, int32_t *c) {
  const int H = s->H;
  const int32_t *sig = s->lut_sig, *th = s->lut_tanh;
  int k;
  for (k = 0; k < H; k += 16) {
    __mmask16 m = H - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (H - k)) - 1u);
    if (s->kind == ES_F_RNN) {
      _mm512_mask_cvtepi32_storeu_epi16(h + k, m, v_lut(th, V_ADD(gx, gh, k, m), m));
    } else if (s->kind == ES_F_GRU) {
      __m512i hk = _mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16(m, h + k));
      __m512i r = v_lut(sig, V_ADD(gx, gh, k, m), m);
      __m512i z = v_lut(sig, V_ADD(gx, gh, H + k, m), m);
      __m512i n = v_lut(th, _mm512_add_epi32(V_LD(gx + 2 * H + k, m), v_mulq15(V_LD(gh + 2 * H + k, m), r)), m);
      __m512i hn = _mm512_add_epi32(n, _mm512_srai_epi32(_mm512_mullo_epi32(z, _mm512_sub_epi32(hk, n)), 15));
      _mm512_mask_cvtepi32_storeu_epi16(h + k, m, hn);
    } else {
      __m512i i = v_lut(sig, V_ADD(gx, gh, k, m), m);
      __m512i fg = v_lut(sig, V_ADD(gx, gh, H + k, m), m);
      __m512i g = v_lut(th, V_ADD(gx, gh, 2 * H + k, m), m);
      __m512i o = v_lut(sig, V_ADD(gx, gh, 3 * H + k, m), m);
      __m512i cc = _mm512_add_epi32(v_mulq15(V_LD(c + k, m), fg), _mm512_srai_epi32(_mm512_mullo_epi32(i, g), 15));
      _mm512_mask_storeu_epi32(c + k, m, cc);
      _mm512_mask_cvtepi32_storeu_epi16(
          h + k, m, _mm512_srai_epi32(_mm512_mullo_epi32(o, v_lut(th, _mm512_srai_epi32(cc, 3), m)), 15));
    }
  }
}
#undef V_LD
#undef V_ADD

#endif

/* a reading -> unsigned inputs a + 128 of the first VNNI product, n >= F of them (q_reading, offset) */
ES_INLINE void q_reading_u8(const StepObject *s, const float *x, int n, uint8_t *ES_F_RESTRICT out) {
  const int F = s->F;
  int f;
  q_reading(s, x, s->a, F);
  for (f = 0; f < F; f++) out[f] = (uint8_t)(s->a[f] + 128);
  for (; f < n; f++) out[f] = 128;
}

/* Q15 values -> unsigned inputs a + 128 of a VNNI product (es_k_quantize, offset) */
ES_INLINE void q_quantize_u8(const int16_t *ES_F_RESTRICT h, int n, int n_pad, int32_t m, int32_t sh, int32_t zp,
                             uint8_t *ES_F_RESTRICT out) {
  int k;
  for (k = 0; k < n; k++) out[k] = (uint8_t)(ES_SAT8(q_requant_any(h[k], m, sh) + zp) + 128);
  for (; k < n_pad; k++) out[k] = 128;
}

#if ES_HAVE_VNNI
/* All streams, ES_F_CHUNK at a time, the products through v_dense */
ES_VNNI static int int8_run_vnni(StepObject *s) {
  const int B = s->B, H = s->H, L = s->L, n_a = s->n_a, h_pad = s->h_pad, qnp = s->qnp;
  int r0, r, l;
  for (r0 = 0; r0 < B; r0 += ES_F_CHUNK) {
    int rows = B - r0 < ES_F_CHUNK ? B - r0 : ES_F_CHUNK;
    for (r = 0; r < rows; r++) q_reading_u8(s, s->x + (size_t)(r0 + r) * s->F, s->ql[0].x.n, s->va + (size_t)r * n_a);
    for (l = 0; l < L; l++) {
      const es_q_layer_t *q = &s->ql[l];
      if (l > 0)
        for (r = 0; r < rows; r++)
          q_quantize_u8(s->qh[l - 1] + (size_t)(r0 + r) * H, H, q->x.n, q->aq_m, q->aq_s, q->x_zp,
                        s->va + (size_t)r * n_a);
      v_dense(&q->x, s->va, (size_t)n_a, rows, s->vpack, s->vgx, (size_t)qnp);
      for (r = 0; r < rows; r++)
        q_quantize_u8(s->qh[l] + (size_t)(r0 + r) * H, H, h_pad, q->hq_m, q->hq_s, q->h_zp,
                      s->vah + (size_t)r * h_pad);
      v_dense(&q->h, s->vah, (size_t)h_pad, rows, s->vpack, s->vgh, (size_t)qnp);
      for (r = 0; r < rows; r++) {
        q_requant_v(&q->x, s->vgx + (size_t)r * qnp, s->gx);
        q_requant_v(&q->h, s->vgh + (size_t)r * qnp, s->gh);
        v_cell(s, s->gx, s->gh, s->qh[l] + (size_t)(r0 + r) * H,
               s->kind == ES_F_LSTM ? s->qc[l] + (size_t)(r0 + r) * H : NULL);
      }
    }
    for (r = 0; r < rows; r++)
      q_quantize_u8(s->qh[L - 1] + (size_t)(r0 + r) * H, H, h_pad, s->head_m, s->head_s, s->head_zp,
                    s->vah + (size_t)r * h_pad);
    v_dense(&s->qhead, s->vah, (size_t)h_pad, rows, s->vpack, s->vgx, (size_t)qnp);
    for (r = 0; r < rows; r++) {
      q_requant_v(&s->qhead, s->vgx + (size_t)r * qnp, s->logits_q12 + (size_t)(r0 + r) * s->C);
      q_logits(s, r0 + r);
    }
  }
  return -1;
}
#endif

/* All streams, ES_F_CHUNK at a time: each product is one batched float product (exact). */
ES_CLONES static int int8_run(StepObject *s) {
  const int B = s->B, H = s->H, L = s->L, n_a = s->n_a, h_pad = s->h_pad, qnp = s->qnp;
  float *xa = s->qscratch, *ah = xa + (size_t)ES_F_CHUNK * n_a, *ap = ah + (size_t)ES_F_CHUNK * h_pad;
  float *gxf = ap + (size_t)ES_F_CHUNK * n_a, *ghf = gxf + (size_t)ES_F_CHUNK * qnp;
  int r0, r, l;
  if (s->reference) {
    for (r = 0; r < B; r++) int8_stream_ref(s, r);
    return -1;
  }
#if ES_HAVE_VNNI
  if (s->vnni) return int8_run_vnni(s);
#endif
  for (r0 = 0; r0 < B; r0 += ES_F_CHUNK) {
    int rows = B - r0 < ES_F_CHUNK ? B - r0 : ES_F_CHUNK;
    for (r = 0; r < rows; r++) {
      int k;
      q_reading(s, s->x + (size_t)(r0 + r) * s->F, s->a, s->ql[0].x.n);
      for (k = 0; k < s->ql[0].x.n; k++) xa[(size_t)r * n_a + k] = s->a[k];
    }
    for (l = 0; l < L; l++) {
      const es_q_layer_t *q = &s->ql[l];
      if (l > 0)
        for (r = 0; r < rows; r++)
          q_quantize_f(s->qh[l - 1] + (size_t)(r0 + r) * H, H, q->x.n, q->aq_m, q->aq_s, q->x_zp, xa + (size_t)r * n_a);
      es_f_dense(&q->x.f, q->x.n, xa, n_a, xa, n_a, rows, ap, gxf, q->x.np);
      for (r = 0; r < rows; r++)
        q_quantize_f(s->qh[l] + (size_t)(r0 + r) * H, H, h_pad, q->hq_m, q->hq_s, q->h_zp, ah + (size_t)r * h_pad);
      es_f_dense(&q->h.f, h_pad, ah, h_pad, ah, h_pad, rows, ap, ghf, q->h.np);
      for (r = 0; r < rows; r++) {
        q_requant(&q->x, gxf + (size_t)r * q->x.np, s->gx);
        q_requant(&q->h, ghf + (size_t)r * q->h.np, s->gh);
        q_cell(s, s->gx, s->gh, s->qh[l] + (size_t)(r0 + r) * H,
               s->kind == ES_F_LSTM ? s->qc[l] + (size_t)(r0 + r) * H : NULL);
      }
    }
    for (r = 0; r < rows; r++)
      q_quantize_f(s->qh[L - 1] + (size_t)(r0 + r) * H, H, h_pad, s->head_m, s->head_s, s->head_zp,
                   ah + (size_t)r * h_pad);
    es_f_dense(&s->qhead.f, h_pad, ah, h_pad, ah, h_pad, rows, ap, gxf, s->qhead.np);
    for (r = 0; r < rows; r++) {
      q_requant(&s->qhead, gxf + (size_t)r * s->qhead.np, s->logits_q12 + (size_t)(r0 + r) * s->C);
      q_logits(s, r0 + r);
    }
  }
  return -1;
}

/* -- Step ---------------------------------------------------------------------------------- */

/* the step (es_step_t.run) */
static int step_run(es_step_t *step) {
  StepObject *s = (StepObject *)step;
  return s->quant ? int8_run(s) : float_run(s);
}

static PyObject *step_get_bank(StepObject *s, void *closure) {
  (void)closure;
  return PyLong_FromLong(s->bank);
}

static PyObject *step_get_kernel(StepObject *s, void *closure) {
  (void)closure;
  if (!s->quant) return PyUnicode_FromString("float32");
  if (s->reference) return PyUnicode_FromString("int8 es_k_matvec (the firmware's kernel)");
  if (s->vnni) return PyUnicode_FromString("int8 AVX-512 VNNI");
  return PyUnicode_FromString("int8 as exact float32 products");
}

static PyGetSetDef step_getset[] = {
    {"bank", (getter)step_get_bank, NULL, "float models: the state bank (0 or 1) that holds the current state", NULL},
    {"kernel", (getter)step_get_kernel, NULL, "the products' kernel this step runs", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

ES_STEP_TYPE(es_step_type, "Step", StepObject, step_dealloc,
             "A bound recurrent step; build it with float_step() or int8_step().", step_getset, ES_STEP_RUN_DOC,
             "push(readings) -> int: copy float32 [B, F] readings into x, check them against the bounds and run: "
             ES_STEP_PUSH_CODES);

/* -- constructors ------------------------------------------------------------------------ */

/* the number of layers, or -1 with a ValueError (a size out of range, or not a list of layers) */
static Py_ssize_t check_sizes(int kind, int B, int F, int H, int C, PyObject *layers) {
  if (kind < 0 || kind > 2 || B < 1 || F < 1 || H < 1 || C < 1 || H > (1 << 16) || F > (1 << 16) || C > (1 << 16)) {
    PyErr_SetString(PyExc_ValueError, "sizes out of range");
    return -1;
  }
  return es_layer_count(layers, ES_MAX_LAYERS);
}

PyObject *es_float_step(PyObject *mod, PyObject *args) {
  int kind, B, F, H, C, l, gates;
  PyObject *x, *logits, *probs, *mean, *std, *bank0, *bank1, *layers, *head, *asinh = Py_None;
  StepObject *s;
  Py_ssize_t L, per, nst;
  (void)mod;
  if (!PyArg_ParseTuple(args, "iiiiiOOOOOOOOO|O", &kind, &B, &F, &H, &C, &x, &logits, &probs, &mean, &std, &bank0,
                        &bank1, &layers, &head, &asinh))
    return NULL;
  if ((L = check_sizes(kind, B, F, H, C, layers)) < 0) return NULL;
  per = kind == ES_F_LSTM ? 2 : 1;
  nst = L * per;
  if (!PyList_Check(bank0) || !PyList_Check(bank1) || PyList_GET_SIZE(bank0) != nst || PyList_GET_SIZE(bank1) != nst) {
    PyErr_SetString(PyExc_ValueError, "bank0, bank1: lists of one array per state tensor expected");
    return NULL;
  }
  if (!(s = es_step_alloc(&es_step_type, ES_MAX_VIEWS, step_run))) return NULL;
  s->quant = 0;
  s->kind = kind;
  s->B = B, s->F = F, s->H = H, s->C = C, s->L = (int)L;
  if (es_step_bind_io((es_step_t *)s, x, logits, probs, C, &s->logits, &s->probs) < 0 ||
      !(s->mean = bind(s, mean, 4, F, 0, "mean")) || !(s->std = bind(s, std, 4, F, 0, "std")) ||
      (asinh != Py_None && !(s->asinh = bind(s, asinh, 4, F, 0, "asinh"))))
    goto fail;
  for (l = 0; l < L; l++) {
    int k;
    for (k = 0; k < 2; k++) {
      PyObject *bank = k ? bank1 : bank0;
      if (!(s->h[k][l] = bind_item(s, bank, l * per, 4, (Py_ssize_t)B * H, 1, "state h"))) goto fail;
      if (per == 2 && !(s->c[k][l] = bind_item(s, bank, l * per + 1, 4, (Py_ssize_t)B * H, 1, "state c"))) goto fail;
    }
  }
  gates = kind == ES_F_RNN ? 1 : 4;
  for (l = 0; l < L; l++) {
    PyObject *t = PyList_GET_ITEM(layers, l), *dense;
    int n_in = l == 0 ? F : H;
    long ox = 0, oh = 0;
    if (es_check_tuple(t, 3, "layer") < 0) goto fail;
    dense = PyTuple_GET_ITEM(t, 0);
    if (bind_dense(s, &s->layer[l], dense, n_in + H, n_in, "layer") < 0) goto fail;
    if (es_get_int(t, 1, 0, s->layer[l].np - H, &ox, "gru x-part offset") < 0 ||
        es_get_int(t, 2, 0, s->layer[l].np - H, &oh, "gru h-part offset") < 0)
      goto fail;
    if (s->layer[l].np < gates * H) {
      PyErr_SetString(PyExc_ValueError, "layer: fewer columns than gates");
      goto fail;
    }
    s->gru_ox[l] = (int)ox, s->gru_oh[l] = (int)oh;
    if (s->layer[l].np > s->np_max) s->np_max = s->layer[l].np;
    s->work += (long)B * (n_in + H) * s->layer[l].np;
  }
  if (bind_dense(s, &s->head, head, H, H, "head") < 0) goto fail;
  if (s->head.np < C) {
    PyErr_SetString(PyExc_ValueError, "head: fewer columns than classes");
    goto fail;
  }
  if (s->head.np > s->np_max) s->np_max = s->head.np;
  s->work += (long)B * H * s->head.np;
  s->k_max = (F > H ? F : H) + H;
  if (!(s->scratch = es_malloc(sizeof(float) * ((size_t)ES_F_CHUNK * F + (size_t)ES_F_CHUNK * s->k_max +
                                                (size_t)2 * ES_F_CHUNK * s->np_max))))
    goto fail;
  return (PyObject *)s;
fail:
  Py_DECREF(s);
  return NULL;
}

/* the requantization constants split by kind, and for VNNI the weights interleaved by four
   inputs and the column sums (from the float view, which holds the int8 values) */
static int q_split(StepObject *s, es_q_dense_t *d) {
  const int out = d->out, n = d->n, np = d->np;
  const float *wf = (const float *)d->w;
  size_t words = (size_t)5 * out, k, o;
  int32_t *m = PyMem_Calloc(words * sizeof(int32_t) + (s->vnni ? (size_t)n * np : 0) + 64, 1);
  if (m == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  d->mem = m;
  d->zc = m, d->qm = m + out, d->qs = m + 2 * out, d->qb = m + 3 * out, d->vc = m + 4 * out;
  for (o = 0; o < (size_t)out; o++) {
    d->zc[o] = d->q[4 * o], d->qm[o] = d->q[4 * o + 1], d->qs[o] = d->q[4 * o + 2], d->qb[o] = d->q[4 * o + 3];
    d->vc[o] = d->zc[o];
  }
  if (!s->vnni) return 0;
  d->wv = (int8_t *)(m + words);
  for (k = 0; k < (size_t)n; k++)
    for (o = 0; o < (size_t)np; o++) {
      float v = wf[k * np + o];
      if (!(v >= -128.0f && v <= 127.0f && v == (float)(int)v)) {
        PyErr_SetString(PyExc_ValueError, "int8 weights: a value that is not an int8");
        return -1;
      }
      d->wv[((k / 4) * np + o) * 4 + k % 4] = (int8_t)v;
      if (o < (size_t)out) d->vc[o] += 128 * (int32_t)v;
    }
  return 0;
}

/* one int8 product (w, q, mode, np): see es_q_dense_t */
static int bind_q_dense(StepObject *s, es_q_dense_t *d, PyObject *t, int n, int out, const char *what) {
  long mode, np;
  if (es_check_tuple(t, 4, what) < 0 || es_get_int(t, 2, 0, 2, &mode, what) < 0 || es_get_int(t, 3, 0, 1 << 20, &np, what) < 0)
    return -1;
  d->n = n, d->out = out, d->mode = (int)mode, d->np = (int)np;
  if (n % 4) {
    PyErr_Format(PyExc_ValueError, "%s: inputs %d not a multiple of 4", what, n);
    return -1;
  }
  if (!(d->q = bind_item(s, t, 1, 4, (Py_ssize_t)out * 4, 0, what))) return -1;
  if (s->reference) {
    if (!(d->w = bind_item(s, t, 0, 1, (Py_ssize_t)((out + 3) & ~3) * n, 0, what))) return -1;
    return 0;
  }
  if (n > ES_Q_EXACT_N || np < out || np % ES_F_NB) {
    PyErr_Format(PyExc_ValueError, "%s: %d inputs, %ld columns: not a float-exact product", what, n, np);
    return -1;
  }
  if (!(d->w = bind_item(s, t, 0, 4, (Py_ssize_t)n * np, 0, what))) return -1;
  d->blk[0] = 0, d->blk[1] = (int32_t)np, d->blk[2] = 0, d->blk[3] = n;
  d->f.w = (const float *)d->w;
  d->f.blocks = d->blk;
  d->f.nblocks = 1;
  d->f.np = (int)np;
  d->f.n1 = n;
  if (np > s->qnp) s->qnp = (int)np;
  return q_split(s, d);
}

static int get_i32(PyObject *t, Py_ssize_t i, int32_t *out, const char *what) {
  long v;
  if (es_get_int(t, i, -2147483647L - 1, 2147483647L, &v, what) < 0) return -1;
  *out = (int32_t)v;
  return 0;
}

PyObject *es_int8_step(PyObject *mod, PyObject *args) {
  int kind, B, F, H, C, l, gates, f_pad, h_pad, reference = 0, vnni = 1;
  PyObject *x, *logits, *logits_q12, *probs, *state, *feat, *layers, *head, *sig, *tanh_;
  StepObject *s;
  Py_ssize_t L, per;
  (void)mod;
  if (!PyArg_ParseTuple(args, "iiiiiOOOOOOOOOO|pp", &kind, &B, &F, &H, &C, &x, &logits, &logits_q12, &probs, &state,
                        &feat, &layers, &head, &sig, &tanh_, &reference, &vnni))
    return NULL;
  if ((L = check_sizes(kind, B, F, H, C, layers)) < 0) return NULL;
  per = kind == ES_F_LSTM ? 2 : 1;
  if (!PyList_Check(state) || PyList_GET_SIZE(state) != L * per) {
    PyErr_SetString(PyExc_ValueError, "state: a list of one array per state tensor expected");
    return NULL;
  }
  if (es_check_tuple(feat, 6, "feat") < 0 || es_check_tuple(head, 4, "head") < 0) return NULL;
  if (!(s = es_step_alloc(&es_step_type, ES_MAX_VIEWS, step_run))) return NULL;
  s->quant = 1;
  s->reference = reference;
  s->vnni = !reference && vnni && es_vnni_supported();
  s->kind = kind;
  s->B = B, s->F = F, s->H = H, s->C = C, s->L = (int)L;
  gates = kind == ES_F_RNN ? 1 : (kind == ES_F_GRU ? 3 : 4);
  f_pad = (F + 3) & ~3, h_pad = (H + 3) & ~3;
  s->n_a = f_pad > h_pad ? f_pad : h_pad;
  s->h_pad = h_pad;
  if (es_step_bind_io((es_step_t *)s, x, logits, probs, C, &s->logits, &s->probs) < 0 ||
      !(s->logits_q12 = bind(s, logits_q12, 4, (Py_ssize_t)B * C, 1, "logits_q12")) ||
      !(s->sigmoid = bind(s, sig, 2, 2049, 0, "sigmoid")) || !(s->tanh = bind(s, tanh_, 2, 2049, 0, "tanh")))
    goto fail;
  if (!(s->lut_sig = es_malloc(sizeof(int32_t) * 2 * 2048))) goto fail;
  s->lut_tanh = s->lut_sig + 2048;
  for (l = 0; l < 2048; l++) {
    int32_t ds = (int32_t)s->sigmoid[l + 1] - s->sigmoid[l], dt = (int32_t)s->tanh[l + 1] - s->tanh[l];
    if (ds < -32768 || ds > 32767 || dt < -32768 || dt > 32767) {
      PyErr_SetString(PyExc_ValueError, "sigmoid/tanh tables: a step between knots beyond 16 bits");
      goto fail;
    }
    s->lut_sig[l] = (int32_t)(((uint32_t)ds << 16) | (uint16_t)s->sigmoid[l]);
    s->lut_tanh[l] = (int32_t)(((uint32_t)dt << 16) | (uint16_t)s->tanh[l]);
  }
  for (l = 0; l < L; l++) {
    if (!(s->qh[l] = bind_item(s, state, l * per, 2, (Py_ssize_t)B * H, 1, "state h"))) goto fail;
    if (per == 2 && !(s->qc[l] = bind_item(s, state, l * per + 1, 4, (Py_ssize_t)B * H, 1, "state c"))) goto fail;
  }
  if (!(s->in_scale = bind_item(s, feat, 0, 8, F, 0, "in_scale")) ||
      !(s->mean_fx = bind_item(s, feat, 1, 4, F, 0, "mean_fx")) ||
      !(s->feat_m = bind_item(s, feat, 2, 4, F, 0, "feat_m")) ||
      !(s->feat_s = bind_item(s, feat, 3, 4, F, 0, "feat_s")) ||
      get_i32(feat, 4, &s->zp0, "zp0") < 0)
    goto fail;
  if (PyTuple_GET_ITEM(feat, 5) != Py_None) {   /* the input transform's thresholds, non-decreasing per channel */
    int f, k;
    if (!(s->thr = bind_item(s, feat, 5, 4, (Py_ssize_t)F * 255, 0, "thr"))) goto fail;
    for (f = 0; f < F; f++)
      for (k = 1; k < 255; k++)
        if (s->thr[(size_t)255 * f + k] < s->thr[(size_t)255 * f + k - 1]) {
          PyErr_Format(PyExc_ValueError, "thr: channel %d's thresholds are not ascending", f);
          goto fail;
        }
  }
  for (l = 0; l < L; l++) {
    PyObject *t = PyList_GET_ITEM(layers, l);
    es_q_layer_t *q = &s->ql[l];
    if (es_check_tuple(t, 8, "layer") < 0) goto fail;
    if (bind_q_dense(s, &q->x, PyTuple_GET_ITEM(t, 0), l == 0 ? f_pad : h_pad, gates * H, "layer x") < 0 ||
        bind_q_dense(s, &q->h, PyTuple_GET_ITEM(t, 1), h_pad, gates * H, "layer h") < 0 ||
        get_i32(t, 2, &q->hq_m, "hq_m") < 0 || get_i32(t, 3, &q->hq_s, "hq_s") < 0 ||
        get_i32(t, 4, &q->h_zp, "h_zp") < 0 || get_i32(t, 5, &q->aq_m, "aq_m") < 0 ||
        get_i32(t, 6, &q->aq_s, "aq_s") < 0 || get_i32(t, 7, &q->x_zp, "x_zp") < 0)
      goto fail;
    s->work += (long)B * (q->x.n + h_pad) * gates * H;
  }
  if (bind_q_dense(s, &s->qhead, PyTuple_GET_ITEM(head, 0), h_pad, C, "head") < 0 ||
      get_i32(head, 1, &s->head_m, "head m") < 0 || get_i32(head, 2, &s->head_s, "head s") < 0 ||
      get_i32(head, 3, &s->head_zp, "head zp") < 0)
    goto fail;
  {
    size_t words = (size_t)2 * gates * H + (size_t)s->n_a + (size_t)s->n_a + h_pad;
    s->gx = PyMem_Malloc(sizeof(int32_t) * words);
    s->qscratch = PyMem_Malloc(sizeof(float) * ES_F_CHUNK * ((size_t)2 * s->n_a + h_pad + (size_t)2 * s->qnp));
    s->qzero = PyMem_Calloc((size_t)s->qnp + 1, sizeof(float));
    if (!s->gx || !s->qscratch || !s->qzero) {
      PyErr_NoMemory();
      goto fail;
    }
    for (l = 0; l < L; l++) s->ql[l].x.f.b = s->ql[l].h.f.b = s->qzero;
    s->qhead.f.b = s->qzero;
    if (s->vnni) {
      size_t bytes = (size_t)ES_F_CHUNK * (s->n_a + h_pad), words = (size_t)6 * s->n_a / 4 + (size_t)2 * ES_F_CHUNK * s->qnp;
      bytes = (bytes + 63) & ~(size_t)63;
      if (!(s->va = PyMem_Calloc(bytes + sizeof(int32_t) * words, 1))) {
        PyErr_NoMemory();
        goto fail;
      }
      s->vah = s->va + (size_t)ES_F_CHUNK * s->n_a;
      s->vpack = (int32_t *)(void *)(s->va + bytes);
      s->vgx = s->vpack + (size_t)6 * s->n_a / 4;
      s->vgh = s->vgx + (size_t)ES_F_CHUNK * s->qnp;
    }
    s->gh = s->gx + gates * H;
    s->xb = s->gh + gates * H;                   /* 2 n_a bytes for the DSP path: n_a words are plenty */
    s->a = (int8_t *)(s->xb + s->n_a);           /* n_a bytes, then ah: h_pad bytes */
    s->ah = s->a + s->n_a;
  }
  return (PyObject *)s;
fail:
  Py_DECREF(s);
  return NULL;
}
