"""The Transformer's step on both backends at one stream, the cache holding 16 to 1,024 readings.

    python scripts/bench_native_transformer.py [--json] [--calls 3000]

`StreamSession.push` (a reading in, probabilities out: what a caller pays), medians over
`--calls` calls with the two backends interleaved, one thread each, on untrained models of the
default size (d_model 32, 4 heads, 2 layers, d_ff 64; BasicMotions' 6 features and 4
classes; the timings do not depend on the weights):

  - window 0: the model attends to its whole cache, bounded by max_history = N and sliding, so
    every call attends over N readings on both backends;
  - window 50 (the default), max_history = N: onnxruntime keeps all N readings and masks all
    but the last 50; the native ring keeps min(N, 50).

Prints figures only; nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HISTORIES = (16, 50, 256, 1024)


def export(ckpt, path):
    import onnx

    from export.step import build_graph
    proto, _, _ = build_graph(ckpt)
    onnx.save(proto, str(path))
    return path


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    from edgeseq.report.bench import _interleaved_us, _random_checkpoint
    from edgeseq.runtime import StreamSession, native
    if not native.available():
        sys.exit(native.why_unavailable())
    x = np.random.default_rng(0).standard_normal((1, 6)).astype(np.float32)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = {"window 0": export(_random_checkpoint("transformer", window=0), Path(tmp) / "w0.onnx"),
                  "window 50": export(_random_checkpoint("transformer"), Path(tmp) / "w50.onnx")}
        for label, path in models.items():
            for n in HISTORIES:
                sessions = {b: StreamSession(path, max_history=n, on_full="slide", backend=b)
                            for b in ("native", "onnxruntime")}
                for s in sessions.values():
                    for _ in range(n):
                        s.push(x)
                held = {b: s.state_nbytes() for b, s in sessions.items()}
                us = _interleaved_us({b: (lambda s=s: s.push(x)) for b, s in sessions.items()}, args.calls, 0)
                assert all(s.state_nbytes() == held[b] for b, s in sessions.items())     # full and sliding
                rows.append({"model": label, "history": n, "native_us": us["native"],
                             "onnxruntime_us": us["onnxruntime"], "speedup": us["onnxruntime"] / us["native"],
                             "native_bytes": held["native"], "onnxruntime_bytes": held["onnxruntime"]})
    out = {"simd": native.simd(), "calls": args.calls, "cpu_count": os.cpu_count(), "rows": rows}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"StreamSession.push, 1 stream, medians of {args.calls} interleaved calls (native: {out['simd']})")
        for r in rows:
            print(f"  {r['model']:9s} max_history {r['history']:5d}: native {r['native_us']:7.1f} us, onnxruntime "
                  f"{r['onnxruntime_us']:7.1f} us ({r['speedup']:.1f}x); cache per stream "
                  f"{r['native_bytes'] / 1024:.0f} KB / {r['onnxruntime_bytes'] / 1024:.0f} KB")
    return out


if __name__ == "__main__":
    main()
