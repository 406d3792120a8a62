"""Cross-fitting: every training sequence predicted by a model trained without it.

`edgeseq calibrate --split cross` searches the decision settings on these out-of-fold
predictions instead of on sequences the model trained on: the training split is cut into
`folds` parts (whole groups where the data names them, else each class spread evenly over
the parts), a model of the same architecture and settings is trained on all parts but one,
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
from edgeseq.errors import UsageError, printable
from edgeseq.train.checkpoint import model_from_checkpoint
from edgeseq.train.config import DEFAULTS, TrainConfig
from edgeseq.train.loop import stream_logits, train

FOLDS = 5            # parts of the training split, each held out once
FOLDS_MAX = 20


def fold_of(split: Split, folds: int = FOLDS, seed: int = 0) -> np.ndarray:
    """The part (0 .. folds - 1) each sequence of `split` is held out in, int64 [N]: whole
    groups where the split names them (groups dealt to the parts in a seeded order, each class's
    groups spread over them), else each class's sequences dealt in a seeded order, so every part
    holds about the same share of every class. Raises UsageError when `folds` is outside 2 ..
    FOLDS_MAX or above the sequences (or groups), or when some part would hold every training
    sequence of a class (its model could not learn that class): one line saying what to do."""
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or not 2 <= folds <= FOLDS_MAX:
        raise UsageError(f"--folds must be a whole number from 2 to {FOLDS_MAX}, got {folds!r}")
    rng = np.random.default_rng(seed)
    fold = np.zeros(len(split), np.int64)
    if split.groups is not None:
        names = np.unique(split.groups)
        if len(names) < folds:
            raise UsageError(f"the training split names {len(names)} groups, fewer than --folds {folds}; give "
                             f"--folds {max(2, len(names))} or fewer" if len(names) >= 2 else
                             "the training split names one group: cross-fitting holds out whole groups; "
                             "use --split train")
        first = {g: int(split.y[split.groups == g].min()) for g in names}     # deal groups class by class
        order = sorted(rng.permutation(names), key=lambda g: first[g])
        for k, g in enumerate(order):
            fold[split.groups == g] = k % folds
    else:
        if len(split) < folds:
            raise UsageError(f"{len(split)} training sequences are fewer than --folds {folds}; give --folds "
                             f"{max(2, len(split))} or fewer")
        at = 0
        for c in np.unique(split.y):
            rows = rng.permutation(np.flatnonzero(split.y == c))
            fold[rows] = (np.arange(len(rows)) + at) % folds                  # carry on where the last class ended
            at += len(rows)
    for c in np.unique(split.y):
        held = np.unique(fold[split.y == c])
        if len(held) == 1:
            raise UsageError(f"every training sequence of class {printable(str(c))} falls in one part of the "
                             "cross-fit, so its model could not learn that class; cross-fitting needs two "
                             "sequences (or groups) of each class: use --split train")
    return fold


def out_of_fold(arch: str, dataset: Dataset, folds: int = FOLDS, orders: int = 20, seed: int = 0,
                train_config: TrainConfig | None = None, model_overrides: dict | None = None,
                say=None) -> dict:
    """Out-of-fold class probabilities of `dataset.train` on never-reset streams.

    For each part of `fold_of(dataset.train, folds, seed)`: train `arch` (`train_config`, default
    the architecture's DEFAULTS; `model_overrides`, e.g. the model file's settings) on the other
    parts, join the held-out part's sequences in `orders` seeded orders (seed + part) and run the
    streams through that model, never reset. `say(line)` is told of each part as it finishes.

    Returns {"blocks": [(P float32 [orders, L_k, C], Y int64 [orders, L_k]) per part],
    "folds", "held": sequences held out per part, "seconds": training seconds per part,
    "train_accuracy": per part}. Raises UsageError (`fold_of`; an architecture that does not
    stream, e.g. bigru) and what `train` raises."""
    from edgeseq.runtime.never_reset import joined_streams
    from edgeseq.models import build_model, make_config
    fold = fold_of(dataset.train, folds, seed)
    probe = build_model(arch, make_config(arch, n_features=dataset.n_features, n_classes=len(dataset.labels),
                                          **(model_overrides or {})))
    if not hasattr(probe, "forward_stream"):
        raise UsageError(f"'{arch}' reads a whole sequence at once (no never-reset stream): cross-fitting "
                         "scores streams; use --split train")
    out = {"blocks": [], "folds": folds, "held": [], "seconds": [], "train_accuracy": []}
    tc = train_config or DEFAULTS.get(arch, TrainConfig())
    for k in range(folds):
        rest, held = (dataset.train.take(np.flatnonzero(m)) for m in (fold != k, fold == k))
        part = Dataset(f"{dataset.name} (part {k + 1} of {folds} held out)", rest, held, dataset.labels,
                       dataset.features)
        t0 = time.perf_counter()
        ckpt = train(arch, part, tc, model_overrides, progress=False)
        model = model_from_checkpoint(ckpt)
        X, Y, _ = joined_streams(held, orders, seed + k)
        P = torch.softmax(stream_logits(model, X), -1).numpy().astype(np.float32)
        seconds = time.perf_counter() - t0
        out["blocks"].append((P, Y))
        out["held"].append(len(held))
        out["seconds"].append(round(seconds, 2))
        out["train_accuracy"].append(round(float(ckpt["metrics"]["train_accuracy"]), 5))
        if say is not None:
            say(f"part {k + 1} of {folds}: trained {arch} on {len(rest)} sequences in {seconds:.1f} s "
                f"(training accuracy {ckpt['metrics']['train_accuracy']:.3f}), predicted the {len(held)} it "
                "did not see")
    return out
