/* es_ssm_lanes.h: the state-space step's lane kernels for chunks of ES_S_L streams (es_ssm.h,
   "a chunk of streams at a time"); included by es_ssm.h once per width, with ES_S_L defined and
   every name mapped to the width's own. No include guard, by design. */

typedef float es_s_v __attribute__((vector_size(4 * ES_S_L)));
typedef int32_t es_s_vi __attribute__((vector_size(4 * ES_S_L)));

/* x in every lane (gcc: as a shuffle of lane 0, where it builds a vector of copies lane by lane;
   clang, which has no __builtin_shuffle: a vector plus a scalar) */
ES_F_INLINE es_s_v es_s_splat(float x) {
#if defined(__clang__)
  return (es_s_v){0} + x;
#else
  es_s_v v = {0};
  v[0] = x;
  return __builtin_shuffle(v, (es_s_vi){0});
#endif
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

/* a tile's column j, c, into y[j]; rb set: added to y[j] as es_s_lresidual adds, (y[j] + c) + rb[j] */
#define ES_S_YPUT(y, j, c) ((y)[j] = rb ? ((y)[j] + (c)) + rb[j] : (c))

/* y[o] = bias[o] + sum over k < K of w[k][o] a[k], o < ES_S_TO (rb: ES_S_YPUT) */
ES_F_INLINE void es_s_ltile(const es_s_v *ES_F_RESTRICT a, int K, const float *ES_F_RESTRICT w, int ldw,
                            const float *ES_F_RESTRICT b, es_s_v *ES_F_RESTRICT y, const float *rb) {
  es_s_v c0 = es_s_splat(b[0]), c1 = es_s_splat(b[1]), c2 = es_s_splat(b[2]), c3 = es_s_splat(b[3]);
  es_s_v c4 = es_s_splat(b[4]), c5 = es_s_splat(b[5]), c6 = es_s_splat(b[6]), c7 = es_s_splat(b[7]);
  int k;
  for (k = 0; k < K; k++) {
    const float *wk = w + (size_t)k * ldw;
    const es_s_v ak = a[k];
    c0 += wk[0] * ak, c1 += wk[1] * ak, c2 += wk[2] * ak, c3 += wk[3] * ak;
    c4 += wk[4] * ak, c5 += wk[5] * ak, c6 += wk[6] * ak, c7 += wk[7] * ak;
  }
  ES_S_YPUT(y, 0, c0), ES_S_YPUT(y, 1, c1), ES_S_YPUT(y, 2, c2), ES_S_YPUT(y, 3, c3);
  ES_S_YPUT(y, 4, c4), ES_S_YPUT(y, 5, c5), ES_S_YPUT(y, 6, c6), ES_S_YPUT(y, 7, c7);
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

/* es_s_lout's stage of a projection with a code table (es_s_proj_t.tab: m, then OUT with out_d 1,
   no post before the table), leaving each output's rounded value less its lowest (-128 - out_z)
   as an int32 code, 0 .. 255, in place of its float: the value the code stands for is the one
   es_s_lout gives (the table adds post) */
ES_F_INLINE void es_s_lcodes(const es_s_proj_t *p, es_s_v *ES_F_RESTRICT y) {
  const float lo = -128.0f - p->out_z, hi = 127.0f - p->out_z;
  int k;
  for (k = 0; k < p->out; k++) {
    const es_s_v r = (es_s_vclamp(y[k] * p->m[k], lo, hi) + 12582912.0f) - 12582912.0f;
    y[k] = (es_s_v)__builtin_convertvector(r - lo, es_s_vi);
  }
}

/* the same for two chunks at once, a0 -> y0 and a1 -> y1: each output's weight read once for
   both (16 accumulators: for machines with 32 vector registers) */
ES_F_INLINE void es_s_ltile2(const es_s_v *ES_F_RESTRICT a0, const es_s_v *ES_F_RESTRICT a1, int K,
                             const float *ES_F_RESTRICT w, int ldw, const float *ES_F_RESTRICT b,
                             es_s_v *ES_F_RESTRICT y0, es_s_v *ES_F_RESTRICT y1, const float *rb) {
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
  ES_S_YPUT(y0, 0, c0), ES_S_YPUT(y0, 1, c1), ES_S_YPUT(y0, 2, c2), ES_S_YPUT(y0, 3, c3);
  ES_S_YPUT(y0, 4, c4), ES_S_YPUT(y0, 5, c5), ES_S_YPUT(y0, 6, c6), ES_S_YPUT(y0, 7, c7);
  ES_S_YPUT(y1, 0, d0), ES_S_YPUT(y1, 1, d1), ES_S_YPUT(y1, 2, d2), ES_S_YPUT(y1, 3, d3);
  ES_S_YPUT(y1, 4, d4), ES_S_YPUT(y1, 5, d5), ES_S_YPUT(y1, 6, d6), ES_S_YPUT(y1, 7, d7);
}

#if ES_S_L == 8
/* es_s_ltile2 on hosts with 16 vector registers: NO (6, 5 or 4) outputs of two chunks, 2 x NO
   accumulators (10 or 12 hide the multiply-add's latency where 8 do not) */
#define ES_S_LTILE2N(NO)                                                                          \
  ES_F_INLINE void es_s_ltile2_##NO(const es_s_v *ES_F_RESTRICT a0, const es_s_v *ES_F_RESTRICT a1, int K,  \
                                    const float *ES_F_RESTRICT w, int ldw, const float *ES_F_RESTRICT b, \
                                    es_s_v *ES_F_RESTRICT y0, es_s_v *ES_F_RESTRICT y1, const float *rb) { \
    es_s_v c[NO], d[NO];                                                                        \
    int j, k;                                                                                   \
    for (j = 0; j < (NO); j++) c[j] = d[j] = es_s_splat(b[j]);                                  \
    for (k = 0; k < K; k++) {                                                                   \
      const float *wk = w + (size_t)k * ldw;                                                    \
      const es_s_v ak = a0[k], bk = a1[k];                                                      \
      for (j = 0; j < (NO); j++) {                                                              \
        const float t = wk[j];                                                                  \
        c[j] += t * ak, d[j] += t * bk;                                                         \
      }                                                                                         \
    }                                                                                           \
    for (j = 0; j < (NO); j++) ES_S_YPUT(y0, j, c[j]), ES_S_YPUT(y1, j, d[j]);                  \
  }
ES_S_LTILE2N(6)
ES_S_LTILE2N(5)
ES_S_LTILE2N(4)
#undef ES_S_LTILE2N
#endif

/* es_s_proj, lane-wise, for nch (1 or 2) chunks: y[h][0 .. out) = P(a[h][0 .. K)), a[h] already
   quantized (es_s_lquantize) where the projection quantizes its input. y[h] holds out rounded up
   to ES_S_TO (the padding columns of W and bias are zero). */
typedef struct {
  int wide;                         /* es_s_ltile2 for two chunks */
  /* 8 lanes with AVX2's int16 pairs (vw2), 16 with AVX-512 VNNI's bytes (vw), or NULL: pack
     quantizes a projection's input a[h] into u (2 x k2 x 8 or 2 x k4 x 16 words), nonzero where a
     holds a NaN (nothing packed); dotp runs the products from u, with the output stage (es_s_lout),
     or leaves codes where the projection has a table (es_s_proj_t.tab); u: their scratch */
  int (*pack)(const es_s_proj_t *p, es_s_v *const *a, int nch, int32_t *u);
  void (*dotp)(const es_s_proj_t *p, es_s_v *const *y, int nch, const int32_t *u);
  int32_t *u;
  /* es_s_lquantize_in without a division for a projection whose es_s_proj_t.in_r is set (the
     same floats), or NULL */
  void (*quant)(const es_s_proj_t *p, es_s_v *const *a, es_s_v *const *qa, int nch);
} es_s_lctx_t;

ES_F_INLINE void es_s_lproj_qr(const es_s_proj_t *p, es_s_v *const *a, es_s_v *const *y, int nch,
                               const es_s_lctx_t *cx, const float *rb) {
  int o, h;
#if ES_S_L == 16
  if (nch == 2 && cx->wide) {
    for (o = 0; o < p->out; o += ES_S_TO)
      es_s_ltile2(a[0], a[1], p->K, p->f.w + o, p->f.np, p->f.b + o, y[0] + o, y[1] + o, rb ? rb + o : NULL);
#else
  (void)cx;
  if (nch == 2) {                   /* out rounded up to ES_S_TO (8), in the fewest tiles of at most 6, */
    const int np = p->f.np, no = (p->out + ES_S_TO - 1) / ES_S_TO * ES_S_TO;   /* each 4 to 6 wide: */
    if (no == 8) {                  /* 8 = 4 4; 16 = 5 5 6; 32 = 5 5 5 5 6 6 (t tiles, 6 t - no of them 5) */
      es_s_ltile2_4(a[0], a[1], p->K, p->f.w, np, p->f.b, y[0], y[1], rb);
      es_s_ltile2_4(a[0], a[1], p->K, p->f.w + 4, np, p->f.b + 4, y[0] + 4, y[1] + 4, rb ? rb + 4 : NULL);
    } else {
      const int t = (no + 5) / 6;
      int j;
      for (o = 0, j = 6 * t - no; j > 0; j--, o += 5)
        es_s_ltile2_5(a[0], a[1], p->K, p->f.w + o, np, p->f.b + o, y[0] + o, y[1] + o, rb ? rb + o : NULL);
      for (; o < no; o += 6)
        es_s_ltile2_6(a[0], a[1], p->K, p->f.w + o, np, p->f.b + o, y[0] + o, y[1] + o, rb ? rb + o : NULL);
    }
#endif
  } else {
    for (h = 0; h < nch; h++)
      for (o = 0; o < p->out; o += ES_S_TO) es_s_ltile(a[h], p->K, p->f.w + o, p->f.np, p->f.b + o, y[h] + o, rb ? rb + o : NULL);
  }
  if (p->m || p->out_q || p->post)
    for (h = 0; h < nch; h++) es_s_lout(p, y[h]);
}

ES_F_INLINE void es_s_lproj_q(const es_s_proj_t *p, es_s_v *const *a, es_s_v *const *y, int nch,
                              const es_s_lctx_t *cx) {
  es_s_lproj_qr(p, a, y, nch, cx, NULL);
}

/* es_s_lquantize of each chunk's a[h] as p quantizes its input, into qa[h] */
ES_F_INLINE void es_s_lquantize_in(const es_s_proj_t *p, es_s_v *const *a, es_s_v *const *qa, int nch) {
  int h;
  for (h = 0; h < nch; h++)
    es_s_lquantize(a[h], p->K, p->in_s, p->in_z, p->in_mode == ES_S_IN_FQ ? p->in_s : 1.0f, qa[h]);
}

#if ES_S_L == 16
#define ES_S_PACKW(p) ((p)->vw)      /* the packed weights cx->dotp reads */
#else
#define ES_S_PACKW(p) ((p)->vw2)
#endif

/* es_s_proj, lane-wise, of n projections that quantize their input alike (a layer's x, g and δ:
   share_q; or one projection), a[h] -> y[j][h]; qa[h]: K vectors of scratch. The input is quantized
   once; packed once (cx->pack: AVX2's int16 pairs, AVX-512 VNNI's bytes), and a NaN among it takes the float sums,
   which carry it to the logits. Returns a mask: bit j where p[j]'s outputs left as codes (a
   projection with a code table, es_s_proj_t.tab, whose products ran packed). */
ES_F_INLINE int es_s_lproj_group(const es_s_proj_t *const *p, int n, es_s_v *const *a, es_s_v *const *qa,
                                  es_s_v *const *const *y, int nch, const es_s_lctx_t *cx) {
  int j, packed = 0, quant = 0, coded = 0;
  if (p[0]->in_mode == ES_S_IN_FLOAT) {
    for (j = 0; j < n; j++) es_s_lproj_q(p[j], a, y[j], nch, cx);
    return 0;
  }
  if (cx->pack)
    for (j = 0; j < n; j++)
      if (ES_S_PACKW(p[j])) {
        packed = !cx->pack(p[j], a, nch, cx->u);
        break;
      }
  for (j = 0; j < n; j++) {
    if (packed && ES_S_PACKW(p[j])) {
      cx->dotp(p[j], y[j], nch, cx->u);
      coded |= (p[j]->tab != NULL) << j;
      continue;
    }
    if (!quant) {
      if (cx->quant && p[j]->in_r != 0.0f)
        cx->quant(p[j], a, qa, nch);
      else
        es_s_lquantize_in(p[j], a, qa, nch);
      quant = 1;
    }
    es_s_lproj_q(p[j], qa, y[j], nch, cx);
  }
  return coded;
}

#undef ES_S_PACKW

ES_F_INLINE int es_s_lproj(const es_s_proj_t *p, es_s_v *const *a, es_s_v *const *qa, es_s_v *const *y, int nch,
                           const es_s_lctx_t *cx) {
  return es_s_lproj_group(&p, 1, a, qa, &y, nch, cx);
}

/* an ES_S_L x ES_S_L block transposed in place: its off-diagonal blocks of ES_S_L / 2, then down
   to 1, swapped */
#if ES_S_L == 16
#define ES_S_T8LO 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define ES_S_T8HI 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define ES_S_T4LO 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define ES_S_T4HI 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define ES_S_T2LO 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define ES_S_T2HI 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define ES_S_T1LO 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define ES_S_T1HI 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
#elif ES_S_L == 8
#define ES_S_T4LO 0, 1, 2, 3, 8, 9, 10, 11
#define ES_S_T4HI 4, 5, 6, 7, 12, 13, 14, 15
#define ES_S_T2LO 0, 1, 8, 9, 4, 5, 12, 13
#define ES_S_T2HI 2, 3, 10, 11, 6, 7, 14, 15
#define ES_S_T1LO 0, 8, 2, 10, 4, 12, 6, 14
#define ES_S_T1HI 1, 9, 3, 11, 5, 13, 7, 15
#else
#error "es_ssm_lanes.h: ES_S_L must be 16 or 8"
#endif
#if defined(__clang__)
#define ES_S_SHUFFLE2(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define ES_S_SHUFFLE2(a, b, ...) __builtin_shuffle(a, b, (es_s_vi){__VA_ARGS__})
#endif
#define ES_S_TSTAGE(d, lo, hi)                                                                   \
  for (i = 0; i < ES_S_L; i++)                                                                  \
    if (!(i & (d))) {                                                                           \
      es_s_v a = r[i], b = r[i + (d)];                                                          \
      r[i] = ES_S_SHUFFLE2(a, b, lo);                                                           \
      r[i + (d)] = ES_S_SHUFFLE2(a, b, hi);                                                     \
    }
ES_F_INLINE void es_s_transpose(es_s_v *r) {
  int i;
#if ES_S_L == 16
  ES_S_TSTAGE(8, ES_S_T8LO, ES_S_T8HI)
#endif
  ES_S_TSTAGE(4, ES_S_T4LO, ES_S_T4HI)
  ES_S_TSTAGE(2, ES_S_T2LO, ES_S_T2HI)
  ES_S_TSTAGE(1, ES_S_T1LO, ES_S_T1HI)
}
#undef ES_S_TSTAGE

/* rows [ES_S_L][ld] -> lanes [n][ES_S_L], and back. Under ES_S_L columns left (a reading's
   features): each row's rest loaded whole where the load stays inside the block, the rows past
   that copied into a zeroed vector, transposed and the first columns kept. */
ES_F_INLINE void es_s_to_lanes(const float *ES_F_RESTRICT x, size_t ld, int n, es_s_v *ES_F_RESTRICT out) {
  int i, k = 0;
  for (; k + ES_S_L <= n; k += ES_S_L) {
    for (i = 0; i < ES_S_L; i++) out[k + i] = es_s_vload(x + i * ld + k);
    es_s_transpose(out + k);
  }
  if (k < n) {
    es_s_v t[ES_S_L];
    for (i = 0; i < ES_S_L; i++)
      if (i * ld + k + ES_S_L <= ES_S_L * ld) {
        t[i] = es_s_vload(x + i * ld + k);
      } else {
        t[i] = es_s_splat(0.0f);
        memcpy(&t[i], x + i * ld + k, sizeof(float) * (size_t)(n - k));
      }
    es_s_transpose(t);
    for (i = 0; i < n - k; i++) out[k + i] = t[i];
  }
}
ES_F_INLINE void es_s_to_rows(const es_s_v *ES_F_RESTRICT x, int n, float *ES_F_RESTRICT out, size_t ld) {
  int i, k = 0;
  for (; k + ES_S_L <= n; k += ES_S_L) {
    es_s_v t[ES_S_L];
    for (i = 0; i < ES_S_L; i++) t[i] = x[k + i];
    es_s_transpose(t);
    for (i = 0; i < ES_S_L; i++) memcpy(out + i * ld + k, &t[i], sizeof t[i]);
  }
  for (i = 0; i < ES_S_L; i++) {
    int j;
    for (j = k; j < n; j++) out[i * ld + j] = x[j][i];
  }
}

/* lanes [n][ES_S_L] -> the rows of the chunk's streams, out [ES_S_L][n] (one block: es_s_to_rows
   with ld n). Under ES_S_L values a row (a head's logits): the n vectors padded to m, the next
   power of two; under ES_S_L, each m x m block of lanes transposed (the stages under m of
   es_s_transpose, over the first m vectors), after which stream q m + c's row is lanes
   q m .. q m + n of vector c. */
#define ES_S_TSTAGE_M(d, M, lo, hi)                                                              \
  for (i = 0; i < (M); i++)                                                                     \
    if (!(i & (d))) {                                                                           \
      es_s_v a = t[i], b = t[i + (d)];                                                          \
      t[i] = ES_S_SHUFFLE2(a, b, lo);                                                           \
      t[i + (d)] = ES_S_SHUFFLE2(a, b, hi);                                                     \
    }
ES_F_INLINE void es_s_lrows(const es_s_v *ES_F_RESTRICT x, int n, float *ES_F_RESTRICT out) {
  es_s_v t[ES_S_L];
  int i, m, q, c;
  if (n >= ES_S_L) {
    es_s_to_rows(x, n, out, (size_t)n);
    return;
  }
  for (m = 1; m < n; m *= 2) {
  }
  for (i = 0; i < m; i++) t[i] = i < n ? x[i] : es_s_splat(0.0f);
  if (m == ES_S_L) {                /* each row stored whole over the start of the next, in order; */
    es_s_transpose(t);              /* those whose store would run past the block's end value by value */
    for (i = 0; i < ES_S_L; i++)
      if (i * n + ES_S_L <= ES_S_L * n)
        memcpy(out + (size_t)i * n, &t[i], sizeof t[i]);
      else
        for (c = 0; c < n; c++) out[(size_t)i * n + c] = t[i][c];
    return;
  }
  switch (m) {
#if ES_S_L == 16
  case 8:
    ES_S_TSTAGE_M(4, 8, ES_S_T4LO, ES_S_T4HI)
    ES_S_TSTAGE_M(2, 8, ES_S_T2LO, ES_S_T2HI)
    ES_S_TSTAGE_M(1, 8, ES_S_T1LO, ES_S_T1HI)
    break;
#endif
  case 4:
    ES_S_TSTAGE_M(2, 4, ES_S_T2LO, ES_S_T2HI)
    ES_S_TSTAGE_M(1, 4, ES_S_T1LO, ES_S_T1HI)
    break;
  case 2:
    ES_S_TSTAGE_M(1, 2, ES_S_T1LO, ES_S_T1HI)
    break;
  default:
    break;
  }
  for (q = 0; q < ES_S_L; q += m)
    for (c = 0; c < m; c++) memcpy(out + (size_t)(q + c) * n, (const float *)(const void *)&t[c] + q, sizeof(float) * (size_t)n);
}
#undef ES_S_TSTAGE_M
#undef ES_S_SHUFFLE2
#undef ES_S_T8LO
#undef ES_S_T8HI
#undef ES_S_T4LO
#undef ES_S_T4HI
#undef ES_S_T2LO
#undef ES_S_T2HI
#undef ES_S_T1LO
#undef ES_S_T1HI

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

/* es_s_sum, lane-wise, of x and of y at once (each its own eight partial sums, as es_s_lsum):
   two chains of additions side by side */
ES_F_INLINE void es_s_lsum2(const es_s_v *ES_F_RESTRICT x, const es_s_v *ES_F_RESTRICT y, int n, es_s_v cx, es_s_v cy,
                            int p, es_s_v *sx, es_s_v *sy) {
  es_s_v l0 = {0}, l1 = {0}, l2 = {0}, l3 = {0}, l4 = {0}, l5 = {0}, l6 = {0}, l7 = {0}, d;
  es_s_v m0 = {0}, m1 = {0}, m2 = {0}, m3 = {0}, m4 = {0}, m5 = {0}, m6 = {0}, m7 = {0};
  int k;
#define ES_S_LSUM_ADD2(l, m) (d = x[k] - cx, l += p == 2 ? d * d : d, d = y[k++] - cy, m += p == 2 ? d * d : d)
  for (k = 0; k + 8 <= n;) {
    ES_S_LSUM_ADD2(l0, m0), ES_S_LSUM_ADD2(l1, m1), ES_S_LSUM_ADD2(l2, m2), ES_S_LSUM_ADD2(l3, m3);
    ES_S_LSUM_ADD2(l4, m4), ES_S_LSUM_ADD2(l5, m5), ES_S_LSUM_ADD2(l6, m6), ES_S_LSUM_ADD2(l7, m7);
  }
  if (k < n) ES_S_LSUM_ADD2(l0, m0);
  if (k < n) ES_S_LSUM_ADD2(l1, m1);
  if (k < n) ES_S_LSUM_ADD2(l2, m2);
  if (k < n) ES_S_LSUM_ADD2(l3, m3);
  if (k < n) ES_S_LSUM_ADD2(l4, m4);
  if (k < n) ES_S_LSUM_ADD2(l5, m5);
  if (k < n) ES_S_LSUM_ADD2(l6, m6);
#undef ES_S_LSUM_ADD2
  *sx = ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7));
  *sy = ((m0 + m4) + (m2 + m6)) + ((m1 + m5) + (m3 + m7));
}

/* es_s_layernorm's 1 / sqrt(var / n + eps), lane-wise */
ES_F_INLINE es_s_v es_s_lrsd(es_s_v var, int n, float eps) {
  float t[ES_S_L];
  int k;
  var = var / (float)n + eps;
  memcpy(t, &var, sizeof t);
  for (k = 0; k < ES_S_L; k++) t[k] = sqrtf(t[k]);
  memcpy(&var, t, sizeof t);
  return 1.0f / var;
}

/* es_s_layernorm, lane-wise */
ES_F_INLINE void es_s_llayernorm(const es_s_v *ES_F_RESTRICT x, int n, const float *g, const float *b, float eps,
                                 es_s_v *ES_F_RESTRICT out) {
  const es_s_v mean = es_s_lsum(x, n, es_s_splat(0.0f), 1) / (float)n;
  const es_s_v sd = es_s_lrsd(es_s_lsum(x, n, mean, 2), n, eps);
  int k;
  for (k = 0; k < n; k++) out[k] = (x[k] - mean) * sd * g[k] + b[k];
}

/* es_s_llayernorm of nch (1 or 2) chunks, x[h] -> out[h]; two at once where the host has the
   registers for both sums' partials (AVX-512: 32), their chains of dependent additions, square
   roots and divisions side by side; the same operations on each */
ES_F_INLINE void es_s_llayernorms(es_s_v *const *x, int nch, int n, const float *g, const float *b, float eps,
                                  es_s_v *const *out) {
#if ES_S_L == 16
  if (nch == 2) {
    const es_s_v *ES_F_RESTRICT x0 = x[0], *ES_F_RESTRICT x1 = x[1];
    es_s_v *ES_F_RESTRICT o0 = out[0], *ES_F_RESTRICT o1 = out[1];
    es_s_v m0, m1, s0, s1;
    int k;
    es_s_lsum2(x0, x1, n, es_s_splat(0.0f), es_s_splat(0.0f), 1, &m0, &m1);
    m0 = m0 / (float)n, m1 = m1 / (float)n;
    es_s_lsum2(x0, x1, n, m0, m1, 2, &s0, &s1);
    s0 = es_s_lrsd(s0, n, eps), s1 = es_s_lrsd(s1, n, eps);
    for (k = 0; k < n; k++) o0[k] = (x0[k] - m0) * s0 * g[k] + b[k], o1[k] = (x1[k] - m1) * s1 * g[k] + b[k];
    return;
  }
#endif
  int h;
  for (h = 0; h < nch; h++) es_s_llayernorm(x[h], n, g, b, eps, out[h]);
}

/* the normalised readings of ES_S_L streams (rows of F), as es_f_normalize (asinh: the input
   transform's scale [F], lane by lane with libm's asinhf, or NULL) */
ES_F_INLINE void es_s_lnormalize(const float *ES_F_RESTRICT x, int F, const float *mean, const float *std,
                                 const float *asinh, es_s_v *ES_F_RESTRICT out) {
  int f, i;
  es_s_to_lanes(x, F, F, out);
  if (asinh)
    for (f = 0; f < F; f++)
      for (i = 0; i < ES_S_L; i++) out[f][i] = asinhf(out[f][i] / asinh[f]);
  for (f = 0; f < F; f++) out[f] = (out[f] - mean[f]) / std[f];
}

/* es_s_fixed, lane by lane (es_ssm.h) */
ES_S_FIXED(es_s_lfixed, es_s_v)

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

/* es_s_residual, lane by lane (es_ssm.h) */
ES_S_RESIDUAL(es_s_lresidual, es_s_v)

/* u[h] = (u[h] + es_s_proj(a[h])) + rb, as es_s_lproj into o[h] then es_s_lresidual: a float
   projection with no output stage whose out fills its tiles adds to u as its tiles finish */
ES_F_INLINE void es_s_lproj_residual(const es_s_proj_t *p, es_s_v *const *a, es_s_v *const *qa, es_s_v *const *o,
                                     es_s_v *const *u, const float *rb, int nch, const es_s_lctx_t *cx) {
  int h;
  if (p->in_mode == ES_S_IN_FLOAT && !p->m && !p->out_q && !p->post && p->out % ES_S_TO == 0) {
    es_s_lproj_qr(p, a, u, nch, cx, rb);
    return;
  }
  es_s_lproj(p, a, qa, o, nch, cx);
  for (h = 0; h < nch; h++) es_s_lresidual(u[h], o[h], rb, p->out);
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
