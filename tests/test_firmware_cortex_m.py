"""The emitted C step on emulated Cortex-M cores: cross-compiled with -Werror -pedantic, run for
1,000 real readings bit-exact with the simulator (SMLAD path on the M4, portable path on the M0+
and on the M4), no 64-bit helper calls, a small stack, and `firmware check` agreeing with what
`firmware measure` measures. Exact figures come from `edgeseq firmware measure` (README); the
bounds here are loose so a compiler update does not fail them."""

import shutil

import pytest

from firmware_sim.cemit import layout
from firmware_sim.intsim import from_onnx
from firmware_sim.plan import check_model
from firmware_sim.targets import get_target
from helpers import assert_lean_step

pytest.importorskip("unicorn", reason="pip install unicorn (edgeseq[firmware]) to run the step on an emulated core")
pytest.importorskip("elftools", reason="pip install pyelftools (edgeseq[firmware])")
if shutil.which("arm-none-eabi-gcc") is None:
    pytest.skip("arm-none-eabi-gcc not found: apt-get install gcc-arm-none-eabi", allow_module_level=True)

from firmware_sim.measure import measure  # noqa: E402

RECURRENT = ["rnn", "gru", "lstm"]
CASES = [("cortex-m4", "-O2", False), ("cortex-m4", "-Os", True), ("cortex-m0plus", "-Os", False)]


@pytest.fixture(scope="module")
def measured(int8):
    cache = {}

    def get(arch, core, opt, portable=False):
        key = arch, core, opt, portable
        if key not in cache:
            cache[key] = measure(int8(arch, "static")[0], core, opt, readings=1000, counted=2, portable=portable)
        return cache[key]
    return get


@pytest.mark.parametrize("core,opt,portable", CASES)
@pytest.mark.parametrize("arch", RECURRENT)
def test_the_step_runs_bit_exact_on_an_emulated_core(measured, arch, core, opt, portable):
    r = measured(arch, core, opt, portable)          # measure() raises if any logit differs
    assert r["bit_exact_readings"] == 1000
    assert_lean_step(r, core, portable, mac_under=(3.5, 13))


@pytest.mark.parametrize("target,core", [("nrf52840", "cortex-m4"), ("rp2040", "cortex-m0plus")])
@pytest.mark.parametrize("arch", RECURRENT)
def test_check_agrees_with_what_measure_measures(int8, measured, arch, target, core):
    r = measured(arch, core, "-O2")
    c = check_model(int8(arch, "static")[0], get_target(target))
    measured_flash = r["sections"]["text"] + r["sections"]["rodata"] + r["tables_bytes"]
    assert abs(c["flash"]["total"] - measured_flash) <= 0.10 * measured_flash, (c["flash"], r["sections"])
    assert abs(c["cost"]["cycles"] - r["cycles_per_step"]) <= 0.25 * r["cycles_per_step"], (c["cost"], r["cycles_per_step"])
    lay = layout(from_onnx(int8(arch, "static")[0]))
    assert c["ram"]["total"] >= lay["scratch"] + lay["state"] + r["stack_bytes"]       # RAM never under-reported
