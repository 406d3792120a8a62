"""train(arch, dataset) -> checkpoint: config, weights, normalisation, labels and test figures.

A fixed schedule rather than early stopping: BasicMotions has 40 training sequences, too few
to spare a validation split, and a fixed AdamW + cosine schedule is reproducible to the bit
for a given seed.
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
from edgeseq.data import Dataset, Normalization, load_dataset
from edgeseq.errors import ModelFileError, UsageError
from edgeseq.models import build_model, config_dict, make_config

CHECKPOINT = "checkpoint.pt"


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 60          # full passes over the training split
    batch_size: int = 8       # small batches: 40 sequences give 5 updates per epoch
    lr: float = 3e-3          # AdamW peak learning rate, cosine-decayed to 0
    weight_decay: float = 1e-2
    clip: float = 1.0         # gradient-norm clip, recurrent nets need it
    seed: int = 0
    aux_weight: float = 0.5   # weight of the loss on predictions after every reading past the first quarter


# Per-architecture defaults, chosen on BasicMotions (figures in README).
DEFAULTS = {
    "rnn": TrainConfig(epochs=80, lr=3e-3),
    "gru": TrainConfig(epochs=40, lr=5e-3),
    "lstm": TrainConfig(epochs=60, lr=5e-3),
    "transformer": TrainConfig(epochs=80, lr=2e-3),
    "bigru": TrainConfig(epochs=40, lr=5e-3),
    "bilstm": TrainConfig(epochs=60, lr=5e-3),
}


def train(arch: str, dataset: Dataset | str = "basicmotions", train_config: TrainConfig | None = None,
          model_overrides: dict | None = None, progress: bool = True) -> dict:
    """Train `arch` on `dataset` and return a checkpoint dict (see `save_checkpoint`)."""
    if isinstance(dataset, str):
        dataset = load_dataset(dataset)
    tc = train_config or DEFAULTS.get(arch, TrainConfig())
    config = make_config(arch, n_features=dataset.n_features, n_classes=len(dataset.labels),
                         **(model_overrides or {}))
    torch.manual_seed(tc.seed)
    np.random.seed(tc.seed)
    model = build_model(arch, config)
    norm = Normalization.fit(dataset.train)
    model.norm.set(norm.mean, norm.std)

    X = torch.from_numpy(dataset.train.X)
    y = torch.from_numpy(dataset.train.y)
    L = torch.from_numpy(dataset.train.lengths)
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
    steps_per_epoch = math.ceil(len(y) / tc.batch_size)
    total = tc.epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(tc.seed)

    bar = _progress(tc.epochs, f"train {arch}", progress)
    t0 = time.perf_counter()
    history = []
    for epoch in range(tc.epochs):
        model.train()
        perm = torch.randperm(len(y), generator=gen)
        total_loss = 0.0
        for i in range(0, len(y), tc.batch_size):
            idx = perm[i:i + tc.batch_size]
            loss = loss_fn(model(X[idx], L[idx]), y[idx])
            if tc.aux_weight and hasattr(model, "forward_all"):
                loss = loss + tc.aux_weight * _streaming_loss(model, X[idx], L[idx], y[idx])
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), tc.clip)
            opt.step()
            sched.step()
            total_loss += loss.item() * len(idx)
        history.append(total_loss / len(y))
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
        "dataset": dataset.name,
        "metrics": metrics,
        "loss_history": history,
    }


def _streaming_loss(model, x, lengths, y):
    """Cross-entropy of the prediction after every valid reading past the first quarter of each
    sequence, so that a stream's running prediction means something before its window ends."""
    logits = model.forward_all(x)                             # (B, T, C)
    T = x.shape[1]
    t = torch.arange(T).unsqueeze(0)                          # (1, T)
    keep = (t < lengths.unsqueeze(1)) & (t >= lengths.unsqueeze(1) // 4)  # (B, T)
    target = y.unsqueeze(1).expand(-1, T)
    return nn.functional.cross_entropy(logits[keep], target[keep])


@torch.no_grad()
def accuracy(model, split) -> float:
    model.eval()
    logits = model(torch.from_numpy(split.X), torch.from_numpy(split.lengths))
    return float((logits.argmax(-1).numpy() == split.y).mean())


def model_from_checkpoint(ckpt: dict):
    model = build_model(ckpt["arch"], ckpt["config"])
    model.load_state_dict(ckpt["state_dict"])
    return model.eval()


def save_checkpoint(ckpt: dict, out_dir: str | os.PathLike) -> Path:
    """Write `checkpoint.pt` and a readable `metrics.json` into `out_dir` (atomically)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (CHECKPOINT + ".tmp")
    torch.save(ckpt, tmp)
    os.replace(tmp, out / CHECKPOINT)
    summary = {k: ckpt[k] for k in ("arch", "config", "train_config", "labels", "features", "dataset", "metrics")}
    (out / "metrics.json").write_text(json.dumps(summary, indent=2) + "\n")
    return out / CHECKPOINT


def load_checkpoint(path: str | os.PathLike) -> dict:
    """A run directory (holding checkpoint.pt) or the .pt file itself."""
    p = Path(path)
    if p.is_dir():
        p = p / CHECKPOINT
    if not p.exists():
        raise ModelFileError(f"no checkpoint at '{path}': run `edgeseq train --out {path}` first")
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=True)
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
    """['hidden=32', 'layers=2'] -> {'hidden': 32, 'layers': 2}."""
    out = {}
    for item in items or ():
        if "=" not in item:
            raise UsageError(f"--set takes NAME=VALUE, got '{item}'")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v
    return out
