"""Accuracy of an exported model on a data split, run the way it is deployed, on two protocols.

- per sequence: every test sequence is its own stream, started from zero state; the
  prediction after each sequence's last valid reading is scored, and so is the running
  prediction after each quarter of the sequence. Where the data names groups (subjects,
  devices, sessions), the accuracy of each group and the worst group too.
- continuous (never reset): the test sequences joined end to end in `ORDERS` fixed seeded
  orders, each one stream that is never reset, as a device sees them. Scored per reading
  (leaving out a grace period after each change of label and at the stream's start:
  `grace_for`, a quarter of the median sequence length, 1 to `GRACE` readings; `scored_share`
  says what share of the readings that leaves), at each sequence's last reading, and by the
  readings the prediction takes to follow a change of label (the first reading from which it
  names the new label for `HOLD` readings in a row, or to the sequence's end).
"""

from __future__ import annotations

import time

import numpy as np

from edgeseq.data import Split, align_features, align_labels, since_change
from edgeseq import contract
from edgeseq.errors import UsageError
from edgeseq.runtime.never_reset import ORDERS, joined_streams
from edgeseq.runtime.session import StreamSession, WindowSession, default_backend, native_refused

STREAM_READINGS = 500         # readings per stream when two models are compared over long streams
GRACE = 20                    # readings after a change of label that are not scored, at most (training leaves
                              # this many out of its stream loss)
GRACE_FRACTION = 0.25         # continuous protocol: the grace is this share of the median sequence length (a
                              # change is called once a quarter of a typical activity is seen, where
                              # training's per-sequence aux loss starts too), within 1..GRACE
HOLD = 10                     # a change is followed once the prediction holds the new label this many readings


def evaluate(model: str, split: Split, labels: list | None = None, provider: str = "cpu",
             features: list | None = None, backend: str | None = None) -> dict:
    """{'accuracy', 'n', 'accuracy_at_fraction', 'confusion', ...} for `model` on `split`.

    `features` names the split's columns (the Dataset's `features`): they are matched to the
    model's by name (`align_features`: reordered if permuted, refused if they differ);
    without names, by position, and the counts must agree. `labels` names the split's classes
    (the Dataset's `labels`): they are matched to the model's by name (`align_labels`: the
    split's class ids put in the model's order; a subset of the model's labels is fine, a label
    it does not predict is refused); None: the split's ids are the model's. `backend`: see StreamSession; the
    result's "backend" says which ran, and "backend_note" why auto ran onnxruntime (None
    where it did not choose so). A model with decision settings (`edgeseq.decision`) also
    gets "events": `edgeseq.runtime.calibrate.event_scores` on EVENT_ORDERS never-reset
    streams of the split (None for a model without)."""
    try:
        sess = StreamSession(model, streams=len(split), provider=provider, backend=backend)
        probe = None
    except UsageError:
        probe = sess = WindowSession(model, provider)     # a whole-window (bidirectional) model
        if sess.meta.mode != "window":
            raise
        if (default_backend() if backend is None else backend) == "native":
            raise native_refused(model, f"a {sess.meta.arch} model reads whole windows: onnxruntime only",
                                 backend is not None) from None
    names = list(features) if features is not None else [f"f{i}" for i in range(split.X.shape[2])]
    if len(names) != split.X.shape[2]:
        raise UsageError(f"features gives {len(names)} names for {split.X.shape[2]} data columns; give one per column")
    order = align_features(names, sess.meta.features, "data")
    if order is not None:
        split = split.channels(order)
    if labels is not None:                           # the split's class ids in the model's label order, by name
        order = align_labels(labels, sess.meta.labels, "data")
        if order is not None:
            split = split.classes(order)
    t0 = time.perf_counter()
    N, T = len(split), split.X.shape[1]
    if probe is not None:
        final = probe.predict(split.X, split.lengths)
        running = {}
    else:
        probs = np.zeros((T, N, len(sess.labels)), np.float32)
        for t in range(T):
            probs[t] = sess.push(split.X[:, t])
        final = probs[split.lengths - 1, np.arange(N)]
        running = {}
        for frac in (0.25, 0.5, 0.75, 1.0):
            idx = np.maximum(np.ceil(split.lengths * frac).astype(int) - 1, 0)
            truth = split.Y[np.arange(N), idx]                      # the label at that reading
            running[str(frac)] = float((probs[idx, np.arange(N)].argmax(-1) == truth).mean())
    cont = None if probe is not None else continuous(model, split, provider=provider, backend=backend)
    events = None
    if probe is None and sess.decision is not None:          # the model's decision layer, on never-reset streams
        from edgeseq.runtime.calibrate import event_scores
        events = event_scores(model, split, sess.decision, backend=backend, provider=provider)
    seconds = time.perf_counter() - t0
    pred = final.argmax(-1)
    C = len(sess.labels)
    confusion = np.zeros((C, C), int)
    np.add.at(confusion, (split.y, pred), 1)
    groups = {} if split.groups is None else {"groups": group_accuracy(pred == split.y, split.groups)}
    return {
        "model": str(model),
        "arch": sess.meta.arch, "backend": getattr(sess, "backend", "onnxruntime"),
        "backend_note": getattr(sess, "backend_note", None),
        "quantization": sess.meta.quantization,
        "n": int(N),
        "accuracy": float((pred == split.y).mean()),
        "accuracy_at_fraction": running,
        "labels": list(sess.labels),
        "confusion": confusion.tolist(),
        "continuous": cont,
        "events": events,
        **groups,
        "seconds": round(seconds, 3),
    }


def group_accuracy(hit: np.ndarray, groups: np.ndarray) -> dict:
    """Per-sequence accuracy by group: hit (N,) bool, groups (N,) names -> {'per_group': {name:
    {'n', 'accuracy'}} in name order, 'worst': {'group', 'n', 'accuracy'}} (the lowest accuracy;
    a tie goes to the group with more sequences, then the first name)."""
    names = sorted(set(np.asarray(groups).tolist()))
    per = {}
    for g in names:
        h = hit[np.asarray(groups) == g]
        per[g] = {"n": int(len(h)), "accuracy": float(h.mean())}
    worst = min(names, key=lambda g: (per[g]["accuracy"], -per[g]["n"]))
    return {"per_group": per, "worst": {"group": worst, **per[worst]}}


def grace_for(lengths) -> int:
    """The continuous protocol's grace for sequences of `lengths` (N,): GRACE_FRACTION of their
    median length, rounded down, at least 1 and at most GRACE (100-reading BasicMotions: 20)."""
    return int(min(GRACE, max(1, np.floor(float(np.median(lengths)) * GRACE_FRACTION))))


def score_continuous(pred: np.ndarray, Y: np.ndarray, ends: np.ndarray, grace: int | None = None,
                     hold: int = HOLD) -> dict:
    """Scores of predicted classes pred (S, L) int against labels Y (S, L) on never-reset
    streams whose sequences end at `ends` (S, N). Returns per-reading accuracy past the grace
    period (None: `grace_for` the sequences' lengths) and the share of readings that scores
    (`scored_share`), accuracy at each sequence's last reading, and the readings taken to
    follow each change of label (median, and the share of changes followed before the
    sequence ended)."""
    if grace is None:
        grace = grace_for(np.diff(np.r_[-1, ends[0]]))
    hits, n_scored, delays, changes = 0, 0, [], 0
    for p, y in zip(pred, Y):
        scored = since_change(y) >= grace
        hits += int((p[scored] == y[scored]).sum())
        n_scored += int(scored.sum())
        starts = np.flatnonzero(np.r_[False, y[1:] != y[:-1]])
        stops = np.r_[starts[1:], len(y)]
        for a, b in zip(starts, stops):
            changes += 1
            ok = (p[a:b] == y[a]).astype(np.int64)
            run = np.convolve(ok, np.ones(hold, np.int64))[hold - 1:]    # run[t] = hits in p[t:t+hold]
            need = np.minimum(hold, b - a - np.arange(b - a))             # up to the sequence's end
            done = np.flatnonzero(run >= need)
            if len(done):
                delays.append(int(done[0]))
    last = np.take_along_axis(pred, ends, 1) == np.take_along_axis(Y, ends, 1)
    return {"reading_accuracy": hits / max(n_scored, 1), "scored_readings": n_scored,
            "scored_share": n_scored / max(Y.size, 1),
            "last_reading_accuracy": float(last.mean()),
            "median_readings_to_follow": float(np.median(delays)) if delays else None,
            "changes": changes, "followed": len(delays) / max(changes, 1),
            "grace": grace, "hold": hold}


def continuous(model: str, split: Split, orders: int = ORDERS, provider: str = "cpu", seed: int = 0,
               grace: int | None = None, backend: str | None = None) -> dict:
    """The continuous protocol for a stream model file: `orders` never-reset streams, each
    pushed one reading per call through its own single-stream StreamSession (a device runs
    one stream; dynamic int8 would otherwise scale streams together). Returns
    `score_continuous`'s figures (grace None: `grace_for` the split's lengths) plus the
    streams' length."""
    X, Y, ends = joined_streams(split, orders, seed)
    pred = np.zeros(Y.shape, np.int64)
    for s in range(orders):
        sess = StreamSession(model, streams=1, provider=provider, backend=backend)
        for t in range(X.shape[1]):
            pred[s, t] = sess.push_logits(X[s, t:t + 1]).argmax()
    r = score_continuous(pred, Y, ends, grace)
    r.update({"orders": orders, "readings_per_stream": int(X.shape[1])})
    return r



def run_streams(sess, meta: contract.ModelMeta, X: np.ndarray, lengths: np.ndarray | None = None,
                record: list | None = None, probs: list | None = None) -> np.ndarray:
    """Logits (T, N, C) float32 of a plain ONNX Runtime loop, every row of X (N, T, F) its own stream.

    A stream stops at its length (later entries are NaN); `record` collects the feeds of
    every call (reading, position and the state as it was fed back), for calibration; `probs`
    collects the graph's `probs` output, one (N, C) array per reading. A Transformer's cache
    slides at the model's `max_history` (its trained window by default), as `StreamSession`
    slides it: memory and time stay linear in T."""
    N, T, _ = X.shape
    lengths = np.full(N, T) if lengths is None else np.asarray(lengths)
    state = {}
    for s in meta.state:
        shape = [N if d == contract.BATCH_AXIS else 0 if d == contract.HISTORY_AXIS else d for d in s.shape]
        state[s.name] = np.zeros(shape, np.float32)
    has_pos = contract.POSITION in {i.name for i in sess.get_inputs()}
    names = [contract.LOGITS] + ([contract.PROBS] if probs is not None else []) + [s.output for s in meta.state]
    first_state = len(names) - len(meta.state)
    out = np.full((T, N, len(meta.labels)), np.nan, np.float32)
    for t in range(T):
        rows = np.flatnonzero(lengths > t)
        if len(rows) == 0:
            break
        every = len(rows) == N
        feeds = {k: (v if every else v[rows]) for k, v in state.items()}
        feeds[contract.READING] = np.ascontiguousarray(X[rows, t], np.float32)
        if has_pos:
            feeds[contract.POSITION] = np.full(len(rows), t, np.int64)
        if record is not None:
            record.append(feeds)
        res = sess.run(names, feeds)
        out[t, rows] = res[0]
        if probs is not None:
            p = np.full(out.shape[1:], np.nan, np.float32)
            p[rows] = res[1]
            probs.append(p)
        for s, v in zip(meta.state, res[first_state:]):
            if s.kind == contract.KIND_GROWING and meta.max_history:
                axis = list(s.shape).index(contract.HISTORY_AXIS)
                if v.shape[axis] > meta.max_history:        # the rows the window still reads
                    v = np.ascontiguousarray(np.take(v, np.arange(v.shape[axis] - meta.max_history, v.shape[axis]),
                                                     axis=axis))
            if every:
                state[s.name] = v
            else:                                # new arrays: recorded feeds must not change under us
                grown = np.zeros((N, *v.shape[1:]), np.float32) if s.kind == contract.KIND_GROWING \
                    else state[s.name].copy()    # finished streams' rows are never read again
                grown[rows] = v
                state[s.name] = grown
    return out


def run_each(sess, meta: contract.ModelMeta, X: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
    """`run_streams` one stream per call (batch 1): what a device running one stream computes
    with a model whose result depends on the batch (dynamic int8 scales a call's whole batch)."""
    lengths = np.full(len(X), X.shape[1]) if lengths is None else np.asarray(lengths)
    return np.concatenate([run_streams(sess, meta, X[i:i + 1], lengths[i:i + 1]) for i in range(len(X))], axis=1)


def run_session(model: str, X: np.ndarray, lengths: np.ndarray | None = None, backend: str | None = None,
                provider: str = "cpu") -> np.ndarray:
    """`run_streams`' logits (T, N, C) float32 for X (N, T, F), every row its own stream, run
    the way a deployment runs them: one `StreamSession(model, streams=N, backend=backend)`,
    one push per reading. On the native backend an int8 RNN/GRU/LSTM gives the firmware's
    integer step (Q12 logits / 4096), not onnxruntime's QDQ arithmetic. Entries past a
    stream's length are NaN; that stream is fed its last valid reading meanwhile (the backends
    keep streams apart, so what it computes changes no other stream). Raises as StreamSession
    and its `push_logits` (ReadingError where the model gives NaN/Inf logits)."""
    N, T, _ = X.shape
    lengths = np.full(N, T) if lengths is None else np.asarray(lengths)
    sess = StreamSession(model, streams=N, provider=provider, backend=backend)
    out = np.full((T, N, len(sess.labels)), np.nan, np.float32)
    last = np.maximum(lengths - 1, 0)
    for t in range(min(T, int(lengths.max(initial=0)))):
        done = lengths <= t
        x = X[:, t]
        if done.any():
            x = np.where(done[:, None], X[np.arange(N), last], x)
        out[t] = sess.push_logits(np.ascontiguousarray(x, np.float32))
        out[t, done] = np.nan
    return out


def final_accuracy(logits: np.ndarray, split: Split) -> float:
    last = logits[split.lengths - 1, np.arange(len(split))]
    return float((last.argmax(-1) == split.y).mean())


def reading_accuracy(logits: np.ndarray, split: Split, skip: float = 0.25) -> float:
    """Per-sequence protocol, scored at every reading: logits (T, N, C) from streams that each
    start one sequence of `split` from zero state; readings from ceil(skip x length) - 1 to
    the sequence's end count (the first quarter is too early to call). 40 sequences of 100
    readings give 3,000 scored readings, so one point is 30 readings, not a fraction of one
    sequence."""
    T = logits.shape[0]
    t = np.arange(T)[:, None]                                                       # (T, 1)
    L = np.asarray(split.lengths)[None, :]                                          # (1, N)
    keep = (t < L) & (t >= np.maximum(np.ceil(L * skip).astype(int) - 1, 0))
    hit = logits.argmax(-1) == np.asarray(split.y)[None, :]
    return float(hit[keep].mean())


def long_streams(split: Split, min_readings: int = STREAM_READINGS, streams: int = 4, seed: int = 0) -> np.ndarray:
    """(streams, T, F): the split's sequences (valid readings only) joined end to end in a seeded
    order per stream, repeated as needed, cut to `min_readings`. Real readings,
    and a state that runs on across sequence boundaries as it does on a device."""
    rng = np.random.default_rng(seed)
    parts = [split.X[i, :split.lengths[i]] for i in range(len(split))]
    out = []
    for _ in range(streams):
        chunks, n = [], 0
        while n < min_readings:
            for i in rng.permutation(len(parts)):
                chunks.append(parts[i])
                n += len(parts[i])
        out.append(np.concatenate(chunks))
    return np.stack([o[:min_readings] for o in out]).astype(np.float32)


def output_error(ref: np.ndarray, got: np.ndarray) -> dict:
    """int8 vs float logits over the same readings: absolute and relative to the float range."""
    ok = ~np.isnan(ref)
    d = np.abs(got[ok] - ref[ok])
    span = float(ref[ok].max() - ref[ok].min()) or 1.0
    agree = ref.argmax(-1) == got.argmax(-1)
    return {
        "max_abs": float(d.max()), "mean_abs": float(d.mean()), "output_range": span,
        "max_rel": float(d.max() / span), "mean_rel": float(d.mean() / span),
        "p99_rel": float(np.quantile(d, 0.99) / span),
        "argmax_agreement": float(agree[~np.isnan(ref[..., 0])].mean()),
    }
