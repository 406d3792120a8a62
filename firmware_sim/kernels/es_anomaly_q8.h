/* Anomaly scoring and the baseline a device learns, in integer arithmetic, for firmware:
   fixed-point readings and the step's Q12 forecasts in, anomaly events out.

   firmware_sim.intanomaly is this arithmetic in numpy, operation for operation; the two agree
   bit for bit (tests run the emitted C on the host). edgeseq.runtime.anomaly is the same method
   in float: the two differ by the roundings below (the score in 1/256 nat, exp(-v) in 1/16 steps
   of v), so their levels differ slightly and events may differ near the threshold.

     z (Q12) = ((clamp(x - mean_fx, +-dmax) >> pre) * mult) >> post     (64 standard deviations at most)
     per channel: d = (z - mu) >> 4 (Q8); v = clamp(logvar, +-8) (Q12); u = (v + 8 + 1/32) in 1/16 steps;
       term (Q8) = d^2 / 256 * exp(-v) (es_anom_expnv[u], Q16), saturated at 256 nats
     e (Q8) = sum (v / 16 + term) / (2 F)        the Gaussian surprise of the reading, less its constant
     s (Q8) = e at the first scored reading, else s + (alpha_q10 (e - s) + 512) >> 10
     learning (n < learn): Welford, mean in Q16: mean += (s - mean) / (n + 1); m2 += (s - mean_old)(s - mean)
       (Q16); then var = m2 / (learn - 1) (Q16)
     after: candidate when s - mean > 0 and (s - mean)^2 >= sigmas^2 var; a reading that is no candidate
       and in no event moves mean and var towards it by 1 / 2^adapt_shift, rounded (adapt_shift < 0: frozen)
     events: es_dec_step (es_decide_q15.h) on two classes, normal (background) and anomaly, unsmoothed.

   The baseline's sums are 64-bit (int64_t): on a Cortex-M0+ the compiler's helpers multiply them.
   Division: one per reading for e, one per reading while learning. Right shifts of negative
   values are assumed to be arithmetic, as gcc, clang and armcc do. */

#ifndef ES_ANOMALY_Q8_H
#define ES_ANOMALY_Q8_H

#include <stdint.h>
#include "es_decide_q15.h"

#define ES_ANOM_IN_LIMIT 1073741823
#define ES_ANOM_Z_MAX 262144            /* 64 in Q12 */
#define ES_ANOM_V_MAX 32768             /* 8 in Q12 */
#define ES_ANOM_E_MAX 1048576           /* 4096 nats in Q8 */
#define ES_ANOM_VAR_MAX ((int64_t)1 << 40)
#define ES_ANOM_TERM_MAX 65535u

typedef struct {
  int32_t features, alpha_q10, learn, warm, adapt_shift, sig2_q8;
  const int32_t *mean_fx, *dmax, *pre, *mult, *post;   /* [features] */
  const uint32_t *expnv_q16, *lim;                     /* [257] */
  es_dec_params dec;                                   /* two classes: normal, anomaly */
} es_anom_params;

typedef struct {
  int32_t *mu, *logvar;                 /* [features] Q12: the forecast for the next reading */
  int32_t seen, s, n, mean;             /* readings; the smoothed score (Q8); learnt; its mean (Q16) */
  int64_t var;                          /* m2 while learning, then the variance (Q16) */
  int32_t dec_s[2];
  es_dec_state dec;
} es_anom_state;

static inline void es_anom_reset(const es_anom_params *a, es_anom_state *st) {
  int32_t f;
  for (f = 0; f < a->features; f++) st->mu[f] = 0, st->logvar[f] = 0;
  st->seen = st->s = st->n = st->mean = 0;
  st->var = 0;
  st->dec_s[0] = st->dec_s[1] = 0;
  st->dec.s = st->dec_s;
  st->dec.started = 0, st->dec.run_cls = -1, st->dec.run_len = 0, st->dec.active = -1, st->dec.cool = 0;
  st->dec.gone = 0, st->dec.ring = 0, st->dec.sum = 0, st->dec.head = 0, st->dec.n = 0;
}

static inline int32_t es_anom_clamp(int32_t v, int32_t lim) { return v > lim ? lim : v < -lim ? -lim : v; }

/* One reading: x the fixed-point reading, out_q12 [2 features] the step's forecasts after it.
   Returns the events that fired (0, 1 or 2), as es_dec_step; *cand the candidate (0 or 1). */
static inline int es_anom_step(const es_anom_params *a, es_anom_state *st, const int32_t *x, const int32_t *out_q12,
                               int32_t *cand, int32_t *ended, int32_t *started, int32_t *run) {
  int32_t f, c = 0, logits[2], p[2];
  int32_t warm = a->warm > 1 ? a->warm : 1;
  if (st->seen >= warm) {
    int32_t acc = 0, e, learning;
    for (f = 0; f < a->features; f++) {
      int32_t xv = es_anom_clamp(x[f], ES_ANOM_IN_LIMIT);
      int32_t d = es_anom_clamp(xv - a->mean_fx[f], a->dmax[f]);
      int32_t z = es_anom_clamp(((d >> a->pre[f]) * a->mult[f]) >> a->post[f], ES_ANOM_Z_MAX);
      int32_t diff = (z - es_anom_clamp(st->mu[f], ES_ANOM_Z_MAX)) >> 4;
      int32_t v = es_anom_clamp(st->logvar[f], ES_ANOM_V_MAX);
      uint32_t u = (uint32_t)(v + ES_ANOM_V_MAX + 128) >> 8;
      uint32_t sq = ((uint32_t)(diff * diff)) >> 8;
      uint32_t term = sq > a->lim[u] ? ES_ANOM_TERM_MAX : (sq * a->expnv_q16[u]) >> 16;
      acc += (v >> 4) + (int32_t)term;
    }
    e = es_anom_clamp(acc / (2 * a->features), ES_ANOM_E_MAX);
    st->s = st->seen == warm ? e
          : st->s + ((a->alpha_q10 * es_anom_clamp(e - st->s, 2 * ES_ANOM_E_MAX - 1) + 512) >> 10);
    learning = st->n < a->learn;
    if (learning) {
      int32_t n1 = st->n + 1, s16 = st->s * 256, d16 = s16 - st->mean;
      st->mean += d16 / n1;
      st->var += (int64_t)(d16 >> 8) * (int64_t)((s16 - st->mean) >> 8);
      st->n = n1;
      if (n1 == a->learn) {
        st->var = st->var > 0 ? st->var / (a->learn - 1) : 0;
        if (st->var > ES_ANOM_VAR_MAX) st->var = ES_ANOM_VAR_MAX;
      }
    } else {
      int32_t d16 = st->s * 256 - st->mean;
      int64_t d2 = ((int64_t)d16 * (int64_t)d16) >> 16;
      c = d16 > 0 && d2 >= (((int64_t)a->sig2_q8 * st->var) >> 8);
      if (!c && st->dec.active < 0 && a->adapt_shift >= 0) {
        int32_t k = a->adapt_shift, r = k > 0 ? (int32_t)1 << (k - 1) : 0;
        st->mean += (d16 + r) >> k;
        st->var += (d2 - st->var + r) >> k;
        if (st->var > ES_ANOM_VAR_MAX) st->var = ES_ANOM_VAR_MAX;
        if (st->var < 0) st->var = 0;
      }
    }
  }
  for (f = 0; f < a->features; f++) st->mu[f] = out_q12[f], st->logvar[f] = out_q12[a->features + f];
  if (st->seen < ES_DEC_COUNT_MAX) st->seen++;
  logits[0] = c ? 0 : 65536;
  logits[1] = c ? 65536 : 0;
  *cand = c;
  return es_dec_step(&a->dec, &st->dec, logits, p, ended, started, run);
}

#endif
