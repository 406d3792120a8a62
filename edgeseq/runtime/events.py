"""Event-level scores of detections on a never-reset stream, against per-reading true labels.

The continuous activity-recognition metrics of Ward, Lukowicz & Gellersen 2011 ("Performance
metrics for activity recognition", ACM TIST 2(1)): a true event is a maximal run of readings of
one event class (`true_events`); a detection is a (class, start, end) interval a detector
reported. `score_events` matches the two per class and reports event precision / recall / F1,
Ward's event categories (deleted, fragmented, merged, correct; insertions, fragmenting,
merging), false alarms per hour and the delay from a true event's start to its first detection.

Readings are indices into the label array; every interval is [start, end), end exclusive.

    Y = np.array([0, 0, 1, 1, 1, 0, 0, 2, 2, 0])          # 0 is background
    true_events(Y, background=[0])                      # [(1, 2, 5), (2, 7, 9)]
    score_events([(1, 3, 6)], Y, ["rest", "walk", "run"], background=[0], rate_hz=50)
    # {"events": 2, "detections": 1, "precision": 1.0, "recall": 0.5, "deleted": 1, ...}

numpy only, so it runs wherever the runtime does.
"""

from __future__ import annotations

import heapq
import math
import numbers

import numpy as np

from edgeseq.errors import UsageError, printable, safe_text

UNLABELLED = -1      # a reading with no label: treated like background, never part of an event
P_DELAY = 90         # the delay percentile reported besides the median and the maximum
SECONDS_PER_HOUR = 3600


def true_events(Y, background) -> list[tuple[int, int, int]]:
    """(cls, start, end) of each true event of the label array `Y`, in stream order.

    Y: int array [L], the class id of each reading; -1 (unlabelled) is treated like background.
    background: iterable of class ids that are not events (e.g. the null class).

    An event is a maximal run of readings of one non-background class, `end` exclusive, in
    readings; two adjacent runs of the same class (two recordings of it joined end to end) are
    one event, as they are one run in `Y`. The runs are disjoint and sorted by start.
    Raises UsageError when `Y` is not a 1-d integer array or a background id is not an integer.
    Ward, Lukowicz & Gellersen 2011, section 3: events as the unit of continuous recognition.
    """
    Y = _labels_array(Y)
    bg = _background_ids(background)
    return [(int(c), int(s), int(e)) for c, s, e in zip(*_runs(Y, bg))]


def score_events(detected, Y, labels, background, rate_hz=None, tolerance=0) -> dict:
    """Event scores of the detections `detected` against the true labels `Y` (Ward et al. 2011).

    detected: iterable of (cls, start, end) integer triples, or an int array [D, 3]: a detected
        event of class `cls` over readings [start, end) (an event still open at the stream's end
        has end == L). Detections may overlap one another; each is scored on its own.
    Y: int array [L], the true class of each reading (-1: unlabelled, treated like background).
    labels: the class names, one per class id (len C, distinct).
    background: iterable of class ids that are not events; a detection must not be of one.
    rate_hz: readings per second (finite, > 0), or None: then the per-hour and per-second
        figures are None.
    tolerance: readings (finite, >= 0) a detection may start after a true event's end and still
        count for it.

    Overlap, the one rule every figure uses: a detection of class c overlaps a true event of
    class c when their intervals share a reading, or when the detection's start lies in
    [true.start, true.end + tolerance) (a detector that only fires once it has seen the whole
    activity). Detections and true events of different classes never overlap.

    Returns a dict of plain Python values (JSON-serialisable):
      "readings": L; "events": true events; "detections": detections;
      "found": true events some detection overlaps; "hits": detections that overlap a true event;
      "matched": pairs of one detection and one true event it overlaps, each used at most once
        (a fragmented event matches one of its detections, a merging detection one of its
        events; a largest such matching, by an earliest-deadline sweep over the true events);
      "precision" = matched / detections (None without detections), "recall" = matched / events
        (None without events), "f1": their harmonic mean, 0 when both are 0; a missing one
        counts as 0 unless both are missing (then None): one-to-one, so a second alert for one
        event counts against precision as any false alarm does. Over all event classes together;
      "per_class": {label: {"events", "detections", "precision", "recall", "f1"}} for every
        class not in `background`;
      Ward's categories, as counts. Of true events: "deleted" (no detection), "fragmented"
        (more than one), "merged" (a detection of it also overlaps another true event),
        "correct" (exactly one detection, not merged); "fragmented_and_merged" counts those
        both (Ward's FM), so deleted + fragmented + merged - fragmented_and_merged + correct
        == events. Of detections: "insertions" (overlaps no true event: a false alarm, also
        when it lies in another class's event), "fragmenting" (one of several detections of one
        true event), "merging" (overlaps more than one true event), "fragmenting_and_merging";
      "false_alarms": detections - matched (insertions, and the extra detections of fragmented
        and merged events: alerts that announce no new event); "hours": L / rate_hz / 3600;
        "false_alarms_per_hour": false alarms per hour of the whole stream;
        "false_alarms_per_hour_of_background": per hour of background and unlabelled readings
        (None when there are none);
      "delay_readings": {"median", "p90", "max"} over found true events of the start of the
        earliest-starting overlapping detection minus the true start, clipped at 0, in readings
        (median and p90 floats, linear interpolation; max an int); None when nothing was found.
        "delay_seconds": the same divided by rate_hz (None without a rate).
      "delay_median_with_missed": the median delay (readings) over every true event, a missed one
        counted as never found (infinitely late): None where half or more were missed (or there
        are no events), so a detector cannot look quick by missing its slow events.

    Raises UsageError (one line) for: `Y` not a 1-d integer array or empty, or holding a class
    id outside -1..C-1; `labels` empty or repeated; a background id outside 0..C-1; a detection
    that is not three integers, with start >= end, start < 0 or end > L, or of a class outside
    0..C-1 or a background class; rate_hz <= 0 or not finite; tolerance < 0 or not finite.
    Cost: O((L + D + E) log) with numpy per class; no detection x event loop.
    """
    Y = _labels_array(Y)
    L = len(Y)
    if L == 0:
        raise UsageError("Y has no readings; score a stream of at least one reading")
    labels = [str(x) for x in labels]
    C = len(labels)
    if C == 0:
        raise UsageError("labels is empty; give one name per class id")
    if len(set(labels)) != C:
        twice = next(x for x in labels if labels.count(x) > 1)
        raise UsageError(f"labels names '{printable(twice)}' twice; give each class a distinct name")
    lo, hi = int(Y.min()), int(Y.max())
    if lo < UNLABELLED or hi >= C:
        bad = lo if lo < UNLABELLED else hi
        raise UsageError(f"Y holds class id {bad}, outside -1..{C - 1} for {C} labels; "
                         "use -1 for unlabelled readings")
    bg = _background_ids(background)
    for b in sorted(bg):
        if not 0 <= b < C:
            raise UsageError(f"background class id {b} is outside 0..{C - 1} for {C} labels")
    rate = _rate(rate_hz)
    tol = _tolerance(tolerance)
    D = _detections_array(detected)
    _check_detections(D, L, C, bg, labels)

    t_cls, t_start, t_end = _runs(Y, bg)
    classes = [c for c in range(C) if c not in bg]
    tot = dict.fromkeys(("found", "hits", "matched", "deleted", "fragmented", "merged", "correct", "fragmented_and_merged",
                         "insertions", "fragmenting", "merging", "fragmenting_and_merging"), 0)
    per_class, delays = {}, []
    for c in classes:
        t = t_cls == c
        d = D[:, 0] == c
        m = _match_class(t_start[t], t_end[t], D[d, 1], D[d, 2], tol)
        for k in tot:
            tot[k] += m[k]
        delays.append(m["delays"])
        per_class[labels[c]] = {"events": int(t.sum()), "detections": int(d.sum()),
                                **_prf(m["matched"], int(d.sum()), m["matched"], int(t.sum()))}

    n_events, n_det = len(t_cls), len(D)
    delays = np.concatenate(delays) if delays else np.zeros(0, np.int64)
    delay = None
    if len(delays):
        delay = {"median": float(np.median(delays)), "p90": float(np.percentile(delays, P_DELAY)),
                 "max": int(delays.max())}
    with_missed = np.concatenate([delays.astype(np.float64), np.full(n_events - len(delays), np.inf)])
    with_missed = float(np.median(with_missed)) if n_events else math.inf
    bg_readings = int(np.isin(Y, sorted(bg | {UNLABELLED})).sum())
    hours = L / rate / SECONDS_PER_HOUR if rate is not None else None
    bg_hours = bg_readings / rate / SECONDS_PER_HOUR if rate is not None and bg_readings else None
    out = {"readings": L, "events": n_events, "detections": n_det, "found": tot["found"], "hits": tot["hits"],
           "matched": tot["matched"], **_prf(tot["matched"], n_det, tot["matched"], n_events), "per_class": per_class}
    out.update({k: tot[k] for k in ("deleted", "fragmented", "merged", "correct", "fragmented_and_merged",
                                    "insertions", "fragmenting", "merging", "fragmenting_and_merging")})
    out.update({
        "false_alarms": n_det - tot["matched"],
        "hours": hours,
        "false_alarms_per_hour": (n_det - tot["matched"]) / hours if hours is not None else None,
        "false_alarms_per_hour_of_background": (n_det - tot["matched"]) / bg_hours if bg_hours is not None else None,
        "delay_readings": delay,
        "delay_median_with_missed": with_missed if math.isfinite(with_missed) else None,
        "delay_seconds": ({"median": delay["median"] / rate, "p90": delay["p90"] / rate, "max": delay["max"] / rate}
                          if delay is not None and rate is not None else None),
    })
    return out


def _match_class(t_start, t_end, d_start, d_end, tol) -> dict:
    """Counts and delays for one class: true events [t_start, t_end) (disjoint, sorted) against
    detections [d_start, d_end) (any order)."""
    E, n = len(t_start), len(d_start)
    # The true events a detection overlaps are one run of indices [first, last): those ending after
    # start - tol (for a shared reading, those ending after start, a subset) up to those starting
    # before its end (which include every one starting at or before its start).
    first = np.searchsorted(t_end, d_start - tol, side="right")
    last = np.maximum(np.searchsorted(t_start, d_end, side="left"), first)
    covers = last - first                                       # true events each detection overlaps
    hit, merging = covers >= 1, covers >= 2

    def per_event(mask):         # how many of the masked detections overlap each true event
        step = np.bincount(first[mask], minlength=E + 1) - np.bincount(last[mask], minlength=E + 1)
        return np.cumsum(step)[:E]

    n_det = per_event(hit)
    merged = per_event(merging) >= 1
    fragmented = n_det >= 2
    frag_before = np.concatenate(([0], np.cumsum(fragmented)))
    fragmenting = hit & (frag_before[last] - frag_before[first] > 0)

    # Delay: the earliest-starting detection overlapping each event. In start order `first` never
    # decreases, so the detections with first <= j are a prefix; the earliest of them with
    # last > j is where the running maximum of `last` first passes j.
    order = np.argsort(d_start, kind="stable")
    reach = np.maximum.accumulate(last[order])
    j = np.arange(E)
    i = np.searchsorted(reach, j, side="right")
    found = i < np.searchsorted(first[order], j, side="right")          # the same events as n_det >= 1
    delays = np.maximum(d_start[order][i[found]] - t_start[found], 0)
    # One-to-one matching: sweep the true events in order; each takes, of the unused detections
    # overlapping it, the one whose run [first, last) ends first (earliest deadline: a largest
    # matching when every detection overlaps a run of consecutive events). Taking detections in
    # start order instead is not: a long one starting first would take an event a later short one
    # needs. `first` never decreases in start order, so the detections open at event t are a prefix.
    matched, k, ready = 0, 0, []
    d_first, d_last = first[order].tolist(), last[order].tolist()
    for t in range(E):
        while k < n and d_first[k] <= t:
            heapq.heappush(ready, d_last[k])
            k += 1
        while ready and ready[0] <= t:                          # ends before t: overlaps no event left
            heapq.heappop(ready)
        if ready:
            heapq.heappop(ready)
            matched += 1
    return {"found": int(found.sum()), "hits": int(hit.sum()), "matched": matched,
            "deleted": int((n_det == 0).sum()), "fragmented": int(fragmented.sum()), "merged": int(merged.sum()),
            "correct": int(((n_det == 1) & ~merged).sum()), "fragmented_and_merged": int((fragmented & merged).sum()),
            "insertions": int(n - hit.sum()), "fragmenting": int(fragmenting.sum()), "merging": int(merging.sum()),
            "fragmenting_and_merging": int((fragmenting & merging).sum()), "delays": delays.astype(np.int64)}


def _prf(hits: int, detections: int, found: int, events: int) -> dict:
    precision = hits / detections if detections else None
    recall = found / events if events else None
    if precision is None and recall is None:
        f1 = None
    else:
        p, r = precision or 0.0, recall or 0.0
        f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def _runs(Y: np.ndarray, bg: set) -> tuple:
    """(cls, start, end) int64 arrays of the maximal runs of non-background classes in `Y`."""
    if len(Y) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    edges = np.flatnonzero(Y[1:] != Y[:-1]) + 1
    start = np.concatenate(([0], edges)).astype(np.int64)
    end = np.concatenate((edges, [len(Y)])).astype(np.int64)
    cls = Y[start].astype(np.int64)
    keep = ~np.isin(cls, sorted(bg | {UNLABELLED}))
    return cls[keep], start[keep], end[keep]


def _labels_array(Y) -> np.ndarray:
    Y = np.asarray(Y)
    if Y.ndim != 1 or Y.dtype.kind not in "iu":
        raise UsageError(f"Y must be a 1-d integer array of class ids, got {Y.ndim}-d {Y.dtype}")
    return Y.astype(np.int64, copy=False)


def _background_ids(background) -> set:
    try:
        ids = list(background)
    except TypeError:
        raise UsageError("background must be an iterable of class ids, e.g. [0]") from None
    for b in ids:
        if isinstance(b, bool) or not isinstance(b, numbers.Integral):
            raise UsageError(f"background holds {safe_text(repr(b))}; give integer class ids")
    return {int(b) for b in ids}


def _rate(rate_hz):
    if rate_hz is None:
        return None
    if isinstance(rate_hz, bool) or not isinstance(rate_hz, numbers.Real) or not math.isfinite(rate_hz) \
            or rate_hz <= 0:
        raise UsageError(f"rate_hz must be a finite number of readings per second > 0, got {safe_text(repr(rate_hz))}")
    return float(rate_hz)


def _tolerance(tolerance):
    if isinstance(tolerance, bool) or not isinstance(tolerance, numbers.Real) or not math.isfinite(tolerance) \
            or tolerance < 0:
        raise UsageError(f"tolerance must be a finite number of readings >= 0, got {safe_text(repr(tolerance))}")
    return tolerance


def _detections_array(detected) -> np.ndarray:
    """An int64 array [D, 3] of (cls, start, end), or UsageError."""
    if not isinstance(detected, np.ndarray):
        try:
            detected = list(detected)
        except TypeError:
            raise UsageError("detected must be an iterable of (cls, start, end) triples") from None
        if not detected:
            return np.zeros((0, 3), np.int64)
    try:
        D = np.asarray(detected)
    except ValueError:
        raise UsageError("detected must hold (cls, start, end) triples of integers, one per detection") from None
    if D.size == 0:
        return np.zeros((0, 3), np.int64)
    if D.ndim != 2 or D.shape[1] != 3 or D.dtype.kind not in "iu":
        raise UsageError(f"detected must hold (cls, start, end) triples of integers, got a {D.ndim}-d {D.dtype} "
                         f"array of shape {list(D.shape)}")
    return D.astype(np.int64, copy=False)


def _check_detections(D: np.ndarray, L: int, C: int, bg: set, labels: list) -> None:
    checks = [
        (D[:, 1] >= D[:, 2], "has start >= end; a detection covers at least one reading"),
        (D[:, 1] < 0, "starts before reading 0"),
        (D[:, 2] > L, f"ends after the stream's end (L = {L}); an event still open at the end has end == L"),
        ((D[:, 0] < 0) | (D[:, 0] >= C), f"has a class id outside 0..{C - 1} for {C} labels"),
        (np.isin(D[:, 0], sorted(bg)), "is of a background class; detections are of event classes only"),
    ]
    for bad, why in checks:
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            c, s, e = (int(v) for v in D[k])
            name = f" '{printable(labels[c])}'" if 0 <= c < C else ""
            raise UsageError(f"detection {k} (cls {c}{name}, start {s}, end {e}) {why}")
