"""Every command on the user's own data: an exported model records what it was trained on
(`edgeseq.data`), and eval, compare, report and firmware simulate/measure read that data
unless --data says otherwise; other channels, a recorded file that is gone and a report that
fails each end in one `Error:` line, and a failed report leaves --out as it was.

One tiny GRU (hidden 8, 2 epochs) is trained once on `walk.npz`, whose channels (gx, gy, gz)
are not BasicMotions', and exported float and static int8."""

import json
import shutil

import numpy as np
import onnx
import pytest
from helpers import one_error_line as _err

from edgeseq import contract
from edgeseq.cli import cli
from edgeseq.data import file_sha256, load_dataset, trained_on
from edgeseq.errors import DataError

BM = "acc_x, acc_y, acc_z, gyr_x, gyr_y, gyr_z"
MISMATCH = (f"Error: data 'basicmotions' has the channels {BM} but the model reads gx, gy, gz; pass --data with the "
            "model's training data, or other data with its channels")


def _walk(path, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(16) % 2
    X = rng.standard_normal((16, 12, 3)).astype(np.float32)
    X[:, :, 0] += np.where(y == 1, 2.0, -2.0)[:, None]
    np.savez(path, X=X, y=np.array(["rest", "walk"])[y], features=np.array(["gx", "gy", "gz"]))
    return path


def _train(arch, data, out):
    from edgeseq.train import TrainConfig, save_checkpoint, train
    ckpt = train(arch, load_dataset(str(data)), TrainConfig(epochs=2, seed=0), {"hidden": 8}, progress=False)
    save_checkpoint(ckpt, out)
    return ckpt


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """(root, walk.npz, float model, int8 model, run directory) for a GRU trained on walk.npz."""
    from export import export_int8, export_model
    root = tmp_path_factory.mktemp("own")
    data = _walk(root / "walk.npz")
    ckpt = _train("gru", data, root / "runs" / "gru")
    export_model(ckpt, root / "g.onnx")
    export_int8(ckpt, root / "g8.onnx", "static", keep_anyway=True)
    return root, data, root / "g.onnx", root / "g8.onnx", root / "runs"




def _recording(src, dst, value):
    """A copy of model `src` whose edgeseq.data metadata is `value` (JSON text), or absent (None):
    a file exported before the key existed."""
    proto = onnx.load(str(src))
    keep = [p for p in proto.metadata_props if p.key != contract.META_DATA]
    del proto.metadata_props[:]
    proto.metadata_props.extend(keep)
    if value is not None:
        proto.metadata_props.add(key=contract.META_DATA, value=value)
    onnx.save(proto, str(dst))
    return str(dst)


def test_exported_models_record_their_training_data(own):
    from edgeseq.runtime import open_model
    _, data, f, q, _ = own
    for path in (f, q):                                   # int8 records the training data too
        assert open_model(path)[1].data == str(data.resolve())
    assert trained_on({"dataset": "basicmotions", "data_path": None}) == "basicmotions"
    assert trained_on({"dataset": "walk", "data_path": "/d/walk.npz"}) == "/d/walk.npz"
    assert trained_on({"dataset": "walk"}) is None        # an older checkpoint, or data built in memory


def test_eval_compare_simulate_read_the_models_own_data(own, runner):
    _, _, f, q, _ = own
    r = runner.invoke(cli, ["eval", str(f), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["data"] == "walk" and json.loads(r.output)["n"] == 4
    r = runner.invoke(cli, ["eval", str(q)])
    assert r.exit_code == 0 and " on walk test, per sequence" in r.output, r.output
    r = runner.invoke(cli, ["compare", str(f), str(q), "--rounds", "1", "--readings", "50", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["data"] == "walk"
    r = runner.invoke(cli, ["firmware", "simulate", str(q), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["data"] == "walk" and res["test_sequences"] == 4


def test_firmware_measure_streams_the_models_own_data(own):
    from firmware_sim.intsim import from_onnx
    from firmware_sim.measure import readings_for
    root, _, _, q, _ = own
    m = from_onnx(q)
    X, source = readings_for(m, None, 30, q)
    ds = load_dataset(str(root / "walk.npz"))
    assert source == "the test split of walk" and X.shape == (30, 3)
    assert np.array_equal(X[:12], ds.test.X[0])
    old = from_onnx(_recording(q, root / "old8.onnx", None))    # no record, not BasicMotions' channels
    assert readings_for(old, None, 30)[1] == "synthetic readings over each channel's int8 range"
    with pytest.raises(DataError, match=r"^data 'basicmotions' has the channels acc_x"):
        readings_for(m, "basicmotions", 30)


def test_explicit_data_wins_and_csv_channels_are_matched_by_name(own, runner, tmp_path):
    _, data, f, _, _ = own
    ds = load_dataset(str(data))
    rows = ["sequence,label,gz,gx,gy,split"]              # the model's channels in another order
    for name, split in (("train", ds.train), ("test", ds.test)):
        for n in range(len(split)):
            for gx, gy, gz in split.X[n, :split.lengths[n]]:
                rows.append(f"{name}{n},{ds.labels[split.y[n]]},{float(gz)!r},{float(gx)!r},{float(gy)!r},{name}")
    (tmp_path / "walk.csv").write_text("\n".join(rows) + "\n")
    base = json.loads(runner.invoke(cli, ["eval", str(f), "--json"]).output)
    r = runner.invoke(cli, ["eval", str(f), "--data", "walk.csv", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["data"] == "walk" and res["n"] == base["n"] and res["accuracy"] == base["accuracy"]


@pytest.mark.parametrize("args", [
    ["eval", "{f}", "--data", "basicmotions"],
    ["compare", "{f}", "{q}", "--data", "basicmotions"],
    ["firmware", "simulate", "{q}", "--data", "basicmotions"],
    ["firmware", "measure", "{q}", "--core", "cortex-m4", "--data", "basicmotions"],
    ["eval", "{old}"],                                    # a file without the record: basicmotions, then refused
    ["firmware", "simulate", "{old8}"],
])
def test_other_channels_name_both_and_say_pass_data(own, runner, args):
    root, _, f, q, _ = own
    paths = {"f": str(f), "q": str(q), "old": _recording(f, root / "old.onnx", None),
             "old8": _recording(q, root / "old8.onnx", None)}
    assert _err(runner.invoke(cli, [a.format(**paths) for a in args])) == MISMATCH


@pytest.mark.parametrize("args", [
    ["eval", "{gone}"],
    ["compare", "{gone}", "{q}"],
    ["firmware", "simulate", "{gone8}"],
    ["firmware", "measure", "{gone8}", "--core", "cortex-m4"],
])
def test_recorded_data_that_is_gone_names_it_and_says_pass_data(own, runner, args):
    root, data, f, q, _ = own
    lost = str(root / "moved" / "walk.npz")
    paths = {"q": str(q), "gone": _recording(f, root / "gone.onnx", json.dumps(lost)),
             "gone8": _recording(q, root / "gone8.onnx", json.dumps(lost))}
    model = paths["gone8" if "firmware" in args else "gone"]
    assert _err(runner.invoke(cli, [a.format(**paths) for a in args])) == (
        f"Error: model '{model}' was trained on '{lost}', which no longer exists; pass --data with that data "
        "(or other data with the model's channels)")
    if args[0] == "eval":                                 # --data still wins
        r = runner.invoke(cli, ["eval", model, "--data", str(data), "--json"])
        assert r.exit_code == 0 and json.loads(r.output)["data"] == "walk", r.output


def test_other_labels_say_pass_data(own, runner, tmp_path):
    _, data, f, _, _ = own
    with np.load(data) as z:
        np.savez(tmp_path / "jump.npz", X=z["X"], y=np.array(["jump", "sit"])[np.arange(16) % 2],
                 features=z["features"])
    assert _err(runner.invoke(cli, ["eval", str(f), "--data", "jump.npz"])) == (
        "Error: data 'jump' has the labels jump, sit but the model predicts rest, walk; pass --data with the model's "
        "training data, or other data with its labels")


def test_a_bad_data_record_is_a_metadata_error(own, runner):
    root, _, f, _, _ = own
    bad = _recording(f, root / "bad.onnx", "5")
    assert _err(runner.invoke(cli, ["eval", bad])) == (
        f"Error: '{bad}': metadata edgeseq.data must be null or the name or path of the training data, got a number "
        "(5); export it again")


# -- report ----------------------------------------------------------------------------------

def _snapshot(folder):
    return sorted((str(p.relative_to(folder)), p.read_bytes() if p.is_file() else b"") for p in folder.rglob("*"))


def test_report_data_defaults_to_the_runs_data(own):
    from edgeseq.report.edge import report_data
    root, data, _, _, runs = own
    ds, reused = report_data(str(runs))
    assert list(reused) == ["gru"] and ds.name == "walk" and ds.source == str(data.resolve())
    ds, _ = report_data(None, str(data))
    assert ds.features == ["gx", "gy", "gz"]
    assert report_data(None)[0].name == "basicmotions"


def test_report_on_other_channels_fails_before_writing(own, runner, tmp_path):
    _, _, _, _, runs = own
    out = tmp_path / "rep"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    before = _snapshot(out)
    r = runner.invoke(cli, ["report", "--quick", "--quiet", "--runs", str(runs), "--data", "basicmotions",
                            "--out", "rep"])
    assert _err(r) == MISMATCH
    assert _snapshot(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["rep"]


def test_report_of_runs_on_different_data_asks_for_data(own, runner, tmp_path):
    root, _, _, _, runs = own
    mixed = tmp_path / "mixed"
    shutil.copytree(runs / "gru", mixed / "gru")
    _train("rnn", _walk(tmp_path / "walk2.npz", seed=1), mixed / "rnn")
    r = runner.invoke(cli, ["report", "--quick", "--quiet", "--runs", "mixed", "--out", "rep"], prog_name="edgeseq")
    assert _err(r, 2) == (
        f"Error: --runs 'mixed' holds runs trained on different data (rnn on '{tmp_path / 'walk2.npz'}', gru on "
        f"'{root / 'walk.npz'}'); a report measures every model on one data set: pass --data "
        "(see 'edgeseq report --help')")
    assert not (tmp_path / "rep").exists()


@pytest.mark.parametrize("existing", [True, False])
def test_a_report_that_fails_midway_leaves_out_as_it_was(own, runner, tmp_path, monkeypatch, existing):
    import edgeseq.report.edge as edge
    _, _, _, _, runs = own
    out = tmp_path / "rep"
    if existing:
        (out / "models").mkdir(parents=True)
        (out / "report.json").write_text("{}\n")
        (out / "models" / "gru.onnx").write_bytes(b"old")
    before = _snapshot(out) if existing else None

    def models(work, *args):                              # writes into the report, then fails
        (work / "models").mkdir()
        (work / "models" / "gru.onnx").write_bytes(b"new")
        (work / "report.json").write_text("half\n")
        raise DataError("int8 export broke; try again")
    monkeypatch.setattr(edge, "_models", models)
    r = runner.invoke(cli, ["report", "--quick", "--quiet", "--runs", str(runs), "--out", "rep"])
    assert _err(r) == "Error: int8 export broke; try again"
    assert (_snapshot(out) == before) if existing else not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["rep"] if existing else [])


def test_a_recorded_data_file_that_changed_since_training_is_refused(own, runner):
    """The model records its data file's sha256: a file changed since (its test split carved
    anew could hold training sequences) is refused in one line; --data scores it as it is now,
    and the file restored is read again."""
    from edgeseq.runtime.model import open_model
    root, data, f, _, _ = own
    assert open_model(f)[1].data_sha256 == file_sha256(data)
    copy = root / "copy" / "walk.npz"
    copy.parent.mkdir()
    shutil.copy(data, copy)
    model = _recording(f, root / "copied.onnx", json.dumps(str(copy)))
    assert runner.invoke(cli, ["eval", model]).exit_code == 0          # the same bytes elsewhere: read
    with np.load(copy) as z:
        np.savez(copy, **{k: z[k] for k in z.files}, notes=np.array("changed"))
    assert _err(runner.invoke(cli, ["eval", model])) == (
        f"Error: model '{model}' was trained on '{copy}', which has changed since (its sha256 is not the one the "
        "model records), so its test split may now hold sequences the model trained on; pass --data "
        f"'{copy}' to score on the file as it is now, or restore it")
    r = runner.invoke(cli, ["eval", model, "--data", str(copy), "--json"])
    assert r.exit_code == 0, r.output
    # compare: a second model of that file is checked too, not only the first (which trained on it as it is now)
    other = onnx.load(_recording(f, root / "other.onnx", json.dumps(str(copy))))
    for p in other.metadata_props:
        if p.key == contract.META_DATA_SHA:
            p.value = json.dumps(file_sha256(copy))
    onnx.save(other, str(root / "other.onnx"))
    other = str(root / "other.onnx")
    assert runner.invoke(cli, ["eval", other]).exit_code == 0
    line = _err(runner.invoke(cli, ["compare", other, model, "--rounds", "1"]))
    assert line.startswith(f"Error: model '{model}' was trained on '{copy}', which has changed since"), line
    shutil.copy(data, copy)
    assert runner.invoke(cli, ["eval", model]).exit_code == 0


def test_int8_export_of_a_run_whose_data_file_changed_is_refused(own, tmp_path):
    """int8 export reopens the run's training data: changed since, it is refused (--data wins)."""
    import shutil

    from edgeseq.train import load_checkpoint
    from export import export_int8
    root, data, _, _, runs = own
    ckpt = load_checkpoint(runs / "gru")
    copy = tmp_path / "walk.npz"
    shutil.copy(data, copy)
    ckpt = {**ckpt, "data_path": str(copy)}
    with np.load(copy) as z:
        np.savez(copy, **{k: z[k] for k in z.files}, notes=np.array("changed"))
    with pytest.raises(DataError, match=r"int8 export calibrates and checks on the run's training data '.*walk.npz', "
                                        r"which has changed since training .* pass --data"):
        export_int8(ckpt, tmp_path / "g8.onnx", "static", keep_anyway=True)
    assert not (tmp_path / "g8.onnx").exists()
    export_int8(ckpt, tmp_path / "g8.onnx", "static", data=str(copy), keep_anyway=True)
