"""The recurrent models' first input matrix drawn by its fan-in (`TrainConfig.input_init`,
`edgeseq.train.loop.init_inputs`): on one channel by default, where torch's draw leaves the
GRU and LSTM at chance on data whose classes differ by a small bump; kept elsewhere."""
from dataclasses import replace

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from edgeseq.cli import cli
from edgeseq.data import Dataset, Split
from edgeseq.errors import UsageError
from edgeseq.models import build_model, make_config
from edgeseq.train import DEFAULTS, TrainConfig, train
from edgeseq.train.config import check_train_config
from edgeseq.train.loop import init_inputs


def bumps(n_train=16, n_test=16, T=120, seed=0) -> Dataset:
    """Two classes of one shared random walk (each sequence z-normalised, as the UCR archive's
    are), class b with a bump of 0.3 over readings 50-59: a Coffee-like set, where the class
    is a small difference at one place of a large common shape."""
    rng = np.random.default_rng(seed)
    base = np.cumsum(rng.normal(size=T))
    y = np.arange(n_train + n_test) % 2
    X = (base - base.mean()) / base.std() + 0.05 * rng.normal(size=(len(y), T))
    X[y == 1, 50:60] += 0.3
    X = ((X - X.mean(1, keepdims=True)) / X.std(1, keepdims=True))[..., None].astype(np.float32)
    L = np.full(len(y), T, np.int64)
    return Dataset("bumps", Split(X[:n_train], y[:n_train], L[:n_train]),
                   Split(X[n_train:], y[n_train:], L[n_train:]), ["a", "b"], ["value"])


def split(channels: int) -> Split:
    return Split(np.zeros((2, 5, channels), np.float32), np.array([0, 1]), np.full(2, 5))


@pytest.mark.parametrize("arch", ["rnn", "gru", "lstm", "bigru", "bilstm"])
def test_one_channel_draws_the_input_matrix_by_its_fan_in(arch):
    torch.manual_seed(0)
    model = build_model(arch, make_config(arch, n_features=1, n_classes=2, hidden=64))
    names = getattr(model, "input_weights", None) or (model.input_weight,)
    before = {n: model.get_parameter(n).detach().clone() for n in names}
    assert all(w.abs().max() <= 64 ** -0.5 for w in before.values())          # torch's U(+-1/sqrt(hidden))
    said = init_inputs(model, arch, "auto", split(1))
    assert said.startswith("fan_in") and "N(0, 1/1)" in said
    for n in names:
        w = model.get_parameter(n).detach()
        assert w.shape[1] == 1 and 0.8 < w.std().item() < 1.2                   # N(0, 1): variance 1 / 1 input
        others = [p for k, p in model.named_parameters() if k not in names]
        assert all(torch.isfinite(p).all() for p in others)


def test_several_channels_keep_torch_draw_unless_asked():
    torch.manual_seed(0)
    model = build_model("gru", make_config("gru", n_features=6, n_classes=2, hidden=64))
    w0 = model.rnn.weight_ih_l0.detach().clone()
    assert init_inputs(model, "gru", "auto", split(6)) is None
    assert torch.equal(model.rnn.weight_ih_l0, w0)
    said = init_inputs(model, "gru", "fan_in", split(6))
    assert "N(0, 1/6)" in said and "given" in said
    assert 0.8 * 6 ** -0.5 < model.rnn.weight_ih_l0.std().item() < 1.2 * 6 ** -0.5
    one = build_model("gru", make_config("gru", n_features=1, n_classes=2))
    w1 = one.rnn.weight_ih_l0.detach().clone()
    assert init_inputs(one, "gru", "torch", split(1)) is None and torch.equal(one.rnn.weight_ih_l0, w1)


@pytest.mark.parametrize("arch", ["ssm", "transformer"])
def test_models_whose_encoder_is_linear_keep_its_draw(arch):
    torch.manual_seed(0)
    model = build_model(arch, make_config(arch, n_features=1, n_classes=2))
    w0 = model.get_parameter(model.input_weight).detach().clone()
    assert init_inputs(model, arch, "fan_in", split(1)) is None
    assert torch.equal(model.get_parameter(model.input_weight), w0)


def test_a_small_difference_on_one_channel_is_learnt_with_it_and_not_without():
    """60 fixed epochs, seed 0: torch's draw leaves the LSTM at chance on its own training data,
    the fan-in draw (the default on one channel) fits it and the test split; the GRU too."""
    ds = bumps()
    runs = {}
    for arch, how in (("lstm", "torch"), ("lstm", "auto"), ("gru", "auto")):
        tc = replace(DEFAULTS[arch], epochs=60, input_init=how, augment="none")
        runs[arch, how] = train(arch, ds, tc, progress=False)["metrics"]
    assert runs["lstm", "torch"]["train_accuracy"] == 0.5 and runs["lstm", "torch"]["input_init"] is None
    for key in (("lstm", "auto"), ("gru", "auto")):
        m = runs[key]
        assert m["train_accuracy"] == 1.0 and m["test_accuracy"] >= 0.9, (key, m["train_accuracy"], m["test_accuracy"])
        assert m["input_init"].startswith("fan_in") and "auto: one channel" in m["input_init"]


def test_a_bad_input_init_is_refused_in_one_line(tmp_path, monkeypatch):
    with pytest.raises(UsageError, match="input_init must be one of auto, fan_in, torch, got 'lecun'"):
        check_train_config(TrainConfig(input_init="lecun"))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["train", "--arch", "gru", "--epochs", "1", "--set", "input_init=xavier",
                                 "--out", "runs/x"])
    assert r.exit_code != 0 and "input_init must be one of auto, fan_in, torch" in r.output
    assert not (tmp_path / "runs" / "x").exists()


@pytest.mark.parametrize("arch", ["ssm", "transformer"])
def test_fan_in_asked_of_a_model_it_does_not_apply_to_is_refused(arch, tmp_path, monkeypatch):
    with pytest.raises(UsageError, match=f"input_init=fan_in applies to rnn, gru, lstm, bigru, bilstm: '{arch}'"):
        train(arch, bumps(4, 2, T=10), TrainConfig(epochs=1, input_init="fan_in"), progress=False)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["train", "--arch", arch, "--epochs", "1", "--set", "input_init=fan_in",
                                 "--out", "runs/x"])
    assert r.exit_code != 0 and "drop the setting" in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "runs" / "x").exists()
    ck = train(arch, bumps(4, 2, T=10), TrainConfig(epochs=1, input_init="torch"), progress=False)
    assert ck["metrics"]["input_init"] is None                # torch's draw is what these models have anyway
