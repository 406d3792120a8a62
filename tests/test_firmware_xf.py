"""The integer-only windowed Transformer step (firmware_sim.intxf, kernels/es_xf_int.h): the integer
softmax against float, integer-only accuracy against float on both protocols, the emitted C
bit-exact with the simulator on the host (window 1, one head, odd widths, with and without
ALiBi; through window wraps and a reset) and on emulated Cortex-M4 (SMLAD and portable paths) and M0+, `firmware check`
against what `measure` measures, the CLI, an unbounded window refused in one line, and a
--history past the window planned at the window. The 3,000-reading emulated check is
scripts/firmware_xf_check.py."""

import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from edgeseq.cli import cli
from edgeseq.errors import DataError
from edgeseq.models import build_model, make_config
from firmware_sim.cemit import emit
from firmware_sim.intsim import from_onnx
from firmware_sim.intxf import NO_WINDOW, softmax_q15
from firmware_sim.simulate import simulate
from helpers import (assert_c_never_says, assert_lean_step, checkpoint_of, export_step, gcc_strict, host_stream,
                     measure_once, readings, simulated, skip_without_emulator)

F, C = 3, 4
RESET_AT = 150                      # the host and emulated runs reset the stream here


@pytest.mark.parametrize("seed", range(6))
def test_integer_softmax_is_float_softmax(seed):
    """Random scores with 12 + j fractional bits (spreads from a tenth to ten real units), rows
    1..window valid: each weight within 3e-3 of float softmax, and zero past the valid rows."""
    rng = np.random.default_rng(seed)
    W, j = int(rng.integers(1, 64)), int(rng.integers(0, 12))
    x = rng.standard_normal((5, W)) * 10 ** rng.uniform(-1, 1)
    sc = np.round(x * 2.0 ** (12 + j)).astype(np.int64)
    n = rng.integers(1, W + 1, 5)
    p = softmax_q15(sc, n, j) / 32768
    for b in range(5):
        xb = sc[b, :n[b]] / 2.0 ** (12 + j)
        want = np.exp(xb - xb.max()) / np.exp(xb - xb.max()).sum()
        assert np.abs(p[b, :n[b]] - want).max() <= 3e-3, (p[b], want)
        assert not p[b, n[b]:].any()


@pytest.fixture(scope="module")
def trained(basicmotions, tmp_path_factory):
    """(float path, static int8 path) of a window-16 Transformer (d_model 16, 2 heads) trained briefly, seed 0."""
    from edgeseq.train import TrainConfig, train
    from export import export_int8, export_model
    root = tmp_path_factory.mktemp("xf")
    ck = train("transformer", basicmotions, TrainConfig(epochs=8, lr=5e-3, seed=0),
               {"window": 16, "d_model": 16, "heads": 2, "d_ff": 32}, progress=False)
    export_model(ck, root / "xf.onnx")
    export_int8(ck, root / "xf-int8.onnx", "static")
    return root / "xf.onnx", root / "xf-int8.onnx"


SIMULATED = {}


def test_integer_only_accuracy_is_within_one_point_of_float_on_both_protocols(trained):
    r = SIMULATED["w16"] = simulate(trained[1], float_model=trained[0])
    a, nr = r["accuracy"], r["never_reset"]
    assert r["arch"] == "transformer"
    assert a["integer_only"] >= a["float"] - 0.01, a
    assert nr["integer_only"] >= nr["float"] - 0.01, nr
    assert r["vs_float"]["mean_rel"] <= 0.01 and r["vs_float"]["argmax_agreement"] >= 0.97, r["vs_float"]


def _tiny(tmp_path, d_model: int, heads: int, window: int, layers: int = 2, positions: str = "none"):
    """An untrained, seeded Transformer on F channels, weights livelier than the default init,
    exported static int8 (calibrated on seeded readings)."""
    cfg = make_config("transformer", n_features=F, n_classes=C, d_model=d_model, heads=heads, d_ff=2 * d_model,
                      layers=layers, window=window, dropout=0.0, positions=positions)
    torch.manual_seed(0)
    model = build_model("transformer", cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
    return export_step(checkpoint_of("transformer", cfg, model),
                       tmp_path / f"tiny-{d_model}-{heads}-{window}-{positions}.onnx", "static",
                       readings(60, 4, seed=1, features=F))


HOST = r"""#include <stdio.h>
#include "t_model.h"
int main(void) {
  static t_state_t st;
  static int32_t scratch[T_SCRATCH_WORDS];
  int32_t x[T_FEATURES], logits[T_CLASSES];
  int f, c, i;
  t_reset(&st);
  for (i = 0;; i++) {
    for (f = 0; f < T_FEATURES; f++) {
      long v;
      if (scanf("%ld", &v) != 1) return 0;
      x[f] = (int32_t)v;
    }
    if (i == RESET_AT) t_reset(&st);
    t_step(x, &st, logits, scratch);
    for (c = 0; c < T_CLASSES; c++) printf("%ld ", (long)logits[c]);
    printf("%d\n", t_argmax(logits));
  }
}
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc on the host")
@pytest.mark.parametrize("d_model,heads,window,positions", [(10, 2, 7, "none"), (13, 1, 1, "none"), (8, 4, 5, "none"),
                                                             (10, 2, 7, "alibi"), (8, 4, 5, "alibi"), (13, 1, 1, "alibi")])
def test_emitted_c_is_bit_exact_with_the_simulator(tmp_path, d_model, heads, window, positions):
    """Odd head widths (5, 13), one head, window 1, with and without ALiBi's recency bias: 400
    readings, the ring wrapping many times, a reset at reading 150."""
    m = from_onnx(_tiny(tmp_path, d_model, heads, window, positions=positions))
    assert m.kind == "transformer" and m.window == window and m.heads == heads
    assert all((c["alibi"] is not None) == (positions == "alibi") for c in m.cells)
    d = tmp_path / "c"
    report = emit(m, d, prefix="t")
    (d / "host.c").write_text(HOST)
    exe = tmp_path / "stream"
    gcc_strict(exe, [d / f for f in ("host.c", "t_model.c", "es_tables.c", "es_ssm_tables.c", "es_xf_tables.c")],
               f"-DRESET_AT={RESET_AT}")
    assert_c_never_says(d, ("t_model.h", "t_model.c", "es_kernels.h", "es_ssm_int.h", "es_xf_int.h"),
                        ("malloc", "float", "double", "int64_t", "long long", "math.h"))
    xq = m.to_fixed(readings(400, 1, seed=2, features=F)[:, 0])
    assert np.array_equal(host_stream(exe, xq), simulated(m, xq, RESET_AT))
    assert report["state_bytes"] == 8 + report["cache_bytes"] and report["scratch_bytes"] % 4 == 0


@pytest.fixture(scope="module")
def measured(trained):
    measure = measure_once(readings=300, counted=1)
    return lambda core, opt, portable=False: measure(trained[1], core, opt, portable)


@pytest.mark.parametrize("core,opt,portable", [("cortex-m4", "-O2", False), ("cortex-m4", "-O2", True),
                                               ("cortex-m0plus", "-O2", False)])
def test_the_step_runs_bit_exact_on_an_emulated_core(measured, core, opt, portable):
    """300 never-reset readings (the window-16 ring wraps 18 times), counted at a full window."""
    r = measured(core, opt, portable)
    assert r["bit_exact_readings"] == 300 and r["arch"] == "transformer" and r["window"] == 16
    assert_lean_step(r, core, portable, mac_at_most=(6, 16))      # SMLAD at d_model 16: 4 at d_model 32 (the check script)


@pytest.mark.parametrize("core", ["cortex-m4", "cortex-m0plus"])
def test_a_reset_on_an_emulated_core_is_the_simulator_reset(trained, tmp_path, core):
    skip_without_emulator()
    from firmware_sim import emulate, toolchain
    from firmware_sim.measure import CHUNK, HARNESS, readings_for
    m = from_onnx(trained[1])
    X, _ = readings_for(m, None, 2 * RESET_AT)
    xq = m.to_fixed(X)
    want = simulated(m, xq, RESET_AT)[:, :-1]
    emit(m, tmp_path, prefix="es")
    (tmp_path / "harness.c").write_text(HARNESS.format(n=CHUNK))
    srcs = [tmp_path / f for f in ("harness.c", "es_model.c", "es_tables.c", "es_ssm_tables.c", "es_xf_tables.c")]
    elf = toolchain.build(srcs, core, "-O2", tmp_path, include_dirs=[tmp_path])
    mach = emulate.Machine(elf, core)
    got = []
    for start in (0, RESET_AT):
        mach.call("bench_reset")
        mach.write("bench_in", xq[start:start + RESET_AT].astype(np.int32))
        mach.call("bench_run", 0, RESET_AT, max_instructions=500_000_000)
        got.append(np.frombuffer(mach.read("bench_out", 4 * RESET_AT * C), np.int32).reshape(RESET_AT, C))
    assert np.array_equal(np.concatenate(got).astype(np.int64), want)


@pytest.mark.parametrize("target,core", [("nrf52840", "cortex-m4"), ("rp2040", "cortex-m0plus")])
def test_check_agrees_with_what_measure_measures(trained, measured, target, core):
    from firmware_sim.cemit import layout
    from firmware_sim.plan import check_model
    from firmware_sim.targets import get_target
    r = measured(core, "-O2")
    c = check_model(trained[1], get_target(target))
    assert c["cost"]["source"].startswith("fitted") and "KV ring of 16 rows" in c["plan_of"]
    flash = r["sections"]["text"] + r["sections"]["rodata"] + r["tables_bytes"]
    assert abs(c["flash"]["total"] - flash) <= 0.10 * flash, (c["flash"], r["sections"])
    assert abs(c["cost"]["cycles"] - r["cycles_per_step"]) <= 0.10 * r["cycles_per_step"], (c["cost"], r["cycles_per_step"])
    lay = layout(from_onnx(trained[1]))
    ram = lay["scratch"] + lay["state"] + lay["io"] + r["stack_bytes"]
    assert c["ram"]["state"] == lay["state"] == 8 + lay["cache"]
    assert abs(c["ram"]["total"] - ram) <= 0.10 * ram, (c["ram"], ram)


def test_a_part_that_holds_the_ring_but_not_the_float_cache_fits(tmp_path):
    """The integer step's int16 ring is what the part holds, not the exported graph's float cache
    (twice as large): a default-size window-50 model (untrained: sizes do not depend on the
    weights) on a part with RAM between the two fits; one below the ring does not."""
    from dataclasses import replace

    from edgeseq.report.bench import _random_checkpoint
    from edgeseq.runtime.model import open_model
    from export import export_int8
    from firmware_sim.plan import check_model
    from firmware_sim.targets import get_target
    path = tmp_path / "w50-int8.onnx"
    export_int8(_random_checkpoint("transformer"), path, "static", keep_anyway=True)
    base = get_target("nrf52840")
    need = check_model(path, base)["ram"]["total"]
    _, meta = open_model(path)
    float_cache = sum(s.bytes_per_reading() for s in meta.state if s.kind == "growing") * meta.max_history
    kb = -(-need // 1024)                                              # the smallest whole KB that holds the plan
    assert kb * 1024 < float_cache, (need, float_cache)
    assert check_model(path, replace(base, name="small", sram_kb=kb))["fits"]
    assert not check_model(path, replace(base, name="tiny", sram_kb=kb - 2))["fits"]


def test_firmware_cli_takes_the_transformer(trained, tmp_path, monkeypatch):
    import firmware_sim.simulate
    runner = CliRunner()
    q = str(trained[1])
    if "w16" in SIMULATED:                       # the figures are the accuracy test's: only the printing is new here
        monkeypatch.setattr(firmware_sim.simulate, "simulate", lambda *a, **k: SIMULATED["w16"])
    r = runner.invoke(cli, ["firmware", "simulate", q, "--float", str(trained[0])])
    assert r.exit_code == 0 and "transformer integer-only" in r.output and "never reset" in r.output, r.output
    r = runner.invoke(cli, ["firmware", "emit", q, "--out", str(tmp_path / "fw"), "--prefix", "motion"])
    assert r.exit_code == 0 and "es_xf_tables.c" in r.output, r.output
    assert {"motion_model.h", "motion_model.c", "es_xf_int.h", "es_xf_tables.c"} <= {p.name for p in (tmp_path / "fw").iterdir()}
    r = runner.invoke(cli, ["firmware", "check", q, "--target", "nrf52840"])
    assert r.exit_code == 0 and "fits: yes" in r.output, r.output


def test_an_unbounded_window_is_refused_in_one_line(tmp_path):
    path = _tiny(tmp_path, 8, 2, 0, layers=1)
    with pytest.raises(DataError, match=re.escape(NO_WINDOW)) as e:
        from_onnx(path)
    assert "\n" not in str(e.value)
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as out:
        for args in (["emit", str(path), "--out", str(Path(out) / "x")], ["simulate", str(path)],
                     ["measure", str(path), "--core", "cortex-m4"]):
            res = runner.invoke(cli, ["firmware", *args])
            lines = [line for line in res.output.splitlines() if line.startswith("Error:")]
            assert res.exit_code == 1 and len(lines) == 1 and NO_WINDOW in lines[0], res.output
            assert "Traceback" not in res.output
    res = runner.invoke(cli, ["firmware", "check", str(path), "--target", "nrf52840"])       # the graph's plan still
    assert res.exit_code == 0 and "fits: yes" in res.output and "integer-only" not in res.output, res.output


@pytest.mark.parametrize("positions", ["none", None])
def test_alibi_in_the_graph_but_not_in_the_metadata_is_refused(tmp_path, positions):
    """A file whose graph subtracts ALiBi's bias while its metadata says positions none (or
    names none) is refused in one line rather than run without the bias; the metadata saying
    alibi over a graph without it, too."""
    import json

    import onnx
    from edgeseq.errors import ModelFileError

    def edited(src, **change):
        m = onnx.load(str(src))
        p = next(p for p in m.metadata_props if p.key == "edgeseq.config")
        cfg = {k: v for k, v in {**json.loads(p.value), **change}.items() if v is not None}
        if change.get("positions", "x") is None:
            cfg.pop("positions", None)
        p.value = json.dumps(cfg)
        out = tmp_path / f"edited-{positions}-{src.stem}.onnx"
        onnx.save(m, str(out))
        return out

    src = _tiny(tmp_path, 8, 2, 5, layers=1, positions="alibi")
    with pytest.raises(ModelFileError, match="has a recency bias") as e:
        from_onnx(edited(src, positions=positions))
    assert "\n" not in str(e.value) and ("names no positions" in str(e.value)) == (positions is None)
    plain = _tiny(tmp_path, 8, 2, 5, layers=1, positions="none")
    with pytest.raises(ModelFileError, match="says positions 'alibi' but has 0 sets"):
        from_onnx(edited(plain, positions="alibi"))


def test_a_history_past_the_window_is_planned_at_the_window(tmp_path):
    """The model reads no row older than its window, so a longer --history (here 200 and 10^8 for
    a window of 6), or a max_history exported past it, is planned at the window, as the cache is
    at steady state, and says so. For this static int8 model that is the integer step's int16
    ring, as with no --history or --history 6; a shorter history plans the graph at that history,
    and the longest history that fits is the whole window."""
    import onnx

    from firmware_sim.plan import check_model
    from firmware_sim.targets import get_target
    path = _tiny(tmp_path, 8, 2, 6, layers=1)
    nrf = get_target("nrf52840")
    base = check_model(path, nrf)
    at = check_model(path, nrf, history=6)
    assert "int16 KV ring of 6 rows" in base["plan_of"] and "history_asked" not in at
    assert (at["history"], at["ram"], at["cost"], at["plan_of"]) == (6, base["ram"], base["cost"], base["plan_of"])
    for asked in (200, 100_000_000):
        r = check_model(path, nrf, history=asked)
        assert (r["history"], r["history_asked"], r["window"]) == (6, asked, 6)
        assert f"--history {asked:,} is past the model's window of 6 readings" in r["history_note"]
        assert r["ram"] == at["ram"] and r["cost"] == at["cost"] and r["plan_of"] == at["plan_of"]
    r = check_model(path, nrf, history=4)
    assert r["history"] == 4 and "history_note" not in r and "graph as exported" in r["plan_of"]
    assert r["longest_history"] == 6
    proto = onnx.load(str(path))                               # as `export --max-history 100` records it
    for p in proto.metadata_props:
        if p.key == "edgeseq.max_history":
            p.value = "100"
    wide = tmp_path / "max-history-100.onnx"
    onnx.save(proto, str(wide))
    r = check_model(wide, nrf)
    assert (r["history"], r["history_asked"], r["ram"], r["cost"]) == (6, 100, at["ram"], at["cost"])
    assert "the model's max_history 100 is past the model's window of 6 readings" in r["history_note"]
    res = CliRunner().invoke(cli, ["firmware", "check", str(path), "--target", "nrf52840", "--history", "200"])
    assert res.exit_code == 0 and "fits: yes" in res.output, res.output
    assert ", history 6\n" in res.output and "history: --history 200 is past the model's window of 6" in res.output
    res = CliRunner().invoke(cli, ["firmware", "check", str(path), "--target", "nrf52840", "--history", "4"])
    assert "longest history that fits in RAM: 6 readings (the whole window" in res.output, res.output
