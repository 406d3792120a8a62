"""int8: each architecture against its float twin over long real streams, the export's bound,
sizes, and quantize-dequantize round trips of weights."""

import numpy as np
import onnx
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from onnx import numpy_helper
from onnxruntime.quantization.quant_utils import quantize_data

from edgeseq import contract
from edgeseq.errors import ExportValidationError, UsageError
from edgeseq.runtime import StreamSession, evaluate, open_model
from edgeseq.runtime.evaluate import long_streams, output_error, reading_accuracy, run_each, run_streams
from export import export_int8, export_model
from export.quantize import MAX_ACCURACY_DROP, MAX_ERROR
from export.step import FusedRecurrentStep
from edgeseq.train import model_from_checkpoint
from helpers import assert_close

ARCHS = ["rnn", "gru", "lstm", "transformer"]
SCHEMES = ["static", "dynamic"]


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("arch", ARCHS)
def test_int8_stays_within_its_bound_over_long_streams(exported, int8, basicmotions, arch, scheme):
    fpath, _ = exported(arch)
    qpath, report = int8(arch, scheme)
    fsess, fmeta = open_model(fpath)
    qsess, qmeta = open_model(qpath)
    assert qmeta.state == fmeta.state and qmeta.labels == fmeta.labels     # one contract for both
    assert qmeta.quantization["scheme"] == scheme and qmeta.validation["within_bounds"] is True

    run_q = run_each if scheme == "dynamic" else run_streams              # dynamic scales a whole batch
    X = long_streams(basicmotions.test, 600, seed=11)                     # not the export's streams
    assert X.shape == (4, 600, 6)
    err = output_error(run_streams(fsess, fmeta, X), run_q(qsess, qmeta, X))
    assert err["mean_rel"] <= MAX_ERROR, err
    assert err["argmax_agreement"] >= 0.95, err

    test = basicmotions.test
    acc_f = reading_accuracy(run_streams(fsess, fmeta, test.X, test.lengths), test)
    acc_q = reading_accuracy(run_q(qsess, qmeta, test.X, test.lengths), test)
    assert acc_q >= acc_f - MAX_ACCURACY_DROP - 1e-9, (acc_q, acc_f)
    assert report["int8_reading_accuracy"] == acc_q and report["float_reading_accuracy"] == acc_f
    if scheme == "static":                                                # fixed scales: any batch gives the same
        assert report["int8_accuracy"] == evaluate(qpath, test)["accuracy"]


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("arch", ARCHS)
def test_every_matrix_is_int8(int8, arch, scheme):
    path, _ = int8(arch, scheme)
    proto = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    matrices = [a for a in inits.values() if a.ndim == 2 and a.size >= 64]
    assert matrices and all(a.dtype == np.int8 for a in matrices), [(k, a.dtype) for k, a in inits.items() if a.ndim == 2]
    ops = {n.op_type for n in proto.graph.node}
    assert ({"QuantizeLinear", "DequantizeLinear"} if scheme == "static" else {"MatMulInteger"}) <= ops
    # weights use 7 bits (reduce_range): no u8 x s8 pair sum can saturate 16 bits on AVX2
    assert max(int(np.abs(a.astype(int)).max()) for a in matrices) <= 64


@pytest.mark.parametrize("arch", ["gru", "lstm"])
def test_int8_file_and_weights_are_smaller(exported, int8, arch):
    fbytes = exported(arch)[0].stat().st_size
    for scheme in SCHEMES:
        path, report = int8(arch, scheme)
        assert path.stat().st_size * 2.5 <= fbytes, (scheme, path.stat().st_size, fbytes)
        assert report["float_bytes"] == fbytes       # the float file of the same checkpoint, not the split graph
    proto_f, proto_q = onnx.load(str(exported(arch)[0])), onnx.load(str(int8(arch, "static")[0]))
    wbytes = lambda p: sum(numpy_helper.to_array(t).nbytes for t in p.graph.initializer)  # noqa: E731
    assert wbytes(proto_q) * 3 <= wbytes(proto_f)


@pytest.mark.parametrize("arch", ["gru", "lstm", "rnn"])
def test_dequantized_weights_are_within_half_a_step(trained, int8, arch):
    """The model's int8 weights, dequantized, against the float weights they came from."""
    step = FusedRecurrentStep(model_from_checkpoint(trained(arch)), split=True)
    proto = onnx.load(str(int8(arch, "static")[0]))
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    props = {p.key: p.value for p in proto.metadata_props}
    s = np.asarray(contract.ModelMeta.from_props(props).normalization["input_scale"], np.float32)
    for name in ("wx0", "wh0"):
        w = getattr(step, name).numpy()
        if name == "wx0":
            w = w * s[:, None]                      # input equalization: row f of x @ W reads feature f / s_f
        q, scale, zp = inits[f"{name}_quantized"], inits[f"{name}_scale"], inits[f"{name}_zero_point"]
        assert q.shape == w.shape and scale.shape == (w.shape[1],) and not zp.any()   # symmetric, per column
        deq = (q.astype(np.float32) - zp) * scale
        assert (np.abs(deq - w) <= scale / 2 * (1 + 1e-5)).all(), float((np.abs(deq - w) / scale).max())


@settings(max_examples=200, deadline=None)
@given(arrays(np.float32, st.integers(1, 300), elements=st.floats(-1e3, 1e3, width=32)),
       st.booleans(), st.booleans())
def test_quantize_then_dequantize_stays_within_half_a_step(w, symmetric, reduce_range):
    zp, scale, q = quantize_data(w, onnx.TensorProto.INT8, symmetric, reduce_range=reduce_range)
    deq = (q.astype(np.float64) - float(zp)) * float(scale)
    assert np.all(np.abs(deq - w.astype(np.float64)) <= float(scale) / 2 * (1 + 1e-5) + 1e-30)


def test_int8_model_streams_like_the_float_one(exported, int8, basicmotions):
    """No special case in the runtime: same state, same calls, snapshot/restore exact."""
    split = basicmotions.test
    f = StreamSession(exported("gru")[0], streams=len(split))
    q = StreamSession(int8("gru", "static")[0], streams=len(split))
    assert q.state_nbytes() == f.state_nbytes()
    T = split.X.shape[1]
    pf = np.stack([f.push(split.X[:, t]) for t in range(T)])
    pq = np.stack([q.push(split.X[:, t]) for t in range(T)])
    assert pq.shape == pf.shape and np.allclose(pq.sum(-1), 1, atol=1e-5)
    last = split.lengths - 1, np.arange(len(split))
    assert (pq[last].argmax(-1) == pf[last].argmax(-1)).mean() >= 0.975
    snap = q.snapshot()
    a = q.push(split.X[:, 0]).copy()
    q.restore(snap)
    assert np.array_equal(q.push(split.X[:, 0]), a)


def test_broken_bound_fails_the_export_and_keeps_the_good_file(trained, tmp_path):
    out = tmp_path / "gru-int8.onnx"
    with pytest.raises(ExportValidationError, match="breaks its bound.*not written"):
        export_int8(trained("gru"), out, "static", max_error=1e-6)
    assert list(tmp_path.iterdir()) == []                    # no file, no temporary left over

    export_model(trained("gru"), out)                        # a good model already in place
    before = out.read_bytes()
    with pytest.raises(ExportValidationError, match="test accuracy"):
        export_int8(trained("gru"), out, "dynamic", max_accuracy_drop=-1.0)
    assert out.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == [out.name]

    report = export_int8(trained("gru"), out, "static", max_error=1e-6, keep_anyway=True)
    assert report["within_bounds"] is False and out.read_bytes() != before
    assert open_model(out)[1].validation["within_bounds"] is False


def test_int8_rejects_bad_requests(trained, tmp_path):
    with pytest.raises(UsageError, match="unknown int8 scheme"):
        export_int8(trained("gru"), tmp_path / "m.onnx", "int4")
    with pytest.raises(UsageError, match="at least 500"):
        export_int8(trained("gru"), tmp_path / "m.onnx", stream_readings=100)
    assert list(tmp_path.iterdir()) == []


def test_split_cell_matches_torch_step(trained):
    """The two-MatMul cell that int8 starts from is the same function as the model's step."""
    for arch in ("rnn", "gru", "lstm"):
        model = model_from_checkpoint(trained(arch))
        step = FusedRecurrentStep(model, split=True)
        torch.manual_seed(0)
        x = torch.randn(3, model.config.n_features)
        state = model.init_state(3)
        state = tuple(torch.randn_like(s) * 0.5 for s in state)
        with torch.no_grad():
            ref, ref_state = model.step(x, state)
            got = step(x, *state)
        assert torch.allclose(got[0], ref, atol=1e-5), arch
        for a, b in zip(got[2:], ref_state):
            assert torch.allclose(a, b, atol=1e-5), arch


@pytest.mark.parametrize("arch", ARCHS)
def test_input_equalization_keeps_the_function_and_evens_the_ranges(trained, basicmotions, arch):
    from export.quantize import equalize_input
    ckpt = trained(arch)
    eq, s = equalize_input(ckpt, basicmotions.train)
    assert eq["normalization"]["input_scale"] == s.tolist() and s.max() == 1.0 and (s > 0).all()
    assert "input_scale" not in ckpt["normalization"]                      # the original is untouched
    x = torch.from_numpy(basicmotions.test.X[:4])
    with torch.no_grad():
        ref = model_from_checkpoint(ckpt).forward_all(x).numpy()
        got = model_from_checkpoint(eq).forward_all(x).numpy()
    assert_close(got, ref, f"{arch} equalized", atol=contract.validation_bound(float(np.abs(ref).max())))
    # the normalised reading as the int8 graph sees it: features' ranges closer together than before
    Xtr = np.concatenate([r[:n] for r, n in zip(basicmotions.train.X, basicmotions.train.lengths)])
    z = np.abs((Xtr - np.asarray(ckpt["normalization"]["mean"])) / np.asarray(ckpt["normalization"]["std"])).max(0)
    spread = lambda r: r.max() / r.min()  # noqa: E731
    assert spread(z / s) < spread(z)
