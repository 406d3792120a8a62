"""The emitted step's figures on emulated Cortex-M cores, and `firmware check` on two parts.

    .venv/bin/python scripts/firmware_table.py models/rnn-int8.onnx models/gru-int8.onnx models/lstm-int8.onnx
    .venv/bin/python scripts/firmware_table.py --json docs/figures/firmware.json models/{rnn,gru,lstm}-int8.onnx

For each static int8 RNN/GRU/LSTM model, core (M4: SMLAD path; M0+: portable path) and
optimisation level: instructions per reading and per MAC, 64-bit helper instructions and
stack (measured), cycles (modelled from the executed mix), and .text/.rodata (measured).
Every run is first checked bit-exact with the simulator over 1,000 readings. Then what
`firmware check` says for the same model on the nRF52840 and the RP2040 (flash, RAM, cycles
and microseconds per reading). Prints a Markdown table; `--json` also writes every figure,
with the date and the compiler, for `scripts/render_docs.py`. About a minute.
"""

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from edgeseq.errors import run_script  # noqa: E402

CONFIGS = [("cortex-m4", "-Os"), ("cortex-m4", "-O2"), ("cortex-m0plus", "-Os"), ("cortex-m0plus", "-O2")]
TARGETS = ["nrf52840", "rp2040"]


def main():
    from firmware_sim.measure import measure
    from firmware_sim.plan import check_model
    from firmware_sim.targets import get_target

    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--json", metavar="PATH", help="also write every figure to this JSON file")
    args = ap.parse_args()
    rows, checks = [], []
    print("| model | core | opt | instructions / reading | per MAC | 64-bit helper instr. | stack B | "
          "modelled cycles | .text B | .rodata B |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in args.models:
        for core, opt in CONFIGS:
            r = measure(path, core, opt, readings=1000, counted=4)
            helpers = sum(r["helper_instructions_per_step"].values())
            rows.append({k: r[k] for k in ("arch", "hidden", "core", "opt", "compiler", "bit_exact_readings",
                                            "instructions_per_step", "instructions_per_mac", "stack_bytes",
                                            "sections", "macs") if k in r}
                        | {"helper_instructions": helpers, "cycles_per_step": r.get("cycles_per_step")})
            print(f"| {r['arch']} h{r['hidden']} | {core} | {opt} | {r['instructions_per_step']:,.0f} | "
                  f"{r['instructions_per_mac']:.2f} | {helpers:,.0f} | {r['stack_bytes']} | "
                  f"{r.get('cycles_per_step', float('nan')):,.0f} | {r['sections']['text']:,} | "
                  f"{r['sections']['rodata']:,} |")
        for target in TARGETS:
            c = check_model(path, get_target(target))
            checks.append({"model": os.path.basename(path), "arch": c["arch"], "target": target,
                           "flash_bytes": c["flash"]["total"], "ram_bytes": c["ram"]["total"],
                           "cycles": c["cost"]["cycles"], "us_per_reading": c["cost"]["us_per_reading"],
                           "source": c["cost"]["source"], "fits": c["fits"]})
    for c in checks:
        print(f"check {c['arch']} on {c['target']}: flash {c['flash_bytes']:,} B, RAM {c['ram_bytes']:,} B, "
              f"{c['cycles']:,.0f} cycles = {c['us_per_reading']:,.0f} us per reading")
    if args.json:
        out = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "command": "scripts/firmware_table.py --json " + " ".join(os.path.basename(m) for m in args.models),
               "compiler": rows[0]["compiler"] if rows else "", "measured": rows, "check": checks}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    run_script(main)
