"""What the decision layer adds to a push: the same model, with and without decision settings, side by side.

    .venv/bin/python scripts/bench_decision.py --json docs/figures/decision_bench.json \\
        models/gru.onnx models/gru-int8.onnx models/ssm.onnx models/transformer-int8.onnx

For each model and stream count (1 and 1,024), two sessions on the same backend (native where it
runs): one without decision settings, one with (EMA, per-class thresholds, minimum duration,
refractory and release time, one background class). Rounds alternate between them (the machines
are shared and noisy: a ratio is only meaningful measured side by side); each round times N pushes
of the same readings and the figure is the median round. On the native backend the decision runs
in the C call (firmware_sim/kernels/es_decide.h); on onnxruntime, in numpy.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 1024])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--backend", default=None, help="auto (default), native or onnxruntime")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)

    import numpy as np
    import onnxruntime

    from edgeseq.runtime import StreamSession, native
    from edgeseq.runtime.decision import DecisionSpec

    rows = []
    for model in args.models:
        labels = StreamSession(model, decision=False).labels
        spec = DecisionSpec.make(labels, background=[labels[0]], alpha=0.3, threshold=0.7, min_duration=3,
                                 refractory=10, release=3, rate_hz=10.0)
        for S in args.streams:
            plain = StreamSession(model, streams=S, backend=args.backend, decision=False)
            decided = StreamSession(model, streams=S, backend=args.backend, decision=spec)
            rng = np.random.default_rng(0)
            X = (rng.normal(size=(64, S, plain.n_features)) * 0.3).astype(np.float32)
            n = max(8, 4000 // S)
            times = {"plain": [], "decided": []}
            for sess in (plain, decided):
                for x in X[:16]:
                    sess.push(x)
            for r in range(args.rounds):
                for name, sess in ((("plain", plain), ("decided", decided)) if r % 2 == 0
                                   else (("decided", decided), ("plain", plain))):
                    t0 = time.perf_counter()
                    for i in range(n):
                        sess.push(X[i % 64])
                    times[name].append((time.perf_counter() - t0) / n * 1e6)
            a, b = statistics.median(times["plain"]), statistics.median(times["decided"])
            row = {"model": Path(model).name, "streams": S, "backend": decided.backend,
                   "decision_in": "C (es_decide.h)" if decided._native_decide else "numpy",
                   "push_us": round(a, 2), "push_with_decision_us": round(b, 2), "added": round(b / a - 1, 4)}
            rows.append(row)
            print(f"{row['model']:24s} {S:5d} streams {row['backend']:11s} push {a:9.2f} us, with decision "
                  f"{b:9.2f} us: {row['added']:+.1%} ({row['decision_in']})", flush=True)
    if args.json:
        out = {"rows": rows, "rounds": args.rounds,
               "meta": {"machine": {"machine": platform.machine(), "python": platform.python_version(),
                                    "onnxruntime": onnxruntime.__version__, "numpy": np.__version__,
                                    "native": native.simd() if native.available() else None},
                        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                        "command": "python scripts/bench_decision.py " + " ".join(argv if argv is not None
                                                                                  else sys.argv[1:])}}
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
