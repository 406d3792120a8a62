"""Regression: per-reading targets on every stream architecture, the persistence baseline, the
data files, int8, the firmware's integer outputs, the commands, the Pi demo and the gateway."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from edgeseq.contract import META_TASK, MetadataError, ModelMeta
from edgeseq.data import Dataset, load_dataset
from edgeseq.errors import DataError, UsageError
from edgeseq.runtime.regress import figures, persistence
from edgeseq.runtime.session import StreamSession

ARCHS = ("rnn", "gru", "lstm", "ssm", "transformer")


def small_motor(n_train=6, n_test=3, length=300) -> Dataset:
    """A few recordings of the embedded motor set, shortened (the persistence lag kept)."""
    ds = load_dataset("motor")
    for split, n in ((ds.train, n_train), (ds.test, n_test)):
        split.X, split.targets = split.X[:n, :length].copy(), split.targets[:n, :length].copy()
        split.y, split.Y, split.groups = split.y[:n], split.Y[:n, :length], split.groups[:n]
        split.lengths = np.full(n, length, np.int64)
    return ds


@pytest.fixture(scope="module")
def data():
    return small_motor()


@pytest.fixture(scope="module")
def models(data, tmp_path_factory):
    """arch -> (checkpoint, float .onnx path), trained two epochs."""
    from helpers import task_models
    return task_models(data, "regress", tmp_path_factory.mktemp("regress"), 2)


def test_the_embedded_motor_set_has_targets_a_lag_and_groups():
    ds = load_dataset("motor")
    assert ds.target_names == ["winding_c_in_60s"] and ds.persistence_lag == 60
    assert ds.train.targets.shape == (36, 1200, 1) and ds.test.targets.shape == (12, 1200, 1)
    assert set(ds.test.groups) == set(ds.train.groups)            # the same motors, later in time
    # the target is the winding temperature 60 readings on: it tracks the winding sensor 60 readings later
    tr = ds.train
    err = np.abs(tr.targets[:, :-60, 0] - tr.X[:, 60:, 2])
    assert err.mean() < 0.3 and np.abs(tr.targets[..., 0] - tr.X[..., 2]).mean() > 1.0


def _save(path, **arrays):
    np.savez(path, **arrays)
    return str(path)


def test_npz_targets_load_with_or_without_y_and_follow_the_hold_out(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8, 20, 2)).astype(np.float32)
    T = 2 * X[..., :1]
    ds = load_dataset(_save(tmp_path / "a.npz", X=X, targets=T, target_names=np.array(["twice"]),
                            persistence_lag=np.int64(3)))
    assert ds.labels == ["all"] and ds.target_names == ["twice"] and ds.persistence_lag == 3
    for split in (ds.train, ds.test):                  # held out by `holdout`: each row keeps its own targets
        assert len(split) and np.array_equal(split.targets, 2 * split.X[..., :1])
    ds = load_dataset(_save(tmp_path / "b.npz", X=X, y=np.arange(8) % 2, targets=T[..., 0], X_test=X[:2],
                            y_test=np.array([0, 1]), targets_test=T[:2]))
    assert ds.target_names == ["target"] and ds.persistence_lag == 1 and ds.test.targets.shape == (2, 20, 1)


@pytest.mark.parametrize("arrays, message", [
    ({"targets": np.zeros((8, 19, 1))}, "targets must be real numbers [N, T, K]"),
    ({"targets": np.full((8, 20, 1), np.nan)}, "targets holds NaN or Inf"),
    ({"targets": np.zeros((8, 20, 1)), "X_test": np.zeros((2, 20, 2))}, "no targets_test"),
    ({"targets": np.zeros((8, 20, 1)), "X_test": np.zeros((2, 20, 2)), "targets_test": np.zeros((2, 20, 2))},
     "targets_test has 2 targets per reading where the training split has 1"),
    ({"targets": np.zeros((8, 20, 1)), "persistence_lag": np.float64(2.5)}, "persistence_lag must be one whole"),
    ({"targets": np.zeros((8, 20, 1)), "persistence_lag": np.int64(20)}, "persistence_lag must be one whole"),
    ({"targets": np.zeros((8, 20, 1)), "target_names": np.array(["a", "b"])}, "target_names must be 1 names"),
    ({"y": np.zeros(8), "target_names": np.array(["a"])}, "but no targets; save the training split's"),
    ({"targets": np.zeros((8, 20, 1)), "targets_test": np.zeros((2, 20, 1))}, "targets_test but no X_test"),
    ({"targets": np.stack([np.arange(20.0)] * 8)[..., None], "lengths": np.full(8, 3), "persistence_lag": np.int64(5)},
     "persistence_lag must be one whole number of readings from 1 to 2"),
])
def test_bad_targets_are_refused_in_one_line(tmp_path, arrays, message):
    X = np.zeros((8, 20, 2), np.float32)
    with pytest.raises(DataError) as e:
        load_dataset(_save(tmp_path / "bad.npz", X=X, **arrays))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_targets_beside_x_train_and_constant_targets_are_refused(tmp_path):
    from edgeseq.train.forecast import train_task
    X = np.random.default_rng(0).normal(size=(8, 20, 2)).astype(np.float32)
    with pytest.raises(DataError, match="name it targets_train"):
        load_dataset(_save(tmp_path / "a.npz", X_train=X, y_train=np.zeros(8), targets=X[..., :1]))
    ds = load_dataset(_save(tmp_path / "b.npz", X_train=X, targets_train=X[..., :1], target_names=np.array(["v"])))
    assert ds.target_names == ["v"] and np.array_equal(ds.train.targets, ds.train.X[..., :1])
    ds = load_dataset(_save(tmp_path / "c.npz", X=X, targets=np.full((8, 20, 1), 3.0)))
    with pytest.raises(DataError, match="target 'target' of 'c' is constant"):
        train_task("gru", ds, "regress", epochs=1, progress=False)
    from edgeseq.train import train
    with pytest.raises(DataError, match="train a regression model on it with --task regress"):
        train("gru", ds)


def test_figures_score_the_model_and_persistence_on_the_same_readings():
    t = np.arange(10, dtype=np.float32)[None, :, None] * 2.0          # a ramp: persistence is `lag` steps behind
    assert np.isnan(persistence(t, 3)[0, :3]).all() and persistence(t, 3)[0, 3, 0] == 0.0
    f = figures(t + 1.0, t, np.array([10]), 3, ["y"])
    assert f["readings"] == 7 and f["lag"] == 3
    y = f["targets"]["y"]
    assert y["mae"] == 1.0 and y["persistence_mae"] == 6.0 and y["skill"] == pytest.approx(1 - 1 / 6)
    assert figures(t, t, np.array([5]), 3, ["y"])["readings"] == 2                 # only inside the length
    with pytest.raises(UsageError, match="longer than the persistence lag"):
        figures(t, t, np.array([3]), 3, ["y"])
    # a joined stream: the baseline never reaches back into the recording before
    j = figures(t + 1.0, t, np.array([10]), 3, ["y"], starts=np.array([0, 5]))
    assert j["readings"] == 4 and j["targets"]["y"]["persistence_mae"] == 6.0


def test_the_datas_targets_meet_the_models_by_name(data):
    from dataclasses import replace

    from edgeseq.runtime.regress import aligned
    two = replace(data.test, targets=np.concatenate([data.test.targets, 2 * data.test.targets], -1))
    back = aligned(two, ["b", "a"], ["a", "b"])
    assert np.array_equal(back.targets[..., 0], two.targets[..., 1])
    assert aligned(two, ["target0", "target1"], ["a", "b"]) is two               # unnamed: by position
    for names, model in ((["x", "y"], ["a", "b"]), (["a", "b"], ["a"]), (["a", "c"], ["a", "b"])):
        with pytest.raises(UsageError, match="give data with the model's targets"):
            aligned(two, names, model)


@pytest.mark.parametrize("arch", ARCHS)
def test_regression_models_stream_as_trained_on_every_architecture(models, data, arch):
    """torch over whole recordings == the ONNX step loop (StreamSession) on both backends, in
    the targets' units; the checkpoint's metadata holds the targets and their scale."""
    from edgeseq.train.checkpoint import model_from_checkpoint
    from edgeseq.train.loop import stream_logits
    ck, path = models(arch)
    t = ck["task"]
    assert t["kind"] == "regress" and t["targets"] == ["winding_c_in_60s"] and t["persistence_lag"] == 60
    X = data.test.X[:2, :120]
    ref = stream_logits(model_from_checkpoint(ck), X).numpy() * t["target_std"][0] + t["target_mean"][0]
    scale = float(np.abs(ref).max())
    for backend in ("onnxruntime", "native"):
        sess = StreamSession(path, streams=2, backend=backend)
        got = np.stack([sess.push_scores(X[:, i])[0] for i in range(X.shape[1])], 1)
        assert np.abs(got - ref).max() <= 1e-5 * scale, (arch, backend)
        assert sess.push_scores(X[:, 0])[1] == []                      # no events from a regression model


def test_int8_regression_export_is_judged_on_the_targets_error(models, data, tmp_path):
    from export.quantize import REGRESS_MAE_RISE, export_int8
    ck, _ = models("gru")
    r = export_int8(ck, tmp_path / "q.onnx", data=data)
    f, q = r["float_regress"]["targets"]["winding_c_in_60s"], r["int8_regress"]["targets"]["winding_c_in_60s"]
    assert r["within_bounds"] and q["mae"] <= f["mae"] * (1 + REGRESS_MAE_RISE)
    assert f["persistence_mae"] == q["persistence_mae"] > 0
    sess = StreamSession(tmp_path / "q.onnx")
    assert sess.meta.kind == "regress" and sess.meta.task["persistence_lag"] == 60


@pytest.mark.skipif(__import__("shutil").which("gcc") is None, reason="needs gcc on the host")
def test_emitted_targets_are_bit_exact_with_the_integer_simulator(models, data, tmp_path):
    """`<prefix>_targets` in the emitted C (gcc, every warning an error) == `targets_fixed` on
    the integer simulator's Q12 outputs; within 2% of the targets' spread of the float model's
    outputs (the float twin, not onnxruntime's int8 arithmetic, which drifts further from it)."""
    from export.quantize import export_int8
    from firmware_sim.cemit import emit, model_regress, targets_fixed
    from firmware_sim.intsim import from_onnx
    from helpers import gcc_strict, host_stream, simulated
    ck, float_path = models("gru")
    export_int8(ck, tmp_path / "q.onnx", data=data, keep_anyway=True)
    m = from_onnx(str(tmp_path / "q.onnx"))
    emit(m, tmp_path / "c", prefix="mot")
    c = tmp_path / "c"
    gcc_strict(tmp_path / "x", [c / "mot_example.c", c / "mot_model.c", *sorted(c.glob("*tables.c"))])
    xq = m.to_fixed(data.test.X[0, :200])
    got = host_stream(tmp_path / "x", xq)
    sim = simulated(m, xq)
    q = model_regress(m)
    want = targets_fixed(sim[:, :-1], q)
    assert np.array_equal(got[:, -1:], want) and np.array_equal(got[:, :-1], sim)
    sess = StreamSession(float_path, backend="onnxruntime")
    host = np.array([sess.push_scores(x)[0][0, 0] for x in data.test.X[0, :200]])
    assert np.abs(want[:, 0] / q[0][0] - host).mean() < 0.02 * data.test.targets.std()


def test_firmware_simulate_scores_the_integer_path_against_persistence(models, data, tmp_path):
    from export.quantize import export_int8
    from firmware_sim.simulate import simulate
    ck, _ = models("gru")
    export_int8(ck, tmp_path / "q.onnx", data=data, keep_anyway=True)
    path = tmp_path / "data.npz"
    np.savez(path, X=data.train.X, targets=data.train.targets, X_test=data.test.X, targets_test=data.test.targets,
             persistence_lag=np.int64(60), target_names=np.array(data.target_names),
             features=np.array(data.features))
    r = simulate(tmp_path / "q.onnx", data=str(path), readings=200)
    assert r["task"] == "regress" and r["lag"] == 60
    i, o = (r[k]["per_recording"]["targets"]["winding_c_in_60s"] for k in ("integer_only", "onnxruntime_int8"))
    assert abs(i["mae"] - o["mae"]) <= 0.1 * o["mae"] and i["persistence_mae"] == o["persistence_mae"]
    assert r["integer_only"]["never_reset"]["readings"] == 3 * 240


def test_commands_train_eval_stream_and_refuse_what_a_regression_model_lacks(data, tmp_path):
    from edgeseq.cli import cli as main
    path = tmp_path / "motor.npz"
    np.savez(path, X=data.train.X, targets=data.train.targets, X_test=data.test.X, targets_test=data.test.targets,
             persistence_lag=np.int64(60), target_names=np.array(data.target_names),
             features=np.array(data.features))
    run = CliRunner().invoke
    r = run(main, ["train", "--task", "regress", "--arch", "gru", "--data", str(path), "--out", str(tmp_path / "run"),
                   "--epochs", "2", "--set", "hidden=16", "--quiet"])
    assert r.exit_code == 0, r.output
    assert "winding_c_in_60s MAE" in r.output and "persistence" in r.output and "never reset" in r.output
    r = run(main, ["export", str(tmp_path / "run"), "--out", str(tmp_path / "m.onnx")])
    assert r.exit_code == 0, r.output
    r = run(main, ["eval", str(tmp_path / "m.onnx"), "--json"])
    assert r.exit_code == 0, r.output
    e = json.loads(r.output)
    assert e["lag"] == 60 and e["per_recording"]["readings"] == e["never_reset"]["readings"] == 3 * 240
    csv = tmp_path / "in.csv"
    csv.write_text("timestamp,winding_c,current_a,ambient_c\n" + "\n".join(
        f"{i},{x[2]},{x[0]},{x[1]}" for i, x in enumerate(data.test.X[0, :5])) + "\n")
    r = run(main, ["stream", str(tmp_path / "m.onnx"), "--input", str(csv), "--json"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    sess = StreamSession(tmp_path / "m.onnx")
    want = [sess.push_scores(x)[0][0, 0] for x in data.test.X[0, :5]]
    assert [row["values"]["winding_c_in_60s"] for row in rows] == pytest.approx(want, abs=1e-4)
    for args, message in ((["stream", str(tmp_path / "m.onnx"), "--input", str(csv), "--events"], "not events"),
                          (["calibrate", str(tmp_path / "m.onnx")], "no events or threshold to calibrate"),
                          (["compare", str(tmp_path / "m.onnx")], "is a regression model")):
        r = run(main, args)
        assert r.exit_code != 0 and message in r.output, r.output


def test_pi_answer_and_home_assistant_sensors_carry_the_targets(models, data):
    from edgeseq.runtime.live import answer, target_values
    from edgeseq.runtime.mqtt import ha_configs
    _, path = models("gru")
    sess, other = StreamSession(path), StreamSession(path)
    for x in data.test.X[0, :3]:
        probs = sess.push(x)[0]
        want = float(other.push_scores(x)[0][0, 0])
    values = target_values(sess)
    assert values["winding_c_in_60s"] == pytest.approx(want, abs=1e-5)
    assert answer(sess, probs, 0) == ("winding_c_in_60s", values["winding_c_in_60s"])
    cfgs = ha_configs("motor-1", "edgeseq/motor-1", "edgeseq/motor-1/status", targets=["winding_c_in_60s", "a\"b"])
    assert [c["name"] for _, c in cfgs] == ["winding_c_in_60s", "a\"b"]
    assert cfgs[1][1]["value_template"] == "{{ value_json['values'][\"a\\\"b\"] }}"


def test_gateway_answers_each_device_with_its_own_targets(models, data):
    """The batcher's regression answers equal each device's own StreamSession's, whichever devices
    share a round; a prediction message carries "value"."""
    from edgeseq.gateway.batcher import Batcher
    from edgeseq.gateway.wire import encode_prediction, predictions_of
    _, model = models("gru")
    X = {f"dev-{i}": data.test.X[i, :60] for i in range(3)}
    ref = {}
    for d, rows in X.items():
        s = StreamSession(model)
        ref[d] = [float(s.push_scores(x)[0][0, 0]) for x in rows]
    b = Batcher(model, max_batch=4)
    devs = {d: b.new_device(d) for d in X}
    got, t = {d: [] for d in X}, {d: 0 for d in X}
    rng = np.random.default_rng(0)
    while any(t[d] < 60 for d in X):
        ready = [d for d in X if t[d] < 60 and rng.random() < 0.6]
        for d, out in zip(ready, b.step([(devs[d], X[d][t[d]]) for d in ready])):
            label, value = b.answer(out)
            assert label == "winding_c_in_60s"
            msg = predictions_of(encode_prediction(d, t[d], t[d] + 1, label, value, key="value"))[0]
            got[d].append(msg["value"])
            t[d] += 1
    for d in X:
        assert got[d] == pytest.approx(ref[d], abs=1e-4)


def test_the_contract_checks_a_regression_models_task(models):
    from edgeseq.runtime.model import open_model
    _, path = models("gru")
    props = open_model(path)[1].to_props()
    good = json.loads(props[META_TASK])
    assert good["kind"] == "regress" and ModelMeta.from_props(props).task == good
    for bad, match in (({**good, "persistence_lag": 0}, "persistence_lag"), ({**good, "target_std": [0.0]},
                                                                             "target_std"),
                       ({**good, "targets": ["z"]}, "must name the outputs")):
        with pytest.raises(MetadataError, match=match):
            ModelMeta.from_props({**props, META_TASK: json.dumps(bad)})


def test_each_target_gets_its_own_scale_and_one_that_cannot_fit_int32_is_refused():
    from types import SimpleNamespace

    from firmware_sim.cemit import model_regress, targets_fixed
    task = {"kind": "regress", "targets": ["pa", "c"], "target_mean": [101325.0, 20.0], "target_std": [100.0, 0.05]}
    scale, mean, std = model_regress(SimpleNamespace(meta={"task": task}))
    assert scale.tolist() == [10, 100000] and mean.tolist() == [1013250, 2000000] and std.tolist() == [1000, 5000]
    assert targets_fixed(np.array([[4096, -2048]]), (scale, mean, std)).tolist() == [[1014250, 1997500]]
    for m_ in (2e19, 1e30, 3e8):
        bad = {**task, "target_mean": [m_, 20.0]}
        with pytest.raises(UsageError, match="does not fit the firmware.s int32"):
            model_regress(SimpleNamespace(meta={"task": bad}))


def test_targets_keep_their_digits_at_any_scale(tmp_path):
    """float64 targets at load; values to 7 significant digits in JSON (stream, Pi, gateway);
    a target finer than float32 outputs resolve, or constant, is refused before training."""
    from edgeseq.gateway.wire import encode_prediction
    from edgeseq.train.forecast import train_task
    X = np.random.default_rng(0).normal(size=(8, 20, 2)).astype(np.float32)
    ds = load_dataset(_save(tmp_path / "off.npz", X=X, targets=-2.1e6 + X[..., :1].astype(np.float64)))
    assert ds.train.targets.dtype == np.float64 and ds.train.targets[0, 0, 0] == -2.1e6 + float(X[0, 0, 0])
    payload = json.loads(encode_prediction("d", 1, 1, "b", 9.71536e-05, key="value"))
    assert payload["value"] == 9.71536e-05
    assert json.loads(encode_prediction("d", 1, 1, "x", 0.1234567891))["prob"] == 0.123457     # classifiers as before
    ds = load_dataset(_save(tmp_path / "fine.npz", X=X, targets=1e9 + X[..., :1].astype(np.float64)))
    with pytest.raises(DataError, match="subtract an offset"):
        train_task("gru", ds, "regress", epochs=1, progress=False)
    small = load_dataset(_save(tmp_path / "small.npz", X=X, targets=1e-7 * (1 + 0.2 * X[..., :1])))
    ck = train_task("gru", small, "regress", epochs=1, settings={"hidden": 8}, progress=False)
    assert ck["task"]["target_std"][0] == pytest.approx(2e-8, rel=0.3)


def test_a_model_of_unnamed_targets_takes_named_data_by_position_and_check_refuses_what_emit_would(models, data,
                                                                                                   tmp_path):
    from edgeseq.runtime.regress import aligned
    assert aligned(data.test, ["a"], ["target"]) is data.test
    from edgeseq.cli import cli as main
    _, path = models("gru")
    csv = tmp_path / "in.csv"
    csv.write_text("\n".join(",".join(str(v) for v in x) for x in data.test.X[0, :3]) + "\n")
    r = CliRunner().invoke(main, ["stream", str(path), "--input", str(csv)])
    assert r.exit_code == 0 and r.output.splitlines()[0] == "reading,winding_c_in_60s", r.output
    from firmware_sim.plan import check_model
    from firmware_sim.targets import get_target
    from onnx import load_model, save_model
    proto = load_model(str(path))
    for prop in proto.metadata_props:
        if prop.key == META_TASK:
            prop.value = json.dumps({**json.loads(prop.value), "target_mean": [3e12]})
    save_model(proto, str(tmp_path / "huge.onnx"))
    with pytest.raises(UsageError, match="does not fit the firmware's int32"):
        check_model(tmp_path / "huge.onnx", get_target("nrf52840"))


def test_a_csv_carries_targets_in_named_columns(data, tmp_path):
    """--targets names a .csv's target columns (its label column then optional); train, export and
    eval read them by name (eval: the model's targets), and bad target cells or names are refused."""
    from edgeseq.cli import cli as main
    rows = ["sequence,timestamp,winding_c_in_60s,current_a,ambient_c,winding_c,split"]
    for side, split in (("train", data.train), ("test", data.test)):
        for n in range(3):
            rows += [f"{side}{n},{t},{float(split.targets[n, t, 0])!r},{float(x[0])!r},{float(x[1])!r},"
                     f"{float(x[2])!r},{side}" for t, x in enumerate(split.X[n, :150])]
    path = tmp_path / "log.csv"
    path.write_text("\n".join(rows) + "\n")
    ds = load_dataset(str(path), targets=["winding_c_in_60s"], persistence_lag=60)
    assert ds.features == ["current_a", "ambient_c", "winding_c"] and ds.target_names == ["winding_c_in_60s"]
    assert np.array_equal(ds.test.targets[:, :150], data.test.targets[:3, :150].astype(np.float64))
    assert ds.persistence_lag == 60 and "timestamp" in ds.ignored
    run = CliRunner().invoke
    r = run(main, ["train", "--task", "regress", "--data", str(path), "--targets", "winding_c_in_60s",
                   "--persistence-lag", "60", "--out", str(tmp_path / "run"), "--epochs", "1", "--set", "hidden=8",
                   "--quiet"])
    assert r.exit_code == 0, r.output
    assert run(main, ["export", str(tmp_path / "run"), "--out", str(tmp_path / "m.onnx")]).exit_code == 0
    r = run(main, ["eval", str(tmp_path / "m.onnx"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["lag"] == 60 and json.loads(r.output)["per_recording"]["readings"] == 3 * 90
    bad = path.read_text().replace(f"train0,5,{float(data.train.targets[0, 5, 0])!r},", "train0,5,n/a,", 1)
    (tmp_path / "bad.csv").write_text(bad)
    for spec, kw, message in ((path, {"targets": ["nope"]}, "target column 'nope' is not in its header"),
                              (tmp_path / "bad.csv", {"targets": ["winding_c_in_60s"]}, "line 7: 'n/a' in target"),
                              (path, {"targets": ["winding_c_in_60s"], "features": ["winding_c_in_60s"]},
                               "named as a feature and as a target"),
                              (path, {"targets": ["winding_c_in_60s"], "persistence_lag": 150}, "from 1 to 149")):
        with pytest.raises(DataError, match=message):
            load_dataset(str(spec), **kw)
    with pytest.raises(DataError, match="an .npz carries its own targets"):
        load_dataset(str(tmp_path / "x.npz"), targets=["a"])
    r = run(main, ["train", "--data", str(path), "--targets", "winding_c_in_60s", "--out", str(tmp_path / "c")])
    assert r.exit_code != 0 and "--targets applies to --task regress" in r.output


def test_regress_on_a_csv_without_targets_asks_for_targets(tmp_path):
    """A .csv names its target columns with --targets: its refusal says so (a usage error), not
    to save targets arrays in an .npz."""
    from edgeseq.cli import cli as main
    path = tmp_path / "reg.csv"
    path.write_text("sequence,a,t\n" + "".join(f"s{i // 20},{i},{i + 1}\n" for i in range(60)))
    r = CliRunner().invoke(main, ["train", "--task", "regress", "--data", str(path), "--out", str(tmp_path / "r")])
    assert r.exit_code == 2 and "--targets" in r.output and ".npz" not in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and r.exception is None or isinstance(r.exception, SystemExit)


def test_firmware_measure_counts_the_targets_conversion_bit_exact(models, data, tmp_path):
    """`firmware measure` of a regression model runs `<prefix>_targets` after each step on the
    emulated core, checks its values against `targets_fixed` and counts its instructions."""
    from helpers import skip_without_emulator
    skip_without_emulator()
    from export.quantize import export_int8
    from firmware_sim.measure import measure
    ck, _ = models("gru")
    export_int8(ck, tmp_path / "q.onnx", data=data, keep_anyway=True)
    r = measure(tmp_path / "q.onnx", "cortex-m0plus", "-O2", readings=100, counted=2)
    t = r["targets"]
    assert t["bit_exact_readings"] == 100 and t["targets"] == 1
    assert 0 < t["instructions_per_step"] and t["share_of_step"] < 0.05, t
