"""Accuracy of an exported model on a data split, run the way it is deployed.

Streaming models see one reading per call with every test sequence as its own stream; the
prediction after each sequence's last valid reading is scored, and so is the running
prediction after each quarter of the sequence (what a live stream would have shown then).
"""

from __future__ import annotations

import time

import numpy as np

from edgeseq.data import Split
from edgeseq.errors import DataError, UsageError
from edgeseq.runtime.session import StreamSession, WindowSession


def evaluate(model: str, split: Split, labels: list | None = None, provider: str = "cpu",
             features: list | None = None) -> dict:
    """{'accuracy', 'n', 'accuracy_at_fraction', 'confusion', ...} for `model` on `split`."""
    try:
        sess = StreamSession(model, streams=len(split), provider=provider)
        probe = None
    except UsageError:
        probe = sess = WindowSession(model, provider)     # a whole-window (bidirectional) model
        if sess.meta.mode != "window":
            raise
    if split.X.shape[2] != len(sess.meta.features):
        raise DataError(f"data has {split.X.shape[2]} features, the model expects {len(sess.meta.features)} "
                        f"({', '.join(sess.meta.features)})")
    if labels is not None and list(labels) != list(sess.meta.labels):
        raise DataError(f"data labels {labels} differ from the model's {sess.meta.labels}")
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
            running[str(frac)] = float((probs[idx, np.arange(N)].argmax(-1) == split.y).mean())
    seconds = time.perf_counter() - t0
    pred = final.argmax(-1)
    C = len(sess.labels)
    confusion = np.zeros((C, C), int)
    np.add.at(confusion, (split.y, pred), 1)
    return {
        "model": str(model),
        "arch": sess.meta.arch,
        "quantization": sess.meta.quantization,
        "n": int(N),
        "accuracy": float((pred == split.y).mean()),
        "accuracy_at_fraction": running,
        "labels": list(sess.labels),
        "confusion": confusion.tolist(),
        "seconds": round(seconds, 3),
    }

