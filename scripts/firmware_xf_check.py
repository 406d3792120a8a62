"""The integer-only windowed Transformer step, emitted as C, on emulated Cortex-M cores over 3,000 never-reset readings.

    .venv/bin/python scripts/firmware_xf_check.py models/transformer-int8.onnx --float models/transformer.onnx
    .venv/bin/python scripts/firmware_xf_check.py --train 16 --train 50        # trains and exports both first
    .venv/bin/python scripts/firmware_xf_check.py models/transformer-int8.onnx --float models/transformer.onnx \
        --train 16 --json docs/figures/firmware_xf.json     # docs/firmware.md's Transformer tables (after `make demo`)
    .venv/bin/python scripts/firmware_xf_check.py --calibrate                  # the MEASURED entries of targets.py

For each static int8 Transformer: the emitted step cross-compiled for the M4 (SMLAD path, -O2
and -Os; portable path, -O2) and the M0+ (-O2, -Os), run on the emulated core over
`--readings` readings of the model's test split joined end to end (one stream, never reset, so
the KV ring wraps many times), every logit compared with `firmware_sim.intxf` (`measure`
raises on the first difference). Then, counted at a full window: instructions per reading and
per MAC (attention counted as 2 x window x d_model per layer), 64-bit helper instructions and
stack (measured), cycles (modelled), .text/.rodata (measured), and what `firmware check`
predicts for cycles, flash and RAM. With `--float` (or `--train`), the integer-only accuracy
against float on both protocols (`firmware simulate`). Prints Markdown; `--json` also writes
every figure, with the command, the inputs (file, SHA-256, configuration), the machine and the
date, for `scripts/render_docs.py`. Two or three minutes per model on one core, plus training.

`--calibrate` trains briefly and exports Transformers of several sizes (`SIZES`: d_model,
heads, d_ff, layers, window; one with an odd head width), measures each at -O2 on every
emulated core at a full window and fits, per core, cycles = `cemit_xf.cost_features` . coef
(least squares on relative error), .text = t0 + t1 x (layers - 1), stack = the largest + 8 B,
printing the "transformer" entries of `firmware_sim.targets.MEASURED` and each model's
check/measure ratio.
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from _firmware_figures import command_line, integer_only_accuracy, model_input, write_figures  # noqa: E402
from edgeseq.errors import run_script  # noqa: E402

CONFIGS = [("cortex-m4", "-O2", False), ("cortex-m4", "-Os", False), ("cortex-m4", "-O2", True),
           ("cortex-m0plus", "-O2", False), ("cortex-m0plus", "-Os", False)]
SIZES = [(8, 1, 16, 1, 4), (16, 2, 32, 1, 16), (16, 4, 32, 2, 8), (24, 2, 48, 1, 32), (32, 4, 64, 2, 16),
         (32, 4, 64, 2, 50), (12, 3, 24, 1, 50), (13, 1, 26, 1, 9)]
CORES = ["cortex-m0plus", "cortex-m4", "cortex-m7", "cortex-m33"]
TARGET_OF = {"cortex-m4": "nrf52840", "cortex-m0plus": "rp2040"}


def train_models(windows, epochs: int, root: Path) -> list:
    """(int8 path, float path, how) of a default-sized Transformer trained at each window, seed 0."""
    from edgeseq.train import TrainConfig, train
    from export import export_int8, export_model
    out = []
    for w in windows:
        ck = train("transformer", "basicmotions", TrainConfig(epochs=epochs, seed=0), {"window": w}, progress=False)
        f, q = root / f"transformer-w{w}.onnx", root / f"transformer-w{w}-int8.onnx"
        export_model(ck, f)
        export_int8(ck, q, "static")
        out.append((q, f, f'train("transformer", "basicmotions", TrainConfig(epochs={epochs}, seed=0), '
                          f'{{"window": {w}}}); exported float and static int8 by this script'))
    return out


def calibrate(epochs: int) -> None:
    from edgeseq.train import TrainConfig, train
    from export import export_int8
    from firmware_sim.intsim import from_onnx
    from firmware_sim.measure import cost_features, measure
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for d, h, ff, layers, w in SIZES:
            size = {"d_model": d, "heads": h, "d_ff": ff, "layers": layers, "window": w}
            ck = train("transformer", "basicmotions", TrainConfig(epochs=epochs, seed=0), size, progress=False)
            path = Path(tmp) / f"xf-{d}-{h}-{ff}-{layers}-{w}.onnx"
            export_int8(ck, path, "static", keep_anyway=True)
            m = from_onnx(path)
            for core in CORES:
                r = measure(path, core, "-O2", readings=max(100, 2 * w), counted=2)
                rows.setdefault(core, []).append((cost_features(m), r["cycles_per_step"], r["sections"]["text"],
                                                  r["stack_bytes"], layers, f"d{d} h{h} f{ff} l{layers} w{w}"))
    for core in CORES:
        data = rows[core]
        X = np.array([r[0] for r in data])
        y = np.array([r[1] for r in data])
        coef, *_ = np.linalg.lstsq(X / y[:, None], np.ones(len(y)), rcond=None)
        t, *_ = np.linalg.lstsq(np.array([[1.0, r[4] - 1] for r in data]), np.array([r[2] for r in data], float),
                                rcond=None)
        stack = int(np.ceil(max(r[3] for r in data) / 8) * 8)
        print(f"    # {core} transformer: check/measure "
              + ", ".join(f"{r[5]} {float(np.dot(coef, r[0]) / r[1]):.2f}" for r in data))
        print(f'    "{core}": "transformer": ({", ".join(f"{c:.4g}" for c in coef)}, {t[0]:.0f}, {t[1]:.0f}, {stack}),')


def main():
    from firmware_sim.measure import measure
    from firmware_sim.plan import check_model
    from firmware_sim.targets import get_target

    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--float", dest="floats", action="append", default=[],
                    help="the float twin of each model, in order (accuracy on both protocols)")
    ap.add_argument("--train", dest="windows", type=int, action="append", default=[],
                    help="train and export a default-sized Transformer at this window first (repeatable)")
    ap.add_argument("--epochs", type=int, default=15, help="epochs of --train (--calibrate: 2)")
    ap.add_argument("--readings", type=int, default=3000)
    ap.add_argument("--calibrate", action="store_true", help="fit and print targets.MEASURED's transformer entries")
    ap.add_argument("--json", metavar="PATH", help="also write every figure to this JSON file")
    args = ap.parse_args()
    if args.calibrate:
        calibrate(2 if args.epochs == 15 else args.epochs)
        return 0
    tmp = tempfile.TemporaryDirectory()
    pairs = [(Path(p), Path(f) if f else None, None)
             for p, f in zip(args.models, args.floats + [None] * len(args.models))]
    pairs += train_models(args.windows, args.epochs, Path(tmp.name))
    rows, accuracy = [], []
    print("| model | core | opt | path | bit-exact readings | instructions / reading | per MAC | 64-bit helper instr. | "
          "stack B | modelled cycles | check cycles | .text B | .rodata B | tables B | check flash B | state B | "
          "check RAM B |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path, _, _ in pairs:
        for core, opt, portable in CONFIGS:
            r = measure(path, core, opt, readings=args.readings, counted=4, portable=portable)
            helpers = sum(r["helper_instructions_per_step"].values())
            c = check_model(path, get_target(TARGET_OF[core]))
            name = f"transformer d{r['hidden']} h{r['heads']} w{r['window']} l{r['layers']}"
            rows.append({k: r[k] for k in ("arch", "hidden", "heads", "d_ff", "window", "layers", "core", "opt",
                                            "dsp_path", "compiler", "bit_exact_readings", "instructions_per_step",
                                            "instructions_per_mac", "stack_bytes", "sections", "tables_bytes",
                                            "scratch_bytes", "state_bytes", "cache_bytes", "macs")}
                        | {"model": os.path.basename(path), "helper_instructions": helpers,
                           "cycles_per_step": r.get("cycles_per_step"), "check": {
                               "target": TARGET_OF[core], "cycles": c["cost"]["cycles"],
                               "us_per_reading": c["cost"]["us_per_reading"], "flash": c["flash"]["total"],
                               "ram": c["ram"]["total"], "state": c["ram"]["state"], "flash_parts": c["flash"],
                               "ram_parts": c["ram"], "source": c["cost"]["source"]}})
            print(f"| {name} | {core} | {opt} | {'SMLAD' if r['dsp_path'] else 'portable'} | "
                  f"{r['bit_exact_readings']:,} | {r['instructions_per_step']:,.0f} | {r['instructions_per_mac']:.2f} | "
                  f"{helpers:,.0f} | {r['stack_bytes']} | {r.get('cycles_per_step', float('nan')):,.0f} | "
                  f"{c['cost']['cycles']:,} | {r['sections']['text']:,} | {r['sections']['rodata']:,} | "
                  f"{r['tables_bytes']:,} | {c['flash']['total']:,} | {r['state_bytes']:,} | {c['ram']['total']:,} |")
    for path, fpath, _ in pairs:
        if fpath is None:
            continue
        accuracy.append(integer_only_accuracy(path, fpath))
    if args.json:
        write_figures(args.json, {"command": command_line("firmware_xf_check.py"), "readings": args.readings,
                                  "inputs": [model_input(p, f, how) for p, f, how in pairs],
                                  "compiler": rows[0]["compiler"] if rows else "", "measured": rows,
                                  "accuracy": accuracy})
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    run_script(main)
