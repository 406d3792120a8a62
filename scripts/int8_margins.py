"""int8 margin per architecture and seed: how far each int8 export stays inside its bounds.

    .venv/bin/python scripts/int8_margins.py                      # rnn gru lstm transformer, seeds 0-4, both schemes
    .venv/bin/python scripts/int8_margins.py --archs rnn --seeds 0 1 --schemes static

Trains each architecture with its default schedule and the given seed on the embedded data,
exports int8 with `--keep-anyway` (so a model past its bound is measured, not refused) and
prints, per model: the mean output error against the float twin (4 streams x 500 test
readings, never reset) and its margin to the bound (bound / error); per-reading test accuracy
of float and int8 on both protocols (per sequence; continuous, never reset) and the accuracy
margin (the bound minus the larger of the two drops, in points).
Takes about 5 minutes on 2 cores.
"""

import argparse
import dataclasses
import json
import tempfile
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
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
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
                                 "within_bounds": r["within_bounds"]})
                    print(f"{arch:12s} {seed:4d} {scheme:8s} {r['mean_rel']:8.2%} {r['error_margin']:6.1f}x "
                          f"{r['float_reading_accuracy']:.3f}/{r['int8_reading_accuracy']:.3f} "
                          f"   {r['float_continuous_accuracy']:.3f}/{r['int8_continuous_accuracy']:.3f} {acc_margin:+9.2f}p "
                          f"{r['float_accuracy']:6.3f}/{r['int8_accuracy']:.3f}"
                          + ("" if r["within_bounds"] else "  BREAKS ITS BOUND"), flush=True)
    worst = {}
    for row in rows:
        k = (row["arch"], row["scheme"])
        w = worst.setdefault(k, [float("inf"), float("inf")])
        w[0], w[1] = min(w[0], row["error_margin"]), min(w[1], row["accuracy_margin_points"])
    print("\nworst over seeds: arch, scheme, error margin, accuracy margin (points)")
    for (arch, scheme), (em, am) in worst.items():
        print(f"  {arch:12s} {scheme:8s} {em:5.1f}x {am:+6.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
