/* es_ssm_avx2.h: the state-space step's gate (SiLU) and selective decay (softplus, two exps) for
   chunks of 8 streams on hosts with AVX2 and FMA, picked at run time (SsmObject.lgate8, lsel8)
   in place of es_ssm_lanes.h's generic loops. The same operations in the same order as
   es_float.h's exp and sigmoid and es_ssm.h's gate and decay, on whole registers, with two
   differences in form only: exp's clamps are one max and one min, which keep a NaN as the
   generic compare and select do (max(lo, x) = lo > x ? lo : x, min(hi, x) = hi < x ? hi : x),
   and each stage runs over all of a chunk's values before the next, two exps interleaved, so
   that several of exp's long chains of dependent operations are in flight at once. Where the
   compiler fuses a multiply and an add differently in the generic loops, a result can differ
   from theirs by a float32 rounding, as the rows and the lanes may (es_ssm.h). Included by
   es_ssm_step.h. */
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
#undef ES_LD
#undef ES_ST
