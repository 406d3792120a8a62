"""A data set in memory, `Split` and `Dataset`, and the rules any data follows however it was
read: channels and a classifier's labels matched by name (`align_features`, `align_labels`),
the deterministic hold-out of a test split (`holdout`), the persistence lag (`with_lag`) and a
number as data files write one (`parse_float`). numpy only. `edgeseq.data` re-exports all of
it (its docstring has the file layouts); the readers in `edgeseq.data.files` build on this
module, below the package."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from edgeseq.errors import DataError, printable

CHANNELS_REMEDY = "give data with the model's channels, named as in training"
LABELS_REMEDY = "pass --data with the model's training data, or other data with its labels"

F32_MAX = float(np.finfo(np.float32).max)

HOLDOUT_SEED = 0   # the test split a file without one gets: fixed, so every command reads the same split
REDRAWS = 100      # group hold-out: draws tried for one that leaves the rest every class


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

    def classes(self, order) -> "Split":
        """The same sequences with each class id c (in `y` and every reading's `Y`) as order[c]
        (see `align_labels`); -1 (no label: padding) stays -1."""
        order = np.asarray(order, np.int64)

        def remap(ids):
            ids = np.asarray(ids, np.int64)
            return np.where(ids >= 0, order[np.clip(ids, 0, None)], ids)
        return Split(self.X, remap(self.y), self.lengths, remap(self.Y), self.groups, self.targets)


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

    def for_labels(self, model_labels, where: str | None = None, remedy: str = LABELS_REMEDY) -> "Dataset":
        """This data with its class ids in a classifier's label order (`align_labels`: matched by
        name), reporting the model's labels; a class of the model that the data lacks simply has
        no sequences. Labels the model does not know are refused (DataError)."""
        order = align_labels(self.labels, model_labels, where or f"data '{self.name}'", remedy)
        if order is None:
            return self
        return replace(self, train=self.train.classes(order), test=self.test.classes(order),
                       labels=list(model_labels))


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


def align_labels(dataset_labels, model_labels, where: str, remedy: str = LABELS_REMEDY):
    """The one rule for scoring data against a classifier: labels are matched by name.

    Returns None when the data's labels are the model's, in its order; else the index array
    that maps each of the data's class ids to the model's (`Split.classes`): the same labels
    in another order are reordered, and data with only some of the model's labels is
    accepted. Labels the model does not predict are refused (DataError, one line naming the
    data's labels and the model's, and which the model does not know where some are shared).
    `where` names the data in messages; `remedy` ends them."""
    model = [str(x) for x in model_labels]
    data = [str(x) for x in dataset_labels]
    if data == model:
        return None
    index = {n: i for i, n in enumerate(model)}
    unknown = [n for n in data if n not in index]
    if unknown:
        detail = f" (it does not know {_shown(unknown)})" if len(unknown) < len(data) else ""
        raise DataError(f"{printable(where)} has the labels {_shown(data)} but the model predicts {_shown(model)}"
                        f"{detail}; {remedy}")
    return np.array([index[n] for n in data], dtype=np.int64)


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
