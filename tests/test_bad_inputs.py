"""Every command against bad inputs of each kind: one `Error:` line, the right exit code (1: it
failed at run time, 2: the request was wrong), no traceback, and every file as it was.

The table is walked in one process with click's runner; the cases that need a real process
(closed stdin, a full disk, a second process on a state file) run the installed command.
A property test feeds random bytes to the readers of CSV data and of streamed readings.
"""

import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgeseq.cli import cli

ROOT = Path(__file__).resolve().parents[1]
FEATURES = ["acc_x", "acc_y", "acc_z", "gyr_x", "gyr_y", "gyr_z"]
GOOD = "0.1,0.2,0.3,0.4,0.5,0.6\n"
LABELLED = "time,label," + ",".join(FEATURES) + "\n"      # a header with columns besides the features


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """Tiny trained runs and their models: float GRU, float Transformer, int8 static GRU."""
    from edgeseq.train import TrainConfig, save_checkpoint, train
    from export import export_int8, export_model

    root = tmp_path_factory.mktemp("kit")
    for arch, settings_ in (("gru", {"hidden": 8}), ("transformer", {"d_model": 16, "heads": 2, "layers": 1})):
        ckpt = train(arch, "basicmotions", TrainConfig(epochs=1), settings_, progress=False)
        save_checkpoint(ckpt, root / "runs" / arch)
        export_model(ckpt, root / f"{arch}.onnx")
        if arch == "gru":
            export_int8(ckpt, root / "gru-int8.onnx", "static", keep_anyway=True)
    ckpt = train("transformer", "basicmotions", TrainConfig(epochs=1),     # unbounded: its cache grows with
                 {"d_model": 8, "heads": 2, "layers": 1, "window": 0}, progress=False)   # any --history asked
    export_model(ckpt, root / "transformer-w0.onnx")
    return root


def _tree(path: Path) -> dict:
    """{relative path: sha256} of every file under `path`."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def _edit_meta(src, dst, key, value):
    import onnx
    m = onnx.load(str(src))
    for p in m.metadata_props:
        if p.key == key:
            p.value = value
    onnx.save(m, str(dst))


def _npz(path, **arrays):
    np.savez(path, **arrays)


def _setup(work: Path, kit: Path):
    """The files a case may name, made fresh for each case."""
    shutil.copy(kit / "gru.onnx", work / "gru.onnx")
    shutil.copy(kit / "transformer.onnx", work / "tr.onnx")
    shutil.copy(kit / "transformer-w0.onnx", work / "tr0.onnx")
    shutil.copy(kit / "gru-int8.onnx", work / "q.onnx")
    shutil.copytree(kit / "runs", work / "runs")
    (work / "afile").write_text("x")
    (work / "empty").mkdir()
    (work / "garbage.onnx").write_bytes(b"\x00\x01garbage" * 10)
    (work / "garbage.pt").write_bytes(b"\x80\x04garbage" * 10)
    (work / "garbage.npz").write_bytes(b"PK\x03\x04 not a zip")
    (work / "text.txt").write_text("hello\n")
    (work / "binary.csv").write_bytes(bytes(range(256)) * 4)
    (work / "latin1.csv").write_bytes("sequence,label,acc_x\n0,marche,1\n0,marché,2\n".encode("latin-1"))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 10, 6)).astype(np.float32)
    _npz(work / "ylen.npz", X=X, y=np.array([0, 1, 0, 1, 0]), features=np.array(FEATURES))
    _npz(work / "oneclass.npz", X=X, y=np.zeros(6, np.int64), features=np.array(FEATURES))
    _npz(work / "objects.npz", X=np.array([[1, "a"]], object), y=np.array([0]))
    (work / "badmeta").mkdir()
    import onnx
    m = onnx.load(str(kit / "gru.onnx"))
    del m.metadata_props[:]
    onnx.save(m, str(work / "plain.onnx"))
    _edit_meta(kit / "gru.onnx", work / "labels-str.onnx", "edgeseq.labels", json.dumps("abcd"))
    _edit_meta(kit / "gru.onnx", work / "labels-5.onnx", "edgeseq.labels", json.dumps(list("abcde")))
    _edit_meta(kit / "gru.onnx", work / "labels-json.onnx", "edgeseq.labels", "[not json")
    _edit_meta(kit / "gru.onnx", work / "state-shape.onnx", "edgeseq.state",
               json.dumps([{"name": "state_in.0", "output": "state_out.0", "shape": ["batch", 9], "kind": "fixed"}]))
    for name, value in (("zero-clock", {"clock_mhz": 0}), ("text-flash", {"flash_kb": "lots"}),
                        ("neg-ram", {"sram_kb": -1}), ("nan-mac", {"cycles_per_mac": float("nan")})):
        t = {"name": "mine", "part": "p", "core": "c", "clock_mhz": 64, "flash_kb": 512, "sram_kb": 64,
             "cycles_per_mac": 1.0, "cycles_per_op": 2.0, "source": "s", **value}
        (work / f"{name}.json").write_text(json.dumps([t]).replace("NaN", "NaN"))
    (work / "list-of-numbers.json").write_text("[1, 2]")
    (work / "not-json.json").write_text("{nope")
    (work / "mt").mkdir()
    (work / "mt" / "model.json").write_text("{not json")
    (work / "mt2").mkdir()
    (work / "mt2" / "model.json").write_text(json.dumps({"kind": "translation", "encoder": "../afile",
                                                         "decoder": "d", "tokenizer": "t"}))
    (work / "bad.tsv").write_bytes(b"Open\tOuvrir\n\xff\xfe\tx\n")


U, R = 2, 1           # exit codes: wrong request (usage), failed at run time
GRU, TR, Q = "gru.onnx", "tr.onnx", "q.onnx"

# (command line, stdin, exit code, a fragment the one error line must hold)
CASES = [
    # train: settings, data, output
    (["train", "--arch", "nope", "--out", "o"], None, U, "unknown architecture"),
    (["train", "--set", "hidden=0", "--out", "o"], None, U, "hidden"),
    (["train", "--set", "hidden=-4", "--out", "o"], None, U, "hidden"),
    (["train", "--set", "hidden=abc", "--out", "o"], None, U, "hidden"),
    (["train", "--set", "hidden=2.5", "--out", "o"], None, U, "hidden"),
    (["train", "--set", "dropout=5", "--out", "o"], None, U, "dropout"),
    (["train", "--set", "layers=0", "--out", "o"], None, U, "layers"),
    (["train", "--set", "nosuch=1", "--out", "o"], None, U, "nosuch"),
    (["train", "--set", "hidden", "--out", "o"], None, U, "NAME=VALUE"),
    (["train", "--arch", "transformer", "--set", "heads=3", "--out", "o"], None, U, "heads"),
    (["train", "--epochs", "0", "--out", "o"], None, U, "--epochs"),
    (["train", "--lr", "-1", "--out", "o"], None, U, "--lr"),
    (["train", "--data", "missing.npz", "--out", "o"], None, R, "missing.npz"),
    (["train", "--data", "empty", "--out", "o"], None, R, "empty"),
    (["train", "--data", "garbage.npz", "--out", "o"], None, R, "garbage.npz"),
    (["train", "--data", "objects.npz", "--out", "o"], None, R, "objects.npz"),
    (["train", "--data", "ylen.npz", "--out", "o"], None, R, "ylen.npz"),
    (["train", "--data", "oneclass.npz", "--out", "o"], None, R, "class"),
    (["train", "--data", "binary.csv", "--out", "o"], None, R, "binary.csv"),
    (["train", "--data", "latin1.csv", "--out", "o"], None, R, "UTF-8"),
    (["train", "--data", "text.txt", "--out", "o"], None, R, "text.txt"),
    (["train", "--epochs", "1", "--set", "hidden=4", "--out", "afile/run"], None, U, "'afile' is a file, not a folder: choose another --out"),
    # export
    (["export", "nope", "--out", "m.onnx"], None, R, "no checkpoint at 'nope'"),
    (["export", "empty", "--out", "m.onnx"], None, R, "no checkpoint"),
    (["export", "garbage.pt", "--out", "m.onnx"], None, R, "not a readable edgeseq checkpoint"),
    (["export", "runs/gru", "--out", "m.txt"], None, U, "must end in .onnx"),
    (["export", "runs/gru", "--out", "empty"], None, U, "must end in .onnx"),
    (["export", "runs/gru", "--out", "afile/m.onnx"], None, U, "'afile' is a file, not a folder: choose another --out"),
    (["export", "runs/gru", "--out", "m.onnx", "--max-history", "8"], None, U, "transformer only"),
    (["export", "runs/transformer", "--out", "m.onnx", "--max-history", "0"], None, U, "at least 1"),
    (["export", "runs/gru", "--out", "m.onnx", "--data", "x"], None, U, "add --int8"),
    (["export", "runs/gru", "--int8", "--out", "m.onnx", "--data", "ylen.npz"], None, R, "ylen.npz"),
    # eval and compare
    (["eval", "missing.onnx"], None, R, "not found"),
    (["eval", "empty"], None, R, "'empty' is a folder, not a model file"),
    (["eval", "garbage.onnx"], None, R, "not a readable ONNX model"),
    (["eval", "plain.onnx"], None, R, "not an edgeseq model"),
    (["eval", "labels-str.onnx"], None, R, "edgeseq.labels"),
    (["eval", "labels-5.onnx"], None, R, "edgeseq.labels"),
    (["eval", "labels-json.onnx"], None, R, "edgeseq.labels"),
    (["eval", "state-shape.onnx"], None, R, "edgeseq.state"),
    (["eval", GRU, "--data", "ylen.npz"], None, R, "ylen.npz"),
    (["eval", GRU, "--data", "missing.npz"], None, R, "missing.npz"),
    (["eval", GRU, "--split", "dev"], None, U, "--split"),
    (["compare", GRU], None, U, "two"),
    (["compare", GRU, "missing.onnx"], None, R, "missing.onnx"),
    (["compare", GRU, "garbage.onnx"], None, R, "garbage.onnx"),
    # stream: input, readings, header, state file
    (["stream", GRU, "--input", "missing.csv"], None, U, "does not exist"),
    (["stream", GRU, "--input", "empty"], None, U, "is a directory"),
    (["stream", "missing.onnx"], GOOD, R, "not found"),
    (["stream", "labels-5.onnx"], GOOD, R, "edgeseq.labels"),
    (["stream", GRU], b"\xff\xfe\x00garbage\n" + GOOD.encode(), R, "input line 1: not UTF-8"),
    (["stream", GRU], GOOD + "1,2,3\n", R, "input line 2: 3 values"),
    (["stream", GRU], GOOD + "1,2,3,4,5,inf\n", R, "NaN or Inf"),
    (["stream", GRU], GOOD + "1,2,3,4,5,1e40\n", R, "beyond float32"),
    (["stream", GRU, "--on-bad", "skip"], "acc_x,acc_y\n" + GOOD, R, "lacks"),
    (["stream", GRU, "--on-bad", "skip"], "\ufeffacc_x,acc_y,acc_z,gyr_x,gyr_y,gyr_z,acc_x\n" + GOOD, R, "twice"),
    (["stream", GRU, "--on-bad", "skip"], "label,Label," + ",".join(FEATURES) + "\n" + GOOD, R,
     "the header names a label column 2 times"),
    (["stream", GRU], LABELLED + "2024-05-01T10:00:00Z,walk,1,2,x,4,5,6\n", R, "input line 2: non-numeric value 'x'"),
    (["stream", GRU], LABELLED + '"10:00, Monday",walk,1,2,3,4,5,nan\n', R, "input line 2: NaN or Inf"),
    (["stream", GRU], LABELLED + "2024-05-01T10:00:00Z,walk,1,2,3\n", R, "input line 2: 5 values, the header names 8"),
    (["stream", GRU, "--max-history", "0"], GOOD, U, "--max-history"),
    (["stream", GRU, "--state-file", "afile/s.state"], GOOD, U, "'afile' is a file, not a folder: choose another --state-file"),
    (["stream", GRU, "--state-file", "empty"], GOOD, U, "is a directory"),
    (["stream", GRU, "--save-every", "0"], GOOD, U, "--save-every"),
    (["stream", TR, "--max-history", "3", "--on-full", "error"], GOOD * 5, R, "history is full"),
    (["stream", GRU, "--provider", "tpu"], GOOD, U, "--provider"),
    # bench, report
    (["bench", "--repeats", "1"], None, U, "--repeats"),
    (["report", "--runs", "missing", "--out", "r"], None, U, "not a directory"),
    (["report", "--runs", "empty", "--out", "r"], None, U, "holds none of"),
    # firmware
    (["firmware", "targets", "--targets-file", "missing.json"], None, R, "not found"),
    (["firmware", "targets", "--targets-file", "zero-clock.json"], None, R, "clock_mhz"),
    (["firmware", "targets", "--targets-file", "text-flash.json"], None, R, "flash_kb"),
    (["firmware", "targets", "--targets-file", "neg-ram.json"], None, R, "sram_kb"),
    (["firmware", "targets", "--targets-file", "nan-mac.json"], None, R, "cycles_per_mac"),
    (["firmware", "targets", "--targets-file", "list-of-numbers.json"], None, R, "entry 1"),
    (["firmware", "targets", "--targets-file", "not-json.json"], None, R, "not valid JSON"),
    (["firmware", "targets", "--targets-file", "binary.csv"], None, R, "UTF-8"),
    (["firmware", "check", "missing.onnx", "--target", "nrf52840"], None, R, "not found"),
    (["firmware", "check", "garbage.onnx", "--target", "nrf52840"], None, R, "not a readable ONNX model"),
    (["firmware", "check", "plain.onnx", "--target", "nrf52840"], None, R, "not an edgeseq model"),
    (["firmware", "check", GRU, "--target", "nosuch"], None, U, "unknown target"),
    (["firmware", "check", GRU, "--target", "nrf52840", "--history", "5"], None, U, "growing cache"),
    (["firmware", "check", TR, "--target", "nrf52840", "--history", "0"], None, U, "at least 1"),
    (["firmware", "check", "tr0.onnx", "--target", "nrf52840", "--history", "2000000"], None, R, "longest history"),
    (["firmware", "check", Q, "--target", "mine", "--targets-file", "zero-clock.json"], None, R, "clock_mhz"),
    (["firmware", "simulate", "missing.onnx"], None, R, "not found"),
    (["firmware", "simulate", "plain.onnx"], None, R, "not an edgeseq model"),
    (["firmware", "simulate", GRU], None, R, "float model"),
    (["firmware", "simulate", Q, "--data", "ylen.npz"], None, R, "ylen.npz"),
    (["firmware", "emit", "missing.onnx", "--out", "c"], None, R, "not found"),
    (["firmware", "emit", "garbage.onnx", "--out", "c"], None, R, "not a readable ONNX model"),
    (["firmware", "emit", TR, "--out", "c"], None, R, "is a float model"),
    (["firmware", "emit", Q, "--out", "afile/c"], None, U, "'afile' is a file, not a folder: choose another --out"),
    # translate
    (["translate", "train", "--arch", "nope", "--out", "o"], None, U, "nope"),
    (["translate", "train", "--corpus", "missing.tsv", "--out", "o"], None, R, "missing.tsv"),
    (["translate", "train", "--corpus", "bad.tsv", "--out", "o"], None, R, "UTF-8"),
    (["translate", "export", "nope", "--out", "m"], None, R, "no translation checkpoint"),
    (["translate", "export", "garbage.pt", "--out", "m"], None, R, "not a readable checkpoint"),
    (["translate", "export", "runs/gru", "--out", "m"], None, R, "not a translation checkpoint"),
    (["translate", "bench", "nope"], None, R, "no translation checkpoint"),
    (["translate", "run", "nope", "Open"], None, R, "not found"),
    (["translate", "run", "mt", "Open"], None, R, "not valid UTF-8 JSON"),
    (["translate", "run", "mt2", "Open"], None, R, "outside the model directory"),
    (["translate", "run", "empty", "Open"], None, R, "lacks model.json"),
    (["translate", "run", "mt", "-"], b"Open\n\xff\xfe\n", R, "input line 2 is not UTF-8"),
    (["translate", "run", "mt", "Open", "--attention", "afile/a.png"], None, U, "is a file, not a folder"),
    (["translate", "run", "mt", "Open", "--attention", "empty"], None, U, "is a directory"),
    (["translate", "run", "mt", "Open", "--attention", "a.txt"], None, U, "must end in .png"),
    (["translate", "run", "mt", "Open", "--beam", "0"], None, U, "--beam"),
    (["translate", "eval", "nope"], None, R, "not found"),
    (["translate", "eval", "mt", "--corpus", "bad.tsv"], None, R, "UTF-8"),
    # click's own usage errors end in one line too
    (["nosuch"], None, U, "No such command"),
    (["stream"], None, U, "Missing argument"),
    (["eval", GRU, "--nope"], None, U, "No such option"),
]


def _id(case):
    return " ".join(str(a) for a in case[0])[:60]


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_every_command_gives_one_line_and_changes_nothing(kit, tmp_path, monkeypatch, case):
    args, stdin, code, fragment = case
    work = tmp_path / "w"
    work.mkdir()
    _setup(work, kit)
    monkeypatch.chdir(work)
    before = _tree(work)
    r = CliRunner().invoke(cli, args, input=stdin)
    assert isinstance(r.exception, SystemExit), f"{args}: {r.exception!r}\n{r.output}"
    assert r.exit_code == code, f"{args}: exit {r.exit_code}\n{r.output}"
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in r.output, r.output
    assert r.output.rstrip().endswith(errors[0]), r.output      # the error is the last thing said
    assert fragment in errors[0], f"{args}: {errors[0]!r} lacks {fragment!r}"
    assert "unexpected" not in errors[0], errors[0]
    assert _tree(work) == before, f"{args} changed files"


N_CASES = len(CASES)


# -- in a real process ---------------------------------------------------------------------

EDGESEQ = [sys.executable, "-m", "edgeseq"]


def _run(args, cwd, stdin=subprocess.DEVNULL, preexec=None, input_=None):
    return subprocess.run(EDGESEQ + args, cwd=cwd, stdin=None if input_ is not None else stdin,
                          input=input_, capture_output=True, preexec_fn=preexec, timeout=120)


def _one_error(r, code, fragment):
    err = r.stderr.decode()
    assert r.returncode == code, err
    lines = [l for l in err.splitlines() if l.strip()]
    assert "Traceback" not in err and lines[-1].startswith("Error:") and fragment in lines[-1], err


def test_closed_stdin_is_one_line(kit, tmp_path):
    _setup(tmp_path, kit)

    def close_stdin():
        os.close(0)
    _one_error(_run(["stream", GRU], tmp_path, preexec=close_stdin), U, "standard input is closed")
    _one_error(_run(["translate", "run", "mt", "-"], tmp_path, preexec=close_stdin), U, "standard input is closed")


def _small_disk():
    """A process whose files cannot grow past 4 KiB: writes fail as on a full disk."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def test_full_disk_is_one_line_and_keeps_the_old_files(kit, tmp_path):
    _setup(tmp_path, kit)
    shutil.copy(kit / "gru.onnx", tmp_path / "out.onnx")
    good = (tmp_path / "out.onnx").read_bytes()
    r = _run(["export", "runs/transformer", "--out", "out.onnx"], tmp_path, preexec=_small_disk)
    _one_error(r, R, "out.onnx")
    assert (tmp_path / "out.onnx").read_bytes() == good
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.onnx")]      # no temp file left

    r = _run(["stream", GRU, "--state-file", "s.state", "--save-every", "1"], tmp_path,
             input_=("0" * 5000 + "\n").encode() + GOOD.encode() * 3, preexec=_small_disk)
    assert r.returncode == 1, r.stderr.decode()
    assert "Traceback" not in r.stderr.decode()


def test_read_only_place_is_one_line(kit, tmp_path):
    _setup(tmp_path, kit)
    place = next((p for p in ("/proc/edgeseq-test", "/sys/edgeseq-test") if not os.access(os.path.dirname(p), os.W_OK)
                  or _unwritable(p)), None)
    if place is None:
        pytest.skip("no read-only folder on this machine")
    _one_error(_run(["export", "runs/gru", "--out", f"{place}/m.onnx"], tmp_path), R, place)
    folder = os.path.dirname(place)                  # exists, read-only: a run-time failure
    _one_error(_run(["stream", GRU, "--state-file", f"{folder}/s.state"], tmp_path, input_=GOOD.encode()), R, folder)
    _one_error(_run(["stream", GRU, "--state-file", f"{place}/s.state"], tmp_path, input_=GOOD.encode()), U,
               f"the folder '{place}' of --state-file does not exist; create it first")    # never made


def _unwritable(path) -> bool:
    try:
        with open(os.path.join(os.path.dirname(path), ".edgeseq-probe"), "wb"):
            pass
    except OSError:
        return True
    return False


def test_a_second_process_on_a_state_file_is_refused(kit, tmp_path):
    _setup(tmp_path, kit)
    first = subprocess.Popen(EDGESEQ + ["stream", GRU, "--state-file", "s.state"], cwd=tmp_path,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first.stdin.write(GOOD.encode())
        first.stdin.flush()
        first.stdout.readline()                     # the first process holds the state file now
        second = _run(["stream", GRU, "--state-file", "s.state"], tmp_path, input_=GOOD.encode())
        _one_error(second, R, "in use by another process")
    finally:
        first.stdin.close()
        first.wait(timeout=60)
    assert first.returncode == 0, first.stderr.read().decode()


# -- random bytes to the readers -------------------------------------------------------------

@pytest.fixture(scope="module")
def session(kit):
    from edgeseq.runtime import StreamSession
    return StreamSession(kit / "gru.onnx")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.binary(max_size=40), st.sampled_from([GOOD.encode(), b"\xef\xbb\xbf" + GOOD.encode(),
                                                                      b"1,2,3,4,5,6\r", b"acc_x,acc_y\n", b"\n",
                                                                      LABELLED.encode(),
                                                                      b'"t, 1",walk,1,2,3,4,5,6\n'])),
                max_size=12))
def test_random_bytes_to_the_stream_reader(session, chunks):
    """Any bytes: the reader raises only its own errors, skips what it rejects, and the state
    holds exactly the readings it accepted (the same as pushing only those)."""
    from edgeseq.runtime.stream import HeaderError, read_lines, stream_lines
    import io

    data = b"".join(chunks)
    session.reset()
    out, notes = [], []
    try:
        stats = stream_lines(session, read_lines(io.BytesIO(data)), on_bad="skip", echo=out.append, note=notes.append)
    except HeaderError:
        assert session.position[0] == 0                       # the header is the first line: nothing streamed
        return
    assert stats["readings"] == int(session.position[0])
    assert stats["readings"] == len(out) and stats["skipped"] == len(notes)   # stdout: one line per reading
    state = session.snapshot()["state"]
    assert all(np.isfinite(s).all() for s in state)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300), st.sampled_from([b"", b"sequence,label,acc_x,acc_y\n", b"\xef\xbb\xbfsequence,label,a\n"]))
def test_random_bytes_to_the_csv_data_reader(tmp_path_factory, body, head):
    """Any bytes as a CSV data file: a Dataset or a one-line DataError naming the file."""
    from edgeseq.data import load_dataset
    from edgeseq.errors import DataError

    path = tmp_path_factory.mktemp("csv") / "data.csv"
    path.write_bytes(head + body)
    try:
        ds = load_dataset(str(path))
    except DataError as e:
        assert "\n" not in str(e) and "data.csv" in str(e), str(e)
        return
    assert len(ds.train) > 0 and ds.train.X.dtype == np.float32


def test_case_count():
    """The note on the hardening issue quotes these counts."""
    assert N_CASES >= 100
