"""The emitted step of all five architectures on emulated Cortex-M cores, and `firmware check` on two parts.

    .venv/bin/python scripts/firmware_table.py models/{rnn,gru,lstm,ssm,transformer}-int8.onnx
    .venv/bin/python scripts/firmware_table.py --json docs/figures/firmware.json --untrained-windows 16,256 \\
        models/{rnn,gru,lstm,ssm,transformer}-int8.onnx

For each static int8 model (RNN, GRU, LSTM, SSM, windowed Transformer) and core (M4 -O2: SMLAD
path; M0+ -O2: portable path): instructions per reading and per MAC, 64-bit helper
instructions and stack (measured), cycles (modelled from the executed mix), and .text/.rodata
(measured). Every build is first checked bit-exact with the simulator over 1,000 readings; a
Transformer is counted at a full window. Then what `firmware check` says for the same model on
the nRF52840 and the RP2040: flash, RAM split into state (a Transformer's: its KV ring at the
window) and the rest (scratch, inputs/outputs, stack), cycles and microseconds per reading.

`--untrained-windows 16,256` adds Transformers of the default sizes (d 32, 4 heads, 2 layers)
at those windows, from a seeded untrained checkpoint exported static int8 with calibration on
BasicMotions: a step's costs do not depend on its weights; the tables say which models are
untrained. Prints Markdown tables; `--json` also writes every figure, with the date, the
command and the compiler, for `scripts/render_docs.py`. A few minutes.
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from _firmware_figures import write_figures  # noqa: E402
from edgeseq.errors import run_script  # noqa: E402

CONFIGS = [("cortex-m4", "-O2"), ("cortex-m0plus", "-O2")]
TARGETS = ["nrf52840", "rp2040"]
ORDER = ["rnn", "gru", "lstm", "ssm", "transformer"]


def label(r: dict) -> str:
    """A model's name in the tables: architecture and the size its costs scale with."""
    if r["arch"] == "ssm":
        return f"SSM d{r['hidden']} n{r['d_state']}" + (" selective" if r.get("selective") else "")
    if r["arch"] == "transformer":
        return f"Transformer d{r['hidden']} w{r['window']}"
    return f"{r['arch'].upper()} h{r['hidden']}"


def untrained_models(windows, out_dir) -> list:
    """Paths of Transformers of the default sizes at `windows`, untrained (seed 0), static int8."""
    from edgeseq.report.bench import _random_checkpoint
    from edgeseq.report.mcu import window_models

    if not windows:
        return []
    paths = window_models(_random_checkpoint("transformer"), windows, out_dir, stem="transformer-untrained")
    return [paths[w] for w in sorted(paths)]


def windows_arg(text: str) -> list:
    try:
        out = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"windows must be whole numbers separated by commas, got {text!r}") from None
    if any(w < 1 for w in out):
        raise argparse.ArgumentTypeError("each window must be at least 1 reading")
    return out


def main():
    from firmware_sim.measure import measure
    from firmware_sim.plan import check_model
    from firmware_sim.targets import get_target

    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--json", metavar="PATH", help="also write every figure to this JSON file")
    ap.add_argument("--untrained-windows", type=windows_arg, default=[], metavar="W,W",
                    help="add untrained Transformers of the default sizes at these windows (e.g. 16,256)")
    args = ap.parse_args()
    rows, checks = [], []
    with tempfile.TemporaryDirectory() as tmp:
        extra = untrained_models(args.untrained_windows, tmp)
        models = [(p, False) for p in args.models] + [(str(p), True) for p in extra]
        for path, untrained in models:
            for core, opt in CONFIGS:
                r = measure(path, core, opt, readings=1000, counted=4)
                row = {k: r[k] for k in ("arch", "hidden", "layers", "core", "opt", "compiler", "bit_exact_readings",
                                         "instructions_per_step", "instructions_per_mac", "stack_bytes", "sections",
                                         "macs", "state_bytes", "scratch_bytes", "window", "cache_bytes", "d_state",
                                         "selective", "heads") if k in r}
                row |= {"model": os.path.basename(path), "label": label(r), "untrained": untrained,
                        "helper_instructions": sum(r["helper_instructions_per_step"].values()),
                        "cycles_per_step": r.get("cycles_per_step")}
                rows.append(row)
            for target in TARGETS:
                c = check_model(path, get_target(target))
                checks.append({"model": row["model"], "label": row["label"], "arch": c["arch"], "untrained": untrained,
                               "window": row.get("window"), "target": target,
                               "flash_bytes": c["flash"]["total"], "ram_bytes": c["ram"]["total"],
                               "state_bytes": c["ram"]["state"], "cache_bytes": row.get("cache_bytes", 0),
                               "rest_bytes": c["ram"]["total"] - c["ram"]["state"],
                               "cycles": c["cost"]["cycles"], "us_per_reading": c["cost"]["us_per_reading"],
                               "source": c["cost"]["source"], "fits": c["fits"]})

    def key(r):
        return ORDER.index(r["arch"]), r.get("window") or 0, r["label"]
    rows.sort(key=key)
    checks.sort(key=key)
    print("| model | core | opt | instructions / reading | per MAC | 64-bit helper instr. | stack B | "
          "modelled cycles | .text B | .rodata B |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['label']}{' (untrained)' if r['untrained'] else ''} | {r['core']} | {r['opt']} | "
              f"{r['instructions_per_step']:,.0f} | {r['instructions_per_mac']:.2f} | {r['helper_instructions']:,.0f} | "
              f"{r['stack_bytes']} | {r.get('cycles_per_step') or float('nan'):,.0f} | {r['sections']['text']:,} | "
              f"{r['sections']['rodata']:,} |")
    for c in checks:
        print(f"check {c['label']} on {c['target']}: flash {c['flash_bytes']:,} B, RAM {c['ram_bytes']:,} B "
              f"(state {c['state_bytes']:,} B + {c['rest_bytes']:,} B), {c['cycles']:,.0f} cycles = "
              f"{c['us_per_reading']:,.0f} us per reading")
    if args.json:
        command = [".venv/bin/python", "scripts/firmware_table.py", "--json", args.json]
        if args.untrained_windows:
            command += ["--untrained-windows", ",".join(map(str, args.untrained_windows))]
        write_figures(args.json, {
            "command": " ".join(command + args.models),
            "compiler": rows[0]["compiler"] if rows else "",
            "untrained": ("Transformers of the default sizes from a seeded untrained checkpoint, exported static "
                          "int8 with calibration on BasicMotions" if args.untrained_windows else None),
            "measured": rows, "check": checks})
    return 0


if __name__ == "__main__":
    run_script(main)
