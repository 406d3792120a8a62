"""Firmware simulator: the planner's properties and a plan checked by hand, integer-only accuracy,
C code bit-exact with the simulator, fit checks, and the CLI's errors."""

import json
import re
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from edgeseq.cli import cli
from edgeseq.data import load_dataset
from firmware_sim.cemit import emit
from edgeseq.errors import DataError, UsageError
from firmware_sim.intsim import from_onnx, multiplier, requant
from firmware_sim.plan import Buffer, check_model, graph_buffers, macs_and_ops, plan, run_shapes
from firmware_sim.simulate import simulate
from firmware_sim.targets import get_target, load_targets
from helpers import assert_c_never_says, gcc_strict, host_stream, simulated

RECURRENT = ["rnn", "gru", "lstm"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 30), st.integers(0, 10)), min_size=1, max_size=25))
def test_planner_never_overlaps_live_buffers(specs):
    bufs = [Buffer(f"t{i}", size, first, first + span) for i, (size, first, span) in enumerate(specs)]
    offsets, arena = plan(bufs)
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            if a.overlaps_in_time(b):
                ea, eb = offsets[a.name], offsets[b.name]
                assert ea + a.size <= eb or eb + b.size <= ea, (a, b, ea, eb)
    assert max(b.size for b in bufs) <= arena <= sum(b.size for b in bufs)
    assert all(offsets[b.name] + b.size <= arena for b in bufs)


def test_a_small_plan_by_hand():
    # A lives in ops 0-1, B in 1-2, C in 2-3. Largest first: A at 0; C (not alive with A) reuses 0;
    # B is alive with both, so it goes above them at 100. Arena 150 of 250 requested.
    offsets, arena = plan([Buffer("A", 100, 0, 1), Buffer("B", 50, 1, 2), Buffer("C", 100, 2, 3)])
    assert offsets == {"A": 0, "C": 0, "B": 100} and arena == 150


def _tiny_graph(path):
    """x[1,4] -> MatMul W1[4,8] -> t1 -> Relu -> t2 -> MatMul W2[8,2] -> y."""
    w1 = numpy_helper.from_array(np.ones((4, 8), np.float32), "W1")
    w2 = numpy_helper.from_array(np.ones((8, 2), np.float32), "W2")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W1"], ["t1"]), helper.make_node("Relu", ["t1"], ["t2"]),
         helper.make_node("MatMul", ["t2", "W2"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])], [w1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    onnx.save(m, path)


def test_a_known_graph_is_planned_and_counted(tmp_path):
    _tiny_graph(tmp_path / "tiny.onnx")
    shapes, proto = run_shapes(tmp_path / "tiny.onnx")
    bufs = {b.name: b for b in graph_buffers(proto, shapes)}
    assert bufs == {"t1": Buffer("t1", 32, 0, 1), "t2": Buffer("t2", 32, 1, 2)}   # 8 floats each, both live at op 1
    assert plan(list(bufs.values()))[1] == 64
    assert macs_and_ops(proto, shapes) == (4 * 8 + 8 * 2, 8)                       # Relu: 8 elements


@settings(max_examples=300, deadline=None)
@given(st.floats(1e-9, 7.9), st.integers(-(1 << 24), 1 << 24))
def test_fixed_point_multiplier_is_close(real, acc):
    m, s = multiplier(real)
    assert (1 << 14) <= m < (1 << 15) and 1 <= s <= 62 or s == 62
    got = int(requant(acc, m, s))
    assert abs(got - acc * real) <= 1 + abs(acc * real) * 2 ** -13 + real * (1 << max(0, s - 31))


def _requant32(acc, m, s):
    """The C's es_k_requant, step by step in 32-bit two's complement."""
    def i32(v):
        return (v + (1 << 31)) % (1 << 32) - (1 << 31)
    if s < 16:
        acc, s = i32(acc * (1 << (16 - s))), 16
    elif s > 31:
        acc, s = acc >> (s - 31), 31
    ah = acc >> 16
    b = ((acc & 0xFFFF) * m + (1 << (s - 1))) % (1 << 32)
    assert abs(ah * m) < 1 << 31 and abs(ah * m + (b >> 16)) < 1 << 31
    return i32(ah * m + (b >> 16)) >> (s - 16)


@settings(max_examples=500, deadline=None)
@given(st.integers(1 << 14, (1 << 15) - 1), st.integers(1, 46), st.integers(-(1 << 31), (1 << 31) - 1))
def test_requantization_in_32_bits_is_the_simulators(m, s, acc):
    """The 16-bit-halves form the C uses equals the simulator's requant wherever acc fits."""
    if s < 16 and abs(acc) << (16 - s) >= 1 << 31:
        acc >>= 16 - s                                        # the model builder guarantees this bound
    assert _requant32(acc, m, s) == int(requant(acc, m, s))
    if 16 <= s <= 31:
        assert int(requant(acc, m, s)) == (acc * m + (1 << (s - 1))) >> s        # exact rounding


@pytest.mark.parametrize("arch", RECURRENT)
def test_integer_only_accuracy_is_within_two_points_of_float(int8, exported, arch):
    r = simulate(int8(arch, "static")[0], float_model=exported(arch)[0])
    a = r["accuracy"]
    assert a["integer_only"] >= a["float"] - 0.02, a
    assert r["vs_float"]["mean_rel"] <= 0.02 and r["vs_float"]["argmax_agreement"] >= 0.9, r["vs_float"]
    assert r["stream_readings"] == 1000


def _readings(n=1200):
    ds = load_dataset("basicmotions")
    return np.concatenate([ds.test.X[i, :ds.test.lengths[i]] for i in range(len(ds.test))])[:n]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc on the host")
@pytest.mark.parametrize("arch", RECURRENT)
def test_emitted_c_is_bit_exact_with_the_simulator(int8, arch, tmp_path):
    m = from_onnx(int8(arch, "static")[0])
    report = emit(m, tmp_path, prefix="gesture")
    exe = tmp_path / "stream"
    gcc_strict(exe, [tmp_path / f for f in ("gesture_example.c", "gesture_model.c", "es_tables.c")])
    assert_c_never_says(tmp_path, ("gesture_model.h", "gesture_model.c", "es_kernels.h"),
                        ("malloc", "float", "double", "int64_t", "long long"))
    xq = m.to_fixed(_readings())
    got = host_stream(exe, xq)
    assert got.shape == (1200, len(m.labels) + 1)
    assert np.array_equal(got, simulated(m, xq))
    G = {"rnn": 1, "gru": 3, "lstm": 4}[arch]
    assert report["int8_weights"] == G * m.hidden * (8 + m.hidden) + 4 * m.hidden       # rows padded to 4
    assert report["scratch_bytes"] == 8 * G * m.hidden + 2 * m.hidden + 2 * m.hidden


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc on the host")
def test_two_models_and_two_files_link_into_one_program(int8, tmp_path):
    """Prefixes keep two models apart; a header included by two files defines nothing twice;
    a file that uses only the step compiles with -Werror."""
    for arch, prefix in (("gru", "gru_a"), ("lstm", "lstm_b")):
        emit(from_onnx(int8(arch, "static")[0]), tmp_path, prefix=prefix)
    (tmp_path / "other.c").write_text('#include "gru_a_model.h"\n#include "lstm_b_model.h"\n'
                                      "int other(const int32_t *x, gru_a_state_t *s, int32_t *y, int32_t *w) {\n"
                                      "  gru_a_step(x, s, y, w);\n  return gru_a_argmax(y);\n}\n")
    (tmp_path / "main.c").write_text('#include "gru_a_model.h"\n#include "lstm_b_model.h"\n'
                                     "int other(const int32_t *x, gru_a_state_t *s, int32_t *y, int32_t *w);\n"
                                     "static int32_t work[LSTM_B_SCRATCH_WORDS];\n"
                                     "int main(void) {\n  static gru_a_state_t g; static lstm_b_state_t l;\n"
                                     "  int32_t x[GRU_A_FEATURES] = {0}, y[GRU_A_CLASSES], z[LSTM_B_CLASSES];\n"
                                     "  gru_a_reset(&g); lstm_b_reset(&l);\n  lstm_b_step(x, &l, z, work);\n"
                                     "  return other(x, &g, y, work) + lstm_b_argmax(z) >= 0 ? 0 : 1;\n}\n")
    exe = tmp_path / "both"
    gcc_strict(exe, [tmp_path / f for f in ("main.c", "other.c", "gru_a_model.c", "lstm_b_model.c", "es_tables.c")])
    assert subprocess.run([str(exe)]).returncode == 0
    with pytest.raises(UsageError, match="must be a C name"):
        emit(from_onnx(int8("gru", "static")[0]), tmp_path, prefix="2fast")
    for reserved in ("a__b", "gru_", "x___y"):                   # C++ reserves every name with '__'
        with pytest.raises(UsageError, match="reserves names with '__'"):
            emit(from_onnx(int8("gru", "static")[0]), tmp_path, prefix=reserved)


def test_a_channel_an_int32_reading_cannot_hold_is_refused():
    from firmware_sim.intsim import InputFormatError, input_format
    mean, std = np.array([1013.7, 0.0, 3e9]), np.array([0.5, 1.0, 1e-3])
    with pytest.raises(InputFormatError, match="channel 'far' reaches 3e\\+09"):
        input_format(["pressure", "acc", "far"], mean, std, 0.03, 0)
    frac = input_format(["pressure", "acc"], mean[:2], std[:2], 0.03, 0)
    assert frac[0] < frac[1] <= 40 and 1013.7 * 2.0 ** frac[0] < 2 ** 29 <= 1013.7 * 2.0 ** (frac[0] + 2)


@pytest.fixture(scope="module")
def unbounded(tmp_path_factory):
    """An untrained default-size Transformer with an unbounded window (window 0: the cache grows
    with the stream), exported float: sizes do not depend on the weights."""
    import torch

    import edgeseq
    from edgeseq.models import build_model, config_dict, make_config
    from helpers import export_step
    cfg = make_config("transformer", n_features=6, n_classes=4, window=0)
    torch.manual_seed(0)
    model = build_model("transformer", cfg)
    ckpt = {"edgeseq_version": edgeseq.__version__, "arch": "transformer", "config": config_dict(cfg),
            "state_dict": model.state_dict(), "normalization": {"mean": [0.0] * 6, "std": [1.0] * 6},
            "labels": [f"c{i}" for i in range(4)], "features": [f"f{i}" for i in range(6)]}
    return export_step(ckpt, tmp_path_factory.mktemp("unbounded") / "transformer.onnx")


def test_recurrent_models_fit_and_the_transformer_has_a_longest_history(int8, unbounded):
    nrf, rp = get_target("nrf52840"), get_target("rp2040")
    for arch in ("gru", "lstm"):
        r = check_model(int8(arch, "static")[0], nrf)
        assert r["fits"] and r["ram"]["total"] < 8192 and r["cost"]["macs"] > 10000
        assert r["ram"]["arena"]["used"] <= r["ram"]["arena"]["requested"]
        assert r["ram"]["arena"]["used"] >= max(b["size"] for b in r["buffers"])
    tr = unbounded
    r = check_model(tr, rp, history=512)
    assert not r["fits"] and r["ram"]["state"] == 512 * 512
    n = r["longest_history"]
    assert check_model(tr, rp, history=n)["fits"] and not check_model(tr, rp, history=n + 1)["fits"]
    assert check_model(tr, rp, history=64)["cost"]["macs"] < r["cost"]["macs"]      # attention grows with history


def test_targets_file(tmp_path):
    p = tmp_path / "t.json"
    p.write_text('[{"name": "mypart", "part": "X", "core": "Cortex-M33", "clock_mhz": 150, "flash_kb": 512, '
                 '"sram_kb": 128, "cycles_per_mac": 1.0, "cycles_per_op": 4.0, "source": "my datasheet"}]')
    assert load_targets(p)["mypart"].sram_kb == 128
    p.write_text('[{"name": "bad"}]')
    with pytest.raises(Exception, match="entry 1: missing"):
        load_targets(p)


def test_targets_file_forms_and_names(tmp_path):
    """A file holds a list, one profile alone or a name -> profile map; a name with white space
    around it is refused, names are looked up with their case, and an unknown one is told apart
    from the built-in ones."""
    fields = {"part": "X", "core": "Cortex-M4", "clock_mhz": 16, "flash_kb": 64, "sram_kb": 16,
              "cycles_per_mac": 2.0, "cycles_per_op": 4.0, "source": "my datasheet"}
    p = tmp_path / "t.json"
    for body in ([{"name": "mypart", **fields}], {"name": "mypart", **fields}, {"mypart": fields}):
        p.write_text(json.dumps(body))
        assert set(load_targets(p)) - set(load_targets()) == {"mypart"} and get_target("mypart", p).sram_kb == 16
    for name, message in ((" nrf52840", "entry 1: name ' nrf52840' starts or ends with white space"),
                          ("part ", "entry 1: name 'part ' starts or ends with white space"),
                          (" ", "entry 1: name must not be empty")):
        p.write_text(json.dumps([{"name": name, **fields}]))
        with pytest.raises(DataError, match=re.escape(message)):
            load_targets(p)
    p.write_text(json.dumps([{"name": "mypart", **fields}]))
    with pytest.raises(UsageError) as e:
        get_target("other", p)
    assert (f"unknown target 'other'; built in: esp32s3, nrf52840, rp2040, stm32f446, stm32h743; from '{p}': "
            "mypart (check the names in the file") in str(e.value)
    with pytest.raises(UsageError, match="unknown target 'MyPart'; did you mean 'mypart'"):
        get_target("MyPart", p)
    with pytest.raises(UsageError, match="unknown target 'x'; built in: esp32s3, nrf52840, rp2040, stm32f446, "
                                         r"stm32h743 \(see"):
        get_target("x")


@pytest.mark.parametrize("body, entry, name, what", [
    ('[{"name": "nrf52840", %s}]', 1, "nrf52840", "a built-in target; give this profile a name of its own"),
    ('{"nrf52840": {%s}}', 1, "nrf52840", "a built-in target; give this profile a name of its own"),
    ('[{"name": "mypart", %s}, {"name": "mypart", %s}]', 2, "mypart", "an earlier entry; give this profile"),
    ('[{"name": "NRF52840", %s}]', 1, "NRF52840", "a built-in target (as 'nrf52840'"),
    ('{"Nrf52840": {%s}}', 1, "Nrf52840", "a built-in target (as 'nrf52840'"),
    ('[{"name": "mypart", %s}, {"name": "MyPart", %s}]', 2, "MyPart", "an earlier entry (as 'mypart'"),
])
def test_a_targets_file_never_replaces_a_profile(tmp_path, monkeypatch, body, entry, name, what):
    """A file adds profiles: one named like a built-in (or an earlier entry), also up to case, is
    refused in one line, by every command that reads the file, and the built-in stays as it was."""
    fields = ('"part": "X", "core": "Cortex-M4", "clock_mhz": 16, "flash_kb": 64, "sram_kb": 16, '
              '"cycles_per_mac": 2.0, "cycles_per_op": 4.0, "source": "my datasheet"')
    p = tmp_path / "t.json"
    p.write_text(body.replace("%s", fields))
    message = f"targets file '{p}' entry {entry}: name '{name}' is already {what}"
    with pytest.raises(DataError, match=re.escape(message)):
        load_targets(p)
    with pytest.raises(DataError, match=re.escape(message)):
        get_target("nrf52840", p)
    assert get_target("nrf52840").sram_kb == 256
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for args in (["targets"], ["check", "m.onnx", "--target", "nrf52840"], ["measure", "m.onnx", "--target", "x"]):
        res = runner.invoke(cli, ["firmware", *args, "--targets-file", "t.json"])
        lines = [line for line in res.output.splitlines() if line.startswith("Error:")]
        assert res.exit_code == 1 and len(lines) == 1 and "Traceback" not in res.output, res.output
        assert f"name '{name}' is already {what}" in lines[0], lines[0]


def test_firmware_cli(int8, exported, unbounded, tmp_path):
    runner = CliRunner()
    q = str(int8("gru", "static")[0])
    r = runner.invoke(cli, ["firmware", "check", q, "--target", "nrf52840"])
    assert r.exit_code == 0 and "fits: yes" in r.output, r.output
    r = runner.invoke(cli, ["firmware", "targets"])
    assert r.exit_code == 0 and "rp2040" in r.output and "esp32s3" in r.output
    r = runner.invoke(cli, ["firmware", "emit", q, "--out", str(tmp_path / "fw")])
    assert r.exit_code == 0 and (tmp_path / "fw" / "es_model.h").exists(), r.output
    r = runner.invoke(cli, ["firmware", "simulate", q, "--json"])
    assert r.exit_code == 0 and '"integer_only"' in r.output

    def err(args, code):
        res = runner.invoke(cli, args)
        lines = [l for l in res.output.splitlines() if l.startswith("Error:")]
        assert res.exit_code == code and len(lines) == 1 and "Traceback" not in res.output, res.output
        return lines[0]
    assert "is a float model" in err(["firmware", "simulate", str(exported("gru")[0])], 1)
    assert "--int8-scheme static" in err(["firmware", "emit", str(int8("gru", "dynamic")[0]), "--out", "x"], 1)
    assert "unknown target 'foo'" in err(["firmware", "check", q, "--target", "foo"], 2)
    assert "longest history that fits is" in err(["firmware", "check", str(unbounded), "--target", "rp2040",
                                                   "--history", "512"], 1)
    r = runner.invoke(cli, ["firmware", "emit", str(int8("transformer", "static")[0]), "--out", str(tmp_path / "xf")])
    assert r.exit_code == 0 and (tmp_path / "xf" / "es_model.h").exists(), r.output
    assert "is a float model" in err(["firmware", "emit", str(exported("transformer")[0]),
                                      "--out", str(tmp_path / "y")], 1)
    proto = onnx.load(q)                                                    # an op the planner does not know
    proto.graph.node.append(helper.make_node("Hardmax", ["logits"], ["hard"]))
    proto.graph.output.append(helper.make_tensor_value_info("hard", TensorProto.FLOAT, ["batch", 4]))
    onnx.save(proto, tmp_path / "odd.onnx")
    assert "uses Hardmax" in err(["firmware", "check", str(tmp_path / "odd.onnx"), "--target", "nrf52840"], 1)
