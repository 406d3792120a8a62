"""`firmware simulate --float` takes only the int8 model's float twin (and `compare` takes no
other model for it), and `firmware emit` replaces only the files it wrote, all or nothing: each
refusal is one `Error:` line that says what to do, before any work or any write."""

import json
import os
import shutil

import numpy as np
import onnx
import pytest

import edgeseq
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


def _without(src, dst, key):
    """A copy of model `src` at `dst` without metadata `key`, as an older export wrote it."""
    m = onnx.load(str(src))
    keep = [p for p in m.metadata_props if p.key != key]
    del m.metadata_props[:]
    m.metadata_props.extend(keep)
    onnx.save(m, str(dst))
    return str(dst)


@pytest.fixture(scope="module")
def seed1(basicmotions, tmp_path_factory):
    """A GRU of the twins' settings and data trained with another seed (one epoch), exported."""
    from edgeseq.train import TrainConfig, train
    from export import export_model
    path = tmp_path_factory.mktemp("seed1") / "seed1.onnx"
    export_model(train("gru", basicmotions, TrainConfig(epochs=1, seed=1), progress=False), path)
    return path


@pytest.fixture
def twins(int8, exported, runner):
    """The runner (in this test's temp dir) with gru-int8.onnx and its float twin gru.onnx there."""
    shutil.copy(int8("gru", "static")[0], "gru-int8.onnx")
    shutil.copy(exported("gru")[0], "gru.onnx")
    return runner


def test_simulate_refuses_a_float_model_that_is_not_the_twin(twins, exported, seed1):
    labels, features, config = (_meta("gru.onnx", f"edgeseq.{k}") for k in ("labels", "features", "config"))
    norm = _meta("gru.onnx", "edgeseq.normalization")
    shutil.copy("gru-int8.onnx", "other-int8.onnx")
    shutil.copy(exported("rnn")[0], "rnn.onnx")
    shutil.copy(seed1, "seed1.onnx")
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
    # Same architecture, settings, labels and data, another seed: the checkpoint fingerprints differ,
    # whatever data it is scored on
    fp = {p: _meta(p, "edgeseq.weights_sha256") for p in ("seed1.onnx", "gru.onnx", "gru-int8.onnx")}
    assert fp["gru.onnx"] == fp["gru-int8.onnx"] != fp["seed1.onnx"]
    shutil.copy(os.path.join(os.path.dirname(edgeseq.__file__), "data", "basicmotions.npz"), "x.npz")
    for data in ([], ["--data", "x.npz"]):
        r = twins.invoke(cli, ["firmware", "simulate", "gru-int8.onnx", "--float", "seed1.onnx", *data])
        assert one_error_line(r, 2) == (
            "Error: --float 'seed1.onnx' is not the float twin of 'gru-int8.onnx': it was not exported from the same "
            f"training run (checkpoint fingerprint {fp['seed1.onnx'][:12]} vs {fp['gru-int8.onnx'][:12]}); {REMEDY}")
    for data in ([], ["--data", "x.npz"]):
        r = twins.invoke(cli, ["firmware", "simulate", "gru-int8.onnx", "--float", "gru.onnx", "--json", *data])
        assert r.exit_code == 0, r.output
        out = json.loads(r.output)
        assert out["float_from"] == "gru.onnx" and out["float_twin"]["verified"] is True


def test_older_files_are_told_apart_by_their_weights(twins, seed1, monkeypatch):
    """Files without a checkpoint fingerprint (older exports): the int8 weights, dequantized, are
    within rounding of the twin's and far from another seed's. Where the weights cannot tell
    either, the accuracies the int8 export recorded decide, and a note says so."""
    key = "edgeseq.weights_sha256"
    old = {name: _without(src, f"old-{name}", key) for name, src in
           (("gru-int8.onnx", "gru-int8.onnx"), ("gru.onnx", "gru.onnx"), ("seed1.onnx", seed1))}
    for q, f in ((old["gru-int8.onnx"], old["seed1.onnx"]), (old["gru-int8.onnx"], str(seed1)),
                 ("gru-int8.onnx", old["seed1.onnx"])):
        r = twins.invoke(cli, ["firmware", "simulate", q, "--float", f])
        line = one_error_line(r, 2)
        assert line.startswith(f"Error: --float '{f}' is not the float twin of '{q}': it was not exported from the same "
                               "training run (the weights differ beyond rounding in ") and line.endswith(REMEDY), line
    r = twins.invoke(cli, ["firmware", "simulate", old["gru-int8.onnx"], "--float", old["gru.onnx"], "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["float_twin"] == {
        "verified": True, "how": "exported from the same training run (the weights agree to rounding)"}

    import firmware_sim.simulate
    untold = "not verified as exported from the same training run: (as if no weights could be compared)"
    monkeypatch.setattr(firmware_sim.simulate, "same_run", lambda *a: (None, untold))
    r = twins.invoke(cli, ["firmware", "simulate", old["gru-int8.onnx"], "--float", old["seed1.onnx"]])
    line = one_error_line(r, 2)
    assert line.startswith("Error: --float 'old-seed1.onnx' is not the float twin of 'old-gru-int8.onnx': on the "
                           "basicmotions test split it scores ") and line.endswith(REMEDY), line
    r = twins.invoke(cli, ["firmware", "simulate", old["gru-int8.onnx"], "--float", old["gru.onnx"]])
    assert r.exit_code == 0, r.output
    assert f"note: --float 'old-gru.onnx' was {untold}; export both files again from the run to have that checked" \
        in r.output.splitlines()


def test_compare_takes_no_other_training_run_for_a_twin(twins, seed1):
    """`compare` pairs a float model and an int8 model only when they come from one training run;
    another seed of the same settings gets n/a and a note that names it."""
    from edgeseq.report.compare import format_compare
    shutil.copy(seed1, "seed1.onnx")
    _without("gru-int8.onnx", "old-int8.onnx", "edgeseq.weights_sha256")
    args = ["--rounds", "1", "--readings", "50", "--json"]
    r = twins.invoke(cli, ["compare", "seed1.onnx", "gru-int8.onnx", *args])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert [(m["twin_of"], m["vs_twin"], m["other_run_of"]) for m in res["models"]] == \
        [(None, None, None), (None, None, "seed1.onnx")]
    assert ("not twins: gru-int8.onnx and seed1.onnx share architecture and settings but were not exported from the "
            "same training run; for the int8 error, compare the int8 model with the float model exported from its "
            "run (`edgeseq export RUN --out MODEL.onnx`).") in format_compare(res).splitlines()
    r = twins.invoke(cli, ["compare", "seed1.onnx", "gru.onnx", "gru-int8.onnx", "old-int8.onnx", *args])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["models"]
    assert [(m["twin_of"], m["other_run_of"]) for m in rows] == \
        [(None, None), (None, "seed1.onnx"), ("gru.onnx", None), ("gru.onnx", None)]
    assert all(m["vs_twin"]["mean_rel"] < 0.02 for m in rows[2:])


@pytest.mark.parametrize("task", ["anomaly", "regress"])
def test_simulate_refuses_another_seeds_anomaly_or_regression_model(task, tmp_path):
    from edgeseq.train.forecast import train_task
    from edgeseq.runtime.model import open_model
    from export import export_int8, export_model
    from firmware_sim.simulate import check_float_twin, simulate
    if task == "anomaly":
        from test_anomaly import small_vibration as small
    else:
        from test_regress import small_motor as small
    data = small()
    ck = [train_task("gru", data, task, epochs=1, seed=seed, settings={"hidden": 16}, progress=False)
          for seed in (0, 1)]
    export_int8(ck[0], tmp_path / "q.onnx", data=data, keep_anyway=True)
    for seed in (0, 1):
        export_model(ck[seed], tmp_path / f"f{seed}.onnx")
    with pytest.raises(UsageError, match=r"^--float '.*f1.onnx' is not the float twin of '.*q.onnx': it was not "
                                         r"exported from the same training run \(checkpoint fingerprint "):
        simulate(str(tmp_path / "q.onnx"), float_model=str(tmp_path / "f1.onnx"))
    (_, qmeta), (_, fmeta) = (open_model(tmp_path / f) for f in ("q.onnx", "f0.onnx"))
    assert check_float_twin(qmeta, fmeta, "q.onnx", "f0.onnx")[0] is True               # the twin: taken


def test_same_run_reads_fingerprints_then_the_weights():
    """Fingerprints decide where both files record one; else each weight matrix of the same name,
    int8 ones dequantized (per channel, or stored transposed by the dynamic quantizer) and int8's
    input equalization divided out, agrees to rounding in the same run and not in another."""
    from edgeseq.contract import ModelMeta
    from edgeseq.runtime.native.onnxfile import Graph, Node
    from edgeseq.runtime.twins import same_run
    rng = np.random.default_rng(0)
    s = np.array([1.0, 0.5, 0.25])                             # int8 export's input equalization

    def meta(fingerprint=None, scale=None):
        norm = {"mean": [0.0] * 3, "std": [1.0] * 3, **({} if scale is None else {"input_scale": scale.tolist()})}
        return ModelMeta(arch="ssm", mode="stream", features=["a", "b", "c"], labels=["x", "y"], normalization=norm,
                         weights_sha256=fingerprint)

    def weights():                                             # reads 3 features, 8 wide, 2 outputs
        return {"model.encoder.weight": rng.standard_normal((8, 3)), "model.head.weight": rng.standard_normal((2, 8))}

    def float_graph(w):
        made_up = {"val_3": rng.standard_normal((4, 4)).astype(np.float32)}       # the exporter's names: not matched
        return Graph({**{k: v.astype(np.float32) for k, v in w.items()}, **made_up}, [], [], [])

    def int8_graph(w, dynamic=False):
        init, nodes = {}, []
        for name, a in (("model.encoder.weight", w["model.encoder.weight"] * s), ("model.head.weight",
                                                                               w["model.head.weight"])):
            scale = np.abs(a).max(1) / 127                     # per output row
            q = np.round(a / scale[:, None]).astype(np.int8)
            if dynamic:                                        # (in, out), scales on the last axis, no node
                name, q = name + "_Transposed", q.T
            else:
                nodes.append(Node("DequantizeLinear", [f"{name}_quantized", f"{name}_scale", f"{name}_zero_point"],
                                  ["w"], attrs={"axis": 0}))
            init.update({f"{name}_quantized": q, f"{name}_scale": scale.astype(np.float32),
                         f"{name}_zero_point": np.zeros(len(scale), np.int8)})
        return Graph(init, nodes, [], [])

    w, other = weights(), weights()
    for dynamic in (False, True):
        assert same_run(meta(), meta(scale=s), float_graph(w), int8_graph(w, dynamic)) == \
            (True, "exported from the same training run (the weights agree to rounding)")
        verdict, why = same_run(meta(), meta(scale=s), float_graph(other), int8_graph(w, dynamic))
        assert verdict is False and why.startswith("not exported from the same training run (the weights differ "
                                                   "beyond rounding in "), why
    assert same_run(meta("a" * 64), meta("a" * 64, s), None, None)[0] is True        # graphs not read
    assert same_run(meta("a" * 64), meta("b" * 64, s), float_graph(w), int8_graph(w)) == \
        (False, "not exported from the same training run (checkpoint fingerprint aaaaaaaaaaaa vs bbbbbbbbbbbb)")
    verdict, why = same_run(meta(), meta("b" * 64, s), float_graph(w), Graph({}, [], [], []))
    assert verdict is None and "share no weight matrix to compare" in why


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
        mp.setattr(os, "replace", failing)
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
