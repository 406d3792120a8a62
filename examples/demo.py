"""The main demo: train, export (float and int8) and stream all five streaming architectures on BasicMotions.

    make demo            # or, once set up: .venv/bin/python examples/demo.py [--out DIR]

Each model is trained with its default schedule (truncated BPTT over never-reset training
streams plus single sequences), exported to one validated ONNX step graph and to an int8 twin
(checked against it), evaluated on both protocols by streaming the test split one reading per
call, and one test sequence is streamed live. The summary compares accuracy, file size, state held per stream and latency.
Then the GRU's int8 model gets a decision layer calibrated for 2 false alarms per hour (`edgeseq calibrate`),
and its events on never-reset test streams are scored and shown. Last, an anomaly run: a GRU learns the
embedded vibration set's normal running, its threshold is calibrated for 1 false alarm per hour, and its
int8 model finds the injected faults on each machine's never-reset stream, on the host and in the firmware's
integer arithmetic.
"""

import argparse
import os
import shlex
import sys
import sysconfig
import time
from pathlib import Path

try:
    import numpy as np

    from edgeseq.data import load_dataset
    from edgeseq.runtime import StreamSession, evaluate
    from edgeseq.train import save_checkpoint, train
    from export import export_int8, export_model
except ModuleNotFoundError as e:    # a Python without edgeseq (a bare `python`): one line naming the one to use
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # `python -I` leaves the script's folder out
    from _bootstrap import exit_naming_the_python
    exit_naming_the_python(e, __file__, "(`make demo` sets up .venv and runs this demo), or activate .venv first")

ARCHS = ["rnn", "gru", "lstm", "transformer", "ssm"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".", help="where runs/ and models/ go")
    ap.add_argument("--archs", nargs="+", default=ARCHS, choices=ARCHS)
    ap.add_argument("--json", metavar="PATH", help="also write the summary's figures as JSON (docs/figures/demo.json "
                                                  "renders the README's table: scripts/render_docs.py)")
    args = ap.parse_args()
    if args.json:
        check_json_path(args.json)
    out = Path(args.out)
    ds = load_dataset("basicmotions")
    print(f"BasicMotions: {len(ds.train)} train / {len(ds.test)} test sequences of "
          f"{ds.train.X.shape[1]} readings x {ds.n_features} channels; classes {', '.join(ds.labels)}\n")
    figures = []
    for arch in args.archs:
        ckpt = train(arch, ds, progress=True)
        save_checkpoint(ckpt, out / "runs" / arch)
        model = out / "models" / f"{arch}.onnx"
        rep = export_model(ckpt, model)
        ev = evaluate(str(model), ds.test, labels=ds.labels)
        q = export_int8(ckpt, out / "models" / f"{arch}-int8.onnx", data=ds, float_bytes=rep["bytes"])

        # Stream one test sequence live, one reading per call.
        seq, label = ds.test.X[5], ds.labels[ds.test.y[5]]
        sess = StreamSession(model)
        times = []
        for x in seq:
            t0 = time.perf_counter()
            probs = sess.push(x[None])
            times.append(time.perf_counter() - t0)
        guess = ds.labels[int(probs.argmax())]
        sched = ckpt["metrics"]["schedule"]
        final = sched.get("final_epochs") or 0
        how = (f"kept epoch {sched['best_epoch']} of {sched['epochs_run'] - final}, then {final} over all"
               if sched["best_epoch"] else f"{sched['epochs_run']} epochs") + \
            ("" if sched["converged"] else ", NOT converged")
        print(f"{arch:11s} trained in {ckpt['metrics']['train_seconds']:5.1f} s ({how}); exported {model} "
              f"(ORT vs torch max diff {rep['max_abs_diff']:.1e}); streamed a '{label}' sequence -> "
              f"'{guess}' ({probs.max():.2f})")
        figures.append({"arch": arch, "config": ckpt["config"], "per_sequence": ev["accuracy"],
                        "continuous": ev["continuous"]["reading_accuracy"],
                        "int8_continuous": q["int8_continuous_accuracy"],
                        "train_seconds": ckpt["metrics"]["train_seconds"], "bytes": rep["bytes"], "int8_bytes": q["bytes"],
                        "state_bytes_100": sess.state_nbytes(), "state_bytes_4096": sess.state_nbytes_at(4096),
                        "median_push_us": float(np.median(times) * 1e6),
                        "backend": sess.backend})

    print("\n             per seq    continuous   int8 cont.   file bytes   int8 bytes   state after 100"
          "   state after 4096   median step (backend)")
    for f in figures:
        print(f"{f['arch']:11s}  {f['per_sequence']:7.3f}   {f['continuous']:10.3f}   {f['int8_continuous']:10.3f}   "
              f"{f['bytes']:10,d}   {f['int8_bytes']:10,d}   {f['state_bytes_100']:13,d} B   "
              f"{f['state_bytes_4096']:14,d} B   {f['median_push_us']:8.1f} us ({f['backend']})")
    from edgeseq.train.baseline import nearest_neighbour_dtw
    base = nearest_neighbour_dtw(ds.train, ds.test)
    print(f"{'1-NN DTW':11s}  {base['accuracy']:7.3f}   (the nearest-neighbour baseline on the same split, per "
          "sequence only; `edgeseq train` prints it beside each model)")
    print("\nper seq: accuracy at each test sequence's end, every sequence its own stream from zero state."
          "\ncontinuous: per-reading accuracy on the test sequences joined end to end, never reset "
          "(20 readings after each change not scored), as a device sees them."
          "\nmedian step: StreamSession.push of one reading on the backend named (native: the compiled C step)."
          "\nRecurrent and state-space models hold the same state whatever the history; the Transformer's KV "
          "cache grows "
          "by one row per reading up to the window it was trained with, then slides.")
    events_demo(out, ds, "gru" if "gru" in args.archs else args.archs[0])
    anomaly_demo(out)
    print(f"\n{next_steps(out, 'gru' if 'gru' in args.archs else args.archs[0])}")
    if args.json:
        write_json(args.json, figures)


def events_demo(out: Path, ds, arch: str) -> None:
    """Decisions: calibrate the int8 model's decision layer on never-reset streams of the training
    split for 2 false alarms per hour (Standing is the background), write it into a copy of the model, score
    its events on the test split, and show the first events of one never-reset test stream."""
    from edgeseq.runtime.calibrate import calibrate, event_scores
    from edgeseq.runtime.evaluate import joined_streams
    from export.decision import write_decision

    model = out / "models" / f"{arch}-int8.onnx"
    cal = calibrate(str(model), ds.train, background=["Standing"], rate_hz=10.0, max_false_alarms_per_hour=2.0)
    events_model = write_decision(model, cal["chosen"], out / "models" / f"{arch}-int8-events.onnx")
    e = event_scores(str(events_model), ds.test, cal["chosen"])
    d = e["delay_readings"]
    print(f"\nEvents ({arch} int8, `edgeseq calibrate` on the {len(ds.train)} training sequences, Standing as "
          "background): "
          f"{cal['chosen'].describe()}\n  on the test split, {e['orders']} never-reset streams ({e['hours']:.2f} h at "
          f"10 Hz): event F1 {e['f1']:.3f}, {e['false_alarms_per_hour']:.1f} false alarms per hour, median delay "
          f"{d['median']:.0f} readings ({d['median'] / 10:.1f} s); written to {events_model}")
    X, Y, _ = joined_streams(ds.test, 1, seed=0)
    sess = StreamSession(str(events_model))
    shown = []
    for t, x in enumerate(X[0]):
        shown += [f"{e.kind} {e.label} at reading {t + 1}" for e in sess.push_events(x[None])[1]]
        if len(shown) >= 6:
            break
    print("  one never-reset stream, first events: " + "; ".join(shown))


def anomaly_demo(out: Path) -> None:
    """Anomaly detection: train a GRU forecaster on the vibration set's normal recordings, export it
    float and int8, calibrate its threshold for 1 false alarm per hour, and score the test split (30
    injected faults on six machines) on both protocols, on the host and on the firmware's path."""
    from edgeseq.runtime.anomaly import calibrate, evaluate, joined
    from edgeseq.train.forecast import train_task
    from export.decision import write_decision
    from firmware_sim.intanomaly import firmware_events

    vib = load_dataset("vibration")
    print(f"\nAnomaly detection (vibration: {len(vib.train)} normal training recordings of 6 machines, "
          f"{len(vib.test)} test recordings, 30 with an injected fault):")
    print("  training a GRU forecaster on the normal recordings (a minute or two on 2 cores) ...", flush=True)
    ckpt = train_task("gru", vib, "anomaly", progress=False)
    save_checkpoint(ckpt, out / "runs" / "vibration-gru")
    export_int8(ckpt, out / "models" / "vibration-gru-int8.onnx", data=vib)
    model = out / "models" / "vibration-gru-int8.onnx"
    cal = calibrate(model, vib.train, 50.0, 1.0)
    model = write_decision(model, cal["chosen"], out / "models" / "vibration-gru-int8-events.onnx")
    r = evaluate(model, vib.test)
    fw = firmware_events(model, joined(vib.test))
    for name, f in (("per recording", r["per_recording"]), ("never reset, host", r["never_reset"]),
                    ("never reset, firmware integer path", fw)):
        print(f"  {name}: detected {f['detected']}/{f['anomalies']} faults, {f['false_alarms']} false alarms "
              f"({f['false_alarms_per_hour']:.1f} per hour of normal running), median delay {f['delay_median']:.0f} "
              "readings" + (f", top score inside the fault on {f['top_inside']:.0%}" if f["top_inside"] else ""))
    print(f"  gru trained in {ckpt['metrics']['train_seconds']:.0f} s; threshold {cal['chosen'].sigmas:g} standard "
          f"deviations of each machine's own learnt score; written to {model}")


def check_json_path(path) -> None:
    """Refuse, before any training, a --json path that cannot be written: UsageError (one line)."""
    from edgeseq.errors import UsageError
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"--json {path}: that is a folder; give a file name, e.g. {p / 'demo.json'}")
    if not p.parent.is_dir():
        raise UsageError(f"--json {path}: the folder {p.parent} does not exist; create it or give another path")
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UsageError(f"--json {path}: cannot write there; give a path you can write")


def write_json(path, figures: list) -> None:
    """The summary's figures, what ran them and when, as `scripts/render_docs.py` reads them."""
    import json
    from datetime import datetime, timezone

    from edgeseq.report.bench import machine_info
    d = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
         "command": " ".join(["python", "examples/demo.py", *map(shlex.quote, sys.argv[1:])]),
         "machine": machine_info(), "torch_threads": __import__("torch").get_num_threads(), "rows": figures}
    Path(path).write_text(json.dumps(d, indent=1) + "\n")


def _shown(path, program=False) -> str:
    """`path` as a user types it here: relative to the working directory when under it (a
    program there as ./name, which the shell would otherwise look up on PATH)."""
    path = Path(path).absolute()
    try:
        path = path.relative_to(Path.cwd())
    except ValueError:
        pass
    shown = str(path)
    return shlex.quote(f"./{shown}" if program and os.sep not in shown else shown)


def next_steps(out: Path, arch: str) -> str:
    """The commands to try next, runnable as printed from where the demo ran: this Python's
    `edgeseq` script (`.venv/bin/edgeseq` after `make demo`; a venv's bin need not be on
    PATH) on the models the demo wrote under `out`."""
    script = Path(sysconfig.get_path("scripts")) / ("edgeseq.exe" if os.name == "nt" else "edgeseq")
    cli = _shown(script, program=True) if script.exists() else f"{_shown(sys.executable, program=True)} -m edgeseq"
    model, q = (_shown(out / "models" / f"{arch}{tail}.onnx") for tail in ("", "-int8"))
    return f"Next: `{cli} eval {model}`, `{cli} compare {model} {q}`, `{cli} bench`."


if __name__ == "__main__":
    from edgeseq.errors import run_script
    run_script(main)
