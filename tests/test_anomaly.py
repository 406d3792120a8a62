"""Anomaly detection: forecast models on every stream architecture, the device-learnt baseline,
its state, the contract, int8 and the commands."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from edgeseq.contract import META_TASK, MetadataError, ModelMeta
from edgeseq.data import Dataset, Split, load_dataset
from edgeseq.errors import UsageError
from edgeseq.runtime.anomaly import STATE_NAMES, AnomalySpec, Watcher, figures, run, scores
from edgeseq.runtime.session import StreamSession

SPEC = {"learn": 120, "warm": 8, "sigmas": 8.0, "alpha": 0.2, "min_duration": 5, "refractory": 0, "release": 20}


def small_vibration(n_train=8, train_len=400, n_test=6, test_len=900) -> Dataset:
    """A few recordings of the embedded vibration set, shortened: faults kept where they fall."""
    ds = load_dataset("vibration")
    tr, te = ds.train, ds.test
    rows = np.array([0, 1, 2, 3, 30, 31])[:n_test]         # four with a fault, two normal
    Xte, Yte = te.X[rows].copy(), te.Y[rows].copy()
    for i in range(4):                                   # move each fault inside the first test_len readings
        idx = np.flatnonzero(Yte[i] == 1)
        seg = te.X[rows[i], idx[0] - 500:idx[0] + 300]
        Xte[i, :800], Yte[i, :] = seg, 0
        Yte[i, 500:500 + min(300, len(idx))] = 1
    Xte, Yte = Xte[:, :test_len], Yte[:, :test_len]
    train = Split(tr.X[:n_train, :train_len].copy(), np.zeros(n_train, np.int64), np.full(n_train, train_len),
                  np.zeros((n_train, train_len), np.int64), tr.groups[:n_train])
    test = Split(Xte, Yte[:, -1], np.full(n_test, test_len), Yte, te.groups[rows])
    return Dataset("vibration", train, test, ds.labels, ds.features, source="vibration")


@pytest.fixture(scope="module")
def data():
    return small_vibration()


@pytest.fixture(scope="module")
def models(data, tmp_path_factory):
    """arch -> (checkpoint, float .onnx path), trained a few epochs."""
    from helpers import task_models
    return task_models(data, "anomaly", tmp_path_factory.mktemp("anomaly"), 3)


def test_the_embedded_anomaly_sets_load_with_per_reading_labels():
    vib = load_dataset("vibration")
    assert vib.features == ["acc_x", "acc_y", "acc_z"] and vib.labels == ["normal", "fault"]
    assert vib.train.X.shape == (24, 1500, 3) and not (vib.train.Y == 1).any()     # normal running only
    faulty = (vib.test.Y == 1).any(1)
    assert faulty.sum() == 30 and vib.test.X.shape == (40, 3000, 3)
    first = np.array([np.flatnonzero(y == 1)[0] for y in vib.test.Y[faulty]])
    assert (first >= 1000).all()                          # after the first 20 s: a device has learnt its baseline
    ucr = load_dataset("internalbleeding16")
    idx = np.flatnonzero(ucr.test.Y[0] == 1)
    assert ucr.train.X.shape == (1, 1200, 1) and (idx[0], idx[-1]) == (4187, 4198)


def test_held_out_normal_running_is_the_same_machines_drawn_afresh():
    from edgeseq.data.vibration import RATE_HZ, normal_running
    vib = load_dataset("vibration")
    d = normal_running(0, 60)
    assert d["X"].shape == (6, 3000, 3) and d["X"].dtype == np.float32
    assert np.array_equal(np.round(d["X"] * 1024), d["X"] * 1024)           # whole counts of 1/1024 g
    assert np.array_equal(normal_running(0, 60)["X"], d["X"])               # seeded
    assert not np.array_equal(normal_running(1, 60)["X"], d["X"])
    freqs = np.fft.rfftfreq(1500, 1 / RATE_HZ)
    for k, g in enumerate(d["groups"]):
        train = vib.train.X[np.flatnonzero(vib.train.groups == g)[0]]
        assert not any(np.array_equal(d["X"][k][:1500], x) for x in vib.train.X)    # not a training recording
        peak = [freqs[np.argmax(np.abs(np.fft.rfft(x[:1500, 1] - x[:1500, 1].mean())))] for x in (train, d["X"][k])]
        assert abs(peak[0] - peak[1]) <= 0.1 * peak[0]                      # its machine's running speed
        assert np.allclose(train.std(0), d["X"][k].std(0), rtol=0.25)         # and amplitudes


def test_the_score_is_the_gaussian_surprise_of_the_reading_under_the_forecast():
    z = np.array([[1.0, -2.0]])
    out = np.array([[0.0, 0.0, 0.0, np.log(4.0)]])        # means 0, 0; variances 1, 4
    want = 0.5 * ((0 + 1.0) + (np.log(4.0) + 4.0 / 4.0)) / 2
    assert scores(z, out)[0] == pytest.approx(want)


def test_each_stream_learns_its_own_normal_level_and_flags_only_the_fault():
    """Two devices, one three times noisier than the other, both forecast as N(0, 1): each learns
    its own baseline, so neither raises a false alarm, and a step change on each is found."""
    rng = np.random.default_rng(0)
    T, F = 1200, 2
    X = rng.normal(0, 1, (2, T, F)).astype(np.float32)
    X[1] *= 3
    X[:, 800:900] += np.array([4.0, 12.0], np.float32)[:, None, None]      # 4 and 4 of each stream's std
    out = np.zeros((2, T, 2 * F), np.float32)
    spec = AnomalySpec.from_json(SPEC)
    res = run(X, np.full(2, T), out, np.zeros(F), np.ones(F), spec)
    starts = [e for e in res["events"] if e.kind == "start"]
    assert sorted(e.stream for e in starts) == [0, 1]
    assert all(800 <= e.position < 820 for e in starts)
    thr = res["threshold"]
    assert thr[1] > 5 * thr[0] > 0                         # the noisy device's own, higher level
    Y = np.zeros((2, T), np.int64)
    Y[:, 800:900] = 1
    fig = figures(Y, np.full(2, T), res, spec, rate_hz=50.0)
    assert fig["detected"] == 2 and fig["false_alarms"] == 0 and fig["top_inside"] == 1.0
    assert fig["normal_readings"] == 2 * (T - 100 - spec.warm - spec.learn)


def test_a_never_reset_stream_joins_a_groups_recordings_and_scores_each_anomaly():
    from edgeseq.runtime.anomaly import joined, spans
    assert spans(np.array([0, 1, 1, 0, 0, 1, -1])) == [(1, 2), (5, 5)]
    ds = load_dataset("vibration")
    j = joined(ds.test)
    assert len(j) == 6 and sorted(j.groups.tolist()) == [f"machine{i}" for i in range(1, 7)]
    first = np.flatnonzero(ds.test.groups == "machine1")
    np.testing.assert_array_equal(j.X[0, :3000], ds.test.X[first[0]])
    np.testing.assert_array_equal(j.X[0, 3000:6000], ds.test.X[first[1]])
    assert sum(len(spans(y)) for y in j.Y) == 30
    # one stream, two anomalies: one found late but inside its window, one missed; a start elsewhere is false
    from edgeseq.runtime.decision import Event
    Y = np.zeros((1, 1000), np.int64)
    Y[0, 600:650] = Y[0, 800:850] = 1
    res = {"smoothed": np.zeros((1, 1000)), "level": np.zeros((1, 1000)),
           "events": [Event(0, "start", "anomaly", 1, 654, 640), Event(0, "start", "anomaly", 1, 700, 690)]}
    fig = figures(Y, np.array([1000]), res, AnomalySpec(min_duration=5), rate_hz=None)
    assert (fig["anomalies"], fig["detected"], fig["false_alarms"], fig["delay_median"]) == (2, 1, 1, 54.0)
    assert fig["top_inside"] is None and fig["false_alarms_per_1000"] == pytest.approx(1000 / 900)
    # the highest score a few readings after a 12-reading anomaly: outside it, inside by the UCR
    # archive's protocol (up to the anomaly's length either side); past that, outside both
    Y = np.zeros((3, 500), np.int64)
    Y[:, 200:212] = 1
    sm = np.zeros((3, 500))
    sm[0, 205], sm[1, 214], sm[2, 224] = 9.0, 9.0, 9.0
    res = {"smoothed": sm, "level": sm, "events": []}
    fig = figures(Y, np.full(3, 500), res, AnomalySpec(min_duration=5), rate_hz=None)
    assert fig["top_inside"] == pytest.approx(1 / 3) and fig["ucr_score"] == pytest.approx(2 / 3)
    sm[1, 214], sm[1, 188] = 0.0, 9.0                                      # 12 readings before its first
    assert figures(Y, np.full(3, 500), res, AnomalySpec(min_duration=5), rate_hz=None)["ucr_score"] == pytest.approx(2 / 3)


def test_no_event_while_a_stream_learns_and_a_restored_state_goes_on_exactly():
    rng = np.random.default_rng(1)
    X = rng.normal(0, 1, (3, 400, 2)).astype(np.float32)
    X[:, 50:60] += 20                                      # inside the learning phase: not an anomaly yet
    out = np.zeros((3, 400, 4), np.float32)
    spec = AnomalySpec.from_json(SPEC)
    w = Watcher(spec, np.zeros(2), np.ones(2), 3)
    events = []
    for t in range(200):
        events += w.update(X[:, t], out[:, t])
    assert events == [] and np.isnan(w.level).all() is np.False_
    snap = w.snapshot()
    assert set(snap) == set(STATE_NAMES)
    w2 = Watcher(spec, np.zeros(2), np.ones(2), 3)
    w2.load(w2.check(snap))
    for t in range(200, 400):
        a, b = w.update(X[:, t], out[:, t]), w2.update(X[:, t], out[:, t])
        assert a == b
        np.testing.assert_array_equal(w.level, w2.level)
    bad = dict(snap, a_n=np.full(3, spec.learn + 1))
    with pytest.raises(UsageError, match="counts or variance"):
        w2.check(bad)
    with pytest.raises(UsageError, match="a_mu"):
        w2.check(dict(snap, a_mu=np.zeros((3, 3), np.float32)))
    with pytest.raises(UsageError, match="finite"):
        w2.check(dict(snap, a_mean=np.full(3, np.nan)))


@pytest.mark.parametrize("arch", ["rnn", "gru", "lstm", "ssm", "transformer"])
def test_every_stream_architecture_forecasts_the_same_on_torch_onnxruntime_and_native(arch, models, data):
    from edgeseq.train.checkpoint import model_from_checkpoint
    from edgeseq.train.loop import stream_logits
    ck, path = models(arch)
    X = data.test.X[:, :300]
    ref = stream_logits(model_from_checkpoint(ck), X).numpy()        # (S, T, 2F)
    got = {}
    for backend in ("onnxruntime", "native"):
        s = StreamSession(path, streams=len(X), backend=backend, decision=SPEC)
        levels, events, outs = [], [], []
        for t in range(X.shape[1]):
            lv, ev = s.push_scores(X[:, t])
            levels.append(lv)
            events += ev
            outs.append(s._outputs().copy())
        got[backend] = (np.stack(outs, 1), np.stack(levels, 1), events)
        tol = 1e-4 * np.abs(ref).max() + 1e-5
        assert np.abs(got[backend][0] - ref).max() <= tol, backend
    (_, l1, e1), (_, l2, e2) = got["onnxruntime"], got["native"]
    learnt = np.isfinite(l1)
    assert learnt.any() and (learnt == np.isfinite(l2)).all()
    np.testing.assert_allclose(l1[learnt], l2[learnt], rtol=1e-3, atol=1e-3)
    assert [(e.stream, e.kind, e.position) for e in e1] == [(e.stream, e.kind, e.position) for e in e2]


def test_the_model_file_carries_the_task_and_a_bad_one_is_refused(models):
    import onnx
    _, path = models("gru")
    meta = ModelMeta.from_props({p.key: p.value for p in onnx.load(str(path)).metadata_props})
    assert meta.kind == "anomaly" and meta.task["rate_hz"] == 50.0
    assert meta.labels == ["mean:acc_x", "mean:acc_y", "mean:acc_z", "logvar:acc_x", "logvar:acc_y", "logvar:acc_z"]
    props = meta.to_props()
    for bad, match in (({"kind": "anomaly", "sigmas": -1}, "sigmas"), ({"kind": "forecast"}, "kind"),
                       ({"kind": "anomaly", "lern": 5}, "unknown setting")):
        with pytest.raises(MetadataError, match=match):
            ModelMeta.from_props({**props, META_TASK: json.dumps(bad)})
    with pytest.raises(MetadataError, match="logvar"):
        ModelMeta.from_props({**props, "edgeseq.labels": json.dumps(meta.labels[::-1])})


def test_a_state_file_carries_the_learnt_baseline(models, data, tmp_path):
    from edgeseq.runtime.statefile import load_state, save_state
    _, path = models("gru")
    X = data.test.X[:2]
    a = StreamSession(path, streams=2, decision=SPEC)
    for t in range(300):
        a.push_scores(X[:, t])
    save_state(tmp_path / "s.npz", a, 300)
    b = StreamSession(path, streams=2, decision=SPEC)
    load_state(tmp_path / "s.npz", b)
    np.testing.assert_array_equal(a.threshold, b.threshold)
    assert np.isfinite(b.threshold).all()                 # learnt, not learning again
    for t in range(300, 400):
        la, ea = a.push_scores(X[:, t])
        lb, eb = b.push_scores(X[:, t])
        np.testing.assert_array_equal(la, lb)
        assert ea == eb


def test_a_bad_reading_changes_neither_the_model_nor_the_baseline(models, data):
    from edgeseq.errors import ReadingError
    _, path = models("gru")
    s = StreamSession(path, streams=1, decision=SPEC)
    for t in range(150):
        s.push_scores(data.test.X[0, t])
    before = s.snapshot()
    with pytest.raises(ReadingError):
        s.push_scores(np.array([np.nan, 0, 0], np.float32))
    after = s.snapshot()
    for k, v in before["decision"].items():
        np.testing.assert_array_equal(v, after["decision"][k], err_msg=k)
    for x, y in zip(before["state"], after["state"]):
        np.testing.assert_array_equal(x, y)


def test_int8_anomaly_export_is_judged_on_its_forecasts_and_detections(models, data, tmp_path):
    from export.quantize import export_int8
    ck, _ = models("gru")
    r = export_int8(ck, tmp_path / "q.onnx", data=data, keep_anyway=True)
    assert r["mean_rel"] < 0.02
    assert {"detected", "false_alarms", "top_inside"} <= set(r["int8_anomaly"])
    s = StreamSession(tmp_path / "q.onnx", decision=SPEC)
    lv, ev = s.push_scores(data.test.X[0, 0])
    assert np.isnan(lv[0]) and ev == []


def test_train_and_eval_commands_run_an_anomaly_model(tmp_path):
    from edgeseq.cli import cli as main
    ds = small_vibration()
    np.savez(tmp_path / "vib.npz", X_train=ds.train.X, y_train=ds.train.Y, X_test=ds.test.X, y_test=ds.test.Y,
             labels=np.array(ds.labels), features=np.array(ds.features))
    r = CliRunner().invoke(main, ["train", "--task", "anomaly", "--arch", "gru", "--data", str(tmp_path / "vib.npz"),
                                  "--out", str(tmp_path / "run"), "--epochs", "2", "--quiet", "--set", "hidden=8"])
    assert r.exit_code == 0, r.output
    assert "anomaly model on vib" in r.output and "detected" in r.output
    r = CliRunner().invoke(main, ["export", str(tmp_path / "run"), "--out", str(tmp_path / "a.onnx")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["eval", str(tmp_path / "a.onnx"), "--json"])
    assert r.exit_code == 0, r.output
    r = json.loads(r.output)
    fig, nr = r["per_recording"], r["never_reset"]
    assert fig["anomalies"] == 4 and r["recordings"] == 6 and r["settings"]["sigmas"] == 8.0
    assert nr["streams"] == 1 and nr["anomalies"] == 4        # the file names no groups: one stream of all
    r = CliRunner().invoke(main, ["train", "--task", "anomaly", "--arch", "bigru", "--data", str(tmp_path / "vib.npz"),
                                  "--out", str(tmp_path / "bi")])
    assert r.exit_code != 0 and "stream models" in r.output
    r = CliRunner().invoke(main, ["train", "--task", "anomaly", "--data", str(tmp_path / "vib.npz"),
                                  "--out", str(tmp_path / "x"), "--set", "augment=none"])
    assert r.exit_code != 0 and "classification training" in r.output


def test_gateway_batches_anomaly_devices_as_one_session_each(models, data, tmp_path):
    """The gateway's batcher: each device's baseline, level and events equal those of its own
    StreamSession, whichever devices share a round; its answers carry the device's state."""
    from edgeseq.gateway.batcher import Batcher
    from edgeseq.gateway.wire import encode_prediction
    from export.decision import write_decision
    _, src = models("gru")
    model = str(write_decision(src, AnomalySpec.from_json(SPEC), tmp_path / "gru-anomaly.onnx"))
    X = {f"dev-{i}": data.test.X[i, 300:620] for i in range(4)}      # dev-0..3 hold a fault from reading 200
    ref = {}
    for d, rows in X.items():
        s = StreamSession(model)
        ref[d] = [(t, e.kind) for t, x in enumerate(rows) for e in s.push_scores(x)[1]]
    b = Batcher(model, max_batch=4)
    devs = {d: b.new_device(d) for d in X}
    got, t, answers = {d: [] for d in X}, {d: 0 for d in X}, set()
    rng = np.random.default_rng(0)
    while any(t[d] < 320 for d in X):
        ready = [d for d in X if t[d] < 320 and rng.random() < 0.6]
        outs = b.step([(devs[d], X[d][t[d]]) for d in ready])
        for d, out, fired in zip(ready, outs, b.events):
            label, value = b.answer(out)
            answers.add(label)
            assert (value is None) == (label == "learning")
            json.loads(encode_prediction(d, t[d], t[d] + 1, label, value))
            got[d] += [(t[d], e.kind) for e in fired]
            t[d] += 1
    assert got == ref
    assert sum(map(len, ref.values())) >= 2 and answers == {"learning", "normal", "anomaly"}   # 3-epoch model


@pytest.fixture(scope="module")
def anomaly_int8(models, data, tmp_path_factory):
    """The GRU anomaly model as static int8, with settings that learn within these recordings."""
    from export.decision import write_decision
    from export.quantize import export_int8
    ck, _ = models("gru")
    root = tmp_path_factory.mktemp("anomaly-int8")
    export_int8(ck, root / "q.onnx", data=data, keep_anyway=True)
    return str(write_decision(root / "q.onnx", AnomalySpec.from_json({**SPEC, "adapt": 256}), root / "qa.onnx"))


def test_integer_anomaly_layer_follows_the_float_one(anomaly_int8, data):
    """The firmware's integer score and baseline (firmware_sim.intanomaly) on the integer step's
    forecasts find the faults the float Watcher finds on the same forecasts, within its roundings."""
    from firmware_sim.intanomaly import IntWatcher, model_params
    from firmware_sim.intsim import from_onnx
    m = from_onnx(anomaly_int8)
    q = model_params(m)
    spec = AnomalySpec.from_json(m.meta["task"])
    X = data.test.X
    S, T, _ = X.shape
    iw, fw = IntWatcher(q, S), Watcher(spec, m.meta["normalization"]["mean"], m.meta["normalization"]["std"], S)
    state = m.init_state(S)
    ie, fe = [], []
    for t in range(T):
        x = m.to_fixed(X[:, t])
        out, state = m.step(x, state)
        ie += [(e.stream, e.kind) for e in iw.update(x, out)]
        fe += [(e.stream, e.kind) for e in fw.update(X[:, t], out / 4096.0)]
        if t > spec.warm + 5:
            np.testing.assert_allclose(iw.s / 256.0, fw.a_score, atol=0.05 + 0.05 * np.abs(fw.a_score).max())
    assert {s for s, k in ie if k == "start"} == {s for s, k in fe if k == "start"}
    assert len([1 for _, k in ie if k == "start"]) >= 2


@pytest.mark.skipif(__import__("shutil").which("gcc") is None, reason="needs gcc on the host")
def test_emitted_anomaly_layer_is_bit_exact_with_the_integer_simulator(anomaly_int8, data, tmp_path):
    from firmware_sim.cemit import emit
    from firmware_sim.intanomaly import IntWatcher, model_params
    from firmware_sim.intsim import from_onnx
    from helpers import gcc_strict, host_stream, simulated
    m = from_onnx(anomaly_int8)
    emit(m, tmp_path / "c", prefix="vib")
    c = tmp_path / "c"
    gcc_strict(tmp_path / "x", [c / "vib_example.c", c / "vib_model.c", *sorted(c.glob("*tables.c"))])
    want, iw = [], IntWatcher(model_params(m), 1)
    for i in (0, 4):                                  # a recording with a fault, then a normal one, never reset
        xq = m.to_fixed(data.test.X[i])
        want.append(xq)
    xq = np.concatenate(want)
    got = host_stream(tmp_path / "x", xq)
    rows = []
    for x, row in zip(xq, simulated(m, xq)):
        ev = iw.update(x[None], np.array([row[:-1]]))
        end = [e for e in ev if e.kind == "end"]
        start = [e for e in ev if e.kind == "start"]
        rows.append([*row, int(iw.cand[0]), 1 if end else -1, 1 if start else -1,
                     start[0].position - start[0].onset + 1 if start else 0])
    rows = np.array(rows)
    assert np.array_equal(got, rows)
    assert (rows[:, -2] >= 0).sum() >= 1 and rows[:, -4].sum() >= 5      # candidates and a start


@pytest.mark.parametrize("core", ["cortex-m4", "cortex-m0plus"])
def test_anomaly_layer_on_an_emulated_core_is_bit_exact_and_cheap(anomaly_int8, core):
    from helpers import skip_without_emulator
    skip_without_emulator()
    from firmware_sim.measure import measure
    r = measure(anomaly_int8, core, "-O2", readings=400, counted=2)      # raises where any logit or event differs
    a = r["anomaly"]
    assert a["bit_exact_readings"] == 400 and "decision" not in r
    assert 0 < a["instructions_per_step"] and a["share_of_step"] <= 0.25, a


def test_calibrate_writes_a_threshold_from_normal_streams(models, tmp_path):
    from edgeseq.cli import cli
    from edgeseq.runtime.anomaly import SIGMA_FLOOR
    from edgeseq.runtime.model import open_model
    _, path = models("gru")
    vib = small_vibration(n_train=8, train_len=400)
    np.savez(tmp_path / "normal.npz", X_train=vib.train.X, y_train=vib.train.Y, groups_train=vib.train.groups,
             labels=np.array(vib.labels), features=np.array(vib.features))
    with_spec = tmp_path / "a.onnx"
    from export.decision import write_decision
    write_decision(path, AnomalySpec.from_json({**SPEC, "learn": 100}), with_spec)
    r = CliRunner().invoke(cli, ["calibrate", str(with_spec), "--data", str(tmp_path / "normal.npz"), "--rate-hz", "50",
                                 "--max-false-alarms-per-hour", "1", "--out", str(tmp_path / "cal.onnx")])
    assert r.exit_code == 0, r.output
    assert "Gumbel" in r.output and "modelled" in r.output
    task = open_model(tmp_path / "cal.onnx")[1].task
    assert task["sigmas"] >= SIGMA_FLOOR and task["rate_hz"] == 50.0 and task["learn"] == 100
    assert task["calibration"]["blocks"] >= 2 and (tmp_path / "cal.onnx.calibration.png").exists()
    r = CliRunner().invoke(cli, ["calibrate", str(with_spec), "--data", str(tmp_path / "normal.npz"), "--background",
                                 "normal", "--dry-run"])
    assert r.exit_code != 0 and "no classes" not in r.output and "--background" in r.output
    r = CliRunner().invoke(cli, ["calibrate", str(with_spec), "--data", str(tmp_path / "normal.npz"), "--max-delay",
                                 "10", "--dry-run"])
    assert r.exit_code == 2 and "--max-delay bounds a classifier's detection delay" in r.output
    from export.decision import write_decision as wd
    from edgeseq.runtime.decision import DecisionSpec
    with pytest.raises(UsageError, match="anomaly model takes anomaly settings"):
        wd(path, DecisionSpec.make(["a", "b"]), tmp_path / "x.onnx")


def test_evaluate_runs_the_protocols_asked_for(models, data):
    from edgeseq.runtime.anomaly import evaluate
    _, path = models("gru")
    spec = AnomalySpec.from_json(SPEC)
    both = evaluate(path, data.test, backend="onnxruntime", spec=spec)
    one = evaluate(path, data.test, backend="onnxruntime", spec=spec, protocols=("per_recording",))
    assert "never_reset" not in one and one["per_recording"] == both["per_recording"]
    assert evaluate(path, data.test, backend="onnxruntime", spec=spec,
                    protocols=("never_reset",))["never_reset"] == both["never_reset"]
    for bad in ((), "never_reset", ("per_reading",)):
        with pytest.raises(ValueError, match="protocols must be some of"):
            evaluate(path, data.test, spec=spec, protocols=bad)


def test_stream_prints_the_level_and_the_state(models, data, tmp_path):
    from edgeseq.cli import cli
    _, path = models("gru")
    from export.decision import write_decision
    model = write_decision(path, AnomalySpec.from_json(SPEC), tmp_path / "a.onnx")
    rows = ["acc_x,acc_y,acc_z"] + [",".join(f"{v:.5f}" for v in r) for r in data.test.X[0, :200]]
    (tmp_path / "in.csv").write_text("\n".join(rows) + "\n")
    r = CliRunner().invoke(cli, ["stream", str(model), "--input", str(tmp_path / "in.csv")])
    assert r.exit_code == 0, r.output
    import re
    lines = [x for x in r.output.splitlines() if re.fullmatch(r"\d+,(learning|-?\d+\.\d+),(normal|anomaly)", x)]
    assert lines[0] == "1,learning,normal" and len(lines) == 200
    last = lines[-1].split(",")
    assert last[0] == "200" and float(last[1]) == pytest.approx(float(last[1])) and last[2] in ("normal", "anomaly")


def test_home_assistant_gets_a_state_and_a_level_sensor():
    from edgeseq.runtime.mqtt import ha_configs
    cfg = dict(ha_configs("pump-1", "edgeseq/pump-1/prediction", "edgeseq/pump-1/status", anomaly=True))
    level = next(c for t, c in cfg.items() if t.endswith("/level/config"))
    assert level["unit_of_measurement"] == "sd" and "none" in level["value_template"]
    assert not any(t.endswith("/probability/config") for t in cfg)


def test_firmware_check_and_simulate_count_the_anomaly_layer(anomaly_int8):
    from firmware_sim.intanomaly import MAX_SIGMAS, params
    from firmware_sim.plan import check_model
    from firmware_sim.simulate import simulate
    from firmware_sim.targets import get_target
    r = check_model(anomaly_int8, get_target("nrf52840"))
    assert r["ram"]["anomaly"] == 8 * 3 + 56 and r["flash"]["anomaly"] > 2 * 257 * 4 and r["anomaly"]["cycles"] > 0
    s = simulate(anomaly_int8, data=None, readings=200)
    assert s["task"] == "anomaly" and s["integer_only"]["never_reset"]["anomalies"] == 30
    assert s["vs_onnxruntime_int8"]["mean_rel"] < 0.02
    with pytest.raises(UsageError, match="standard deviations"):
        params(AnomalySpec(sigmas=MAX_SIGMAS + 1), [0, 0, 0], [1, 1, 1], [20, 20, 20])


def test_the_normal_label_is_found_by_name_or_by_the_training_split():
    from edgeseq.runtime.anomaly import binary
    ds = small_vibration()
    flipped = Dataset("v", Split(ds.train.X, 1 - ds.train.y, ds.train.lengths, 1 - ds.train.Y, ds.train.groups),
                      Split(ds.test.X, 1 - ds.test.y, ds.test.lengths, 1 - ds.test.Y, ds.test.groups),
                      ["fault", "normal"], ds.features)        # sorted labels: 'fault' is label 0
    b, normal, other = binary(flipped)
    assert normal == "normal" and other == 0 and b.labels == ["normal", "anomaly"]
    np.testing.assert_array_equal(b.test.Y, ds.test.Y)
    unnamed = Dataset("v", Split(ds.train.X, 1 - ds.train.y, ds.train.lengths, 1 - ds.train.Y, ds.train.groups),
                      Split(ds.test.X, 1 - ds.test.y, ds.test.lengths, 1 - ds.test.Y, ds.test.groups),
                      ["0", "1"], ds.features)                # no 'normal': the training split's most frequent
    b, normal, _ = binary(unnamed)
    assert normal == "1"
    np.testing.assert_array_equal(b.test.Y, ds.test.Y)


def test_a_baseline_is_never_lost_or_forged_on_restore(models, data):
    _, path = models("gru")
    s = StreamSession(path, streams=2, decision=SPEC)
    for t in range(200):
        s.push_scores(data.test.X[:2, t])
    snap = s.snapshot()
    before = s.threshold.copy()
    for bad, match in (({**snap, "decision": None}, "no anomaly baseline"),
                       ({**snap, "decision": {**snap["decision"], "a_score": np.full(2, 1e300)}}, "out of the range"),
                       ({**snap, "decision": {**snap["decision"], "a_m2": np.zeros(2)}}, "no variance")):
        with pytest.raises(UsageError, match=match):
            s.restore(bad)
        np.testing.assert_array_equal(s.threshold, before)


def test_commands_meant_for_classifiers_refuse_an_anomaly_model(models, tmp_path):
    from edgeseq.cli import cli
    from edgeseq.runtime.decision import DecisionSpec
    import onnx
    _, path = models("gru")
    r = CliRunner().invoke(cli, ["compare", str(path), str(path)])
    assert r.exit_code != 0 and "eval" in r.output and "Traceback" not in r.output
    m = onnx.load(str(path))
    labels = json.loads(next(p.value for p in m.metadata_props if p.key == "edgeseq.labels"))
    m.metadata_props.add(key="edgeseq.decision", value=json.dumps(DecisionSpec.make(labels).to_json()))
    with pytest.raises(MetadataError, match="no classes to decide on"):
        ModelMeta.from_props({p.key: p.value for p in m.metadata_props})
    ds = small_vibration()
    np.savez(tmp_path / "n.npz", X_train=ds.train.X, y_train=ds.train.Y, labels=np.array(ds.labels),
             features=np.array(ds.features))
    from export.decision import write_decision
    plain = write_decision(path, AnomalySpec.from_json({**SPEC, "rate_hz": None}), tmp_path / "p.onnx")
    r = CliRunner().invoke(cli, ["calibrate", str(plain), "--data", str(tmp_path / "n.npz"), "--dry-run"])
    assert r.exit_code != 0 and "--rate-hz" in r.output


def test_a_fixed_number_of_epochs_trains_on_every_recording(data):
    from edgeseq.train.forecast import train_task
    ck = train_task("gru", data, "anomaly", epochs=1, settings={"hidden": 8}, progress=False)
    assert ck["metrics"]["schedule"]["validation"].startswith("none")
