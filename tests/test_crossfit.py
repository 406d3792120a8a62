"""Cross-fitting (`edgeseq.train.crossfit`) and `edgeseq calibrate --split cross`."""

import json

import numpy as np
import pytest
import torch
from helpers import one_error_line

import edgeseq.train.crossfit as crossfit
from edgeseq.cli import cli
from edgeseq.data import Dataset, Split
from edgeseq.errors import UsageError
from edgeseq.runtime.calibrate import score_streams
from edgeseq.runtime.events import score_events
from edgeseq.runtime.never_reset import joined_streams
from edgeseq.runtime.session import StreamSession
from edgeseq.train import TrainConfig, model_from_checkpoint
from edgeseq.train.loop import stream_logits

QUICK = TrainConfig(epochs=2, lr=5e-3)          # a model in a second: what is tested is who saw what


def _split(counts, groups=None):
    y = np.concatenate([np.full(n, c) for c, n in enumerate(counts)]).astype(np.int64)
    X = np.arange(len(y), dtype=np.float32).reshape(-1, 1, 1).repeat(3, axis=1)     # each sequence its own value
    return Split(X, y, np.full(len(y), 3, np.int64), groups=None if groups is None else np.asarray(groups))


def test_each_part_holds_a_share_of_every_class_and_whole_groups():
    s = _split([10, 7, 3])
    fold = crossfit.fold_of(s, 5, seed=0)
    assert sorted(np.bincount(fold)) == [4, 4, 4, 4, 4]
    for c, n in enumerate([10, 7, 3]):
        per = np.bincount(fold[s.y == c], minlength=5)
        assert per.max() - per.min() <= 1 and per.sum() == n          # dealt evenly
    assert np.array_equal(fold, crossfit.fold_of(s, 5, seed=0))       # seeded
    assert not np.array_equal(fold, crossfit.fold_of(s, 5, seed=1))

    groups = [f"g{i // 2}" for i in range(20)]                        # ten subjects of two sequences
    g = crossfit.fold_of(_split([10, 10], groups), 4, seed=0)
    for name in set(groups):
        assert len(set(g[np.asarray(groups) == name])) == 1            # a subject is never split
    assert len(set(g)) == 4


@pytest.mark.parametrize("counts, groups, folds, message", [
    ([5, 5], None, 1, "--folds must be a whole number from 2 to 20, got 1"),
    ([5, 5], None, 21, "--folds must be a whole number from 2 to 20, got 21"),
    ([5, 5], None, True, "--folds must be a whole number from 2 to 20, got True"),
    ([2, 2], None, 5, "4 training sequences are fewer than --folds 5; give --folds 4 or fewer"),
    ([4, 1], None, 2, "class 'b' is in one training sequence only"),
    ([1, 1, 1], None, 5, "class 'idle' is in one training sequence only"),      # before the count: it would not help
    ([2, 2], ["a", "a", "a", "a"], 2, "class 'idle' is in one group only"),
    ([2, 2], ["a", "a", "b", "b"], 2, "class 'idle' is in one group only"),
    ([3, 3], ["a", "a", "b", "b", "c", "c"], 4, "3 groups are fewer than --folds 4; give --folds 3 or fewer"),
    # three subjects of two classes each, every class in two of them: any two parts put one class in one part
    ([2, 2, 2], ["ab", "bc", "ab", "ca", "bc", "ca"], 2, "no way of dealing the groups into 2 parts tried puts class"),
])
def test_parts_that_cannot_teach_every_class_are_refused(counts, groups, folds, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")) as e:
        crossfit.fold_of(_split(counts, groups), folds, labels=["idle", "b", "c"])
    assert "\n" not in str(e.value) and ("--split train" in str(e.value) or "--folds" in str(e.value))


def test_groups_of_several_classes_are_dealt_so_every_part_can_learn_every_class():
    """Subjects that each did two activities (the data a deal by first class alone refused at
    some seeds), and a class that appears only mid-sequence (per-reading labels): every class
    lands in two parts at least, at every seed, and a subject is never split."""
    groups = np.array(["m0", "m0", "m1", "m1", "m2", "m2", "m3", "m3"])
    s = _split([2, 2, 2, 2], groups)
    s.y[:] = [0, 3, 0, 1, 1, 2, 2, 3]
    s.Y[:] = s.y[:, None]
    for folds in (2, 3):
        for seed in range(10):
            fold = crossfit.fold_of(s, folds, seed)
            for c in range(4):
                assert len(set(fold[s.y == c])) >= 2, (folds, seed, c)
            for g in set(groups):
                assert len(set(fold[groups == g])) == 1
    t = _split([3, 3])
    t.Y[0, 0] = t.Y[4, 0] = 2               # class 2 only in the first reading of two sequences
    for seed in range(10):
        fold = crossfit.fold_of(t, 2, seed)
        assert fold[0] != fold[4]
    t.Y[4, 0] = 1
    with pytest.raises(UsageError, match="class 'c' is in one training sequence only"):
        crossfit.fold_of(t, 2, labels=["idle", "b", "c"])


def test_every_sequence_is_predicted_by_a_model_that_did_not_train_on_it(basicmotions, monkeypatch):
    """The held-out part of each fold shares no sequence with the part its model trained on,
    the parts cover the training split once, and the probabilities are that model's, in torch,
    over the held-out part's never-reset streams."""
    rows = np.concatenate([np.flatnonzero(basicmotions.train.y == c)[:4] for c in range(4)])
    ds = Dataset("bm16", basicmotions.train.take(rows), basicmotions.test, basicmotions.labels,
                 basicmotions.features)
    key = lambda X, i: X[i].tobytes()                                  # noqa: E731 - a sequence's identity
    seen, real = [], crossfit.train

    def spy(arch, part, tc, overrides, progress):
        assert tc is QUICK and overrides == {"hidden": 8} and progress is False
        ckpt = real(arch, part, tc, overrides, progress=False)
        seen.append(({key(part.train.X, i) for i in range(len(part.train))},
                     {key(part.test.X, i) for i in range(len(part.test))}, ckpt))
        return ckpt
    monkeypatch.setattr(crossfit, "train", spy)
    said = []
    out = crossfit.out_of_fold("gru", ds, folds=4, orders=3, train_config=QUICK,
                               config={"n_features": 6, "n_classes": 4, "hidden": 8},
                               say=said.append)
    assert len(seen) == len(out["blocks"]) == 4 and out["held"] == [4, 4, 4, 4] and len(said) == 4
    assert "part 2 of 4: trained gru on 12 sequences" in said[1]
    held_all = set()
    fold = crossfit.fold_of(ds.train, 4, 0)
    for k, ((trained, held, ckpt), (P, Y)) in enumerate(zip(seen, out["blocks"])):
        assert not trained & held and len(trained) + len(held) == 16
        held_all |= held
        part = ds.train.take(np.flatnonzero(fold == k))
        assert {key(part.X, i) for i in range(len(part))} == held
        X, Y_want, _ = joined_streams(part, 3, k)
        assert P.shape == (3, 400, 4) and P.dtype == np.float32 and np.array_equal(Y, Y_want)
        want = torch.softmax(stream_logits(model_from_checkpoint(ckpt), X), -1).numpy()
        np.testing.assert_allclose(P, want, rtol=0, atol=1e-6)
        np.testing.assert_allclose(P.sum(-1), 1.0, atol=1e-5)
    assert len(held_all) == 16


def test_streams_of_different_lengths_score_as_each_alone():
    """Events and false alarms over streams laid end to end are those of each stream scored on
    its own, whatever their lengths (no event joins two streams)."""
    labels = ["idle", "a", "b"]
    Ys = [np.array([0, 1, 1, 1, 0, 2, 2]), np.array([1, 1, 0, 0]), np.array([2, 2, 2, 2, 2, 0, 1, 1, 1])]
    dets = [[(1, 1, 4), (2, 6, 7), (1, 5, 6)], [(1, 0, 2), (1, 3, 4)], [(2, 0, 9), (2, 7, 9)]]
    both = score_streams(dets, Ys, labels, [0], rate_hz=1.0)
    alone = [score_events(d, y, labels, [0], 1.0) for d, y in zip(dets, Ys)]
    for k in ("events", "detections", "false_alarms", "deleted", "fragmented", "insertions"):
        assert both[k] == sum(a[k] for a in alone), k
    assert both["readings"] == 20 and both["false_alarms_per_hour"] == pytest.approx(both["false_alarms"] * 180)


def test_calibrate_split_cross_writes_settings_chosen_on_unseen_sequences(runner, exported, monkeypatch, tmp_path):
    gru = exported("gru")[0]
    monkeypatch.setitem(crossfit.DEFAULTS, "gru", QUICK)
    r = runner.invoke(cli, ["calibrate", str(gru), "--background", "Standing", "--split", "cross", "--folds", "2",
                            "--orders", "2", "--out", "cross.onnx", "--plot", "cross.png"])
    assert r.exit_code == 0, r.output
    assert "cross-fitting: training 2 gru models (default training settings, this model's hidden=64" in r.output
    assert "part 1 of 2: trained gru on 20 sequences" in r.output and "part 2 of 2" in r.output
    assert ("calibrating on 2 never-reset streams of each of 2 parts of the 40 training sequences of basicmotions, "
            "each part run through a model trained without it") in r.output
    assert "recordings the parts' models did not train on" in r.output
    assert "note: the model without part 1 of 2 did not converge (training accuracy" in r.output
    s = StreamSession(tmp_path / "cross.onnx").decision
    assert s.calibration["folds"] == 2 and s.calibration["sequences"] == 40 and s.background == ("Standing",)

    r = runner.invoke(cli, ["calibrate", str(gru), "--background", "Standing", "--split", "cross", "--folds", "2",
                            "--orders", "1", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["folds"] == 2 and out["split"] == "cross" and out["written"] is None and out["sequences"] == 40
    assert out["folds_converged"] == [False, False] and out["fold_settings"] is None     # QUICK: 2 epochs
    assert "did not converge" not in r.output                                         # --json: stdout only

    # the folds' models trained as MODEL was: a training setting on top of the defaults, recorded
    r = runner.invoke(cli, ["calibrate", str(gru), "--background", "Standing", "--split", "cross", "--folds", "2",
                            "--orders", "1", "--set", "grace=8", "--out", "g8.onnx", "--plot", "g8.png"])
    assert r.exit_code == 0, r.output
    assert "training 2 gru models (default training settings but grace=8, this model's" in r.output
    assert "each part run through a model trained without it (trained with grace=8)" in r.output
    assert StreamSession(tmp_path / "g8.onnx").decision.calibration["fold_settings"] == {"grace": 8}
    (tmp_path / "g8.onnx").unlink()
    (tmp_path / "g8.png").unlink(missing_ok=True)
    e = one_error_line(runner.invoke(cli, ["calibrate", str(gru), "--set", "grace=8"]), 2)
    assert e.startswith("Error: --set sets how the folds' models train, which only --split cross does")
    for bad, want in ((["hidden=32"], "--set hidden is a model setting: the folds' models take MODEL's"),
                      (["grace=-1"], "grace"), (["grace"], "--set takes NAME=VALUE"),
                      (["augment.rotate=-5"], "rotate"),
                      (["patiance=5"], "--set patiance: no such training setting; did you mean patience?"),
                      (["epochs=3", "patience=4"], "--set patience shape the default schedule, which --set epochs"),
                      (["augment.triples=acc_x,acc_y,foo"], "foo")):
        args = [a for b in bad for a in ("--set", b)]
        r = runner.invoke(cli, ["calibrate", str(gru), "--split", "cross"] + args)
        assert want in one_error_line(r, 2) and "cross-fitting" not in r.output, (bad, r.output)
    e = one_error_line(runner.invoke(cli, ["calibrate", str(gru), "--folds", "3"]), 2)
    assert e.startswith("Error: --folds goes with --split cross; add --split cross or drop --folds")
    for bad in ("1", "0", "-3", "21"):
        r = runner.invoke(cli, ["calibrate", str(gru), "--split", "cross", "--folds", bad])
        e = one_error_line(r, 2)
        assert e.startswith(f"Error: --folds must be a whole number from 2 to 20, got {bad}")
        assert "cross-fitting" not in r.output                 # refused before anything trains or is said
    e = one_error_line(runner.invoke(cli, ["calibrate", str(gru), "--split", "cross", "--backend", "native"]), 2)
    assert e.startswith("Error: --backend chooses how MODEL runs; --split cross runs the parts' models in torch")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cross.onnx", "cross.png"] or \
        sorted(p.name for p in tmp_path.iterdir()) == ["cross.onnx"]


def test_calibrate_split_cross_takes_the_default_automatic_augmentation(runner, exported, monkeypatch):
    """The architecture's own defaults (augmentation `auto`, resolved by the data's channels),
    only shortened: the folds' settings are checked before anything trains."""
    from dataclasses import replace
    gru = exported("gru")[0]
    assert crossfit.DEFAULTS["gru"].augment == "auto"
    monkeypatch.setitem(crossfit.DEFAULTS, "gru", replace(crossfit.DEFAULTS["gru"], epochs=2))
    r = runner.invoke(cli, ["calibrate", str(gru), "--background", "Standing", "--split", "cross", "--folds", "2",
                            "--orders", "1", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["folds"] == 2
