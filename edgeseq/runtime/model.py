"""Load an edgeseq ONNX file: one clear error for each way it can be wrong.

A model file is read once per open (`read_model`): the metadata, the onnxruntime session and
the native step's weights all come from those bytes, so a file replaced meanwhile (as
`edgeseq export` replaces one, atomically) never mixes one file's weights with another's
metadata."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import onnxruntime as ort

from edgeseq import contract
from edgeseq.data import data_for_model
from edgeseq.errors import ModelFileError, printable
from edgeseq.runtime.model_bytes import MAX_MODEL_BYTES, read_model  # noqa: F401  (importable from here, as always)
from edgeseq.runtime.providers import check_provider, confirm_provider, session_options

# onnxruntime's tensor type names as the numpy dtype names the contract uses
ORT_DTYPES = {"tensor(float)": "float32", "tensor(int64)": "int64", "tensor(double)": "float64",
              "tensor(float16)": "float16", "tensor(int32)": "int32", "tensor(int8)": "int8",
              "tensor(uint8)": "uint8", "tensor(bool)": "bool"}


@dataclass(frozen=True)
class ModelFile:
    """One read of a model file: its bytes, their sha256, and its graph as
    `edgeseq.runtime.native.onnxfile` parses it (None, with `graph_error` saying why, when that
    reader cannot; onnxruntime may still run the file)."""
    path: str
    data: bytes
    sha256: str
    graph: object = None
    graph_error: str | None = None


def graph_tensors(args) -> dict:
    """name -> (dtype name, shape list or None) for an InferenceSession's inputs or outputs."""
    return {a.name: (ORT_DTYPES.get(a.type, a.type), list(a.shape) if a.shape is not None else None) for a in args}


def open_model(path: str | os.PathLike, provider: str = "cpu", threads: int = 1):
    """(InferenceSession, ModelMeta) for an edgeseq model file.

    The metadata is parsed strictly (`ModelMeta.from_props`) and checked against the graph's
    own inputs and outputs (`ModelMeta.check_graph`) and its quantization parameters
    (`edgeseq.runtime.quant.check_qdq`), so a model that loads also runs.
    Raises ModelFileError (missing or unreadable file, not an edgeseq model, metadata of the
    wrong type or disagreeing with the graph, quantization parameters that do not fit their
    tensors: the message names the file and the key or tensor) or ProviderError."""
    sess, meta, _ = load_model(path, provider, threads)
    return sess, meta


def load_model(path: str | os.PathLike, provider: str = "cpu", threads: int = 1):
    """`open_model` that also returns the `ModelFile` it read: (InferenceSession, ModelMeta,
    ModelFile), all three from one read of the file."""
    data = read_model(path)
    shown = printable(path)
    providers = check_provider(provider)
    try:
        sess = ort.InferenceSession(data, session_options(threads), providers=providers)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelFileError(f"'{shown}' is not a readable ONNX model ({first[:120]}); export it again") from None
    confirm_provider(sess, provider)
    props = dict(sess.get_modelmeta().custom_metadata_map)
    inputs, outputs = graph_tensors(sess.get_inputs()), graph_tensors(sess.get_outputs())
    try:
        meta = contract.ModelMeta.from_props(props)
        meta.check_graph(inputs, outputs)
    except contract.MetadataError as e:
        if e.missing:
            what = "no edgeseq metadata" if not any(k.startswith("edgeseq.") for k in props) \
                else f"missing metadata {', '.join(e.missing)}"
            raise ModelFileError(f"'{shown}' is an ONNX model but not an edgeseq model ({what}); "
                                 "export it with `edgeseq export`") from None
        raise ModelFileError(f"'{shown}': {e}") from None
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):    # a parser gap: still one line
        raise ModelFileError(f"'{shown}' has unreadable edgeseq metadata; export it again") from None
    from edgeseq.runtime.native.onnxfile import parse_graph
    from edgeseq.runtime.quant import check_qdq
    graph, why = None, None
    try:
        graph = parse_graph(data)
    except (ValueError, UnicodeDecodeError, OverflowError, RecursionError) as e:
        why = f"'{shown}' is not an ONNX model the native backend can read ({e}); export it again"
    if graph is not None:
        check_qdq(graph.initializers, graph.nodes, path, {k: shape for k, (_, shape) in inputs.items()})
        check_transform(meta, graph, shown)
    return sess, meta, ModelFile(str(path), data, hashlib.sha256(data).hexdigest(), graph, why)


def check_transform(meta, graph, shown: str) -> None:
    """ModelFileError (one line) when the metadata's input transform (`asinh_scale` in
    edgeseq.normalization) and the graph's (`Div(reading, s)` then `Asinh`) disagree: one
    without the other, or scales apart by more than float32 rounding; or the gain stage
    (`gain_floor`) is in one and not the other. The runtime's reading
    bounds and probes follow the metadata, the step follows the graph."""
    import numpy as np

    from edgeseq.runtime.native.graphread import transform_nodes
    gained = any(n.op_type == "Abs" and n.input[:1] == [contract.READING] for n in graph.nodes)
    if gained != ((meta.normalization or {}).get("gain_floor") is not None):
        what = ("has a gain_floor but the graph has no gain stage (Abs of the reading)" if not gained else
                "has no gain_floor but the graph runs a gain stage (Abs of the reading)")
        raise ModelFileError(f"'{shown}': metadata {contract.META_NORM} {what}; export it again")
    if gained:
        what = _gain_disagrees(meta, graph)
        if what:
            raise ModelFileError(f"'{shown}': metadata {contract.META_NORM} {what}; export it again")
    nodes, names = transform_nodes(graph)
    said = (meta.normalization or {}).get("asinh_scale")
    if bool(nodes) != (said is not None):
        what = ("has an asinh_scale but the graph does not transform its reading" if said is not None else
                "has no asinh_scale but the graph transforms its reading (Div, Asinh)")
        raise ModelFileError(f"'{shown}': metadata {contract.META_NORM} {what}; export it again")
    if nodes:
        s = graph.initializers.get(names[0]) if names else None
        try:
            got = np.broadcast_to(np.asarray(s, np.float64).reshape(-1), (len(said),))
        except (ValueError, TypeError):
            got = None
        want = np.asarray(said, np.float64)
        if got is None or not (np.abs(got - want) <= 1e-6 * np.abs(want)).all():
            raise ModelFileError(f"'{shown}': metadata {contract.META_NORM}'s asinh_scale is not what the graph "
                                 "divides the reading by; export it again")


def _gain_disagrees(meta, graph) -> str | None:
    """What the metadata's gain stage (`gain_floor`, `gain_release`) says that the graph's
    constants do not (`Max(Abs(reading), floor)`, `Div(., floor)`, `Sub(gain state, release)`,
    `Mul(., on)`, `Add(next gain state, log(floor) on gained channels)`), or None where they
    agree within float32 rounding."""
    import numpy as np
    init, nodes = graph.initializers, graph.nodes
    norm = meta.normalization
    want = np.asarray(norm["gain_floor"], np.float64)
    abs_out = next(n.output[0] for n in nodes if n.op_type == "Abs" and n.input[:1] == [contract.READING])
    peak = next((n for n in nodes if n.op_type == "Max" and n.input[:1] == [abs_out]), None)
    state = next((s for s in meta.state if s.role == contract.GAIN_ROLE), None)
    sub = next((n for n in nodes if state is not None and n.op_type == "Sub" and n.input[:1] == [state.name]), None)
    mul = next((n for n in nodes if state is not None and n.op_type == "Mul" and state.output in n.output), None)
    div = next((n for n in nodes if peak is not None and n.op_type == "Div" and n.input[:1] == peak.output[:1]), None)
    add = next((n for n in nodes if state is not None and n.op_type == "Add" and n.input[:1] == [state.output]), None)
    parts = (peak, div, sub, mul, add)
    if any(n is None for n in parts) or not all(len(n.input) > 1 and n.input[1] in init for n in parts):
        return "has a gain stage the graph does not compute as edgeseq exports it"
    try:
        safe, over, on, log = (np.broadcast_to(np.asarray(init[n.input[1]], np.float64).reshape(-1), want.shape)
                               for n in (peak, div, mul, add))
        release = float(np.asarray(init[sub.input[1]], np.float64).reshape(-1)[0])
    except (ValueError, TypeError, IndexError):
        return "has gain floors that are not one per feature of the graph's"
    if not np.array_equal(on > 0, want > 0):
        return "gains other channels than the graph does"
    floor_log = np.log(np.where(want > 0, want, 1.0))
    if not (np.abs(safe - want) <= 1e-6 * np.abs(want))[want > 0].all() or not np.array_equal(over, safe) \
            or not (np.abs(log - floor_log * (want > 0)) <= 1e-5 * np.maximum(np.abs(floor_log), 1.0)).all():
        return "gives gain floors that are not the graph's"
    if abs(release - float(norm["gain_release"])) > 1e-6 * abs(release):
        return f"gives gain_release {norm['gain_release']} but the graph's is {release:.7g}"
    return None


def model_data(path: str | os.PathLike, data: str | None = None):
    """The Dataset to evaluate the model file at `path` on, its channels in the model's order:
    `data` (what the user passed with --data) if given, else the data the model was trained on
    (its `edgeseq.data` metadata; basicmotions for a file without it). Raises ModelFileError
    as `open_model`, DataError as `edgeseq.data.data_for_model` (a recorded file that is gone,
    channels or labels that are not the model's: one line that says to pass --data)."""
    _, meta = open_model(path)
    regress = meta.kind == "regress"
    ds = data_for_model(data, meta.features, meta.labels if meta.kind == "classify" else None, meta.data, str(path),
                        meta.data_sha256, targets=meta.task["targets"] if regress else None)
    if regress and str(data or meta.data or "").lower().endswith(".csv"):    # a .csv carries no lag: the model's
        ds.persistence_lag = int(meta.task.get("persistence_lag", 1))
    return ds
