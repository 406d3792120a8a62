"""`firmware simulate --float` takes only the int8 model's float twin, and `firmware emit`
replaces only the files it wrote, all or nothing: each refusal is one `Error:` line that says
what to do, before any work or any write."""

import json
import os
import shutil

import onnx
import pytest

from edgeseq.cli import cli
from edgeseq.errors import UsageError
from firmware_sim import cemit
from firmware_sim.cemit import GENERATED, emit
from firmware_sim.intsim import from_onnx
from helpers import one_error_line

REMEDY = ("pass the float model exported from the same run as the int8 one (`edgeseq export RUN --out MODEL.onnx`, "
          "without --int8), or leave --float out (see 'cli firmware simulate --help')")
EMITTED = ["es_example.c", "es_kernels.h", "es_model.c", "es_model.h", "es_tables.c"]


def _meta(path, key):
    return json.loads(next(p.value for p in onnx.load(str(path)).metadata_props if p.key == key))


def _edited(src, dst, key, value):
    """A copy of model `src` at `dst` with metadata `key` set to `value` (JSON-encoded)."""
    m = onnx.load(str(src))
    next(p for p in m.metadata_props if p.key == key).value = json.dumps(value)
    onnx.save(m, str(dst))
    return str(dst)


@pytest.fixture
def twins(int8, exported, runner):
    """The runner (in this test's temp dir) with gru-int8.onnx and its float twin gru.onnx there."""
    shutil.copy(int8("gru", "static")[0], "gru-int8.onnx")
    shutil.copy(exported("gru")[0], "gru.onnx")
    return runner


def test_simulate_refuses_a_float_model_that_is_not_the_twin(twins, exported, basicmotions):
    from edgeseq.train import TrainConfig, train
    from export import export_model
    labels, features, config = (_meta("gru.onnx", f"edgeseq.{k}") for k in ("labels", "features", "config"))
    norm = _meta("gru.onnx", "edgeseq.normalization")
    shutil.copy("gru-int8.onnx", "other-int8.onnx")
    shutil.copy(exported("rnn")[0], "rnn.onnx")
    export_model(train("gru", basicmotions, TrainConfig(epochs=1, seed=1), progress=False), "seed1.onnx")
    cases = {
        "other-int8.onnx": "it is an int8 model (scheme static), not a float one",
        "rnn.onnx": "its architecture is rnn, the int8 model's gru",
        _edited("gru.onnx", "reversed.onnx", "edgeseq.labels", labels[::-1]):
            f"it predicts the same labels in another order ({', '.join(labels[::-1])}; the int8 model: "
            f"{', '.join(labels)})",
        _edited("gru.onnx", "features.onnx", "edgeseq.features", ["pressure", *features[1:]]):
            f"it reads other features (pressure, {', '.join(features[1:])}; the int8 model: {', '.join(features)})",
        _edited("gru.onnx", "hidden.onnx", "edgeseq.config", {**config, "hidden": config["hidden"] // 2}):
            f"its settings differ (hidden {config['hidden'] // 2} vs {config['hidden']} in the int8 model)",
        _edited("gru.onnx", "norm.onnx", "edgeseq.normalization", {**norm, "mean": [0.0] * len(features)}):
            "its input normalisation (mean, std) differs, so it was trained on other data",
    }
    for other, why in cases.items():
        r = twins.invoke(cli, ["firmware", "simulate", "gru-int8.onnx", "--float", other])
        assert one_error_line(r, 2) == (f"Error: --float '{other}' is not the float twin of 'gru-int8.onnx': {why}; "
                                        f"{REMEDY}")
    # Same architecture, settings, labels and data, another seed: only its measured accuracy tells
    r = twins.invoke(cli, ["firmware", "simulate", "gru-int8.onnx", "--float", "seed1.onnx"])
    line = one_error_line(r, 2)
    assert line.startswith("Error: --float 'seed1.onnx' is not the float twin of 'gru-int8.onnx': on the "
                           "basicmotions test split it scores ") and line.endswith(REMEDY), line
    assert "so it is another training (seed, epochs or checkpoint) of the same settings" in line
    r = twins.invoke(cli, ["firmware", "simulate", "gru-int8.onnx", "--float", "gru.onnx", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["float_from"] == "gru.onnx"


def test_emit_never_replaces_a_file_it_did_not_write(twins):
    q = ["firmware", "emit", "gru-int8.onnx", "--out", "fw"]
    r = twins.invoke(cli, q)
    assert r.exit_code == 0, r.output
    assert sorted(os.listdir("fw")) == EMITTED
    for name in EMITTED:                                       # the marker on every file's first line
        assert GENERATED in open(f"fw/{name}").readline(), name
    with open("fw/es_model.c", "a") as f:                      # edited, marker kept: emit's own, replaced
        f.write("/* a note */\n")
    r = twins.invoke(cli, q)
    assert r.exit_code == 0 and "a note" not in open("fw/es_model.c").read(), r.output

    mine = "/* my own step */\nint es_step(void) { return 0; }\n"
    open("fw/es_model.c", "w").write(mine)
    kernels = open("fw/es_kernels.h").read().split("\n", 1)[1]  # marker line deleted to keep an edit
    open("fw/es_kernels.h", "w").write(kernels + "/* tuned */\n")
    before = {n: open(f"fw/{n}").read() for n in os.listdir("fw")}
    r = twins.invoke(cli, q)
    assert one_error_line(r, 2) == (
        "Error: 'fw/es_model.c' (and es_kernels.h) was not written by firmware emit (its first line lacks "
        "'Generated by edgeseq firmware emit'), and emit would replace it; pass --force to replace it, or choose "
        "another --out (see 'cli firmware emit --help')")
    assert {n: open(f"fw/{n}").read() for n in os.listdir("fw")} == before          # nothing written
    r = twins.invoke(cli, [*q, "--force"])
    assert r.exit_code == 0, r.output
    assert sorted(os.listdir("fw")) == EMITTED and open("fw/es_model.c").read() != mine
    assert GENERATED in open("fw/es_kernels.h").readline()

    open("fw/es_kernels.h", "w").write(cemit.KERNELS)          # as an emit from before the marker wrote it
    assert twins.invoke(cli, q).exit_code == 0
    os.remove("fw/es_tables.c")
    os.mkdir("fw/es_tables.c")                                 # not a file: refused, --force or not
    r = twins.invoke(cli, [*q, "--force"])
    assert "holds 'es_tables.c', which is not a file" in one_error_line(r, 2)


def test_a_failed_emit_leaves_the_folder_as_it_was(twins, monkeypatch):
    """A rename refused midway puts back the files already replaced and removes those added;
    a folder the emit created is removed again."""
    m = from_onnx("gru-int8.onnx")
    emit(m, "fw", prefix="a")
    open("fw/notes.txt", "w").write("mine")
    before = {n: open(f"fw/{n}", "rb").read() for n in os.listdir("fw")}
    replace, calls = os.replace, []

    def failing(src, dst):
        calls.append(dst)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return replace(src, dst)
    with monkeypatch.context() as mp:
        mp.setattr(cemit.os, "replace", failing)
        with pytest.raises(OSError) as e:
            emit(m, "fw", prefix="b")            # b_model.h, b_model.c are new; es_kernels.h would be replaced
        assert e.value.filename == os.path.join("fw", "es_kernels.h")
        assert {n: open(f"fw/{n}", "rb").read() for n in os.listdir("fw")} == before   # no temporary left either
        calls.clear()
        with pytest.raises(OSError):
            emit(m, "new/fw", prefix="b")
        assert not os.path.exists("new")
    open("fw/a_model.c", "w").write("mine")                   # the library refuses as the CLI does
    with pytest.raises(UsageError, match="'fw/a_model.c' was not written by firmware emit"):
        emit(m, "fw", prefix="a")
    assert open("fw/a_model.c").read() == "mine"
