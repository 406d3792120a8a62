"""`edgeseq report`: fixed recurrent state against a growing KV cache, measured in one run.

For the RNN, GRU, LSTM, SSM and the causal Transformer (growing cache, and a bounded window), float
and int8, trained on one data set (`data`: the embedded BasicMotions by default, or the data
the reused runs were trained on), whose test readings are what every model streams:

1. models: parameters, file size, multiply-accumulates per reading, test accuracy with the
   schedule that trained the model, beside 1-NN DTW on the same split (`edgeseq.train.baseline`);
2. memory per stream against history length, read from live sessions after streaming;
3. latency per reading against the step index (median and p99), with the onnxruntime
   per-call floor, the GRU step in torch eager and the Transformer recomputing its whole
   history without a cache, measured in the same run;
4. throughput with B = 1, 16, 256, 1024 streams in one call, against B single-stream calls;
5. process peak memory (RSS) while streaming a long stream, each model in its own process;
6. on a microcontroller: RAM and cycles per reading against history, the int8 steps measured
   on an emulated Cortex-M4 and planned on the nRF52840 (`edgeseq.report.mcu`);
7. the machine, versions, repeats and warm-up.

Writes report.json (every figure), report.md, index.html and PNG plots into one directory,
built beside it under a temporary name and moved into place only once complete: a failed
report leaves an existing directory as it was.

`quick=True` measures the same things with fewer readings and repeats, and trains the models it
does not reuse for a few fixed epochs (`QUICK["epochs"]`), not to convergence. Its time is
dominated by exporting ten models (float and int8, each validated against torch) and two more
Transformers for the microcontroller panel; see docs/edge-report.md for measured times. Every
accuracy the report shows comes with the schedule that trained the model (`schedule_of`), and
the summary calls out a model at or below chance or one its training flagged as not converged.

Progress goes to stderr: a bar per phase on a terminal, plain lines elsewhere (`Progress`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from edgeseq.errors import UsageError
from edgeseq.report.edge_pages import (BATCHES, _html, _markdown, _plots, _summary, latency_at,  # noqa: F401
                                       schedule_text)

ARCHS = ["rnn", "gru", "lstm", "transformer", "ssm"]
FIXED = ["rnn", "gru", "lstm", "ssm"]          # a fixed state per stream: recurrent and state-space

# "epochs": None trains each architecture on its default schedule (`edgeseq.train.DEFAULTS`);
# a dict gives each a fixed number of epochs, a quarter of the fixed schedules chosen on
# BasicMotions (40, 25, 30, 30, 20 epochs): seconds each there, not trained to convergence.
FULL = {"history": 4096, "latency_repeats": 5, "recompute_points": [2, 16, 64, 256, 1024, 4096],
        "throughput_calls": 200, "rss_readings": 100_000, "rss_growing": 20_000, "window": 256,
        "epochs": None, "warmup": 50}
EVENT_BUDGET = 2.0            # false alarms per hour the report's decision layers are calibrated for
QUICK = {"history": 1024, "latency_repeats": 2, "recompute_points": [2, 16, 256, 1024],
         "throughput_calls": 20, "rss_readings": 10_000, "rss_growing": 2_000, "window": 128,
         "epochs": {"rnn": 10, "gru": 6, "lstm": 7, "transformer": 7, "ssm": 5}, "warmup": 10}


class Progress:
    """The report's progress on stderr (nothing when not `enabled`): on a terminal a bar per
    phase; elsewhere (CI, a log file) plain lines, one as each phase starts, one at a step once
    `every` seconds have passed since the last, and one as it ends, each with the time the phase
    and the whole report have taken so far."""

    def __init__(self, enabled: bool, stream=None, every: float = 5.0):
        self.enabled, self.every = enabled, every
        self.out = stream if stream is not None else sys.stderr
        self.tty = enabled and getattr(self.out, "isatty", lambda: False)()
        self.t0 = time.perf_counter()

    def say(self, line: str) -> None:
        """One plain line, off a terminal only (on one, the bars say it)."""
        if self.enabled and not self.tty:
            print(line, file=self.out, flush=True)

    def phase(self, name: str, total: int) -> "_Phase":
        return _Phase(self, name, total)


class _Phase:
    """One phase of `Progress`: update() after each step, close() at the end."""

    def __init__(self, p: Progress, name: str, total: int):
        from edgeseq.train import clock
        self.p, self.name, self.total, self.done, self.clock = p, name, total, 0, clock
        self.t0 = self.last = time.perf_counter()
        self.bar = None
        if p.tty:
            from tqdm import tqdm
            self.bar = tqdm(total=total, desc=name, leave=False, file=p.out)
        p.say(f"report: {name}: {total} step{'s' if total != 1 else ''}, {clock(self.t0 - p.t0)} in all so far")

    def update(self, n: int = 1, what: str | None = None) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.perf_counter()
        if now - self.last >= self.p.every:
            self.last = now
            self.p.say(f"report: {self.name} {self.done}/{self.total}{f' ({what})' if what else ''}, "
                       f"{self.clock(now - self.t0)} in this phase, {self.clock(now - self.p.t0)} in all")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        now = time.perf_counter()
        self.p.say(f"report: {self.name} done in {self.clock(now - self.t0)}, {self.clock(now - self.p.t0)} in all")


# --- 1. models --------------------------------------------------------------------------------

def _models(out: Path, reused: dict, ds, settings, progress: Progress) -> dict:
    """Train (or take from `reused`: arch -> (run directory, checkpoint)) and export every
    architecture on `ds`, and measure each file's size and accuracy, with the schedule that
    trained it beside the accuracy (`schedule_of`)."""
    from dataclasses import replace

    from edgeseq.train import DEFAULTS, TrainConfig, model_from_checkpoint, save_checkpoint, train
    from export import export_int8, export_model

    rows, ckpts = {}, {}
    bar = progress.phase("models", sum(2 if a in reused else 3 for a in ARCHS))
    for arch in ARCHS:
        quick = settings["epochs"] is not None and arch not in reused
        if arch in reused:
            run, ckpt = reused[arch]
            source = f"reused {run}"
        else:
            tc = DEFAULTS.get(arch, TrainConfig())
            if quick:
                tc = replace(tc, epochs=settings["epochs"][arch])
            ckpt = train(arch, ds, tc, progress=progress.enabled)
            save_checkpoint(ckpt, out / "runs" / arch)
            source = "trained here"
            bar.update(1, f"{arch} trained")
        schedule = schedule_of(ckpt, quick)
        ckpts[arch] = ckpt
        model = model_from_checkpoint(ckpt)
        f_path, q_path = out / "models" / f"{arch}.onnx", out / "models" / f"{arch}-int8.onnx"
        export_model(ckpt, f_path)
        bar.update(1, f"{arch} float exported")
        q = export_int8(ckpt, q_path, "static", data=ds, keep_anyway=True, float_bytes=f_path.stat().st_size)
        macs = model.macs_per_reading() if arch != "transformer" else model.macs_per_reading(0)
        classes = len(ckpt["labels"])
        rows[arch] = {
            "source": source, "config": ckpt["config"], "schedule": schedule,
            "classes": classes, "chance": 1 / classes,
            "parameters": sum(p.numel() for p in model.parameters()),
            "float": {"path": str(f_path), "bytes": f_path.stat().st_size, **_accuracy(f_path, ds),
                      "trained": schedule["text"]},
            "int8": {"path": str(q_path), "bytes": q_path.stat().st_size, **_accuracy(q_path, ds),
                     "trained": schedule["text"], "mean_error_rel": q["mean_rel"],
                     "within_bounds": q["within_bounds"]},
            "macs_per_reading": macs,
        }
        if arch == "transformer":
            rows[arch]["macs_per_reading_at"] = {str(h): model.macs_per_reading(h) for h in (16, 256, 4096)}
            rows[arch]["macs_per_reading"] = model.macs_per_reading(16)
        bar.update(1, f"{arch} int8 exported")
    bar.close()
    return rows, ckpts


def _baseline(ds, progress: Progress) -> dict:
    """1-NN DTW on the models' split (`edgeseq.train.baseline`, its default budget of about a
    minute), or {"skipped": why} where it cannot run: the report stands without it."""
    from edgeseq.train.baseline import scored_or_why
    bar = progress.phase("baseline", 1)             # one call: a line as it starts and one as it ends
    b = scored_or_why(ds.train, ds.test)
    bar.update(1)
    bar.close()
    return b


def _events(models: dict, ds, quick: bool, progress: Progress) -> dict:
    """Each int8 model's decision layer calibrated for EVENT_BUDGET false alarms per hour on
    never-reset streams of the training split (`edgeseq calibrate`'s default), then its events
    scored on never-reset streams of the test split: {"rows": {arch: figures}, ...}, or
    {"skipped": why} where the data's sampling rate is not known (per-hour figures need it)."""
    from edgeseq.data import BACKGROUND, RATE_HZ
    from edgeseq.runtime.calibrate import calibrate, event_scores

    rate = RATE_HZ.get(ds.source or "")
    if rate is None:
        return {"skipped": f"the sampling rate of '{ds.name}' is not known, so no false alarms per hour: "
                           "`edgeseq calibrate MODEL --rate-hz HZ` and `edgeseq eval` give them"}
    background = BACKGROUND.get(ds.source or "", [])
    orders = 5 if quick else 20
    bar = progress.phase("events", len(models))
    rows = {}
    for arch, m in models.items():
        cal = calibrate(m["int8"]["path"], ds.train, background=background, rate_hz=rate,
                        max_false_alarms_per_hour=EVENT_BUDGET, orders=orders)
        e = event_scores(m["int8"]["path"], ds.test, cal["chosen"], orders=orders)
        d = e["delay_readings"] or {}
        rows[arch] = {"decision": cal["chosen"].describe(), "budget_met_on_train": cal["met"], "f1": e["f1"],
                      "false_alarms_per_hour": e["false_alarms_per_hour"], "false_alarms": e["false_alarms"],
                      "events": e["events"], "deleted": e["deleted"], "fragmented": e["fragmented"],
                      "delay_median": d.get("median"), "delay_p90": d.get("p90"), "hours": e["hours"]}
        bar.update(1, f"{arch} events")
    bar.close()
    return {"rows": rows, "orders": orders, "rate_hz": rate, "background": background, "budget": EVENT_BUDGET}


def schedule_of(ckpt: dict, quick: bool = False) -> dict:
    """How `ckpt`'s model was trained: mode ('early-stopping', 'fixed', ...), max_epochs,
    epochs_run, best_epoch, converged (None: not judged), advice (what to try when not
    converged), attempts and attempt (a run that stalled underfit and its restarts), quick (trained here by a quick report: a few fixed epochs, not to convergence)
    and text, the phrase every accuracy is shown with. Read from the checkpoint's
    `metrics["schedule"]`; a checkpoint without one ran its train_config's epochs, fixed."""
    s = (ckpt.get("metrics") or {}).get("schedule") or {}
    epochs = (ckpt.get("train_config") or {}).get("epochs")
    out = {"mode": s.get("mode") or ("fixed" if epochs is not None else None),
           "max_epochs": s.get("max_epochs", epochs), "epochs_run": s.get("epochs_run", epochs),
           "best_epoch": s.get("best_epoch"), "kept": s.get("kept"), "final_epochs": s.get("final_epochs"),
           "converged": s.get("converged"), "advice": s.get("advice"),
           "attempts": s.get("attempts"), "attempt": s.get("attempt"), "quick": bool(quick)}
    out["text"] = schedule_text(out)
    return out


def _accuracy(path, ds) -> dict:
    """Both protocols: per sequence (reset at each start) and continuous (never reset)."""
    from edgeseq.runtime import evaluate
    ev = evaluate(str(path), ds.test, labels=ds.labels, features=ds.features)
    c = ev["continuous"]
    return {"accuracy": ev["accuracy"], "continuous_accuracy": c["reading_accuracy"],
            "continuous_last_reading_accuracy": c["last_reading_accuracy"],
            "continuous_scored_share": c["scored_share"],
            "median_readings_to_follow": c["median_readings_to_follow"]}


def _variants(models: dict, window: int) -> list:
    """(name, path, max_history) for every streamed configuration."""
    out = []
    for arch in ARCHS:
        unbounded = 0 if arch == "transformer" else None      # the growing cache: no bound, not the trained window
        out.append((arch, models[arch]["float"]["path"], unbounded))
        out.append((f"{arch}-int8", models[arch]["int8"]["path"], unbounded))
    out.append(("transformer-window", models["transformer"]["float"]["path"], window))
    return out


# --- 2. memory --------------------------------------------------------------------------------

def _memory(models, settings, readings: np.ndarray, progress: Progress) -> dict:
    """Bytes each streamed configuration holds per stream after 1 .. history readings, read
    from live sessions on the default backend (the native step wherever it runs: there a
    windowed Transformer's ring holds at most its window's rows), and where the Transformer's
    cache passes each fixed-state model's state and whole footprint (None: its cache stays
    below it, bounded by its window)."""
    from edgeseq.runtime import StreamSession
    H = settings["history"]
    points = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, H} & set(range(1, H + 1)))
    series = {}
    streamed = [v for v in _variants(models, settings["window"]) if not v[0].endswith("-int8")]
    bar = progress.phase("memory", len(streamed))
    for name, path, window in streamed:
        s = StreamSession(path, max_history=window, on_full="slide")
        got = {}
        for t in range(1, H + 1):
            s.push(readings[(t - 1) % len(readings)][None])
            if t in points:
                got[t] = s.state_nbytes()
        series[name] = {"history": points, "bytes": [got[t] for t in points], "max_history": window,
                        "backend": s.backend}
        bar.update(1, name)
    bar.close()
    tr = series["transformer"]
    per_reading = (tr["bytes"][1] - tr["bytes"][0]) / (tr["history"][1] - tr["history"][0])
    held = max(tr["bytes"])

    def passes(threshold):
        return int(np.ceil(threshold / per_reading + 1e-9)) if held >= threshold else None
    cross = {}
    for arch in FIXED:
        state = series[arch]["bytes"][0]
        footprint = state + models[arch]["float"]["bytes"]
        footprint_int8 = state + models[arch]["int8"]["bytes"]
        cross[arch] = {
            "state_bytes": state,
            "passes_state_at": passes(state),
            "footprint_bytes": footprint,
            "passes_footprint_at": passes(footprint),
            "footprint_int8_bytes": footprint_int8,
            "passes_footprint_int8_at": passes(footprint_int8),
        }
    return {"series": series, "transformer_bytes_per_reading": per_reading, "transformer_most_bytes": held,
            "crossover": cross}


# --- 3. latency -------------------------------------------------------------------------------

def _bins(H):
    edges = sorted({1, 2, 3, 5, 9, 17, 33, 65, 129, 257, 513, 1025, 2049, 4097} | {H + 1})
    return [(a, b) for a, b in zip(edges, edges[1:]) if a <= H]


def _latency(models, ckpts, settings, readings, tmp: Path, progress: Progress) -> dict:
    import onnxruntime as ort
    import torch

    from edgeseq.report.bench import _median_us, _Recompute, identity_model
    from edgeseq.runtime import StreamSession
    from edgeseq.runtime.providers import session_options
    from edgeseq.train import model_from_checkpoint

    H, R = settings["history"], settings["latency_repeats"]
    variants = _variants(models, settings["window"])
    bar = progress.phase("latency", len(variants) * R + len(settings["recompute_points"]) + 2)
    per_step, used = {}, {}
    clock = time.perf_counter
    for name, path, window in variants:
        s = StreamSession(path, max_history=window, on_full="slide")
        used[name] = s.backend
        times = np.zeros((R, H))
        for r in range(R):
            s.reset()
            for t in range(H):
                x = readings[t % len(readings)][None]
                t0 = clock()
                s.push(x)
                times[r, t] = clock() - t0
            bar.update(1, name)
        per_step[name] = times * 1e6
    series = {}
    for name, us in per_step.items():
        rows = []
        for a, b in _bins(H):
            block = us[:, a - 1:b - 1].ravel()
            rows.append({"from": a, "to": b - 1, "median_us": float(np.median(block)),
                         "p99_us": float(np.percentile(block, 99)), "samples": int(block.size), "backend": used[name]})
        series[name] = rows

    F = readings.shape[1]
    x = readings[:1]
    floor = ort.InferenceSession(identity_model(F), session_options(1), providers=["CPUExecutionProvider"])
    reference = {"ort_floor_session_run": _median_us(lambda: floor.run(None, {"x": x}), 2000, 200)}
    bar.update(1)
    gru = model_from_checkpoint(ckpts["gru"])
    torch.set_num_threads(1)
    xt, state = torch.from_numpy(x), [gru.init_state(1)]

    @torch.no_grad()
    def torch_step():
        _, state[0] = gru.step(xt, state[0])
    reference["gru_torch_eager"] = _median_us(torch_step, 2000, 200)
    bar.update(1)

    full_path = tmp / "transformer_full.onnx"
    _Recompute(ckpts["transformer"], full_path)
    full = ort.InferenceSession(str(full_path), session_options(1), providers=["CPUExecutionProvider"])
    recompute = []
    for T in settings["recompute_points"]:
        window = np.stack([readings[t % len(readings)] for t in range(T)])[None].astype(np.float32)
        reps = max(3, min(100, int(4000 / (T + 10))))
        m = _median_us(lambda: full.run(["logits"], {"window": window}), reps, 2)
        recompute.append({"step": T, **m, "repeats": reps})
        bar.update(1, f"Transformer recomputing {T} readings")
    bar.close()
    return {"series": series, "reference": reference, "recompute": recompute, "repeats": R, "history": H}


def _throughput(models, settings, readings, progress: Progress) -> dict:
    from edgeseq.runtime import StreamSession
    calls = settings["throughput_calls"]
    names = [v for v in _variants(models, settings["window"]) if v[0] != "transformer-window"]
    bar = progress.phase("throughput", len(names) * len(BATCHES))
    out = {}
    clock = time.perf_counter
    for name, path, _ in names:
        rows = []
        for B in BATCHES:
            s = StreamSession(path, streams=B)
            X = np.stack([readings[(np.arange(B) * 7 + t) % len(readings)] for t in range(64)]).astype(np.float32)
            for t in range(16):                                     # warm-up; history starts at 16
                s.push(X[t])
            n = max(5, calls // max(1, B // 64)) if B > 1 else calls
            times = np.empty(n)
            for i in range(n):
                t0 = clock()
                s.push(X[i % 64])
                times[i] = clock() - t0
            per_call = float(np.median(times))
            rows.append({"streams": B, "call_us": per_call * 1e6, "readings_per_s": B / per_call, "calls": n,
                         "backend": s.backend})
            bar.update(1, f"{name}, {B} streams")
        single = rows[0]["call_us"]
        for r in rows:
            r["vs_single_stream_calls"] = r["streams"] * single / r["call_us"]
        out[name] = rows
    bar.close()
    return out


# --- 5. RSS -----------------------------------------------------------------------------------

_RSS = r"""
import json, sys
import numpy as np
from edgeseq.runtime import StreamSession
path, n, window = sys.argv[1], int(sys.argv[2]), (None if sys.argv[3] == "-" else int(sys.argv[3]))
def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
rss_kb = lambda: status_kb("VmRSS")
X = np.load(sys.argv[4])                  # the report's readings (F,) per row, in the model's channel order
s = StreamSession(path, max_history=window, on_full="slide")
marks = sorted({int(n * k / 20) for k in range(1, 21)})
out = {"start_kb": rss_kb(), "points": []}
for t in range(1, n + 1):
    s.push(X[t % len(X)][None])
    if t in marks:
        out["points"].append([t, rss_kb()])
out["peak_kb"] = status_kb("VmHWM")       # this process's high-water mark (ru_maxrss can carry the parent's)
out["state_bytes"] = s.state_nbytes()
out["backend"] = s.backend
print(json.dumps(out))
"""


def _rss(models, settings, readings, progress: Progress) -> dict:
    import tempfile

    jobs = []
    for name, path, window in _variants(models, settings["window"]):
        growing = name.startswith("transformer") and window == 0
        jobs.append((name, path, window, settings["rss_growing"] if growing else settings["rss_readings"]))
    bar = progress.phase("rss", len(jobs))
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        npy = os.path.join(tmp, "readings.npy")
        np.save(npy, readings)
        for name, path, window, n in jobs:
            res = subprocess.run([sys.executable, "-c", _RSS, path, str(n), "-" if window is None else str(window),
                                  npy], capture_output=True, text=True, check=True)
            r = json.loads(res.stdout.strip().splitlines()[-1])
            first = r["points"][0][1]
            r.update({"readings": n, "growth_kb_after_first_5pct": r["points"][-1][1] - first})
            out[name] = r
            bar.update(1, f"{name}, {n:,} readings")
    bar.close()
    return out


# --- entry point ------------------------------------------------------------------------------

def report_data(runs, data: str | None = None):
    """(Dataset, reused) for a report: `reused` maps each architecture found in `runs` to (run
    directory, checkpoint); the data is `data` if given, else the data those runs were trained
    on (`edgeseq.data.trained_on`), else the embedded basicmotions. Checked before anything is
    trained or written: every reused run must read the data's channels and predict its labels
    (DataError saying to pass --data), and the runs must be of one task. Raises UsageError for
    a `runs` that is not a directory of runs, or runs trained on different data without --data."""
    from edgeseq.data import check_unchanged, data_for_model, load_dataset, trained_on
    from edgeseq.train import load_checkpoint

    reused = {}
    if runs is not None:
        if not Path(runs).is_dir():
            raise UsageError(f"--runs '{runs}' is not a directory; give the folder that holds <arch>/checkpoint.pt "
                             "(e.g. runs after `make demo`), or leave --runs out to train here")
        found = [a for a in ARCHS if (Path(runs) / a / "checkpoint.pt").is_file()]
        if not found:
            raise UsageError(f"--runs '{runs}' holds none of {', '.join(f'{a}/checkpoint.pt' for a in ARCHS)}; "
                             "leave --runs out to train here")
        reused = {a: (Path(runs) / a, load_checkpoint(Path(runs) / a)) for a in found}
    if not reused:
        return load_dataset(data or "basicmotions"), reused
    specs = {a: trained_on(ckpt) for a, (_, ckpt) in reused.items()}
    if data is None and len(set(specs.values())) > 1:
        shown = ", ".join(f"{a} on '{specs[a] or reused[a][1].get('dataset', '?')}'" for a in reused)
        raise UsageError(f"--runs '{runs}' holds runs trained on different data ({shown}); a report measures "
                         "every model on one data set: pass --data")
    first, (run, ckpt) = next(iter(reused.items()))
    for a, (_, c) in reused.items():
        if list(c["features"]) != list(ckpt["features"]) or list(c["labels"]) != list(ckpt["labels"]):
            raise UsageError(f"--runs '{runs}': {a} reads other channels or predicts other labels than {first}; "
                             "a report compares models of one task")
    if data is None:                                 # every run reused, as its data file was when it trained
        for a, (r, c) in reused.items():
            check_unchanged(specs[a], c.get("data_sha256") if c.get("data_path") else None, f"run '{r}'")
    return data_for_model(data, ckpt["features"], ckpt["labels"], specs[first], str(run)), reused


def build_report(out, quick: bool = False, runs=None, progress: bool = True, data: str | None = None) -> dict:
    """Measure everything (see the module docstring) and write the report into directory `out`.

    It is built in a temporary directory beside `out` (`.<name>.<pid>.<random>.tmp`) and moved
    into place at the end: an existing `out` keeps what the report does not write, and is left
    as it was when the report fails. `runs`, `data`: see `report_data`."""
    import shutil
    import tempfile

    from edgeseq.runtime.statefile import TEMP_SUFFIX, remove_leftovers, temp_prefix
    from export.step import shareable_mode

    target = Path(out).resolve()
    if target.exists() and not target.is_dir():
        raise UsageError(f"--out '{out}' is a file; give a directory for the report")
    ds, reused = report_data(runs, data)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(target)
    work = Path(tempfile.mkdtemp(prefix=temp_prefix(target), suffix=TEMP_SUFFIX, dir=target.parent))
    try:
        r = _build(work, ds, reused, quick, progress)
        os.chmod(work, shareable_mode(0o777))         # mkdtemp makes 0700
        _move_into_place(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return r


def _move_into_place(work: Path, out: Path) -> None:
    """`work` becomes `out`: renamed whole when `out` does not exist, else entry by entry (a
    file replaces its namesake, a folder such as models/ is swapped in whole), so files of
    `out` that the report does not write stay."""
    from edgeseq.runtime.statefile import replace_dir

    if not out.exists():
        os.replace(work, out)
        return
    for entry in sorted(work.iterdir()):
        if entry.is_dir():
            replace_dir(entry, out / entry.name)
        else:
            os.replace(entry, out / entry.name)
    work.rmdir()


def _cpu_seconds() -> float:
    """CPU time of this process (all threads) and its finished children: a phase's cost apart
    from what else the machine runs, which its wall time is not on a shared machine."""
    try:
        import resource
    except ImportError:                                 # Windows: this process only
        return time.process_time()
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _build(out: Path, ds, reused: dict, quick: bool, progress: bool) -> dict:
    import tempfile

    import torch

    from edgeseq.report.bench import machine_info
    from edgeseq.report.mcu import WINDOWS, mcu_panel

    settings = QUICK if quick else FULL
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    t0 = time.perf_counter()
    shown = Progress(progress)
    readings = np.concatenate([ds.test.X[i, :ds.test.lengths[i]] for i in range(len(ds.test))]).astype(np.float32)
    r, phases, cpu = {}, {}, {}

    def phase(name, fn):
        t, c = time.perf_counter(), _cpu_seconds()
        result = fn()
        phases[name] = round(time.perf_counter() - t, 1)
        cpu[name] = round(_cpu_seconds() - c, 1)
        return result

    def mcu(tmp):
        bar = shown.phase("mcu", 1)                     # one call: a line as it starts and one as it ends
        panel = mcu_panel(r["models"], ckpts, ds, WINDOWS["quick" if quick else "full"], tmp)
        bar.update(1)
        bar.close()
        return panel

    r["models"], ckpts = phase("models", lambda: _models(out, reused, ds, settings, shown))
    r["baseline"] = phase("baseline", lambda: _baseline(ds, shown))
    r["events"] = phase("events", lambda: _events(r["models"], ds, quick, shown))
    r["memory"] = phase("memory", lambda: _memory(r["models"], settings, readings, shown))
    with tempfile.TemporaryDirectory() as tmp:
        r["latency"] = phase("latency", lambda: _latency(r["models"], ckpts, settings, readings, Path(tmp), shown))
    r["throughput"] = phase("throughput", lambda: _throughput(r["models"], settings, readings, shown))
    r["rss"] = phase("rss", lambda: _rss(r["models"], settings, readings, shown))
    with tempfile.TemporaryDirectory() as tmp:
        r["mcu"] = phase("mcu", lambda: mcu(tmp))
    r["meta"] = {"quick": quick, "settings": settings, "machine": machine_info(),
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "data": f"{ds.name} (test split, sequences joined end to end, as the readings streamed)",
                 "data_source": ds.source, "seconds": time.perf_counter() - t0,
                 "phase_seconds": phases, "phase_cpu_seconds": cpu}
    for m in r["models"].values():                      # paths in the report are relative to it
        for kind in ("float", "int8"):
            m[kind]["path"] = os.path.relpath(m[kind]["path"], out)
    files = _plots(r, out)
    r["files"] = {**files, "markdown": "report.md", "html": "index.html", "json": "report.json"}
    (out / "report.json").write_text(json.dumps(r, indent=1) + "\n")
    (out / "report.md").write_text(_markdown(r, files) + "\n")
    (out / "index.html").write_text(_html(r, files) + "\n")
    return r
