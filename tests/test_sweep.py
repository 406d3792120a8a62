"""Correctness sweep: no silent wrong answer, no lost file, no hang. One kind per test, each
ending in one `Error:` line or the documented safe behaviour."""

import os
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from edgeseq.data import load_dataset, parse_float
from edgeseq.errors import DataError
from edgeseq.runtime.statefile import NotAStateFile, check_state_path, read_state
from test_hardening_runtime import GOOD, cli_error, invoke, models, run_demo  # noqa: F401  (fixture)
from test_session_safety import same_state


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

def test_train_quiet_warns_of_the_constant_channels_it_ignores(tmp_path):
    """`edgeseq train --quiet` says on stderr which channels carry no information (the progress
    lines that say so without --quiet are off)."""
    from click.testing import CliRunner

    from edgeseq.cli import cli
    rng = np.random.default_rng(0)
    rows = ["sequence,label,a,b,c"] + [f"s{s},{'xy'[s % 2]},{rng.normal() + s % 2!r},1,1e38"
                                       for s in range(8) for _ in range(12)]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    r = CliRunner().invoke(cli, ["train", "--data", str(tmp_path / "d.csv"), "--out", str(tmp_path / "run"),
                                 "--epochs", "1", "--set", "hidden=8", "--no-baseline", "--quiet"])
    assert r.exit_code == 0, r.output
    assert ("warning: channel(s) 'b', 'c' do not vary in the training data: they carry no information and are "
            "ignored\n") in r.stderr and "warning: channel" not in r.stdout


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


# -- shared by the int8 and backend kinds below: tiny seeded files, built in a second --------------

def _checkpoint(arch="rnn", F=3, C=4, hidden=5, seed=0, head=1.0):
    """An untrained, seeded recurrent checkpoint, sizes taken as given (no training limits);
    `head` scales the classifier's weights and bias (logits that barely move)."""
    import torch

    import edgeseq
    from edgeseq.models import REGISTRY, build_model, config_dict
    cfg = REGISTRY[arch][1](n_features=F, n_classes=C, hidden=hidden)
    torch.manual_seed(seed)
    model = build_model(arch, cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("head."):
                p.mul_(head)
    mean, std = np.arange(F, dtype=np.float32) % 7, np.ones(F, np.float32)
    model.norm.set(mean, std)
    return {"edgeseq_version": edgeseq.__version__, "arch": arch, "config": config_dict(cfg),
            "state_dict": model.state_dict(), "normalization": {"mean": mean.tolist(), "std": std.tolist()},
            "labels": [f"c{i}" for i in range(C)], "features": [f"f{i}" for i in range(F)]}


def _save(proto, path):
    import onnx
    onnx.save(proto, str(path))
    return path


def _float_file(ckpt, path):
    from export.step import build_graph
    return _save(build_graph(ckpt)[0], path)


def _static_int8(ckpt, path):
    """The split step graph quantized static int8 as export_int8 does, calibrated on seeded
    streams around the training mean."""
    import onnx

    from edgeseq import contract
    from edgeseq.runtime.evaluate import run_streams
    from edgeseq.runtime.model import open_model
    from export.quantize import isolate_matmul_inputs, quantize
    from export.step import build_graph, stamp, strip
    proto, meta, _ = build_graph(ckpt, split=True)
    isolate_matmul_inputs(proto)
    split = _save(proto, Path(path).with_suffix(".split.onnx"))
    calibration = []
    X = np.random.default_rng(1).standard_normal((4, 60, len(ckpt["features"]))) * 2 + ckpt["normalization"]["mean"]
    run_streams(open_model(split)[0], meta, X.astype(np.float32), record=calibration)
    meta.quantization = quantize(split, path, "static", calibration)
    q = onnx.load(str(path))
    q.ir_version = contract.IR_VERSION
    strip(q)
    stamp(q, meta)
    return _save(q, path)


def _edited(src, dst, *edits):
    import onnx
    m = onnx.load(str(src))
    for edit in edits:
        edit(m)
    return _save(m, dst)


def _set(name, index, value, dtype=None):
    """An edit: initializer `name`'s entry `index` set to `value` (the array cast to `dtype` first)."""
    def edit(m):
        from onnx import numpy_helper
        t = next(t for t in m.graph.initializer if t.name == name)
        a = numpy_helper.to_array(t).copy()
        if dtype is not None:
            a = a.astype(dtype)
        a.reshape(-1)[index] = value
        t.CopyFrom(numpy_helper.from_array(a, t.name))
    return edit


def _resize(name, size):
    """An edit: initializer `name` cut (or padded with its last entry) to `size` entries."""
    def edit(m):
        from onnx import numpy_helper
        t = next(t for t in m.graph.initializer if t.name == name)
        a = numpy_helper.to_array(t).reshape(-1)
        a = np.concatenate([a, np.repeat(a[-1:], max(0, size - a.size))])[:size]
        t.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(a), t.name))
    return edit


def _swap(op_from, op_to):
    def edit(m):
        next(n for n in m.graph.node if n.op_type == op_from).op_type = op_to
    return edit


@pytest.fixture(scope="module")
def rnn8(tmp_path_factory):
    """name -> a tiny static int8 file: "rnn" (hidden 5, as exported), "flat" (hidden 5, its
    head x 1e-3: logits that barely move), "lstm" (hidden 4, for the cell)."""
    root = tmp_path_factory.mktemp("rnn8")
    return {"rnn": _static_int8(_checkpoint(), root / "rnn.onnx"),
            "flat": _static_int8(_checkpoint(head=1e-3), root / "flat.onnx"),
            "lstm": _static_int8(_checkpoint("lstm", hidden=4), root / "lstm.onnx")}


def _refused_everywhere(path, fragment, out_dir):
    """`firmware emit` and `firmware check` end in one Error line holding `fragment`, emit
    writes nothing; backend native is refused naming it; auto runs the graph and says why, or
    (a file onnxruntime cannot run either) the open is refused naming it."""
    from edgeseq.errors import EdgeseqError
    from edgeseq.runtime import StreamSession
    cli_error(["firmware", "emit", path, "--out", out_dir], 1, fragment)
    assert not Path(out_dir).exists()
    cli_error(["firmware", "check", path, "--target", "nrf52840"], 1, fragment)
    with pytest.raises(EdgeseqError, match=re.escape(fragment)) as e:
        StreamSession(path, backend="native")
    assert len(str(e.value).splitlines()) == 1
    try:
        s = StreamSession(path, streams=2)
    except EdgeseqError as e:
        assert fragment in str(e) and len(str(e).splitlines()) == 1
        return
    assert s.backend == "onnxruntime" and fragment in s.backend_note


# -- int8 constants the int32 step cannot hold: refused by every integer path alike ---------------

def test_int8_constants_the_int32_step_cannot_hold_are_refused_on_every_integer_path(rnn8, tmp_path):
    from firmware_sim.intsim import check_int_model, from_onnx
    src = rnn8["rnn"]
    r = invoke(["firmware", "emit", src, "--out", tmp_path / "honest"])
    assert r.exit_code == 0, r.output                         # the file as exported emits
    cases = [
        ("b0 = 524287.9", [_set("b0", 0, 524287.9)], "b0[0] is 524287.906 (2147483264 in Q12): added to"),
        ("b0 = 600000", [_set("b0", 2, 600000.0)], "b0[2] is 600000, 2457600000 in Q12: beyond int32"),
        ("b0 NaN", [_set("b0", 1, np.nan)], "b0[1] is nan, not a finite number"),
        ("weight scale NaN", [_set("wh0_scale", 0, np.nan)], "scale wh0_scale = nan"),
        ("uint8 zero point 255", [_set("div_zero_point", 0, 255, np.uint8)],
         "zero point div_zero_point is uint8 (255) where the integer step takes int8"),
        ("head bias beyond int32", [_set("model.head.bias_quantized", 0, 2**22),
                                    _set("model.head.bias_quantized_scale", 0, 1.0)],
         "model.head.bias[0] is 4194304, 17179869184 in Q12: beyond int32"),
        ("uint8 zero point on a product's output", [_set("matmul_zero_point", 0, 255, np.uint8)],
         "zero point matmul_zero_point is uint8 (255) where the integer step takes int8"),
        ("quantized bias that wraps the graph's int32 sum", [_set("model.head.bias_quantized", 1, -2**31)],
         "model.head.bias_quantized[1] is -2147483648: a quantized bias beyond +-2^30"),
        ("weights not symmetric", [_set("wx0_zero_point", 1, 3)], "zero point wx0_zero_point[1] of weights"),
        ("quantized and dequantized apart", [_set("div_scale", 0, 0.5)], "quantized with scale div_scale"),
    ]
    for i, (what, edits, fragment) in enumerate(cases):
        if what == "quantized and dequantized apart":             # a scale of its own for the QuantizeLinear
            def own_scale(m):
                from onnx import numpy_helper
                t = next(t for t in m.graph.initializer if t.name == "div_scale")
                m.graph.initializer.append(numpy_helper.from_array(numpy_helper.to_array(t) * 2, "div_q_scale"))
                q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[1] == "div_scale")
                q.input[1] = "div_q_scale"
            edits, fragment = [own_scale], "quantized with scale div_q_scale"
        path = _edited(src, tmp_path / f"bad{i}.onnx", *edits)
        _refused_everywhere(path, fragment, tmp_path / f"c{i}")
    m = from_onnx(src)                                           # a model built by hand is checked on emit too
    m.head_b = m.head_b.copy()
    m.head_b[0] = 2**31 - 1
    with pytest.raises(Exception, match="added to model.head.weight_quantized's output"):
        check_int_model(m, src)
    from firmware_sim.cemit import emit
    with pytest.raises(Exception, match="beyond int32"):
        emit(m, tmp_path / "by-hand", protect=(src,))
    assert not (tmp_path / "by-hand").exists()


# -- quantization parameters that do not fit their tensors: refused when the model opens ----------

def test_quantization_parameters_that_disagree_with_their_tensors_are_refused_at_open(rnn8, tmp_path):
    from edgeseq.errors import ModelFileError
    from edgeseq.runtime import StreamSession, open_model
    src = rnn8["rnn"]

    def axis(node_input, value):
        def edit(m):
            from onnx import helper
            n = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == node_input)
            del n.attribute[:]
            n.attribute.append(helper.make_attribute("axis", value))
        return edit
    cases = [
        ([_resize("wx0_zero_point", 4)], "has 4 zero point(s) in wx0_zero_point [4] for 5 scale(s) in wx0_scale [5]"),
        ([_resize("wx0_zero_point", 4), _resize("wx0_scale", 4)], "has 4 scales in wx0_scale for the 5 channels"),
        ([_resize("model.head.weight_scale", 5), _resize("model.head.weight_zero_point", 5)],
         "has 5 scales in model.head.weight_scale for the 4 channels of its axis 0"),
        ([_resize("state_in.0_zero_point", 2)], "has 2 zero point(s) in state_in.0_zero_point [2] for 1 scale(s)"),
        ([axis("wh0_quantized", 0), _resize("wh0_scale", 6), _resize("wh0_zero_point", 6)],
         "has 6 scales in wh0_scale for the 5 channels of its axis 0"),
        ([axis("wh0_quantized", 3)], "scales axis 3 of a tensor of 2 axes"),
    ]
    for i, (edits, fragment) in enumerate(cases):
        path = _edited(src, tmp_path / f"q{i}.onnx", *edits)
        with pytest.raises(ModelFileError, match=re.escape(fragment)):
            open_model(path)
        for backend in ("auto", "onnxruntime", "native"):
            with pytest.raises(ModelFileError, match="export it again"):
                StreamSession(path, backend=backend)
        cli_error(["stream", path], 1, fragment, GOOD)
        cli_error(["firmware", "emit", path, "--out", tmp_path / f"c{i}"], 1, fragment)
        assert not (tmp_path / f"c{i}").exists()


# -- any failure to build the native step: auto runs the graph and says why, native refuses ------

def test_any_native_constructor_failure_falls_back_under_auto_and_is_one_line_under_native(tmp_path, monkeypatch):
    from edgeseq.errors import UsageError
    from edgeseq.runtime import StreamSession, native
    wide = _float_file(_checkpoint(F=65_537, C=2, hidden=2), tmp_path / "wide.onnx")   # valid, beyond its sizes
    x = np.zeros((1, 65_537), np.float32)
    s = StreamSession(wide)
    assert s.backend == "onnxruntime" and s.backend_note.startswith("the native step could not be built (ValueError")
    assert np.isfinite(s.push(x)).all()
    with pytest.raises(UsageError, match=r"backend 'native' cannot run '.*wide.onnx': the native step could not be "
                                         r"built \(ValueError") as e:
        StreamSession(wide, backend="native")
    assert len(str(e.value).splitlines()) == 1
    small = _float_file(_checkpoint(), tmp_path / "small.onnx")
    assert StreamSession(small).backend == "native" and StreamSession(small).backend_note is None
    for error in (RuntimeError("no room for the weights"), MemoryError(), OverflowError("sizes")):
        def fail(*args, error=error, **kw):
            raise error
        monkeypatch.setattr(native.NativeStep, "_bind_float", fail)
        s = StreamSession(small)
        assert s.backend == "onnxruntime" and type(error).__name__ in s.backend_note
        with pytest.raises(UsageError, match=f"could not be built \\({type(error).__name__}"):
            StreamSession(small, backend="native")
    assert StreamSession(small, backend="onnxruntime").backend_note is None


# -- a model file replaced while a session opens: read once, never mixed -------------------------

def test_a_model_replaced_while_a_session_opens_is_read_once(tmp_path, monkeypatch):
    import builtins
    import hashlib
    import shutil

    from edgeseq.runtime import StreamSession
    from edgeseq.runtime.statefile import read_state, save_state
    first = _float_file(_checkpoint("gru", hidden=6), tmp_path / "first.onnx")
    other = _checkpoint("gru", hidden=6, seed=1)
    other["labels"] = [f"other{i}" for i in range(4)]
    second = _float_file(other, tmp_path / "second.onnx")
    sha = hashlib.sha256(first.read_bytes()).hexdigest()
    x = (np.random.default_rng(0).standard_normal((3, 2, 3)) + np.arange(3)).astype(np.float32)
    real_open = builtins.open
    for backend in ("auto", "onnxruntime", "native"):
        ref = StreamSession(first, streams=2, backend=backend)
        want = [ref.push_logits(r).copy() for r in x]
        model = tmp_path / f"model-{backend}.onnx"
        shutil.copy(first, model)
        reads = []

        def spy(file, mode="r", *args, **kw):
            f = real_open(file, mode, *args, **kw)
            if isinstance(file, (str, os.PathLike)) and os.path.abspath(file) == str(model) and "r" in mode:
                reads.append(mode)
                if len(reads) == 1:                          # as `edgeseq export` replaces a file
                    shutil.copy(second, tmp_path / "next.onnx")
                    os.replace(tmp_path / "next.onnx", model)
            return f
        monkeypatch.setattr(builtins, "open", spy)
        try:
            s = StreamSession(model, streams=2, backend=backend)
        finally:
            monkeypatch.setattr(builtins, "open", real_open)
        assert reads == ["rb"], reads
        assert s.labels == [f"c{i}" for i in range(4)] and s.model_sha256 == sha and s.backend == ref.backend
        for r, w in zip(x, want):
            assert np.array_equal(s.push_logits(r), w), backend
        save_state(tmp_path / f"{backend}.state", s, 3)
        assert read_state(tmp_path / f"{backend}.state")[0]["model_sha256"] == sha


# -- a restored state the model cannot have written: refused, session unchanged ------------------

def _pushed(path, backend, X):
    """A two-stream session of `path` on `backend` after the readings X [T, 2, F], and its snapshot."""
    from edgeseq.runtime import StreamSession
    s = StreamSession(path, streams=2, backend=backend)
    for r in X:
        s.push(r)
    return s, s.snapshot()


def _state_copy(snap):
    """A snapshot's position and a copy of its state, to edit."""
    return {"position": snap["position"], "state": [a.copy() for a in snap["state"]]}


def test_a_state_the_model_cannot_write_is_refused_on_both_backends(models, tmp_path, monkeypatch):
    import edgeseq.runtime.session_state as session_module
    from edgeseq.errors import UsageError
    from edgeseq.runtime import StreamSession
    from edgeseq.runtime.statefile import StateFileError, load_state, save_state
    from helpers import tiny_ssm_checkpoint
    ssm = _float_file(tiny_ssm_checkpoint(False, 6, 5), tmp_path / "ssm.onnx")
    X = np.random.default_rng(0).standard_normal((4, 2, 3)).astype(np.float32) + np.arange(3, dtype=np.float32)
    cases = [(models["gru"], 0, 3e38, "holds 3e+38 (stream 1), beyond +-1.03125: a GRU's hidden state is a tanh "
                                      "output, within [-1, 1]"),
             (models["gru"], 0, -1.5, "holds -1.5 (stream 1), beyond +-1.03125"),
             (models["lstm"], 1, 1e30, "holds 1e+30 (stream 1), beyond +-3.35544e+07: an LSTM cell moves by at most 1"),
             (models["lstm"], 0, 2.0, "an LSTM's hidden state is a tanh output"),
             (models["transformer"], 1, 1e30, "holds 1e+30 (stream 1), beyond +-1.84467e+19"),
             (ssm, 0, 1e30, "holds 1e+30 (stream 1), beyond +-1.84467e+19")]
    for i, (path, which, value, fragment) in enumerate(cases):
        for backend in ("native", "onnxruntime"):
            s, before = _pushed(path, backend, X)
            bad = _state_copy(before)
            bad["state"][which][1] = value
            with pytest.raises(UsageError, match=re.escape(fragment)):
                s.restore(bad)
            assert same_state(s.snapshot(), before)
            s.snapshot = lambda bad=bad: {"model": str(path), **bad}       # a file with a valid checksum
            save_state(tmp_path / f"{i}{backend}.state", s, 4)
            del s.snapshot
            with pytest.raises(StateFileError, match=re.escape(fragment)):
                load_state(tmp_path / f"{i}{backend}.state", s)
            assert same_state(s.snapshot(), before)
            within = _state_copy(before)
            within["state"][which][1] = np.clip(before["state"][which][1], -1, 1)
            s.restore(within)                                # what the model can write is taken
    one = StreamSession(models["gru"])
    huge = [a.copy() for a in one.snapshot()["state"]]
    huge[0][0, 0] = 3e38
    one.snapshot = lambda: {"model": str(models["gru"]), "position": np.array([7]), "state": huge}
    save_state(tmp_path / "one.state", one, 7)
    r = invoke(["stream", models["gru"], "--state-file", tmp_path / "one.state"], GOOD)
    assert r.exit_code == 0 and "a GRU's hidden state is a tanh output" in r.stderr and "moved it to" in r.stderr
    monkeypatch.setattr(session_module, "STATE_BOUND", float("inf"))    # past the bound: the probe step decides
    for backend in ("native", "onnxruntime"):
        s, before = _pushed(ssm, backend, X)
        bad = _state_copy(before)
        bad["state"][0][1] = 3e38
        with pytest.raises(UsageError, match="snapshot state gives NaN or Inf for stream 1 one step on"):
            s.restore(bad)
        assert same_state(s.snapshot(), before) and np.isfinite(s.push(X[0])).all()


# -- the probe: honest files run natively however little their logits move; edits do not ---------

def test_the_probe_takes_logits_that_barely_move_and_still_refuses_an_edited_graph(rnn8, tmp_path):
    from edgeseq.runtime import StreamSession, native
    from edgeseq.runtime.model import load_model
    for name in ("flat", "rnn", "lstm"):
        s = StreamSession(rnn8[name], streams=2)
        assert s.backend == "native" and s.backend_note is None, (name, s.backend_note)
        assert StreamSession(rnn8[name], backend="native").backend == "native"
    sess, meta, loaded = load_model(rnn8["flat"])
    step = native.open_step(rnn8["flat"], meta, native.PROBE_STREAMS, graph=loaded.graph)
    assert native.probe(step, sess) is None
    for i, edit in enumerate([_swap("Tanh", "Sigmoid"), _swap("Add", "Sub")]):
        for name in ("rnn", "lstm"):
            path = _edited(rnn8[name], tmp_path / f"e{name}{i}.onnx", edit)
            s = StreamSession(path, streams=2)
            assert s.backend == "onnxruntime" and "its graph computes other logits" in s.backend_note, (name, i)
    edited = tmp_path / "ernn0.onnx"
    r = invoke(["stream", edited], GOOD)
    assert r.exit_code == 0 and "note: onnxruntime backend, not native: its graph computes other logits" in r.stderr
    assert "(onnxruntime backend)" in r.stderr
    X = np.random.default_rng(0).standard_normal((8, 20, 3)).astype(np.float32) + np.arange(3, dtype=np.float32)
    y = np.arange(8) % 4
    np.savez(tmp_path / "d.npz", X=X, y=y, X_test=X, y_test=y, labels=np.array([f"c{i}" for i in range(4)]),
             features=np.array([f"f{i}" for i in range(3)]))
    r = invoke(["eval", edited, "--data", tmp_path / "d.npz"])
    assert r.exit_code == 0 and "note: onnxruntime backend, not native: its graph computes other logits" in r.stderr
    r = invoke(["eval", rnn8["rnn"], "--data", tmp_path / "d.npz"])
    assert r.exit_code == 0 and "note:" not in r.stderr
