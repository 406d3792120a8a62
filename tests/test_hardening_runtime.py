"""Hardening of the runtime, `edgeseq stream` and the Pi demo, one kind of bad input per test:
each ends in one `Error:` line (exit 1 at run time, 2 for a wrong request) or a typed error,
and loses nothing (no state, no file). Tiny untrained models, exported once per module."""

import csv
import io
import json
import os
import stat
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from edgeseq.cli import _writing, cli
from edgeseq.errors import ReadingError, UsageError, printable, run_script
from edgeseq.runtime import StreamSession, open_model
from edgeseq.runtime.live import SimSource, run_live
from edgeseq.runtime.session import MAX_HISTORY
from edgeseq.runtime.statefile import (MAGIC, StateFileError, load_state, lock_path, lock_state_file, read_state,
                                       resume_state, save_state)
from test_session_safety import F, same_state, tiny_checkpoint

pytestmark = pytest.mark.usefixtures("backend_suite")   # conftest: on both step backends

ROOT = Path(__file__).resolve().parents[1]
GOOD = "0.1,0.2,0.3\n"
TRIED = {}                                   # kind -> bad inputs tried (test_count_of_bad_inputs sums them)


def _tried(kind, n=1):
    TRIED[kind] = TRIED.get(kind, 0) + n


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> path: tiny gru, lstm and transformer; a gru with labels that need CSV quoting;
    a gru whose first channel's training mean is 3e38; a gru without normalization metadata."""
    from export.step import build_graph
    root = tmp_path_factory.mktemp("hard")
    out = {}

    def write(name, ckpt):
        proto, _, _ = build_graph(ckpt)
        path = root / f"{name}.onnx"
        onnx.save(proto, str(path))
        out[name] = path

    for arch in ("gru", "lstm", "transformer"):
        write(arch, tiny_checkpoint(arch))
    write("labels", {**tiny_checkpoint("gru"), "labels": ["left,right", 'say "hi"', "two\nlines", "plain"]})
    huge = tiny_checkpoint("gru")
    from edgeseq.models import build_model, make_config
    import torch
    mean, std = np.array([3e38, 0, 0], np.float32), np.ones(F, np.float32)
    torch.manual_seed(0)
    model = build_model("gru", make_config("gru", n_features=F, n_classes=4, hidden=8))
    model.norm.set(mean, std)
    huge.update(state_dict=model.state_dict(), normalization={"mean": mean.tolist(), "std": std.tolist()})
    write("huge-mean", huge)
    proto = onnx.load(str(out["gru"]))
    for prop in proto.metadata_props:
        if prop.key == "edgeseq.normalization":
            prop.value = "null"
    onnx.save(proto, str(root / "no-norm.onnx"))
    out["no-norm"] = root / "no-norm.onnx"
    return out


def _demo():
    from helpers import module_from_file
    return module_from_file("pi_sensor_demo", ROOT / "examples" / "pi_sensor_demo.py")


def run_demo(argv, capsys):
    """(exit code, stdout, stderr) of the Pi demo run as a script would be (run_script)."""
    demo = _demo()
    with pytest.raises(SystemExit) as e:
        run_script(lambda: demo.main(argv))
    out, err = capsys.readouterr()
    return e.value.code, out, err


def one_error(err: str, fragment: str):
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error:")]
    assert len(errors) == 1 and lines[-1] == errors[0] and "Traceback" not in err, err
    assert fragment in errors[0] and "unexpected" not in errors[0], (fragment, errors[0])


def invoke(args, stdin=None):
    r = CliRunner().invoke(cli, [str(a) for a in args], input=stdin)
    assert isinstance(r.exception, SystemExit) or r.exception is None, repr(r.exception)
    return r


def cli_error(args, code, fragment, stdin=None):
    r = invoke(args, stdin)
    assert r.exit_code == code, r.output
    one_error(r.stderr, fragment)
    return r


# -- 1. a symbolic link to the state file ----------------------------------------------------

def test_a_symlinked_state_file_is_locked_read_and_written_through_the_link(models, tmp_path, capsys):
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    real, link = real_dir / "g.state", tmp_path / "link.state"
    link.symlink_to(real)
    r = invoke(["stream", models["gru"], "--state-file", link], GOOD * 3)
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and read_state(real)[0]["readings"] == 3          # the link survives the save
    with lock_state_file(real):                              # another process holds the real file
        assert lock_path(real).exists() and not lock_path(link).exists()
        cli_error(["stream", models["gru"], "--state-file", link], 1, "in use by another process", GOOD)
        code, _, err = run_demo(["--model", str(models["gru"]), "--source", "sim:3", "--rate", "0",
                                 "--state-file", str(link)], capsys)
        assert code == 1
        one_error(err, "in use by another process")
    assert read_state(real)[0]["readings"] == 3
    # The Pi demo resumes through the link and saves to the real file; run_live alone does too.
    code, _, err = run_demo(["--model", str(models["gru"]), "--source", "sim:4", "--rate", "0",
                             "--state-file", str(link)], capsys)
    assert code == 0 and "resumed from" in err, err
    assert link.is_symlink() and read_state(real)[0]["readings"] == 7
    sess = StreamSession(models["gru"])
    run_live(sess, SimSource(2, F), state_file=str(link), echo=lambda s: None)
    assert link.is_symlink() and read_state(real)[0]["readings"] == 2
    _tried("symlink", 3)


# -- 2. labels that need CSV quoting ---------------------------------------------------------

def test_stream_output_is_csv_whatever_the_labels(models):
    rows = np.random.default_rng(0).standard_normal((40, F))
    text = "".join(",".join(f"{v:.4f}" for v in row) + "\n" for row in rows)
    r = invoke(["stream", models["labels"]], text)
    assert r.exit_code == 0, r.output
    records = list(csv.reader(io.StringIO(r.stdout)))
    assert len(records) == 40 and all(len(rec) == 3 for rec in records)
    assert [rec[0] for rec in records] == [str(i) for i in range(1, 41)]
    # commas and quotes are quoted; a control character is escaped (`printable`), never raw
    labels = {"left,right", 'say "hi"', "two\\nlines", "plain"}
    assert {rec[1] for rec in records} <= labels
    sess = StreamSession(models["labels"])
    assert [printable(sess.labels[int(sess.push(row[None].astype(np.float32)).argmax())]) for row in rows] == \
        [rec[1] for rec in records]
    _tried("csv quoting", 3)


# -- 3. finite readings that would overflow the normalisation --------------------------------

def test_a_reading_beyond_1e12_deviations_is_refused_and_the_state_kept(models):
    sess = StreamSession(models["huge-mean"])
    sess.push(np.array([[3e38, 0, 0]], np.float32))            # the training mean itself is fine
    before = sess.snapshot()
    for bad in ([-3e38, 0, 0], [3e38, 1e13, 0], [3e38, 0, -2e12]):
        with pytest.raises(ReadingError, match=r"stream 0 has .* in 'f\d', beyond 1e12 standard deviations of the "
                                               r"training data; .*stream state unchanged"):
            sess.push(np.array([bad], np.float32))
        assert same_state(sess.snapshot(), before)
    for _ in range(5):
        p = sess.push(np.array([[3e38, 0.5, -0.5]], np.float32))
        assert np.isfinite(p).all() and all(np.isfinite(a).all() for a in sess.snapshot()["state"])
    # A model with the usual normalization (mean 0..2, std 1): the bound is symmetric, one comparison.
    for arch in ("gru", "transformer"):
        s = StreamSession(models[arch], streams=2)
        s.push(np.zeros((2, F), np.float32))
        before = s.snapshot()
        with pytest.raises(ReadingError, match=r"stream 1 has 1e\+13 in 'f1', beyond 1e12 standard deviations"):
            s.push(np.array([[0, 0, 0], [0, 1e13, 0]], np.float32))
        with pytest.raises(ReadingError, match=r"stream 0 has -1e\+20 in 'f0'"):
            s.push([[-1e20, 0, 0], [0, 0, 0]])
        with pytest.raises(ReadingError, match=r"stream 0 has nan in 'f2'; drop or repair it"):
            s.push(np.array([[0, 0, np.nan], [0, 0, 0]], np.float32))
        assert same_state(s.snapshot(), before)
        assert np.isfinite(s.push(np.full((2, F), 9e11, np.float32))).all()
    plain = StreamSession(models["no-norm"])
    with pytest.raises(ReadingError, match="beyond float32 max / 4"):
        plain.push(np.array([[1e38, 0, 0]], np.float32))
    assert np.array_equal(plain.position, [0])
    # Through the command: one line, exit 1.
    cli_error(["stream", models["gru"]], 1, "input line 2: reading for stream 0 has 1e+15 in 'f1', beyond 1e12",
              GOOD + "0,1e15,0\n")
    _tried("reading range", 11)


def poisoned(src, dst, at=100.0, scale=0.0):
    """Model `src` rewritten so that a stream's logits come out NaN when its reading's f0 is
    above `at` (log of a negative number, times `scale`, added to the logits): a step the
    reading check lets through but the model cannot take. With scale 1, f0 == at gives -Inf."""
    from onnx import TensorProto, helper
    m = onnx.load(str(src))
    g = m.graph
    for node in g.node:
        node.input[:] = ["logits_raw" if i == "logits" else i for i in node.input]
        node.output[:] = ["logits_raw" if o == "logits" else o for o in node.output]
    g.initializer.extend([helper.make_tensor("poison_at", TensorProto.FLOAT, [], [at]),
                          helper.make_tensor("poison_i", TensorProto.INT64, [1], [0]),
                          helper.make_tensor("poison_0", TensorProto.FLOAT, [], [scale])])
    g.node.extend([helper.make_node("Gather", ["reading", "poison_i"], ["poison_f0"], axis=1),
                   helper.make_node("Sub", ["poison_at", "poison_f0"], ["poison_d"]),
                   helper.make_node("Log", ["poison_d"], ["poison_log"]),
                   helper.make_node("Mul", ["poison_log", "poison_0"], ["poison_nan"]),
                   helper.make_node("Add", ["logits_raw", "poison_nan"], ["logits"])])
    onnx.save(m, str(dst))
    return dst


@pytest.mark.parametrize("arch", ["gru", "lstm", "transformer"])
def test_a_step_with_nan_logits_is_not_adopted(models, tmp_path, arch):
    """The safety net: a reading the check lets through but that gives NaN logits is refused,
    and the old state is kept (the ping-pong bank is not flipped; the cache is not replaced)."""
    sess = StreamSession(poisoned(models[arch], tmp_path / "p.onnx"), streams=2)
    ok = np.zeros((2, F), np.float32)
    sess.push(ok)
    before = sess.snapshot()
    bad = ok.copy()
    bad[1, 0] = 200.0
    with pytest.raises(ReadingError, match="the model gave NaN or Inf from this reading.*stream state unchanged"):
        sess.push(bad)
    assert same_state(sess.snapshot(), before) and sess.history == (1 if sess.growing else 0)
    ref = StreamSession(models[arch], streams=2, backend=sess.backend)
    ref.push(ok)
    assert np.array_equal(sess.push(ok), ref.push(ok))        # it runs on as if the bad reading never came
    _tried("nan logits")


@pytest.mark.parametrize("arch", ["gru", "transformer"])
def test_without_the_native_extension_the_checks_run_in_numpy(models, tmp_path, arch, monkeypatch):
    """Where the C extension was not built: auto runs onnxruntime, native says how to build it,
    and the reading check and the NaN safety net (numpy then) refuse the same things."""
    from edgeseq.runtime import native
    monkeypatch.setattr(native, "_ext", None)
    monkeypatch.setattr(native, "_WHY", "the native step extension (edgeseq.runtime.native._es_native) is not "
                                        "built; build it with `pip install -e .` where a C compiler is installed")
    monkeypatch.delenv("EDGESEQ_BACKEND", raising=False)
    with pytest.raises(UsageError, match="backend 'native' cannot run .*not built; build it with"):
        StreamSession(models[arch], backend="native")
    sess = StreamSession(poisoned(models[arch], tmp_path / "p.onnx"), streams=2)
    assert sess.backend == "onnxruntime" and sess._gate is None
    ok = np.zeros((2, F), np.float32)
    sess.push(ok)
    before = sess.snapshot()
    for value, why in ((np.nan, "drop or repair it"), (1e30, "beyond 1e12 standard deviations")):
        bad = ok.copy()
        bad[1, 2] = value
        with pytest.raises(ReadingError, match=why):
            sess.push(bad)
    bad = ok.copy()
    bad[1, 0] = 200.0
    with pytest.raises(ReadingError, match="the model gave NaN or Inf from this reading"):
        sess.push(bad)
    assert same_state(sess.snapshot(), before)


def test_inf_logits_through_the_command_are_one_line_and_no_warning(models, tmp_path):
    """-Inf logits make the net's dot product NaN, which numpy would report as a RuntimeWarning
    on stderr: in a real process the command still says exactly one line."""
    import subprocess
    import sys
    model = poisoned(models["gru"], tmp_path / "inf.onnx", scale=1.0)
    sess = StreamSession(model)
    with pytest.raises(ReadingError, match="NaN or Inf"):
        sess.push(np.array([[100.0, 0, 0]], np.float32))                  # log(0) = -Inf
    r = subprocess.run([sys.executable, "-m", "edgeseq", "stream", str(model), "--state-file", "s.state"],
                       input=GOOD + "100,0,0\n", capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 1
    one_error(r.stderr, "input line 2: the model gave NaN or Inf from this reading")
    assert "Warning" not in r.stderr and read_state(tmp_path / "s.state")[0]["readings"] == 1
    _tried("nan logits")


@pytest.mark.parametrize("arch", ["gru", "transformer"])
def test_per_stream_sessions_take_back_every_stream_when_one_gives_nan(models, tmp_path, arch):
    path = poisoned(models[arch], tmp_path / "p.onnx")
    session, meta = open_model(path)
    sess = StreamSession.__new__(StreamSession)             # as a dynamic int8 model runs: one call per stream
    sess._setup(session, meta, str(path), 3, "cpu", None, "slide", each=True)
    ok = np.zeros((3, F), np.float32)
    sess.push(ok)
    before = sess.snapshot()
    bad = ok.copy()
    bad[2, 0] = 200.0                                        # the last stream fails after two have run
    with pytest.raises(ReadingError, match="NaN or Inf for stream 2"):
        sess.push(bad)
    assert same_state(sess.snapshot(), before) and sess.history == (1 if sess.growing else 0)
    _tried("nan logits per stream")


# -- 4. an unusable state file is moved aside, never destroyed -------------------------------

def test_another_models_state_file_is_moved_aside_not_overwritten(models, tmp_path, capsys):
    state = tmp_path / "other.state"
    assert invoke(["stream", models["lstm"], "--state-file", state], GOOD * 2).exit_code == 0
    lstm_bytes = state.read_bytes()
    r = invoke(["stream", models["gru"], "--state-file", state], GOOD)
    assert r.exit_code == 0, r.output
    notes = [line for line in r.stderr.splitlines() if "rejected" in line]
    assert len(notes) == 1 and "written for another model" in notes[0] and \
        f"moved it to '{tmp_path / 'other.state.rejected'}' and starting fresh" in notes[0], r.stderr
    assert (tmp_path / "other.state.rejected").read_bytes() == lstm_bytes
    assert read_state(state)[0]["readings"] == 1                           # the gru's own, fresh
    # Corrupt, then bad values: .rejected.1, .rejected.2; nothing is replaced.
    state.write_bytes(b"EDGESEQ-STATE 1\n{not json\n")
    corrupt = state.read_bytes()
    assert invoke(["stream", models["gru"], "--state-file", state], GOOD).exit_code == 0
    assert (tmp_path / "other.state.rejected.1").read_bytes() == corrupt
    sess = StreamSession(models["gru"])
    sess.push(np.zeros((1, F), np.float32))
    save_state(state, sess, 1)
    head, arrays = read_state(state)
    arrays["state_0"][0, 0] = np.nan
    _rewrite(state, head, arrays)
    nan_file = state.read_bytes()
    code, _, err = run_demo(["--model", str(models["gru"]), "--source", "sim:2", "--rate", "0",
                             "--state-file", str(state)], capsys)
    assert code == 0 and "NaN or Inf" in err and "other.state.rejected.2" in err, err
    assert (tmp_path / "other.state.rejected.2").read_bytes() == nan_file
    assert (tmp_path / "other.state.rejected").read_bytes() == lstm_bytes
    assert read_state(state)[0]["readings"] == 2
    # resume_state is the one place both use: it says where the file went.
    notes = []
    head, arrays = read_state(state)
    arrays["state_0"][0, 0] = np.inf
    _rewrite(state, head, arrays)
    assert resume_state(state, StreamSession(models["gru"]), note=notes.append) == 0
    assert len(notes) == 1 and notes[0].endswith("moved it to '" + str(tmp_path / "other.state.rejected.3") +
                                                 "' and starting fresh") and "delete it" not in notes[0]
    # A file edgeseq never wrote (no state header) is not its to move: refused, left as it is.
    state.write_bytes(b"garbage")
    with pytest.raises(StateFileError, match="not an edgeseq state file .* left as it is"):
        resume_state(state, StreamSession(models["gru"]), note=notes.append)
    assert state.read_bytes() == b"garbage" and not (tmp_path / "other.state.rejected.4").exists()
    _tried("unusable state file", 5)


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _write(path, header, payload):
    import hashlib
    header = {**header, "payload_sha256": hashlib.sha256(payload).hexdigest()}
    path.write_bytes(MAGIC + json.dumps(header).encode() + b"\n" + payload)


def _rewrite(path, header, arrays):
    _write(path, header, _npz(**arrays))


# -- 5. the Pi demo's options and sources ----------------------------------------------------

DEMO_USAGE = [
    (["--source", "sim:abc"], "sim:N or sim:N:bad"),
    (["--source", "sim:-5"], "sim:N or sim:N:bad"),
    (["--source", "sim:0"], "sim:N or sim:N:bad"),
    (["--source", "sim:5:worse"], "sim:N or sim:N:bad"),
    (["--source", "python:os:system"], "is a builtin_function_or_method, not a class"),
    (["--source", "python:os:path"], "is a module, not a class"),
    (["--source", "python:collections:OrderedDict"], "has no read() method"),
    (["--source", "python:nosuch_module_x:IMU"], "cannot load source python:nosuch_module_x:IMU"),
    (["--source", "python:os"], "must be python:module:Class"),
    (["--source", "python::X"], "must be python:module:Class"),
    (["--source", "python:fractions:Fraction.limit_denominator"], "not a class"),
    (["--source", "serial:loop://@abc"], "baud 'abc' is not a whole number"),
    (["--source", "serial:loop://@0"], "baud '0' is not a whole number"),
    (["--source", "serial:@9600"], "names no port"),
    (["--source", "usb"], "unknown source 'usb'"),
    (["--rate", "inf"], "not a finite number"),
    (["--rate", "nan"], "not a finite number"),
    (["--rate", "1e-300"], "--rate must be 0 (unpaced) or from 1e-06 to 1e+06"),
    (["--rate", "1e9"], "--rate must be 0"),
    (["--rate", "-1"], "is below 0"),
    (["--rate", "fast"], "'fast' is not a number"),
    (["--save-every", "0"], "is below 1"),
    (["--print-every", "1.5"], "'1.5' is not a whole number"),
    (["--max-readings", "abc"], "not a whole number"),
    (["--max-history", "5"], "applies to the transformer only"),
    (["--max-history", "99999999999999999999"], "is above 1,048,576"),
    (["--on-bad", "ignore"], "invalid choice"),
    (["--nosuch"], "unrecognized arguments: --nosuch"),
    (["--state-file", ""], "--state-file is empty"),
]


@pytest.mark.parametrize("args,fragment", DEMO_USAGE, ids=[" ".join(a) for a, _ in DEMO_USAGE])
def test_every_bad_demo_option_is_one_usage_line(models, tmp_path, capsys, monkeypatch, args, fragment):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_demo(["--model", str(models["gru"]), "--rate", "0", *args], capsys)
    assert code == 2, err
    one_error(err, fragment)
    assert list(tmp_path.iterdir()) == []
    _tried("demo option")


def test_demo_argparse_errors_are_one_line(capsys):
    code, _, err = run_demo([], capsys)
    assert code == 2
    one_error(err, "the following arguments are required: --model (see --help)")
    _tried("demo option")


def test_a_driver_that_fails_is_one_runtime_line_and_the_state_is_saved(models, tmp_path, capsys, monkeypatch):
    (tmp_path / "flaky.py").write_text(
        "class Boom:\n    def __init__(self):\n        raise OSError('no I2C bus')\n    def read(self):\n        pass\n"
        "class Flaky:\n    n = 0\n    def read(self):\n        self.n += 1\n"
        "        if self.n > 3:\n            raise RuntimeError('bus glitch')\n        return [0.1, 0.2, 0.3]\n"
        "class Args:\n    def __init__(self, bus):\n        pass\n    def read(self):\n        pass\n"
        "class Odd:\n    n = 0\n    def read(self):\n        self.n += 1\n"
        "        odd = [[1, None, 3], {'a': 1}, [1j, 2, 3], [True, False, True], 'x,1,2', [1.0, 2.0, 3.0]]\n"
        "        return odd[self.n - 1] if self.n <= 6 else None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    base = ["--model", str(models["gru"]), "--rate", "0"]
    code, _, err = run_demo(base + ["--source", "python:flaky:Boom"], capsys)
    assert code == 1
    one_error(err, "source python:flaky:Boom failed to start (OSError: no I2C bus)")
    code, _, err = run_demo(base + ["--source", "python:flaky:Args"], capsys)
    assert code == 2
    one_error(err, "cannot construct source python:flaky:Args with no arguments")
    state = tmp_path / "f.state"
    code, _, err = run_demo(base + ["--source", "python:flaky:Flaky", "--state-file", str(state)], capsys)
    assert code == 1
    one_error(err, "source python:flaky:Flaky failed while reading (RuntimeError: bus glitch)")
    assert read_state(state)[0]["readings"] == 3
    # Readings a driver returns that are not real numbers are bad readings: counted and skipped.
    code, out, err = run_demo(base + ["--source", "python:flaky:Odd", "--json"], capsys)
    assert code == 0, err
    summary = json.loads(out.splitlines()[-1])["summary"]
    assert summary["readings"] == 1 and sum(summary["bad"].values()) == 5, summary
    _tried("driver", 8)


# -- 6. readings and settings of the wrong type ----------------------------------------------

def test_complex_boolean_and_object_readings_and_bad_settings_are_refused(models):
    sess = StreamSession(models["gru"], streams=2)
    sess.push(np.zeros((2, F), np.float32))
    before = sess.snapshot()
    bad = [(np.full((2, F), 1 + 2j), "complex numbers"), (np.ones((2, F), bool), "true/false values"),
           ([[1, 2, None], [1, 2, 3]], "Python objects"), ([["1", "2", "3"], ["1", "2", "3"]], "text"),
           ([[1, 2], [1, 2, 3]], "not a rectangular array"), ([[10 ** 40, 0, 0], [0, 0, 0]], "Python objects"),
           ([[1e300, 0, 0], [0, 0, 0]], "has 1e+300 in 'f0'")]
    for readings, fragment in bad:
        with pytest.raises(ReadingError, match="stream state unchanged") as e:
            sess.push(readings)
        assert fragment in str(e.value), (fragment, str(e.value))
        assert same_state(sess.snapshot(), before)
    with pytest.raises(ReadingError, match="complex"):
        sess.check_reading(np.zeros((2, F), np.complex64))
    settings = [dict(max_history=1.5), dict(max_history=True), dict(max_history=-1), dict(max_history="5"),
                dict(max_history=MAX_HISTORY + 1), dict(streams=1.5), dict(streams=True), dict(streams=0),
                dict(streams="2"), dict(streams=np.bool_(True)), dict(threads=True), dict(threads=-1),
                dict(on_full=["slide"]), dict(on_full="drop")]
    for kw in settings:
        with pytest.raises(UsageError):
            StreamSession(models["transformer"], **kw)
    assert StreamSession(models["transformer"], max_history=np.int64(4)).max_history == 4
    _tried("reading type", len(bad) + 1)
    _tried("session setting", len(settings))


# -- 7. forged state files are refused from their headers ------------------------------------

def test_a_forged_state_file_is_refused_before_anything_inflates(models, tmp_path):
    sess = StreamSession(models["transformer"])
    sess.push(np.zeros((1, F), np.float32))
    path = tmp_path / "t.state"
    header = save_state(path, sess, 1)
    head, arrays = read_state(path)
    before = sess.snapshot()

    def member(name, shape, dtype="<f8", data=b"", compress=zipfile.ZIP_STORED):
        npy = io.BytesIO()
        np.lib.format.write_array_header_1_0(npy, {"descr": dtype, "fortran_order": False, "shape": shape})
        return name, npy.getvalue() + data, compress

    def payload(*members):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for name, body, compress in members:
                z.writestr(f"{name}.npy", body, compress_type=compress)
        return buf.getvalue()

    s0 = arrays["state_0"]
    big = (1, s0.shape[1], 1 << 28, s0.shape[3])                # 2 GiB and more declared, a few bytes held
    rest = [member(k, v.shape, v.dtype.str, v.tobytes()) for k, v in arrays.items() if k != "state_0"]
    zeros = np.zeros((1, 1 << 17), np.float64).tobytes()        # 1 MiB that deflates to a kilobyte
    cases = [
        ("huge history, few bytes", payload(member("state_0", big), *rest), "does not fit this model"),
        ("declared more than held", payload(member("state_0", s0.shape, "<f4", b"\0" * 8), *rest), "but holds"),
        ("compressed member", payload(member("state_0", (1, 1 << 28), "<f8", zeros, zipfile.ZIP_DEFLATED), *rest),
         "compressed"),
        ("wrong fixed axis", payload(member("state_0", (1, 99, 1, s0.shape[3]), "<f4", b"\0" * 4 * 99 * s0.shape[3]),
                                     *rest), "does not fit this model"),
        ("object dtype", payload(member("state_0", s0.shape, "|O"), *rest), "dtype object"),
        ("npy version 3", payload(("state_0", b"\x93NUMPY\x03\x00" + b"\0" * 20, zipfile.ZIP_STORED), *rest),
         "state_0"),
    ]
    tracemalloc.start()
    for name, body, fragment in cases:
        _write(path, {k: v for k, v in header.items() if k != "payload_sha256"}, body)
        with pytest.raises(StateFileError) as e:
            load_state(path, sess)
        assert fragment in str(e.value) and "\n" not in str(e.value), (name, str(e.value))
        assert same_state(sess.snapshot(), before), name
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 32 << 20, f"refusing took {peak / 2**20:.0f} MiB"
    # A file larger than any state of this model is refused before it is read.
    path.write_bytes(MAGIC + b"{}\n" + b"\0" * (8 << 20))
    with pytest.raises(StateFileError, match=r"is 8,388,627 bytes, more than a state of this model can take"):
        load_state(path, StreamSession(models["gru"]))
    # Through the command: moved aside, a fresh start, nothing lost.
    forged = path.read_bytes()
    r = invoke(["stream", models["gru"], "--state-file", path], GOOD)
    assert r.exit_code == 0 and (tmp_path / "t.state.rejected").read_bytes() == forged
    _tried("forged state file", len(cases) + 1)


# -- 8. options that make no sense for the model, NaN floats, a history past the cap ----------

CLI_USAGE = [
    (["stream", "{gru}", "--max-history", "100"], "--max-history) applies to the transformer only; a gru model's "
                                                  "recurrent state is fixed"),
    (["stream", "{transformer}", "--max-history", "2000000"], "beyond 1,048,576"),
    (["stream", "{transformer}", "--max-history", "1.5"], "not a whole number"),
    (["stream", "{transformer}", "--max-history", "+-5"], "not a whole number"),
    (["export", "runs/x", "--out", "m.onnx", "--max-history", "99999999999999999999"], "beyond 1,048,576"),
    (["export", "runs/x", "--out", "m.onnx", "--max-history", "0"], "at least 1"),
    (["export", "runs/x", "--out", "m.onnx", "--int8", "--max-error", "nan"], "'nan' is not a finite number"),
    (["export", "runs/x", "--out", "m.onnx", "--int8", "--max-error", "inf"], "'inf' is not a finite number"),
    (["export", "runs/x", "--out", "m.onnx", "--int8", "--max-error", "-1"], "-1 is not >= 0"),
    (["export", "runs/x", "--out", "m.onnx", "--int8", "--max-accuracy-drop", "-inf"], "not a finite number"),
    (["export", "runs/x", "--out", "m.onnx", "--int8", "--max-error", "1e300"], "1e+300 is not >= 0 and <= 1"),
    (["export", "runs/x", "--out", "m.onnx", "--int8", "--max-accuracy-drop", "1e300"], "1e+300 is not >= 0 and <= 1"),
    (["export", "runs/x", "--out", "m.onnx", "--int8", "--max-accuracy-drop", "1.5"], "1.5 is not >= 0 and <= 1"),
    (["train", "--task", "regress", "--out", "o", "--persistence-lag", "-1"], "-1 is not in the range x>=1"),
    (["stream", "{gru}", "--state-file", "nodir/sub/x.state"], "the folder 'nodir/sub' of --state-file does not "
                                                               "exist; create it first"),
    (["translate", "run", "mt", "Open", "--alpha", "nan"], "'nan' is not a finite number"),
    (["translate", "run", "mt", "Open", "--alpha", "abc"], "'abc' is not a number"),
    (["train", "--out", "o", "--lr", "nan"], "'nan' is not a finite number"),
    (["train", "--out", "o", "--lr", "0"], "0 is not > 0"),
    (["train", "--out", "o", "--seed", "99999999999999999999"], "--seed"),
    (["translate", "train", "--out", "o", "--lr", "inf"], "not a finite number"),
    (["firmware", "check", "{gru}", "--target", "nrf52840", "--cycles-per-mac", "nan"], "not a finite number"),
]


@pytest.mark.parametrize("args,fragment", CLI_USAGE, ids=[" ".join(a)[:50] for a, _ in CLI_USAGE])
def test_every_nonsense_option_is_a_usage_error(models, tmp_path, monkeypatch, args, fragment):
    monkeypatch.chdir(tmp_path)
    args = [a.format(**{k: str(v) for k, v in models.items()}) for a in args]
    cli_error(args, 2, fragment, GOOD)
    assert list(tmp_path.iterdir()) == []
    _tried("cli option")


def test_max_history_on_a_fixed_state_model_is_refused_by_the_session(models):
    from edgeseq.cli import MAX_HISTORY as CLI_MAX_HISTORY
    assert CLI_MAX_HISTORY == MAX_HISTORY == 1 << 20                   # export/step.py's Dim("history") max
    for arch in ("gru", "lstm"):
        with pytest.raises(UsageError, match="applies to the transformer only"):
            StreamSession(models[arch], max_history=100)
    _tried("session max_history", 2)


# -- 9. a file where a folder should be ------------------------------------------------------

def test_a_file_in_the_attention_path_is_named_as_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "afile").write_text("x")
    (tmp_path / "afile").write_text("x")
    for path, named in (("x/afile/a.png", "x/afile"), ("afile/sub/a.png", "afile"), ("afile/a.png", "afile")):
        cli_error(["translate", "run", "mt", "Open", "--attention", path], 2,
                  f"--attention '{path}': '{named}' is a file, not a folder")
    cli_error(["translate", "run", "mt", "Open", "--attention", "nodir/a.png"], 2, "folder 'nodir' does not exist")
    _tried("attention path", 4)


# -- 10. a save keeps the file's permissions -------------------------------------------------

def test_a_save_keeps_the_mode_and_a_new_file_follows_the_umask(models, tmp_path):
    sess = StreamSession(models["gru"])
    old = os.umask(0o027)
    try:
        save_state(tmp_path / "new.state", sess, 0)
        assert stat.S_IMODE(os.stat(tmp_path / "new.state").st_mode) == 0o640
    finally:
        os.umask(old)
    path = tmp_path / "kept.state"
    save_state(path, sess, 0)
    os.chmod(path, 0o604)
    r = invoke(["stream", models["gru"], "--state-file", path], GOOD)
    assert r.exit_code == 0 and stat.S_IMODE(os.stat(path).st_mode) == 0o604
    link = tmp_path / "link.state"
    link.symlink_to(path)
    save_state(link, sess, 1)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o604 and link.is_symlink()
    _tried("state file mode", 3)


# -- 11. an error while writing names the file asked for, not its temporary ------------------

def test_an_error_on_a_temporary_file_names_the_target(models, tmp_path, monkeypatch):
    for filename, target, shown in (
            ("/proc/.x.onnx.4242.k3j9x_a1.tmp", "/proc/x.onnx", "/proc/x.onnx"),
            ("out/.m.onnx.4242.w0rk.tmp/float.onnx", "out/m.onnx", "out/m.onnx"),
            (None, "s.state", "s.state"),
            ("/etc/other.tmp", "s.state", "/etc/other.tmp"),
            ("/x/.m.onnx.tmp", "m.onnx", "/x/.m.onnx.tmp")):
        with pytest.raises(OSError) as e:
            with _writing(target):
                raise OSError(28, "No space left on device", filename)
        assert e.value.filename == shown
    monkeypatch.chdir(tmp_path)
    real = os.replace

    def full(src, dst):
        if str(src).endswith(".tmp"):
            raise OSError(28, "No space left on device", str(src))
        return real(src, dst)
    monkeypatch.setattr(os, "replace", full)
    r = cli_error(["stream", models["gru"], "--state-file", "s.state"], 1,
                  "No space left on device: 's.state'; free some space", GOOD)
    assert ".tmp" not in r.stderr and not list(tmp_path.iterdir())
    _tried("write error", 5)


def test_count_of_bad_inputs():
    """Prints the count the report quotes (after the tests above, in file order; -s shows it)."""
    print(f"bad inputs tried: {sum(TRIED.values())} ({TRIED})")
