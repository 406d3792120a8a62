"""The emitted integer step built by gcc and by clang, side by side on emulated Cortex-M cores.

    .venv/bin/python scripts/firmware_compilers.py models/{rnn,gru,lstm,ssm,transformer}-int8.onnx
    .venv/bin/python scripts/firmware_compilers.py --json docs/figures/compilers.json models/gru-int8.onnx

For each static int8 model and core (M4 -O2 on its SMLAD path, M0+ -O2): the step built by
arm-none-eabi-gcc and by clang from the ziglang wheel (`pip install ziglang`), each checked
bit-exact with the simulator over `--readings` readings, then instructions per reading and per
MAC, stack (measured), cycles (modelled from the executed mix) and .text (measured), with
clang's figure over gcc's. `firmware check` plans with gcc's figures (the documented build);
this says what clang changes. Prints Markdown; about a minute per model.
"""

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from edgeseq.errors import run_script  # noqa: E402

CORES = ("cortex-m4", "cortex-m0plus")


def main():
    from firmware_sim.measure import measure
    from firmware_table import label        # this folder: the model names of docs/firmware.md's tables

    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--readings", type=int, default=300)
    ap.add_argument("--json", metavar="PATH", help="also write every figure to this JSON file")
    args = ap.parse_args()
    rows = []
    print("| model | core | compiler | instructions / MAC | modelled cycles | stack B | .text B |")
    print("|---|---|---|---|---|---|---|")
    for path in args.models:
        for core in CORES:
            pair = {}
            for cc in ("gcc", "clang"):
                r = measure(path, core, "-O2", readings=args.readings, counted=4, compiler=cc)
                pair[cc] = {k: r.get(k) for k in ("arch", "compiler", "instructions_per_mac", "cycles_per_step",
                                                  "stack_bytes")}
                pair[cc]["text_bytes"] = r["sections"]["text"]
                name_in_docs = label(r)
                name = os.path.basename(path)
                print(f"| {name} | {core} | {r['compiler']} | {r['instructions_per_mac']:.2f} | "
                      f"{r.get('cycles_per_step', 0):,.0f} | {r['stack_bytes']} | {r['sections']['text']:,} |", flush=True)
            g, c = pair["gcc"], pair["clang"]
            print(f"| {name} | {core} | clang / gcc | {c['instructions_per_mac'] / g['instructions_per_mac']:.2f}x | "
                  f"{c['cycles_per_step'] / g['cycles_per_step']:.2f}x | {c['stack_bytes'] - g['stack_bytes']:+d} | "
                  f"{c['text_bytes'] / g['text_bytes']:.2f}x |")
            rows.append({"model": path, "label": name_in_docs, "core": core, "opt": "-O2", **pair})
    if args.json:
        command = [".venv/bin/python", "scripts/firmware_compilers.py", "--json", args.json]
        if args.readings != ap.get_default("readings"):
            command += ["--readings", str(args.readings)]
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                       "command": " ".join(command + args.models), "readings": args.readings, "rows": rows},
                      f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    run_script(main)
