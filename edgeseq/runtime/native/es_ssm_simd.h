/* es_ssm_simd.h: the state-space step's gate (SiLU) and selective decay (softplus, two exps) on
   whole registers of SSM_W lanes, included by es_ssm_avx2.h once per width: 8 (AVX2 and FMA) and
   16 (AVX-512), with SSM_W, the register type SSM_V, the target attribute SSM_T, the name suffix
   SSM_SFX and the operations SSM_* defined (and undefined here, at the end). The same operations in the same order at either
   width, so a lane's result is the same float at both. No include guard, by design. */
#define SSM_CAT_(a, b) a##b
#define SSM_CAT(a, b) SSM_CAT_(a, b)
#define SSM_NAME(n) SSM_CAT(n, SSM_SFX)
#define SSM_LD(p) SSM_LOADU((const float *)(const void *)(p))
#define SSM_ST(p, v) SSM_STOREU((float *)(void *)(p), v)

/* es_f_exp on SSM_W lanes */
SSM_T static inline SSM_V SSM_NAME(ssm_exp)(SSM_V x) {
  const SSM_V magic = SSM_SET1(12582912.0f);
  SSM_V n, r, p;
  x = SSM_MIN(SSM_SET1(88.0f), x);
  x = SSM_MAX(SSM_SET1(-87.0f), x);
  n = SSM_SUB(SSM_FMADD(x, SSM_SET1(1.44269504088896341f), magic), magic);
  r = SSM_FNMADD(n, SSM_SET1(0.693359375f), x);
  r = SSM_FNMADD(n, SSM_SET1(-2.12194440e-4f), r);
  p = SSM_FMADD(SSM_SET1(1.9875691500e-4f), r, SSM_SET1(1.3981999507e-3f));
  p = SSM_FMADD(p, r, SSM_SET1(8.3334519073e-3f));
  p = SSM_FMADD(p, r, SSM_SET1(4.1665795894e-2f));
  p = SSM_FMADD(p, r, SSM_SET1(1.6666665459e-1f));
  p = SSM_FMADD(p, r, SSM_SET1(5.0000001201e-1f));
  p = SSM_ADD(SSM_FMADD(p, SSM_MUL(r, r), r), SSM_SET1(1.0f));
  return SSM_MUL(p, SSM_POW2(n));
}

/* the exp of two registers at once, their operations interleaved: each exp is one long chain of
   dependent operations, and two side by side keep the multiply-add units busy where one, with
   its next copy waiting in the scheduler, leaves them idle */
SSM_T static inline void SSM_NAME(ssm_expx2)(SSM_V *x0, SSM_V *x1) {
  const SSM_V magic = SSM_SET1(12582912.0f), hi = SSM_SET1(88.0f), lo = SSM_SET1(-87.0f);
  const SSM_V l2e = SSM_SET1(1.44269504088896341f), c1 = SSM_SET1(0.693359375f), c2 = SSM_SET1(-2.12194440e-4f);
  SSM_V a = *x0, b = *x1, na, nb, ra, rb, pa, pb;
  a = SSM_MAX(lo, SSM_MIN(hi, a)), b = SSM_MAX(lo, SSM_MIN(hi, b));
  na = SSM_SUB(SSM_FMADD(a, l2e, magic), magic), nb = SSM_SUB(SSM_FMADD(b, l2e, magic), magic);
  ra = SSM_FNMADD(na, c1, a), rb = SSM_FNMADD(nb, c1, b);
  ra = SSM_FNMADD(na, c2, ra), rb = SSM_FNMADD(nb, c2, rb);
#define SSM_P(c) pa = SSM_FMADD(pa, ra, SSM_SET1(c)), pb = SSM_FMADD(pb, rb, SSM_SET1(c))
  pa = pb = SSM_SET1(1.9875691500e-4f);
  SSM_P(1.3981999507e-3f);
  SSM_P(8.3334519073e-3f);
  SSM_P(4.1665795894e-2f);
  SSM_P(1.6666665459e-1f);
  SSM_P(5.0000001201e-1f);
#undef SSM_P
  pa = SSM_ADD(SSM_FMADD(pa, SSM_MUL(ra, ra), ra), SSM_SET1(1.0f));
  pb = SSM_ADD(SSM_FMADD(pb, SSM_MUL(rb, rb), rb), SSM_SET1(1.0f));
  *x0 = SSM_MUL(pa, SSM_POW2(na)), *x1 = SSM_MUL(pb, SSM_POW2(nb));
}

/* the exp of v[k], k < n, in place: two at a time, the chains of the next two in flight */
SSM_T static inline void SSM_NAME(ssm_exp_n)(SSM_VEC *v, int n) {
  int k = 0;
  for (; k + 2 <= n; k += 2) {
    SSM_V a = SSM_LD(v + k), b = SSM_LD(v + k + 1);
    SSM_NAME(ssm_expx2)(&a, &b);
    SSM_ST(v + k, a), SSM_ST(v + k + 1, b);
  }
  if (k < n) SSM_ST(v + k, SSM_NAME(ssm_exp)(SSM_LD(v + k)));
}

/* es_s_lgate: out[k] = (r[k] + skip[k] v[k]) (g[k] sigmoid(g[k])), k < n; exp(-g) of every k
   first (into out), then the rest */
SSM_T static void SSM_NAME(ssm_lgate)(const SSM_VEC *r, const float *skip, const SSM_VEC *v, const SSM_VEC *g, int n,
                                      SSM_VEC *out) {
  const SSM_V one = SSM_SET1(1.0f), sign = SSM_SET1(-0.0f);
  int k;
  for (k = 0; k < n; k++) SSM_ST(out + k, SSM_XOR(SSM_LD(g + k), sign));
  SSM_NAME(ssm_exp_n)(out, n);
  for (k = 0; k < n; k++) {
    const SSM_V gk = SSM_LD(g + k), sig = SSM_DIV(one, SSM_ADD(one, SSM_LD(out + k)));
    const SSM_V a = SSM_FMADD(SSM_SET1(skip[k]), SSM_LD(v + k), SSM_LD(r + k));
    SSM_ST(out + k, SSM_MUL(a, SSM_MUL(gk, sig)));
  }
}

/* es_s_softplus of one register given t = exp(-|δ|) */
SSM_T static inline SSM_V SSM_NAME(ssm_softplus)(SSM_V dk, SSM_V t, SSM_V th) {
  const SSM_V two = SSM_SET1(2.0f);
  const SSM_V z = SSM_DIV(t, SSM_ADD(two, t)), w = SSM_MUL(z, z), z2 = SSM_MUL(two, z);
  SSM_V p = SSM_FMADD(SSM_SET1(1.0f / 13), w, SSM_SET1(1.0f / 11)), sp;
  p = SSM_FMADD(p, w, SSM_SET1(1.0f / 9));
  p = SSM_FMADD(p, w, SSM_SET1(1.0f / 7));
  p = SSM_FMADD(p, w, SSM_SET1(1.0f / 5));
  p = SSM_FMADD(p, w, SSM_SET1(1.0f / 3));
  p = SSM_MUL(p, w);
  sp = SSM_ADD(SSM_MAX(dk, SSM_SET1(0.0f)), SSM_FMADD(z2, p, z2));      /* max(δ, 0) + log1p */
  return SSM_SELGT(dk, th, dk, sp);                                      /* δ > thr ? δ : sp */
}

/* es_s_lselective: the softplus (es_s_softplus: the graph's Where(δ > thr, δ, Softplus(δ)), log1p
   as es_s_log1p01's series), a = exp(nrate[k] softplus(δ)), then s' = a s + (1 - a) x, k < n;
   each stage over every k before the next (in out) */
SSM_T static void SSM_NAME(ssm_lselective)(const float *nrate, float thr, const SSM_VEC *d, const SSM_VEC *s,
                                           const SSM_VEC *x, int n, SSM_VEC *out) {
  const SSM_V one = SSM_SET1(1.0f), sign = SSM_SET1(-0.0f), th = SSM_SET1(thr);
  int k;
  for (k = 0; k < n; k++) SSM_ST(out + k, SSM_OR(SSM_LD(d + k), sign));           /* -|δ| */
  SSM_NAME(ssm_exp_n)(out, n);
  for (k = 0; k < n; k++)
    SSM_ST(out + k, SSM_MUL(SSM_SET1(nrate[k]), SSM_NAME(ssm_softplus)(SSM_LD(d + k), SSM_LD(out + k), th)));
  SSM_NAME(ssm_exp_n)(out, n);                                                    /* a */
  for (k = 0; k < n; k++) {
    const SSM_V a = SSM_LD(out + k);
    SSM_ST(out + k, SSM_FMADD(a, SSM_LD(s + k), SSM_MUL(SSM_SUB(one, a), SSM_LD(x + k))));
  }
}
#undef SSM_LD
#undef SSM_ST
#undef SSM_NAME
#undef SSM_CAT
#undef SSM_CAT_
#undef SSM_W
#undef SSM_V
#undef SSM_VEC
#undef SSM_T
#undef SSM_SFX
#undef SSM_LOADU
#undef SSM_STOREU
#undef SSM_SET1
#undef SSM_ADD
#undef SSM_SUB
#undef SSM_MUL
#undef SSM_DIV
#undef SSM_MIN
#undef SSM_MAX
#undef SSM_FMADD
#undef SSM_FNMADD
#undef SSM_BITS
#undef SSM_XOR
#undef SSM_OR
#undef SSM_POW2
#undef SSM_SELGT
