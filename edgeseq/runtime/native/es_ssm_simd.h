/* es_ssm_simd.h: the state-space step's gate (SiLU) and selective decay (softplus, two exps) on
   whole registers of SSM_W lanes, included by es_ssm_avx2.h once per width: 8 (AVX2 and FMA) and
   16 (AVX-512), with SSM_W, the register type SSM_V, the target attribute SSM_T, the name suffix
   SSM_SFX and the operations SSM_* defined (and undefined here, at the end; SSM_SCALE(p, n, t):
   p 2^n, t the rounding sum n came from). The same operations in the same order at either
   width, so a lane's result is the same float at both. No include guard, by design. */
#define SSM_CAT_(a, b) a##b
#define SSM_CAT(a, b) SSM_CAT_(a, b)
#define SSM_NAME(n) SSM_CAT(n, SSM_SFX)
#define SSM_LD(p) SSM_LOADU((const float *)(const void *)(p))
#define SSM_ST(p, v) SSM_STOREU((float *)(void *)(p), v)

/* es_f_exp on SSM_W lanes. t = x log2(e) + 1.5 x 2^23 holds n = round(x log2(e)) in its low bits,
   so 2^n is built from t's bits (SSM_SCALE: the same float as es_f_exp's shift of the converted n).
   HI 0 leaves out the clamp at 88, for inputs known to be <= 0 or NaN (min(88, x) is then x). */
#define SSM_EXP_REDUCE(x, n, r, t, HI)                                                            \
  do {                                                                                          \
    if (HI) x = SSM_MIN(SSM_SET1(88.0f), x);                                                    \
    x = SSM_MAX(SSM_SET1(-87.0f), x);                                                           \
    t = SSM_FMADD(x, SSM_SET1(1.44269504088896341f), SSM_SET1(12582912.0f));                    \
    n = SSM_SUB(t, SSM_SET1(12582912.0f));                                                      \
    r = SSM_FNMADD(n, SSM_SET1(0.693359375f), x);                                               \
    r = SSM_FNMADD(n, SSM_SET1(-2.12194440e-4f), r);                                            \
  } while (0)

SSM_T static inline SSM_V SSM_NAME(ssm_exp)(SSM_V x, const int hi) {
  SSM_V n, r, p, t;
  SSM_EXP_REDUCE(x, n, r, t, hi);
  p = SSM_FMADD(SSM_SET1(1.9875691500e-4f), r, SSM_SET1(1.3981999507e-3f));
  p = SSM_FMADD(p, r, SSM_SET1(8.3334519073e-3f));
  p = SSM_FMADD(p, r, SSM_SET1(4.1665795894e-2f));
  p = SSM_FMADD(p, r, SSM_SET1(1.6666665459e-1f));
  p = SSM_FMADD(p, r, SSM_SET1(5.0000001201e-1f));
  p = SSM_ADD(SSM_FMADD(p, SSM_MUL(r, r), r), SSM_SET1(1.0f));
  return SSM_SCALE(p, n, t);
}

/* the exp of two registers at once, their operations interleaved: each exp is one long chain of
   dependent operations, and two side by side keep the multiply-add units busy where one, with
   its next copy waiting in the scheduler, leaves them idle */
SSM_T static inline void SSM_NAME(ssm_expx2)(SSM_V *x0, SSM_V *x1, const int hi) {
  SSM_V a = *x0, b = *x1, na, nb, ra, rb, pa, pb, ta, tb;
  SSM_EXP_REDUCE(a, na, ra, ta, hi);
  SSM_EXP_REDUCE(b, nb, rb, tb, hi);
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
  *x0 = SSM_SCALE(pa, na, ta), *x1 = SSM_SCALE(pb, nb, tb);
}
#undef SSM_EXP_REDUCE

/* es_s_lgate: out[k] = (r[k] + skip[k] v[k]) (g[k] sigmoid(g[k])), k < n; two k at a time, their
   exps interleaved, each pair's division overlapping the next pair's exps */
SSM_T static void SSM_NAME(ssm_lgate)(const SSM_VEC *r, const float *skip, const SSM_VEC *v, const SSM_VEC *g, int n,
                                      SSM_VEC *out) {
  const SSM_V one = SSM_SET1(1.0f), sign = SSM_SET1(-0.0f);
  int k = 0;
#define SSM_GATE_OUT(k, e)                                                                        \
  do {                                                                                          \
    const SSM_V gk = SSM_LD(g + (k)), sig = SSM_DIV(one, SSM_ADD(one, e));                      \
    const SSM_V ak = SSM_FMADD(SSM_SET1(skip[k]), SSM_LD(v + (k)), SSM_LD(r + (k)));            \
    SSM_ST(out + (k), SSM_MUL(ak, SSM_MUL(gk, sig)));                                           \
  } while (0)
  for (; k + 2 <= n; k += 2) {
    SSM_V a = SSM_XOR(SSM_LD(g + k), sign), b = SSM_XOR(SSM_LD(g + k + 1), sign);
    SSM_NAME(ssm_expx2)(&a, &b, 1);
    SSM_GATE_OUT(k, a);
    SSM_GATE_OUT(k + 1, b);
  }
  if (k < n) SSM_GATE_OUT(k, SSM_NAME(ssm_exp)(SSM_XOR(SSM_LD(g + k), sign), 1));
#undef SSM_GATE_OUT
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
   in three stages, each over every k before the next (in out): exp(-|δ|); the softplus; a and s' */
SSM_T static void SSM_NAME(ssm_lselective)(const float *nrate, float thr, const SSM_VEC *d, const SSM_VEC *s,
                                           const SSM_VEC *x, int n, SSM_VEC *out) {
  const SSM_V one = SSM_SET1(1.0f), sign = SSM_SET1(-0.0f), th = SSM_SET1(thr);
  int k, le0 = thr >= 0.0f;         /* the softplus is then >= 0 (or NaN) */
  for (k = 0; k < n; k++) le0 &= nrate[k] <= 0.0f;          /* and nrate x softplus <= 0 (or NaN) */
  for (k = 0; k + 2 <= n; k += 2) {                                         /* exp(-|δ|), -|δ| <= 0 */
    SSM_V a0 = SSM_OR(SSM_LD(d + k), sign), a1 = SSM_OR(SSM_LD(d + k + 1), sign);
    SSM_NAME(ssm_expx2)(&a0, &a1, 0);
    SSM_ST(out + k, a0), SSM_ST(out + k + 1, a1);
  }
  if (k < n) SSM_ST(out + k, SSM_NAME(ssm_exp)(SSM_OR(SSM_LD(d + k), sign), 0));
  for (k = 0; k < n; k++)
    SSM_ST(out + k, SSM_MUL(SSM_SET1(nrate[k]), SSM_NAME(ssm_softplus)(SSM_LD(d + k), SSM_LD(out + k), th)));
#define SSM_SEL_UPDATE(HI)                                                                        \
  for (k = 0; k + 2 <= n; k += 2) {                                                             \
    SSM_V a0 = SSM_LD(out + k), a1 = SSM_LD(out + k + 1);                                       \
    SSM_NAME(ssm_expx2)(&a0, &a1, HI);                                                          \
    SSM_ST(out + k, SSM_FMADD(a0, SSM_LD(s + k), SSM_MUL(SSM_SUB(one, a0), SSM_LD(x + k))));      \
    SSM_ST(out + k + 1, SSM_FMADD(a1, SSM_LD(s + k + 1), SSM_MUL(SSM_SUB(one, a1), SSM_LD(x + k + 1)))); \
  }                                                                                             \
  if (k < n) {                                                                                  \
    const SSM_V a = SSM_NAME(ssm_exp)(SSM_LD(out + k), HI);                                     \
    SSM_ST(out + k, SSM_FMADD(a, SSM_LD(s + k), SSM_MUL(SSM_SUB(one, a), SSM_LD(x + k))));      \
  }
  if (le0) {
    SSM_SEL_UPDATE(0)
  } else {
    SSM_SEL_UPDATE(1)
  }
#undef SSM_SEL_UPDATE
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
#undef SSM_SCALE
#undef SSM_SELGT
