"""Cross-fitting: every training sequence predicted by a model trained without it.

`edgeseq calibrate --split cross` searches the decision settings on these out-of-fold
predictions instead of on sequences the model trained on: the training split is cut into
`folds` parts (whole groups where the data names them, else single sequences, each class
spread evenly over the parts), a model of the same architecture and settings is trained on all parts but one,
and the part it did not see is joined into never-reset streams and run through it in torch
(`stream_logits`, the numbers the exported file's parity tests hold to). The folds' models
are thrown away; what is kept is their probabilities. Stone 1974 ("Cross-validatory choice
and assessment of statistical predictions", JRSS B 36(2)) is the method; scikit-learn's
`cross_val_predict` is the usual tool for it on models it trains.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from edgeseq.data import Dataset, Split
from edgeseq.errors import DataError, UsageError, printable
from edgeseq.runtime.calibrate import CROSS_FOLDS as FOLDS
from edgeseq.runtime.calibrate import check_folds
from edgeseq.train.checkpoint import model_from_checkpoint
from edgeseq.train.config import DEFAULTS, TrainConfig
from edgeseq.train.loop import stream_logits, train

DEALS = 20           # seeded orders tried before data whose parts cannot all teach every class is refused


def fold_of(split: Split, folds: int = FOLDS, seed: int = 0, labels=None) -> np.ndarray:
    """The part (0 .. folds - 1) each sequence of `split` is held out in, int64 [N].

    The units dealt are whole groups where the split names them, else single sequences; a
    unit's classes are every label its readings carry (`split.Y`, not only the last). Units are
    dealt in a seeded order, rarest class first, each to the part that holds fewest units of
    its classes (then the fewest sequences), so every part holds about the same share of every
    class and every class sits in two parts at least: each part's model then trains on every
    class. Where a deal leaves a class in one part, DEALS seeded orders are tried before giving
    up. `labels`: class names for messages (default: the class ids).

    Raises UsageError, one line saying what to do, when `folds` is outside 2 .. CROSS_FOLDS_MAX, when
    a class has one unit only (no part without it could learn it), when there are fewer units
    than `folds`, or when no deal tried spreads every class over two parts."""
    folds = check_folds(folds)
    name = (lambda c: printable(str(labels[c]))) if labels is not None else (lambda c: str(c))   # noqa: E731
    what = "groups" if split.groups is not None else "training sequences"
    unit = np.unique(split.groups, return_inverse=True)[1] if split.groups is not None else np.arange(len(split))
    n = int(unit.max()) + 1 if len(unit) else 0
    classes = [set() for _ in range(n)]
    for i in range(len(split)):
        y = split.Y[i, :split.lengths[i]]
        classes[unit[i]].update(int(c) for c in np.unique(y[y >= 0]))
    size = np.bincount(unit, minlength=n)
    units_of = {}
    for u, cs in enumerate(classes):
        for c in cs:
            units_of[c] = units_of.get(c, 0) + 1
    lone = sorted(c for c, k in units_of.items() if k < 2)
    if lone:
        one = "one group" if split.groups is not None else "one training sequence"
        raise UsageError(f"class '{name(lone[0])}' is in {one} only, so the part holding it would leave its model "
                         f"without that class; cross-fitting needs each class in two {what} at least: use --split "
                         "train")
    if n < folds:
        raise UsageError(f"{n} {what} are fewer than --folds {folds}; give --folds {n} or fewer")
    rng = np.random.default_rng(seed)
    for _ in range(DEALS):
        order = sorted(rng.permutation(n), key=lambda u: min((units_of[c] for c in classes[u]), default=n + 1))
        count = np.zeros((folds, max(units_of) + 1), np.int64)
        held, part = np.zeros(folds, np.int64), np.zeros(n, np.int64)
        for u in order:
            cs = sorted(classes[u])
            k = min(range(folds), key=lambda f: (int(count[f, cs].sum()), int(held[f]), f))
            part[u] = k
            count[k, cs] += 1
            held[k] += size[u]
        stuck = [c for c in units_of if (count[:, c] > 0).sum() < 2]
        if not stuck:
            return part[unit]
    raise UsageError(f"no way of dealing the {what} into {folds} parts tried puts class '{name(stuck[0])}' in two "
                     f"of them, so one part's model would not learn it; try fewer --folds, or use --split train")


def out_of_fold(arch: str, dataset: Dataset, folds: int = FOLDS, orders: int = 20, seed: int = 0,
                train_config: TrainConfig | None = None, config: dict | None = None,
                say=None) -> dict:
    """Out-of-fold class probabilities of `dataset.train` on never-reset streams.

    For each part of `fold_of(dataset.train, folds, seed)`: train `arch` (`train_config`, default
    the architecture's DEFAULTS; `config`, model settings such as a model file's or checkpoint's
    config, whose n_features and n_classes are left to the data) on the other
    parts, join the held-out part's sequences in `orders` seeded orders (seed + part) and run the
    streams through that model, never reset. `say(line)` is told of each part as it finishes.

    Returns {"blocks": [(P float32 [orders, L_k, C], Y int64 [orders, L_k]) per part],
    "folds", "held": sequences held out per part, "seconds": training seconds per part,
    "train_accuracy": per part, "converged": per part, the training schedule's verdict}. Raises UsageError (`fold_of`; an architecture that does not
    stream, e.g. bigru) and what `train` raises."""
    from edgeseq.runtime.never_reset import joined_streams
    from edgeseq.models import FROM_DATA, build_model, make_config
    fold = fold_of(dataset.train, folds, seed, dataset.labels)
    model_overrides = {k: v for k, v in (config or {}).items() if k not in FROM_DATA}
    probe = build_model(arch, make_config(arch, n_features=dataset.n_features, n_classes=len(dataset.labels),
                                          **model_overrides))
    if not hasattr(probe, "forward_stream"):
        raise UsageError(f"'{arch}' reads a whole sequence at once (no never-reset stream): cross-fitting "
                         "scores streams; use --split train")
    out = {"blocks": [], "folds": folds, "held": [], "seconds": [], "train_accuracy": [], "converged": []}
    tc = train_config or DEFAULTS.get(arch, TrainConfig())
    for k in range(folds):
        rest, held = (dataset.train.take(np.flatnonzero(m)) for m in (fold != k, fold == k))
        part = Dataset(f"{dataset.name} (part {k + 1} of {folds} held out)", rest, held, dataset.labels,
                       dataset.features)
        t0 = time.perf_counter()
        try:
            ckpt = train(arch, part, tc, model_overrides, progress=False)
        except DataError as e:                      # a part's model diverged, say: its advice is `train`'s
            raise DataError(f"cross-fitting: the model without part {k + 1} of {folds} did not train "
                            f"({str(e).split(';')[0]}); use --split train") from None
        model = model_from_checkpoint(ckpt)
        X, Y, _ = joined_streams(held, orders, seed + k)
        P = torch.softmax(stream_logits(model, X), -1).numpy().astype(np.float32)
        seconds = time.perf_counter() - t0
        out["blocks"].append((P, Y))
        out["held"].append(len(held))
        out["seconds"].append(round(seconds, 2))
        out["train_accuracy"].append(round(float(ckpt["metrics"]["train_accuracy"]), 5))
        out["converged"].append(bool((ckpt["metrics"].get("schedule") or {}).get("converged", True)))
        if say is not None:
            say(f"part {k + 1} of {folds}: trained {arch} on {len(rest)} sequences in {seconds:.1f} s "
                f"(training accuracy {ckpt['metrics']['train_accuracy']:.3f}), predicted the {len(held)} it "
                "did not see")
    return out
