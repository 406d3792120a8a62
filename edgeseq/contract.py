"""The step-graph contract: every exporter writes it and the runtime reads it.

One ONNX file per model; one call advances every stream by one reading. This module holds
names, axes, metadata keys and tolerances only, and imports neither torch nor onnx.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

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
META_NORM = "edgeseq.normalization"      # {"mean", "std"[, "input_scale"]}: the graph computes
                                         # (reading - mean) / (std * input_scale); input_scale (int8
                                         # models) is the input equalization, all ones when absent
META_STATE = "edgeseq.state"
META_MAX_HISTORY = "edgeseq.max_history"
META_QUANT = "edgeseq.quantization"
META_VERSION = "edgeseq.version"
META_CONFIG = "edgeseq.config"
META_VALIDATION = "edgeseq.validation"

REQUIRED_KEYS = (META_FORMAT, META_ARCH, META_MODE, META_FEATURES, META_LABELS, META_STATE)

STREAM_ARCHS = ("rnn", "gru", "lstm", "transformer")
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
KIND_GROWING = "growing"    # one row per reading (KV cache)


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
    def from_json(cls, d: dict) -> "StateSpec":
        return cls(name=d["name"], output=d["output"], shape=tuple(d["shape"]),
                   kind=d.get("kind", KIND_FIXED), dtype=d.get("dtype", "float32"),
                   role=d.get("role", ""))

    def bytes_per_reading(self) -> int:
        """Bytes one stream holds per history row (growing) or in all (fixed)."""
        n = 4 if self.dtype == "float32" else 1
        for d in self.shape:
            if isinstance(d, int):
                n *= d
        return n


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

    def to_props(self) -> dict:
        return {
            META_FORMAT: json.dumps(self.format),
            META_ARCH: json.dumps(self.arch),
            META_MODE: json.dumps(self.mode),
            META_FEATURES: json.dumps(self.features),
            META_LABELS: json.dumps(self.labels),
            META_STATE: json.dumps([s.to_json() for s in self.state]),
            META_MAX_HISTORY: json.dumps(self.max_history),
            META_QUANT: json.dumps(self.quantization),
            META_VERSION: json.dumps(self.version),
            META_NORM: json.dumps(self.normalization),
            META_CONFIG: json.dumps(self.config),
        }

    @classmethod
    def from_props(cls, props: dict) -> "ModelMeta":
        missing = [k for k in REQUIRED_KEYS if k not in props]
        if missing:
            raise KeyError(", ".join(missing))
        get = lambda k, default=None: json.loads(props[k]) if k in props else default  # noqa: E731
        return cls(
            arch=get(META_ARCH), mode=get(META_MODE), features=get(META_FEATURES),
            labels=get(META_LABELS),
            state=[StateSpec.from_json(s) for s in get(META_STATE)],
            max_history=get(META_MAX_HISTORY), quantization=get(META_QUANT),
            version=get(META_VERSION, ""), format=get(META_FORMAT),
            normalization=get(META_NORM), config=get(META_CONFIG), validation=get(META_VALIDATION),
        )
