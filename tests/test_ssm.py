"""State-space model: parallel scan == step loop == ONNX Runtime loop with the state fed back,
a state that cannot grow, int8 against its float twin, the targets and the CLI."""

import json

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner

import edgeseq
from edgeseq import contract
from edgeseq.cli import cli
from edgeseq.data import Normalization
from edgeseq.errors import UsageError
from edgeseq.models import build_model, config_dict, make_config
from edgeseq.models.common import RecurrentConfig
from edgeseq.models.ssm import diagonal_scan
from edgeseq.runtime import StreamSession, evaluate, native, open_model
from edgeseq.train import DEFAULTS, save_checkpoint
from export import export_model
from export.quantize import MAX_ACCURACY_DROP, MAX_ERROR
from export.validate import ort_stream, synthetic_readings, torch_stream
from helpers import assert_close

VARIANTS = [False, True]          # selective


@pytest.fixture(autouse=True)
def one_thread():
    """Thousands of tiny ops: a second intra-op thread only waits for a busy core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _ckpt(basicmotions, selective, seed=0):
    """An untrained checkpoint (seeded weights, the data's normalisation): parity needs no training."""
    torch.manual_seed(seed)
    ds = basicmotions
    cfg = make_config("ssm", n_features=ds.n_features, n_classes=len(ds.labels), selective=selective)
    model = build_model("ssm", cfg).eval()
    norm = Normalization.fit(ds.train)
    model.norm.set(norm.mean, norm.std)
    return {"edgeseq_version": edgeseq.__version__, "arch": "ssm", "config": config_dict(cfg),
            "state_dict": model.state_dict(), "normalization": norm.to_json(), "labels": list(ds.labels),
            "features": list(ds.features)}


def _loop64(log_a, x, s0):
    """s_t = exp(log_a_t) s_{t-1} + x_t one reading at a time, in float64."""
    s, out = s0.double(), []
    for t in range(x.shape[1]):
        s = torch.exp(log_a[:, t].double()) * s + x[:, t].double()
        out.append(s)
    return torch.stack(out, 1)


@pytest.mark.parametrize("chunk", [2, 8, 64])
@pytest.mark.parametrize("per_reading", [True, False])
def test_scan_matches_a_float64_loop_over_1000_readings(chunk, per_reading):
    """Decays from a = exp(-30) (gone in one reading) to a = exp(-1e-5) (a memory of 10^5 readings),
    per reading (selective) or one per state (fixed): no overflow, no NaN, and every state within
    float32 rounding (a few ulps of the largest state) of the exact recursion."""
    g = torch.Generator().manual_seed(0)
    shape = (2, 1000, 16) if per_reading else (16,)
    log_a = -torch.exp(torch.empty(shape).uniform_(np.log(1e-5), np.log(30.0), generator=g))
    x = torch.randn(2, 1000, 16, generator=g)
    s0 = torch.randn(2, 16, generator=g)
    got = diagonal_scan(log_a, x, s0, chunk=chunk)
    assert got.shape == (2, 1000, 16) and torch.isfinite(got).all()
    ref = _loop64(log_a.expand_as(x), x, s0)
    scale = float(ref.abs().max())                   # slow states sum hundreds of readings: |s| reaches ~30
    assert_close(got.double().numpy(), ref.numpy(), f"scan chunk {chunk}", atol=2e-6 * scale)
    with pytest.raises(ValueError, match="chunk must be at least 2"):
        diagonal_scan(log_a, x, s0, chunk=1)


@pytest.mark.parametrize("selective", VARIANTS)
def test_parallel_form_equals_step_loop_with_state_carried(selective):
    """3 chunks of 300 readings through the parallel form, state carried == 900 steps == one pass."""
    torch.manual_seed(0)
    model = build_model("ssm", make_config("ssm", selective=selective)).eval()
    x = 3 * torch.randn(2, 900, 6)
    with torch.no_grad():
        carry, chunks = None, []
        for c in range(3):
            logits, carry = model.forward_stream(x[:, 300 * c:300 * (c + 1)], carry)
            chunks.append(logits)
        chunks = torch.cat(chunks, 1)
        whole = model.forward_all(x)
        state, steps = None, []
        for t in range(900):
            logits, state = model.step(x[:, t], state)
            steps.append(logits)
        steps = torch.stack(steps, 1)
    assert_close(chunks.numpy(), steps.numpy(), "chunks vs step loop", atol=2e-5)
    assert_close(whole.numpy(), steps.numpy(), "one pass vs step loop", atol=2e-5)
    for a, b in zip(carry, state):
        assert_close(a.numpy(), b.numpy(), "last state", atol=1e-5)
    assert torch.equal(chunks.argmax(-1), steps.argmax(-1))


@pytest.mark.parametrize("selective", VARIANTS)
def test_onnx_runtime_loop_matches_the_parallel_form(basicmotions, tmp_path, selective):
    ckpt = _ckpt(basicmotions, selective)
    path = tmp_path / "ssm.onnx"
    report = export_model(ckpt, path)
    assert report["max_abs_diff"] <= report["tolerance"]
    sess, meta = open_model(path)
    assert [(s.name, s.output, s.shape, s.kind, s.role) for s in meta.state] == \
        [(f"state_in.{i}", f"state_out.{i}", ("batch", 32), "fixed", f"s.{i}") for i in range(2)]
    m = onnx.load(str(path))
    assert m.ir_version <= 9 and all(o.version <= 19 for o in m.opset_import if o.domain in ("", "ai.onnx"))
    assert m.graph.node[0].op_type == "Sub" and m.graph.node[0].input[0] == contract.READING

    model = build_model("ssm", ckpt["config"])
    model.load_state_dict(ckpt["state_dict"])
    model.eval()
    xs = synthetic_readings(meta, 900, batch=2, seed=3)                      # (T, B, F)
    with torch.no_grad():
        x = torch.from_numpy(xs.transpose(1, 0, 2))
        carry, chunks = None, []
        for c in range(3):
            logits, carry = model.forward_stream(x[:, 300 * c:300 * (c + 1)], carry)
            chunks.append(logits)
        parallel = torch.cat(chunks, 1).numpy().transpose(1, 0, 2)           # (T, B, C)
    onnx_out = ort_stream(sess, meta, xs)
    tol = contract.validation_bound(float(np.abs(parallel).max()))
    assert_close(torch_stream(model, xs), parallel, "step loop vs parallel", atol=tol)
    assert_close(onnx_out, parallel, "onnxruntime vs parallel", atol=tol)
    assert np.array_equal(onnx_out.argmax(-1), parallel.argmax(-1))


@pytest.mark.parametrize("selective", VARIANTS)
def test_state_does_not_grow_over_100000_readings_of_noise(selective):
    """Each state is a convex combination of its last value and its input, so loud noise for
    100,000 readings (the parallel form, 10 chunks with the state carried) leaves it no larger
    than the first chunk left it."""
    torch.manual_seed(0)
    model = build_model("ssm", make_config("ssm", selective=selective)).eval()
    g = torch.Generator().manual_seed(1)
    carry, peaks = None, []
    with torch.no_grad():
        for _ in range(10):
            x = 10 * torch.randn(2, 10_000, 6, generator=g)
            logits, carry = model.forward_stream(x, carry)
            assert torch.isfinite(logits).all()
            peaks.append(max(float(s.abs().max()) for s in carry))
    assert all(np.isfinite(peaks)) and max(peaks[5:]) <= 1.5 * max(peaks[:5]), peaks


def test_targets_and_state_budget(exported, basicmotions):
    """BasicMotions seed 0, default settings: per sequence >= 0.95, continuous >= 0.90, and no
    more state per stream than the default GRU (hidden 64, one layer: 256 bytes)."""
    path, _ = exported("ssm")
    ev = evaluate(str(path), basicmotions.test)
    c = ev["continuous"]
    print(f"ssm: per sequence {ev['accuracy']:.3f}, continuous {c['reading_accuracy']:.3f}, "
          f"follow {c['median_readings_to_follow']}")
    assert ev["accuracy"] >= 0.95 and c["reading_accuracy"] >= 0.90 and c["followed"] >= 0.9
    gru = RecurrentConfig()
    s = StreamSession(path, streams=3)
    assert s.backend == ("native" if native.available() else "onnxruntime")
    assert s.state_nbytes() == s.state_nbytes_at(10_000) <= 4 * gru.hidden * gru.layers
    s.push(basicmotions.test.X[:3, 0])
    assert s.state_nbytes() == 256


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_int8_stays_within_its_bound_with_float_state(int8, scheme):
    """Post-training int8, same bounds as every architecture: mean logit error <= MAX_ERROR of
    the float range and at most MAX_ACCURACY_DROP on both protocols; the state, the decay and
    the state update stay float32 (the state leaves each call unrounded)."""
    path, r = int8("ssm", scheme)
    print(f"ssm int8 {scheme}: mean error {r['mean_rel']:.2%}, per sequence {r['float_reading_accuracy']:.3f} -> "
          f"{r['int8_reading_accuracy']:.3f}, continuous {r['float_continuous_accuracy']:.3f} -> "
          f"{r['int8_continuous_accuracy']:.3f}, {r['bytes']} bytes (float {r['float_bytes']})")
    assert r["within_bounds"] and r["mean_rel"] <= MAX_ERROR
    assert r["accuracy_drop"] <= MAX_ACCURACY_DROP and r["continuous_accuracy_drop"] <= MAX_ACCURACY_DROP
    assert r["bytes"] < r["float_bytes"]
    m = onnx.load(str(path))
    made_by = {o: n.op_type for n in m.graph.node for o in n.output}
    assert {made_by[f"state_out.{i}"] for i in range(2)} == {"Add"}          # a * s + x', not a dequantized copy
    decay = [t for t in m.graph.initializer if t.name.endswith("_decay")]
    assert len(decay) == 2 and all(t.data_type == onnx.TensorProto.FLOAT for t in decay)
    assert "state" in r["quantization"]["float_parts"]


def test_bad_settings_are_usage_errors():
    with pytest.raises(UsageError, match=r"^'ssm' setting selective must be true or false, got 1$"):
        make_config("ssm", selective=1)
    with pytest.raises(UsageError, match=r"^'ssm' setting d_state must be a whole number in 1\.\.4096, got 0$"):
        make_config("ssm", d_state=0)
    with pytest.raises(UsageError, match="'ssm' has no setting hidden"):
        make_config("ssm", hidden=8)
    with pytest.raises(UsageError, match=r"^'ssm' setting d_model must be a whole number in 2\.\.4096, got 1$"):
        make_config("ssm", d_model=1)                 # LayerNorm over one channel ignores its input


def test_cli_train_export_eval(trained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    r = runner.invoke(cli, ["train", "--arch", "ssm", "--epochs", "1", "--set", "selective=true",
                            "--set", "d_state=8", "--out", "runs/s", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)                                   # progress goes to stderr
    assert out["arch"] == "ssm" and out["stream_training"] is True
    r = runner.invoke(cli, ["export", "runs/s", "--out", "s.onnx"])
    assert r.exit_code == 0 and r.output.startswith("wrote s.onnx"), r.output
    r = runner.invoke(cli, ["eval", "s.onnx", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["arch"] == "ssm" and res["n"] == 40 and res["continuous"]["orders"] == 3
    r = runner.invoke(cli, ["firmware", "check", "s.onnx", "--target", "nrf52840", "--json"])   # selective: Exp, Softplus
    assert r.exit_code in (0, 1) and json.loads(r.output)["cost"]["other_ops"] > 0, r.output
    r = runner.invoke(cli, ["firmware", "simulate", "s.onnx"])          # float: integer-only needs the int8 export
    assert r.exit_code != 0 and "--int8" in r.output and len(r.output.strip().splitlines()) == 1, r.output

    save_checkpoint(trained("ssm"), "runs/default")
    assert DEFAULTS["ssm"].epochs == trained("ssm")["train_config"]["epochs"]
    r = runner.invoke(cli, ["export", "runs/default", "--int8", "--int8-scheme", "dynamic", "--out", "q.onnx"])
    assert r.exit_code == 0 and r.output.startswith("wrote q.onnx"), r.output
    r = runner.invoke(cli, ["train", "--arch", "ssm", "--set", "selective=yes", "--out", "x"])
    assert r.exit_code == 2
    assert [l for l in r.output.splitlines() if l.startswith("Error:")] == \
        ["Error: 'ssm' setting selective must be true or false, got 'yes' (see 'cli train --help')"]


def test_ssm_beside_the_others_in_compare_and_firmware(exported, int8, tmp_path):
    """compare takes it beside the GRU; firmware check plans its memory and cost from the graph
    (state flat, MACs per reading counted); integer-only simulate and emit run its int8 export
    (tests/test_firmware_ssm.py holds them to the C); the native step runs it
    (tests/test_native_ssm.py)."""
    ssm, q = str(exported("ssm")[0]), str(int8("ssm", "static")[0])
    runner = CliRunner()
    r = runner.invoke(cli, ["compare", str(exported("gru")[0]), ssm, q, "--rounds", "1", "--readings", "50", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["models"]
    assert [m["arch"] for m in rows] == ["gru", "ssm", "ssm"]
    assert rows[1]["backend"] == ("native" if native.available() else "onnxruntime")
    for path in (ssm, q):
        r = runner.invoke(cli, ["firmware", "check", path, "--target", "nrf52840", "--json"])
        assert r.exit_code in (0, 1), r.output
        c = json.loads(r.output)
        assert c["arch"] == "ssm" and c["ram"]["state"] == 256 and c["cost"]["macs"] >= 8000
        assert c["history"] is None
    for cmd in (["firmware", "simulate", q], ["firmware", "emit", q, "--out", str(tmp_path / "c")]):
        r = runner.invoke(cli, cmd)
        assert r.exit_code == 0 and "Error:" not in r.output, r.output
    assert (tmp_path / "c").is_dir() and any((tmp_path / "c").glob("*.c"))
    if native.available():
        assert StreamSession(ssm, backend="native").backend == StreamSession(q, backend="native").backend == "native"


def test_an_ssm_is_selective_by_default_on_single_channel_data_only():
    from edgeseq.data import Split
    from edgeseq.train.loop import data_settings
    one = Split(np.zeros((4, 10, 1), np.float32), np.array([0, 1, 0, 1]), np.full(4, 10))
    six = Split(np.zeros((4, 10, 6), np.float32), np.array([0, 1, 0, 1]), np.full(4, 10))
    assert data_settings("ssm", None, one) == {"selective": True}
    assert data_settings("ssm", {"selective": False}, one) == {"selective": False}   # a given setting wins
    assert data_settings("ssm", {"d_model": 16}, six) == {"d_model": 16}             # several channels: fixed
    assert "selective" not in data_settings("gru", None, one)


def test_train_says_when_the_data_made_the_ssm_selective(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12, 20, 1)).astype(np.float32)
    np.savez("one.npz", X=X[:8], y=np.arange(8) % 2, X_test=X[8:], y_test=np.arange(4) % 2,
             features=np.array(["value"]))
    runner = CliRunner()
    r = runner.invoke(cli, ["train", "--arch", "ssm", "--data", "one.npz", "--out", "run", "--epochs", "1",
                            "--quiet", "--no-baseline", "--set", "d_model=4", "--set", "d_state=4"])
    assert r.exit_code == 0, r.output
    assert "model: selective=true, chosen for this data (--set NAME=VALUE chooses otherwise)" in r.output
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())["metrics"]
    assert metrics["model_from_data"] == {"selective": True}
    r = runner.invoke(cli, ["train", "--arch", "ssm", "--data", "one.npz", "--out", "run2", "--epochs", "1",
                            "--quiet", "--no-baseline", "--set", "d_model=4", "--set", "d_state=4",
                            "--set", "selective=false"])
    assert r.exit_code == 0, r.output
    assert "model:" not in r.output
    assert json.loads((tmp_path / "run2" / "metrics.json").read_text())["metrics"]["model_from_data"] == {}
