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

User profiles: a JSON file with a list (or a name -> profile mapping) of objects carrying the
fields of `Target`; `--targets-file` adds them to the built-in ones.
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
INT_FIELDS = ("flash_kb", "sram_kb")                     # whole kilobytes, at least 1
RATE_FIELDS = ("clock_mhz", "cycles_per_mac", "cycles_per_op")   # positive, finite


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
            raise DataError(f"{where}: {k} must be text, got {item[k]!r}")
    if not item["name"].strip():
        raise DataError(f"{where}: name must not be empty")
    for k in INT_FIELDS:
        v = item[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise DataError(f"{where}: {k} must be a whole number of kilobytes >= 1, got {v!r}")
    x = item.get("xip_cache_kb", 0)
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise DataError(f"{where}: xip_cache_kb must be a whole number of kilobytes >= 0, got {x!r}")
    for k in RATE_FIELDS:
        v = item[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise DataError(f"{where}: {k} must be a number > 0, got {v!r}")
    return Target(**item)


# The emitted integer step as measured on emulated cores (`edgeseq firmware measure MODEL --core C
# --opt -O2`, arm-none-eabi-gcc 12.2.1, the seed-0 int8 models of `make demo`, hidden 64, 1 layer):
# cycles per MAC modelled from the executed instruction mix, .text and stack measured. `check`
# uses these for int8 RNN/GRU/LSTM on the matching core; scripts/calibrate_firmware.py reruns them.
MEASURED_SOURCE = ("edgeseq firmware measure --opt -O2 (arm-none-eabi-gcc 12.2.1, Unicorn; cycles modelled from the "
                   "executed instruction mix, Arm TRM timings), seed-0 hidden-64 int8 models")
MEASURED = {
    "cortex-m0plus": {"rnn": (12.46, 1180, 104), "gru": (12.11, 1436, 128), "lstm": (12.21, 1604, 144)},
    "cortex-m4": {"rnn": (3.66, 1640, 120), "gru": (3.21, 1784, 128), "lstm": (3.20, 1936, 120)},
    "cortex-m7": {"rnn": (3.78, 1712, 128), "gru": (3.33, 1824, 128), "lstm": (3.29, 1944, 120)},
}   # kind -> (cycles per MAC, .text bytes, stack bytes per step)
CORE_OF = {"Cortex-M0+": "cortex-m0plus", "Cortex-M4": "cortex-m4", "Cortex-M4F": "cortex-m4",
           "Cortex-M7": "cortex-m7", "Cortex-M33": "cortex-m33"}


def emulated_core(target: "Target") -> str | None:
    """The emulated core name of a profile ('cortex-m4', ...), None for a core not emulated here."""
    return CORE_OF.get(target.core.replace("2x ", "").strip())


def load_targets(path=None) -> dict:
    """Built-in profiles, plus those of a JSON file (a list of objects, or name -> object).
    DataError names the file, the entry and the field that cannot be used."""
    targets = dict(BUILTIN)
    if path is None:
        return targets
    p = Path(path)
    if not p.is_file():
        raise DataError(f"targets file '{path}' not found")
    try:
        data = json.loads(p.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise DataError(f"targets file '{path}' is not UTF-8 text; save it as UTF-8 JSON") from None
    except ValueError as e:
        raise DataError(f"targets file '{path}' is not valid JSON ({e})") from None
    if isinstance(data, dict):
        items = [({"name": k, **v} if isinstance(v, dict) else v) for k, v in data.items()]
    elif isinstance(data, list):
        items = data
    else:
        raise DataError(f"targets file '{path}' must hold a list of profiles or a name -> profile object")
    for i, item in enumerate(items):
        t = _check_entry(item, f"targets file '{path}' entry {i + 1}")
        targets[t.name] = t
    return targets


def get_target(name: str, path=None) -> Target:
    targets = load_targets(path)
    if name not in targets:
        raise UsageError(f"unknown target '{name}'; built in: {', '.join(sorted(targets))} "
                         "(see `edgeseq firmware targets`, or add one with --targets-file)")
    return targets[name]
