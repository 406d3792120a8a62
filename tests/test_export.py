"""Export: one file, IR <= 9, metadata, and ONNX Runtime == torch step loop == torch forward."""

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from edgeseq import contract
from edgeseq.errors import ExportValidationError, UsageError
from edgeseq.train import model_from_checkpoint
from export import export_model
from export.step import build_graph, validate_graph, write_validated
from export.validate import ort_stream, synthetic_readings, torch_stream
from helpers import assert_close

STREAM = ["rnn", "gru", "lstm", "transformer"]


@pytest.mark.parametrize("arch", STREAM + ["bigru"])
def test_export_is_one_loadable_file_with_metadata(exported, arch):
    path, report = exported(arch)
    assert report["max_abs_diff"] <= report["tolerance"] == contract.validation_bound(report["logit_scale"])
    assert report["top_class_flips"] == 0 and report["max_prob_diff"] <= report["prob_tolerance"]
    m = onnx.load(str(path), load_external_data=False)
    assert m.ir_version <= 9
    assert all(o.version <= 19 for o in m.opset_import if o.domain in ("", "ai.onnx"))
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in m.graph.initializer)
    assert [p for p in os.listdir(path.parent) if p.startswith(path.name) and p != path.name] == []
    props = {p.key: p.value for p in m.metadata_props}
    meta = contract.ModelMeta.from_props(props)
    assert meta.arch == arch and meta.labels == ["Standing", "Running", "Walking", "Badminton"]
    assert len(meta.features) == 6 and len(meta.normalization["mean"]) == 6 and meta.version


@pytest.mark.parametrize("arch", STREAM)
def test_three_way_parity_over_a_long_stream(exported, trained, arch):
    """torch forward over the sequence == torch step loop == plain ONNX Runtime loop, 300 readings."""
    path, _ = exported(arch)
    model = model_from_checkpoint(trained(arch))
    meta = contract.ModelMeta.from_props(
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).get_modelmeta().custom_metadata_map)
    xs = synthetic_readings(meta, 300, batch=3, seed=7)           # (T, B, F)
    with torch.no_grad():
        full = model.forward_all(torch.from_numpy(xs.transpose(1, 0, 2))).numpy().transpose(1, 0, 2)
    steps = torch_stream(model, xs)
    onnx_out = ort_stream(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]), meta, xs)
    tol = contract.validation_bound(float(np.abs(full).max()))
    assert_close(steps, full, f"{arch} torch step vs forward", atol=tol)
    assert_close(onnx_out, steps, f"{arch} onnxruntime vs torch step", atol=tol)
    assert np.array_equal(onnx_out.argmax(-1), full.argmax(-1))


def _scaled_head(ckpt, factor):
    big = dict(ckpt)
    big["state_dict"] = {k: (v * factor if k.startswith("head.") else v) for k, v in ckpt["state_dict"].items()}
    return big


@pytest.mark.parametrize("arch", ["gru", "transformer"])
def test_large_logits_over_a_long_stream_export(trained, tmp_path, arch):
    """float32 rounding grows with the logits: with logits in the thousands over 2,000 readings the
    difference passes any fixed 1e-5, and the bound, scaled by the outputs, still accepts it."""
    report = export_model(_scaled_head(trained(arch), 500.0), tmp_path / "big.onnx", validate_readings=2000)
    assert report["logit_scale"] > 500 and report["readings"] == 2000
    assert report["max_abs_diff"] > 1e-5                     # an absolute 1e-5 would have refused a correct graph
    assert report["max_abs_diff"] <= report["tolerance"] and report["top_class_flips"] == 0


@pytest.mark.parametrize("arch", ["rnn", "gru", "lstm", "transformer"])
def test_one_perturbed_weight_is_refused(trained, tmp_path, arch):
    """A graph that is wrong by one weight (5% of its matrix's largest weight) fails validation,
    even with large logits, and nothing is written."""
    ckpt = _scaled_head(trained(arch), 500.0)
    proto, meta, model = build_graph(ckpt)
    init = max((t for t in proto.graph.initializer if len(t.dims) == 2),
               key=lambda t: int(np.prod(t.dims)))              # the largest weight matrix
    w = onnx.numpy_helper.to_array(init).copy()
    i = np.unravel_index(np.abs(w).argmax(), w.shape)
    w[i] += 0.05 * np.abs(w).max()
    init.CopyFrom(onnx.numpy_helper.from_array(w, init.name))
    out = tmp_path / "wrong.onnx"
    with pytest.raises(ExportValidationError, match="differs from torch") as e:
        write_validated(proto, out, lambda p: validate_graph(p, model, meta))
    assert e.value.max_diff > e.value.tolerance
    assert os.listdir(tmp_path) == []


def test_transformer_history_axis_is_dynamic_from_zero(exported):
    path, _ = exported("transformer")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    shapes = {i.name: i.shape for i in sess.get_inputs()}
    assert shapes["past.0.key"] == ["batch", 4, "history", 8]
    assert shapes["position"] == ["batch"]
    feeds = {"reading": np.zeros((5, 6), np.float32), "position": np.zeros(5, np.int64)}
    feeds.update({i.name: np.zeros((5, 4, 0, 8), np.float32) for i in sess.get_inputs() if i.name.startswith("past")})
    out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    assert out["present.1.value"].shape == (5, 4, 1, 8) and out["logits"].shape == (5, 4)


def test_failed_validation_leaves_no_file_and_keeps_the_good_one(trained, tmp_path):
    good = tmp_path / "gru.onnx"
    export_model(trained("gru"), good)
    before = good.read_bytes()
    with pytest.raises(ExportValidationError, match=r"differs from torch over 200 readings: logits by .* \(bound -") as e:
        export_model(trained("gru"), good, rtol=-1.0)
    assert e.value.max_diff is not None and e.value.max_diff >= 0
    assert good.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["gru.onnx"]
    fresh = tmp_path / "new.onnx"
    with pytest.raises(ExportValidationError):
        export_model(trained("gru"), fresh, rtol=-1.0)
    assert not fresh.exists() and sorted(os.listdir(tmp_path)) == ["gru.onnx"]


def test_export_rejects_bad_requests(trained, tmp_path):
    with pytest.raises(UsageError, match="must end in .onnx"):
        export_model(trained("gru"), tmp_path / "gru.bin")
    with pytest.raises(UsageError, match="transformer only"):
        export_model(trained("gru"), tmp_path / "gru.onnx", max_history=10)
    assert os.listdir(tmp_path) == []


def test_the_registry_built_once_changes_no_graph_and_is_put_back(monkeypatch):
    """export builds torch's table of ONNX functions once per process: the graph is byte for byte
    the one torch builds afresh, and torch's own method is back after each export."""
    import contextlib

    import export.step as step
    from torch.onnx._internal.exporter import _registration
    from edgeseq.report.bench import _random_checkpoint
    ckpt = _random_checkpoint("gru", hidden=8)
    before = _registration.ONNXRegistry.__dict__["from_torchlib"]
    cached = [step.build_graph(ckpt, split=True)[0].SerializeToString() for _ in range(2)]
    assert _registration.ONNXRegistry.__dict__["from_torchlib"] is before and step._REGISTRIES
    monkeypatch.setattr(step, "_registry_built_once", contextlib.nullcontext)
    fresh = step.build_graph(ckpt, split=True)[0].SerializeToString()
    assert cached[0] == cached[1] == fresh
