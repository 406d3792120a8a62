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
from math import isfinite

import numpy as np
import onnxruntime as ort

from edgeseq import contract
from edgeseq.errors import HistoryFullError, ReadingError, UsageError
from edgeseq.runtime.model import load_model
from edgeseq.runtime.providers import DEVICE

from edgeseq.runtime.session_checks import (  # noqa: F401  (the names this module has always offered)
    BACKENDS, DTYPE_WORDS, F32_MAX, MAX_HISTORY, MAX_POSITION, MAX_STREAMS, MAX_THREADS, NO_NORM_LIMIT, ON_FULL,
    READING_SIGMAS, STATE_BOUND, STATE_C_BOUND, STATE_C_BOUND_INT8, STATE_H_BOUND, _whole, default_backend,
    native_refused, reading_bounds, softmax)
from edgeseq.runtime.session_checks import ReadingChecks
from edgeseq.runtime.session_state import SnapshotChecks
# The safety net's dot product turns +Inf and -Inf logits together into NaN, which numpy reports
# as an "invalid value" warning; a non-finite result is exactly what the net looks for.
warnings.filterwarnings("ignore", "invalid value encountered in dot", RuntimeWarning, r"edgeseq\.runtime\.session")


class StreamSession(ReadingChecks, SnapshotChecks):
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

    Decisions: `decision` (default: the model file's `edgeseq.decision` settings, if any;
    False: none; or a `edgeseq.runtime.decision.DecisionSpec` / its JSON object) adds the
    decision layer: every `push` also advances each stream's smoothing, thresholds, minimum
    duration and refractory time, and `push_events` returns the events that fired; snapshots
    and state files carry its state beside the model's.

    Raises ModelFileError / ProviderError (model), UsageError (bad settings).
    """

    def __init__(self, model: str | os.PathLike, streams: int = 1, provider: str = "cpu",
                 max_history: int | None = None, on_full: str | None = None, threads: int = 1,
                 backend: str | None = None, decision=None):
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
                f"streaming model ({', '.join(contract.STREAM_ARCHS[:-1])} or {contract.STREAM_ARCHS[-1]}) to stream")
        if max_history is not None and not any(s.kind == contract.KIND_GROWING for s in meta.state):
            raise UsageError(f"max_history (--max-history) applies to the transformer only; a {meta.arch} "
                             "model's recurrent state is fixed, it has no history to bound")
        bound = meta.max_history if max_history is None else (int(max_history) or None)
        native_step, note = self._choose_backend(backend, meta, str(model), provider, int(streams), session, bound,
                                                 on_full, loaded)
        self._setup(session, meta, str(model), int(streams), provider, bound, on_full, native_step=native_step)
        self.model_sha256 = loaded.sha256
        self.backend_note = note
        self._decide_setup(decision)

    # -- the decision layer (edgeseq.runtime.decision) --------------------------------------

    def _decide_setup(self, decision) -> None:
        """decision None: the model file's own settings (`edgeseq.decision`, or an anomaly
        model's `edgeseq.task`), if it has any; False: none; a DecisionSpec / AnomalySpec or
        its JSON object: those."""
        from edgeseq.runtime.decision import Decider, DecisionSpec
        if self.meta.kind == "anomaly":
            from edgeseq.runtime.anomaly_watch import AnomalySpec, Watcher
            if decision is None:
                spec = AnomalySpec.from_json(self.meta.task)
            elif decision is False:
                spec = None
            elif isinstance(decision, AnomalySpec):
                spec = decision
            elif isinstance(decision, dict):
                spec = AnomalySpec.from_json(decision)
            else:
                raise UsageError(f"an anomaly model's decision must be None (the model's), False (none), an "
                                 f"AnomalySpec or its JSON object, got {type(decision).__name__}")
            self.decision = spec
            if spec is None:
                return
            norm = self.meta.normalization or {"mean": [0.0] * self.n_features, "std": [1.0] * self.n_features}
            self._decider = Watcher(spec, norm["mean"], norm["std"], self.streams)
            self._plain_push = self.push
            self.push = self._push_decided
            return
        if self.meta.kind != "classify":
            if decision not in (None, False):
                raise UsageError(f"a {self.meta.kind} model has no classes to decide on; give no decision settings")
            return
        if decision is None:
            spec = None if self.meta.decision is None else DecisionSpec.from_json(self.meta.decision, self.labels)
        elif decision is False:
            spec = None
        elif isinstance(decision, DecisionSpec):
            if list(decision.labels) != self.labels:
                raise UsageError("decision settings were made for other labels than this model's; make them with "
                                 "the model's labels (session.labels)")
            spec = decision
        elif isinstance(decision, dict):
            spec = DecisionSpec.from_json(decision, self.labels)
        else:
            raise UsageError(f"decision must be None (the model's), False (none), a DecisionSpec or its JSON object, "
                             f"got {type(decision).__name__}")
        self.decision = spec
        self._decider = None if spec is None else Decider(spec, self.streams)
        if spec is None:
            return
        bound = self._decider.native_arrays() if self._native is not None else None
        if bound is not None and type(self.push).__name__ == "Pusher":
            # The C step decides too: es_decide (firmware_sim/kernels/es_decide.h) runs in the same call
            # as the step, on the decider's own arrays; a push that takes the Python path decides once in C.
            self.push.decide(*bound)
            self._native_decide = True
            return
        self._plain_push = self.push
        self.push = self._push_decided

    @property
    def events(self) -> list:
        """The decision layer's events at the last push that was applied (`Event`s; [] without
        decision settings)."""
        if self._native_decide:
            return self._decider.native_events()
        return self._events

    def _push_decided(self, readings) -> np.ndarray:
        with self._dlock:
            probs = self._plain_push(readings)
            if self.meta.kind == "anomaly":
                x = np.asarray(readings, np.float32).reshape(self.streams, self.n_features)
                self._events = self._decider.update(x, self._outputs())
            else:
                self._events = self._decider.update(probs)
            return probs

    def _outputs(self) -> np.ndarray:
        """The model's raw outputs (logits) of the last applied push, float32 [streams, C]."""
        if self._subs is not None:
            return np.concatenate([sub._logits for sub in self._subs])
        return self._logits

    def push_scores(self, readings) -> tuple:
        """Advance every stream by one reading and return what an anomaly or regression model
        answers. Anomaly: (level float32 [streams], events): each stream's smoothed surprise in
        standard deviations of its own learnt normal score (NaN while it warms up and learns,
        `edgeseq.runtime.anomaly`), and the anomaly events that fired. Regression: (targets
        float32 [streams, K] in the data's units, []). Raises UsageError for a classifier (use
        `push` / `push_events`) or an anomaly session made with decision=False; else as `push`."""
        kind = self.meta.kind
        if kind == "classify":
            raise UsageError("this is a classifier: use push (probabilities) or push_events (events)")
        with self._dlock:
            if kind == "regress":
                from edgeseq.runtime.session_checks import in_units
                self.push(readings)
                return in_units(self.meta.task, self._outputs()), []
            if self._decider is None:
                raise UsageError("this anomaly session was made with decision=False: it keeps no baseline to score "
                                 "against; open it with the model's settings (decision=None)")
            self.push(readings)
            return self._decider.level.astype(np.float32), self.events

    @property
    def threshold(self) -> np.ndarray | None:
        """An anomaly session's learnt threshold per stream on the smoothed score (float64
        [streams], NaN while learning); None for other models."""
        return None if self.meta.kind != "anomaly" or self._decider is None else self._decider.threshold

    def push_events(self, readings) -> tuple:
        """`push`, and the decision layer's verdict on this reading: (probabilities float32
        [streams, classes], [`edgeseq.runtime.decision.Event`, ...] that fired, usually none).
        Every `push` advances the decision state too (its events are then `session.events`);
        `push_logits` advances the model only. Threads that share a session should all call
        `push_events`: a plain `push` from another thread in between replaces `session.events`.
        A reading `push` refuses changes neither. For an anomaly model: `push_scores` (levels, events).
        Raises UsageError where the session has no decision settings, else as `push`."""
        if self.meta.kind == "anomaly":                 # an anomaly model's answer is its level, not probabilities
            return self.push_scores(readings)
        if self._decider is None:
            raise UsageError("this session has no decision settings: the model file has none (run `edgeseq "
                             "calibrate` on it) and none were given (StreamSession(..., decision=...))")
        with self._dlock:
            probs = self.push(readings)
            return probs, self.events

    def decision_state(self) -> list:
        """Each stream's active event label, or None (no event, or no decision settings)."""
        with self._dlock:
            return [None] * self.streams if self._decider is None else self._decider.state_label()

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
        import edgeseq.runtime.native as native
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
            if isinstance(e, contract.ArchMismatchError):       # the weights are another architecture's: a
                raise                                           # file the graph would run under a false name
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
        self._dlock = threading.RLock()           # the decision layer's lock, held around the model's
        self._decider, self.decision, self._events, self._native_decide = None, None, [], False
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
            import edgeseq.runtime.native as native
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
        import edgeseq.runtime.native as native      # numpy only; the checks in C where the extension is built
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
        with self._dlock, self._lock:            # the C pusher changes the decision arrays under _lock
            self._reset(stream)
            if self._decider is not None:
                self._decider.reset(stream)

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
        `meta.state` entry, batch axis first (streams, ...); a cache has `history` rows on axis 2]},
        and "decision": {name: array} (`Decider.snapshot`) where the session has decision settings."""
        with self._dlock, self._lock:
            snap = self._snapshot()
            if self._decider is not None:
                snap["decision"] = self._decider.snapshot()
            return snap

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
        this session's backend, must give finite logits and state. The decision state
        ("decision", where the session has decision settings) is checked as a whole too
        (`Decider.check`); a snapshot without one (from a session without settings) starts the
        decision layer afresh. Raises UsageError naming what is wrong; the session is then
        exactly as it was."""
        with self._dlock:
            dec = None
            if self.meta.kind == "anomaly" and self._decider is not None and isinstance(snap, dict) \
                    and snap.get("decision") is None:
                raise UsageError("snapshot: it holds no anomaly baseline (saved by a session without one); restoring it "
                                 "would forget what these streams learnt; session state unchanged")
            if self._decider is not None and isinstance(snap, dict) and snap.get("decision") is not None:
                try:
                    dec = self._decider.check(snap["decision"])
                except UsageError as e:
                    raise UsageError(f"snapshot: {e}; session state unchanged") from None
            with self._lock:
                position, arrays = self._check_snapshot(snap)
                self._apply_probed(position, arrays)
                if self._decider is not None:
                    if dec is None:
                        self._decider.reset()
                    else:
                        self._decider.load(dec)

    # -- the hot path --------------------------------------------------------------------

    def _in_range(self, x) -> bool:
        """The reading check (float32 [streams, F]): one comparison; False for NaN and Inf too."""
        if self._lo is None:
            return np.count_nonzero(np.abs(x) <= self._hi) == x.size
        return np.count_nonzero((x >= self._lo) & (x <= self._hi)) == x.size

    def check_reading(self, readings) -> np.ndarray:
        """Readings as float32 [streams, F], or ReadingError naming the problem."""
        x = self._coerce(readings)
        if not self._in_range(x):
            raise self._bad_reading(x, self._given(readings))
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
            if self._native_decide:                  # the C pusher's Python path: the C decision step once
                self._decider.native_once(self._probs)
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


from edgeseq.runtime.window import WindowSession  # noqa: E402,F401  (importable from here, as always)
