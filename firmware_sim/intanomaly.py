"""Anomaly scoring and the learnt baseline in integer arithmetic: what firmware runs on the
fixed-point readings and the step's Q12 forecasts (`firmware_sim/kernels/es_anomaly_q8.h`), in
numpy, operation for operation, so the two agree bit for bit.

The settings are the model's (`edgeseq.task`, `edgeseq.runtime.anomaly.AnomalySpec`),
quantized: alpha to Q10, sigmas^2 to Q8, `adapt` to the nearest power of two (a shift; 0:
frozen), the normalisation to a per-channel shift-multiply-shift from the reading's fixed point
to Q12. The score is kept in 1/256 nat and exp(-v) is looked up in 1/16 steps of the
log-variance v, so the firmware's levels differ slightly from the float `Watcher`'s and its
events may differ near the threshold; `firmware_events` measures them.
"""

from __future__ import annotations

import math

import numpy as np

from edgeseq.errors import UsageError
from edgeseq.runtime.anomaly import LABELS, AnomalySpec
from edgeseq.runtime.decision import DecisionSpec
from firmware_sim.intdecide import IntDecider

IN_LIMIT = (1 << 30) - 1
Z_MAX, V_MAX, E_MAX = 1 << 18, 1 << 15, 1 << 20
VAR_MAX = 1 << 40
TERM_MAX = 65535
COUNT_MAX = 1 << 30
MAX_FEATURES = 64
MAX_SIGMAS = 64.0
MAX_LEARN = 65536            # learning readings the firmware's 64-bit sum of squares holds without overflow
EXPNV_Q16 = np.round(65536 * np.exp(-(np.arange(257) / 16.0 - 8.0))).astype(np.int64)
LIM = (0xFFFFFFFF // EXPNV_Q16).astype(np.int64)


def _cdiv(a, b):
    """C's integer division (truncation toward zero), elementwise on int64."""
    a = np.asarray(a, np.int64)
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (np.asarray(b) < 0), -q, q)


def params(spec: AnomalySpec, mean, std, in_frac) -> dict:
    """The integer constants: features, alpha_q10, learn, warm, adapt_shift (-1: frozen),
    sig2_q8, and per channel mean_fx, dmax, pre, mult, post (z_q12 = ((d >> pre) mult) >> post for
    d = x - mean_fx clamped to +-dmax, 64 standard deviations). UsageError for settings the
    firmware cannot hold (more than MAX_FEATURES channels, sigmas above MAX_SIGMAS)."""
    mean, std = np.asarray(mean, np.float64), np.asarray(std, np.float64)
    frac = np.asarray(in_frac, np.int64)
    F = len(mean)
    if F > MAX_FEATURES:
        raise UsageError(f"the firmware's anomaly score takes at most {MAX_FEATURES} channels; this model has {F}")
    if spec.learn > MAX_LEARN:
        raise UsageError(f"the firmware's anomaly baseline learns over at most {MAX_LEARN:,} readings; this model's "
                         f"learns over {spec.learn:,}: set learn lower")
    if spec.sigmas > MAX_SIGMAS:
        raise UsageError(f"the firmware's anomaly threshold is at most {MAX_SIGMAS:g} standard deviations; "
                         f"this model's is {spec.sigmas:g}: calibrate it again")
    dmax, pre, mult, post = [], [], [], []
    for f in range(F):
        scale = 2.0 ** int(frac[f])
        dm = int(min(IN_LIMIT, math.floor(64 * std[f] * scale)))
        p = max(0, dm.bit_length() - 15)
        c = 4096.0 / (std[f] * scale) * 2.0 ** p          # Q12 per unit of d >> p
        r = 0
        while c * 2.0 ** (r + 1) < 65535 and r < 62:
            r += 1
        m = int(round(c * 2.0 ** r))
        while m > 65535:
            r -= 1
            m = int(round(c * 2.0 ** r))
        if r < 0:
            raise UsageError(f"channel {f}: its standard deviation is too small for the firmware's anomaly score")
        dmax.append(dm), pre.append(p), mult.append(m), post.append(r)
    adapt = spec.adapt
    shift = -1 if adapt == 0 else int(round(math.log2(adapt)))
    return {"features": F, "alpha_q10": max(1, int(round(spec.alpha * 1024))), "learn": spec.learn,
            "warm": spec.warm, "adapt_shift": shift, "sig2_q8": int(round(spec.sigmas ** 2 * 256)),
            "mean_fx": np.round(mean * np.exp2(frac)).astype(np.int64), "dmax": np.array(dmax, np.int64),
            "pre": np.array(pre, np.int64), "mult": np.array(mult, np.int64), "post": np.array(post, np.int64),
            "min_duration": spec.min_duration, "refractory": spec.refractory, "release": spec.release}


class IntWatcher:
    """`streams` streams of the integer anomaly layer. `update(x_fx, out_q12)`: int [streams, F]
    fixed-point readings and int [streams, 2F] Q12 forecasts; returns `Event`s (label "anomaly")
    as `edgeseq.runtime.anomaly.Watcher.update` does; `cand` then holds the candidates."""

    def __init__(self, q: dict, streams: int = 1):
        self.q, self.S, self.F = q, int(streams), q["features"]
        S, F = self.S, self.F
        self.mu = np.zeros((S, F), np.int64)
        self.logvar = np.zeros((S, F), np.int64)
        for k in ("seen", "s", "n", "mean", "var"):
            setattr(self, k, np.zeros(S, np.int64))
        self.cand = np.zeros(S, np.int64)
        # The events: the integer decision layer on two classes, unsmoothed, as es_anom_step calls es_dec_step.
        self.dec = IntDecider(DecisionSpec.make(LABELS, background=["normal"], smoothing="none", threshold=0.5,
                                                min_duration=q["min_duration"], refractory=q["refractory"],
                                                release=q["release"]), S)

    def update(self, x_fx, out_q12) -> list:
        q, F = self.q, self.F
        warm = max(q["warm"], 1)
        scored = self.seen >= warm
        x = np.clip(np.asarray(x_fx, np.int64), -IN_LIMIT, IN_LIMIT)
        d = np.clip(x - q["mean_fx"], -q["dmax"], q["dmax"])
        z = np.clip(((d >> q["pre"]) * q["mult"]) >> q["post"], -Z_MAX, Z_MAX)
        diff = (z - np.clip(self.mu, -Z_MAX, Z_MAX)) >> 4
        v = np.clip(self.logvar, -V_MAX, V_MAX)
        u = (v + V_MAX + 128) >> 8
        sq = (diff * diff) >> 8
        term = np.where(sq > LIM[u], TERM_MAX, (sq * EXPNV_Q16[u]) >> 16)
        acc = ((v >> 4) + term).sum(1)
        e = np.clip(_cdiv(acc, 2 * F), -E_MAX, E_MAX)
        first = scored & (self.seen == warm)
        step = self.s + ((q["alpha_q10"] * np.clip(e - self.s, -(2 * E_MAX - 1), 2 * E_MAX - 1) + 512) >> 10)
        self.s = np.where(first, e, np.where(scored, step, self.s))
        learning = scored & (self.n < q["learn"])
        learnt = scored & ~learning
        n1 = self.n + 1
        s16 = self.s * 256
        dl = s16 - self.mean
        mean_l = self.mean + _cdiv(dl, n1)
        var_l = self.var + (dl >> 8) * ((s16 - mean_l) >> 8)
        done = learning & (n1 == q["learn"])
        var_l = np.where(done, np.minimum(np.where(var_l > 0, var_l // max(q["learn"] - 1, 1), 0), VAR_MAX), var_l)
        dn = s16 - self.mean
        d2 = (dn * dn) >> 16
        cand = learnt & (dn > 0) & (d2 >= ((q["sig2_q8"] * self.var) >> 8))
        k = q["adapt_shift"]
        r = (1 << (k - 1)) if k > 0 else 0
        follow = learnt & ~cand & (self.dec.active < 0) & (k >= 0)
        mean_f = self.mean + ((dn + r) >> max(k, 0))
        var_f = np.clip(self.var + ((d2 - self.var + r) >> max(k, 0)), 0, VAR_MAX)
        self.mean = np.where(learning, mean_l, np.where(follow, mean_f, self.mean))
        self.var = np.where(learning, var_l, np.where(follow, var_f, self.var))
        self.n = np.where(learning, n1, self.n)
        out = np.asarray(out_q12, np.int64)
        self.mu, self.logvar = out[:, :F].copy(), out[:, F:2 * F].copy()
        self.seen = np.minimum(self.seen + 1, COUNT_MAX)
        self.cand = cand.astype(np.int64)
        return self.dec.update(np.where(cand[:, None], [[0, 65536]], [[65536, 0]]))


def model_params(m) -> dict:
    """The integer anomaly constants of an integer model `m` whose file is an anomaly model
    (`m.meta["task"]`); UsageError for another model, DataError for one with an input
    transform (the score reads the reading's affine normalisation; anomaly training gives none)."""
    task = (m.meta or {}).get("task")
    if not task or task.get("kind") != "anomaly":
        raise UsageError("not an anomaly model (train one with `edgeseq train --task anomaly`)")
    norm = m.meta["normalization"]
    if getattr(m, "asinh", None) is not None or (norm or {}).get("asinh_scale") is not None:
        from edgeseq.errors import DataError
        raise DataError("this anomaly model takes asinh(reading / scale) first, and the firmware's anomaly score "
                        "reads affinely normalised readings only; train it again with --set input_transform=none")
    return params(AnomalySpec.from_json(task), norm["mean"], norm["std"], m.in_frac)


def firmware_events(model, split) -> dict:
    """`edgeseq.runtime.anomaly.figures` of the firmware's path for the static int8 anomaly model
    file `model`: its integer step (bit-exact with the emitted C) and this integer layer, each
    recording of `split` its own stream."""
    from edgeseq.runtime.anomaly import figures
    from firmware_sim.intsim import from_onnx
    m = from_onnx(model)
    q = model_params(m)
    spec = AnomalySpec.from_json(m.meta["task"])
    S, T, _ = split.X.shape
    w = IntWatcher(q, S)
    state = m.init_state(S)
    L = np.asarray(split.lengths)
    events = []
    smoothed = np.full((S, T), np.nan)
    level = np.full((S, T), np.nan)
    for t in range(T):
        x = m.to_fixed(split.X[np.arange(S), np.minimum(t, L - 1)])
        out, state = m.step(x, state)
        live = t < L
        events += [e for e in w.update(x, out) if live[e.stream]]
        ok = live & (w.seen > max(spec.warm, 1))
        smoothed[ok, t] = w.s[ok]
        learnt = live & (w.n >= spec.learn)
        level[learnt, t] = 0.0
    return figures(split.Y, L, {"smoothed": smoothed, "level": level, "events": events}, spec, spec.rate_hz)
