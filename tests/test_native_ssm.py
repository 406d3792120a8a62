"""The native state-space step (edgeseq.runtime.native.ssm, es_ssm.h) on tiny seeded models,
fixed and selective decay: float within 1e-4 of onnxruntime and static int8 within the int8
probe tolerance over 1,000 never-reset readings (1 and 7 streams, the last reset mid-way),
streams independent of each other, a NaN step not adopted, state that interchanges with
onnxruntime's, and edited files run by their graph or refused; on BasicMotions, int8 run
natively scores within the int8 bound of its float twin on both protocols."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from edgeseq import contract
from edgeseq.errors import UsageError
from edgeseq.runtime import StreamSession, native
from edgeseq.runtime.model import open_model
from edgeseq.runtime.statefile import load_state, save_state
from helpers import (assert_close, assert_runs_on_onnxruntime_only, assert_stream_computes_what_it_computes_alone,
                     edited, export_step, in_threads, native_stream, ort_loop, readings, step_and_ort_loop, swap_op,
                     tiny_models, tiny_ssm_checkpoint)

needs_ext = pytest.mark.skipif(not native.available(), reason=native.why_unavailable() or "native step not built")

T = 1000
STREAMS = [1, 7]
# (selective, d_model, d_state): widths that are neither multiples of 16 (the product panels)
# nor, for the states, of 4; and "wide", whose are (whole 16 x 16 transposes in the lanes)
VARIANTS = {"fixed": (False, 12, 6), "selective": (True, 10, 5), "small": (True, 8, 4), "wide": (True, 32, 16)}
FLOAT_RTOL = 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(variant, scheme) -> path: float (the step graph as exported) or static int8 (the split
    graph, the state given its own copy, quantized by onnxruntime's static QDQ quantizer, as
    export_int8 does)."""
    return tiny_models(tmp_path_factory.mktemp("native_ssm"), lambda variant: tiny_ssm_checkpoint(*VARIANTS[variant]),
                       readings(60, 4, seed=1), {"outputs": True})


# -- float: onnxruntime's numbers ----------------------------------------------------------

@needs_ext
@pytest.mark.parametrize("streams", STREAMS)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_float_matches_onnxruntime(tiny, variant, streams):
    X = readings(T, streams)
    step, (ref, ref_probs, ref_state) = step_and_ort_loop(tiny(variant), X, reset_at=T // 2)
    assert step.kernel == "ssm float32"
    got, got_probs = [], []
    for t, x in enumerate(X):
        if t == T // 2:
            step.reset(stream=streams - 1)
        step.x[:] = x
        assert step.run() == -1
        got.append(step.logits.copy())
        got_probs.append(step.probs.copy())
    got, got_probs = np.stack(got), np.stack(got_probs)
    scale = max(1.0, float(np.abs(ref).max()))
    assert_close(got, ref, f"{variant} logits", atol=FLOAT_RTOL * scale)
    assert_close(got_probs, ref_probs, f"{variant} probs", atol=FLOAT_RTOL)
    for i, (a, b) in enumerate(zip(step.state, ref_state)):
        assert_close(a, b, f"{variant} state {i}", atol=FLOAT_RTOL * max(1.0, float(np.abs(b).max())))
    assert (got.argmax(-1) == ref.argmax(-1)).mean() > 0.99


# -- int8: onnxruntime's QDQ graph ----------------------------------------------------------

@needs_ext
@pytest.mark.parametrize("streams", STREAMS)
@pytest.mark.parametrize("variant", ["fixed", "selective"])
def test_int8_matches_onnxruntime(tiny, variant, streams):
    """Static int8: the QLinearMatMul integers, onnxruntime's rounding; the float parts (norms,
    decay, state) differ by float32 rounding, which now and then moves a value across a
    rounding boundary of the next quantization: within the probe's int8 tolerance throughout."""
    X = readings(T, streams)
    step, (ref, _, ref_state) = step_and_ort_loop(tiny(variant, "static"), X, reset_at=T // 2)
    assert step.int8 and step.kernel.startswith("ssm int8 QDQ (exact integer products: ")
    got = native_stream(step, X, reset_at=T // 2)
    span = float(ref.max() - ref.min())
    diff = np.abs(got - ref)
    print(f"{variant} int8, {streams} stream(s): max |native - onnxruntime| {diff.max():.3g} "
          f"({diff.max() / span:.2%} of the range), logits identical in {(diff == 0).all(-1).mean():.2%} of readings")
    assert diff.max() <= native.INT8_PROBE_RTOL * span
    assert (got.argmax(-1) == ref.argmax(-1)).mean() > 0.99
    for a, b in zip(step.state, ref_state):
        assert a.dtype == np.float32 and a.shape == b.shape


@needs_ext
@pytest.mark.parametrize("streams", [1, 20, 27])
@pytest.mark.parametrize("variant", ["fixed", "selective", "wide"])
def test_packed_int8_products_are_the_float_sums_to_the_bit(tiny, variant, streams):
    """The host's packed integer products (AVX-512 VNNI, or AVX2's int16 pairs) and the exact
    float32 sums give the same floats: logits and state equal over 1,000 never-reset readings,
    one stream by rows, 20 (16 in lanes, 4 by rows) and 27 (on AVX-512 hosts 16 in VNNI lanes,
    8 in AVX2 lanes, 3 by rows). Where the host has neither, both are the float sums."""
    path = tiny(variant, "static")
    _, meta = open_model(path)
    X = readings(1000, streams, seed=3)
    packed, sums = native.NativeStep(path, meta, streams), native.NativeStep(path, meta, streams, vnni=False)
    assert sums.kernel == "ssm int8 QDQ (exact integer products: float32 sums)"
    if native.simd().startswith("x86-64-v"):
        assert packed.kernel != sums.kernel
    a, b = native_stream(packed, X), native_stream(sums, X)
    assert np.array_equal(a, b)
    assert all(np.array_equal(p, q) for p, q in zip(packed.state, sums.state))
    assert len(np.unique(a)) > 50                       # logits that move: the products do something


def _same_bits(a, b, X):
    """Run steps a and b over readings X; their logits and states must be the same bits. Returns a's logits."""
    la, lb = native_stream(a, X), native_stream(b, X)
    assert np.array_equal(la.view(np.uint32), lb.view(np.uint32))
    assert all(np.array_equal(p.view(np.uint32), q.view(np.uint32)) for p, q in zip(a.state, b.state))
    return la


@needs_ext
@pytest.mark.parametrize("variant", ["fixed", "selective"])
def test_int8_gate_and_decay_read_by_output_code_are_the_computed_ones_to_the_bit(tiny, tmp_path, variant):
    """Where the int8 products run packed (AVX2's int16 pairs, AVX-512 VNNI), the gate's SiLU and
    the selective decay of a chunk of streams are read from a table by the g and δ products' int8
    output codes (built at bind by the same kernels from the value each code stands for). They
    give the floats the kernels compute from the dequantized outputs: logits and state to the bit
    over 300 never-reset readings, 27 streams (24 in lanes: 16 + 8 on AVX-512 hosts; 3 by rows),
    as exported and with layer 0's g and δ output scales cut 25x in an edited file, so that their
    codes saturate at both ends."""
    from onnx import helper, numpy_helper

    names = ("matmul_1_scale", "matmul_2_scale") if variant == "selective" else ("matmul_1_scale",)

    def edit(m):
        for t in m.graph.initializer:
            if t.name in names:
                t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) / np.float32(25), t.name))
    X = readings(300, 27, seed=7)
    for path in (tiny(variant, "static"), edited(tiny(variant, "static"), tmp_path / "cut.onnx", edit)):
        _, meta = open_model(path)
        by_code, computed = native.NativeStep(path, meta, 27), native.NativeStep(path, meta, 27, vnni=False)
        if native.simd().startswith("x86-64-v"):
            assert by_code.kernel.endswith("; SiLU and decay read by output code)" if variant == "selective"
                                           else "; SiLU read by output code)"), by_code.kernel
        assert len(np.unique(_same_bits(by_code, computed, X))) > 50
    m = onnx.load(str(path))                            # the edited file's codes: both ends of the grid
    codes = [n.output[0] for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[1] in names]
    assert len(codes) == len(names)
    m.graph.output.extend(helper.make_tensor_value_info(c, onnx.TensorProto.INT8, None) for c in codes)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    state = {s.name: np.zeros((27, s.shape[1]), np.float32) for s in meta.state}
    for got in zip(*[sess.run(codes, {contract.READING: x, **state}) for x in X[:30]]):
        got = np.concatenate(got)
        assert got.min() == -128 and got.max() == 127


@needs_ext
def test_a_projection_over_256_outputs_computes_and_the_kernel_names_the_tables_that_run(tmp_path):
    """d_model 260: the gate's product has 260 outputs, past the tables' 256, so its SiLU is
    computed, while the decay (4 states) is read by code; `kernel` says so, and the results are
    the computed path's to the bit (9 streams: one chunk in lanes, one by rows)."""
    path = tmp_path / "wide-gate.onnx"
    export_step(tiny_ssm_checkpoint(True, 260, 4), path, "static", readings(60, 4, seed=1), {"outputs": True})
    _, meta = open_model(path)
    by_code, computed = native.NativeStep(path, meta, 9), native.NativeStep(path, meta, 9, vnni=False)
    if native.simd().startswith("x86-64-v"):
        assert by_code.kernel.split(": ", 1)[1] in ("AVX2 int16 pairs; decay read by output code)",
                                                    "AVX-512 VNNI; decay read by output code)"), by_code.kernel
    _same_bits(by_code, computed, readings(50, 9, seed=2))


# -- the step's contract -----------------------------------------------------------------------

@needs_ext
@pytest.mark.parametrize("scheme", ["float", "static"])
def test_streams_do_not_depend_on_each_other(tiny, scheme):
    """Stream 3 of 7 computes what it computes alone, to the bit."""
    assert_stream_computes_what_it_computes_alone(tiny("selective", scheme), readings(50, 7))


@needs_ext
def test_the_lanes_quantize_without_a_division_to_the_divisions_codes():
    """On hosts with AVX-512 the chunks of 16 streams quantize an int8 product's input with x / s
    rebuilt from x (1 / s) and its remainder, not divided; the step checks each scale when it
    binds. One ulp either side of every code's rounding tie, both clamps, ±Inf, NaN, zeros,
    subnormals and the largest floats, at several scales and zero points, give the codes that
    x / s divided gives (numpy: IEEE division, clip, round half to even), to the bit (a negative
    that rounds to 0 gives +0, as the lanes' rounding always has); a bad zero point is refused."""
    rng = np.random.default_rng(7)
    scales = [0.0123, 1 / 3, 2.0 ** -7, 0.9999999, 1.7e-5, 211.0] + list(rng.uniform(1e-3, 1, 6))
    ran = False
    for s in np.float32(scales):
        ties = np.float32((np.arange(-300, 300) + 0.5) * np.float64(s))
        near = [ties]
        for direction in (np.inf, -np.inf):
            t = ties
            for _ in range(3):
                t = np.nextafter(t, np.float32(direction))
                near.append(t)
        special = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1e-40, -1e-40, 1e-30])
        x = np.concatenate(near + [special, (rng.standard_normal(999) * 100 * s).astype(np.float32)])
        x = np.concatenate([x, np.zeros(-len(x) % 16, np.float32)])
        for z in (-128.0, -3.0, 0.0, 127.0):
            got = x.copy()
            with np.errstate(over="ignore", invalid="ignore"):     # + 0: a negative that rounds to 0 gives
                want = np.rint(np.clip(x / s, np.float32(-128 - z), np.float32(127 - z))) + np.float32(0)  # +0
            if not native._ext.ssm_quantize(got, float(s), z):
                continue
            ran = True
            nan = np.isnan(want)
            assert np.array_equal(np.isnan(got), nan), f"scale {s!r}, zero point {z}"
            assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32)), f"scale {s!r}, zero point {z}"
    for bad in (float("nan"), 0.5, 128.0):
        with pytest.raises(ValueError, match="integral int8 zero point"):
            native._ext.ssm_quantize(np.ones(16, np.float32), 1.0, bad)
    if not ran:
        pytest.skip("this host has no AVX-512 and FMA: its lanes divide")
    assert not native._ext.ssm_quantize(np.ones(16, np.float32), 1e-35, 0.0)      # past 2^-100: divided


@needs_ext
@pytest.mark.parametrize("scheme", ["float", "static"])
@pytest.mark.parametrize("variant", ["fixed", "selective", "wide"])
def test_lanes_compute_what_one_stream_computes(tiny, variant, scheme):
    """Chunks of streams run one stream per vector lane (16 on hosts with AVX-512, else 8; two
    chunks at once where two are left; int8 dot products where the host has them), the streams
    left over by rows. In every stream count the first 16 streams are in lanes and the last five
    of 53 in rows, so those compute the same, to the bit, in runs of 1, 20 and 53 streams. A
    stream in lanes and the same stream in rows run the same operations in the same order, but the
    compiler may fuse a different multiply-add into an FMA in each (it does on AVX2 hosts): float
    within a rounding (the state too, which stays float), an int8 logit within one quantization
    step."""
    path = tiny(variant, scheme)
    _, meta = open_model(path)
    X = readings(40, 53)
    step = native.NativeStep(path, meta, 53)
    many = native_stream(step, X)
    four = native_stream(native.NativeStep(path, meta, 20), X[:, :20])
    assert np.array_equal(four[:, :16], many[:, :16])
    grid = np.diff(np.unique(many)).min() if scheme == "static" else 0.0     # an int8 logit's step

    def close(a, b, what, logits=True):
        tol = 1.01 * grid if logits and grid else 1e-5 * max(1.0, float(np.abs(b).max()))
        assert np.abs(a - b).max() <= tol, f"{what}: {np.abs(a - b).max():.3g} apart"

    close(four[:, 16:], many[:, 16:20], "streams 16-19 by rows and in lanes")
    for i in (0, 17, 31, 34, 47, 48, 52):
        alone = native.NativeStep(path, meta, 1)
        one = native_stream(alone, X[:, i:i + 1])
        if i >= 48:
            assert np.array_equal(many[:, i:i + 1], one), f"stream {i}"
        else:
            close(one, many[:, i:i + 1], f"stream {i}")
        for a, b in zip(step.state, alone.state):
            if i >= 48:
                assert np.array_equal(a[i:i + 1], b), f"stream {i} state"
            else:
                close(b, a[i:i + 1], f"stream {i} state", logits=False)


@needs_ext
@pytest.mark.parametrize("streams, bad", [(3, 2), (37, 20), (20, 19)])
@pytest.mark.parametrize("scheme", ["float", "static"])
def test_a_nan_step_is_not_adopted(tiny, scheme, streams, bad):
    path = tiny("fixed", scheme)
    _, meta = open_model(path)
    step = native.NativeStep(path, meta, streams)
    native_stream(step, readings(5, streams))
    before = [a.copy() for a in step.state]
    logits = step.logits.copy()
    step.x[:] = readings(1, streams)[0]
    step.x[bad, 1] = np.nan
    assert step.run() == bad
    assert all(np.array_equal(a, b) for a, b in zip(step.state, before))
    step.x[bad, 1] = 0.0
    assert step.run() == -1
    assert not np.array_equal(step.logits, logits)


@needs_ext
@pytest.mark.parametrize("streams, bad", [(3, 2), (20, 4), (20, 17)])
@pytest.mark.parametrize("packed", [True, False])
def test_a_nan_in_the_state_is_carried_not_read_as_a_number(tiny, packed, streams, bad):
    """A NaN written into the live state (set_state refuses one) reaches the readout product:
    the packed int8 products, which would read it as a number, leave it to the float sums, which
    carry it to the logits, so the step is refused for that stream, in lanes (stream 4 of 20) and
    by rows alike, with packed products and without."""
    path = tiny("fixed", "static")
    _, meta = open_model(path)
    step = native.NativeStep(path, meta, streams, vnni=packed)
    native_stream(step, readings(5, streams))
    step.state[0][bad, 1] = np.nan
    with pytest.raises(UsageError, match="NaN"):
        step.set_state(step.state)
    before = [a.copy() for a in step.state]
    step.x[:] = readings(1, streams)[0]
    assert step.run() == bad
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(step.state, before))


@needs_ext
@pytest.mark.parametrize("scheme", ["float", "static"])
def test_state_round_trips_and_resets_per_stream(tiny, scheme):
    path = tiny("selective", scheme)
    _, meta = open_model(path)
    step = native.NativeStep(path, meta, 4)
    X = readings(40, 4)
    native_stream(step, X[:30])
    snap = [a.copy() for a in step.state]
    assert [a.shape for a in snap] == [(4, 5)] * 2 and all(a.dtype == np.float32 for a in snap)
    after = native_stream(step, X[30:])
    step.reset()
    assert all(not a.any() for a in step.state)
    step.set_state(snap)
    assert all(np.array_equal(a, b) for a, b in zip(step.state, snap))
    assert np.array_equal(native_stream(step, X[30:]), after)
    step.reset(stream=1)
    assert not any(a[1].any() for a in step.state) and all(a[0].any() for a in step.state)
    with pytest.raises(UsageError, match="int_state belongs to int8"):
        step.int_state


@needs_ext
@pytest.mark.parametrize("scheme", ["float", "static"])
def test_sessions_pick_native_and_state_interchanges_with_onnxruntime(tiny, tmp_path, scheme):
    """auto runs it natively (the probe agrees); a snapshot or state file taken on one backend
    and restored on the other gives the same next outputs (int8: within the probe tolerance)."""
    path = tiny("selective", scheme)
    nat = StreamSession(path, streams=3)
    ort_ = StreamSession(path, streams=3, backend="onnxruntime")
    assert nat.backend == "native" and StreamSession(path, backend="native").backend == "native"
    X = readings(40, 3, seed=3)
    for x in X[:20]:
        nat.push(x)
    ort_.restore(nat.snapshot())
    a = np.stack([nat.push_logits(x).copy() for x in X[20:30]])
    b = np.stack([ort_.push_logits(x).copy() for x in X[20:30]])
    tol = FLOAT_RTOL * max(1.0, float(np.abs(b).max())) if scheme == "float" else \
        native.INT8_PROBE_RTOL * float(b.max() - b.min())
    assert np.abs(a - b).max() <= tol
    save_state(tmp_path / "s.state", ort_, 30)                     # onnxruntime -> native, through a file
    back = StreamSession(path, streams=3, backend="native")
    load_state(tmp_path / "s.state", back)
    assert all(np.array_equal(p, q) for p, q in zip(back.snapshot()["state"], ort_.snapshot()["state"]))
    assert np.abs(back.push_logits(X[30]) - ort_.push_logits(X[30])).max() <= tol
    nat.reset(stream=2)
    assert list(nat.position) == [30, 30, 0] and all(not s[2].any() for s in nat.snapshot()["state"])


@needs_ext
def test_a_session_shared_by_threads_loses_no_push(tiny):
    """Four threads pushing the same reading into one native session (enough streams that the C
    step releases the GIL): every push is applied once, as 400 pushes in a row would be."""
    path = tiny("selective", "static")
    x = readings(1, 256, seed=4)[0]
    shared, serial = StreamSession(path, streams=256), StreamSession(path, streams=256)
    assert shared.backend == "native"

    def pusher():
        for _ in range(100):
            shared.push(x)
    in_threads(pusher, 4)
    for _ in range(400):
        serial.push(x)
    assert list(shared.position) == [400] * 256
    assert all(np.array_equal(a, b) for a, b in zip(shared.snapshot()["state"], serial.snapshot()["state"]))


# -- what the native step refuses ----------------------------------------------------------

def _set_constant(name_end, value):
    def edit(m):
        from onnx import numpy_helper
        t = next(t for t in m.graph.initializer if t.name.endswith(name_end))
        a = numpy_helper.to_array(t).copy()
        a.reshape(-1)[0] = value
        t.CopyFrom(numpy_helper.from_array(a, t.name))
    return edit


@needs_ext
def test_an_edited_file_runs_its_graph(tiny, tmp_path):
    """A file whose graph computes something else than the export's step (an edited operation,
    the 1 of 1 - a, an infinite Softplus threshold, a NaN in an int8 constant) runs on
    onnxruntime under auto and is refused by name under native."""
    one = next(t.name for t in onnx.load(str(tiny("selective"))).graph.initializer
               if t.name.startswith("scalar_tensor"))
    cases = [(tiny("fixed"), swap_op("Sigmoid", "Tanh")), (tiny("selective"), _set_constant(one, 0.9)),
             (tiny("selective"), swap_op("Softplus", "Relu")), (tiny("selective"), _set_constant("threshold_cast", np.inf)),
             (tiny("fixed", "static"), swap_op("Sigmoid", "Tanh")),
             (tiny("fixed", "static"), _set_constant("ssm0_x_bias", np.nan))]
    for i, (src, edit) in enumerate(cases):
        path = edited(src, tmp_path / f"edited{i}.onnx", edit)
        _, meta = open_model(path)
        assert native.supports(meta, path) is not None, i
        s = assert_runs_on_onnxruntime_only(path, i)
        x = readings(1, 2)[0]
        assert np.array_equal(s.push_logits(x), StreamSession(path, streams=2, backend="onnxruntime").push_logits(x))


@needs_ext
def test_the_packed_output_stage_rounds_a_small_negative_to_plus_zero(tiny, tmp_path):
    """Round half to even of -0.4 is +0, as onnxruntime's QuantizeLinear and the float sums give
    it, not -0: an edited file (layer 0's x output scale 1e30, so x quantizes to 0, its bias -0,
    the decay -0.5) keeps layer 0's state +0 in every stream, in the lanes and by rows, the
    packed products' bytes those of the float sums."""
    def edit(m):
        from onnx import numpy_helper
        for t in m.graph.initializer:
            a = numpy_helper.to_array(t).copy()
            if t.name == "matmul_scale":               # the QDQ pair after layer 0's x product
                a[...] = 1e30
            elif t.name in ("ssm0_x_bias", "ssm0_decay"):
                a[...] = -0.0 if t.name == "ssm0_x_bias" else -0.5
            else:
                continue
            t.CopyFrom(numpy_helper.from_array(a, t.name))
    path = edited(tiny("fixed", "static"), tmp_path / "signed-zero.onnx", edit)
    _, meta = open_model(path)
    assert native.supports(meta, path) is None
    X = readings(5, 9, seed=2)                          # streams 0-7 in a lane chunk, stream 8 by rows
    packed, sums = native.NativeStep(path, meta, 9), native.NativeStep(path, meta, 9, vnni=False)
    a, b = native_stream(packed, X), native_stream(sums, X)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    for p, q in zip(packed.state, sums.state):
        assert np.array_equal(p.view(np.uint32), q.view(np.uint32))
    assert not packed.state[0].view(np.uint32).any()    # +0.0 everywhere, no sign bit
    assert packed.state[1].any()


@needs_ext
@pytest.mark.parametrize("variant", ["fixed", "selective", "wide"])
def test_saturated_gates_and_decays_agree_in_lanes_rows_and_onnxruntime(tiny, tmp_path, variant):
    """Layer 0's input projection (x, gate and δ) scaled 60x in an edited file: the gate's SiLU
    and the selective decay's softplus and exps run far past exp's clamps (88, -87) and the
    softplus threshold, where the lanes (with AVX2's kernels where the host has them), the rows
    and onnxruntime still agree, over 200 never-reset readings."""
    from onnx import helper, numpy_helper

    def edit(m):
        for t in m.graph.initializer:
            if t.name in ("ssm0_in", "ssm0_in_bias"):
                t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(60), t.name))
    path = edited(tiny(variant), tmp_path / f"{variant}-hot.onnx", edit)
    _, meta = open_model(path)
    assert native.supports(meta, path) is None
    X = readings(200, 17, seed=3)                       # streams 0-15 in lanes, stream 16 by rows
    lanes = native_stream(native.NativeStep(path, meta, 17), X)
    ref, _, _ = ort_loop(path, X)
    assert_close(lanes, ref, f"{variant} logits", atol=FLOAT_RTOL * max(1.0, float(np.abs(ref).max())))
    alone = native_stream(native.NativeStep(path, meta, 1), X[:, 3:4])
    assert_close(lanes[:, 3:4], alone, f"{variant} stream 3 in lanes and by rows",
                 atol=1e-5 * max(1.0, float(np.abs(alone).max())))
    m = onnx.load(str(path))                            # the projection's outputs: past the clamps
    proj = next(n.output[0] for n in m.graph.node if "ssm0_in" in n.input)
    m.graph.output.append(helper.make_tensor_value_info(proj, onnx.TensorProto.FLOAT, None))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    state = {s.name: np.zeros((17, s.shape[1]), np.float32) for s in meta.state}
    hot = np.concatenate([sess.run([proj], {contract.READING: x, **state})[0] for x in X[:20]])
    assert np.abs(hot).max() > 100 and (hot < -100).any()


@needs_ext
@pytest.mark.parametrize("n_classes", [2, 3, 8, 11, 19])
def test_every_class_count_leaves_the_lanes_row_by_row(tmp_path, n_classes):
    """A chunk's logits and probabilities leave the lanes as rows of n_classes: under a register's
    width as one padded block whose rows are stored whole, each over the next's start (the last
    ones value by value), else in blocks with the rest value by value. Every stream's rows agree
    with onnxruntime, in a pair of chunks, a chunk alone and the rows after them (24 + 5
    streams); a NaN reading in one lane leaves the others' probabilities written and its own as
    they were."""
    path = tmp_path / f"c{n_classes}.onnx"
    export_step(tiny_ssm_checkpoint(True, 10, 5, n_classes), path, "float", readings(60, 4, seed=1),
                {"outputs": True})
    _, meta = open_model(path)
    X = readings(30, 29, seed=5)
    ref, ref_probs, _ = ort_loop(path, X)
    step = native.NativeStep(path, meta, 29)
    got, got_probs = [], []
    for x in X:
        step.x[:] = x
        assert step.run() == -1
        got.append(step.logits.copy())
        got_probs.append(step.probs.copy())
    got, got_probs = np.stack(got), np.stack(got_probs)
    assert got.shape == ref.shape == (30, 29, n_classes)
    assert_close(got, ref, "logits", atol=FLOAT_RTOL * max(1.0, float(np.abs(ref).max())))
    assert_close(got_probs, ref_probs, "probs", atol=FLOAT_RTOL)
    before = step.probs.copy()
    step.x[:] = X[0]
    step.x[21, 0] = np.nan                              # the third chunk (16-23), lane 5
    assert step.run() == 21
    assert np.array_equal(step.probs[21], before[21])
    assert not np.array_equal(step.probs[[16, 22]], before[[16, 22]])
    assert np.allclose(step.probs[16:24].sum(-1)[[0, 1, 2, 3, 4, 6, 7]], 1.0, atol=1e-5)


@needs_ext
def test_the_probe_catches_a_step_that_misreads_its_weights(tiny, monkeypatch):
    """The last safety net: a native step whose weights differ from the graph's (here: one
    decay read wrong) disagrees with onnxruntime on the probe readings; auto then runs the graph."""
    from edgeseq.runtime.native import ssm
    path = tiny("fixed")
    plan = ssm.ssm_plan

    def misread(*args):
        p = plan(*args)
        layer = list(p["layers"][0])
        layer[8] = layer[8].copy()
        layer[8][0] = 0.99
        p["layers"][0] = tuple(layer)
        return p
    monkeypatch.setattr(ssm, "ssm_plan", misread)
    assert StreamSession(path).backend == "onnxruntime"
    with pytest.raises(UsageError, match="its graph computes other logits than the native step"):
        StreamSession(path, backend="native")


@needs_ext
def test_dynamic_int8_stays_on_onnxruntime(tiny):
    _, meta = open_model(tiny("fixed"))
    meta.quantization = {"scheme": "dynamic"}
    assert native.supports(meta, tiny("fixed")) == "int8 dynamic scales activations per call: onnxruntime only"


# -- BasicMotions -------------------------------------------------------------------------------

@needs_ext
def test_int8_native_on_basicmotions_within_the_int8_bound(exported, int8, basicmotions):
    """The default SSM, static int8 run natively against its float twin: per-reading accuracy
    on both protocols (each test sequence its own stream; the sequences joined, never reset)
    within the export's bound, MAX_ACCURACY_DROP."""
    from edgeseq.runtime.evaluate import evaluate, reading_accuracy
    from export.quantize import MAX_ACCURACY_DROP
    ds = basicmotions.test
    figures = {}
    for name, path in (("float", exported("ssm")[0]), ("int8", int8("ssm", "static")[0])):
        ev = evaluate(str(path), ds, backend="native")
        assert ev["backend"] == "native"
        s = StreamSession(path, streams=len(ds), backend="native")
        logits = np.stack([s.push_logits(ds.X[:, t]).copy() for t in range(ds.X.shape[1])])   # (T, N, C)
        figures[name] = (reading_accuracy(logits, ds), ev["continuous"]["reading_accuracy"], ev["accuracy"])
    (fs, fc, ff), (qs, qc, qf) = figures["float"], figures["int8"]
    print(f"ssm native: per sequence (per reading) {fs:.3f} -> {qs:.3f}, continuous {fc:.3f} -> {qc:.3f}, "
          f"final reading {ff:.3f} -> {qf:.3f}")
    assert fs - qs <= MAX_ACCURACY_DROP + 1e-9 and fc - qc <= MAX_ACCURACY_DROP + 1e-9
