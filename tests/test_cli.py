"""CLI: the user's commands end to end, exit codes and the exact one-line errors."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from edgeseq.cli import cli
from edgeseq.errors import ExportValidationError, UsageError


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def _err(result):
    lines = [l for l in result.output.splitlines() if l.startswith("Error:")]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def _readings_csv(path, rows, header=True):
    d = np.load(Path(__file__).resolve().parents[1] / "edgeseq" / "data" / "basicmotions.npz")
    lines = [",".join(d["features"])] if header else []
    lines += [",".join(f"{v:.6f}" for v in r) for r in d["X_test"][0][:rows]]
    Path(path).write_text("\n".join(lines) + "\n")


def test_train_export_eval_stream(runner, exported):
    r = runner.invoke(cli, ["train", "--arch", "gru", "--epochs", "2", "--set", "hidden=8", "--out", "runs/g", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["arch"] == "gru"                  # progress goes to stderr
    r = runner.invoke(cli, ["export", "runs/g", "--out", "models/g.onnx"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("wrote models/g.onnx") and Path("models/g.onnx").exists()

    model = str(exported("gru")[0])
    r = runner.invoke(cli, ["eval", model, "--data", "basicmotions", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["n"] == 40 and res["accuracy"] >= 0.95

    _readings_csv("r.csv", 12)
    r = runner.invoke(cli, ["stream", model, "--input", "r.csv"])
    assert r.exit_code == 0, r.output
    rows = [l for l in r.stdout.splitlines() if l and l[0].isdigit()]
    assert len(rows) == 12 and rows[0].split(",")[0] == "1"
    r = runner.invoke(cli, ["stream", model, "--input", "-", "--json"], input=Path("r.csv").read_text())
    assert r.exit_code == 0
    objs = [json.loads(l) for l in r.stdout.splitlines()]
    assert len(objs) == 12 and abs(sum(objs[-1]["probs"].values()) - 1) < 1e-4


def test_header_may_reorder_columns(runner, exported):
    model = str(exported("gru")[0])
    _readings_csv("a.csv", 5)
    rows = [l.split(",") for l in Path("a.csv").read_text().split()]
    Path("b.csv").write_text("\n".join(",".join(r[::-1]) for r in rows) + "\n")
    a = runner.invoke(cli, ["stream", model, "--input", "a.csv"]).stdout
    b = runner.invoke(cli, ["stream", model, "--input", "b.csv"]).stdout
    assert a == b and a.count("\n") == 5


@pytest.mark.parametrize("line,message", [
    ("1,2,3", "Error: input line 2: 3 values, the model expects 6; fix it or pass --on-bad skip (state before it is kept)"),
    ("1,2,x,4,5,6", "Error: input line 2: non-numeric value 'x'; fix it or pass --on-bad skip (state before it is kept)"),
    ("1,2,nan,4,5,6", "Error: input line 2: NaN or Inf value; fix it or pass --on-bad skip (state before it is kept)"),
])
def test_stream_bad_readings(runner, exported, line, message):
    model = str(exported("gru")[0])
    text = "0,0,0,0,0,0\n" + line + "\n0,0,0,0,0,0\n"
    r = runner.invoke(cli, ["stream", model], input=text)
    assert r.exit_code == 1 and _err(r) == message
    skipped = "line 2 skipped: " + message.split(": ", 2)[2].split("; fix it")[0]
    r = runner.invoke(cli, ["stream", model, "--on-bad", "skip"], input=text)
    assert r.exit_code == 0 and r.stderr.splitlines()[0] == skipped     # reported on stderr ...
    clean = runner.invoke(cli, ["stream", model], input="0,0,0,0,0,0\n0,0,0,0,0,0\n")
    assert r.stdout == clean.stdout               # ... stdout is clean CSV, and the skipped reading changed nothing
    r = runner.invoke(cli, ["stream", model, "--on-bad", "skip", "--json"], input=text)
    assert r.exit_code == 0 and r.stderr.splitlines()[0] == skipped
    assert [json.loads(l)["reading"] for l in r.stdout.splitlines()] == [1, 2]   # one object per reading


FEATURES = ["acc_x", "acc_y", "acc_z", "gyr_x", "gyr_y", "gyr_z"]


def _training_csv(path, labels, rows=12):
    """edgeseq's training CSV layout (sequence,label,<features>) with a timestamp and a note
    column: ISO times, quoted commas, empty cells. Features in another order than the model's.
    Returns the same readings as plain lines in the model's feature order."""
    d = np.load(Path(__file__).resolve().parents[1] / "edgeseq" / "data" / "basicmotions.npz")
    X = d["X_test"][0][:rows]
    order = [2, 0, 1, 5, 3, 4]
    lines = ["sequence,Label,time," + ",".join(FEATURES[i] for i in order) + ",note"]
    for t, (x, label) in enumerate(zip(X, labels)):
        note = ['"moved, then still"', "", '"a ""quoted"" note"'][t % 3]
        lines.append(f"s{t // 5},{label},2024-05-01T10:00:{t:02d}.500+02:00," + ",".join(f"{x[i]:.6f}" for i in order)
                     + f",{note}")
    Path(path).write_text("\n".join(lines) + "\n")
    return [",".join(f"{v:.6f}" for v in x) for x in X]


def test_stream_reads_a_training_csv_and_scores_its_labels(runner, exported):
    """Columns other than the features (sequence, a timestamp, notes with commas, empty cells)
    are ignored; the label column is printed beside each prediction and scored."""
    model = str(exported("gru")[0])
    labels = ["Standing"] * 6 + ["Jumping"] * 2 + ["Walking"] * 3 + [""]
    plain = _training_csv("t.csv", labels)
    r = runner.invoke(cli, ["stream", model, "--input", "t.csv"])
    assert r.exit_code == 0, r.output
    ref = runner.invoke(cli, ["stream", model], input="\n".join(plain) + "\n").stdout.splitlines()
    out = r.stdout.splitlines()
    assert out == [f"{line},{true}" for line, true in zip(ref, labels)]     # the same predictions, plus the truth
    known = [(line.split(",")[1], true) for line, true in zip(ref, labels) if true in ("Standing", "Walking")]
    acc = sum(p == t for p, t in known) / 9
    assert r.stderr.splitlines()[1:] == [
        f"true labels: accuracy {acc:.3f} over 9 readings with a label the model knows (one stream, never reset); "
        "none lies 20 readings past the start or a change of label",
        "not scored: 2 readings labelled 'Jumping' (2), which the model does not know; 1 reading without a label"]
    r = runner.invoke(cli, ["stream", model, "--input", "t.csv", "--json"])
    objs = [json.loads(l) for l in r.stdout.splitlines()]
    assert [o["true"] for o in objs] == [t or None for t in labels]
    assert [o["label"] for o in objs] == [line.split(",")[1] for line in ref]


def test_stream_scores_past_the_grace_after_each_change(runner, exported):
    model = str(exported("gru")[0])
    d = np.load(Path(__file__).resolve().parents[1] / "edgeseq" / "data" / "basicmotions.npz")
    names = list(d["labels"])
    X = np.concatenate([d["X_test"][0][:30], d["X_test"][-1][:25]])
    truth = [names[d["y_test"][0]]] * 30 + [names[d["y_test"][-1]]] * 25
    rows = ["label," + ",".join(FEATURES)] + [f"{t}," + ",".join(f"{v:.6f}" for v in x) for t, x in zip(truth, X)]
    r = runner.invoke(cli, ["stream", model], input="\n".join(rows) + "\n")
    assert r.exit_code == 0, r.output
    pred = [l.split(",")[1] for l in r.stdout.splitlines()]
    past = [i for i in range(55) if 20 <= i < 30 or i >= 50]                  # 20 after the start and the change
    acc, acc_past = np.mean([p == t for p, t in zip(pred, truth)]), np.mean([pred[i] == truth[i] for i in past])
    assert r.stderr.splitlines()[0].startswith("55 readings, 0 skipped; state ")
    assert r.stderr.splitlines()[1:] == [
        f"true labels: accuracy {acc:.3f} over 55 readings with a label the model knows (one stream, never reset); "
        f"{acc_past:.3f} over the 15 past the first 20 after the start and each change of label"]


def test_stream_header_file_bad_feature_cells_fail_as_before(runner, exported):
    """Only the feature columns are checked, and a bad one is a bad reading as without a header."""
    model = str(exported("gru")[0])
    _training_csv("t.csv", ["Standing"] * 4, rows=4)
    lines = Path("t.csv").read_text().splitlines()
    cells = lines[2].split(",")
    bad_feature = ",".join(cells[:4] + ["x"] + cells[5:])
    short = ",".join(cells[:-1])                  # row 2 has an empty note: 9 cells
    for line, message in [(bad_feature, "non-numeric value 'x'"), (short, "9 values, the header names 10 columns")]:
        Path("b.csv").write_text("\n".join(lines[:2] + [line] + lines[3:]) + "\n")
        r = runner.invoke(cli, ["stream", model, "--input", "b.csv"])
        assert r.exit_code == 1
        assert _err(r) == f"Error: input line 3: {message}; fix it or pass --on-bad skip (state before it is kept)"
        r = runner.invoke(cli, ["stream", model, "--input", "b.csv", "--on-bad", "skip"])
        assert r.exit_code == 0 and r.stderr.splitlines()[0] == f"line 3 skipped: {message}"
        Path("c.csv").write_text("\n".join(lines[:2] + lines[3:]) + "\n")
        clean = runner.invoke(cli, ["stream", model, "--input", "c.csv"]).stdout
        assert r.stdout == clean                  # the skipped reading changed nothing
    Path("two.csv").write_text("label,LABEL," + ",".join(FEATURES) + "\n")
    r = runner.invoke(cli, ["stream", model, "--input", "two.csv"])
    assert r.exit_code == 1
    assert _err(r) == "Error: input line 1: the header names a label column 2 times ('label', 'LABEL'); keep one"
    r = runner.invoke(cli, ["stream", model], input="walk,2024-05-01T10:00:00Z,1,2,3,4,5,6\n")
    assert r.exit_code == 1 and _err(r) == ("Error: input line 1: 8 values, the model expects 6; fix it or pass "
                                            "--on-bad skip (state before it is kept)")   # no header: all features


def test_model_file_errors(runner):
    r = runner.invoke(cli, ["eval", "missing.onnx"])
    assert r.exit_code == 1
    assert _err(r) == "Error: model file 'missing.onnx' not found; export one with `edgeseq export RUN --out missing.onnx`"
    Path("adir").mkdir()
    r = runner.invoke(cli, ["stream", "adir"], input="1,2,3,4,5,6\n")
    assert r.exit_code == 1
    assert _err(r) == "Error: 'adir' is a folder, not a model file; give the path of an .onnx model file"
    (Path("adir") / "checkpoint.pt").write_bytes(b"")                 # a run directory: export it first
    r = runner.invoke(cli, ["eval", "adir"])
    assert r.exit_code == 1 and _err(r).endswith("export its model first: `edgeseq export adir --out model.onnx`")
    Path("corrupt.onnx").write_bytes(b"\x00garbage")
    r = runner.invoke(cli, ["stream", "corrupt.onnx"], input="1,2,3,4,5,6\n")
    assert r.exit_code == 1 and _err(r).startswith("Error: 'corrupt.onnx' is not a readable ONNX model (")
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    onnx.save(m, "plain.onnx")
    r = runner.invoke(cli, ["eval", "plain.onnx"])
    assert r.exit_code == 1
    assert _err(r) == ("Error: 'plain.onnx' is an ONNX model but not an edgeseq model (no edgeseq metadata); "
                       "export it with `edgeseq export`")


def test_usage_errors_exit_2(runner, exported):
    r = runner.invoke(cli, ["train", "--arch", "mamba", "--out", "x"])
    assert r.exit_code == 2
    assert _err(r) == ("Error: unknown architecture 'mamba': choose one of rnn, gru, lstm, transformer, ssm, bigru, bilstm "
                       "(see 'cli train --help')")
    r = runner.invoke(cli, ["train", "--set", "depth=3", "--out", "x"])
    assert r.exit_code == 2 and _err(r).startswith("Error: 'gru' has no setting depth;")
    r = runner.invoke(cli, ["stream", str(exported("bigru")[0])], input="")
    assert r.exit_code == 2 and "cannot stream one reading at a time" in _err(r)
    assert "export a streaming model (rnn, gru, lstm, transformer or ssm) to stream" in _err(r)    # every one
    r = runner.invoke(cli, ["export", "nowhere", "--out", "m.onnx"])
    assert r.exit_code == 1
    assert _err(r) == "Error: no checkpoint at 'nowhere': run `edgeseq train --out nowhere` first"
    r = runner.invoke(cli, ["export", "nowhere/checkpoint.pt", "--out", "m.onnx"])     # --out takes the run directory
    assert r.exit_code == 1
    assert _err(r) == "Error: no checkpoint at 'nowhere/checkpoint.pt': run `edgeseq train --out nowhere` first"


def test_an_out_under_a_file_says_the_file_is_not_a_folder(runner, trained):
    from edgeseq.train import save_checkpoint
    save_checkpoint(trained("gru"), "runs/gru")
    Path("afile").write_text("keep me\n")
    for args in (["export", "runs/gru", "--out", "afile/m.onnx"], ["export", "runs/gru", "--out", "afile/d/m.onnx"],
                 ["train", "--epochs", "1", "--no-baseline", "--quiet", "--out", "afile/r"]):
        r = runner.invoke(cli, args)
        assert r.exit_code == 2, r.output
        assert _err(r) == f"Error: 'afile' is a file, not a folder: choose another --out (see 'cli {args[0]} --help')"
    assert Path("afile").read_text() == "keep me\n"


def test_data_errors(runner):
    Path("d.csv").write_text("sequence,label,a\ns,x,1\ns,x,zz\n")
    r = runner.invoke(cli, ["train", "--data", "d.csv", "--out", "x"])
    assert r.exit_code == 1
    assert _err(r) == ("Error: 'd.csv' line 3: non-numeric value 'zz' in feature column 'a'; fix or remove that row, "
                       "or leave the column out (train --features names the feature columns)")


def test_cuda_provider_missing_is_an_error(runner, exported):
    import onnxruntime as ort
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA")
    r = runner.invoke(cli, ["eval", str(exported("gru")[0]), "--provider", "cuda"])
    assert r.exit_code == 1 and _err(r).startswith("Error: provider 'cuda' is not available in this onnxruntime")


def test_export_int8_and_compare(runner, trained, exported):
    from edgeseq.train import save_checkpoint
    save_checkpoint(trained("gru"), "runs/gru")
    r = runner.invoke(cli, ["export", "runs/gru", "--int8", "--out", "models/g8.onnx"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("wrote models/g8.onnx") and "int8 static vs float" in r.output
    # the float size printed is that of the float export of the same run, not of the graph int8 starts from
    assert runner.invoke(cli, ["export", "runs/gru", "--out", "models/g.onnx"]).exit_code == 0
    size = Path("models/g.onnx").stat().st_size
    assert f"({Path('models/g8.onnx').stat().st_size:,} bytes; float export {size:,}); int8 static" in r.output
    float_model = str(exported("gru")[0])
    r = runner.invoke(cli, ["compare", float_model, "models/g8.onnx", "--rounds", "1", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    first, q = res["models"]
    assert first["quantization"] == "float" and q["quantization"] == "int8 static"
    assert first["vs_twin"] is None and 0 < q["vs_twin"]["mean_rel"] <= 0.02 and q["twin_of"] == float_model
    assert q["bytes"] * 2.5 < first["bytes"] and q["latency_us_median"] > 0
    assert res["readings_per_stream"] == 500
    r = runner.invoke(cli, ["compare", float_model, "models/g8.onnx", "--rounds", "1"])
    assert r.exit_code == 0 and "int8 static" in r.output.splitlines()[3]


def test_compare_shows_differences_between_twins_only(runner, trained, exported):
    """A difference is taken against the first earlier twin in the list (same architecture,
    settings, labels, features, normalisation); a model with none gets n/a and null."""
    import re

    from edgeseq.report.compare import format_compare
    from edgeseq.train import save_checkpoint
    save_checkpoint(trained("gru"), "runs/gru")
    for args in (["export", "runs/gru", "--int8", "--out", "m/gru8.onnx"],
                 ["train", "--arch", "gru", "--epochs", "1", "--set", "hidden=8", "--out", "runs/small", "--quiet"],
                 ["export", "runs/small", "--out", "m/small.onnx"],
                 ["export", "runs/small", "--int8", "--keep-anyway", "--out", "m/small8.onnx"]):
        r = runner.invoke(cli, args)
        assert r.exit_code == 0, (args, r.output)
    gru = str(exported("gru")[0])
    paths = [gru, "m/small.onnx", "m/gru8.onnx", "m/small8.onnx"]
    r = runner.invoke(cli, ["compare", *paths, "--rounds", "1", "--readings", "100", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert [m["twin_of"] for m in res["models"]] == [None, None, gru, "m/small.onnx"]
    assert [m["vs_twin"] is None for m in res["models"]] == [True, True, False, False]
    assert res["models"][2]["vs_twin"]["mean_rel"] <= 0.02

    text = format_compare(res).splitlines()
    head = re.split(r"\s{2,}", text[0].strip())
    rows = [dict(zip(head, re.split(r"\s{2,}", line.strip()))) for line in text[2:6]]
    assert [(m["diff vs"], m["max diff"], m["agree"]) for m in rows][:2] == [("-", "n/a", "n/a")] * 2
    assert [m["diff vs"] for m in rows[2:]] == ["gru.onnx", "small.onnx"]
    assert all(m["max diff"] != "n/a" for m in rows[2:])
    note = next(line for line in text if line.startswith("diff: "))
    assert "n/a: no earlier model in the list is its twin" in note and "a float model and its int8 export" in note

    from dataclasses import replace

    from edgeseq.report.compare import twin_key
    from edgeseq.runtime import open_model
    meta = open_model(gru)[1]
    assert twin_key(replace(meta, arch="ssm")) != twin_key(meta) != twin_key(replace(meta, labels=meta.labels[::-1]))
    assert twin_key(open_model("m/gru8.onnx")[1]) == twin_key(meta)       # int8 adds an input scale only


def test_int8_and_compare_errors(runner, trained, exported):
    from edgeseq.train import save_checkpoint
    save_checkpoint(trained("gru"), "runs/gru")
    r = runner.invoke(cli, ["export", "runs/gru", "--keep-anyway", "--out", "m.onnx"])
    assert r.exit_code == 2 and "--keep-anyway applies to int8 export only; add --int8" in r.output
    r = runner.invoke(cli, ["export", "runs/gru", "--int8", "--max-error", "0", "--out", "m.onnx"])
    assert r.exit_code == 1 and "breaks its bound" in _err(r) and not Path("m.onnx").exists()
    r = runner.invoke(cli, ["compare", str(exported("gru")[0])])
    assert r.exit_code == 2 and "at least two models" in _err(r)
    r = runner.invoke(cli, ["compare", str(exported("gru")[0]), "nope.onnx"])
    assert r.exit_code == 1 and "not found" in _err(r)


@pytest.mark.parametrize("exc, code, line", [
    (lambda: ExportValidationError("int8 (static) breaks its bound; the model was not written"), 1,
     "Error: int8 (static) breaks its bound; the model was not written\n"),
    (lambda: UsageError("unknown architecture 'cnn'"), 2, "Error: unknown architecture 'cnn'\n"),
    (lambda: PermissionError(13, "Permission denied", "/ro/models"), 1,
     "Error: Permission denied '/ro/models'; check the path and free space, then run it again\n"),
])
def test_example_scripts_end_in_one_error_line(capsys, exc, code, line):
    """examples/*.py run their main() through run_script: no traceback for a foreseeable failure."""
    from edgeseq.errors import run_script

    def main():
        raise exc()
    with pytest.raises(SystemExit) as e:
        run_script(main)
    assert e.value.code == code and capsys.readouterr().err == line


# The example scripts; examples/_*.py are modules they import, not scripts.
EXAMPLES = sorted(p for p in (Path(__file__).resolve().parents[1] / "examples").glob("*.py")
                  if not p.name.startswith("_"))


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_scripts_run_by_a_python_without_edgeseq_say_which_python_to_use(script):
    """`python examples/X.py` with a Python that lacks edgeseq (here: no site-packages) ends in
    one line naming the clone's Python, as typed from the clone, instead of a traceback."""
    import re
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-I", "-S", str(script), "--help"], cwd=script.parents[1],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == "", (r.returncode, r.stdout)
    assert re.fullmatch(rf"Error: {re.escape(sys.executable)} has no module '(numpy|edgeseq)'; run it with the "
                        rf"clone's Python: `\.venv/bin/python examples/{script.name}` \(`make demo` sets up \.venv"
                        r"[^\n]*\n", r.stderr), r.stderr


def test_readme_says_how_to_reach_edgeseq_before_its_first_command():
    """After `make demo` edgeseq lives in .venv/bin, off PATH: the README says to activate it
    before the first bare `edgeseq`/`python` command, and every example it or the docs run exists."""
    import re
    readme = (EXAMPLES[0].parents[1] / "README.md").read_text()
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", readme, flags=re.S | re.M)
    lines = [line for block in blocks for line in block.splitlines()]
    bare = next(line for line in lines if re.match(r"(edgeseq|python) ", line))
    assert readme.index("run `. .venv/bin/activate` once") < readme.index(bare), bare
    root = EXAMPLES[0].parents[1]
    docs = [readme] + [p.read_text() for p in sorted((root / "docs").rglob("*.md"))]
    code = [b for text in docs for b in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M)]
    named = set(re.findall(r"(?:^|\s)(examples/\w+\.py)", "\n".join(code), flags=re.M))
    assert named and all((root / n).is_file() for n in named), named


def test_demo_hint_commands_run_as_printed(exported, int8, tmp_path, monkeypatch):
    """The demo's closing "Next:" commands run as printed, with a PATH that does not hold the
    venv's bin (as after `make demo`), on the models the demo writes under --out."""
    import importlib.util
    import os
    import re
    import shlex
    import shutil
    import subprocess
    spec = importlib.util.spec_from_file_location("demo", EXAMPLES[0].parent / "demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    (tmp_path / "out" / "models").mkdir(parents=True)
    shutil.copy(exported("gru")[0], tmp_path / "out" / "models" / "gru.onnx")
    shutil.copy(int8("gru", "static")[0], tmp_path / "out" / "models" / "gru-int8.onnx")
    monkeypatch.chdir(tmp_path)
    hint = demo.next_steps(Path("out"), "gru")
    commands = [shlex.split(c) for c in re.findall(r"`([^`]+)`", hint)]
    assert hint.startswith("Next: ") and [c[1:] for c in commands] == [
        ["eval", "out/models/gru.onnx"], ["compare", "out/models/gru.onnx", "out/models/gru-int8.onnx"], ["bench"]]
    env = {**os.environ, "PATH": os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                                                 if Path(d).resolve() != Path(commands[0][0]).resolve().parent)}
    for argv in commands:
        argv = argv + ["--help"] if argv[1] == "bench" else argv + (["--rounds", "1"] if argv[1] == "compare" else [])
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and "Error" not in r.stderr, (argv, r.stdout, r.stderr)


def test_eval_says_n_a_when_no_reading_lies_past_the_grace(runner, exported, basicmotions, tmp_path):
    """A label that changes at every reading leaves nothing to score on the continuous protocol
    (its grace is at least 1 reading): eval says n/a, not an accuracy of 0."""
    ds = basicmotions
    short = tmp_path / "short.npz"
    y = np.tile([0, 1, 0, 1], (len(ds.test), 1))            # joined end to end, still a change at every reading
    np.savez(short, X=ds.test.X[:, :4], y=y, labels=np.asarray(ds.labels), features=np.asarray(ds.features),
             X_test=ds.test.X[:, :4], y_test=y)
    r = runner.invoke(cli, ["eval", str(exported("gru")[0]), "--data", str(short)])
    assert r.exit_code == 0, r.output
    assert "per reading n/a (no reading lies 1 reading past a change: the label changes too often)" in r.output, \
        r.output
    r = runner.invoke(cli, ["eval", str(exported("gru")[0]), "--data", str(short), "--json"])
    c = json.loads(r.output)["continuous"]
    assert c["scored_readings"] == 0 and c["reading_accuracy"] is None and c["changes"] > 0
    # one test sequence: no change of label to follow, said in words and null in JSON
    one = tmp_path / "one.npz"
    np.savez(one, X=ds.test.X, y=ds.test.y, labels=np.asarray(ds.labels), features=np.asarray(ds.features),
             X_test=ds.test.X[:1], y_test=ds.test.y[:1])
    r = runner.invoke(cli, ["eval", str(exported("gru")[0]), "--data", str(one)])
    assert r.exit_code == 0 and "follow a change: none (no change of label in these streams" in r.output, r.output
    r = runner.invoke(cli, ["eval", str(exported("gru")[0]), "--data", str(one), "--json"])
    c = json.loads(r.output)["continuous"]
    assert c["changes"] == 0 and c["followed"] is None and c["reading_accuracy"] is not None
