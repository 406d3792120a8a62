"""int8 margin per architecture and seed: how far each int8 export stays inside its bounds.

    .venv/bin/python scripts/int8_margins.py                      # rnn gru lstm transformer ssm, seeds 0-4, both schemes
    .venv/bin/python scripts/int8_margins.py --archs rnn --seeds 0 1 --schemes static
    .venv/bin/python scripts/int8_margins.py --json docs/figures/int8_margins.json   # docs/int8.md's table

Trains each architecture with its default schedule and the given seed on the embedded data,
exports int8 with `--keep-anyway` (so a model past its bound is measured, not refused) and
prints, per model: the mean output error against the float twin (4 streams x 500 test
readings, never reset) and its margin to the bound (bound / error); per-reading test accuracy
of float and int8 on both protocols (per sequence; continuous, never reset) and the accuracy
margin (the bound minus the larger of the two drops, in points). Every figure is the judged
backend's (the one `StreamSession` runs the file on here: `export_int8`'s `backend`).
`--json PATH` writes the rows, the worst seed per architecture and scheme, the command, the
machine, the date and the wall time, which `scripts/render_docs.py` renders into docs/int8.md.
Takes about 5 minutes of one core with the defaults.
"""

import argparse
import dataclasses
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

import torch

from edgeseq.data import load_dataset
from edgeseq.train import DEFAULTS, train
from export import export_int8


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archs", nargs="+", default=["rnn", "gru", "lstm", "transformer", "ssm"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--schemes", nargs="+", default=["static", "dynamic"])
    ap.add_argument("--json", metavar="PATH", help="also write the rows, the worst seeds, the command, the machine "
                                                  "and the date here (docs/figures/int8_margins.json renders "
                                                  "docs/int8.md's table)")
    args = ap.parse_args()
    started = time.time()
    torch.set_num_threads(1)
    ds = load_dataset("basicmotions")
    rows = []
    print(f"{'arch':12s} {'seed':>4s} {'scheme':8s} {'mean err':>8s} {'margin':>7s} {'per seq f/q':>11s} "
          f"{'continuous f/q':>14s} {'acc margin':>10s} {'final acc f/q':>13s}")
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.archs:
            for seed in args.seeds:
                ckpt = train(arch, ds, dataclasses.replace(DEFAULTS[arch], seed=seed), progress=False)
                for scheme in args.schemes:
                    r = export_int8(ckpt, Path(tmp) / f"{arch}-{seed}-{scheme}.onnx", scheme, data=ds,
                                    keep_anyway=True)
                    drop = max(r["accuracy_drop"], r["continuous_accuracy_drop"])
                    acc_margin = (r["max_accuracy_drop"] - drop) * 100
                    rows.append({"arch": arch, "seed": seed, "scheme": scheme, "mean_rel": r["mean_rel"],
                                 "error_margin": r["error_margin"], "float_reading_accuracy": r["float_reading_accuracy"],
                                 "int8_reading_accuracy": r["int8_reading_accuracy"], "accuracy_margin_points": acc_margin,
                                 "float_continuous_accuracy": r["float_continuous_accuracy"],
                                 "int8_continuous_accuracy": r["int8_continuous_accuracy"],
                                 "float_accuracy": r["float_accuracy"], "int8_accuracy": r["int8_accuracy"],
                                 "within_bounds": r["within_bounds"], "backend": r["backend"],
                                 "max_error": r["max_error"], "max_accuracy_drop": r["max_accuracy_drop"]})
                    print(f"{arch:12s} {seed:4d} {scheme:8s} {r['mean_rel']:8.2%} {r['error_margin']:6.1f}x "
                          f"{r['float_reading_accuracy']:.3f}/{r['int8_reading_accuracy']:.3f} "
                          f"   {r['float_continuous_accuracy']:.3f}/{r['int8_continuous_accuracy']:.3f} {acc_margin:+9.2f}p "
                          f"{r['float_accuracy']:6.3f}/{r['int8_accuracy']:.3f}"
                          + ("" if r["within_bounds"] else "  BREAKS ITS BOUND"), flush=True)
    worst = {}
    for row in rows:
        k = (row["arch"], row["scheme"])
        w = worst.setdefault(k, {"arch": row["arch"], "scheme": row["scheme"], "seeds": 0, "backends": [],
                                 "mean_rel": 0.0, "error_margin": float("inf"), "accuracy_margin_points": float("inf"),
                                 "breaking_seeds": []})
        w["seeds"] += 1
        w["backends"] = sorted(set(w["backends"]) | {row["backend"]})
        w["mean_rel"] = max(w["mean_rel"], row["mean_rel"])
        w["error_margin"] = min(w["error_margin"], row["error_margin"])
        w["accuracy_margin_points"] = min(w["accuracy_margin_points"], row["accuracy_margin_points"])
        if not row["within_bounds"]:
            w["breaking_seeds"].append(row["seed"])
    print("\nworst over seeds: arch, scheme, error margin, accuracy margin (points)")
    for w in worst.values():
        print(f"  {w['arch']:12s} {w['scheme']:8s} {w['error_margin']:5.1f}x {w['accuracy_margin_points']:+6.2f}")
    if args.json:
        from edgeseq.report.bench import machine_info
        doc = {"command": " ".join(["python", "scripts/int8_margins.py", *map(shlex.quote, sys.argv[1:])]),
               "machine": machine_info(), "torch_threads": torch.get_num_threads(),
               "seconds": round(time.time() - started, 1), "data": ds.name, "archs": args.archs,
               "seeds": args.seeds, "schemes": args.schemes, "worst": list(worst.values()), "rows": rows}
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
