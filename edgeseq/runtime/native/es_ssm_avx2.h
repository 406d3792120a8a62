/* es_ssm_avx2.h: the state-space step's gate (SiLU) and selective decay (softplus, two exps) for
   chunks of 8 streams on hosts with AVX2 and FMA and of 16 on hosts with AVX-512, picked at run
   time (SsmObject.lgate8, lsel8, lgate16, lsel16) in place of es_ssm_lanes.h's generic loops, and
   for int8 models their tables by output code (ssm_code_table) and the gate and decay that read
   them (es_ssm_*_tab_*, which the step calls by name: es_ssm_object.h). The kernels
   (es_ssm_simd.h) are the same operations in the same order as es_float.h's exp and sigmoid and es_ssm.h's gate and
   decay, on whole registers, with differences in form only: exp's clamps are one max and one
   min, which keep a NaN as the generic compare and select do (max(lo, x) = lo > x ? lo : x,
   min(hi, x) = hi < x ? hi : x), and the min is left out where the input cannot exceed 0; exp's
   2^n is built from the bits of the rounding sum that gave n (AVX2) or applied by vscalefps
   (AVX-512), exact either way; the decay's stages run over all of a chunk's values before the
   next and the gate's over two values at a time, two exps interleaved, so that several of exp's
   long chains of dependent operations are in flight at once (and the gate's divisions overlap
   them). Where the compiler fuses a multiply and an add differently in the generic
   loops, a result can differ from theirs by a float32 rounding, as the rows and the lanes may
   (es_ssm.h); the two widths' kernels give the same floats. Included by es_ssm_step.h. */
#define ES_AVX2F __attribute__((target("avx2,fma")))

#define SSM_W 8
#define SSM_V __m256
#define SSM_VEC es_s_v8
#define SSM_T ES_AVX2F
#define SSM_SFX _avx2
#define SSM_LOADU _mm256_loadu_ps
#define SSM_STOREU _mm256_storeu_ps
#define SSM_SET1 _mm256_set1_ps
#define SSM_ADD _mm256_add_ps
#define SSM_SUB _mm256_sub_ps
#define SSM_MUL _mm256_mul_ps
#define SSM_DIV _mm256_div_ps
#define SSM_MIN _mm256_min_ps
#define SSM_MAX _mm256_max_ps
#define SSM_FMADD _mm256_fmadd_ps
#define SSM_FNMADD _mm256_fnmadd_ps
#define SSM_XOR _mm256_xor_ps
#define SSM_OR _mm256_or_ps
/* p 2^n, n = t - 1.5 x 2^23 an integer in [-126, 127]: t's bits are those of 1.5 x 2^23 plus n, and
   shifted left 23 the former leave nothing */
#define SSM_SCALE(p, n, t) \
  _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(127)), 23)))
#define SSM_SELGT(a, b, x, y) _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_GT_OQ))
#include "es_ssm_simd.h"

#if ES_S_HAVE16
#define ES_AVX512F __attribute__((target("avx512f,fma")))
#define SSM_W 16
#define SSM_V __m512
#define SSM_VEC es_s_v16
#define SSM_T ES_AVX512F
#define SSM_SFX _avx512
#define SSM_LOADU _mm512_loadu_ps
#define SSM_STOREU _mm512_storeu_ps
#define SSM_SET1 _mm512_set1_ps
#define SSM_ADD _mm512_add_ps
#define SSM_SUB _mm512_sub_ps
#define SSM_MUL _mm512_mul_ps
#define SSM_DIV _mm512_div_ps
#define SSM_MIN _mm512_min_ps
#define SSM_MAX _mm512_max_ps
#define SSM_FMADD _mm512_fmadd_ps
#define SSM_FNMADD _mm512_fnmadd_ps
#define SSM_BITS(op, a, b) _mm512_castsi512_ps(op(_mm512_castps_si512(a), _mm512_castps_si512(b)))
#define SSM_XOR(a, b) SSM_BITS(_mm512_xor_si512, a, b)
#define SSM_OR(a, b) SSM_BITS(_mm512_or_si512, a, b)
/* p 2^n in one operation (exact: p 2^n stays a normal float for n in [-126, 127], p in [0.7, 1.5];
   a NaN p stays that NaN, as in the product) */
#define SSM_SCALE(p, n, t) _mm512_scalef_ps(p, n)
#define SSM_SELGT(a, b, x, y) _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), y, x)
#include "es_ssm_simd.h"
#endif

/* 1 where x / s, to the bit, is q + (x - q s) r, q = x r, r = 1 / s (each rounded to float32,
   the remainder exact in one fused multiply-add: Markstein's correction of the quotient), for
   every x in [1, 2); else 0. Both sides scale exactly with x's exponent while x, q s and the
   remainder stay normal, which they do wherever a quotient can round to an int8 code other than 0
   and s lies in [2^-100, 2^100] (outside it: 0). 2^20 quotients, 8 at a time: ~2 ms. */
ES_AVX2F static int ssm_recip_exact(float s) {
  const __m256 sv = _mm256_set1_ps(s), rv = _mm256_set1_ps(1.0f / s);
  __m256i bits = _mm256_setr_epi32(0x3f800000, 0x3f800001, 0x3f800002, 0x3f800003, 0x3f800004, 0x3f800005,
                                   0x3f800006, 0x3f800007);
  __m256 bad = _mm256_setzero_ps();
  int32_t m;
  if (!(s >= 0x1p-100f && s <= 0x1p100f)) return 0;
  for (m = 0; m < (1 << 23); m += 8, bits = _mm256_add_epi32(bits, _mm256_set1_epi32(8))) {
    const __m256 x = _mm256_castsi256_ps(bits), q = _mm256_mul_ps(x, rv);
    const __m256 q2 = _mm256_fmadd_ps(_mm256_fnmadd_ps(q, sv, x), rv, q);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(q2, _mm256_div_ps(x, sv), _CMP_NEQ_UQ));
  }
  return _mm256_movemask_ps(bad) == 0;
}

#if ES_S_HAVE16
/* es_s_lquantize_in for chunks of 16 streams where p->in_r is set (es_s_proj_t): x / s without a
   division (ssm_quot16: the same float), then es_s_lquantize's clamp (max and min keeping a NaN,
   as es_s_vclamp does), rounding and dq */
ES_AVX512F static void ssm_lquantize_avx512(const es_s_proj_t *p, es_s_v16 *const *a, es_s_v16 *const *qa, int nch) {
  const __m512 sv = _mm512_set1_ps(p->in_s), rv = _mm512_set1_ps(p->in_r);
  const __m512 lo = _mm512_set1_ps(-128.0f - p->in_z), hi = _mm512_set1_ps(127.0f - p->in_z);
  const __m512 magic = _mm512_set1_ps(12582912.0f), dq = _mm512_set1_ps(p->in_mode == ES_S_IN_FQ ? p->in_s : 1.0f);
  int h, k;
  for (h = 0; h < nch; h++)
    for (k = 0; k < p->K; k++) {
      const __m512 x = _mm512_loadu_ps((const float *)(const void *)(a[h] + k));
      __m512 q = _mm512_min_ps(hi, _mm512_max_ps(lo, ssm_quot16(x, sv, rv)));
      q = _mm512_sub_ps(_mm512_add_ps(q, magic), magic);
      _mm512_storeu_ps((float *)(void *)(qa[h] + k), _mm512_mul_ps(q, dq));
    }
}
#endif

#define ES_LD(p) _mm256_loadu_ps((const float *)(const void *)(p))
#define ES_ST(p, v) _mm256_storeu_ps((float *)(void *)(p), v)

/* the gate and the decay of an int8 model whose g and δ products leave as codes (es_s_proj_t.tab,
   es_ssm_step.h): SiLU(g) and a read from the projection's table, built by the two kernels above
   from the value each code stands for, so that the results are theirs to the bit; one gather of a
   row of 256 floats a feature */
ES_AVX2F void es_ssm_lgate_tab_avx2(const es_s_v8 *r, const float *skip, const es_s_v8 *v, const float *tab,
                                    const es_s_v8 *g, int n, es_s_v8 *out) {
  int k;
  for (k = 0; k < n; k++) {
    const __m256i code = _mm256_loadu_si256((const __m256i *)(const void *)(g + k));
    const __m256 a = _mm256_fmadd_ps(_mm256_set1_ps(skip[k]), ES_LD(v + k), ES_LD(r + k));
    ES_ST(out + k, _mm256_mul_ps(a, _mm256_i32gather_ps(tab + (size_t)k * 256, code, 4)));
  }
}

ES_AVX2F void es_ssm_lselective_tab_avx2(const float *tab, const es_s_v8 *d, const es_s_v8 *s, const es_s_v8 *x,
                                         int n, es_s_v8 *out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int k;
  for (k = 0; k < n; k++) {
    const __m256i code = _mm256_loadu_si256((const __m256i *)(const void *)(d + k));
    const __m256 a = _mm256_i32gather_ps(tab + (size_t)k * 256, code, 4);
    ES_ST(out + k, _mm256_fmadd_ps(a, ES_LD(s + k), _mm256_mul_ps(_mm256_sub_ps(one, a), ES_LD(x + k))));
  }
}

#if ES_S_HAVE16
/* the same two for chunks of 16 streams (AVX-512), their codes from es_s_lcodes */
ES_AVX512F void es_ssm_lgate_tab_avx512(const es_s_v16 *r, const float *skip, const es_s_v16 *v, const float *tab,
                                        const es_s_v16 *g, int n, es_s_v16 *out) {
  int k;
  for (k = 0; k < n; k++) {
    const __m512i code = _mm512_loadu_si512((const void *)(g + k));
    const __m512 a = _mm512_fmadd_ps(_mm512_set1_ps(skip[k]), _mm512_loadu_ps((const float *)(const void *)(v + k)),
                                     _mm512_loadu_ps((const float *)(const void *)(r + k)));
    _mm512_storeu_ps((float *)(void *)(out + k), _mm512_mul_ps(a, _mm512_i32gather_ps(code, tab + (size_t)k * 256, 4)));
  }
}

ES_AVX512F void es_ssm_lselective_tab_avx512(const float *tab, const es_s_v16 *d, const es_s_v16 *s,
                                             const es_s_v16 *x, int n, es_s_v16 *out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int k;
  for (k = 0; k < n; k++) {
    const __m512i code = _mm512_loadu_si512((const void *)(d + k));
    const __m512 a = _mm512_i32gather_ps(code, tab + (size_t)k * 256, 4);
    _mm512_storeu_ps((float *)(void *)(out + k),
                     _mm512_fmadd_ps(a, _mm512_loadu_ps((const float *)(const void *)(s + k)),
                                     _mm512_mul_ps(_mm512_sub_ps(one, a), _mm512_loadu_ps((const float *)(const void *)(x + k)))));
  }
}
#endif

/* es_s_proj_t.tab of p (out x 256 floats) for the gate (nrate NULL) or the decay: code c of output
   o stands for (lo + c) x out_s (+ post[o], added after the product is rounded, as the output stage
   does); its entry is that value through ssm_lgate_avx2 (r 1, skip 0: g sigmoid(g)) or
   ssm_lselective_avx2 (s 1, x 0: a). 0: built; -1: out of memory (exception set) */
ES_AVX2F static int ssm_code_table(es_s_proj_t *p, const float *nrate, float thr) {
  es_s_v8 val[32], ones[32], zeros[32], res[32];
  float rate[32], none[32];
  const float lo = -128.0f - p->out_z;
  int o, c;
  if (!(p->tab = PyMem_Malloc(sizeof(float) * 256 * (size_t)p->out))) {
    PyErr_NoMemory();
    return -1;
  }
  for (c = 0; c < 32; c++) {
    ES_ST(ones + c, _mm256_set1_ps(1.0f)), ES_ST(zeros + c, _mm256_setzero_ps());
    none[c] = 0.0f;
  }
  for (o = 0; o < p->out; o++) {
    for (c = 0; c < 32; c++) {
      __m256 t = _mm256_add_ps(_mm256_set1_ps(lo), _mm256_setr_ps(8 * c, 8 * c + 1, 8 * c + 2, 8 * c + 3, 8 * c + 4,
                                                                 8 * c + 5, 8 * c + 6, 8 * c + 7));
      t = _mm256_mul_ps(t, _mm256_set1_ps(p->out_s));
      if (p->post) {
        __asm__("" : "+x"(t));
        t = _mm256_add_ps(t, _mm256_set1_ps(p->post[o]));
      }
      ES_ST(val + c, t);
      rate[c] = nrate ? nrate[o] : 0.0f;
    }
    if (nrate)
      ssm_lselective_avx2(rate, thr, val, ones, zeros, 32, res);
    else
      ssm_lgate_avx2(ones, none, zeros, val, 32, res);
    memcpy(p->tab + (size_t)o * 256, res, sizeof res);
  }
  return 0;
}
#undef ES_LD
#undef ES_ST
