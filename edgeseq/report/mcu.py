"""The microcontroller panel of `edgeseq report`, and the window models it shares with
`scripts/firmware_table.py`.

A fixed-state model costs the same RAM and cycles per reading whatever history it has seen; a
Transformer that keeps `h` readings needs a KV ring of `h` rows, and attends over all of them
each reading. The panel measures both on an emulated core: each static int8 model's emitted C
step is cross-compiled for a Cortex-M4 (-O2, SMLAD path), checked bit-exact with the integer
simulator and counted (`firmware_sim.measure`, a Transformer at a full window: history =
window), and planned on the nRF52840 (`firmware_sim.plan.check_model`: RAM as state or KV
ring, plus scratch, inputs/outputs and stack). The Transformer is the report's own, exported
again at each window (same weights, calibrated on the same data).
"""

from __future__ import annotations

import re
from pathlib import Path

CORE, OPT, TARGET = "cortex-m4", "-O2", "nrf52840"
WINDOWS = {"full": (4, 16, 50, 256), "quick": (4, 16)}
READINGS, COUNTED = 50, 2            # bit-exact readings and counted steps per build: the panel is cheap


def toolchain_missing() -> str | None:
    """None when a Cortex-M cross compiler, Unicorn and pyelftools are installed, else one line
    saying what is missing and how to get it."""
    from edgeseq.errors import EdgeseqError
    from firmware_sim import emulate, toolchain
    try:
        toolchain.require_compiler()
        emulate._unicorn()
        import elftools  # noqa: F401
    except EdgeseqError as e:
        return str(e)
    except ImportError:
        return "pyelftools is not installed: pip install '.[firmware]' in edgeseq's clone"
    return None


def window_checkpoint(ckpt: dict, window: int) -> dict:
    """`ckpt` (a Transformer checkpoint) with its attention window set to `window` readings:
    the weights do not depend on it."""
    return {**ckpt, "config": {**ckpt["config"], "window": int(window)}}


def window_models(ckpt: dict, windows, out_dir, data=None, stem: str = "transformer") -> dict:
    """{window: path}: `ckpt` exported static int8 at each window into `out_dir`
    (`<stem>-w<window>-int8.onnx`), calibrated on `data` (None: the data it was trained on)."""
    from export import export_int8

    out = {}
    for w in windows:
        path = Path(out_dir) / f"{stem}-w{w}-int8.onnx"
        export_int8(window_checkpoint(ckpt, w), path, "static", data=data, keep_anyway=True)
        out[int(w)] = path
    return out


def measure_row(path, readings: int = READINGS, counted: int = COUNTED, core: str = CORE, opt: str = OPT,
                target: str = TARGET) -> dict:
    """One model on the emulated core and the part: RAM (state or KV ring, and the rest),
    flash, instructions and modelled cycles per reading, time at the part's clock."""
    from firmware_sim.measure import measure
    from firmware_sim.plan import check_model
    from firmware_sim.targets import get_target

    t = get_target(target)
    r = measure(path, core, opt, readings=readings, counted=counted, target=t)
    c = check_model(path, t)
    window = r.get("window")
    return {"arch": r["arch"], "window": window, "history": window, "core": core, "opt": opt, "target": target,
            "bit_exact_readings": r["bit_exact_readings"], "macs": r["macs"],
            "instructions_per_step": r["instructions_per_step"], "instructions_per_mac": r["instructions_per_mac"],
            "cycles_per_step": r.get("cycles_per_step"), "us_per_reading": r.get("us_per_reading"),
            "stack_bytes": r["stack_bytes"], "text_bytes": r["sections"]["text"],
            "rodata_bytes": r["sections"]["rodata"], "state_bytes": c["ram"]["state"],
            "cache_bytes": r.get("cache_bytes", 0), "ram_bytes": c["ram"]["total"],
            "flash_bytes": c["flash"]["total"]}


def mcu_panel(models: dict, ckpts: dict, ds, windows, tmp) -> dict:
    """The panel's figures: the report's int8 GRU and SSM (fixed state) and its Transformer at
    each of `windows`, measured (see the module docstring); {"available": False, "reason": ...}
    without a cross compiler or emulator, or where the integer step refuses one of the models
    (the reason names it: the rest of the report stands)."""
    from edgeseq.errors import DataError
    missing = toolchain_missing()
    base = {"core": CORE, "opt": OPT, "target": TARGET, "readings": READINGS, "counted": COUNTED}
    if missing:
        return {**base, "available": False, "reason": missing}
    who = None
    try:
        fixed = {}
        for a in ("gru", "ssm"):
            if a in models:
                who = f"the int8 {a}"
                fixed[a] = measure_row(models[a]["int8"]["path"])
        who = "the transformer"
        paths = window_models(ckpts["transformer"], windows, tmp, data=ds)
        rows = []
        for w in sorted(paths):
            who = f"the transformer of window {w}"
            rows.append(measure_row(paths[w]))
    except DataError as e:                  # the model's file name, not the report's temporary folder
        why = re.sub(r"'[^']*/([^/']+\.onnx)'", r"'\1'", str(e))
        return {**base, "available": False, "reason": f"the integer step refused {who}: {why}"}
    return {**base, "available": True, "fixed": fixed, "transformer": rows}
