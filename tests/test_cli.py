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
    assert json.loads(r.output)["arch"] == "gru"
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
    r = runner.invoke(cli, ["stream", model, "--on-bad", "skip"], input=text)
    assert r.exit_code == 0 and "line 2 skipped" in r.output
    clean = runner.invoke(cli, ["stream", model], input="0,0,0,0,0,0\n0,0,0,0,0,0\n")
    good = [l for l in r.stdout.splitlines() if not l.startswith("#")]
    assert good == clean.stdout.splitlines()      # the skipped reading changed nothing


def test_model_file_errors(runner):
    r = runner.invoke(cli, ["eval", "missing.onnx"])
    assert r.exit_code == 1
    assert _err(r) == "Error: model file 'missing.onnx' not found; export one with `edgeseq export RUN --out missing.onnx`"
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
    r = runner.invoke(cli, ["export", "nowhere", "--out", "m.onnx"])
    assert r.exit_code == 1
    assert _err(r) == "Error: no checkpoint at 'nowhere': run `edgeseq train --out nowhere` first"


def test_data_errors(runner):
    Path("d.csv").write_text("sequence,label,a\ns,x,1\ns,x,zz\n")
    r = runner.invoke(cli, ["train", "--data", "d.csv", "--out", "x"])
    assert r.exit_code == 1
    assert _err(r) == "Error: 'd.csv' line 3: non-numeric value 'zz'; fix or remove that row"


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
    float_model = str(exported("gru")[0])
    r = runner.invoke(cli, ["compare", float_model, "models/g8.onnx", "--rounds", "1", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    first, q = res["models"]
    assert first["quantization"] == "float" and q["quantization"] == "int8 static"
    assert first["vs_first"] is None and 0 < q["vs_first"]["mean_rel"] <= 0.02
    assert q["bytes"] * 2.5 < first["bytes"] and q["latency_us_median"] > 0
    assert res["readings_per_stream"] == 500
    r = runner.invoke(cli, ["compare", float_model, "models/g8.onnx", "--rounds", "1"])
    assert r.exit_code == 0 and "int8 static" in r.output.splitlines()[3]


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


def test_eval_says_n_a_when_no_reading_lies_past_the_grace(runner, exported, basicmotions, tmp_path):
    """Sequences shorter than the grace after a change leave nothing to score on the
    continuous protocol: eval says n/a, not an accuracy of 0."""
    ds = basicmotions
    short = tmp_path / "short.npz"
    np.savez(short, X=ds.test.X[:, :5], y=ds.test.y, labels=np.asarray(ds.labels), features=np.asarray(ds.features),
             X_test=ds.test.X[:, :5], y_test=ds.test.y)
    r = runner.invoke(cli, ["eval", str(exported("gru")[0]), "--data", str(short)])
    assert r.exit_code == 0, r.output
    assert "per reading n/a (no reading lies 20 readings past a change" in r.output, r.output
    r = runner.invoke(cli, ["eval", str(exported("gru")[0]), "--data", str(short), "--json"])
    assert json.loads(r.output)["continuous"]["scored_readings"] == 0
