"""StreamSession: one reading per stream per call, state kept between calls.

Recurrent models hold a fixed state: two banks of state buffers and two pre-built IO bindings
that alternate (ping-pong), so a call copies the reading in, runs, and swaps an index; nothing
is allocated or re-bound. The Transformer's cache grows by one row per call: each call binds
the previous call's `present` outputs as the next `past` inputs where they lie, without copying.

A reading is checked (shape, finite values) before anything runs; a failed call leaves every
stream's state as it was.
"""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort

from edgeseq import contract
from edgeseq.errors import HistoryFullError, ReadingError, UsageError
from edgeseq.runtime.model import open_model
from edgeseq.runtime.providers import DEVICE

ON_FULL = ("error", "slide")


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=-1, keepdims=True)
    return z


class StreamSession:
    """Stream readings through an edgeseq step graph.

    >>> s = StreamSession("models/gru.onnx", streams=4)
    >>> probs = s.push(readings)        # [4, F] -> [4, C]
    >>> s.state_nbytes()                # bytes each stream holds now
    >>> snap = s.snapshot(); s.restore(snap); s.reset(stream=2)

    `max_history` bounds a Transformer's cache (default: the model's `edgeseq.max_history`,
    the window it was trained with, unbounded if none); when it is full, `on_full="error"`
    raises HistoryFullError and `on_full="slide"` drops the oldest reading. `on_full=None`
    slides a window the model was trained with and raises for a bound given here.
    `max_history=0` keeps every reading (no bound, whatever the model's default): the cache
    grows, though a model trained with a window still attends to that window only.
    """

    def __init__(self, model: str | os.PathLike, streams: int = 1, provider: str = "cpu",
                 max_history: int | None = None, on_full: str | None = None, threads: int = 1):
        if streams < 1:
            raise UsageError("streams must be at least 1")
        if on_full is None:
            on_full = "error" if max_history is not None else "slide"
        if on_full not in ON_FULL:
            raise UsageError(f"on_full must be one of {', '.join(ON_FULL)}, got '{on_full}'")
        self.path = str(model)
        self.session, self.meta = open_model(model, provider, threads)
        if self.meta.mode != "stream":
            raise UsageError(
                f"'{model}' is a {self.meta.arch} model: it reads whole windows in both directions and "
                "cannot stream one reading at a time; use `edgeseq eval` (WindowSession) or export a "
                "gru, lstm, rnn or transformer model to stream")
        self.streams = streams
        self.provider = provider
        self.device = DEVICE[provider]
        self.labels = list(self.meta.labels)
        self.features = list(self.meta.features)
        self.n_features = len(self.features)
        self.growing = any(s.kind == contract.KIND_GROWING for s in self.meta.state)
        if max_history is not None and max_history < 0:
            raise UsageError("max_history must be at least 1 (or 0: no bound)")
        self.max_history = self.meta.max_history if max_history is None else (max_history or None)
        if self.max_history is not None and not self.growing:
            self.max_history = None          # a fixed state has no history to bound
        self.on_full = on_full
        self._has_position = contract.POSITION in {i.name for i in self.session.get_inputs()}
        # Readings each stream has seen. A cache model feeds it to the graph, so it is an array
        # that advances in place; a fixed-state model only counts, so a Python int (cheaper).
        self._pos = np.zeros(streams, np.int64)
        self._calls = 0
        self._x = np.zeros((streams, self.n_features), np.float32)
        self._x_ort = ort.OrtValue.ortvalue_from_numpy(self._x)
        self._logits = np.zeros((streams, len(self.labels)), np.float32)
        self._logits_ort = ort.OrtValue.ortvalue_from_numpy(self._logits)
        self._has_probs = contract.PROBS in {o.name for o in self.session.get_outputs()}
        self._probs = np.zeros_like(self._logits)
        self._probs_ort = ort.OrtValue.ortvalue_from_numpy(self._probs)
        self._pos_ort = ort.OrtValue.ortvalue_from_numpy(self._pos)
        self.reset()

    # -- state ---------------------------------------------------------------------------

    def _zeros(self, spec: contract.StateSpec, history: int = 0) -> ort.OrtValue:
        shape = [self.streams if d == contract.BATCH_AXIS else history if d == contract.HISTORY_AXIS else d
                 for d in spec.shape]
        return ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, np.float32), self.device, 0)

    def _bind_fixed(self, inputs, outputs) -> ort.IOBinding:
        b = self.session.io_binding()
        b.bind_ortvalue_input(contract.READING, self._x_ort)
        if self._has_position:
            b.bind_ortvalue_input(contract.POSITION, self._pos_ort)
        for spec, v in zip(self.meta.state, inputs):
            b.bind_ortvalue_input(spec.name, v)
        b.bind_ortvalue_output(contract.LOGITS, self._logits_ort)
        if self._has_probs:
            b.bind_ortvalue_output(contract.PROBS, self._probs_ort)
        for spec, v in zip(self.meta.state, outputs):
            b.bind_ortvalue_output(spec.output, v)
        return b

    def reset(self, stream: int | None = None) -> None:
        """Forget the history of one stream, or of all streams (stream=None)."""
        if stream is not None:
            self._check_stream(stream)
            if not self.growing:             # a cache stream's old rows are masked from now on
                for v in self._state:
                    a = v.numpy()
                    a[stream] = 0.0
                    v.update_inplace(a)
            self._set_position(stream, 0)
            return
        self._set_position(slice(None), 0)
        if self.growing:
            self._state = [self._zeros(s, 0) for s in self.meta.state]
            b = self._binding = self.session.io_binding()
            # Reading, position and logits live in fixed buffers: bound once. The cache is
            # re-bound every call since it grows.
            b.bind_ortvalue_input(contract.READING, self._x_ort)
            b.bind_ortvalue_input(contract.POSITION, self._pos_ort)
            b.bind_ortvalue_output(contract.LOGITS, self._logits_ort)
            if self._has_probs:
                b.bind_ortvalue_output(contract.PROBS, self._probs_ort)
        else:
            banks = [[self._zeros(s) for s in self.meta.state] for _ in range(2)]
            self._bindings = [self._bind_fixed(banks[0], banks[1]), self._bind_fixed(banks[1], banks[0])]
            self._banks = banks
            self._bank = 0
            self._state = banks[0]

    @property
    def position(self) -> np.ndarray:
        """Readings each stream has seen since it started or was reset (a copy)."""
        if self.growing:
            return self._pos.copy()
        return self._calls - self._pos

    def _set_position(self, index, value):
        if self.growing:
            self._pos[index] = value
        else:
            self._pos[index] = self._calls - np.asarray(value)   # stores the call count at the start

    def _check_stream(self, stream):
        if not 0 <= stream < self.streams:
            raise UsageError(f"stream {stream} does not exist; this session has streams 0..{self.streams - 1}")

    @property
    def history(self) -> int:
        """Rows in the shared cache (Transformer), 0 for a fixed state."""
        if not self.growing:
            return 0
        return int(self._state[0].shape()[2])

    def state_nbytes(self) -> int:
        """Bytes of state each stream holds now: flat for recurrent models, growing for a cache."""
        return sum(int(np.prod(v.shape()[1:])) * 4 for v in self._state)

    def state_nbytes_at(self, history: int) -> int:
        """Bytes one stream would hold after `history` readings (bounded by max_history)."""
        if self.max_history is not None:
            history = min(history, self.max_history)
        return sum(s.bytes_per_reading() * (history if s.kind == contract.KIND_GROWING else 1)
                   for s in self.meta.state)

    def snapshot(self) -> dict:
        """A copy of every stream's state and position, for `restore` (or to save to disk)."""
        return {"model": self.path, "position": self.position,
                "state": [v.numpy().copy() for v in self._state]}

    def restore(self, snap: dict) -> None:
        arrays = snap["state"]
        if len(arrays) != len(self.meta.state) or len(snap["position"]) != self.streams:
            raise UsageError("snapshot does not match this model and stream count")
        for spec, cur, new in zip(self.meta.state, self._state, arrays):
            want = cur.shape()
            if spec.kind == contract.KIND_GROWING:
                if list(new.shape[:2]) + list(new.shape[3:]) != want[:2] + want[3:]:
                    raise UsageError("snapshot does not match this model and stream count")
            elif list(new.shape) != want:
                raise UsageError("snapshot does not match this model and stream count")
        if self.growing:
            self._state = [ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(a, np.float32), self.device, 0)
                           for a in arrays]
        else:
            for v, a in zip(self._state, arrays):
                v.update_inplace(np.ascontiguousarray(a, np.float32))
        self._set_position(slice(None), np.asarray(snap["position"], np.int64))

    # -- the hot path --------------------------------------------------------------------

    def _bad_reading(self, x) -> ReadingError:
        x = np.asarray(x)
        if x.ndim == 2 and x.shape[0] == self.streams and x.shape[1] != self.n_features:
            return ReadingError(f"reading has {x.shape[1]} values, the model expects {self.n_features} "
                                f"({', '.join(self.features)}); stream state unchanged")
        if x.shape != self._x.shape:
            return ReadingError(f"readings must be [{self.streams}, {self.n_features}] (streams, features), "
                                f"got {list(x.shape)}; stream state unchanged")
        b, f = np.argwhere(~np.isfinite(x))[0]
        return ReadingError(f"reading for stream {b} has {x[b, f]} in '{self.features[f]}'; "
                            "drop or repair it, stream state unchanged")

    def check_reading(self, readings) -> np.ndarray:
        """Readings as float32 [streams, F], or ReadingError naming the problem."""
        x = self._coerce(readings)
        if not np.isfinite(x).all():
            raise self._bad_reading(x)
        return x

    def _coerce(self, readings) -> np.ndarray:
        """Readings as float32 [streams, F]; finiteness is checked on the hot path."""
        try:
            x = np.asarray(readings, dtype=np.float32)
        except (TypeError, ValueError):
            raise ReadingError("reading is not numeric; stream state unchanged") from None
        if x.shape != self._x.shape and x.ndim == 1 and self.streams == 1:
            x = x.reshape(1, -1)
        if x.shape != self._x.shape:
            raise self._bad_reading(x)
        return x

    def push_logits(self, readings) -> np.ndarray:
        """Advance every stream by one reading; returns logits [streams, classes] (a view, copy to keep)."""
        x = readings
        if type(x) is not np.ndarray or x.dtype != np.float32 or x.shape != self._x.shape:
            x = self._coerce(x)
        # The input buffer is not state: filling it before the check loses nothing.
        np.copyto(self._x, x)
        if not np.isfinite(self._x).all():
            raise self._bad_reading(x)
        if self.growing:
            self._step_cache()
            self._pos += 1
        else:
            self.session.run_with_iobinding(self._bindings[self._bank])
            self._bank ^= 1
            self._state = self._banks[self._bank]
            self._calls += 1
        return self._logits

    def push(self, readings) -> np.ndarray:
        """Advance every stream by one reading; returns class probabilities [streams, classes]."""
        logits = self.push_logits(readings)
        return self._probs.copy() if self._has_probs else softmax(logits.copy())

    def _step_cache(self):
        past = self._state
        T = int(past[0].shape()[2])
        if self.max_history is not None and T >= self.max_history:
            if self.on_full == "error":
                raise HistoryFullError(
                    f"history is full ({self.max_history} readings); reset the stream, raise max_history "
                    "or slide (on_full='slide', --on-full slide); stream state unchanged")
            keep = self.max_history - 1
            past = [ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v.numpy()[:, :, T - keep:]), self.device, 0)
                    for v in past]
        b = self._binding
        for spec, v in zip(self.meta.state, past):
            b.bind_ortvalue_input(spec.name, v)
        for spec in self.meta.state:
            b.bind_output(spec.output, self.device)
        self.session.run_with_iobinding(b)
        self._state = b.get_outputs()[2 if self._has_probs else 1:]

    def run(self, sequence) -> np.ndarray:
        """Push a whole [T, streams, F] array; returns probabilities [T, streams, C]."""
        return np.stack([self.push(x) for x in sequence])


class WindowSession:
    """Whole-window classification for models that cannot stream (bidirectional)."""

    def __init__(self, model: str | os.PathLike, provider: str = "cpu", threads: int = 0):
        self.path = str(model)
        self.session, self.meta = open_model(model, provider, threads)
        self.labels = list(self.meta.labels)
        self.n_features = len(self.meta.features)

    def predict_logits(self, windows, lengths=None) -> np.ndarray:
        x = np.asarray(windows, np.float32)
        if x.ndim != 3 or x.shape[2] != self.n_features:
            raise ReadingError(f"windows must be [N, T, {self.n_features}], got {list(x.shape)}")
        if lengths is None:
            lengths = np.full(len(x), x.shape[1], np.int64)
        lengths = np.asarray(lengths, np.int64)
        mask = np.arange(x.shape[1])[None, :] < lengths[:, None]
        if not np.isfinite(x[mask]).all():
            raise ReadingError("windows hold NaN or Inf; drop or repair them")
        feeds = {contract.WINDOW: x}
        if contract.LENGTHS in {i.name for i in self.session.get_inputs()}:
            feeds[contract.LENGTHS] = lengths
        return self.session.run([contract.LOGITS], feeds)[0]

    def predict(self, windows, lengths=None) -> np.ndarray:
        return softmax(self.predict_logits(windows, lengths))
