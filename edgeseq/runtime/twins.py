"""Whether two model files come from one trained checkpoint: twins, a float export and its int8
exports (or one file twice).

Export records the checkpoint's fingerprint (`edgeseq.weights_sha256`, `export.step.weights_sha256`);
where both files record one, they are twins exactly when it agrees. A file exported before
fingerprints were recorded is judged by its weights instead: each weight matrix of one file
(an int8 one dequantized, (q - zero point) x scale) against the matrix of the same name in the
other, undoing the input equalization int8 export folds into the weights that read the
reading (`edgeseq.normalization` `input_scale`). The weights of one checkpoint agree to within
half a quantization step; another training's differ by many steps almost everywhere. More
than WEIGHT_SHARE of the entries apart by more than WEIGHT_STEPS steps means another training.
numpy only: the graphs come from `edgeseq.runtime.native.onnxfile`.
"""

from __future__ import annotations

import re

import numpy as np

WEIGHT_STEPS = 1.5        # quantization steps (scale) an entry may be off: rounding is 0.5, the rest is slack
WEIGHT_SHARE = 0.01       # share of entries that may be further off before the files count as two trainings
FLOAT_RTOL = 1e-5         # float32 rounding of a rescaled weight, relative to the matrix's largest entry
_GENERATED = re.compile(r"[A-Za-z]+_\d+")     # names the ONNX exporter makes up (val_39): not matched by name
_TRANSPOSED = "_Transposed"                   # onnxruntime's dynamic quantizer stores some weights transposed


def same_run(meta_a, meta_b, graph_a, graph_b) -> tuple:
    """(verdict, why): whether the files of metadata `meta_a` and `meta_b` (`ModelMeta`) were
    exported from one trained checkpoint. verdict True or False, or None where it cannot be
    told (no fingerprint in one file and no weight matrix of the same name in both); why says
    what was compared, in words that follow "it was" (or "the files were").

    graph_a, graph_b: each file's parsed graph (`onnxfile.Graph`), its path (read only where
    a fingerprint is missing), or None where it cannot be read."""
    fa, fb = meta_a.weights_sha256, meta_b.weights_sha256
    if fa and fb:
        if fa == fb:
            return True, f"exported from the same training run (checkpoint fingerprint {fa[:12]})"
        return False, f"not exported from the same training run (checkpoint fingerprint {fa[:12]} vs {fb[:12]})"
    graphs = [_graph(g) for g in (graph_a, graph_b)]
    if None in graphs:
        return None, ("not verified as exported from the same training run: one file records no checkpoint "
                      "fingerprint and its graph cannot be read")
    a, b = (weight_matrices(m, g) for m, g in zip((meta_a, meta_b), graphs))
    common = [k for k in sorted(a) if k in b and a[k][0].shape == b[k][0].shape]
    if not common:
        return None, ("not verified as exported from the same training run: one file records no checkpoint "
                      "fingerprint (an older export) and the files share no weight matrix to compare")
    off = total = 0
    for k in common:
        off += _entries_apart(a[k], b[k], _input_scale(meta_a), _input_scale(meta_b))
        total += a[k][0].size
    share = off / total
    if share > WEIGHT_SHARE:
        return False, (f"not exported from the same training run (the weights differ beyond rounding in {share:.0%} "
                       f"of {total:,} entries)")
    return True, "exported from the same training run (the weights agree to rounding)"


def weight_matrices(meta, graph) -> dict:
    """name -> (values, step): each weight matrix (2 or more axes) of `graph` as float64, an int8
    one dequantized, and the quantization step of each entry (its scale; 0 for a float one),
    in the layout of the float export (a weight the quantizer stored transposed is turned
    back). Keyed by the float export's name; names the ONNX exporter made up are left out."""
    init = graph.initializers
    axis = {n.input[0]: n.attrs.get("axis", 1) for n in graph.nodes
            if n.op_type == "DequantizeLinear" and n.input and n.input[0] in init}
    out = {}
    for name, a in init.items():
        a = np.asarray(a)
        if a.ndim < 2:
            continue
        if a.dtype.kind == "f" and not name.endswith("_quantized"):
            key, values, step = name, a.astype(np.float64), np.zeros(a.shape)
        elif a.dtype in (np.int8, np.uint8) and name.endswith("_quantized"):
            key = name[:-len("_quantized")]
            scale, zero = init.get(key + "_scale"), init.get(key + "_zero_point")
            if scale is None:
                continue
            scale = np.asarray(scale, np.float64).reshape(-1)
            zero = np.zeros(1) if zero is None else np.asarray(zero, np.float64).reshape(-1)
            if zero.size not in (1, scale.size):
                continue
            shape = [1] * a.ndim
            if scale.size > 1:                                 # per channel: along the axis it names
                k = axis.get(name)
                if k is None:                                  # MatMulInteger: per output column, the last axis
                    k = max(i for i, n in enumerate(a.shape) if n == scale.size) if scale.size in a.shape else None
                if k is None or a.shape[k] != scale.size:
                    continue
                shape[k % a.ndim] = scale.size
            step = np.broadcast_to(scale.reshape(shape), a.shape)
            values = (a.astype(np.float64) - zero.reshape(shape if zero.size > 1 else [1] * a.ndim)) * step
            if key.endswith(_TRANSPOSED) and a.ndim == 2:
                key, values, step = key[:-len(_TRANSPOSED)], values.T, step.T
        else:
            continue
        if not _GENERATED.fullmatch(key):
            out[key] = (values, np.asarray(step, np.float64))
    return out


def _entries_apart(a: tuple, b: tuple, scale_a: np.ndarray, scale_b: np.ndarray) -> int:
    """Entries of matrix a (values, step) further than WEIGHT_STEPS steps from b's; the fewest
    over reading the matrix as it is or, along each axis as long as the reading, with each
    file's input equalization divided out."""
    (va, sa), (vb, sb) = a, b
    ways = [(1.0, 1.0)]
    if not (np.all(scale_a == 1) and np.all(scale_b == 1)):
        for k, n in enumerate(va.shape):
            if n == scale_a.size == scale_b.size:
                shape = [1] * va.ndim
                shape[k] = n
                ways.append((scale_a.reshape(shape), scale_b.reshape(shape)))
    best = va.size
    for ea, eb in ways:
        xa, xb = va / ea, vb / eb
        tol = WEIGHT_STEPS * (sa / ea + sb / eb) + FLOAT_RTOL * max(np.abs(xa).max(), np.abs(xb).max())
        best = min(best, int(np.count_nonzero(np.abs(xa - xb) > tol)))
    return best


def _input_scale(meta) -> np.ndarray:
    """The input equalization int8 export folded into the weights that read the reading (ones where none)."""
    s = (meta.normalization or {}).get("input_scale")
    return np.asarray(s if s else np.ones(len(meta.features)), np.float64)


def _graph(g):
    if g is None or hasattr(g, "initializers"):
        return g
    from edgeseq.errors import ModelFileError
    from edgeseq.runtime.native.onnxfile import read_graph
    try:
        return read_graph(g)
    except ModelFileError:
        return None
