/* The decision layer's step in C: probabilities in, events out, per stream.

   The arithmetic of edgeseq.runtime.decision.Decider.update, operation for operation, for EMA
   smoothing (kind ES_DECIDE_EMA), a moving mean (ES_DECIDE_MEAN) or none (ES_DECIDE_NONE), in
   float32 without fused multiply-adds, so it gives the Python step's events and state bit for bit:

     smooth:  EMA: s = p at a stream's first reading, else s = s + alpha * (p - s);
              mean: p into slot seen % window of the stream's ring (window x classes, its
              `windows` entry; `window` the ring's rows, the streams' largest), then s = the
              ring's rows summed in order (0 .. window - 1, unfilled rows 0) / min(seen + 1, its window)
     cand:    the first class with the largest s, if s[top] >= threshold[top] (+inf for a
              background class), else -1
     run:     run_len = run_len + 1 while cand stays, 1 when a class takes over, 0 for none
     end:     an active event whose class is not cand for `release` readings in a row ends
     start:   cand >= 0, no active event, run_len >= min_duration[cand], cool == 0: starts,
              onset = position - run_len + 1
     cool:    max(cool - 1, 0) after the start test, then refractory where one started (a
              start at reading k blocks readings k+1 .. k+refractory)

   Every array is the caller's (the host extension binds numpy arrays the Python Decider owns,
   so snapshots and state files see the same bytes); nothing is allocated. `out` gets four
   int64 per stream for this reading: the class that ended, the class that started (-1: none)
   and their onsets; es_decide returns how many events fired. */

#ifndef ES_DECIDE_H
#define ES_DECIDE_H

#include <stdint.h>

#define ES_DECIDE_EMA 0
#define ES_DECIDE_MEAN 1
#define ES_DECIDE_NONE 2

typedef struct {
  int64_t streams, classes;
  int kind;
  const float *alpha;            /* [streams] */
  const float *threshold;        /* [streams * classes] */
  const int64_t *min_duration;   /* [streams * classes] */
  const int64_t *refractory;     /* [streams] */
  const int64_t *release;        /* [streams] */
  float *smooth;                 /* [streams * classes] */
  int64_t *seen, *run_cls, *run_len, *active, *onset, *cool, *gone;   /* [streams] each */
  int64_t *out;                  /* [streams * 4] */
  const int64_t *windows;        /* [streams]: each stream's moving-mean window (ES_DECIDE_MEAN) */
  float *ring;                   /* [streams * window * classes]: the last readings' probabilities (ES_DECIDE_MEAN) */
  int64_t window;                /* the ring's rows per stream (0 for the other kinds) */
} es_decision;

#if defined(__clang__)
#define ES_NO_CONTRACT
#elif defined(__GNUC__)
#define ES_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define ES_NO_CONTRACT
#endif

static ES_NO_CONTRACT int64_t es_decide(const es_decision *d, const float *probs) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  int64_t i, c, fired = 0;
  const int64_t C = d->classes;
  for (i = 0; i < d->streams; i++) {
    const float *p = probs + i * C;
    float *s = d->smooth + i * C;
    const float *thr = d->threshold + i * C;
    int64_t top = 0, cand, pos, *o = d->out + i * 4;
    int start;
    if (d->kind == ES_DECIDE_EMA && d->seen[i] != 0) {
      const float a = d->alpha[i];
      for (c = 0; c < C; c++) {
        float diff = p[c] - s[c];
        float step = a * diff;
        s[c] = s[c] + step;
      }
    } else if (d->kind == ES_DECIDE_MEAN) {
      const int64_t W = d->window, wi = d->windows[i];
      float *r = d->ring + i * W * C;
      const int64_t slot = d->seen[i] % wi, n = d->seen[i] + 1 < wi ? d->seen[i] + 1 : wi;
      int64_t w;
      for (c = 0; c < C; c++) r[slot * C + c] = p[c];
      for (c = 0; c < C; c++) {
        float acc = r[c];
        for (w = 1; w < W; w++) acc = acc + r[w * C + c];
        s[c] = acc / (float)n;
      }
    } else {
      for (c = 0; c < C; c++) s[c] = p[c];
    }
    for (c = 1; c < C; c++)
      if (s[c] > s[top]) top = c;
    cand = s[top] >= thr[top] ? top : -1;
    d->run_len[i] = cand == d->run_cls[i] ? d->run_len[i] + 1 : (cand >= 0 ? 1 : 0);
    d->run_cls[i] = cand;
    pos = d->seen[i];
    o[0] = o[1] = -1;
    o[2] = o[3] = 0;
    if (d->active[i] >= 0) {
      d->gone[i] = cand != d->active[i] ? d->gone[i] + 1 : 0;
      if (d->gone[i] >= d->release[i]) {
        o[0] = d->active[i], o[2] = d->onset[i];
        d->active[i] = -1, d->gone[i] = 0;
        fired++;
      }
    } else {
      d->gone[i] = 0;
    }
    start = cand >= 0 && d->active[i] < 0 && d->run_len[i] >= d->min_duration[i * C + cand] && d->cool[i] == 0;
    d->cool[i] = d->cool[i] > 0 ? d->cool[i] - 1 : 0;
    if (start) {
      d->active[i] = cand;
      d->onset[i] = pos - d->run_len[i] + 1;
      d->cool[i] = d->refractory[i];
      o[1] = cand, o[3] = d->onset[i];
      fired++;
    }
    d->seen[i] = pos + 1;
  }
  return fired;
}

#endif
