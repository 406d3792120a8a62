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
    """(n, batch, F) readings in raw units whose normalised values are N(0, 1), seeded:
    training mean + std * N(0, 1), through the inverse of the input transform where the model
    has one (`contract.raw_readings`)."""
    rng = np.random.default_rng(seed)
    return contract.raw_readings(meta.normalization, rng.standard_normal((n, batch, len(meta.features))))


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


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def check_parity(ref: np.ndarray, got: np.ndarray, got_probs: np.ndarray | None = None,
                 rtol: float | None = None, where: str = "") -> dict:
    """ONNX Runtime outputs against the torch reference, by the contract's bound.

    ref, got: logits (..., C) float32, torch and ONNX Runtime over the same readings (rows
    that are NaN in `ref`, finished streams, are left out); got_probs: the graph's `probs`
    output, same shape (None: softmax of `got`). Passes when
      - |got - ref| <= bound = VALIDATION_ATOL + rtol * max|ref| (`contract.validation_bound`);
      - |probs - softmax(ref)| <= the same bound at scale 1, plus half the logits' measured
        difference (softmax moves no probability by more than half the largest logit change);
      - the top class is the same wherever the reference's top-two margin exceeds 2 x bound.
    Returns the figures; raises ExportValidationError naming what broke."""
    rtol = contract.VALIDATION_RTOL if rtol is None else rtol
    keep = ~np.isnan(ref[..., 0])
    ref = ref[keep].astype(np.float64)
    got = got[keep].astype(np.float64)
    probs = softmax(got) if got_probs is None else got_probs[keep].astype(np.float64)
    scale = float(np.abs(ref).max())
    bound = contract.validation_bound(scale, rtol)
    d_logits = float(np.abs(ref - got).max())
    d_probs = float(np.abs(softmax(ref) - probs).max())
    prob_bound = contract.validation_bound(1.0, rtol) + 0.5 * d_logits
    top2 = np.sort(ref, -1)[:, -2:] if ref.shape[-1] > 1 else np.concatenate([ref, ref], -1)
    decided = top2[:, 1] - top2[:, 0] > 2 * bound
    flips = int((ref.argmax(-1) != got.argmax(-1))[decided].sum())
    report = {"max_abs_diff": d_logits, "tolerance": bound, "rtol": rtol, "atol": contract.VALIDATION_ATOL,
              "logit_scale": scale, "max_prob_diff": d_probs, "prob_tolerance": prob_bound,
              "top_class_flips": flips, "decided_readings": int(decided.sum())}
    broken = []
    if not d_logits <= bound:
        broken.append(f"logits by {d_logits:.3g} (bound {bound:.3g} = {contract.VALIDATION_ATOL:g} + "
                      f"{rtol:g} x max|logit| {scale:.3g})")
    if not d_probs <= prob_bound:
        broken.append(f"probabilities by {d_probs:.3g} (bound {prob_bound:.3g})")
    if flips:
        broken.append(f"the top class at {flips} of {int(decided.sum())} clear readings")
    if broken:
        raise ExportValidationError(f"ONNX Runtime differs from torch{where}: {'; '.join(broken)}; "
                                    "the model was not written", max_diff=d_logits, tolerance=bound)
    return report


def validate_stream(path, model, meta, readings: int, rtol: float | None = None, seed: int = 0) -> dict:
    """Two streams of `readings` synthetic readings through the torch step loop and a plain ONNX
    Runtime loop (state fed back), compared by `check_parity`."""
    xs = synthetic_readings(meta, readings, batch=2, seed=seed)
    ref = torch_stream(model, xs)
    probs = []
    got = run_streams(cpu_session(path), meta, xs.transpose(1, 0, 2), probs=probs)
    report = check_parity(ref, got, np.stack(probs), rtol, where=f" over {readings} readings")
    report["readings"] = readings
    return report


@torch.no_grad()
def validate_window(path, model, meta, rtol: float | None = None, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    x = contract.raw_readings(meta.normalization, rng.standard_normal((4, 37, len(meta.features))))
    lengths = np.array([37, 20, 5, 1], np.int64)
    ref = model(torch.from_numpy(x), torch.from_numpy(lengths)).numpy()
    got = cpu_session(path).run([contract.LOGITS], {contract.WINDOW: x, contract.LENGTHS: lengths})[0]
    report = check_parity(ref, got, None, rtol, where=" on windows")
    report["windows"] = len(x)
    return report
