"""Microcontroller profiles: memory and clock from each part's datasheet, and the cost figures
the estimate uses.

`cycles_per_mac` is the cost of one int8 multiply-accumulate in an optimised kernel on that
core, and `cycles_per_op` the cost of one other element operation (add, table lookup with
interpolation, requantization). Both are estimates from the cores' published instruction
timings, not measurements. Override them with `--cycles-per-mac` or in a profile file.

- Cortex-M0+: no DSP extension. An int8 MAC is two byte loads, a 1-cycle MULS and an add,
  plus loop overhead: about 7 cycles (Arm Cortex-M0+ Technical Reference Manual, instruction
  timings).
- Cortex-M4: SMLAD does two 16-bit MACs in one cycle, and SXTB16 unpacks the int8 pairs. Arm's
  CMSIS-NN s8 fully-connected kernel is built on this; about 1 cycle per MAC.
- Cortex-M7: dual-issue with the same DSP instructions; about 0.5 cycle per MAC.
- Xtensa LX7 (ESP32-S3): 128-bit PIE SIMD, used by Espressif's ESP-NN; about 0.5 cycle per
  MAC for these small matrices.

User profiles: a JSON file with a list of objects carrying the fields of `Target`, one such
object alone, or a name -> profile mapping; `--targets-file` adds them to the built-in ones. A
file never replaces a built-in profile: an entry named like one (or like an earlier entry), also
up to case, is refused, so a name means one part wherever it is used; give your variant a name of
its own. Names are matched exactly (case and all) when a command looks one up.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from edgeseq.errors import DataError, UsageError


@dataclass(frozen=True)
class Target:
    name: str
    part: str
    core: str
    clock_mhz: float
    flash_kb: int
    sram_kb: int
    cycles_per_mac: float
    cycles_per_op: float
    source: str
    note: str = ""
    xip_cache_kb: int = 0     # flash read through a cache of this size (0: flash on the bus, no cache)

    def to_json(self) -> dict:
        return asdict(self)


BUILTIN = {t.name: t for t in [
    Target("rp2040", "Raspberry Pi RP2040 (on the Pico board)", "2x Cortex-M0+", 133, 2048, 264, 7.0, 12.0,
           "RP2040 datasheet: 264 KB SRAM, 133 MHz, 16 KB XIP cache; flash is external QSPI, 2 MB on the "
           "Raspberry Pi Pico", "one core used", 16),
    Target("nrf52840", "Nordic nRF52840", "Cortex-M4F", 64, 1024, 256, 1.0, 4.0,
           "nRF52840 Product Specification v1.7: 1 MB flash, 256 KB RAM, 64 MHz"),
    Target("stm32f446", "STMicroelectronics STM32F446RE", "Cortex-M4F", 180, 512, 128, 1.0, 4.0,
           "STM32F446xC/E datasheet DS10693: 512 KB flash, 128 KB SRAM, 180 MHz"),
    Target("stm32h743", "STMicroelectronics STM32H743ZI", "Cortex-M7", 480, 2048, 1024, 0.5, 2.0,
           "STM32H742xI/G STM32H743xI/G datasheet DS12110: 2 MB flash, 1 MB RAM (all banks), 480 MHz",
           "RAM is split into banks (512 KB AXI SRAM is the largest); the total is used here"),
    Target("esp32s3", "Espressif ESP32-S3 (ESP32-S3-WROOM-1-N8 module)", "2x Xtensa LX7", 240, 8192, 512, 0.5, 3.0,
           "ESP32-S3 datasheet v1.9: 512 KB SRAM, 240 MHz; flash is external, 8 MB on the -N8 module",
           "one core used; part of SRAM goes to Wi-Fi/RTOS if used"),
]}


TEXT_FIELDS = ("name", "part", "core", "source", "note")
DESCRIPTIVE = ("part", "source", "note")                 # text for people: no estimate reads it
PLAN_FIELDS = tuple(k for k in Target.__dataclass_fields__ if k not in ("name", *DESCRIPTIVE))  # what a plan uses
MAX_TEXT = 1000                                          # characters of a text field
MAX_KB = 1 << 20                                         # 1 GB: beyond any microcontroller
INT_FIELDS = {"flash_kb": (1, MAX_KB), "sram_kb": (1, MAX_KB), "xip_cache_kb": (0, MAX_KB)}   # whole kilobytes
RATE_FIELDS = {"clock_mhz": (1e-3, 1e4), "cycles_per_mac": (1e-3, 1e4), "cycles_per_op": (1e-3, 1e4)}  # physical
MAX_FILE_BYTES = 1 << 20                                 # a targets file is a few profiles, not megabytes


def _check_entry(item, where: str) -> Target:
    """A Target from one profile object, or DataError naming the entry and the field."""
    import math
    if not isinstance(item, dict):
        raise DataError(f"{where} is {type(item).__name__}, not an object with the fields {', '.join(Target.__dataclass_fields__)}")
    fields = set(Target.__dataclass_fields__)
    missing = sorted(fields - {"note", "xip_cache_kb"} - set(item))
    unknown = sorted(set(item) - fields)
    if missing or unknown:
        raise DataError(f"{where}: " + (f"missing {', '.join(missing)}" if missing else f"unknown {', '.join(unknown)}"))
    for k in TEXT_FIELDS:
        if k in item and not isinstance(item[k], str):
            raise DataError(f"{where}: {k} must be text, got {_show(item[k])}")
        if k in item and len(item[k]) > MAX_TEXT:
            raise DataError(f"{where}: {k} has {len(item[k]):,} characters; at most {MAX_TEXT:,}")
    if not item["name"].strip():
        raise DataError(f"{where}: name must not be empty")
    if item["name"] != item["name"].strip():
        raise DataError(f"{where}: name {_show(item['name'])} starts or ends with white space; give it without")
    for k, (lo, hi) in INT_FIELDS.items():
        v = item.get(k, 0)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise DataError(f"{where}: {k} must be a whole number of kilobytes from {lo} to {hi:,} (1 GB), "
                            f"got {_show(v)}")
    for k, (lo, hi) in RATE_FIELDS.items():
        v = item[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
            raise DataError(f"{where}: {k} must be a number from {lo:g} to {hi:g}, got {_show(v)}")
    return Target(**item)


def _show(v) -> str:
    """A bad value for a one-line message, cut short."""
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


# The emitted integer step as measured on emulated cores, fitted per core and architecture over
# 27 int8 models (hidden 8-128, two of them not a multiple of 4; 1-2 layers) by
# `scripts/calibrate_firmware.py` (it prints this table; arm-none-eabi-gcc 12.2.1, -O2): cycles
# per step (modelled from the executed instruction mix) = a x MACs as the kernels run them (in
# fours) + b x requantized outputs + c x hidden x layers + d, within 6% of every measured model;
# .text = t0 + t1 x (layers - 1); stack = the largest measured + 32 bytes. The SSM ("ssm", fixed
# decay; "ssm-selective") over 8 sizes each (d_model 8-64, d_state 8-64, 1-3 layers), with
# `firmware_sim.cemit_ssm.cost_features` (MACs, requantized values, element-wise channels, 1):
# within 2% of every measured model. The windowed Transformer ("transformer") over 8 sizes (d_model
# 8-32, 1-4 heads, one of odd width, 1-2 layers, windows 4-50), counted at a full window, with
# `firmware_sim.cemit_xf.cost_features` (MACs, attention MACs, softmax entries, element-wise
# values, 1; `scripts/firmware_xf_check.py --calibrate`): within 4%. `measured_kind` gives an
# integer model's key.
MEASURED_SOURCE = ("scripts/calibrate_firmware.py: edgeseq firmware measure --opt -O2 on 27 RNN/GRU/LSTM, 16 SSM "
                   "and 8 Transformer models, arm-none-eabi-gcc 12.2.1, Unicorn; cycles modelled from the executed instruction mix "
                   "(Arm TRM timings)")
MEASURED = {
    # cortex-m0plus rnn: check/measure h8 l1 0.98, h13 l1 1.06, h16 l1 0.98, h32 l2 1.02, h50 l1 0.98, h64 l1 1.00, h96 l1 0.99, h128 l1 1.00, h16 l2 0.99
    # cortex-m0plus gru: check/measure h8 l1 1.01, h13 l1 1.01, h16 l1 0.95, h32 l2 1.00, h50 l1 1.03, h64 l1 1.00, h96 l1 0.99, h128 l1 0.99, h16 l2 1.01
    # cortex-m0plus lstm: check/measure h8 l1 1.01, h13 l1 1.00, h16 l1 0.97, h32 l2 1.01, h50 l1 1.01, h64 l1 0.98, h96 l1 1.00, h128 l1 1.00, h16 l2 1.02
    # cortex-m0plus ssm: check/measure d8 n8 l1 1.00, d16 n8 l1 1.00, d16 n32 l1 1.00, d24 n12 l2 1.00, d32 n32 l2 1.00, d48 n16 l1 1.00, d64 n64 l1 1.00, d32 n16 l3 1.00
    # cortex-m0plus ssm-selective: check/measure d8 n8 l1 1.00, d16 n8 l1 1.00, d16 n32 l1 1.01, d24 n12 l2 1.00, d32 n32 l2 0.99, d48 n16 l1 1.00, d64 n64 l1 1.00, d32 n16 l3 1.00
    # cortex-m0plus transformer: check/measure d8 h1 f16 l1 w4 0.98, d16 h2 f32 l1 w16 0.99, d16 h4 f32 l2 w8 0.99, d24 h2 f48 l1 w32 1.01, d32 h4 f64 l2 w16 0.99, d32 h4 f64 l2 w50 0.98, d12 h3 f24 l1 w50 1.01, d13 h1 f26 l1 w9 1.04
    "cortex-m0plus": {"rnn": (9.432, 61.36, -27.59, 42.93, 1263, 621, 144), "gru": (9.191, 36.46, 285.9, -562.6, 1450, 760, 160), "lstm": (9.282, 58.52, 186.1, -450.7, 1633, 919, 184),
                  "ssm": (9.087, 183.3, -226, -988.6, 2768, 1433, 240), "ssm-selective": (9.013, 122.9, -79.26, -579.3, 3176, 1588, 248),
                  "transformer": (10.13, 11.36, 49.98, 49.45, 846.9, 3681, 2434, 296)},
    # cortex-m4 rnn: check/measure h8 l1 1.02, h13 l1 0.96, h16 l1 0.99, h32 l2 1.02, h50 l1 1.00, h64 l1 0.98, h96 l1 1.00, h128 l1 1.01, h16 l2 1.01
    # cortex-m4 gru: check/measure h8 l1 1.00, h13 l1 0.99, h16 l1 1.00, h32 l2 0.99, h50 l1 1.02, h64 l1 0.99, h96 l1 1.00, h128 l1 1.00, h16 l2 1.00
    # cortex-m4 lstm: check/measure h8 l1 1.00, h13 l1 1.00, h16 l1 1.01, h32 l2 1.00, h50 l1 0.99, h64 l1 1.00, h96 l1 1.00, h128 l1 1.01, h16 l2 1.00
    # cortex-m4 ssm: check/measure d8 n8 l1 1.01, d16 n8 l1 0.98, d16 n32 l1 1.00, d24 n12 l2 0.99, d32 n32 l2 1.01, d48 n16 l1 0.98, d64 n64 l1 1.00, d32 n16 l3 1.02
    # cortex-m4 ssm-selective: check/measure d8 n8 l1 1.01, d16 n8 l1 1.00, d16 n32 l1 0.98, d24 n12 l2 1.00, d32 n32 l2 1.01, d48 n16 l1 0.99, d64 n64 l1 1.00, d32 n16 l3 1.02
    # cortex-m4 transformer: check/measure d8 h1 f16 l1 w4 1.01, d16 h2 f32 l1 w16 1.01, d16 h4 f32 l2 w8 1.00, d24 h2 f48 l1 w32 0.98, d32 h4 f64 l2 w16 1.00, d32 h4 f64 l2 w50 1.02, d12 h3 f24 l1 w50 0.99, d13 h1 f26 l1 w9 0.98
    "cortex-m4": {"rnn": (1.989, 50.76, -85.78, 98.47, 1698, 1072, 168), "gru": (1.983, 38.9, -49.91, 109.5, 1842, 1182, 168), "lstm": (2.014, 37.11, -31.7, 88.53, 1997, 1341, 168),
                  "ssm": (1.913, 57.64, -24.74, 46.66, 3674, 2149, 224), "ssm-selective": (1.903, 41.71, 19.56, 149.9, 4276, 2559, 232),
                  "transformer": (1.582, 3.629, 41.3, 36.96, -296.2, 4359, 2819, 272)},
    # cortex-m7 rnn: check/measure h8 l1 1.02, h13 l1 0.96, h16 l1 0.98, h32 l2 1.03, h50 l1 1.00, h64 l1 0.98, h96 l1 1.00, h128 l1 1.01, h16 l2 1.01
    # cortex-m7 gru: check/measure h8 l1 1.01, h13 l1 0.99, h16 l1 1.00, h32 l2 1.01, h50 l1 1.00, h64 l1 0.99, h96 l1 1.00, h128 l1 1.00, h16 l2 1.00
    # cortex-m7 lstm: check/measure h8 l1 1.00, h13 l1 0.99, h16 l1 1.00, h32 l2 1.01, h50 l1 0.99, h64 l1 1.00, h96 l1 1.00, h128 l1 1.00, h16 l2 1.00
    # cortex-m7 ssm: check/measure d8 n8 l1 1.01, d16 n8 l1 0.98, d16 n32 l1 1.00, d24 n12 l2 0.99, d32 n32 l2 1.02, d48 n16 l1 0.98, d64 n64 l1 1.00, d32 n16 l3 1.02
    # cortex-m7 ssm-selective: check/measure d8 n8 l1 1.01, d16 n8 l1 1.00, d16 n32 l1 0.98, d24 n12 l2 1.00, d32 n32 l2 1.00, d48 n16 l1 0.99, d64 n64 l1 1.00, d32 n16 l3 1.02
    # cortex-m7 transformer: check/measure d8 h1 f16 l1 w4 1.01, d16 h2 f32 l1 w16 1.01, d16 h4 f32 l2 w8 1.00, d24 h2 f48 l1 w32 0.98, d32 h4 f64 l2 w16 1.00, d32 h4 f64 l2 w50 1.02, d12 h3 f24 l1 w50 0.99, d13 h1 f26 l1 w9 0.98
    "cortex-m7": {"rnn": (2.045, 53.13, -94.18, 107.5, 1741, 1015, 168), "gru": (2.044, 44.53, -90.6, 192.3, 1875, 1181, 168), "lstm": (2.057, 41.09, -67.34, 178.6, 2013, 1355, 168),
                  "ssm": (1.967, 61.76, -32.51, -3.239, 3707, 2216, 232), "ssm-selective": (1.975, 42.42, 18.23, 205.6, 4333, 2599, 232),
                  "transformer": (1.656, 3.951, 39.82, 36.97, -237.9, 4390, 2798, 280)},
    # cortex-m33 rnn: check/measure h8 l1 1.02, h13 l1 0.96, h16 l1 0.99, h32 l2 1.02, h50 l1 1.01, h64 l1 0.98, h96 l1 1.00, h128 l1 1.01, h16 l2 1.01
    # cortex-m33 gru: check/measure h8 l1 1.00, h13 l1 0.99, h16 l1 1.01, h32 l2 0.99, h50 l1 1.02, h64 l1 0.99, h96 l1 1.00, h128 l1 1.00, h16 l2 1.00
    # cortex-m33 lstm: check/measure h8 l1 1.00, h13 l1 1.00, h16 l1 1.01, h32 l2 1.00, h50 l1 0.99, h64 l1 1.00, h96 l1 1.00, h128 l1 1.00, h16 l2 1.00
    # cortex-m33 ssm: check/measure d8 n8 l1 1.01, d16 n8 l1 0.98, d16 n32 l1 1.00, d24 n12 l2 0.99, d32 n32 l2 1.01, d48 n16 l1 0.98, d64 n64 l1 1.00, d32 n16 l3 1.02
    # cortex-m33 ssm-selective: check/measure d8 n8 l1 1.00, d16 n8 l1 1.00, d16 n32 l1 0.99, d24 n12 l2 1.00, d32 n32 l2 1.00, d48 n16 l1 1.00, d64 n64 l1 1.00, d32 n16 l3 1.01
    # cortex-m33 transformer: check/measure d8 h1 f16 l1 w4 1.01, d16 h2 f32 l1 w16 1.02, d16 h4 f32 l2 w8 1.00, d24 h2 f48 l1 w32 0.98, d32 h4 f64 l2 w16 1.00, d32 h4 f64 l2 w50 1.02, d12 h3 f24 l1 w50 0.99, d13 h1 f26 l1 w9 0.98
    "cortex-m33": {"rnn": (1.99, 51.67, -89.79, 102.7, 1701, 1071, 168), "gru": (1.98, 39.36, -54.13, 118.1, 1837, 1191, 168), "lstm": (1.999, 38.01, -38.08, 104.7, 2002, 1328, 168),
                  "ssm": (1.902, 58.39, -25.72, 37.67, 3699, 2143, 224), "ssm-selective": (1.895, 42.33, 18.59, 144.8, 4246, 2581, 232),
                  "transformer": (1.621, 3.534, 42.33, 36.48, -216.8, 4362, 2791, 272)},
}   # kind -> (cost coefficients a, b, ... (one per cost feature), t0, t1, stack)
CORE_OF = {"Cortex-M0+": "cortex-m0plus", "Cortex-M4": "cortex-m4", "Cortex-M4F": "cortex-m4",
           "Cortex-M7": "cortex-m7", "Cortex-M33": "cortex-m33"}


# The same steps built by clang (zig 0.17.1's clang 22.1.8, -O2) instead of arm-none-eabi-gcc 12.2.1,
# measured side by side on the default models by `scripts/firmware_compilers.py` (bit-exact with the
# simulator): .text as a multiple of gcc's, the deepest stack of a step in bytes, cycles (modelled
# from the executed mix) as a multiple of gcc's. `firmware check --compiler clang` scales gcc's fit by
# them. The M7 and M33 take the M4's (same Thumb-2 code; not emulated with clang); the selective SSM
# the fixed one's. Each figure is the default model's row of docs/figures/compilers.json, which
# tests/test_docs.py checks. Five other Transformer sizes (window 1-50, d_model 13-32, 1-3 layers,
# 1-8 heads), measured earlier, gave .text 2.0-2.4x (M4) and 2.1-3.0x (M0+) and cycles 0.87-0.97x
# and 1.00-1.11x.
CLANG_SOURCE = ("scripts/firmware_compilers.py on models/{rnn,gru,lstm,ssm,transformer}-int8.onnx, -O2, clang 22.1.8 "
                "(zig 0.17.1) against arm-none-eabi-gcc 12.2.1, Unicorn")
CLANG = {
    "cortex-m0plus": {"rnn": (2.71, 244, 1.21), "gru": (1.99, 252, 1.19), "lstm": (1.93, 256, 1.21),
                      "ssm": (2.42, 480, 1.07), "transformer": (2.72, 624, 1.03)},
    "cortex-m4": {"rnn": (2.00, 108, 1.05), "gru": (1.87, 100, 1.02), "lstm": (1.65, 104, 1.13),
                  "ssm": (1.86, 216, 1.01), "transformer": (2.44, 336, 0.96)},
}


def clang_figures(core: str, kind: str) -> tuple:
    """(text factor, stack bytes, cycle factor) of clang against gcc for a measured kind
    (`measured_kind`) on `core`: see CLANG."""
    table = CLANG["cortex-m0plus" if core == "cortex-m0plus" else "cortex-m4"]
    return table["ssm" if kind == "ssm-selective" else kind]


def measured_kind(m) -> str:
    """The key of an integer model in MEASURED: its kind, and for an SSM its decay ("ssm",
    "ssm-selective")."""
    return "ssm-selective" if m.kind == "ssm" and m.selective else m.kind


def emulated_core(target: "Target") -> str | None:
    """The emulated core name of a profile ('cortex-m4', ...), None for a core not emulated here."""
    name = target.core.replace("2x ", "").strip().lower()
    return next((v for k, v in CORE_OF.items() if k.lower() == name), None)     # "cortex-m0+" as "Cortex-M0+"


def load_targets(path=None) -> dict:
    """{name: Target}: the built-in profiles, plus those of a JSON file (a list of objects, one
    object with a "name", or name -> object). DataError names the file, the entry and the field that
    cannot be used, and refuses an entry named like a built-in profile or an earlier entry, also up
    to case (a file adds, never replaces)."""
    targets = dict(BUILTIN)
    if path is None:
        return targets
    p = Path(path)
    if not p.is_file():
        raise DataError(f"targets file '{path}' not found")
    with open(p, "rb") as f:
        raw = f.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise DataError(f"targets file '{path}' is larger than {MAX_FILE_BYTES >> 20} MiB; it should hold a few "
                        "profiles")
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise DataError(f"targets file '{path}' is not UTF-8 text; save it as UTF-8 JSON") from None
    except ValueError as e:
        raise DataError(f"targets file '{path}' is not valid JSON ({e})") from None
    except RecursionError:
        raise DataError(f"targets file '{path}' nests lists or objects too deeply; it should hold a list of "
                        "profiles") from None
    if isinstance(data, dict) and "name" in data and not isinstance(data["name"], dict):
        items = [data]                                   # one profile, not wrapped in a list
    elif isinstance(data, dict):
        items = [({"name": k, **v} if isinstance(v, dict) else v) for k, v in data.items()]
    elif isinstance(data, list):
        items = data
    else:
        raise DataError(f"targets file '{path}' must hold a list of profiles, one profile or a name -> profile "
                        "object")
    folded = {n.casefold(): n for n in targets}
    for i, item in enumerate(items):
        t = _check_entry(item, f"targets file '{path}' entry {i + 1}")
        same = folded.get(t.name.casefold())
        if same is not None:
            what = "a built-in target" if same in BUILTIN else "an earlier entry"
            also = "" if same == t.name else f" (as {_show(same)}: names differing only in case are one name)"
            raise DataError(f"targets file '{path}' entry {i + 1}: name {_show(t.name)} is already {what}{also}; "
                            "give this profile a name of its own")
        targets[t.name] = t
        folded[t.name.casefold()] = t.name
    return targets


def profile_target(item, where: str) -> Target:
    """A Target from a profile dict (`Target.to_json()`, as a tune study stores it), every field
    checked as in a targets file; DataError naming `where` and the field otherwise."""
    return _check_entry(item, where)


def get_target(name: str, path=None) -> Target:
    """The profile `name`, built in or from the targets file `path`; UsageError for an unknown
    name, DataError for a file `load_targets` refuses."""
    targets = load_targets(path)
    if name not in targets:
        close = [n for n in targets if n.casefold() == name.casefold()]
        hint = f"; did you mean '{close[0]}'? names are matched with their case" if close else ""
        if path is None:
            raise UsageError(f"unknown target {_show(name)}{hint}; built in: {', '.join(sorted(BUILTIN))} "
                             "(see `edgeseq firmware targets`, or add one with --targets-file)")
        added = sorted(set(targets) - set(BUILTIN))
        raise UsageError(f"unknown target {_show(name)}{hint}; built in: {', '.join(sorted(BUILTIN))}; from "
                         f"'{path}': {', '.join(added) or 'none'} (check the names in the file: "
                         f"`edgeseq firmware targets --targets-file {path}`)")
    return targets[name]
