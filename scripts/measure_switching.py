"""How soon events can be detected on BasicMotions' never-reset streams, by the training grace.

    .venv/bin/python scripts/measure_switching.py --json docs/figures/switching.json

For each architecture (default: GRU, LSTM, SSM, Transformer) and each training grace (default:
the data's, which is 20 readings on BasicMotions, and 8): train with the library's default
settings and that `TrainConfig.grace` (seed 0; the stream loss leaves out the first `grace`
readings after each change of label), export float32, and on the test split joined end to end in
20 seeded orders, each one never-reset stream, report:

- accuracy per sequence and never reset (per reading past the scoring grace, 20 readings for
  every row: the scoring protocol does not follow the training grace);
- the share of readings named right, by readings since the last change of label;
- an oracle: the fewest false alarms per hour that any of `calibrate`'s 1,800 settings reaches on
  these TEST streams with a median detection delay of at most 15 and 20 readings, and at any
  delay, with its F1. It chooses on the test split, so it bounds what calibrating can reach with
  this model; it is not a figure of a calibrated model;
- calibrated as a user would (never on the test split): on the training split (`--split train`)
  and cross-fitted (`--split cross`, its five models trained with the same grace), with
  `--max-delay 15` and without; the test F1, false alarms per hour and median delay of the
  settings chosen.

Budget 2 false alarms per hour, background Standing, 10 Hz, as scripts/measure_events.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "scripts"))

BUDGET = 2.0
BACKGROUND = ["Standing"]
RATE_HZ = 10.0
ORDERS = 20
DELAYS = (15, 20)                       # oracle bounds on the median delay, readings
MAX_DELAY = 15                          # calibrate --max-delay for the bounded rows
SINCE = (0, 3, 6, 9, 12, 15, 20, 30)   # edges of the readings-since-change bins


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archs", nargs="+", default=["gru", "lstm", "ssm", "transformer"])
    ap.add_argument("--graces", nargs="+", default=["data", "8"],
                    help="training graces: 'data' (the default, TrainConfig.grace None) or a number of readings")
    ap.add_argument("--json", required=True, help="write the figures here")
    args = ap.parse_args(argv)

    import numpy as np
    import torch
    from measure_events import run_meta

    from edgeseq.data import load_dataset, since_change
    from edgeseq.runtime import calibrate as C
    from edgeseq.train import train
    from edgeseq.train.config import DEFAULTS, TrainConfig
    from edgeseq.train.crossfit import FOLDS, out_of_fold
    from export import export_model

    torch.set_num_threads(1)
    ds = load_dataset("basicmotions")
    labels = list(ds.labels)
    bg = [labels.index(b) for b in BACKGROUND]
    specs = C.grid(labels, tuple(BACKGROUND), RATE_HZ, float(np.median(ds.train.lengths)))
    work = Path(tempfile.mkdtemp(prefix="edgeseq-switching-"))

    def scored(blocks):
        """Per setting of `specs`: (F1, false alarms per hour, median delay or None) on `blocks`."""
        per = [C.detections(P, specs) for P, _ in blocks]
        Ys = [y for _, Y in blocks for y in Y]
        out = []
        for k in range(len(specs)):
            r = C.score_streams([d for dets in per for d in dets[k]], Ys, labels, bg, RATE_HZ)
            out.append((r["f1"] or 0.0, r["false_alarms_per_hour"], (r["delay_readings"] or {}).get("median")))
        return out

    def figures(k, on):
        f1, fa, delay = on[k]
        return {"f1": round(f1, 4), "false_alarms_per_hour": round(fa, 2), "delay_median": delay,
                "decision": specs[k].describe()}

    rows = []
    for arch in args.archs:
        for g in args.graces:
            grace = None if g == "data" else int(g)
            tc = replace(DEFAULTS.get(arch, TrainConfig()), grace=grace)
            t0 = time.perf_counter()
            ckpt = train(arch, ds, tc, progress=False)
            seconds = time.perf_counter() - t0
            path = work / f"{arch}-{g}.onnx"
            export_model(ckpt, path)
            P, Y, _ = C.stream_probs(str(path), ds.test, ORDERS, seed=0)
            pred = P.argmax(-1)
            since = np.stack([since_change(y) for y in Y])
            bins = {f"{a}-{b - 1}": round(float((pred[(since >= a) & (since < b)] == Y[(since >= a) & (since < b)])
                                                .mean()), 3) for a, b in zip(SINCE[:-1], SINCE[1:])}
            test = scored([(P, Y)])
            oracle = {}
            for bound in DELAYS + (None,):
                ok = [k for k in range(len(specs)) if test[k][2] is not None and (bound is None or test[k][2] <= bound)]
                k = min(ok, key=lambda k: (test[k][1], -test[k][0])) if ok else None
                oracle["any" if bound is None else str(bound)] = figures(k, test) if k is not None else None
            Ptr, Ytr, _ = C.stream_probs(str(path), ds.train, ORDERS, seed=0)
            oof = out_of_fold(arch, ds, FOLDS, ORDERS, 0, train_config=tc, config=ckpt["config"])
            calibrated = {}
            for split, blocks in (("train", [(Ptr, Ytr)]), ("cross", oof["blocks"])):
                for bound in (None, MAX_DELAY):
                    r = C.search(blocks, labels, ds.train, BACKGROUND, RATE_HZ, BUDGET, ORDERS,
                                 FOLDS if split == "cross" else None, max_delay=bound)
                    k = next(i for i, s in enumerate(specs) if s.describe() == r["chosen"].describe())
                    v = r["chosen"].calibration["validation"]
                    calibrated[f"{split}" + ("" if bound is None else f", max delay {bound}")] = {
                        **figures(k, test), "estimate": {"f1": v["f1"], "false_alarms_per_hour": v["false_alarms_per_hour"],
                                                         "delay_median": v["delay_median"]},
                        "budget_met": r["met"], "delay_met": r["delay_met"]}
            m = ckpt["metrics"]
            row = {"arch": arch, "grace": ckpt["metrics"]["stream_grace"], "grace_setting": g,
                   "per_sequence": m["test_accuracy"], "never_reset": m.get("test_continuous_accuracy"),
                   "train_seconds": round(seconds, 1), "since_change": bins, "oracle": oracle,
                   "calibrated": calibrated}
            rows.append(row)
            print(f"{arch:12s} grace {row['grace']:2d}: per sequence {row['per_sequence']:.3f}, never reset "
                  f"{row['never_reset']:.3f}; oracle FA/h at delay <= 15: "
                  + (f"{oracle['15']['false_alarms_per_hour']:.1f}" if oracle["15"] else "none") + "; "
                  + "; ".join(f"{name}: F1 {c['f1']:.3f} FA/h {c['false_alarms_per_hour']:.1f} delay "
                              f"{c['delay_median']}" for name, c in calibrated.items()), flush=True)
    out = {"rows": rows, "budget": BUDGET, "background": BACKGROUND, "rate_hz": RATE_HZ, "orders": ORDERS,
           "max_delay": MAX_DELAY, "settings": len(specs), "test_sequences": len(ds.test),
           "meta": run_meta("measure_switching.py", argv)}
    Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
