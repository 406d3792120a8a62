"""The gain stage (`input_transform=gain`, and `auto` on channels whose amplitudes span decades):
each reading over its channel's running level plus the log level, with a state of its own.
Checked against a reading-by-reading loop; torch full sequence == torch step loop == torch
chunks with the state carried == onnxruntime loop == StreamSession; the state is reset by a
fresh stream and survives a bad reading; the metadata and checkpoint keep it consistent."""

import math

import numpy as np
import pytest
import torch

from edgeseq import contract
from edgeseq.data import (GAIN_RELEASE, Normalization, Split, asinh_scales, gain_features, gain_floors,
                          gain_levels)
from edgeseq.data.augment import jitter
from edgeseq.errors import ModelFileError, ReadingError, UsageError
from edgeseq.models import build_model, config_dict, make_config
from helpers import assert_close, export_step, ort_loop

F, C = 2, 3


def wide_split(n=60, T=40, seed=0) -> Split:
    """Channel 0: a signed wave whose amplitude is drawn log-uniform over four decades; channel 1
    a unit-scale signal around 5."""
    rng = np.random.default_rng(seed)
    t = np.arange(T)
    X = np.zeros((n, T, F), np.float32)
    for i in range(n):
        X[i, :, 0] = 10 ** rng.uniform(-2, 2) * np.sin(2 * np.pi * t / 10 + i)
        X[i, :, 1] = 5 + rng.standard_normal(T)
    return Split(X, np.arange(n) % C, np.full(n, T, np.int64))


def wide_readings(T, B, seed=1) -> np.ndarray:
    """float32 [T, B, F]: channel 0 from 1e-3 to 1e3 in size, either sign, a loud burst halfway."""
    rng = np.random.default_rng(seed)
    amp = 10 ** rng.uniform(-3, 3, (1, B))
    x = np.zeros((T, B, F), np.float32)
    x[..., 0] = amp * np.sin(np.arange(T)[:, None] / 3.0 + np.arange(B))
    x[T // 2:T // 2 + 3, :, 0] *= 1000
    x[..., 1] = 5 + rng.standard_normal((T, B))
    return x


def _loop(x, floor, release, u=None):
    """One channel's levels, one reading at a time, in Python floats."""
    out = []
    for v in x:
        lx = math.log(max(abs(float(v)), floor) / floor)
        u = lx if u is None else max(lx, u - release)
        out.append(u)
    return np.array(out)


def test_levels_equal_a_reading_by_reading_loop_and_continue_across_chunks():
    x = wide_readings(50, 3)[:, :, 0].T                     # (B, T)
    floor = np.array([1e-4])
    got = gain_levels(x[..., None], floor, 0.1)[..., 0]
    for b in range(3):
        np.testing.assert_allclose(got[b], _loop(x[b], 1e-4, 0.1, 0.0), rtol=1e-12, atol=1e-9)
    head = gain_levels(x[:, :20, None], floor, 0.1)
    tail = gain_levels(x[:, 20:, None], floor, 0.1, u0=head[:, -1])
    np.testing.assert_allclose(np.concatenate([head, tail], 1), got[..., None], atol=1e-9)
    assert (got >= 0).all()
    feats = gain_features(x[..., None], floor)              # (B, T, 2): the reading over its level, the log level
    assert feats.shape == (3, 50, 2) and np.abs(feats[..., 0]).max() <= 1 + 1e-12
    off = gain_features(np.stack([x, x], -1), np.array([1e-4, 0.0]))
    assert off.shape == (3, 50, 3) and np.array_equal(off[..., 1], x)   # a channel left as it is


def test_auto_chooses_the_gain_stage_for_wide_channels_only_where_the_model_carries_it():
    split = wide_split()
    floor, why = gain_floors(split, "auto", ["current", "temp"])
    assert floor[0] > 0 and floor[1] == 0 and why.startswith("gain on current") and "linear: temp" in why
    norm = Normalization.fit(split, ["current", "temp"], "auto", gain=True)
    assert norm.levels == 1 and norm.asinh_scale is None and norm.mean.shape == (3,)
    assert np.abs(norm.apply(split.X)).mean() < 2                 # standardised features
    other = Normalization.fit(split, ["current", "temp"], "auto")  # a model without the stage: asinh
    assert other.gain_floor is None and other.asinh_scale is not None
    assert gain_floors(Split(split.X[:, :, 1:], split.y, split.lengths), "auto")[0] is None
    with pytest.raises(UsageError, match="gain runs on rnn, gru, lstm, ssm"):
        Normalization.fit(split, transform="gain")
    back = Normalization.from_json(norm.to_json())
    assert np.array_equal(back.gain_floor, norm.gain_floor) and back.gain_release == GAIN_RELEASE
    assert asinh_scales(split, "auto")[0] is not None


def test_jitter_is_in_units_of_the_running_level():
    X = np.zeros((1, 2000, 1), np.float32)
    X[0, :1000, 0], X[0, 1000:, 0] = 1e-3, 1e3
    out = jitter(X, np.array([2000]), 0.1, np.random.default_rng(0), std=np.array([0.5, 3.0]),
                 gain_floor=np.array([1e-6]))
    small, big = (out - X)[0, 100:1000, 0].std(), (out - X)[0, 1100:, 0].std()
    assert small == pytest.approx(0.05 * 1e-3, rel=0.1) and big == pytest.approx(0.05 * 1e3, rel=0.1)


def gained_checkpoint(arch: str) -> dict:
    """An untrained, seeded model with the gain stage fitted on `wide_split`, as training writes it."""
    import edgeseq
    over = {"hidden": 8, "layers": 2} if arch in ("rnn", "gru", "lstm") else {}
    if arch == "ssm":
        over = {"d_model": 8, "d_state": 4, "layers": 2, "selective": True}
    norm = Normalization.fit(wide_split(), ["current", "temp"], "auto", gain=True)
    cfg = make_config(arch, n_features=F, n_classes=C, levels=norm.levels, **over)
    torch.manual_seed(0)
    model = build_model(arch, cfg)
    model.norm.set(norm.mean, norm.std, None, norm.gain_floor, norm.gain_release)
    return {"edgeseq_version": edgeseq.__version__, "arch": arch, "config": config_dict(cfg),
            "state_dict": model.state_dict(), "normalization": norm.to_json(),
            "labels": [f"c{i}" for i in range(C)], "features": ["current", "temp"]}


ARCHS = ["rnn", "gru", "lstm", "ssm"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root, cache = tmp_path_factory.mktemp("gain"), {}

    def get(arch):
        if arch not in cache:
            cache[arch] = export_step(gained_checkpoint(arch), root / f"{arch}.onnx")
        return cache[arch]
    return get


@pytest.mark.parametrize("arch", ARCHS)
def test_torch_sequence_chunks_step_loop_and_onnxruntime_agree(models, arch):
    from edgeseq.train.checkpoint import model_from_checkpoint
    model = model_from_checkpoint(gained_checkpoint(arch))
    X = wide_readings(40, 3)
    xs = torch.from_numpy(X.transpose(1, 0, 2))
    with torch.no_grad():
        full = model.forward_all(xs).numpy().transpose(1, 0, 2)
        state, steps = None, []
        for x in X:
            logits, state = model.step(torch.from_numpy(x), state)
            steps.append(logits.numpy())
        model.drop.eval()
        a, carry = model.forward_stream(xs[:, :17])
        b, _ = model.forward_stream(xs[:, 17:], carry)
        chunks = torch.cat([a, b], 1).numpy().transpose(1, 0, 2)
        c, _ = model.forward_stream(xs[:, 17:], carry, torch.tensor([True, False, True]))
        fresh = model.forward_all(xs[:, 17:]).numpy()
    scale = max(1.0, float(np.abs(full).max()))
    assert_close(np.stack(steps), full, f"{arch} step loop", atol=2e-5 * scale)
    assert_close(chunks, full, f"{arch} chunks", atol=2e-5 * scale)
    assert_close(c.numpy()[[0, 2]], fresh[[0, 2]], f"{arch} fresh rows", atol=2e-5 * scale)
    assert np.abs(c.numpy()[1] - fresh[1]).max() > 1e-3 * scale        # the carried row kept its level
    ref, _, last = ort_loop(models(arch), X)
    assert_close(ref, full, f"{arch} onnxruntime", atol=2e-5 * scale)
    assert np.allclose(last[-1], state[-1].numpy(), atol=1e-4)        # the gain state, last of the state


@pytest.mark.parametrize("arch", ["gru", "ssm"])
def test_stream_session_runs_it_on_onnxruntime_and_a_bad_reading_changes_nothing(models, arch):
    from edgeseq.runtime import StreamSession
    path = models(arch)
    X = wide_readings(30, 1)[:, 0]
    sess = StreamSession(path)
    assert sess.backend == "onnxruntime" and "gain stage" in (sess.backend_note or "")
    want, _, _ = ort_loop(path, X[:, None])
    for t, x in enumerate(X):
        if t == 12:
            before = sess.snapshot()["state"]
            with pytest.raises(ReadingError):
                sess.push(np.array([np.nan, 1.0], np.float32))
            assert all(np.array_equal(a, b) for a, b in zip(before, sess.snapshot()["state"]))
            assert before[-1].any()                                      # the gain state holds a level
        logits = sess.push_logits(x)
        assert_close(np.asarray(logits).reshape(-1), want[t, 0], f"{arch} session reading {t}", atol=1e-4)
    with pytest.raises(UsageError, match="gain stage"):
        StreamSession(path, backend="native")


def test_the_metadata_and_checkpoint_keep_the_stage_consistent(models, tmp_path):
    from edgeseq.runtime.model import open_model
    from edgeseq.train.checkpoint import check_checkpoint
    _, meta = open_model(models("gru"))
    assert meta.state[-1].role == contract.GAIN_ROLE and meta.state[-1].shape[-1] == F
    assert meta.normalization["gain_floor"][1] == 0 and len(meta.normalization["mean"]) == F + 1
    norm = meta.normalization
    with pytest.raises(contract.MetadataError, match="one input transform"):
        contract._normalization({**norm, "asinh_scale": [1.0, 1.0]})
    with pytest.raises(contract.MetadataError, match="gain_floor"):
        contract._normalization({**norm, "gain_floor": [0.0, 0.0]})
    with pytest.raises(contract.MetadataError, match="gain_release"):
        contract._normalization({**norm, "gain_release": -1})
    ck = gained_checkpoint("gru")
    check_checkpoint(ck, "ck.pt")
    for bad in ({**ck["normalization"], "gain_floor": [1e-3, 1e-3]},             # 2 gained, 1 level
                {k: v for k, v in ck["normalization"].items() if k != "gain_floor"},
                {**ck["normalization"], "mean": ck["normalization"]["mean"][:F]}):
        with pytest.raises(ModelFileError):
            check_checkpoint({**ck, "normalization": bad}, "ck.pt")


def test_the_transformer_and_window_models_refuse_it_with_what_to_do():
    from edgeseq.data import GAIN_ARCHS
    assert "transformer" not in GAIN_ARCHS and "bigru" not in GAIN_ARCHS
    with pytest.raises(UsageError, match="input_transform=asinh"):
        Normalization.fit(wide_split(), transform="gain", gain=False)


def test_static_int8_keeps_the_stage_float_and_stays_near_its_float_twin(models, tmp_path):
    """The quantizer touches MatMul/Gemm only: the stage's nodes stay float32. Bound: mean
    |int8 - float| logit within 5% of the float logits' range on readings across six decades."""
    import onnx
    path = export_step(gained_checkpoint("gru"), tmp_path / "gru-static.onnx", "static", wide_readings(60, 4, seed=3))
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert {"Abs", "Log", "Exp", "QuantizeLinear"} <= ops
    X = wide_readings(40, 3, seed=5)
    want, _, _ = ort_loop(models("gru"), X)
    got, _, _ = ort_loop(path, X)
    assert np.abs(got - want).mean() <= 0.05 * (want.max() - want.min())


@pytest.mark.parametrize("command", [["firmware", "check", "{f}", "--target", "nrf52840"],
                                     ["firmware", "check", "{i}", "--target", "nrf52840"],
                                     ["firmware", "simulate", "{i}"],
                                     ["firmware", "emit", "{i}", "--out", "fw"]])
def test_the_firmware_commands_refuse_it_in_one_line(models, runner, tmp_path, command):
    from edgeseq.cli import cli
    from helpers import one_error_line
    int8 = export_step(gained_checkpoint("gru"), tmp_path / "gru-int8.onnx", "static", wide_readings(30, 2, seed=3))
    args = [a.format(f=models("gru"), i=int8) for a in command]
    line = one_error_line(runner.invoke(cli, args))
    assert "gain stage" in line and "input_transform=asinh" in line
    assert not (tmp_path / "fw").exists()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A GRU trained (briefly) by `train` on data whose one wide channel `auto` gains."""
    from edgeseq.data import Dataset
    from edgeseq.train import TrainConfig, train
    split, test = wide_split(30, 30, seed=0), wide_split(12, 30, seed=1)
    ds = Dataset("wide", split, test, [f"c{i}" for i in range(C)], ["current", "temp"])
    return train("gru", ds, TrainConfig(epochs=2), {"hidden": 8}, progress=False), ds


def test_training_writes_the_stage_and_its_exports_validate(trained, tmp_path):
    from edgeseq.runtime import StreamSession
    from edgeseq.train.checkpoint import check_checkpoint, load_checkpoint, save_checkpoint
    from export.quantize import export_int8
    from export.step import export_model
    ckpt, ds = trained
    assert ckpt["config"]["levels"] == 1 and ckpt["normalization"]["gain_floor"][1] == 0
    assert ckpt["metrics"]["input_transform"].startswith("gain on current")
    check_checkpoint(ckpt, "ck.pt")
    back = load_checkpoint(save_checkpoint(ckpt, tmp_path / "run"))
    assert back["normalization"] == ckpt["normalization"]
    export_model(back, tmp_path / "gru.onnx")                    # validated against the torch step loop
    export_int8(back, tmp_path / "gru-int8.onnx", data=ds)
    for name in ("gru.onnx", "gru-int8.onnx"):
        sess = StreamSession(tmp_path / name, streams=2)
        assert sess.backend == "onnxruntime" and sess.meta.state[-1].role == contract.GAIN_ROLE
        probs = np.stack([sess.push(x) for x in wide_readings(20, 2)])
        assert np.isfinite(probs).all() and np.allclose(probs.sum(-1), 1, atol=1e-5)


def _edited(src, dst, key, change):
    """A copy of model file `src` at `dst` with metadata `key` (JSON) passed through `change`."""
    import json

    import onnx
    proto = onnx.load(str(src))
    for p in proto.metadata_props:
        if p.key == key:
            p.value = json.dumps(change(json.loads(p.value)))
    onnx.save(proto, str(dst))
    return dst


def _swap_last_roles(state):
    state[-1]["role"], state[-2]["role"] = state[-2]["role"], state[-1]["role"]
    return state


@pytest.mark.parametrize("key,change,match", [
    (contract.META_NORM, lambda n: {**n, "gain_floor": [f * 1e6 for f in n["gain_floor"]]}, "gain floors"),
    (contract.META_NORM, lambda n: {**n, "gain_floor": n["gain_floor"][::-1]}, "other channels"),
    (contract.META_NORM, lambda n: {**n, "gain_floor": [n["gain_floor"][0]] * 2, "mean": n["mean"] + [0.0],
                                    "std": n["std"] + [1.0]}, "gains 2 channel"),
    (contract.META_NORM, lambda n: {**n, "gain_release": 1e30}, "gain_release"),
    (contract.META_NORM, lambda n: {**n, "gain_release": 0.2}, "gain_release"),
    (contract.META_NORM, lambda n: {**n, "gain_floor": [1e-46, 0.0]}, "float32's normal range"),
    (contract.META_STATE, _swap_last_roles, "gain stage's state last"),
    (contract.META_CONFIG, lambda c: {**c, "levels": 2}, "levels 2"),
    (contract.META_CONFIG, lambda c: {**c, "levels": True}, "levels True"),
])
def test_a_file_whose_gain_metadata_and_graph_disagree_is_refused_when_opened(models, tmp_path, key, change, match):
    from edgeseq.errors import EdgeseqError
    from edgeseq.runtime import StreamSession
    dst = _edited(models("gru"), tmp_path / "m.onnx", key, change)
    with pytest.raises(EdgeseqError, match=match):
        StreamSession(dst)


def test_a_restored_gain_state_the_stage_cannot_write_is_refused(models):
    from edgeseq.runtime import StreamSession
    sess = StreamSession(models("gru"), streams=2)
    for x in wide_readings(10, 2):
        sess.push(x)
    good = sess.snapshot()
    for value in (1e18, 1e6, 100.0, -50.0):
        bad = {"position": good["position"], "state": [a.copy() for a in good["state"]]}
        bad["state"][-1][0, 0] = value
        with pytest.raises(UsageError, match="gain stage's level"):
            sess.restore(bad)
        assert all(np.array_equal(a, b) for a, b in zip(sess.snapshot()["state"], good["state"]))
    fine = {"position": good["position"], "state": [a.copy() for a in good["state"]]}
    fine["state"][-1][0, 0] = 80.0                      # a level the stage can reach
    sess.restore(fine)


def test_checkpoint_floors_beyond_float32_are_refused_in_one_line():
    from edgeseq.train.checkpoint import check_checkpoint
    ck = gained_checkpoint("gru")
    for floor in ([1e-46, 0.0], [1e39, 0.0]):
        with pytest.raises(ModelFileError, match="float32's normal range"):
            check_checkpoint({**ck, "normalization": {**ck["normalization"], "gain_floor": floor}}, "ck.pt")


def test_the_floor_covers_the_training_readings_and_refusals_name_each_channels_reason(models):
    from edgeseq.runtime.session_checks import NO_NORM_LIMIT
    split = wide_split()
    split.X[0, :, 0] *= 1e34                                   # one sequence near float32's top
    floor, _ = gain_floors(split, "auto")
    assert floor[0] * NO_NORM_LIMIT >= 0.999e3 * np.abs(split.X[..., 0]).max()
    from edgeseq.runtime import StreamSession
    sess = StreamSession(models("gru"))
    with pytest.raises(ReadingError, match="'current', beyond float32 max / 4 times the channel's gain floor"):
        sess.push(np.array([3e38, 5.0], np.float32))
    with pytest.raises(ReadingError) as e:
        sess.push(np.array([1.0, 3e38], np.float32))
    assert "'temp', beyond 1e12 standard deviations" in str(e.value) and "gain floor" not in str(e.value)


def test_a_constant_channel_beside_a_gained_one_trains_and_is_ignored():
    from edgeseq.data import Dataset
    from edgeseq.train import TrainConfig, train
    split, test = wide_split(20, 20, seed=0), wide_split(8, 20, seed=1)
    for s in (split, test):
        s.X[..., 1] = 5.0
    ds = Dataset("wide", split, test, [f"c{i}" for i in range(C)], ["current", "temp"])
    ckpt = train("gru", ds, TrainConfig(epochs=1, input_transform="gain"), {"hidden": 4}, progress=False)
    assert ckpt["config"]["levels"] == 2                                 # gain: every channel that is not all zeros
    assert ckpt["metrics"]["ignored_channels"] == ["temp", "level of temp"]


@pytest.mark.parametrize("node,scale", [("Add", 1.5), ("Div", 1000.0)])
def test_graph_gain_constants_other_than_the_metadata_are_refused(models, tmp_path, node, scale):
    """The level's log(floor) (Add) and the floor the log divides by (Div) are the metadata's too."""
    import onnx
    from onnx import numpy_helper

    from edgeseq.runtime import StreamSession
    proto = onnx.load(str(models("gru")))
    init = {t.name: t for t in proto.graph.initializer}
    abs_out = next(n.output[0] for n in proto.graph.node if n.op_type == "Abs")
    peak = next(n for n in proto.graph.node if n.op_type == "Max" and n.input[0] == abs_out)
    if node == "Add":
        target = next(n for n in proto.graph.node if n.op_type == "Add" and n.input[0] == "state_out.2")
    else:
        target = next(n for n in proto.graph.node if n.op_type == "Div" and n.input[0] == peak.output[0])
    value = numpy_helper.to_array(init[target.input[1]]) * np.float32(scale)
    name = target.input[1] + "_edited"
    proto.graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), name))
    target.input[1] = name
    onnx.save(proto, str(tmp_path / "m.onnx"))
    with pytest.raises(ModelFileError, match="gain floors that are not the graph's"):
        StreamSession(tmp_path / "m.onnx")


def test_floors_at_float32s_exact_limits_are_accepted():
    tiny, top = float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max)
    contract._gain({"gain_floor": [tiny, 0.0, top], "gain_release": 0.1})
    with pytest.raises(contract.MetadataError, match="entry 1 is 1e-39"):
        contract._gain({"gain_floor": [tiny, 1e-39], "gain_release": 0.1})


def test_int8_export_refuses_data_beyond_the_models_reading_bounds_in_one_line(tmp_path):
    from edgeseq.data import Dataset
    from edgeseq.errors import DataError
    from export.quantize import export_int8
    ck = gained_checkpoint("gru")
    split, test = wide_split(20, 30, seed=0), wide_split(8, 30, seed=1)
    test.X[2, 5, 0] = 3e37                                  # far beyond floor x float32 max / 4
    ds = Dataset("wide", split, test, [f"c{i}" for i in range(C)], ["current", "temp"])
    (tmp_path / "m.onnx").write_bytes(b"good")
    with pytest.raises(DataError, match=r"data 'wide': a test reading has 3e\+37 in 'current', beyond float32 max"):
        export_int8(ck, tmp_path / "m.onnx", data=ds)
    assert (tmp_path / "m.onnx").read_bytes() == b"good" and len(list(tmp_path.iterdir())) == 1


def test_a_run_bound_for_the_firmware_takes_asinh_where_auto_would_gain():
    from edgeseq.data import Dataset
    from edgeseq.train import TrainConfig, train
    ds = Dataset("wide", wide_split(), wide_split(8, 40, seed=1), [f"c{i}" for i in range(C)],
                 ["current", "temp"])
    assert gain_floors(ds.train, "auto")[0] is not None                 # auto would gain this channel
    ck = train("gru", ds, TrainConfig(epochs=1, gain_stage=False), {"hidden": 4}, progress=False)
    assert "asinh_scale" in ck["normalization"] and "gain_floor" not in ck["normalization"]
    assert "levels" not in ck["config"] or ck["config"]["levels"] == 0
