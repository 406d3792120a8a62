"""train(arch, dataset) -> checkpoint: config, weights, normalisation, labels and test figures.

A device's stream is never reset, so the streaming architectures train for that by default.
Every update takes one chunk of truncated backpropagation through time (TBPTT) over long
training streams, plus one chunk of single sequences started from zero state:

- Streams: each epoch joins the training sequences end to end in a new random order and cuts
  the result into `streams` parallel streams of equal length, so the activity changes inside a
  stream as it does on a device. They are cut into chunks of `chunk` readings; the state (the
  Transformer: the readings its next outputs depend on) carries from chunk to chunk, detached, so
  gradients stop at a chunk's start. The loss is on every reading except the first `grace`
  readings after each change of label (and at a stream's start): a model cannot know the
  activity changed before it has seen some of it, and the same readings are left out of the
  continuous score.
- Sequences: the training sequences side by side in as many lanes as there are streams,
  each starting at a chunk boundary from zero state (a sequence longer than `seq_max`
  readings as pieces of at most that, each from zero state), run in the same chunks with the
  state carried inside a sequence. The loss is after each sequence's last reading and
  (weight `aux_weight`) after every reading past its first quarter, so the per-sequence
  protocol stays as good as the continuous one. Bidirectional models, and a Transformer with
  sinusoidal positions, take whole sequences in minibatches of `batch_size` instead.

An epoch passes over every training reading once in a stream and once in its sequence's lane.
Its number of updates is bounded by `updates`: longer data gets more parallel streams and
lanes (one fused recurrent call over more rows) rather than more updates, so an epoch costs
time in proportion to its readings, whatever the sequences' length (`edgeseq bench --train`
measures readings per second at 100, 1,000 and 10,000 readings per sequence).

Augmentation (`TrainConfig.augment`, `edgeseq.data.augment`): each epoch the lanes and streams
are laid out from a new draw of the training split (time warp, rotation of 3-axis triples,
scaling, magnitude warping, jitter), and the streams join the sequences cut at random points;
seeded apart from the rest of training, so `augment='none'` trains exactly as without it.

A fixed schedule rather than early stopping: BasicMotions has 40 training sequences, too few
to spare a validation split, and a fixed AdamW + cosine schedule is reproducible to the bit
for a given seed and thread count.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

import edgeseq
from edgeseq.data import Dataset, Normalization, Split, load_dataset, since_change
from edgeseq.data.augment import DEFAULT as AUGMENT, NONE, Augment, Augmenter, check_augment, resolve_triples
from edgeseq.errors import DataError, ModelFileError, UsageError
from edgeseq.models import build_model, check_arch, config_dict, make_config
from edgeseq.models.transformer import SHIFT_INVARIANT, TransformerConfig, window_for
from edgeseq.runtime.evaluate import GRACE, grace_for

# the epoch plan and progress are part of edgeseq.train's interface too, hence names unused here
from edgeseq.train_plan import Plan, Progress, clock, lane_totals, pieces, plan_epoch, sequence_lanes, training_streams  # noqa: F401

CHECKPOINT = "checkpoint.pt"


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 60          # passes over the training split
    batch_size: int = 8       # single sequences per update at least; long data gets more (see `updates`)
    lr: float = 3e-3          # AdamW peak learning rate, cosine-decayed to 0
    weight_decay: float = 1e-2
    clip: float = 1.0         # gradient-norm clip, recurrent nets need it
    seed: int = 0
    aux_weight: float = 0.5   # weight of the loss on predictions after every reading past the first quarter
    streams: int = 8          # TBPTT: parallel training streams at least (the split joined in a random order)
    chunk: int = 50           # TBPTT: readings per update in each stream and lane; the state carries over, detached
    seq_max: int = 1000       # single sequences longer than this train as pieces of at most this many
                              # readings, each from zero state: the start matters for a few hundred
                              # readings; past that the streams train what a never-reset device sees
    updates: int = 50         # stream updates per epoch at most: past it, more parallel streams and larger
                              # minibatches (wider fused calls) instead of more updates, so an epoch's
                              # time follows its readings, not readings x sequence length
    grace: int | None = None  # TBPTT: readings after each change of label left out of the stream loss; None:
                              # the continuous protocol's grace for the training data (`grace_for`: a quarter
                              # of the median sequence length, 1 to 20), so short sequences are learnt too
    stream_weight: float = 1.0  # weight of the stream loss; 0 trains on single sequences only
    threads: int = 1          # torch intra-op threads while training: these models are too small for a
                              # thread pool, and on a busy 2-core machine 2 threads trained the default
                              # GRU in 287 s against 25 s with 1; one thread also gives the same weights
                              # for a seed on any core count
    augment: Augment | str | dict = NONE  # the training split's augmentation, drawn anew each epoch
                                          # (edgeseq.data.augment): an Augment, 'none', 'default' or its fields


# Per-architecture defaults, chosen on BasicMotions (figures in README). Augmentation is on for
# the streaming architectures: over seeds 0-6 it raised the mean test accuracy of each on both
# protocols (scripts/measure_augment.py, docs/augment.md); the bidirectional ones have one protocol, unmeasured.
DEFAULTS = {
    "rnn": TrainConfig(epochs=40, lr=3e-3, augment=AUGMENT),
    "gru": TrainConfig(epochs=25, lr=5e-3, augment=AUGMENT),
    "lstm": TrainConfig(epochs=30, lr=5e-3, augment=AUGMENT),
    "transformer": TrainConfig(epochs=30, lr=2e-3, augment=AUGMENT),
    "ssm": TrainConfig(epochs=20, lr=5e-3, augment=AUGMENT),
    "bigru": TrainConfig(epochs=40, lr=5e-3, stream_weight=0.0),
    "bilstm": TrainConfig(epochs=60, lr=5e-3, stream_weight=0.0),
}


def sequence_batches(n: int, b: int, gen: torch.Generator) -> list:
    """One epoch's minibatches of whole sequences: a random order, [(indices (b,) LongTensor)]."""
    perm = torch.randperm(n, generator=gen)
    return [perm[i:i + b] for i in range(0, n, b)]


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
    "seq_max": (True, 1, 100_000_000),
    "updates": (True, 1, 1_000_000),
    "grace": (True, 0, 1_000_000),
    "stream_weight": (False, 0.0, 1e3),
    "threads": (True, 1, 1024),
}


def check_train_config(tc: TrainConfig) -> TrainConfig:
    """`tc` with its augmentation as an Augment (`check_augment`); UsageError naming the first
    training setting of the wrong type or out of range."""
    for name, (whole, lo, hi) in TRAIN_LIMITS.items():
        v = getattr(tc, name)
        if v is None and name == "grace":
            continue
        number = isinstance(v, (int, float)) and not isinstance(v, bool) and (isinstance(v, int) or not whole)
        positive = name in ("lr", "clip")
        if not number or not lo <= v <= hi or (positive and v <= 0):          # NaN fails `lo <= v`
            what = "a whole number" if whole else "a number"
            rng = f"above {lo} up to {hi}" if positive else f"in {lo}..{hi}"
            raise UsageError(f"training setting {name} must be {what} {rng}, got {v!r}")
    return replace(tc, augment=check_augment(tc.augment))


def check_trainable(dataset: Dataset) -> None:
    """DataError unless every class can be learnt: the training split holds at least 2
    classes, and every label of the dataset (one seen only in the test split, or named in a
    file's `labels` but never used) occurs in it where a training loss scores it
    (`scored_labels`). A class without scored training readings would be a silent,
    never-trained output."""
    Y = dataset.train.Y
    seen = set(np.unique(Y[Y >= 0]).tolist())
    if not len(dataset.train):
        raise DataError(f"data '{dataset.name}' has no training sequences")
    if len(seen) < 2:
        only = ", ".join(f"'{dataset.labels[c]}'" for c in sorted(seen))
        raise DataError(f"the training split of '{dataset.name}' holds one class ({only}); training needs at "
                        "least 2 classes: add sequences of another class")
    unseen = [c for c in range(len(dataset.labels)) if c not in seen]
    unscored = sorted(seen - scored_labels(dataset.train)) if not unseen else []
    if unscored:
        names = ", ".join(f"'{dataset.labels[c]}'" for c in unscored)
        raise DataError(f"label(s) {names} of '{dataset.name}' occur only where no training loss looks: never at a "
                        f"sequence's last reading, in its last three quarters, or {GRACE} readings past a change of "
                        "label; a model cannot learn them: label longer stretches with them")
    if unseen:
        Yt = dataset.test.Y
        in_test = set(np.unique(Yt[Yt >= 0]).tolist())
        names = ", ".join(f"'{dataset.labels[c]}'" for c in unseen)
        where = "occur only in the test split" if set(unseen) <= in_test else "never occur in the training split"
        raise DataError(f"label(s) {names} of '{dataset.name}' {where}; a model cannot learn them: add training "
                        "sequences with them, or drop them (and their test sequences)")


def scored_labels(split: Split) -> set:
    """The classes some training loss scores: at a sequence's last reading, past the first
    quarter of a sequence, or GRACE readings past a change of label (where the stream loss
    looks)."""
    scored = set(np.unique(split.y).tolist())
    for Y, n in zip(split.Y, split.lengths):
        y = Y[:n]
        keep = (np.arange(n) >= n // 4) | (since_change(y) >= GRACE)
        scored |= set(np.unique(y[keep]).tolist())
    return scored


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


POSITIONS = TransformerConfig.positions      # the Transformer's default position scheme


def data_settings(arch: str, overrides: dict | None, split: Split) -> dict:
    """The model settings to train with: `overrides`, plus those that follow the training data
    where they are not given. A Transformer with positions "none" or "sinusoid" and no `window`
    setting gets `window_for` the training sequences' lengths (50 on BasicMotions, 17 on spoken
    digits); with ALiBi (the default) its recency bias does what the short window did, and the
    window stays WINDOW (docs/measured.md); a given window, 0 included, is kept."""
    settings = dict(overrides or {})
    if arch == "transformer" and "window" not in settings and settings.get("positions", POSITIONS) != "alibi":
        settings["window"] = window_for(split.lengths)
    return settings


def _train(arch, dataset, tc, model_overrides, progress=True):
    config = make_config(arch, n_features=dataset.n_features, n_classes=len(dataset.labels),
                         **data_settings(arch, model_overrides, dataset.train))
    torch.manual_seed(tc.seed)
    np.random.seed(tc.seed)
    rng = np.random.default_rng(tc.seed)
    model = build_model(arch, config)
    norm = Normalization.fit(dataset.train, dataset.features)
    model.norm.set(norm.mean, norm.std)

    tr = dataset.train
    augment = Augmenter(tc.augment, dataset.features, norm.std, norm.constant, tc.seed) if tc.augment.active else None
    resolve_triples(tc.augment, dataset.features)              # channels named that the data lacks: refused, always
    streaming = tc.stream_weight > 0 and hasattr(model, "forward_stream")
    plan = plan_epoch(tr.lengths, tc, streaming, chunked(model))
    grace = tc.grace if tc.grace is not None else grace_for(tr.lengths)
    total = tc.epochs * plan.per_epoch
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(tc.seed)
    whole = [torch.from_numpy(a) for a in (tr.X, tr.y, tr.lengths)]

    def update(seq, stream):
        """One update over a chunk of the single sequences and one of the streams (either may
        be None). `seq`: lanes (x (K, chunk, F), labels, last, aux, fresh (K,), carry) or whole
        sequences (indices,); `stream`: (x (S, chunk, F), labels, scored, carry). Returns
        (loss, the lanes' carry, the streams' carry, readings run)."""
        loss, run, seq_carry, carry = torch.zeros(()), 0, None, None
        if seq is not None and plan.lanes:
            x, sy, last, aux, fresh, seq_carry = seq
            logits, seq_carry = model.forward_stream(x, seq_carry, fresh)     # (K, chunk, C)
            if last.any():
                loss = loss + loss_fn(logits[last], sy[last])
            if tc.aux_weight and aux.any():
                loss = loss + tc.aux_weight * loss_fn(logits[aux], sy[aux])
            run += int((sy >= 0).sum())
        elif seq is not None:
            X, y, L = (a[seq[0]] for a in whole)
            loss = loss + loss_fn(model(X, L), y)
            run += int(L.sum())
        if stream is not None:
            x, sy, keep, carry = stream
            logits, carry = model.forward_stream(x, carry)                      # (S, chunk, C)
            run += int(keep.numel())
            if keep.any():
                loss = loss + tc.stream_weight * loss_fn(logits[keep], sy[keep])
        if loss.requires_grad:                          # else nothing in this chunk is scored
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), tc.clip)
            opt.step()
            sched.step()
        return loss.item(), seq_carry, carry, run

    bar = Progress(arch, dataset, plan, tc.epochs, progress)
    if bar.enabled and norm.constant is not None and norm.constant.any():
        names = ", ".join(f"'{dataset.features[i]}'" for i in np.flatnonzero(norm.constant))
        bar._say(f"channel(s) {names} do not vary in the training data: the model will ignore them")
    if bar.enabled:
        bar.start(_time_update(model, opt, sched, update, plan, tr.X.shape[2], streaming))
    t0 = time.perf_counter()
    history, readings_run = [], 0
    c = plan.chunk
    for epoch in range(tc.epochs):
        model.train()
        epoch_tr = augment(tr) if augment else tr            # the training split only, drawn anew each epoch
        if plan.lanes:
            lx, ly, ll, la, lf = (torch.from_numpy(a) for a in sequence_lanes(epoch_tr, plan, tc.seq_max, rng))
        else:
            batches = sequence_batches(len(tr), plan.batch, gen)
            if augment:
                whole[0] = torch.from_numpy(epoch_tr.X)
        if streaming:
            sx, sy, sm = (torch.from_numpy(a) for a in training_streams(
                epoch_tr, plan.streams, grace, rng, tc.augment.join, augment and augment.rng))
        carry = seq_carry = None
        total_loss = 0.0
        for step in range(plan.per_epoch):
            k = step % plan.seq_updates                         # fewer than the streams' updates: reused in turn
            if plan.lanes:
                part = slice(k * c, (k + 1) * c)
                seq = (lx[:, part], ly[:, part], ll[:, part], la[:, part], lf[:, k], seq_carry)
            else:
                seq = (batches[k],)
            stream = None
            if streaming and step * c < sx.shape[1]:
                part = slice(step * c, (step + 1) * c)
                stream = (sx[:, part], sy[:, part], sm[:, part], carry)
            loss, seq_carry, carry, run = update(seq, stream)
            total_loss += loss
            readings_run += run
            bar.update(epoch, loss, readings_run)
        history.append(total_loss / plan.per_epoch)
    bar.close()
    seconds = time.perf_counter() - t0
    ignored = ignore_constant_channels(model, norm)

    model.eval()
    metrics = {
        "train_accuracy": accuracy(model, dataset.train),
        "test_accuracy": accuracy(model, dataset.test),
        "train_seconds": round(seconds, 2),
        "readings_per_second": round(readings_run / max(seconds, 1e-9)),
        "final_loss": history[-1],
        "threads": torch.get_num_threads(),
        "updates": total,
        "stream_training": streaming,
        "plan": asdict(plan),
        "ignored_channels": [dataset.features[i] for i in ignored],
        "augment": augment.summary() if augment else None,
    }
    if dataset.group_split() is not None:          # which groups trained and which were held out
        metrics["groups"] = dataset.group_split()
    metrics["stream_grace"] = grace          # the grace the stream loss used (TrainConfig.grace None: the data's)
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
        "data_sha256": dataset.sha256,           # and its bytes' sha256: eval refuses the file changed since
        "metrics": metrics,
        "loss_history": history,
    }


@torch.no_grad()
def ignore_constant_channels(model, norm) -> list:
    """Zero the input weights of the channels that did not vary in training (`norm.constant`):
    the model learnt nothing from them (their normalised value was 0 throughout), and a drift
    at run time, in any unit, must not move its answers. Returns their indices."""
    constant = np.flatnonzero(norm.constant) if norm.constant is not None else []
    if len(constant):
        params = dict(model.named_parameters())
        for name in getattr(model, "input_weights", None) or (model.input_weight,):
            params[name][:, torch.from_numpy(constant)] = 0.0
    return [int(i) for i in constant]


def chunked(model) -> bool:
    """Whether the model runs a sequence in chunks with its state carried: not bidirectional
    models (no `forward_stream`), nor a Transformer with sinusoidal positions (a chunk would
    restart them at 0)."""
    return hasattr(model, "forward_stream") and getattr(model.config, "positions", "none") in SHIFT_INVARIANT


def _time_update(model, opt, sched, update, plan, n_features, streaming, repeats: int = 3) -> float:
    """Seconds one update takes: the median of `repeats` updates on zero readings in steady
    state (after an untimed first one, each carrying the state of the one before, as all but
    an epoch's first do), after which the model, optimizer, schedule and random state are
    restored, so the run trains exactly as it would untimed."""
    import copy
    saved = [copy.deepcopy(o.state_dict()) for o in (model, opt, sched)]
    c = plan.chunk

    def rows(n):
        return torch.zeros(n, c, n_features), torch.zeros(n, c, dtype=torch.long), torch.ones(n, c, dtype=torch.bool)
    lanes, streams = rows(plan.lanes), rows(plan.streams)
    seq_carry = carry = None
    times = []
    with torch.random.fork_rng():
        for i in range(repeats + 1):
            if plan.lanes:
                seq = (*lanes, lanes[2], torch.zeros(plan.lanes, dtype=torch.bool), seq_carry)
            else:
                seq = (torch.arange(plan.batch),)
            t = time.perf_counter()
            _, seq_carry, carry, _ = update(seq, (*streams, carry) if streaming else None)
            if i:
                times.append(time.perf_counter() - t)
    for o, state in zip((model, opt, sched), saved):
        o.load_state_dict(state)
    return float(np.median(times))


@torch.no_grad()
def sequence_logits(model, X: torch.Tensor, lengths: torch.Tensor, chunk: int = 256, batch: int = 256):
    """Logits after each sequence's last valid reading, each sequence from zero state: X (N, T,
    F) float32, lengths (N,) int64 -> (N, C) float32. Models that run in chunks (`chunked`)
    take `chunk` readings at a time with their state carried (the same numbers as one pass, in
    bounded memory: a Transformer's attention over a whole 2,600-reading recording would not
    fit), `batch` sequences at a time."""
    order = torch.argsort(lengths, stable=True)             # similar lengths together: little padding
    out = torch.zeros(0)
    for i in range(0, len(X), batch):
        idx = order[i:i + batch]
        x, n = X[idx], lengths[idx]
        T = int(n.max())
        if not chunked(model):
            res = model(x[:, :T], n)
            out = torch.zeros(len(X), res.shape[-1]) if not out.numel() else out
            out[idx] = res
            continue
        res, carry = None, None
        for t0 in range(0, T, chunk):
            logits, carry = model.forward_stream(x[:, t0:t0 + chunk], carry)   # (B, c, C)
            if res is None:
                res = torch.zeros(len(x), logits.shape[-1])
            end = (t0 + torch.arange(logits.shape[1])).unsqueeze(0) == (n - 1).unsqueeze(1)   # (B, c)
            res[end.any(1)] = logits[end]
        out = torch.zeros(len(X), res.shape[-1]) if not out.numel() else out
        out[idx] = res
    return out


@torch.no_grad()
def accuracy(model, split) -> float:
    model.eval()
    logits = sequence_logits(model, torch.from_numpy(split.X), torch.from_numpy(split.lengths))
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
