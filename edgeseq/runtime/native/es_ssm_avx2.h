/* es_ssm_avx2.h: the state-space step's gate (SiLU) and selective decay (softplus, two exps) for
   chunks of 8 streams on hosts with AVX2 and FMA, picked at run time (SsmObject.lgate8, lsel8)
   in place of es_ssm_lanes.h's generic loops, and for int8 models their tables by output code
   (ssm_code_table). The same operations in the same order as es_float.h's exp and sigmoid and
   es_ssm.h's gate and decay, on whole registers, with two differences in form only: exp's
   clamps are one max and one min, which keep a NaN as the generic compare and select do
   (max(lo, x) = lo > x ? lo : x, min(hi, x) = hi < x ? hi : x), and each stage runs over all of
   a chunk's values before the next, two exps interleaved, so that several of exp's long chains
   of dependent operations are in flight at once. Where the compiler fuses a multiply and an add
   differently in the generic loops, a result can differ from theirs by a float32 rounding, as
   the rows and the lanes may (es_ssm.h). Included by es_ssm_step.h. */
#define ES_AVX2F __attribute__((target("avx2,fma")))

/* es_f_exp on 8 lanes */
ES_AVX2F static inline __m256 ssm_exp8(__m256 x) {
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  __m256 n, r, p;
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
  x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x);
  n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), magic), magic);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  p = _mm256_fmadd_ps(_mm256_set1_ps(1.9875691500e-4f), r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  n = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23));
  return _mm256_mul_ps(p, n);
}

/* ssm_exp8 of two registers at once, their operations interleaved: each exp is one long chain of
   dependent operations, and two side by side keep the multiply-add units busy where one, with
   its next copy waiting in the scheduler, leaves them idle */
ES_AVX2F static inline void ssm_exp8x2(__m256 *x0, __m256 *x1) {
  const __m256 magic = _mm256_set1_ps(12582912.0f), hi = _mm256_set1_ps(88.0f), lo = _mm256_set1_ps(-87.0f);
  const __m256 l2e = _mm256_set1_ps(1.44269504088896341f), c1 = _mm256_set1_ps(0.693359375f),
               c2 = _mm256_set1_ps(-2.12194440e-4f);
  __m256 a = *x0, b = *x1, na, nb, ra, rb, pa, pb;
  a = _mm256_max_ps(lo, _mm256_min_ps(hi, a)), b = _mm256_max_ps(lo, _mm256_min_ps(hi, b));
  na = _mm256_sub_ps(_mm256_fmadd_ps(a, l2e, magic), magic), nb = _mm256_sub_ps(_mm256_fmadd_ps(b, l2e, magic), magic);
  ra = _mm256_fnmadd_ps(na, c1, a), rb = _mm256_fnmadd_ps(nb, c1, b);
  ra = _mm256_fnmadd_ps(na, c2, ra), rb = _mm256_fnmadd_ps(nb, c2, rb);
#define ES_P(c) pa = _mm256_fmadd_ps(pa, ra, _mm256_set1_ps(c)), pb = _mm256_fmadd_ps(pb, rb, _mm256_set1_ps(c))
  pa = pb = _mm256_set1_ps(1.9875691500e-4f);
  ES_P(1.3981999507e-3f);
  ES_P(8.3334519073e-3f);
  ES_P(4.1665795894e-2f);
  ES_P(1.6666665459e-1f);
  ES_P(5.0000001201e-1f);
#undef ES_P
  pa = _mm256_add_ps(_mm256_fmadd_ps(pa, _mm256_mul_ps(ra, ra), ra), _mm256_set1_ps(1.0f));
  pb = _mm256_add_ps(_mm256_fmadd_ps(pb, _mm256_mul_ps(rb, rb), rb), _mm256_set1_ps(1.0f));
  na = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(na), _mm256_set1_epi32(127)), 23));
  nb = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(nb), _mm256_set1_epi32(127)), 23));
  *x0 = _mm256_mul_ps(pa, na), *x1 = _mm256_mul_ps(pb, nb);
}

#define ES_LD(p) _mm256_loadu_ps((const float *)(const void *)(p))
#define ES_ST(p, v) _mm256_storeu_ps((float *)(void *)(p), v)

/* ssm_exp8 of v[k], k < n, in place: two at a time, the chains of the next two in flight */
ES_AVX2F static inline void ssm_exp8_n(es_s_v8 *v, int n) {
  int k = 0;
  for (; k + 2 <= n; k += 2) {
    __m256 a = ES_LD(v + k), b = ES_LD(v + k + 1);
    ssm_exp8x2(&a, &b);
    ES_ST(v + k, a), ES_ST(v + k + 1, b);
  }
  if (k < n) ES_ST(v + k, ssm_exp8(ES_LD(v + k)));
}

/* es_s_lgate on 8 lanes: out[k] = (r[k] + skip[k] v[k]) (g[k] sigmoid(g[k])), k < n; exp(-g) of
   every k first (into out), then the rest */
ES_AVX2F static void ssm_lgate_avx2(const es_s_v8 *r, const float *skip, const es_s_v8 *v, const es_s_v8 *g, int n,
                                    es_s_v8 *out) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  int k;
  for (k = 0; k < n; k++) ES_ST(out + k, _mm256_xor_ps(ES_LD(g + k), sign));
  ssm_exp8_n(out, n);
  for (k = 0; k < n; k++) {
    const __m256 gk = ES_LD(g + k), sig = _mm256_div_ps(one, _mm256_add_ps(one, ES_LD(out + k)));
    const __m256 a = _mm256_fmadd_ps(_mm256_set1_ps(skip[k]), ES_LD(v + k), ES_LD(r + k));
    ES_ST(out + k, _mm256_mul_ps(a, _mm256_mul_ps(gk, sig)));
  }
}

/* es_s_softplus of one register given t = exp(-|δ|) */
ES_AVX2F static inline __m256 ssm_softplus8(__m256 dk, __m256 t, __m256 th) {
  const __m256 two = _mm256_set1_ps(2.0f);
  const __m256 z = _mm256_div_ps(t, _mm256_add_ps(two, t)), w = _mm256_mul_ps(z, z), z2 = _mm256_mul_ps(two, z);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(1.0f / 13), w, _mm256_set1_ps(1.0f / 11)), sp;
  p = _mm256_fmadd_ps(p, w, _mm256_set1_ps(1.0f / 9));
  p = _mm256_fmadd_ps(p, w, _mm256_set1_ps(1.0f / 7));
  p = _mm256_fmadd_ps(p, w, _mm256_set1_ps(1.0f / 5));
  p = _mm256_fmadd_ps(p, w, _mm256_set1_ps(1.0f / 3));
  p = _mm256_mul_ps(p, w);
  sp = _mm256_add_ps(_mm256_max_ps(dk, _mm256_setzero_ps()), _mm256_fmadd_ps(z2, p, z2));  /* max(δ, 0) + log1p */
  return _mm256_blendv_ps(sp, dk, _mm256_cmp_ps(dk, th, _CMP_GT_OQ));
}

/* es_s_lselective on 8 lanes: the softplus (es_s_softplus: the graph's Where(δ > thr, δ,
   Softplus(δ)), log1p as es_s_log1p01's series), a = exp(nrate[k] softplus(δ)), then
   s' = a s + (1 - a) x, k < n; each stage over every k before the next (in out) */
ES_AVX2F static void ssm_lselective_avx2(const float *nrate, float thr, const es_s_v8 *d, const es_s_v8 *s,
                                         const es_s_v8 *x, int n, es_s_v8 *out) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f), th = _mm256_set1_ps(thr);
  int k;
  for (k = 0; k < n; k++) ES_ST(out + k, _mm256_or_ps(ES_LD(d + k), sign));            /* -|δ| */
  ssm_exp8_n(out, n);
  for (k = 0; k < n; k++)
    ES_ST(out + k, _mm256_mul_ps(_mm256_set1_ps(nrate[k]), ssm_softplus8(ES_LD(d + k), ES_LD(out + k), th)));
  ssm_exp8_n(out, n);                                                                   /* a */
  for (k = 0; k < n; k++) {
    const __m256 a = ES_LD(out + k);
    ES_ST(out + k, _mm256_fmadd_ps(a, ES_LD(s + k), _mm256_mul_ps(_mm256_sub_ps(one, a), ES_LD(x + k))));
  }
}
/* the gate and the decay of an int8 model whose g and δ products leave as codes (es_s_proj_t.tab,
   es_ssm_step.h): SiLU(g) and a read from the projection's table, built by the two kernels above
   from the value each code stands for, so that the results are theirs to the bit; one gather of a
   row of 256 floats a feature */
ES_AVX2F static void ssm_lgate_tab_avx2(const es_s_v8 *r, const float *skip, const es_s_v8 *v, const float *tab,
                                        const es_s_v8 *g, int n, es_s_v8 *out) {
  int k;
  for (k = 0; k < n; k++) {
    const __m256i code = _mm256_loadu_si256((const __m256i *)(const void *)(g + k));
    const __m256 a = _mm256_fmadd_ps(_mm256_set1_ps(skip[k]), ES_LD(v + k), ES_LD(r + k));
    ES_ST(out + k, _mm256_mul_ps(a, _mm256_i32gather_ps(tab + (size_t)k * 256, code, 4)));
  }
}

ES_AVX2F static void ssm_lselective_tab_avx2(const float *tab, const es_s_v8 *d, const es_s_v8 *s, const es_s_v8 *x,
                                             int n, es_s_v8 *out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int k;
  for (k = 0; k < n; k++) {
    const __m256i code = _mm256_loadu_si256((const __m256i *)(const void *)(d + k));
    const __m256 a = _mm256_i32gather_ps(tab + (size_t)k * 256, code, 4);
    ES_ST(out + k, _mm256_fmadd_ps(a, ES_LD(s + k), _mm256_mul_ps(_mm256_sub_ps(one, a), ES_LD(x + k))));
  }
}

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
