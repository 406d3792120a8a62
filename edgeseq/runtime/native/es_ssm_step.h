/* es_ssm_step.h: the state-space step (edgeseq.models.ssm) for the host: SsmStep, built by

     ssm_step(B, F, D, N, C, selective, quant, x, logits, probs, mean, std, bank0, bank1, enc, layers, final, head
              [, packed, asinh])

   and run like Step: SsmStep.run() advances all B streams one reading with no allocation and
   returns -1 when every stream's logits are finite (the step is adopted), else the first
   stream whose logits are NaN or Inf, and then no state changed (the state is two banks of
   float32 [B, N] per layer, as the graph's state_in.{i}; the step writes the other bank and
   flips only on success). push/set_bounds/kernel/bank as Step's. Float32 and static int8
   alike: the kernels are es_ssm.h's; the layout comes from edgeseq/runtime/native/ssm.py.

   Included by es_ssm_step.c, one translation unit of edgeseq.runtime.native._es_native
   (es_native.h: it shares _es_native.c's buffer and reading helpers). The object is
   es_ssm_object.h's; the step is es_ssm_run.h's, compiled once per instruction set in units of
   its own and picked below. A step is not re-entrant: the caller serializes calls; a second call
   while one runs with the GIL released raises RuntimeError. */
#include "es_ssm_object.h"

static void *ssm_bind(SsmObject *s, PyObject *obj, Py_ssize_t count, int writable, const char *what) {
  return es_step_bind((es_step_t *)s, obj, 4, count, writable, what);
}

static void *ssm_bind_item(SsmObject *s, PyObject *seq, Py_ssize_t i, Py_ssize_t count, int writable,
                           const char *what) {
  return es_step_bind_item((es_step_t *)s, seq, i, count, writable, what);
}

#if ES_S_LANES && ES_S_HAVE16
/* es_s_proj_t.vw and vcorr of an exact product */
static int ssm_int8_weights(es_s_proj_t *p) {
  const int K = p->K, np = p->f.np, k4n = (K + 3) / 4;
  const int32_t zoff = (int32_t)p->in_z + 128;
  int k, o;
  if (!(p->vw = es_malloc(sizeof(int32_t) * ((size_t)k4n * np + np)))) return -1;
  p->vcorr = p->vw + (size_t)k4n * np;
  p->k4 = k4n;
  memset(p->vw, 0, sizeof(int32_t) * ((size_t)k4n * np + np));
  for (k = 0; k < K; k++)
    for (o = 0; o < np; o++) {
      int32_t v = (int32_t)p->f.w[(size_t)k * np + o];
      p->vw[(size_t)(k / 4) * np + o] |= (int32_t)((uint32_t)(uint8_t)(int8_t)v << (8 * (k % 4)));
      p->vcorr[o] += zoff * v;
    }
  return 0;
}
#endif

#if ES_S_LANES && ES_HAVE_AVX2I
/* es_s_proj_t.vw2 of an exact product: the weights of inputs 2k and 2k + 1 as int16 in one word */
static int ssm_int16_weights(es_s_proj_t *p) {
  const int K = p->K, np = p->f.np, k2n = (K + 1) / 2;
  int k, o;
  if (!(p->vw2 = PyMem_Calloc((size_t)k2n * np, sizeof(int32_t)))) {
    PyErr_NoMemory();
    return -1;
  }
  p->k2 = k2n;
  for (k = 0; k < K; k++)
    for (o = 0; o < np; o++)
      p->vw2[(size_t)(k / 2) * np + o] |=
          (int32_t)((uint32_t)(uint16_t)(int16_t)(int32_t)p->f.w[(size_t)k * np + o] << (16 * (k % 2)));
  return 0;
}
#endif

/* a projection: (W [K][np], bias [np], m [out] | None, post [out] | None, K, out, np,
   in_mode, in_s, in_z, out_q, out_d, out_z, out_s), np the chunk buffer's stride `ld` */
static int ssm_bind_proj(SsmObject *s, es_s_proj_t *p, PyObject *t, int K, int out, int ld, const char *what) {
  long k, o, np, in_mode, out_q;
  PyObject *m, *post;
  if (es_check_tuple(t, 14, what) < 0 || es_get_int(t, 4, K, K, &k, what) < 0 ||
      es_get_int(t, 5, out, out, &o, what) < 0 || es_get_int(t, 6, ld, ld, &np, what) < 0 ||
      es_get_int(t, 7, 0, 2, &in_mode, what) < 0 ||
      es_get_int(t, 10, 0, 1, &out_q, what) < 0 || es_get_float(t, 8, &p->in_s, what) < 0 ||
      es_get_float(t, 9, &p->in_z, what) < 0 || es_get_float(t, 11, &p->out_d, what) < 0 ||
      es_get_float(t, 12, &p->out_z, what) < 0 || es_get_float(t, 13, &p->out_s, what) < 0)
    return -1;
  if ((in_mode && !(p->in_s > 0.0f)) || (out_q && !(p->out_d > 0.0f)) ||
      (in_mode && (p->in_z < -128.0f || p->in_z > 127.0f)) || (out_q && (p->out_z < -128.0f || p->out_z > 127.0f))) {
    PyErr_Format(PyExc_ValueError, "%s: a scale that is not positive or a zero point beyond int8", what);
    return -1;
  }
  p->K = K, p->out = out, p->in_mode = (int)in_mode, p->out_q = (int)out_q;
  if (!(p->f.w = ssm_bind_item(s, t, 0, (Py_ssize_t)K * np, 0, what)) ||
      !(p->f.b = ssm_bind_item(s, t, 1, np, 0, what)))
    return -1;
  m = PyTuple_GET_ITEM(t, 2), post = PyTuple_GET_ITEM(t, 3);
  p->m = m == Py_None ? NULL : ssm_bind(s, m, out, 0, what);
  p->post = post == Py_None ? NULL : ssm_bind(s, post, out, 0, what);
  if ((m != Py_None && !p->m) || (post != Py_None && !p->post)) return -1;
  p->blk[0] = 0, p->blk[1] = (int32_t)np, p->blk[2] = 0, p->blk[3] = K;
  p->f.blocks = p->blk;
  p->f.nblocks = 1;
  p->f.np = (int)np;
  p->f.n1 = K;
  s->work += (long)s->B * K * np;
  if (p->in_mode == ES_S_IN_INT) {
    p->exact = 1;
    for (o = 0; o < np; o++) p->exact &= p->f.b[o] == 0.0f;
    for (k = 0; k < (long)K * np; k++) {
      float v = p->f.w[k];
      p->exact &= v >= -128.0f && v <= 127.0f && v == (float)(int32_t)v;
    }
  }
#if ES_S_LANES && ES_S_HAVE16
  if (s->ldot8 && p->exact && ssm_int8_weights(p) < 0) return -1;
#endif
#if ES_S_LANES && ES_HAVE_AVX2I
  if (s->ldot16 && p->exact && ssm_int16_weights(p) < 0) return -1;
#endif
  return 0;
}

/* -- the step ----------------------------------------------------------------------------- */

#if ES_S_LANES && ES_S_HAVE16 && (ES_HAVE_VNNI || ES_HAVE_AVX2I)
/* x / s, to the bit, where ssm_recip_exact(s) holds (es_ssm_avx2.h), r = 1 / s: q = x r corrected
   by the remainder x - q s, exact in one fused multiply-add (Markstein). A quotient past 2^20 (past
   any int8 code, or ±Inf, whose remainder is NaN) stays x r: its code saturates alike. */
__attribute__((target("avx512f"))) static inline __m512 ssm_quot16(__m512 x, __m512 s, __m512 r) {
  const __m512 q = _mm512_mul_ps(x, r), q2 = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, s, x), r, q);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(_mm512_abs_ps(q), _mm512_set1_ps(0x1p20f), _CMP_LE_OQ), q, q2);
}
#endif

#if ES_S_LANES && ES_HAVE_AVX2I
/* ssm_quot16 on 8 lanes (AVX2 and FMA) */
__attribute__((target("avx2,fma"))) static inline __m256 ssm_quot8(__m256 x, __m256 s, __m256 r) {
  const __m256 q = _mm256_mul_ps(x, r), q2 = _mm256_fmadd_ps(_mm256_fnmadd_ps(q, s, x), r, q);
  const __m256 small = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), q), _mm256_set1_ps(0x1p20f), _CMP_LE_OQ);
  return _mm256_blendv_ps(q, q2, small);
}
#endif

#if ES_S_LANES && ES_HAVE_VNNI
/* es_s_lout's stage (m, then OUT with out_d 1, then post) or es_s_lcodes' on a tile's columns as
   they leave it, for projections with m and (no OUT or out_d 1): the same operations in the same
   order, each rounded (the explicitly rounded products are never fused into a multiply-add), the
   clamp a max and a min that keep a NaN as es_s_vclamp does (max(lo, t) = lo > t ? lo : t); a code
   is OUT's rounded value r less lo, read off the bits of r + 1.5 x 2^23 (those of 1.5 x 2^23 plus
   r). m NULL: no stage here (es_s_lout after, where there is one). AVX2's tiles: ssm_lout_t. */
typedef struct {
  const float *m, *post;
  int q, codes, n;                  /* n: the columns of this tile that are outputs (the rest padding) */
  __m512 lo, hi, sc, rnd;
  __m512i off;                      /* rnd's bits + lo */
} ssm_vout_t;

#define SSM_VR (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
ES_VNNI static inline void ssm_v_out(const ssm_vout_t *e, int j, __m512 t, float *y) {
  if (e->m && j < e->n) {
    t = _mm512_mul_round_ps(t, _mm512_set1_ps(e->m[j]), SSM_VR);
    if (e->q) {
      t = _mm512_add_ps(_mm512_min_ps(e->hi, _mm512_max_ps(e->lo, t)), e->rnd);
      if (e->codes) {
        _mm512_store_si512((void *)y, _mm512_sub_epi32(_mm512_castps_si512(t), e->off));
        return;
      }
      t = _mm512_mul_round_ps(_mm512_sub_ps(t, e->rnd), e->sc, SSM_VR);
    }
    if (e->post) t = _mm512_add_round_ps(t, _mm512_set1_ps(e->post[j]), SSM_VR);
  }
  _mm512_store_ps(y, t);
}
#undef SSM_VR

/* The int8 products of chunks of 16 streams with AVX-512 VNNI: each stream's inputs q - z as
   unsigned bytes q + 128, four inputs to a word (ssm_lpack8_vnni); vpdpbusd adds four u8 x s8 products into each
   lane's int32 sum, and (z + 128) x the column's weight sum comes off after. The sums are the
   float products' exactly (es_s_proj_t: exact while they stay below 2^24), so the outputs are
   the same floats. */
#define SSM_V_TILE(NAME, NC)                                                                       \
  ES_VNNI static inline void NAME(const int32_t *u, int k4n, const int32_t *w, int np, const int32_t *corr, \
                                  const ssm_vout_t *e, float *y0, float *y1) {                   \
    __m512i acc[NC][8], uv[NC], wv;                                                              \
    int c, j, k4;                                                                                \
    for (c = 0; c < (NC); c++)                                                                   \
      for (j = 0; j < 8; j++) acc[c][j] = _mm512_setzero_si512();                                \
    for (k4 = 0; k4 < k4n; k4++) {                                                               \
      const int32_t *wk = w + (size_t)k4 * np;                                                   \
      for (c = 0; c < (NC); c++) uv[c] = _mm512_load_si512((const void *)(u + ((size_t)c * k4n + k4) * 16)); \
      for (j = 0; j < 8; j++) {                                                                  \
        wv = _mm512_set1_epi32(wk[j]);                                                           \
        for (c = 0; c < (NC); c++) acc[c][j] = _mm512_dpbusd_epi32(acc[c][j], uv[c], wv);       \
      }                                                                                          \
    }                                                                                            \
    for (j = 0; j < 8; j++) {                                                                    \
      const __m512i cj = _mm512_set1_epi32(corr[j]);                                             \
      ssm_v_out(e, j, _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[0][j], cj)), y0 + j * 16);       \
      if ((NC) == 2) ssm_v_out(e, j, _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[(NC) - 1][j], cj)), y1 + j * 16); \
    }                                                                                            \
  }
SSM_V_TILE(ssm_v_tile1, 1)
SSM_V_TILE(ssm_v_tile2, 2)
#undef SSM_V_TILE

/* the tiles of p's products from u (nch chunks' packed inputs) into y[h], with the output stage
   where ssm_v_out takes it; returns 1 where it did */
ES_VNNI static inline int ssm_v_tiles(const es_s_proj_t *p, es_s_v16 *const *y, int nch, const int32_t *u) {
  const int fused = p->m != NULL && (!p->out_q || p->out_d == 1.0f);
  ssm_vout_t e;
  int o;
  e.m = NULL, e.post = NULL, e.n = 0, e.q = p->out_q, e.codes = p->tab != NULL;
  e.lo = _mm512_set1_ps(-128.0f - p->out_z), e.hi = _mm512_set1_ps(127.0f - p->out_z);
  e.sc = _mm512_set1_ps(p->out_s), e.rnd = _mm512_set1_ps(12582912.0f);
  e.off = _mm512_set1_epi32(0x4B400000 + (int32_t)(-128.0f - p->out_z));
  for (o = 0; o < p->out; o += ES_S_TO) {
    float *y0 = (float *)(void *)(y[0] + o), *y1 = nch == 2 ? (float *)(void *)(y[1] + o) : NULL;
    if (fused) e.m = p->m + o, e.post = p->post ? p->post + o : NULL, e.n = p->out - o;
    if (nch == 2)
      ssm_v_tile2(u, p->k4, p->vw + o, p->f.np, p->vcorr + o, &e, y0, y1);
    else
      ssm_v_tile1(u, p->k4, p->vw + o, p->f.np, p->vcorr + o, &e, y0, y1);
  }
  return fused;
}

/* es_s_lctx16_t.pack with AVX-512 VNNI: each stream's inputs a[h][k] quantized as es_s_quantize
   does (x / s, without a division where p->in_r is set, as ssm_lquantize_avx512; saturated, then
   rounded half to even by the conversion), as unsigned bytes q + 128, four inputs to a word in u
   (nch x k4 x 16 words); nonzero, nothing in u to trust, where a holds a NaN */
ES_VNNI static int ssm_lpack8_vnni(const es_s_proj_t *p, es_s_v16 *const *a, int nch, int32_t *u) {
  const int K = p->K, k4n = p->k4, exact = p->in_r != 0.0f;
  const __m512 sv = _mm512_set1_ps(p->in_s), rv = _mm512_set1_ps(p->in_r);
  const __m512 lo = _mm512_set1_ps(-128.0f - p->in_z), hi = _mm512_set1_ps(127.0f - p->in_z);
  const __m512i zoff = _mm512_set1_epi32((int32_t)p->in_z + 128);
  __mmask16 nan = 0;
  int h, k4, j;
  for (h = 0; h < nch; h++) {
    const float *ah = (const float *)(const void *)a[h];
    int32_t *uh = u + (size_t)h * k4n * 16;
    for (k4 = 0; k4 < k4n; k4++) {
      __m512i w = _mm512_setzero_si512();
      for (j = 0; j < 4 && 4 * k4 + j < K; j++) {
        const __m512 x = _mm512_loadu_ps(ah + (size_t)(4 * k4 + j) * 16);
        const __m512 q = _mm512_min_ps(hi, _mm512_max_ps(lo, exact ? ssm_quot16(x, sv, rv) : _mm512_div_ps(x, sv)));
        nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        w = _mm512_or_si512(w, _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(q), zoff), 8 * j));
      }
      _mm512_store_si512((void *)(uh + (size_t)k4 * 16), w);
    }
  }
  return nan != 0;
}

/* es_s_lctx16_t.dotp with AVX-512 VNNI: y[h] = the products of the inputs ssm_lpack8_vnni packed,
   with the output stage (es_s_lout), or the codes where p has a table (es_s_lcodes) */
ES_VNNI static void ssm_ldot8_vnni(const es_s_proj_t *p, es_s_v16 *const *y, int nch, const int32_t *u) {
  int h;
  if (ssm_v_tiles(p, y, nch, u)) return;
  for (h = 0; h < nch; h++)
    if (p->tab)
      es_s_lcodes16(p, y[h]);
    else if (p->m || p->out_q || p->post)
      es_s_lout16(p, y[h]);
}
#endif

#if ES_S_LANES && ES_HAVE_VNNI
/* SsmObject.qrow with AVX-512 VNNI: one stream's input row a[0 .. K) quantized as es_s_quantize does
   (divide, saturate, round half to even: the conversion's default rounding, exact at these
   magnitudes), stored as unsigned bytes q + 128, four to a word in u[0 .. k4); returns nonzero
   when a holds a NaN (nothing to trust in u: the caller takes the float path, which keeps it) */
ES_VNNI static int ssm_q8row_vnni(const es_s_proj_t *p, const float *a, int32_t *u) {
  const int K = p->K;
  const __m512 sc = _mm512_set1_ps(p->in_s), lo = _mm512_set1_ps(-128.0f - p->in_z),
               hi = _mm512_set1_ps(127.0f - p->in_z);
  const __m512i zoff = _mm512_set1_epi32((int32_t)p->in_z + 128);
  __mmask16 nan = 0;
  int k;
  u[(K - 1) / 4] = 0;                                     /* the last word's bytes past K: zero weights */
  for (k = 0; k < K; k += 16) {
    const __mmask16 m = K - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (K - k)) - 1u);
    __m512 v = _mm512_maskz_loadu_ps(m, a + k), t;
    nan |= _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q);
    t = _mm512_div_ps(v, sc);
    t = _mm512_max_ps(t, lo);
    t = _mm512_min_ps(t, hi);
    _mm_mask_storeu_epi8((char *)u + k, m, _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(t), zoff)));
  }
  return nan != 0;
}

/* SsmObject.dotrow with VNNI: y[0 .. out) = P of one stream's bytes u (from q8row): the exact integer
   products with the projection's packed weights (es_s_proj_t.vw), the sums es_s_exact_row
   makes to the bit, then es_s_out's stage (m, OUT, post) on sixteen columns at a time, in its
   order and roundings (explicitly rounded operations, which are never fused into a
   multiply-add). Two chains of vpdpbusd per sixteen columns. */
ES_VNNI static void ssm_dot8row_vnni(const es_s_proj_t *p, const int32_t *u, float *y) {
  const int k4n = p->k4, np = p->f.np, n = p->out;
  const int fused = p->m != NULL && (!p->out_q || p->out_d == 1.0f);
  const __m512 lo = _mm512_set1_ps(-128.0f - p->out_z), hi = _mm512_set1_ps(127.0f - p->out_z),
               sc = _mm512_set1_ps(p->out_s), rnd = _mm512_set1_ps(12582912.0f);
  int o, k4;
  for (o = 0; o < np; o += 16) {
    __m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
    const int32_t *w = p->vw + o;
    for (k4 = 0; k4 + 2 <= k4n; k4 += 2) {
      a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(u[k4]), _mm512_loadu_si512((const void *)(w + (size_t)k4 * np)));
      a1 = _mm512_dpbusd_epi32(a1, _mm512_set1_epi32(u[k4 + 1]),
                               _mm512_loadu_si512((const void *)(w + (size_t)(k4 + 1) * np)));
    }
    if (k4 < k4n)
      a0 = _mm512_dpbusd_epi32(a0, _mm512_set1_epi32(u[k4]), _mm512_loadu_si512((const void *)(w + (size_t)k4 * np)));
    a0 = _mm512_sub_epi32(_mm512_add_epi32(a0, a1), _mm512_loadu_si512((const void *)(p->vcorr + o)));
    if (fused && o < n) {
      const __mmask16 m = n - o >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - o)) - 1u);
      __m512 t = _mm512_mul_round_ps(_mm512_cvtepi32_ps(a0), _mm512_maskz_loadu_ps(m, p->m + o),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      if (p->out_q)
        t = _mm512_mul_round_ps(_mm512_sub_ps(_mm512_add_ps(_mm512_min_ps(_mm512_max_ps(t, lo), hi), rnd), rnd), sc,
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);      /* es_s_round: -0.4 -> +0 */
      if (p->post)
        t = _mm512_add_round_ps(t, _mm512_maskz_loadu_ps(m, p->post + o), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm512_mask_storeu_ps(y + o, m, t);
    } else if (!fused) {
      _mm512_storeu_ps(y + o, _mm512_cvtepi32_ps(a0));
    }
  }
  if (!fused && (p->m || p->out_q || p->post)) es_s_out(p, y);
}
#endif

#if ES_S_LANES && ES_HAVE_AVX2I
#include "es_ssm_avx2.h"

/* SsmObject.lpack16 (es_s_lctx8_t.pack) with AVX2: each stream's inputs a[h][k] quantized as
   es_s_quantize does (divide, without a division where p->in_r is set (ssm_quot8: the same
   float); saturate, round half to even: the conversion's default rounding, exact at these
   magnitudes), less the zero point (|q - z| <= 255), as int16, two inputs to a
   word: u[h][k2][lane], input 2 k2 in the low half (an odd K's last high half zero). Returns
   nonzero when an input holds a NaN: nothing to trust in u (a NaN converts to 0x80000000, whose
   low half reads as 0); the caller takes the float sums, which carry it. */
__attribute__((target("avx2,fma"))) static int ssm_lpack16_avx2(const es_s_proj_t *p, es_s_v8 *const *a, int nch,
                                                                 int32_t *u) {
  const int K = p->K, k2n = p->k2, exact = p->in_r != 0.0f;
  const __m256 sc = _mm256_set1_ps(p->in_s), rv = _mm256_set1_ps(p->in_r), lo = _mm256_set1_ps(-128.0f - p->in_z),
               hi = _mm256_set1_ps(127.0f - p->in_z);
  const __m256i low = _mm256_set1_epi32(0xFFFF);
  __m256 nan = _mm256_setzero_ps();
  int h, k2;
  for (h = 0; h < nch; h++) {
    const float *ah = (const float *)(const void *)a[h];
    int32_t *uh = u + (size_t)h * k2n * 8;
    for (k2 = 0; k2 < k2n; k2++) {
      const __m256 v0 = _mm256_loadu_ps(ah + (size_t)(2 * k2) * 8);
      const __m256 v1 = 2 * k2 + 1 < K ? _mm256_loadu_ps(ah + (size_t)(2 * k2 + 1) * 8) : _mm256_setzero_ps();
      const __m256 d0 = exact ? ssm_quot8(v0, sc, rv) : _mm256_div_ps(v0, sc);
      const __m256 d1 = exact ? ssm_quot8(v1, sc, rv) : _mm256_div_ps(v1, sc);
      const __m256i q0 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(d0, lo), hi));
      const __m256i q1 = 2 * k2 + 1 < K ? _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(d1, lo), hi))
                                        : _mm256_setzero_si256();
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v0, v1, _CMP_UNORD_Q));
      _mm256_storeu_si256((__m256i *)(void *)(uh + (size_t)k2 * 8),
                          _mm256_or_si256(_mm256_and_si256(q0, low), _mm256_slli_epi32(q1, 16)));
    }
  }
  return _mm256_movemask_ps(nan) != 0;
}

/* es_s_lout's stage where it is m and OUT with out_d 1 (then post), for ssm_w_tile's columns as
   they leave: the same operations in the same order, each rounded (the product rounded before
   post is added, never fused into a multiply-add), min/max keeping a NaN as es_s_vclamp does;
   with codes (es_s_proj_t.tab), the saturated and rounded value less lo as an int32 instead */
typedef struct {
  const float *m, *post;            /* m NULL: no stage here (es_s_lout after, where there is one) */
  int q, codes;                     /* OUT; codes: OUT's rounded value r as r - lo, 0 .. 255 */
  __m256 lo, hi, sc, rnd;            /* rnd: es_s_round's 1.5 x 2^23 (+0 for -0.4, as the float path) */
  __m256i off;                      /* codes: rnd's bits + lo (r + rnd holds rnd's bits + r) */
} ssm_lout_t;

/* SsmObject.ldot16 (es_s_lctx8_t.dotp) with AVX2: y[h] = the projection of the pairs u packs
   (ssm_lpack16_avx2) with its int16 weights, two to a word (es_s_proj_t.vw2): vpmaddwd adds two
   int16 x int16 products into each lane's int32 sum. The sums are the float products' exactly
   (es_s_proj_t: exact while they stay below 2^24), so the outputs are the same floats. Tiles of
   four outputs (n of them real) of both chunks, with the output stage (ssm_lout_t). */
#define SSM_W_TILE(NAME, NC)                                                                       \
  ES_AVX2 static inline void NAME(const int32_t *u, int k2n, const int32_t *w, int np, const ssm_lout_t *e, \
                                  int n, float *y0, float *y1) {                                 \
    const float *m = e->m, *post = e->post;                                                      \
    __m256i acc[NC][4], uv[NC], wv;                                                              \
    __m256 t[NC], b;                                                                             \
    int c, j, k2;                                                                                \
    for (c = 0; c < (NC); c++)                                                                   \
      for (j = 0; j < 4; j++) acc[c][j] = _mm256_setzero_si256();                                \
    for (k2 = 0; k2 < k2n; k2++) {                                                               \
      const int32_t *wk = w + (size_t)k2 * np;                                                   \
      for (c = 0; c < (NC); c++) uv[c] = _mm256_loadu_si256((const __m256i *)(const void *)(u + ((size_t)c * k2n + k2) * 8)); \
      for (j = 0; j < 4; j++) {                                                                  \
        wv = _mm256_set1_epi32(wk[j]);                                                           \
        for (c = 0; c < (NC); c++) acc[c][j] = _mm256_add_epi32(acc[c][j], _mm256_madd_epi16(uv[c], wv)); \
      }                                                                                          \
    }                                                                                            \
    for (j = 0; j < 4; j++) {                                                                    \
      for (c = 0; c < (NC); c++) t[c] = _mm256_cvtepi32_ps(acc[c][j]);                           \
      if (m && j < n) {                                                                          \
        b = _mm256_broadcast_ss(m + j);                                                          \
        for (c = 0; c < (NC); c++) t[c] = _mm256_mul_ps(t[c], b);                                \
        if (e->codes) {                                                                          \
          for (c = 0; c < (NC); c++)                                                             \
            t[c] = _mm256_castsi256_ps(_mm256_sub_epi32(                                         \
                _mm256_castps_si256(_mm256_add_ps(_mm256_min_ps(e->hi, _mm256_max_ps(e->lo, t[c])), e->rnd)), \
                e->off));                                                                        \
        } else {                                                                                 \
          if (e->q)                                                                              \
            for (c = 0; c < (NC); c++)                                                           \
              t[c] = _mm256_mul_ps(                                                              \
                  _mm256_sub_ps(_mm256_add_ps(_mm256_min_ps(e->hi, _mm256_max_ps(e->lo, t[c])), e->rnd), e->rnd), \
                  e->sc);                                                                        \
          if (post) {                                                                            \
            b = _mm256_broadcast_ss(post + j);                                                   \
            for (c = 0; c < (NC); c++) {                                                         \
              __asm__("" : "+x"(t[c]));                                                          \
              t[c] = _mm256_add_ps(t[c], b);                                                     \
            }                                                                                    \
          }                                                                                      \
        }                                                                                        \
      }                                                                                          \
      _mm256_storeu_ps(y0 + j * 8, t[0]);                                                        \
      if ((NC) == 2) _mm256_storeu_ps(y1 + j * 8, t[(NC) - 1]);                                  \
    }                                                                                            \
  }
SSM_W_TILE(ssm_w_tile1, 1)
SSM_W_TILE(ssm_w_tile2, 2)
#undef SSM_W_TILE

/* the gate's and the decay's input p leaves the pairs as codes (es_s_proj_t.tab): an int8 output
   (OUT with out_d 1, an integral zero point) in the fused stage, up to ES_S_MAX_CODED outputs (a
   table of 1 KiB each: at most 256 KiB a projection, half a Zen 3 core's L2 cache; the gathers
   were timed at 32 outputs only, wider projections compute) */
#define ES_S_MAX_CODED 256
static int ssm_coded(const es_s_proj_t *p) {
  return p->vw2 && p->m && p->out_q && p->out_d == 1.0f && p->out_z == (float)(int32_t)p->out_z &&
         p->out <= ES_S_MAX_CODED;
}

ES_AVX2 static void ssm_ldot16_avx2(const es_s_proj_t *p, es_s_v8 *const *y, int nch, const int32_t *u) {
  const int fused = p->m != NULL && (!p->out_q || p->out_d == 1.0f), k2n = p->k2, np = p->f.np, out = p->out;
  ssm_lout_t e;
  int h, o;
  e.m = fused ? p->m : NULL, e.post = p->post, e.q = p->out_q;
  e.lo = _mm256_set1_ps(-128.0f - p->out_z), e.hi = _mm256_set1_ps(127.0f - p->out_z), e.sc = _mm256_set1_ps(p->out_s);
  e.rnd = _mm256_set1_ps(12582912.0f);
  e.codes = p->tab != NULL;           /* built only where the stage is fused and OUT (ssm_code_table) */
  e.off = _mm256_set1_epi32(0x4B400000 + (int32_t)(-128.0f - p->out_z));
  for (o = 0; o < out; o += 4) {
    float *y0 = (float *)(void *)(y[0] + o), *y1 = nch == 2 ? (float *)(void *)(y[1] + o) : NULL;
    ssm_lout_t eo = e;
    if (fused) eo.m = p->m + o, eo.post = p->post ? p->post + o : NULL;
    if (nch == 2)
      ssm_w_tile2(u, k2n, p->vw2 + o, np, &eo, out - o, y0, y1);
    else
      ssm_w_tile1(u, k2n, p->vw2 + o, np, &eo, out - o, y0, y1);
  }
  if (!fused && (p->m || p->out_q || p->post))
    for (h = 0; h < nch; h++) es_s_lout8(p, y[h]);
}

/* SsmObject.qrow with AVX2: one stream's input row a[0 .. K) quantized as es_s_quantize does
   (divide, saturate, round half to even), less the zero point, as int16 in u[0 .. (K + 1) / 2)
   (an odd K's last half zero); returns nonzero when a holds a NaN (the caller takes the float
   path, which keeps it) */
ES_AVX2 static int ssm_q16row_avx2(const es_s_proj_t *p, const float *a, int32_t *u) {
  const int K = p->K;
  const float los = -128.0f - p->in_z, his = 127.0f - p->in_z;
  const __m256 sc = _mm256_set1_ps(p->in_s), lo = _mm256_set1_ps(los), hi = _mm256_set1_ps(his);
  int16_t *q = (int16_t *)(void *)u;
  int k, nan = 0;
  for (k = 0; k + 16 <= K; k += 16) {
    __m256 v0 = _mm256_loadu_ps(a + k), v1 = _mm256_loadu_ps(a + k + 8);
    nan |= _mm256_movemask_ps(_mm256_cmp_ps(v0, v1, _CMP_UNORD_Q));
    v0 = _mm256_min_ps(_mm256_max_ps(_mm256_div_ps(v0, sc), lo), hi);
    v1 = _mm256_min_ps(_mm256_max_ps(_mm256_div_ps(v1, sc), lo), hi);
    _mm256_storeu_si256((__m256i *)(void *)(q + k),
                        _mm256_permute4x64_epi64(_mm256_packs_epi32(_mm256_cvtps_epi32(v0), _mm256_cvtps_epi32(v1)), 0xD8));
  }
  for (; k < K; k++) {
    float t = a[k];
    if (t != t) return 1;
    t = t / p->in_s;
    t = t < los ? los : t;
    t = t > his ? his : t;
    q[k] = (int16_t)es_s_round(t);
  }
  if (K & 1) q[K] = 0;
  return nan != 0;
}

/* SsmObject.dotrow with AVX2: y[0 .. np) = the exact integer products of one stream's int16 pairs u
   (from q16row) with the packed weights (es_s_proj_t.vw2), as floats; the caller adds es_s_out's
   stage. Two chains of vpmaddwd per sixteen columns. */
ES_AVX2 static void ssm_dot16row_avx2(const es_s_proj_t *p, const int32_t *u, float *y) {
  const int k2n = p->k2, np = p->f.np;
  int o, k2;
  for (o = 0; o < np; o += 16) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, b0 = a0, b1 = a0, u0, u1;
    const int32_t *w = p->vw2 + o, *w0, *w1;
    for (k2 = 0; k2 + 2 <= k2n; k2 += 2) {
      u0 = _mm256_set1_epi32(u[k2]), u1 = _mm256_set1_epi32(u[k2 + 1]);
      w0 = w + (size_t)k2 * np, w1 = w0 + np;
      a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(u0, _mm256_loadu_si256((const __m256i *)(const void *)w0)));
      b0 = _mm256_add_epi32(b0, _mm256_madd_epi16(u0, _mm256_loadu_si256((const __m256i *)(const void *)(w0 + 8))));
      a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(u1, _mm256_loadu_si256((const __m256i *)(const void *)w1)));
      b1 = _mm256_add_epi32(b1, _mm256_madd_epi16(u1, _mm256_loadu_si256((const __m256i *)(const void *)(w1 + 8))));
    }
    if (k2 < k2n) {
      u0 = _mm256_set1_epi32(u[k2]), w0 = w + (size_t)k2 * np;
      a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(u0, _mm256_loadu_si256((const __m256i *)(const void *)w0)));
      b0 = _mm256_add_epi32(b0, _mm256_madd_epi16(u0, _mm256_loadu_si256((const __m256i *)(const void *)(w0 + 8))));
    }
    _mm256_storeu_ps(y + o, _mm256_cvtepi32_ps(_mm256_add_epi32(a0, a1)));
    _mm256_storeu_ps(y + o + 8, _mm256_cvtepi32_ps(_mm256_add_epi32(b0, b1)));
  }
}
#endif

/* -- the step: es_ssm_run.h, in units of its own per instruction set and part -------------- */

#if ES_HAVE_CLONES
/* x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) or the baseline build, picked once at load as
   gcc's target_clones resolver picks (the ISA levels' feature bits, best first) */
typedef int (*ssm_run_t)(SsmObject *);
static ssm_run_t ssm_run_pick(void) {
  __builtin_cpu_init();             /* a resolver runs before any constructor */
  if (__builtin_cpu_supports("x86-64-v4")) return es_ssm_run_v4;
  if (__builtin_cpu_supports("x86-64-v3")) return es_ssm_run_v3;
  return es_ssm_run_base;
}
static int ssm_run(SsmObject *s) __attribute__((ifunc("ssm_run_pick")));
#else
#define ssm_run es_ssm_run_base
#endif

/* the step (es_step_t.run) */
static int ssm_step_run(es_step_t *s) { return ssm_run((SsmObject *)s); }

static PyObject *ssm_get_bank(SsmObject *s, void *closure) {
  (void)closure;
  return PyLong_FromLong(s->bank);
}

static PyObject *ssm_get_kernel(SsmObject *s, void *closure) {
  static const char *const tables[4] = {"", "; SiLU read by output code", "; decay read by output code",
                                        "; SiLU and decay read by output code"};
  int l, tabs = 0;                    /* bit 0: a layer's SiLU by code, bit 1: a layer's decay */
  (void)closure;
  if (!s->quant) return PyUnicode_FromString("ssm float32");
  for (l = 0; l < s->L; l++) tabs |= (s->layer[l].g.tab != NULL) | (s->layer[l].d.tab != NULL) << 1;
#if ES_S_LANES && ES_HAVE_VNNI
  if (s->ldot8) return PyUnicode_FromFormat("ssm int8 QDQ (exact integer products: AVX-512 VNNI%s)", tables[tabs]);
#endif
#if ES_S_LANES && ES_HAVE_AVX2I
  if (s->ldot16) return PyUnicode_FromFormat("ssm int8 QDQ (exact integer products: AVX2 int16 pairs%s)", tables[tabs]);
#endif
  return PyUnicode_FromString("ssm int8 QDQ (exact integer products: float32 sums)");
}

static void ssm_dealloc(SsmObject *s) {
  int i;
  PyMem_Free(s->enc.vw);
  PyMem_Free(s->head.vw);
  PyMem_Free(s->enc.vw2);
  PyMem_Free(s->head.vw2);
  for (i = 0; i < ES_S_MAX_LAYERS; i++) {
    es_s_layer_t *y = &s->layer[i];
    PyMem_Free(y->x.vw), PyMem_Free(y->g.vw), PyMem_Free(y->d.vw), PyMem_Free(y->r.vw), PyMem_Free(y->o.vw);
    PyMem_Free(y->x.vw2), PyMem_Free(y->g.vw2), PyMem_Free(y->d.vw2), PyMem_Free(y->r.vw2), PyMem_Free(y->o.vw2);
    PyMem_Free(y->g.tab), PyMem_Free(y->d.tab);
  }
  PyMem_Free(s->scratch);
  es_step_free((es_step_t *)s);
}

static PyGetSetDef ssm_getset[] = {
    {"bank", (getter)ssm_get_bank, NULL, "the state bank (0 or 1) that holds the current state", NULL},
    {"kernel", (getter)ssm_get_kernel, NULL, "the arithmetic this step runs", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

ES_STEP_TYPE(es_ssm_type, "SsmStep", SsmObject, ssm_dealloc, "A bound state-space step; build it with ssm_step().",
             ssm_getset, ES_STEP_RUN_DOC, "push(readings) -> int: as Step.push: " ES_STEP_PUSH_CODES);

/* -- constructor --------------------------------------------------------------------------- */

static int ssm_bind_layer(SsmObject *s, es_s_layer_t *y, PyObject *t) {
  const int D = s->D, N = s->N;
  if (es_check_tuple(t, 13, "ssm layer") < 0 ||
      ssm_bind_proj(s, &y->x, PyTuple_GET_ITEM(t, 0), D, N, s->ldn, "ssm x") < 0 ||
      ssm_bind_proj(s, &y->g, PyTuple_GET_ITEM(t, 1), D, D, s->ld, "ssm gate") < 0 ||
      (s->sel && ssm_bind_proj(s, &y->d, PyTuple_GET_ITEM(t, 2), D, N, s->ldn, "ssm delta") < 0) ||
      ssm_bind_proj(s, &y->r, PyTuple_GET_ITEM(t, 3), N, D, s->ld, "ssm readout") < 0 ||
      ssm_bind_proj(s, &y->o, PyTuple_GET_ITEM(t, 4), D, D, s->ld, "ssm out") < 0 ||
      !(y->ln_g = ssm_bind_item(s, t, 5, D, 0, "ssm ln weight")) ||
      !(y->ln_b = ssm_bind_item(s, t, 6, D, 0, "ssm ln bias")) ||
      es_get_float(t, 7, &y->eps, "ssm ln epsilon") < 0 ||
      (s->sel ? !(y->nrate = ssm_bind_item(s, t, 9, N, 0, "ssm rate")) ||
                    es_get_float(t, 10, &y->thr, "ssm threshold") < 0
              : !(y->decay = ssm_bind_item(s, t, 8, N, 0, "ssm decay"))) ||
      !(y->skip = ssm_bind_item(s, t, 11, D, 0, "ssm skip")) ||
      !(y->ob = ssm_bind_item(s, t, 12, D, 0, "ssm out bias")))
    return -1;
  if (!(y->eps >= 0.0f)) {
    PyErr_SetString(PyExc_ValueError, "ssm ln epsilon: negative");
    return -1;
  }
#define ES_S_SAME_IN(a, b) ((a).in_mode == (b).in_mode && (a).in_s == (b).in_s && (a).in_z == (b).in_z && (a).K == (b).K)
  y->share_q = ES_S_SAME_IN(y->x, y->g) && (!s->sel || ES_S_SAME_IN(y->x, y->d));
#undef ES_S_SAME_IN
  return 0;
}

/* ssm_quantize(x, scale, zero_point) -> bool: x (float32, writable, a multiple of 16 values) as the
   16-stream lanes quantize a projection's integer input without a division (ssm_lquantize_avx512:
   round(clamp(x / scale)) less the zero point, in place), and True; False, x untouched, where
   this host has no AVX-512 and FMA or the scale fails ssm_recip_exact (the lanes then divide).
   For tests: the same values as x / scale divided. */
PyObject *es_ssm_quantize(PyObject *mod, PyObject *args) {
  PyObject *x;
  Py_buffer v;
  float sc, z;
  int ran = 0;
  (void)mod;
  if (!PyArg_ParseTuple(args, "Off", &x, &sc, &z)) return NULL;
  if (PyObject_GetBuffer(x, &v, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
  if (v.itemsize != 4 || !v.format || strcmp(v.format, "f") || v.len % (16 * 4) || !(sc > 0.0f) ||
      !(z >= -128.0f && z <= 127.0f) || z != (float)(int32_t)z) {
    PyBuffer_Release(&v);
    PyErr_SetString(PyExc_ValueError, "ssm_quantize: float32 values, a multiple of 16, a positive scale and an "
                                      "integral int8 zero point expected");
    return NULL;
  }
#if ES_S_LANES && ES_HAVE_AVX2I && ES_S_HAVE16
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") && ssm_recip_exact(sc)) {
    es_s_proj_t p;
    es_s_v16 *a = (es_s_v16 *)v.buf;
    memset(&p, 0, sizeof p);
    p.K = (int)(v.len / (16 * 4)), p.in_mode = ES_S_IN_INT, p.in_s = sc, p.in_z = z, p.in_r = 1.0f / sc;
    ssm_lquantize_avx512(&p, &a, &a, 1);
    ran = 1;
  }
#endif
  PyBuffer_Release(&v);
  return PyBool_FromLong(ran);
}

PyObject *es_ssm_step_new(PyObject *mod, PyObject *args) {
  int B, F, D, N, C, sel, quant, packed = 1, l;
  PyObject *x, *logits, *probs, *mean, *std, *bank0, *bank1, *enc, *layers, *final, *head, *asinh = Py_None;
  SsmObject *s;
  Py_ssize_t L;
  (void)mod;
  if (!PyArg_ParseTuple(args, "iiiiippOOOOOOOOOOO|pO", &B, &F, &D, &N, &C, &sel, &quant, &x, &logits, &probs, &mean,
                        &std, &bank0, &bank1, &enc, &layers, &final, &head, &packed, &asinh))
    return NULL;
  if (B < 1 || F < 1 || D < 1 || N < 1 || C < 1 || F > (1 << 16) || D > (1 << 16) || N > (1 << 16) || C > (1 << 16)) {
    PyErr_SetString(PyExc_ValueError, "sizes out of range");
    return NULL;
  }
  if ((L = es_layer_count(layers, ES_S_MAX_LAYERS)) < 0) return NULL;
  if (!PyList_Check(bank0) || !PyList_Check(bank1) || PyList_GET_SIZE(bank0) != L || PyList_GET_SIZE(bank1) != L) {
    PyErr_SetString(PyExc_ValueError, "bank0, bank1: lists of one array per layer expected");
    return NULL;
  }
  if (es_check_tuple(final, 3, "final norm") < 0) return NULL;
  if (!(s = es_step_alloc(&es_ssm_type, ES_S_MAX_VIEWS, ssm_step_run))) return NULL;
  s->B = B, s->F = F, s->D = D, s->N = N, s->C = C, s->L = (int)L, s->sel = sel, s->quant = quant;
#if ES_S_LANES && ES_HAVE_VNNI
  if (packed && es_vnni_supported())
    s->lpack8 = ssm_lpack8_vnni, s->ldot8 = ssm_ldot8_vnni, s->qrow = ssm_q8row_vnni, s->dotrow = ssm_dot8row_vnni,
    s->row_vnni = 1;
#endif
#if ES_S_LANES && ES_HAVE_AVX2I
  if (es_avx2_supported() && __builtin_cpu_supports("fma")) s->lgate8 = ssm_lgate_avx2, s->lsel8 = ssm_lselective_avx2;
#if ES_S_HAVE16
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"))
    s->lgate16 = ssm_lgate_avx512, s->lsel16 = ssm_lselective_avx512, s->lquant16 = ssm_lquantize_avx512;
#endif
  if (packed && es_avx2_supported() && __builtin_cpu_supports("fma")) {   /* (AVX2 CPUs have FMA) */
    s->lpack16 = ssm_lpack16_avx2, s->ldot16 = ssm_ldot16_avx2;
    if (!s->qrow) s->qrow = ssm_q16row_avx2, s->dotrow = ssm_dot16row_avx2;
  }
#endif
  s->ld = (D + ES_F_NB - 1) / ES_F_NB * ES_F_NB;
  s->ldn = (N + ES_F_NB - 1) / ES_F_NB * ES_F_NB;
  s->ldc = (C + ES_F_NB - 1) / ES_F_NB * ES_F_NB;
  s->kmax = F > D ? F : D;
  s->kmax = s->kmax > N ? s->kmax : N;
  if (es_step_bind_io((es_step_t *)s, x, logits, probs, C, &s->logits, &s->probs) < 0 ||
      !(s->mean = ssm_bind(s, mean, F, 0, "mean")) || !(s->std = ssm_bind(s, std, F, 0, "std")) ||
      (asinh != Py_None && !(s->asinh = ssm_bind(s, asinh, F, 0, "asinh"))))
    goto fail;
  for (l = 0; l < L; l++)
    if (!(s->s[0][l] = ssm_bind_item(s, bank0, l, (Py_ssize_t)B * N, 1, "state")) ||
        !(s->s[1][l] = ssm_bind_item(s, bank1, l, (Py_ssize_t)B * N, 1, "state")))
      goto fail;
  if (ssm_bind_proj(s, &s->enc, enc, F, D, s->ld, "ssm encoder") < 0) goto fail;
  for (l = 0; l < L; l++)
    if (ssm_bind_layer(s, &s->layer[l], PyList_GET_ITEM(layers, l)) < 0) goto fail;
  if (!(s->lnf_g = ssm_bind_item(s, final, 0, D, 0, "final norm weight")) ||
      !(s->lnf_b = ssm_bind_item(s, final, 1, D, 0, "final norm bias")) ||
      es_get_float(final, 2, &s->lnf_eps, "final norm epsilon") < 0 ||
      ssm_bind_proj(s, &s->head, head, D, C, s->ldc, "ssm head") < 0)
    goto fail;
#if ES_S_LANES && ES_HAVE_AVX2I
  if (s->ldot16 && s->lsel8 && s->lgate8)
    for (l = 0; l < L; l++) {
      es_s_layer_t *y = &s->layer[l];
      if ((ssm_coded(&y->g) && ssm_code_table(&y->g, NULL, 0.0f) < 0) ||
          (s->sel && ssm_coded(&y->d) && ssm_code_table(&y->d, y->nrate, y->thr) < 0))
        goto fail;
    }
#endif
#if ES_S_LANES && ES_HAVE_AVX2I && ES_S_HAVE16
  if (s->lquant16 || s->lpack16) {
    es_s_proj_t *all[2 + 5 * ES_S_MAX_LAYERS];
    int n = 0, j;
    all[n++] = &s->enc, all[n++] = &s->head;
    for (l = 0; l < L; l++) {
      es_s_layer_t *y = &s->layer[l];
      all[n++] = &y->x, all[n++] = &y->g, all[n++] = &y->r, all[n++] = &y->o;
      if (s->sel) all[n++] = &y->d;
    }
    for (j = 0; j < n; j++)         /* the check once per scale: the layers' projections share few */
      if (all[j]->in_mode != ES_S_IN_FLOAT) {
        int i, done = 0;
        for (i = 0; i < j && !done; i++)
          if (all[i]->in_mode != ES_S_IN_FLOAT && all[i]->in_s == all[j]->in_s)
            all[j]->in_r = all[i]->in_r, done = 1;
        if (!done) all[j]->in_r = ssm_recip_exact(all[j]->in_s) ? 1.0f / all[j]->in_s : 0.0f;
      }
  }
#endif
  {
    size_t rows = sizeof(float) * ES_F_CHUNK *
                  ((size_t)F + (size_t)6 * s->ld + (size_t)2 * s->ldn + s->ldc + (size_t)2 * s->kmax);
#if ES_S_LANES
    size_t lanes, width[ES_S_NBUF];
    int k;
    width[ES_S_XN] = F, width[ES_S_Q] = s->kmax, width[ES_S_H] = width[ES_S_P] = s->ldc;
    width[ES_S_U] = width[ES_S_V] = width[ES_S_G] = width[ES_S_R] = width[ES_S_M] = width[ES_S_O] = s->ld;
    width[ES_S_X] = width[ES_S_D] = width[ES_S_SO] = width[ES_S_SN] = s->ldn;
    width[ES_S_U8] = (size_t)(s->kmax + 1) / 2 * 2;       /* both chunks' words, in the first chunk's span */
    for (s->lspan = 0, k = 0; k < ES_S_NBUF; k++) s->loff[k] = s->lspan, s->lspan += width[k];
    lanes = sizeof(float) * 16 * 2 * s->lspan;            /* room for chunks of 16 (of 8: the first half) */
#if ES_HAVE_CLONES && ES_S_HAVE16
    __builtin_cpu_init();
    s->l16 = s->wide = __builtin_cpu_supports("avx512f");
#else
    s->l16 = s->wide = 0;
#endif
#if ES_HAVE_VNNI || ES_HAVE_AVX2I
    rows += sizeof(int32_t) * ES_F_CHUNK * (size_t)((s->kmax + 1) / 2);      /* u8row */
#endif
    s->scratch = es_malloc(rows + lanes + 64);
    if (s->scratch)
      s->lanes = (float *)(void *)(((uintptr_t)((char *)s->scratch + rows) + 63) & ~(uintptr_t)63);
#if ES_HAVE_VNNI || ES_HAVE_AVX2I
    if (s->scratch) s->u8row = (int32_t *)(void *)((char *)s->scratch + rows - sizeof(int32_t) * ES_F_CHUNK *
                                                   (size_t)((s->kmax + 1) / 2));
#endif
#else
    s->scratch = es_malloc(rows);
#endif
  }
  if (!s->scratch) goto fail;
  return (PyObject *)s;
fail:
  Py_DECREF(s);
  return NULL;
}
