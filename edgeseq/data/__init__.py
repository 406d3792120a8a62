"""Data sets: the embedded BasicMotions set, user `.npz` and `.csv` files, normalisation.

numpy only, so the runtime can read the embedded test split without torch.

User `.npz`: `X` float [N, T, F], `y` labels [N] (ints or strings) or [N, T] (one label per
reading: a long recording whose activity changes), optional `lengths` [N]
(valid readings per sequence; the rest is padding), optional `labels` (the class names in
class order: integer `y` indexes them; string `y` is looked up in them, and a name in `y`
that `labels` lacks is refused) and `features` (channel names), optional `groups` [N] (the
subject, device or session each sequence comes from: strings, or integers taken as names). For
regression (`edgeseq train --task regress`): `targets` float [N, T, K] (a value per reading and
target), `targets_test` beside `X_test`, optional `target_names` [K] and `persistence_lag` (a
whole number, default 1: the persistence baseline predicts a reading's target as its value
that many readings earlier; for a forecast h readings ahead, h); `y` may then be left out. A
held-out split may ship as `X_test`, `y_test`, `lengths_test`, `groups_test`; without it the
last quarter of each class (in file order) is held out, or, where the file names groups, whole
groups drawn with a fixed seed (`holdout`), so the split is deterministic and no group is on
both sides. `X_test` and `y_test` come together or not at all.

User `.csv`: one reading per row with a header. Columns `sequence` (an id) and `label` are
required; an optional `split` column holds `train` or `test` (any other value is refused), an
optional `group` column the sequence's group (one per sequence). The other columns are the
features, in header order, except those that are not readings, which are ignored whatever they
hold (as `edgeseq stream` ignores them), and listed with the reason in the Dataset's `ignored`:
a column named as a time or an id (`edgeseq.data.files.NOT_FEATURES`: timestamp, time,
datetime, date, t, id, index, row, sample, subject, device, note, ..., in any case, with a
unit after it or not: `Time (s)`, `timestamp_ms`; a column without a name, such as the index
pandas writes), and a column that holds no number on any row (ISO times, device names, notes,
empty cells). A column with numbers on some rows and other text on others is a feature with
bad readings: refused, naming the first bad line and value. `load_dataset(path, features=[...])`
(`edgeseq train --features`) names the feature columns instead, in the order given; every
other column is ignored, and a name the file lacks is refused, listing its columns. A file
left with no feature column is refused. The file is UTF-8, with or without
the byte-order mark a spreadsheet writes; fields may be quoted. Rows of one sequence are
contiguous and in time order; sequences may differ in length. The label belongs to the row
and may change within a sequence (a recording whose activity changes); a sequence's class,
for per-sequence scores, is the label of its last row.

    sequence,label,timestamp,acc_x,acc_y,acc_z
    s1,walk,2026-01-01T10:00:00.000,0.1,0.2,9.7
    s1,walk,2026-01-01T10:00:00.020,0.2,0.1,9.8
    s2,rest,2026-01-01T10:05:00.000,0.0,0.0,9.8

Channels are matched by name wherever data meets a model (`align_features`): named columns
in another order are put in the model's order; unnamed ones (f0, f1, ...) by position; a
.csv's columns beyond the model's are ignored, as `stream` ignores them. The
commands that evaluate a model read the data it was trained on unless told otherwise
(`data_for_model`; an exported file records it, see `trained_on`). The file readers and their
checks are in `edgeseq.data.files`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeseq.errors import DataError, printable

DATA_DIR = Path(__file__).resolve().parent
EMBEDDED = {"basicmotions": DATA_DIR / "basicmotions.npz",          # the default: wrist IMU, 4 activities
            "japanesevowels": DATA_DIR / "japanesevowels.npz",      # 9 speakers, 12 cepstra, 7-29 frames
            "vibration": DATA_DIR / "vibration.npz",                # synthetic machine vibration, injected faults
            "internalbleeding16": DATA_DIR / "internalbleeding16.npz",  # UCR anomaly archive series 135
            "motor": DATA_DIR / "motor.npz"}                        # synthetic motor heating, regression
# Readings per second of the embedded sets, where their source states it (PROVENANCE.md): what per-hour
# figures (false alarms per hour) default to for them.
RATE_HZ = {"basicmotions": 10.0, "vibration": 50.0, "motor": 1.0}
# The classes of the embedded sets that are no event (rest, nothing happening): the report's default background.
BACKGROUND = {"basicmotions": ["Standing"]}
CHANNELS_REMEDY = "give data with the model's channels, named as in training"
DATA_REMEDY = "pass --data with the model's training data, or other data with its channels"  # commands with --data


@dataclass
class Split:
    X: np.ndarray        # float32 [N, T, F], zero padded past `lengths`
    y: np.ndarray        # int64 [N]: each sequence's class, the label of its last valid reading
    lengths: np.ndarray  # int64 [N]
    Y: np.ndarray | None = None   # int64 [N, T]: the label of every reading, -1 past `lengths`
                                  # (None: every reading carries its sequence's y)
    groups: np.ndarray | None = None   # str [N]: the group (subject, device, session) of each
                                       # sequence; None: the data names no groups
    targets: np.ndarray | None = None  # float64 [N, T, K]: regression targets per reading, 0 past
                                       # `lengths` (None: the data has none)

    def __post_init__(self):
        if self.Y is None:
            Y = np.repeat(np.asarray(self.y, np.int64)[:, None], self.X.shape[1], axis=1)
            Y[np.arange(self.X.shape[1])[None, :] >= np.asarray(self.lengths)[:, None]] = -1
            self.Y = Y

    def __len__(self):
        return len(self.y)

    def take(self, rows) -> "Split":
        return Split(self.X[rows], self.y[rows], self.lengths[rows], self.Y[rows],
                     None if self.groups is None else self.groups[rows],
                     None if self.targets is None else self.targets[rows])

    def channels(self, order) -> "Split":
        """The same sequences with their feature columns X[..., order] (see `align_features`)."""
        return Split(self.X[:, :, order], self.y, self.lengths, self.Y, self.groups, self.targets)


@dataclass
class Dataset:
    name: str            # for display: 'basicmotions' or the file's stem
    train: Split
    test: Split
    labels: list
    features: list
    source: str | None = None   # what load_dataset reopens: 'basicmotions' or the file's absolute path
                                # (None: built in memory)
    held_out: str = "file"      # how the test split was set: 'file' (given), 'class' or 'group' (`holdout`)
    sha256: str | None = None   # a data file's sha256 as loaded (None: embedded or built in memory)
    ignored: dict | None = None  # a .csv's columns that are not features, {name: why}, in header order
                                 # (None: not read from a .csv header)
    target_names: list | None = None  # regression targets' names (the splits' `targets`); None: none
    persistence_lag: int = 1     # the persistence baseline predicts each reading's target as its value this
                                 # many readings earlier (a forecast h readings ahead: h)

    def group_split(self) -> dict | None:
        """Which groups each split holds, {'train': [names], 'test': [names], 'test_split': how
        it was set, 'shared': [names in both] (only where the file gives the test split)}, for
        metrics and JSON; None where the data names no groups."""
        if self.train.groups is None and self.test.groups is None:
            return None
        n_test, n_all = len(self.test), len(self.train) + len(self.test)
        how = {"file": "given by the file", "class": "the last quarter of each class",
               "group": f"whole groups: {n_test} of {n_all} sequences ({n_test / max(n_all, 1):.0%}), "
                        f"seed {HOLDOUT_SEED}"}[self.held_out]
        train, test = _group_names(self.train), _group_names(self.test)
        return {"train": train, "test": test, "test_split": how, "shared": sorted(set(train or ()) & set(test or ()))}

    @property
    def n_features(self):
        return len(self.features)

    def for_model(self, model_features, where: str | None = None, remedy: str = CHANNELS_REMEDY) -> "Dataset":
        """This data with its channels in the order a model reads them (`align_features`).

        Data read from a .csv (`ignored` not None) that holds every named channel of the model
        and more keeps the model's, as `edgeseq stream` reads such a file: the others join
        `ignored` ("not a channel of the model"). Otherwise other channels are refused
        (DataError, `align_features`)."""
        ignored = self.ignored
        model = [str(f) for f in model_features]
        extra = [f for f in self.features if f not in model]
        if ignored is not None and extra and not _generic(model) and set(model) <= set(self.features):
            # a .csv's columns are picked by name, as `stream` picks them: the model's, in its order
            order = np.array([self.features.index(f) for f in model], dtype=np.int64)
            ignored = {**ignored, **{f: "not a channel of the model" for f in extra}}
        else:
            order = align_features(self.features, model_features, where or f"data '{self.name}'", remedy)
        if order is None:
            return self
        return Dataset(self.name, self.train.channels(order), self.test.channels(order), self.labels,
                       list(model_features), self.source, self.held_out, self.sha256, ignored)


def _group_names(split: Split) -> list | None:
    return None if split.groups is None else sorted(set(split.groups.tolist()))


def _generic(names) -> bool:
    return list(names) == [f"f{i}" for i in range(len(names))]


def _shown(names) -> str:
    """Names read from a file, for a one-line message: comma-separated, each escaped (`printable`:
    a line break in a label stays visible as \\n instead of splitting or joining the message)."""
    return ", ".join(printable(n) for n in names)


def align_features(dataset_features, model_features, where: str, remedy: str = CHANNELS_REMEDY):
    """The one rule for feeding data to a model: channels are matched by name.

    Returns None when the data's columns are already in the model's order, else the index
    array that puts them in it (`X[..., order]`). Named channels in another order are
    reordered; named channels that differ are refused (DataError naming the data's channels
    and the model's, and the missing and extra ones where some are shared). Unnamed channels
    (None, or the generic f0, f1, ... on either side) can only be matched by position, so the
    counts must agree. `where` names the data in messages; `remedy` ends them (what to do:
    the commands that take `--data` pass DATA_REMEDY)."""
    model = [str(f) for f in model_features]
    data = [str(f) for f in dataset_features]
    where = printable(where)
    if _generic(data) or _generic(model):
        if len(data) != len(model):
            raise DataError(f"{where} has {len(data)} channels ({_shown(data)}) but the model reads {len(model)} "
                            f"({_shown(model)}); {remedy}")
        return None
    if data == model:
        return None
    twice = sorted({f for f in data if data.count(f) > 1})
    if twice:
        raise DataError(f"{where} names channel(s) {_shown(twice)} more than once; give each column its own name")
    missing = [f for f in model if f not in data]
    extra = [f for f in data if f not in model]
    if missing or extra:
        shared = len(missing) < len(model)                  # some channels in common: say which differ
        parts = [f"lacks {_shown(missing)}"] if missing and shared else []
        parts += [f"has extra {_shown(extra)}"] if extra and shared else []
        detail = f" (it {' and '.join(parts)})" if parts else ""
        raise DataError(f"{where} has the channels {_shown(data)} but the model reads {_shown(model)}"
                        f"{detail}; {remedy}")
    return np.array([data.index(f) for f in model], dtype=np.int64)


def trained_on(ckpt: dict) -> str | None:
    """What a checkpoint was trained on, as `load_dataset` reopens it: the data file's absolute
    path, the embedded data set's name, or None (data built in memory, or an older checkpoint
    that names a file only by its stem)."""
    if ckpt.get("data_path"):
        return str(ckpt["data_path"])
    return ckpt.get("dataset") if ckpt.get("dataset") in EMBEDDED else None


def data_for_model(data: str | None, features, labels=None, trained: str | None = None,
                   model: str | None = None, trained_sha256: str | None = None, targets=None) -> Dataset:
    """The data a model is evaluated on, its channels in the model's order: what `eval`,
    `compare`, `report` and `firmware simulate`/`measure` read.

    data: what the user asked for (`--data`), which wins. None: the model's own training data,
    `trained` (the model file's `edgeseq.data` metadata or `trained_on(checkpoint)`: an
    embedded name or a file's absolute path); a model that records none (a file exported
    before that key) is read against the embedded basicmotions. features, labels: the model's
    channel and class names (labels None: not checked); `model` names it in messages;
    trained_sha256: the recorded file's sha256 when it was trained (None: not checked);
    targets: a regression model's target names, the columns a .csv's targets are read from.
    A .csv is read for the model's named channels only (`load_dataset(features=...)`), so a
    column the model was not trained on (excluded with `--features`, say) is not read at all;
    a .csv that lacks one of them is read as it is, and refused as below.
    Raises DataError, one line that says to pass --data: the recorded file no longer exists
    (naming it) or has changed since (its test split, carved anew, could hold sequences the
    model trained on), the data's channels are not the model's (naming both,
    `align_features`), or its labels are not the model's."""
    who = f"model '{model}'" if model else "the model"
    if data is None and trained is not None and trained not in EMBEDDED and not Path(trained).is_file():
        raise DataError(f"{who} was trained on '{trained}', which no longer exists; pass --data with that data "
                        "(or other data with the model's channels)")
    if data is None:
        check_unchanged(trained, trained_sha256, who)
    spec = data or trained or "basicmotions"
    named = None if _generic([str(f) for f in features]) else [str(f) for f in features]
    ds = _open(spec, named, strict=False, targets=targets if str(spec).lower().endswith(".csv") else None)
    ds = ds.for_model(features, f"data '{ds.name}'", DATA_REMEDY)
    if labels is not None and list(ds.labels) != list(labels):
        raise DataError(f"data '{printable(ds.name)}' has the labels {_shown(ds.labels)} but the model predicts "
                        f"{_shown(labels)}; pass --data with the model's training data, or other data with "
                        "its labels")
    return ds


F32_MAX = float(np.finfo(np.float32).max)
F32_TINY = float(np.finfo(np.float32).tiny)

# A number as data files write one: ASCII digits, an optional sign, decimal point and exponent;
# nan/inf pass here so that callers refuse them by name.
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|infinity)", re.I | re.ASCII)


def parse_float(text: str) -> float:
    """`text` (surrounding spaces allowed) as a float: 1.5, -2, +3e-4, .5, nan, inf. ValueError
    for anything else, including what Python's float() also takes but no data file means: 1_0
    (float reads it as 10), full-width or other non-ASCII digits, spaces inside."""
    t = text.strip()
    if not _NUMBER.fullmatch(t):
        raise ValueError(f"not a number: {text!r}")
    return float(t)


CONSTANT = 1e-6   # a channel whose std is at most this fraction of its magnitude is constant


@dataclass(frozen=True)
class Normalization:
    mean: np.ndarray  # float32 [F]
    std: np.ndarray   # float32 [F]
    constant: np.ndarray | None = None   # bool [F]: channels that did not vary in the data fitted on

    @classmethod
    def fit(cls, split: Split, features: list | None = None) -> "Normalization":
        """Per-feature mean and std over every valid training reading, computed in float64.

        A constant channel (std <= CONSTANT * max(|mean|, float32 tiny), a test relative to
        the channel's magnitude) keeps std = 1, is flagged in `constant`, and training makes
        the model ignore it (its input weights are zeroed: it taught the model nothing, and a
        drift at run time, whatever its unit, must not move the answer).

        The model normalises in float32, so a channel whose mean, std or deviation from the
        mean does not fit float32 is refused (DataError naming the channel: rescale it), as
        is a NaN or Inf. `features` names the channels in messages."""
        names = list(features) if features is not None else [f"f{i}" for i in range(split.X.shape[2])]
        mask = np.arange(split.X.shape[1])[None, :] < split.lengths[:, None]
        values = split.X[mask].astype(np.float64)            # (readings, F)
        if not len(values):
            raise DataError("no valid readings to fit the normalisation on; the training split is empty")
        bad = np.flatnonzero(~np.isfinite(values).all(0))
        if bad.size:
            raise DataError(f"channel '{names[bad[0]]}' (column {bad[0]}) holds NaN or Inf; "
                            "clean or drop those readings")
        mean = values.mean(0)
        std = values.std(0)
        constant = std <= np.maximum(CONSTANT * np.abs(mean), F32_TINY)
        std = np.where(constant, 1.0, std)                  # constant: std 1
        with np.errstate(over="ignore", invalid="ignore"):
            dev = np.abs(values - mean).max(0)               # (F,): the graph computes x - mean in float32
        fits = (np.abs(mean) < F32_MAX) & (std < F32_MAX) & (dev < F32_MAX) & (dev / std < F32_MAX)
        bad = np.flatnonzero(~fits)
        if bad.size:
            i = bad[0]
            raise DataError(f"channel '{names[i]}' (column {i}): values up to {np.abs(values[:, i]).max():.3g} "
                            "overflow the model's float32 arithmetic once normalised; rescale that channel "
                            "(another unit, or divide it by a power of ten) and train again")
        return cls(mean.astype(np.float32), std.astype(np.float32), constant)

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


def load_dataset(spec: str, features=None, targets=None, persistence_lag: int | None = None) -> Dataset:
    """`basicmotions`, `japanesevowels` (embedded; edgeseq/data/PROVENANCE.md) or a path to a
    `.npz` / `.csv` file (layouts in this module's docstring).
    The Dataset's `source` is what reopens it: the embedded name or the file's absolute path.

    features: a .csv's feature columns by name (a list of str, in the order the model will
    read them); every other column is ignored. None: the columns that hold readings, found
    as this module's docstring says. A .csv Dataset's `ignored` says which columns were left
    out and why. targets: a .csv's regression target columns by name (a list of str; its
    `label` column is then optional); persistence_lag: the persistence baseline's lag in
    readings (None: the file's, or 1). Raises DataError (one line): a named column the file
    lacks (listing the columns it has), one named twice or one of sequence/label/split/group,
    `features` or `targets` for data that is not a .csv (an .npz's channels are its X, its
    targets its `targets`), a lag that is not a whole number below each split's longest
    recording, and the file errors of the readers."""
    ds = _open(spec, features, strict=True, targets=targets)
    return with_lag(ds, persistence_lag)


def with_lag(ds: Dataset, lag, where: str | None = None) -> Dataset:
    """`ds` with its persistence lag set to `lag` (None: as it is), checked against each split's
    longest recording (the baseline needs a reading past it); DataError, starting with `where`
    (default: the data's name), for data without targets or a lag that is not a whole number
    that fits."""
    if lag is None:
        return ds
    where = f"'{ds.name}': " if where is None else where
    if ds.target_names is None:
        raise DataError(f"{where}a persistence lag applies to regression data, and it has no targets")
    longest = int(min(ds.train.lengths.max(), ds.test.lengths.max()))
    if isinstance(lag, bool) or not isinstance(lag, (int, np.integer)) or not 1 <= lag < longest:
        raise DataError(f"{where}persistence_lag must be one whole number of readings from 1 to {longest - 1} (each "
                        f"split's longest recording holds {longest} or more; the baseline needs a reading past it), "
                        f"got {lag!r}; give a smaller lag or longer recordings")
    ds.persistence_lag = int(lag)
    return ds


def _open(spec: str, features, strict: bool, targets=None) -> Dataset:
    """`load_dataset`; strict False (`data_for_model`): a .csv that lacks one of `features`
    is read with the columns found by their content instead, so that the caller can name the
    model's channels and the data's in its refusal; `features` is ignored for other data."""
    from edgeseq.data.files import _load_csv, _load_npz   # here, not at the top: files.py builds on Split and Dataset

    if features is not None and strict and Path(spec).suffix.lower() != ".csv":
        raise DataError(f"features pick the columns of a .csv file, and data '{spec}' is not one (an .npz's channels "
                        "are its X); save the data with only the channels to train on, or as a .csv")
    if targets and strict and Path(spec).suffix.lower() != ".csv":
        raise DataError(f"targets pick the columns of a .csv file, and data '{spec}' is not one (an .npz carries its "
                        "own targets array); leave the target columns out")
    if spec in EMBEDDED:
        ds = _load_npz(EMBEDDED[spec], name=spec)
        ds.source = spec
        return ds
    path = Path(spec)
    if not path.exists():
        raise DataError(f"data '{spec}' not found: give {' or '.join(repr(k) for k in EMBEDDED)} or a path to a "
                        ".npz or .csv file")
    if not path.is_file():
        raise DataError(f"data '{spec}' is not a file: give a path to a .npz or .csv file")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        ds = _load_npz(path, name=path.stem)
    elif suffix == ".csv":
        ds = _load_csv(path, features, strict, targets)
    else:
        raise DataError(f"data file '{spec}' must end in .npz or .csv")
    ds.source = str(path.resolve())
    ds.sha256 = file_sha256(path)
    return ds


def check_unchanged(trained: str | None, sha256: str | None, who: str = "the model") -> None:
    """DataError (one line, says to pass --data) where `trained`, a data file a model recorded
    with its `sha256`, has other bytes now; nothing where either is None or the data is embedded."""
    if trained not in (None, *EMBEDDED) and sha256 and Path(trained).is_file() and file_sha256(trained) != sha256.lower():
        raise DataError(f"{who} was trained on '{trained}', which has changed since (its sha256 is not the one the "
                        "model records), so its test split may now hold sequences the model trained on; pass --data "
                        f"'{trained}' to score on the file as it is now, or restore it")


def file_sha256(path) -> str:
    """The sha256 of a file's bytes, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


HOLDOUT_SEED = 0   # the test split a file without one gets: fixed, so every command reads the same split
REDRAWS = 100      # group hold-out: draws tried for one that leaves the rest every class


def holdout(split: Split, fraction: float = 0.25, seed: int = HOLDOUT_SEED, where: str = "the data",
            what: str = "a test split", remedy: str = "add X_test/y_test (a split column in a .csv) or more data"):
    """(rest, held out): a deterministic hold-out of about `fraction` of the sequences.

    Without groups: the last `fraction` of each class, in file order (`seed` unused). With
    groups (`split.groups`): whole groups, never one on both sides, drawn in a seeded order
    (numpy's default_rng(seed)) and taken until they hold `fraction` of the sequences, at
    least one group and never all; the first of up to REDRAWS orders whose rest keeps every
    class is used. Raises DataError, one line that names `where` and says `remedy`, when too
    few sequences or fewer than 2 groups leave nothing to hold out, or when no draw leaves the
    rest every class (groups of a single class each)."""
    if split.groups is not None:
        return _group_holdout(split, fraction, seed, where, what, remedy)
    test = np.zeros(len(split), bool)
    for c in np.unique(split.y):
        idx = np.flatnonzero(split.y == c)
        k = int(round(len(idx) * fraction)) if len(idx) > 1 else 0
        if k:
            test[idx[-k:]] = True
    if not test.any():
        raise DataError(f"too few sequences to hold out {what}; {remedy}")
    return split.take(~test), split.take(test)


def _group_holdout(split, fraction, seed, where, what, remedy):
    names, index, sizes = np.unique(split.groups, return_inverse=True, return_counts=True)
    if len(names) < 2:
        raise DataError(f"{where} names one group ('{names[0]}') and {what} takes whole groups, so it needs at "
                        f"least 2; add sequences from another subject, device or session, or {remedy}")
    rng = np.random.default_rng(seed)
    target = max(1, round(len(split) * fraction))
    classes = set(np.unique(split.y).tolist())
    for _ in range(REDRAWS):
        held, n = np.zeros(len(names), bool), 0
        for g in rng.permutation(len(names))[:-1]:         # one group at least stays
            held[g], n = True, n + sizes[g]
            if n >= target:
                break
        test = held[index]
        if set(np.unique(split.y[~test]).tolist()) == classes:
            break
    else:
        lone = [str(g) for g in names if len(np.unique(split.y[split.groups == g])) == 1]
        raise DataError(f"{where}: no hold-out of whole groups for {what} keeps every class in the rest ({len(lone)} "
                        f"of the {len(names)} groups hold a single class), and training needs every class; add "
                        f"groups that hold several classes, or {remedy}")
    return split.take(~test), split.take(test)
