"""int8: each architecture against its float twin over long real streams, the export's bound,
sizes, and quantize-dequantize round trips of weights."""

from pathlib import Path

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
from edgeseq.runtime import native
from edgeseq.runtime.evaluate import long_streams, output_error, reading_accuracy, run_each, run_session, run_streams
from export import export_int8, export_model
from export.quantize import BACKEND_FIGURES, MAX_ACCURACY_DROP, MAX_ERROR
from export.step import FusedRecurrentStep
from edgeseq.train import model_from_checkpoint
from helpers import assert_close, one_error_line

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
    assert report["backends"]["onnxruntime"]["int8_reading_accuracy"] == acc_q
    assert report["float_reading_accuracy"] == acc_f
    if scheme == "static":      # fixed scales: any batch gives the same; evaluate runs the judged backend
        ev = evaluate(qpath, test)
        assert ev["backend"] == report["backend"] and report["int8_accuracy"] == ev["accuracy"]


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


# -- one verdict, for the step that runs -------------------------------------------------------

needs_native = pytest.mark.skipif(not native.available(), reason=native.why_unavailable() or "native step not built")
FIGURES = BACKEND_FIGURES


def test_int8_report_names_the_backend_it_judged(int8, basicmotions, monkeypatch):
    """Static int8 is judged on the backend StreamSession runs it on (native where built); the
    report's figures are that backend's, and the other backend's sit beside them."""
    monkeypatch.delenv("EDGESEQ_BACKEND", raising=False)
    path, report = int8("gru", "static")
    runs = StreamSession(path).backend
    assert report["backend"] == runs == ("native" if native.available() else "onnxruntime")
    assert open_model(path)[1].validation["backend"] == runs
    assert {k: report[k] for k in FIGURES} == {k: report["backends"][runs][k] for k in FIGURES}
    test = basicmotions.test
    for name in report["backends"]:           # each backend's figures are what that backend computes
        acc = reading_accuracy(run_session(path, test.X, test.lengths, backend=name), test)
        assert report["backends"][name]["int8_reading_accuracy"] == acc, name
    if native.available():
        assert report["backend_note"] is None and set(report["backends"]) == {"native", "onnxruntime"}
        # the GRU's integer step (the firmware's arithmetic) is not onnxruntime's QDQ arithmetic
        assert report["backends_differ"] and report["backends"]["native"]["mean_rel"] != \
            report["backends"]["onnxruntime"]["mean_rel"]

    path, report = int8("gru", "dynamic")    # per-call scales: onnxruntime only, and it says so
    assert report["backend"] == "onnxruntime" and set(report["backends"]) == {"onnxruntime"}
    assert report["backend_note"] and report["backends_differ"] is False
    if native.available():
        assert "dynamic scales activations per call" in report["backend_note"]


@needs_native
def test_int8_is_written_where_the_judged_backend_keeps_its_bound(trained, int8, runner, monkeypatch):
    """A bound between the two backends' mean errors: the backend under it writes the model,
    the other refuses it, and each verdict names its backend and the other's."""
    from edgeseq.cli import cli
    from edgeseq.train import save_checkpoint
    monkeypatch.delenv("EDGESEQ_BACKEND", raising=False)
    figs = int8("gru", "static")[1]["backends"]
    good, bad = sorted(figs, key=lambda n: figs[n]["mean_rel"])
    lo, hi = figs[good]["mean_rel"], figs[bad]["mean_rel"]
    assert lo < hi * 0.9, figs                              # far enough apart to put a bound between them
    bound = float(np.sqrt(lo * hi))
    save_checkpoint(trained("gru"), "runs/gru")
    args = ["export", "runs/gru", "--int8", "--max-error", repr(bound), "--out"]
    r = runner.invoke(cli, [*args, "m.onnx"])                # the default: the backend StreamSession runs
    if good == "native":                                     # measured here: the integer step errs less
        assert r.exit_code == 0, r.output
        assert "judged on native: mean error" in r.output
        assert f"  on {bad} (not judged): mean error {hi:.2%}" in r.output and "(outside its bound)" in r.output
        v = open_model("m.onnx")[1].validation
        assert v["backend"] == "native" and v["within_bounds"] is True
        assert v["backends"][bad]["within_bounds"] is False and v["backends"][bad]["mean_rel"] == hi
    else:
        assert r.exit_code == 1 and not Path("m.onnx").exists()
    r = runner.invoke(cli, [*args, "m2.onnx", "--backend", bad])
    assert one_error_line(r) == (
        f"Error: int8 (static) on the {bad} backend breaks its bound: mean output error {hi:.2%} of the output "
        f"range (bound {bound:.2%}); on {good} it stays within it; the model was not written (try --backend "
        f"{good} if that is the backend you deploy on, the other --int8-scheme, or --keep-anyway to write it "
        "regardless)")
    assert sorted(p.name for p in Path().iterdir()) == sorted(["runs"] + (["m.onnx"] if good == "native" else []))


def test_without_the_native_extension_int8_is_judged_on_onnxruntime(trained, tmp_path, monkeypatch):
    """No compiler, no extension: today's verdict (onnxruntime), and the report says why."""
    monkeypatch.setattr(native, "_ext", None)
    monkeypatch.setattr(native, "_WHY", "the native step extension (edgeseq.runtime.native._es_native) is not "
                                        "built; build it with `pip install -e .` where a C compiler is installed")
    monkeypatch.delenv("EDGESEQ_BACKEND", raising=False)
    with pytest.raises(UsageError, match="cannot judge the model on backend 'native': the native step extension"):
        export_int8(trained("gru"), tmp_path / "n.onnx", "static", backend="native")
    with pytest.raises(UsageError, match=r"backend 'native' \(from \$EDGESEQ_BACKEND\)"):
        monkeypatch.setenv("EDGESEQ_BACKEND", "native")
        export_int8(trained("gru"), tmp_path / "n.onnx", "static")
    monkeypatch.delenv("EDGESEQ_BACKEND")
    assert list(tmp_path.iterdir()) == []
    report = export_int8(trained("gru"), tmp_path / "g.onnx", "static")
    assert report["backend"] == "onnxruntime" and set(report["backends"]) == {"onnxruntime"}
    assert "is not built" in report["backend_note"] and report["backends_differ"] is False
    assert {k: report[k] for k in FIGURES} == {k: report["backends"]["onnxruntime"][k] for k in FIGURES}


def test_int8_backend_option_is_checked(runner, trained):
    from edgeseq.cli import cli
    from edgeseq.train import save_checkpoint
    save_checkpoint(trained("gru"), "runs/gru")
    r = runner.invoke(cli, ["export", "runs/gru", "--backend", "native", "--out", "m.onnx"])
    assert one_error_line(r, 2).startswith("Error: --backend applies to int8 export only; add --int8")
    r = runner.invoke(cli, ["export", "runs/gru", "--int8", "--int8-scheme", "dynamic", "--backend", "native",
                            "--out", "m.onnx"])
    assert one_error_line(r, 2).startswith("Error: int8 export cannot judge the model on backend 'native': ")
    with pytest.raises(UsageError, match="backend must be one of auto, onnxruntime, native, got 'gpu'"):
        export_int8(trained("gru"), "m.onnx", backend="gpu")
    assert not Path("m.onnx").exists()
