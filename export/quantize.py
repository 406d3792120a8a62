"""int8 models: onnxruntime's quantizer on the exported step graph, validated against the float twin.

Both schemes quantize the weights of every MatMul and Gemm (the recurrent cells are exported
with separate input and state MatMuls for this, see `FusedRecurrentStep`), symmetric int8 per
output channel. Everything else (gate arithmetic, layer norm, softmax, the state and the KV
cache between calls) stays float32, so an int8 model speaks the same step contract as its float
twin and the runtime treats both alike. (In a static RNN/GRU/LSTM the new state also feeds the
next product, and the quantizer returns that graph output as its dequantized copy: its values
leave each call on that product's int8 grid. The SSM's state is given its own copy and stays
unrounded; see `isolate_matmul_inputs`.)

- `dynamic`: activations are quantized per call to uint8 from their observed range
  (`quantize_dynamic`, MatMulInteger). Nothing to calibrate.
- `static`: activations are int8 with a fixed symmetric scale per tensor, calibrated by
  running the float model over every training sequence as a stream, state fed back, and
  taking each tensor's min/max (QDQ format). Fixed scales are what integer-only targets
  need, so this is the default.

Both use `reduce_range` (7-bit weights, -64..63): x86 CPUs with AVX2 but no VNNI multiply
uint8 x int8 with VPMADDUBSW, which adds two products into int16 and saturates when both are
large (2 x 255 x 127 > 32767); with 7-bit weights the pair sum cannot pass 32767. Full-range
weights measured no better here and can be silently wrong on such CPUs.

Validation: the int8 model and its float twin run the same real readings (test sequences
concatenated into long streams, state never reset) and the test split. The export fails,
leaving no file, when the mean output error passes `max_error` of the float output range or
test accuracy drops by more than `max_accuracy_drop` on either protocol, unless `keep_anyway`
is set. Accuracy is scored per reading: per sequence, at every reading past the first quarter
of each test sequence, each its own stream (3,000 readings on BasicMotions, where the 40
final readings alone would make one point less than one sequence, and a single near-tie
decide); continuous, on the test sequences joined in 3 seeded orders and never reset, past
the grace period after each change (`edgeseq.runtime.evaluate.continuous`).

One verdict, for the step that runs: the int8 model is judged on the backend that will run it
(`judge_backend`), the one `StreamSession` picks by default here: native where the C extension
is built and runs the file (a static int8 RNN/GRU/LSTM then computes the firmware's integer
step, whose logits differ from onnxruntime's QDQ arithmetic by quantization-sized amounts; an
SSM or Transformer computes onnxruntime's own arithmetic), onnxruntime otherwise (dynamic int8,
no extension: the report's `backend_note` says why), or the one `backend` names. The other
backend is scored as well where it can run and the report holds both (`backends`); only the
judged one decides, so a model is written wherever the step that will run it keeps within the
bounds, whatever the other backend's figures.

What makes the error small (measured on BasicMotions, seeds 0-4, README "int8"):
- input equalization (`equalize_input`): the reading's features share one activation scale;
  evening their ranges out first cut the worst RNN's static error from 2.04% to 0.59%.
- MatMuls of two activations (the Transformer's attention scores and weighted sum over the
  KV cache) stay float: they have no weights to shrink, and one fixed scale for a cache
  whose history grows cost the Transformer 1-2% mean error (0.5% without them).

State-space models (`export.step.SSMStep`, exported with one MatMul per projection): every
projection is int8 unless named in `float_parts`; the decay and the state update are
element-wise and stay float32, and static export gives the MatMul that reads the state its
own copy (`isolate_matmul_inputs(outputs=True)`) so that the state leaves each call
unrounded. Measured on BasicMotions, seed 0 (`scripts/ssm_int8_parts.py`): mean error 0.71%
static (0.77% with the state rounded to int8 between calls, 0.78% with the decays on an int8
grid), 0.15% dynamic; keeping the readout or the output projection float as well lowered the
error by at most 0.04 percentage points (to 0.67%) for 3.4-4.0 KB more file and no accuracy,
so `SSM_FLOAT_PARTS` is empty.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from edgeseq import contract
from edgeseq.data import DATA_REMEDY, LABELS_REMEDY, Dataset, load_dataset
from edgeseq.errors import DataError, ExportValidationError, ReadingError, UsageError
from edgeseq.runtime.evaluate import (STREAM_READINGS, final_accuracy, joined_streams, long_streams, output_error,
                                      reading_accuracy, run_each, run_session, run_streams, score_continuous)
from edgeseq.runtime.session_checks import BACKENDS, default_backend
from export.validate import cpu_session

SCHEMES = ("static", "dynamic")
DEFAULT_SCHEME = "static"
EQUALIZE_ALPHA = 0.5         # input equalization strength (SmoothQuant's migration strength)
MAX_ERROR = 0.02              # mean |int8 - float| logit error, as a fraction of the float logits' range
MAX_ACCURACY_DROP = 0.01      # per-reading test accuracy, float minus int8 (0.01 = one point)
OP_TYPES = ["MatMul", "Gemm"]
SSM_PARTS = ("x", "gate", "delta", "readout", "out")    # a state-space layer's projections (`SSMStep`)
SSM_FLOAT_PARTS = ()          # of those, kept float in int8 export: none paid for itself (docstring above)
BACKEND_FIGURES = ("mean_rel", "max_rel", "int8_accuracy", "int8_reading_accuracy", "int8_continuous_accuracy",
                   "within_bounds")   # per step backend in an int8 report (`backends`); the judged one's rest is top level


def _reader(feeds: list):
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)
    return Reader()


@contextlib.contextmanager
def _quiet():
    """The quantizer logs a pre-processing hint on the root logger for every model; we do not
    pre-process (the graphs are already optimised and fully shaped), so keep it off screen."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def isolate_matmul_inputs(proto: onnx.ModelProto, outputs: bool = False) -> int:
    """Give every MatMul/Gemm activation input that other nodes also read its own Identity copy.

    The static quantizer puts one Q/DQ pair on a tensor and hands the dequantized value to
    every consumer. For the GRU's state h (read by its MatMul and by z * (h - n)) that both
    feeds rounding error into the state update and stops onnxruntime from fusing the pair
    into QLinearMatMul, leaving a weight dequantization on every call. onnxruntime removes
    the Identity when it loads the model.

    outputs=True counts a graph output as one more reader: the quantizer makes a quantized
    tensor that is also a graph output come out as its dequantized copy, so a state that a
    MatMul reads (a state-space layer's readout) would be rounded to int8 between calls.
    Returns the number of copies made."""
    readers: dict = {}
    for node in proto.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    if outputs:
        for out in proto.graph.output:
            readers[out.name] = readers.get(out.name, 0) + 1
    inits = {t.name for t in proto.graph.initializer}
    nodes, made = [], 0
    for node in proto.graph.node:
        if node.op_type in OP_TYPES and node.input[0] not in inits and readers[node.input[0]] > 1:
            copy = f"{node.input[0]}.{node.name or made}.q"
            nodes.append(onnx.helper.make_node("Identity", [node.input[0]], [copy], name=f"{copy}.identity"))
            node.input[0] = copy
            made += 1
        nodes.append(node)
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    return made


def equalize_input(ckpt: dict, train_split, alpha: float = EQUALIZE_ALPHA) -> tuple:
    """(checkpoint computing the same function, per-feature scale s (F,) float64).

    One int8 activation scale covers all features of the normalised reading, and their
    ranges differ (BasicMotions: 3.8 to 16.5 standard deviations), so a narrow feature keeps
    only a few of its 256 steps. Dividing feature f by s_f inside the graph's normalisation and
    multiplying the input weights' column f by s_f changes nothing in float and evens the
    ranges out. s_f = r_f^alpha / w_f^(1 - alpha), r_f the largest |normalised value| in the
    training split, w_f the largest |weight| that reads feature f: alpha 1 equalizes the
    activations alone and coarsens the weights of wide features; 0.5 splits the difficulty
    (Xiao et al. 2023, "SmoothQuant", eq. 4). Measured here on BasicMotions RNNs, seeds 0-4,
    static: the worst mean int8 error went from 2.04% of range to 0.59% (seed 3: 2.04% to
    0.27%; seed 1 rose from 0.29% to 0.59%).

    ckpt: an edgeseq checkpoint dict; train_split: a `Split` (X (N, T, F) raw readings).
    Returns a new checkpoint (the given one is not changed) whose normalization carries
    `input_scale`, and s, scaled so that its largest entry is 1."""
    import copy

    import numpy as np
    import torch

    from edgeseq.models import build_model
    norm = ckpt["normalization"]
    mean, std = np.asarray(norm["mean"], np.float64), np.asarray(norm["std"], np.float64)
    X = np.concatenate([train_split.X[i, :n] for i, n in enumerate(train_split.lengths)])
    if norm.get("gain_floor") is not None:                                      # the gain stage, per sequence
        from edgeseq.data import GAIN_RELEASE, gain_features
        X = np.concatenate([gain_features(train_split.X[i, :n], norm["gain_floor"],
                                          norm.get("gain_release", GAIN_RELEASE))
                            for i, n in enumerate(train_split.lengths) if n])
    elif norm.get("asinh_scale") is not None:                                   # the input transform first
        X = np.arcsinh(X.astype(np.float32) / np.asarray(norm["asinh_scale"], np.float32))
    r = np.maximum(np.abs((X - mean) / std).max(0), 1e-6)                       # (F,)
    key = build_model(ckpt["arch"], ckpt["config"]).input_weight
    w = np.maximum(np.abs(ckpt["state_dict"][key].double().numpy()).max(0), 1e-12)   # (F,)
    s = r ** alpha / w ** (1 - alpha)
    flat = r < 1.0          # only a channel that never varied in training stays under 1 std: leave it unscaled
    if flat.all():
        s = np.ones_like(s)
    elif flat.any():
        s[flat] = s[~flat].max()
    s = s / s.max()
    out = copy.copy(ckpt)
    sd = dict(ckpt["state_dict"])
    st = torch.tensor(s, dtype=torch.float32)
    sd["norm.std"] = sd["norm.std"] * st
    sd[key] = sd[key] * st                                                      # columns: (out, F) * (F,)
    out["state_dict"] = sd
    out["normalization"] = {**norm, "input_scale": s.tolist()}
    return out, s


def activation_products(proto: onnx.ModelProto) -> list:
    """Names of the MatMul nodes whose inputs are both activations (no weight initializer)."""
    inits = {t.name for t in proto.graph.initializer}
    return [n.name for n in proto.graph.node
            if n.op_type in OP_TYPES and not any(i in inits for i in n.input[:2])]


def float_matmuls(proto: onnx.ModelProto, parts) -> list:
    """Names of the MatMul/Gemm nodes of a state-space step graph (exported with split=True)
    whose weight is one of `parts` ("x", "gate", "delta", "readout", "out") of any layer."""
    import re
    pattern = re.compile(rf"ssm\d+_({'|'.join(map(re.escape, parts))})$") if parts else None
    return [n.name for n in proto.graph.node
            if pattern and n.op_type in OP_TYPES and len(n.input) > 1 and pattern.match(n.input[1])]


CALIBRATION_READINGS = 20_000     # static int8 ranges from at most this many training readings ...
CALIBRATION_PER_SEQUENCE = 1_000  # ... at most this many from each sequence's start: each call's feeds
                                  # are kept (a Transformer's: its whole cache), so more costs memory
                                  # in proportion and moves the ranges little


def calibration_split(split, seed: int = 0):
    """The training readings static int8 calibrates on: every sequence's first
    CALIBRATION_PER_SEQUENCE readings, sequences in a seeded order up to CALIBRATION_READINGS
    (at least one). A `Split`."""
    n = np.minimum(split.lengths, CALIBRATION_PER_SEQUENCE)
    order = np.random.default_rng(seed).permutation(len(split))
    take = order[:max(1, int(np.searchsorted(np.cumsum(n[order]), CALIBRATION_READINGS, side="right")))]
    T = int(n[take].max())
    return type(split)(split.X[take, :T], split.y[take], n[take], split.Y[take, :T])


def quantize(float_path, out_path, scheme: str, calibration: list | None = None, float_parts=()) -> dict:
    """Quantize the float step graph at `float_path` into `out_path`; returns the settings used.

    float_parts: state-space projections to keep float (`float_matmuls`); () for other models."""
    from onnxruntime.quantization import (CalibrationMethod, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)
    if scheme not in SCHEMES:
        raise UsageError(f"unknown int8 scheme '{scheme}'; use {' or '.join(SCHEMES)}")
    proto = onnx.load_model(str(float_path))
    exclude = activation_products(proto) + float_matmuls(proto, float_parts)
    if "" in exclude:             # the quantizer matches nodes by name: "" would keep every unnamed node float
        raise ExportValidationError("the float graph has unnamed nodes, which int8 export cannot tell apart; "
                                    "export it again with this edgeseq")
    settings = {"scheme": scheme, "weights": "int8", "weight_scale": "symmetric, per output channel",
                "reduce_range": True, "op_types": OP_TYPES, "float_nodes": exclude,
                "tool": f"onnxruntime {ort.__version__}"}
    with _quiet():
        if scheme == "dynamic":
            quantize_dynamic(str(float_path), str(out_path), op_types_to_quantize=OP_TYPES, per_channel=True,
                             reduce_range=True, weight_type=QuantType.QInt8, nodes_to_exclude=exclude)
            settings["activations"] = "uint8, range measured per call"
        else:
            if not calibration:
                raise UsageError("static int8 needs calibration readings")
            quantize_static(str(float_path), str(out_path), _reader(calibration), quant_format=QuantFormat.QDQ,
                            op_types_to_quantize=OP_TYPES, per_channel=True, reduce_range=True,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                            calibrate_method=CalibrationMethod.MinMax, nodes_to_exclude=exclude,
                            extra_options={"ActivationSymmetric": False, "WeightSymmetric": True,
                                           "MatMulConstBOnly": True})
            settings["activations"] = "int8, asymmetric per tensor, calibrated (min/max)"
    return settings


def judge_backend(path, backend: str | None = None, shown=None) -> tuple:
    """(the backend int8 export judges the model at `path` on, why the native step cannot run
    it here or None). `backend`: "auto" (None: $EDGESEQ_BACKEND, else auto) judges the backend
    `StreamSession(path)` picks by default, which is native where the extension is built,
    `native.supports` the file and the probe agrees with its graph, onnxruntime otherwise;
    "native" or "onnxruntime" judges that one. Raises UsageError for "native" where it cannot
    run, and for a backend that is none of `BACKENDS`. `shown`: the name the reason gives the
    file (default `path`; export checks a temporary file that becomes `out`)."""
    from edgeseq.runtime.session import StreamSession
    named = default_backend() if backend is None else backend
    if not isinstance(named, str) or named not in BACKENDS:
        raise UsageError(f"backend must be one of {', '.join(BACKENDS)}, got {named!r}")
    auto = StreamSession(path, streams=1, backend="auto")
    why = auto.backend_note if auto.backend == "onnxruntime" else None
    if why and shown is not None:
        why = why.replace(str(path), str(shown))
    if named == "native" and why:
        raise _native_refused(why, backend is not None)
    return (auto.backend if named == "auto" else named), why


def _native_refused(why: str, named: bool) -> UsageError:
    source = "" if named else " (from $EDGESEQ_BACKEND)"
    return UsageError(f"int8 export cannot judge the model on backend 'native'{source}: {why}; "
                      "use --backend onnxruntime (or auto, which judges onnxruntime here)")


def broken_bounds(fig: dict, float_reading: float, float_continuous: float, max_error: float,
                  max_accuracy_drop: float) -> list:
    """One phrase per bound an int8 backend's figures break (`mean_rel`, `int8_reading_accuracy`,
    `int8_continuous_accuracy`, against the float twin's per-reading accuracies); [] within them.
    NaN figures break their bound."""
    broken = []
    if not np.isfinite(fig["mean_rel"]):
        broken.append("logits that are not finite (NaN or Inf)")
    elif not fig["mean_rel"] <= max_error:
        broken.append(f"mean output error {fig['mean_rel']:.2%} of the output range (bound {max_error:.2%})")
    racc_q, cq = fig["int8_reading_accuracy"], fig["int8_continuous_accuracy"]
    if not float_reading - racc_q <= max_accuracy_drop + 1e-9:
        broken.append(f"per-reading test accuracy {racc_q:.3f} vs float {float_reading:.3f} "
                      f"(bound: a drop of {max_accuracy_drop:.3f})")
    if not float_continuous - cq <= max_accuracy_drop + 1e-9:
        broken.append(f"continuous (never reset) per-reading accuracy {cq:.3f} vs float {float_continuous:.3f} "
                      f"(bound: a drop of {max_accuracy_drop:.3f})")
    return broken


def _run_native(path, X, lengths, classes: int) -> np.ndarray:
    """`run_session` on the native backend; all NaN where the step gives NaN/Inf logits (the
    session refuses them), which `broken_bounds` then reports, as onnxruntime's NaN would be."""
    try:
        return run_session(path, X, lengths, backend="native")
    except ReadingError:
        return np.full((X.shape[1], X.shape[0], classes), np.nan, np.float32)


ANOMALY_DETECTED_DROP = 0.1     # int8 may miss at most this share of the anomalies its float twin detects


def task_verdict(kind, score, bounds, runs, judged, native_why, fsess, meta, ds, X, ref, max_error, keep_anyway,
                 scheme, float_check, **extra) -> dict:
    """int8 export's verdict on an anomaly or regression model (`kind`): per backend, the
    outputs' error against the float twin (`output_error`, bound `max_error` of the output
    range) and the task's figures on the test split, `score(outputs [T, S, C])`, held to the
    float twin's by `bounds(figures, float figures)` -> [broken bound, ...]. Raises
    ExportValidationError where the judged backend breaks one (unless `keep_anyway`); returns
    the report, with `float_<kind>` and `int8_<kind>` figures and `extra`."""
    te = ds.test
    ref_fig = score(run_streams(fsess, meta, te.X, te.lengths))
    out = {}
    for name, go in sorted(runs.items(), key=lambda kv: kv[0] != judged):
        err = output_error(ref, go(X))
        fig = score(go(te.X, te.lengths))
        broken = []
        if not np.isfinite(err["mean_rel"]) or not err["mean_rel"] <= max_error:
            broken.append(f"mean output error {err['mean_rel']:.2%} of the output range (bound {max_error:.2%})")
        broken += bounds(fig, ref_fig)
        out[name] = {"mean_rel": err["mean_rel"], "max_rel": err["max_rel"], kind: fig, "broken": broken,
                     "within_bounds": not broken}
    mine = out[judged]
    if mine["broken"] and not keep_anyway:
        raise ExportValidationError(
            f"int8 ({scheme}) on the {judged} backend breaks its bound: {'; '.join(mine['broken'])}; the model was "
            "not written (try the other --int8-scheme, or --keep-anyway to write it regardless)",
            max_diff=mine["max_rel"], tolerance=max_error)
    return {"float_vs_torch_max_abs_diff": float_check["max_abs_diff"], "streams": int(X.shape[0]),
            "readings": int(X.shape[1]), "mean_rel": mine["mean_rel"], "max_rel": mine["max_rel"],
            "within_bounds": mine["within_bounds"], f"float_{kind}": ref_fig, f"int8_{kind}": mine[kind],
            "backend": judged, "backend_note": native_why,
            "backends": {n: {k: v for k, v in f.items() if k != "broken"} for n, f in out.items()},
            "data": ds.name, "max_error": max_error, **extra}


def anomaly_check(runs, judged, native_why, fsess, meta, ds, X, ref, max_error, keep_anyway, scheme, float_check):
    """`task_verdict` for an anomaly model: the anomaly figures on the test split at the model's
    default settings (`edgeseq.runtime.anomaly.figures`); int8 must detect at least the float
    twin's anomalies less ANOMALY_DETECTED_DROP of them, with no more false alarms than it plus one."""
    from edgeseq.runtime.anomaly import AnomalySpec, figures, run
    spec = AnomalySpec.from_json(meta.task)
    norm = meta.normalization
    te = ds.test

    def score(outs):
        res = run(te.X, te.lengths, np.nan_to_num(np.transpose(outs, (1, 0, 2))), norm["mean"], norm["std"], spec)
        return figures(te.Y, te.lengths, res, spec, spec.rate_hz)

    def bounds(fig, ref_fig):
        broken = []
        if fig["detected"] < ref_fig["detected"] - ANOMALY_DETECTED_DROP * max(ref_fig["anomalies"], 1):
            broken.append(f"detected {fig['detected']} of {fig['anomalies']} anomalies vs float {ref_fig['detected']}")
        if fig["false_alarms"] > ref_fig["false_alarms"] + 1:
            broken.append(f"{fig['false_alarms']} false alarms vs float {ref_fig['false_alarms']}")
        return broken
    return task_verdict("anomaly", score, bounds, runs, judged, native_why, fsess, meta, ds, X, ref, max_error,
                        keep_anyway, scheme, float_check)


REGRESS_MAE_RISE = 0.1         # int8's per-reading error (MAE) may exceed its float twin's by at most this share


def regress_check(runs, judged, native_why, fsess, meta, ds, X, ref, max_error, keep_anyway, scheme, float_check):
    """`task_verdict` for a regression model: each target's per-reading mean absolute error on
    the test split (each recording its own stream, `edgeseq.runtime.regress.figures`), at most
    REGRESS_MAE_RISE above the float twin's."""
    from edgeseq.runtime.regress import figures, in_units
    task = meta.task
    te = ds.test
    lag = int(task.get("persistence_lag", 1))

    def score(outs):
        pred = in_units(task, np.transpose(outs, (1, 0, 2)))
        return figures(np.nan_to_num(pred, nan=np.inf), te.targets, te.lengths, lag, task["targets"])

    def bounds(fig, ref_fig):
        broken = []
        for t, f in fig["targets"].items():
            bound = ref_fig["targets"][t]["mae"] * (1 + REGRESS_MAE_RISE)
            if not f["mae"] <= bound:
                broken.append(f"{t} MAE {f['mae']:.4g} vs float {ref_fig['targets'][t]['mae']:.4g} (bound "
                              f"{bound:.4g}, {REGRESS_MAE_RISE:.0%} above float)")
        return broken
    return task_verdict("regress", score, bounds, runs, judged, native_why, fsess, meta, ds, X, ref, max_error,
                        keep_anyway, scheme, float_check, max_mae_rise=REGRESS_MAE_RISE)


def dataset_for(ckpt: dict, data: str | Dataset | None) -> Dataset:
    """The data int8 export calibrates and checks on: `data` if given, else the run's training
    data (the absolute path the checkpoint stores; older checkpoints store only a name, which
    reopens the embedded set), with its channels in the model's order (`align_features`) and, for
    a classifier, its classes in the model's label order, matched by name (`Dataset.for_labels`:
    data with only some of the labels is accepted, a label the model does not predict refused)."""
    if isinstance(data, Dataset):
        ds = data
    else:
        spec = data or ckpt.get("data_path") or ckpt.get("dataset") or "basicmotions"
        try:           # a .csv: the model's columns by name, so a column training ignored is not read here either
            csv = str(spec).lower().endswith(".csv")
            task = ckpt.get("task") or {}
            targets = task.get("targets") if task.get("kind") == "regress" and csv else None
            ds = load_dataset(spec, features=list(ckpt["features"]), targets=targets) if csv else load_dataset(spec)
        except DataError as e:
            if data:
                raise
            if ckpt.get("data_path"):
                gone = not Path(spec).exists()
                why = f"the run's training data '{spec}' is gone" if gone else f"its training data is unusable: {e}"
            else:
                why = f"this checkpoint names its training data only as '{spec}', which is not a data set or file"
            raise DataError(f"int8 export needs the training data for calibration and checks, but {why}; "
                            "pass it with --data") from None
        sha = ckpt.get("data_sha256")
        if not data and ckpt.get("data_path") and isinstance(sha, str) and ds.sha256 and ds.sha256 != sha.lower():
            raise DataError(f"int8 export calibrates and checks on the run's training data '{spec}', which has changed "
                            "since training (its sha256 is not the one the checkpoint records), so its test split may "
                            f"now hold training sequences; pass --data '{spec}' to use it as it is now, or restore it")
    ds = ds.for_model(ckpt["features"], f"data '{ds.name}'", DATA_REMEDY)
    kind = (ckpt.get("task") or {}).get("kind", "classify")
    if kind == "regress":                       # its targets in the model's order, by name
        from dataclasses import replace

        from edgeseq.runtime.regress import aligned
        lag = int((ckpt.get("task") or {}).get("persistence_lag", 1))
        if int(ds.test.lengths.max()) <= lag:
            raise DataError(f"data '{ds.name}' has no test recording longer than the model's persistence lag ({lag} "
                            "readings), which int8 export scores it beside; pass data with longer recordings")
        try:
            return replace(ds, train=aligned(ds.train, ds.target_names, ckpt["labels"], f"data '{ds.name}'"),
                           test=aligned(ds.test, ds.target_names, ckpt["labels"], f"data '{ds.name}'"),
                           target_names=list(ckpt["labels"]))
        except UsageError as e:
            raise DataError(f"{e} (int8 export checks a regression model on them)") from None
    if kind != "classify":
        from edgeseq.runtime.anomaly import binary      # a forecast's outputs are not the data's labels
        return binary(ds)[0]
    return ds.for_labels(ckpt["labels"], f"data '{ds.name}'", LABELS_REMEDY)     # by name, as eval reads it


def check_readings(meta, ds: Dataset) -> None:
    """DataError (one line) where a valid reading of `ds`'s training or test split lies beyond
    what a session of the model `meta` describes takes (`reading_bounds`): calibrating or
    scoring on it would compute with Inf, which the session refuses a reading to prevent."""
    from edgeseq.runtime.session_checks import reading_bounds
    hi, lo, why = reading_bounds(meta, len(meta.features))
    for name, split in (("training", ds.train), ("test", ds.test)):
        X = split.X[np.arange(split.X.shape[1])[None, :] < split.lengths[:, None]]       # (readings, F)
        ok = np.abs(X) <= hi if lo is None else (X >= lo) & (X <= hi)
        if not ok.all():
            r, f = np.argwhere(~ok)[0]
            reason = why[f] if isinstance(why, list) else why
            raise DataError(f"data '{ds.name}': a {name} reading has {float(X[r, f]):g} in '{meta.features[f]}', "
                            f"beyond {reason}, which the model cannot take; check the data, or train on it")


def export_int8(ckpt: dict, out, scheme: str = DEFAULT_SCHEME, data=None, max_history: int | None = None,
                max_error: float = MAX_ERROR, max_accuracy_drop: float = MAX_ACCURACY_DROP,
                keep_anyway: bool = False, stream_readings: int = STREAM_READINGS, seed: int = 0,
                float_parts=None, backend: str | None = None, float_bytes: int | None = None) -> dict:
    """Export the float step graph (validated against torch), quantize it, validate the int8
    model against the float one and move it into place. Returns the export report.

    float_parts: for a state-space model, the projections kept float (of `SSM_PARTS`; None:
    `SSM_FLOAT_PARTS`); ignored for the other architectures, a UsageError when unknown.
    The report's `float_bytes` is the size of the file `export_model` writes for the same
    checkpoint and max_history (the float model a user deploys), not of the split graph
    quantized here, whose unfused cells serialise to another size. A caller that has just
    written that file passes its size as `float_bytes` (int, bytes), which spares a second
    trace of the float graph.

    backend: the step backend whose figures decide the bound (`judge_backend`): None
    ($EDGESEQ_BACKEND, else "auto") or "auto" judges the one `StreamSession` runs the file on
    here, "native" or "onnxruntime" that one. The report's int8 figures (`mean_rel`,
    `int8_reading_accuracy`, `int8_continuous_accuracy`, `within_bounds`, ...) are the judged
    backend's; `backend` names it; `backend_note` says why the native step cannot run the file
    here (None where it can); `backends` maps each backend that ran ("onnxruntime", and
    "native" where it can run) to its own `BACKEND_FIGURES` (mean and max error, the three
    accuracies, `within_bounds`); `backends_differ` is True where those differ.

    Raises UsageError (bad settings; backend "native" where the native step cannot run the
    file), DataError (calibration data), ExportValidationError (the judged backend breaks a
    bound: its one-line message names the backend, the bounds broken and the other backend's
    verdict; nothing is written)."""
    from export.step import build_graph, export_model, stamp, strip, weights_sha256, write_validated
    from export.validate import validate_stream

    out = Path(out)
    if scheme not in SCHEMES:
        raise UsageError(f"unknown int8 scheme '{scheme}'; use {' or '.join(SCHEMES)}")
    if ckpt["arch"] not in contract.STREAM_ARCHS:
        raise UsageError(f"int8 export covers the streaming architectures ({', '.join(contract.STREAM_ARCHS)}), "
                         f"not {ckpt['arch']}")
    if out.suffix != ".onnx" or out.is_dir():
        raise UsageError(f"output '{out}' must be a file name ending in .onnx")
    if stream_readings < STREAM_READINGS:
        raise UsageError(f"int8 validation needs streams of at least {STREAM_READINGS} readings")
    named = default_backend() if backend is None else backend          # a bad name fails before any work
    if not isinstance(named, str) or named not in BACKENDS:
        raise UsageError(f"backend must be one of {', '.join(BACKENDS)}, got {named!r}")
    if named == "native":                 # what is known before quantizing; the file itself is checked once written
        from edgeseq.runtime import native
        why = native.why_unavailable() or (
            "int8 dynamic scales activations per call: onnxruntime only" if scheme == "dynamic" else "")
        if why:
            raise _native_refused(why, backend is not None)
    unknown = sorted(set(float_parts or ()) - set(SSM_PARTS))
    if unknown:
        raise UsageError(f"unknown state-space part(s) {', '.join(unknown)} to keep float; choose from "
                         f"{', '.join(SSM_PARTS)}")
    ds = dataset_for(ckpt, data)
    given = ckpt
    ckpt, _ = equalize_input(ckpt, ds.train)
    proto, meta, model = build_graph(ckpt, max_history, split=True)
    check_readings(meta, ds)
    meta.weights_sha256 = weights_sha256(given)          # the checkpoint as trained, as its float export records
    # The working directory lies beside `out` under the same temporary name as its final file
    # (`.<name>.<pid>.<random>.tmp`): one a killed export left is removed by the next export
    # to `out` (write_validated below, or here) once its process is gone.
    from edgeseq.runtime.statefile import TEMP_SUFFIX, remove_leftovers, temp_prefix
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out)
    with tempfile.TemporaryDirectory(prefix=temp_prefix(out), suffix=TEMP_SUFFIX, dir=out.parent) as tmp:
        float_path = os.path.join(tmp, "float.onnx")
        ssm = ckpt["arch"] == "ssm"
        if scheme == "static":
            isolate_matmul_inputs(proto, outputs=ssm)        # a state-space state stays float between calls
        onnx.save_model(proto, float_path)
        float_check = validate_stream(float_path, model, meta, contract.VALIDATION_READINGS, seed=seed)
        fsess = cpu_session(float_path)
        calibration = []
        cal = calibration_split(ds.train, seed)
        run_streams(fsess, meta, cal.X, cal.lengths, record=calibration)
        run_streams(fsess, meta, long_streams(ds.train, stream_readings, seed=seed + 1), record=calibration)
        q_path = os.path.join(tmp, "int8.onnx")
        parts = (SSM_FLOAT_PARTS if float_parts is None else tuple(float_parts)) if ssm else ()
        settings = quantize(float_path, q_path, scheme, calibration, parts)
        if ssm:
            settings["float_parts"] = ["state", "decay", "state update", *parts]
        if scheme == "dynamic":
            settings["checked"] = ("one stream per call (a call's batch shares its activation scales); "
                                   "StreamSession runs each stream in its own call too")
        settings["input_equalization"] = {"alpha": EQUALIZE_ALPHA, "scale": meta.normalization["input_scale"]}
        if scheme == "static":
            settings["calibration"] = {
                "data": ds.name, "calls": len(calibration),
                "streams": f"{len(ds.train)} training sequences, then 4 streams of {stream_readings} readings "
                           "joining them end to end (state fed back throughout)"}
        qproto = onnx.load_model(q_path)
        qproto.ir_version = contract.IR_VERSION
        strip(qproto)
        meta.quantization = settings
        stamp(qproto, meta)

        # Dynamic int8 scales each call's whole batch at once, so a stream's answer depends on
        # the streams beside it; it is checked one stream per call, as a single-stream device runs it.
        run_q = run_each if scheme == "dynamic" else run_streams

        def check(path):
            judged, native_why = judge_backend(path, backend, shown=out)
            qsess = cpu_session(path)
            X = long_streams(ds.test, stream_readings, seed=seed)
            ref = run_streams(fsess, meta, X)
            if meta.kind in ("anomaly", "regress"):
                runs = {"onnxruntime": lambda X_, L=None: run_q(qsess, meta, X_, L)}
                if native_why is None:
                    runs["native"] = lambda X_, L=None: _run_native(path, X_, L, len(meta.labels))
                check_task = anomaly_check if meta.kind == "anomaly" else regress_check
                return check_task(runs, judged, native_why, fsess, meta, ds, X, ref, max_error, keep_anyway,
                                     scheme, float_check)
            lf = run_streams(fsess, meta, ds.test.X, ds.test.lengths)
            racc_f = reading_accuracy(lf, ds.test)
            Xc, Yc, ends = joined_streams(ds.test, seed=seed)                  # never reset, as a device runs
            cont = score_continuous(run_streams(fsess, meta, Xc).argmax(-1).T, Yc, ends)
            cf = cont["reading_accuracy"]

            def score(run) -> dict:
                """The int8 figures and broken bounds of one backend; run(X, lengths) -> logits."""
                err = output_error(ref, run(X))
                lq = run(ds.test.X, ds.test.lengths)
                racc_q = reading_accuracy(lq, ds.test)
                cq = score_continuous(run(Xc).argmax(-1).T, Yc, ends)["reading_accuracy"]
                fig = {**err, "int8_accuracy": final_accuracy(lq, ds.test), "int8_reading_accuracy": racc_q,
                       "accuracy_drop": racc_f - racc_q, "error_margin": max_error / max(err["mean_rel"], 1e-12),
                       "int8_continuous_accuracy": cq, "continuous_accuracy_drop": cf - cq}
                fig["broken"] = broken_bounds(fig, racc_f, cf, max_error, max_accuracy_drop)
                fig["within_bounds"] = not fig["broken"]
                return fig

            runs = {"onnxruntime": lambda X_, L=None: run_q(qsess, meta, X_, L)}
            if native_why is None:
                runs["native"] = lambda X_, L=None: _run_native(path, X_, L, len(meta.labels))
            figures = {name: score(runs[name]) for name in sorted(runs, key=lambda n: n != judged)}
            mine = figures[judged]
            others = [n for n in figures if n != judged]
            # Each backend's headline figures (the file's metadata carries them: kept short).
            backends = {n: {k: f[k] for k in BACKEND_FIGURES} for n, f in figures.items()}
            differ = any(b != backends[judged] for b in backends.values())
            report = {"float_vs_torch_max_abs_diff": float_check["max_abs_diff"],
                      "streams": int(X.shape[0]), "readings": int(X.shape[1]),
                      **{k: v for k, v in mine.items() if k != "broken"},
                      "float_accuracy": final_accuracy(lf, ds.test), "float_reading_accuracy": racc_f,
                      "float_continuous_accuracy": cf, "continuous_grace": cont["grace"],
                      "continuous_scored_share": cont["scored_share"],
                      "backend": judged, "backend_note": native_why, "backends": backends, "backends_differ": differ,
                      "data": ds.name, "max_error": max_error, "max_accuracy_drop": max_accuracy_drop}
            if mine["broken"] and not keep_anyway:
                on = f"on the {judged} backend" + (" (the native step cannot run it here)" if native_why else "")
                rest = "".join(f"; on {n} it stays within it" if figures[n]["within_bounds"] else
                               f"; on {n} it breaks it too ({'; '.join(figures[n]['broken'])})" for n in others)
                passes = [n for n in others if figures[n]["within_bounds"]]
                hint = f"--backend {passes[0]} if that is the backend you deploy on, " if passes else ""
                raise ExportValidationError(
                    f"int8 ({scheme}) {on} breaks its bound: {'; '.join(mine['broken'])}{rest}; the model was not "
                    f"written (try {hint}the other --int8-scheme, or --keep-anyway to write it regardless)",
                    max_diff=mine["max_abs"], tolerance=max_error)
            return report

        # The float twin as `edgeseq export` writes it (fused cells, validation record), sized
        # for the report: the quantized split graph is not the file a user compares with.
        if float_bytes is None:
            float_bytes = export_model(given, os.path.join(tmp, "float-export.onnx"), max_history=max_history)["bytes"]
        report = write_validated(qproto, out, check)
    report["float_bytes"] = float_bytes
    report["quantization"] = settings
    return report
