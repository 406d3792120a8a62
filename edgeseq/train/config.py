"""The training settings: `TrainConfig`, each architecture's defaults (`DEFAULTS`), the bounds
each setting is checked against (`TRAIN_LIMITS`, `check_train_config`) and the `--set NAME=VALUE`
parser (`parse_overrides`). No torch: `edgeseq.train.loop` trains with them."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace

from edgeseq.data.augment import AUTO, NONE, Augment, check_augment
from edgeseq.data import INPUT_TRANSFORMS
from edgeseq.errors import UsageError


@dataclass(frozen=True)
class TrainConfig:
    epochs: int | None = None  # passes over the training split; None: until the validation score stops
                               # improving (`patience`), within the data's budget (`epoch_budget`)
    batch_size: int = 8       # single sequences per update at least; long data gets more (see `updates`)
    lr: float = 3e-3          # AdamW peak learning rate, cosine-decayed to 0
    weight_decay: float = 1e-2
    clip: float = 1.0         # gradient-norm clip, recurrent nets need it
    seed: int = 0
    aux_weight: float = 0.5   # weight of the loss on predictions after every reading past the first quarter
    streams: int = 8          # TBPTT: parallel training streams at least (the split joined in a random order)
    chunk: int | None = None  # TBPTT: readings per update in each stream and lane; the state carries over,
                              # detached. None: the training sequences' median length, 50 to 256 (`chunk_for`)
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
                                          # (edgeseq.data.augment): an Augment, its fields, 'none', 'default',
                                          # 'light' or 'auto' (by the data's channels, `for_data`)
    val_fraction: float = 0.2  # share of the training sequences held out to decide when to stop (epochs None)
    patience: int = 12        # epochs without a better validation score before training stops, and at least
                              # `patience_updates` updates' worth; the learning rate halves after a third of that
    patience_updates: int = 100
    budget_updates: int = 3000  # epochs None: at most this many updates in all (small sets: many epochs) ...
    budget_readings: int = 20_000_000  # ... and at most this many training readings run (long recordings: few)
    min_epochs: int = 10      # epochs None: never fewer epochs in the budget than this
    final_share: float = 0.25  # epochs None: after stopping, the validation sequences join the rest for this
                               # share of the kept epoch's count, the learning rate annealed to 0 (0: none)
    restarts: int = 2         # epochs None: a run that stopped early far from fitting its training data
                              # (stalled) trains again from a new initialisation, up to this many times
                              # while the attempts stall; one that fits its training data better replaces
                              # it where its validation loss is lower (`edgeseq.train.loop.kept_attempt`; 0: never)
    ema: float = 0.0          # decay of a moving average of the weights (`edgeseq.train.loop.ema_decay`), stepped
                              # after every update; the average is validated, kept and written (0: none)
    input_transform: str = "auto"  # "auto": on a channel whose sequences' amplitudes span three decades or
                                   # more, the gain stage (rnn, gru, lstm, ssm; `edgeseq.data.gain_floors`)
                                   # or else asinh(reading / scale) (`edgeseq.data.asinh_scales`);
                                   # "asinh" / "gain": on every channel; "none": the reading as it is
    input_init: str = "auto"  # the recurrent models' (rnn, gru, lstm, bigru, bilstm) first input matrix:
                              # "fan_in" draws it from N(0, 1/inputs) (`edgeseq.models.common.lecun_normal`),
                              # "torch" keeps torch's U(+-1/sqrt(hidden)); "auto": fan_in on data with one
                              # channel (`edgeseq.train.loop.init_inputs`), else torch; classifiers only
    gain_stage: bool = True   # whether "auto" may choose the gain stage; False for models bound for the
                              # firmware, which does not run it (`edgeseq tune`): asinh there instead


# Per-architecture defaults, chosen on BasicMotions (figures in README). Augmentation is AUTO for
# the streaming architectures: on several channels the full set (on BasicMotions it raised the mean
# test accuracy of each on both protocols over seeds 0-6: scripts/measure_augment.py, docs/augment.md);
# on one channel jitter and join only (scripts/measure_ucr.py, docs/training.md). The bidirectional ones have one protocol, unmeasured.
# The SSM learns BasicMotions in the fewest epochs and stops on a shorter patience, which kept its training
# time within twice the earlier fixed schedule's (docs/training.md).
DEFAULTS = {
    "rnn": TrainConfig(lr=3e-3, augment=AUTO),
    "gru": TrainConfig(lr=5e-3, augment=AUTO),
    "lstm": TrainConfig(lr=5e-3, augment=AUTO),
    "transformer": TrainConfig(lr=2e-3, augment=AUTO),
    "ssm": TrainConfig(lr=5e-3, augment=AUTO, patience=10, patience_updates=80),
    "bigru": TrainConfig(lr=5e-3, stream_weight=0.0),
    "bilstm": TrainConfig(lr=5e-3, stream_weight=0.0),
}


# What each TrainConfig field may be: (whole number?, smallest, largest); lr and clip must be above 0.
# Fields with the same bounds share an entry; `check_train_config` checks them in TrainConfig's order.
TRAIN_LIMITS = {
    **dict.fromkeys(("epochs", "batch_size", "streams", "patience", "min_epochs"), (True, 1, 100_000)),
    **dict.fromkeys(("chunk", "updates"), (True, 1, 1_000_000)),
    **dict.fromkeys(("seq_max", "budget_updates"), (True, 1, 100_000_000)),
    "grace": (True, 0, 1_000_000),
    "patience_updates": (True, 0, 100_000_000),
    "budget_readings": (True, 1, 10**13),
    "threads": (True, 1, 1024),
    "seed": (True, 0, 2**32 - 1),             # numpy's seed range
    **dict.fromkeys(("lr", "weight_decay"), (False, 0.0, 10.0)),
    **dict.fromkeys(("aux_weight", "stream_weight"), (False, 0.0, 1e3)),
    "clip": (False, 0.0, 1e6),
    "val_fraction": (False, 0.0, 0.5),
    "final_share": (False, 0.0, 1.0),
    "restarts": (True, 0, 10),
    "ema": (False, 0.0, 0.9999),
}


INPUT_INITS = ("auto", "fan_in", "torch")     # TrainConfig.input_init's choices
TRAIN_OPTIONS = ("epochs", "lr", "seed")      # the training settings `edgeseq train` has an option for
EARLY_SETTINGS = ("patience", "patience_updates", "val_fraction", "budget_updates", "budget_readings", "min_epochs",
                  "final_share", "restarts")              # the ones only the default schedule (epochs None) reads
TRAIN_SETTINGS = ("patience", "patience_updates", "val_fraction", "budget_updates", "budget_readings", "min_epochs",
                  "final_share", "restarts", "batch_size",
                  "weight_decay", "clip", "aux_weight", "streams", "chunk", "seq_max", "updates", "grace",
                  "stream_weight", "threads", "ema", "input_transform", "input_init")   # the ones `edgeseq train --set NAME=VALUE` takes


def check_train_config(tc: TrainConfig) -> TrainConfig:
    """`tc` with its augmentation as an Augment (`check_augment`); UsageError naming the first
    training setting of the wrong type or out of range."""
    for name in (f.name for f in fields(tc) if f.name in TRAIN_LIMITS):
        whole, lo, hi = TRAIN_LIMITS[name]
        v = getattr(tc, name)
        if v is None and name in ("grace", "epochs", "chunk"):
            continue
        number = isinstance(v, (int, float)) and not isinstance(v, bool) and (isinstance(v, int) or not whole)
        positive = name in ("lr", "clip")
        if not number or not lo <= v <= hi or (positive and v <= 0):          # NaN fails `lo <= v`
            what = "a whole number" if whole else "a number"
            rng = f"above {lo} up to {hi}" if positive else f"in {lo}..{hi}"
            raise UsageError(f"training setting {name} must be {what} {rng}, got {v!r}")
    if tc.input_transform not in INPUT_TRANSFORMS:
        raise UsageError(f"training setting input_transform must be one of {', '.join(INPUT_TRANSFORMS)}, "
                         f"got {tc.input_transform!r}")
    if tc.input_init not in INPUT_INITS:
        raise UsageError(f"training setting input_init must be one of {', '.join(INPUT_INITS)}, got {tc.input_init!r}")
    return replace(tc, augment=check_augment(tc.augment))


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
