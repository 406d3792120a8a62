"""Choosing a model's decision settings for a false-alarm budget, and scoring its events.

Events are scored on never-reset streams (a split's sequences joined end to end in seeded
orders, as a device sees them), with Ward et al. 2011's event metrics (`edgeseq.runtime.events`).
`calibrate` searches the decision layer's settings (`edgeseq.runtime.decision`) on a
validation split, never the test split: every combination of a grid runs as its own stream
of one vectorised `Decider`, over the probabilities of one pass of the model. It keeps the
combination with the highest event F1 whose false alarms per hour are within the budget
(ties: the shorter median detection delay, then fewer false alarms).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from edgeseq.data import Split
from edgeseq.errors import UsageError
from edgeseq.runtime.decision import Decider, DecisionSpec
from edgeseq.runtime.events import score_events
from edgeseq.runtime.never_reset import joined_streams
from edgeseq.runtime.session import StreamSession

CROSS_FOLDS = 5            # `calibrate --split cross`: parts of the training split, each held out once ...
CROSS_FOLDS_MAX = 20       # ... and at most this many (`edgeseq.train.crossfit`)
EVENT_ORDERS = 20          # never-reset streams an event figure is measured on: seeded orders of the split
# The grid `calibrate` searches (EMA weight, one threshold and one minimum duration for every class, refractory
# time as a share of the median sequence length).
ALPHAS = (1.0, 0.5, 0.3, 0.2, 0.1)
THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)
MIN_DURATIONS = (1, 2, 3, 5, 8, 12)
REFRACTORY_SHARES = (0.0, 0.25, 0.5)
RELEASES = (1, 3, 6, 10)


def check_folds(folds) -> int:
    """`folds` for `calibrate --split cross`, checked: a whole number from 2 to CROSS_FOLDS_MAX
    (UsageError otherwise, one line)."""
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or not 2 <= folds <= CROSS_FOLDS_MAX:
        raise UsageError(f"--folds must be a whole number from 2 to {CROSS_FOLDS_MAX}, got {folds!r}")
    return int(folds)


def check_max_delay(max_delay) -> float | None:
    """`max_delay` for `calibrate`, checked: None, or a finite number of readings >= 0, as a
    float (-0 as 0). UsageError otherwise, one line."""
    if max_delay is None:
        return None
    if isinstance(max_delay, bool) or not isinstance(max_delay, (int, float, np.integer, np.floating)) \
            or not math.isfinite(max_delay) or max_delay < 0:
        shown = f"{max_delay:g}" if isinstance(max_delay, (int, float, np.integer, np.floating)) \
            and not isinstance(max_delay, bool) else repr(max_delay)
        raise UsageError(f"--max-delay must be a number of readings >= 0, got {shown}")
    return float(max_delay) + 0.0


def stream_probs(model: str, split: Split, orders: int = EVENT_ORDERS, seed: int = 0, backend: str | None = None,
                 provider: str = "cpu") -> tuple:
    """Probabilities on never-reset streams: (P float32 [orders, L, classes], Y int64
    [orders, L] the label of each reading, labels). One StreamSession with one stream per
    order, never reset (a model whose batch rows interact runs each in its own call)."""
    X, Y, _ = joined_streams(split, orders, seed)
    sess = StreamSession(model, streams=orders, provider=provider, backend=backend, decision=False)
    P = np.zeros((orders, X.shape[1], len(sess.labels)), np.float32)
    for t in range(X.shape[1]):
        P[:, t] = sess.push(np.ascontiguousarray(X[:, t]))
    return P, Y, list(sess.labels)


def detections(P: np.ndarray, specs: list) -> list:
    """Detected event intervals of every (setting, order): P float32 [orders, L, C] and
    `specs` (DecisionSpecs sharing labels, background and smoothing). Returns
    det[k][o] = [(class, start, end), ...]: start the reading the event fired at, end the
    reading it ended at (L where still open at the stream's end)."""
    O, L, _ = P.shape
    K = len(specs)
    dec = Decider([s for s in specs for _ in range(O)])          # stream k * O + o
    out = [[[] for _ in range(O)] for _ in range(K)]
    open_at = {}
    for t in range(L):
        for e in dec.update(np.tile(P[:, t], (K, 1))):
            k, o = divmod(e.stream, O)
            if e.kind == "start":
                open_at[e.stream] = (e.cls, e.position)
            else:
                c, a = open_at.pop(e.stream)
                out[k][o].append((c, a, e.position))
    for stream, (c, a) in open_at.items():
        k, o = divmod(stream, O)
        out[k][o].append((c, a, L))
    return out


def score_orders(dets: list, Y: np.ndarray, labels: list, background, rate_hz: float | None) -> dict:
    """`score_events` over several never-reset streams as one: the streams (Y int [orders, L],
    dets[o] intervals) are laid end to end with one unlabelled reading between them, so no
    event spans two streams; the per-hour figures count the streams' own readings only."""
    return score_streams(dets, list(Y), labels, background, rate_hz)


def score_streams(dets: list, Ys: list, labels: list, background, rate_hz: float | None) -> dict:
    """`score_orders` for streams of any lengths: Ys[o] int [L_o] the labels of stream o and
    dets[o] its detected intervals [(class, start, end)], in the stream's own readings."""
    det, Yall, at = [], [], 0
    for d, y in zip(dets, Ys):
        det += [(c, a + at, b + at) for c, a, b in d]
        Yall += [np.asarray(y, np.int64), np.full(1, -1, np.int64)]
        at += len(y) + 1
    Yall = np.concatenate(Yall) if Yall else np.zeros(0, np.int64)
    r = score_events(det, Yall, labels, background, rate_hz)
    n = int(sum(len(y) for y in Ys))
    r["readings"] = n
    n_bg = int(sum(np.isin(y, list(background) + [-1]).sum() for y in Ys))   # unlabelled readings count as background
    if rate_hz:
        hours = n / rate_hz / 3600
        r["hours"] = hours
        r["false_alarms_per_hour"] = r["false_alarms"] / hours
        r["false_alarms_per_hour_of_background"] = r["false_alarms"] / (n_bg / rate_hz / 3600) if n_bg else None
    return r


def event_scores(model: str, split: Split, spec: DecisionSpec, orders: int = EVENT_ORDERS, seed: int = 0,
                 backend: str | None = None, provider: str = "cpu") -> dict:
    """Event metrics of `model` under decision settings `spec` on `orders` never-reset streams
    of `split` (`score_orders`), with "orders" and "readings_per_stream"."""
    P, Y, labels = stream_probs(model, split, orders, seed, backend, provider)
    if list(spec.labels) != labels:
        raise UsageError("the decision settings name other labels than the model's")
    bg = [labels.index(b) for b in spec.background]
    r = score_orders(detections(P, [spec])[0], Y, labels, bg, spec.rate_hz)
    r.update({"orders": orders, "readings_per_stream": int(Y.shape[1]), "decision": spec.to_json()})
    return r


def grid(labels, background, rate_hz, median_length: float) -> list:
    """The DecisionSpecs `calibrate` tries (EMA smoothing)."""
    refr = sorted({int(round(f * median_length)) for f in REFRACTORY_SHARES})
    return [DecisionSpec.make(labels, background, "ema", a, 8, th, md, r, rl, rate_hz)
            for a, th, md, r, rl in itertools.product(ALPHAS, THRESHOLDS, MIN_DURATIONS, refr, RELEASES)]


def calibrate(model: str, split: Split, background=(), rate_hz: float | None = None,
              max_false_alarms_per_hour: float = 2.0, orders: int = EVENT_ORDERS, seed: int = 0,
              backend: str | None = None, provider: str = "cpu", max_delay: float | None = None) -> dict:
    """Search decision settings for `model` on never-reset streams of `split` (a validation
    split: never the test split). `background`: label names that are not events. `rate_hz`:
    the data's readings per second (needed for a per-hour budget; UsageError without it).
    Returns {"chosen": DecisionSpec, "met": whether any setting kept within the budget,
    "table": [per setting: its settings and figures, best F1 first], "front": the settings
    no other beats on false alarms, missed events and median delay together,
    "orders", "readings_per_stream", "sequences"}. Where none keeps within the budget the
    one with the fewest false alarms per hour is chosen (and "met" is False). `max_delay`: a bound
    on the median detection delay, in readings (`check_max_delay`; None: none), see `search`."""
    if rate_hz is None or not (isinstance(rate_hz, (int, float)) and math.isfinite(rate_hz) and rate_hz > 0):
        raise UsageError("calibrating for false alarms per hour needs the data's sampling rate; give --rate-hz "
                         "(readings per second)")
    if not (isinstance(max_false_alarms_per_hour, (int, float)) and max_false_alarms_per_hour >= 0):
        raise UsageError(f"the false-alarm budget must be a number >= 0 per hour, got {max_false_alarms_per_hour!r}")
    P, Y, labels = stream_probs(model, split, orders, seed, backend, provider)
    return search([(P, Y)], labels, split, background, rate_hz, max_false_alarms_per_hour, orders,
                  max_delay=max_delay)


def search(blocks: list, labels: list, split: Split, background=(), rate_hz: float = 1.0,
           max_false_alarms_per_hour: float = 2.0, orders: int = EVENT_ORDERS, folds: int | None = None,
           max_delay: float | None = None) -> dict:
    """`calibrate`'s search on probabilities already computed: `blocks` [(P float32 [O, L, C],
    Y int64 [O, L])], never-reset streams of the sequences of `split` (one block, or one per
    fold of a cross-fit, `edgeseq.train.crossfit`, whose streams may differ in length between
    blocks); `orders` streams of each block; `folds` the cross-fit's (None: none). Returns
    what `calibrate` does, with "folds"; the chosen spec's calibration records it where given.

    `max_delay` (readings, None: no bound): the best F1 is sought among the settings within the
    budget whose median detection delay is at most that, a missed event counted as never found
    (`score_events`' "delay_median_with_missed", so no setting meets the bound by missing its slow
    events); where none is, the shortest such median within the budget is chosen instead (F1,
    then fewer false alarms, break ties); with no setting within the budget, the fewest false
    alarms as without a bound. Also returned: "delay_met" (whether the chosen setting is within
    the bound; None without one), "fastest_within_budget" (the shortest such median of a setting
    within the budget, readings, or None) and "fewest_within_delay" (the fewest false alarms per
    hour of a setting within the bound, or None)."""
    max_delay = check_max_delay(max_delay)
    missing = [b for b in background if b not in labels]
    if missing:
        raise UsageError(f"background label {missing[0]!r} is not one of the model's labels ({', '.join(labels)})")
    specs = grid(labels, tuple(background), float(rate_hz), float(np.median(split.lengths)))
    bg = [labels.index(b) for b in background]
    per_block = [detections(P, specs) for P, _ in blocks]
    Ys = [y for _, Y in blocks for y in Y]
    rows = []
    for k, spec in enumerate(specs):
        r = score_streams([d for dets in per_block for d in dets[k]], Ys, labels, bg, rate_hz)
        found = r["events"] - r["deleted"]
        rows.append({"alpha": spec.alpha, "threshold": spec.threshold[next(iter(spec.threshold))],
                     "min_duration": spec.min_duration[next(iter(spec.min_duration))],
                     "refractory": spec.refractory, "release": spec.release, "f1": r["f1"], "precision": r["precision"],
                     "recall": r["recall"], "false_alarms": r["false_alarms"],
                     "false_alarms_per_hour": r["false_alarms_per_hour"], "missed": r["deleted"],
                     "events": r["events"], "found": found, "fragmented": r["fragmented"], "merged": r["merged"],
                     "delay_median": r["delay_readings"]["median"] if r["delay_readings"] else None,
                     "delay_p90": r["delay_readings"]["p90"] if r["delay_readings"] else None,
                     "delay_median_with_missed": r["delay_median_with_missed"], "_spec": spec})

    def key(r):
        delay = math.inf if r["delay_median"] is None else r["delay_median"]
        return (-(r["f1"] or 0.0), delay, r["false_alarms_per_hour"])
    def late(r):                 # the median delay with missed events counted as never found
        return math.inf if r["delay_median_with_missed"] is None else r["delay_median_with_missed"]

    def quick(r):
        return late(r) <= max_delay
    ok = [r for r in rows if r["false_alarms_per_hour"] <= max_false_alarms_per_hour]
    fast = ok if max_delay is None else [r for r in ok if quick(r)]
    if fast:
        chosen = min(fast, key=key)
    elif ok:                                   # the budget keeps no setting this quick: the quickest it keeps
        chosen = min(ok, key=lambda r: (late(r), -(r["f1"] or 0.0), r["false_alarms_per_hour"]))
    else:
        chosen = min(rows, key=lambda r: (r["false_alarms_per_hour"], key(r)))
    delays = [late(r) for r in ok if math.isfinite(late(r))]
    within = [r["false_alarms_per_hour"] for r in rows if max_delay is not None and quick(r)]
    extra = {"delay_met": None if max_delay is None else quick(chosen),
             "fastest_within_budget": min(delays) if delays else None,
             "fewest_within_delay": min(within) if within else None}
    rows.sort(key=key)
    front = []
    for r in sorted(rows, key=lambda r: (r["false_alarms_per_hour"], r["missed"], r["delay_median"] or 0)):
        if not any(f["false_alarms_per_hour"] <= r["false_alarms_per_hour"] and f["missed"] <= r["missed"]
                   and (f["delay_median"] or 0) <= (r["delay_median"] or 0) for f in front):
            front.append(r)
    spec = chosen["_spec"]
    figures = {k: v for k, v in chosen.items() if not k.startswith("_")}
    per_stream = round(sum(len(y) for y in Ys) / len(Ys))     # the same for every stream but a cross-fit's
    cal = {"max_false_alarms_per_hour": max_false_alarms_per_hour, "met": bool(ok), "orders": orders,
           "sequences": len(split), "readings_per_stream": per_stream, "validation": figures}
    if folds is not None:
        cal["folds"] = folds
    if max_delay is not None:
        cal["max_delay_readings"], cal["delay_met"] = max_delay, extra["delay_met"]
    chosen_spec = DecisionSpec.from_json({**spec.to_json(), "calibration": cal}, labels)
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("_")} for r in rs]  # noqa: E731
    return {"chosen": chosen_spec, "met": bool(ok), "table": strip(rows), "front": strip(front),
            "orders": orders, "readings_per_stream": per_stream, "sequences": len(split),
            "settings_tried": len(rows), "streams": len(Ys), "readings": int(sum(len(y) for y in Ys)),
            "folds": folds, "max_delay": max_delay, **extra}
