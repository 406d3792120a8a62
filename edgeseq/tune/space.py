"""`edgeseq tune`'s search space: what a trial may draw, checked, and drawn through an Optuna trial."""

from __future__ import annotations

import json

from edgeseq.contract import STREAM_ARCHS
from edgeseq.errors import UsageError

# The search space: a list is a choice; {"low", "high", "log"?, "step"?} a range. Model settings
# apply to the architectures in APPLIES (others keep their defaults); sizes stay small enough
# for a microcontroller: the largest (an LSTM of 64 x 2) needs about 78 KB of int8 flash and 2.3 ms
# per reading on the nRF52840, the largest Transformer (32 wide, 2 layers, window 50) 32 KB of RAM.
SPACE = {
    "arch": list(STREAM_ARCHS),
    "hidden": [8, 16, 24, 32, 48, 64],       # rnn, gru, lstm: state size per layer
    "layers": [1, 2],
    "d_model": [8, 16, 24, 32],              # transformer, ssm: width (heads 2, d_ff 2 x d_model)
    "d_state": [8, 16, 32],                  # ssm: states per layer
    "window": [16, 32, 50],                  # transformer: readings attended = its KV cache
    "lr": {"low": 1e-3, "high": 1e-2, "log": True},
    "epochs": {"low": 10, "high": 40, "step": 5},
}
# `--quick`: a smoke test of the whole path in seconds per trial (and what the tests run).
QUICK_SPACE = {
    "arch": ["rnn", "gru"],
    "hidden": [4, 8],
    "layers": [1],
    "lr": {"low": 3e-3, "high": 1e-2, "log": True},
    "epochs": {"low": 1, "high": 2},
}
APPLIES = {"hidden": ("rnn", "gru", "lstm"), "layers": STREAM_ARCHS, "d_model": ("transformer", "ssm"),
           "d_state": ("ssm",), "window": ("transformer",), "positions": ("transformer",)}
SCHEDULE = ("lr", "epochs", "augment")
# Entries a space may hold that the default one leaves out: augmentation presets
# ('auto' and edgeseq.data.augment.NAMED) to choose from, e.g. "augment": ["auto", "none"]; without the
# entry every trial trains with its architecture's default.
# The Transformer's "positions" likewise, e.g. ["alibi", "none"]; without it, ALiBi (its default).
OPTIONAL = {"augment": ["default", "none"], "positions": ["alibi", "none"]}


def check_space(space: dict) -> dict:
    """`space` checked (UsageError naming the entry otherwise) and copied as plain JSON."""
    from edgeseq.models import check_setting
    from edgeseq.train import TRAIN_LIMITS

    if not isinstance(space, dict) or not space.get("arch"):
        raise UsageError("a search space needs 'arch': a list of architectures")
    unknown = sorted(set(space) - set(SPACE) - set(OPTIONAL))
    if unknown:
        raise UsageError(f"search space entry {', '.join(unknown)} is unknown; it may hold "
                         f"{', '.join([*SPACE, *OPTIONAL])}")
    archs = space["arch"]
    if not isinstance(archs, list) or len(set(archs)) != len(archs) or not set(archs) <= set(STREAM_ARCHS):
        raise UsageError(f"search space 'arch' must list distinct streaming architectures ({', '.join(STREAM_ARCHS)}), "
                         f"got {archs!r}")
    for name, rule in space.items():
        if name == "arch":
            continue
        if name == "augment":
            from edgeseq.data.augment import AUTO, NAMED
            names = [AUTO, *NAMED]
            if not isinstance(rule, list) or not rule or not all(isinstance(v, str) and v in names for v in rule):
                raise UsageError(f"search space 'augment' must be a non-empty list of {', '.join(names)}, "
                                 f"got {rule!r}")
            continue
        if name in SCHEDULE:
            whole, lo, hi = TRAIN_LIMITS[name]
            values = rule if isinstance(rule, list) else [rule.get("low"), rule.get("high")] if isinstance(rule, dict) else None
            ok = bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi
                                      and v > 0 and (isinstance(v, int) or not whole) for v in values)
            if isinstance(rule, dict):
                ok = ok and set(rule) <= {"low", "high", "log", "step"} and rule["low"] <= rule["high"] \
                    and not (rule.get("log") and rule.get("step"))
            if not ok:
                raise UsageError(f"search space '{name}' must be a list or {{low, high, log or step}} of "
                                 f"{'whole numbers' if whole else 'numbers'} above 0 up to {hi}, got {rule!r}")
            continue
        if not isinstance(rule, list) or not rule:
            raise UsageError(f"search space '{name}' must be a non-empty list of values, got {rule!r}")
        for v in rule:
            check_setting(APPLIES[name][0], name, v)
            if name == "window" and v < 1:
                raise UsageError("search space 'window' must be at least 1: a window of 0 (the whole history) "
                                 "has no bound a microcontroller can plan")
    return json.loads(json.dumps(space))


def _suggest(trial, name, rule):
    if isinstance(rule, list):
        return trial.suggest_categorical(name, rule)
    if all(isinstance(rule[k], int) for k in ("low", "high")) and isinstance(rule.get("step", 1), int):
        return trial.suggest_int(name, rule["low"], rule["high"], step=rule.get("step", 1), log=bool(rule.get("log")))
    return trial.suggest_float(name, rule["low"], rule["high"], step=rule.get("step"), log=bool(rule.get("log")))


def suggest(trial, space: dict) -> tuple:
    """(arch, model settings, schedule {lr, epochs}) of one trial, drawn from `space`."""
    arch = trial.suggest_categorical("arch", space["arch"])
    settings = {name: _suggest(trial, name, space[name]) for name in APPLIES
                if name in space and arch in APPLIES[name]}
    if arch == "transformer":
        d = settings.get("d_model", 32)
        settings.update(heads=2 if d % 2 == 0 else 1, d_ff=2 * d)
    schedule = {name: _suggest(trial, name, space[name]) for name in SCHEDULE if name in space}
    return arch, settings, schedule


def describe(arch: str, settings: dict, schedule: dict) -> str:
    """'gru hidden=16 layers=1 epochs=25 lr=0.0042 augment=none'."""
    parts = [f"{k}={v}" for k, v in settings.items() if k not in ("heads", "d_ff")]
    parts += [f"epochs={schedule['epochs']}"] if "epochs" in schedule else []
    parts += [f"lr={schedule['lr']:.2g}"] if "lr" in schedule else []
    parts += [f"augment={schedule['augment']}"] if "augment" in schedule else []
    return " ".join([arch, *parts])
