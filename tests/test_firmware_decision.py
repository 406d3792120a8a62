"""The decision layer in firmware: integer arithmetic (es_decide_q15.h) emitted with every static
int8 model that has decision settings, bit-exact with `firmware_sim.intdecide` on the host (gcc
-Werror -pedantic -Wconversion) and on emulated Cortex-M4 and M0+ cores, a small share of the
step's cycles, and counted by `firmware check`."""

import shutil

import numpy as np
import pytest

from edgeseq.data import load_dataset
from edgeseq.runtime.decision import DecisionSpec
from edgeseq.runtime.evaluate import joined_streams
from firmware_sim.cemit import emit
from firmware_sim.intdecide import EXP_Q15, IntDecider, params, probs_q15
from firmware_sim.intsim import from_onnx
from helpers import assert_c_never_says, gcc_strict, host_stream, simulated

ARCHS = ["gru", "ssm", "transformer"]


def decided_int8(int8, arch, folder, smoothing="ema"):
    """The static int8 model of `arch` with decision settings that fire on BasicMotions (an EMA,
    or a moving mean of 6 readings)."""
    from export.decision import write_decision
    src = int8(arch, "static")[0]
    labels = from_onnx(src).labels
    spec = DecisionSpec.make(labels, ["Standing"], smoothing=smoothing, alpha=0.3, window=6, threshold=0.7,
                             min_duration=3, refractory=5, release=2, rate_hz=10.0)
    return write_decision(src, spec, folder / f"{arch}-{smoothing}-events.onnx"), spec


def stream(m, n=1500):
    ds = load_dataset("basicmotions").for_model(m.meta["features"])
    X, _, _ = joined_streams(ds.test, 1, 0)
    return m.to_fixed(X[0][:n])


def test_integer_probabilities_and_the_exp_table():
    assert EXP_Q15[0] == 32768 and EXP_Q15[16] == round(32768 / np.e) and EXP_Q15[-1] == 1
    p = probs_q15(np.array([[0, 0, 0, 0], [4096 * 20, 0, 0, 0], [4096, 0, -4096, 1 << 29]]))
    assert p[0].tolist() == [8192] * 4                       # even odds, exactly a quarter each
    assert p[1].tolist() == [32768, 0, 0, 0]
    assert p[2, 3] == 32768 and p[2, :3].sum() == 0          # extreme logits: no overflow
    assert (probs_q15(np.random.default_rng(0).integers(-40000, 40000, (200, 5))).sum(1) <= 32768).all()


def test_the_integer_moving_mean_is_the_floor_of_the_windows_mean():
    """A moving mean in firmware: s = (sum of the last `window` Q15 probabilities) // readings
    in the window, per stream, from the first reading on."""
    spec = DecisionSpec.make(["a", "b", "c"], smoothing="mean", window=4, threshold=0.99)
    assert params(spec)["window"] == 4 and params(DecisionSpec.make(["a", "b"], alpha=0.5))["window"] == 0
    assert params(DecisionSpec.make(["a", "b"], ["a"], smoothing="none"))["threshold_q15"][0] == 32769
    rng = np.random.default_rng(0)
    logits = rng.integers(-30000, 30000, (40, 2, 3))
    dec = IntDecider(spec, 2)
    for t in range(40):
        dec.update(logits[t])
        p = probs_q15(logits[max(0, t - 3):t + 1])
        assert np.array_equal(dec.s, p.sum(axis=0) // len(p)), t


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc on the host")
@pytest.mark.parametrize("arch,smoothing", [*((a, "ema") for a in ARCHS), ("gru", "mean")])
def test_emitted_decision_is_bit_exact_with_the_integer_simulator(int8, arch, smoothing, tmp_path):
    path, spec = decided_int8(int8, arch, tmp_path, smoothing)
    m = from_onnx(path)
    emit(m, tmp_path / "c", prefix="es")
    c = tmp_path / "c"
    gcc_strict(tmp_path / "x", [c / "es_example.c", c / "es_model.c", *sorted(c.glob("*tables.c"))])
    assert_c_never_says(c, ("es_model.h", "es_model.c", "es_decide_q15.h"),
                        ("malloc", "float", "double", "int64_t", "long long"))
    xq = stream(m)
    got = host_stream(tmp_path / "x", xq)
    dec, want = IntDecider(spec, 1), []
    for row in simulated(m, xq):
        ev = dec.update(np.array([row[:-1]]))
        end = [e.cls for e in ev if e.kind == "end"]
        start = [e for e in ev if e.kind == "start"]
        want.append([*row, end[0] if end else -1, start[0].cls if start else -1,
                     start[0].position - start[0].onset + 1 if start else 0])
    want = np.array(want)
    assert np.array_equal(got, want)
    assert (want[:, -2] >= 0).sum() >= 3 and (want[:, -3] >= 0).sum() >= 3      # events start and end


def test_a_model_without_settings_emits_no_decision(int8, tmp_path):
    emit(from_onnx(int8("gru", "static")[0]), tmp_path, prefix="es")
    assert not (tmp_path / "es_decide_q15.h").exists() and "decide" not in (tmp_path / "es_model.h").read_text()


@pytest.mark.parametrize("core,smoothing", [("cortex-m4", "ema"), ("cortex-m0plus", "ema"), ("cortex-m0plus", "mean")])
def test_decision_on_an_emulated_core_is_bit_exact_and_cheap(int8, tmp_path, core, smoothing):
    from helpers import skip_without_emulator
    skip_without_emulator()
    from firmware_sim.measure import measure
    path, _ = decided_int8(int8, "gru", tmp_path, smoothing)
    r = measure(path, core, "-O2", readings=400, counted=2)       # raises where any logit or event differs
    d = r["decision"]
    assert d["bit_exact_readings"] == 400
    assert 0 < d["instructions_per_step"] and d["share_of_step"] <= 0.03, d


def test_check_counts_the_decision_layer(int8, tmp_path):
    from firmware_sim.plan import check_model
    from firmware_sim.targets import get_target
    path, _ = decided_int8(int8, "gru", tmp_path)
    plain, with_dec = (check_model(p, get_target("nrf52840")) for p in (int8("gru", "static")[0], path))
    C = 4
    assert with_dec["ram"]["total"] - plain["ram"]["total"] == 8 * C + 24
    assert with_dec["flash"]["total"] - plain["flash"]["total"] == with_dec["flash"]["decision"] > 356
    assert 0 < with_dec["cost"]["cycles"] - plain["cost"]["cycles"] <= 0.03 * plain["cost"]["cycles"]
    mean = check_model(decided_int8(int8, "gru", tmp_path, "mean")[0], get_target("nrf52840"))
    assert mean["ram"]["total"] - plain["ram"]["total"] == 8 * C + 24 + 4 * 6 * C + 4 * C + 8     # ring, sums
