"""StreamSession: one reading per stream per call, state kept between calls.

Recurrent models hold a fixed state: two banks of state buffers and two pre-built IO bindings
that alternate (ping-pong), so a call copies the reading in, runs, and swaps an index; nothing
is allocated or re-bound. The Transformer's cache grows by one row per call: each call binds
the previous call's `present` outputs as the next `past` inputs where they lie, without copying.
On the native backend the C step holds the state (a Transformer's cache as a ring of rows per
stream, `edgeseq.runtime.native.attn`) and one C call copies, checks and steps.

A reading is checked (shape, real numbers, within READING_SIGMAS training standard deviations
of the training mean: NaN and Inf fail the same comparison) before anything runs, and a step
whose logits are not finite is not adopted; a failed call leaves every stream's state as it
was. A snapshot is checked whole before any of it is restored.

A model whose output for one stream depends on the other rows of its call (dynamic int8:
`quantize_dynamic` scales a call's activations over the whole batch) runs each stream in its
own batch-1 call, through per-stream sub-sessions that share the one InferenceSession, so that
streams never affect each other.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Mapping
from math import isfinite

import numpy as np
import onnxruntime as ort

from edgeseq import contract
from edgeseq.errors import HistoryFullError, ReadingError, UsageError
from edgeseq.runtime.model import load_model, open_model
from edgeseq.runtime.providers import DEVICE

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
STATE_BOUND = 2.0 ** 64          # SSM state, KV cache: projections of LayerNorm outputs, far below this
# The safety net's dot product turns +Inf and -Inf logits together into NaN, which numpy reports
# as an "invalid value" warning; a non-finite result is exactly what the net looks for.
warnings.filterwarnings("ignore", "invalid value encountered in dot", RuntimeWarning, r"edgeseq\.runtime\.session")
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
    Without normalization metadata |x| <= float32 max / 4."""
    norm = meta.normalization
    if norm is None:
        return np.full(n, NO_NORM_LIMIT, np.float32), None, "float32 max / 4, the most this model takes"
    with np.errstate(over="ignore", invalid="ignore"):
        mean = np.asarray(norm["mean"], np.float64)
        s = np.asarray(norm["std"], np.float64) * np.asarray(norm.get("input_scale") or [1.0] * n, np.float64)
        half = np.minimum(READING_SIGMAS * s, NO_NORM_LIMIT)
        m = np.abs(mean)
        why = f"{READING_SIGMAS:.0e} standard deviations of the training data".replace("e+", "e")
        if (m <= half / 2).all():            # then |x - mean| <= 2 * half <= float32 max / 2
            return (m + half).astype(np.float32), None, why
        lo = np.clip(mean - half, -F32_MAX, F32_MAX).astype(np.float32)
        hi = np.clip(mean + half, -F32_MAX, F32_MAX).astype(np.float32)
    return hi, lo, why


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


class StreamSession:
    """Stream readings through an edgeseq step graph.

    >>> s = StreamSession("models/gru.onnx", streams=4)
    >>> probs = s.push(readings)        # float32 [4, F] -> float32 [4, C], a copy
    >>> s.state_nbytes()                # bytes each stream holds now
    >>> snap = s.snapshot(); s.restore(snap); s.reset(stream=2)

    `max_history` bounds a Transformer's cache (default: the model's `edgeseq.max_history`,
    the window it was trained with, unbounded if none); when it is full, `on_full="error"`
    raises HistoryFullError and `on_full="slide"` drops the oldest reading. `on_full=None`
    slides a window the model was trained with and raises for a bound given here.
    `max_history=0` keeps every reading (no bound, whatever the model's default): the cache
    grows, though a model trained with a window still attends to that window only.

    Streams are independent: for a model whose batch rows interact (dynamic int8, see
    `ModelMeta.batch_dependent`) each stream runs in its own batch-1 call; snapshot, restore,
    reset, position, history and state_nbytes behave as for a batched session.

    Thread-safe: a session may be shared between threads. push, push_logits, reset, snapshot,
    restore and the position/history/state_nbytes reads are serialized by one lock (an
    uncontended lock adds well under a microsecond to a push of tens of microseconds), so
    concurrent pushes are applied one after the other and none is lost. `push` returns a copy
    made under the lock; `push_logits` returns a view of the session's buffer that the next
    call (from any thread) overwrites.

    Backends: `backend="onnxruntime"` runs the ONNX graph; `"native"` runs RNN, GRU, LSTM,
    SSM and Transformer models (float32 and static int8, read from the same .onnx) through a
    compiled C step (`edgeseq.runtime.native`: float within float32 rounding of onnxruntime;
    RNN/GRU/LSTM int8 the firmware's integer arithmetic, bit-exact with `firmware simulate`, so
    its logits differ from onnxruntime's QDQ int8 by quantization-sized amounts; SSM and
    Transformer int8 onnxruntime's own QDQ arithmetic, their state float32). A native
    Transformer keeps its KV cache as a ring of rows per stream (the window, or max_history
    where smaller; doubling where neither bounds it): the same history, max_history, on_full,
    positions and snapshots (past.{l}.key/value, rows no step can see again as zeros) as on
    onnxruntime, and `state_nbytes` counts the rows the ring holds. `"auto"` (default) picks
    native where it can run and onnxruntime otherwise (dynamic int8, window models, CUDA, no
    built extension, a file whose graph and native step disagree on the probe, any failure to
    build the native step). `session.backend` says which runs, and `session.backend_note` why
    auto chose onnxruntime (one line; None where native runs or onnxruntime was asked for).
    `backend="native"` where it cannot run raises UsageError saying why. `backend=None`
    (default) takes $EDGESEQ_BACKEND, or "auto" when it is unset. State, snapshot/restore,
    reset, the reading checks and state files behave the same on both.

    The model file is read once: onnxruntime, the metadata and the native step all take its
    weights from those bytes, whose sha256 is `session.model_sha256` (what a state file names).

    Raises ModelFileError / ProviderError (model), UsageError (bad settings).
    """

    def __init__(self, model: str | os.PathLike, streams: int = 1, provider: str = "cpu",
                 max_history: int | None = None, on_full: str | None = None, threads: int = 1,
                 backend: str | None = None):
        if not _whole(streams) or not 1 <= streams <= MAX_STREAMS:
            raise UsageError(f"streams must be a whole number from 1 to {MAX_STREAMS:,}, got {streams!r}")
        if max_history is not None and (not _whole(max_history) or not 0 <= max_history <= MAX_HISTORY):
            raise UsageError(f"max_history must be a whole number from 1 to {MAX_HISTORY:,} (or 0: no bound), "
                             f"got {max_history!r}")
        if on_full is None:
            on_full = "error" if max_history is not None else "slide"
        if not isinstance(on_full, str) or on_full not in ON_FULL:
            raise UsageError(f"on_full must be one of {', '.join(ON_FULL)}, got {on_full!r}")
        if not _whole(threads) or not 0 <= threads <= MAX_THREADS:
            raise UsageError(f"threads must be a whole number from 0 (onnxruntime's default) to {MAX_THREADS}, "
                             f"got {threads!r}")
        session, meta, loaded = load_model(model, provider, int(threads))
        if meta.mode != "stream":
            raise UsageError(
                f"'{model}' is a {meta.arch} model: it reads whole windows in both directions and "
                "cannot stream one reading at a time; use `edgeseq eval` (WindowSession) or export a "
                "gru, lstm, rnn or transformer model to stream")
        if max_history is not None and not any(s.kind == contract.KIND_GROWING for s in meta.state):
            raise UsageError(f"max_history (--max-history) applies to the transformer only; a {meta.arch} "
                             "model's recurrent state is fixed, it has no history to bound")
        bound = meta.max_history if max_history is None else (int(max_history) or None)
        native_step, note = self._choose_backend(backend, meta, str(model), provider, int(streams), session, bound,
                                                 on_full, loaded)
        self._setup(session, meta, str(model), int(streams), provider, bound, on_full, native_step=native_step)
        self.model_sha256 = loaded.sha256
        self.backend_note = note

    @staticmethod
    def _choose_backend(backend, meta, path, provider, streams, session, max_history=None, on_full="slide",
                        loaded=None) -> tuple:
        """(the native step to run on (`native.open_step`), or None for onnxruntime; why auto
        chose onnxruntime, or None). See the class docstring. A file the native step accepts
        runs side by side with its graph on a few probe readings first (`native.probe`): where
        they disagree, the graph wins. Whatever stops the native step from being built (a
        refusal, or any other failure of its constructor) sends auto to onnxruntime with the
        reason, and is refused in one line under backend 'native'. `loaded`: the
        `edgeseq.runtime.model.ModelFile` the session was opened from (the weights come from
        its bytes, never from a second read of the file)."""
        named = backend
        backend = default_backend() if backend is None else backend
        if not isinstance(backend, str) or backend not in BACKENDS:
            raise UsageError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if backend == "onnxruntime":
            return None, None
        from edgeseq.errors import EdgeseqError
        from edgeseq.runtime import native
        graph = None if loaded is None else loaded.graph
        why = native.why_unavailable() if not native.available() else None
        if why is None and provider != "cpu":
            why = f"the native step runs on the CPU; provider '{provider}' needs onnxruntime"
        if why is None and loaded is not None and graph is None:
            why = loaded.graph_error or f"'{path}' could not be read by the native backend"
        step = None
        try:
            if why is None:
                why = native.supports(meta, path, graph)
            if why is None:
                why = native.probe(native.open_step(path, meta, native.PROBE_STREAMS, max_history, graph=graph),
                                   session)
                if why is None:
                    step = native.open_step(path, meta, streams, max_history, on_full, graph=graph)
        except EdgeseqError as e:
            why = str(e).splitlines()[0]
        except Exception as e:                  # any other failure to build the step: the graph runs instead
            first = str(e).strip().splitlines()[0][:120] if str(e).strip() else ""
            why = f"the native step could not be built ({type(e).__name__}{': ' + first if first else ''})"
        if why is not None:
            if backend == "native":
                raise native_refused(path, why, named is not None)
            return None, why
        return step, None

    def _setup(self, session, meta, path, streams, provider, max_history, on_full, each=None, native_step=None):
        """Everything but opening the model: shared by the session and its per-stream sub-sessions."""
        self._native = native_step
        self.backend = "native" if native_step is not None else "onnxruntime"
        self.backend_note = None
        self.path = path
        self.session, self.meta = session, meta
        self.streams = streams
        self.provider = provider
        self.device = DEVICE[provider]
        self.labels = list(meta.labels)
        self.features = list(meta.features)
        self.n_features = len(self.features)
        self.growing = any(s.kind == contract.KIND_GROWING for s in meta.state)
        self.max_history = max_history if self.growing else None    # a fixed state has no history to bound
        self.on_full = on_full
        self._lock = threading.Lock()
        self._has_position = contract.POSITION in {i.name for i in session.get_inputs()}
        # Readings each stream has seen. A cache model feeds it to the graph, so it advances in
        # place; a fixed-state model only counts calls and stores the call count at each stream's start.
        self._pos = np.zeros(streams, np.int64) if native_step is None or not self.growing else native_step.pos
        self._count = np.zeros(1, np.int64)      # calls made (one C push adds to it in place)
        self._x = np.zeros((streams, self.n_features), np.float32) if native_step is None else native_step.x
        self._hi, self._lo, self._beyond = reading_bounds(meta, self.n_features)
        self._logits = np.zeros((streams, len(self.labels)), np.float32) if native_step is None else native_step.logits
        # The safety net: logits . 2^-64 is finite exactly when every logit is (one dot, about
        # 0.4 us; np.isfinite(...).all() costs 1.4 us). The scale keeps the sum of any finite
        # logits finite, and Inf x 2^-64 stays Inf with no "invalid value" warning (Inf x 0 would
        # warn); only +Inf and -Inf together still do, which the filter above silences.
        self._logits_flat = self._logits.reshape(-1)
        self._scale_c = np.full_like(self._logits_flat, 2.0 ** -64)
        self._has_probs = contract.PROBS in {o.name for o in session.get_outputs()} or native_step is not None
        self._probs = np.zeros_like(self._logits) if native_step is None else native_step.probs
        self._gate = None
        if native_step is not None:      # the C step holds state, readings and outputs in these buffers
            native_step.set_bounds(self._hi, self._lo)
            from edgeseq.runtime import native
            fast = native.pusher(native_step, self._probs, self._count, self._push)
            if fast is not None:         # push in one C call; anything but an adopted step takes _push
                self._lock, self.push = fast
            self._subs = None
            self._reset(None)
            return
        if each is None:
            each = meta.batch_dependent and streams > 1
        if each:                         # one batch-1 sub-session per stream, the same InferenceSession
            self._subs = []
            for _ in range(streams):
                sub = StreamSession.__new__(StreamSession)
                sub._setup(session, meta, path, 1, provider, self.max_history, on_full, each=False)
                self._subs.append(sub)
            return
        self._subs = None
        from edgeseq.runtime import native      # numpy only; the checks in C where the extension is built
        self._gate = native.gate(self._x, self._hi, self._lo, self._logits)
        # The safety net before a step is adopted: every logit of the call finite.
        self._finite = self._gate.finite if self._gate is not None else self._dot_finite
        self._x_ort = ort.OrtValue.ortvalue_from_numpy(self._x)
        self._logits_ort = ort.OrtValue.ortvalue_from_numpy(self._logits)
        self._probs_ort = ort.OrtValue.ortvalue_from_numpy(self._probs)
        self._pos_ort = ort.OrtValue.ortvalue_from_numpy(self._pos)
        self._reset(None)

    # -- state ---------------------------------------------------------------------------

    def _zeros(self, spec: contract.StateSpec, history: int = 0) -> ort.OrtValue:
        return ort.OrtValue.ortvalue_from_numpy(np.zeros(self._shape(spec, history), np.float32), self.device, 0)

    def _shape(self, spec: contract.StateSpec, history: int) -> list:
        return [self.streams if d == contract.BATCH_AXIS else history if d == contract.HISTORY_AXIS else d
                for d in spec.shape]

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
        """Forget the history of one stream, or of all streams (stream=None).

        Raises UsageError for a stream that does not exist."""
        with self._lock:
            self._reset(stream)

    def _reset(self, stream):
        if stream is not None:
            self._check_stream(stream)
        if self._native is not None:
            self._native.reset(stream)
            self._set_position(slice(None) if stream is None else stream, 0)
            return
        if self._subs is not None:
            for i, sub in enumerate(self._subs):
                if stream is None or i == stream:
                    sub._reset(None if stream is None else 0)
            return
        if stream is not None:
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
            if self._has_position:
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
        """Readings each stream has seen since it started or was reset: int64 [streams], a copy."""
        with self._lock:
            return self._position()

    @property
    def _calls(self) -> int:
        return int(self._count[0])

    @_calls.setter
    def _calls(self, value: int) -> None:
        self._count[0] = value

    def _position(self) -> np.ndarray:
        if self._subs is not None:
            return np.concatenate([s._position() for s in self._subs])
        if self.growing:
            return self._pos.copy()
        return self._calls - self._pos

    def _set_position(self, index, value):
        if self.growing:
            self._pos[index] = value
        else:
            self._pos[index] = self._calls - np.asarray(value)   # stores the call count at the start

    def _check_stream(self, stream):
        if isinstance(stream, bool) or not isinstance(stream, (int, np.integer)) or not 0 <= stream < self.streams:
            raise UsageError(f"stream {stream!r} does not exist; this session has streams 0..{self.streams - 1}")

    @property
    def history(self) -> int:
        """Rows in the shared cache (Transformer), 0 for a fixed state."""
        with self._lock:
            return self._history()

    def _history(self) -> int:
        if self._subs is not None:
            return self._subs[0]._history()          # the sub-sessions advance and slide together
        if not self.growing:
            return 0
        if self._native is not None:
            return self._native.history              # counted as the graph's shared cache would hold it
        return int(self._state[0].shape()[contract.GROWING_HISTORY_AXIS])

    def state_nbytes(self) -> int:
        """Bytes of state each stream holds now: flat for recurrent models, growing for a cache."""
        with self._lock:
            if self._native is not None:           # a native cache: the rows its ring holds per stream
                rows = self._native.rows_held() if self.growing else 1
                return rows * sum(s.bytes_per_reading() for s in self.meta.state)
            if self._subs is not None:
                return self._subs[0].state_nbytes()
            return sum(int(np.prod(v.shape()[1:])) * 4 for v in self._state)

    def state_nbytes_at(self, history: int) -> int:
        """Bytes one stream would hold after `history` readings (bounded by max_history, and on
        the native backend by the window its ring keeps)."""
        if self.max_history is not None:
            history = min(history, self.max_history)
        if self._native is not None and self.growing and self._native.window:
            history = min(history, self._native.window)
        return sum(s.bytes_per_reading() * (history if s.kind == contract.KIND_GROWING else 1)
                   for s in self.meta.state)

    def snapshot(self) -> dict:
        """A copy of every stream's state and position, for `restore` (or to save to disk):
        {"model": path, "position": int64 [streams], "state": [float32 array per
        `meta.state` entry, batch axis first (streams, ...); a cache has `history` rows on axis 2]}."""
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> dict:
        if self._subs is not None:
            parts = [s._snapshot() for s in self._subs]
            return {"model": self.path, "position": np.concatenate([p["position"] for p in parts]),
                    "state": [np.concatenate([p["state"][i] for p in parts]) for i in range(len(self.meta.state))]}
        if self._native is not None:
            return {"model": self.path, "position": self._position(), "state": [a.copy() for a in self._native.state]}
        return {"model": self.path, "position": self._position(),
                "state": [v.numpy().copy() for v in self._state]}

    def restore(self, snap: dict) -> None:
        """Replace every stream's state and position with `snap` (from `snapshot`, or a state file).

        Everything is checked before anything changes: keys, the number of state tensors, each
        one's shape (streams first; a cache's history rows on axis 2, the same for all and
        within max_history), a real-number dtype whose values are finite in float32, and
        positions (integers >= 0, one per stream); values the model can write (`_state_bound`:
        RNN/GRU/LSTM h within [-1, 1], an LSTM cell within what a step reaches, any other state
        within STATE_BOUND); and one step from the restored state, at the training mean, on
        this session's backend, must give finite logits and state. Raises UsageError naming
        what is wrong; the session is then exactly as it was."""
        with self._lock:
            position, arrays = self._check_snapshot(snap)
            self._apply_probed(position, arrays)

    def _state_bound(self, spec: contract.StateSpec) -> tuple:
        """(largest |value| the model writes into state `spec`, why): see `restore`."""
        arch, role = self.meta.arch, spec.role
        if not role and arch in ("rnn", "gru") and spec.kind == contract.KIND_FIXED:
            role = "h."
        if arch in ("rnn", "gru", "lstm") and role.startswith("h."):
            name = "a GRU" if arch == "gru" else f"an {arch.upper()}"
            return STATE_H_BOUND, f"{name}'s hidden state is a tanh output, within [-1, 1]"
        if arch == "lstm" and role.startswith("c."):
            if self._native is not None and getattr(self._native, "_integer", False):
                return STATE_C_BOUND_INT8, "the native int8 step holds an LSTM cell as int32 Q15, within +-65536"
            return STATE_C_BOUND, "an LSTM cell moves by at most 1 a reading, and no further than 2^25 in float32"
        return STATE_BOUND, "more than this model's state reaches from any reading (2^64)"

    def _probe_readings(self) -> np.ndarray:
        norm = self.meta.normalization
        mean = np.zeros(self.n_features) if norm is None else np.asarray(norm["mean"], np.float64)
        return np.ascontiguousarray(np.broadcast_to(mean.astype(np.float32), (self.streams, self.n_features)))

    def _graph_probe(self, position: np.ndarray, arrays: list):
        """The first stream whose step from `arrays` (at the training mean) gives NaN or Inf
        logits or state in the graph (onnxruntime; batch-1 calls where streams interact), or
        None. Changes nothing."""
        x = self._probe_readings()
        names = [contract.LOGITS] + [s.output for s in self.meta.state]
        rows = [slice(i, i + 1) for i in range(self.streams)] if self.meta.batch_dependent else [slice(None)]
        with np.errstate(all="ignore"):
            for r in rows:
                feeds = {contract.READING: x[r], **{s.name: np.ascontiguousarray(a[r])
                                                    for s, a in zip(self.meta.state, arrays)}}
                if self._has_position:
                    feeds[contract.POSITION] = np.ascontiguousarray(position[r])
                out = self.session.run(names, feeds)
                ok = np.ones(out[0].shape[0], bool)
                for v in out:
                    ok &= np.isfinite(v.reshape(v.shape[0], -1)).all(axis=1)
                if not ok.all():
                    return int(np.argmin(ok)) + (r.start or 0)
        return None

    def _apply_probed(self, position: np.ndarray, arrays: list) -> None:
        """`_apply`, once one step from the restored state gives finite logits on this
        session's backend (see `restore`); UsageError and the session as it was otherwise."""
        nat = self._native
        if nat is None or getattr(nat, "_integer", False):   # integer logits are always finite
            bad = self._graph_probe(position, arrays) if nat is None else None
        else:
            old_position, old_state = self._position(), [a.copy() for a in nat.state]
            self._apply(position, arrays)
            np.copyto(nat.x, self._probe_readings())
            with np.errstate(all="ignore"):
                rc = nat.run()
                if rc == -5:
                    nat.grow()
                    rc = nat.run()
            bad = self._graph_probe(position, arrays) if rc == -4 else (rc if rc >= 0 else None)
            if bad is not None:
                self._apply(old_position, old_state)
        if bad is not None:
            raise UsageError(f"snapshot state gives NaN or Inf for stream {bad} one step on (at the training mean): "
                             "this model cannot have written it; session state unchanged")
        self._apply(position, arrays)

    def _check_snapshot(self, snap) -> tuple:
        """(int64 [streams] positions, [float32 C-contiguous arrays]) from a snapshot, or UsageError."""
        def bad(what):
            return UsageError(f"snapshot {what}; session state unchanged")
        if not isinstance(snap, Mapping):
            raise bad(f"must be a dict with 'state' and 'position' (from snapshot()), got {type(snap).__name__}")
        for key in ("state", "position"):
            if key not in snap:
                raise bad(f"lacks '{key}'")
        arrays = snap["state"]
        if not isinstance(arrays, (list, tuple)):
            raise bad(f"'state' must be a list of arrays, got {type(arrays).__name__}")
        specs = self.meta.state
        if len(arrays) != len(specs):
            raise bad(f"holds {len(arrays)} state tensors, this model has {len(specs)}")
        out, history = [], None
        for i, (spec, a) in enumerate(zip(specs, arrays)):
            what = f"state {i} ('{spec.name}')"
            try:
                a = np.asarray(a)
            except (ValueError, TypeError):
                raise bad(f"{what} is not an array") from None
            if a.dtype.kind not in "fiu":
                raise bad(f"{what} has dtype {a.dtype}; it must hold real numbers (float32)")
            if a.ndim != len(spec.shape):
                raise bad(f"{what} has shape {list(a.shape)}; this session needs {self._shape(spec, 'history')}")
            if spec.kind == contract.KIND_GROWING:
                t = a.shape[contract.GROWING_HISTORY_AXIS]
                if history is not None and t != history:
                    raise bad(f"{what} has {t} history rows, an earlier tensor {history}; they must agree")
                history = t
            want = self._shape(spec, history)
            if list(a.shape) != want:
                raise bad(f"{what} has shape {list(a.shape)}; this session needs {want} (streams first)")
            with np.errstate(over="ignore", invalid="ignore"):
                f = np.ascontiguousarray(a, np.float32)
            if f is a:
                f = f.copy()                 # never share memory with the caller's arrays
            if not np.isfinite(f).all():
                raise bad(f"{what} holds NaN or Inf (or values beyond float32's range)")
            bound, why = self._state_bound(spec)
            beyond = np.abs(f) > bound
            if beyond.any():
                at = np.unravel_index(int(np.argmax(beyond)), f.shape)
                raise bad(f"{what} holds {float(f[at]):g} (stream {at[0]}), beyond +-{bound:g}: {why}; this model "
                          "cannot have written it")
            out.append(f)
        if history is not None and self.max_history is not None and history > self.max_history:
            raise bad(f"holds {history} history rows, more than this session's max_history {self.max_history}")
        if history is not None and history > MAX_HISTORY:
            raise bad(f"holds {history} history rows, more than any model takes ({MAX_HISTORY:,})")
        try:
            p = np.asarray(snap["position"])
        except (ValueError, TypeError):
            raise bad("'position' is not an array") from None
        if p.dtype.kind not in "iu":
            raise bad(f"'position' has dtype {p.dtype}; it must hold whole numbers of readings")
        if p.shape != (self.streams,):
            raise bad(f"'position' has shape {list(p.shape)}; this session needs [{self.streams}] (one per stream)")
        if p.size and (int(p.min()) < 0 or int(p.max()) > MAX_POSITION):
            raise bad(f"'position' holds {int(p.min()) if int(p.min()) < 0 else int(p.max())}; "
                      "positions are readings seen, >= 0")
        return p.astype(np.int64), out

    def _apply(self, position: np.ndarray, arrays: list) -> None:
        """Install checked state (see `_check_snapshot`): nothing here can fail half way."""
        if self._native is not None:
            if self.growing:                             # the ring lays its rows out by position
                self._native.set_state(arrays, position)
            else:
                self._native.set_state(arrays)
            self._set_position(slice(None), position)
            return
        if self._subs is not None:
            for i, sub in enumerate(self._subs):
                sub._apply(position[i:i + 1], [np.ascontiguousarray(a[i:i + 1]) for a in arrays])
            return
        if self.growing:
            self._state = [ort.OrtValue.ortvalue_from_numpy(a, self.device, 0) for a in arrays]
        else:
            for v, a in zip(self._state, arrays):
                v.update_inplace(a)
        self._set_position(slice(None), position)

    # -- the hot path --------------------------------------------------------------------

    def _in_range(self, x) -> bool:
        """The reading check (float32 [streams, F]): one comparison; False for NaN and Inf too."""
        if self._lo is None:
            return np.count_nonzero(np.abs(x) <= self._hi) == x.size
        return np.count_nonzero((x >= self._lo) & (x <= self._hi)) == x.size

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
        return ReadingError(f"{where}, beyond {self._beyond}; check the sensor and its units; "
                            "stream state unchanged")

    def check_reading(self, readings) -> np.ndarray:
        """Readings as float32 [streams, F], or ReadingError naming the problem."""
        x = self._coerce(readings)
        if not self._in_range(x):
            raise self._bad_reading(x, self._given(readings))
        return x

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

    def _nonfinite(self, stream=None) -> ReadingError:
        where = "" if stream is None else f" for stream {stream}"
        return ReadingError(f"the model gave NaN or Inf{where} from this reading (its state or weights are out of "
                            "range); the step was not applied, stream state unchanged")

    def push_logits(self, readings) -> np.ndarray:
        """Advance every stream by one reading (real numbers [streams, F]; [F] for one stream).
        Returns logits float32 [streams, classes]: a view of the session's buffer, valid until
        the next call on this session from any thread; copy it to keep it.
        Raises ReadingError (shape; complex, boolean or other non-real values; NaN/Inf; a value
        beyond READING_SIGMAS training standard deviations; logits that come out NaN/Inf) or
        HistoryFullError, with every stream's state unchanged."""
        with self._lock:
            return self._advance_batch(readings) if self._subs is None else self._advance_each(readings)

    def push(self, readings) -> np.ndarray:
        """Advance every stream by one reading; returns class probabilities float32 [streams,
        classes], a copy (made under the lock, so another thread's push cannot change it).
        Raises as `push_logits`. (On the native backend one C call does all of it.)"""
        return self._push(readings)

    def _push(self, readings) -> np.ndarray:
        with self._lock:
            logits = self._advance_batch(readings) if self._subs is None else self._advance_each(readings)
            return self._probs.copy() if self._has_probs else softmax(logits.copy())

    def _take(self, readings) -> None:
        """Readings into the input buffer, checked; ReadingError otherwise. The input buffer is
        not state: filling it before the check loses nothing."""
        x = readings
        if type(x) is not np.ndarray or x.dtype != np.float32 or x.shape != self._x.shape:
            x = self._coerce(x)
        np.copyto(self._x, x)
        if not self._in_range(self._x):  # named from the copy that failed, not from the caller's live array
            raise self._bad_reading(self._x.copy(), None if x is readings else self._given(readings))

    def _dot_finite(self) -> bool:
        """Every logit of the last call is finite: numpy's safety net where the C gate is not built."""
        return isfinite(self._logits_flat.dot(self._scale_c))

    def _advance_batch(self, readings) -> np.ndarray:
        nat = self._native
        if nat is not None:
            # One C call copies, checks and steps a float32 [streams, F] array: -1 adopted, i >= 0
            # stream i gave NaN/Inf (nothing changed); -2 (a bad value) and -3 (another type or
            # shape) go through _take, which converts what it can and names what is wrong.
            rc = nat.push(readings) if type(readings) is np.ndarray else -3
            if rc < -1:
                if rc >= -3:
                    self._take(readings)
                    rc = nat.run()
                if rc <= -4:                     # a Transformer's cache: full (-4) or its ring to grow (-5)
                    rc = self._native_room(rc)
            if rc >= 0:
                raise self._nonfinite(rc)
            self._count[0] += 1
            return self._logits
        gate = self._gate
        if gate is None or type(readings) is not np.ndarray or gate.take(readings) != 0:
            self._take(readings)
        if self.growing:
            state = self._step_cache()
            if not self._finite():                                   # NaN/Inf logits: keep the old cache
                raise self._nonfinite()
            self._state = state
            self._pos += 1
        else:
            self.session.run_with_iobinding(self._bindings[self._bank])
            if not self._finite():                                   # NaN/Inf logits: do not flip the bank
                raise self._nonfinite()
            self._bank ^= 1
            self._state = self._banks[self._bank]
            self._count[0] += 1
        return self._logits

    def _undo_step(self, state) -> None:
        """Take back this (batch-1) session's last step; `state` is its state before that step."""
        if self.growing:
            self._state = state
            self._pos -= 1
        else:
            self._bank ^= 1
            self._state = self._banks[self._bank]
            self._calls -= 1

    def _advance_each(self, readings) -> np.ndarray:
        """One batch-1 call per stream; every reading and the history's room are checked before
        any stream advances."""
        x = readings
        if type(x) is not np.ndarray or x.dtype != np.float32 or x.shape != self._x.shape:
            x = self._coerce(x)
        if x is readings:
            x = x.copy()                 # checked and used as one: the caller's array may change meanwhile
        if not self._in_range(x):
            raise self._bad_reading(x, None if x is readings else self._given(readings))
        if self.growing:
            self._subs[0]._check_room()              # all sub-sessions hold the same history
        done = []
        for i, sub in enumerate(self._subs):
            before = sub._state
            try:
                self._logits[i] = sub._advance_batch(x[i:i + 1])[0]
            except ReadingError:                     # NaN/Inf logits: take back the streams before it
                for d, state in done:
                    d._undo_step(state)
                raise self._nonfinite(i) from None
            done.append((sub, before))
            if self._has_probs:
                self._probs[i] = sub._probs[0]
        return self._logits

    def _check_room(self) -> bool:
        """True when the cache is full and the next reading slides it; HistoryFullError when it
        is full and this session raises instead."""
        if self.max_history is None or self._history() < self.max_history:
            return False
        if self.on_full == "error":
            raise self._history_full()
        return True

    def _history_full(self) -> HistoryFullError:
        return HistoryFullError(
            f"history is full ({self.max_history} readings); reset the stream, raise max_history "
            "or slide (on_full='slide', --on-full slide); stream state unchanged")

    def _native_room(self, rc: int) -> int:
        """The native Transformer step's answer once its cache has room: -4 (full, on_full
        "error") raises HistoryFullError; -5 grows its ring (no bound: doubling) and steps."""
        if rc == -4:
            raise self._history_full()
        self._native.grow()
        return self._native.run()

    def _step_cache(self):
        past = self._state
        if self._check_room():
            T, keep = self._history(), self.max_history - 1
            past = [ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v.numpy()[:, :, T - keep:]), self.device, 0)
                    for v in past]
        b = self._binding
        for spec, v in zip(self.meta.state, past):
            b.bind_ortvalue_input(spec.name, v)
        for spec in self.meta.state:
            b.bind_output(spec.output, self.device)
        self.session.run_with_iobinding(b)
        return b.get_outputs()[2 if self._has_probs else 1:]

    def run(self, sequence) -> np.ndarray:
        """Push a whole [T, streams, F] array; returns probabilities float32 [T, streams, C]."""
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
