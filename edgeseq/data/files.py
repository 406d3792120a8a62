"""The data files a user gives, `.npz` and `.csv` (their layouts are in `edgeseq.data`'s
docstring): the readers `load_dataset` calls and the checks on their arrays and labels."""

from __future__ import annotations

import csv
import io
import math
import re
import zipfile
from pathlib import Path

import numpy as np

from edgeseq.data.dataset import F32_MAX, Dataset, Split, holdout, parse_float, with_lag
from edgeseq.errors import DataError, printable


def _load_npz(path: Path, name: str) -> Dataset:
    if not zipfile.is_zipfile(path):            # np.load would try a pickle, a .npy, text ...
        raise DataError(f"cannot read '{path}' as .npz (not a zip archive); re-save it with numpy.savez")
    try:
        with np.load(path, allow_pickle=False) as f:
            z = {k: f[k] for k in f.files}      # read here: an object array fails now, not later
        keys = set(z)
    except ValueError as e:
        if "pickle" not in str(e):
            raise DataError(f"cannot read '{path}' as .npz (ValueError); re-save it with numpy.savez") from None
        raise DataError(f"'{path}' holds Python objects (object arrays), which edgeseq does not load as they "
                        "can run code; save numbers and strings with numpy.savez") from None
    except Exception as e:  # zipfile/OS errors, a .npy or pickle under a .npz name: all mean the same here
        raise DataError(f"cannot read '{path}' as .npz ({type(e).__name__}); re-save it with numpy.savez") from None
    if {"X", "y"} & keys and {"X_train", "y_train"} & keys:
        raise DataError(f"'{path}' has both X/y and X_train/y_train; keep one of the two layouts")
    train_keys = ("X_train", "y_train", "lengths_train") if {"X_train", "y_train"} & keys else ("X", "y", "lengths")
    t_key = "targets_train" if train_keys[0] == "X_train" else "targets"
    if t_key in keys and train_keys[1] not in keys and "y_test" not in keys:
        for xk, yk in ((train_keys[0], train_keys[1]), ("X_test", "y_test")):   # regression data without labels:
            if xk in keys and np.ndim(z[xk]) >= 1:                              # one class, 'all'
                z[yk] = np.zeros(len(z[xk]), np.int64)
        z.setdefault("labels", np.array(["all"]))
        keys = set(z)
    if "targets_test" in keys and "X_test" not in keys:
        raise DataError(f"'{path}' has targets_test but no X_test; save the whole test split (X_test with its "
                        "targets_test) or drop targets_test")
    if t_key == "targets_train" and "targets" in keys and "targets_train" not in keys:
        raise DataError(f"'{path}' has targets beside X_train/y_train, where it would be ignored; name it "
                        "targets_train (or save the X/y layout)")
    if t_key not in keys and {"targets_test", "target_names", "persistence_lag"} & keys:
        raise DataError(f"'{path}' has {', '.join(sorted({'targets_test', 'target_names', 'persistence_lag'} & keys))} "
                        f"but no {t_key}; save the training split's targets [N, T, K] as {t_key}")
    _pair(keys, train_keys[:2], path, "the training data")
    Xtr, ytr, Ltr = (z.get(k) for k in train_keys)
    _pair(keys, ("X_test", "y_test"), path, "a held-out split")
    if "lengths_test" in keys and "X_test" not in keys:
        raise DataError(f"'{path}' has lengths_test but no X_test/y_test; "
                        "save the whole test split or drop lengths_test")
    Xte, yte, Lte = z.get("X_test"), z.get("y_test"), z.get("lengths_test")
    if "groups_test" in keys and "X_test" not in keys:
        raise DataError(f"'{path}' has groups_test but no X_test/y_test; "
                        "save the whole test split or drop groups_test")
    _check_keys(keys, train_keys[0] == "X_train", path)
    gkey = "groups"
    if train_keys[0] == "X_train" and "groups_train" in keys:
        if "groups" in keys:
            raise DataError(f"'{path}' has both groups and groups_train; keep one of the two")
        gkey = "groups_train"

    Xtr = _check_X(Xtr, path, train_keys[0])
    Ltr = _check_lengths(Ltr, Xtr, path, train_keys[2])
    ytr_raw = _check_y(ytr, Xtr, Ltr, path, train_keys[1])
    labels = _names(z["labels"], path, "labels") if "labels" in keys else None
    features = _names(z["features"], path, "features", Xtr.shape[2]) if "features" in keys else None
    Gtr = _check_groups(z[gkey], len(Xtr), path, gkey, train_keys[0]) if gkey in keys else None
    held_out = "file"
    if Xte is not None:
        Xte = _check_X(Xte, path, "X_test")
        Lte = _check_lengths(Lte, Xte, path, "lengths_test")
        if Xte.shape[2] != Xtr.shape[2]:
            raise DataError(f"'{path}': X_test has {Xte.shape[2]} features, X has {Xtr.shape[2]}")
        yte_raw = _check_y(yte, Xte, Lte, path, "y_test")
        Gte = None
        if "groups_test" in keys:
            Gte = _check_groups(z["groups_test"], len(Xte), path, "groups_test", "X_test")
        codes, labels = _encode_labels(np.concatenate([ytr_raw.ravel(), yte_raw.ravel()]), labels, path,
                                       ((train_keys[1], ytr_raw.size), ("y_test", yte_raw.size)))
        train = _split(Xtr, codes[: ytr_raw.size].reshape(ytr_raw.shape), Ltr, Gtr)
        test = _split(Xte, codes[ytr_raw.size:].reshape(yte_raw.shape), Lte, Gte)
        if t_key in keys:
            if "targets_test" not in keys:
                raise DataError(f"'{path}' has {t_key} and X_test but no targets_test; save the test split's "
                                "targets too")
            train.targets = _check_targets(z[t_key], Xtr, Ltr, path, t_key)
            test.targets = _check_targets(z["targets_test"], Xte, Lte, path, "targets_test",
                                          train.targets.shape[2])
    else:
        codes, labels = _encode_labels(ytr_raw.ravel(), labels, path, ((train_keys[1], None),))
        whole = _split(Xtr, codes.reshape(ytr_raw.shape), Ltr, Gtr)
        if t_key in keys:
            whole.targets = _check_targets(z[t_key], Xtr, Ltr, path, t_key)
        train, test = holdout(whole, where=f"'{path}'")
        held_out = "class" if Gtr is None else "group"
    features = features or [f"f{i}" for i in range(Xtr.shape[2])]
    ds = Dataset(name, train, test, labels, features, held_out=held_out)
    if t_key in keys:
        ds.target_names = (_names(z["target_names"], path, "target_names", train.targets.shape[2], "target")
                           if "target_names" in keys else
                           [f"target{i}" for i in range(train.targets.shape[2])] if train.targets.shape[2] > 1
                           else ["target"])
        lag = np.asarray(z.get("persistence_lag", 1))
        with_lag(ds, lag.reshape(-1)[0].item() if lag.shape in ((), (1,)) else lag, f"'{path}': ")
    return ds


def _check_targets(a, X, L, path, key, K=None) -> np.ndarray:
    """Regression targets float64 [N, T, K] ([N, T] is one target; float64, so that a target
    with a large offset keeps its digits), 0 past lengths; DataError naming `key` when they do
    not fit X or hold NaN/Inf inside the lengths."""
    a = np.asarray(a)
    if a.ndim == 2:
        a = a[..., None]
    if a.ndim != 3 or a.shape[:2] != X.shape[:2] or a.shape[2] < 1 or a.dtype.kind not in "iuf":
        raise DataError(f"'{path}': {key} must be real numbers [N, T, K] (or [N, T]) for X of shape "
                        f"{list(X.shape)}, got shape {list(a.shape)} of {a.dtype}")
    if K is not None and a.shape[2] != K:
        raise DataError(f"'{path}': {key} has {a.shape[2]} targets per reading where the training split has {K}")
    with np.errstate(over="ignore"):
        a = a.astype(np.float64)
    mask = np.arange(X.shape[1])[None, :] < L[:, None]
    if not (np.isfinite(a[mask]) & (np.abs(a[mask]) <= F32_MAX)).all():
        raise DataError(f"'{path}': {key} holds NaN or Inf inside the valid lengths (or a value beyond float32's "
                        "range, 3.4e38); clean or drop those sequences")
    a[~mask] = 0.0
    return a


NPZ_KEYS = ("X", "y", "lengths", "groups", "X_test", "y_test", "lengths_test", "groups_test", "labels", "features",
            "targets", "targets_test", "target_names", "persistence_lag")
TRAIN_SUFFIXED = ("X_train", "y_train", "lengths_train", "groups_train", "targets_train")
# names other tools give these arrays -> edgeseq's
KEY_ALIASES = {"test_groups": "groups_test", "label_names": "labels", "class_names": "labels",
               "feature_names": "features", "sequence_lengths": "lengths", "seq_lengths": "lengths"}


def _check_keys(keys, suffixed: bool, path) -> None:
    """DataError for a key edgeseq would ignore that looks meant for it: one of the other layout
    (lengths_train beside X) or a near miss of a known key ('group', 'Groups', 'lenghts'). Other
    keys (a user's own metadata, or a near miss beside the key it resembles) are left alone."""
    import difflib

    known = NPZ_KEYS[3:] + TRAIN_SUFFIXED if suffixed else NPZ_KEYS       # groups: either layout
    for k in sorted(keys - set(known)):
        if not suffixed and k in TRAIN_SUFFIXED:
            raise DataError(f"'{path}' has {k} beside X/y, where it would be ignored; name it {k[:-6]} (or save "
                            "the X_train/y_train layout)")
        if suffixed and k in ("X", "y", "lengths"):
            raise DataError(f"'{path}' has {k} beside X_train/y_train, where it would be ignored; name it {k}_train "
                            "(or save the X/y layout)")
        alias = KEY_ALIASES.get(k)
        alias = (alias + "_train" if suffixed and alias == "lengths" else alias) if alias else None
        bases = {m[:-6]: m for m in TRAIN_SUFFIXED} if suffixed else {}     # 'lenghts' -> lengths_train there
        near = ([alias] if alias else [m for m in known if m.lower() == k.lower()]
                or [bases.get(m, m) for m in difflib.get_close_matches(k, [*known, *bases], 1, 0.85)])
        if near and near[0] not in keys:                   # beside the real one it is the user's own
            raise DataError(f"'{path}' has an array '{k}', which edgeseq does not read; did you mean '{near[0]}'? "
                            "(rename it, or it is ignored)")


def _pair(keys, pair, path, what):
    """Both arrays of a pair (X and y) or neither: one alone is refused, not ignored."""
    have = [k for k in pair if k in keys]
    if not have and what == "the training data":
        raise DataError(f"'{path}' needs arrays X [N,T,F] and y [N] (found: {', '.join(sorted(keys)) or 'none'})")
    if len(have) == 1:
        lost = next(k for k in pair if k not in keys)
        both = "save both" if what == "the training data" else f"save both ({what}) or neither"
        raise DataError(f"'{path}' has {have[0]} but no {lost}; {both}")


def _names(a, path, key, n=None, per: str = "feature column") -> list:
    """`labels` / `features` / `target_names`: a 1-D array of distinct, non-empty names (n of
    them, one per `per`, if given)."""
    a = np.asarray(a)
    if a.ndim != 1 or (n is not None and len(a) != n):
        want = f"{n} names, one per {per}" if n is not None else "a 1-D array of names"
        raise DataError(f"'{path}': {key} must be {want}, got shape {list(a.shape)}")
    names = [str(v).strip() for v in a]
    if any(not v for v in names) or len(set(names)) != len(names):
        raise DataError(f"'{path}': {key} must be distinct, non-empty names, got {names}")
    return names


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


def _split(X, codes, L, groups=None) -> "Split":
    """A Split from integer labels [N] or [N, T]."""
    if codes.ndim == 1:
        return Split(X, codes, L, groups=groups)
    Y = codes.astype(np.int64)
    Y[np.arange(X.shape[1])[None, :] >= L[:, None]] = -1
    return Split(X, codes[np.arange(len(X)), L - 1].astype(np.int64), L, Y, groups)


def _check_groups(g, n, path, key, x_key):
    """`groups` [N]: one name per sequence (strings, or whole numbers taken as names, as labels
    are) -> str array [N]."""
    g = np.asarray(g)
    if g.ndim != 1 or len(g) != n:
        raise DataError(f"'{path}': {key} must be [N], one group name per sequence of {x_key} ({n}), got shape "
                        f"{list(g.shape)}; save one string or integer per sequence")
    if g.dtype.kind == "f":
        if not np.isfinite(g).all() or (g != np.round(g)).any():
            raise DataError(f"'{path}': {key} holds NaN or non-integer numbers; groups are names: save them as "
                            "strings or integers")
        g = g.astype(np.int64)
    if g.dtype.kind not in "iuUSb":
        raise DataError(f"'{path}': {key} must be names (strings or integers), got dtype {g.dtype}; save one "
                        "string or integer per sequence")
    names = np.array([(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)).strip() for v in g.tolist()],
                     dtype=str)
    if not all(names):
        raise DataError(f"'{path}': {key} holds an empty name; name the group of every sequence")
    return names


def _check_X(X, path, key):
    X = np.asarray(X)
    if X.ndim != 3 or 0 in X.shape:
        raise DataError(f"'{path}': {key} must be [N, T, F] with at least one of each, got shape {list(X.shape)}")
    if X.dtype.kind not in "iuf":
        raise DataError(f"'{path}': {key} must be real numbers, got dtype {X.dtype}")
    with np.errstate(over="ignore"):
        X = X.astype(np.float32)                # beyond float32's range -> Inf, refused with the NaNs below
    return X


def _check_lengths(L, X, path, key="lengths"):
    if L is None:
        L = np.full(len(X), X.shape[1], dtype=np.int64)
    L = np.asarray(L)
    ok = L.shape == (len(X),) and (L.dtype.kind in "iu" or (L.dtype.kind == "f" and np.isfinite(L).all()
                                                           and (L == np.round(L)).all()))
    if ok:
        L = L.astype(np.int64)
    if not ok or (L < 1).any() or (L > X.shape[1]).any():
        raise DataError(f"'{path}': {key} must be [N] whole numbers in 1..{X.shape[1]}")
    mask = np.arange(X.shape[1])[None, :] < L[:, None]
    if not np.isfinite(X[mask]).all():
        raise DataError(f"'{path}': X holds NaN or Inf inside the valid lengths (or a value beyond float32's "
                        "range, 3.4e38); clean or drop those sequences")
    X[~mask] = 0.0
    return L


def _some_non_integers(a, k=3):
    """The distinct NaN, Inf and fractional values of float array `a` that it holds, up to k
    of them ("NaN, 0.5, 1.5, ..."): what a message about them shows."""
    a = np.asarray(a, np.float64).ravel()
    finite = np.isfinite(a)
    odd = [s for s, m in (("NaN", np.isnan(a)), ("Inf", a == np.inf), ("-Inf", a == -np.inf)) if m.any()]
    frac = np.unique(a[finite & (a != np.round(a))])
    shown = odd + [f"{v:g}" for v in frac[:k].tolist()]
    return ", ".join(shown[:k]) + (", ..." if len(shown) > k or len(frac) > k else "")


def _encode_labels(y, labels, path, keys=(("y", None),)):
    """Labels (integers, or strings / anything else by name) -> (int64 codes, class names).

    `labels` given (the file's `labels` array) is the class order: integers index it, names
    are looked up in it (an unknown name is refused, naming the first). Without it, the
    distinct values are the classes, sorted: integers are names too, never a range to fill. keys: (array name, number of entries) for the parts `y` joins, in order, so
    that an error names the array an unknown label came from."""
    if y.dtype.kind == "f":
        if not np.isfinite(y).all() or (y != np.round(y)).any():
            raise DataError(f"'{path}': labels must be integers or names; found non-integer numbers "
                            f"({_some_non_integers(y)}); save whole numbers or names")
        y = y.astype(np.int64)
    if y.dtype.kind == "O":
        raise DataError(f"'{path}': labels are Python objects; save them as integers or strings")
    if y.dtype.kind in "iu":
        if y.min() < 0:
            raise DataError(f"'{path}': labels must be integers of at least 0, or names; found {int(y.min())} "
                            "(for padding past a sequence's end, give `lengths`)")
        if labels is None:                    # the integers are names, not a range: [0, 7, 10**9] is 3 classes
            values = np.unique(y)
            return np.searchsorted(values, y).astype(np.int64), [str(v) for v in values.tolist()]
        if y.max() >= len(labels):
            raise DataError(f"'{path}': labels must be integers in 0..{len(labels) - 1} (they index the file's "
                            f"labels, {len(labels)} names); found {int(y.max())}")
        return y.astype(np.int64), labels
    names = sorted({str(v) for v in y})
    if any(not n.strip() for n in names):
        raise DataError(f"'{path}': some labels are empty; label every reading (for padding past a sequence's "
                        "end, give `lengths`)")
    if labels is not None:
        index = {n: i for i, n in enumerate(labels)}
        codes = np.array([index.get(str(v).strip(), -1) for v in y], dtype=np.int64)
        if (codes < 0).any():
            first = int(np.argmax(codes < 0))
            key, at = keys[-1][0], first
            for k, n in keys:
                if n is None or at < n:
                    key = k
                    break
                at -= n
            raise DataError(f"'{path}': {key} holds the label '{str(y[first]).strip()}', which is not in labels "
                            f"({', '.join(labels)}); add it to labels or correct {key}")
        return codes, labels
    index = {n: i for i, n in enumerate(names)}
    return np.array([index[str(v)] for v in y], dtype=np.int64), names


RESERVED = ("sequence", "label", "split", "group")   # a .csv's columns that are never features

# Header names that say a column is not a reading, whatever it holds: a Unix time or a row
# number is numeric, and would otherwise train as a channel. Matched by `not_a_feature`: any
# case, spaces and punctuation aside, a unit after it allowed ('Time (s)', 'timestamp_ms',
# 'Sample ID', 'sampleId'). A column named here is still a feature where `features` names it.
NOT_FEATURES = {
    "time": ("timestamp", "time", "datetime", "date", "t", "ts", "unixtime", "epoch", "epochtime", "elapsed",
             "elapsedtime", "clock"),
    "an id": ("id", "index", "idx", "row", "rowid", "rowindex", "rownumber", "rowno", "sample", "sampleid",
              "sampleindex", "samplenumber", "sampleno", "record", "recordid", "subject", "subjectid", "user",
              "userid", "participant", "participantid", "session", "sessionid", "device", "deviceid", "name"),
    "a note": ("note", "notes", "comment", "comments", "description"),
}
UNITS = ("s", "ms", "us", "ns", "sec", "secs", "seconds", "utc", "iso")     # dropped from the end of a name
# Words that make a column a clock or a counter wherever they stand in its name ('Unix Timestamp', 'rel_time',
# 'sensor_id', 'seq_no', 'packetId'): a clock or counter only grows, and as a channel it would be read as a
# reading. `--features` takes such a column all the same.
NOT_FEATURE_WORDS = {
    "time": ("time", "timestamp", "datetime", "ts", "unix", "epoch", "millis", "micros", "nanos", "seconds",
             "elapsed", "clock"),
    "an id": ("id", "idx", "seq", "seqno", "counter", "tick", "ticks", "frame", "packet"),
}
_KIND = {name: kind for kind, names in NOT_FEATURES.items() for name in names}
_WORD_KIND = {w: kind for kind, words in NOT_FEATURE_WORDS.items() for w in words}
# What a number looks like, refused or not: a column holding one is a feature with a bad cell
# (1_0, 3,5, 12%), not text; dates and clock times (2026-01-01, 10:00:00.020) are text.
_NUMBERISH = re.compile(r"[+-]?(?:\d[\d_,.']*|[.,]\d+)(?:[eE][+-]?\d+)?\s*%?")


def not_a_feature(name: str) -> str | None:
    """Why a .csv column named `name` is not a feature by its name alone ('time, by its name',
    'no name: a row index', ...), or None where the name says nothing (see NOT_FEATURES)."""
    low = name.strip().lower()
    if not low or re.fullmatch(r"unnamed: ?\d+", low):        # pandas' to_csv writes its index so
        return "no name: a row index"
    tokens = re.findall(r"[a-z0-9]+", low)
    while len(tokens) > 1 and tokens[-1] in UNITS:
        tokens.pop()
    kind = _KIND.get("".join(tokens))
    if not kind:                       # a word of the name: camelCase split, then any word (NOT_FEATURE_WORDS)
        words = re.findall(r"[a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name.strip()).lower())
        kind = next((_WORD_KIND[w] for w in words if w in _WORD_KIND), None)
    return f"{kind}, by its name" if kind else None


def _numberish(cell: str) -> bool:
    """A cell that is, or is meant as, a number (see _NUMBERISH)."""
    t = cell.strip()
    if _is_float(t) or _NUMBERISH.fullmatch(t):
        return True
    try:
        float(t)                                # full-width and other non-ASCII digits
        return True
    except ValueError:
        return False


def _pick_columns(path, header, rows, features, strict, targets=()):
    """(feature column indices, {name: why} of the other columns that are not sequence, label,
    split or group, nor a target): the columns `features` names, or the ones that hold readings."""
    others = [i for i, h in enumerate(header) if h not in RESERVED and h not in targets]
    if features is not None:
        names = [str(f).strip() for f in features]
        missing = [f for f in names if f not in header]
        if strict or not missing:
            if not names or not all(names):
                raise DataError(f"'{path}': features must name columns, got {names}; give the feature columns' names")
            twice = sorted({f for f in names if names.count(f) > 1})
            if twice:
                raise DataError(f"'{path}': features name {', '.join(twice)} more than once; name each column once")
            both = [f for f in names if f in targets]
            if both:
                raise DataError(f"'{path}': '{both[0]}' is named as a feature and as a target; a column is one or the "
                                "other")
            kept = [f for f in names if f.lower() in RESERVED]      # any case, as the header's are read
            if kept:
                raise DataError(f"'{path}': '{kept[0]}' is the {kept[0].lower()} column, not a feature; name feature "
                                f"columns only (the file's: {', '.join(header[i] for i in others) or 'none'})")
            if missing:
                raise DataError(f"'{path}' has no column {', '.join(repr(f) for f in missing)}; its columns are "
                                f"{', '.join(header)}: name features from those")
            return [header.index(f) for f in names], {header[i]: "not in features" for i in others
                                                     if header[i] not in names}
    ignored = {i: not_a_feature(header[i]) for i in others}
    ignored = {i: why for i, why in ignored.items() if why}
    readings = [r for r in rows if len(r) == len(header) and any(c.strip() for c in r)]
    if readings:                                # no rows: the caller says so
        for i in others:
            if i not in ignored and not any(_numberish(r[i]) for r in readings):
                ignored[i] = "text on every row" if any(r[i].strip() for r in readings) else "empty on every row"
    return [i for i in others if i not in ignored], {header[i]: why for i, why in sorted(ignored.items())}


def _load_csv(path: Path, features=None, strict: bool = True, targets=None) -> Dataset:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"cannot read '{path}': {e.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")          # -sig: the byte-order mark a spreadsheet writes
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise DataError(f"'{path}' is not UTF-8 text (line {line}, byte {e.start}); save it as CSV UTF-8") from None
    if "\x00" in text:
        raise DataError(f"'{path}' holds NUL bytes, so it is not CSV text; save it as CSV UTF-8")
    try:
        rows = list(csv.reader(io.StringIO(text, newline=""), skipinitialspace=True))
    except csv.Error as e:                      # a field past the size limit, a stray quote in strict mode
        raise DataError(f"'{path}' is not a readable CSV file ({e}); save it as CSV UTF-8") from None
    if not rows:
        raise DataError(f"'{path}' is empty")
    header = [h.strip() for h in rows[0]]
    shown = list(header)                        # as the file spells them, for messages
    sep = separator(header)
    if sep and not any(h.lower() == "sequence" for h in header):
        raise DataError(f"'{path}' looks separated by {sep}, not commas: save it comma-separated")
    for i, h in enumerate(header):              # reserved names in any case (Sequence, LABEL), as stream reads them
        if h.lower() in RESERVED:
            same = [g for g in shown[:i] if g.lower() == h.lower()]
            if same and same[0] != h:           # the same spelling twice: said below
                raise DataError(f"'{path}': columns '{same[0]}' and '{h}' are both the {h.lower()} column (names are "
                                "matched in any case); keep one")
            header[i] = h.lower()
    targets = [str(t).strip() for t in targets] if targets else []
    for t in targets:
        if t not in header or t.lower() in RESERVED or targets.count(t) > 1:
            why = f"is the {t.lower()} column" if t.lower() in RESERVED else "is not in its header" \
                if t not in header else "is named twice"
            raise DataError(f"'{path}': target column '{t}' {why}; name its target columns (the file's columns: "
                            f"{', '.join(h for h in header if h not in RESERVED)})")
    for need in ("sequence", "label"):
        if need not in header and not (need == "label" and targets):     # regression: labels optional
            raise DataError(f"'{path}': header needs a '{need}' column (any case); its columns are "
                            f"{_listed(shown)} (see `edgeseq train --help`)")
    for i, h in enumerate(header):
        if h and h in header[:i]:               # unnamed columns (an index) may be several: none is read
            raise DataError(f"'{path}': header column {i + 1} repeats the name '{h}'; give each column its own name")
    i_seq, i_lab = header.index("sequence"), header.index("label") if "label" in header else None
    t_idx = [header.index(t) for t in targets]
    i_split = header.index("split") if "split" in header else None
    i_group = header.index("group") if "group" in header else None
    if all(h in RESERVED for h in header):
        raise DataError(f"'{path}': no feature columns besides sequence/label/split/group")
    feat_idx, ignored = _pick_columns(path, header, rows[1:], features, strict, targets)
    if not feat_idx:
        why = ", ".join(f"{h} ({w})" for h, w in ignored.items())
        raise DataError(f"'{path}': no column holds readings (not features: {why}); add columns of numeric "
                        "readings, or name the feature columns (train --features)")
    seqs: dict = {}
    last_key = None
    for lineno, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise DataError(f"'{path}' line {lineno}: {len(row)} fields, header has {len(header)}")
        try:
            values = [parse_float(row[i]) for i in feat_idx]
        except ValueError:
            col = next(i for i in feat_idx if not _is_float(row[i]))
            raise DataError(f"'{path}' line {lineno}: non-numeric value '{row[col]}' in feature column '{header[col]}'; "
                            "fix or remove that row, or leave the column out (train --features names the feature "
                            "columns)") from None
        if not all(abs(v) <= F32_MAX for v in values):      # False for NaN too
            col = next(i for i, v in zip(feat_idx, values) if not abs(v) <= F32_MAX)
            raise DataError(f"'{path}' line {lineno}: NaN or Inf value (or one beyond float32's range, 3.4e38) in "
                            f"feature column '{header[col]}'; fix or remove that row")
        tv = [parse_float(row[i]) if _is_float(row[i]) else math.nan for i in t_idx]
        if not all(abs(v) <= F32_MAX for v in tv):
            col = next(i for i, v in zip(t_idx, tv) if not abs(v) <= F32_MAX)
            raise DataError(f"'{path}' line {lineno}: '{row[col]}' in target column '{header[col]}' is not a finite "
                            "number; fix or remove that row")
        key = row[i_seq].strip()
        split = row[i_split].strip().lower() if i_split is not None else ""
        if i_split is not None and split not in ("train", "test"):
            raise DataError(f"'{path}' line {lineno}: split '{row[i_split]}' is neither 'train' nor 'test'; "
                            "fix that row")
        if key in seqs and key != last_key:
            raise DataError(f"'{path}' line {lineno}: sequence '{key}' continues after other rows; keep each "
                            "sequence's rows together, in time order")
        last_key = key
        group = row[i_group].strip() if i_group is not None else ""
        if i_group is not None and not group:
            raise DataError(f"'{path}' line {lineno}: the group is empty; name the group (subject, device or "
                            "session) of every row")
        entry = seqs.setdefault(key, {"labels": [], "split": split, "group": group, "values": [], "targets": []})
        if split != entry["split"]:
            raise DataError(f"'{path}' line {lineno}: sequence '{key}' moves from split '{entry['split']}' to "
                            f"'{split}'; give all rows of a sequence one split")
        if group != entry["group"]:
            raise DataError(f"'{path}' line {lineno}: sequence '{key}' changes group from '{entry['group']}' to "
                            f"'{group}'; give all rows of a sequence one group (or make them separate sequences)")
        entry["labels"].append(row[i_lab].strip() if i_lab is not None else "all")
        entry["values"].append(values)
        entry["targets"].append(tv)
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
    groups = np.array([e["group"] for e in seqs.values()], dtype=str) if i_group is not None else None
    data = Split(X, Y[np.arange(len(seqs)), L - 1], L, Y, groups)
    if targets:                                  # regression: the target columns, float64 [N, T, K]
        data.targets = np.zeros((len(seqs), T, len(targets)), np.float64)
        for n, e in enumerate(seqs.values()):
            data.targets[n, : len(e["targets"])] = e["targets"]
    features = [header[i] for i in feat_idx]
    if i_split is not None:
        splits = np.array([e["split"] for e in seqs.values()])
        tr, te = splits == "train", splits == "test"
        if not te.any() or not tr.any():
            raise DataError(f"'{path}': the split column needs both 'train' and 'test' sequences")
        return Dataset(path.stem, data.take(tr), data.take(te), labels, features, ignored=ignored,
                       target_names=targets or None)
    train, test = holdout(data, where=f"'{path}'")
    return Dataset(path.stem, train, test, labels, features, held_out="class" if groups is None else "group",
                   ignored=ignored, target_names=targets or None)


SEPARATORS = {";": "';'", "\t": "tabs"}      # what a spreadsheet may separate cells with instead of commas


def separator(cells) -> str | None:
    """How a header read as comma-separated (`cells`) looks separated instead: "';'" or "tabs"
    where its cells hold more of that character than the commas between them (one cell
    'sequence;label;acc_x'), else None. A name that merely holds a ';' beside comma-separated
    columns is no sign."""
    text = "".join(cells)
    sep = max(SEPARATORS, key=text.count)
    return SEPARATORS[sep] if text.count(sep) > len(cells) - 1 else None


def _listed(names, most: int = 12) -> str:
    """Column names for a message: the first `most`, then how many more."""
    names = [f"'{printable(n)}'" for n in names]
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return (", ".join(names[:most]) or "none") + more


def _is_float(s):
    try:
        parse_float(s)
        return True
    except ValueError:
        return False
