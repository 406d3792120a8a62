"""A training CSV's columns that are not readings (a timestamp, a row number, a device name, a
note) are ignored, by name or because they hold no number, and said so; a column with a bad
reading is still refused with its line; `--features` names the feature columns; a model trained
on such a file streams and evaluates that file, its channels matched by name."""

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import one_error_line as _err

from edgeseq.cli import cli
from edgeseq.data import data_for_model, load_dataset
from edgeseq.data.files import not_a_feature
from edgeseq.errors import DataError


def _log(path, columns, seed=0, n_seq=8, T=6):
    """A logger's CSV: sequences of T readings of acc_x, acc_y, acc_z (acc_x tells the two
    classes apart) with `columns`, {name: cell(seq, t, row) -> str}, after them. Returns
    (path, X [n_seq, T, 3] float32 as written, labels [n_seq])."""
    rng = np.random.default_rng(seed)
    labels = np.array(["rest", "walk"])[np.arange(n_seq) % 2]
    X = rng.standard_normal((n_seq, T, 3)).astype(np.float32)
    X[:, :, 0] += np.where(labels == "walk", 2.0, -2.0)[:, None]
    text = np.vectorize(lambda v: f"{v:.4f}")(X)
    X = text.astype(np.float64).astype(np.float32)           # the values as the file holds them
    lines = ["sequence,label,acc_x,acc_y,acc_z," + ",".join(columns)]
    for n in range(n_seq):
        for t in range(T):
            row = n * T + t
            cells = [f"s{n}", labels[n], *text[n, t]]
            lines.append(",".join(cells + [cell(n, t, row) for cell in columns.values()]))
    Path(path).write_text("\n".join(lines) + "\n")
    return str(path), X, labels


ISO = {"timestamp": lambda n, t, row: f"2026-01-01T10:{n:02d}:00.{20 * t:03d}"}


def test_iso_timestamp_column_is_ignored(tmp_path):
    path, X, _ = _log(tmp_path / "d.csv", ISO)
    ds = load_dataset(path)
    assert ds.features == ["acc_x", "acc_y", "acc_z"]
    assert ds.ignored == {"timestamp": "time, by its name"}
    assert len(ds.train) + len(ds.test) == 8
    assert np.array_equal(ds.train.X[0], X[0])


def test_numeric_time_and_index_columns_named_so_are_not_channels(tmp_path):
    path, X, _ = _log(tmp_path / "d.csv", {
        "timestamp": lambda n, t, row: f"{1767261600.0 + 0.02 * row:.2f}",     # Unix time: numbers
        "Time (s)": lambda n, t, row: f"{0.02 * row:.2f}",
        "sampleId": lambda n, t, row: str(row),
        "": lambda n, t, row: str(row),                                        # pandas' index
    })
    ds = load_dataset(path)
    assert ds.features == ["acc_x", "acc_y", "acc_z"]
    assert ds.ignored == {"timestamp": "time, by its name", "Time (s)": "time, by its name",
                          "sampleId": "an id, by its name", "": "no name: a row index"}
    assert np.array_equal(ds.train.X[0], X[0])


@pytest.mark.parametrize("name, why", [
    ("TIMESTAMP", "time, by its name"), ("time_stamp", "time, by its name"), ("timestamp_ms", "time, by its name"),
    ("t", "time, by its name"), ("Date Time", "time, by its name"), ("ID", "an id, by its name"),
    ("row", "an id, by its name"), ("Sample ID", "an id, by its name"), ("device_id", "an id, by its name"),
    ("Unnamed: 0", "no name: a row index"), ("notes", "a note, by its name"),
    ("acc_x", None), ("temperature", None), ("ms", None), ("times", None),
])
def test_names_that_are_not_features(name, why):
    assert not_a_feature(name) == why


def test_text_and_empty_columns_are_ignored_a_mixed_one_refused(tmp_path):
    path, _, _ = _log(tmp_path / "d.csv", {
        "where": lambda n, t, row: ["kitchen", "hall"][n % 2],
        "when": lambda n, t, row: f"10:00:{t:02d}.500",
        "memo": lambda n, t, row: '"moved, then still"' if t == 2 else "",
        "spare": lambda n, t, row: "",
    })
    ds = load_dataset(path)
    assert ds.features == ["acc_x", "acc_y", "acc_z"]
    assert ds.ignored == {"where": "text on every row", "when": "text on every row", "memo": "text on every row",
                          "spare": "empty on every row"}
    path, _, _ = _log(tmp_path / "m.csv", {"baro": lambda n, t, row: "n/a" if row == 9 else "1013.2"})
    with pytest.raises(DataError) as e:
        load_dataset(path)
    assert str(e.value) == (f"'{path}' line 11: non-numeric value 'n/a' in feature column 'baro'; fix or remove that "
                            "row, or leave the column out (train --features names the feature columns)")


def test_a_mistyped_number_on_every_row_is_a_bad_reading_not_text(tmp_path):
    path, _, _ = _log(tmp_path / "d.csv", {"baro": lambda n, t, row: '"1013,2"'})
    with pytest.raises(DataError, match=r"line 2: non-numeric value '1013,2' in feature column 'baro'; fix or remove"):
        load_dataset(path)


def test_features_select_and_order_the_columns(tmp_path):
    path, X, _ = _log(tmp_path / "d.csv", {**ISO, "t": lambda n, t, row: str(t),
                                           "baro": lambda n, t, row: "n/a" if row == 9 else "1013.2"})
    ds = load_dataset(path, features=["acc_z", " acc_x", "t"])        # a name-ignored column, when named, is read
    assert ds.features == ["acc_z", "acc_x", "t"]
    assert ds.ignored == {"acc_y": "not in features", "timestamp": "not in features", "baro": "not in features"}
    assert np.array_equal(ds.train.X[0], np.c_[X[0][:, [2, 0]], np.arange(6)])


@pytest.mark.parametrize("features, message", [
    (["acc_x", "acc_w"], "has no column 'acc_w'; its columns are sequence, label, acc_x, acc_y, acc_z, timestamp: "
                         "name features from those$"),
    (["acc_x", "acc_x"], "features name acc_x more than once; name each column once$"),
    (["label"], r"'label' is the label column, not a feature; name feature columns only \(the file's: acc_x, acc_y, "
                r"acc_z, timestamp\)$"),
    ([""], r"features must name columns, got \[''\]"),
])
def test_features_the_file_cannot_give_are_refused(tmp_path, features, message):
    path, _, _ = _log(tmp_path / "d.csv", ISO)
    with pytest.raises(DataError, match=message):
        load_dataset(path, features=features)


def test_features_are_refused_for_data_that_is_not_a_csv():
    with pytest.raises(DataError, match=r"features pick the columns of a \.csv file, and data 'basicmotions' is not "
                                        "one"):
        load_dataset("basicmotions", features=["acc_x"])


def test_a_file_left_with_no_feature_column(tmp_path):
    (tmp_path / "d.csv").write_text("sequence,label,time,note\ns1,a,0.0,x\ns1,a,0.1,\ns2,b,0.2,y\n")
    with pytest.raises(DataError) as e:
        load_dataset(str(tmp_path / "d.csv"))
    assert str(e.value) == (f"'{tmp_path / 'd.csv'}': no column holds readings (not features: time (time, by its "
                            "name), note (a note, by its name)); add columns of numeric readings, or name the feature "
                            "columns (train --features)")


def test_train_cli_names_the_ignored_columns_and_refuses_unknown_features(runner):
    _log("d.csv", {**ISO, "where": lambda n, t, row: "kitchen"})
    r = runner.invoke(cli, ["train", "--data", "d.csv", "--features", "acc_x,acc_w", "--out", "runs/x"])
    assert _err(r) == ("Error: 'd.csv' has no column 'acc_w'; its columns are sequence, label, acc_x, acc_y, acc_z, "
                       "timestamp, where: name features from those")
    r = runner.invoke(cli, ["train", "--features", "acc_x", "--out", "runs/x"])
    assert _err(r, 2) == ("Error: --features picks columns of a .csv file, and --data 'basicmotions' is not one (an "
                          ".npz's channels are its X); drop --features (see 'cli train --help')")
    assert not Path("runs/x").exists()


@pytest.fixture(scope="module")
def trained_on_log(tmp_path_factory):
    """A logger CSV (ISO timestamp, Unix time, a device name, a note, a column with one bad
    reading) and two tiny GRUs trained on it by the CLI: one on the columns found by content and
    name, one on --features acc_z,acc_x (which also avoids the bad column), each exported."""
    from click.testing import CliRunner
    root = tmp_path_factory.mktemp("log")
    path, _, _ = _log(root / "log.csv", {
        **ISO, "unix_time": lambda n, t, row: f"{1767261600.0 + 0.02 * row:.2f}",
        "device": lambda n, t, row: f"wrist-{n % 3}", "note": lambda n, t, row: "strap loose" if t == 3 else ""})
    _log(root / "bad.csv", {**ISO, "baro": lambda n, t, row: "n/a" if row == 9 else "1013.2"})
    runner, out = CliRunner(), {}
    for name, data, extra in (("auto", "log.csv", []), ("picked", "bad.csv", ["--features", "acc_z,acc_x"])):
        args = ["train", "--data", str(root / data), "--epochs", "2", "--set", "hidden=8", "--set", "augment=none",
                "--quiet", "--out", str(root / name), *extra]
        r = runner.invoke(cli, args)
        assert r.exit_code == 0, r.output
        lines = r.stdout.splitlines()
        r = runner.invoke(cli, ["export", str(root / name), "--out", str(root / f"{name}.onnx")])
        assert r.exit_code == 0, r.output
        out[name] = (root / data, root / f"{name}.onnx", lines)
    return out


def test_train_prints_and_records_what_it_ignored(trained_on_log):
    data, model, lines = trained_on_log["auto"]
    assert ("columns: features acc_x, acc_y, acc_z; ignored timestamp (time, by its name), unix_time (time, by its "
            "name), device (an id, by its name), note (a note, by its name)") in lines
    metrics = json.loads((model.parent / "auto" / "metrics.json").read_text())
    assert metrics["features"] == ["acc_x", "acc_y", "acc_z"]
    assert metrics["metrics"]["ignored_columns"] == {"timestamp": "time, by its name", "unix_time": "time, by its name",
                                                     "device": "an id, by its name", "note": "a note, by its name"}
    _, _, lines = trained_on_log["picked"]
    assert ("columns: features acc_z, acc_x; ignored acc_y (not in features), timestamp (not in features), "
            "baro (not in features)") in lines


@pytest.mark.parametrize("which", ["auto", "picked"])
def test_the_model_streams_and_evaluates_the_file_it_was_trained_on(trained_on_log, runner, which):
    data, model, _ = trained_on_log[which]
    features = ["acc_x", "acc_y", "acc_z"] if which == "auto" else ["acc_z", "acc_x"]
    ds = load_dataset(str(data), features=features)
    recorded = runner.invoke(cli, ["eval", str(model), "--json"])            # the data the model records
    given = runner.invoke(cli, ["eval", str(model), "--data", str(data), "--json"])
    assert recorded.exit_code == 0 and given.exit_code == 0, recorded.output + given.output
    assert json.loads(recorded.stdout)["n"] == json.loads(given.stdout)["n"] == len(ds.test)
    assert json.loads(recorded.stdout)["accuracy"] == json.loads(given.stdout)["accuracy"]

    r = runner.invoke(cli, ["stream", str(model), "--input", str(data)])   # header picks the model's columns
    assert r.exit_code == 0, r.output
    plain = [",".join(c.strip() for c in line.split(",")) for line in _columns(data, features)]
    ref = runner.invoke(cli, ["stream", str(model)], input="\n".join(plain) + "\n")
    assert ref.exit_code == 0, ref.output
    labels = [line.split(",")[1] for line in Path(data).read_text().splitlines()[1:]]
    assert r.stdout.splitlines() == [f"{line},{true}" for line, true in zip(ref.stdout.splitlines(), labels)]


def _columns(path, names):
    """The cells of `names`, in that order, of each data line of a CSV without quotes."""
    lines = Path(path).read_text().splitlines()
    header = lines[0].split(",")
    return [",".join(line.split(",")[header.index(n)] for n in names) for line in lines[1:]]


def test_a_csv_with_more_columns_than_the_model_gives_the_models_channels(tmp_path):
    path, X, _ = _log(tmp_path / "d.csv", {"baro": lambda n, t, row: "1013.2"})
    ds = data_for_model(path, ["acc_z", "acc_x"])
    assert ds.features == ["acc_z", "acc_x"] and np.array_equal(ds.train.X[0], X[0][:, [2, 0]])
    ds = load_dataset(path).for_model(["acc_z", "acc_x"])                   # as int8 export calls it
    assert ds.features == ["acc_z", "acc_x"] and ds.ignored == {"acc_y": "not a channel of the model",
                                                                "baro": "not a channel of the model"}
    with pytest.raises(DataError, match=r"has the channels acc_x, acc_y, acc_z, baro but the model reads acc_x, gx "
                                        r"\(it lacks gx and has extra acc_y, acc_z, baro\)"):
        data_for_model(path, ["acc_x", "gx"])


@pytest.mark.parametrize("name,kind", [("millis", "time"), ("Unix Timestamp", "time"), ("rel_time", "time"),
                                       ("time since start (s)", "time"), ("sensor_id", "an id"),
                                       ("seq_no", "an id"), ("packetId", "an id"), ("frame", "an id"),
                                       ("acc_x", None), ("uv_index", None), ("heart_rate", None)])
def test_a_clock_or_counter_word_anywhere_in_a_name_is_not_a_feature(name, kind):
    assert not_a_feature(name) == (f"{kind}, by its name" if kind else None)


def test_names_and_labels_with_terminal_escapes_are_printed_escaped(tmp_path):
    """A column name or label holding an escape sequence reaches the screen as its Python escape,
    never raw: not in train's columns line, not in an Error line."""
    from click.testing import CliRunner
    path = tmp_path / "esc.csv"
    rows = ["sequence,label,a,b,note\x1b]0;owned\x07"]
    for s in range(6):
        rows += [f"s{s},{'up' if s % 2 else 'down'},{s + t * 0.1},{t},x" for t in range(8)]
    path.write_text("\n".join(rows) + "\n")
    runner = CliRunner()
    r = runner.invoke(cli, ["train", "--data", str(path), "--out", str(tmp_path / "r"), "--epochs", "1", "--quiet",
                            "--set", "hidden=4"])
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.output and "\x07" not in r.output
    assert "note\\x1b]0;owned\\x07 (text on every row)" in r.output
    path.write_text(path.read_text().replace(",down,", ",do\x1b[2Jwn,", 1))
    r = runner.invoke(cli, ["train", "--data", str(path), "--out", str(tmp_path / "r2"), "--features", "a,zz"])
    assert r.exit_code != 0 and "\x1b" not in r.output and "\x07" not in r.output and "Error:" in r.output
