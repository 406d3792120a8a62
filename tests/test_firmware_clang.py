"""The emitted integer step built by clang (the ziglang wheel) instead of arm-none-eabi-gcc: bit-exact
with the simulator on emulated Cortex-M4 and M0+, and `firmware check --compiler clang` agreeing
with what `firmware measure --compiler clang` measures on models outside the default sizes its
clang figures came from. The side-by-side figures are scripts/firmware_compilers.py's."""

import importlib.util
import shutil

import pytest

from firmware_sim.cemit import layout
from firmware_sim.intsim import from_onnx
from firmware_sim.plan import check_model
from firmware_sim.targets import get_target

pytest.importorskip("unicorn", reason="pip install unicorn (edgeseq[firmware]) to run the step on an emulated core")
pytest.importorskip("elftools", reason="pip install pyelftools (edgeseq[firmware])")
if importlib.util.find_spec("ziglang") is None:
    pytest.skip("clang for Cortex-M not found: pip install ziglang", allow_module_level=True)
if shutil.which("arm-none-eabi-objdump") is None and shutil.which("llvm-objdump") is None:
    pytest.skip("no Arm objdump for the instruction mix: apt-get install gcc-arm-none-eabi", allow_module_level=True)

from firmware_sim.measure import measure  # noqa: E402


@pytest.mark.parametrize("target,core", [("nrf52840", "cortex-m4"), ("rp2040", "cortex-m0plus")])
@pytest.mark.parametrize("arch", ["gru", "ssm"])
def test_clang_builds_run_bit_exact_and_check_plans_them(int8, arch, target, core):
    path = int8(arch, "static")[0]
    r = measure(path, core, "-O2", readings=300, counted=2, compiler="clang")   # raises on any differing logit
    assert "clang" in r["compiler"] and r["bit_exact_readings"] == 300
    assert r["helper_instructions_per_step"] == {} and r["sections"]["data"] == r["sections"]["bss"] == 0
    c = check_model(path, get_target(target), compiler="clang")
    g = check_model(path, get_target(target))
    assert c["compiler"] == "clang" and c["ram"]["stack"] > g["ram"]["stack"] - 64
    measured_flash = r["sections"]["text"] + r["sections"]["rodata"] + r["tables_bytes"]
    assert abs(c["flash"]["total"] - measured_flash) <= 0.10 * measured_flash, (c["flash"], r["sections"])
    assert abs(c["cost"]["cycles"] - r["cycles_per_step"]) <= 0.10 * r["cycles_per_step"], (c["cost"], r)
    lay = layout(from_onnx(path))
    need = lay["scratch"] + lay["state"] + lay["io"] + r["stack_bytes"]
    assert need <= c["ram"]["total"] <= 1.10 * need + 64, (c["ram"], need)
