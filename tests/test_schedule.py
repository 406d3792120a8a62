"""The default schedule: a validation split carved from the training data, early stopping on it,
a budget that follows the data, the training curve and a plain verdict on convergence."""

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from edgeseq.cli import cli
from edgeseq.data import Dataset, Split
from edgeseq.data.synthetic import recordings
from edgeseq.errors import DataError, UsageError
from edgeseq.runtime.evaluate import grace_for
from edgeseq.train import (DEFAULTS, EarlyStopping, TrainConfig, diagnose, epoch_budget, model_from_checkpoint, train,
                           validation_scores, validation_split)
from edgeseq.cli.train import schedule_line
from edgeseq.train.loop import EXTEND
from edgeseq.train.plan import CHUNK_MAX, CHUNK_MIN, chunk_for, plan_epoch

TINY = {"hidden": 8}


@pytest.fixture(scope="module")
def easy():
    return recordings(30, 40, n_classes=3, seed=3, n_test=12, name="easy")


@pytest.fixture(scope="module")
def stopped(easy):
    tc = replace(DEFAULTS["gru"], patience=3, budget_updates=400, augment="none", final_share=0.0)
    return train("gru", easy, tc, TINY, progress=False)


def test_the_validation_sequences_join_for_final_epochs_annealed_to_zero(easy):
    tc = replace(DEFAULTS["gru"], patience=3, budget_updates=400, augment="none", final_share=0.5)
    ck = train("gru", easy, tc, TINY, progress=False)
    s, curve = ck["metrics"]["schedule"], ck["metrics"]["curve"]
    final = [p for p in curve if p.get("final")]
    assert len(final) == s["final_epochs"] == -(-s["best_epoch"] // 2) >= 1
    assert curve[-len(final):] == final and all("val_loss" not in p for p in final)
    lrs = [p["lr"] for p in final]
    assert lrs[0] == curve[s["best_epoch"] - 1]["lr"] and all(b < a for a, b in zip(lrs, lrs[1:]))
    assert ck["metrics"]["plan"]["readings"] == int(easy.train.lengths.sum())      # every training sequence


def test_default_schedule_stops_on_the_validation_split_and_keeps_the_best_epoch(easy, stopped):
    s, curve = stopped["metrics"]["schedule"], stopped["metrics"]["curve"]
    assert s["mode"] == "early-stopping"
    assert s["epochs_run"] == len(curve) <= s["max_epochs"]
    best = [p for p in curve if p["best"]]
    assert best[-1]["epoch"] == s["best_epoch"]
    if s["stopped"] == "early":
        assert s["epochs_run"] - s["best_epoch"] == s["patience"]
    assert s["final_epochs"] == 0
    # the weights kept are the best epoch's: scoring them again on the same split gives its figure
    _, val, _ = validation_split(easy, DEFAULTS["gru"])
    again = validation_scores(model_from_checkpoint(stopped), val, grace_for(val.lengths))
    assert again["accuracy"] == pytest.approx(best[-1]["val_accuracy"], abs=1e-4)
    assert stopped["metrics"]["validation_accuracy"] == best[-1]["val_accuracy"]


def test_with_ema_the_weights_validated_and_kept_are_the_average(easy, monkeypatch):
    """`ema`: a fixed schedule ends on the exponential moving average of the weights after every
    update (computed here from the weights each update left), and the default schedule keeps
    the average it validated: scoring the kept weights again gives the best epoch's figure."""
    seen = []
    step = torch.optim.AdamW.step

    def record(self, *a, **k):
        out = step(self, *a, **k)
        seen.append([p.detach().clone() for g in self.param_groups for p in g["params"]])
        return out
    monkeypatch.setattr(torch.optim.AdamW, "step", record)
    decay = 0.9
    tc = replace(DEFAULTS["gru"], epochs=2, augment="none", ema=decay)
    ck = train("gru", easy, tc, TINY, progress=False)
    average = seen[0]
    for n, weights in enumerate(seen[1:], 1):
        d = min(decay, (1 + n) / (10 + n))                         # the warm-up: 0.18, 0.27, ... up to decay
        average = [d * a + (1 - d) * w for a, w in zip(average, weights)]
    model = model_from_checkpoint(ck)
    kept = list(model.parameters())
    assert len(seen) == ck["metrics"]["updates"] > 2 and len(kept) == len(average)
    assert all(torch.allclose(k, a, atol=1e-6) for k, a in zip(kept, average))
    assert not all(torch.allclose(k, w, atol=1e-6) for k, w in zip(kept, seen[-1]))   # not the last weights
    monkeypatch.setattr(torch.optim.AdamW, "step", step)

    tc = replace(DEFAULTS["gru"], patience=3, budget_updates=400, augment="none", final_share=0.0, ema=decay)
    ck = train("gru", easy, tc, TINY, progress=False)
    best = [p for p in ck["metrics"]["curve"] if p["best"]][-1]
    _, val, _ = validation_split(easy, tc)
    again = validation_scores(model_from_checkpoint(ck), val, grace_for(val.lengths))
    assert ck["metrics"]["schedule"]["best_epoch"] == best["epoch"]
    assert again["loss"] == pytest.approx(best["val_loss"], abs=1e-4)
    assert ck["train_config"]["ema"] == decay


def test_the_learning_rate_halves_on_a_plateau_and_never_rises(stopped):
    lrs = [p["lr"] for p in stopped["metrics"]["curve"]]
    assert lrs[0] == DEFAULTS["gru"].lr
    assert all(b <= a for a, b in zip(lrs, lrs[1:]))
    assert all(round(np.log2(lrs[0] / v), 9).is_integer() for v in lrs)       # halvings only


def test_validation_split_is_whole_groups_when_the_data_names_them(easy):
    n = len(easy.train)
    groups = np.array([f"p{i % 6}" for i in range(n)])
    tr = Split(easy.train.X, easy.train.y, easy.train.lengths, easy.train.Y, groups)
    ds = Dataset("g", tr, easy.test, easy.labels, easy.features)
    rest, val, held = validation_split(ds, DEFAULTS["gru"])
    assert len(rest) + len(val) == n and len(val) > 0
    assert not set(rest.groups) & set(val.groups)
    assert "whole groups" in held
    assert set(rest.y.tolist()) == set(range(3))


def test_no_validation_split_with_explicit_epochs_or_too_little_data(easy):
    rest, val, held = validation_split(easy, replace(DEFAULTS["gru"], epochs=3))
    assert val is None and held is None and rest is easy.train
    one_each = easy.train.take(np.array([np.flatnonzero(easy.train.y == c)[0] for c in range(3)]))
    ds = Dataset("few", one_each, easy.test, easy.labels, easy.features)
    rest, val, held = validation_split(ds, DEFAULTS["gru"])
    assert val is None and "too few" in held
    ck = train("gru", ds, replace(DEFAULTS["gru"], budget_updates=20, min_epochs=2, augment="none"), TINY,
               progress=False)
    s = ck["metrics"]["schedule"]
    assert s["mode"] == "budget" and s["epochs_run"] == s["max_epochs"] and "too few" in s["validation"]


def test_without_a_validation_split_a_model_still_learning_gets_another_cosine_cycle(easy, capsys):
    """No validation split: at the end of the budget a model still learning its training data
    trains one more cosine cycle of the budget's length from RESTART_LR of `lr` (up to EXTEND
    times the budget) and says so; one that does not learn at all (a learning rate too low to
    move it) stops at the budget, told to train longer or faster."""
    from edgeseq.train.loop import RESTART_LR
    tc = replace(DEFAULTS["gru"], val_fraction=0.0, budget_updates=1, min_epochs=10, augment="none")
    ck = train("gru", easy, tc, TINY, progress=True)
    s, curve = ck["metrics"]["schedule"], ck["metrics"]["curve"]
    assert s["mode"] == "budget" and s["budget_epochs"] == 10 and s["cycles"] == 2
    assert s["epochs_run"] == len(curve) == s["max_epochs"] == EXTEND * 10
    lrs = [p["lr"] for p in curve]
    assert lrs[0] == tc.lr and lrs[10] == pytest.approx(RESTART_LR * tc.lr)
    assert all(b < a for a, b in zip(lrs[:10], lrs[1:10])) and all(b < a for a, b in zip(lrs[10:], lrs[11:]))
    assert curve[9]["fit"] < 0.9 <= ck["metrics"]["train_accuracy"]         # it underfit at the budget's end
    assert "another cosine cycle of 10 epochs" in capsys.readouterr().err
    slow = train("gru", easy, replace(tc, lr=1e-6), TINY, progress=False)
    s = slow["metrics"]["schedule"]
    assert s["cycles"] == 1 and s["epochs_run"] == 10 and not s["converged"] and "try --epochs 20" in s["advice"]
    assert schedule_line(ck["metrics"]["schedule"]).startswith("20 epochs, the whole budget and a second cosine cycle")
    assert schedule_line(s).startswith("10 epochs, the whole budget (no validation split")


def _curve(losses, fits):
    return [{"epoch": i + 1, "loss": a, "fit": f} for i, (a, f) in enumerate(zip(losses, fits))]


@pytest.mark.parametrize("losses, fits, acc, grows", [
    ([2.0 - 0.1 * i for i in range(10)], [0.5] * 10, 0.5, True),             # the loss still falls 5% a fifth
    ([2.0 - 0.1 * i for i in range(10)], [0.5] * 10, 1.0, False),            # ... but every sequence is right
    ([0.02 - 0.001 * i for i in range(10)], [0.5] * 10, 0.5, False),         # ... a fall of a few thousandths
    ([1.0] * 10, [0.3, 0.3] + [0.5] * 8, 0.5, True),                         # a flat loss, the fit rising underfit
    ([1.0] * 10, [0.3, 0.3] + [0.34] * 8, 0.34, False),                      # one sequence of 30 is no rise
    ([1.0] * 10, [0.3, 0.3] + [0.95] * 8, 0.95, False),                      # fit above 0.9: nothing to grow for
    ([1.0] * 10, [0.3] * 10, 0.3, False),                                    # learning nothing
    ([2.0 - 0.1 * i for i in range(5)], [0.3] * 5, 0.3, False),              # under 10 epochs: no loss trend ...
    ([1.0] * 5, [0.3, 0.6, 0.6, 0.6, 0.6], 0.6, True),                       # ... the fit's still counts
])
def test_still_learning_reads_the_loss_and_the_fit(losses, fits, acc, grows):
    from edgeseq.train.loop import still_learning
    assert still_learning(_curve(losses, fits), 30, acc) is grows
    assert still_learning([{"epoch": 1, "loss": 1.0}], 30, 0.3) is False       # no fit recorded: never


def test_explicit_epochs_train_exactly_that_many_on_every_sequence(easy):
    ck = train("gru", easy, replace(DEFAULTS["gru"], epochs=3, augment="none"), TINY, progress=False)
    s = ck["metrics"]["schedule"]
    assert (s["mode"], s["epochs_run"], s["best_epoch"], s["validation"]) == ("fixed", 3, None, None)
    assert len(ck["loss_history"]) == 3 and "val_loss" not in ck["metrics"]["curve"][0]


def test_epoch_budget_follows_the_data():
    tc = DEFAULTS["gru"]
    small = plan_epoch(np.full(40, 100), tc, True)
    long = plan_epoch(np.full(4, 250_000), tc, True)
    assert epoch_budget(small, tc, True) == 3000 // small.per_epoch + (3000 % small.per_epoch > 0)
    assert epoch_budget(long, tc, True) == tc.min_epochs          # 2,000,000 readings run an epoch
    assert epoch_budget(small, tc, True) > 20 * epoch_budget(long, tc, True)
    assert epoch_budget(plan_epoch(np.full(400, 1000), tc, True), tc, True) == 25      # 20e6 / 800,000


@pytest.mark.parametrize("lengths,chunk", [([10, 30], CHUNK_MIN), ([100] * 5, CHUNK_MIN), ([150] * 3, 150),
                                           ([427] * 3, CHUNK_MAX), ([29, 200, 361], 200)])
def test_chunk_follows_the_sequences_length(lengths, chunk):
    assert chunk_for(lengths) == chunk


def test_diagnose_names_underfitting_and_a_loss_still_falling():
    tc = DEFAULTS["gru"]
    flat = [{"epoch": i + 1, "loss": 1.0} for i in range(20)]
    falling = [{"epoch": i + 1, "loss": 1.0 / (i + 1)} for i in range(20)]
    fixed = {"mode": "fixed", "stopped": "fixed", "best_epoch": None}
    assert diagnose(flat, 1.0, fixed, tc) == {"converged": True, "advice": None}
    d = diagnose(flat, 0.4, fixed, tc, "ssm")
    assert not d["converged"] and "training accuracy 0.400 is far below 1" in d["advice"]
    assert "--set d_model=64" in d["advice"] and d["advice"].count("--epochs") == 1
    d = diagnose(falling, 1.0, fixed, tc)
    assert not d["converged"] and "still falling" in d["advice"] and "try --epochs 40" in d["advice"]
    assert "larger model" not in d["advice"]
    # the budget ran out with the best epoch the last one before the final epochs over every sequence
    spent = {"mode": "early-stopping", "stopped": "budget", "best_epoch": 20, "max_epochs": 20, "patience": 12}
    d = diagnose(flat + [{"epoch": 21 + i, "loss": 1.0, "final": True} for i in range(5)], 1.0, spent, tc)
    assert not d["converged"] and "still falling when the budget of 20 epochs ran out" in d["advice"]
    assert diagnose(flat, 1.0, {**spent, "best_epoch": 5}, tc)["converged"]


def test_an_underfit_model_is_called_so(easy):
    """A model too small for 3 classes (one hidden unit, two updates) does not learn: the
    checkpoint says so, with what to try."""
    ck = train("gru", easy, replace(DEFAULTS["gru"], epochs=1, updates=2, augment="none"), {"hidden": 1},
               progress=False)
    s = ck["metrics"]["schedule"]
    assert ck["metrics"]["train_accuracy"] < 0.9
    assert s["converged"] is False and "underfits" in s["advice"]


def test_cli_refuses_schedule_settings_beside_epochs_and_points_a_misspelt_name(tmp_path):
    runner = CliRunner()
    r = runner.invoke(cli, ["train", "--out", str(tmp_path / "r"), "--epochs", "3", "--set", "patience=20"])
    assert r.exit_code == 2
    assert "Error: --set patience shape the default schedule, which --epochs replaces by a fixed one" in r.output
    r = runner.invoke(cli, ["train", "--out", str(tmp_path / "r"), "--set", "patiance=20"])
    assert r.exit_code == 2 and "Error: 'gru' has no setting patiance; did you mean patience?" in r.output


def test_training_settings_in_model_settings_are_pointed_to_their_place(easy):
    with pytest.raises(UsageError, match=r"^epochs is a training setting, not a model setting: give it as "
                                         r"--epochs 5$"):
        train("gru", easy, TrainConfig(epochs=1), {"epochs": 5}, progress=False)
    with pytest.raises(UsageError, match="patience is a training setting"):
        train("gru", easy, TrainConfig(epochs=1), {"patience": 5}, progress=False)


def test_cli_prints_the_schedule_writes_the_curve_and_points_set_epochs_to_the_option(tmp_path, easy):
    data = tmp_path / "easy.npz"
    np.savez(data, X=easy.train.X, y=easy.train.y, lengths=easy.train.lengths, X_test=easy.test.X,
             y_test=easy.test.y, lengths_test=easy.test.lengths)
    runner = CliRunner()
    r = runner.invoke(cli, ["train", "--data", str(data), "--out", str(tmp_path / "r"), "--quiet",
                             "--set", "hidden=8", "--set", "epochs=4"])
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines()[-1] == ("Error: epochs is a training setting, not a model setting: give "
                                                 "it as --epochs 4 (see 'cli train --help')")
    r = runner.invoke(cli, ["train", "--data", str(data), "--out", str(tmp_path / "r"), "--quiet",
                             "--set", "hidden=8", "--set", "patience=2", "--set", "budget_updates=60",
                             "--set", "augment=none", "--set", "final_share=0"])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("schedule: "))
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())["metrics"]
    s = m["schedule"]
    assert s["patience"] == max(2, -(-DEFAULTS["gru"].patience_updates // m["plan"]["per_epoch"]))
    assert f"kept epoch {s['best_epoch']} of {s['epochs_run']} (" in line
    assert len(m["curve"]) == s["epochs_run"] and {"loss", "val_loss", "val_accuracy", "lr"} <= set(m["curve"][0])
    png = (tmp_path / "r" / "training_curve.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert ("warning: not converged" in r.output) == (not s["converged"])


def _stopper(patience=3):
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    return model, opt, EarlyStopping(model, opt, patience, SimpleNamespace(y=np.arange(100) % 4), 100)


def test_an_underfit_model_still_learning_is_neither_stopped_nor_slowed_nor_rolled_back():
    model, opt, st = _stopper()
    assert not st.step(1, {"loss": 1.0, "accuracy": 1.0}, fit=0.30)           # the best validation loss
    for e in range(2, 12):                                                     # worse on validation, still learning
        assert not st.step(e, {"loss": 2.0, "accuracy": 1.0}, fit=0.30 + 0.02 * e)
        assert st.learning() and opt.param_groups[0]["lr"] == 1.0
    with torch.no_grad():
        model.weight.fill_(7.0)
    e = 12
    while not st.step(e, {"loss": 2.0, "accuracy": 1.0}, fit=0.51):
        e += 1
    # the training accuracy stalls (epoch 12 on): from its `patience`-th epoch without a rise (14) the
    # plateau counts again, the learning rate halving every `patience // 3` (1) epochs, and training
    # stops at the `patience`-th counted (16)
    assert not st.learning() and e == 16 and opt.param_groups[0]["lr"] == 0.5 ** 3
    assert st.restore(last=e) == 16 and float(model.weight[0, 0]) == 7.0       # the last epoch's weights
    assert st.kept == "last (underfit)"


def _learnt_then(last_loss, last_fit, rises=True, last_acc=0.6):
    """A stopper whose best validation loss was epoch 1 (validation accuracy 0.6), then 10
    epochs of fit rising (or not)."""
    model, opt, st = _stopper()
    st.step(1, {"loss": 1.0, "accuracy": 0.6}, fit=0.30, counted=100)
    best = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.fill_(7.0)
    for e in range(2, 11):
        st.step(e, {"loss": 2.0, "accuracy": 0.6}, fit=0.30 + (0.04 * e if rises else 0.0), counted=100)
    st.step(11, {"loss": last_loss, "accuracy": last_acc}, fit=last_fit, counted=100)
    return model, st, best


@pytest.mark.parametrize("last_loss,last_fit,rises,last_acc,kept", [
    (2.0, 0.70, True, 0.59, "last"),        # underfit and still learning: the last epoch
    (float("nan"), 0.70, True, 0.6, "best"),    # diverged: its validation loss is not finite
    (50.0, 0.10, True, 0.6, "best"),        # collapsed: its fit far below the best
    (2.0, 0.30, False, 0.6, "best"),        # never learnt after the best epoch
    (2.0, 0.70, True, 0.3, "best"),         # learnt its training sequences only (random labels)
])
def test_an_underfit_model_is_rolled_back_when_it_diverged_or_never_learnt(last_loss, last_fit, rises, last_acc,
                                                                           kept):
    model, st, best = _learnt_then(last_loss, last_fit, rises, last_acc)
    assert st.underfit()
    epoch = st.restore(last=11)
    assert st.kept.startswith(kept) and epoch == (11 if kept == "last" else 1)
    assert torch.equal(model.weight, best) == (kept == "best")


def test_a_rise_in_fit_is_at_least_two_sequences_worth():
    _, _, st = _stopper()
    for e, f in enumerate([0.30, 0.32, 0.34, 0.32, 0.34], 1):          # within 0.05: under 2 of 40 sequences
        st.step(e, {"loss": 1.0 - e / 10, "accuracy": 1.0}, fit=f, counted=40)
    assert (st.fit_best, st.fit_rose, st.fit_max) == (0.30, 1, 0.34)
    st.step(6, {"loss": 0.3, "accuracy": 1.0}, fit=0.36, counted=40)      # 0.06 above 0.30: a rise
    assert (st.fit_best, st.fit_rose) == (0.36, 6)


def test_a_model_that_diverged_is_refused_not_written(easy):
    from edgeseq.train.loop import check_finite
    model = torch.nn.Linear(2, 1)
    check_finite(model, "gru", easy, DEFAULTS["gru"])                     # finite: nothing to say
    with torch.no_grad():
        model.bias.fill_(float("nan"))
    with pytest.raises(DataError, match=r"diverged \(1 weight tensor\(s\) not finite, first bias\): nothing was "
                                        r"written; try a lower learning rate \(--lr 0.0005\)"):
        check_finite(model, "gru", easy, DEFAULTS["gru"])


def test_the_progress_follows_a_budget_that_grew(easy):
    from edgeseq.train.plan import Progress
    plan = plan_epoch(easy.train.lengths, DEFAULTS["gru"], True)
    bar = Progress("gru", easy, plan, 10, False, early=True, extend=2)
    bar.grow(25)
    assert (bar.epochs, bar.total) == (25, 25 * plan.per_epoch)
    bar.grow(12)                                  # never shrinks
    assert bar.epochs == 25


def test_every_epoch_records_its_fit_and_the_schedule_says_what_was_kept(stopped):
    curve, s = stopped["metrics"]["curve"], stopped["metrics"]["schedule"]
    assert all(0.0 <= p["fit"] <= 1.0 for p in curve)
    assert s["kept"] == "best" and s["val_best_epoch"] == s["best_epoch"]
    assert s["max_epochs"] == s["budget_epochs"] or s["max_epochs"] <= EXTEND * s["budget_epochs"]


def test_the_schedule_line_says_the_budget_grew_and_the_last_epoch_was_kept():
    from edgeseq.cli.train import schedule_line
    s = {"mode": "early-stopping", "stopped": "budget", "validation": "107 of 537 training sequences",
         "best_epoch": 100, "epochs_run": 125, "final_epochs": 25, "max_epochs": 100, "budget_epochs": 50,
         "kept": "last (underfit)", "val_best_epoch": 25}
    line = schedule_line(s)
    assert "kept the last of 100 epochs (budget spent, budget 50 epochs, grown to 100 while the model " \
           "still learnt), then 25 over every training sequence" in line
    assert line.endswith("went on learning after its lowest validation loss, epoch 25")
    line = schedule_line({**s, "kept": "best", "best_epoch": 25, "max_epochs": 50})
    assert "kept epoch 25 of 100 (budget spent, budget 50 epochs)" in line and "grown" not in line


def test_a_model_that_fits_its_training_data_stops_on_the_plateau_and_keeps_the_best_epoch():
    model, opt, st = _stopper()
    assert not st.step(1, {"loss": 1.0, "accuracy": 1.0}, fit=0.95)
    best = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.fill_(7.0)
    assert [st.step(e, {"loss": 2.0, "accuracy": 1.0}, fit=0.99) for e in (2, 3, 4)] == [False, False, True]
    assert not st.underfit() and st.restore(last=4) == 1 and torch.equal(model.weight, best)


@pytest.mark.parametrize("learning", [True, False])
def test_the_budget_grows_only_while_the_model_is_still_learning(easy, monkeypatch, learning):
    monkeypatch.setattr(EarlyStopping, "learning", lambda self: learning)
    tc = replace(DEFAULTS["gru"], patience=100, budget_updates=20, min_epochs=2, augment="none", final_share=0.0)
    s = train("gru", easy, tc, TINY, progress=False)["metrics"]["schedule"]
    assert s["budget_epochs"] == epoch_budget(plan_epoch(
        validation_split(easy, tc)[0].lengths, tc, True), tc, True) >= 2
    if learning:
        assert s["max_epochs"] == s["epochs_run"] == EXTEND * s["budget_epochs"]
    else:
        assert s["max_epochs"] == s["budget_epochs"] >= s["epochs_run"]


def _attempt(stopped="early", fit=0.5, val_loss=1.0, seconds=2.0, mode="early-stopping", train=None):
    return {"metrics": {"schedule": {"mode": mode, "stopped": stopped, "fit": fit, "best_epoch": 2, "epochs_run": 3},
                        "curve": [{"epoch": 1, "val_loss": 9.0}, {"epoch": 2, "val_loss": val_loss}, {"epoch": 3}],
                        "train_seconds": seconds, "train_accuracy": fit if train is None else train}}


@pytest.mark.parametrize("kw,expected", [({}, True), ({"fit": 0.95}, False), ({"stopped": "budget"}, False),
                                         ({"mode": "fixed", "stopped": "fixed"}, False)])
def test_only_a_run_that_stopped_early_far_from_fitting_has_stalled(kw, expected):
    from edgeseq.train.loop import stalled
    assert stalled(_attempt(**kw)) is expected


def test_a_restart_that_fits_better_replaces_a_stalled_run_where_its_validation_loss_is_lower():
    from edgeseq.train.loop import attempt_seed, kept_attempt
    runs = [_attempt(val_loss=0.9, seconds=3.0), _attempt(fit=0.95, val_loss=0.6, seconds=4.0),
            _attempt(fit=0.95, val_loss=0.6), _attempt(val_loss=0.5, seconds=5.0)]
    ck = kept_attempt(runs, seed=7, n_train=20)
    s = ck["metrics"]["schedule"]
    assert ck is runs[1] and s["attempt"] == 2 and ck["metrics"]["train_seconds"] == 14.0   # a tie: the first
    assert [a["seed"] for a in s["attempts"]] == [7] + [attempt_seed(7, i) for i in (1, 2, 3)]
    assert len({a["seed"] for a in s["attempts"]}) == 4 and attempt_seed(7, 1) == attempt_seed(7, 1)
    assert [a["stalled"] for a in s["attempts"]] == [True, False, False, True]
    assert [a["train_accuracy"] for a in s["attempts"]] == [0.5, 0.95, 0.95, 0.5]
    # restarts that fit no better (one lucky epoch's fit is not enough, nor one sequence more), or with a
    # higher validation loss: the first run stays
    for second in (_attempt(val_loss=0.1), _attempt(fit=0.95, val_loss=0.95), _attempt(fit=0.95, train=0.5, val_loss=0.1),
                   _attempt(train=0.5 + 1 / 20, val_loss=0.1), _attempt(stopped="budget", val_loss=0.1)):
        assert kept_attempt([_attempt(val_loss=0.9), second], seed=0, n_train=20)["metrics"]["schedule"]["attempt"] == 1
    assert kept_attempt([_attempt(val_loss=0.9), _attempt(train=0.5 + 2 / 20, val_loss=0.1)], seed=0,
                        n_train=20)["metrics"]["schedule"]["attempt"] == 2
    for n in (36, 40, 100):               # k / n against (k + 2) / n: exactly two sequences more, whatever the rounding
        for k in range(n - 1):
            runs = [_attempt(train=k / n, val_loss=0.9), _attempt(train=(k + 2) / n, val_loss=0.5)]
            assert kept_attempt(runs, seed=0, n_train=n)["metrics"]["schedule"]["attempt"] == 2, (k, n)
    for bad in ("missing", float("nan"), float("inf")):   # no finite validation loss: any restart that fits better wins
        first = _attempt()
        if bad == "missing":
            first["metrics"]["curve"][1].pop("val_loss")
        else:
            first["metrics"]["curve"][1]["val_loss"] = bad
        assert kept_attempt([first, _attempt(fit=0.95, val_loss=5.0)], seed=0, n_train=20)["metrics"]["schedule"][
            "attempt"] == 2
    single = _attempt()
    assert kept_attempt([single], seed=0, n_train=20) is single and "attempts" not in single["metrics"]["schedule"]


def test_a_restart_that_diverges_leaves_the_first_run_standing(easy, monkeypatch, capsys):
    import edgeseq.train.loop as loop
    real, calls = loop._train, []

    def fake(*args, seed=None, **kw):
        calls.append(seed)
        if seed is not None:
            raise DataError("training gru on easy diverged (1 weight tensor(s) not finite): nothing was written")
        return _attempt()
    monkeypatch.setattr(loop, "_train", fake)
    ck = train("gru", easy, replace(DEFAULTS["gru"], restarts=2), TINY, progress=True)
    assert len(calls) == 2 and real is not fake
    assert ck["metrics"]["schedule"]["attempts"][0]["seed"] == 0 and ck["metrics"]["schedule"]["attempt"] == 1
    err = capsys.readouterr().err
    assert "attempt 2 left out, the attempts before it stand: training gru on easy diverged (1 weight" in err
    assert "nothing was written" not in err
    s = ck["metrics"]["schedule"]
    assert s["attempts"][1]["left_out"] == "training gru on easy diverged (1 weight tensor(s) not finite)"
    from edgeseq.report.edge_pages import schedule_text
    assert "no restart fit better (one diverged)" in schedule_text(s)


def test_a_run_that_stalls_underfit_trains_again_from_a_new_initialisation(easy, capsys):
    """One hidden unit cannot tell 3 classes apart: the run stops early far from fitting, and
    trains again, on the same validation split, up to `restarts` times."""
    from edgeseq.cli.train import schedule_line
    tc = replace(DEFAULTS["gru"], patience=3, patience_updates=0, budget_updates=120, augment="none",
                 final_share=0.5, restarts=1)
    ck = train("gru", easy, tc, {"hidden": 1}, progress=True)
    s = ck["metrics"]["schedule"]
    assert [a["stalled"] for a in s["attempts"]][0] and len(s["attempts"]) == 2
    assert s["attempts"][0]["seed"] == 0 and s["attempts"][1]["seed"] != 0 and ck["train_config"]["seed"] == 0
    first, second = s["attempts"]
    better = (round((second["train_accuracy"] - first["train_accuracy"]) * len(easy.train)) >= 2
              and second["val_loss"] < first["val_loss"])
    assert s["attempt"] == (2 if better else 1)
    assert ck["metrics"]["train_accuracy"] == pytest.approx(s["attempts"][s["attempt"] - 1]["train_accuracy"], abs=1e-5)
    err = capsys.readouterr().err
    assert "training again from a new initialisation, attempt 2 of up to 2" in err
    assert err.count("a run that stalls far from fitting its training data trains again, up to 1 more time\n") == 1
    assert f"attempt {s['attempt']} of 2 kept (a run that stalled underfit trains again" in schedule_line(s)
    from edgeseq.report.edge_pages import schedule_text
    assert ("attempt 2 of 2 kept: the first run stalled underfit" if better else
            "the first of 2 attempts kept: it stalled underfit and no restart fit better") in schedule_text(s)
    none = train("gru", easy, replace(tc, restarts=0), {"hidden": 1}, progress=False)["metrics"]["schedule"]
    assert none["stopped"] == "early" and none["fit"] < 0.9 and "attempts" not in none
    assert none["fit"] == s["attempts"][0]["fit"]                 # the first attempt is the run without restarts
    stopped_at = none["epochs_run"] - none["final_epochs"]          # the final epochs are not where it stopped
    assert none["final_epochs"] > 0 and f"stopped early after {stopped_at} epochs" in err
