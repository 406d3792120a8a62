"""The integer-only state-space step (firmware_sim.intssm, kernels/es_ssm_int.h): LayerNorm against
float, integer-only accuracy against float on both protocols (fixed and selective decay), the
emitted C bit-exact with the simulator on the host (odd widths included) and on emulated
Cortex-M4 (SMLAD and portable paths) and M0+, the CLI, and a constant the step cannot hold
refused in one line. The 3,000-reading emulated check is scripts/firmware_ssm_check.py."""

import shutil

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import numpy_helper

from edgeseq.cli import cli
from edgeseq.errors import ModelFileError
from firmware_sim.cemit import emit
from firmware_sim.intsim import from_onnx
from firmware_sim.intssm import LayerNormQ
from firmware_sim.simulate import simulate
from helpers import (assert_c_never_says, assert_lean_step, export_step, gcc_strict, host_stream, measure_once, readings,
                     simulated, tiny_ssm_checkpoint)

F, C = 3, 4


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 64), st.floats(-12, 3), st.floats(-100, 100), st.integers(0, 2 ** 31 - 1),
       st.sampled_from([1e-5, 1e-3, 0.0]))
def test_integer_layernorm_is_float_layernorm(D, log_spread, offset, seed, eps):
    """Spreads from 1e-12 (eps dominates, or a constant row) to 1e3 around offsets up to 100:
    within 2e-3 of float LayerNorm plus one Q12 step for each term."""
    rng = np.random.default_rng(seed)
    gamma, beta = rng.uniform(-2, 2, D), rng.uniform(-1, 1, D)
    u = offset + rng.standard_normal(D) * 10.0 ** log_spread
    uq = np.round(u * 4096).astype(np.int64)
    ln = LayerNormQ.make(gamma, beta, eps, "ln", "<test>")
    got = ln(uq[None])[0] / 4096
    x = uq / 4096
    var = x.var()
    want = (x - x.mean()) / np.sqrt(var + eps) * gamma + beta if var + eps > 0 else beta
    assert np.abs(got - want).max() <= 2e-3 * (1 + np.abs(want).max()) + 3 / 4096, (got, want)


@pytest.fixture(scope="module")
def selective(basicmotions, tmp_path_factory):
    """(float path, static int8 path) of a selective SSM trained briefly (8 epochs), seed 0."""
    from edgeseq.train import TrainConfig, train
    from export import export_int8, export_model
    root = tmp_path_factory.mktemp("ssm_selective")
    ck = train("ssm", basicmotions, TrainConfig(epochs=8, lr=5e-3), {"selective": True}, progress=False)
    export_model(ck, root / "sel.onnx")
    export_int8(ck, root / "sel-int8.onnx", "static")
    return root / "sel.onnx", root / "sel-int8.onnx"


@pytest.fixture(scope="module")
def models(int8, exported, selective):
    """variant -> (float path, static int8 path), trained on BasicMotions."""
    return {"fixed": (exported("ssm")[0], int8("ssm", "static")[0]), "selective": selective}


SIMULATED = {}          # variant -> simulate()'s report, reused by the CLI test


@pytest.mark.parametrize("variant", ["fixed", "selective"])
def test_integer_only_accuracy_is_within_one_point_of_float_on_both_protocols(models, variant):
    r = SIMULATED[variant] = simulate(models[variant][1], float_model=models[variant][0])
    a, nr = r["accuracy"], r["never_reset"]
    assert r["arch"] == "ssm"
    assert a["integer_only"] >= a["float"] - 0.01, a
    assert nr["integer_only"] >= nr["float"] - 0.01, nr
    assert r["vs_float"]["mean_rel"] <= 0.01 and r["vs_float"]["argmax_agreement"] >= 0.98, r["vs_float"]


def _tiny(tmp_path, selective: bool, d_model: int, d_state: int):
    """An untrained, seeded two-layer SSM on F channels, weights livelier than the default
    init, exported static int8 (calibrated on seeded readings)."""
    ckpt = tiny_ssm_checkpoint(selective, d_model, d_state, C, F)
    path = tmp_path / f"tiny-{selective}.onnx"
    return export_step(ckpt, path, "static", readings(60, 4, seed=1, features=F))


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc on the host")
@pytest.mark.parametrize("selective,d_model,d_state", [(False, 10, 5), (True, 12, 6)])
def test_emitted_c_is_bit_exact_with_the_simulator(tmp_path, selective, d_model, d_state):
    m = from_onnx(_tiny(tmp_path, selective, d_model, d_state))
    assert m.kind == "ssm" and m.selective == selective
    report = emit(m, tmp_path / "c", prefix="motion")
    d = tmp_path / "c"
    exe = tmp_path / "stream"
    gcc_strict(exe, [d / f for f in ("motion_example.c", "motion_model.c", "es_tables.c", "es_ssm_tables.c")])
    assert_c_never_says(d, ("motion_model.h", "motion_model.c", "es_kernels.h", "es_ssm_int.h"),
                        ("malloc", "float", "double", "int64_t", "long long", "math.h"))
    xq = m.to_fixed(readings(400, 1, seed=2, features=F)[:, 0])
    assert np.array_equal(host_stream(exe, xq), simulated(m, xq))
    assert report["state_bytes"] == 4 * 2 * d_state and report["scratch_bytes"] % 4 == 0


@pytest.fixture(scope="module")
def measured(models):
    measure = measure_once(readings=300, counted=1)
    return lambda variant, core, opt, portable=False: measure(models[variant][1], core, opt, portable)


@pytest.mark.parametrize("variant,core,opt,portable", [("fixed", "cortex-m4", "-O2", False),
                                                       ("fixed", "cortex-m0plus", "-Os", False),
                                                       ("selective", "cortex-m4", "-Os", True),
                                                       ("selective", "cortex-m0plus", "-O2", False)])
def test_the_step_runs_bit_exact_on_an_emulated_core(measured, variant, core, opt, portable):
    r = measured(variant, core, opt, portable)
    assert r["bit_exact_readings"] == 300 and r["arch"] == "ssm" and r["selective"] == (variant == "selective")
    assert_lean_step(r, core, portable, mac_under=(5, 16))


@pytest.mark.parametrize("variant,target,core", [("fixed", "nrf52840", "cortex-m4"),
                                                 ("selective", "rp2040", "cortex-m0plus")])
def test_check_agrees_with_what_measure_measures(models, measured, variant, target, core):
    from firmware_sim.cemit import layout
    from firmware_sim.plan import check_model
    from firmware_sim.targets import get_target
    r = measured(variant, core, "-O2")
    c = check_model(models[variant][1], get_target(target))
    assert c["cost"]["source"].startswith("fitted") and "integer-only" in c["plan_of"]
    flash = r["sections"]["text"] + r["sections"]["rodata"] + r["tables_bytes"]
    assert abs(c["flash"]["total"] - flash) <= 0.10 * flash, (c["flash"], r["sections"])
    assert abs(c["cost"]["cycles"] - r["cycles_per_step"]) <= 0.25 * r["cycles_per_step"], (c["cost"], r["cycles_per_step"])
    lay = layout(from_onnx(models[variant][1]))
    assert c["ram"]["total"] >= lay["scratch"] + lay["state"] + r["stack_bytes"]


def test_firmware_cli_takes_the_ssm(models, tmp_path, monkeypatch):
    import firmware_sim.simulate
    runner = CliRunner()
    q = str(models["fixed"][1])
    if "fixed" in SIMULATED:                     # the figures are the accuracy test's: only the printing is new here
        monkeypatch.setattr(firmware_sim.simulate, "simulate", lambda *a, **k: SIMULATED["fixed"])
    r = runner.invoke(cli, ["firmware", "simulate", q, "--float", str(models["fixed"][0])])
    n = (SIMULATED.get("fixed") or {}).get("never_reset", {})
    assert r.exit_code == 0 and "ssm integer-only" in r.output and "never reset" in r.output, r.output
    assert not n or f"integer-only {n['integer_only']:.4f}" in r.output, r.output
    r = runner.invoke(cli, ["firmware", "emit", q, "--out", str(tmp_path / "fw"), "--prefix", "motion"])
    assert r.exit_code == 0 and "es_ssm_tables.c" in r.output, r.output
    assert {"motion_model.h", "motion_model.c", "es_ssm_int.h", "es_ssm_tables.c"} <= {p.name for p in (tmp_path / "fw").iterdir()}


def test_a_constant_the_step_cannot_hold_is_refused_in_one_line(models, tmp_path):
    proto = onnx.load(str(models["fixed"][1]))
    for t in proto.graph.initializer:
        if t.name == "model.layers.0.ln.weight":
            a = numpy_helper.to_array(t).copy()
            a[3] = 1e9
            t.CopyFrom(numpy_helper.from_array(a, t.name))
    onnx.save(proto, str(tmp_path / "bad.onnx"))
    with pytest.raises(ModelFileError, match=r"layer 0's LayerNorm weight\[3\] is 1e\+09") as e:
        from_onnx(tmp_path / "bad.onnx")
    assert "\n" not in str(e.value)
    res = CliRunner().invoke(cli, ["firmware", "emit", str(tmp_path / "bad.onnx"), "--out", str(tmp_path / "x")])
    assert res.exit_code == 1 and res.output.count("Error:") == 1 and "Traceback" not in res.output, res.output
