"""The native step against its graph: `probe` runs a fresh step and the model's graph in
onnxruntime side by side on seeded readings and says where they disagree, within
`probe_tolerance` (for int8, the step's `grid`, `graphread.output_grid`: how far the graph's own
rounding moves its logits).
numpy only; a session's onnxruntime is handed in."""

from __future__ import annotations

import numpy as np

from edgeseq import contract
from edgeseq.runtime.native.attn import AttnStep
from edgeseq.runtime.native.attn import probe as attn_probe
from edgeseq.runtime.native.bound import BoundStep
from edgeseq.runtime.native.graphread import output_grid  # noqa: F401  (importable from here, as before)

PROBE_STREAMS, PROBE_READINGS = 4, 32
FLOAT_PROBE_RTOL = 1e-4     # float: a few float32 roundings of the logits' scale (parity tests hold 1e-5)
INT8_PROBE_RTOL = 0.10      # int8: of the largest |logit| over the probe (exported models: 2-4%; an edited
                            # operation: 60% and more)
INT8_PROBE_STEPS = 2        # int8: and this many of the graph's own output grids (`output_grid`)
INT8_PROBE_Q12 = 2          # firmware int8: and this many steps of its Q12 logits (bias and product rounding)
INT8_PROBE_SPIKE = 2.0      # int8: a tenth of the probe readings may differ by up to this many times the bound
                            # (a regression RNN: 29 of 32 readings within 0.03, three at 0.24-0.56, bound 0.42)


def probe_readings(meta, streams: int, n: int) -> np.ndarray:
    """float32 [n, streams, F] seeded readings around the training mean (1.5 of its scaled
    standard deviations), what a probe streams through both the step and the graph."""
    F = len(meta.features)
    rng = np.random.default_rng(0)
    return contract.raw_readings(meta.normalization, rng.standard_normal((n, streams, F)) * 1.5)


def probe(step: BoundStep, session) -> str | None:
    """Run `step` (a fresh NativeStep of PROBE_STREAMS streams) and the model's graph in
    onnxruntime (`session`, the same file) side by side on PROBE_READINGS seeded readings around
    the training mean (state fed back): None when they agree, else a one-line reason. The native
    step reads weights and wiring it expects; this catches a file whose operations say otherwise
    (an edited cell, scale or constant): the graph is what counts. Agreement: both finite alike
    (float) and within `probe_tolerance` at every reading (int8: at 90% of the readings, the
    rest within INT8_PROBE_SPIKE times it, where one rounding flipped). A Transformer's step
    (`attn.AttnStep`) runs with its cache, as `attn.probe`."""
    meta = step.meta
    B = step.streams
    X = probe_readings(meta, B, PROBE_READINGS)
    if isinstance(step, AttnStep):
        return attn_probe(step, session, X, lambda got, want: _agree(step, got, want))
    state = {s.name: np.zeros([B if d == contract.BATCH_AXIS else d for d in s.shape], np.float32)
             for s in meta.state}
    names = [contract.LOGITS] + [s.output for s in meta.state]
    got, want = [], []
    step.reset()
    with np.errstate(all="ignore"):
        for x in X:
            res = session.run(names, {contract.READING: x, **state})
            state = {s.name: v for s, v in zip(meta.state, res[1:])}
            step.x[:] = x
            rc = step.run()
            want.append(res[0])
            got.append(step.logits.copy() if rc == -1 else np.full_like(res[0], np.nan))
    return _agree(step, np.stack(got).astype(np.float64), np.stack(want).astype(np.float64))


def _agree(step, got: np.ndarray, want: np.ndarray) -> str | None:
    """probe's verdict on the native logits `got` against the graph's `want` [readings, B, C]."""
    if not np.isfinite(want).all() or not np.isfinite(got).all():
        if np.array_equal(np.isfinite(want), np.isfinite(got)) and not step.int8:
            return None
        return "its graph and the native step disagree on which readings give finite logits"
    allowed = probe_tolerance(step, want)
    per = np.abs(got - want).reshape(len(got), -1).max(1)          # the largest difference at each reading
    diff = float(per.max())
    if step.int8 and diff <= INT8_PROBE_SPIKE * allowed and float(np.quantile(per, 0.9)) <= allowed:
        return None     # int8: a reading or three where one rounding flips (onnxruntime's QDQ vs integer) is no edit
    if diff > allowed:
        return (f"its graph computes other logits than the native step reads from its weights (max difference "
                f"{diff:.3g} over {PROBE_READINGS} probe readings, allowed {allowed:.3g}): "
                "its operations are not the ones edgeseq's export writes")
    return None


def probe_tolerance(step, want: np.ndarray) -> float:
    """The largest difference `probe` allows between the native step's logits and the graph's
    `want` (finite, [readings, B, C]). It follows the logits' size and the rounding each side
    does, never their spread over the probe (logits that barely move are no reason to refuse):
    float, FLOAT_PROBE_RTOL of the largest |logit| (at least 1: float32 rounding of the sums
    behind them); int8, that plus INT8_PROBE_RTOL of the largest |logit| (a regression model's:
    at least 1, its outputs being targets in standard deviations), INT8_PROBE_STEPS of
    the graph's own output grids (`output_grid`, at most the largest |logit|: a graph whose
    grid swallows its logits computes nothing the step could match) and, for the firmware's
    integer step, INT8_PROBE_Q12 steps of its Q12 logits."""
    size = float(np.abs(want).max()) if want.size else 0.0
    allowed = FLOAT_PROBE_RTOL * max(1.0, size)
    if step.int8:
        # a regression model's outputs are its targets in standard deviations: one is their scale, however
        # close to 0 the probe's readings leave them
        scale = max(size, 1.0) if getattr(getattr(step, "meta", None), "kind", "classify") == "regress" else size
        allowed += INT8_PROBE_RTOL * scale + INT8_PROBE_STEPS * min(float(getattr(step, "grid", 0.0)), scale)
        if getattr(step, "_integer", False):
            allowed += INT8_PROBE_Q12 / 4096
    return allowed
