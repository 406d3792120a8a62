/* The decision layer in integer arithmetic, for firmware: Q12 logits in, events out.

   firmware_sim.intdecide is this arithmetic in numpy, operation for operation; the two agree
   bit for bit (tests run the emitted C on the host and on emulated Cortex-M cores).

     probabilities, Q15: d_c = max - l_c (Q12); u = d_c >> 8 (1/16 units); e_c = es_dec_exp[u]
       (round(32768 exp(-u / 16)), 0 past the table); inv = 2^30 / sum e; p_c = (e_c inv) >> 15
     smoothing, Q15: an EMA, s = p at the first reading, else s = s + ((alpha (p - s)) >> 15)
       (alpha_q15 = 32768: no smoothing); or a moving mean (window > 0): the last window
       readings' p in a ring, their sum kept per class, s = sum / n (n: readings in the ring)
     candidate: the first class with the largest s, if s >= threshold_q15 (32769 for a
       background class: never), else -1
     run, release, start and refractory: as edgeseq.runtime.decision (counts saturate at 2^30)

   No float, no 64-bit arithmetic; one division per reading (a moving mean: one per class too). Arithmetic right shifts of
   negative values are assumed to be arithmetic, as gcc, clang and armcc do. */

#ifndef ES_DECIDE_Q15_H
#define ES_DECIDE_Q15_H

#include <stdint.h>

#define ES_DEC_EXP_N 178          /* 32768 exp(-u/16) rounds to 0 from u = 178 */
#define ES_DEC_COUNT_MAX 1073741824

typedef struct {
  int32_t classes;
  int32_t alpha_q15;
  const int32_t *threshold_q15;   /* [classes] */
  const int32_t *min_duration;    /* [classes] */
  int32_t refractory, release;
  const uint16_t *exp_q15;        /* [ES_DEC_EXP_N] */
  int32_t window;                 /* a moving mean's readings (at most 65535); 0: the EMA */
} es_dec_params;

/* One stream's decision state: s [classes] Q15, then started, run_cls, run_len, active, cool, gone;
   for a moving mean, ring [window][classes] Q15, sum [classes], head (the ring's next slot) and n
   (readings in it); unused by the EMA. */
typedef struct {
  int32_t *s;
  int32_t started, run_cls, run_len, active, cool, gone;
  int32_t *ring, *sum;
  int32_t head, n;
} es_dec_state;

/* One reading. p: [classes] words of the caller's, left holding the Q15 probabilities.
   Returns the events that fired (0, 1 or 2); *ended and *started get the class of
   an event that ended or started (-1: none), *run the readings its class had been the candidate
   (a start's onset is that many readings back, this one included). */
static inline int es_dec_step(const es_dec_params *d, es_dec_state *st, const int32_t *logits_q12, int32_t *p,
                              int32_t *ended, int32_t *started, int32_t *run) {
  int32_t c, top = 0, cand, m = logits_q12[0], sum = 0, inv, start;
  int fired = 0;
  for (c = 1; c < d->classes; c++)
    if (logits_q12[c] > m) m = logits_q12[c];
  for (c = 0; c < d->classes; c++) {
    uint32_t u = ((uint32_t)m - (uint32_t)logits_q12[c]) >> 8;
    p[c] = u < ES_DEC_EXP_N ? (int32_t)d->exp_q15[u] : 0;
    sum += p[c];
  }
  inv = (int32_t)((uint32_t)1073741824u / (uint32_t)sum);
  if (d->window > 0) {
    int32_t *slot = st->ring + st->head * d->classes;
    if (st->n < d->window) st->n++;
    for (c = 0; c < d->classes; c++) {
      int32_t q = (int32_t)(((uint32_t)p[c] * (uint32_t)inv) >> 15);
      p[c] = q;
      st->sum[c] += q - slot[c];
      slot[c] = q;
      st->s[c] = st->sum[c] / st->n;
    }
    st->head = st->head + 1 == d->window ? 0 : st->head + 1;
  } else {
    for (c = 0; c < d->classes; c++) {
      int32_t q = (int32_t)(((uint32_t)p[c] * (uint32_t)inv) >> 15);
      p[c] = q;
      st->s[c] = st->started ? st->s[c] + ((d->alpha_q15 * (q - st->s[c])) >> 15) : q;
    }
  }
  st->started = 1;
  for (c = 1; c < d->classes; c++)
    if (st->s[c] > st->s[top]) top = c;
  cand = st->s[top] >= d->threshold_q15[top] ? top : -1;
  if (cand == st->run_cls) {
    if (st->run_len < ES_DEC_COUNT_MAX) st->run_len++;
  } else {
    st->run_len = cand >= 0 ? 1 : 0;
  }
  st->run_cls = cand;
  *ended = *started = -1;
  *run = 0;
  if (st->active >= 0) {
    st->gone = cand != st->active ? st->gone + 1 : 0;
    if (st->gone >= d->release) {
      *ended = st->active;
      st->active = -1, st->gone = 0;
      fired++;
    }
  } else {
    st->gone = 0;
  }
  start = cand >= 0 && st->active < 0 && st->run_len >= d->min_duration[cand] && st->cool == 0;
  st->cool = st->cool > 0 ? st->cool - 1 : 0;
  if (start) {
    st->active = cand;
    st->cool = d->refractory;
    *started = cand, *run = st->run_len;
    fired++;
  }
  return fired;
}

#endif
