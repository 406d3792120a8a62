"""StreamSession on both step backends: the same answers (float within float32 rounding of
onnxruntime), the same state rules (bad readings, snapshot/restore, reset, state files), and
the backend choice: auto picks native where it can, native where it cannot is one clear error."""

import numpy as np
import pytest
from click.testing import CliRunner

from edgeseq.cli import cli
from edgeseq.errors import ReadingError, UsageError
from edgeseq.runtime import StreamSession, native
from edgeseq.runtime.statefile import load_state, save_state

pytestmark = pytest.mark.skipif(not native.available(), reason=native.why_unavailable() or "native step not built")
RECURRENT = ["rnn", "gru", "lstm"]


def _readings(n, streams, seed=0):
    return np.random.default_rng(seed).standard_normal((n, streams, 6)).astype(np.float32)


@pytest.mark.parametrize("streams", [1, 7])
@pytest.mark.parametrize("arch", RECURRENT)
def test_float_native_equals_onnxruntime(exported, arch, streams):
    path = exported(arch)[0]
    nat, ort_ = StreamSession(path, streams=streams), StreamSession(path, streams=streams, backend="onnxruntime")
    assert nat.backend == "native" and ort_.backend == "onnxruntime"
    X = _readings(1000, streams)
    a = np.stack([nat.push_logits(x).copy() for x in X])
    b = np.stack([ort_.push_logits(x).copy() for x in X])
    assert np.abs(a - b).max() <= 1e-5 * max(1.0, float(np.abs(b).max()))
    assert np.allclose(nat.push(X[0]), ort_.push(X[0]), atol=1e-5)


@pytest.mark.parametrize("backend", ["native", "onnxruntime"])
@pytest.mark.parametrize("arch", RECURRENT)
def test_state_rules_are_the_same_on_both_backends(exported, int8, tmp_path, arch, backend):
    for path in (exported(arch)[0], int8(arch, "static")[0]):
        s = StreamSession(path, streams=3, backend=backend)
        X = _readings(40, 3, seed=1)
        for x in X[:20]:
            s.push(x)
        snap = s.snapshot()
        bad = X[20].copy()
        bad[1, 2] = np.nan
        with pytest.raises(ReadingError, match="stream 1"):
            s.push(bad)
        after = s.snapshot()
        assert all(np.array_equal(p, q) for p, q in zip(snap["state"], after["state"]))
        assert np.array_equal(snap["position"], after["position"])
        want = np.stack([s.push(x) for x in X[20:30]])
        s.restore(snap)
        assert np.array_equal(np.stack([s.push(x) for x in X[20:30]]), want)
        s.reset(stream=2)
        assert list(s.position) == [30, 30, 0]
        assert all(not a[2].any() for a in s.snapshot()["state"])
        save_state(tmp_path / "s.state", s, 30)
        t = StreamSession(path, streams=3, backend=backend)
        load_state(tmp_path / "s.state", t)
        assert np.array_equal(t.push(X[30]), s.push(X[30]))
        assert s.state_nbytes() == StreamSession(path, backend="onnxruntime").state_nbytes()


def test_auto_falls_back_and_native_says_why(exported, int8):
    dyn = int8("gru", "dynamic")[0]
    assert StreamSession(dyn, streams=2).backend == "onnxruntime"
    with pytest.raises(UsageError, match="backend 'native' cannot run .*dynamic"):
        StreamSession(dyn, backend="native")
    with pytest.raises(UsageError, match="backend must be one of auto, onnxruntime, native"):
        StreamSession(exported("gru")[0], backend="tflite")
    r = CliRunner().invoke(cli, ["stream", str(dyn), "--backend", "native"], input="0,0,0,0,0,0\n")
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "cannot run" in errors[0], r.output


def test_eval_says_which_backend_ran(exported):
    r = CliRunner().invoke(cli, ["eval", str(exported("gru")[0]), "--backend", "native"])
    assert r.exit_code == 0 and "(native backend)" in r.output, r.output
    r = CliRunner().invoke(cli, ["eval", str(exported("gru")[0]), "--backend", "onnxruntime"])
    assert r.exit_code == 0 and "(onnxruntime backend)" in r.output, r.output


@pytest.mark.parametrize("backend", ["native", "onnxruntime"])
def test_every_kind_of_reading_is_taken_as_float32(exported, int8, backend):
    """The C fast path takes C-contiguous float32 [streams, F]; anything else (a list, float64,
    a strided view, big-endian, one stream's [F]) goes through numpy's conversion and gives
    the same answer from the same state, and a bad value in any of them changes nothing."""
    for path in (exported("gru")[0], int8("lstm", "static")[0]):
        for streams in (1, 3):
            X = _readings(4, streams, seed=2)
            x = X[3]
            kinds = {"list": x.tolist(), "float64": x.astype(np.float64), "big-endian": x.astype(">f4"),
                     "strided": np.repeat(x, 2, axis=1)[:, ::2], "fortran": np.asfortranarray(x)}
            if streams == 1:
                kinds["one stream"] = x[0]
            ref = StreamSession(path, streams=streams, backend=backend)
            for r in X[:3]:
                ref.push(r)
            snap = ref.snapshot()
            want = ref.push(x)
            for name, given in kinds.items():
                ref.restore(snap)
                assert np.array_equal(ref.push(given), want), name
                ref.restore(snap)
                bad = np.array(given, dtype=np.asarray(given).dtype, copy=True, order="C")
                bad.reshape(-1)[-1] = np.inf if bad.dtype.kind == "f" else bad.reshape(-1)[-1]
                if bad.dtype.kind == "f":
                    with pytest.raises(ReadingError, match="stream state unchanged"):
                        ref.push(bad)
                    after = ref.snapshot()
                    assert all(np.array_equal(a, b) for a, b in zip(snap["state"], after["state"])), name


def test_the_backend_default_comes_from_the_environment(exported, int8, monkeypatch):
    gru = exported("gru")[0]
    monkeypatch.setenv("EDGESEQ_BACKEND", "onnxruntime")
    assert StreamSession(gru).backend == "onnxruntime"
    assert StreamSession(gru, backend="native").backend == "native"        # a named backend wins
    monkeypatch.setenv("EDGESEQ_BACKEND", "native")
    assert StreamSession(gru).backend == "native"
    with pytest.raises(UsageError, match=r"backend 'native' \(from \$EDGESEQ_BACKEND\) cannot run"):
        StreamSession(int8("gru", "dynamic")[0])
    monkeypatch.setenv("EDGESEQ_BACKEND", "tflite")
    with pytest.raises(UsageError, match="EDGESEQ_BACKEND is 'tflite'; set it to one of auto, onnxruntime, native"):
        StreamSession(gru)
    r = CliRunner().invoke(cli, ["eval", str(gru)])
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert r.exit_code != 0 and len(errors) == 1 and "EDGESEQ_BACKEND" in errors[0], r.output


def _edit(src, dst, edit):
    import onnx
    m = onnx.load(str(src))
    edit(m)
    onnx.save(m, str(dst))
    return dst


def test_a_file_whose_operations_differ_runs_its_graph(exported, int8, tmp_path):
    """The native step reads weights and assumes the export's operations; a file whose graph
    computes something else (an edited cell, a NaN bias) is run by onnxruntime under auto, and
    refused by name under native, never run wrong."""
    import warnings

    from onnx import numpy_helper

    def swap(op_from, op_to):
        def edit(m):
            next(n for n in m.graph.node if n.op_type == op_from).op_type = op_to
        return edit

    def nan_bias(m):
        t = next(t for t in m.graph.initializer if t.name.startswith("b0"))
        a = numpy_helper.to_array(t).copy()
        a.reshape(-1)[0] = np.nan
        t.CopyFrom(numpy_helper.from_array(a, t.name))

    cases = [(exported("gru")[0], swap("Sigmoid", "Tanh")), (exported("lstm")[0], swap("Tanh", "Sigmoid")),
             (int8("gru", "static")[0], swap("Sigmoid", "Tanh")), (int8("gru", "static")[0], nan_bias)]
    for i, (src, edit) in enumerate(cases):
        path = _edit(src, tmp_path / f"edited{i}.onnx", edit)
        with warnings.catch_warnings():
            warnings.simplefilter("error")                    # no numpy warning on the way
            s = StreamSession(path, streams=2)
            assert s.backend == "onnxruntime", i
            with pytest.raises(UsageError, match=f"backend 'native' cannot run '{path}'"):
                StreamSession(path, backend="native")
        ort_ = StreamSession(path, streams=2, backend="onnxruntime")
        x = _readings(1, 2)[0]
        assert np.array_equal(s.push_logits(x), ort_.push_logits(x))


def test_eval_native_on_a_window_model_is_refused(exported, monkeypatch):
    from export import export_model
    r = CliRunner().invoke(cli, ["eval", str(exported("bigru")[0]), "--backend", "native"])
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "whole windows" in errors[0], r.output
    monkeypatch.setenv("EDGESEQ_BACKEND", "native")
    r = CliRunner().invoke(cli, ["eval", str(exported("bigru")[0])])
    assert r.exit_code == 2 and "from $EDGESEQ_BACKEND" in r.output, r.output
    del export_model


@pytest.mark.parametrize("backend", ["native", "onnxruntime"])
def test_a_reading_changed_by_another_thread_is_one_reading_error(exported, backend):
    """Another thread writing NaN into the array being pushed: the push is either taken or
    refused with a ReadingError, never anything else, and the state stays a state of accepted
    readings."""
    import threading
    s = StreamSession(exported("gru")[0], backend=backend)
    shared = np.zeros((1, 6), np.float32)
    stop = threading.Event()

    def toggle():
        while not stop.is_set():
            shared[0, 0] = np.nan
            shared[0, 0] = 0.5
    t = threading.Thread(target=toggle)
    t.start()
    refused = 0
    try:
        for _ in range(3000):
            try:
                s.push(shared)
            except ReadingError:
                refused += 1
    finally:
        stop.set()
        t.join()
    assert all(np.isfinite(a).all() for a in s.snapshot()["state"])
    assert s.position[0] == 3000 - refused


@pytest.mark.parametrize("backend", ["native", "onnxruntime"])
def test_bytes_and_masked_readings_are_refused(exported, backend):
    s = StreamSession(exported("gru")[0], backend=backend)
    before = s.snapshot()
    for bad, why in ((bytearray(6), "bytearray, not numbers"), (b"\x00" * 6, "bytes, not numbers"),
                     (memoryview(bytearray(6)), "memoryview, not numbers"),
                     (np.ma.masked_array(np.zeros((1, 6)), mask=[[0, 1, 0, 0, 0, 0]]), "masked values")):
        with pytest.raises(ReadingError, match=why):
            s.push(bad)
    assert all(np.array_equal(a, b) for a, b in zip(before["state"], s.snapshot()["state"]))
    s.push(np.ma.masked_array(np.zeros((1, 6), np.float32)))      # nothing masked: a plain reading


def test_bench_times_both_backends_and_says_which_pushed():
    from edgeseq.report.bench import format_bench, run_bench
    r = run_bench(repeats=20, warmup=2, cache_lengths=(4,), backends=("onnxruntime", "native"))
    assert r["gru"]["edgeseq_push_backend"] == "native"
    rows = r["backends"]["rows"]
    assert {(row["model"], row["streams"]) for row in rows} == {(m, b) for m in ("float", "int8")
                                                                 for b in (1, 16, 256, 1024)}
    for row in rows:
        for b in ("onnxruntime", "native"):
            assert row[b]["us_per_call"] > 0 and 0 < row[b]["share_of_gemm_bound"]
        if row["streams"] == 1:
            o, n = row["onnxruntime"], row["native"]
            assert o["python_overhead_us"] == pytest.approx(o["us_per_call"] - o["bare_iobinding_us"])
            assert row["floor_iobinding_us"] > 0                     # timed in the same interleaved rounds
            assert n["push_over_c_step"] == pytest.approx(n["us_per_call"] / n["c_step_us"])
    one = {(row["variant"], row["model"]): row for row in r["archs"]["ssm"] if row["streams"] == 1}
    assert set(one) == {(v, m) for v in ("fixed", "selective") for m in ("float", "int8")}
    for v in ("fixed", "selective"):               # float and int8 timed in one interleaved loop
        f, q = one[v, "float"]["native"], one[v, "int8"]["native"]
        assert f["int8_over_float"] == q["int8_over_float"] == pytest.approx(q["us_per_call"] / f["us_per_call"])
        assert one[v, "float"]["floor_iobinding_us"] == one[v, "int8"]["floor_iobinding_us"] > 0
    many = [row for row in r["archs"]["ssm"] if row["streams"] == 1024]
    assert {(row["variant"], row["model"]) for row in many} == set(one)
    assert len({row["gemm_macs_per_s_interleaved"] for row in many}) == 1      # one GEMM, timed among every push
    for row in many:                   # the push right after itself, and right after onnxruntime's push
        n, per_s = row["native"], 1024e6 * row["macs_per_reading"] / row["gemm_macs_per_s_interleaved"]
        assert n["share_of_gemm_bound"] == pytest.approx(per_s / n["fastest_us_per_call"])
        assert n["share_of_gemm_bound_after_others"] == pytest.approx(per_s / n["fastest_after_others_us_per_call"])
    text = format_bench(r)
    assert "int8/float" in text
    assert "edgeseq StreamSession.push, native backend" in text and "GEMM" in text and "Python" in text
    assert "timed in the same interleaved rounds" in text and "the C step alone" in text
    assert "right after a push" in text
    r = run_bench(repeats=20, warmup=2, cache_lengths=(4,), backends=("onnxruntime",))
    assert r["gru"]["edgeseq_push_backend"] == "onnxruntime" and "native" not in r["backends"]["rows"][0]
