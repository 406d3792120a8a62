"""Anomaly detection on a never-reset stream: a forecast's surprise against a baseline the device
learns itself.

An anomaly model (`edgeseq train --task anomaly`) forecasts, after every reading, the next
reading's normalised value z = (x - mean) / std per channel as a Gaussian: means mu and
log-variances v (its 2F outputs). When the next reading comes, its score is the Gaussian
negative log-likelihood per channel, averaged,

    e_t = 1/F sum_f 0.5 (v_f + (z_f - mu_f)^2 exp(-v_f))        (v clamped to +-8)

and the `Watcher` smooths it with an exponential moving average s <- s + alpha (e - s).
Each stream then learns its own normal level without torch, from its own readings:

1. `warm` readings: the model's state fills; nothing is scored;
2. `learn` readings: the mean and standard deviation of s (Welford's running update, float64);
3. after that: the level is (s - mean) / std, in standard deviations of the stream's own normal
   score, and a reading whose level is at least `sigmas` is a candidate anomaly. A reading that
   is no candidate keeps the baseline up to date, so that it follows the slow drift of an
   endless stream (speed, load, temperature): mean and variance move towards it with weight
   1 / `adapt` (an exponential forgetting over about `adapt` readings; 0: frozen after learning).
   Candidates never move it, so an anomaly is not learnt as normal while it is flagged. The decision
   layer (`edgeseq.runtime.decision.Decider`, labels normal/anomaly, background normal) turns
   candidates into events: `min_duration` readings in a row start one, `release` readings
   without end it, `refractory` readings after a start start nothing else.

Everything is vectorised over streams (numpy), and every array of the state is carried by
snapshots, state files and the gateway's stored device state beside the model's.
`edgeseq calibrate` chooses `sigmas` and `min_duration` on normal recordings for a false-alarm
budget; they live in the model file's `edgeseq.task` metadata.
"""

from __future__ import annotations

import numpy as np

from edgeseq.errors import UsageError
from edgeseq.runtime.anomaly_watch import (  # noqa: F401  (importable from here, as always)
    BASELINE_NAMES, LABELS, LOGVAR_LIMIT, SCORE_BOUND, SETTINGS, STATE_NAMES, AnomalySpec, Watcher, _whole, scores)


def run(X: np.ndarray, lengths: np.ndarray, out: np.ndarray, mean, std, spec: AnomalySpec) -> dict:
    """The Watcher over recordings X float32 [S, T, F] (one stream each, valid up to lengths
    [S]) given the model's outputs after every reading, out float32 [S, T, 2F] (from torch,
    onnxruntime or the native step). Returns {"smoothed": float64 [S, T] (NaN where unscored),
    "level": float64 [S, T] (NaN while learning), "events": [Event, ...], "threshold": [S]}."""
    S, T, _ = X.shape
    w = Watcher(spec, mean, std, S)
    smoothed = np.full((S, T), np.nan)
    level = np.full((S, T), np.nan)
    events = []
    for t in range(T):
        live = t < np.asarray(lengths)
        ev = w.update(X[:, t], out[:, t])
        events += [e for e in ev if live[e.stream]]
        scored = live & (w.a_seen > max(spec.warm, 1))
        smoothed[scored, t] = w.a_score[scored]
        level[live, t] = w.level[live]
    return {"smoothed": smoothed, "level": level, "events": events, "threshold": w.threshold}


def binary(dataset):
    """`dataset` (an edgeseq Dataset) with per-reading labels 0 (normal), 1 (anomaly) and -1 (past a
    recording's end), and labels ["normal", "anomaly"]: the normal label is the one named
    "normal" (any case) where there is one, else the most frequent label of the training split's
    readings (recordings of normal running); every other label is an anomaly. Returns (the new
    Dataset, the normal label's name, readings of the training split labelled otherwise)."""
    from dataclasses import replace

    from edgeseq.data import Split
    names = [str(x).lower() for x in dataset.labels]
    tr = dataset.train
    if "normal" in names:
        k = names.index("normal")
    else:
        valid = tr.Y[tr.Y >= 0]
        k = int(np.bincount(valid, minlength=len(names)).argmax()) if valid.size else 0

    def conv(sp):
        Y = np.where(sp.Y < 0, -1, (sp.Y != k).astype(np.int64))
        return Split(sp.X, Y[np.arange(len(sp)), np.maximum(np.asarray(sp.lengths) - 1, 0)], sp.lengths, Y, sp.groups)
    other = int(((tr.Y >= 0) & (tr.Y != k)).sum())
    return replace(dataset, train=conv(tr), test=conv(dataset.test), labels=["normal", "anomaly"]), \
        str(dataset.labels[k]), other


def spans(y: np.ndarray) -> list:
    """[(first, last)] of each run of 1s in labels y [T] (last inclusive)."""
    d = np.diff(np.concatenate([[0], (np.asarray(y) == 1).astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(d == 1).tolist(), (np.flatnonzero(d == -1) - 1).tolist()))


def figures(Y: np.ndarray, lengths: np.ndarray, result: dict, spec: AnomalySpec, rate_hz: float | None) -> dict:
    """Anomaly figures of `run`'s result against per-reading labels Y [S, T] (1 anomaly, 0
    normal, -1 past the length):

    - top_inside: over streams with exactly one labelled anomaly, the share whose highest
      smoothed score (after the warm-up) lies inside it (first to last labelled reading; None
      where no stream has exactly one);
    - ucr_score: the same share by the UCR anomaly archive's protocol, where the highest score
      may lie up to the anomaly's own length w before its first or after its last reading
      (t_s - w <= t* <= t_e + w; Wu & Keogh, "Current time series anomaly detection benchmarks
      are flawed", IEEE TKDE 2023, as dtaianomaly's UCRScore computes it without a tolerance):
      a smoothed score peaks a few readings after the reading that raised it;
    - detected / anomalies: labelled anomalies (runs of 1s) with an event that starts from
      their first reading up to `min_duration` readings past their last; delay_median /
      delay_p90: readings from an anomaly's first reading to that start;
    - false_alarms: events that start elsewhere; normal_readings: readings scored against a
      learnt baseline and labelled normal; false_alarms_per_hour of those (per 1,000 readings
      where the rate is unknown: false_alarms_per_1000)."""
    S = len(Y)
    inside, ucr, delays, false, total = [], [], [], 0, 0
    runs = {}
    for i in range(S):
        r = spans(Y[i, :lengths[i]])
        runs[i] = r
        total += len(r)
        s = result["smoothed"][i, :lengths[i]]
        if len(r) == 1 and np.isfinite(s).any():
            k = int(np.nanargmax(s))
            (a, b), w = r[0], r[0][1] - r[0][0] + 1
            inside.append(a <= k <= b)
            ucr.append(a - w <= k <= b + w)
    found = set()
    for e in result["events"]:
        if e.kind != "start":
            continue
        hit = next((j for j, (a, b) in enumerate(runs.get(e.stream, ())) if a <= e.position <= b + spec.min_duration),
                   None)
        if hit is None:
            false += 1
        elif (e.stream, hit) not in found:
            found.add((e.stream, hit))
            delays.append(e.position - runs[e.stream][hit][0])
    learnt = np.isfinite(result["level"])
    normal = int((learnt & (Y == 0)).sum())
    out = {"streams": S, "anomalies": total, "top_inside": float(np.mean(inside)) if inside else None,
           "ucr_score": float(np.mean(ucr)) if ucr else None,
           "detected": len(found), "false_alarms": false, "normal_readings": normal,
           "delay_median": float(np.median(delays)) if delays else None,
           "delay_p90": float(np.percentile(delays, 90)) if delays else None}
    if rate_hz:
        hours = normal / rate_hz / 3600
        out["normal_hours"] = round(hours, 4)
        out["false_alarms_per_hour"] = false / hours if hours else None
    else:
        out["false_alarms_per_1000"] = 1000 * false / normal if normal else None
    return out


def joined(split):
    """A split's recordings joined end to end in file order, one stream per group (a device or
    machine that never resets; one stream of all where the data names no groups): a Split."""
    from edgeseq.data import Split
    groups = [np.arange(len(split))] if split.groups is None else \
        [np.flatnonzero(split.groups == g) for g in dict.fromkeys(split.groups.tolist())]
    parts = [(np.concatenate([split.X[i, :split.lengths[i]] for i in rows]),
              np.concatenate([split.Y[i, :split.lengths[i]] for i in rows])) for rows in groups]
    T = max(len(x) for x, _ in parts)
    X = np.zeros((len(parts), T, split.X.shape[2]), np.float32)
    Y = np.full((len(parts), T), -1, np.int64)
    for k, (x, y) in enumerate(parts):
        X[k, :len(x)], Y[k, :len(y)] = x, y
    L = np.array([len(x) for x, _ in parts], np.int64)
    names = None if split.groups is None else np.array([split.groups[rows[0]] for rows in groups])
    return Split(X, Y[np.arange(len(parts)), L - 1], L, Y, names)


PROTOCOLS = ("per_recording", "never_reset")


def evaluate(model, split, backend: str | None = None, provider: str = "cpu", spec: AnomalySpec | None = None,
             protocols: tuple = PROTOCOLS) -> dict:
    """An anomaly model file run as deployed (`StreamSession`), scored by `figures` at the
    file's settings (or `spec`'s) on both protocols: "per_recording" (each recording its own stream from a
    fresh state, learning its baseline at its start) and "never_reset" (each group's recordings
    joined in order, one stream per device that learns its baseline once: `joined`); `protocols`
    names the ones to run (a split of one long recording per device needs one). Returns
    {protocol: figures, "backend", "settings", "recordings"}. ValueError for an unknown protocol."""
    if not protocols or set(protocols) - set(PROTOCOLS):
        raise ValueError(f"protocols must be some of {', '.join(PROTOCOLS)}, got {protocols!r}")
    out = {}
    for name in (p for p in PROTOCOLS if p in protocols):
        part = split if name == "per_recording" else joined(split)
        sess, outs = outputs(model, part, backend, provider)
        use = spec or AnomalySpec.from_json(sess.meta.task)
        norm = sess.meta.normalization
        L = np.asarray(part.lengths)
        out[name] = figures(part.Y, L, run(part.X, L, outs, norm["mean"], norm["std"], use), use, use.rate_hz)
    return {**out, "backend": sess.backend, "settings": use.to_json(), "recordings": len(split)}


def hold_out(split) -> tuple:
    """(training rows, validation rows) of a forecast model's recordings: the last recording of
    each group where the data names groups (a group with one recording keeps it), else every
    tenth (the last one below 10); nothing held out below 4 recordings."""
    n = len(split)
    if n < 4:
        return np.arange(n), np.array([], np.int64)
    if split.groups is not None:
        val = [np.flatnonzero(split.groups == g)[-1] for g in dict.fromkeys(split.groups.tolist())
               if (split.groups == g).sum() > 1]
        val = np.array(val, np.int64)
    else:
        val = np.arange(n)[9::10] if n >= 10 else np.array([n - 1])
    return np.setdiff1d(np.arange(n), val), val


MIN_DURATIONS = (3, 5, 10, 20, 50)      # calibrate's table
SIGMA_FLOOR = 4.0                       # calibrate never sets a threshold below this many standard deviations:
                                        # a model scores the normal data it trained on lower than new normal data
                                        # (docs/anomaly.md: chosen on the vibration set, where 3 gave false alarms)
BLOCK = 250                             # readings per block whose maximum calibrate fits (a last part of at
                                        # least half a block counts as one), fewer where that leaves under
MIN_BLOCKS = 10                         # this many blocks, but never under
MIN_BLOCK = 50                          # readings (fewer blocks than MIN_BLOCKS then: the fit is said to be weak)
EULER_GAMMA = 0.5772156649


def outputs(model, split, backend: str | None = None, provider: str = "cpu") -> tuple:
    """(session, outputs float32 [S, T, 2F]): `model` run as deployed over every recording of
    `split`, each its own stream (a finished recording repeats its last reading)."""
    from edgeseq.runtime.session import StreamSession
    sess = StreamSession(model, streams=len(split), provider=provider, backend=backend, decision=False)
    if sess.meta.kind != "anomaly":
        raise UsageError(f"'{model}' is not an anomaly model (train one with `edgeseq train --task anomaly`)")
    S, T, F = split.X.shape
    L = np.asarray(split.lengths)
    outs = np.zeros((S, T, 2 * F), np.float32)
    for t in range(T):
        sess.push(split.X[np.arange(S), np.minimum(t, L - 1)])
        outs[:, t] = sess._outputs()
    return sess, outs


def sustained(level: np.ndarray, d: int) -> np.ndarray:
    """float64 [S, T]: the lowest level over the last `d` readings (NaN-free input; -inf where
    fewer than d readings lie behind): a reading where a run of d candidates would end."""
    S, T = level.shape
    out = np.full((S, T), -np.inf)
    if T >= d:
        from numpy.lib.stride_tricks import sliding_window_view
        out[:, d - 1:] = sliding_window_view(level, d, axis=1).min(-1)
    return out


def gumbel_threshold(maxima: np.ndarray, block_hours: float, budget: float) -> tuple:
    """(threshold, (mu, beta)): the level whose exceedance rate is `budget` per hour under a
    Gumbel law fitted by moments to per-block maxima (each block `block_hours` long): the
    block-maxima method of extreme-value statistics (Coles, An Introduction to Statistical
    Modeling of Extreme Values, 2001, ch. 3)."""
    beta = max(float(np.std(maxima, ddof=1)) * np.sqrt(6) / np.pi, 1e-6)
    mu = float(np.mean(maxima)) - EULER_GAMMA * beta
    p = min(max(budget * block_hours, 1e-12), 0.5)            # exceedances per block
    return mu - beta * np.log(-np.log1p(-p)), (mu, beta)


def calibrate(model, split, rate_hz: float | None, budget: float, backend: str | None = None,
              min_duration: int | None = None) -> dict:
    """Choose `sigmas` for an anomaly model on normal recordings (`split`; readings labelled
    other than 0 are left out), for a false-alarm budget per hour (per 1,000 readings where
    the rate is unknown). The recordings run as devices run them: each group's joined in order
    into one never-reset stream (`joined`) that learns its baseline once, at its start.

    The levels come from the file's own settings (warm-up, learning phase, EMA). For each
    minimum duration d, a false alarm needs d candidates in a row, so what matters is the
    sustained level (the lowest of d readings in a row); each recording's highest sustained
    level in each block of BLOCK scored readings is one block maximum, a Gumbel law is fitted to them and the threshold is set where
    its exceedance rate meets the budget (`gumbel_threshold`; at least SIGMA_FLOOR). A short
    stretch of normal data cannot show a low rate directly; this extrapolates it (the figure
    is modelled, and stated so). `min_duration` None keeps the file's. Returns {"chosen":
    AnomalySpec, "table": [per d: threshold, observed false alarms at it, Gumbel fit], ...}.
    Raises UsageError where fewer than 2 blocks of readings are scored."""
    split = joined(split)                  # as devices run: a group's recordings one never-reset stream
    sess, outs = outputs(model, split, backend)
    base = AnomalySpec.from_json(sess.meta.task)
    d_chosen = base.min_duration if min_duration is None else _whole("min_duration", min_duration, 1)
    norm = sess.meta.normalization
    res = run(split.X, split.lengths, outs, norm["mean"], norm["std"], base)
    level = res["level"]
    normal = np.isfinite(level) & (split.Y == 0)
    n = int(normal.sum())
    scored = normal.any(1)
    lv = np.where(normal, level, -np.inf)
    size = int(max(MIN_BLOCK, min(BLOCK, n // MIN_BLOCKS)))
    blocks = []                                             # (recording, first, last + 1) of each block
    for i in np.flatnonzero(scored):
        idx = np.flatnonzero(normal[i])
        for k in range(0, len(idx), size):
            part = idx[k:k + size]
            if len(part) * 2 >= size:
                blocks.append((i, part[0], part[-1] + 1))
    if len(blocks) < 2:
        raise UsageError(f"only {n:,} readings of these normal recordings are scored (each stream learns over its "
                         f"first {base.warm + base.learn} readings), fewer than 2 blocks of {size}; give more or "
                         "longer normal recordings")
    block_hours = size / rate_hz / 3600 if rate_hz else size / 1000
    table = []
    for d in sorted(set(MIN_DURATIONS) | {d_chosen}):
        held = sustained(lv, d)
        maxima = np.array([held[i, a:b].max() for i, a, b in blocks])
        maxima = maxima[np.isfinite(maxima)]
        if len(maxima) < 2:
            continue
        thr, (mu, beta) = gumbel_threshold(maxima, block_hours, budget)
        thr = max(SIGMA_FLOOR, float(np.ceil(thr * 10) / 10))
        observed = int((np.diff((held >= thr).astype(np.int8), axis=1) == 1).sum())
        table.append({"min_duration": d, "sigmas": thr, "gumbel_mu": mu, "gumbel_beta": beta,
                      "highest": float(maxima.max()), "observed_false_alarms": observed})
    row = next((r for r in table if r["min_duration"] == d_chosen), None)
    if row is None:
        raise UsageError(f"no recording has {d_chosen} scored readings in a row; give longer normal recordings")
    hours = n / rate_hz / 3600 if rate_hz else None
    cal = {"method": f"Gumbel fit to the highest sustained level of each block of {size} readings (block maxima)",
           "normal_readings": n, "hours": hours, "recordings": int(scored.sum()), "blocks": len(blocks),
           "block_readings": size, "weak_fit": len(blocks) < MIN_BLOCKS,
           "budget": budget,
           "per": "hour" if rate_hz else "1000 readings", "observed_false_alarms": row["observed_false_alarms"],
           "highest": row["highest"]}
    chosen = AnomalySpec.from_json({**base.to_json(), "sigmas": row["sigmas"], "min_duration": d_chosen,
                                    "rate_hz": rate_hz, "calibration": cal})
    return {"chosen": chosen, "table": table, **cal}
