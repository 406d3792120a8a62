"""Live sensor streaming: the Pi demo without torch, kill-and-resume equality, atomic state
files, every kind of bad reading, serial and plugin sources, and the JSON lines format."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeseq.errors import ReadingError
from edgeseq.runtime import StreamSession
from edgeseq.runtime.live import LineSource, SimSource, open_source, run_live
from edgeseq.runtime.statefile import StateFileError, load_state, read_state, save_state
from helpers import run_without_torch

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "pi_sensor_demo.py"
LINE_KEYS = {"reading", "label", "prob", "true", "latency_us", "median_us", "p99_us", "state_bytes", "late", "dropped",
             "bad"}


def test_demo_runs_without_torch_on_the_replay_source(int8, tmp_path):
    model = int8("gru", "static")[0]
    out = run_without_torch(f"""
        import contextlib, io, json, runpy, sys
        buf = io.StringIO()
        sys.argv = ["pi_sensor_demo.py", "--model", {str(model)!r}, "--source", "replay:basicmotions", "--rate", "0",
                    "--max-readings", "300", "--print-every", "50", "--json"]
        with contextlib.redirect_stdout(buf):
            try:
                runpy.run_path({str(DEMO)!r}, run_name="__main__")
            except SystemExit as e:
                assert e.code == 0, e.code
        lines = [json.loads(l) for l in buf.getvalue().splitlines()]
        assert [l["reading"] for l in lines[:-1]] == [50, 100, 150, 200, 250, 300], lines
        assert set(lines[0]) == {LINE_KEYS!r} and lines[-1]["summary"]["readings"] == 300
        print("OK")
    """, tmp_path)
    assert out.startswith("OK")


def _demo(args, **kw):
    return subprocess.Popen([sys.executable, str(DEMO), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def test_killed_mid_stream_then_resumed_equals_an_uninterrupted_run(int8, tmp_path):
    model, state = str(int8("lstm", "static")[0]), tmp_path / "lstm.state"
    common = ["--model", model, "--source", "replay:basicmotions", "--json", "--state-file", str(state),
              "--save-every", "50"]
    p = _demo(common + ["--rate", "500"])
    seen = 0
    for line in p.stdout:
        seen = json.loads(line).get("reading", seen)
        if seen >= 230:
            break
    p.send_signal(signal.SIGKILL)                                       # a power cut: no chance to save
    p.wait(timeout=30)
    n = read_state(state)[0]["readings"]
    assert n % 50 == 0 and 150 <= n <= seen
    p = _demo(common + ["--rate", "0", "--max-readings", "60"])
    resumed = [json.loads(l) for l in p.communicate(timeout=60)[0].splitlines()][:-1]
    p = _demo(["--model", model, "--source", "replay:basicmotions", "--json", "--rate", "0",
               "--max-readings", str(n + 60)])
    whole = [json.loads(l) for l in p.communicate(timeout=60)[0].splitlines()][:-1]
    assert [r["reading"] for r in resumed] == list(range(n + 1, n + 61))
    assert [(r["label"], r["prob"]) for r in resumed] == [(r["label"], r["prob"]) for r in whole[n:n + 60]]


def test_sigterm_saves_the_state_at_the_last_reading(int8, tmp_path):
    state = tmp_path / "g.state"
    p = _demo(["--model", str(int8("gru", "static")[0]), "--source", "replay:basicmotions", "--rate", "300",
               "--json", "--state-file", str(state), "--save-every", "100000"])
    last = 0
    for line in p.stdout:
        last = json.loads(line).get("reading", last)
        if last >= 40:
            break
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    summary = json.loads(out.splitlines()[-1])["summary"]
    assert p.returncode == 0 and summary["stopped_by"] == "SIGTERM"
    assert read_state(state)[0]["readings"] == summary["readings"] >= 40


def test_state_writes_are_atomic_and_bad_files_are_refused(int8, exported, tmp_path, monkeypatch):
    s = StreamSession(int8("gru", "static")[0])
    X = np.random.default_rng(0).standard_normal((20, 1, 6)).astype(np.float32)
    for x in X[:10]:
        s.push(x)
    path = tmp_path / "s.state"
    save_state(path, s, 10)
    good = path.read_bytes()
    for x in X[10:]:
        s.push(x)

    def crash(*a, **k):
        raise OSError("power cut during rename")
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        save_state(path, s, 20)
    monkeypatch.undo()
    assert path.read_bytes() == good and [p.name for p in tmp_path.iterdir()] == ["s.state"]   # temp removed
    fresh = StreamSession(int8("gru", "static")[0])
    assert load_state(path, fresh)["readings"] == 10

    bad = bytearray(good)
    bad[-5] ^= 0xFF
    path.write_bytes(bytes(bad))
    with pytest.raises(StateFileError, match="checksum mismatch"):
        load_state(path, fresh)
    path.write_bytes(good[:40])
    with pytest.raises(StateFileError, match="corrupt"):
        load_state(path, fresh)
    path.write_bytes(b"hello")
    with pytest.raises(StateFileError, match="not an edgeseq state file"):
        load_state(path, fresh)
    path.write_bytes(good)
    with pytest.raises(StateFileError, match="another model"):
        load_state(path, StreamSession(exported("gru")[0]))


def test_bad_readings_are_counted_and_never_touch_the_state(int8):
    model = int8("gru", "static")[0]
    mixed, clean = StreamSession(model), StreamSession(model)
    out = []
    summary = run_live(mixed, SimSource(200, 6, bad=True), on_bad="skip", as_json=True, echo=out.append)
    assert summary["bad"] == {"nan_inf": 14, "field_count": 7, "garbage": 7, "non_numeric": 0, "out_of_range": 0}
    assert summary["readings"] == 200 - 28
    src = SimSource(200, 6, bad=True)
    good = [src.read() for _ in range(200)]
    for line in good:
        try:
            x = np.array([float(v) for v in line.split(",")], np.float32)
        except ValueError:
            continue
        if x.size == 6 and np.isfinite(x).all():
            clean.push(x[None])
    for a, b in zip(mixed.snapshot()["state"], clean.snapshot()["state"]):
        assert np.array_equal(a, b)
    skipped = [json.loads(l) for l in out if "skipped" in l]
    assert len(skipped) == 28 and {s["kind"] for s in skipped} == {"nan_inf", "field_count", "garbage"}

    before = mixed.snapshot()
    with pytest.raises(ReadingError, match=r"NaN or Inf value \(nan_inf\); pass --on-bad skip"):
        run_live(mixed, LineSource(iter_file(["0.1,0.2,0.3,0.4,0.5,nan"])), on_bad="error", echo=lambda s: None)
    assert all(np.array_equal(a, b) for a, b in zip(before["state"], mixed.snapshot()["state"]))


class iter_file:
    def __init__(self, lines):
        self.lines = [l + "\n" for l in lines]

    def readline(self, size=-1):
        return self.lines.pop(0) if self.lines else ""


def test_serial_source_with_garbage_bytes(int8):
    pytest.importorskip("serial")
    src = open_source("serial:loop://@115200", ["a"] * 6)
    src.fh.write(b"0.1,0.2,0.3,0.4,0.5,0.6\r\n\xff\xfe\x00\x13\r\n0.1,0.2,0.3\r\n0.1,0.2,0.3,0.4,0.5,0.7\r\n")
    src.fh.timeout = 0.2
    s = StreamSession(int8("gru", "static")[0])
    summary = run_live(s, src, on_bad="skip", echo=lambda line: None)
    assert summary["readings"] == 2 and summary["bad"]["garbage"] == 1 and summary["bad"]["field_count"] == 1


def test_plugin_source_and_unknown_sources(int8, tmp_path, monkeypatch):
    (tmp_path / "myimu.py").write_text(
        "class IMU:\n"
        "    def __init__(self):\n        self.n = 0\n"
        "    def read(self):\n        self.n += 1\n        return None if self.n > 5 else [0.1 * self.n] * 6\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    s = StreamSession(int8("gru", "static")[0])
    assert run_live(s, open_source("python:myimu:IMU", s.features), echo=lambda line: None)["readings"] == 5
    from edgeseq.errors import UsageError
    with pytest.raises(UsageError, match="unknown source 'usb'"):
        open_source("usb", s.features)


class FakeClock:
    """A clock that moves only when slept on or stepped: pacing is tested without wall time."""

    def __init__(self):
        self.now = 100.0
        self.slept = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        assert seconds > 0
        self.now += seconds
        self.slept += seconds


def test_paced_replay_keeps_up_at_50_hz(int8):
    s = StreamSession(int8("gru", "static")[0])
    clock = FakeClock()
    summary = run_live(s, open_source("replay:basicmotions", s.features), rate=50, max_readings=25,
                       echo=lambda line: None, clock=clock, sleep=clock.sleep)
    assert summary["readings"] == 25 and summary["late"] == summary["dropped"] == 0 and summary["kept_up"]
    assert clock.slept == pytest.approx(24 / 50)               # slot k is due at k / 50 s
    assert summary["seconds"] == pytest.approx(24 / 50) and summary["median_us"] > 0


def test_paced_replay_counts_late_and_drops_when_it_falls_behind(int8):
    """A stall of 3 periods makes readings late; one past max_lag periods drops the backlog."""
    s = StreamSession(int8("gru", "static")[0])
    clock = FakeClock()
    src = open_source("replay:basicmotions", s.features)
    read = src.read
    calls = {"n": 0}

    def stalling_read():
        calls["n"] += 1
        if calls["n"] == 5:
            clock.now += 3 / 50                                # 3 periods behind: late, not dropped
        if calls["n"] == 12:
            clock.now += 20 / 50                               # past max_lag=10 periods: drop to catch up
        return read()
    src.read = stalling_read
    summary = run_live(s, src, rate=50, max_readings=30, max_lag=10, echo=lambda line: None,
                       clock=clock, sleep=clock.sleep)
    assert summary["readings"] == 30
    assert summary["late"] >= 1 and summary["dropped"] >= 10 and not summary["kept_up"]


def test_edgeseq_stream_state_file_resumes(exported, tmp_path):
    from click.testing import CliRunner

    from edgeseq.cli import cli
    from edgeseq.data import load_dataset
    ds = load_dataset("basicmotions")
    rows = [",".join(f"{v:.5f}" for v in r) for r in np.concatenate([ds.test.X[0], ds.test.X[1]])]
    model, state = str(exported("gru")[0]), str(tmp_path / "g.state")
    run = CliRunner()
    first = run.invoke(cli, ["stream", model, "--input", "-", "--state-file", state, "--save-every", "30"],
                       input="\n".join(rows[:120]) + "\n")
    assert first.exit_code == 0 and read_state(state)[0]["readings"] == 120
    second = run.invoke(cli, ["stream", model, "--input", "-", "--state-file", state], input="\n".join(rows[120:]) + "\n")
    whole = run.invoke(cli, ["stream", model, "--input", "-"], input="\n".join(rows) + "\n")
    lines = lambda r: [l for l in r.stdout.splitlines() if l[:1].isdigit()]  # noqa: E731
    assert lines(second) == lines(whole)[120:] and lines(second)[0].startswith("121,")


def _basicmotions_csv(path, features, rows, label=True):
    """The embedded test readings end to end as a CSV a person might keep: sequence, label,
    an ISO time and the features in reverse order. Returns the true labels."""
    from edgeseq.data import load_dataset
    ds = load_dataset("basicmotions").for_model(features)
    X = np.concatenate([ds.test.X[i, :ds.test.lengths[i]] for i in range(len(ds.test))])[:rows]
    y = np.concatenate([ds.test.Y[i, :ds.test.lengths[i]] for i in range(len(ds.test))])[:rows]
    names = [ds.labels[k] for k in y]
    head = ["sequence"] + (["label"] if label else []) + ["time"] + list(features)[::-1]
    lines = [",".join(head)]
    for t, (x, name) in enumerate(zip(X, names)):
        cells = [f"s{t // 100}"] + ([name] if label else []) + [f"2024-05-01T10:{t // 60:02d}:{t % 60:02d}Z"]
        lines.append(",".join(cells + [repr(float(v)) for v in x[::-1]]))     # float32 values, exactly
    Path(path).write_text("\n".join(lines) + "\n")
    return names


def test_csv_source_with_labels_matches_the_embedded_replay(int8, tmp_path):
    """A CSV of the same readings with a label column (and a sequence and a time column the
    reader ignores) predicts, shows and scores exactly as the embedded replay does."""
    model = int8("gru", "static")[0]
    s = StreamSession(model)
    names = _basicmotions_csv(tmp_path / "r.csv", s.features, 150)
    runs = {}
    for spec in ("replay:basicmotions", f"csv:{tmp_path / 'r.csv'}", f"replay:{tmp_path / 'r.csv'}"):
        s = StreamSession(model)
        out = []
        summary = run_live(s, open_source(spec, s.features), max_readings=150, as_json=True, echo=out.append)
        runs[spec] = ([(o["reading"], o["label"], o["prob"], o["true"]) for o in map(json.loads, out)],
                      summary["true_labels"])
    first, *others = runs.values()
    assert [r[3] for r in first[0]] == names and first[1]["scored"] == 150
    assert all(other == first for other in others), list(runs)
    lines = []
    run_live(StreamSession(model), LineSource(iter_file(Path(tmp_path / "r.csv").read_text().splitlines())),
             echo=lines.append)                                                    # stdin: the same
    assert [l.split()[4].rstrip(")") for l in lines] == names and "(true " in lines[0]


def _main():
    import runpy
    return runpy.run_path(str(DEMO))["main"]


SUMMARY = (r"(?P<n>\d+) readings? in \d+\.\d+ s on the (native|onnxruntime) backend \((?P<pace>[^)]*)\), "
           r"latency median \d+\.\d+ us, p99 \d+\.\d+ us, (?P<counts>[^;]*); RSS \d+ kB; (?P<stopped>.*)")


def test_demo_summary_says_why_it_stopped_and_what_was_scored(int8, tmp_path, capsys):
    import re
    model = str(int8("gru", "static")[0])
    main = _main()
    assert main(["--model", model, "--source", "replay:basicmotions", "--rate", "0", "--max-readings", "30",
                 "--json"]) == 0
    out, err = capsys.readouterr()
    lines = [json.loads(l) for l in out.splitlines()[:-1]]
    m = re.fullmatch(SUMMARY, err.splitlines()[0])
    assert m and m["n"] == "30" and m["pace"].endswith(" Hz; unpaced source") and m["counts"] == "bad 0", err
    assert m["stopped"] == "stopped at the reading limit (--max-readings 30)"
    acc = np.mean([l["label"] == l["true"] for l in lines])
    past = np.mean([l["label"] == l["true"] for l in lines[20:]])       # one activity: 20 after the start
    assert err.splitlines()[1:] == [f"true labels: accuracy {acc:.3f} over 30 readings with a label the model knows "
                                    f"(one stream, never reset); {past:.3f} over the 10 past the first 20 after the "
                                    "start and each change of label"]
    assert "None" not in err and json.loads(out.splitlines()[-1])["summary"]["stopped_by"] == "reading limit"

    _basicmotions_csv(tmp_path / "r.csv", StreamSession(model).features, 5, label=False)
    assert main(["--model", model, "--source", f"replay:{tmp_path / 'r.csv'}", "--rate", "1000"]) == 0
    err = capsys.readouterr().err
    m = re.fullmatch(SUMMARY, err.strip())                                   # no labels: one line
    assert m and m["n"] == "5" and m["pace"].endswith(" Hz; target 1000 Hz"), err
    assert re.fullmatch(r"late \d+, dropped \d+, bad 0", m["counts"])
    assert m["stopped"] == "stopped at the end of the source"
    assert main(["--model", model, "--source", f"csv:{tmp_path / 'r.csv'}", "--rate", "50"]) == 0
    m = re.fullmatch(SUMMARY, capsys.readouterr().err.strip())               # csv: is unpaced whatever --rate says
    assert m and m["pace"].endswith(" Hz; unpaced source") and m["counts"] == "bad 0"


def test_demo_summary_of_a_source_with_nothing_to_measure(int8, capsys, monkeypatch):
    import io
    model = str(int8("gru", "static")[0])
    header = ",".join(StreamSession(model).features) + "\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(header.encode())))
    assert _main()(["--model", model, "--source", "stdin"]) == 0
    err = capsys.readouterr().err
    assert "None" not in err and err.count("\n") == 1
    assert err.startswith("0 readings in ") and err.rstrip().endswith(
        " Hz; unpaced source), latency n/a (no readings), bad 0; RSS " + err.split("RSS ")[1].split(" ")[0]
        + " kB; stopped at the end of the source")


def test_summary_lines_leave_out_what_was_not_measured():
    from edgeseq.runtime.live import summary_lines
    bad = {"nan_inf": 2, "field_count": 1, "garbage": 0, "non_numeric": 0, "out_of_range": 0}
    s = {"this_run": 0, "seconds": 0.0, "rate_hz": None, "paced": False, "target_rate_hz": None, "median_us": None,
         "p99_us": None, "late": 0, "dropped": 0, "bad": dict.fromkeys(bad, 0), "rss_kb_end": None,
         "stopped_by": "SIGINT", "true_labels": None}
    assert summary_lines(s, "onnxruntime", ["a", "b"]) == [
        "0 readings in 0.0 s on the onnxruntime backend (too short to time; unpaced source), "
        "latency n/a (no readings), bad 0; stopped by SIGINT"]
    s.update(this_run=1, seconds=0.5, rate_hz=2.0, paced=True, target_rate_hz=2.0, median_us=12.5, p99_us=40.0,
             late=1, bad=bad, rss_kb_end=65000, stopped_by="reading limit",
             true_labels={"scored": 0, "accuracy": None, "grace": 20, "past_grace": 0, "accuracy_past_grace": None,
                          "unknown": {"jump": 1}, "unlabelled": 0})
    assert summary_lines(s, "native", ["a", "b"]) == [
        "1 reading in 0.5 s on the native backend (2.0 Hz; target 2 Hz), latency median 12.5 us, p99 40.0 us, "
        "late 1, dropped 0, bad 3 (2 nan_inf, 1 field_count); RSS 65000 kB; stopped at the reading limit "
        "(--max-readings 1)",
        "true labels: no reading has a label the model knows (a, b); nothing scored",
        "not scored: 1 reading labelled 'jump' (1), which the model does not know"]
