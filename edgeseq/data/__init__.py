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
.csv's columns beyond the model's are ignored, as `stream` ignores them. Labels are matched by
name too (`align_labels`): the data's classes are put in a classifier's label order, data with
only some of its labels is accepted, a label it does not predict is refused. The
commands that evaluate a model read the data it was trained on unless told otherwise
(`data_for_model`; an exported file records it, see `trained_on`). The file readers and their
checks are in `edgeseq.data.files`; `Split`, `Dataset` and the rules any data follows, however
read, in `edgeseq.data.dataset`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeseq.data.dataset import (  # noqa: F401  (importable from here, as always)
    CHANNELS_REMEDY, F32_MAX, HOLDOUT_SEED, LABELS_REMEDY, REDRAWS, Dataset, Split, _generic, _shown, align_features,
    align_labels, holdout, parse_float, with_lag)
from edgeseq.data.files import _load_csv, _load_npz
from edgeseq.errors import DataError

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
DATA_REMEDY = "pass --data with the model's training data, or other data with its channels"  # commands with --data


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
    channel and class names (labels None: not checked; else the data's class ids are put in
    the model's label order by name, `Dataset.for_labels`, and the result reports the model's
    labels: data with only some of them is accepted); `model` names it in messages;
    trained_sha256: the recorded file's sha256 when it was trained (None: not checked);
    targets: a regression model's target names, the columns a .csv's targets are read from.
    A .csv is read for the model's named channels only (`load_dataset(features=...)`), so a
    column the model was not trained on (excluded with `--features`, say) is not read at all;
    a .csv that lacks one of them is read as it is, and refused as below.
    Raises DataError, one line that says to pass --data: the recorded file no longer exists
    (naming it) or has changed since (its test split, carved anew, could hold sequences the
    model trained on), the data's channels are not the model's (naming both,
    `align_features`), or it has labels the model does not predict (`align_labels`)."""
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
    return ds if labels is None else ds.for_labels(labels, f"data '{ds.name}'", LABELS_REMEDY)


F32_TINY = float(np.finfo(np.float32).tiny)

CONSTANT = 1e-6   # a channel whose std is at most this fraction of its magnitude is constant


ASINH_RANGE = 1000.0  # auto input transform: a channel whose sequences' amplitudes span this ratio or more
ASINH_KNEE = 0.01     # asinh scale of such a channel: this share of its median sequence amplitude
F32_MAX_4 = float(np.finfo(np.float32).max) / 4
ASINH_LINEAR = 1e4    # asinh scale of the other channels: this many times their largest |reading|, where
                      # asinh(x / s) * s equals x to float32 precision ((x / s)^2 / 6 < 2e-9 relative)
INPUT_TRANSFORMS = ("auto", "asinh", "gain", "none")
GAIN_RELEASE = 0.1    # the gain stage's level falls by at most this many nepers a reading (about 10 readings
                      # an e-fold); 0.05 and 0.1 measured on PLAID in CHANGELOG ("a gain control")
GAIN_FLOOR = 1e-3     # the level's floor on a gained channel: this share of its 10th-percentile sequence
                      # amplitude (the zero state means "no level yet": the first reading above it sets it)
GAIN_ARCHS = ("rnn", "gru", "lstm", "ssm")   # the architectures whose step carries the gain stage's state


def sequence_amplitudes(split: Split) -> np.ndarray:
    """float64 [N, F]: each sequence's amplitude per channel, the 95th percentile of |reading|
    over its valid readings."""
    X, L = split.X, split.lengths
    out = np.zeros((len(L), X.shape[2]))
    for i, n in enumerate(L):
        if n:
            out[i] = np.quantile(np.abs(X[i, :n].astype(np.float64)), 0.95, axis=0)
    return out


def asinh_scales(split: Split, mode: str = "auto", names=None) -> tuple:
    """(asinh scale float64 [F] or None, why: str): the input transform a model of this
    training split applies first, asinh(reading / scale) per channel (the inverse hyperbolic
    sine: linear within about one scale of 0, logarithmic beyond, odd, so signed data and
    zeros pass). Amplitudes are each sequence's (`sequence_amplitudes`), over the sequences
    where the channel is not all zeros. mode "none": None. "auto": where a channel's amplitudes
    span ASINH_RANGE or more between their 10th and 90th percentile (appliance currents whose
    loads differ by decades), that channel gets ASINH_KNEE of its median amplitude, and the
    others ASINH_LINEAR x their largest |reading| (float32's largest / 4 at most: linear to
    float32 precision); else None. "asinh": every channel that is not all zeros gets ASINH_KNEE
    of its median amplitude (an all-zero one ASINH_LINEAR). `names`: the channels' names
    for `why`. UsageError for another mode."""
    if mode not in INPUT_TRANSFORMS:
        from edgeseq.errors import UsageError
        raise UsageError(f"input_transform must be one of {', '.join(INPUT_TRANSFORMS)}, got {mode!r}")
    if mode == "none" or not len(split.lengths):
        return None, "none (set)" if mode == "none" else "none"
    F = split.X.shape[2]
    names = [str(n) for n in names] if names is not None else [f"channel {f}" for f in range(F)]
    amp = sequence_amplitudes(split)
    med, span = np.zeros(F), np.ones(F)
    for f in range(F):
        a = amp[amp[:, f] > 0, f]
        if len(a):
            lo, med[f], hi = np.quantile(a, (0.1, 0.5, 0.9))
            span[f] = hi / max(lo, F32_TINY)
    wide = (span >= ASINH_RANGE) & (med > 0) if mode == "auto" else med > 0
    if not wide.any():
        return None, (f"none: no channel's sequence amplitudes span {ASINH_RANGE:g}x or more "
                      f"(widest {np.max(span):.3g}x)") if mode == "auto" else "none: every channel is all zeros"
    mask = np.arange(split.X.shape[1])[None, :] < split.lengths[:, None]
    top = np.abs(split.X[mask].astype(np.float64)).max(0)
    linear = np.minimum(np.where(top > 0, top, 1.0) * ASINH_LINEAR, F32_MAX_4)
    scale = np.where(wide, np.maximum(med * ASINH_KNEE, F32_TINY), linear)
    why = "asinh on " + ", ".join(f"{names[f]} (amplitudes span {span[f]:.3g}x, scale {scale[f]:.3g})"
                                  for f in np.flatnonzero(wide))
    rest = [names[f] for f in np.flatnonzero(~wide)]
    if rest:
        why += "; linear: " + ", ".join(rest)
    return scale, why + (" [auto]" if mode == "auto" else " [set]")


def gain_floors(split: Split, mode: str = "auto", names=None) -> tuple:
    """(gain floor float64 [F], 0 on a channel the stage leaves as it is, or None; why: str): the
    channels a model of this training split reads through the gain stage (`gain_features`).
    mode "auto": those whose sequence amplitudes (`sequence_amplitudes`) span ASINH_RANGE or
    more between their 10th and 90th percentile, as `asinh_scales` finds them; "gain": every
    channel that is not all zeros. A gained channel's floor is GAIN_FLOOR x its 10th-percentile
    amplitude, and at least 1,000 x its largest |reading| / (float32 max / 4), so that a run's
    reading bound (floor x float32 max / 4, `edgeseq.runtime.session_checks.reading_bounds`)
    covers every training reading with room. None where no channel qualifies."""
    F = split.X.shape[2]
    names = [str(n) for n in names] if names is not None else [f"channel {f}" for f in range(F)]
    if not len(split.lengths):
        return None, "none"
    amp = sequence_amplitudes(split)
    mask = np.arange(split.X.shape[1])[None, :] < split.lengths[:, None]
    top = np.abs(split.X[mask].astype(np.float64)).max(0)
    floor, span = np.zeros(F), np.ones(F)
    for f in range(F):
        a = amp[amp[:, f] > 0, f]
        if len(a):
            lo, hi = np.quantile(a, (0.1, 0.9))
            span[f] = hi / max(lo, F32_TINY)
            if mode == "gain" or span[f] >= ASINH_RANGE:
                floor[f] = max(lo * GAIN_FLOOR, top[f] / F32_MAX_4 * 1e3, 1e-30)
    if not (floor > 0).any():
        return None, "none"
    why = "gain on " + ", ".join(f"{names[f]} (amplitudes span {span[f]:.3g}x, floor {floor[f]:.3g})"
                                 for f in np.flatnonzero(floor > 0))
    rest = [names[f] for f in np.flatnonzero(floor == 0)]
    return floor, why + ("; linear: " + ", ".join(rest) if rest else "") + (" [auto]" if mode == "auto" else " [set]")


def gain_levels(x: np.ndarray, floor, release: float = GAIN_RELEASE, u0=None) -> np.ndarray:
    """The gain stage's state after each reading, float64 [..., T, F], of raw readings x
    [..., T, F] from the state u0 [..., F] (None: zeros, no level yet). On a channel with
    floor > 0: u_t = max(log(max(|x_t|, floor) / floor), u_{t-1} - release), the log of the
    channel's envelope over its floor, which follows a rise at once and falls by at most
    `release` nepers a reading; 0 on the others. Computed as a running maximum, u_t =
    max(max_{s<=t}(lx_s + release s) - release t, u0 - release (t + 1))."""
    x = np.asarray(x, np.float64)
    fl = np.asarray(floor, np.float64)
    on = fl > 0
    safe = np.where(on, fl, 1.0)
    lx = np.log(np.maximum(np.abs(x), safe) / safe)
    t = np.arange(x.shape[-2], dtype=np.float64)[:, None]
    u = np.maximum.accumulate(lx + release * t, axis=-2) - release * t
    if u0 is not None:
        u = np.maximum(u, np.asarray(u0, np.float64)[..., None, :] - release * (t + 1))
    return np.where(on, u, 0.0)


def gain_features(x: np.ndarray, floor, release: float = GAIN_RELEASE, u0=None) -> np.ndarray:
    """What the gain stage makes of raw readings x [..., T, F] (from state u0, `gain_levels`),
    float64 [..., T, F + G], G the gained channels (floor > 0): each reading divided by its
    channel's level (floor x exp(u), so within -1..1 on a gained channel; the others as they
    are), then the G log levels, log(floor) + u, in channel order. The graph computes the same
    per reading (Abs, Max, Div, Log, Sub, Max, Add, Exp, Div, Gather, Concat) in float32."""
    fl = np.asarray(floor, np.float64)
    on = fl > 0
    level = np.where(on, gain_levels(x, fl, release, u0) + np.log(np.where(on, fl, 1.0)), 0.0)
    return np.concatenate([np.asarray(x, np.float64) / np.exp(level), level[..., on]], -1)


def model_inputs(names: list, floor) -> list:
    """The names of what a model reads, F + G: the channels `names`, then "level of NAME" for
    each channel the gain stage gains (`floor` > 0; None: the channels alone)."""
    names = [str(n) for n in names]
    return names if floor is None else names + [f"level of {names[f]}" for f in np.flatnonzero(np.asarray(floor) > 0)]


def asinh_forward(x: np.ndarray, scale) -> np.ndarray:
    """Readings [..., F] through the input transform as the graph computes it (float32
    Div, then Asinh); `scale` None: x as it is."""
    if scale is None:
        return x
    return np.arcsinh(np.asarray(x, np.float32) / np.asarray(scale, np.float32)).astype(np.float32)


@dataclass(frozen=True)
class Normalization:
    mean: np.ndarray  # float32 [F]
    std: np.ndarray   # float32 [F]
    constant: np.ndarray | None = None   # bool [F]: channels that did not vary in the data fitted on
    asinh_scale: np.ndarray | None = None  # float32 [F]: the input transform asinh(x / scale) before the
                                           # mean and std (`asinh_scales`); None: none
    transform_why: str = ""
    asinh_reach: np.ndarray | None = None  # float32 [F]: with the transform, the training readings' largest
                                           # |value| per channel (the integer step's thresholds cover it)
    gain_floor: np.ndarray | None = None   # float32 [F]: the gain stage's floors (`gain_floors`; 0: channel
                                           # left as it is), mean and std then have F + G entries; None: none
    gain_release: float = GAIN_RELEASE

    @property
    def levels(self) -> int:
        """G: the log levels the gain stage adds to each reading (0 without one)."""
        return 0 if self.gain_floor is None else int((np.asarray(self.gain_floor) > 0).sum())

    @classmethod
    def fit(cls, split: Split, features: list | None = None, transform: str = "none",
            gain: bool = False) -> "Normalization":
        """Per-feature mean and std over every valid training reading, computed in float64,
        after the input transform `transform` chooses (`asinh_scales`: "auto", "asinh" or
        "none"; "gain": the gain stage, `gain_floors`). `gain`: whether the model can carry
        the gain stage (`GAIN_ARCHS`, classifiers): "auto" then takes it, not asinh, for the
        channels whose amplitudes span decades; without it "gain" is a UsageError. With the
        gain stage the features are `gain_features` of each sequence from the zero state
        (F + G of them).

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
        floor = None
        if transform == "gain" and not gain:
            from edgeseq.errors import UsageError
            raise UsageError("input_transform=gain runs on " + ", ".join(GAIN_ARCHS) + " classifiers only; "
                             "use input_transform=asinh or auto for this model")
        if transform == "gain" or transform == "auto" and gain:
            floor, why = gain_floors(split, transform, names)
        if floor is not None:
            scale = None
            values = np.concatenate([gain_features(split.X[i, :n], floor) for i, n in enumerate(split.lengths) if n])
            names = model_inputs(names, floor)
        else:
            scale, why = asinh_scales(split, "auto" if transform == "gain" else transform, names)
        reach = None
        if scale is not None:
            scale = scale.astype(np.float32)
            reach = np.maximum(np.abs(values).max(0), F32_TINY).astype(np.float32)
            values = asinh_forward(values, scale).astype(np.float64)
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
        return cls(mean.astype(np.float32), std.astype(np.float32), constant, scale, why, reach,
                   None if floor is None else floor.astype(np.float32))

    def to_json(self):
        out = {"mean": self.mean.tolist(), "std": self.std.tolist()}
        if self.gain_floor is not None:
            out["gain_floor"] = np.asarray(self.gain_floor, np.float32).tolist()
            out["gain_release"] = float(self.gain_release)
        if self.asinh_scale is not None:
            out["asinh_scale"] = np.asarray(self.asinh_scale, np.float32).tolist()
            if self.asinh_reach is not None:
                out["asinh_reach"] = np.asarray(self.asinh_reach, np.float32).tolist()
        return out

    @classmethod
    def from_json(cls, d):
        s, r = d.get("asinh_scale"), d.get("asinh_reach")
        g = d.get("gain_floor")
        return cls(np.asarray(d["mean"], np.float32), np.asarray(d["std"], np.float32),
                   asinh_scale=None if s is None else np.asarray(s, np.float32),
                   asinh_reach=None if r is None else np.asarray(r, np.float32),
                   gain_floor=None if g is None else np.asarray(g, np.float32),
                   gain_release=float(d.get("gain_release", GAIN_RELEASE)))

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Raw readings [..., T, F] -> what the model reads [..., T, F + G], float32: the input
        transform (the gain stage from the zero state at each sequence's start), then
        (x - mean) / std, as the graph's first nodes compute it."""
        if self.gain_floor is not None:
            x = gain_features(x, self.gain_floor, self.gain_release)
        return ((asinh_forward(x, self.asinh_scale) - self.mean) / self.std).astype(np.float32)


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


def _open(spec: str, features, strict: bool, targets=None) -> Dataset:
    """`load_dataset`; strict False (`data_for_model`): a .csv that lacks one of `features`
    is read with the columns found by their content instead, so that the caller can name the
    model's channels and the data's in its refusal; `features` is ignored for other data."""
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
