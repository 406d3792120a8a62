"""Bad model files, targets, checkpoints and writes for the firmware, training and translation
paths: each ends in one edgeseq error naming the file or key, and nothing good is lost.

1. metadata that disagrees with the int8 graph (arch, config, normalization, quantization,
   features, labels) is refused by `firmware check` / `simulate` / `emit`, naming the key;
   names that would break a C comment are written so the header still compiles;
2. a full disk during `firmware emit`, `save_checkpoint`, `save_run`, the translation export
   and the attention PNG leaves the old files and no temporary file, with an OSError naming
   the target;
3. targets files and --history are bounded (no RecursionError, OverflowError or a graph too
   large to build);
4. a translation model.json out of range (special ids, lengths, format, arch) and an empty
   corpus are refused clearly;
5. a checkpoint that is a raw pickle gives the one-line error and no warning;
6. the verdict for an int8 model too large for flash does not say "export it with --int8".
"""

import errno
import json
import pickle
import resource
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from edgeseq.cli import cli
from edgeseq.errors import DataError, EdgeseqError, ModelFileError, UsageError
from firmware_sim import plan
from firmware_sim.intsim import from_onnx
from firmware_sim.plan import check_model, verdict
from firmware_sim.targets import get_target, load_targets

DEAD_PID = 999999999              # no process has it: a temporary file with it is a killed run's leftover


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """Tiny seeded runs and models: int8 static GRU (hidden 8), float GRU, float Transformer with an
    unbounded window (its cache grows with --history)."""
    from edgeseq.train import TrainConfig, save_checkpoint, train
    from export import export_int8, export_model

    root = tmp_path_factory.mktemp("kit")
    for arch, settings in (("gru", {"hidden": 8}),
                           ("transformer", {"d_model": 16, "heads": 2, "layers": 1, "window": 0})):
        ckpt = train(arch, "basicmotions", TrainConfig(epochs=1, seed=0), settings, progress=False)
        save_checkpoint(ckpt, root / "runs" / arch)
        export_model(ckpt, root / f"{arch}.onnx")
        if arch == "gru":
            export_int8(ckpt, root / "gru-int8.onnx", "static", keep_anyway=True)
    return root


def _edit(src, dst, key, value):
    """Copy model `src` to `dst` with metadata `key` set to the JSON text `value` (None: removed)."""
    m = onnx.load(str(src))
    keep = [p for p in m.metadata_props if p.key != key]
    del m.metadata_props[:]
    m.metadata_props.extend(keep)
    if value is not None:
        m.metadata_props.add(key=key, value=value)
    onnx.save(m, str(dst))
    return dst


def _meta(path, key):
    return json.loads(next(p.value for p in onnx.load(str(path)).metadata_props if p.key == key))


def _one_error(r, code, fragment):
    lines = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert r.exit_code == code and len(lines) == 1 and "Traceback" not in r.output, r.output
    assert fragment in lines[0] and "unexpected" not in lines[0], lines[0]
    return lines[0]


# -- 1. metadata that disagrees with the graph ----------------------------------------------

def _norm(kit, mean=None, std_times=1.0, drop_scale=False):
    n = _meta(kit / "gru-int8.onnx", "edgeseq.normalization")
    if mean is not None:
        n["mean"] = [mean] * len(n["mean"])
    n["std"] = [s * std_times for s in n["std"]]
    if drop_scale:
        n.pop("input_scale", None)
    return json.dumps(n)


# (source model, key, new value or a function of the kit, error key, fragment of the message)
META_EDITS = [
    ("gru-int8", "edgeseq.normalization", lambda k: json.dumps({"mean": [0.0] * 6, "std": [1.0] * 6}),
     "edgeseq.normalization", "gives mean 0 for feature 'acc_x' but the graph computes with"),
    ("gru-int8", "edgeseq.normalization", lambda k: _norm(k, std_times=2.0), "edgeseq.normalization",
     "gives std x input_scale"),
    ("gru-int8", "edgeseq.normalization", lambda k: _norm(k, drop_scale=True), "edgeseq.normalization", "gives std"),
    ("gru-int8", "edgeseq.normalization", "null", "edgeseq.normalization", "is null but the graph normalises"),
    ("gru-int8", "edgeseq.arch", '"lstm"', "edgeseq.arch",
     "says 'lstm', but the state tensors are those of rnn or gru"),
    ("gru-int8", "edgeseq.arch", '"rnn"', "edgeseq.arch", "says 'rnn'"),
    ("gru-int8", "edgeseq.config", '{"hidden": 8, "layers": 0}', "edgeseq.config", "has layers 0 but the graph's"),
    ("gru-int8", "edgeseq.config", '{"hidden": 16, "layers": 1}', "edgeseq.config", "has hidden 16"),
    ("gru-int8", "edgeseq.config", '{"hidden": "8"}', "edgeseq.config", 'has hidden "8"'),
    ("gru-int8", "edgeseq.config", '{"hidden": 8, "n_classes": 5}', "edgeseq.config", "has n_classes 5"),
    ("gru-int8", "edgeseq.quantization", "null", "edgeseq.quantization",
     "says float but the graph is int8 (it has DequantizeLinear, QuantizeLinear nodes)"),
    ("gru", "edgeseq.quantization", '{"scheme": "static"}', "edgeseq.quantization",
     "says int8 (static) but the graph is float (no QuantizeLinear/DequantizeLinear nodes)"),
    ("transformer", "edgeseq.quantization", '{"scheme": "static"}', "edgeseq.quantization",
     "says int8 (static) but the graph is float"),
    ("gru-int8", "edgeseq.labels", '["a", "b", "c"]', "edgeseq.labels", "has 3 labels"),
]


@pytest.mark.parametrize("src,key,value,err_key,fragment", META_EDITS,
                         ids=[f"{e[0]}-{e[1].split('.')[1]}-{i}" for i, e in enumerate(META_EDITS)])
def test_metadata_that_disagrees_with_the_graph_is_refused(kit, tmp_path, monkeypatch, src, key, value, err_key,
                                                           fragment):
    bad = _edit(kit / f"{src}.onnx", tmp_path / "bad.onnx", key, value(kit) if callable(value) else value)
    with pytest.raises(ModelFileError) as e:
        check_model(bad, get_target("nrf52840"))
    assert fragment in str(e.value) and err_key in str(e.value) and "bad.onnx" in str(e.value), str(e.value)
    assert getattr(e.value, "key", err_key) == err_key        # a MetadataError names its key (open_model's: the text)
    if src != "transformer":
        with pytest.raises(ModelFileError) as e:
            from_onnx(bad)
        assert fragment in str(e.value)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for args in (["check", "bad.onnx", "--target", "nrf52840"], ["simulate", "bad.onnx"],
                 ["emit", "bad.onnx", "--out", "c"]):
        if src == "transformer" and args[0] != "check":
            continue
        _one_error(runner.invoke(cli, ["firmware", *args]), 1, err_key)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx"]          # nothing written


def test_the_graph_gives_the_integer_model_its_sizes_and_normalisation(kit):
    m = from_onnx(kit / "gru-int8.onnx")
    n = _meta(kit / "gru-int8.onnx", "edgeseq.normalization")
    assert (m.kind, m.hidden, m.layers, m.n_features, len(m.labels)) == ("gru", 8, 1, 6, 4)
    # the metadata's mean, within float32 rounding, in the reading's fixed point
    want = [round(x * 2.0 ** int(k)) for x, k in zip(n["mean"], m.in_frac)]
    assert all(abs(a - b) <= 2.0 ** int(k) * 1e-6 * abs(x) + 1 for a, b, x, k in zip(m.mean_fx, want, n["mean"],
                                                                                     m.in_frac))


def test_a_float_accuracy_that_is_not_one_is_ignored_by_simulate(kit, tmp_path):
    from firmware_sim.simulate import simulate
    v = _meta(kit / "gru-int8.onnx", "edgeseq.validation")
    bad = _edit(kit / "gru-int8.onnx", tmp_path / "v.onnx", "edgeseq.validation",
                json.dumps({**v, "float_accuracy": "high"}))
    r = simulate(bad, readings=50)
    assert "float" not in r["accuracy"] and "drop_vs_float" not in r


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc on the host")
def test_names_that_would_end_a_c_comment_still_compile(kit, tmp_path):
    from firmware_sim.cemit import emit
    src = _edit(kit / "gru-int8.onnx", tmp_path / "a.onnx", "edgeseq.features",
                json.dumps(["acc*/x", "a/*y", "z??/", "back\\", "é\nnew", "gyr_z"]))
    src = _edit(src, tmp_path / "odd.onnx", "edgeseq.labels", json.dumps(["*/", "??=", "/*", "ok"]))
    emit(from_onnx(src), tmp_path / "c")
    header = (tmp_path / "c" / "es_model.h").read_text()
    assert header.count("/*") == header.count("*/") and "??" not in header and "\\" not in header
    assert "acc* /x 1" in header.split("*/")[0] and "labels: * /, ? ?=, / *, ok" in header
    c = tmp_path / "c"
    cc = subprocess.run(["gcc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Wconversion", "-Werror", "-pedantic", "-o",
                         str(tmp_path / "s"), str(c / "es_example.c"), str(c / "es_model.c"), str(c / "es_tables.c")],
                        capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr[-2000:]


# -- 2. a full disk loses nothing -------------------------------------------------------------

def _small_disk():
    """This process's files cannot grow past 4 KiB: writes fail as on a full disk."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def _run_small(args, cwd, code=None):
    return subprocess.run([sys.executable, *(["-c", code] if code else ["-m", "edgeseq"]), *args], cwd=cwd,
                          capture_output=True, text=True, preexec_fn=_small_disk, timeout=300)


def _tree(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_full_disk_during_emit_keeps_the_old_files(kit, tmp_path):
    out = tmp_path / "fw"
    out.mkdir()
    names = ["es_model.h", "es_model.c", "es_kernels.h", "es_tables.c", "es_example.c"]
    for name in names:
        (out / name).write_text(f"/* Generated by edgeseq firmware emit: the old {name} */\n")   # emit's own
    (out / f".es_model.c.{DEAD_PID}.k3j9x_a1.tmp").write_text("a killed run's")
    (out / "notes.txt").write_text("mine")
    before = {n: (out / n).read_bytes() for n in names + ["notes.txt"]}
    r = _run_small(["firmware", "emit", str(kit / "gru-int8.onnx"), "--out", str(out)], tmp_path)
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 1 and err[-1].startswith("Error: File too large:") and "fw/es_model.c" in err[-1], r.stderr
    assert "Traceback" not in r.stderr
    assert _tree(out) == before                        # old files as they were, no temporary left, leftover gone
    r = CliRunner().invoke(cli, ["firmware", "emit", str(kit / "gru-int8.onnx"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == sorted(names + ["notes.txt"])
    assert "es_step" in (out / "es_model.c").read_text()


def test_a_full_disk_while_saving_a_checkpoint_keeps_the_old_one(kit, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(kit / "runs" / "gru", run)
    (run / "checkpoint.pt.tmp").write_bytes(b"an older version's leftover")
    (run / f".checkpoint.pt.{DEAD_PID}.abc.tmp").write_bytes(b"a killed run's")
    before = _tree(kit / "runs" / "gru")
    code = ("import sys\nfrom edgeseq.train import load_checkpoint, save_checkpoint\n"
            "ckpt = load_checkpoint(sys.argv[1])\nckpt['metrics']['padding'] = 'x' * 8192\n"
            "try:\n    save_checkpoint(ckpt, sys.argv[2])\n"
            "except OSError as e:\n    print(type(e).__name__, e.errno, e.filename)\n")
    r = _run_small([str(kit / "runs" / "gru"), str(run)], tmp_path, code)
    assert r.returncode == 0 and r.stdout.split() == ["OSError", str(errno.EFBIG), str(run / "checkpoint.pt")], \
        r.stdout + r.stderr
    assert _tree(run) == before                        # the old checkpoint and metrics; no temporary file
    r = _run_small(["train", "--arch", "gru", "--set", "hidden=8", "--epochs", "1", "--quiet", "--out", str(run)],
                   tmp_path)
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].startswith("Error: File too large: "), r.stderr
    assert "unexpected" not in r.stderr and _tree(run) == before


def _tiny_translation(arch="lstm-attn"):
    """A seeded, untrained translation checkpoint (a tiny tokenizer and model): enough to write."""
    import torch

    from edgeseq.translate.models import build, config_of
    from edgeseq.translate.tokenizer import Tokenizer
    torch.manual_seed(0)
    tok = Tokenizer.train(["Open the file", "Save the notebook", "Ouvrir le fichier", "Enregistrer le carnet"] * 4,
                          60)
    m = build(arch, {"emb": 8, "hidden": 8, "attn": 8}, vocab=tok.vocab_size)
    return {"arch": arch, "config": config_of(m), "train_config": {}, "state_dict": m.state_dict(),
            "tokenizer": tok.to_str(), "corpus": "tiny", "pairs": {"train": 4, "dev": 0, "test": 0},
            "max_source": 96, "max_target": 96, "metrics": {"parameters": 1}}, tok


def test_a_full_disk_while_saving_a_translation_run_keeps_the_old_one(tmp_path):
    import torch

    from edgeseq.translate.train import load_run, save_run
    ckpt, _ = _tiny_translation()
    torch.save(ckpt, tmp_path / "ckpt.pt")
    save_run(ckpt, tmp_path / "run")
    assert load_run(tmp_path / "run")["arch"] == "lstm-attn"
    before = _tree(tmp_path / "run")
    code = ("import sys, torch\nfrom edgeseq.translate.train import save_run\n"
            "ckpt = torch.load(sys.argv[1], weights_only=True)\nckpt['corpus'] = 'other'\n"
            "try:\n    save_run(ckpt, sys.argv[2])\n"
            "except OSError as e:\n    print(type(e).__name__, e.errno, e.filename)\n")
    r = _run_small([str(tmp_path / "ckpt.pt"), str(tmp_path / "run")], tmp_path, code)
    assert r.stdout.split() == ["OSError", str(errno.EFBIG), str(tmp_path / "run" / "checkpoint.pt")], \
        r.stdout + r.stderr
    assert _tree(tmp_path / "run") == before


def test_a_failed_write_during_translation_export_keeps_the_old_directory(tmp_path, monkeypatch):
    import export.translate as xt
    ckpt, tok = _tiny_translation()
    out = tmp_path / "mt"
    out.mkdir()
    (out / "model.json").write_text('{"the": "old model"}')
    leftover = tmp_path / f".mt.{DEAD_PID}.abc.tmp"
    leftover.mkdir()
    before = _tree(out)
    graph = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    monkeypatch.setattr(xt, "_graphs", lambda model: (graph, graph, {"encoder_outputs": [], "static": {}, "state": []}))
    real = onnx.save_model

    def full(proto, path, *a, **k):
        if str(path).endswith("decoder.onnx"):
            raise OSError(errno.ENOSPC, "No space left on device")        # a failed write() names no file
        return real(proto, path, *a, **k)
    monkeypatch.setattr(xt.onnx, "save_model", full)
    with pytest.raises(OSError) as e:
        xt.export_translation(ckpt, out, sentences=["Open the file"])
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(out)
    assert _tree(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["mt"]


def test_a_full_disk_while_drawing_attention_keeps_the_old_png(tmp_path):
    (tmp_path / "att.png").write_bytes(b"the old picture")
    (tmp_path / f".att.png.{DEAD_PID}.abc.tmp").write_bytes(b"a killed run's")
    code = ("import sys, numpy as np\nfrom edgeseq.translate.runtime import Translation, attention_png\n"
            "t = Translation('Open the file', 'Ouvrir le fichier', [5, 6, 2], -1.0, -1.0, ['Open', 'the', 'file'], "
            "['Ouvrir', 'le', 'fichier'], np.full((3, 3), 1 / 3))\n"
            "try:\n    attention_png(t, sys.argv[1])\n"
            "except OSError as e:\n    print(type(e).__name__, e.errno, e.filename)\n")
    r = _run_small([str(tmp_path / "att.png")], tmp_path, code)
    assert r.stdout.split() == ["OSError", str(errno.EFBIG), str(tmp_path / "att.png")], r.stdout + r.stderr
    assert _tree(tmp_path) == {"att.png": b"the old picture"}


# -- 3. targets files and --history are bounded ------------------------------------------------

PROFILE = {"name": "mine", "part": "X", "core": "Cortex-M4", "clock_mhz": 100, "flash_kb": 1024, "sram_kb": 256,
           "cycles_per_mac": 1.0, "cycles_per_op": 2.0, "source": "my datasheet"}
BAD_TARGETS = [
    ("[" * 100000, "nests lists or objects too deeply"),
    ('{"a": ' * 100000, "nests lists or objects too deeply"),
    ([{**PROFILE, "cycles_per_mac": 1e308}], "cycles_per_mac must be a number from 0.001 to 10000, got 1e+308"),
    ([{**PROFILE, "cycles_per_op": 1e5}], "cycles_per_op must be a number from 0.001 to 10000"),
    ([{**PROFILE, "clock_mhz": 1e6}], "clock_mhz must be a number from 0.001 to 10000"),
    ([{**PROFILE, "clock_mhz": 1e-300}], "clock_mhz must be a number from 0.001"),
    ([{**PROFILE, "sram_kb": 1 << 40}], "sram_kb must be a whole number of kilobytes from 1 to 1,048,576"),
    ([{**PROFILE, "flash_kb": (1 << 20) + 1}], "flash_kb must be a whole number of kilobytes"),
    ([{**PROFILE, "xip_cache_kb": 1 << 30}], "xip_cache_kb must be a whole number of kilobytes from 0"),
    ([{**PROFILE, "name": "n" * 5000}], "name has 5,000 characters; at most 1,000"),
    ("[" + " " * (2 << 20) + "]", "larger than 1 MiB"),
]


@pytest.mark.parametrize("body,fragment", BAD_TARGETS, ids=[f[1][:30] for f in BAD_TARGETS])
def test_a_targets_file_out_of_physical_range_is_refused(tmp_path, monkeypatch, body, fragment):
    p = tmp_path / "t.json"
    p.write_text(body if isinstance(body, str) else json.dumps(body))
    with pytest.raises(DataError) as e:
        load_targets(p)
    assert fragment in str(e.value) and f"'{p}'" in str(e.value)
    monkeypatch.chdir(tmp_path)
    _one_error(CliRunner().invoke(cli, ["firmware", "targets", "--targets-file", "t.json"]), 1, fragment)


def test_the_physical_limits_are_the_documented_ones():
    from firmware_sim import targets
    assert (plan.MAX_HISTORY, plan.MAX_CACHE_BYTES, targets.MAX_KB) == (1 << 20, 256 << 20, 1 << 20)
    big = {**PROFILE, "clock_mhz": 10000, "flash_kb": 1 << 20, "sram_kb": 1 << 20, "xip_cache_kb": 1 << 20,
           "cycles_per_mac": 1e4, "cycles_per_op": 1e4}
    assert targets._check_entry(big, "x").sram_kb == 1 << 20                  # the bounds themselves are accepted


def test_history_and_cache_are_bounded_before_a_graph_is_built(kit, tmp_path, monkeypatch):
    tr = kit / "transformer.onnx"
    p = tmp_path / "t.json"
    p.write_text(json.dumps([{**PROFILE, "name": "huge", "sram_kb": 1 << 20, "flash_kb": 1 << 20}]))
    huge = get_target("huge", p)
    per = 128                                          # bytes of cache per reading: 1 layer x K, V x 16 floats
    # Smaller caps than the real 1,048,576 readings and 256 MiB keep this fast; the logic is the same.
    monkeypatch.setattr(plan, "MAX_HISTORY", 4096)
    monkeypatch.setattr(plan, "MAX_CACHE_BYTES", 512 * per)
    built = []
    real = plan.run_shapes
    monkeypatch.setattr(plan, "run_shapes", lambda path, history=16: built.append(history) or real(path, history))
    with pytest.raises(EdgeseqError, match="needs 12,800,000,000 B of cache alone.* the longest history that fits "
                                           "is 512 readings"):
        check_model(tr, huge, history=100_000_000)
    assert max(built) <= 512
    with pytest.raises(UsageError, match="--history 5,000 is more than the check plans: pass --history with at "
                                         "most 4,096 readings"):
        check_model(tr, huge, history=5000)
    built.clear()
    with pytest.raises(EdgeseqError, match="history 1,000 needs 128,000 B of cache; the check plans at most 65,536 B "
                                           "of cache .* the longest history that fits is 512 readings"):
        check_model(tr, huge, history=1000)
    assert max(built) <= 512
    r = check_model(tr, huge, history=512)
    assert r["fits"] and r["longest_history"] == 512 and r["ram"]["state"] == 512 * per
    with pytest.raises(UsageError, match="--cycles-per-mac must be a number > 0 and at most 10000"):
        check_model(tr, huge, history=16, cycles_per_mac=1e308)
    monkeypatch.chdir(tmp_path)
    _one_error(CliRunner().invoke(cli, ["firmware", "check", str(tr), "--target", "huge", "--targets-file", "t.json",
                                        "--history", "100000000"]), 1, "the longest history that fits is 512")


# -- 4. translation model.json and corpus ---------------------------------------------------

def _model_dir(tmp_path, tok, **changes):
    d = tmp_path / "m"
    d.mkdir(parents=True, exist_ok=True)
    tok.save(d / "tokenizer.json")
    (d / "encoder.onnx").write_bytes(b"not a graph")
    (d / "decoder.onnx").write_bytes(b"not a graph")
    meta = {"format": 1, "kind": "translation", "arch": "lstm-attn", "config": {"vocab": 2000},
            "encoder": "encoder.onnx", "decoder": "decoder.onnx", "tokenizer": "tokenizer.json",
            "max_source": 96, "max_target": 96, "special": {"pad": 0, "bos": 1, "eos": 2, "unk": 3},
            "encoder_outputs": [], "static": {}, "state": []}
    for k, v in changes.items():
        if v is ...:
            meta.pop(k)
        else:
            meta[k] = v
    (d / "model.json").write_text(json.dumps(meta))
    return d


MODEL_JSON_EDITS = [
    ({"special": {"bos": 1, "eos": 99999}}, "special token id eos 99999, not a token id below the vocabulary's 2000"),
    ({"special": {"bos": 1, "eos": 1000}}, "special token id eos 1000, beyond the tokenizer's"),
    ({"special": {"bos": 1, "eos": 2, "pad": -1}}, "special token id pad -1"),
    ({"max_target": 1e30}, "max_target 1e+30, not a whole number from 2 to 4096"),
    ({"max_target": 5000}, "max_target 5000, not a whole number from 2 to 4096"),
    ({"max_source": 1}, "max_source 1, not a whole number"),
    ({"max_source": 96.0}, "max_source 96.0, not a whole number"),
    ({"format": 2}, "is format 2; this runtime reads up to 1: upgrade edgeseq"),
    ({"format": "1"}, "has format '1', not a format number"),
    ({"arch": "gru"}, "has arch 'gru'; a translation model is transformer or lstm-attn"),
    ({"arch": ...}, "has arch None"),
    ({"config": {"vocab": -5}}, "has config vocab -5"),
]


@pytest.mark.parametrize("changes,fragment", MODEL_JSON_EDITS, ids=[e[1][:30] for e in MODEL_JSON_EDITS])
def test_model_json_out_of_range_is_refused(tmp_path, changes, fragment):
    from edgeseq.translate.runtime import Translator
    _, tok = _tiny_translation()
    with pytest.raises(ModelFileError, match="unreadable ONNX graph"):    # the untouched one passes every check
        Translator(_model_dir(tmp_path / "good", tok))
    d = _model_dir(tmp_path, tok, **changes)
    with pytest.raises(ModelFileError) as e:
        Translator(d)
    assert fragment in str(e.value) and "model.json" in str(e.value), str(e.value)


def test_deeply_nested_model_json_and_the_runtime_constants(tmp_path):
    from edgeseq.translate import models, runtime
    from export import translate as xt
    assert runtime.ARCHS == models.ARCHS and xt.FORMAT == runtime.FORMAT
    (tmp_path / "model.json").write_text("[" * 100000)
    with pytest.raises(ModelFileError, match="not valid UTF-8 JSON"):
        runtime.read_model_json(tmp_path)


@pytest.mark.parametrize("make,fragment", [
    (lambda p: p.write_text(""), "holds no sentence pairs; give one source<TAB>target pair per line"),
    (lambda p: p.write_text("\n  \n\t\n"), "holds no sentence pairs"),
    (lambda p: p.mkdir(), "is a directory; give a TSV file"),
])
def test_an_empty_corpus_says_so(tmp_path, monkeypatch, make, fragment):
    from edgeseq.translate.corpus import load_corpus
    make(tmp_path / "afile")
    with pytest.raises(DataError, match=fragment):
        load_corpus(str(tmp_path / "afile"))
    monkeypatch.chdir(tmp_path)
    _one_error(CliRunner().invoke(cli, ["translate", "train", "--corpus", "afile", "--out", "o"]), 1, fragment)
    assert not (tmp_path / "o").exists()


# -- 5. a raw pickle checkpoint: one line, no warning ----------------------------------------

def test_a_raw_pickle_checkpoint_gives_no_warning(tmp_path, monkeypatch):
    from edgeseq.train import load_checkpoint
    from edgeseq.translate.train import load_run
    (tmp_path / "raw.pt").write_bytes(pickle.dumps({"arch": "gru", "state_dict": {1, 2}}, protocol=4))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(ModelFileError, match="not a readable edgeseq checkpoint"):
            load_checkpoint(tmp_path / "raw.pt")
        with pytest.raises(ModelFileError, match="not a readable checkpoint"):
            load_run(tmp_path / "raw.pt")
    assert seen == []
    monkeypatch.chdir(tmp_path)
    for args in (["export", "raw.pt", "--out", "m.onnx"], ["translate", "export", "raw.pt", "--out", "m"]):
        r = subprocess.run([sys.executable, "-W", "default", "-m", "edgeseq", *args], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 1 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stderr.startswith("Error: 'raw.pt' is not a readable")


# -- 6. the verdict for an int8 model that does not fit in flash ------------------------------

def test_an_int8_model_too_large_for_flash_is_not_told_to_export_int8(kit, tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps([{**PROFILE, "name": "tiny", "flash_kb": 1}]))
    tiny = get_target("tiny", p)
    r = check_model(kit / "gru-int8.onnx", tiny)
    v = verdict(r)
    assert not r["fits"] and "--int8" not in v
    assert v.endswith("needs {:,} B of flash, tiny has 1,024 B; choose a smaller model (fewer hidden units or layers) "
                      "or a part with more flash".format(r["flash"]["total"]))
    assert verdict(check_model(kit / "gru.onnx", tiny)).endswith("export it with --int8 or choose a smaller model")


def test_bad_input_count():
    n = (len(META_EDITS) + 1 + 1          # metadata edits, a float_accuracy that is text, names that end a C comment
         + 6                              # full disk: emit, save_checkpoint, train, save_run, translation export,
                                          # attention PNG
         + len(BAD_TARGETS) + 4           # targets files; --history 100,000,000 / 5,000 / 1,000, --cycles-per-mac 1e308
         + len(MODEL_JSON_EDITS) + 1      # model.json edits, nested JSON
         + 3 + 2 + 1)                     # corpora; a raw pickle to both loaders; an int8 model too large for flash
    assert n == 56, n                     # the count the report gives
