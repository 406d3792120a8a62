"""StreamSession's limits and checks: bounds on settings and readings, the backend choice from
$EDGESEQ_BACKEND, the native refusal line, softmax, a regression model's outputs in its
targets' units (`in_units`), and the readings' conversion and the errors that name what is
wrong with one (ReadingChecks, off the hot path)."""

from __future__ import annotations

import math
import os

import numpy as np

from edgeseq.errors import ReadingError, UsageError

ON_FULL = ("error", "slide")
BACKENDS = ("auto", "onnxruntime", "native")
MAX_POSITION = 1 << 62           # a restored position beyond this is not a reading count
MAX_HISTORY = 1 << 20            # the export's dynamic history axis ends here (export/step.py Dim max)
MAX_STREAMS = 1 << 20            # more streams than any device holds: a larger number is a mistake
MAX_THREADS = 1024
READING_SIGMAS = 1e12            # a reading this many training standard deviations from the mean is no reading
F32_MAX = float(np.finfo(np.float32).max)
NO_NORM_LIMIT = F32_MAX / 4      # |reading| bound for a model without normalization metadata
# What a restored state may hold (snapshots and state files, both backends): values no step of
# the model can write are refused, not run.
STATE_H_BOUND = 1.0 + 2.0 ** -5  # RNN/GRU/LSTM h: tanh outputs, with room for half a step of an int8 grid
STATE_C_BOUND = 2.0 ** 25        # LSTM c grows by |i g| <= 1 a reading: in float32 that moves it no further
STATE_C_BOUND_INT8 = ((1 << 31) - 1) / (1 << 15)  # the native int8 step holds c as int32 Q15
GAIN_BOUND = math.log(NO_NORM_LIMIT) * 1.001   # the gain state: log(|reading| / floor) for readings within bounds
STATE_BOUND = 2.0 ** 64          # SSM state, KV cache: projections of LayerNorm outputs, far below this
DTYPE_WORDS = {"c": "complex numbers", "b": "true/false values", "O": "Python objects", "U": "text",
               "S": "bytes", "V": "records", "M": "dates", "m": "time spans"}


def _whole(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def reading_bounds(meta, n: int) -> tuple:
    """(hi, lo, why): float32 [F] bounds on the readings a step takes, lo None when |x| <= hi.

    The graph computes (x - mean) / (std * input_scale) in float32: a finite reading far enough
    from the mean overflows that (or what follows it) to Inf and NaN, and the state it leaves
    is NaN for good. So a reading further than READING_SIGMAS of those scaled standard
    deviations from the training mean is refused. One comparison |x| <= |mean| + K*s is used
    where it is sound (every accepted reading lies within 2K deviations and its difference from
    the mean fits float32 with room): a cheap check on the hot path. A channel whose mean is
    large against its spread or against float32 gets the exact two-sided check lo <= x <= hi.
    Without normalization metadata |x| <= float32 max / 4. With an input transform
    (asinh(x / scale), at most 89.5 for any finite float32 quotient) the bound is on the
    quotient: |x| <= scale x float32 max / 4, and float32 max / 4 at most. With the gain stage
    (`gain_floor`) a gained channel's bound is its floor x float32 max / 4 (|x| / floor must stay
    finite; float32 max / 4 at most) and `why` is then a list, one reason per channel."""
    norm = meta.normalization
    if norm is None:
        return np.full(n, NO_NORM_LIMIT, np.float32), None, "float32 max / 4, the most this model takes"
    if norm.get("asinh_scale") is not None:
        a = np.asarray(norm["asinh_scale"], np.float64)
        return (np.minimum(a, 1.0) * NO_NORM_LIMIT).astype(np.float32), None, \
            "float32 max / 4 times the input transform's scale (at most float32 max / 4)"
    with np.errstate(over="ignore", invalid="ignore"):          # the first n features: the readings'
        mean = np.asarray(norm["mean"], np.float64)[:n]
        s = np.asarray(norm["std"], np.float64)[:n] * np.asarray(norm.get("input_scale") or [1.0] * n, np.float64)[:n]
        half = np.minimum(READING_SIGMAS * s, NO_NORM_LIMIT)
        m = np.abs(mean)
        why = f"{READING_SIGMAS:.0e} standard deviations of the training data".replace("e+", "e")
        if (m <= half / 2).all():            # then |x - mean| <= 2 * half <= float32 max / 2
            hi, lo = (m + half).astype(np.float32), None
        else:
            lo = np.clip(mean - half, -F32_MAX, F32_MAX).astype(np.float32)
            hi = np.clip(mean + half, -F32_MAX, F32_MAX).astype(np.float32)
    if norm.get("gain_floor") is None:
        return hi, lo, why
    on = np.asarray(norm["gain_floor"], np.float64) > 0      # the gain stage: |x| / floor must stay finite
    hi = np.where(on, np.minimum(np.asarray(norm["gain_floor"], np.float64), 1.0) * NO_NORM_LIMIT, hi).astype(np.float32)
    lo = None if lo is None else np.where(on, -hi, lo).astype(np.float32)
    return hi, lo, ["float32 max / 4 times the channel's gain floor (the gain stage)" if g else why for g in on]


def default_backend() -> str:
    """The step backend used when none is named: $EDGESEQ_BACKEND (auto, onnxruntime or native),
    else "auto". Raises UsageError for any other value."""
    value = os.environ.get("EDGESEQ_BACKEND", "").strip() or "auto"
    if value not in BACKENDS:
        raise UsageError(f"EDGESEQ_BACKEND is {value!r}; set it to one of {', '.join(BACKENDS)}, or unset it")
    return value


def native_refused(path, why: str, named: bool) -> UsageError:
    """The one-line error for backend 'native' where it cannot run; `named`: False when the
    backend came from $EDGESEQ_BACKEND rather than the caller."""
    source = "" if named else " (from $EDGESEQ_BACKEND)"
    why = why[len(f"'{path}': "):] if why.startswith(f"'{path}': ") else why
    return UsageError(f"backend 'native'{source} cannot run '{path}': {why}; use --backend onnxruntime "
                      "(or auto, which picks onnxruntime here)")


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=-1, keepdims=True)
    return z


def in_units(task: dict, outputs: np.ndarray) -> np.ndarray:
    """A regression model's outputs (normalised targets, float [..., K]) in the targets' own
    units: outputs x target_std + target_mean, float32, from the model's `edgeseq.task`."""
    return (np.asarray(outputs, np.float32) * np.asarray(task["target_std"], np.float32)
            + np.asarray(task["target_mean"], np.float32))


class ReadingChecks:
    """StreamSession's readings off the hot path (a mixin: it reads the session's streams,
    features, bounds and input buffer): conversion to float32 [streams, F] and the one-line
    ReadingError that names the stream, the channel and the value."""

    def _bad_reading(self, x, given=None) -> ReadingError:
        x = np.asarray(x)
        if x.ndim == 2 and x.shape[0] == self.streams and x.shape[1] != self.n_features:
            return ReadingError(f"reading has {x.shape[1]} values, the model expects {self.n_features} "
                                f"({', '.join(self.features)}); stream state unchanged")
        if x.shape != self._x.shape:
            return ReadingError(f"readings must be [{self.streams}, {self.n_features}] (streams, features), "
                                f"got {list(x.shape)}; stream state unchanged")
        ok = np.abs(x) <= self._hi if self._lo is None else (x >= self._lo) & (x <= self._hi)
        b, f = np.argwhere(~ok)[0]
        value = x[b, f] if given is None or given.size != x.size else given.reshape(x.shape)[b, f]
        where = f"reading for stream {b} has {value:g} in '{self.features[f]}'"
        if not np.isfinite(value):
            return ReadingError(f"{where}; drop or repair it, stream state unchanged")
        limit = f"|value| must be at most {float(self._hi[f]):.3g} there; " if self._lo is None else ""
        why = self._beyond[f] if isinstance(self._beyond, list) else self._beyond
        return ReadingError(f"{where}, beyond {why}; {limit}check the sensor and its units; "
                            "stream state unchanged")

    @staticmethod
    def _given(readings):
        try:
            return np.asarray(readings, np.float64)
        except (TypeError, ValueError, OverflowError):
            return None

    def _coerce(self, readings) -> np.ndarray:
        """Readings as float32 [streams, F] of real numbers; their range is checked on the hot path.
        Complex, boolean, text or object readings are refused: a silent conversion would drop an
        imaginary part or read True as 1."""
        if isinstance(readings, (bytes, bytearray, str)) or (isinstance(readings, memoryview) and
                                                             readings.format in ("B", "b", "c")):
            raise ReadingError(f"reading is {type(readings).__name__}, not numbers; decode it into numbers first "
                               "(e.g. float(...) per value); stream state unchanged")
        if isinstance(readings, np.ma.MaskedArray) and np.ma.is_masked(readings):
            raise ReadingError("reading has masked values; fill or drop them first (a masked value is no "
                               "measurement); stream state unchanged")
        try:
            a = np.asarray(readings)
        except (TypeError, ValueError, OverflowError):
            raise ReadingError("reading is not a rectangular array of numbers; stream state unchanged") from None
        if a.dtype.kind not in "fiu":
            raise ReadingError(f"reading is not numeric: it holds {DTYPE_WORDS.get(a.dtype.kind, str(a.dtype))} "
                               f"({a.dtype}); give real numbers; stream state unchanged")
        with np.errstate(over="ignore", invalid="ignore"):
            x = a.astype(np.float32, copy=False)         # beyond float32: Inf, refused by the range check
        if x.shape != self._x.shape and x.ndim == 1 and self.streams == 1:
            x = x.reshape(1, -1)
        if x.shape != self._x.shape:
            raise self._bad_reading(x)
        return x
