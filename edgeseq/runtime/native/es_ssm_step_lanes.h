/* es_ssm_step_lanes.h: SsmObject's step over chunks of ES_S_L streams (es_ssm_lanes.h), included
   by es_ssm_run.h once per lane width. No include guard, by design. */

/* the width's gate and decay kernels (es_ssm_avx2.h): computed, or read by code from a table */
#if ES_S_L == 8 && ES_HAVE_AVX2I
#define SSM_KERNELS 1
#define SSM_LGATE s->lgate8
#define SSM_LSEL s->lsel8
#define SSM_LGATE_TAB es_ssm_lgate_tab_avx2
#define SSM_LSEL_TAB es_ssm_lselective_tab_avx2
#elif ES_S_L == 16 && ES_HAVE_AVX2I
#define SSM_KERNELS 1
#define SSM_LGATE s->lgate16
#define SSM_LSEL s->lsel16
#define SSM_LGATE_TAB es_ssm_lgate_tab_avx512
#define SSM_LSEL_TAB es_ssm_lselective_tab_avx512
#else
#define SSM_KERNELS 0
#endif

/* nch (1 or 2) chunks of ES_S_L streams from r0 on, one stream per lane (es_ssm.h): the values the
   rows below give them; returns the first of them with NaN/Inf logits, or -1 */
ES_F_INLINE int ssm_lanes(SsmObject *s, int r0, int nch, int cur, int nxt) {
  const int F = s->F, D = s->D, N = s->N, L = s->L, C = s->C;
  es_s_v *b[ES_S_NBUF][2];
  es_s_lctx_t cx;
  int l, i, c, h, k, bad = -1, coded;
  for (h = 0; h < 2; h++)
    for (k = 0; k < ES_S_NBUF; k++) b[k][h] = (es_s_v *)(void *)(s->lanes + ((size_t)h * s->lspan + s->loff[k]) * ES_S_L);
#if ES_S_L == 16
  cx.wide = s->wide, cx.pack = s->lpack8, cx.dotp = s->ldot8;
#else
  cx.wide = 0;                       /* two chunks' tiles would take 19 of a 256-bit host's 16 registers */
#if ES_HAVE_AVX2I
  cx.pack = s->lpack16, cx.dotp = s->ldot16;
#else
  cx.pack = NULL, cx.dotp = NULL;
#endif
#endif
  cx.u = (int32_t *)(void *)b[ES_S_U8][0];
#if ES_S_L == 16 && ES_HAVE_AVX2I
  cx.quant = s->lquant16;
#else
  cx.quant = NULL;
#endif
  for (h = 0; h < nch; h++) es_s_lnormalize(s->x + (size_t)(r0 + h * ES_S_L) * F, F, s->mean, s->std, s->asinh,
                                                   b[ES_S_XN][h]);
  es_s_lproj(&s->enc, b[ES_S_XN], b[ES_S_Q], b[ES_S_U], nch, &cx);
  for (l = 0; l < L; l++) {
    const es_s_layer_t *y = &s->layer[l];
    es_s_llayernorms(b[ES_S_U], nch, D, y->ln_g, y->ln_b, y->eps, b[ES_S_V]);
    if (y->share_q) {                /* x, g (and δ) quantize v alike: once */
      const es_s_proj_t *grp[3] = {&y->x, &y->g, &y->d};
      es_s_v *const *out[3] = {b[ES_S_X], b[ES_S_G], b[ES_S_D]};
      coded = es_s_lproj_group(grp, s->sel ? 3 : 2, b[ES_S_V], b[ES_S_Q], out, nch, &cx) >> 1;
    } else {
      es_s_lproj(&y->x, b[ES_S_V], b[ES_S_Q], b[ES_S_X], nch, &cx);
      coded = es_s_lproj(&y->g, b[ES_S_V], b[ES_S_Q], b[ES_S_G], nch, &cx);
      if (s->sel) coded |= es_s_lproj(&y->d, b[ES_S_V], b[ES_S_Q], b[ES_S_D], nch, &cx) << 1;
    }
    /* bit 0: g left as codes (es_s_proj_t.tab), bit 1: δ */
    for (h = 0; h < nch; h++) {
      const size_t r = (size_t)(r0 + h * ES_S_L) * N;
      es_s_to_lanes(s->s[cur][l] + r, N, N, b[ES_S_SO][h]);
      if (s->sel) {
#if SSM_KERNELS
        if (coded & 2)
          SSM_LSEL_TAB(y->d.tab, b[ES_S_D][h], b[ES_S_SO][h], b[ES_S_X][h], N, b[ES_S_SN][h]);
        else if (SSM_LSEL)
          SSM_LSEL(y->nrate, y->thr, b[ES_S_D][h], b[ES_S_SO][h], b[ES_S_X][h], N, b[ES_S_SN][h]);
        else
#endif
          es_s_lselective(y->nrate, y->thr, b[ES_S_D][h], b[ES_S_SO][h], b[ES_S_X][h], N, b[ES_S_SN][h]);
      } else
        es_s_lfixed(y->decay, b[ES_S_SO][h], b[ES_S_X][h], N, b[ES_S_SN][h]);
      es_s_to_rows(b[ES_S_SN][h], N, s->s[nxt][l] + r, N);
    }
    es_s_lproj(&y->r, b[ES_S_SN], b[ES_S_Q], b[ES_S_R], nch, &cx);
    for (h = 0; h < nch; h++) {
#if SSM_KERNELS
      if (coded & 1) {
        SSM_LGATE_TAB(b[ES_S_R][h], y->skip, b[ES_S_V][h], y->g.tab, b[ES_S_G][h], D, b[ES_S_M][h]);
        continue;
      }
      if (SSM_LGATE) {
        SSM_LGATE(b[ES_S_R][h], y->skip, b[ES_S_V][h], b[ES_S_G][h], D, b[ES_S_M][h]);
        continue;
      }
#endif
      es_s_lgate(b[ES_S_R][h], y->skip, b[ES_S_V][h], b[ES_S_G][h], D, b[ES_S_M][h]);
    }
    es_s_lproj_residual(&y->o, b[ES_S_M], b[ES_S_Q], b[ES_S_O], b[ES_S_U], y->ob, nch, &cx);
  }
  es_s_llayernorms(b[ES_S_U], nch, D, s->lnf_g, s->lnf_b, s->lnf_eps, b[ES_S_V]);
  es_s_lproj(&s->head, b[ES_S_V], b[ES_S_Q], b[ES_S_H], nch, &cx);
  for (h = 0; h < nch; h++) {
    const es_s_v *ho = b[ES_S_H][h], *pr = b[ES_S_P][h];
    const unsigned good = es_s_lsoftmax(ho, C, b[ES_S_P][h]);
    const size_t r = (size_t)(r0 + h * ES_S_L) * C;
    es_s_lrows(ho, C, s->logits + r);
    if (good == (1u << ES_S_L) - 1) {
      es_s_lrows(pr, C, s->probs + r);
      continue;
    }
    for (i = 0; i < ES_S_L; i++)
      if (good >> i & 1)
        for (c = 0; c < C; c++) s->probs[r + (size_t)i * C + c] = pr[c][i];
      else if (bad < 0)
        bad = r0 + h * ES_S_L + i;
  }
  return bad;
}
#undef SSM_KERNELS
#undef SSM_LGATE
#undef SSM_LSEL
#undef SSM_LGATE_TAB
#undef SSM_LSEL_TAB
