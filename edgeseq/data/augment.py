"""Augmentation of sensor readings for training: seeded, numpy only, training split only.

Each epoch, `train` draws new versions of the training sequences (never the validation or
test split) from a generator seeded with the run's seed, so a seed gives the same weights:

- **time warp** (`timewarp`): the sequence is resampled along a smooth random time axis; its
  speed is a cosine-interpolated curve through `KNOTS` + 2 values drawn from N(1, strength)
  (at least `MIN_SPEED`). The first and last readings and the length stay; labels follow.
- **rotation** (`rotate`, degrees): one rotation per sequence about a random axis, by an angle
  drawn uniformly within +-strength, applied to every 3-axis triple (accelerometer, gyroscope,
  magnetometer: one device frame, so one rotation), as when a watch sits another way on the
  wrist. Each triple's norm stays; no other channel changes.
- **scaling** (`scale`): every channel of a sequence times a gain drawn from N(1, strength).
- **magnitude warping** (`magwarp`): every channel times its own smooth curve through
  `KNOTS` + 2 values drawn from N(1, strength).
- **jitter** (`jitter`): Gaussian noise with a standard deviation of strength x the channel's
  standard deviation in the training split, so the strength means the same in any unit.
- **cut and join** (`join`, for the training streams): the streams join the training sequences
  end to end, as the never-reset protocol does; with `join` p, each sequence is first cut in
  two at a random point (within its middle 80 %) with probability p, and the pieces are
  shuffled before they are joined, so the activity changes at random phases and after random
  durations. The single sequences (the per-sequence loss) stay whole.

A strength of 0 turns a transform off; `NONE` is all off. Readings past a sequence's length
stay zero, and channels that do not vary in training (`Normalization.constant`) are left as
they are. Settings come as `augment=none|default` and `augment.NAME=VALUE` (`parse_settings`).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from edgeseq.data import Split
from edgeseq.errors import DataError, UsageError, printable

KNOTS = 4             # interior knots of the time-warp and magnitude-warp curves: 1 to 2 bends per 100 readings
MIN_SPEED = 0.1       # time warp: the slowest the warped clock may run, so it never stops or turns back
CUT_MARGIN = 0.1      # cut and join: cuts fall within a sequence's middle 80 %, so no piece is a sliver
STREAM = 0x617567     # the augmentation generator's stream: seeded by (seed, STREAM), apart from training's own


@dataclass(frozen=True)
class Augment:
    """The strength of each transform (0: off) and the channels rotated; `check_augment` holds
    the strengths to `STRENGTHS`' ranges."""
    jitter: float = 0.0      # noise std, as a share of each channel's training std
    scale: float = 0.0       # std of each channel's gain per sequence (around 1)
    magwarp: float = 0.0     # std of the smooth gain curve's knots (around 1)
    timewarp: float = 0.0    # std of the smooth time-speed curve's knots (around 1)
    rotate: float = 0.0      # largest rotation of the 3-axis triples, degrees
    triples: object = "auto"  # "auto": found from channel names (`find_triples`); "none"; or [[x, y, z], ...]
    join: float = 0.0        # training streams: chance that a sequence is cut in two before the join

    @property
    def active(self) -> bool:
        return any(getattr(self, f) > 0 for f in STRENGTHS)


# strength -> (largest, what it is): the ranges `check_augment` holds them to.
STRENGTHS = {
    "jitter": (1.0, "the noise std as a share of the channel's std"),
    "scale": (1.0, "the std of the gain around 1"),
    "magwarp": (1.0, "the std of the gain curve around 1"),
    "timewarp": (1.0, "the std of the time-speed curve around 1"),
    "rotate": (180.0, "the largest angle in degrees"),
    "join": (1.0, "the chance a sequence is cut before the join"),
}
NONE = Augment()
# Several channels: it helped both protocols on BasicMotions (scripts/measure_augment.py, docs/augment.md).
DEFAULT = Augment(jitter=0.05, scale=0.1, magwarp=0.1, timewarp=0.1, rotate=15.0, join=0.5)
# One channel: noise and the streams' cut and join only. With one channel its amplitude and
# timing are all a model sees, and a gain, a gain curve or a time warp may change the class
# (appliance power levels): on ACSF1 the full set held the GRU to 0.56 training accuracy, 0.52
# on the test split, and this to 0.84 and 0.82 (scripts/measure_ucr.py, docs/training.md).
LIGHT = Augment(jitter=0.05, join=0.5)
NAMED = {"none": NONE, "default": DEFAULT, "light": LIGHT}
AUTO = "auto"         # the training default: DEFAULT on several channels, LIGHT on one (`for_data`)


def for_data(aug, features) -> tuple:
    """(Augment, why) for data with channels `features`: `aug` itself where it is not AUTO;
    for AUTO, DEFAULT on several channels (motion data with 3-axis triples, which it also
    rotates, or other multichannel data: it held or raised both protocols on BasicMotions and
    JapaneseVowels), LIGHT on a single channel, whose gain and timing may be the class."""
    if not (isinstance(aug, str) and aug == AUTO):
        return check_augment(aug), "as set"
    triples = find_triples(features)
    if triples:
        names = ", ".join("/".join(str(features[i]) for i in t) for t in triples)
        return DEFAULT, f"auto: motion data (3-axis {names}), so the full set"
    if len(features) > 1:
        return DEFAULT, f"auto: {len(features)} channels, so the full set (no 3-axis triple to rotate)"
    return LIGHT, "auto: one channel, so jitter and join only (its gain and timing kept)"


def check_augment(aug) -> Augment:
    """`aug` as an Augment: an Augment, a name ('none', 'default', 'light') or a dict of its
    fields; AUTO stays AUTO (`for_data` resolves it once the channels are known). UsageError (one
    line) for an unknown name or field, or a strength out of range."""
    if isinstance(aug, str):
        if aug == AUTO:
            return AUTO
        if aug not in NAMED:
            raise UsageError(f"augment takes {', '.join([AUTO, *NAMED])}, got '{printable(aug)}'; set one "
                             f"transform with augment.NAME=VALUE ({', '.join(STRENGTHS)})")
        return NAMED[aug]
    if isinstance(aug, dict):
        unknown = sorted(set(aug) - {f.name for f in fields(Augment)})
        if unknown:
            raise UsageError(f"augment setting '{unknown[0]}' is unknown; it may be {', '.join(STRENGTHS)} or triples")
        aug = Augment(**aug)
    if not isinstance(aug, Augment):
        raise UsageError(f"augment must be none, default or augment.NAME=VALUE settings, got {aug!r}")
    for name, (hi, what) in STRENGTHS.items():
        v = getattr(aug, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= hi:     # NaN fails too
            raise UsageError(f"augment.{name} ({what}) must be a number in 0..{hi:g}, got {v!r}")
    return replace(aug, triples=_check_triples(aug.triples))


def _check_triples(t):
    if isinstance(t, str) and t in ("auto", "none"):
        return t
    if isinstance(t, str):                    # "acc_x,acc_y,acc_z;gyr_x,gyr_y,gyr_z"
        t = [[c.strip() for c in part.split(",")] for part in t.split(";") if part.strip()]
    if isinstance(t, (list, tuple)) and not t:
        raise UsageError("augment.triples is empty; give auto (found from the channel names), none, or channel names "
                         "in threes (acc_x,acc_y,acc_z;gyr_x,gyr_y,gyr_z)")
    ok = isinstance(t, (list, tuple)) and all(
        isinstance(g, (list, tuple)) and len(g) == 3 and all(isinstance(c, str) and c for c in g) for g in t)
    if not ok:
        raise UsageError(f"augment.triples must be auto, none or channel names in threes (acc_x,acc_y,acc_z;"
                         f"gyr_x,gyr_y,gyr_z), got {t!r}")
    names = [c for g in t for c in g]
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:
        raise UsageError(f"augment.triples names channel '{twice[0]}' more than once; each channel belongs to one triple")
    return [list(g) for g in t]


def parse_settings(settings: dict, base=AUTO, features=None) -> tuple:
    """Split `--set` settings (`edgeseq.train.parse_overrides`) into (model settings, Augment or AUTO).

    `augment` ('auto', 'none', 'default', 'light') replaces `base`; each `augment.NAME` then sets
    one field (a strength, or `triples`) on it, AUTO first resolved for the data's channel names
    `features` (`for_data`). Raises UsageError (one line) for an unknown name or a bad value."""
    model = {k: v for k, v in settings.items() if k != "augment" and not k.startswith("augment.")}
    aug = check_augment(settings.get("augment", base))
    fields_set = {k.split(".", 1)[1]: v for k, v in settings.items() if k.startswith("augment.")}
    if fields_set:
        if aug == AUTO:
            aug = for_data(AUTO, features or [])[0]
        aug = check_augment({**asdict(aug), **fields_set})
    return model, aug


def describe(aug) -> str:
    """'jitter=0.05 rotate=15 ...' (the transforms that are on), or 'none', for an Augment or
    an `Augmenter.summary()` dict (which adds the triples rotated: 'rotate=15 (acc_x/acc_y/acc_z)',
    and in training metrics why 'auto' chose them, in brackets); None is 'none'. Channel names
    are escaped (`printable`)."""
    if aug is None:
        return "none"
    get = aug.get if isinstance(aug, dict) else lambda k: getattr(aug, k)
    on = [f"{k}={get(k):g}" for k in STRENGTHS if get(k) > 0]
    if isinstance(aug, dict) and get("rotate") > 0:
        which = ", ".join("/".join(map(printable, t)) for t in get("triples")) or "no 3-axis channels found"
        on = [f"{c} ({which})" if c.startswith("rotate=") else c for c in on]
    why = aug.get("why") if isinstance(aug, dict) else None
    return (" ".join(on) if on else "none") + (f" [{printable(why)}]" if why and why != "as set" else "")


_AXIS = re.compile(r"^(.+?)[ _.\-]?([xyz])$")


def find_triples(features) -> list:
    """The 3-axis triples among channel names: [[x, y, z] index triples], in the order their
    x channel comes. A triple is three names that differ only in a last letter x, y, z (any
    case) after a shared, non-empty prefix and an optional separator (` `, `_`, `.`, `-`):
    acc_x/acc_y/acc_z, gyrX/gyrY/gyrZ, mag.x/mag.y/mag.z. Lone axes (x, y, z) are not
    guessed: name them with augment.triples."""
    groups = {}
    for i, name in enumerate(features):
        m = _AXIS.match(str(name).strip().lower())
        if m:
            groups.setdefault(m.group(1).rstrip(" _.-"), {}).setdefault(m.group(2), []).append(i)
    out = []
    for axes in groups.values():
        if sorted(axes) == ["x", "y", "z"] and all(len(v) == 1 for v in axes.values()):
            out.append([axes["x"][0], axes["y"][0], axes["z"][0]])
    return sorted(out)


def resolve_triples(aug: Augment, features, constant=None) -> list:
    """Index triples (lists of 3 ints) that `aug` rotates on data with channels `features`:
    `find_triples` for 'auto' (skipping any triple with a constant channel), none for 'none'
    or a zero `rotate`, else the named ones. DataError (one line) names a channel the data lacks,
    rotated or not."""
    names = [str(f) for f in features]
    out = []
    for g in aug.triples if isinstance(aug.triples, list) else ():
        missing = [c for c in g if c not in names]
        if missing:
            raise DataError(f"augment.triples names channel '{missing[0]}', which the data lacks (it has "
                            f"{', '.join(names)}); name three of its channels, or set augment.triples=auto")
        out.append([names.index(c) for c in g])
    if not aug.rotate or aug.triples == "none":
        return []
    if aug.triples == "auto":
        skip = set(np.flatnonzero(constant).tolist()) if constant is not None else set()
        return [t for t in find_triples(names) if not skip & set(t)]
    return out


def rotation_matrices(n: int, degrees: float, rng: np.random.Generator) -> np.ndarray:
    """`n` random rotations (n, 3, 3) float64: a uniformly random axis each, and an angle drawn
    uniformly in [-degrees, degrees] (Rodrigues' formula)."""
    axis = rng.normal(size=(n, 3))
    axis /= np.maximum(np.linalg.norm(axis, axis=1, keepdims=True), 1e-12)
    a = np.deg2rad(rng.uniform(-degrees, degrees, n))[:, None, None]
    K = np.zeros((n, 3, 3))
    K[:, 0, 1], K[:, 0, 2], K[:, 1, 2] = -axis[:, 2], axis[:, 1], -axis[:, 0]
    K = K - K.transpose(0, 2, 1)                                 # skew-symmetric: K v = axis x v
    return np.eye(3) + np.sin(a) * K + (1 - np.cos(a)) * K @ K


def smooth_curves(lengths, knots: int, std: float, rng: np.random.Generator, channels: int = 1) -> list:
    """Per sequence of `lengths` (N,), a smooth curve (length, channels) float64 through
    `knots` + 2 evenly spaced values drawn from N(1, std), cosine-interpolated between them."""
    out = []
    for n in np.asarray(lengths).tolist():
        v = rng.normal(1.0, std, (knots + 2, channels))
        pos = np.linspace(0, knots + 1, max(n, 1))[:n]             # each reading's place among the knots
        j = np.minimum(pos.astype(int), knots)
        w = (1 - np.cos(np.pi * (pos - j)))[:, None] / 2
        out.append(v[j] * (1 - w) + v[np.minimum(j + 1, knots + 1)] * w)
    return out


def time_warp(X: np.ndarray, lengths: np.ndarray, strength: float, rng: np.random.Generator,
              Y: np.ndarray | None = None):
    """Resample each sequence along a smooth random clock: X (N, T, F) float, lengths (N,) ->
    (X', Y') of the same shapes and dtypes (Y (N, T) int labels, nearest reading; None stays
    None). The clock's speed is `smooth_curves` at `strength` (at least MIN_SPEED), scaled
    so that reading 0 and reading length-1 stay where they are."""
    X2 = X.copy()
    Y2 = None if Y is None else Y.copy()
    if strength <= 0:
        return X2, Y2
    for i, (n, speed) in enumerate(zip(lengths.tolist(), smooth_curves(lengths, KNOTS, strength, rng))):
        if n < 3:
            continue
        clock = np.concatenate([[0.0], np.cumsum(np.maximum(speed[1:, 0], MIN_SPEED))])
        t = clock * (n - 1) / clock[-1]                            # (n,) from 0 to n-1, increasing
        t[-1] = n - 1
        lo = np.minimum(t.astype(int), n - 2)
        w = (t - lo)[:, None]
        X2[i, :n] = X[i, lo] * (1 - w) + X[i, lo + 1] * w
        if Y2 is not None:
            Y2[i, :n] = Y[i, np.rint(t).astype(int)]
    return X2, Y2


def rotate(X: np.ndarray, lengths: np.ndarray, triples: list, degrees: float, rng: np.random.Generator) -> np.ndarray:
    """X (N, T, F) float with every index triple in `triples` (lists of 3 ints) rotated by one
    random rotation per sequence (`rotation_matrices`, up to `degrees`): same shape and dtype.
    Other channels, and padding, are copied as they are."""
    X2 = X.copy()
    if degrees <= 0 or not triples:
        return X2
    R = rotation_matrices(len(X), degrees, rng)                     # (N, 3, 3)
    valid = (np.arange(X.shape[1])[None, :] < lengths[:, None])[..., None]
    for t in triples:
        v = np.einsum("nij,ntj->nti", R, X[:, :, t].astype(np.float64))   # (N, T, 3)
        X2[:, :, t] = np.where(valid, v, X[:, :, t])
    return X2


def scale(X, lengths, strength, rng, active=None) -> np.ndarray:
    """X (N, T, F) float times a gain per sequence and channel drawn from N(1, strength): same
    shape and dtype; channels where `active` (F,) bool is False are left as they are."""
    g = rng.normal(1.0, strength, (X.shape[0], 1, X.shape[2])) if strength > 0 else np.ones((1, 1, X.shape[2]))
    return _gain(X, g, active)


def magnitude_warp(X, lengths, strength, rng, active=None) -> np.ndarray:
    """X (N, T, F) float times a smooth gain curve per sequence and channel (`smooth_curves`
    at `strength`): same shape and dtype; inactive channels and padding as they are."""
    if strength <= 0:
        return X.copy()
    g = np.ones(X.shape)
    for i, c in enumerate(smooth_curves(lengths, KNOTS, strength, rng, X.shape[2])):
        g[i, :len(c)] = c
    return _gain(X, g, active)


def jitter(X, lengths, strength, rng, std=None, active=None, asinh_scale=None, gain_floor=None) -> np.ndarray:
    """X (N, T, F) float plus Gaussian noise of std `strength` x `std` (F,) (the channels'
    training std; None: 1) on valid readings: same shape and dtype; inactive channels as they are.
    With `asinh_scale` (F,) (the model's input transform; `std` is then the transformed
    channels' std) the noise is added where the model reads: x -> scale x sinh(asinh(x / scale)
    + noise), in raw units about strength x std x sqrt(x^2 + scale^2) (the transform's local
    slope), so a reading a thousand times smaller gets noise a thousand times smaller; results
    stay finite in float32. With `gain_floor` (F,) (the model's gain stage; `std` then has its
    F + G features' stds, of which the first F are used) a gained channel's noise is in units
    of its running level (`edgeseq.data.gain_levels`, from each sequence's start): added where
    the model reads, after the stage."""
    if strength <= 0:
        return X.copy()
    s = np.ones(X.shape[2]) if std is None else np.asarray(std, np.float64)[:X.shape[2]]
    noise = rng.normal(0.0, 1.0, X.shape) * (strength * s)
    if gain_floor is not None:
        from edgeseq.data import gain_levels
        fl = np.asarray(gain_floor, np.float64)
        on = fl > 0
        noise[..., on] *= (np.exp(gain_levels(X, fl)) * np.where(on, fl, 1.0))[..., on]
    noise *= (np.arange(X.shape[1])[None, :] < lengths[:, None])[..., None]
    if active is not None:
        noise[..., ~np.asarray(active, bool)] = 0.0
    if asinh_scale is None:
        return (X + noise).astype(X.dtype)
    a = np.asarray(asinh_scale, np.float64)
    with np.errstate(over="ignore"):
        out = a * np.sinh(np.arcsinh(X.astype(np.float64) / a) + noise)
    big = float(np.finfo(np.float32).max)
    return np.where(noise == 0, X, np.clip(out, -big, big)).astype(X.dtype)


def _gain(X, g, active):
    if active is not None:
        g = np.where(np.asarray(active, bool), g, 1.0)
    return (X * g).astype(X.dtype)


class Augmenter:
    """Draws one epoch's augmented training split: `Augmenter(aug, features, std, constant,
    seed, asinh_scale, gain_floor)(split)`. `std` (F,): the training split's channel std
    (`Normalization.std`, after its input transform `asinh_scale` or gain stage `gain_floor`),
    `constant` (F,) bool: channels left as they are. Raises DataError where `aug.triples`
    names a channel the data lacks."""

    def __init__(self, aug: Augment, features, std=None, constant=None, seed: int = 0, asinh_scale=None,
                 gain_floor=None):
        self.aug = check_augment(aug)
        self.std = std
        self.asinh_scale = asinh_scale
        self.gain_floor = gain_floor
        self.active = None if constant is None else ~np.asarray(constant, bool)[:len(features)]
        self.triples = resolve_triples(self.aug, features, constant)
        self.features = [str(f) for f in features]
        self.rng = np.random.default_rng([seed, STREAM])

    def __call__(self, split: Split) -> Split:
        """A new Split (the same shapes, dtypes, classes and lengths; `split` is not changed)."""
        a, rng, L = self.aug, self.rng, split.lengths
        X, Y = time_warp(split.X, L, a.timewarp, rng, split.Y)
        X = rotate(X, L, self.triples, a.rotate, rng)
        X = scale(X, L, a.scale, rng, self.active)
        X = magnitude_warp(X, L, a.magwarp, rng, self.active)
        X = jitter(X, L, a.jitter, rng, self.std, self.active, self.asinh_scale, self.gain_floor)
        return Split(X, split.y, split.lengths, Y, split.groups)

    def summary(self) -> dict:
        """What this run applies, for metrics: the strengths and the triples rotated, by name."""
        out = {k: getattr(self.aug, k) for k in STRENGTHS}
        out["triples"] = [[self.features[i] for i in t] for t in self.triples]
        return json.loads(json.dumps(out))


def cut_pieces(lengths: np.ndarray, order: np.ndarray, p: float, rng: np.random.Generator) -> list:
    """The pieces [(sequence, start, stop)] a stream joins: the sequences in `order`, each cut
    in two at a uniform point of its middle (1 - 2 CUT_MARGIN) share with probability `p`,
    then all pieces shuffled. p 0 gives the sequences whole, in `order`."""
    if p <= 0:
        return [(int(i), 0, int(lengths[i])) for i in order]
    parts = []
    for i in order:
        n = int(lengths[i])
        lo, hi = max(1, int(np.ceil(n * CUT_MARGIN))), min(n - 1, int(n * (1 - CUT_MARGIN)))
        if rng.random() < p and lo <= hi:
            c = int(rng.integers(lo, hi + 1))
            parts += [(int(i), 0, c), (int(i), c, n)]
        else:
            parts.append((int(i), 0, n))
    return [parts[k] for k in rng.permutation(len(parts))]
