"""Torch models, one architecture per file. `build_model(arch, config)` rebuilds any of them."""

from __future__ import annotations

import numbers
from dataclasses import asdict, fields

from edgeseq import contract
from edgeseq.errors import UsageError
from edgeseq.models.birnn import BiRNN, BiRNNConfig
from edgeseq.models.gru import GRU, GRUConfig
from edgeseq.models.lstm import LSTM, LSTMConfig
from edgeseq.models.rnn import RNN, RNNConfig
from edgeseq.models.ssm import SSM, SSMConfig
from edgeseq.models.transformer import Transformer, TransformerConfig

REGISTRY = {
    "rnn": (RNN, RNNConfig, {}),
    "gru": (GRU, GRUConfig, {}),
    "lstm": (LSTM, LSTMConfig, {}),
    "transformer": (Transformer, TransformerConfig, {}),
    "ssm": (SSM, SSMConfig, {}),
    "bigru": (BiRNN, BiRNNConfig, {"cell": "gru"}),
    "bilstm": (BiRNN, BiRNNConfig, {"cell": "lstm"}),
}
assert tuple(REGISTRY) == contract.ARCHS


FROM_DATA = ("n_features", "n_classes", "levels")   # config fields training sets from the data, not --set


def check_arch(arch: str) -> str:
    if arch not in REGISTRY:
        raise UsageError(f"unknown architecture '{arch}': choose one of {', '.join(REGISTRY)}")
    return arch


# What each model setting may be: (type, smallest, largest) for numbers, (bool,) for a switch,
# the choices for strings. The ceilings stop a typo (hidden=64000) from allocating gigabytes
# before it fails.
LIMITS = {
    "n_features": (int, 1, 4096),
    "n_classes": (int, 1, 4096),           # 1: a regression model with one target
    "levels": (int, 0, 4096),              # the gain stage's log levels (`edgeseq.data.gain_features`)
    "hidden": (int, 1, 4096),
    "layers": (int, 1, 16),
    "dropout": (float, 0.0, 0.95),
    "d_model": (int, 2, 4096),       # LayerNorm over one channel outputs its bias whatever the input
    "heads": (int, 1, 4096),
    "d_ff": (int, 1, 16384),
    "window": (int, 0, 100_000),
    "d_state": (int, 1, 4096),
    "selective": (bool,),
    "positions": ("none", "sinusoid", "alibi"),
    "cell": ("gru", "lstm"),
}


def check_setting(arch: str, name: str, value):
    """`value` for setting `name` of `arch`, as the config field's type; UsageError naming the
    setting and what it may be otherwise. A switch takes true or false only (not 1 or 'yes'),
    a number field no bool or text ('true', '8'), a whole-number field no float (2.0
    included: the checkpoint keeps exactly what it got)."""
    rule = LIMITS[name]
    if rule[0] is bool:
        if not isinstance(value, bool):
            raise UsageError(f"'{arch}' setting {name} must be true or false, got {value!r}")
        return value
    if isinstance(rule[0], str):
        if not isinstance(value, str) or value not in rule:
            raise UsageError(f"'{arch}' setting {name} must be one of {', '.join(rule)}, got {value!r}")
        return value
    kind, lo, hi = rule
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if kind is int:
        if not number or not isinstance(value, numbers.Integral) or not lo <= value <= hi:
            raise UsageError(f"'{arch}' setting {name} must be a whole number in {lo}..{hi}, got {value!r}")
        return int(value)
    if not number or not lo <= value <= hi:           # False for NaN
        raise UsageError(f"'{arch}' setting {name} must be a number in {lo}..{hi}, got {value!r}")
    return float(value)


def make_config(arch: str, **overrides):
    """Config for `arch` with the given fields changed. Unknown fields, values of the wrong
    type or out of range (`LIMITS`) and fields the architecture fixes are UsageErrors that
    name the setting and what it may be."""
    _, cfg_cls, fixed = REGISTRY[check_arch(arch)]
    names = {f.name for f in fields(cfg_cls)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        settable = sorted(names - set(fixed) - set(FROM_DATA))
        raise UsageError(f"'{arch}' has no setting {', '.join(unknown)}; it has {', '.join(settable)}")
    for name, value in fixed.items():
        if name in overrides and overrides[name] != value:
            raise UsageError(f"'{arch}' fixes {name}={value}; choose the architecture instead "
                             "(bigru or bilstm)")
    values = {name: check_setting(arch, name, v) for name, v in overrides.items()}
    try:
        config = cfg_cls(**{**values, **fixed})
        if isinstance(config, TransformerConfig):
            _check_transformer(config)
        build_model(arch, config)              # the layers check anything LIMITS does not
    except (TypeError, ValueError, AssertionError, RuntimeError) as e:
        raise UsageError(f"'{arch}' settings {overrides} cannot build a model: {e}") from None
    return config


def _check_transformer(c: TransformerConfig):
    """Settings the Transformer needs together: d_model splits over heads, sinusoids pair up."""
    if c.d_model % c.heads:
        raise UsageError(f"'transformer' setting heads={c.heads} must divide d_model={c.d_model} "
                         f"(heads one of {', '.join(str(h) for h in range(1, c.d_model + 1) if c.d_model % h == 0)})")
    if c.positions == "sinusoid" and c.d_model % 2:
        raise UsageError(f"'transformer' setting d_model={c.d_model} must be even with positions=sinusoid "
                         "(sine and cosine pairs)")


def build_model(arch: str, config):
    cls, cfg_cls, _ = REGISTRY[check_arch(arch)]
    if isinstance(config, dict):
        if arch == "transformer" and "positions" not in config:   # written before window/positions existed
            config = {**config, "positions": "sinusoid", "window": 0}
        config = cfg_cls(**config)
    return cls(config)


def config_dict(config) -> dict:
    return asdict(config)
