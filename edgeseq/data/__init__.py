"""Data sets: the embedded BasicMotions set, user `.npz` and `.csv` files, normalisation.

numpy only, so the runtime can read the embedded test split without torch.

User `.npz`: `X` float [N, T, F], `y` labels [N] (ints or strings) or [N, T] (one label per
reading: a long recording whose activity changes), optional `lengths` [N]
(valid readings per sequence; the rest is padding), optional `labels` (class names for
integer `y`) and `features` (channel names). A held-out split may ship as `X_test`,
`y_test`, `lengths_test`; without it the last quarter of each class (in file order) is held
out, so the split is deterministic.

User `.csv`: one reading per row with a header. Columns `sequence` (an id) and `label` are
required, every other column is a feature, in header order; an optional `split` column
holds `train` or `test`. Rows of one sequence are contiguous and in time order; sequences
may differ in length. The label belongs to the row and may change within a sequence (a
recording whose activity changes); a sequence's class, for per-sequence scores, is the
label of its last row.

    sequence,label,acc_x,acc_y,acc_z
    s1,walk,0.1,0.2,9.7
    s1,walk,0.2,0.1,9.8
    s2,rest,0.0,0.0,9.8
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeseq.errors import DataError

DATA_DIR = Path(__file__).resolve().parent
EMBEDDED = {"basicmotions": DATA_DIR / "basicmotions.npz"}


@dataclass
class Split:
    X: np.ndarray        # float32 [N, T, F], zero padded past `lengths`
    y: np.ndarray        # int64 [N]: each sequence's class, the label of its last valid reading
    lengths: np.ndarray  # int64 [N]
    Y: np.ndarray | None = None   # int64 [N, T]: the label of every reading, -1 past `lengths`
                                  # (None: every reading carries its sequence's y)

    def __post_init__(self):
        if self.Y is None:
            Y = np.repeat(np.asarray(self.y, np.int64)[:, None], self.X.shape[1], axis=1)
            Y[np.arange(self.X.shape[1])[None, :] >= np.asarray(self.lengths)[:, None]] = -1
            self.Y = Y

    def __len__(self):
        return len(self.y)

    def take(self, rows) -> "Split":
        return Split(self.X[rows], self.y[rows], self.lengths[rows], self.Y[rows])


@dataclass
class Dataset:
    name: str
    train: Split
    test: Split
    labels: list
    features: list

    @property
    def n_features(self):
        return len(self.features)


@dataclass(frozen=True)
class Normalization:
    mean: np.ndarray  # float32 [F]
    std: np.ndarray   # float32 [F]

    @classmethod
    def fit(cls, split: Split) -> "Normalization":
        """Per-feature mean and std over every valid training reading."""
        mask = np.arange(split.X.shape[1])[None, :] < split.lengths[:, None]
        values = split.X[mask]                               # (readings, F)
        mean = values.mean(0)
        std = values.std(0)
        std = np.where(std < 1e-6, 1.0, std)                 # a constant channel stays as is
        return cls(mean.astype(np.float32), std.astype(np.float32))

    def to_json(self):
        return {"mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_json(cls, d):
        return cls(np.asarray(d["mean"], np.float32), np.asarray(d["std"], np.float32))


def since_change(y: np.ndarray) -> np.ndarray:
    """Readings since the label last changed, y (L,) int -> (L,) int: 0 at a change and at
    the start of the stream."""
    change = np.ones(len(y), bool)
    change[1:] = y[1:] != y[:-1]
    start = np.maximum.accumulate(np.where(change, np.arange(len(y)), 0))
    return np.arange(len(y)) - start


def load_dataset(spec: str) -> Dataset:
    """`basicmotions` or a path to a `.npz` / `.csv` file (layouts in this module's docstring)."""
    if spec in EMBEDDED:
        return _load_npz(EMBEDDED[spec], name=spec)
    path = Path(spec)
    if not path.exists():
        raise DataError(f"data '{spec}' not found: give 'basicmotions' or a path to a .npz or .csv file")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return _load_npz(path, name=path.stem)
    if suffix == ".csv":
        return _load_csv(path)
    raise DataError(f"data file '{spec}' must end in .npz or .csv")


def _load_npz(path: Path, name: str) -> Dataset:
    try:
        with np.load(path, allow_pickle=False) as f:
            z = {k: f[k] for k in f.files}      # read here: an object array fails now, not later
        keys = set(z)
    except Exception as e:  # zipfile/pickle/OS errors all mean the same thing here
        raise DataError(f"cannot read '{path}' as .npz ({type(e).__name__}); re-save it with numpy.savez") from None
    if {"X_train", "y_train", "X_test", "y_test"} <= keys:
        Xtr, ytr, Ltr = z["X_train"], z["y_train"], z["lengths_train"] if "lengths_train" in keys else None
        Xte, yte, Lte = z["X_test"], z["y_test"], z["lengths_test"] if "lengths_test" in keys else None
    elif {"X", "y"} <= keys:
        Xtr, ytr, Ltr = z["X"], z["y"], z["lengths"] if "lengths" in keys else None
        if "X_test" in keys and "y_test" in keys:
            Xte, yte, Lte = z["X_test"], z["y_test"], z["lengths_test"] if "lengths_test" in keys else None
        else:
            Xte = None
    else:
        raise DataError(f"'{path}' needs arrays X [N,T,F] and y [N] (found: {', '.join(sorted(keys)) or 'none'})")
    labels = [str(s) for s in z["labels"]] if "labels" in keys else None
    features = [str(s) for s in z["features"]] if "features" in keys else None

    Xtr = _check_X(Xtr, path, "X")
    Ltr = _check_lengths(Ltr, Xtr, path)
    ytr_raw = _check_y(ytr, Xtr, Ltr, path, "y")
    if Xte is not None:
        Xte = _check_X(Xte, path, "X_test")
        Lte = _check_lengths(Lte, Xte, path)
        if Xte.shape[2] != Xtr.shape[2]:
            raise DataError(f"'{path}': X_test has {Xte.shape[2]} features, X has {Xtr.shape[2]}")
        yte_raw = _check_y(yte, Xte, Lte, path, "y_test")
        codes, labels = _encode_labels(np.concatenate([ytr_raw.ravel(), yte_raw.ravel()]), labels, path)
        train = _split(Xtr, codes[: ytr_raw.size].reshape(ytr_raw.shape), Ltr)
        test = _split(Xte, codes[ytr_raw.size:].reshape(yte_raw.shape), Lte)
    else:
        codes, labels = _encode_labels(ytr_raw.ravel(), labels, path)
        train, test = _holdout(_split(Xtr, codes.reshape(ytr_raw.shape), Ltr))
    features = features or [f"f{i}" for i in range(Xtr.shape[2])]
    return Dataset(name, train, test, labels, features)


def _check_y(y, X, L, path, key):
    """y [N] or [N, T] as given; per-reading labels past a sequence's length are filled with
    its last valid label (they are never used)."""
    y = np.asarray(y)
    if y.ndim == 1 and len(y) == len(X):
        return y
    if y.ndim == 2 and y.shape == X.shape[:2]:
        y = y.copy()
        for n, length in enumerate(L):
            y[n, length:] = y[n, length - 1]
        return y
    raise DataError(f"'{path}': {key} must be [N] (one label per sequence) or [N, T] (one per reading) "
                    f"for X of shape {list(X.shape)}, got {list(y.shape)}")


def _split(X, codes, L) -> "Split":
    """A Split from integer labels [N] or [N, T]."""
    if codes.ndim == 1:
        return Split(X, codes, L)
    Y = codes.astype(np.int64)
    Y[np.arange(X.shape[1])[None, :] >= L[:, None]] = -1
    return Split(X, codes[np.arange(len(X)), L - 1].astype(np.int64), L, Y)


def _check_X(X, path, key):
    X = np.asarray(X)
    if X.ndim != 3:
        raise DataError(f"'{path}': {key} must be [N, T, F], got shape {list(X.shape)}")
    if not np.issubdtype(X.dtype, np.number):
        raise DataError(f"'{path}': {key} must be numeric, got dtype {X.dtype}")
    X = X.astype(np.float32)
    return X


def _check_lengths(L, X, path):
    if L is None:
        L = np.full(len(X), X.shape[1], dtype=np.int64)
    L = np.asarray(L).astype(np.int64)
    if L.shape != (len(X),) or (L < 1).any() or (L > X.shape[1]).any():
        raise DataError(f"'{path}': lengths must be [N] integers in 1..{X.shape[1]}")
    mask = np.arange(X.shape[1])[None, :] < L[:, None]
    if not np.isfinite(X[mask]).all():
        raise DataError(f"'{path}': X holds NaN or Inf inside the valid lengths; clean or drop those sequences")
    X[~mask] = 0.0
    return L


def _encode_labels(y, labels, path):
    """Labels (integers, or strings / anything else by name) -> (int64 codes, class names)."""
    if y.dtype.kind == "f":
        if not np.isfinite(y).all() or (y != np.round(y)).any():
            raise DataError(f"'{path}': labels must be integers or names; found non-integer numbers (NaN, 0.5, ...)")
        y = y.astype(np.int64)
    if y.dtype.kind == "O":
        raise DataError(f"'{path}': labels are Python objects; save them as integers or strings")
    if y.dtype.kind in "iu":
        if labels is None:
            labels = [str(v) for v in range(int(y.max()) + 1)]
        if y.min() < 0 or y.max() >= len(labels):
            raise DataError(f"'{path}': labels must be integers in 0..{len(labels) - 1}")
        return y.astype(np.int64), labels
    names = sorted({str(v) for v in y})
    if any(not n.strip() for n in names):
        raise DataError(f"'{path}': some labels are empty; label every reading (for padding past a sequence's "
                        "end, give `lengths`)")
    index = {n: i for i, n in enumerate(names)}
    return np.array([index[str(v)] for v in y], dtype=np.int64), names


def _holdout(split: Split, fraction=0.25):
    """Deterministic stratified hold-out: the last `fraction` of each class, in file order."""
    test = np.zeros(len(split), bool)
    for c in np.unique(split.y):
        idx = np.flatnonzero(split.y == c)
        k = int(round(len(idx) * fraction)) if len(idx) > 1 else 0
        if k:
            test[idx[-k:]] = True
    if not test.any():
        raise DataError("too few sequences to hold out a test split; add X_test/y_test or more data")
    return split.take(~test), split.take(test)


def _load_csv(path: Path) -> Dataset:
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        raise DataError(f"'{path}' is empty")
    header = [h.strip() for h in rows[0]]
    for need in ("sequence", "label"):
        if need not in header:
            raise DataError(f"'{path}': header needs a '{need}' column (see `edgeseq train --help`)")
    i_seq, i_lab = header.index("sequence"), header.index("label")
    i_split = header.index("split") if "split" in header else None
    feat_idx = [i for i, h in enumerate(header) if i not in (i_seq, i_lab, i_split)]
    if not feat_idx:
        raise DataError(f"'{path}': no feature columns besides sequence/label")
    seqs: dict = {}
    last_key = None
    for lineno, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise DataError(f"'{path}' line {lineno}: {len(row)} fields, header has {len(header)}")
        try:
            values = [float(row[i]) for i in feat_idx]
        except ValueError:
            bad = next(row[i] for i in feat_idx if not _is_float(row[i]))
            raise DataError(f"'{path}' line {lineno}: non-numeric value '{bad}'; fix or remove that row") from None
        if not np.isfinite(values).all():
            raise DataError(f"'{path}' line {lineno}: NaN or Inf value; fix or remove that row")
        key = row[i_seq]
        if key in seqs and key != last_key:
            raise DataError(f"'{path}' line {lineno}: sequence '{key}' continues after other rows; keep each "
                            "sequence's rows together, in time order")
        last_key = key
        entry = seqs.setdefault(key, {"labels": [], "split": row[i_split] if i_split is not None else "", "values": []})
        entry["labels"].append(row[i_lab])
        entry["values"].append(values)
    if not seqs:
        raise DataError(f"'{path}' has a header but no readings")
    T = max(len(e["values"]) for e in seqs.values())
    F = len(feat_idx)
    X = np.zeros((len(seqs), T, F), np.float32)
    L = np.zeros(len(seqs), np.int64)
    for n, e in enumerate(seqs.values()):
        X[n, : len(e["values"])] = e["values"]
        L[n] = len(e["values"])
    flat = [lab for e in seqs.values() for lab in e["labels"]]
    codes, labels = _encode_labels(np.array(flat), None, path)
    Y = np.full((len(seqs), T), -1, np.int64)
    at = 0
    for n, e in enumerate(seqs.values()):
        Y[n, : len(e["labels"])] = codes[at: at + len(e["labels"])]
        at += len(e["labels"])
    data = Split(X, Y[np.arange(len(seqs)), L - 1], L, Y)
    features = [header[i] for i in feat_idx]
    splits = np.array([e["split"].strip().lower() for e in seqs.values()])
    if i_split is not None:
        tr, te = splits == "train", splits == "test"
        if not te.any() or not tr.any():
            raise DataError(f"'{path}': the split column needs both 'train' and 'test' sequences")
        return Dataset(path.stem, data.take(tr), data.take(te), labels, features)
    train, test = _holdout(data)
    return Dataset(path.stem, train, test, labels, features)


def _is_float(s):
    try:
        float(s)
        return True
    except ValueError:
        return False
