"""Accuracy and per-reading output of the integer-only step against ONNX Runtime (int8 and float).

`--float` takes only the float twin of the int8 model, the float model exported from the same
run (`check_float_twin`): any other model's accuracy, printed as "float", would be a figure of
another model. The report's `float_twin` says how the twin was verified (`verified` false only
for files too old to tell, where the recorded-accuracy check is all there is).
"""

from __future__ import annotations

import numpy as np

from edgeseq.data import data_for_model
from edgeseq.errors import UsageError, printable
from edgeseq.runtime.evaluate import (final_accuracy, joined_streams, long_streams, output_error, reading_accuracy,
                                      run_streams, score_continuous)
from edgeseq.runtime.model import load_model
from edgeseq.runtime.twins import same_run
from firmware_sim.intsim import QUANT_OPS, Q, load_int_model, run_stream

# The int8 export records the per-reading accuracies of the float model it was checked against
# (`edgeseq.validation`); the float twin scores the same on the same split. Its graph differs from
# that one only in float32 rounding (fused cells, input equalization folded in: about 1e-7 of the
# logits), which flips a reading only at a near tie: the twins of briefly trained RNN, GRU, LSTM,
# SSM and Transformer models score exactly the same on both protocols, while another seed of the
# same settings lands points away. 0.002 is 6 of BasicMotions' 3,000 readings.
RECORDED_FLOAT_TOLERANCE = 0.002
TWIN_REMEDY = ("pass the float model exported from the same run as the int8 one (`edgeseq export RUN --out "
               "MODEL.onnx`, without --int8), or leave --float out")


def simulate(model, data: str | None = None, float_model=None, readings: int = 1000) -> dict:
    """Integer-only accuracy and logits against ONNX Runtime on the test split of `data` (None:
    the data the model was trained on, `edgeseq.data.data_for_model`), on both protocols:
    `accuracy` per sequence (each from zero state, scored at its last reading) and
    `never_reset` (the split joined end to end in `edgeseq.runtime.evaluate.ORDERS` seeded
    orders, one stream each, scored per reading past the grace period: `score_continuous`)."""
    m, qsess, qmeta = load_int_model(model)
    twin = None
    if float_model is not None:                           # refused before any work
        fsess, fmeta, floaded = load_model(float_model)
        verified, how = check_float_twin(qmeta, fmeta, model, float_model, floaded.graph, model)
        twin = {"verified": verified is True, "how": how}
    if qmeta.kind == "anomaly":
        r = simulate_anomaly(m, qsess, qmeta, model, data, float_model, readings)
        return r if twin is None else {**r, "float_twin": twin}
    if qmeta.kind == "regress":
        r = simulate_regress(m, qsess, qmeta, model, data, float_model, fmeta if float_model is not None else None,
                             readings)
        return r if twin is None else {**r, "float_twin": twin}
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
        lf = run_streams(fsess, fmeta, split.X, split.lengths)
        r["accuracy"]["float"] = final_accuracy(lf, split)
        r["never_reset"]["float"] = _continuous(fsess, fmeta, Xj, Yj, ends)
        if not twin["verified"]:                          # an older file: what its export recorded is all there is
            check_recorded_float(v, ds.name, {"float_reading_accuracy": reading_accuracy(lf, split),
                                              "float_continuous_accuracy": r["never_reset"]["float"]},
                                 model, float_model)
        r["vs_float"] = output_error(run_streams(fsess, fmeta, X), stream_int)
        r["float_from"] = str(float_model)
        r["float_twin"] = twin
    elif _is_fraction(v.get("float_accuracy")):          # metadata: use it only when it is an accuracy
        r["accuracy"]["float"] = float(v["float_accuracy"])
        r["float_from"] = "the int8 model's export validation (same test split)"
    if "float" in r["accuracy"]:
        r["drop_vs_float"] = r["accuracy"]["float"] - r["accuracy"]["integer_only"]
    return r


def simulate_anomaly(m, qsess, qmeta, model, data, float_model, readings: int) -> dict:
    """`simulate` for an anomaly model: the firmware's path (integer step and integer anomaly
    layer, `firmware_sim.intanomaly`) against the host's (onnxruntime int8 and the float
    `Watcher`; and the float twin's where given), on both protocols of
    `edgeseq.runtime.anomaly.evaluate`, and the forecasts against onnxruntime's over a long stream."""
    from edgeseq.runtime.anomaly import AnomalySpec, binary, evaluate, joined
    from firmware_sim.intanomaly import firmware_events
    ds = data_for_model(data, m.meta["features"], None, m.meta.get("data"), str(model), m.meta.get("data_sha256"))
    ds = binary(ds)[0]
    split = ds.test
    r = {"model": str(model), "arch": m.kind, "data": ds.name, "test_sequences": len(split), "task": "anomaly",
         "integer_only": {"per_recording": firmware_events(model, split),
                          "never_reset": firmware_events(model, joined(split))}}
    host = evaluate(model, split, backend="onnxruntime")
    r["onnxruntime_int8"] = {k: host[k] for k in ("per_recording", "never_reset")}
    if float_model is not None:
        f = evaluate(float_model, split, backend="onnxruntime", spec=AnomalySpec.from_json(qmeta.task))  # same settings
        r["float"] = {k: f[k] for k in ("per_recording", "never_reset")}
        r["float_from"] = str(float_model)
    X = long_streams(split, readings, streams=1, seed=0)
    stream_int = run_stream(m, m.to_fixed(X)).astype(np.float64) / (1 << Q)
    r["stream_readings"] = int(X.shape[1])
    r["vs_onnxruntime_int8"] = output_error(run_streams(qsess, qmeta, X), stream_int)
    return r


def simulate_regress(m, qsess, qmeta, model, data, float_model, fmeta, readings: int) -> dict:
    """`simulate` for a regression model: each target's per-reading error on the test split
    from the firmware's integer path (the integer step and the emitted `<prefix>_targets`
    conversion, `firmware_sim.cemit.targets_fixed`, in the targets' units), onnxruntime int8 and
    the float twin where given, on both protocols of `edgeseq.runtime.regress.evaluate` beside
    the persistence baseline, and the outputs against onnxruntime's over a long stream. Raises
    UsageError where the data's targets are not the model's, or the targets do not fit the
    emitted C's int32 (`model_regress`)."""
    from edgeseq.runtime.regress import aligned, figures, joined
    from firmware_sim.cemit import model_regress, targets_fixed
    task = qmeta.task
    ds = data_for_model(data, m.meta["features"], None, m.meta.get("data"), str(model), m.meta.get("data_sha256"),
                        targets=task["targets"])
    split = aligned(ds.test, ds.target_names, task["targets"], f"data '{printable(ds.name)}'")
    q = model_regress(m)
    std, mean = np.asarray(task["target_std"], np.float64), np.asarray(task["target_mean"], np.float64)
    lag = int(task.get("persistence_lag", 1))
    r = {"model": str(model), "arch": m.kind, "data": ds.name, "test_sequences": len(split), "task": "regress",
         "lag": lag, "targets": list(task["targets"]), "target_scale": [int(k) for k in q[0]]}
    parts = {"per_recording": (split.X, split.targets, np.asarray(split.lengths), None), "never_reset": joined(split)}

    def host(sess, meta, X, L):
        return np.transpose(run_streams(sess, meta, X, L), (1, 0, 2)) * std + mean

    def firmware(X, L):
        return np.transpose(targets_fixed(run_stream(m, m.to_fixed(X)), q), (1, 0, 2)) / q[0]

    runs = {"integer_only": firmware, "onnxruntime_int8": lambda X, L: host(qsess, qmeta, X, L)}
    if float_model is not None:
        fsess = load_model(float_model)[0]
        runs["float"] = lambda X, L: host(fsess, fmeta, X, L)
        r["float_from"] = str(float_model)
    for name, go in runs.items():
        r[name] = {p: figures(go(X, L), Y, L, lag, task["targets"], starts) for p, (X, Y, L, starts) in parts.items()}
    X = long_streams(split, readings, streams=1, seed=0)
    stream_int = run_stream(m, m.to_fixed(X)).astype(np.float64) / (1 << Q)
    r["stream_readings"] = int(X.shape[1])
    r["vs_onnxruntime_int8"] = output_error(run_streams(qsess, qmeta, X), stream_int)
    return r


def _shown(names, most: int = 8) -> str:
    names = [printable(n) for n in names]
    return ", ".join(names[:most]) + (f", ... ({len(names)} in all)" if len(names) > most else "")


def check_float_twin(qmeta, fmeta, model, float_model, graph=None, int8_graph=None) -> tuple:
    """UsageError, one line that names what differs and says what to do, unless `float_model`
    (metadata `fmeta`; `graph` its parsed graph where read) can be the float twin of the int8
    `model` (metadata `qmeta`; `int8_graph` its parsed graph or path): float (no quantization in
    its metadata or its graph), the same architecture and mode, the same features and labels in
    the same order (the class indices compared are the same classes), the same settings
    (`edgeseq.config`), the same normalisation (mean, std: int8 export adds only its input
    scale), where both record it the same training data, and exported from the same training
    run (`edgeseq.runtime.twins.same_run`: the checkpoint fingerprints, or for older files the
    weights). Returns same_run's (verdict, why): verdict True, or None where older files leave
    it untold (then `check_recorded_float` judges once the float accuracy is measured)."""
    def refuse(why):
        raise UsageError(f"--float '{printable(float_model)}' is not the float twin of '{printable(model)}': {why}; "
                         f"{TWIN_REMEDY}")

    ops = sorted({n.op_type for n in getattr(graph, "nodes", ())} & QUANT_OPS)
    if fmeta.quantization or ops:
        scheme = (fmeta.quantization or {}).get("scheme")
        refuse(f"it is an int8 model ({f'scheme {scheme}' if scheme else ', '.join(ops)}), not a float one")
    if (fmeta.arch, fmeta.mode) != (qmeta.arch, qmeta.mode):
        f, q = ((printable(x.arch) + ("" if fmeta.mode == qmeta.mode else f" ({x.mode})")) for x in (fmeta, qmeta))
        refuse(f"its architecture is {f}, the int8 model's {q}")
    for what, verb, f, q in (("features", "reads", fmeta.features, qmeta.features),
                             ("labels", "predicts", fmeta.labels, qmeta.labels)):
        f, q = list(f), list(q)
        if f != q:
            order = " in another order" if sorted(map(str, f)) == sorted(map(str, q)) else ""
            refuse(f"it {verb} {'the same' if order else 'other'} {what}{order} ({_shown(f)}; the int8 model: "
                   f"{_shown(q)})")
    fc, qc = fmeta.config or {}, qmeta.config or {}
    if fc != qc:
        keys = [k for k in sorted(set(fc) | set(qc), key=str) if fc.get(k) != qc.get(k)]
        refuse("its settings differ (" + ", ".join(f"{printable(k)} {fc.get(k)} vs {qc.get(k)}" for k in keys[:4])
               + ("" if len(keys) <= 4 else f", ... ({len(keys)} in all)") + " in the int8 model)")
    fn, qn = fmeta.normalization or {}, qmeta.normalization or {}
    if (fn.get("mean"), fn.get("std")) != (qn.get("mean"), qn.get("std")):
        refuse("its input normalisation (mean, std) differs, so it was trained on other data")
    for key in ("data_sha256", "data"):
        f, q = getattr(fmeta, key), getattr(qmeta, key)
        if f is not None and q is not None and f != q:
            refuse(f"it was trained on other data ('{printable(fmeta.data)}'; the int8 model on "
                   f"'{printable(qmeta.data)}'{', a file that has changed since' if key == 'data_sha256' else ''})")
    verdict, why = same_run(fmeta, qmeta, graph, int8_graph)
    if verdict is False:
        refuse(f"it was {why}")
    return verdict, why


def check_recorded_float(validation: dict, data: str, measured: dict, model, float_model) -> None:
    """UsageError unless the per-reading accuracies `measured` of the float model on `data`'s
    test split agree, within RECORDED_FLOAT_TOLERANCE, with those the int8 export recorded
    (`validation`, the int8 file's `edgeseq.validation`) for the float model it was checked
    against: a float model of the same settings but another training (seed, epochs,
    checkpoint) does not. Skipped where the export was validated on other data or recorded no
    such figures. Used only where `check_float_twin` could not tell (older files)."""
    if not isinstance(validation, dict) or validation.get("data") != data:
        return
    for key, got in measured.items():
        want = validation.get(key)
        if _is_fraction(want) and abs(got - want) > RECORDED_FLOAT_TOLERANCE:
            what = "never reset" if "continuous" in key else "per sequence, per reading"
            raise UsageError(
                f"--float '{printable(float_model)}' is not the float twin of '{printable(model)}': on the "
                f"{printable(data)} test split it scores {got:.4f} ({what}) where the float model the int8 export "
                f"was checked against scored {want:.4f}, so it is another training (seed, epochs or checkpoint) "
                f"of the same settings; {TWIN_REMEDY}")


def _continuous(sess, meta, X, Y, ends) -> float:
    """Per-reading accuracy of ONNX Runtime on never-reset streams X (orders, L, F)."""
    logits = run_streams(sess, meta, X)                                     # (L, orders, C)
    return score_continuous(logits.argmax(-1).T, Y, ends)["reading_accuracy"]


def _is_fraction(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0 <= x <= 1.0
