"""int8 against float on BasicMotions, every streaming architecture, both schemes, on the backend
StreamSession runs: `edgeseq compare` of the float export, its static int8 twin and its dynamic
int8 twin, written as JSON for docs/int8.md.

    .venv/bin/python scripts/measure_int8.py --runs runs --json docs/figures/int8.json

`--runs DIR` reuses DIR/<arch>/checkpoint.pt (`make demo` leaves them, seed 0); without it each
architecture is trained with the library's defaults (seed 0). Differences are against the float
model over 4 never-reset streams of 500 readings, as a share of its output range; latency is
StreamSession.push of one reading on one stream, median of `--rounds` interleaved rounds of 100.
`validation` holds, per architecture and scheme, what `export_int8` (`edgeseq export RUN --int8
--json`) measured: the judged backend and each backend's error and accuracies beside the float
model's (docs/int8.md's per-backend table).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARCHS = ["rnn", "gru", "lstm", "ssm", "transformer"]
VALIDATION = ("backend", "backend_note", "backends", "float_accuracy", "float_reading_accuracy",
              "float_continuous_accuracy", "max_error", "max_accuracy_drop", "within_bounds")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archs", nargs="+", default=ARCHS)
    ap.add_argument("--runs", help="reuse DIR/<arch>/checkpoint.pt instead of training")
    ap.add_argument("--rounds", type=int, default=20, help="latency rounds (interleaved across the models)")
    ap.add_argument("--json", required=True, help="write the figures here")
    args = ap.parse_args(argv)

    import torch

    from edgeseq.data import load_dataset
    from edgeseq.report.bench import machine_info
    from edgeseq.report.compare import compare_models
    from edgeseq.runtime import native
    from edgeseq.train import train
    from edgeseq.train.checkpoint import load_checkpoint
    from export import export_int8, export_model

    torch.set_num_threads(1)
    ds = load_dataset("basicmotions")
    work = Path(tempfile.mkdtemp(prefix="edgeseq-int8-"))
    rows, validation = [], []
    for arch in args.archs:
        ckpt = load_checkpoint(Path(args.runs) / arch) if args.runs else train(arch, ds, progress=False)
        paths = [work / f"{arch}.onnx", work / f"{arch}-int8.onnx", work / f"{arch}-int8-dynamic.onnx"]
        fbytes = export_model(ckpt, paths[0])["bytes"]
        for scheme, path in (("static", paths[1]), ("dynamic", paths[2])):
            v = export_int8(ckpt, path, scheme, data=ds, float_bytes=fbytes)
            validation.append({"arch": arch, "scheme": scheme, **{k: v[k] for k in VALIDATION}})
        r = compare_models([str(p) for p in paths], rounds=args.rounds)
        for m in r["models"]:
            v = m["vs_twin"] or {}
            rows.append({"arch": arch, "quantization": m["quantization"], "backend": m["backend"],
                         "bytes": m["bytes"], "accuracy": m["accuracy"],
                         "continuous": m["continuous"]["reading_accuracy"],
                         "max_rel": v.get("max_rel"), "mean_rel": v.get("mean_rel"),
                         "argmax_agreement": v.get("argmax_agreement"), "latency_us": m["latency_us_median"]})
            print(json.dumps(rows[-1]), flush=True)
    out = {"rows": rows, "validation": validation, "data": "basicmotions", "streams": r["streams"],
           "readings_per_stream": r["readings_per_stream"],
           "rounds": args.rounds, "native": native.available(),
           "meta": {"machine": machine_info(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "command": "python scripts/measure_int8.py " + " ".join(argv if argv is not None else sys.argv[1:])}}
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
