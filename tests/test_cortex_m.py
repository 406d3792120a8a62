"""Cross-compiled C executed on emulated Cortex-M cores: results bit-exact with numpy, and the
counts (instructions, mix, stack, sections, cycles) plausible."""

import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from edgeseq.errors import EdgeseqError
from firmware_sim import emulate, toolchain

KERNEL = r"""
#include <stdint.h>

int8_t xs[64];
int8_t ws[4 * 64];

__attribute__((noinline)) int32_t dot_s8(const int8_t *a, const int8_t *b, int32_t n)
{
    int32_t acc = 0;
    int32_t i;
    for (i = 0; i < n; i++) {
        acc += (int32_t)a[i] * (int32_t)b[i];
    }
    return acc;
}

__attribute__((noinline)) uint32_t fnv1a(const uint8_t *p, uint32_t n)
{
    uint32_t h = 2166136261u;
    uint32_t i;
    for (i = 0; i < n; i++) {
        h = (h ^ p[i]) * 16777619u;
    }
    return h;
}

/* Four rows of ws times xs into a stack buffer, then the checksum of its bytes: not a leaf. */
uint32_t matvec_checksum(void)
{
    int32_t out[4];
    int32_t r;
    for (r = 0; r < 4; r++) {
        out[r] = dot_s8(ws + 64 * r, xs, 64);
    }
    return fnv1a((const uint8_t *)out, sizeof out);
}

int64_t mul64(int32_t a, int32_t b)
{
    return (int64_t)a * b;
}

/* Branch-free clipping: compilers for Thumb-2 use IT blocks, whose instructions run or not by data. */
int32_t vs[64];

__attribute__((noinline)) int32_t clip_sum(const int32_t *v, int32_t n)
{
    int32_t s = 0, i;
    for (i = 0; i < n; i++) {
        int32_t x = v[i];
        if (x > 100) x = 100;
        if (x < -100) x = -100;
        s += x;
    }
    return s;
}

/* Initialised data (.data), a constant table (.rodata) and state kept between calls. */
int32_t counter = 40;
const int16_t steps[4] = {1, -3, 300, -20000};

int32_t bump(uint32_t i)
{
    counter += steps[i & 3u];
    return counter;
}
"""

CORES = ("cortex-m4", "cortex-m0plus")
OPTS = ("-Os", "-O2")


def _fnv1a(data: bytes) -> int:
    h = np.uint32(2166136261)
    with np.errstate(over="ignore"):
        for byte in data:
            h = (h ^ np.uint32(byte)) * np.uint32(16777619)
    return int(h)


@pytest.fixture(scope="module")
def elfs(tmp_path_factory):
    if toolchain.find_compiler() is None:
        pytest.skip("arm-none-eabi-gcc not found: apt-get install gcc-arm-none-eabi (or pip install ziglang)")
    pytest.importorskip("unicorn", reason="unicorn not installed: pip install 'edgeseq[firmware]'")
    pytest.importorskip("elftools", reason="pyelftools not installed: pip install 'edgeseq[firmware]'")
    root = tmp_path_factory.mktemp("cortex_m")
    src = root / "kernel.c"
    src.write_text(KERNEL)
    return {(core, opt): toolchain.build([src], core, opt, root / f"{core}{opt}") for core in CORES for opt in OPTS}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return rng.integers(-128, 128, 64, dtype=np.int8), rng.integers(-128, 128, (4, 64), dtype=np.int8)


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("opt", OPTS)
def test_dot_matches_numpy_and_counts_are_plausible(elfs, data, core, opt):
    x, w = data
    m = emulate.Machine(elfs[core, opt], core)
    m.write("xs", x)
    m.write("ws", w)
    r = m.call("dot_s8", m.addr("ws") + 64, m.addr("xs"), 64, count=True)
    assert r["r0_signed"] == int(w[1].astype(np.int32) @ x.astype(np.int32))
    assert 64 < r["instructions"] < 64 * 40
    assert r["by_function"] == Counter(dot_s8=r["instructions"])
    assert sum(r["mix"].values()) == r["instructions"]
    assert 0 <= r["stack_bytes"] < 1024
    c = r["cycles"]
    assert c["kind"] == "modelled" and r["provenance"]["instructions"] == "measured"
    assert r["instructions"] <= c["cycles"] < 10 * r["instructions"]
    assert c["unknown"] == {}, "every executed mnemonic should have a timing class"
    size = toolchain.sections(elfs[core, opt])
    assert size["text"] > 0 and size["bss"] == 64 + 4 * 64 + 4 * 64 and size["data"] == 4
    assert 0 < toolchain.sections(elfs[core, opt], symbols_from=["dot_s8"])["text"] <= size["text"]


@pytest.mark.parametrize("core", CORES)
def test_non_leaf_call_uses_stack_and_checksum_matches(elfs, data, core):
    x, w = data
    m = emulate.Machine(elfs[core, "-O2"], core)
    m.write("xs", x)
    m.write("ws", w)
    expected = _fnv1a((w.astype(np.int32) @ x.astype(np.int32)).astype("<i4").tobytes())
    plain = m.call("matvec_checksum")
    counted = m.call("matvec_checksum", count=True)
    assert plain["r0"] == counted["r0"] == expected
    assert 16 <= counted["stack_bytes"] < 1024  # out[4] lives on the stack
    assert plain["stack_bytes"] <= counted["stack_bytes"]
    assert counted["by_function"]["dot_s8"] > 4 * 64


def test_64bit_multiply_calls_libgcc_on_m0plus_but_not_on_m4(elfs):
    a, b = -123456789, 987654321
    for core in CORES:
        r = emulate.Machine(elfs[core, "-Os"], core).call("mul64", a, b, count=True)
        got = np.array([r["r0"] | (r["r1"] << 32)], dtype=np.uint64).view(np.int64)[0]
        assert got == np.int64(a) * np.int64(b)
        assert ("__aeabi_lmul" in r["by_function"]) == (core == "cortex-m0plus"), r["by_function"]


def test_globals_load_and_persist_until_reset(elfs):
    m = emulate.Machine(elfs["cortex-m0plus", "-O2"], "cortex-m0plus")
    assert [m.call("bump", i)["r0_signed"] for i in range(4)] == list(40 + np.cumsum([1, -3, 300, -20000]))
    assert np.frombuffer(m.read("counter", 4), "<i4")[0] == 40 - 19702
    m.reset()
    assert m.call("bump", 0)["r0"] == 41
    size = toolchain.sections(elfs["cortex-m0plus", "-O2"])
    assert size["data"] == 4 and size["rodata"] >= 8


def test_cpu_model_is_the_core(elfs):
    """Thumb-2 code built for the M4 faults on the ARMv6-M model: the core really is emulated."""
    m0 = emulate.Machine(elfs["cortex-m4", "-Os"], "cortex-m0plus")
    assert m0.cpu_model == "UC_CPU_ARM_CORTEX_M0"
    with pytest.raises(EdgeseqError, match="CPU fault in 'mul64'.*INSN_INVALID"):
        m0.call("mul64", 3, 5)  # SMULL is ARMv7-M
    assert emulate.Machine(elfs["cortex-m4", "-Os"], "cortex-m4").call("mul64", 3, 5)["r0"] == 15


def test_m4_is_cheaper_than_m0plus_per_dot(elfs, data):
    x, w = data
    modelled = {}
    for core in CORES:
        m = emulate.Machine(elfs[core, "-O2"], core)
        m.write("xs", x)
        m.write("ws", w)
        modelled[core] = m.call("dot_s8", m.addr("ws"), m.addr("xs"), 64, count=True)["cycles"]["cycles"]
    assert modelled["cortex-m4"] < modelled["cortex-m0plus"]


def test_cycles_without_events_is_labelled_and_not_lower():
    mix = Counter({"ldrsb": 128, "smlabb": 64, "bne": 64, "cmp": 64, "push": 1, "pop": 1})
    rough = emulate.cycles(mix, "cortex-m4")
    exact = emulate.cycles(mix, "cortex-m4", {"branch_not_taken": 1, "pipelined_loads": 64,
                                              "transfer_regs": 2, "pc_loads": 1})
    assert rough["kind"] == exact["kind"] == "modelled"
    assert exact["cycles"] < rough["cycles"]
    assert "Technical Reference Manual" in exact["source"]


@pytest.mark.parametrize("mnemonic, expected", [
    ("ldrsb.w", ("ldrsb", "load")), ("bne", ("b", "branch_cond")), ("bls", ("b", "branch_cond")),
    ("bl", ("bl", "branch_link")), ("addeq", ("add", "alu")), ("lsls", ("lsl", "alu")),
    ("muls", ("mul", "mul")), ("smlad", ("smlad", "mul")), ("pop", ("pop", "load_multiple")),
    ("bics", ("bic", "alu")), ("movseq", ("mov", "alu")), ("udf", ("udf", "other")),
])
def test_classify(mnemonic, expected):
    assert emulate.classify(mnemonic) == expected


def test_errors_are_one_line_edgeseq_errors(elfs, tmp_path):
    m = emulate.Machine(elfs["cortex-m4", "-Os"], "cortex-m4")
    with pytest.raises(EdgeseqError, match="no symbol 'nope'"):
        m.addr("nope")
    with pytest.raises(EdgeseqError, match="do not fit"):
        m.write("xs", bytes(65))
    with pytest.raises(EdgeseqError, match="did not return"):
        m.call("dot_s8", m.addr("xs"), m.addr("ws"), 64, max_instructions=50)
    with pytest.raises(EdgeseqError, match="CPU fault in 'dot_s8'.*READ_UNMAPPED"):
        m.call("dot_s8", 0x60000000, m.addr("xs"), 64)
    with pytest.raises(EdgeseqError, match="unknown core"):
        emulate.Machine(elfs["cortex-m4", "-Os"], "cortex-a53")
    bad = tmp_path / "bad.c"
    bad.write_text("int f(int x) { return y; }\n")
    with pytest.raises(EdgeseqError, match="compiling bad.c for cortex-m4 failed") as e:
        toolchain.compile_object(bad, "cortex-m4", "-O2", tmp_path)
    assert "\n" not in str(e.value)
    with pytest.raises(EdgeseqError, match="optimisation level"):
        toolchain.build([bad], "cortex-m4", "-O9", tmp_path)


@pytest.mark.parametrize("opt", OPTS)
def test_it_block_instructions_count_as_issued_whatever_their_condition(elfs, opt):
    """The core issues every instruction of an IT block, its condition met or not; the emulator
    runs only those whose condition holds. Counted as issued, a branch-free loop of IT blocks
    takes the same instructions and cycles whatever the data."""
    m = emulate.Machine(elfs["cortex-m4", opt], "cortex-m4")
    counts = []
    for values in (np.zeros(64), np.full(64, 1000), np.full(64, -1000), np.arange(-320, 320, 10)):
        m.write("vs", np.asarray(values, "<i4").tobytes())
        r = m.call("clip_sum", m.addr("vs"), 64, count=True)
        assert r["r0_signed"] == int(np.clip(values, -100, 100).sum())
        counts.append((r["instructions"], r["cycles"]["cycles"], r["events"]["it_condition_failed"]))
    if not any(k.startswith("it") and k != "it_condition_failed" for k in r["mix"]):
        pytest.skip(f"this compiler built clip_sum at {opt} without IT blocks")
    assert len({c[:2] for c in counts}) == 1, counts                 # issued work does not depend on the data
    assert max(c[2] for c in counts) > 0                             # and some were skipped by the emulator


def test_import_does_not_need_unicorn():
    code = ("import sys; sys.modules['unicorn'] = None; import firmware_sim.emulate as e\n"
            "try:\n    e.Machine('x.elf', 'cortex-m4')\nexcept Exception as err:\n    print(type(err).__name__, err)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("EdgeseqError unicorn is not installed")
