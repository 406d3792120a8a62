/* es_ssm_object.h: the state-space step's object (SsmStep), shared by its translation units:
   es_ssm_step.c (the type, its constructor and the kernels with a target of their own:
   es_ssm_step.h) and the step's, es_ssm_{run,lanes16,lanes8}_{v4,v3,base}.c (es_ssm_run.h), and
   what they call of each other. After es_native.h. */
#ifndef ES_SSM_OBJECT_H
#define ES_SSM_OBJECT_H
#include "es_ssm.h"

#define ES_S_MAX_LAYERS 16
#define ES_S_PROJ_VIEWS 4          /* W, bias, m, post */
/* buffers, normalisation, bounds, final norm (11), input projection and head, and per layer five
   projections, two state banks and five vectors */
#define ES_S_MAX_VIEWS (11 + 2 * ES_S_PROJ_VIEWS + ES_S_MAX_LAYERS * (5 * ES_S_PROJ_VIEWS + 7))

#if ES_S_LANES
/* the lane buffers of one chunk (es_ssm.h), [width][ES_S_L] each */
enum { ES_S_XN, ES_S_U, ES_S_V, ES_S_G, ES_S_R, ES_S_M, ES_S_O, ES_S_X, ES_S_D, ES_S_SO, ES_S_SN, ES_S_H, ES_S_P,
       ES_S_Q, ES_S_U8, ES_S_NBUF };

#endif

typedef struct {
  es_s_proj_t x, g, d, r, o;        /* d: selective only */
  const float *ln_g, *ln_b, *decay, *nrate, *skip, *ob;
  float eps, thr;
  int share_q;                      /* g (and δ) quantize their input as x does */
} es_s_layer_t;

typedef struct {
  ES_STEP_HEAD
  int quant, sel, D, N, L, C, bank;
  float *logits, *probs;
  const float *mean, *std, *asinh;  /* asinh: the input transform's scale [F], NULL where there is none */
  es_s_proj_t enc, head;
  es_s_layer_t layer[ES_S_MAX_LAYERS];
  const float *lnf_g, *lnf_b;
  float lnf_eps;
  float *s[2][ES_S_MAX_LAYERS];
  int ld, ldn, ldc, kmax;           /* row strides of the chunk's D-, N- and C-wide buffers; widest input */
  float *scratch;
#if ES_S_LANES
  float *lanes;                     /* in scratch, aligned: two lane chunks' buffers, lspan vectors each */
  size_t lspan, loff[ES_S_NBUF];    /* in vectors of the chunk's width (ES_S_L floats) */
  int l16;                          /* chunks of 16 streams (a host with AVX-512), else of 8 */
  int wide;                         /* es_s_ltile2 for two chunks at once */
#endif
#if ES_S_LANES && ES_S_HAVE16
  /* es_s_lctx16_t's pack and dotp (AVX-512 VNNI's bytes, es_s_proj_t.vw), or NULL */
  int (*lpack8)(const es_s_proj_t *, es_s_v16 *const *, int, int32_t *);
  void (*ldot8)(const es_s_proj_t *, es_s_v16 *const *, int, const int32_t *);
#endif
#if ES_S_LANES && ES_HAVE_AVX2I
  /* the int8 products as int16 pairs (es_s_proj_t.vw2), for chunks of 8 streams: es_s_lctx8_t's
     pack and dotp */
  int (*lpack16)(const es_s_proj_t *, es_s_v8 *const *, int, int32_t *);
  void (*ldot16)(const es_s_proj_t *, es_s_v8 *const *, int, const int32_t *);
  /* es_s_lgate and es_s_lselective for chunks of 8 streams with AVX2 and FMA (es_ssm_avx2.h), or NULL */
  void (*lgate8)(const es_s_v8 *, const float *, const es_s_v8 *, const es_s_v8 *, int, es_s_v8 *);
  void (*lsel8)(const float *, float, const es_s_v8 *, const es_s_v8 *, const es_s_v8 *, int, es_s_v8 *);
#if ES_S_HAVE16
  /* the same for chunks of 16 streams with AVX-512 (the same floats), or NULL */
  void (*lgate16)(const es_s_v16 *, const float *, const es_s_v16 *, const es_s_v16 *, int, es_s_v16 *);
  void (*lsel16)(const float *, float, const es_s_v16 *, const es_s_v16 *, const es_s_v16 *, int, es_s_v16 *);
  /* es_s_lctx16_t.quant (ssm_lquantize_avx512), or NULL */
  void (*lquant16)(const es_s_proj_t *, es_s_v16 *const *, es_s_v16 *const *, int);
#endif
#endif
#if ES_S_LANES && (ES_HAVE_VNNI || ES_HAVE_AVX2I)
  /* single rows' packed int8 products: VNNI's (vw, k4 words a row, the output stage fused) or
     AVX2's (vw2, k2 words a row, es_s_out after); NULL: float sums */
  int (*qrow)(const es_s_proj_t *, const float *, int32_t *);
  void (*dotrow)(const es_s_proj_t *, const int32_t *, float *);
  int row_vnni;
  int32_t *u8row;                   /* in scratch: ES_F_CHUNK rows' packed inputs, (kmax + 1) / 2 words each */
#endif
} SsmObject;

/* The step (es_ssm_run.h) for one instruction set: es_ssm_run_<isa> (-1 adopted, else the first
   stream with NaN/Inf logits) and the chunks of 16 and of 8 streams it runs through
   es_ssm_lanes16_<isa> and es_ssm_lanes8_<isa> (the first of them with NaN/Inf logits, or -1).
   The baseline's (base) always; with ES_HAVE_CLONES x86-64-v4's and -v3's too, a step picked
   once at load as gcc's target_clones picks (es_ssm_step.h). */
#if ES_S_LANES && ES_S_HAVE16
#define ES_SSM_LANES16_DECL(isa) ES_HIDDEN int es_ssm_lanes16_##isa(SsmObject *s, int r0, int nch, int cur, int nxt);
#else
#define ES_SSM_LANES16_DECL(isa)
#endif
#if ES_S_LANES
#define ES_SSM_LANES8_DECL(isa) ES_HIDDEN int es_ssm_lanes8_##isa(SsmObject *s, int r0, int nch, int cur, int nxt);
#else
#define ES_SSM_LANES8_DECL(isa)
#endif
#define ES_SSM_DECL(isa)                                                                          \
  ES_HIDDEN int es_ssm_run_##isa(SsmObject *s);                                                   \
  ES_SSM_LANES16_DECL(isa)                                                                        \
  ES_SSM_LANES8_DECL(isa)
ES_SSM_DECL(base)
#if ES_HAVE_CLONES
ES_SSM_DECL(v4)
ES_SSM_DECL(v3)
#endif

#if ES_S_LANES && ES_HAVE_AVX2I
/* the gate and the decay read by output code (es_ssm_avx2.h), which the step calls by name */
ES_HIDDEN void es_ssm_lgate_tab_avx2(const es_s_v8 *r, const float *skip, const es_s_v8 *v, const float *tab,
                                     const es_s_v8 *g, int n, es_s_v8 *out);
ES_HIDDEN void es_ssm_lselective_tab_avx2(const float *tab, const es_s_v8 *d, const es_s_v8 *s, const es_s_v8 *x,
                                          int n, es_s_v8 *out);
#if ES_S_HAVE16
ES_HIDDEN void es_ssm_lgate_tab_avx512(const es_s_v16 *r, const float *skip, const es_s_v16 *v, const float *tab,
                                       const es_s_v16 *g, int n, es_s_v16 *out);
ES_HIDDEN void es_ssm_lselective_tab_avx512(const float *tab, const es_s_v16 *d, const es_s_v16 *s,
                                            const es_s_v16 *x, int n, es_s_v16 *out);
#endif
#endif

#endif /* ES_SSM_OBJECT_H */
