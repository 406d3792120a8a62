"""Torch models, one architecture per file. `build_model(arch, config)` rebuilds any of them."""

from __future__ import annotations

from dataclasses import asdict, fields

from edgeseq import contract
from edgeseq.errors import UsageError
from edgeseq.models.birnn import BiRNN, BiRNNConfig
from edgeseq.models.gru import GRU, GRUConfig
from edgeseq.models.lstm import LSTM, LSTMConfig
from edgeseq.models.rnn import RNN, RNNConfig
from edgeseq.models.transformer import Transformer, TransformerConfig

REGISTRY = {
    "rnn": (RNN, RNNConfig, {}),
    "gru": (GRU, GRUConfig, {}),
    "lstm": (LSTM, LSTMConfig, {}),
    "transformer": (Transformer, TransformerConfig, {}),
    "bigru": (BiRNN, BiRNNConfig, {"cell": "gru"}),
    "bilstm": (BiRNN, BiRNNConfig, {"cell": "lstm"}),
}
assert tuple(REGISTRY) == contract.ARCHS


def check_arch(arch: str) -> str:
    if arch not in REGISTRY:
        raise UsageError(f"unknown architecture '{arch}': choose one of {', '.join(REGISTRY)}")
    return arch


def make_config(arch: str, **overrides):
    """Config for `arch` with the given fields changed; unknown fields are an error."""
    _, cfg_cls, fixed = REGISTRY[check_arch(arch)]
    names = {f.name for f in fields(cfg_cls)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise UsageError(f"'{arch}' has no setting {', '.join(unknown)}; it has {', '.join(sorted(names))}")
    try:
        config = cfg_cls(**{**overrides, **fixed})
        build_model(arch, config)              # the layers check their sizes: hidden=0, dropout=1.5, heads=3 ...
    except (TypeError, ValueError, AssertionError, RuntimeError) as e:
        raise UsageError(f"'{arch}' settings {overrides} cannot build a model: {e}") from None
    return config


def build_model(arch: str, config):
    cls, cfg_cls, _ = REGISTRY[check_arch(arch)]
    if isinstance(config, dict):
        if arch == "transformer" and "positions" not in config:   # written before window/positions existed
            config = {**config, "positions": "sinusoid", "window": 0}
        config = cfg_cls(**config)
    return cls(config)


def config_dict(config) -> dict:
    return asdict(config)
