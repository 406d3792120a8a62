"""The quantization parameters of a QDQ graph, checked when a model is opened.

onnxruntime loads a QuantizeLinear or DequantizeLinear whose zero point is one entry short, or
whose per-channel scales do not match the axis they scale, and fails only when it runs, with
log lines instead of a reason. `check_qdq` refuses such a file before anything runs, with one
line naming the node's tensor: every QuantizeLinear/DequantizeLinear whose scale and zero point
are constants has

- a scale of float numbers, finite and > 0 (onnxruntime's quantizer writes 1.0 where a range is
  empty, so an exported file never holds 0);
- a zero point of an integer type, with as many entries as the scale and the same shape;
- one scale (a scalar or one entry: per tensor), or a 1-D list of them (per channel) with one
  entry per index of the axis it scales, where that axis has a known length (a constant input,
  or a graph input of static shape), and an axis within the input's rank.

Blocked quantization (`block_size`) has other shape rules and is left to onnxruntime. numpy
only: the graph comes from `edgeseq.runtime.native.onnxfile`. `strip_copies` follows a tensor
back through the copies a QDQ graph makes of it, for the walks that read such a graph.
"""

from __future__ import annotations

import numpy as np

from edgeseq.errors import ModelFileError

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def strip_copies(producer: dict, init: dict, tensor: str) -> str:
    """The tensor that `tensor` copies: back through Identity nodes and QuantizeLinear ->
    DequantizeLinear pairs on activations (a DequantizeLinear of a constant is a tensor of its
    own). `producer`: each tensor's node; `init`: the constants by name."""
    while True:
        n = producer.get(tensor)
        if n is not None and n.op_type == "Identity":
            tensor = n.input[0]
        elif (n is not None and n.op_type == "DequantizeLinear" and n.input[0] not in init
              and getattr(producer.get(n.input[0]), "op_type", None) == "QuantizeLinear"):
            tensor = producer[n.input[0]].input[0]
        else:
            return tensor


def _first_bad(a: np.ndarray) -> str:
    flat = np.asarray(a, np.float64).reshape(-1)
    bad = ~(np.isfinite(flat) & (flat > 0))
    i = int(np.argmax(bad))
    return f"{flat[i]:g}" if flat.size == 1 else f"{flat[i]:g} (entry {i})"


def check_qdq(initializers: dict, nodes, path, input_shapes: dict | None = None) -> None:
    """ModelFileError (one line, naming the node's input and the constant) for the first
    QuantizeLinear/DequantizeLinear whose constant scale or zero point is not as the module
    docstring says. `initializers`: name -> numpy array; `nodes`: objects with op_type, input,
    attrs (a dict) or attribute; `input_shapes`: graph input name -> shape list (ints where
    static), for the axis length of a quantized graph input."""
    input_shapes = input_shapes or {}
    for n in nodes:
        if n.op_type not in QDQ_OPS or len(n.input) < 2:
            continue
        attrs = getattr(n, "attrs", None)
        if attrs is None:
            attrs = {a.name: (a.i if a.type == 2 else None) for a in getattr(n, "attribute", [])}
        if attrs.get("block_size"):
            continue
        x, s_name = n.input[0], n.input[1]
        z_name = n.input[2] if len(n.input) > 2 and n.input[2] else None
        if s_name not in initializers:
            continue
        what = f"'{path}': {n.op_type} of {x}"
        scale = np.asarray(initializers[s_name])
        if scale.dtype.kind != "f":
            raise ModelFileError(f"{what} has a scale {s_name} of {scale.dtype}, not float numbers; export it again")
        if scale.ndim > 1:
            raise ModelFileError(f"{what} has scales {s_name} of shape {list(scale.shape)}; one scale or a list of "
                                 "them is expected: export it again")
        with np.errstate(invalid="ignore"):
            if scale.size == 0 or not (np.isfinite(scale) & (scale > 0)).all():
                shown = "no value" if scale.size == 0 else _first_bad(scale)
                raise ModelFileError(f"{what} has scale {s_name} = {shown}; a scale must be a finite number "
                                     "> 0: export it again")
        if z_name is not None and z_name in initializers:
            zero = np.asarray(initializers[z_name])
            if zero.dtype.kind not in "iu":
                raise ModelFileError(f"{what} has a zero point {z_name} of {zero.dtype}, not integers; "
                                     "export it again")
            if zero.shape != scale.shape and not zero.size == 1 == scale.size:   # [] beside [1]: one value each
                raise ModelFileError(f"{what} has {zero.size} zero point(s) in {z_name} {list(zero.shape)} for "
                                     f"{scale.size} scale(s) in {s_name} {list(scale.shape)}; they must match: "
                                     "export it again")
        if scale.size == 1:
            continue
        shape = None
        if x in initializers:
            shape = list(np.asarray(initializers[x]).shape)
        elif x in input_shapes and input_shapes[x] is not None:
            shape = list(input_shapes[x])
        if shape is None:
            continue
        axis = attrs.get("axis", 1)
        axis = 1 if axis is None else int(axis)
        if not -len(shape) <= axis < len(shape):
            raise ModelFileError(f"{what} scales axis {axis} of a tensor of {len(shape)} axes; export it again")
        length = shape[axis]
        if isinstance(length, (int, np.integer)) and length != scale.size:
            raise ModelFileError(f"{what} has {scale.size} scales in {s_name} for the {length} channels of its "
                                 f"axis {axis}; they must match: export it again")
