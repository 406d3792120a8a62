/* es_ssm_run.h: SsmStep's step (edgeseq.models.ssm) over all B streams: chunks of 16 streams in
   lanes (hosts with AVX-512), then of 8 (es_ssm_step_lanes.h), then the rows left over (es_ssm.h),
   the state written to the other bank, which becomes the current one where every stream's
   logits are finite.

   Included once per instruction set and part, each its own translation unit, so that setup.py
   compiles them side by side and no compiler holds more than one of them (the step was one
   function with three target_clones, and its unit the build's 6 minutes): ES_SSM_ISA names the
   instruction set (v4, v3, base) and ES_SSM_TARGET gives it the target its clone had;
   ES_SSM_PART is 16 (es_ssm_lanes16_<isa>: chunks of 16 streams), 8 (es_ssm_lanes8_<isa>) or 0
   (es_ssm_run_<isa>: the chunks through those two, then the rows left over). The chunks were
   inlined into the step; they take and give only integers and pointers, and are compiled with
   the step's target, so every stream's floats are those of before. es_ssm_step.h picks a step
   at load. No include guard, by design. */
#include "es_ssm_object.h"

#define ES_SSM_CAT_(a, b) a##b
#define ES_SSM_CAT(a, b) ES_SSM_CAT_(a, b)
#define ES_SSM_NAME(name) ES_SSM_CAT(name, ES_SSM_ISA)

#if ES_SSM_PART == 16
#if ES_S_LANES && ES_S_HAVE16
#define ES_S_L 16
#include "es_ssm_step_lanes.h"
#undef ES_S_L
ES_SSM_TARGET int ES_SSM_NAME(es_ssm_lanes16_)(SsmObject *s, int r0, int nch, int cur, int nxt) {
  return ssm_lanes16(s, r0, nch, cur, nxt);
}
#else
typedef int ES_SSM_NAME(es_ssm_lanes16_none_);   /* no 16-stream lanes on this host */
#endif

#elif ES_SSM_PART == 8
#if ES_S_LANES
#define ES_S_L 8
#include "es_ssm_step_lanes.h"
#undef ES_S_L
ES_SSM_TARGET int ES_SSM_NAME(es_ssm_lanes8_)(SsmObject *s, int r0, int nch, int cur, int nxt) {
  return ssm_lanes8(s, r0, nch, cur, nxt);
}
#else
typedef int ES_SSM_NAME(es_ssm_lanes8_none_);    /* no lanes for this compiler */
#endif

#else
/* y[r] = P(a[r]) for rows r < rows, as es_s_proj; where the projection is an exact integer
   product and the host has int8 dot products, one row at a time from its bytes (u: rows x k4
   words). Projections that quantize their input alike (share: set after the first, which
   returns 1 when it made the bytes) reuse them. A NaN input takes es_s_proj, which carries it
   (and returns 0, so the next of the group quantizes again). */
ES_F_INLINE int ssm_proj(const SsmObject *s, const es_s_proj_t *p, const float *a, int lda, int rows, float *qa,
                         float *ap, float *y, int ldy, int32_t *u, int share) {
#if ES_S_LANES && (ES_HAVE_VNNI || ES_HAVE_AVX2I)
  if (s->qrow && (s->row_vnni ? p->vw != NULL : p->vw2 != NULL)) {
    const int words = s->row_vnni ? p->k4 : p->k2;
    int r, nan = 0;
    if (!share)
      for (r = 0; r < rows; r++) nan |= s->qrow(p, a + (size_t)r * lda, u + (size_t)r * words);
    if (!nan) {
      for (r = 0; r < rows; r++) {
        s->dotrow(p, u + (size_t)r * words, y + (size_t)r * ldy);
        if (!s->row_vnni && (p->m || p->out_q || p->post)) es_s_out(p, y + (size_t)r * ldy);
      }
      return 1;
    }
  }
#endif
  (void)s, (void)u, (void)share;
  es_s_proj(p, a, lda, rows, qa, ap, y, ldy);
  return 0;
}

ES_SSM_TARGET int ES_SSM_NAME(es_ssm_run_)(SsmObject *s) {
  const int B = s->B, F = s->F, D = s->D, N = s->N, L = s->L, C = s->C, ld = s->ld, ldn = s->ldn;
  const int cur = s->bank, nxt = cur ^ 1;
  const size_t R = ES_F_CHUNK;
  float *xn = s->scratch, *u = xn + R * F, *v = u + R * ld, *go = v + R * ld, *ro = go + R * ld, *mm = ro + R * ld;
  float *oo = mm + R * ld, *xo = oo + R * ld, *dl = xo + R * ldn, *ho = dl + R * ldn, *qa = ho + R * s->ldc;
  float *ap = qa + R * s->kmax;
#if ES_S_LANES && (ES_HAVE_VNNI || ES_HAVE_AVX2I)
  int32_t *u8 = s->u8row;
#else
  int32_t *u8 = NULL;
#endif
  int r0 = 0, l, bad = -1, sh;
#if ES_S_LANES
  int nch;
#if ES_S_HAVE16
  if (s->l16)
    for (; r0 + 16 <= B; r0 += nch * 16) {      /* two chunks where two are left, else one */
      nch = r0 + 2 * 16 <= B ? 2 : 1;
      sh = ES_SSM_NAME(es_ssm_lanes16_)(s, r0, nch, cur, nxt);
      if (sh >= 0 && bad < 0) bad = sh;
    }
#endif
  for (; r0 + 8 <= B; r0 += nch * 8) {
    nch = r0 + 2 * 8 <= B ? 2 : 1;
    sh = ES_SSM_NAME(es_ssm_lanes8_)(s, r0, nch, cur, nxt);
    if (sh >= 0 && bad < 0) bad = sh;
  }
#endif
  for (; r0 < B; r0 += ES_F_CHUNK) {
    int rows = B - r0 < ES_F_CHUNK ? B - r0 : ES_F_CHUNK, r;
    es_f_normalize(s->x + (size_t)r0 * F, rows, F, s->mean, s->std, s->asinh, xn);
    es_s_proj(&s->enc, xn, F, rows, qa, ap, u, ld);
    for (l = 0; l < L; l++) {
      const es_s_layer_t *y = &s->layer[l];
      const float *sold = s->s[cur][l] + (size_t)r0 * N;
      float *snew = s->s[nxt][l] + (size_t)r0 * N;
      for (r = 0; r < rows; r++) es_s_layernorm(u + (size_t)r * ld, D, y->ln_g, y->ln_b, y->eps, v + (size_t)r * ld);
      sh = ssm_proj(s, &y->x, v, ld, rows, qa, ap, xo, ldn, u8, 0) && y->share_q;
      sh = ssm_proj(s, &y->g, v, ld, rows, qa, ap, go, ld, u8, sh) && y->share_q;
      if (s->sel) {
        ssm_proj(s, &y->d, v, ld, rows, qa, ap, dl, ldn, u8, sh);
        for (r = 0; r < rows; r++)
          es_s_selective(y->nrate, y->thr, dl + (size_t)r * ldn, sold + (size_t)r * N, xo + (size_t)r * ldn, N,
                         snew + (size_t)r * N);
      } else {
        for (r = 0; r < rows; r++)
          es_s_fixed(y->decay, sold + (size_t)r * N, xo + (size_t)r * ldn, N, snew + (size_t)r * N);
      }
      ssm_proj(s, &y->r, snew, N, rows, qa, ap, ro, ld, u8, 0);
      for (r = 0; r < rows; r++)
        es_s_gate(ro + (size_t)r * ld, y->skip, v + (size_t)r * ld, go + (size_t)r * ld, D, mm + (size_t)r * ld);
      ssm_proj(s, &y->o, mm, ld, rows, qa, ap, oo, ld, u8, 0);
      for (r = 0; r < rows; r++) es_s_residual(u + (size_t)r * ld, oo + (size_t)r * ld, y->ob, D);
    }
    for (r = 0; r < rows; r++)
      es_s_layernorm(u + (size_t)r * ld, D, s->lnf_g, s->lnf_b, s->lnf_eps, v + (size_t)r * ld);
    es_s_proj(&s->head, v, ld, rows, qa, ap, ho, s->ldc);
    for (r = 0; r < rows; r++) {
      float *lo = s->logits + (size_t)(r0 + r) * C;
      memcpy(lo, ho + (size_t)r * s->ldc, sizeof(float) * C);
      if (!es_f_softmax(lo, C, s->probs + (size_t)(r0 + r) * C) && bad < 0) bad = r0 + r;
    }
  }
  if (bad < 0) s->bank = nxt;
  return bad;
}
#endif

#undef ES_SSM_NAME
#undef ES_SSM_CAT
#undef ES_SSM_CAT_
