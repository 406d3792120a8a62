"""The integer-only SSM step, emitted as C, on emulated Cortex-M cores over 3,000 never-reset readings.

    .venv/bin/python scripts/firmware_ssm_check.py models/ssm-int8.onnx
    .venv/bin/python scripts/firmware_ssm_check.py models/ssm-int8.onnx --float models/ssm.onnx --readings 3000
    .venv/bin/python scripts/firmware_ssm_check.py models/ssm-int8.onnx --float models/ssm.onnx --train selective \
        --json docs/figures/firmware_ssm.json                 # docs/firmware.md's SSM tables (after `make demo`)

For each static int8 SSM (fixed or selective decay): the emitted step cross-compiled for the
M4 (SMLAD path, -O2 and -Os; portable path, -O2) and the M0+ (-O2, -Os), run on the emulated
core over `--readings` readings of the model's test split joined end to end (one stream,
never reset), every logit compared with `firmware_sim.intssm` (`measure` raises on the first
difference). Then instructions per reading and per MAC, 64-bit helper instructions and stack
(measured), cycles (modelled), .text/.rodata (measured). With `--float`, the integer-only
accuracy against float on both protocols (`firmware simulate`); `--train selective` (or
fixed) first trains a seed-0 SSM with that decay on BasicMotions (the default schedule) and
exports it float and static int8. Then what `firmware check` says for each model on the
nRF52840 and the RP2040. Prints Markdown; `--json` also writes every figure, with the
command, the inputs (file, SHA-256, configuration), the machine and the date, for
`scripts/render_docs.py`. About a minute and a half per model on one core (five builds of 3,000
emulated readings each), plus training.
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from _firmware_figures import command_line, integer_only_accuracy, model_input, write_figures  # noqa: E402
from edgeseq.errors import run_script  # noqa: E402

CONFIGS = [("cortex-m4", "-O2", False), ("cortex-m4", "-Os", False), ("cortex-m4", "-O2", True),
           ("cortex-m0plus", "-O2", False), ("cortex-m0plus", "-Os", False)]
TARGETS = ["nrf52840", "rp2040"]


def train_models(variants, root: Path) -> list:
    """(int8 path, float path, how) of a default SSM with each decay ('fixed', 'selective'), seed 0,
    trained on BasicMotions with the default schedule and exported float and static int8."""
    from edgeseq.train import train
    from export import export_int8, export_model
    out = []
    for v in variants:
        ck = train("ssm", "basicmotions", None, {"selective": v == "selective"}, progress=False)
        f, q = root / f"ssm-{v}.onnx", root / f"ssm-{v}-int8.onnx"
        export_model(ck, f)
        export_int8(ck, q, "static")
        out.append((q, f, f'train("ssm", "basicmotions", model_overrides={{"selective": {v == "selective"}}}), '
                          "seed 0, default schedule; exported float and static int8 by this script"))
    return out


def main():
    from firmware_sim.measure import measure
    from firmware_sim.plan import check_model
    from firmware_sim.targets import get_target

    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--float", dest="floats", action="append", default=[],
                    help="the float twin of each model, in order (accuracy on both protocols)")
    ap.add_argument("--train", dest="variants", action="append", default=[], choices=["fixed", "selective"],
                    help="train and export a seed-0 SSM with this decay first (repeatable)")
    ap.add_argument("--readings", type=int, default=3000)
    ap.add_argument("--json", metavar="PATH", help="also write every figure to this JSON file")
    args = ap.parse_args()
    if not args.models and not args.variants:
        ap.error("give an int8 SSM or --train")
    tmp = tempfile.TemporaryDirectory()
    pairs = [(Path(p), Path(f) if f else None, None)
             for p, f in zip(args.models, args.floats + [None] * len(args.models))]
    pairs += train_models(args.variants, Path(tmp.name))
    rows, accuracy, checks = [], [], []
    print("| model | core | opt | path | bit-exact readings | instructions / reading | per MAC | 64-bit helper instr. | "
          "stack B | modelled cycles | .text B | .rodata B | tables B |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path, _, _ in pairs:
        for core, opt, portable in CONFIGS:
            r = measure(path, core, opt, readings=args.readings, counted=4, portable=portable)
            helpers = sum(r["helper_instructions_per_step"].values())
            name = f"ssm {'selective' if r['selective'] else 'fixed'} d{r['hidden']}/{r['d_state']}"
            rows.append({k: r[k] for k in ("arch", "selective", "hidden", "d_state", "layers", "core", "opt", "dsp_path",
                                            "compiler", "bit_exact_readings", "instructions_per_step",
                                            "instructions_per_mac", "stack_bytes", "sections", "tables_bytes",
                                            "scratch_bytes", "state_bytes", "macs")}
                        | {"model": os.path.basename(path), "helper_instructions": helpers,
                           "cycles_per_step": r.get("cycles_per_step")})
            print(f"| {name} | {core} | {opt} | {'SMLAD' if r['dsp_path'] else 'portable'} | "
                  f"{r['bit_exact_readings']:,} | {r['instructions_per_step']:,.0f} | {r['instructions_per_mac']:.2f} | "
                  f"{helpers:,.0f} | {r['stack_bytes']} | {r.get('cycles_per_step', float('nan')):,.0f} | "
                  f"{r['sections']['text']:,} | {r['sections']['rodata']:,} | {r['tables_bytes']:,} |")
        for target in TARGETS:
            c = check_model(path, get_target(target))
            checks.append({"model": os.path.basename(path), "selective": r["selective"], "target": target,
                           "flash": c["flash"], "ram": c["ram"], "cycles": c["cost"]["cycles"],
                           "us_per_reading": c["cost"]["us_per_reading"], "source": c["cost"]["source"],
                           "fits": c["fits"]})
            print(f"check {os.path.basename(path)} on {target}: flash {c['flash']['total']:,} B, RAM "
                  f"{c['ram']['total']:,} B, {c['cost']['cycles']:,} cycles = {c['cost']['us_per_reading']:,.0f} us "
                  "per reading")
    for path, fpath, _ in pairs:
        if fpath is not None:
            accuracy.append(integer_only_accuracy(path, fpath))
    if args.json:
        write_figures(args.json, {"command": command_line("firmware_ssm_check.py"),
                                  "readings": args.readings,
                                  "inputs": [model_input(p, f, how) for p, f, how in pairs],
                                  "compiler": rows[0]["compiler"] if rows else "", "measured": rows,
                                  "check": checks, "accuracy": accuracy})
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    run_script(main)
