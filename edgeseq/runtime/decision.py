"""The decision layer: from per-reading class probabilities to events, on a never-reset stream.

A model answers every reading with class probabilities; what a device's owner acts on is an
event ("running started"). The decision layer turns one into the other, per stream, with a
state of its own that lives beside the model's (snapshots and state files carry both):

1. smoothing: an exponential moving average of the probabilities, s <- s + alpha (p - s)
   (the first reading of a stream sets s = p), or a moving mean over the last `window`
   readings; `none` uses p as it is;
2. a candidate: the top smoothed class, where it is not a background class and its smoothed
   probability is at least that class's threshold; otherwise none;
3. minimum duration: an event of class c starts at the `min_duration[c]`-th reading in a row
   with candidate c;
4. refractory time: after an event starts, no other event starts for `refractory` readings
   (a start that falls inside waits for it to pass, if its class is still the candidate);
5. release: an event ends at the `release`-th reading in a row whose candidate is not its
   class (1: at the first); until then no other event starts, so a short dip does not split
   one event into two.

Every stream of a `Decider` runs the same arithmetic, vectorised over streams with numpy: at
1,024 streams a call costs a few tens of numpy operations, not a Python loop per stream.
The settings live in a model file's metadata (`edgeseq.decision`, `DecisionSpec.to_json`);
`edgeseq calibrate` chooses them for a false-alarm budget (docs/decisions.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from edgeseq.errors import UsageError, printable

SMOOTHING = ("ema", "mean", "none")
MAX_WINDOW = 256           # a moving mean's readings, at most (its state is window x classes floats per stream,
                           # and each reading sums the window)
MAX_SEEN = 1 << 62         # readings a stream's decision state may count (a restored state past it could overflow)
MAX_READINGS = 10 ** 7     # min_duration and refractory, at most (about 11 days at 10 Hz)
# The state arrays a snapshot and a state file carry, in this order.
STATE_NAMES = ("smooth", "ring", "seen", "run_cls", "run_len", "active", "onset", "cool", "gone")


class Event(NamedTuple):
    """One decision of one stream: `kind` "start" or "end" of an event of class `label`
    (index `cls`), decided at reading `position` (readings the stream had seen before it:
    0 for the first); `onset` the reading at which the class became the candidate (for an
    end, at which the event began being a candidate)."""

    stream: int
    kind: str
    label: str
    cls: int
    position: int
    onset: int


def _shown(x) -> str:
    """A value from a file for a one-line message: escaped, and cut to 60 characters."""
    t = str(x)
    return printable(t[:60] + ("..." if len(t) > 60 else ""))


def _fail(what: str) -> UsageError:
    return UsageError(f"decision: {what}")


def _readings(name, v, lo=0):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= int(v) <= MAX_READINGS:
        raise _fail(f"{name} must be a whole number of readings from {lo} to {MAX_READINGS:,}, got {_shown(repr(v))}")
    return int(v)


def _prob(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not 0 < float(v) <= 1:
        raise _fail(f"{name} must be a probability in (0, 1], got {_shown(repr(v))}")
    return float(v)


@dataclass(frozen=True)
class DecisionSpec:
    """The decision settings for a model with `labels`.

    threshold, min_duration: one per label, dicts {label: value}; background labels have
    none (their readings never start an event). alpha: the EMA's weight of a new reading,
    in (0, 1]; window: the moving mean's readings (smoothing "mean"). refractory: readings
    after an event's start in which no other event starts; release: readings in a row
    without its class that end an event (>= 1). rate_hz: the data's sampling rate
    (readings per second), for per-hour figures; None where unknown. calibration: what
    `edgeseq calibrate` measured when it chose these (free-form JSON object), or None.

    Build one with `DecisionSpec.make` (defaults for the labels) or `from_json`; both raise
    UsageError (one line) for unknown labels, values out of range, or a spec that leaves no
    class able to start an event."""

    labels: tuple
    background: tuple = ()
    smoothing: str = "ema"
    alpha: float = 0.25
    window: int = 8
    threshold: dict = field(default_factory=dict)
    min_duration: dict = field(default_factory=dict)
    refractory: int = 0
    release: int = 1
    rate_hz: float | None = None
    calibration: dict | None = None

    @classmethod
    def make(cls, labels, background=(), smoothing="ema", alpha=0.25, window=8, threshold=0.5, min_duration=3,
             refractory=0, release=1, rate_hz=None, calibration=None) -> "DecisionSpec":
        """One threshold and minimum duration for every non-background class (a number), or
        per class ({label: value}, every non-background label named)."""
        labels = tuple(str(x) for x in labels)
        bg = tuple(str(b) for b in background)
        events = [x for x in labels if x not in bg]
        thr = dict(threshold) if isinstance(threshold, dict) else {x: threshold for x in events}
        mind = dict(min_duration) if isinstance(min_duration, dict) else {x: min_duration for x in events}
        return cls.from_json({"background": list(bg), "smoothing": smoothing, "alpha": alpha, "window": window,
                              "threshold": thr, "min_duration": mind, "refractory": refractory,
                              "release": release, "rate_hz": rate_hz, "calibration": calibration}, labels)

    @classmethod
    def from_json(cls, obj, labels) -> "DecisionSpec":
        """Parse and check a JSON object (`to_json`'s shape) against the model's labels."""
        labels = tuple(str(x) for x in labels)
        if not isinstance(obj, dict):
            raise _fail(f"must be a JSON object, got {_shown(type(obj).__name__)}")
        unknown = sorted(set(obj) - {"background", "smoothing", "alpha", "window", "threshold", "min_duration",
                                     "refractory", "release", "rate_hz", "calibration"})
        if unknown:
            raise _fail(f"unknown setting '{_shown(unknown[0])}'; the settings are background, smoothing, "
                        "alpha, window, threshold, min_duration, refractory, release, rate_hz")
        bg = obj.get("background", [])
        if isinstance(bg, str):
            bg = [bg]
        if not isinstance(bg, (list, tuple)) or not all(isinstance(b, str) for b in bg):
            raise _fail("background must be a list of label names")
        if len(set(bg)) != len(bg):
            twice = next(b for b in bg if bg.count(b) > 1)
            raise _fail(f"background label '{_shown(twice)}' is named twice; name each once")
        for b in bg:
            if b not in labels:
                raise _fail(f"background label '{_shown(b)}' is not one of the model's labels "
                            f"({_shown(', '.join(labels))})")
        events = [x for x in labels if x not in bg]
        if not events:
            raise _fail("every label is background; leave at least one class that can start an event")
        smoothing = obj.get("smoothing", "ema")
        if smoothing not in SMOOTHING:
            raise _fail(f"smoothing must be one of {', '.join(SMOOTHING)}, got {_shown(repr(smoothing))}")
        alpha = _prob("alpha", obj.get("alpha", 0.25))
        window = obj.get("window", 8)
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or not 1 <= window <= MAX_WINDOW:
            raise _fail(f"window must be a whole number of readings from 1 to {MAX_WINDOW}, got {_shown(repr(window))}")
        per = {}
        for key, check in (("threshold", _prob), ("min_duration", lambda n, v: _readings(n, v, 1))):
            d = obj.get(key, {})
            if not isinstance(d, dict):
                raise _fail(f"{key} must be an object {{label: value}} naming every non-background label")
            extra = [k for k in d if k not in events]
            if extra:
                what = "a background label" if extra[0] in bg else "not one of the model's labels"
                raise _fail(f"{key} names '{_shown(str(extra[0]))}', {what}")
            missing = [x for x in events if x not in d]
            if missing:
                raise _fail(f"{key} has no value for '{_shown(missing[0])}'; give one per non-background label")
            per[key] = {x: check(f"{key}['{printable(x)}']", d[x]) for x in events}
        refractory = _readings("refractory", obj.get("refractory", 0))
        release = _readings("release", obj.get("release", 1), 1)
        rate = obj.get("rate_hz")
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))
                                 or not math.isfinite(rate) or rate <= 0):
            raise _fail(f"rate_hz must be a positive number of readings per second or null, got {_shown(repr(rate))}")
        cal = obj.get("calibration")
        if cal is not None and not isinstance(cal, dict):
            raise _fail("calibration must be an object or null")
        return cls(labels, tuple(bg), smoothing, alpha, int(window), per["threshold"], per["min_duration"],
                   refractory, release, None if rate is None else float(rate), cal)

    def to_json(self) -> dict:
        """The metadata value (`edgeseq.decision`); labels are the model's own and not repeated."""
        return {"background": list(self.background), "smoothing": self.smoothing, "alpha": self.alpha,
                "window": self.window, "threshold": dict(self.threshold), "min_duration": dict(self.min_duration),
                "refractory": self.refractory, "release": self.release, "rate_hz": self.rate_hz, "calibration": self.calibration}

    def describe(self) -> str:
        """One line for a terminal."""
        smooth = {"ema": f"EMA alpha {self.alpha:g}", "mean": f"mean of {self.window} readings",
                  "none": "no smoothing"}[self.smoothing]
        thr = sorted(set(self.threshold.values()))
        mind = sorted(set(self.min_duration.values()))
        num = lambda x: f"{x:,}" if isinstance(x, int) else f"{x:g}"  # noqa: E731
        show = lambda v: num(v[0]) if len(v) == 1 else f"{num(v[0])}-{num(v[-1])}"  # noqa: E731
        bg = f"background {printable(', '.join(self.background))}" if self.background else "no background class"
        readings = lambda v: f"{show(v)} reading{'' if v == [1] else 's'}"  # noqa: E731
        return (f"{smooth}, threshold {show(thr)}, min duration {readings(mind)}, refractory "
                f"{readings([self.refractory])}, release {readings([self.release])}, {bg}")


class Decider:
    """The decision layer's state and step for `streams` streams.

    `spec`: one DecisionSpec for every stream, or a list of one per stream (all with the
    same labels, background and smoothing kind; `edgeseq calibrate` runs a grid of settings
    as streams side by side). `update(probs)` takes float32 [streams, classes] and returns
    the events that fired at this reading, in stream order (ends before starts)."""

    def __init__(self, spec, streams: int = 1):
        specs = list(spec) if isinstance(spec, (list, tuple)) else [spec] * int(streams)
        if not specs:
            raise UsageError("a decider needs at least one stream")
        first = specs[0]
        for s in specs[1:]:
            if (s.labels, s.background, s.smoothing) != (first.labels, first.background, first.smoothing):
                raise UsageError("a decider's streams share labels, background and smoothing kind")
        self.spec = first
        self.specs = specs
        self.labels = list(first.labels)
        S, C = len(specs), len(self.labels)
        self.streams, self.classes = S, C
        bg = np.array([x in first.background for x in self.labels])
        self.background = bg
        # Thresholds of background classes are above any probability: they never start an event.
        self.threshold = np.array([[np.inf if bg[c] else s.threshold[self.labels[c]] for c in range(C)]
                                   for s in specs], np.float32)
        self.min_duration = np.array([[0 if bg[c] else s.min_duration[self.labels[c]] for c in range(C)]
                                      for s in specs], np.int64)
        self.refractory = np.array([s.refractory for s in specs], np.int64)
        self.release = np.array([s.release for s in specs], np.int64)
        self.alpha = np.array([s.alpha if s.smoothing == "ema" else 1.0 for s in specs], np.float32)[:, None]
        self.window = max(s.window for s in specs) if first.smoothing == "mean" else 1
        self._windows = np.array([s.window for s in specs], np.int64)
        self._rows = np.arange(S)
        self.reset()

    def reset(self, stream: int | None = None) -> None:
        """Forget one stream's decision state (or every stream's)."""
        S, C = self.streams, self.classes
        if not hasattr(self, "smooth"):          # made once: the arrays change in place from now on
            self.smooth = np.zeros((S, C), np.float32)
            self.ring = np.zeros((S, self.window if self.spec.smoothing == "mean" else 0, C), np.float32)
            for name in STATE_NAMES[2:]:
                setattr(self, name, np.zeros(S, np.int64))
        if stream is None:
            for name in STATE_NAMES:
                getattr(self, name)[...] = -1 if name in ("run_cls", "active") else 0
            return
        for name in STATE_NAMES:
            a = getattr(self, name)
            a[stream] = -1 if name in ("run_cls", "active") else 0

    def update(self, probs: np.ndarray) -> list:
        """Advance every stream by one reading's probabilities (float32 [streams, classes]);
        returns the list of `Event`s that fired (empty on most readings)."""
        p = np.asarray(probs, np.float32)
        kind = self.spec.smoothing
        first = self.seen == 0
        if kind == "ema":
            self.smooth += self.alpha * (p - self.smooth)
            if first.any():
                self.smooth[first] = p[first]
        elif kind == "mean":
            slot = self.seen % self._windows
            self.ring[self._rows, slot] = p
            n = np.minimum(self.seen + 1, self._windows)
            self.smooth[...] = self.ring.sum(axis=1) / n[:, None].astype(np.float32)
        else:
            self.smooth[...] = p
        s = self.smooth
        top = s.argmax(axis=1)
        cand = np.where(s[self._rows, top] >= self.threshold[self._rows, top], top, -1)
        same = cand == self.run_cls
        self.run_len[...] = np.where(same, self.run_len + 1, np.where(cand >= 0, 1, 0))
        self.run_cls[...] = cand
        pos = self.seen.copy()
        held = self.active >= 0
        self.gone[...] = np.where(held & (cand != self.active), self.gone + 1, 0)
        ends = held & (self.gone >= self.release)
        events = []
        if ends.any():
            for i in np.flatnonzero(ends):
                c = int(self.active[i])
                events.append(Event(int(i), "end", self.labels[c], c, int(pos[i]), int(self.onset[i])))
            self.active[ends] = -1
            self.gone[ends] = 0
        need = self.min_duration[self._rows, np.maximum(cand, 0)]
        starts = (cand >= 0) & (self.active < 0) & (self.run_len >= need) & (self.cool == 0)
        # after the start test: a start at reading k blocks readings k+1 .. k+refractory (refractory 1 blocks one)
        np.maximum(self.cool - 1, 0, out=self.cool)
        if starts.any():
            idx = np.flatnonzero(starts)
            self.active[idx] = cand[idx]
            self.onset[idx] = pos[idx] - self.run_len[idx] + 1
            self.cool[idx] = self.refractory[idx]
            for i in idx:
                c = int(cand[i])
                events.append(Event(int(i), "start", self.labels[c], c, int(pos[i]), int(self.onset[i])))
        self.seen += 1
        return events

    def native_arrays(self) -> tuple | None:
        """(kind, arrays) for the native pusher's `decide` (es_decide.h): EMA, moving mean or
        no smoothing. The arrays are this decider's own, changed in place by the C step; `out`
        (int64 [streams, 4]) and `fired` (int64 [1]) are where it leaves each call's events
        (`native_events`)."""
        kind = {"ema": 0, "mean": 1, "none": 2}[self.spec.smoothing]
        if not hasattr(self, "_out"):
            self._alpha1 = np.ascontiguousarray(self.alpha[:, 0], np.float32)
            self._out = np.zeros((self.streams, 4), np.int64)
            self._fired = np.zeros(1, np.int64)
        return kind, (self._alpha1, self.threshold, self.min_duration, self.refractory, self.release, self.smooth,
                      self.seen, self.run_cls, self.run_len, self.active, self.onset, self.cool, self.gone,
                      self._out, self._fired, self._windows, self.ring)

    def native_once(self, probs: np.ndarray) -> None:
        """The C step (es_decide.h) once on float32 [streams, classes] probabilities, leaving its
        events for `native_events` (a native session's push that took its Python path)."""
        from edgeseq.runtime.native.extension import _ext
        kind, arrays = self.native_arrays()
        _ext.decide(kind, arrays, np.ascontiguousarray(probs, np.float32))

    def native_events(self) -> list:
        """The events the C step left in `out` at its last call, as `update` returns them."""
        if not self._fired[0]:
            return []
        o = self._out
        events = []
        for i in np.flatnonzero(o[:, 0] >= 0):
            c = int(o[i, 0])
            events.append(Event(int(i), "end", self.labels[c], c, int(self.seen[i] - 1), int(o[i, 2])))
        for i in np.flatnonzero(o[:, 1] >= 0):
            c = int(o[i, 1])
            events.append(Event(int(i), "start", self.labels[c], c, int(self.seen[i] - 1), int(o[i, 3])))
        return events

    def state_label(self) -> list:
        """Each stream's current state for a dashboard: the active event's label, or None."""
        return [None if a < 0 else self.labels[a] for a in self.active]

    # -- snapshots -----------------------------------------------------------------------

    def snapshot(self) -> dict:
        """A copy of every stream's decision state: {name: array} for `STATE_NAMES`."""
        return {k: getattr(self, k).copy() for k in STATE_NAMES}

    def check(self, snap) -> dict:
        """`snap` (from `snapshot` or a state file) checked whole: every array present, its
        shape and dtype kind, and values the step can reach. Returns the arrays to `load`;
        raises UsageError naming what is wrong."""
        if not isinstance(snap, dict):
            raise UsageError("the decision state must be a mapping of arrays; snapshot this session again")
        out = {}
        S, C = self.streams, self.classes
        shapes = {"smooth": (S, C), "ring": self.ring.shape, "seen": (S,), "run_cls": (S,), "run_len": (S,),
                  "active": (S,), "onset": (S,), "cool": (S,), "gone": (S,)}
        for k in STATE_NAMES:
            if k not in snap:
                raise UsageError(f"the decision state has no '{k}'; snapshot this session again")
            a = np.asarray(snap[k])
            if a.shape != shapes[k]:
                raise UsageError(f"the decision state's '{k}' has shape {a.shape}, this session needs {shapes[k]}")
            floats = k in ("smooth", "ring")
            if a.dtype.kind not in ("f" if floats else "iu") or (floats and not np.isfinite(a).all()):
                raise UsageError(f"the decision state's '{k}' must hold {'finite numbers' if floats else 'integers'}")
            out[k] = a.astype(np.float32 if floats else np.int64)
        if ((out["smooth"] < 0) | (out["smooth"] > 1)).any() or ((out["ring"] < 0) | (out["ring"] > 1)).any():
            raise UsageError("the decision state's probabilities must lie in [0, 1]")
        for k in ("seen", "run_len", "onset", "cool", "gone"):
            if (out[k] < 0).any():
                raise UsageError(f"the decision state's '{k}' must be >= 0")
        if (out["cool"] > self.refractory).any() or (out["gone"] >= self.release).any():
            raise UsageError("the decision state's 'cool' or 'gone' exceeds the refractory or release time")
        seen = out["seen"]
        if (seen > MAX_SEEN).any():
            raise UsageError(f"the decision state's 'seen' exceeds {MAX_SEEN:,} readings")
        if (out["run_len"] > seen).any() or (out["onset"] > seen).any():
            raise UsageError("the decision state's 'run_len' or 'onset' lies beyond the readings it has seen")
        for k in ("run_cls", "active"):
            a = out[k]
            if ((a < -1) | (a >= C)).any() or self.background[np.maximum(a, 0)][a >= 0].any():
                raise UsageError(f"the decision state's '{k}' names a class that cannot start an event")
        return out

    def load(self, checked: dict) -> None:
        """Adopt arrays from `check` (nothing is checked here), copied into this decider's own
        arrays (which a native pusher may hold)."""
        for k, a in checked.items():
            np.copyto(getattr(self, k), a)
