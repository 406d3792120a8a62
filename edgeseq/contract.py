"""The step-graph contract: every exporter writes it and the runtime reads it.

One ONNX file per model; one call advances every stream by one reading. This module holds
names, axes, metadata keys and tolerances only, and imports neither torch nor onnx.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field

from edgeseq.errors import ModelFileError

FORMAT_VERSION = 1
OPSET = 18          # ONNX Runtime 1.16 reads opset <= 19
IR_VERSION = 9      # ONNX Runtime < 1.17 refuses IR 10

# Graph inputs and outputs.
READING = "reading"                  # float32 [batch, features], raw (un-normalised) values
POSITION = "position"                # int64 [batch], readings this stream has seen before this one
LOGITS = "logits"                    # float32 [batch, classes]
PROBS = "probs"                      # float32 [batch, classes], softmax of logits (saves the host a softmax)
WINDOW = "window"                    # float32 [batch, time, features], window models only
LENGTHS = "lengths"                  # int64 [batch], valid readings per window (window models)


def state_in(i: int) -> str:
    return f"state_in.{i}"


def state_out(i: int) -> str:
    return f"state_out.{i}"


def past(layer: int, kv: str) -> str:
    return f"past.{layer}.{kv}"


def present(layer: int, kv: str) -> str:
    return f"present.{layer}.{kv}"


BATCH_AXIS = "batch"
HISTORY_AXIS = "history"

# Metadata keys (values are JSON).
META_FORMAT = "edgeseq.format"
META_ARCH = "edgeseq.arch"
META_MODE = "edgeseq.mode"               # "stream" (one reading per call) or "window"
META_FEATURES = "edgeseq.features"
META_LABELS = "edgeseq.labels"
META_NORM = "edgeseq.normalization"      # {"mean", "std"[, "input_scale"][, "asinh_scale"]}: the graph
                                         # computes (t - mean) / (std * input_scale), t = asinh(reading /
                                         # asinh_scale) (the input transform) or the reading where absent,
                                         # asinh_reach its training readings' largest |value| per channel;
                                         # with "gain_floor" [F] (>= 0, one > 0) and "gain_release" (nepers
                                         # a reading), t is the gain stage's F + G features (state role
                                         # "gain", `edgeseq.data.gain_features`) and mean/std have F + G;
                                         # input_scale (int8 models) is the input equalization, all ones
                                         # when absent
META_STATE = "edgeseq.state"
META_MAX_HISTORY = "edgeseq.max_history"
META_QUANT = "edgeseq.quantization"
META_VERSION = "edgeseq.version"
META_CONFIG = "edgeseq.config"
META_VALIDATION = "edgeseq.validation"
META_DECISION = "edgeseq.decision"       # null or the decision layer's settings (`edgeseq.runtime.decision`):
                                         # smoothing, per-class thresholds, minimum duration, refractory
                                         # time, background classes; absent in files without one
META_TASK = "edgeseq.task"               # absent or null: classification. {"kind": "anomaly", ...settings}
                                         # (`edgeseq.runtime.anomaly.AnomalySpec`): the outputs are next-reading
                                         # forecast means and log-variances, labels 'mean:<f>' then 'logvar:<f>';
                                         # {"kind": "regress", "targets", "target_mean", "target_std"}: the
                                         # outputs are normalised per-reading targets, labels the target names
TASK_KINDS = ("classify", "anomaly", "regress")
META_DATA_SHA = "edgeseq.data_sha256"     # that data file's sha256 when it trained (eval checks it)
META_DATA = "edgeseq.data"               # what the model was trained on: an embedded data set's name
                                         # ("basicmotions") or a data file's absolute path; null when it
                                         # cannot be reopened (data built in memory). Absent in older
                                         # files: the commands that evaluate a model then use basicmotions
META_WEIGHTS_SHA = "edgeseq.weights_sha256"  # the trained checkpoint's fingerprint: sha256 of its architecture
                                         # and state_dict tensors (`export.step.weights_sha256`), the same in
                                         # its float and int8 exports; null or absent in older files

REQUIRED_KEYS = (META_FORMAT, META_ARCH, META_MODE, META_FEATURES, META_LABELS, META_STATE)

STREAM_ARCHS = ("rnn", "gru", "lstm", "transformer", "ssm")
WINDOW_ARCHS = ("bigru", "bilstm")
ARCHS = STREAM_ARCHS + WINDOW_ARCHS

# Export validation: ONNX Runtime against torch over streams of this many readings. float32
# rounding grows with the size of the outputs (and, a little, with the stream's length), so the
# bound scales with the reference: |ort - torch| <= ATOL + RTOL * max|torch logits| over the whole
# run, for the logits and for the probabilities alike. The top class must agree at every reading
# whose reference top-two margin is wider than twice the bound (closer calls may flip on rounding).
# Measured here (seed-0 BasicMotions models, 200 readings): float32 rounding differs by 2e-7 to
# 7e-7 of max|logit|; the largest weight of any one matrix moved by 1% of its value changes the
# logits by 5e-5 to 6e-3 of it (tests/test_export.py checks both sides with 5%).
VALIDATION_READINGS = 200
VALIDATION_RTOL = 2e-5
VALIDATION_ATOL = 1e-6


def validation_bound(scale: float, rtol: float = VALIDATION_RTOL, atol: float = VALIDATION_ATOL) -> float:
    """The largest |ONNX Runtime - torch| difference export accepts when the reference outputs
    reach `scale` = max|logit| over the validation run (float, in logit units)."""
    return atol + rtol * scale

KIND_FIXED = "fixed"        # constant bytes per stream (recurrent state)
KIND_GROWING = "growing"    # one row per reading (KV cache); the history axis is axis 2: [B, heads, T, head_dim]
KINDS = (KIND_FIXED, KIND_GROWING)
STATE_DTYPES = ("float32",)  # the runtime allocates and feeds float32 state
MODES = ("stream", "window")
STATE_ROLES = {"rnn": ("h",), "gru": ("h",), "lstm": ("h", "c"), "ssm": ("s",), "transformer": ("key", "value")}
F32_TINY, F32_LARGEST = 1.1754943508222875e-38, 3.4028234663852886e38   # float32's smallest normal and largest
                                                                          # finite values, exactly
GAIN_ROLE = "gain"   # the gain stage's state (B, F), after the architecture's own; in any streaming model's state
                                        # each architecture's state tensors, by the role before ".<layer>"
GROWING_HISTORY_AXIS = 2


class MetadataError(ModelFileError):
    """edgeseq metadata that is missing, is not valid JSON of the right types, or disagrees with
    the graph it describes. `key` is the metadata key at fault; `missing` lists the required
    keys that are absent (empty otherwise). The message has no file name: `open_model` adds it."""

    def __init__(self, key: str, message: str, missing=()):
        super().__init__(message)
        self.key = key
        self.missing = list(missing)


def _compact(v) -> str:
    """JSON without spaces: a metadata value as few bytes as it takes."""
    return json.dumps(v, separators=(",", ":"))


class ArchMismatchError(MetadataError):
    """`edgeseq.arch` names one kind of cell where the weights, read by the native or
    firmware reader, are another's (GRU and RNN state tensors look alike): a file the graph
    would run under a false name, so it is refused rather than run on onnxruntime."""

    def __init__(self, message: str):
        super().__init__(META_ARCH, message)


def _fail(key: str, what: str, remedy: str = "export it again"):
    raise MetadataError(key, f"metadata {key} {what}; {remedy}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _show(v) -> str:
    """A short, one-line rendering of a bad metadata value for an error message."""
    kind = {str: "a string", dict: "an object", list: "a list", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(v), type(v).__name__)
    text = json.dumps(v) if isinstance(v, (str, int, float, bool, type(None))) else ""
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{kind} ({text})" if text else kind


def _check_arch(arch: str, mode: str, state: list) -> None:
    """MetadataError on `edgeseq.arch` where it is not the architecture of the file's mode and
    state tensors (once those agree with the graph): a windowed (bidirectional) model has mode
    "window" and no state, a streaming one mode "stream" and the state roles of its kind
    (`STATE_ROLES`; entries written without a role are not checked)."""
    want = "window" if arch in WINDOW_ARCHS else "stream"
    if mode != want:
        _fail(META_ARCH, f"says {arch!r}, whose mode is {want!r}, but the graph is a {mode!r} model")
    roles = {s.role.split(".")[0] for s in state if s.role} - {GAIN_ROLE}
    if arch in WINDOW_ARCHS and state or roles and roles != set(STATE_ROLES.get(arch, ())):
        _fail(META_ARCH, f"says {arch!r}, but the state tensors are those of {_kind_of(roles)}")


def _kind_of(roles: set) -> str:
    """The architectures whose state roles these are, for a message."""
    kinds = [a for a, r in STATE_ROLES.items() if roles == set(r)]
    return " or ".join(kinds) if kinds else "no known architecture"


def _names(key: str, v, what: str) -> list:
    """A non-empty list of distinct, non-empty strings (feature or label names)."""
    if not isinstance(v, list) or not v:
        _fail(key, f"must be a non-empty list of {what} names, got {_show(v)}")
    for i, name in enumerate(v):
        if not isinstance(name, str) or not name.strip():
            _fail(key, f"entry {i} must be a non-empty name, got {_show(name)}")
    dup = sorted(n for n, k in Counter(v).items() if k > 1)
    if dup:
        _fail(key, f"names {', '.join(repr(d) for d in dup)} more than once")
    return list(v)


@dataclass(frozen=True)
class StateSpec:
    """One state tensor: graph input `name` is fed from graph output `output` of the last call."""

    name: str
    output: str
    shape: tuple            # ints, or "batch" / "history" for the dynamic axes
    kind: str = KIND_FIXED
    dtype: str = "float32"
    role: str = ""          # "h.0", "c.0", "key.1", ...

    def to_json(self) -> dict:
        return {"name": self.name, "output": self.output, "shape": list(self.shape),
                "kind": self.kind, "dtype": self.dtype, "role": self.role}

    @classmethod
    def from_json(cls, d, index: int = 0) -> "StateSpec":
        """Parse one entry of `edgeseq.state` strictly; MetadataError (key edgeseq.state) names
        the entry and field at fault. Absent kind/dtype/role default to fixed/float32/""."""
        def bad(what):
            _fail(META_STATE, f"entry {index} {what}")
        if not isinstance(d, dict):
            bad(f"must be an object with name, output and shape, got {_show(d)}")
        for k in ("name", "output"):
            if not isinstance(d.get(k), str) or not d[k]:
                bad(f"needs '{k}': a graph {'input' if k == 'name' else 'output'} name, got {_show(d.get(k))}")
        shape = d.get("shape")
        if not isinstance(shape, list) or not shape:
            bad(f"('{d['name']}') needs 'shape': a list of sizes, got {_show(shape)}")
        for k, s in enumerate(shape):
            if not (s in (BATCH_AXIS, HISTORY_AXIS) or (_is_int(s) and s >= 1)):
                bad(f"('{d['name']}') shape axis {k} must be a size >= 1, '{BATCH_AXIS}' or '{HISTORY_AXIS}', "
                    f"got {_show(s)}")
        if shape[0] != BATCH_AXIS or shape.count(BATCH_AXIS) != 1:
            bad(f"('{d['name']}') shape must have '{BATCH_AXIS}' on axis 0 and nowhere else, got {shape}")
        kind, dtype, role = d.get("kind", KIND_FIXED), d.get("dtype", "float32"), d.get("role", "")
        if kind not in KINDS:
            bad(f"('{d['name']}') has kind {_show(kind)}; this runtime reads {' or '.join(KINDS)}")
        if kind == KIND_GROWING and (len(shape) <= GROWING_HISTORY_AXIS or shape[GROWING_HISTORY_AXIS] != HISTORY_AXIS
                                     or shape.count(HISTORY_AXIS) != 1):
            bad(f"('{d['name']}') is growing but its shape {shape} lacks '{HISTORY_AXIS}' on axis "
                f"{GROWING_HISTORY_AXIS} (batch, heads, history, head_dim)")
        if kind == KIND_FIXED and HISTORY_AXIS in shape:
            bad(f"('{d['name']}') is fixed but its shape {shape} has a '{HISTORY_AXIS}' axis")
        if dtype not in STATE_DTYPES:
            bad(f"('{d['name']}') has dtype {_show(dtype)}; this runtime holds {', '.join(STATE_DTYPES)} state")
        if not isinstance(role, str):
            bad(f"('{d['name']}') role must be a string, got {_show(role)}")
        return cls(name=d["name"], output=d["output"], shape=tuple(shape), kind=kind, dtype=dtype, role=role)

    def bytes_per_reading(self) -> int:
        """Bytes one stream holds per history row (growing) or in all (fixed)."""
        n = 4 if self.dtype == "float32" else 1
        for d in self.shape:
            if isinstance(d, int):
                n *= d
        return n


def _load_json(props: dict, key: str):
    raw = props[key]
    if isinstance(raw, bytes):
        try:
            raw = raw.decode()
        except UnicodeDecodeError:
            _fail(key, "is not UTF-8 text")
    if not isinstance(raw, str):
        _fail(key, f"must be JSON text, got {type(raw).__name__}")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        _fail(key, f"is not valid JSON ({raw[:30]!r}{'...' if len(raw) > 30 else ''})")


def _normalization(v, n_features=None):
    """null, or {"mean", "std"[, "input_scale"][, "asinh_scale"[, "asinh_reach"]]}: lists of one
    finite number per feature (their count against the features is checked with the graph, in
    `check_graph`), std, input_scale, asinh_scale and asinh_reach > 0. `n_features`: the
    metadata's feature count; where the lists' lengths disagree, the first list whose length
    is not that count is the one named."""
    if v is None:
        return None
    if not isinstance(v, dict):
        _fail(META_NORM, f"must be an object with mean and std, got {_show(v)}")
    n = None
    if "asinh_reach" in v and "asinh_scale" not in v:
        _fail(META_NORM, "has asinh_reach without asinh_scale")
    if "gain_floor" in v or "gain_release" in v:
        _gain(v)
    keys = [k for k in ("mean", "std", "input_scale", "asinh_scale", "asinh_reach")
            if k in ("mean", "std") or k in v]
    if "gain_floor" in v:
        n_features = None          # mean and std have F + G entries: `check_graph` counts them
    sizes = {len(v[k]) for k in keys if isinstance(v.get(k), list) and v[k]}
    if n_features is not None and len(sizes) > 1:
        n = n_features             # the lists disagree: blame the one that disagrees with the features
    for k in keys:
        a = v.get(k)
        if not isinstance(a, list) or not a or n is not None and len(a) != n:
            _fail(META_NORM, f"'{k}' must be a list of {n or 'one per feature'} numbers, got {_show(a)}"
                  + (f" of {len(a)}" if isinstance(a, list) else ""))
        n = len(a)
        for i, x in enumerate(a):
            if not _is_number(x):
                _fail(META_NORM, f"'{k}' entry {i} must be a finite number, got {_show(x)}")
            if k != "mean" and x <= 0:
                _fail(META_NORM, f"'{k}' entry {i} is {x}; it must be > 0")
    return v


def _gain(v: dict) -> None:
    """The gain stage's keys: gain_floor a list of finite numbers >= 0, one or more > 0, with
    no asinh_scale beside it; gain_release a finite number > 0."""
    floor, release = v.get("gain_floor"), v.get("gain_release")
    if "asinh_scale" in v:
        _fail(META_NORM, "has both asinh_scale and gain_floor; a model has one input transform")
    want = (f"a list of one number per feature, 0 or within float32's normal range ({F32_TINY:.3g}.."
            f"{F32_LARGEST:.3g}), one or more > 0")
    if not isinstance(floor, list) or not floor or not any(_is_number(x) and x > 0 for x in floor):
        _fail(META_NORM, f"'gain_floor' must be {want}, got {_show(floor)}")
    for i, x in enumerate(floor):
        if not _is_number(x) or not (x == 0 or F32_TINY <= x <= F32_LARGEST):
            _fail(META_NORM, f"'gain_floor' entry {i} is {x if _is_number(x) else _show(x)}; it must be 0 or "
                  f"within float32's normal range "
                  f"({F32_TINY:.3g}..{F32_LARGEST:.3g})")
    if not _is_number(release) or not F32_TINY <= release <= 1e6:
        _fail(META_NORM, f"'gain_release' must be a number > 0 (nepers a reading, at most 1e6), got {_show(release)}")


def raw_readings(norm, z):
    """Raw readings float32 [..., F] whose normalised values (what the graph's first nodes
    make of them) are `z` [..., F]: mean + std x input_scale x z, then through the inverse of
    the input transform (asinh_scale x sinh) where the model has one. With the gain stage
    (`gain_floor`), a gained channel's reading is that value clipped to -1..1 (its share of the
    level) times exp(its level's mean + std x tanh(z)). `norm`: the metadata's normalization
    (None: z as it is). What seeded probes and parity checks stream."""
    import numpy as np
    z = np.asarray(z, np.float64)
    if norm is None:
        return z.astype(np.float32)
    F = z.shape[-1]
    if norm.get("gain_floor") is not None:
        on = np.asarray(norm["gain_floor"], np.float64) > 0
        m, s = np.asarray(norm["mean"], np.float64), np.asarray(norm["std"], np.float64) * np.asarray(
            norm.get("input_scale") or [1.0] * len(norm["mean"]), np.float64)
        t = m[:F] + s[:F] * z
        lev = np.zeros(F)
        lev[on] = m[F:]
        spread = np.zeros(F)
        spread[on] = s[F:]
        t = np.where(on, np.clip(t, -1.0, 1.0) * np.exp(lev + spread * np.tanh(z)), t)
        big = float(np.finfo(np.float32).max) / 4
        return np.clip(t, -big, big).astype(np.float32)
    ones = [1.0] * F
    t = np.asarray(norm["mean"], np.float64) + np.asarray(norm["std"], np.float64) * np.asarray(
        norm.get("input_scale") or ones, np.float64) * z
    if norm.get("asinh_scale") is not None:
        with np.errstate(over="ignore"):
            t = np.asarray(norm["asinh_scale"], np.float64) * np.sinh(t)
    big = float(np.finfo(np.float32).max) / 4
    return np.clip(t, -big, big).astype(np.float32)


def _task(v, features: list, labels: list):
    """null (a classifier), or the task object checked against the features and labels."""
    if v is None:
        return None
    if not isinstance(v, dict) or v.get("kind") not in TASK_KINDS:
        _fail(META_TASK, f"must be null or an object whose kind is one of {', '.join(TASK_KINDS)}, got {_show(v)}")
    kind = v["kind"]
    if kind == "classify":
        return None
    if kind == "anomaly":
        want = [f"mean:{f}" for f in features] + [f"logvar:{f}" for f in features]
        if labels != want:
            _fail(META_LABELS, "of an anomaly model must be 'mean:<feature>' then 'logvar:<feature>' for every "
                  "feature, in the features' order")
        from edgeseq.errors import UsageError
        from edgeseq.runtime.anomaly_watch import AnomalySpec  # numpy only; imported when a file has one
        try:
            return AnomalySpec.from_json(v).to_json()
        except UsageError as e:
            _fail(META_TASK, str(e), "run `edgeseq calibrate` on the model again")
    targets, mean, std = v.get("targets"), v.get("target_mean"), v.get("target_std")
    if targets != labels:
        _fail(META_TASK, "'targets' must name the outputs, as the labels do")
    for k, a in (("target_mean", mean), ("target_std", std)):
        if not isinstance(a, list) or len(a) != len(labels) or not all(_is_number(x) for x in a) \
                or k == "target_std" and not all(x > 0 for x in a):
            _fail(META_TASK, f"'{k}' must be one finite number{' > 0' if k == 'target_std' else ''} per target")
    lag = v.get("persistence_lag", 1)
    if not isinstance(lag, int) or isinstance(lag, bool) or not 1 <= lag <= 10**9:
        _fail(META_TASK, f"'persistence_lag' must be a whole number of readings of at least 1, got {_show(lag)}")
    return {"kind": "regress", "targets": list(targets), "target_mean": list(mean), "target_std": list(std),
            "persistence_lag": lag}


@dataclass
class ModelMeta:
    """What the runtime needs to know about a model, parsed from `metadata_props`."""

    arch: str
    mode: str
    features: list
    labels: list
    state: list = field(default_factory=list)
    max_history: int | None = None
    quantization: dict | None = None
    version: str = ""
    format: int = FORMAT_VERSION
    normalization: dict | None = None
    config: dict | None = None
    validation: dict | None = None      # figures the export measured (read-only here: export writes it)
    data: str | None = None             # the training data (META_DATA); None: unknown or an older file
    data_sha256: str | None = None      # that file's sha256 (META_DATA_SHA); None: embedded, unknown or older
    decision: dict | None = None        # the decision layer's settings (META_DECISION), checked against the
                                        # labels (`DecisionSpec.from_json`); None: the file has none
    task: dict | None = None            # META_TASK: None for a classifier, else {"kind": ...} (checked)
    weights_sha256: str | None = None   # META_WEIGHTS_SHA: the checkpoint exported; None: unknown or an older file

    @property
    def kind(self) -> str:
        """'classify', 'anomaly' or 'regress'."""
        return "classify" if self.task is None else self.task["kind"]

    def to_props(self) -> dict:
        """The metadata as ONNX metadata_props: compact JSON per key (a small model's file is
        a few KB of them)."""
        return {
            META_FORMAT: _compact(self.format),
            META_ARCH: _compact(self.arch),
            META_MODE: _compact(self.mode),
            META_FEATURES: _compact(self.features),
            META_LABELS: _compact(self.labels),
            META_STATE: _compact([s.to_json() for s in self.state]),
            META_MAX_HISTORY: _compact(self.max_history),
            META_QUANT: _compact(self.quantization),
            META_VERSION: _compact(self.version),
            META_NORM: _compact(self.normalization),
            META_CONFIG: _compact(self.config),
            META_DATA: _compact(self.data),
            META_DATA_SHA: _compact(self.data_sha256),
            META_WEIGHTS_SHA: _compact(self.weights_sha256),
            **({META_DECISION: _compact(self.decision)} if self.decision is not None else {}),
            **({META_TASK: _compact(self.task)} if self.task is not None else {}),
        }

    @property
    def batch_dependent(self) -> bool:
        """True when one stream's output depends on the other rows of its call: dynamic int8
        (`quantization.scheme == "dynamic"`) scales each call's activations over the whole batch."""
        return isinstance(self.quantization, dict) and self.quantization.get("scheme") == "dynamic"

    @classmethod
    def from_props(cls, props: dict) -> "ModelMeta":
        """Parse `metadata_props` (key -> JSON text) strictly, once.

        Raises MetadataError (a ModelFileError) naming the key: required keys missing
        (`missing` lists them), text that is not JSON, or values of the wrong type or range
        (labels/features: non-empty lists of distinct names; state: objects with valid
        name/output/shape/kind/dtype; max_history: null or an int >= 1; format: an int this
        runtime reads; normalization: mean/std lists of finite values, std > 0;
        quantization/config/validation: null or an object; decision: null or settings that
        `edgeseq.runtime.decision.DecisionSpec.from_json` accepts for the labels; data: null or a non-empty name or
        path; data_sha256, weights_sha256: null or 64 hex digits). Never TypeError/KeyError."""
        if not isinstance(props, dict):
            raise MetadataError("", "metadata is not a key -> JSON text map; export it again")
        missing = [k for k in REQUIRED_KEYS if k not in props]
        if missing:
            raise MetadataError(missing[0], f"missing metadata {', '.join(missing)}; export it again", missing)
        get = lambda k, default=None: _load_json(props, k) if k in props else default  # noqa: E731
        fmt = get(META_FORMAT)
        if not _is_int(fmt) or fmt < 1:
            _fail(META_FORMAT, f"must be a format number >= 1, got {_show(fmt)}")
        if fmt > FORMAT_VERSION:
            _fail(META_FORMAT, f"is {fmt}, this runtime reads up to {FORMAT_VERSION}", "upgrade edgeseq")
        arch, mode = get(META_ARCH), get(META_MODE)
        if not isinstance(arch, str) or not arch:
            _fail(META_ARCH, f"must be an architecture name, got {_show(arch)}")
        if mode not in MODES:
            _fail(META_MODE, f"must be {' or '.join(repr(m) for m in MODES)}, got {_show(mode)}")
        features = _names(META_FEATURES, get(META_FEATURES), "feature")
        labels = _names(META_LABELS, get(META_LABELS), "label")
        raw_state = get(META_STATE)
        if not isinstance(raw_state, list):
            _fail(META_STATE, f"must be a list of state tensors, got {_show(raw_state)}")
        state = [StateSpec.from_json(s, i) for i, s in enumerate(raw_state)]
        for attr, reserved in (("name", (READING, POSITION, WINDOW, LENGTHS)), ("output", (LOGITS, PROBS))):
            seen = [getattr(s, attr) for s in state]
            dup = sorted({n for n in seen if seen.count(n) > 1 or n in reserved})
            if dup:
                _fail(META_STATE, f"uses {attr} {', '.join(repr(d) for d in dup)} twice or for another tensor")
        if arch not in ARCHS:
            _fail(META_ARCH, f"must be one of {', '.join(ARCHS)}, got {_show(arch)}")
        max_history = get(META_MAX_HISTORY)
        if max_history is not None and not (_is_int(max_history) and max_history >= 1):
            _fail(META_MAX_HISTORY, f"must be null or a number of readings >= 1, got {_show(max_history)}")
        quantization = get(META_QUANT)
        if quantization is not None and not isinstance(quantization, dict):
            _fail(META_QUANT, f"must be null or an object, got {_show(quantization)}")
        if quantization is not None and not isinstance(quantization.get("scheme", ""), str):
            _fail(META_QUANT, f"'scheme' must be a string, got {_show(quantization['scheme'])}")
        version = get(META_VERSION, "")
        if not isinstance(version, str):
            _fail(META_VERSION, f"must be a version string, got {_show(version)}")
        extra = {}
        for key, attr in ((META_CONFIG, "config"), (META_VALIDATION, "validation")):
            extra[attr] = get(key)
            if extra[attr] is not None and not isinstance(extra[attr], dict):
                _fail(key, f"must be null or an object, got {_show(extra[attr])}")
        extra["data"] = get(META_DATA)
        if extra["data"] is not None and not (isinstance(extra["data"], str) and extra["data"].strip()):
            _fail(META_DATA, f"must be null or the name or path of the training data, got {_show(extra['data'])}")
        for key, attr in ((META_DATA_SHA, "data_sha256"), (META_WEIGHTS_SHA, "weights_sha256")):
            extra[attr] = get(key)
            if extra[attr] is not None and not (isinstance(extra[attr], str)
                                                and re.fullmatch(r"[0-9a-fA-F]{64}", extra[attr])):
                _fail(key, f"must be null or a sha256 (64 hex digits), got {_show(extra[attr])}")
            if extra[attr] is not None:
                extra[attr] = extra[attr].lower()
        extra["decision"] = get(META_DECISION)
        task = get(META_TASK)
        if extra["decision"] is not None and isinstance(task, dict) and task.get("kind") in ("anomaly", "regress"):
            _fail(META_DECISION, "is set on an anomaly or regression model, which has no classes to decide on")
        if extra["decision"] is not None:
            from edgeseq.errors import UsageError
            from edgeseq.runtime.decision import DecisionSpec     # numpy only; imported when a file has one
            try:
                extra["decision"] = DecisionSpec.from_json(extra["decision"], labels).to_json()
            except UsageError as e:
                _fail(META_DECISION, str(e).removeprefix("decision: "), "run `edgeseq calibrate` on the model again")
        extra["task"] = _task(task, features, labels)
        return cls(arch=arch, mode=mode, features=features, labels=labels, state=state, max_history=max_history,
                   quantization=quantization, version=version, format=fmt,
                   normalization=_normalization(get(META_NORM), len(features)), **extra)

    def check_graph(self, inputs: dict, outputs: dict) -> None:
        """Check this metadata against the graph it came with.

        inputs, outputs: graph tensor name -> (dtype, shape), dtype a numpy name ("float32",
        "int64", or the runtime's own name for others), shape a list of ints (static), strings
        or None (dynamic), or None when unknown. Raises MetadataError naming the key that
        disagrees: the reading's feature axis vs `edgeseq.features`, the logits' class axis vs
        `edgeseq.labels` (where static), one mean and std per feature in `edgeseq.normalization`,
        each state tensor's presence, dtype, rank and static
        sizes vs `edgeseq.state`, or a graph input the runtime would not know how to feed."""
        def tensor(table, name, where, key, dtype, rank):
            if name not in table:
                _fail(key, f"promises graph {where} '{name}' but the graph has none")
            have, shape = table[name]
            if have != dtype:
                _fail(key, f"needs {where} '{name}' as {dtype} but the graph's is {have}")
            if shape is not None and len(shape) != rank:
                _fail(key, f"needs {where} '{name}' with {rank} axes but the graph's has {len(shape)} ({shape})")
            return shape

        def static(shape, axis):
            return shape[axis] if shape is not None and _is_int(shape[axis]) else None

        F, C = len(self.features), len(self.labels)
        if self.mode == "window":
            shape = tensor(inputs, WINDOW, "input", META_MODE, "float32", 3)
            fed = {WINDOW, LENGTHS}
            if LENGTHS in inputs:
                tensor(inputs, LENGTHS, "input", META_MODE, "int64", 1)
            feature_axis, what = 2, "windows have"
            if self.state:
                _fail(META_STATE, "lists state for a window model; a window model holds none")
        else:
            shape = tensor(inputs, READING, "input", META_MODE, "float32", 2)
            fed = {READING, POSITION} | {s.name for s in self.state}
            if POSITION in inputs:
                tensor(inputs, POSITION, "input", META_MODE, "int64", 1)
            feature_axis, what = 1, "reading has"
        if static(shape, feature_axis) not in (None, F):
            _fail(META_FEATURES, f"names {F} features but the graph's {what} {shape[feature_axis]} values")
        if self.normalization is not None:
            floor = self.normalization.get("gain_floor")
            G = 0 if floor is None else sum(f > 0 for f in floor)
            if floor is not None and len(floor) != F:
                _fail(META_NORM, f"has {len(floor)} gain floors for {F} features")
            if len(self.normalization["mean"]) != F + G:
                _fail(META_NORM, f"has {len(self.normalization['mean'])} means and stds for {F} features"
                      + (f" and {G} gain levels" if G else ""))
            gained = [i for i, s in enumerate(self.state) if s.role == GAIN_ROLE]
            if bool(G) != bool(gained) or self.mode == "window" and G:
                _fail(META_NORM, "has a gain stage but no state of role 'gain'" if G else
                      "has no gain_floor but the state lists one of role 'gain'")
            if gained and (gained != [len(self.state) - 1] or list(self.state[-1].shape) != [BATCH_AXIS, F]):
                _fail(META_STATE, f"must list the gain stage's state last, of shape ['{BATCH_AXIS}', {F}], once")
            levels = (self.config or {}).get("levels") if isinstance(self.config, dict) else None
            if levels is not None and (type(levels) is not int or levels != G):
                _fail(META_CONFIG, f"says levels {levels!r} but {META_NORM} gains {G} channel(s)")
        for name in (LOGITS, PROBS):
            if name == PROBS and name not in outputs:
                continue
            shape = tensor(outputs, name, "output", META_MODE, "float32", 2)
            if static(shape, 1) not in (None, C):
                _fail(META_LABELS, f"has {C} labels but the graph's {name} have {shape[1]} classes")
        for spec in self.state:
            for table, name, where in ((inputs, spec.name, "input"), (outputs, spec.output, "output")):
                shape = tensor(table, name, where, META_STATE, spec.dtype, len(spec.shape))
                if shape is None:
                    continue
                for axis, (want, got) in enumerate(zip(spec.shape, shape)):
                    if _is_int(want) and _is_int(got) and want != got or not _is_int(want) and _is_int(got):
                        _fail(META_STATE, f"gives '{name}' the shape {list(spec.shape)} but the graph's is "
                                          f"{list(shape)} (axis {axis})")
        unfed = sorted(set(inputs) - fed)
        if unfed:
            _fail(META_STATE if self.mode == "stream" else META_MODE,
                  f"does not describe graph input{'s' if len(unfed) > 1 else ''} {', '.join(repr(u) for u in unfed)}, "
                  "which the runtime would not know how to feed")
        _check_arch(self.arch, self.mode, self.state)      # the mode and state agree with the graph by now
