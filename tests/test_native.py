"""The native step backend (edgeseq.runtime.native) on tiny untrained models: float parity with
ONNX Runtime and int8 bit-exactness with firmware_sim.intsim over 1,000 readings with state fed
back (1 and 7 streams), exact state round trips, reasons for the models it does not run, the
protobuf reader against onnx, and a runtime import free of torch and onnx."""

import numpy as np
import onnx
import pytest
import torch

from edgeseq.errors import UsageError
from edgeseq.models import build_model, make_config
from edgeseq.runtime import native
from edgeseq.runtime.model import open_model
from helpers import (assert_close, assert_stream_computes_what_it_computes_alone, checkpoint_of, native_stream,
                     readings, run_without_torch, step_and_ort_loop, tiny_models)

needs_ext = pytest.mark.skipif(not native.available(), reason=native.why_unavailable() or "native step not built")

F, C, T = 3, 4, 1000
RECURRENT = ["rnn", "gru", "lstm"]
STREAMS = [1, 7]


def tiny_checkpoint(arch: str, hidden: int = 8) -> dict:
    """Untrained and seeded; two layers for the RNN and LSTM (the layer-to-layer path)."""
    over = {"hidden": hidden, "layers": 1 if arch == "gru" else 2}
    if arch == "transformer":
        over = {"d_model": 8, "heads": 2, "layers": 1, "d_ff": 8, "window": 6}
    cfg = make_config(arch, n_features=F, n_classes=C, **over)
    torch.manual_seed(0)
    model = build_model(arch, cfg)
    with torch.no_grad():                     # livelier than the default init: gates far from 0.5
        for name, p in model.named_parameters():
            if arch == "lstm" and name.startswith("rnn.bias_"):   # but the forget gates' bias stays FORGET_BIAS:
                p[:hidden].mul_(3.0)                              # at 3 the cells keep 95% a reading, and the two
                p[2 * hidden:].mul_(3.0)                          # backends' float32 roundings part by up to 3e-4
                                                                  # for a few readings after an outlier
            else:
                p.mul_(3.0)
    return checkpoint_of(arch, cfg, model)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(arch, scheme) -> path: float (the fused step graph as exported) or static int8 (the
    split graph quantized by onnxruntime's static QDQ quantizer, as export_int8 does)."""
    get = tiny_models(tmp_path_factory.mktemp("native"), tiny_checkpoint, readings(60, 4, seed=1), {})
    return lambda arch, scheme="float", hidden=8: get(arch, scheme, hidden)


# -- float: onnxruntime's numbers ----------------------------------------------------------

@needs_ext
@pytest.mark.parametrize("streams", STREAMS)
@pytest.mark.parametrize("arch", RECURRENT)
def test_float_matches_onnxruntime(tiny, arch, streams):
    X = readings(T, streams)
    step, (ref, _, ref_state) = step_and_ort_loop(tiny(arch), X, reset_at=T // 2)
    got = native_stream(step, X, reset_at=T // 2)
    scale = max(1.0, float(np.abs(ref).max()))
    assert_close(got, ref, f"{arch} logits", atol=1e-5 * scale)
    for i, (a, b) in enumerate(zip(step.state, ref_state)):
        assert_close(a, b, f"{arch} state {i}", atol=1e-5)
    assert (got.argmax(-1) == ref.argmax(-1)).mean() > 0.99
    probs = native_stream(step, X[:20], "probs")
    assert_close(probs.sum(-1), np.ones(probs.shape[:2], np.float32), "probs sum", atol=1e-6)


@needs_ext
def test_float_streams_do_not_depend_on_each_other(tiny):
    """Stream 3 of 7 computes what it computes alone, to the bit (the same sums in the same
    order whatever tile it falls in)."""
    assert_stream_computes_what_it_computes_alone(tiny("lstm"), readings(50, 7))


@needs_ext
def test_float_nan_step_is_not_adopted(tiny):
    path = tiny("gru")
    _, meta = open_model(path)
    step = native.NativeStep(path, meta, 3)
    native_stream(step, readings(5, 3))
    before = [a.copy() for a in step.state]
    step.x[:] = readings(1, 3)[0]
    step.x[2, 1] = np.nan
    assert step.run() == 2
    assert all(np.array_equal(a, b) for a, b in zip(step.state, before))
    step.x[2, 1] = 0.0
    assert step.run() == -1


# -- int8: the simulator's integers --------------------------------------------------------

@needs_ext
@pytest.mark.parametrize("streams,hidden", [(1, 8), (7, 8), (13, 20)])
@pytest.mark.parametrize("arch", RECURRENT)
def test_int8_bit_exact_with_intsim(tiny, arch, streams, hidden):
    """Every int8 kernel (VNNI where the CPU has it, exact float products, the firmware's own
    es_k_matvec) gives the simulator's integers; hidden 20 and 13 streams reach the partial
    column blocks, the masked last units and the streams left over after the 6-stream tiles."""
    from firmware_sim.intsim import from_onnx
    path = tiny(arch, "static", hidden)
    _, meta = open_model(path)
    assert native.supports(meta, path) is None
    m = from_onnx(path)
    X = readings(T, streams)
    steps = [native.NativeStep(path, meta, streams), native.NativeStep(path, meta, streams, vnni=False),
             native.NativeStep(path, meta, streams, reference=True)]
    assert steps[1].kernel == "int8 as exact float32 products" and steps[2].kernel.startswith("int8 es_k_matvec")
    assert steps[0].kernel == ("int8 AVX-512 VNNI" if native.vnni() else steps[1].kernel)
    state = m.init_state(streams)
    for t, x in enumerate(X):
        if t == T // 2:                              # a reset mid-stream: the last stream starts again
            for a in state:
                a[streams - 1] = 0
            for step in steps:
                step.reset(stream=streams - 1)
        want, state = m.step(m.to_fixed(x), state)
        for step in steps:
            step.x[:] = x
            assert step.run() == -1
            assert np.array_equal(step.logits_q12, want), f"{arch} reading {t}: {step.logits_q12} != {want}"
            assert np.array_equal(step.logits, (want / 4096).astype(np.float32))
            assert np.array_equal(step.logits.argmax(-1), want.argmax(-1))
    for step in steps:
        assert all(np.array_equal(a, b) for a, b in zip(step.int_state, state))


# -- state ---------------------------------------------------------------------------------

@needs_ext
@pytest.mark.parametrize("scheme", ["float", "static"])
@pytest.mark.parametrize("arch", RECURRENT)
def test_state_round_trips_exactly(tiny, arch, scheme):
    path = tiny(arch, scheme)
    _, meta = open_model(path)
    step = native.NativeStep(path, meta, 4)
    X = readings(40, 4)
    native_stream(step, X[:30])
    snap = [a.copy() for a in step.state]
    assert [a.shape for a in snap] == [(4, s.shape[1]) for s in meta.state]
    assert all(a.dtype == np.float32 for a in snap)
    ints = [a.copy() for a in step.int_state] if scheme == "static" else None
    after = native_stream(step, X[30:])
    step.reset()
    assert all(not a.any() for a in step.state)
    step.set_state(snap)
    assert all(np.array_equal(a, b) for a, b in zip(step.state, snap))
    if ints is not None:                      # float view -> the same integers
        assert all(np.array_equal(a, b) for a, b in zip(step.int_state, ints))
    assert np.array_equal(native_stream(step, X[30:]), after)
    step.reset(stream=1)
    assert not any(a[1].any() for a in step.state) and all(a[0].any() for a in step.state)


@needs_ext
def test_int8_state_view_rounds_to_q15(tiny):
    path = tiny("lstm", "static")
    _, meta = open_model(path)
    step = native.NativeStep(path, meta, 2)
    v = np.full((2, 8), 0.3, np.float32)
    step.set_state([v, v * 4, v, -v])             # h (int16 Q15), c (int32 Q15), ...
    h, c = step.int_state[0], step.int_state[1]
    assert h.dtype == np.int16 and c.dtype == np.int32
    assert (h == round(0.3 * 32768)).all() and (c == round(np.float32(1.2) * 32768)).all()
    step.set_state([v * 10, v, v, v])             # beyond [-1, 1): saturates
    assert (step.int_state[0] == 32767).all()
    with pytest.raises(UsageError):
        step.set_state([v])


@needs_ext
@pytest.mark.parametrize("arch, scheme", [("lstm", "static"), ("gru", "float")])
@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e300])
def test_a_state_that_is_not_finite_is_refused_whole(tiny, arch, scheme, bad):
    path = tiny(arch, scheme)
    _, meta = open_model(path)
    step = native.NativeStep(path, meta, 2)
    native_stream(step, readings(5, 2))
    before = [a.copy() for a in step.state]
    arrays = [np.full((2, step.hidden), 0.25) for _ in meta.state]
    arrays[-1][1, 3] = bad                        # the last tensor: the ones before it would go in first
    with pytest.raises(UsageError, match="NaN, Inf or a value beyond float32"):
        step.set_state(arrays)
    assert all(np.array_equal(a, b) for a, b in zip(step.state, before))


# -- what does not run natively ------------------------------------------------------------

@needs_ext
def test_unsupported_models_say_why(tiny, tmp_path):
    from export.step import build_graph
    proto, _, _ = build_graph(tiny_checkpoint("transformer"))
    path = tmp_path / "transformer.onnx"
    onnx.save(proto, str(path))
    _, meta = open_model(path)
    assert native.supports(meta, path) is None               # tests/test_native_attn.py runs it
    meta.quantization = {"scheme": "dynamic"}
    assert native.supports(meta, path) == "int8 dynamic scales activations per call: onnxruntime only"
    with pytest.raises(UsageError, match="dynamic"):
        native.open_step(path, meta, 1)
    _, meta = open_model(tiny("gru"))
    meta.quantization = {"scheme": "dynamic"}
    assert native.supports(meta, tiny("gru")) == "int8 dynamic scales activations per call: onnxruntime only"


def test_a_graph_unlike_the_export_is_refused(tiny, tmp_path):
    src = onnx.load(str(tiny("gru")))
    for node in src.graph.node:
        if node.op_type == "Tanh":
            node.op_type = "Relu"
    path = tmp_path / "relu.onnx"
    onnx.save(src, str(path))
    _, meta = open_model(path)
    reason = native.supports(meta, path)
    assert reason is not None and "Relu" in reason and "onnxruntime only" in reason, reason


# -- the reader and the light runtime ------------------------------------------------------

@pytest.mark.parametrize("scheme", ["float", "static"])
def test_protobuf_reader_matches_onnx(tiny, scheme):
    from onnx import numpy_helper

    from edgeseq.runtime.native.onnxfile import read_graph
    path = tiny("lstm", scheme)
    g, proto = read_graph(path), onnx.load(str(path))
    want = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    assert g.initializers.keys() == want.keys()
    for k, v in want.items():
        got = g.initializers[k]
        assert got.dtype == v.dtype and got.shape == v.shape and np.array_equal(got, v), k
    assert [(n.op_type, n.input, n.output) for n in g.nodes] == \
        [(n.op_type, list(n.input), list(n.output)) for n in proto.graph.node]
    assert g.inputs == [i.name for i in proto.graph.input]


def test_reader_reads_every_encoding():
    """Unpacked and packed repeated fields, negative int8 in int32_data, float_data, int64 and
    double tensors, node attributes: the encodings onnx.helper writes without raw_data."""
    from onnx import TensorProto, helper

    from edgeseq.runtime.native.onnxfile import parse_graph
    tensors = {
        "i8": (TensorProto.INT8, np.array([[-128, -1], [0, 127]], np.int8)),
        "f32": (TensorProto.FLOAT, np.array([1.5, -2.25, 3e-30], np.float32)),
        "i64": (TensorProto.INT64, np.array([-(1 << 40), 7], np.int64)),
        "f64": (TensorProto.DOUBLE, np.array([0.1, -1e300], np.float64)),
        "u8": (TensorProto.UINT8, np.array([0, 255], np.uint8)),
        "i32": (TensorProto.INT32, np.array([-(1 << 31), (1 << 31) - 1], np.int32)),
        "scalar": (TensorProto.FLOAT, np.array(4.0, np.float32)),
    }
    init = [helper.make_tensor(k, t, v.shape, v.reshape(-1).tolist()) for k, (t, v) in tensors.items()]
    init.append(helper.make_tensor("raw", TensorProto.FLOAT, [2], np.array([1, 2], np.float32).tobytes(), raw=True))
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=0.5)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], init)
    g = parse_graph(helper.make_model(graph).SerializeToString())
    for k, (_, v) in tensors.items():
        got = g.initializers[k]
        assert got.dtype == v.dtype and got.shape == v.shape and np.array_equal(got, v), (k, got, v)
    assert np.array_equal(g.initializers["raw"], [1.0, 2.0])
    assert g.nodes[0].op_type == "Gemm" and g.nodes[0].attrs == {"transB": 1, "alpha": 0.5}
    assert g.inputs == ["a"] and g.outputs == ["y"]


@needs_ext
def test_native_runtime_imports_neither_torch_nor_onnx(tiny, tmp_path):
    path = tiny("gru", "static")
    run_without_torch(f"""
        import numpy as np
        from edgeseq.runtime import native
        from edgeseq.runtime.model import open_model
        _, meta = open_model({str(path)!r})
        assert native.supports(meta, {str(path)!r}) is None
        step = native.NativeStep({str(path)!r}, meta, 2)
        step.x[:] = 1.0
        assert step.run() == -1
        print("OK")
    """, tmp_path)


# -- push in one C call ------------------------------------------------------------------------

@pytest.mark.skipif(not native.available(), reason="the native extension is not built here")
@pytest.mark.parametrize("arch", ["gru", "lstm"])
def test_push_in_one_c_call_answers_as_the_python_path(tiny, arch):
    """The C push (float32 arrays) and the Python path (lists, bad readings) give the same
    probabilities and count positions alike; a bad reading changes nothing; the session is
    freed when dropped (the pusher's reference to it is collectable)."""
    import gc
    import weakref
    from edgeseq.errors import ReadingError
    from edgeseq.runtime import StreamSession
    X = readings(30, 2, seed=7)
    fast, slow = StreamSession(tiny(arch), streams=2, backend="native"), StreamSession(tiny(arch), streams=2,
                                                                                       backend="native")
    assert type(fast.push).__name__ == "Pusher"
    for t in range(30):
        a = fast.push(X[t])
        b = slow.push(X[t].tolist())                         # a list: converted by the Python path
        assert np.array_equal(a, b) and a is not fast._probs
        a[:] = -1                                            # a copy: the session's buffer is untouched
    assert fast.position.tolist() == slow.position.tolist() == [30, 30]
    before = fast.snapshot()
    bad = X[0].copy()
    bad[1, 0] = np.nan
    with pytest.raises(ReadingError):
        fast.push(bad)
    assert fast.position.tolist() == [30, 30]
    assert all(np.array_equal(u, v) for u, v in zip(before["state"], fast.snapshot()["state"]))
    masked = np.ma.masked_array(X[0], mask=np.zeros_like(X[0], bool))
    masked.mask[0, 1] = True                                 # a subclass takes the Python path, which refuses it
    with pytest.raises(ReadingError, match="masked"):
        fast.push(masked)
    assert fast.position.tolist() == [30, 30]
    gone = weakref.ref(fast)
    del fast, a
    gc.collect()
    assert gone() is None


@pytest.mark.skipif(not native.available(), reason="the native extension is not built here")
def test_the_c_push_checks_every_value_of_a_batch(tiny):
    """37 streams: two blocks of 16 rows checked as one run each, five rows one by one. A value
    at a bound is taken; NaN, +-Inf or a value one float past a bound, in any stream and
    feature, is refused as the Python path refuses it, naming that stream, with nothing changed."""
    from edgeseq.errors import ReadingError
    from edgeseq.runtime import StreamSession
    s = StreamSession(tiny("gru"), streams=37, backend="native")
    assert type(s.push).__name__ == "Pusher"
    X = readings(3, 37, seed=3)
    s.push(X[0])
    hi = np.broadcast_to(s._hi, (F,)).astype(np.float32)
    lo = -hi if s._lo is None else np.broadcast_to(s._lo, (F,)).astype(np.float32)
    edge = X[1].copy()
    edge[0], edge[20], edge[36] = hi, lo, hi                 # at the bounds: in range
    s.push(edge)
    before, pos = s.snapshot(), s.position.copy()
    past_hi, past_lo = np.nextafter(hi, np.float32(np.inf)), np.nextafter(lo, np.float32(-np.inf))
    for stream in (0, 15, 16, 31, 32, 36):
        for f in range(F):
            for value in (np.nan, np.inf, -np.inf, past_hi[f], past_lo[f]):
                bad = X[2].copy()
                bad[stream, f] = value
                with pytest.raises(ReadingError, match=f"reading for stream {stream} has .* in 'f{f}'"):
                    s.push(bad)
    assert np.array_equal(s.position, pos)
    assert all(np.array_equal(a, b) for a, b in zip(before["state"], s.snapshot()["state"]))
    s.push(X[2])
    assert np.array_equal(s.position, pos + 1)


@pytest.mark.skipif(not native.available(), reason="the native extension is not built here")
def test_snapshots_taken_while_another_thread_pushes_are_consistent(tiny):
    """One thread pushes, another snapshots: each snapshot's state is the state after exactly
    its position's readings (the C push and snapshot share the session's lock)."""
    import threading
    from edgeseq.runtime import StreamSession
    import sys
    x = readings(1, 1, seed=9)[0]
    s = StreamSession(tiny("lstm"), backend="native")
    snaps, stop = [], threading.Event()

    def pusher():
        while not stop.is_set():
            s.push(x)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)                  # hand the GIL over often: snapshots fall between pushes
    t = threading.Thread(target=pusher)
    try:
        t.start()
        import time
        end = time.monotonic() + 30                 # stops at 20 positions; the bound only ends a stuck run
        while len({int(p["position"][0]) for p in snaps[-50:]}) < 20 and time.monotonic() < end:
            snaps.append(s.snapshot())
            time.sleep(0.0002)
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(interval)
    want = {int(snap["position"][0]) for snap in snaps}
    assert len(want) > 10                        # the pushes really ran between the snapshots
    ref, states = StreamSession(tiny("lstm"), backend="native"), {}
    for n in range(max(want) + 1):
        if n in want:
            states[n] = ref.snapshot()["state"]
        ref.push(x)
    for snap in snaps:
        n = int(snap["position"][0])
        assert all(np.array_equal(u, v) for u, v in zip(snap["state"], states[n])), n


@needs_ext
def test_the_extension_exports_its_init_alone():
    """The extension is compiled from several translation units (es_native.h); what they share is
    hidden, so the shared object still exports PyInit__es_native and nothing else of its own."""
    pytest.importorskip("elftools", reason="pip install pyelftools (edgeseq[firmware])")
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from edgeseq.runtime.native import _es_native
    try:
        with open(_es_native.__file__, "rb") as f:
            dynsym = ELFFile(f).get_section_by_name(".dynsym")
            mine = sorted(s.name for s in dynsym.iter_symbols()
                          if s["st_shndx"] != "SHN_UNDEF" and s["st_info"]["bind"] != "STB_LOCAL" and s.name)
    except ELFError:
        pytest.skip("not an ELF shared object")
    assert mine == ["PyInit__es_native"], mine
