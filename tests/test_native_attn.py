"""The native Transformer step (edgeseq.runtime.native.attn, es_attn.h) on tiny seeded models:
probabilities against onnxruntime over 1,000 never-reset readings (1 and 7 streams, a reset
mid-way; a sliding window, a growing cache and max_history=0; no positions, ALiBi and
sinusoids), static int8 against the QDQ graph and against the float twin, snapshots and state
files moved between the backends, the corner cases (window 1, one head, d_model 6 and 12, a
cache grown to 10,000 readings), edited files (ALiBi's slopes and metadata included), threads,
and a runtime free of torch and onnx."""

import numpy as np
import onnx
import pytest
import torch

from edgeseq.errors import HistoryFullError
from edgeseq.models import build_model, make_config
from edgeseq.runtime import StreamSession, native
from edgeseq.runtime.model import open_model
from edgeseq.runtime.statefile import load_state, save_state
from helpers import (assert_close, assert_runs_on_onnxruntime_only, checkpoint_of, edited, in_threads,
                     readings as noisy_readings, run_without_torch, swap_op, tiny_models)

pytestmark = pytest.mark.skipif(not native.available(), reason=native.why_unavailable() or "native step not built")

F, C, T = 3, 4, 1000
PROBS_ATOL = 1e-4
# name -> TransformerConfig fields: widths, heads, windows and positions the step must cover
MODELS = {
    "w7": {"d_model": 8, "heads": 2, "layers": 2, "d_ff": 16, "window": 7, "positions": "none"},
    "d12-h3-all": {"d_model": 12, "heads": 3, "layers": 1, "d_ff": 8, "window": 0, "positions": "none"},  # grows
    "d6-h3-sin": {"d_model": 6, "heads": 3, "layers": 2, "d_ff": 10, "window": 7, "positions": "sinusoid"},
    "w1-h1": {"d_model": 8, "heads": 1, "layers": 1, "d_ff": 8, "window": 1},      # ALiBi, the default
    "w7-alibi": {"d_model": 8, "heads": 2, "layers": 2, "d_ff": 16, "window": 7, "positions": "alibi"},
    "d12-h3-all-alibi": {"d_model": 12, "heads": 3, "layers": 1, "d_ff": 8, "window": 0, "positions": "alibi"},
    "d4-h4": {"d_model": 4, "heads": 4, "layers": 2, "d_ff": 8, "window": 5},        # head_dim 1: no / sqrt(1)
}


def tiny_checkpoint(name: str, seed: int = 0) -> dict:
    cfg = make_config("transformer", n_features=F, n_classes=C, **MODELS[name])
    torch.manual_seed(seed)
    model = build_model("transformer", cfg)
    with torch.no_grad():                      # livelier than the default init: logits spread over a few units
        for p in model.parameters():
            p.mul_(1.5)
    return checkpoint_of("transformer", cfg, model)


def readings(n, streams, seed=0):
    """Raw readings around the training mean, now and then 20 times further out."""
    return noisy_readings(n, streams, seed, far=20)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(name, scheme) -> path: the step graph as exported (float) or quantized by onnxruntime's
    static QDQ quantizer as export_int8 does (scheme "static")."""
    return tiny_models(tmp_path_factory.mktemp("attn"), tiny_checkpoint, readings(60, 4, seed=1), {})


def both(path, streams, **kw):
    nat = StreamSession(path, streams=streams, backend="native", **kw)
    ort_ = StreamSession(path, streams=streams, backend="onnxruntime", **kw)
    return nat, ort_


def run_pair(nat, ort_, X, reset_at=None):
    """Probabilities [T, B, C] of both sessions; the last stream starts again at `reset_at`."""
    a, b = [], []
    for t, x in enumerate(X):
        if t == reset_at:
            nat.reset(stream=nat.streams - 1)
            ort_.reset(stream=ort_.streams - 1)
        a.append(nat.push(x))
        b.append(ort_.push(x))
    return np.stack(a), np.stack(b)


# -- float: onnxruntime's numbers ----------------------------------------------------------

@pytest.mark.parametrize("streams", [1, 7])
@pytest.mark.parametrize("name,max_history", [("w7", None), ("w7", 0), ("d12-h3-all", None), ("d6-h3-sin", None),
                                              ("w1-h1", None), ("d6-h3-sin", 3), ("w7-alibi", None), ("w7-alibi", 3),
                                              ("d12-h3-all-alibi", None), ("d4-h4", None)])
def test_float_matches_onnxruntime(tiny, name, max_history, streams):
    """1,000 readings never reset but for the last stream mid-way: the window slides (w7, the
    sinusoid model at its window and at a history bound of 3 below it), the cache grows
    (d12, window 0) or keeps every reading while the model attends to its window
    (max_history=0)."""
    path = tiny(name)
    nat, ort_ = both(path, streams, max_history=max_history, on_full="slide")
    assert nat.backend == "native" and nat.max_history == ort_.max_history
    got, want = run_pair(nat, ort_, readings(T, streams), reset_at=T // 2)
    diff = assert_close(got, want, f"{name} probabilities", atol=PROBS_ATOL)
    print(f"{name} max_history={max_history} streams={streams}: max |probability difference| {diff:.2g}")
    assert (got.argmax(-1) == want.argmax(-1)).mean() > 0.99
    assert nat.history == ort_.history and list(nat.position) == list(ort_.position)
    assert list(nat.position) == [T] * (streams - 1) + [T - T // 2]
    assert np.allclose(got.sum(-1), 1, atol=1e-6)


def test_streams_do_not_depend_on_each_other(tiny):
    """Stream 3 of 11 computes what it computes alone, to the bit."""
    path = tiny("w7")
    X = readings(60, 11)
    many = StreamSession(path, streams=11, backend="native")
    one = StreamSession(path, streams=1, backend="native")
    a = np.stack([many.push_logits(x).copy() for x in X])
    b = np.stack([one.push_logits(x[3:4]).copy() for x in X])
    assert np.array_equal(a[:, 3:4], b)


# -- int8 --------------------------------------------------------------------------------

@pytest.mark.parametrize("streams,name", [(1, "w7"), (7, "w7"), (7, "w7-alibi")])
def test_int8_matches_the_qdq_graph(tiny, streams, name):
    """Static int8: the QDQ graph's arithmetic (int8 inputs, exact integer sums, requantized
    outputs) within the probe's int8 tolerance of onnxruntime's logits range; in practice
    the same numbers up to float32 rounding."""
    path = tiny(name, "static")
    nat, ort_ = both(path, streams)
    assert nat.backend == "native" and nat._native.int8 and "int8" in nat._native.kernel
    X = readings(T, streams)
    a, b = [], []
    for t, x in enumerate(X):
        if t == T // 2:
            nat.reset(stream=streams - 1), ort_.reset(stream=streams - 1)
        a.append(nat.push_logits(x).copy())
        b.append(ort_.push_logits(x).copy())
    a, b = np.stack(a), np.stack(b)
    span = float(b.max() - b.min())
    diff = float(np.abs(a - b).max())
    print(f"int8 streams={streams}: max |logit difference| {diff:.3g} of a range of {span:.3g}")
    assert diff <= native.INT8_PROBE_RTOL * span
    assert (a.argmax(-1) == b.argmax(-1)).mean() > 0.99


def test_int8_within_the_export_bound_of_its_float_twin(exported, int8, basicmotions):
    """The trained Transformer's static int8 file, run natively, against its float twin on
    onnxruntime: mean logit error within export/quantize.py's MAX_ERROR of the float range, on
    the long test streams the export checks."""
    from edgeseq.runtime.evaluate import STREAM_READINGS, long_streams
    from export.quantize import MAX_ERROR
    X = long_streams(basicmotions.test, STREAM_READINGS, seed=0)[:2, :400].transpose(1, 0, 2).astype(np.float32)
    q = StreamSession(int8("transformer", "static")[0], streams=X.shape[1])
    qo = StreamSession(int8("transformer", "static")[0], streams=X.shape[1], backend="onnxruntime")
    f = StreamSession(exported("transformer")[0], streams=X.shape[1], backend="onnxruntime")
    assert q.backend == "native" and StreamSession(exported("transformer")[0]).backend == "native"
    lq = np.stack([q.push_logits(x).copy() for x in X])
    lo = np.stack([qo.push_logits(x).copy() for x in X])
    lf = np.stack([f.push_logits(x).copy() for x in X])
    span = float(lf.max() - lf.min())
    err, err_ort = float(np.abs(lq - lf).mean()) / span, float(np.abs(lo - lf).mean()) / span
    print(f"trained int8: mean error vs float {err:.2%} native, {err_ort:.2%} onnxruntime; "
          f"native vs onnxruntime int8 max {np.abs(lq - lo).max():.3g}")
    assert err <= MAX_ERROR
    assert float(np.abs(lq - lo).max()) <= native.INT8_PROBE_RTOL * float(lo.max() - lo.min())


# -- state ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name,max_history,on_full", [("w7", None, None), ("d12-h3-all", None, None),
                                                      ("w7", 20, "error"), ("w7", 0, None),
                                                      ("d6-h3-sin", None, None), ("w7-alibi", None, None)])
def test_snapshots_move_between_backends(tiny, tmp_path, name, max_history, on_full):
    """A snapshot (and a state file) taken on one backend and restored on the other gives the
    same next outputs, the same positions and history, and the same HistoryFullError."""
    path = tiny(name)
    kw = {"max_history": max_history, "on_full": on_full}
    X = readings(40, 3, seed=3)
    for src_backend, dst_backend in (("native", "onnxruntime"), ("onnxruntime", "native")):
        src = StreamSession(path, streams=3, backend=src_backend, **kw)
        for t, x in enumerate(X[:15]):
            if t == 9:
                src.reset(stream=1)
            src.push(x)
        snap = src.snapshot()
        assert snap["state"][0].shape[2] == src.history
        save_state(tmp_path / "s.state", src, 15)
        for how in ("snapshot", "state file"):
            dst = StreamSession(path, streams=3, backend=dst_backend, **kw)
            if how == "snapshot":
                dst.restore(snap)
            else:
                load_state(tmp_path / "s.state", dst)
            assert list(dst.position) == list(src.position) and dst.history == src.history
            ref = StreamSession(path, streams=3, backend=src_backend, **kw)
            ref.restore(snap)
            for x in X[15:]:
                try:
                    want = ref.push(x)
                except HistoryFullError:
                    with pytest.raises(HistoryFullError):
                        dst.push(x)
                    break
                assert_close(dst.push(x), want, f"{src_backend} -> {dst_backend} ({how})", atol=PROBS_ATOL)
            assert dst.history == ref.history


def test_history_full_and_a_nonfinite_step_change_nothing(tiny):
    path = tiny("w7")
    s = StreamSession(path, streams=2, backend="native", max_history=5, on_full="error")
    X = readings(6, 2)
    for x in X[:5]:
        s.push(x)
    before = s.snapshot()
    with pytest.raises(HistoryFullError, match="history is full"):
        s.push(X[5])
    after = s.snapshot()
    assert all(np.array_equal(a, b) for a, b in zip(before["state"], after["state"]))
    assert list(after["position"]) == [5, 5] and s.history == 5
    # NaN from the step itself (the C contract: the stream's index, nothing adopted)
    step = native.open_step(path, open_model(path)[1], 3, max_history=7)
    for x in readings(10, 3):
        step.x[:] = x
        assert step.run() == -1
    state, pos, hist = [a.copy() for a in step.state], step.pos.copy(), step.history
    step.x[:] = readings(1, 3, seed=5)[0]
    step.x[1, 0] = np.nan
    assert step.run() == 1
    assert step.history == hist and np.array_equal(step.pos, pos)
    assert all(np.array_equal(a, b) for a, b in zip(step.state, state))
    step.x[1, 0] = 0.5
    assert step.run() == -1 and step.history == hist + 1 - (hist == 7)


def test_a_cache_grows_to_10000_readings(tiny):
    """No window and no history bound: the ring doubles as the cache grows; state_nbytes counts
    the rows held, and the cache moved to onnxruntime gives the same next reading."""
    path = tiny("d12-h3-all")
    s = StreamSession(path, backend="native")
    per_row = 2 * 1 * 12 * 4                                  # (key, value) x layers x d_model x float32
    X = readings(10_000, 1, seed=4)
    for x in X:
        s.push(x)
    assert s.history == 10_000 and s.state_nbytes() == 10_000 * per_row
    assert s._native.rows == 16_384 and s.state_nbytes_at(10_000) == 10_000 * per_row
    o = StreamSession(path, backend="onnxruntime")
    o.restore(s.snapshot())
    x = readings(1, 1, seed=9)[0]
    assert_close(s.push(x), o.push(x), "after 10,000 readings", atol=PROBS_ATOL)
    assert s.state_nbytes() == o.state_nbytes() == 10_001 * per_row
    s.reset()
    assert s.state_nbytes() == 0 and s._native.rows == 16


def test_the_step_leaves_the_callers_subnormals_alone(tiny):
    """The attention step runs with subnormal floats flushed to zero (on x86, MXCSR's FTZ and DAZ
    for the call only: old rows' softmax weights fall below FLT_MIN over a long ALiBi history, and
    each product with one would cost a microcode assist). After pushes, the caller's own
    arithmetic in the same thread still keeps subnormals."""
    s = StreamSession(tiny("d12-h3-all"), backend="native")
    assert s.backend == "native"
    for x in readings(3, 1, seed=1):
        s.push(x)
    sub = np.float32(1e-39)
    assert sub * np.float32(1.0) == sub and sub / np.float32(2.0) > 0


def test_bounded_ring_holds_its_window_only(tiny):
    """max_history=0 on a windowed model: onnxruntime keeps every reading (masked), the native
    ring keeps the window; both count the same history."""
    path = tiny("w7")
    nat, ort_ = both(path, 1, max_history=0)
    for x in readings(30, 1):
        nat.push(x), ort_.push(x)
    assert nat.history == ort_.history == 30
    assert ort_.state_nbytes() == 30 * 2 * 2 * 8 * 4 and nat.state_nbytes() == 7 * 2 * 2 * 8 * 4
    assert nat.state_nbytes_at(1000) == nat.state_nbytes() and ort_.state_nbytes_at(1000) == 1000 * 2 * 2 * 8 * 4


# -- what does not run natively -------------------------------------------------------------

def test_edited_files_fall_back_and_are_refused(tiny, tmp_path):
    from onnx import numpy_helper

    def const(pick, change):
        def edit(m):
            t = next(t for t in m.graph.initializer if pick(t))
            t.CopyFrom(numpy_helper.from_array(change(numpy_helper.to_array(t).copy()), t.name))
        return edit

    def invert_mask(m):
        where = next(n for n in m.graph.node if n.op_type == "Where")
        where.input[1], where.input[2] = where.input[2], where.input[1]

    def nan(a):
        a.reshape(-1)[0] = np.nan
        return a

    def config(**change):
        def edit(m):
            import json
            p = next(p for p in m.metadata_props if p.key == "edgeseq.config")
            p.value = json.dumps({**json.loads(p.value), **change})
        return edit

    slopes = const(lambda t: t.data_type == onnx.TensorProto.FLOAT and list(t.dims) == [1, 2, 1, 1], lambda a: -a)
    cases = [("w7", "float", swap_op("Erf", "Tanh")), ("w7", "float", invert_mask),
             ("w7", "float", const(lambda t: t.name.endswith("qkv.bias"), nan)),
             ("w7", "float", const(lambda t: t.data_type == onnx.TensorProto.INT64 and list(t.dims) == [] and
                                   numpy_helper.to_array(t) == 7, lambda a: np.array(5, a.dtype))),  # the window
             ("w7", "static", swap_op("Erf", "Sigmoid")),
             ("w7-alibi", "float", slopes), ("w7-alibi", "static", slopes),                 # ALiBi's slopes < 0
             ("w7-alibi", "float", config(positions="none")), ("w7", "float", config(positions="alibi"))]
    for i, (name, scheme, edit) in enumerate(cases):
        assert_runs_on_onnxruntime_only(edited(tiny(name, scheme), tmp_path / f"edited{i}.onnx", edit), i)


def test_the_probe_catches_a_step_that_computes_otherwise(tiny):
    """A native step whose weights differ from the graph's (here: changed after binding) is
    told apart by the probe, float and int8."""
    for scheme in ("float", "static"):
        path = tiny("w7", scheme)
        sess, meta = open_model(path)
        step = native.open_step(path, meta, native.PROBE_STREAMS, max_history=7)
        assert native.probe(step, sess) is None
        w = step._keep[-2][0]                                 # the embedding's weights, as bound
        w[:] = w * 1.3
        assert "computes other logits" in native.probe(step, sess)


def test_a_dynamic_int8_transformer_stays_on_onnxruntime(tiny):
    _, meta = open_model(tiny("w7"))
    meta.quantization = {"scheme": "dynamic"}
    assert native.supports(meta, tiny("w7")) == "int8 dynamic scales activations per call: onnxruntime only"


# -- threads and the light runtime ------------------------------------------------------------

def test_threads_share_a_native_transformer_session(tiny):
    s = StreamSession(tiny("w7"), backend="native")
    X = readings(200, 1)

    def push():
        for x in X:
            s.push(x)
    in_threads(push, 3)
    assert s.position[0] == 600 and s.history == 7


def test_native_transformer_imports_neither_torch_nor_onnx(tiny, tmp_path):
    path = tiny("w7", "static")
    run_without_torch(f"""
        import numpy as np
        from edgeseq.runtime import StreamSession
        s = StreamSession({str(path)!r}, streams=2)
        assert s.backend == "native", s.backend
        for _ in range(10):
            p = s.push(np.ones((2, 3), np.float32))
        assert p.shape == (2, 4) and s.history == 7
        print("OK")
    """, tmp_path)
