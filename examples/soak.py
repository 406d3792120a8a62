"""Soak benchmark: stream 1,000,000 readings through one model and watch memory and latency.

    .venv/bin/python examples/soak.py --model models/gru-int8.onnx [--readings 1000000] [--json]

Real readings (the embedded test set, sequences joined end to end and repeated), one
`StreamSession.push` per reading, unpaced. Prints RSS at the start, every 10 %, and at the end
(it must not grow for a recurrent model), and the latency distribution over every call.
A benchmark, not a test: it takes about 20-30 s for the GRU on one x86 core.
"""

import argparse
import json
import os
import sys
import time

try:
    import numpy as np

    from edgeseq.data import load_dataset
    from edgeseq.runtime import StreamSession
    from edgeseq.runtime.live import rss_kb
except ModuleNotFoundError as e:    # a Python without edgeseq (a bare `python`): one line naming the one to use
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # `python -I` leaves the script's folder out
    from _bootstrap import exit_naming_the_python
    exit_naming_the_python(e, __file__, "(`make demo` sets up .venv), or activate .venv first")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--readings", type=int, default=1_000_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    ds = load_dataset("basicmotions")
    X = np.concatenate([ds.test.X[i, :ds.test.lengths[i]] for i in range(len(ds.test))]).astype(np.float32)[:, None]
    s = StreamSession(args.model)
    n = args.readings
    times = np.full(n, 0.0)           # written now, so its pages count in the first RSS sample, not as growth
    marks, rss = set(range(0, n + 1, max(1, n // 10))), []
    rss.append([0, rss_kb()])
    clock = time.perf_counter
    t0 = clock()
    for i in range(n):
        a = clock()
        s.push(X[i % len(X)])
        times[i] = clock() - a
        if i + 1 in marks:
            rss.append([i + 1, rss_kb()])
    wall = clock() - t0
    us = times * 1e6
    r = {"model": args.model, "readings": n, "seconds": round(wall, 1), "rate_hz": round(n / wall),
         "latency_us": {p: round(float(np.percentile(us, q)), 1) for p, q in
                        (("p50", 50), ("p90", 90), ("p99", 99), ("p99.9", 99.9), ("max", 100))},
         "rss_kb": rss, "rss_growth_kb": rss[-1][1] - rss[1][1], "state_bytes": s.state_nbytes()}
    if args.json:
        from edgeseq.report.bench import machine_info        # numpy and onnxruntime only
        r["command"] = "python examples/soak.py " + " ".join(sys.argv[1:])
        r["machine"] = machine_info()
        print(json.dumps(r, indent=1))
        return
    print(f"{n:,} readings through {args.model} in {wall:.1f} s ({r['rate_hz']:,} readings/s)")
    print("latency us: " + ", ".join(f"{k} {v}" for k, v in r["latency_us"].items()))
    print("RSS kB: " + ", ".join(f"{k:,}: {v:,}" for k, v in rss))
    print(f"RSS growth after the first 10 %: {r['rss_growth_kb']:+,} kB; state held {r['state_bytes']} B")


if __name__ == "__main__":
    from edgeseq.errors import run_script
    run_script(main)
