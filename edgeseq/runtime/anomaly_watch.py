"""What a session runs for an anomaly model, numpy only: its settings (`AnomalySpec`, the
model's `edgeseq.task`) and the `Watcher` that scores a forecast's surprise against the
baseline each stream learns (the method: `edgeseq.runtime.anomaly`'s docstring). Below the
session and the contract that take them from here; `edgeseq.runtime.anomaly` re-exports them
beside what runs a model file over recordings (`evaluate`, `calibrate`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from edgeseq.errors import UsageError
from edgeseq.runtime.decision import MAX_READINGS, Decider, DecisionSpec
from edgeseq.runtime.decision import STATE_NAMES as DECISION_NAMES

LABELS = ("normal", "anomaly")
LOGVAR_LIMIT = 8.0
SCORE_BOUND = 1e12          # a restored smoothed score or baseline mean beyond this is refused (no stream reaches it)
# The baseline's state arrays (a snapshot's and a state file's names), then the decision layer's.
BASELINE_NAMES = ("mu", "logvar", "seen", "score", "n", "mean", "m2")
STATE_NAMES = tuple(f"a_{k}" for k in BASELINE_NAMES) + DECISION_NAMES
SETTINGS = ("learn", "warm", "sigmas", "alpha", "adapt", "min_duration", "refractory", "release", "rate_hz",
            "calibration")


def _fail(what: str) -> UsageError:
    return UsageError(f"anomaly: {what}")


def _whole(name, v, lo, hi=MAX_READINGS) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= int(v) <= hi:
        raise _fail(f"{name} must be a whole number of readings from {lo} to {hi:,}, got {v!r:.40}")
    return int(v)


def _positive(name, v, hi=math.inf) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not 0 < float(v) <= hi \
            or not math.isfinite(float(v)):
        raise _fail(f"{name} must be a number in (0, {hi:g}], got {v!r:.40}")
    return float(v)


@dataclass(frozen=True)
class AnomalySpec:
    """The anomaly settings of a model (its `edgeseq.task` metadata, kind "anomaly").

    learn: readings a stream learns its normal score from, after `warm` readings that are not
    scored; sigmas: the level (standard deviations of the learnt score above its mean) that
    makes a reading a candidate; alpha: the score's EMA weight of a new reading, in (0, 1];
    adapt: readings over which the baseline keeps following the normal score after learning
    (0: frozen); min_duration, refractory, release: the decision layer's (`DecisionSpec`); rate_hz: the
    data's readings per second (None: unknown); calibration: what `edgeseq calibrate`
    measured, or None. Raises UsageError (one line) for a value out of range."""

    learn: int = 500
    warm: int = 16
    sigmas: float = 8.0
    alpha: float = 0.2
    adapt: int = 4096
    min_duration: int = 10
    refractory: int = 0
    release: int = 50
    rate_hz: float | None = None
    calibration: dict | None = field(default=None, compare=False)

    @classmethod
    def from_json(cls, obj) -> "AnomalySpec":
        if not isinstance(obj, dict):
            raise _fail(f"settings must be a JSON object, got {type(obj).__name__}")
        unknown = sorted(set(obj) - set(SETTINGS) - {"kind"})
        if unknown:
            raise _fail(f"unknown setting '{unknown[0]:.40}'; the settings are {', '.join(SETTINGS)}")
        d = cls()
        rate = obj.get("rate_hz")
        cal = obj.get("calibration")
        if cal is not None and not isinstance(cal, dict):
            raise _fail("calibration must be an object or null")
        return cls(learn=_whole("learn", obj.get("learn", d.learn), 2),
                   warm=_whole("warm", obj.get("warm", d.warm), 0),
                   sigmas=_positive("sigmas", obj.get("sigmas", d.sigmas), 1e6),
                   alpha=_positive("alpha", obj.get("alpha", d.alpha), 1.0),
                   adapt=_whole("adapt", obj.get("adapt", d.adapt), 0),
                   min_duration=_whole("min_duration", obj.get("min_duration", d.min_duration), 1),
                   refractory=_whole("refractory", obj.get("refractory", d.refractory), 0),
                   release=_whole("release", obj.get("release", d.release), 1),
                   rate_hz=None if rate is None else _positive("rate_hz", rate), calibration=cal)

    def to_json(self) -> dict:
        return {"kind": "anomaly", "learn": self.learn, "warm": self.warm, "sigmas": self.sigmas,
                "alpha": self.alpha, "adapt": self.adapt, "min_duration": self.min_duration, "refractory": self.refractory,
                "release": self.release, "rate_hz": self.rate_hz, "calibration": self.calibration}

    def decision(self) -> DecisionSpec:
        """The decision layer that turns candidates into events."""
        return DecisionSpec.make(LABELS, background=["normal"], smoothing="none", threshold=0.5,
                                 min_duration=self.min_duration, refractory=self.refractory,
                                 release=self.release, rate_hz=self.rate_hz)

    def describe(self) -> str:
        follow = f"follows it over {self.adapt:,} readings" if self.adapt else "then keeps it"
        return (f"learns its normal score over {self.learn:,} readings (after {self.warm}) and {follow}, EMA "
                f"alpha {self.alpha:g}, anomaly at {self.sigmas:g} standard deviations for {self.min_duration} "
                f"readings, release {self.release}, refractory {self.refractory}")


def scores(z: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Per-reading surprise e float64 [...] of normalised readings z [..., F] under forecasts
    out [..., 2F] (means, then log-variances): the mean Gaussian negative log-likelihood per
    channel, less its constant."""
    F = z.shape[-1]
    z = np.asarray(z, np.float64)
    mu = np.asarray(out[..., :F], np.float64)
    v = np.clip(np.asarray(out[..., F:], np.float64), -LOGVAR_LIMIT, LOGVAR_LIMIT)
    return 0.5 * (v + (z - mu) ** 2 * np.exp(-v)).mean(-1)


class Watcher:
    """Anomaly scores, the learnt baseline and events for `streams` streams of one model.

    `update(x, out)`: x float32 [streams, F] the readings just pushed (raw units), out float32
    [streams, 2F] the model's forecasts after them; returns the events that fired
    (`edgeseq.runtime.decision.Event`, label "anomaly"). `level` then holds each stream's
    level (float64 [streams]; NaN while warming up or learning). The snapshot/check/load/reset
    interface is the `Decider`'s, over `STATE_NAMES`."""

    state_names = STATE_NAMES

    def __init__(self, spec: AnomalySpec, mean, std, streams: int = 1):
        self.spec = spec
        self.streams = int(streams)
        self.mean_x = np.asarray(mean, np.float32)
        self.std_x = np.asarray(std, np.float32)
        F = len(self.mean_x)
        self.features = F
        self.decider = Decider(spec.decision(), self.streams)
        self.labels = self.decider.labels
        S = self.streams
        self.a_mu = np.zeros((S, F), np.float32)
        self.a_logvar = np.zeros((S, F), np.float32)
        for k in ("a_seen", "a_n"):
            setattr(self, k, np.zeros(S, np.int64))
        for k in ("a_score", "a_mean", "a_m2"):
            setattr(self, k, np.zeros(S, np.float64))
        self.level = np.full(S, np.nan)
        self._p = np.zeros((S, 2), np.float32)

    def reset(self, stream: int | None = None) -> None:
        rows = slice(None) if stream is None else stream
        for k in STATE_NAMES[:len(BASELINE_NAMES)]:
            getattr(self, k)[rows] = 0
        self.level[rows] = np.nan
        self.decider.reset(stream)

    @property
    def threshold(self) -> np.ndarray:
        """Each stream's learnt threshold on the smoothed score (float64 [streams]; NaN while learning)."""
        n = self.a_n
        std = np.sqrt(self.a_m2 / np.maximum(n - 1, 1))
        return np.where(n >= self.spec.learn, self.a_mean + self.spec.sigmas * std, np.nan)

    def update(self, x: np.ndarray, out: np.ndarray) -> list:
        sp = self.spec
        z = (np.asarray(x, np.float32) - self.mean_x) / self.std_x
        seen = self.a_seen
        scored = seen >= max(sp.warm, 1)                 # a forecast exists and the state has filled
        e = scores(z, np.concatenate([self.a_mu, self.a_logvar], -1))
        first = scored & (seen == max(sp.warm, 1))
        s = self.a_score
        s[...] = np.where(first, e, np.where(scored, s + sp.alpha * (e - s), s))
        learning = scored & (self.a_n < sp.learn)
        if learning.any():                              # Welford's update of the smoothed score's mean and variance
            n1 = self.a_n + 1
            d = s - self.a_mean
            self.a_mean[...] = np.where(learning, self.a_mean + d / n1, self.a_mean)
            self.a_m2[...] = np.where(learning, self.a_m2 + d * (s - self.a_mean), self.a_m2)
            self.a_n[...] = np.where(learning, n1, self.a_n)
        learnt = scored & ~learning
        std = np.sqrt(self.a_m2 / np.maximum(self.a_n - 1, 1))
        std = np.maximum(std, 1e-6 * np.maximum(np.abs(self.a_mean), 1.0))
        self.level[...] = np.where(learnt, (s - self.a_mean) / std, np.nan)
        cand = learnt & (self.level >= sp.sigmas)
        follow = learnt & ~cand & (self.decider.active < 0) & (self.a_n >= sp.learn) & (sp.adapt > 0)
        if follow.any():                                # the baseline follows slow drift (m2 = var (learn - 1))
            w = 1.0 / sp.adapt
            d = s - self.a_mean
            var = self.a_m2 / max(sp.learn - 1, 1)
            self.a_mean[...] = np.where(follow, self.a_mean + w * d, self.a_mean)
            self.a_m2[...] = np.where(follow, (var + w * (d * d - var)) * max(sp.learn - 1, 1), self.a_m2)
        self._p[:, 1] = cand
        self._p[:, 0] = ~cand
        self.a_mu[...] = out[:, :self.features]
        self.a_logvar[...] = out[:, self.features:2 * self.features]
        self.a_seen += 1
        return self.decider.update(self._p)

    def state_label(self) -> list:
        return self.decider.state_label()

    def active_mask(self) -> np.ndarray:
        """bool [streams]: the streams inside an anomaly event."""
        return self.decider.active >= 0

    def native_arrays(self):
        return None                                      # scored in numpy; the C step gives the forecasts

    def snapshot(self) -> dict:
        snap = {k: getattr(self, k).copy() for k in STATE_NAMES[:len(BASELINE_NAMES)]}
        snap.update(self.decider.snapshot())
        return snap

    def check(self, snap) -> dict:
        """`snap` checked whole (shapes, kinds, values a stream can reach); the arrays to `load`.
        Raises UsageError naming what is wrong."""
        if not isinstance(snap, dict):
            raise UsageError("the anomaly state must be a mapping of arrays; snapshot this session again")
        S, F = self.streams, self.features
        shapes = {"a_mu": (S, F), "a_logvar": (S, F)}
        out = {}
        for k in STATE_NAMES[:len(BASELINE_NAMES)]:
            if k not in snap:
                raise UsageError(f"the anomaly state has no '{k}'; snapshot this session again")
            a = np.asarray(snap[k])
            if a.shape != shapes.get(k, (S,)):
                raise UsageError(f"the anomaly state's '{k}' has shape {a.shape}, this session needs "
                                 f"{shapes.get(k, (S,))}")
            ints = k in ("a_seen", "a_n")
            if a.dtype.kind not in ("iu" if ints else "f") or (not ints and not np.isfinite(a).all()):
                raise UsageError(f"the anomaly state's '{k}' must hold {'integers' if ints else 'finite numbers'}")
            out[k] = a.astype(np.int64 if ints else (np.float32 if k in shapes else np.float64))
        if (out["a_seen"] < 0).any() or (out["a_n"] < 0).any() or (out["a_n"] > self.spec.learn).any() \
                or (out["a_n"] > out["a_seen"]).any() or (out["a_m2"] < 0).any():
            raise UsageError("the anomaly state's counts or variance are out of range")
        if (np.abs(out["a_logvar"]) > 1e6).any() or (np.abs(out["a_mu"]) > 1e6).any():
            raise UsageError("the anomaly state's forecasts are out of range")
        bound = SCORE_BOUND
        if (np.abs(out["a_score"]) > bound).any() or (np.abs(out["a_mean"]) > bound).any() \
                or (out["a_m2"] > (2 * bound) ** 2 * self.spec.learn).any():
            raise UsageError("the anomaly state's score, mean or variance are out of the range a stream reaches")
        if ((out["a_n"] >= self.spec.learn) & (out["a_m2"] <= 0)).any():
            raise UsageError("the anomaly state has a learnt baseline with no variance, which no stream reaches")
        out.update(self.decider.check({k: snap.get(k) for k in DECISION_NAMES if k in snap}
                                      if all(k in snap for k in DECISION_NAMES) else snap))
        return out

    def load(self, checked: dict) -> None:
        for k in STATE_NAMES[:len(BASELINE_NAMES)]:
            np.copyto(getattr(self, k), checked[k])
        self.decider.load({k: checked[k] for k in DECISION_NAMES})
        self.level[...] = np.nan
