"""The input transform asinh(reading / scale): when training turns it on (`asinh_scales`), the
normalisation fitted after it, jitter drawn where the model reads, and parity on readings that
span six decades: torch full sequence == torch step loop == onnxruntime loop == native step (the
RNN, GRU, LSTM, SSM on both its row and lane paths, and the Transformer), with the graph's
first nodes Div -> Asinh -> Sub -> Div and the metadata's scale."""

import numpy as np
import onnx
import pytest
import torch

from edgeseq import contract
from edgeseq.data import ASINH_RANGE, Normalization, Split, asinh_forward, asinh_scales, load_dataset
from edgeseq.data.augment import jitter
from edgeseq.errors import UsageError
from edgeseq.models import build_model, make_config
from edgeseq.runtime import native
from edgeseq.runtime.model import open_model
from edgeseq.runtime.native.probing import probe_readings
from helpers import assert_close, export_step, ort_loop

F, C = 2, 3


def wide_split(n=60, T=40, seed=0, decades=4.0) -> Split:
    """Sequences of two channels: channel 0's amplitude drawn log-uniform over `decades`, signed
    waves (an appliance current); channel 1 a unit-scale signal around 5."""
    rng = np.random.default_rng(seed)
    t = np.arange(T)
    X = np.zeros((n, T, F), np.float32)
    for i in range(n):
        amp = 10 ** rng.uniform(-decades / 2, decades / 2)
        X[i, :, 0] = amp * np.sin(2 * np.pi * t / 10 + i)
        X[i, :, 1] = 5 + rng.standard_normal(T)
    return Split(X, np.arange(n) % C, np.full(n, T, np.int64))


def wide_readings(T, B, seed=1) -> np.ndarray:
    """float32 [T, B, F]: channel 0 from 1e-3 to 1e3 in size, either sign (a different amplitude
    per stream, a few readings 100x out), channel 1 around 5."""
    rng = np.random.default_rng(seed)
    amp = 10 ** rng.uniform(-3, 3, (1, B))
    x = np.zeros((T, B, F), np.float32)
    x[..., 0] = amp * np.sin(np.arange(T)[:, None] / 3.0 + np.arange(B)) * (1 + 99 * (rng.random((T, B)) < 0.02))
    x[..., 1] = 5 + rng.standard_normal((T, B))
    return x


# -- when it is on, and what it fits -----------------------------------------------------------

def test_auto_turns_on_only_for_a_channel_whose_amplitudes_span_decades():
    scale, why = asinh_scales(wide_split(), "auto")
    amp = np.quantile(np.abs(wide_split().X[:, :, 0]), 0.95, axis=1)
    assert scale is not None and why.startswith("asinh on channel 0") and why.endswith("linear: channel 1 [auto]")
    assert scale[0] == pytest.approx(np.median(amp) * 0.01, rel=1e-6)
    assert scale[1] >= 0.999e4 * np.abs(wide_split().X[:, :, 1]).max()      # linear to float32 precision
    x = np.linspace(-10, 10, 101, dtype=np.float32)
    assert np.abs(np.arcsinh(x / np.float32(scale[1])) * scale[1] - x).max() < 1e-5
    narrow, why = asinh_scales(wide_split(decades=2.0), "auto")            # two decades: left as it is
    assert narrow is None and f"{ASINH_RANGE:g}x" in why
    for name in ("basicmotions", "japanesevowels"):
        assert asinh_scales(load_dataset(name).train, "auto")[0] is None, name
    assert asinh_scales(wide_split(), "none")[0] is None
    on, _ = asinh_scales(wide_split(decades=0.5), "asinh")
    assert on is not None and (on > 0).all() and on[1] < 1.0                 # set: every channel, at its knee
    with pytest.raises(UsageError, match="input_transform must be one of auto, asinh, gain, none"):
        asinh_scales(wide_split(), "log")


def test_a_channel_zero_in_most_sequences_is_judged_on_the_rest():
    split = wide_split(decades=6.0)
    split.X[:42, :, 0] = 0.0                                   # 70% of the sequences: the load is off
    scale, why = asinh_scales(split, "auto", ["current", "temp"])
    amp = np.quantile(np.abs(split.X[42:, :, 0]), 0.95, axis=1)
    assert scale is not None and why.startswith("asinh on current")
    assert scale[0] == pytest.approx(np.median(amp) * 0.01, rel=1e-6)
    split.X[:, :, 0] = 0.0                                      # never on: nothing to transform
    assert asinh_scales(split, "auto")[0] is None
    scale, why = asinh_scales(split, "asinh", ["current", "temp"])
    assert scale[0] == 1e4 and "linear: current" in why


@pytest.mark.parametrize("unit", [1e-36, 1e34])
def test_a_linear_channel_in_extreme_units_stays_linear_and_finite(unit):
    split = wide_split()
    split.X[:, :, 1] *= unit
    norm = Normalization.fit(split, transform="auto")
    assert np.isfinite(norm.asinh_scale).all() and (norm.asinh_scale > 0).all()
    assert not norm.constant[1]                                 # the channel is read, not ignored
    t = np.arcsinh(split.X[:, :, 1].astype(np.float64) / float(norm.asinh_scale[1]))
    assert np.corrcoef(t.ravel(), split.X[:, :, 1].ravel().astype(np.float64))[0, 1] > 0.9999


def test_normalisation_is_fitted_after_the_transform_and_round_trips():
    split = wide_split()
    norm = Normalization.fit(split, transform="auto")
    t = asinh_forward(split.X.reshape(-1, F), norm.asinh_scale).astype(np.float64)
    assert_close(norm.mean, t.mean(0).astype(np.float32), "mean", atol=1e-5)
    assert_close(norm.std, t.std(0).astype(np.float32), "std", atol=1e-5)
    back = Normalization.from_json(norm.to_json())
    assert np.array_equal(back.asinh_scale, norm.asinh_scale)
    assert np.array_equal(back.asinh_reach, np.abs(split.X).max((0, 1)).astype(np.float32))
    plain = Normalization.fit(split)                                        # the default: no transform
    assert plain.asinh_scale is None and "asinh_scale" not in plain.to_json()
    z = np.random.default_rng(0).standard_normal((50, F))
    raw = contract.raw_readings(norm.to_json(), z)                         # the inverse, as probes use it
    assert_close(norm.apply(raw), z.astype(np.float32), "raw_readings inverse", atol=1e-4)


def test_jitter_near_the_float32_limit_stays_finite():
    X = np.full((1, 500, 1), 3e38, np.float32)
    X[0, ::2, 0] *= -1
    out = jitter(X, np.array([500]), 0.05, np.random.default_rng(0), std=np.array([0.5]),
                 asinh_scale=np.array([1.0]))
    assert np.isfinite(out).all() and not np.array_equal(out, X)


def test_jitter_is_drawn_where_the_model_reads():
    X = np.zeros((1, 2000, 1), np.float32)
    X[0, :1000, 0], X[0, 1000:, 0] = 1e-3, 1e3
    out = jitter(X, np.array([2000]), 0.1, np.random.default_rng(0), std=np.array([2.0]),
                 asinh_scale=np.array([1e-2]))
    small, big = (out - X)[0, :1000, 0].std(), (out - X)[0, 1000:, 0].std()
    assert small == pytest.approx(0.2 * np.hypot(1e-3, 1e-2), rel=0.1)
    assert big == pytest.approx(0.2 * 1e3, rel=0.1)


# -- one model, every path ---------------------------------------------------------------------

def transformed_checkpoint(arch: str) -> dict:
    """An untrained, seeded model whose checkpoint carries the input transform fitted on
    `wide_split` (as training writes it)."""
    import edgeseq
    from edgeseq.models import config_dict
    over = {"hidden": 8, "layers": 2} if arch in ("rnn", "gru", "lstm") else {}
    if arch == "transformer":
        over = {"d_model": 8, "heads": 2, "layers": 1, "d_ff": 8, "window": 6}
    if arch == "ssm":
        over = {"d_model": 8, "d_state": 4, "layers": 2, "selective": True}
    cfg = make_config(arch, n_features=F, n_classes=C, **over)
    torch.manual_seed(0)
    model = build_model(arch, cfg)
    norm = Normalization.fit(wide_split(), transform="auto")
    model.norm.set(norm.mean, norm.std, norm.asinh_scale)
    return {"edgeseq_version": edgeseq.__version__, "arch": arch, "config": config_dict(cfg),
            "state_dict": model.state_dict(), "normalization": norm.to_json(),
            "labels": [f"c{i}" for i in range(C)], "features": ["current", "temp"]}


ARCHS = ["rnn", "gru", "lstm", "ssm", "transformer"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root, cache = tmp_path_factory.mktemp("asinh"), {}

    def get(arch, scheme="float"):
        if (arch, scheme) not in cache:
            cache[arch, scheme] = export_step(transformed_checkpoint(arch), root / f"{arch}-{scheme}.onnx", scheme,
                                              wide_readings(60, 4, seed=3), {"outputs": True} if arch == "ssm" else {})
        return cache[arch, scheme]
    return get


@pytest.mark.parametrize("arch", ARCHS)
def test_the_graph_starts_with_the_transform_and_the_metadata_names_it(models, arch):
    proto = onnx.load(str(models(arch)))
    ops = [n.op_type for n in proto.graph.node]
    first = next(n for n in proto.graph.node if contract.READING in n.input)
    assert first.op_type == "Div" and "Asinh" in ops
    _, meta = open_model(models(arch))
    assert meta.normalization["asinh_scale"] == pytest.approx(transformed_checkpoint(arch)["normalization"]["asinh_scale"])


@pytest.mark.parametrize("arch", ARCHS)
def test_torch_sequence_step_loop_and_onnxruntime_agree_across_decades(models, arch):
    from edgeseq.train.checkpoint import model_from_checkpoint
    model = model_from_checkpoint(transformed_checkpoint(arch))
    X = wide_readings(30, 3)
    with torch.no_grad():
        full = model.forward_all(torch.from_numpy(X.transpose(1, 0, 2))).numpy().transpose(1, 0, 2)
        state, steps = None, []
        for x in X:
            logits, state = model.step(torch.from_numpy(x), state)
            steps.append(logits.numpy())
    ref, _, _ = ort_loop(models(arch), X) if arch != "transformer" else (None, None, None)
    scale = max(1.0, float(np.abs(full).max()))
    assert_close(np.stack(steps), full, f"{arch} step loop", atol=1e-5 * scale)
    if ref is not None:
        assert_close(ref, full, f"{arch} onnxruntime", atol=1e-5 * scale)
    plain = build_model(arch, model.config).eval()                         # the same weights, no transform:
    plain.load_state_dict(model.state_dict())                              # another answer on these readings
    plain.norm.set(model.norm.mean, model.norm.std)
    with torch.no_grad():
        other = plain.forward_all(torch.from_numpy(X.transpose(1, 0, 2))).numpy().transpose(1, 0, 2)
    assert np.abs(other - full).max() > 1e-2 * scale


needs_ext = pytest.mark.skipif(not native.available(), reason=native.why_unavailable() or "native step not built")


@needs_ext
@pytest.mark.parametrize("streams", [3, 19])                              # the SSM's lanes from 8 streams on
@pytest.mark.parametrize("arch", ARCHS)
def test_the_native_step_computes_the_transform_as_onnxruntime(models, arch, streams):
    from edgeseq.runtime import StreamSession
    X = wide_readings(40, streams)
    a = StreamSession(models(arch), streams=streams, backend="onnxruntime")
    b = StreamSession(models(arch), streams=streams, backend="native")
    pa = np.stack([a.push(x) for x in X])
    pb = np.stack([b.push(x) for x in X])
    assert_close(pb, pa, f"{arch} probs", atol=2e-5)


@needs_ext
@pytest.mark.parametrize("arch", ["rnn", "ssm", "transformer"])
def test_the_native_float_step_reads_the_scale_from_the_graph(models, arch, tmp_path):
    """A file whose graph and metadata give another scale (edited alike) answers with it on
    both backends; one edited in the graph alone, or with a transform the graph lacks in its
    metadata, is refused when opened, in one line."""
    import json
    from edgeseq.errors import ModelFileError
    from edgeseq.runtime import StreamSession
    from helpers import edited
    src = models(arch)

    def halve(proto, meta_too=True):
        div = next(n for n in proto.graph.node if n.op_type == "Div" and n.input[0] == contract.READING)
        init = next(i for i in proto.graph.initializer if i.name == div.input[1])
        a = onnx.numpy_helper.to_array(init) * 0.5
        init.CopyFrom(onnx.numpy_helper.from_array(a.astype(np.float32), init.name))
        for p in proto.metadata_props if meta_too else ():
            if p.key == contract.META_NORM:
                norm = json.loads(p.value)
                norm["asinh_scale"] = a.astype(np.float32).tolist()
                p.value = json.dumps(norm)
    X = wide_readings(20, 2)
    path = edited(src, tmp_path / "half.onnx", halve)
    a, b = (StreamSession(path, streams=2, backend=k) for k in ("onnxruntime", "native"))
    pa, pb = np.stack([a.push(x) for x in X]), np.stack([b.push(x) for x in X])
    assert_close(pb, pa, f"{arch} edited scale", atol=2e-5)
    orig = StreamSession(src, streams=2, backend="onnxruntime")
    assert np.abs(np.stack([orig.push(x) for x in X]) - pa).max() > 1e-4
    with pytest.raises(ModelFileError, match="asinh_scale is not what the graph divides the reading by"):
        StreamSession(edited(src, tmp_path / "graph.onnx", lambda p: halve(p, False)))

    def claim(proto):
        for p in proto.metadata_props:
            if p.key == contract.META_NORM:
                p.value = json.dumps({**json.loads(p.value), "asinh_scale": [1.0] * F})
    with pytest.raises(ModelFileError, match="has an asinh_scale but the graph does not transform its reading"):
        StreamSession(edited(models_plain(arch, tmp_path), tmp_path / "claim.onnx", claim))


def models_plain(arch, root):
    """The same model without the transform, exported to `root`."""
    ck = transformed_checkpoint(arch)
    ck["normalization"] = {k: v for k, v in ck["normalization"].items() if not k.startswith("asinh")}
    return export_step(ck, root / f"{arch}-plain.onnx")


@needs_ext
@pytest.mark.parametrize("arch", ["ssm", "transformer"])
def test_static_int8_with_the_transform_runs_natively(models, arch):
    from edgeseq.runtime import StreamSession
    path = models(arch, "static")
    _, meta = open_model(path)
    assert native.supports(meta, path) is None
    s = StreamSession(path, streams=4, backend="native")            # the probe against the graph passed
    assert np.isfinite(np.stack([s.push(x) for x in wide_readings(20, 4)])).all()


def test_probes_and_validation_stream_readings_in_the_raw_domain(models):
    _, meta = open_model(models("gru"))
    X = probe_readings(meta, 4, 200)
    assert np.abs(X[..., 0]).max() > 100 * np.median(np.abs(X[..., 0]))    # decades apart, as trained
    norm = Normalization.from_json(meta.normalization)
    z = norm.apply(X)
    assert np.abs(z).max() < 10 and abs(float(z.std()) - 1.5) < 0.3


def test_a_reading_of_any_finite_size_is_taken(models):
    from edgeseq.runtime import StreamSession
    s = StreamSession(models("gru"), streams=1, backend="onnxruntime")
    big = np.array([[3e30 * float(np.float32(s.meta.normalization["asinh_scale"][0])) / 1e30, 5.0]], np.float32)
    assert np.isfinite(s.push(big)).all()
    with pytest.raises(Exception, match="reading"):
        s.push(np.array([[np.inf, 5.0]], np.float32))
