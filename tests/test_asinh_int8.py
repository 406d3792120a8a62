"""The integer-only path of a model with an input transform (asinh(reading / scale) before its
normalisation): the reading's int8 input by a table of 255 thresholds per channel
(`firmware_sim.intgraph.asinh_thresholds`) against the rule computed here from the graph's own
constants and against onnxruntime's QuantizeLinear, the emitted C (host, and an emulated
Cortex-M0+) and the native host int8 step bit-exact with the simulator, the metadata checked
against the graph, the refusals, the flash the table takes, and a model without the transform
emitted as before. Tiny seeded models on data whose amplitudes span four decades."""

import json
import shutil

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from edgeseq.data import Normalization, Split
from edgeseq.errors import DataError, ModelFileError
from edgeseq.models import build_model, make_config
from edgeseq.runtime import native
from edgeseq.runtime.model import open_model
from firmware_sim.cemit import emit, flash_bytes
from firmware_sim.intsim import InputFormatError, asinh_thresholds, from_onnx
from helpers import export_step, gcc_strict, host_stream, simulated

FEATURES, LABELS = ["current", "voltage"], ["sine", "square", "mixed"]
LIMIT = (1 << 30) - 1                       # readings are clamped to +-LIMIT in fixed point
F, C = len(FEATURES), len(LABELS)
OVER = {"gru": {"hidden": 8, "layers": 1}, "ssm": {"d_model": 8, "d_state": 4, "layers": 2},
        "transformer": {"d_model": 8, "heads": 2, "layers": 1, "d_ff": 16, "window": 6, "dropout": 0.0}}


def _data(n=36, T=40, seed=0) -> Split:
    """Channel 0 a waveform whose amplitude spans 10^-2 .. 10^2 between sequences (the input
    transform's case), channel 1 readings around 230 (linear: the transform's other channels)."""
    rng = np.random.default_rng(seed)
    t = np.arange(T)
    X = np.zeros((n, T, F), np.float32)
    y = np.arange(n) % C
    decades = rng.permutation(np.linspace(-2, 2, n))
    for i in range(n):
        w = [np.sin(2 * np.pi * t / 20), np.sign(np.sin(2 * np.pi * t / 20)), np.sin(2 * np.pi * t / 10)][y[i]]
        amp = 10 ** decades[i]
        X[i, :, 0] = amp * (w + 0.02 * rng.standard_normal(T))
        X[i, :, 1] = 230 + 3 * rng.standard_normal(T)
    return Split(X, y.astype(np.int64), np.full(n, T, np.int64))


def _probe(n, seed=1) -> np.ndarray:
    """float32 [n, F]: channel 0 of either sign over 10^-3 .. 10^2.5 (log-uniform: every decade
    alike), channel 1 around 230."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, F), np.float32)
    x[:, 0] = rng.choice([-1.0, 1.0], n) * 10 ** rng.uniform(-3, 2.5, n)
    x[:, 1] = 230 + 5 * rng.standard_normal(n)
    return x


def _checkpoint(arch: str, norm: Normalization) -> dict:
    """An untrained, seeded model of `arch` (weights livelier than the default init) normalising
    with `norm`, its input transform included."""
    import edgeseq
    from edgeseq.models import config_dict
    cfg = make_config(arch, n_features=F, n_classes=C, **OVER[arch])
    torch.manual_seed(0)
    model = build_model(arch, cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "log_" not in name:
                p.mul_(2.0)
    model.norm.set(norm.mean, norm.std, norm.asinh_scale)
    return {"edgeseq_version": edgeseq.__version__, "arch": arch, "config": config_dict(cfg),
            "state_dict": model.state_dict(), "normalization": norm.to_json(), "labels": list(LABELS),
            "features": list(FEATURES)}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(arch, transform) -> static int8 model path, transform "auto" (asinh on channel 0) or "none"."""
    root, split, cache = tmp_path_factory.mktemp("asinh"), _data(), {}
    calibration = split.X.transpose(1, 0, 2)                      # [T, N, F]

    def get(arch, transform="auto"):
        if (arch, transform) not in cache:
            norm = Normalization.fit(split, FEATURES, transform)
            assert (norm.asinh_scale is not None) == (transform == "auto"), norm.transform_why
            cache[arch, transform] = export_step(_checkpoint(arch, norm), root / f"{arch}-{transform}.onnx", "static",
                                                 calibration)
        return cache[arch, transform]
    return get


def _graph(path) -> tuple:
    proto = onnx.load(str(path))
    return proto, {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


def _first_input(m):
    """The first product's MatMulQ: the RNN's wx0, the SSM's and Transformer's embedding."""
    return m.cells[0]["x"] if m.kind in ("rnn", "gru", "lstm") else m.enc


def _rule(path, m, x_fx) -> np.ndarray:
    """The int8 input of fixed-point readings x_fx [B, F] as the graph defines it, in float64 from
    the graph's own constants: q = clamp(floor(z / in_scale + 1/2) + zp) (half up at a
    boundary), z = (asinh(x / a) - mean) / std, x = x_fx / 2^in_frac, x_fx clamped to +-(2^30 - 1)."""
    proto, init = _graph(path)
    nodes = list(proto.graph.node)
    div = next(n for n in nodes if n.op_type == "Div" and n.input[0] == "reading")
    ash = next(n for n in nodes if n.op_type == "Asinh" and n.input[0] == div.output[0])
    sub = next(n for n in nodes if n.op_type == "Sub" and n.input[0] == ash.output[0])
    dstd = next(n for n in nodes if n.op_type == "Div" and n.input[0] == sub.output[0])
    a, mean, std = (np.asarray(init[k], np.float64) for k in (div.input[1], sub.input[1], dstd.input[1]))
    first = _first_input(m)
    q = next(n for n in nodes if n.op_type == "QuantizeLinear" and n.input[0] == dstd.output[0])
    scale, zp = float(init[q.input[1]]), int(init[q.input[2]])
    assert (scale, zp) == (first.in_scale, first.in_zp)
    x = np.clip(np.asarray(x_fx, np.float64), -LIMIT, LIMIT) / np.exp2(m.in_frac.astype(np.float64))
    z = (np.arcsinh(x / a) - mean) / std
    return np.clip(np.floor(z / scale + 0.5) + zp, -128, 127).astype(np.int64)


@pytest.mark.parametrize("arch", ["gru", "ssm", "transformer"])
def test_the_int8_input_is_the_threshold_rule(made, arch):
    """Each threshold within the int32 reading's reach is the first fixed-point reading of its
    int8 step (the one below it is in the step before), at least 4 units from the next; those
    beyond saturate at +-2^30; the simulator's int8 input of readings over five decades, and
    of the ends of `input_range`, is the graph's rule computed here."""
    path = made(arch)
    m = from_onnx(path)
    assert m.asinh is not None and m.asinh.thr.shape == (F, 255)
    thr = m.asinh.thr
    inside = np.abs(thr) < 1 << 30
    assert (np.diff(thr, axis=1) >= 0).all() and np.abs(thr).max() <= 1 << 30 and inside.sum(1).min() >= 200
    assert (np.diff(thr, axis=1)[inside[:, 1:] & inside[:, :-1]] >= 4).all()
    k = np.arange(255)
    for f in range(F):
        at, below = np.zeros((255, F), np.int64), np.zeros((255, F), np.int64)
        at[:, f], below[:, f] = thr[f], thr[f] - 1
        ok = inside[f]
        assert np.array_equal(_rule(path, m, at)[ok, f], (k - 127)[ok])
        assert np.array_equal(_rule(path, m, below)[ok, f], (k - 128)[ok])
    xq = m.to_fixed(_probe(4000))
    got = m.quantize_reading(xq)
    assert np.array_equal(got, _rule(path, m, xq))
    assert len(np.unique(got[:, 0])) > 100                      # the decades spread over the int8 steps
    ends = m.to_fixed(np.stack(m.input_range()))
    assert np.array_equal(m.quantize_reading(ends), _rule(path, m, ends))


def test_the_int8_input_is_onnxruntimes_quantizelinear(made):
    """The int8 input onnxruntime computes in float32 (Div, Asinh, Sub, Div, QuantizeLinear,
    half to even) equals the simulator's on at least 99% of readings over five decades, and is
    off by one at most elsewhere."""
    import onnxruntime as ort
    path = made("gru")
    m = from_onnx(path)
    proto, _ = _graph(path)
    dq = next(n for n in proto.graph.node if n.op_type == "DequantizeLinear" and n.input[1] == m.cells[0]["x"].in_name)
    proto.graph.output.append(helper.make_tensor_value_info(dq.input[0], TensorProto.INT8, None))
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    x = _probe(20000, seed=3)
    feeds = {"reading": x, "state_in.0": np.zeros((len(x), m.hidden), np.float32)}
    want = sess.run([dq.input[0]], feeds)[0].astype(np.int64)
    got = m.quantize_reading(m.to_fixed(x))
    assert np.abs(got - want).max() <= 1
    assert (got == want).mean() >= 0.99, (got == want).mean()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc on the host")
@pytest.mark.parametrize("arch", ["gru", "ssm", "transformer"])
def test_emitted_c_is_bit_exact_with_the_simulator(made, arch, tmp_path):
    m = from_onnx(made(arch))
    r = emit(m, tmp_path, prefix="amp")
    code = (tmp_path / "amp_model.c").read_text()
    assert f"static const int32_t amp_thr[{F}][255]" in code and "es_k_thresh8(amp_thr[f], es_k_clamp(" in code
    assert "amp_feat_m" not in code and "amp_mean" not in code
    assert r["reading_table_bytes"] == 4 * 255 * F == flash_bytes(m)["reading_table"]
    tables = ["es_tables.c"] + (["es_ssm_tables.c"] if arch != "gru" else []) + (
        ["es_xf_tables.c"] if arch == "transformer" else [])
    gcc_strict(tmp_path / "stream", [tmp_path / f for f in ("amp_example.c", "amp_model.c", *tables)])
    xq = m.to_fixed(_probe(1500, seed=4))
    assert np.array_equal(host_stream(tmp_path / "stream", xq), simulated(m, xq))


def test_emitted_c_is_bit_exact_on_an_emulated_cortex_m0plus(made, tmp_path):
    """The compiled GRU step over 300 readings of its data on an emulated Cortex-M0+ (measure
    raises on any logit that differs from the simulator); the table is in its .rodata."""
    from helpers import skip_without_emulator
    skip_without_emulator()
    from firmware_sim.measure import measure
    path = made("gru")
    split = _data(12, 40, seed=5)
    data = tmp_path / "amp.npz"
    np.savez(data, X=split.X, y=split.y, labels=np.array(LABELS), features=np.array(FEATURES))
    r = measure(path, "cortex-m0plus", "-O2", readings=300, counted=4, data=str(data))
    assert r["bit_exact_readings"] == 300 and r["helper_instructions_per_step"] == {}
    assert r["sections"]["rodata"] >= 4 * 255 * F


@pytest.mark.skipif(not native.available(), reason=native.why_unavailable() or "native step not built")
def test_the_native_int8_step_is_bit_exact_with_the_simulator(made):
    """Every native int8 kernel (VNNI where the CPU has it, exact float products, the firmware's
    es_k_matvec) gives the simulator's Q12 logits, 5 streams over 400 readings."""
    path = made("gru")
    _, meta = open_model(path)
    assert native.supports(meta, path) is None
    m = from_onnx(path)
    S = 5
    steps = [native.NativeStep(path, meta, S), native.NativeStep(path, meta, S, vnni=False),
             native.NativeStep(path, meta, S, reference=True)]
    X = _probe(400 * S, seed=6).reshape(400, S, F)
    state = m.init_state(S)
    for t, x in enumerate(X):
        want, state = m.step(m.to_fixed(x), state)
        for step in steps:
            step.x[:] = x
            assert step.run() == -1
            assert np.array_equal(step.logits_q12, want), f"reading {t} ({step.kernel})"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc on the host")
def test_a_model_without_the_transform_is_emitted_as_before(made, tmp_path):
    m = from_onnx(made("gru", "none"))
    assert m.asinh is None
    r = emit(m, tmp_path, prefix="lin")
    code = (tmp_path / "lin_model.c").read_text()
    assert "_thr" not in code and "es_k_thresh8" not in code and "reading_table_bytes" not in r
    assert "es_k_requant(d, lin_feat_m[f], lin_feat_s[f])" in code
    assert "reading_table" not in flash_bytes(m)
    gcc_strict(tmp_path / "stream", [tmp_path / f for f in ("lin_example.c", "lin_model.c", "es_tables.c")])
    xq = m.to_fixed(np.stack([np.full(300, 1.0), np.linspace(200, 260, 300)], 1))
    assert np.array_equal(host_stream(tmp_path / "stream", xq), simulated(m, xq))


def _with_norm(path, out, change):
    proto = onnx.load(str(path))
    for p in proto.metadata_props:
        if p.key == "edgeseq.normalization":
            norm = json.loads(p.value)
            change(norm)
            p.value = json.dumps(norm)
    onnx.save(proto, str(out))
    return out


def test_the_metadata_asinh_scale_must_be_the_graphs(made, tmp_path):
    path = made("gru")

    def off(norm):
        norm["asinh_scale"] = [v * 1.01 for v in norm["asinh_scale"]]
    with pytest.raises(ModelFileError, match="asinh_scale is not what the graph divides the reading by"):
        from_onnx(_with_norm(path, tmp_path / "off.onnx", off))
    with pytest.raises(ModelFileError, match="has no asinh_scale but the graph transforms its reading"):
        from_onnx(_with_norm(path, tmp_path / "gone.onnx",
                             lambda norm: [norm.pop("asinh_scale"), norm.pop("asinh_reach", None)]))
    with pytest.raises(ModelFileError, match="has an asinh_scale but the graph does not transform"):
        from_onnx(_with_norm(made("gru", "none"), tmp_path / "extra.onnx",
                             lambda norm: norm.update(asinh_scale=[1.0] * F)))


def test_a_range_an_int32_reading_cannot_resolve_is_refused_in_one_line():
    scale, mean, in_scale = np.array([1e-3, 1.0]), np.zeros(2), 0.05
    frac, thr = asinh_thresholds(FEATURES, scale, mean, np.array([2.0, 1.0]), in_scale, 0)
    assert thr.shape == (2, 255) and (np.diff(thr, axis=1) >= 4).all() and np.abs(thr).max() <= 1 << 29
    with pytest.raises(InputFormatError) as e:                  # sinh(10 x 0.05 x 127) ~ 1e27 vs steps of 5e-4
        asinh_thresholds(FEATURES, scale, mean, np.array([10.0, 1.0]), in_scale, 0)
    assert "channel 'current'" in str(e.value) and "\n" not in str(e.value) and "input_transform=none" in str(e.value)
    with pytest.raises(InputFormatError, match="channel 'voltage'.*cannot hold both"):
        asinh_thresholds(FEATURES, scale, mean, np.array([1.0, 200.0]), in_scale, 0)


def test_an_anomaly_model_with_the_transform_is_refused():
    from types import SimpleNamespace

    from firmware_sim.intanomaly import model_params
    m = SimpleNamespace(asinh=None, in_frac=np.zeros(F, np.int64),
                        meta={"task": {"kind": "anomaly"},
                              "normalization": {"mean": [0.0] * F, "std": [1.0] * F, "asinh_scale": [1.0] * F}})
    with pytest.raises(DataError, match="input_transform=none") as e:
        model_params(m)
    assert "\n" not in str(e.value)


def test_firmware_check_counts_the_table(made):
    from firmware_sim.plan import check_model
    from firmware_sim.targets import get_target
    target = get_target("nrf52840")
    with_t, without = (check_model(made("gru", t), target)["flash"] for t in ("auto", "none"))
    assert with_t["reading_table"] == 4 * 255 * F and "reading_table" not in without
    assert with_t["scales_biases"] == without["scales_biases"] - 12 * F
    assert with_t["total"] - without["total"] == 4 * 255 * F - 12 * F
