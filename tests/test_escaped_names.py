"""Names from a model file, a data file or the input never write to the terminal: a label, a
feature or column name, a group or a file name holding a terminal escape sequence, a line break,
NUL or a right-to-left override reaches stream's CSV and notes, eval's and compare's reports, the
Pi demo's status lines and every `Error:` line as its Python escape (`edgeseq.errors.printable`,
the one function for it), while letters of any script stay as they are. JSON keeps the exact
names, escaped by json.dumps.

A file or folder named on the command line (a model, --data, --out) is shown the same way in
what `train`, `export`, `firmware check`/`measure`/`emit` print. The escaping is unambiguous: a
backslash is escaped too (`\\\\`), so a name that holds the text `\\x1b` never looks like one
holding an ESC.

One tiny GRU (hidden 4, 1 epoch) is trained on `hostile.npz`, whose labels, features and groups
hold such characters, so its model file carries them in `edgeseq.labels` and `edgeseq.features`;
its run folder is kept for `export` and its static int8 export for `firmware`.
CliRunner runs with color=True, as on a terminal: click then passes escape sequences through
instead of stripping some of them, so the test sees what a terminal would get."""

import csv
import io
import json
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgeseq.cli import cli
from edgeseq.errors import DataError, printable

ROOT = Path(__file__).resolve().parent.parent
LABELS = ["Gehen\x1b[2J走る", "wa\x1b]0;pwned\x07lk\u202e", "ru\r\nn\x00\x7f\x85"]
SHOWN = {"Gehen\x1b[2J走る": "Gehen\\x1b[2J走る", "wa\x1b]0;pwned\x07lk\u202e": "wa\\x1b]0;pwned\\x07lk\\u202e",
         "ru\r\nn\x00\x7f\x85": "ru\\r\\nn\\x00\\x7f\\x85"}
FEATURES = ["gx", "g\x1b[31my", "gz\u2066x"]
GROUPS = ["s\x1b[1mA", "s\u202eB", "café"]
UNKNOWN = "zz\x1b]0;x\x07café"                     # a true label the model does not know
ODD = "q\\x1b\x1b[31m\x9b\u202e"     # in a file name: the text \x1b, then ESC, a C1 CSI and a right-to-left override
RAW = ("\x1b", "\x07", "\r", "\x00", "\x7f", "\x85", "\u202e", "\u2066")


def _safe(text: str) -> str:
    """`text` if nothing in it but line ends and printable characters reaches the terminal."""
    bad = sorted({c for c in text if c != "\n" and not c.isprintable()})
    assert not bad, f"raw {[hex(ord(c)) for c in bad]} in output:\n{text!r}"
    assert not any(c in text for c in RAW)
    return text


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """(root, the model, its training data) for a GRU whose names hold escape sequences; its run
    folder is root/run."""
    from edgeseq.data import load_dataset
    from edgeseq.train import TrainConfig, save_checkpoint, train
    from export import export_model
    root = tmp_path_factory.mktemp("hostile")
    rng = np.random.default_rng(0)

    def split(n):
        y = np.arange(n) % 3
        X = rng.standard_normal((n, 12, 3)).astype(np.float32)
        X[:, :, 0] += (y * 2.0 - 2.0)[:, None]
        return X, np.array(LABELS)[y], np.array(GROUPS)[np.arange(n) // 3 % 3]
    (X, y, g), (Xt, yt, gt) = split(18), split(9)
    data = root / "hostile.npz"
    np.savez(data, X_train=X, y_train=y, groups_train=g, X_test=Xt, y_test=yt, groups_test=gt,
             features=np.array(FEATURES))
    ds = load_dataset(str(data))
    assert sorted(ds.labels) == sorted(LABELS) and ds.features == FEATURES
    ckpt = train("gru", ds, TrainConfig(epochs=1, seed=0), {"hidden": 4}, progress=False)
    save_checkpoint(ckpt, root / "run")
    export_model(ckpt, root / "m.onnx")
    return root, root / "m.onnx", data


@pytest.fixture(scope="module")
def hostile_int8(hostile):
    """The hostile GRU's static int8 export (kept whatever its accuracy: one epoch of training)."""
    from edgeseq.train import load_checkpoint
    from export import export_int8
    root = hostile[0]
    export_int8(load_checkpoint(root / "run"), root / "q.onnx", "static", keep_anyway=True)
    return root / "q.onnx"


@pytest.fixture
def term(tmp_path, monkeypatch):
    """Invoke the CLI in this test's temp dir as a terminal would show it (escape sequences kept)."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    return lambda args, **kw: runner.invoke(cli, [str(a) for a in args], color=True, **kw)


def _readings(rows) -> str:
    """A CSV of readings whose header names the model's features and a `label` column (true
    labels without a line break: a line feed ends an input line whatever the quotes)."""
    head = ",".join(["label", *FEATURES])
    return "\n".join([head] + [f"{lab},{i * 0.3 - 1:.1f},0.1,-0.2" for i, lab in enumerate(rows)]) + "\n"


# -- the one function ---------------------------------------------------------------------------

@pytest.mark.parametrize("text,shown", [
    ("\x1b[2J", "\\x1b[2J"), ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"), ("a\rb\nc\td", "a\\rb\\nc\\td"),
    ("nul\x00del\x7f", "nul\\x00del\\x7f"), ("c1\x85\x9b31m", "c1\\x85\\x9b31m"),
    ("evil\u202egnp.exe", "evil\\u202egnp.exe"), ("\u2066iso\u2069", "\\u2066iso\\u2069"),
    ("zero\u200bwidth\ufeff", "zero\\u200bwidth\\ufeff"), ("line\u2028para\u2029", "line\\u2028para\\u2029"),
    ("no\xa0break", "no\\xa0break"), ("tag\U000e0041", "tag\\U000e0041"),
    ("Gehen", "Gehen"), ("走る", "走る"), ("café", "café"), ("cafe\u0301 ümlaut", "cafe\u0301 ümlaut"),
    ("Gehen\x1b[2J走る", "Gehen\\x1b[2J走る"), ("a b,c\"d\\x1b", "a b,c\"d\\\\x1b"), ("C:\\temp", "C:\\\\temp"),
])
def test_printable_escapes_controls_and_format_characters_and_keeps_letters(text, shown):
    assert printable(text) == shown


def test_printable_escapes_every_control_format_and_separator_character_and_no_letter():
    for cp in range(0x110000):
        c = chr(cp)
        cat = unicodedata.category(c)
        if cat in ("Cc", "Cf", "Zl", "Zp"):
            out = printable(c)
            assert out.startswith("\\") and out.isascii() and out.isprintable(), (hex(cp), out)
        elif cat[0] in "LMNPS" and c != "\\":
            assert printable(c) == c, hex(cp)
    assert printable("\\") == "\\\\"


TRICKY = ["x\\x1b", "x\x1b", "x\\\\x1b", "x\\\x1b", "\\", "\\\\", "a\\nb", "a\nb", "\\u202e", "\u202e",
          "\\x9b", "\x9b", "C:\\temp", "C:\temp", "\\U000e0041", "\U000e0041", "end\\", "", "x1b"]
PLAIN = ["Gehen", "走る", "café", "runs/gru", "models/gru-int8.onnx", "a b,c\"d'", "q_model.h"]


def _unescaped(shown: str) -> str:
    """The name `printable` showed as `shown`, read back as Python reads its escapes."""
    return shown.encode("latin-1", "backslashreplace").decode("unicode_escape")


def test_printable_is_unambiguous_and_leaves_plain_names_alone():
    """Two names never look alike (a backslash is escaped too), each reads back to itself, and
    `safe_text` leaves an escaped name as it is, so a line built from escaped names is safe
    without escaping them twice."""
    from edgeseq.errors import one_line, safe_text
    names = TRICKY + PLAIN + LABELS + FEATURES + GROUPS + [UNKNOWN, ODD]
    shown = [printable(n) for n in names]
    assert len(set(shown)) == len(set(names))
    for name, text in zip(names, shown):
        assert _unescaped(text) == name and text.isprintable(), (name, text)
        assert safe_text(text) == text and one_line(text) == text
    assert printable("x\\x1b") == "x\\\\x1b" != printable("x\x1b") == "x\\x1b"
    assert [printable(n) for n in PLAIN] == PLAIN
    assert safe_text("x\\x1b\x1b") == "x\\x1b\\x1b"           # controls escaped, a backslash kept


def test_printable_is_the_one_escaping_function():
    """No module keeps its own copy (two copies drift: one escaped `café` to `caf\\xe9`)."""
    own = [str(p.relative_to(ROOT)) for p in (ROOT / "edgeseq").rglob("*.py")
           if p.name != "errors.py" and ("def _printable" in p.read_text(encoding="utf-8")
                                         or "unicode_escape" in p.read_text(encoding="utf-8"))]
    assert own == []


def test_csv_line_escapes_each_cell_and_quotes_commas_and_quotes():
    from edgeseq.runtime.stream import csv_line
    assert csv_line(1, "ru\r\nn\x00", "0.5000") == "1,ru\\r\\nn\\x00,0.5000"
    assert csv_line(2, 'a,"b"\x1b[2J', "走る") == '2,"a,""b""\\x1b[2J",走る'
    assert next(csv.reader([csv_line(3, "wa\x1b]0;x\x07lk\u202e, y")])) == ["3", "wa\\x1b]0;x\\x07lk\\u202e, y"]
    assert csv_line(4, "a\\x1b", "a\x1b") == "4,a\\\\x1b,a\\x1b"         # a backslash in a label is not an ESC


# -- stream -------------------------------------------------------------------------------------

def test_stream_csv_and_stderr_show_names_escaped(hostile, term, tmp_path):
    _, model, _ = hostile
    rows = [LABELS[0], UNKNOWN, "", LABELS[1]]
    (tmp_path / "in.csv").write_text(_readings(rows), encoding="utf-8")
    state = "s\x1b[2J.state"
    r = term(["stream", model, "--input", "in.csv", "--state-file", state])
    assert r.exit_code == 0, r.output
    out = _safe(r.stdout).splitlines()
    assert len(out) == len(rows)
    for i, (line, true) in enumerate(zip(out, rows), start=1):
        n, label, prob, shown_true = next(csv.reader([line]))
        assert (n, shown_true) == (str(i), printable(true)) and label in SHOWN.values() and float(prob) > 0
    assert out[0].endswith(",Gehen\\x1b[2J走る") and out[1].endswith(",zz\\x1b]0;x\\x07café")
    err = [line for line in _safe(r.stderr).splitlines() if not line.startswith("note: ")]   # a backend note
    assert err[0].startswith("4 readings, 0 skipped; state ") and "; saved to s\\x1b[2J.state (" in err[0]
    assert err[-1] == ("not scored: 1 reading labelled 'zz\\x1b]0;x\\x07café' (1), which the model does not know; "
                       "1 reading without a label")


def test_stream_summary_names_the_known_labels_escaped(hostile, term, tmp_path):
    _, model, _ = hostile
    (tmp_path / "in.csv").write_text(_readings([UNKNOWN]), encoding="utf-8")
    r = term(["stream", model, "--input", "in.csv"])
    assert r.exit_code == 0, r.output
    line = next(x for x in _safe(r.stderr).splitlines() if x.startswith("true labels:"))
    assert all(shown in line for shown in SHOWN.values()), line


def test_stream_json_holds_the_exact_names_in_ascii(hostile, term, tmp_path):
    _, model, _ = hostile
    (tmp_path / "in.csv").write_text(_readings([LABELS[1], UNKNOWN]), encoding="utf-8")
    r = term(["stream", model, "--input", "in.csv", "--json"])
    assert r.exit_code == 0, r.output
    assert _safe(r.stdout).isascii()
    first, second = map(json.loads, r.stdout.splitlines())
    assert first["true"] == LABELS[1] and second["true"] == UNKNOWN
    assert set(first["probs"]) == set(LABELS) and first["label"] in LABELS


def test_stream_notes_and_errors_show_names_escaped(hostile, term, tmp_path):
    _, model, _ = hostile
    text = _readings([LABELS[0], LABELS[1]]).replace(",0.1,", ",x\x1b]0;T\x07走,", 1)
    (tmp_path / "in.csv").write_text(text, encoding="utf-8")
    r = term(["stream", model, "--input", "in.csv", "--on-bad", "skip"])
    assert r.exit_code == 0, r.output
    skipped = [line for line in _safe(r.stderr).splitlines() if line.startswith("line ")]
    assert skipped == ["line 2 skipped: non-numeric value 'x\\x1b]0;T\\x07走'"]
    (tmp_path / "other.csv").write_text("gx,h\x1b]0;T\x07y,gz\u2066x\n1,2,3\n", encoding="utf-8")
    r = term(["stream", model, "--input", "other.csv"])
    assert r.exit_code == 1
    assert _safe(r.output).splitlines()[-1] == (
        "Error: input line 1: the header ['gx', 'h\\x1b]0;T\\x07y', 'gz\\u2066x'] lacks ['g\\x1b[31my']; the "
        "model reads ['gx', 'g\\x1b[31my', 'gz\\u2066x']: name each of them once (any order) or drop the header line")


def test_stream_into_a_pipe_escapes_rather_than_strips(hostile, tmp_path):
    """Through a real pipe click strips some escape sequences (CSI) and passes others (OSC, BEL):
    the label read back would differ from the model's, and a `cat` of the file would obey the
    rest. Escaped, the CSV holds every label whole and nothing a terminal acts on."""
    _, model, _ = hostile
    (tmp_path / "in.csv").write_text(_readings(LABELS[:2]), encoding="utf-8")
    r = subprocess.run([str(Path(sys.executable).with_name("edgeseq")), "stream", str(model), "--input", "in.csv"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = list(csv.reader(_safe(r.stdout).splitlines()))
    assert [row[3] for row in rows] == [SHOWN[x] for x in LABELS[:2]]
    assert {row[1] for row in rows} <= set(SHOWN.values())


# -- eval and compare ---------------------------------------------------------------------------

def test_eval_report_shows_groups_and_names_escaped(hostile, term):
    _, model, _ = hostile
    r = term(["eval", model, "--backend", "onnxruntime"])
    assert r.exit_code == 0, r.output
    text = _safe(r.output)
    assert "per group: worst '" in text
    for g in GROUPS:
        assert f"'{printable(g)}' " in text
    r = term(["eval", model, "--backend", "onnxruntime", "--json"])
    assert r.exit_code == 0 and _safe(r.stdout).isascii()
    d = json.loads(r.stdout)
    assert d["labels"] == sorted(LABELS) and set(d["groups"]["per_group"]) == set(GROUPS)


def test_eval_errors_show_names_escaped(hostile, term, tmp_path):
    _, model, _ = hostile
    X = np.zeros((6, 12, 3), np.float32)
    for name, labels, features in (("labels", ["a\x1b]0;T\x07", "b\u202e"], FEATURES),
                                   ("chan", LABELS, ["gx", "h\x1b]0;T\x07", "gz"])):
        y = np.array(labels)[np.arange(6) % len(labels)]
        np.savez(tmp_path / f"{name}.npz", X_train=X, y_train=y, X_test=X, y_test=y, features=np.array(features))
    r = term(["eval", model, "--data", "labels.npz"])
    line = _safe(r.output).splitlines()[-1]
    assert r.exit_code == 1 and line.startswith("Error: data 'labels' has the labels a\\x1b]0;T\\x07, b\\u202e but "
                                                "the model predicts "), line
    assert "wa\\x1b]0;pwned\\x07lk\\u202e" in line and "Gehen\\x1b[2J走る" in line
    r = term(["eval", model, "--data", "chan.npz"])
    line = _safe(r.output).splitlines()[-1]
    assert r.exit_code == 1 and line.startswith("Error: data 'chan' has the channels gx, h\\x1b]0;T\\x07, gz but "
                                                "the model reads gx, g\\x1b[31my, gz\\u2066x"), line


def test_compare_table_shows_file_names_escaped(hostile, term, tmp_path):
    _, model, data = hostile
    odd = tmp_path / "m\x1b]0;pwned\x07.onnx"
    odd.write_bytes(Path(model).read_bytes())
    r = term(["compare", model, odd.name, "--data", data, "--readings", "20", "--rounds", "1",
              "--backend", "onnxruntime"])
    assert r.exit_code == 0, r.output
    assert "m\\x1b]0;pwned\\x07.onnx" in _safe(r.output)


# -- the Pi demo's status lines and error line --------------------------------------------------

def test_live_status_and_summary_lines_show_labels_escaped(hostile):
    from edgeseq.runtime import StreamSession
    from edgeseq.runtime.live import LineSource, run_live, summary_lines
    _, model, _ = hostile
    sess = StreamSession(str(model), backend="onnxruntime")
    out = []
    summary = run_live(sess, LineSource(io.BytesIO(_readings([LABELS[0], UNKNOWN, LABELS[1]]).encode())),
                       echo=out.append)
    assert len(out) == 3 and "(true Gehen\\x1b[2J走る)" in _safe(out[0]) and "(true zz\\x1b]0;x\\x07café)" in out[1]
    assert all(any(f" {shown} " in line for shown in SHOWN.values()) for line in out), out
    words = "\n".join(summary_lines(summary, sess.backend, sess.labels))
    assert "'zz\\x1b]0;x\\x07café' (1)" in _safe(words)


def test_an_example_scripts_error_line_shows_names_escaped(capsys):
    from edgeseq.errors import run_script

    def main():
        raise DataError("label 'wa\x1b]0;pwned\x07lk\u202e' is\nunknown")
    with pytest.raises(SystemExit) as e:
        run_script(main)
    assert e.value.code == 1
    assert _safe(capsys.readouterr().err) == "Error: label 'wa\\x1b]0;pwned\\x07lk\\u202e' is unknown\n"


# -- messages built from names before they reach the CLI ---------------------------------------

def test_data_mismatch_errors_are_one_line_with_names_escaped(tmp_path):
    """A channel or label name with a line break is escaped where the message is built: the
    `Error:` line (`one_line`) then shows `\\r\\n`, where it used to join the name with a space."""
    from edgeseq.data import CHANNELS_REMEDY, align_features, data_for_model
    from edgeseq.errors import one_line
    with pytest.raises(DataError) as e:
        align_features(["gx", "g\ny\x1b[2J"], ["gx", "gz"], "data 'd'")
    assert str(e.value) == (f"data 'd' has the channels gx, g\\ny\\x1b[2J but the model reads gx, gz (it lacks gz "
                            f"and has extra g\\ny\\x1b[2J); {CHANNELS_REMEDY}")
    with pytest.raises(DataError) as e:
        align_features(["f0", "f1"], ["a\r\nb", "c", "d"], "data 'd'")
    assert "(a\\r\\nb, c, d)" in str(e.value) and one_line(e.value) == str(e.value)

    X = np.zeros((4, 5, 3), np.float32)
    y = np.array(["ru\r\nn", "b"])[np.arange(4) % 2]
    np.savez(tmp_path / "d.npz", X_train=X, y_train=y, X_test=X, y_test=y, features=np.array(["gx", "gy", "gz"]))
    with pytest.raises(DataError) as e:
        data_for_model(str(tmp_path / "d.npz"), ["gx", "gy", "gz"], labels=["a", "b"])
    msg = _safe(str(e.value))
    assert "\n" not in msg and one_line(msg) == msg
    assert msg.startswith("data 'd' has the labels ") and "ru\\r\\nn" in msg
    assert " but the model predicts a, b (it does not know ru\\r\\nn); " in msg


def test_compare_table_measures_columns_on_the_escaped_names():
    """Each name takes the width it is shown at: every line of the table as long as the header's."""
    from edgeseq.errors import one_line, safe_text
    from edgeseq.report.compare import format_compare
    odd = "m\x1b]0;pwned\x07\n.onnx"
    cont = {"reading_accuracy": 0.9, "scored_readings": 10, "median_readings_to_follow": 3.0, "orders": 3,
            "readings_per_stream": 100, "grace": 5, "scored_share": 0.8}

    def model(path, twin):
        diff = None if twin is None else {"max_abs": 0.1, "max_rel": 0.01, "mean_abs": 0.01, "mean_rel": 0.001,
                                          "argmax_agreement": 1.0}
        return {"model": path, "quantization": "float", "backend": "onnxruntime", "bytes": 4000, "accuracy": 1.0,
                "continuous": cont, "vs_twin": diff, "twin_of": twin, "latency_us_median": 20.0,
                "latency_us_p99": 30.0}
    r = {"models": [model(f"models/{odd}", None), model("a.onnx", odd)], "test_sequences": 4, "data": "d\x1b[2J",
         "twins": "same settings", "streams": 1, "readings_per_stream": 10,
         "latency": {"what": "push", "rounds": 1, "readings_per_round": 10}}
    lines = format_compare(r).split("\n")
    table = [safe_text(line) for line in lines[:4]]          # as `edgeseq compare` prints each line
    assert len({len(line) for line in table}) == 1, "\n".join(table)
    assert _safe("\n".join(table)) == "\n".join(lines[:4])          # escaped already, before the widths
    assert table[2].startswith("m\\x1b]0;pwned\\x07\\n.onnx  ") and " m\\x1b]0;pwned\\x07\\n.onnx " in table[3]
    assert "test sequences of d\\x1b[2J, " in one_line(lines[5])


# -- file and folder names from the command line ------------------------------------------------

def _shows(r, *names) -> str:
    """r's output (stdout and stderr), checked safe and holding each name as `printable` shows it."""
    text = _safe(r.output)
    for name in names:
        assert printable(name) in text, (printable(name), text)
    return text


def test_train_shows_the_data_and_out_names_escaped(hostile, term, tmp_path, recwarn):
    """The result line, the progress lines and the training curve's title (matplotlib warns of
    each glyph it lacks, naming the character itself) show the names escaped."""
    data = tmp_path / f"d{ODD}.npz"
    data.write_bytes(hostile[2].read_bytes())
    out = Path("runs") / f"t{ODD}"
    r = term(["train", "--arch", "rnn", "--data", data.name, "--out", out, "--epochs", "1", "--set", "hidden=4"])
    assert r.exit_code == 0, r.output
    text = _shows(r, f"rnn on d{ODD}: test accuracy ", f"train rnn on d{ODD}: ", f"curve: {out}/training_curve.png")
    assert f" -> {printable(out / 'checkpoint.pt')}\n" in text and (tmp_path / out / "checkpoint.pt").is_file()
    assert not [str(w.message) for w in recwarn if not str(w.message).isprintable()]
    (tmp_path / "file").write_text("")
    r = term(["train", "--data", data.name, "--features", "gx", "--out", "file"])
    assert r.exit_code == 2 and f"--data '{printable(data.name)}' is not one" in _safe(r.output)


def test_export_shows_the_out_name_escaped(hostile, term):
    run = hostile[0] / "run"
    r = term(["export", run, "--out", f"ex{ODD}.onnx"])
    assert r.exit_code == 0, r.output
    assert _shows(r, f"ex{ODD}.onnx (").startswith(f"wrote {printable(f'ex{ODD}.onnx')} (")
    r = term(["export", run, "--int8", "--keep-anyway", "--out", f"q{ODD}.onnx"])
    assert r.exit_code == 0, r.output
    assert _shows(r, f"q{ODD}.onnx (").startswith(f"wrote {printable(f'q{ODD}.onnx')} (")


def test_firmware_check_and_emit_show_the_file_names_escaped(hostile_int8, term, tmp_path):
    model = tmp_path / f"m{ODD}.onnx"
    model.write_bytes(hostile_int8.read_bytes())
    r = term(["firmware", "check", model.name, "--target", "nrf52840"])
    assert r.exit_code in (0, 1) and _shows(r, f"m{ODD}.onnx (gru, ")
    r = term(["firmware", "emit", model.name, "--out", f"fw{ODD}", "--prefix", "q"])
    assert r.exit_code == 0, r.output
    assert _shows(r, f"fw{ODD}/q_model.h, ", f"fw{ODD}/q_model.c").startswith(f"wrote {printable(f'fw{ODD}')}/")
    assert (tmp_path / f"fw{ODD}" / "q_model.h").is_file()
    r = term(["firmware", "emit", model.name, "--out", "fw", "--prefix", f"p{ODD}"])
    assert r.exit_code == 2 and f"Error: prefix '{printable(f'p{ODD}')}' must be a C name" in _safe(r.output)
    r = term(["firmware", "check", f"gone{ODD}.onnx", "--target", "nrf52840"])
    assert r.exit_code == 1 and _safe(r.output).splitlines()[-1].startswith(
        f"Error: model file '{printable(f'gone{ODD}.onnx')}' not found; ")


def test_firmware_measure_shows_the_file_name_escaped(hostile_int8, term, tmp_path):
    pytest.importorskip("unicorn", reason="pip install unicorn (edgeseq[firmware])")
    pytest.importorskip("elftools", reason="pip install pyelftools (edgeseq[firmware])")
    from firmware_sim import toolchain
    try:
        toolchain.require_compiler(None)
    except Exception as e:                              # noqa: BLE001 - no cross compiler here
        pytest.skip(f"no cross compiler: {e}")
    model = tmp_path / f"m{ODD}.onnx"
    model.write_bytes(hostile_int8.read_bytes())
    r = term(["firmware", "measure", model.name, "--core", "cortex-m4", "--readings", "10"])
    assert r.exit_code == 0, r.output
    assert _shows(r, f"m{ODD}.onnx (gru, hidden 4) on an emulated cortex-m4 ")


def test_devices_name_the_fleet_folder_escaped(term):
    r = term(["devices", "list", "--fleet", f"fleet{ODD}"])
    assert r.exit_code == 2 and _shows(r, f"no fleet at fleet{ODD} (no such folder): ")
