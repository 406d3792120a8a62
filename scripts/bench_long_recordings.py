"""Default training on long recordings: the shape of a 50 Hz smartwatch exercise set.

Trains each architecture named (default: gru) with its default schedule on synthetic IMU
recordings (`edgeseq.data.synthetic`: 140 training and 35 test recordings of about 2,600
readings, 6 channels, 7 classes), exports it and scores the test recordings on both protocols
(`edgeseq.runtime.evaluate`: per sequence, and never reset, per reading). Prints one row per
architecture and writes them as JSON.

    .venv/bin/python scripts/bench_long_recordings.py                   # the GRU
    .venv/bin/python scripts/bench_long_recordings.py gru ssm lstm --json long.json

The data is synthetic: the times are what matter; the accuracy says that training works at
this size, not how a model does on people.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgeseq.data.synthetic import recordings  # noqa: E402
from edgeseq.report.bench import machine_info  # noqa: E402
from edgeseq.runtime.evaluate import evaluate  # noqa: E402
from edgeseq.train import train  # noqa: E402
from export import export_model  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archs", nargs="*", default=["gru"])
    ap.add_argument("--recordings", type=int, default=140)
    ap.add_argument("--length", type=int, default=2_600)
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args(argv)
    ds = recordings(args.recordings, args.length, n_test=35, seed=0)
    rows = []
    print(f"{len(ds.train)} training and {len(ds.test)} test recordings, {int(ds.train.lengths.sum()):,} training "
          f"readings x 6 channels, 7 classes (synthetic)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.archs:
            t0 = time.perf_counter()
            ck = train(arch, ds, progress=True)
            wall = time.perf_counter() - t0
            path = Path(tmp) / f"{arch}.onnx"
            export_model(ck, path)
            ev = evaluate(str(path), ds.test)
            m = ck["metrics"]
            rows.append({"arch": arch, "train_seconds": m["train_seconds"], "wall_seconds": round(wall, 1),
                         "readings_per_second": m["readings_per_second"], "updates": m["updates"],
                         "epochs": m["schedule"]["epochs_run"], "stopped": m["schedule"]["stopped"], "threads": m["threads"],
                         "plan": m["plan"],
                         "per_sequence": ev["accuracy"], "never_reset": ev["continuous"]["reading_accuracy"],
                         "backend": ev.get("backend")})
            r = rows[-1]
            print(f"{arch}: trained in {r['train_seconds']:.0f} s ({r['wall_seconds']:.0f} s with the final scoring), "
                  f"{r['readings_per_second']:,} readings/s; test accuracy per sequence {r['per_sequence']:.3f}, "
                  f"never reset {r['never_reset']:.3f} per reading", flush=True)
    if args.json:
        words = ["python", "scripts/bench_long_recordings.py", *args.archs, "--recordings", str(args.recordings),
                 "--length", str(args.length), "--json", args.json]
        data = {"train_recordings": len(ds.train), "test_recordings": len(ds.test),
                "train_readings": int(ds.train.lengths.sum()), "channels": 6, "classes": 7}
        Path(args.json).write_text(json.dumps({"command": " ".join(words), "data": data, "machine": machine_info(),
                                               "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
