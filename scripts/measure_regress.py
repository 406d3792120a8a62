"""Regression on the embedded motor set, every stream architecture, float and int8, beside persistence.

    .venv/bin/python scripts/measure_regress.py --json docs/figures/regress.json

For each architecture (rnn, gru, lstm, ssm, transformer): train `--task regress` with the
default settings (seed 0), export float32 and static int8, and score the test split's
per-reading error (MAE, RMSE, in degrees C) on both protocols (`edgeseq.runtime.regress.evaluate`:
each recording from a fresh state, and the recordings joined end to end, never reset) on every
backend the file runs on, and, for int8, on the firmware's integer path (the integer step and
the emitted `<prefix>_targets` conversion, bit-exact with the emitted C), beside the persistence
baseline (the target 60 readings earlier: the winding's temperature now), on the same readings:
those at least 60 readings into their recording.
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archs", nargs="+", default=["rnn", "gru", "lstm", "ssm", "transformer"])
    ap.add_argument("--json", required=True, help="write the figures here")
    args = ap.parse_args(argv)

    import numpy as np
    import onnxruntime
    import torch

    from edgeseq.data import load_dataset
    from edgeseq.runtime import native
    from edgeseq.runtime.regress import evaluate, figures, joined
    from edgeseq.train.forecast import train_task
    from export import export_int8, export_model
    from firmware_sim.cemit import model_regress, targets_fixed
    from firmware_sim.intsim import load_int_model, run_stream

    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="edgeseq-regress-"))
    ds = load_dataset("motor")
    te = ds.test
    rows = []

    def row(arch, weights, backend, r, seconds=None):
        out = {"arch": arch, "weights": weights, "backend": backend}
        for proto in ("per_recording", "never_reset"):
            f = r[proto]["targets"][ds.target_names[0]]
            out[proto] = {k: round(f[k], 4) for k in ("mae", "rmse", "persistence_mae", "persistence_rmse", "skill")}
            out[proto]["readings"] = r[proto]["readings"]
        if seconds is not None:
            out["train_seconds"] = round(seconds, 1)
        rows.append(out)
        print(json.dumps(out), flush=True)

    for arch in args.archs:
        t0 = time.perf_counter()
        ck = train_task(arch, ds, "regress", progress=False)
        seconds = time.perf_counter() - t0
        fpath, qpath = work / f"{arch}.onnx", work / f"{arch}-int8.onnx"
        export_model(ck, fpath)
        export_int8(ck, qpath, data=ds, keep_anyway=True)
        for weights, path in (("float32", fpath), ("int8", qpath)):
            backends = ["onnxruntime"] + (["native"] if native.available() else [])
            for backend in backends:
                try:
                    r = evaluate(path, te, backend=backend)
                except Exception as e:            # a file the native step does not run: say so, go on
                    rows.append({"arch": arch, "weights": weights, "backend": backend, "refused": str(e)[:200]})
                    continue
                row(arch, weights, backend, r, seconds if weights == "float32" and backend == backends[0] else None)
        m = load_int_model(qpath)[0]
        q = model_regress(m)
        r = {}
        for proto, (X, Y, L, starts) in (("per_recording", (te.X, te.targets, te.lengths, None)),
                                         ("never_reset", joined(te))):
            pred = np.transpose(targets_fixed(run_stream(m, m.to_fixed(X)), q), (1, 0, 2)) / q[0]
            r[proto] = figures(pred, Y, L, ds.persistence_lag, ds.target_names, starts)
        row(arch, "int8", "firmware (integer-only)", r)
    doc = {"rows": rows, "data": {"name": "motor", "recordings": [len(ds.train), len(te)],
                                  "readings": int(te.lengths[0]), "targets": ds.target_names,
                                  "persistence_lag": ds.persistence_lag, "rate_hz": 1.0},
           "meta": {"command": "python scripts/measure_regress.py " + " ".join(sys.argv[1:]),
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "machine": {"machine": platform.machine(), "python": platform.python_version(),
                                "onnxruntime": onnxruntime.__version__, "numpy": np.__version__,
                                "torch": torch.__version__}}}
    Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
