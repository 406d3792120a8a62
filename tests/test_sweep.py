"""Correctness sweep: no silent wrong answer, no lost file, no hang. One kind per test, each
ending in one `Error:` line or the documented safe behaviour."""

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from edgeseq.data import load_dataset, parse_float
from edgeseq.errors import DataError
from edgeseq.runtime.statefile import NotAStateFile, check_state_path, read_state
from test_hardening_runtime import GOOD, cli_error, invoke, models, run_demo  # noqa: F401  (fixture)


# -- labels are values, not a range ---------------------------------------------------------

def test_integer_labels_are_names_not_a_range(tmp_path):
    X = np.random.default_rng(0).standard_normal((8, 5, 2)).astype(np.float32)
    np.savez(tmp_path / "d.npz", X=X, y=np.array([0, 1, 0, 10**9] * 2))
    ds = load_dataset(str(tmp_path / "d.npz"))                  # 3 classes, not a billion
    assert ds.labels == ["0", "1", "1000000000"]
    assert sorted(set(ds.train.y.tolist()) | set(ds.test.y.tolist())) == [0, 1, 2]
    np.savez(tmp_path / "n.npz", X=X, y=np.array([0, 1, -1, 1] * 2))
    with pytest.raises(DataError, match=r"labels must be integers of at least 0, or names; found -1"):
        load_dataset(str(tmp_path / "n.npz"))
    np.savez(tmp_path / "l.npz", X=X, y=np.array([0, 1, 2, 1] * 2), labels=np.array(["a", "b"]))
    with pytest.raises(DataError, match=r"labels must be integers in 0..1 \(they index the file's labels, 2 names\); "
                                        r"found 2"):
        load_dataset(str(tmp_path / "l.npz"))


def test_a_class_no_loss_scores_is_refused(tmp_path):
    from edgeseq.train import TrainConfig, train
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12, 60, 2)).astype(np.float32)
    Y = np.repeat(np.array([0, 1] * 6)[:, None], 60, axis=1)
    Y[:, 0] = 2                                                  # class 2 only on each first reading
    np.savez(tmp_path / "d.npz", X=X, y=Y, labels=np.array(["a", "b", "first"]))
    with pytest.raises(DataError, match=r"label\(s\) 'first' of 'd' occur only where no training loss looks"):
        train("gru", str(tmp_path / "d.npz"), TrainConfig(epochs=1), {"hidden": 4}, progress=False)


# -- numbers as data files write them -------------------------------------------------------

@pytest.mark.parametrize("text", ["1_0", "１", "1 0", "0x10", "1e", "", "--1", "1,5"])
def test_python_only_number_forms_are_not_numbers(text):
    with pytest.raises(ValueError):
        parse_float(text)


def test_underscores_and_wide_digits_are_bad_readings_and_bad_data(models, tmp_path):
    for cell in ("1_0", "１"):
        r = cli_error(["stream", models["gru"]], 1, "input line 1: non-numeric value", stdin=f"{cell},0.2,0.3\n")
        assert r.stdout == ""
    csv = tmp_path / "d.csv"
    csv.write_text("sequence,label,a,b\n" + "".join(f"s{i},{'xy'[i % 2]},1_0,2\n" for i in range(8)))
    with pytest.raises(DataError, match=r"line 2: non-numeric value '1_0'"):
        load_dataset(str(csv))


# -- state files: never another file, never a hang --------------------------------------------

def test_the_state_file_cannot_be_the_model_or_the_input(models, tmp_path):
    model = models["gru"]
    before = Path(model).read_bytes()
    cli_error(["stream", model, "--state-file", model], 2, f"--state-file '{model}' is the file '{model}' this "
                                                             "command reads; give the state a file of its own", GOOD)
    link = tmp_path / "to-model"
    link.symlink_to(model)
    cli_error(["stream", model, "--state-file", link], 2, "this command reads", GOOD)
    readings = tmp_path / "r.csv"
    readings.write_text(GOOD * 3)
    cli_error(["stream", model, "--input", readings, "--state-file", readings], 2, "this command reads")
    assert Path(model).read_bytes() == before and readings.read_text() == GOOD * 3
    assert not list(tmp_path.glob("*.rejected*")) and not list(Path(model).parent.glob("*.rejected*"))


def test_a_file_that_is_not_a_state_file_is_left_alone(models, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    cli_error(["stream", models["gru"], "--state-file", notes], 2, "is not an edgeseq state file (bad header) and was "
                                                                    "left as it is", GOOD)
    assert notes.read_text() == "my notes\n" and not list(tmp_path.glob("notes.txt.rejected*"))


def test_fifos_devices_and_long_names_are_refused_before_streaming(models, tmp_path, capsys):
    fifo = tmp_path / "s.fifo"
    os.mkfifo(fifo)
    done = []
    t = threading.Thread(target=lambda: done.append(invoke(["stream", models["gru"], "--state-file", fifo], GOOD)))
    t.start()
    t.join(20)
    assert done and done[0].exit_code == 2 and "is not a regular file" in done[0].stderr   # no hang
    with pytest.raises(NotAStateFile, match="not a regular file"):
        read_state(fifo)                                      # the reader itself never blocks on one
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    cli_error(["stream", models["gru"], "--state-file", zero], 2, "is not a regular file", GOOD)
    with pytest.raises(NotAStateFile):
        read_state(zero)
    long = tmp_path / ("s" * 240)
    r = cli_error(["stream", models["gru"], "--state-file", long], 2, "is too long: the files saved beside it", GOOD)
    assert r.stdout == "" and not long.exists()                # refused before a reading was streamed
    code, out, err = run_demo(["--model", str(models["gru"]), "--source", "replay:basicmotions",
                               "--state-file", str(models["gru"]), "--max-readings", "3"], capsys)
    assert code == 2 and "this command reads" in err


def test_check_state_path_accepts_new_and_existing_files(tmp_path):
    check_state_path(tmp_path / "new.state")
    (tmp_path / "old.state").write_bytes(b"")
    check_state_path(tmp_path / "old.state", protect=(tmp_path / "m.onnx", "-"))


# -- firmware emit never writes over what it reads; bounded beams; cache below the window ------

def test_emit_never_writes_over_the_model_it_reads(int8, tmp_path):
    import shutil

    from click.testing import CliRunner

    from edgeseq.cli import cli
    target = tmp_path / "es_model.c"
    shutil.copy(int8("gru", "static")[0], target)
    before = target.read_bytes()
    r = CliRunner().invoke(cli, ["firmware", "emit", str(target), "--out", str(tmp_path)])
    assert r.exit_code == 2 and f"would write es_model.c over '{target}', which this command reads" in r.output
    assert target.read_bytes() == before and not (tmp_path / "es_model.h").exists()


def test_a_beam_wider_than_the_bound_is_refused_before_decoding():
    from edgeseq.errors import UsageError
    from edgeseq.translate.runtime import MAX_BEAM, Translator
    with pytest.raises(UsageError, match=rf"beam size must be 1..{MAX_BEAM}, got 50000"):
        Translator.beam(object(), ["Save the notebook"], beam=50000)


def test_a_cache_below_the_trained_window_says_so(models):
    r = invoke(["stream", models["transformer"], "--max-history", "2"], GOOD * 3)
    assert r.exit_code == 0
    assert ("note: the model was trained to attend to its last 6 readings; a cache of 2 shows it only 2, so its "
            "answers differ from the trained model's (usually less accurate): --max-history 6 or more gives the "
            "trained answers") in r.stderr, r.stderr


# -- a channel that never varied in training is ignored, in any unit ----------------------------

def test_a_constant_channel_is_ignored_whatever_its_unit(tmp_path):
    from edgeseq.runtime.evaluate import evaluate
    from edgeseq.train import TrainConfig, train
    from export import export_int8, export_model
    rng = np.random.default_rng(0)
    n, T = 48, 40
    y = np.arange(n) % 2
    t = np.arange(T) / 10
    X = np.zeros((n, T, 3), np.float32)
    X[:, :, 0] = np.sin(2 * np.pi * (1 + y[:, None]) * t) + 0.1 * rng.standard_normal((n, T))
    X[:, :, 1] = 0.5 * y[:, None] + 0.1 * rng.standard_normal((n, T))
    X[:, :, 2] = 101370.0                                        # a barometer, in Pa, that never moved
    np.savez(tmp_path / "d.npz", X=X, y=y, features=np.array(["acc", "gyr", "baro"]))
    ck = train("gru", str(tmp_path / "d.npz"), TrainConfig(epochs=8, lr=1e-2), {"hidden": 8}, progress=False)
    assert ck["metrics"]["ignored_channels"] == ["baro"]
    ds = load_dataset(str(tmp_path / "d.npz"))
    drift = ds.test.X.copy()
    drift[:, :, 2] += 10.0                                       # 10 Pa of weather
    drifted = type(ds.test)(drift, ds.test.y, ds.test.lengths, ds.test.Y)
    export_model(ck, tmp_path / "f.onnx")
    export_int8(ck, tmp_path / "d8.onnx", "dynamic", keep_anyway=True)
    for name in ("f.onnx", "d8.onnx"):
        a = evaluate(str(tmp_path / name), ds.test, backend="onnxruntime")
        b = evaluate(str(tmp_path / name), drifted, backend="onnxruntime")
        assert b["accuracy"] == a["accuracy"], name
        assert abs(b["continuous"]["reading_accuracy"] - a["continuous"]["reading_accuracy"]) <= 0.02, name
