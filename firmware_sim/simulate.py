"""Accuracy and per-reading output of the integer-only step against ONNX Runtime (int8 and float)."""

from __future__ import annotations

import numpy as np

from edgeseq.data import data_for_model
from edgeseq.runtime.evaluate import (final_accuracy, joined_streams, long_streams, output_error, run_streams,
                                      score_continuous)
from edgeseq.runtime.model import open_model
from firmware_sim.intsim import Q, load_int_model, run_stream


def simulate(model, data: str | None = None, float_model=None, readings: int = 1000) -> dict:
    """Integer-only accuracy and logits against ONNX Runtime on the test split of `data` (None:
    the data the model was trained on, `edgeseq.data.data_for_model`), on both protocols:
    `accuracy` per sequence (each from zero state, scored at its last reading) and
    `never_reset` (the split joined end to end in `edgeseq.runtime.evaluate.ORDERS` seeded
    orders, one stream each, scored per reading past the grace period: `score_continuous`)."""
    m, qsess, qmeta = load_int_model(model)
    ds = data_for_model(data, m.meta["features"], m.labels, m.meta.get("data"), str(model), m.meta.get("data_sha256"))
    split = ds.test
    logits_int = run_stream(m, m.to_fixed(split.X)).astype(np.float64) / (1 << Q)
    for t in range(split.X.shape[1]):                       # past a sequence's end: not scored
        logits_int[t, split.lengths <= t] = np.nan
    ort_int8 = run_streams(qsess, qmeta, split.X, split.lengths)
    r = {"model": str(model), "arch": m.kind, "data": ds.name, "test_sequences": len(split),
         "accuracy": {"integer_only": final_accuracy(np.nan_to_num(logits_int), split),
                      "onnxruntime_int8": final_accuracy(ort_int8, split)}}
    Xj, Yj, ends = joined_streams(split)
    pred = run_stream(m, m.to_fixed(Xj)).argmax(-1).T                      # (orders, L)
    r["never_reset"] = {"integer_only": score_continuous(pred, Yj, ends)["reading_accuracy"],
                        "onnxruntime_int8": _continuous(qsess, qmeta, Xj, Yj, ends)}
    X = long_streams(split, readings, streams=1, seed=0)
    stream_int = run_stream(m, m.to_fixed(X)).astype(np.float64) / (1 << Q)
    r["stream_readings"] = int(X.shape[1])
    r["vs_onnxruntime_int8"] = output_error(run_streams(qsess, qmeta, X), stream_int)
    v = qmeta.validation or {}
    if float_model is not None:
        fsess, fmeta = open_model(float_model)
        r["accuracy"]["float"] = final_accuracy(run_streams(fsess, fmeta, split.X, split.lengths), split)
        r["vs_float"] = output_error(run_streams(fsess, fmeta, X), stream_int)
        r["never_reset"]["float"] = _continuous(fsess, fmeta, Xj, Yj, ends)
        r["float_from"] = str(float_model)
    elif _is_fraction(v.get("float_accuracy")):          # metadata: use it only when it is an accuracy
        r["accuracy"]["float"] = float(v["float_accuracy"])
        r["float_from"] = "the int8 model's export validation (same test split)"
    if "float" in r["accuracy"]:
        r["drop_vs_float"] = r["accuracy"]["float"] - r["accuracy"]["integer_only"]
    return r


def _continuous(sess, meta, X, Y, ends) -> float:
    """Per-reading accuracy of ONNX Runtime on never-reset streams X (orders, L, F)."""
    logits = run_streams(sess, meta, X)                                     # (L, orders, C)
    return score_continuous(logits.argmax(-1).T, Y, ends)["reading_accuracy"]


def _is_fraction(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0 <= x <= 1.0
