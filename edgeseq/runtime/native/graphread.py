"""What every native step reads off its graph alike: the normalisation it starts with
(`_normalization`, refused with `_refuse` where the graph is not edgeseq's export) and, for
int8, the grid its logits are rounded to (`output_grid`). numpy only; below the steps
(`NativeStep`, `attn`, `ssm`) and the probe, which all take these from here."""

from __future__ import annotations

import numpy as np

from edgeseq import contract
from edgeseq.errors import ModelFileError
from edgeseq.runtime.native.onnxfile import Graph


def _refuse(path, what: str):
    raise ModelFileError(f"'{path}' {what}; the native step runs edgeseq's own exports: onnxruntime only")


def input_transform(graph: Graph, F: int, path) -> tuple:
    """(asinh scale float32 [F] or None, the tensor the normalisation reads): the graph's
    optional input transform `Div(reading, scale)` -> `Asinh`, refused where the reading feeds
    anything else, or the scale is not a positive finite constant per feature."""
    init = graph.initializers
    div = next((n for n in graph.nodes if n.op_type == "Div" and n.input[:1] == [contract.READING]), None)
    if div is None:
        return None, contract.READING
    users = [n for n in graph.nodes if contract.READING in n.input]
    ash = next((n for n in graph.nodes if n.op_type == "Asinh" and n.input[:1] == div.output[:1]), None)
    if ash is None or len(users) != 1 or len(div.input) < 2 or div.input[1] not in init:
        _refuse(path, "divides the reading other than as asinh(reading / constant scale)")
    if len([n for n in graph.nodes if div.output[0] in n.input]) != 1:
        _refuse(path, "uses reading / scale other than in its asinh")
    try:
        scale = np.broadcast_to(np.asarray(init[div.input[1]], np.float32).reshape(-1), (F,)).copy()
    except ValueError:
        _refuse(path, f"has an asinh scale that is not one per feature of {F}")
    if not (np.isfinite(scale).all() and (scale > 0).all()):
        _refuse(path, "has an asinh scale that is not finite and above 0")
    return scale, ash.output[0]


def transform_nodes(graph: Graph) -> tuple:
    """([Div, Asinh], [the scale's name]) of the graph's input transform `Div(reading, s)` ->
    `Asinh`, ([], []) where the graph has none. What a planner that accounts for every node
    marks as read (after `input_transform` checked it), and what `load_model` checks against
    the metadata."""
    div = next((n for n in graph.nodes if n.op_type == "Div" and n.input[:1] == [contract.READING]), None)
    ash = None if div is None else next(
        (n for n in graph.nodes if n.op_type == "Asinh" and n.input[:1] == div.output[:1]), None)
    return ([div, ash], div.input[1:2]) if ash is not None else ([], [])


def _normalization(graph: Graph, F: int, path) -> tuple:
    """(mean, std) float32 [F] from the graph's `Sub(t, mean)` -> `Div(., std)`, t the reading
    or its input transform's output (`input_transform`)."""
    init = graph.initializers
    _, first = input_transform(graph, F, path)
    sub = next((n for n in graph.nodes if n.op_type == "Sub" and n.input[:1] == [first]), None)
    if sub is None or len(sub.input) < 2 or sub.input[1] not in init:
        _refuse(path, "does not start with reading - mean")
    div = next((n for n in graph.nodes if n.input[:1] == [sub.output[0]]), None)
    if div is None or div.op_type != "Div" or len(div.input) < 2 or div.input[1] not in init:
        _refuse(path, "does not divide reading - mean by constant standard deviations")
    consumers = [n for n in graph.nodes if sub.output[0] in n.input]
    if len(consumers) != 1:
        _refuse(path, "uses reading - mean other than to normalise it")
    try:
        mean = np.broadcast_to(np.asarray(init[sub.input[1]], np.float32).reshape(-1), (F,)).copy()
        std = np.broadcast_to(np.asarray(init[div.input[1]], np.float32).reshape(-1), (F,)).copy()
    except ValueError:
        _refuse(path, f"has normalisation constants that are not one per feature of {F}")
    return mean, std, div.output[0]


def output_grid(graph: Graph) -> float:
    """How far an int8 graph's own rounding moves its logits, whatever their size: the step of
    the grid the logits are quantized to (the scale of a DequantizeLinear that gives `logits`)
    plus one int8 step of every input of the head (its input's scale x the largest sum of
    |weights| of one class). 0 where the graph quantizes neither, or holds something else."""
    init = graph.initializers
    producer = {o: n for n in graph.nodes for o in n.output}

    def made(t):
        n = producer.get(t)
        while n is not None and n.op_type == "Identity" and n.input:
            t = n.input[0]
            n = producer.get(t)
        return t, n

    def scale(n) -> float:
        a = np.asarray(init.get(n.input[1], np.nan), np.float64) if len(n.input) > 1 else np.nan
        return float(np.max(np.abs(a))) if np.size(a) else np.nan

    try:
        with np.errstate(all="ignore"):
            grid = 0.0
            t, n = made(contract.LOGITS)
            if n is not None and n.op_type == "DequantizeLinear" and n.input[0] not in init:
                grid += scale(n)
                t, n = made(producer[n.input[0]].input[0]) if n.input[0] in producer else (t, None)
            if n is not None and n.op_type in ("Gemm", "MatMul") and len(n.input) >= 2:
                _, a = made(n.input[0])
                w_name, w = made(n.input[1])
                if a is not None and a.op_type == "DequantizeLinear":
                    if w is not None and w.op_type == "DequantizeLinear" and w.input[0] in init:
                        q = np.asarray(init[w.input[0]], np.float64)
                        ws = np.asarray(init[w.input[1]], np.float64).reshape(-1)
                        axis = int(w.attrs.get("axis", 1)) % max(q.ndim, 1)
                        shape = [1] * q.ndim
                        if ws.size > 1:
                            shape[axis] = ws.size
                        W = q * ws.reshape(shape)
                    else:
                        W = np.asarray(init.get(w_name, np.nan), np.float64)
                    trans = n.op_type == "Gemm" and n.attrs.get("transB", 0) == 1
                    grid += scale(a) * float(np.abs(W).sum(axis=1 if trans else 0).max())
            return grid if np.isfinite(grid) else 0.0
    except (KeyError, IndexError, ValueError, TypeError, AttributeError):
        return 0.0
