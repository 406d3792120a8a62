"""`edgeseq compare`: two or more exported models side by side, measured in one run.

For each model: file size, test accuracy (streamed as deployed), output difference from the
first model over long real streams (test sequences joined end to end, state never reset),
and per-reading latency of `StreamSession.push` with one stream. Latency is measured in
interleaved rounds (model A, B, A, B ...) so that machine noise falls on every model alike.
numpy + onnxruntime only.
"""

from __future__ import annotations

import os
import time

import numpy as np

from edgeseq.data import load_dataset
from edgeseq.errors import DataError, UsageError
from edgeseq.runtime.evaluate import STREAM_READINGS, evaluate, long_streams, output_error
from edgeseq.runtime.session import StreamSession


def _quant_name(meta) -> str:
    q = meta.quantization
    return f"int8 {q.get('scheme', '')}".strip() if q else "float"


def compare_models(paths: list, data: str = "basicmotions", readings: int = STREAM_READINGS,
                   rounds: int = 20, latency_readings: int = 100, seed: int = 0, backend: str | None = None) -> dict:
    """Figures for every model in `paths`; differences are against the first."""
    if len(paths) < 2:
        raise UsageError("compare needs at least two models")
    if readings < 1 or rounds < 1 or latency_readings < 1:
        raise UsageError("readings, rounds and latency readings must be at least 1")
    ds = load_dataset(data)
    sessions = [StreamSession(p, streams=1, backend=backend) for p in paths]
    first = sessions[0].meta
    for p, s in zip(paths, sessions):
        if list(s.meta.features) != list(first.features) or list(s.meta.labels) != list(first.labels):
            raise DataError(f"'{p}' reads other features or predicts other labels than '{paths[0]}'; "
                            "compare models of one task")
    ds = ds.for_model(first.features, f"data '{ds.name}'")

    X = long_streams(ds.test, readings, seed=seed)                       # (B, T, F)
    outputs = []
    for p in paths:
        s = StreamSession(p, streams=X.shape[0], backend=backend)
        outputs.append(np.stack([s.push_logits(X[:, t]).copy() for t in range(X.shape[1])]))

    lat = [[] for _ in paths]
    stream = X[0, :latency_readings]
    for s in sessions:                                                   # warm-up
        s.reset()
        for x in stream[:20]:
            s.push(x[None])
    for _ in range(rounds):
        for i, s in enumerate(sessions):
            s.reset()
            for x in stream:
                x = x[None]
                t0 = time.perf_counter()
                s.push(x)
                lat[i].append(time.perf_counter() - t0)

    rows = []
    for i, (p, s) in enumerate(zip(paths, sessions)):
        acc = evaluate(p, ds.test, labels=ds.labels, features=ds.features, backend=backend)
        t = np.asarray(lat[i]) * 1e6
        row = {
            "model": str(p), "arch": s.meta.arch, "backend": s.backend, "quantization": _quant_name(s.meta),
            "bytes": os.path.getsize(p), "accuracy": acc["accuracy"], "continuous": acc["continuous"],
            "latency_us_median": float(np.median(t)), "latency_us_p99": float(np.quantile(t, 0.99)),
        }
        row["vs_first"] = None if i == 0 else output_error(outputs[0], outputs[i])
        rows.append(row)
    return {
        "data": ds.name, "test_sequences": len(ds.test),
        "streams": int(X.shape[0]), "readings_per_stream": int(X.shape[1]),
        "latency": {"rounds": rounds, "readings_per_round": int(len(stream)), "streams": 1,
                    "what": "StreamSession.push, one reading, from a reset stream"},
        "models": rows,
    }


def format_compare(r: dict) -> str:
    head = ["model", "quant", "backend", "KB", "x smaller", "per seq", "continuous", "follow", "max diff", "mean diff",
            "agree", "us/reading", "p99 us"]
    base = r["models"][0]
    lines = []
    for m in r["models"]:
        d = m["vs_first"]
        lines.append([
            os.path.basename(m["model"]), m["quantization"], m.get("backend", "onnxruntime"), f"{m['bytes'] / 1000:.1f}",
            f"{base['bytes'] / m['bytes']:.2f}", f"{m['accuracy']:.3f}",
            f"{m['continuous']['reading_accuracy']:.3f}" if m["continuous"]["scored_readings"] else "n/a",
            "-" if m["continuous"]["median_readings_to_follow"] is None
            else f"{m['continuous']['median_readings_to_follow']:.0f}",
            "-" if d is None else f"{d['max_abs']:.3f} ({d['max_rel']:.1%})",
            "-" if d is None else f"{d['mean_abs']:.4f} ({d['mean_rel']:.2%})",
            "-" if d is None else f"{d['argmax_agreement']:.1%}",
            f"{m['latency_us_median']:.1f}", f"{m['latency_us_p99']:.1f}",
        ])
    widths = [max(len(h), *(len(row[i]) for row in lines)) for i, h in enumerate(head)]
    fmt = lambda row: "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))  # noqa: E731
    out = [fmt(head), fmt(["-" * w for w in widths])] + [fmt(row) for row in lines]
    out.append("")
    c = base["continuous"]
    out.append(f"per seq: accuracy at the last reading of each of {r['test_sequences']} test sequences of {r['data']}, "
               f"each its own stream. continuous: per-reading accuracy on {c['orders']} never-reset streams of "
               f"{c['readings_per_stream']} readings (test sequences joined; {c['grace']} readings after each change "
               "not scored); follow: median readings to follow a change of label.")
    out.append(f"diff: logits against the "
               f"first model over {r['streams']} streams x {r['readings_per_stream']} readings (test sequences "
               "end to end, state fed back); % of the first model's output range. agree: same top class.")
    lat = r["latency"]
    out.append(f"latency: {lat['what']}, {lat['rounds']} interleaved rounds of {lat['readings_per_round']} readings.")
    return "\n".join(out)
