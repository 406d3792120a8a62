"""`edgeseq compare`: two or more exported models side by side, measured in one run.

For each model: file size, test accuracy (streamed as deployed), output difference from its
twin over long real streams (test sequences joined end to end, state never reset), and
per-reading latency of `StreamSession.push` with one stream. Latency is measured in
interleaved rounds (model A, B, A, B ...) so that machine noise falls on every model alike.
numpy + onnxruntime only.

Twins are files of one model: a float export and its int8 exports, or one file listed twice to
compare backends (`twin_key`, and exported from the same training run:
`edgeseq.runtime.twins.same_run`). Each model's difference is taken against the first earlier
model in the list that is its twin; a model with none gets null (n/a): the outputs of a GRU
and an SSM, of two sizes of GRU, or of two trainings of one setting (seeds apart) differ by
what each learnt, not by an error. The last share a key but not a run; the report names them
(`other_run_of`) so that a float model taken for an int8 model's twin is not passed over.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from edgeseq.data import check_unchanged, data_for_model
from edgeseq.errors import DataError, UsageError, printable
from edgeseq.runtime.evaluate import STREAM_READINGS, evaluate, long_streams, output_error
from edgeseq.runtime.session import StreamSession
from edgeseq.runtime.twins import same_run


def _quant_name(meta) -> str:
    q = meta.quantization
    return f"int8 {q.get('scheme', '')}".strip() if q else "float"


TWINS = ("same training run (checkpoint fingerprint; the weights in older files), architecture, settings, labels, "
         "features and normalisation (mean, std, input transform): a float model and its int8 export")


def twin_key(meta) -> str:
    """Two files are twins when these agree (`TWINS`); int8 export adds only its input scale to
    the normalisation, so a float model and its int8 exports share the key."""
    norm = meta.normalization or {}
    return json.dumps([meta.arch, meta.mode, meta.config, list(meta.labels), list(meta.features),
                       norm.get("mean"), norm.get("std"), norm.get("asinh_scale"),
                       norm.get("gain_floor"), norm.get("gain_release")], sort_keys=True)


def compare_models(paths: list, data: str | None = None, readings: int = STREAM_READINGS,
                   rounds: int = 20, latency_readings: int = 100, seed: int = 0, backend: str | None = None) -> dict:
    """Figures for every model in `paths`; each difference is against the model's first earlier
    twin in `paths` (`twin_key` and `same_run`), null where it has none. `other_run_of`: the
    first earlier model of the same key exported from another training run, where the model
    has no twin (else null). `data`: a data set name or path; None: the first model's training
    data (`data_for_model`)."""
    if len(paths) < 2:
        raise UsageError("compare needs at least two models")
    if readings < 1 or rounds < 1 or latency_readings < 1:
        raise UsageError("readings, rounds and latency readings must be at least 1")
    sessions = [StreamSession(p, streams=1, backend=backend) for p in paths]
    first = sessions[0].meta
    for p, s in zip(paths, sessions):
        if list(s.meta.features) != list(first.features) or list(s.meta.labels) != list(first.labels):
            raise DataError(f"'{p}' reads other features or predicts other labels than '{paths[0]}'; "
                            "compare models of one task")
    ds = data_for_model(data, first.features, first.labels, first.data, str(paths[0]), first.data_sha256)
    if data is None:                                 # the others that trained on that file, as it was then
        for p, s in zip(paths[1:], sessions[1:]):
            if s.meta.data == first.data:
                check_unchanged(s.meta.data, s.meta.data_sha256, f"model '{p}'")

    keys = [twin_key(s.meta) for s in sessions]
    twin, other_run = [], []
    for i in range(len(paths)):            # the same key, and not shown to be another run (older files may not tell)
        same = [j for j in range(i) if keys[j] == keys[i]]
        runs = {j: same_run(sessions[j].meta, sessions[i].meta, paths[j], paths[i])[0] for j in same}
        twin.append(next((j for j in same if runs[j] is not False), None))
        other_run.append(None if twin[i] is not None else next(iter(same), None))
    X = long_streams(ds.test, readings, seed=seed)                       # (B, T, F)
    outputs = {}                                                         # only models in a twin pair
    for i in sorted({i for i, j in enumerate(twin) if j is not None} | {j for j in twin if j is not None}):
        s = StreamSession(paths[i], streams=X.shape[0], backend=backend)
        outputs[i] = np.stack([s.push_logits(X[:, t]).copy() for t in range(X.shape[1])])

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
        row["twin_of"] = None if twin[i] is None else str(paths[twin[i]])
        row["vs_twin"] = None if twin[i] is None else output_error(outputs[twin[i]], outputs[i])
        row["other_run_of"] = None if other_run[i] is None else str(paths[other_run[i]])
        rows.append(row)
    return {
        "data": ds.name, "test_sequences": len(ds.test),
        "streams": int(X.shape[0]), "readings_per_stream": int(X.shape[1]), "twins": TWINS,
        "latency": {"rounds": rounds, "readings_per_round": int(len(stream)), "streams": 1,
                    "what": "StreamSession.push, one reading, from a reset stream"},
        "models": rows,
    }


def format_compare(r: dict) -> str:
    """The comparison as a table and its notes. File and data names are escaped (`printable`) here,
    before the columns are measured, so a name with a control character keeps the table aligned."""
    head = ["model", "quant", "backend", "KB", "x smaller", "per seq", "continuous", "follow", "diff vs",
            "max diff", "mean diff", "agree", "us/reading", "p99 us"]
    base = r["models"][0]
    lines = []
    for m in r["models"]:
        d = m["vs_twin"]
        lines.append([
            printable(os.path.basename(m["model"])), m["quantization"], m.get("backend", "onnxruntime"),
            f"{m['bytes'] / 1000:.1f}",
            f"{base['bytes'] / m['bytes']:.2f}", f"{m['accuracy']:.3f}",
            f"{m['continuous']['reading_accuracy']:.3f}" if m["continuous"]["scored_readings"] else "n/a",
            "-" if m["continuous"]["median_readings_to_follow"] is None
            else f"{m['continuous']['median_readings_to_follow']:.0f}",
            "-" if d is None else printable(os.path.basename(m["twin_of"])),
            "n/a" if d is None else f"{d['max_abs']:.3f} ({d['max_rel']:.1%})",
            "n/a" if d is None else f"{d['mean_abs']:.4f} ({d['mean_rel']:.2%})",
            "n/a" if d is None else f"{d['argmax_agreement']:.1%}",
            f"{m['latency_us_median']:.1f}", f"{m['latency_us_p99']:.1f}",
        ])
    widths = [max(len(h), *(len(row[i]) for row in lines)) for i, h in enumerate(head)]
    fmt = lambda row: "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))  # noqa: E731
    out = [fmt(head), fmt(["-" * w for w in widths])] + [fmt(row) for row in lines]
    out.append("")
    c = base["continuous"]
    out.append(f"per seq: accuracy at the last reading of each of {r['test_sequences']} test sequences of "
               f"{printable(r['data'])}, each its own stream. continuous: per-reading accuracy on {c['orders']} "
               f"never-reset streams of {c['readings_per_stream']} readings (test sequences joined; {c['grace']} "
               f"readings after each change not scored, {c['scored_share']:.0%} of readings scored); follow: median "
               "readings to follow a change of label.")
    out.append(f"diff: logits against its twin (under 'diff vs': the first earlier model in the list with the "
               f"{r['twins']}) over {r['streams']} streams x {r['readings_per_stream']} readings (test sequences "
               "end to end, state fed back); % of the twin's output range. agree: same top class. "
               "n/a: no earlier model in the list is its twin; different models (another architecture, size, "
               "training data or training run) differ by what each learnt, so their difference measures no error.")
    for m in r["models"]:
        if m.get("other_run_of"):
            other = next(o for o in r["models"] if o["model"] == m["other_run_of"])
            int8 = m["quantization"] != "float" or other["quantization"] != "float"
            out.append(f"not twins: {printable(os.path.basename(m['model']))} and "
                       f"{printable(os.path.basename(m['other_run_of']))} share architecture and settings but were not "
                       "exported from the same training run" + ("; for the int8 error, compare the int8 model with the "
                       "float model exported from its run (`edgeseq export RUN --out MODEL.onnx`)." if int8 else "."))
    lat = r["latency"]
    out.append(f"latency: {lat['what']}, {lat['rounds']} interleaved rounds of {lat['readings_per_round']} readings.")
    return "\n".join(out)
