"""Anomaly detection on the embedded anomaly sets, every stream architecture, float and int8.

    .venv/bin/python scripts/measure_anomaly.py --json docs/figures/anomaly.json

For each set (vibration: 30 held-out recordings with injected faults and 10 normal ones;
internalbleeding16: the UCR anomaly archive's series 135) and architecture (rnn, gru, lstm,
ssm, transformer): train `--task anomaly` with the default settings (seed 0) on the normal
training recordings, export float32 and static int8, calibrate the threshold on the training
recordings (`edgeseq calibrate`'s method: a Gumbel fit to block maxima; budget 1 false alarm
per hour at 50 Hz on vibration, 0.05 per 1,000 readings on the UCR series, whose rate is not
stated), write it into each file, and score the test split on every backend the file runs on
(`edgeseq.runtime.anomaly.evaluate`, both protocols) and, for int8, on the firmware's path (the
integer step and the integer anomaly layer, bit-exact with the emitted C:
`firmware_sim.intanomaly.firmware_events`).

The test split holds about half an hour of normal running, too little to show a rate of one
false alarm per hour: on vibration each file also runs `--normal-hours` of held-out normal
running per machine (`edgeseq.data.vibration.normal_running`, the same six machines, draws of
their own; one stream per machine, never reset), and the row gives its false alarms, their rate
and the rate's one-sided 95% upper bound (exact Poisson).
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

SETS = {"vibration": (50.0, 1.0), "internalbleeding16": (None, 0.05)}    # rate_hz, budget


def poisson_upper(k: int, confidence: float = 0.95) -> float:
    """The one-sided upper confidence bound on a Poisson mean after seeing `k` events: the mean
    at which P(X <= k) = 1 - confidence (bisection on the CDF)."""
    import math

    def cdf(lam):
        return sum(math.exp(-lam + i * math.log(lam) - math.lgamma(i + 1)) for i in range(k + 1))
    lo, hi = 0.0, k + 50.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) > 1 - confidence else (lo, mid)
    return hi


def long_normal(name: str, hours: float):
    """The held-out normal running of set `name` (a Split, one recording per machine) or None
    where the set has none."""
    if name != "vibration" or hours <= 0:
        return None
    import numpy as np

    from edgeseq.data import Split
    from edgeseq.data.vibration import normal_running
    d = normal_running(0, int(round(hours * 3600)))
    k, n = d["X"].shape[:2]
    return Split(d["X"], np.zeros(k, np.int64), np.full(k, n), np.zeros((k, n), np.int64), d["groups"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archs", nargs="+", default=["rnn", "gru", "lstm", "ssm", "transformer"])
    ap.add_argument("--sets", nargs="+", default=list(SETS))
    ap.add_argument("--json", required=True, help="write the figures here")
    ap.add_argument("--normal-hours", type=float, default=1.0,
                    help="hours of held-out normal running per vibration machine (0: none)")
    args = ap.parse_args(argv)

    import onnxruntime
    import numpy as np
    import torch

    from edgeseq.data import load_dataset
    from edgeseq.runtime import native
    from edgeseq.runtime.anomaly import calibrate, evaluate, joined
    from firmware_sim.intanomaly import firmware_events
    from edgeseq.train.forecast import train_task
    from export import export_int8, export_model
    from export.decision import write_decision

    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="edgeseq-anomaly-"))
    rows = []
    for name in args.sets:
        ds = load_dataset(name)
        rate, budget = SETS[name]
        normal = long_normal(name, args.normal_hours)
        for arch in args.archs:
            t0 = time.perf_counter()
            ck = train_task(arch, ds, "anomaly", progress=False)
            train_s = time.perf_counter() - t0
            for weights in ("float", "int8"):
                path = work / f"{name}-{arch}-{weights}.onnx"
                if weights == "float":
                    export_model(ck, path)
                else:
                    try:
                        export_int8(ck, path, data=ds)
                    except Exception as e:              # a refused int8 model is a figure too
                        rows.append({"set": name, "arch": arch, "weights": weights, "refused": str(e)[:200]})
                        print(name, arch, weights, "refused:", str(e)[:120], flush=True)
                        continue
                cal = calibrate(path, ds.train, rate, budget)
                write_decision(path, cal["chosen"], path)
                backends = ["onnxruntime"] + (["native"] if not native.why_unavailable() else [])
                if weights == "int8":
                    backends.append("firmware")
                for backend in backends:
                    if backend == "firmware":          # the integer step and integer anomaly layer (the emitted C)
                        both = {"backend": "firmware (integer)",
                                "per_recording": firmware_events(path, ds.test),
                                "never_reset": firmware_events(path, joined(ds.test))}
                        if normal is not None:
                            both["normal"] = firmware_events(path, normal)
                    else:
                        both = evaluate(path, ds.test, backend=backend)
                        if normal is not None:
                            both["normal"] = evaluate(path, normal, backend=backend,
                                                      protocols=("per_recording",))["per_recording"]
                    fig = both["per_recording"]
                    nr = both["never_reset"]
                    row = {"set": name, "arch": arch, "weights": weights, "backend": both["backend"],
                           "never_reset": {k: nr.get(k) for k in ("streams", "anomalies", "detected", "false_alarms",
                                                                   "false_alarms_per_hour", "false_alarms_per_1000",
                                                                   "delay_median", "normal_readings")},
                           "train_seconds": round(train_s, 1), "epochs": ck["metrics"]["schedule"]["epochs_run"],
                           "sigmas": cal["chosen"].sigmas, "min_duration": cal["chosen"].min_duration,
                           "calibration_false_alarms": cal["observed_false_alarms"], "budget": budget,
                           **{k: fig[k] for k in ("streams", "anomalies", "top_inside", "ucr_score", "detected", "false_alarms",
                                                  "normal_readings", "delay_median", "delay_p90")},
                           "false_alarms_per_hour": fig.get("false_alarms_per_hour"),
                           "false_alarms_per_1000": fig.get("false_alarms_per_1000")}
                    if normal is not None:
                        f = both["normal"]
                        hours = f["normal_readings"] / rate / 3600
                        row["normal_running"] = {
                            "machines": len(normal), "hours": round(hours, 3), "false_alarms": f["false_alarms"],
                            "false_alarms_per_hour": round(f["false_alarms"] / hours, 3),
                            "per_hour_upper_95": round(poisson_upper(f["false_alarms"]) / hours, 3)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    out = {"rows": rows, "sets": {k: {"rate_hz": v[0], "budget": v[1]} for k, v in SETS.items()},
           "meta": {"machine": {"machine": platform.machine(), "python": platform.python_version(),
                                "torch": torch.__version__, "onnxruntime": onnxruntime.__version__,
                                "numpy": np.__version__},
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "command": "python scripts/measure_anomaly.py --json docs/figures/anomaly.json"
                               + (f" --normal-hours {args.normal_hours:g}" if args.normal_hours != 1.0 else "")}}
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
