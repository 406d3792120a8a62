"""Export is not done until it validated: ONNX Runtime against torch on a stream of readings."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import torch

from edgeseq import contract
from edgeseq.errors import ExportValidationError
from edgeseq.runtime.evaluate import run_streams


def cpu_session(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def synthetic_readings(meta: contract.ModelMeta, n: int, batch: int, seed: int) -> np.ndarray:
    """(n, batch, F) readings in raw units: training mean + std * N(0, 1), seeded."""
    rng = np.random.default_rng(seed)
    mean = np.asarray(meta.normalization["mean"], np.float32)
    std = np.asarray(meta.normalization["std"], np.float32)
    return (mean + std * rng.standard_normal((n, batch, len(mean)))).astype(np.float32)


@torch.no_grad()
def torch_stream(model, readings: np.ndarray) -> np.ndarray:
    """Logits (n, B, C) of the torch step loop, state fed back."""
    state, out = None, []
    for x in readings:
        logits, state = model.step(torch.from_numpy(x), state)
        out.append(logits.numpy())
    return np.stack(out)


def ort_stream(sess, meta: contract.ModelMeta, readings: np.ndarray) -> np.ndarray:
    """Logits (n, B, C) of a plain ONNX Runtime loop over the contract (no edgeseq runtime)."""
    return run_streams(sess, meta, readings.transpose(1, 0, 2))


def validate_stream(path, model, meta, readings: int, tol: float, seed: int = 0) -> dict:
    xs = synthetic_readings(meta, readings, batch=2, seed=seed)
    ref = torch_stream(model, xs)
    got = ort_stream(cpu_session(path), meta, xs)
    diff = float(np.abs(ref - got).max())
    if not diff <= tol:
        raise ExportValidationError(
            f"ONNX Runtime differs from torch by {diff:.3g} over {readings} readings (tolerance {tol:g}); "
            "the model was not written", max_diff=diff, tolerance=tol)
    return {"max_abs_diff": diff, "tolerance": tol, "readings": readings}


@torch.no_grad()
def validate_window(path, model, meta, tol: float, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    mean = np.asarray(meta.normalization["mean"], np.float32)
    std = np.asarray(meta.normalization["std"], np.float32)
    x = (mean + std * rng.standard_normal((4, 37, len(mean)))).astype(np.float32)
    lengths = np.array([37, 20, 5, 1], np.int64)
    ref = model(torch.from_numpy(x), torch.from_numpy(lengths)).numpy()
    got = cpu_session(path).run([contract.LOGITS], {contract.WINDOW: x, contract.LENGTHS: lengths})[0]
    diff = float(np.abs(ref - got).max())
    if not diff <= tol:
        raise ExportValidationError(
            f"ONNX Runtime differs from torch by {diff:.3g} on windows (tolerance {tol:g}); "
            "the model was not written", max_diff=diff, tolerance=tol)
    return {"max_abs_diff": diff, "tolerance": tol, "windows": len(x)}
