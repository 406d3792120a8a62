"""The integer-only SSM step, emitted as C, on emulated Cortex-M cores over 3,000 never-reset readings.

    .venv/bin/python scripts/firmware_ssm_check.py models/ssm-int8.onnx
    .venv/bin/python scripts/firmware_ssm_check.py models/ssm-int8.onnx --float models/ssm.onnx --readings 3000

For each static int8 SSM (fixed or selective decay): the emitted step cross-compiled for the
M4 (SMLAD path, -O2 and -Os; portable path, -O2) and the M0+ (-O2, -Os), run on the emulated
core over `--readings` readings of the model's test split joined end to end (one stream,
never reset), every logit compared with `firmware_sim.intssm` (`measure` raises on the first
difference). Then instructions per reading and per MAC, 64-bit helper instructions and stack
(measured), cycles (modelled), .text/.rodata (measured). With `--float`, the integer-only
accuracy against float on both protocols (`firmware simulate`). Prints Markdown; `--json`
also writes every figure. About a minute per model.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from _firmware_figures import integer_only_accuracy, write_figures  # noqa: E402
from edgeseq.errors import run_script  # noqa: E402

CONFIGS = [("cortex-m4", "-O2", False), ("cortex-m4", "-Os", False), ("cortex-m4", "-O2", True),
           ("cortex-m0plus", "-O2", False), ("cortex-m0plus", "-Os", False)]


def main():
    from firmware_sim.measure import measure

    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--float", dest="floats", action="append", default=[],
                    help="the float twin of each model, in order (accuracy on both protocols)")
    ap.add_argument("--readings", type=int, default=3000)
    ap.add_argument("--json", metavar="PATH", help="also write every figure to this JSON file")
    args = ap.parse_args()
    rows, accuracy = [], []
    print("| model | core | opt | path | bit-exact readings | instructions / reading | per MAC | 64-bit helper instr. | "
          "stack B | modelled cycles | .text B | .rodata B | tables B |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in args.models:
        for core, opt, portable in CONFIGS:
            r = measure(path, core, opt, readings=args.readings, counted=4, portable=portable)
            helpers = sum(r["helper_instructions_per_step"].values())
            name = f"ssm {'selective' if r['selective'] else 'fixed'} d{r['hidden']}/{r['d_state']}"
            rows.append({k: r[k] for k in ("arch", "selective", "hidden", "d_state", "core", "opt", "dsp_path",
                                            "compiler", "bit_exact_readings", "instructions_per_step",
                                            "instructions_per_mac", "stack_bytes", "sections", "tables_bytes",
                                            "scratch_bytes", "state_bytes", "macs")}
                        | {"model": os.path.basename(path), "helper_instructions": helpers,
                           "cycles_per_step": r.get("cycles_per_step")})
            print(f"| {name} | {core} | {opt} | {'SMLAD' if r['dsp_path'] else 'portable'} | "
                  f"{r['bit_exact_readings']:,} | {r['instructions_per_step']:,.0f} | {r['instructions_per_mac']:.2f} | "
                  f"{helpers:,.0f} | {r['stack_bytes']} | {r.get('cycles_per_step', float('nan')):,.0f} | "
                  f"{r['sections']['text']:,} | {r['sections']['rodata']:,} | {r['tables_bytes']:,} |")
    for path, fpath in zip(args.models, args.floats):
        accuracy.append(integer_only_accuracy(path, fpath))
    if args.json:
        write_figures(args.json, {"command": "scripts/firmware_ssm_check.py " + " ".join(sys.argv[1:]),
                                  "compiler": rows[0]["compiler"] if rows else "", "measured": rows,
                                  "accuracy": accuracy})
    return 0


if __name__ == "__main__":
    run_script(main)
