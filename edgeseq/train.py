"""train(arch, dataset) -> checkpoint: config, weights, normalisation, labels and test figures.

A device's stream is never reset, so the streaming architectures train for that by default:
every update takes one chunk of truncated backpropagation through time (TBPTT) over long
training streams, plus one minibatch of single sequences started from zero state.

- Streams: each epoch joins the training sequences end to end in a new random order, split
  over `streams` parallel streams, so the activity changes inside a stream as it does on a
  device. They are cut into chunks of `chunk` readings; the state (the Transformer: its last
  `window - 1` readings) carries from chunk to chunk, detached, so gradients stop at a
  chunk's start. The loss is on every reading except the first `grace` readings after each
  change of label (and at a stream's start): a model cannot know the activity changed
  before it has seen some of it, and the same readings are left out of the continuous score.
- Sequences: the per-sequence loss of whole training sequences from zero state, after the
  last reading and (weight `aux_weight`) after every reading past the first quarter, so the
  per-sequence protocol stays as good as before.

A fixed schedule rather than early stopping: BasicMotions has 40 training sequences, too few
to spare a validation split, and a fixed AdamW + cosine schedule is reproducible to the bit
for a given seed and thread count.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

import edgeseq
from edgeseq.data import Dataset, Normalization, Split, load_dataset, since_change
from edgeseq.errors import DataError, ModelFileError, UsageError
from edgeseq.models import build_model, check_arch, config_dict, make_config
from edgeseq.runtime.evaluate import GRACE

CHECKPOINT = "checkpoint.pt"


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 60          # passes over the training split
    batch_size: int = 8       # single sequences per update: 40 sequences give 5 minibatches, reused in turn
    lr: float = 3e-3          # AdamW peak learning rate, cosine-decayed to 0
    weight_decay: float = 1e-2
    clip: float = 1.0         # gradient-norm clip, recurrent nets need it
    seed: int = 0
    aux_weight: float = 0.5   # weight of the loss on predictions after every reading past the first quarter
    streams: int = 8          # TBPTT: parallel training streams, the training split joined in a random order
    chunk: int = 50           # TBPTT: readings per update; the state carries over, detached
    grace: int = GRACE        # TBPTT: readings after each change of label left out of the loss
    stream_weight: float = 1.0  # weight of the stream loss; 0 trains on single sequences only
    threads: int = 1          # torch intra-op threads while training: these models are too small for a
                              # thread pool, and on a busy 2-core machine 2 threads trained the default
                              # GRU in 287 s against 25 s with 1; one thread also gives the same weights
                              # for a seed on any core count


# Per-architecture defaults, chosen on BasicMotions (figures in README).
DEFAULTS = {
    "rnn": TrainConfig(epochs=40, lr=3e-3),
    "gru": TrainConfig(epochs=25, lr=5e-3),
    "lstm": TrainConfig(epochs=30, lr=5e-3),
    "transformer": TrainConfig(epochs=30, lr=2e-3),
    "ssm": TrainConfig(epochs=20, lr=5e-3),
    "bigru": TrainConfig(epochs=40, lr=5e-3, stream_weight=0.0),
    "bilstm": TrainConfig(epochs=60, lr=5e-3, stream_weight=0.0),
}


def training_streams(split: Split, streams: int, grace: int, rng: np.random.Generator):
    """The split's sequences (valid readings) joined end to end in a random order over
    `streams` streams. Returns X (S, L, F) float32, labels (S, L) int64 and a scored mask
    (S, L) bool: False on padding and on the first `grace` readings after each change of
    label and at each stream's start."""
    order = rng.permutation(len(split))
    groups = [order[i::streams] for i in range(min(streams, len(split)))]
    parts = [(np.concatenate([split.X[i, :split.lengths[i]] for i in g]),
              np.concatenate([split.Y[i, :split.lengths[i]] for i in g])) for g in groups]
    L = max(len(y) for _, y in parts)
    X = np.zeros((len(parts), L, split.X.shape[2]), np.float32)
    Y = np.full((len(parts), L), -1, np.int64)
    scored = np.zeros((len(parts), L), bool)
    for s, (x, y) in enumerate(parts):
        X[s, :len(y)], Y[s, :len(y)] = x, y
        scored[s, :len(y)] = since_change(y) >= grace
    return X, Y, scored


# What each TrainConfig field may be: (whole number?, smallest, largest); lr and clip must be above 0.
TRAIN_LIMITS = {
    "epochs": (True, 1, 100_000),
    "batch_size": (True, 1, 100_000),
    "lr": (False, 0.0, 10.0),
    "weight_decay": (False, 0.0, 10.0),
    "clip": (False, 0.0, 1e6),
    "seed": (True, 0, 2**32 - 1),             # numpy's seed range
    "aux_weight": (False, 0.0, 1e3),
    "streams": (True, 1, 100_000),
    "chunk": (True, 1, 1_000_000),
    "grace": (True, 0, 1_000_000),
    "stream_weight": (False, 0.0, 1e3),
    "threads": (True, 1, 1024),
}


def check_train_config(tc: TrainConfig) -> TrainConfig:
    """UsageError naming the first training setting of the wrong type or out of range."""
    for name, (whole, lo, hi) in TRAIN_LIMITS.items():
        v = getattr(tc, name)
        number = isinstance(v, (int, float)) and not isinstance(v, bool) and (isinstance(v, int) or not whole)
        positive = name in ("lr", "clip")
        if not number or not lo <= v <= hi or (positive and v <= 0):          # NaN fails `lo <= v`
            what = "a whole number" if whole else "a number"
            rng = f"above {lo} up to {hi}" if positive else f"in {lo}..{hi}"
            raise UsageError(f"training setting {name} must be {what} {rng}, got {v!r}")
    return tc


def check_trainable(dataset: Dataset) -> None:
    """DataError unless every class can be learnt: the training split holds at least 2
    classes, and every label of the dataset (one seen only in the test split, or named in a
    file's `labels` but never used) occurs in it. A class without training readings would
    be a silent, never-trained output."""
    Y = dataset.train.Y
    seen = set(np.unique(Y[Y >= 0]).tolist())
    if not len(dataset.train):
        raise DataError(f"data '{dataset.name}' has no training sequences")
    if len(seen) < 2:
        only = ", ".join(f"'{dataset.labels[c]}'" for c in sorted(seen))
        raise DataError(f"the training split of '{dataset.name}' holds one class ({only}); training needs at "
                        "least 2 classes: add sequences of another class")
    unseen = [c for c in range(len(dataset.labels)) if c not in seen]
    if unseen:
        Yt = dataset.test.Y
        in_test = set(np.unique(Yt[Yt >= 0]).tolist())
        names = ", ".join(f"'{dataset.labels[c]}'" for c in unseen)
        where = "occur only in the test split" if set(unseen) <= in_test else "never occur in the training split"
        raise DataError(f"label(s) {names} of '{dataset.name}' {where}; a model cannot learn them: add training "
                        "sequences with them, or drop them (and their test sequences)")


def train(arch: str, dataset: Dataset | str = "basicmotions", train_config: TrainConfig | None = None,
          model_overrides: dict | None = None, progress: bool = True) -> dict:
    """Train `arch` on `dataset` and return a checkpoint dict (see `save_checkpoint`).

    Raises UsageError for an unknown architecture or setting, DataError for unusable data
    (fewer than 2 classes, a label without training readings, a channel beyond float32)."""
    check_arch(arch)
    tc = check_train_config(train_config or DEFAULTS.get(arch, TrainConfig()))
    for name in ("n_features", "n_classes"):
        if name in (model_overrides or {}):
            raise UsageError(f"'{arch}' setting {name} comes from the data; drop it from the settings")
    if isinstance(dataset, str):
        dataset = load_dataset(dataset)
    check_trainable(dataset)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, tc.threads))
    try:
        return _train(arch, dataset, tc, model_overrides, progress)
    finally:
        torch.set_num_threads(threads)


def _train(arch, dataset, tc, model_overrides, progress=True):
    config = make_config(arch, n_features=dataset.n_features, n_classes=len(dataset.labels),
                         **(model_overrides or {}))
    torch.manual_seed(tc.seed)
    np.random.seed(tc.seed)
    rng = np.random.default_rng(tc.seed)
    model = build_model(arch, config)
    norm = Normalization.fit(dataset.train, dataset.features)
    model.norm.set(norm.mean, norm.std)

    X = torch.from_numpy(dataset.train.X)
    y = torch.from_numpy(dataset.train.y)
    Y = torch.from_numpy(dataset.train.Y)
    L = torch.from_numpy(dataset.train.lengths)
    streaming = tc.stream_weight > 0 and hasattr(model, "forward_stream")
    batches = math.ceil(len(y) / tc.batch_size)
    if streaming:
        stream_len = math.ceil(int(dataset.train.lengths.sum()) / min(tc.streams, len(y)))
        per_epoch = max(math.ceil(stream_len / tc.chunk), batches)
    else:
        per_epoch = batches
    total = tc.epochs * per_epoch
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(tc.seed)

    bar = _progress(tc.epochs, f"train {arch}", progress)
    t0 = time.perf_counter()
    history = []
    for epoch in range(tc.epochs):
        model.train()
        perm = torch.randperm(len(y), generator=gen)
        if streaming:
            sx, sy, sm = (torch.from_numpy(a) for a in training_streams(dataset.train, tc.streams, tc.grace, rng))
            carry = None
        total_loss = 0.0
        for step in range(per_epoch):
            idx = perm[(step % batches) * tc.batch_size:][:tc.batch_size]
            loss = loss_fn(model(X[idx], L[idx]), y[idx])
            if tc.aux_weight and hasattr(model, "forward_all"):
                loss = loss + tc.aux_weight * _streaming_loss(model, X[idx], L[idx], Y[idx])
            c0 = step * tc.chunk
            if streaming and c0 < sx.shape[1]:
                logits, carry = model.forward_stream(sx[:, c0:c0 + tc.chunk], carry)   # (S, chunk, C)
                keep = sm[:, c0:c0 + tc.chunk]
                if keep.any():
                    loss = loss + tc.stream_weight * loss_fn(logits[keep], sy[:, c0:c0 + tc.chunk][keep])
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), tc.clip)
            opt.step()
            sched.step()
            total_loss += loss.item()
        history.append(total_loss / per_epoch)
        bar.set_postfix(loss=f"{history[-1]:.3f}")
        bar.update(1)
    bar.close()
    seconds = time.perf_counter() - t0

    model.eval()
    metrics = {
        "train_accuracy": accuracy(model, dataset.train),
        "test_accuracy": accuracy(model, dataset.test),
        "train_seconds": round(seconds, 2),
        "final_loss": history[-1],
        "threads": torch.get_num_threads(),
        "updates": total,
        "stream_training": streaming,
    }
    return {
        "edgeseq_version": edgeseq.__version__,
        "arch": arch,
        "config": config_dict(config),
        "train_config": config_dict(tc),
        "state_dict": model.state_dict(),
        "normalization": norm.to_json(),
        "labels": list(dataset.labels),
        "features": list(dataset.features),
        "dataset": dataset.name,                 # for display
        "data_path": dataset.source if dataset.source and Path(dataset.source).is_absolute() else None,
                                                 # a data file's absolute path: int8 export reopens it
        "metrics": metrics,
        "loss_history": history,
    }


def _streaming_loss(model, x, lengths, Y):
    """Cross-entropy of the prediction after every valid reading past the first quarter of each
    sequence, against that reading's label, so that a stream's running prediction means
    something before its window ends."""
    logits = model.forward_all(x)                             # (B, T, C)
    T = x.shape[1]
    t = torch.arange(T).unsqueeze(0)                          # (1, T)
    keep = (t < lengths.unsqueeze(1)) & (t >= lengths.unsqueeze(1) // 4) & (Y >= 0)  # (B, T)
    return nn.functional.cross_entropy(logits[keep], Y[keep])


@torch.no_grad()
def accuracy(model, split) -> float:
    model.eval()
    logits = model(torch.from_numpy(split.X), torch.from_numpy(split.lengths))
    return float((logits.argmax(-1).numpy() == split.y).mean())


def model_from_checkpoint(ckpt: dict):
    model = build_model(ckpt["arch"], ckpt["config"])
    model.load_state_dict(ckpt["state_dict"])
    return model.eval()


def torch_bytes(obj) -> bytes:
    """`obj` as torch.save writes it, in memory: written to disk by `write_files`, a full disk
    gives an OSError naming the file (torch's own writer gives a RuntimeError without one)."""
    import io
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def write_files(files: dict) -> None:
    """Write {path: bytes} all or nothing (`edgeseq.runtime.statefile.write_files`)."""
    from edgeseq.runtime.statefile import write_files as write_all
    write_all(files)


def save_checkpoint(ckpt: dict, out_dir: str | os.PathLike) -> Path:
    """Write `checkpoint.pt` and a readable `metrics.json` into `out_dir`, all or nothing
    (`write_files`): a failed write (a full disk) raises an OSError naming the file and leaves
    the old checkpoint as it was, with no temporary file behind."""
    out = Path(out_dir)
    summary = {k: ckpt[k] for k in ("arch", "config", "train_config", "labels", "features", "dataset", "metrics")}
    summary["data_path"] = ckpt.get("data_path")
    data = torch_bytes(ckpt)
    out.mkdir(parents=True, exist_ok=True)
    write_files({out / CHECKPOINT: data, out / "metrics.json": (json.dumps(summary, indent=2) + "\n").encode()})
    return out / CHECKPOINT


def quiet_torch_load(path):
    """torch.load(weights_only=True) of `path` without the warnings torch prints for a file it
    refuses (a raw pickle): the caller turns the exception into one `Error:` line."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(path, map_location="cpu", weights_only=True)   # tensors and plain data only: no code runs


def load_checkpoint(path: str | os.PathLike) -> dict:
    """A run directory (holding checkpoint.pt) or the .pt file itself."""
    p = Path(path)
    if p.is_dir():
        p = p / CHECKPOINT
    if not p.exists():
        raise ModelFileError(f"no checkpoint at '{path}': run `edgeseq train --out {path}` first")
    try:
        ckpt = quiet_torch_load(p)
    except Exception as e:
        raise ModelFileError(f"'{p}' is not a readable edgeseq checkpoint ({type(e).__name__}); train it again") from None
    if not isinstance(ckpt, dict) or "arch" not in ckpt or "state_dict" not in ckpt:
        raise ModelFileError(f"'{p}' is not an edgeseq checkpoint; train one with `edgeseq train`")
    return ckpt


def _progress(total, desc, enabled):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="epoch", leave=False, disable=None)  # None: only on a terminal


class _NoBar:
    def set_postfix(self, **_):
        pass

    def update(self, _):
        pass

    def close(self):
        pass


def parse_overrides(items) -> dict:
    """['hidden=32', 'layers=2'] -> {'hidden': 32, 'layers': 2}: each value as JSON (32, 0.1,
    true) or else as text ('sinusoid'); the model's config then checks type and range."""
    out = {}
    for item in items or ():
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise UsageError(f"--set takes NAME=VALUE, got '{item}'")
        k, v = item.split("=", 1)
        k = k.strip()
        if k in out:
            raise UsageError(f"--set {k} is given twice; give each setting once")
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v.strip()
    return out
