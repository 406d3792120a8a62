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
seeded apart from the rest of training, so `augment='none'` trains exactly as without it. The
default, 'auto', applies them all to data with several channels and only jitter and the cut
and join to a single channel, whose gain and timing may be the class (`for_data`).

The schedule (`TrainConfig.epochs` None, the default) stops when the model has learned, not
after a fixed budget. A validation split is carved from the training data (`val_fraction` of
it: whole groups where the data names them, else the last sequences of each class in file
order, `edgeseq.data.holdout`); after each epoch the model is scored on it on both protocols
(each validation sequence from zero state, and the validation sequences joined into never-reset
streams, `validation_scores`). The learning rate starts at `lr` and halves after `patience // 3`
epochs without a better validation score (a plateau schedule); training stops after `patience`
epochs without one, and the weights of the best epoch are kept. The epoch budget follows the
data (`epoch_budget`): up to `budget_updates` updates and `budget_readings` readings in all, so
small sets get many epochs and long recordings few. A model still learning its training data
(`EarlyStopping.learning`) is neither slowed nor stopped, its budget grows up to EXTEND times,
and it keeps its last epoch rather than the best validation loss's (`EarlyStopping.restore`).
A run that stopped early still far from fitting its training data (`stalled`) trains again from
a new initialisation, up to `restarts` times, on the same validation split (`kept_attempt`).
Where the training split is too small to hold out anything, the budget runs in full on a cosine
schedule; where at its end the training loss is still falling and the model has not yet fit its
training sequences (`still_learning`), another cosine cycle of the budget's length follows, from
RESTART_LR of `lr` (a warm restart), up to EXTEND times the budget. Every epoch's loss, validation
loss and accuracy and learning rate are in the checkpoint's `metrics["curve"]`; `diagnose` says
plainly when the model did not converge and what to try.

An explicit `epochs` trains exactly that many epochs on every training sequence, the learning
rate cosine-decayed to 0 per update, with no validation split: reproducible to the bit for a
given seed and thread count.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel

import edgeseq
from edgeseq.data import GAIN_ARCHS, Dataset, Normalization, Split, load_dataset, model_inputs, since_change
from edgeseq.data.augment import Augmenter, for_data, resolve_triples
from edgeseq.errors import DataError, UsageError, printable
from edgeseq.models import FROM_DATA, build_model, check_arch, config_dict, make_config
from edgeseq.models.common import lecun_normal
from edgeseq.models.transformer import SHIFT_INVARIANT, TransformerConfig, window_for
from edgeseq.runtime.evaluate import GRACE, grace_for
from edgeseq.train.config import DEFAULTS, TRAIN_LIMITS, TRAIN_OPTIONS, TrainConfig, check_train_config
from edgeseq.train.plan import Plan, Progress, plan_epoch, sequence_lanes, training_streams


def sequence_batches(n: int, b: int, gen: torch.Generator) -> list:
    """One epoch's minibatches of whole sequences: a random order, [(indices (b,) LongTensor)]."""
    perm = torch.randperm(n, generator=gen)
    return [perm[i:i + b] for i in range(0, n, b)]


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
    if len(seen) < 2 and getattr(dataset, "target_names", None):
        raise DataError(f"'{dataset.name}' holds per-reading targets ({', '.join(dataset.target_names)}) and no "
                        "classes: train a regression model on it with --task regress")
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

    On the default schedule a run that stalls underfit trains again from a new initialisation,
    up to `restarts` times (`stalled`, `kept_attempt`): the checkpoint is one attempt's, its
    `metrics["schedule"]["attempts"]` lists them all.

    Raises UsageError for an unknown architecture or setting, DataError for unusable data
    (fewer than 2 classes, a label without training readings, a channel beyond float32) or
    for a run that diverged (a weight not finite; a restart that diverges is left out)."""
    check_arch(arch)
    tc = check_train_config(train_config or DEFAULTS.get(arch, TrainConfig()))
    if tc.input_init == "fan_in" and arch not in INPUT_INIT_ARCHS:
        raise UsageError(f"input_init=fan_in applies to {', '.join(INPUT_INIT_ARCHS)}: '{arch}' reads its channels "
                         "through a linear encoder torch already scales by its fan-in; drop the setting")
    for name in FROM_DATA:
        if name in (model_overrides or {}):
            raise UsageError(f"'{arch}' setting {name} comes from the data; drop it from the settings")
    for name in model_overrides or {}:
        if name in TRAIN_OPTIONS:
            raise UsageError(f"{name} is a training setting, not a model setting: give it as --{name} "
                             f"{model_overrides[name]}")
        if name in TRAIN_LIMITS:
            raise UsageError(f"{name} is a training setting, not a model setting: set it with "
                             f"`edgeseq train --set {name}=...` or TrainConfig({name}=...)")
    if isinstance(dataset, str):
        dataset = load_dataset(dataset)
    check_trainable(dataset)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, tc.threads))
    try:
        attempts, left_out = [_train(arch, dataset, tc, model_overrides, progress)], None
        while stalled(attempts[-1]) and len(attempts) <= tc.restarts:
            s = attempts[-1]["metrics"]["schedule"]
            if progress:
                print(f"{arch} stopped early after {s['epochs_run'] - (s.get('final_epochs') or 0)} epochs, its highest training fit "
                      f"{s['fit']:.2f} (below {UNDERFIT:g}: stalled before learning its training data): training "
                      f"again from a new initialisation, attempt {len(attempts) + 1} of up to {tc.restarts + 1} "
                      "(one that fits its training data better replaces it where its validation loss is lower)",
                      file=sys.stderr, flush=True)
            try:
                attempts.append(_train(arch, dataset, tc, model_overrides, progress,
                                       seed=attempt_seed(tc.seed, len(attempts))))
            except DataError as e:        # a restart that diverged: the runs before it stand
                left_out = str(e).split(": nothing was written")[0]
                if progress:
                    print(f"attempt {len(attempts) + 1} left out, the attempts before it stand: {left_out}",
                          file=sys.stderr, flush=True)
                break
        return kept_attempt(attempts, tc.seed, len(dataset.train), left_out)
    finally:
        torch.set_num_threads(threads)


def stalled(ckpt: dict) -> bool:
    """True when a run on the validation schedule stopped early (its validation loss no longer
    improving, its fit no longer rising) while it still underfits: its highest `fit` below
    UNDERFIT. Such a run sits in a poor optimum that more epochs do not leave; a fresh
    initialisation often does (ArrowHead's GRU: fit 0.70 at seed 0, 0.97 at seed 1)."""
    s = ckpt["metrics"]["schedule"]
    return s["mode"] == "early-stopping" and s["stopped"] == "early" and 0 <= s.get("fit", 1.0) < UNDERFIT


def attempt_seed(seed: int, attempt: int) -> int:
    """The seed of restart `attempt` (1, 2, ...) of a run seeded `seed`: drawn from both
    (numpy's SeedSequence), the same for the same `seed`. uint32 (numpy's range)."""
    return int(np.random.SeedSequence([seed, attempt]).generate_state(1)[0])


def kept_val_loss(ckpt: dict) -> float:
    """The validation loss of the epoch a run kept (inf where it had none or it is not finite)."""
    s = ckpt["metrics"]["schedule"]
    point = next((p for p in ckpt["metrics"]["curve"] if p["epoch"] == s["best_epoch"]), {})
    loss = point.get("val_loss", math.inf)
    return loss if math.isfinite(loss) else math.inf


def kept_attempt(attempts: list, seed: int, n_train: int, left_out: str | None = None) -> dict:
    """Of a stalled run and its restarts (checkpoints, in order; the same validation split),
    the restart that fits its training data better than the first run (its training accuracy
    after training at least two of the `n_train` training sequences' worth higher) and whose kept epoch has a lower validation loss than the first run's, the lowest
    of those; else the first run. Restarts that fit no better say the data or the model's
    size, not the initialisation, holds the model back, and a few validation sequences cannot
    tell such runs apart (ArrowHead's LSTM: of two seeds that stalled at the same fit, the
    lower validation loss scored 0.36 on the test split, the higher 0.50). The schedule lists
    every attempt (`attempts`: seed, epochs, highest fit, training accuracy, validation loss,
    seconds, stalled) and `attempt` (1-based, the one kept); `train_seconds` is the time all
    of them took; `left_out`: why the restart after the last of them failed (it diverged),
    listed too. The test split plays no part. A single attempt is returned as it is."""
    if len(attempts) == 1 and left_out is None:
        return attempts[0]
    losses = [kept_val_loss(a) for a in attempts]
    fits = [a["metrics"]["train_accuracy"] for a in attempts]
    rise = 2 / max(n_train, 1) - 1e-9          # two sequences' worth, whatever the rounding of k / n
    better = [i for i in range(1, len(attempts)) if fits[i] >= fits[0] + rise and losses[i] < losses[0]]
    best = min(better, key=lambda i: (losses[i], i)) if better else 0
    ckpt = attempts[best]
    s, m = ckpt["metrics"]["schedule"], ckpt["metrics"]
    s["attempts"] = [{"seed": seed if i == 0 else attempt_seed(seed, i),
                      "epochs": a["metrics"]["schedule"]["epochs_run"], "fit": a["metrics"]["schedule"].get("fit"),
                      "train_accuracy": round(fits[i], 5),
                      "val_loss": None if not math.isfinite(losses[i]) else round(losses[i], 5),
                      "seconds": a["metrics"]["train_seconds"], "stalled": stalled(a)} for i, a in enumerate(attempts)]
    if left_out is not None:
        s["attempts"].append({"seed": attempt_seed(seed, len(attempts)), "left_out": left_out})
    s["attempt"] = best + 1
    m["train_seconds"] = round(sum(a["metrics"]["train_seconds"] for a in attempts), 2)
    return ckpt


POSITIONS = TransformerConfig.positions      # the Transformer's default position scheme


def data_settings(arch: str, overrides: dict | None, split: Split) -> dict:
    """The model settings to train with: `overrides`, plus those that follow the training data
    where they are not given. A Transformer with positions "none" or "sinusoid" and no `window`
    setting gets `window_for` the training sequences' lengths (50 on BasicMotions, 17 on spoken
    digits); with ALiBi (the default) its recency bias does what the short window did, and the
    window stays WINDOW (docs/measured.md); a given window, 0 included, is kept. An SSM with no
    `selective` setting is selective on single-channel data (SELECTIVE_CHANNELS): its decay and
    input gain then follow the reading, which scored higher per sequence on six of the seven
    single-channel sets of docs/training.md (ACSF1: 0.740 against 0.760); on BasicMotions it lost
    one test sequence of 40 (0.975 against 1.000), so data with several channels keeps the fixed
    decay (JapaneseVowels: 0.986 selective against 0.973). Classifiers only: anomaly and
    regression models (`edgeseq.train.forecast`) keep the config's fixed decay."""
    settings = dict(overrides or {})
    if arch == "transformer" and "window" not in settings and settings.get("positions", POSITIONS) != "alibi":
        settings["window"] = window_for(split.lengths)
    if arch == "ssm" and "selective" not in settings and split.X.shape[2] <= SELECTIVE_CHANNELS:
        settings["selective"] = True
    return settings


SELECTIVE_CHANNELS = 1   # an SSM trained on data with at most this many channels is selective by default
FAN_IN_CHANNELS = 1      # input_init auto: data with at most this many channels gets the fan-in draw
INPUT_INIT_ARCHS = ("rnn", "gru", "lstm", "bigru", "bilstm")   # the models whose first input matrix it draws


def init_inputs(model, arch: str, how: str, split: Split) -> str | None:
    """Draw the first input matrix of a recurrent model (INPUT_INIT_ARCHS: torch's fused layers)
    from N(0, 1/inputs) (`lecun_normal`) where `how` is "fan_in", or "auto" on data of at most
    FAN_IN_CHANNELS channels; the other models (their input is an nn.Linear, already drawn by its
    fan-in) and "torch" keep their draw. In place, before the optimiser sees the
    weights. Classifiers only: anomaly and regression models (`edgeseq.train.forecast`) keep
    torch's draw. Returns what was done, for `metrics["input_init"]` (None: nothing).

    Why one channel: with torch's U(+-1/sqrt(hidden)) a single reading moves each gate by a
    standard deviation of 0.07 at 64 units, and on Coffee (UCR, 2 classes, 286 readings) the GRU
    and LSTM sat at chance in every attempt (0.536 and 0.464 per sequence); drawn by fan-in they
    scored 1.000 and 0.964. On BasicMotions (6 channels) the GRU scored lower with it on average
    over seeds 0-4 (per sequence 0.985 against 1.000: lower at three seeds, equal at two; never
    reset 0.9906 against 0.9935) and on JapaneseVowels (12) about the same (CHANGELOG, measured
    during development). The gain stage's log level is one more input: a gained channel gives
    N(0, 1/2)."""
    if arch not in INPUT_INIT_ARCHS or how == "torch" or (how == "auto" and split.X.shape[2] > FAN_IN_CHANNELS):
        return None
    names = getattr(model, "input_weights", None) or (model.input_weight,)
    with torch.no_grad():
        for name in names:
            lecun_normal(model.get_parameter(name))
    why = "given" if how == "fan_in" else "auto: one channel"
    return f"fan_in: the first input matrix drawn from N(0, 1/{model.get_parameter(names[0]).shape[1]}) ({why})"


MIN_DELTA = 0.01      # a validation loss this share below the best counts as better (at no lower accuracy)
LR_FLOOR = 1 / 64     # the plateau schedule halves the learning rate down to this share of `lr`
LEARNT = 0.5          # a validation accuracy this share of the way from the majority class's share to 1 ...
WAIT = 1 / 3          # ... or this share of the epoch budget spent, before a plateau counts towards stopping
UNDERFIT = 0.9        # training accuracy below this: the model has not learnt its own training data
FIT_DELTA = 0.01      # a training accuracy this much above the best so far: the model is still learning
LR_MAX = TRAIN_LIMITS["lr"][2]   # the highest learning rate `train` accepts
ACC_SLACK = 0.02      # an underfit model's last epoch is kept within this validation accuracy of the best's
EXTEND = 2            # the epoch budget grows up to this many times while the model is still learning
RESTART_LR = 0.5      # without a validation split, a grown budget's cosine cycle starts at this share of `lr`
FIT_ALL = 0.99        # ... and it grows only while the training accuracy is below this (something left to learn)
LOSS_EPS = 0.01       # a training loss still falling falls by at least this much (nats), not only 5%


def epoch_budget(plan: Plan, tc: TrainConfig, streaming: bool) -> int:
    """Epochs at most when training stops on the validation score: `tc.budget_updates` updates
    and `tc.budget_readings` readings run (a reading runs once in its lane and once in a stream
    per epoch), at least `tc.min_epochs`. BasicMotions less its validation split (32 sequences, 8
    updates an epoch): 375; a 1,000,000-reading recording (50 updates an epoch, 2,000,000
    readings run): 10."""
    run = plan.readings * (2 if streaming else 1)
    by_updates = math.ceil(tc.budget_updates / max(plan.per_epoch, 1))
    by_readings = tc.budget_readings // max(run, 1)
    return int(max(tc.min_epochs, min(by_updates, by_readings)))


def validation_split(dataset: Dataset, tc: TrainConfig) -> tuple:
    """(training part, validation part or None, how it was held out): `tc.val_fraction` of the
    training split held out (`edgeseq.data.holdout`: whole groups where the data names them,
    else the last sequences of each class in file order), none where `tc.epochs` is given,
    `val_fraction` is 0, or the split is too small to spare a sequence of a class that has
    two or more (every class keeps at least one training sequence)."""
    from edgeseq.data import holdout
    if tc.epochs is not None:
        return dataset.train, None, None
    n = len(dataset.train)
    if tc.val_fraction <= 0:
        return dataset.train, None, "val_fraction is 0"
    if round(n * tc.val_fraction) < 1:
        return dataset.train, None, f"val_fraction {tc.val_fraction:g} of {n} training sequences is less than one"
    try:
        rest, val = holdout(dataset.train, tc.val_fraction, seed=tc.seed, where=f"data '{dataset.name}'",
                            what="a validation split")
    except DataError as e:
        why = str(e).split(";")[0].replace(f"data '{dataset.name}'", "the training split")
        return dataset.train, None, printable(why)
    try:
        check_trainable(Dataset(dataset.name, rest, dataset.test, dataset.labels, dataset.features))
    except DataError:
        return dataset.train, None, "a validation split would leave a class without training readings"
    how = "whole groups" if dataset.train.groups is not None else "the last sequences of each class"
    return rest, val, f"{len(val)} of {len(dataset.train)} training sequences ({how})"


class EarlyStopping:
    """The plateau schedule and stopping rule on validation scores: an epoch is better when its
    validation loss (both protocols' cross entropy, averaged) is at least MIN_DELTA below the
    best (the loss, not the accuracy of a few validation sequences, which jumps between epochs);
    after `patience // 3` epochs without a better one the learning rate halves (down to LR_FLOOR
    of the start), after `patience` training stops. Before the validation accuracy has once
    come LEARNT of the way from the majority class's share to 1, and before WAIT of the budget
    is spent, epochs without a better loss do not count: a model that has not started to learn
    is not stopped. Nor do they while the model is still learning its training data
    (`learning`): the best share of training sequences its own updates predict right in an
    epoch (`fit`) below UNDERFIT, and risen within the last `patience` epochs by at least
    FIT_DELTA or two sequences' worth, whichever is more; the learning rate stays up meanwhile.
    Keeps the best epoch's weights, or the last epoch's where the model underfits and went on
    learning after its best validation loss (`restore`): a validation loss that rises while an
    underfit model still learns is not overfitting."""

    def __init__(self, model, opt, patience: int, val: Split, max_epochs: int):
        self.model, self.opt, self.patience = model, opt, patience    # in epochs
        self.lr0 = opt.param_groups[0]["lr"]
        self.best_acc, self.best_loss, self.best_epoch, self.best_state = -1.0, math.inf, None, None
        self.since, self.top_acc = 0, -1.0
        self.fit_best, self.fit_since, self.fit_rose = -1.0, 0, None   # fit's best in steps, epochs since, when
        self.fit_max, self.last = -1.0, None          # fit's highest; the last epoch's (loss, fit, step)
        self.accs = []                                # every epoch's validation accuracy
        self.tolerance = max(ACC_SLACK, 2 / len(val.y))   # two validation sequences' worth of accuracy
        self.kept = None                              # what `restore` kept, and why
        majority = float(np.bincount(val.y).max() / len(val.y))
        self.learnt = majority + LEARNT * (1 - majority)      # below this the model has not started to learn
        self.wait = math.ceil(max_epochs * WAIT)

    def learning(self) -> bool:
        """True while the model has not learnt its training split (`underfit`) and its fit
        rose by a step within `patience` epochs."""
        return self.underfit() and self.fit_since < self.patience

    def underfit(self) -> bool:
        """True when the model has not learnt its training split: its highest fit so far below
        UNDERFIT (False before any fit is known)."""
        return 0 <= self.fit_max < UNDERFIT

    def step(self, epoch: int, scores: dict, fit: float | None = None, counted: int = 0) -> bool:
        """Record epoch `epoch`'s validation `scores` and `fit`, the share of the `counted`
        training sequences the epoch's own updates predicted right (None: not known); returns
        True when training should stop."""
        acc, loss = scores["accuracy"], scores["loss"]
        self.top_acc = max(self.top_acc, acc)
        self.accs.append(acc)
        if fit is not None:
            rise = max(FIT_DELTA, 2 / counted) if counted else FIT_DELTA
            self.fit_max = max(self.fit_max, fit)
            if fit >= self.fit_best + rise:
                self.fit_best, self.fit_since, self.fit_rose = fit, 0, epoch
            else:
                self.fit_since += 1
            self.last = (loss, fit, rise)
        if loss < self.best_loss * (1 - MIN_DELTA):
            self.best_acc, self.best_loss, self.best_epoch, self.since = acc, loss, epoch, 0
            self.best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            return False
        if self.top_acc < self.learnt and epoch < self.wait:
            return False          # still near the majority class: a plateau here is the start, not the end
        if self.learning():
            return False          # still learning its training data: not a plateau either
        self.since += 1
        if self.since % max(1, self.patience // 3) == 0:
            for g in self.opt.param_groups:
                g["lr"] = max(g["lr"] * 0.5, self.lr0 * LR_FLOOR)
        return self.since >= self.patience

    def restore(self, last: int) -> int:
        """Keep the best epoch's weights, or those of epoch `last`, the last run, where the
        model underfits, its fit rose after the best epoch, the last epoch's validation loss
        is finite and its fit within two steps of the best, and its validation accuracy (the
        mean of the last `patience // 3` epochs) at most `tolerance` below the best epoch's:
        rolling back would undo what it learnt since. A model that diverged, or whose
        validation accuracy fell by more than that, is rolled back. Returns the epoch kept; `kept`
        says which and why."""
        recent = self.accs[-max(1, self.patience // 3):]
        if self.best_state is None:
            self.best_epoch, self.kept = last, "last (no finite validation loss)"
        elif (self.underfit() and self.last is not None and self.fit_rose is not None
              and self.fit_rose > self.best_epoch and math.isfinite(self.last[0])
              and self.last[1] >= self.fit_best - 2 * self.last[2]
              and sum(recent) / len(recent) >= self.best_acc - self.tolerance):
            self.best_epoch, self.kept = last, "last (underfit)"
        else:
            self.model.load_state_dict(self.best_state)
            self.kept = "best"
        return self.best_epoch


def _train(arch, dataset, tc, model_overrides, progress=True, seed: int | None = None):
    """One training run; `seed` (a restart's, `attempt_seed`) seeds the initialisation, the
    augmentation and the epochs' order instead of `tc.seed`, which still carves the validation
    split, so a run and its restarts are scored on the same sequences."""
    norm = Normalization.fit(dataset.train, dataset.features, tc.input_transform,
                             gain=arch in GAIN_ARCHS and (tc.gain_stage or tc.input_transform == "gain"))
    levels = {"levels": norm.levels} if norm.levels else {}
    chosen = data_settings(arch, model_overrides, dataset.train)
    from_data = {k: v for k, v in chosen.items() if k not in (model_overrides or {})}
    config = make_config(arch, n_features=dataset.n_features, n_classes=len(dataset.labels), **chosen, **levels)
    restart, seed = seed is not None, (tc.seed if seed is None else seed)
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    rng = np.random.default_rng(seed)
    model = build_model(arch, config)
    model.norm.set(norm.mean, norm.std, norm.asinh_scale, norm.gain_floor, norm.gain_release)
    input_init = init_inputs(model, arch, tc.input_init, dataset.train)

    tr, val, held = validation_split(dataset, tc)
    aug, aug_why = for_data(tc.augment, dataset.features)   # AUTO: by the channels (motion data or not)
    tc = replace(tc, augment=aug)
    augment = Augmenter(aug, dataset.features, norm.std, norm.constant, seed,
                        norm.asinh_scale, norm.gain_floor) if aug.active else None
    resolve_triples(aug, dataset.features)                     # channels named that the data lacks: refused, always
    streaming = tc.stream_weight > 0 and hasattr(model, "forward_stream")
    plan = plan_epoch(tr.lengths, tc, streaming, chunked(model))
    grace = tc.grace if tc.grace is not None else grace_for(tr.lengths)
    epochs = tc.epochs if tc.epochs is not None else epoch_budget(plan, tc, streaming)
    total = epochs * plan.per_epoch
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
    patience = max(tc.patience, math.ceil(tc.patience_updates / plan.per_epoch))    # an epoch of a small set is a few
    averaged = AveragedModel(model, multi_avg_fn=ema_update(tc.ema), use_buffers=True) if tc.ema else None
    judged = averaged.module if averaged else model          # the weights validated, kept and written
    stopper = EarlyStopping(judged, opt, patience, val, epochs) if val is not None else None
    sched = None if stopper else torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))       # cosine, per update
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(seed)
    whole = [torch.from_numpy(a) for a in (tr.X, tr.y, tr.lengths)]
    fit = [0, 0]              # training sequences predicted right, predicted, in the epoch's own updates

    def update(seq, stream):
        """One update over a chunk of the single sequences and one of the streams (either may
        be None). `seq`: lanes (x (K, chunk, F), labels, last, aux, fresh (K,), carry) or whole
        sequences (indices,); `stream`: (x (S, chunk, F), labels, scored, carry). Returns
        (loss, the lanes' carry, the streams' carry, readings run); counts the sequences it
        predicted right in `fit`."""
        loss, run, seq_carry, carry = torch.zeros(()), 0, None, None
        if seq is not None and plan.lanes:
            x, sy, last, aux, fresh, seq_carry = seq
            logits, seq_carry = model.forward_stream(x, seq_carry, fresh)     # (K, chunk, C)
            if last.any():
                loss = loss + loss_fn(logits[last], sy[last])
                fit[0] += int((logits[last].argmax(-1) == sy[last]).sum())
                fit[1] += int(last.sum())
            if tc.aux_weight and aux.any():
                loss = loss + tc.aux_weight * loss_fn(logits[aux], sy[aux])
            run += int((sy >= 0).sum())
        elif seq is not None:
            X, y, L = (a[seq[0]] for a in whole)
            logits = model(X, L)
            loss = loss + loss_fn(logits, y)
            fit[0] += int((logits.argmax(-1) == y).sum())
            fit[1] += len(y)
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
            if averaged is not None:
                averaged.update_parameters(model)
            if sched is not None:
                sched.step()
        return loss.item(), seq_carry, carry, run

    def with_final(n: int) -> int:                 # epochs in all: the final epochs come on top
        return n + (math.ceil(tc.final_share * n) if stopper else 0)

    bar = Progress(arch, dataset, plan, with_final(epochs), progress, early=stopper is not None, held=held, extend=EXTEND,
                   restarts=0 if restart else tc.restarts)     # a restart says where it stands itself
    if bar.enabled and norm.constant is not None and norm.constant[:dataset.n_features].any():
        names = ", ".join(f"'{dataset.features[i]}'" for i in np.flatnonzero(norm.constant[:dataset.n_features]))
        bar._say(f"channel(s) {names} do not vary in the training data: the model will ignore them")
    if bar.enabled:
        bar.start(_time_update(model, opt, sched, update, plan, tr.X.shape[2], streaming, averaged))
    t0 = time.perf_counter()
    history, curve, readings_run, updates_run = [], [], 0, 0
    val_grace = grace_for(val.lengths) if val is not None else None
    stopped = "budget"
    def run_epoch(epoch: int, split: Split, lr_at=None) -> float:
        """One epoch over `split` (augmented anew) in `plan`'s lanes and streams; `lr_at(update)`
        sets the learning rate before each update where given. Returns the mean loss."""
        nonlocal readings_run, updates_run
        model.train()
        fit[:] = [0, 0]
        c = plan.chunk
        epoch_tr = augment(split) if augment else split       # the training split only, drawn anew each epoch
        if plan.lanes:
            lx, ly, ll, la, lf = (torch.from_numpy(a) for a in sequence_lanes(epoch_tr, plan, tc.seq_max, rng))
        else:
            batches = sequence_batches(len(split), plan.batch, gen)
            if augment:
                whole[0] = torch.from_numpy(epoch_tr.X)
        if streaming:
            sx, sy, sm = (torch.from_numpy(a) for a in training_streams(
                epoch_tr, plan.streams, grace, rng, tc.augment.join, augment and augment.rng))
        carry = seq_carry = None
        total_loss = 0.0
        for step in range(plan.per_epoch):
            if lr_at is not None:
                for g in opt.param_groups:
                    g["lr"] = lr_at(step)
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
            updates_run += 1
            bar.update(epoch, loss, readings_run)
        return total_loss / plan.per_epoch

    limit, epoch = epochs, 0      # the budget, grown while the model is still learning (EXTEND)
    while epoch < limit:
        lr = opt.param_groups[0]["lr"]
        history.append(run_epoch(epoch, tr))
        point = {"epoch": epoch + 1, "loss": round(history[-1], 5), "lr": lr}
        if fit[1]:
            point["fit"] = round(fit[0] / fit[1], 5)
        if stopper is not None:
            scores = validation_scores(judged, val, val_grace)
            point.update({f"val_{k}": round(v, 5) for k, v in scores.items() if v is not None})
            done = stopper.step(epoch + 1, scores, point.get("fit"), fit[1])
            point["best"] = stopper.best_epoch == epoch + 1
            curve.append(point)
            bar.epoch_done(point)
            if done:
                stopped = "early"
                break
            if epoch + 1 == limit and stopper.learning() and limit < EXTEND * epochs:
                limit = min(EXTEND * epochs, limit + stopper.patience)
                bar.grow(with_final(limit))
        else:
            curve.append(point)
            if tc.epochs is None and epoch + 1 == limit and limit < EXTEND * epochs \
                    and still_learning(curve, fit[1], fitted := accuracy(judged, tr)):
                # SGDR: another cosine cycle of the budget's length from RESTART_LR of the peak
                limit, cycle = limit + epochs, epochs * plan.per_epoch
                if bar.enabled:
                    bar._say(f"train {arch}: still learning its training data at the end of the budget of {epochs} "
                             f"epochs (training accuracy {fitted:.3f}): another cosine cycle of "
                             f"{epochs} epochs")
                sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s, n=cycle: RESTART_LR * 0.5 * (
                    1 + math.cos(math.pi * min(s, n) / n)))
                bar.grow(with_final(limit))
        epoch += 1
    final = 0
    if stopper is not None:
        kept = stopper.restore(len(curve))
        final = math.ceil(tc.final_share * kept) if stopper.best_state is not None else 0   # none to anneal
    if averaged is not None:                       # the average (the kept epoch's, or the last) trains on, is written
        model.load_state_dict(judged.state_dict())
    if final:
        # The validation sequences join the rest for a few last epochs, the learning rate cosine-decayed from
        # the kept epoch's to 0: the model ends annealed, on every training sequence.
        tr = dataset.train
        plan = plan_epoch(tr.lengths, tc, streaming, chunked(model))
        whole[:] = [torch.from_numpy(a) for a in (tr.X, tr.y, tr.lengths)]
        lr_best, steps = curve[kept - 1]["lr"], final * plan.per_epoch
        for e in range(final):
            def lr_at(step, e=e):
                return lr_best * 0.5 * (1 + math.cos(math.pi * (e * plan.per_epoch + step) / steps))
            lr = lr_at(0)
            history.append(run_epoch(len(curve), tr, lr_at))
            curve.append({"epoch": len(curve) + 1, "loss": round(history[-1], 5), "lr": lr, "final": True})
    bar.close()
    seconds = time.perf_counter() - t0
    check_finite(model, arch, dataset, tc)
    ignored = ignore_constant_channels(model, norm)

    model.eval()
    train_acc = accuracy(model, tr)
    schedule = {"mode": "fixed" if tc.epochs is not None else ("early-stopping" if stopper else "budget"),
                "max_epochs": limit, "budget_epochs": epochs, "epochs_run": len(curve),
                "best_epoch": stopper.best_epoch if stopper else None,
                "kept": stopper.kept if stopper else None,
                "val_best_epoch": next((p["epoch"] for p in reversed(curve) if p.get("best")), None),
                "stopped": "fixed" if tc.epochs is not None else stopped,
                "patience": patience if stopper else None, "validation": held, "final_epochs": final,
                "updates": updates_run}
    if stopper is None and tc.epochs is None:
        schedule["cycles"] = 2 if limit > epochs else 1        # cosine cycles: a grown budget ran a second
    if stopper is not None and stopper.fit_max >= 0:
        schedule["fit"] = round(stopper.fit_max, 5)        # the highest fit of an epoch: `stalled` reads it
    schedule.update(diagnose(curve, train_acc, schedule, tc, arch))
    metrics = {
        "train_accuracy": train_acc,
        "test_accuracy": accuracy(model, dataset.test),
        "train_seconds": round(seconds, 2),
        "readings_per_second": round(readings_run / max(seconds, 1e-9)),
        "final_loss": history[-1],
        "threads": torch.get_num_threads(),
        "updates": schedule["updates"],
        "stream_training": streaming,
        "plan": asdict(plan),
        "model_from_data": from_data,
        "ignored_channels": [model_inputs(dataset.features, norm.gain_floor)[i] for i in ignored],
        "augment": {**augment.summary(), "why": aug_why} if augment else None,
        "input_transform": norm.transform_why,
        "input_init": input_init,
        "schedule": schedule,
        "curve": curve,
    }
    if val is not None:
        metrics["validation_accuracy"] = next(p["val_accuracy"] for p in curve if p["epoch"] == stopper.best_epoch)
    if hasattr(model, "forward_stream"):
        metrics["test_continuous_accuracy"] = continuous_accuracy(model, dataset.test)["reading_accuracy"]
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



def ema_decay(ema: float, n: int) -> float:
    """The decay of the weights' moving average at its `n`-th update after the first (which
    copies the weights): `ema`, or less while few updates are averaged, (1 + n) / (10 + n), so
    the average follows the weights closely early on and a short run is not held back by its
    start (the warm-up of TensorFlow's `tf.train.ExponentialMovingAverage(num_updates=)`)."""
    return min(ema, (1 + n) / (10 + n))


def ema_update(ema: float):
    """`torch.optim.swa_utils.AveragedModel`'s `multi_avg_fn` for `ema_decay`."""
    def update(averaged: list, current: list, n) -> None:
        weight = 1 - ema_decay(ema, int(n))
        for a, c in zip(averaged, current):
            a.lerp_(c, weight)
    return update


def check_finite(model, arch: str, dataset: Dataset, tc: TrainConfig) -> None:
    """Raise DataError when training left a weight that is not finite (it diverged): such a
    model must not be written. Says what to try."""
    bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise DataError(f"training {arch} on {printable(dataset.name)} diverged ({len(bad)} weight tensor(s) not "
                        f"finite, first {bad[0]}): nothing was written; try a lower learning rate (--lr "
                        f"{tc.lr / 10:g}) or look for extreme readings in the data")


def loss_falling(run: list) -> tuple | None:
    """(mean loss of the fifth of the epochs before the last fifth, of the last fifth) where the
    last is still 5% and at least LOSS_EPS below the one before (at least 10 epochs of `run`,
    curve points), else None: a loss near 0 that halves is no sign of more to learn."""
    n = len(run)
    if n < 10:
        return None
    k = max(1, n // 5)
    last, before = np.mean([p["loss"] for p in run[-k:]]), np.mean([p["loss"] for p in run[-2 * k:-k]])
    return (float(before), float(last)) if last < 0.95 * before and before - last >= LOSS_EPS else None


def still_learning(curve: list, counted: int = 0, train_accuracy: float = 0.0) -> bool:
    """Without a validation split, at the end of the budget (curve points with each epoch's
    `fit`; `counted` the sequences the last epoch's fit counted; `train_accuracy` the weights'
    accuracy on the training split, `accuracy`, not the fit of augmented updates, which one
    missed sequence of three puts at 0.667): the training accuracy below FIT_ALL, and either the
    training loss still falling (`loss_falling`) or the mean fit of the last fifth of the epochs
    below UNDERFIT though at least a step above the first fifth's (a
    step: FIT_DELTA or two of `counted` sequences, whichever is more, as `EarlyStopping` counts a
    rise; a cosine's last epochs barely move the loss, learnt or not). Such a run trains another
    cosine cycle (warm restarts, Loshchilov & Hutter 2017, SGDR), up to EXTEND times the budget."""
    fits = [p["fit"] for p in curve if "fit" in p]
    if not fits or train_accuracy >= FIT_ALL:
        return False
    if loss_falling(curve) is not None:
        return True
    k = max(1, len(fits) // 5)
    first, last = float(np.mean(fits[:k])), float(np.mean(fits[-k:]))
    return first + max(FIT_DELTA, 2 / counted if counted else 0.0) <= last < UNDERFIT


def diagnose(curve: list, train_accuracy: float, schedule: dict, tc: TrainConfig, arch: str = "gru") -> dict:
    """{'converged': bool, 'advice': one line or None}: not converged when the training
    accuracy is below UNDERFIT (the model underfits), or when the budget ran out while the
    validation score was still improving (its best epoch in the last third of the patience),
    or, on a fixed schedule or budget, when the loss of the last fifth of the epochs is still
    falling (`loss_falling`: 5% and LOSS_EPS below the fifth before it)."""
    run = [p for p in curve if not p.get("final")]          # the final epochs over every sequence aside
    n = len(run)
    budget = schedule.get("max_epochs") or n
    advice = []
    best = schedule.get("val_best_epoch", schedule["best_epoch"])
    if schedule["stopped"] == "budget" and best is not None \
            and n - best < max(1, schedule.get("patience") or tc.patience) // 3 + 1:
        advice.append(f"the validation loss was still falling when the budget of {budget} epochs ran out")
    falling = loss_falling(run) if schedule["mode"] != "early-stopping" else None
    if falling is not None:
        advice.append(f"the training loss was still falling at the last epoch ({falling[0]:.3f} -> {falling[1]:.3f})")
    if train_accuracy < UNDERFIT:
        advice.append(f"training accuracy {train_accuracy:.3f} is far below 1: the model underfits")
    if advice:
        size = "--set d_model=64" if arch in ("transformer", "ssm") else "--set hidden=128"
        higher = f" or a higher learning rate (--lr {2 * tc.lr:g})" if 2 * tc.lr <= LR_MAX else ""
        advice.append(f"try --epochs {2 * n}" + (f", a larger model ({size}){higher}"
                                                 if train_accuracy < UNDERFIT else ""))
    return {"converged": not advice, "advice": "; ".join(advice) or None}



@torch.no_grad()
def stream_logits(model, X: np.ndarray, chunk: int = 256) -> torch.Tensor:
    """Logits (S, L, C) float32 of never-reset streams X (S, L, F), `chunk` readings at a time with
    the state carried (the numbers of one pass, in bounded memory)."""
    x = torch.from_numpy(X)
    out, carry = [], None
    for t0 in range(0, x.shape[1], chunk):
        logits, carry = model.forward_stream(x[:, t0:t0 + chunk], carry)       # (S, c, C)
        out.append(logits)
    return torch.cat(out, 1)


@torch.no_grad()
def continuous_accuracy(model, split: Split, orders: int = 3, seed: int = 0, grace: int | None = None) -> dict:
    """The never-reset protocol in torch (`edgeseq.runtime.evaluate.continuous` runs the exported
    file): the split's sequences joined in `orders` seeded orders, one stream each, scored per
    reading past the grace (`score_continuous`). Returns its figures and 'loss', the mean cross
    entropy over the scored readings."""
    from edgeseq.runtime.evaluate import joined_streams, score_continuous
    model.eval()
    X, Y, ends = joined_streams(split, orders, seed)
    logits = stream_logits(model, X)                                           # (S, L, C)
    r = score_continuous(logits.argmax(-1).numpy(), Y, ends, grace)
    keep = torch.from_numpy(np.stack([since_change(y) >= r["grace"] for y in Y]))
    r["loss"] = float(nn.functional.cross_entropy(logits[keep], torch.from_numpy(Y)[keep])) if keep.any() else 0.0
    return r


@torch.no_grad()
def validation_scores(model, val: Split, grace: int) -> dict:
    """Scores on the validation split after an epoch: per sequence (each from zero state, the
    prediction after its last reading) and, for streaming models, never reset (one seeded order,
    `continuous_accuracy`). 'loss' and 'accuracy' average the two protocols."""
    model.eval()
    logits = sequence_logits(model, torch.from_numpy(val.X), torch.from_numpy(val.lengths))
    y = torch.from_numpy(val.y)
    seq_loss = float(nn.functional.cross_entropy(logits, y))
    seq_acc = float((logits.argmax(-1) == y).float().mean())
    out = {"sequence_loss": seq_loss, "sequence_accuracy": seq_acc, "continuous_loss": None,
           "continuous_accuracy": None, "loss": seq_loss, "accuracy": seq_acc}
    if hasattr(model, "forward_stream"):
        c = continuous_accuracy(model, val, orders=1, grace=grace)
        out.update(continuous_loss=c["loss"], continuous_accuracy=c["reading_accuracy"],
                   loss=(seq_loss + c["loss"]) / 2, accuracy=(seq_acc + c["reading_accuracy"]) / 2)
    return out


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


def _time_update(model, opt, sched, update, plan, n_features, streaming, averaged=None, repeats: int = 3) -> float:
    """Seconds one update takes: the median of `repeats` updates on zero readings in steady
    state (after an untimed first one, each carrying the state of the one before, as all but
    an epoch's first do), after which the model, optimizer, schedule and random state are
    restored (and the weights' moving average, `averaged`), so the run trains exactly as it
    would untimed."""
    import copy
    keep = [o for o in (model, opt, sched, averaged) if o is not None]
    saved = [copy.deepcopy(o.state_dict()) for o in keep]
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
    for o, state in zip(keep, saved):
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


