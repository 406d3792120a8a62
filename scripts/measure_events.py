"""Events on BasicMotions' never-reset streams: the decision layer calibrated, then scored on the test split.

    .venv/bin/python scripts/measure_events.py --json docs/figures/events.json

For each architecture (default: GRU, LSTM, SSM, Transformer): train with the library's default
settings (seed 0), export float32 and static int8, run `edgeseq calibrate`'s search on the
training split's validation part (never the test split) with Standing as the background class
and a budget of 2 false alarms per hour at the data's 10 Hz, write the chosen settings into the
model file, and score events on the test split joined end to end in 20 seeded orders, each one
never-reset stream (`edgeseq.runtime.calibrate.event_scores`), on every backend the model runs
on (native where built, and onnxruntime) and, for int8, on the firmware's path (the integer step and
integer decision layer, bit-exact with the emitted C: `firmware_sim.intdecide`). Also scored: the same test streams with the settings
`calibrate` would choose on the whole training split (`--split train`), as a second row, and with those it
would choose on the training split cross-fitted (`--split cross`: five models of the architecture, each
trained without a fifth of the training sequences and run on that fifth), as a third.
`--runs DIR` reuses trained runs (DIR/<arch>/checkpoint.pt, as `make demo` leaves them).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUDGET = 2.0
BACKGROUND = ["Standing"]
RATE_HZ = 10.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archs", nargs="+", default=["gru", "lstm", "ssm", "transformer"])
    ap.add_argument("--runs", help="reuse DIR/<arch>/checkpoint.pt instead of training")
    ap.add_argument("--json", required=True, help="write the figures here")
    args = ap.parse_args(argv)

    import torch

    from edgeseq.data import holdout, load_dataset
    from edgeseq.runtime import native
    from edgeseq.runtime.calibrate import calibrate, event_scores, search
    from edgeseq.train.crossfit import FOLDS, out_of_fold
    from edgeseq.train import train
    from edgeseq.train.checkpoint import load_checkpoint
    from export import export_int8, export_model
    from export.decision import write_decision
    from firmware_sim.intdecide import event_scores_int

    torch.set_num_threads(1)
    ds = load_dataset("basicmotions")
    _, val = holdout(ds.train, 0.2, seed=0)
    rows = []
    work = Path(tempfile.mkdtemp(prefix="edgeseq-events-"))
    for arch in args.archs:
        t0 = time.perf_counter()
        ckpt = load_checkpoint(Path(args.runs) / arch) if args.runs else train(arch, ds, progress=False)
        trained = time.perf_counter() - t0
        oof = out_of_fold(arch, ds, FOLDS, 20, 0, config=ckpt["config"])
        for kind in ("float32", "int8"):
            path = work / f"{arch}-{kind}.onnx"
            if kind == "float32":
                export_model(ckpt, path)
            else:
                export_int8(ckpt, path, "static")
            for split_name, part in (("validation", val), ("train", ds.train), ("cross", ds.train)):
                cal = (search(oof["blocks"], list(ds.labels), part, BACKGROUND, RATE_HZ, BUDGET, 20, FOLDS)
                       if split_name == "cross" else
                       calibrate(str(path), part, background=BACKGROUND, rate_hz=RATE_HZ,
                                 max_false_alarms_per_hour=BUDGET))
                write_decision(path, cal["chosen"], path)
                backends = ["native", "onnxruntime"] if native.available() else ["onnxruntime"]
                if kind == "int8":
                    backends = backends + ["firmware C"]
                for backend in backends:
                    try:
                        e = (event_scores_int(str(path), ds.test, cal["chosen"])
                             if backend == "firmware C" else event_scores(str(path), ds.test, cal["chosen"], backend=backend))
                    except Exception as err:  # noqa: BLE001 - a backend that cannot run this model: say so
                        print(f"{arch} {kind} {backend}: {err}", file=sys.stderr)
                        continue
                    d = e["delay_readings"] or {}
                    row = {"arch": arch, "model": kind, "calibrated_on": split_name, "backend": backend,
                           "decision": cal["chosen"].describe(), "validation": cal["chosen"].calibration["validation"],
                           "budget_met_on_validation": cal["met"],
                           "f1": e["f1"], "precision": e["precision"], "recall": e["recall"],
                           "false_alarms": e["false_alarms"], "false_alarms_per_hour": e["false_alarms_per_hour"],
                           "insertions": e["insertions"], "fragmented": e["fragmented"], "merged": e["merged"],
                           "deleted": e["deleted"], "events": e["events"], "detections": e["detections"],
                           "delay_median": d.get("median"), "delay_p90": d.get("p90"), "hours": e["hours"],
                           "train_seconds": round(trained, 1),
                           "cross_fit_seconds": round(sum(oof["seconds"]), 1) if split_name == "cross" else None}
                    rows.append(row)
                    print(f"{arch:12s} {kind:8s} {split_name:10s} {backend:11s} F1 {e['f1']:.3f} "
                          f"FA/h {e['false_alarms_per_hour']:6.1f} delay {d.get('median')} | {row['decision']}",
                          flush=True)
    out = {"rows": rows, "budget": BUDGET, "background": BACKGROUND, "rate_hz": RATE_HZ, "orders": 20,
           "test_sequences": len(ds.test), "validation_sequences": len(val),
           "meta": run_meta("measure_events.py", argv)}
    Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


def run_meta(script: str, argv) -> dict:
    """The machine, the date (UTC) and the command line of a figures run, for its JSON's "meta"."""
    import numpy as np
    import onnxruntime
    import torch
    return {"machine": {"machine": platform.machine(), "python": platform.python_version(),
                        "torch": torch.__version__, "onnxruntime": onnxruntime.__version__, "numpy": np.__version__},
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": f"python scripts/{script} " + " ".join(argv if argv is not None else sys.argv[1:])}


if __name__ == "__main__":
    sys.exit(main())
