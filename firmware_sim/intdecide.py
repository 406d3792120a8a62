"""The decision layer in integer arithmetic: what firmware runs on Q12 logits
(`firmware_sim/kernels/es_decide_q15.h`), in numpy, operation for operation, so the two agree
bit for bit.

The settings are the model's (`edgeseq.decision`, `edgeseq.runtime.decision.DecisionSpec`),
quantized: alpha and the thresholds to Q15 (round(x 32768); a background class's threshold is
32769, above any probability), counts as they are. Probabilities come from an integer softmax of
the Q12 logits: exp(-d) looked up in 1/16 steps of the logit difference d from the largest
(`EXP_Q15`), normalised with one division per reading. So the firmware's probabilities differ
from the float softmax by up to about 3% of a probability (the 1/16 step), and its events may
differ from the host's float decision layer near a threshold; `event_scores_int` measures them.
A moving mean keeps the window's Q15 probabilities in a ring and their sum per class:
s = sum // n, n the readings in the ring (at most the window).
"""

from __future__ import annotations

import numpy as np

from edgeseq.errors import UsageError
from edgeseq.runtime.decision import DecisionSpec, Event

EXP_N = 178
EXP_Q15 = np.round(32768 * np.exp(-np.arange(EXP_N) / 16.0)).astype(np.int64)
assert EXP_Q15[-1] > 0 and round(32768 * np.exp(-EXP_N / 16.0)) == 0
COUNT_MAX = 1 << 30
NEVER = 32769                  # a background class's threshold: above any Q15 probability


def params(spec: DecisionSpec) -> dict:
    """The integer constants of `spec`: alpha_q15, threshold_q15 [C], min_duration [C],
    refractory, release, window (a moving mean's readings; 0 for an EMA or none)."""
    labels = list(spec.labels)
    alpha = 32768 if spec.smoothing == "none" else int(round(spec.alpha * 32768))
    thr = [NEVER if x in spec.background else int(round(spec.threshold[x] * 32768)) for x in labels]
    mind = [0 if x in spec.background else int(spec.min_duration[x]) for x in labels]
    return {"alpha_q15": max(1, alpha), "threshold_q15": np.array(thr, np.int64),
            "min_duration": np.array(mind, np.int64), "refractory": int(spec.refractory),
            "release": int(spec.release), "window": int(spec.window) if spec.smoothing == "mean" else 0}


def probs_q15(logits_q12: np.ndarray) -> np.ndarray:
    """The integer softmax: int64 [..., C] Q12 logits -> int64 [..., C] Q15 probabilities."""
    lg = np.asarray(logits_q12, np.int64)
    u = (lg.max(axis=-1, keepdims=True) - lg) >> 8
    e = np.where(u < EXP_N, EXP_Q15[np.minimum(u, EXP_N - 1)], 0)
    inv = (1 << 30) // e.sum(axis=-1, keepdims=True)
    return (e * inv) >> 15


class IntDecider:
    """`streams` streams of the integer decision layer for `spec` (one DecisionSpec).
    `update(logits_q12)` takes int [streams, C] Q12 logits and returns `Event`s as
    `edgeseq.runtime.decision.Decider.update` does (position: readings this decider has seen
    before this one; onset: position - run + 1)."""

    def __init__(self, spec: DecisionSpec, streams: int = 1):
        self.spec, self.labels, self.streams = spec, list(spec.labels), int(streams)
        q = params(spec)
        self.alpha, self.thr, self.mind = q["alpha_q15"], q["threshold_q15"], q["min_duration"]
        self.refractory, self.release, self.window = q["refractory"], q["release"], q["window"]
        S, C = self.streams, len(self.labels)
        self.s = np.zeros((S, C), np.int64)
        self.ring = np.zeros((S, self.window, C), np.int64)
        self.sum = np.zeros((S, C), np.int64)
        self.started = np.zeros(S, bool)
        self.run_cls = np.full(S, -1, np.int64)
        self.run_len = np.zeros(S, np.int64)
        self.active = np.full(S, -1, np.int64)
        self.cool = np.zeros(S, np.int64)
        self.gone = np.zeros(S, np.int64)
        self.seen = np.zeros(S, np.int64)
        self.onset = np.zeros(S, np.int64)
        self._rows = np.arange(S)

    def update(self, logits_q12: np.ndarray) -> list:
        p = probs_q15(logits_q12)
        if self.window:
            slot = self.seen % self.window
            self.sum += p - self.ring[self._rows, slot]
            self.ring[self._rows, slot] = p
            self.s = self.sum // np.minimum(self.seen + 1, self.window)[:, None]
        else:
            self.s = np.where(self.started[:, None], self.s + ((self.alpha * (p - self.s)) >> 15), p)
        self.started[:] = True
        top = self.s.argmax(axis=1)
        cand = np.where(self.s[self._rows, top] >= self.thr[top], top, -1)
        same = cand == self.run_cls
        self.run_len = np.where(same, np.minimum(self.run_len + 1, COUNT_MAX), np.where(cand >= 0, 1, 0))
        self.run_cls = cand
        pos = self.seen.copy()
        held = self.active >= 0
        self.gone = np.where(held & (cand != self.active), self.gone + 1, 0)
        ends = held & (self.gone >= self.release)
        events = [Event(int(i), "end", self.labels[int(self.active[i])], int(self.active[i]), int(pos[i]),
                        int(self.onset[i])) for i in np.flatnonzero(ends)]
        self.active[ends] = -1
        self.gone[ends] = 0
        starts = (cand >= 0) & (self.active < 0) & (self.run_len >= self.mind[np.maximum(cand, 0)]) & (self.cool == 0)
        self.cool = np.maximum(self.cool - 1, 0)
        for i in np.flatnonzero(starts):
            c = int(cand[i])
            self.active[i], self.cool[i] = c, self.refractory
            self.onset[i] = pos[i] - self.run_len[i] + 1
            events.append(Event(int(i), "start", self.labels[c], c, int(pos[i]), int(self.onset[i])))
        self.seen += 1
        return events


def event_scores_int(model, split, spec: DecisionSpec | None = None, orders: int = 20, seed: int = 0) -> dict:
    """Event metrics of the firmware's path for the static int8 model file `model`: its integer
    step (`firmware_sim.intsim`, bit-exact with the emitted C) and this integer decision layer,
    on `orders` never-reset streams of `split` (the split's channels in the model's order), scored
    as `edgeseq.runtime.calibrate.event_scores` scores the host's. `spec`: the settings (default:
    the model's own; UsageError where it has none)."""
    from edgeseq.runtime.calibrate import score_orders
    from edgeseq.runtime.evaluate import joined_streams
    from firmware_sim.intsim import from_onnx

    m = from_onnx(model)
    if spec is None:
        d = m.meta.get("decision")
        if d is None:
            raise UsageError(f"'{model}' has no decision settings; run `edgeseq calibrate` on it")
        spec = DecisionSpec.from_json(d, m.labels)
    X, Y, _ = joined_streams(split, orders, seed)
    dec = IntDecider(spec, orders)
    state = m.init_state(orders)
    open_at, dets = {}, [[] for _ in range(orders)]
    for t in range(X.shape[1]):
        logits, state = m.step(m.to_fixed(X[:, t]), state)
        for e in dec.update(logits):
            if e.kind == "start":
                open_at[e.stream] = (e.cls, e.position)
            else:
                c, a = open_at.pop(e.stream)
                dets[e.stream].append((c, a, e.position))
    for o, (c, a) in open_at.items():
        dets[o].append((c, a, X.shape[1]))
    labels = list(spec.labels)
    r = score_orders(dets, Y, labels, [labels.index(b) for b in spec.background], spec.rate_hz)
    r.update({"orders": orders, "readings_per_stream": int(X.shape[1]), "decision": spec.to_json(),
              "path": "firmware (integer step and decision layer, as the emitted C computes them)"})
    return r
