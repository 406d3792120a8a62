"""Endless streams: per-reading labels, TBPTT training streams, the continuous (never reset)
protocol and the targets on BasicMotions, seed 0."""

import numpy as np
import pytest

from edgeseq.data import load_dataset, since_change
from edgeseq.errors import DataError
from edgeseq.runtime import StreamSession, evaluate
from edgeseq.runtime.evaluate import GRACE, joined_streams, score_continuous
from edgeseq.runtime.live import open_source, run_live

pytestmark = pytest.mark.usefixtures("backend_suite")   # conftest: on both step backends


def test_continuous_score_of_a_stream_whose_answers_are_known():
    """Labels 0 x30, 1 x50 (two sequences of one class: one change), 2 x40. The prediction
    lags each change by 5 and 12 readings and is wrong once more, at reading 110."""
    y = np.r_[np.zeros(30), np.ones(50), np.full(40, 2)].astype(np.int64)
    p = y.copy()
    p[30:35] = 0                    # follows the change at 30 after 5 readings
    p[80:92] = 1                    # follows the change at 80 after 12 readings
    p[110] = 0                      # a blip past the grace period of the second change
    ends = np.array([[29, 59, 79, 119]])
    r = score_continuous(p[None], y[None], ends, grace=10, hold=10)
    scored = np.r_[np.arange(10, 30), np.arange(40, 80), np.arange(90, 120)]   # 10 after start and each change
    assert r["scored_readings"] == len(scored)
    assert r["reading_accuracy"] == pytest.approx((len(scored) - 2 - 1) / len(scored))   # 90, 91 and 110 wrong
    assert r["changes"] == 2 and r["followed"] == 1.0
    assert r["median_readings_to_follow"] == pytest.approx((5 + 12) / 2)
    assert r["last_reading_accuracy"] == 1.0
    never = score_continuous(np.zeros((1, 120), np.int64), y[None], ends, grace=10, hold=10)
    assert never["followed"] == 0.0 and never["median_readings_to_follow"] is None
    assert never["last_reading_accuracy"] == 0.25


def test_since_change_and_training_streams_leave_out_the_grace_period(basicmotions):
    assert since_change(np.array([3, 3, 1, 1, 1, 3])).tolist() == [0, 1, 0, 1, 2, 0]
    from edgeseq.train import training_streams
    X, Y, scored = training_streams(basicmotions.train, streams=8, grace=GRACE, rng=np.random.default_rng(0))
    assert X.shape == (8, 500, 6) and Y.shape == (8, 500)
    for s in range(8):
        assert not scored[s, :GRACE].any()
        changes = np.flatnonzero(Y[s, 1:] != Y[s, :-1]) + 1
        assert len(changes) > 0                                  # the activity changes inside a stream
        for c in changes:
            assert not scored[s, c:c + GRACE].any() and (c + GRACE >= 500 or scored[s, c + GRACE])
    # every training reading appears once across the streams, with its sequence's label
    assert sorted(np.bincount(Y[Y >= 0], minlength=4).tolist()) == [1000] * 4


def test_joined_streams_are_seeded_and_keep_every_reading(basicmotions):
    X1, Y1, e1 = joined_streams(basicmotions.test, orders=3, seed=0)
    X2, Y2, _ = joined_streams(basicmotions.test, orders=3, seed=0)
    assert X1.shape == (3, 4000, 6) and np.array_equal(X1, X2) and np.array_equal(Y1, Y2)
    assert not np.array_equal(Y1[0], Y1[1])                      # different orders
    assert (e1[:, -1] == 3999).all() and (np.diff(e1, axis=1) == 100).all()


def _write_per_reading_data(tmp_path, rng):
    """Recordings whose activity changes inside a sequence: the first half of each is one
    class, the second another; class k is a sine of frequency k + 1 on both channels."""
    N, T = 16, 60
    t = np.arange(T)
    Y = np.zeros((N, T), np.int64)
    X = np.zeros((N, T, 2), np.float32)
    for n in range(N):
        a, b = n % 3, (n + 1) % 3
        Y[n, :T // 2], Y[n, T // 2:] = a, b
        f = (Y[n] + 1) * 0.3
        X[n, :, 0] = np.sin(f * t) + 0.05 * rng.standard_normal(T)
        X[n, :, 1] = np.cos(f * t)
    return X, Y


def test_per_reading_labels_in_npz_and_csv(tmp_path):
    X, Y = _write_per_reading_data(tmp_path, np.random.default_rng(0))
    names = np.array(["still", "walk", "run"])
    np.savez(tmp_path / "d.npz", X=X, y=names[Y], features=np.array(["ax", "ay"]))
    rows = ["sequence,label,ax,ay,split"]
    for n in range(len(X)):
        for t in range(X.shape[1]):
            rows.append(f"r{n},{names[Y[n, t]]},{X[n, t, 0]:.6f},{X[n, t, 1]:.6f},{'test' if n >= 12 else 'train'}")
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    for path in ("d.npz", "d.csv"):
        ds = load_dataset(str(tmp_path / path))
        assert ds.labels == ["run", "still", "walk"], path
        allY = np.concatenate([ds.train.Y, ds.test.Y])
        assert (allY[:, 0] != allY[:, -1]).all(), path            # the label changes inside every sequence
        assert np.array_equal(np.concatenate([ds.train.y, ds.test.y]), allY[:, -1])   # class = last label
    with pytest.raises(DataError, match=r"y must be \[N\] .* or \[N, T\]"):
        np.savez(tmp_path / "bad.npz", X=X, y=Y[:, :5])
        load_dataset(str(tmp_path / "bad.npz"))


def test_training_on_per_reading_labels_follows_the_changes(tmp_path):
    """A GRU trained on recordings whose label changes mid-sequence names both halves."""
    from edgeseq.train import TrainConfig, train
    from export import export_model
    X, Y = _write_per_reading_data(tmp_path, np.random.default_rng(1))
    np.savez(tmp_path / "d.npz", X=X, y=Y, X_test=X[:6], y_test=Y[:6])
    ds = load_dataset(str(tmp_path / "d.npz"))
    ckpt = train("gru", ds, TrainConfig(epochs=25, lr=1e-2, streams=4, chunk=30, grace=5), {"hidden": 16},
                 progress=False)
    export_model(ckpt, tmp_path / "m.onnx")
    c = evaluate(str(tmp_path / "m.onnx"), ds.test)["continuous"]
    assert c["reading_accuracy"] >= 0.8, c


# Targets on BasicMotions, default settings, seed 0 (README, "Endless streams").
PER_SEQUENCE = {"gru": 0.95, "lstm": 0.95, "transformer": 0.90}
CONTINUOUS = {"gru": 0.90, "lstm": 0.90, "transformer": 0.85}


@pytest.mark.parametrize("arch", ["rnn", "gru", "lstm", "transformer"])
def test_targets_on_both_protocols(exported, int8, basicmotions, arch):
    path, _ = exported(arch)
    ev = evaluate(str(path), basicmotions.test)
    c = ev["continuous"]
    print(f"{arch}: per sequence {ev['accuracy']:.3f}, continuous {c['reading_accuracy']:.3f}, "
          f"last reading {c['last_reading_accuracy']:.3f}, follow {c['median_readings_to_follow']}")
    assert ev["accuracy"] >= PER_SEQUENCE.get(arch, 0.5)
    assert c["reading_accuracy"] >= CONTINUOUS.get(arch, 0.5)
    assert c["median_readings_to_follow"] is not None and c["followed"] >= 0.9
    q = evaluate(str(int8(arch, "static")[0]), basicmotions.test)["continuous"]
    assert q["reading_accuracy"] >= c["reading_accuracy"] - 0.02                # int8 twin within 2 points


def test_transformer_deploys_the_window_it_trained_with(exported, trained):
    path, _ = exported("transformer")
    window = trained("transformer")["config"]["window"]
    s = StreamSession(path)
    assert window and s.max_history == window and s.on_full == "slide"
    x = np.zeros((1, 6), np.float32)
    for _ in range(window + 30):
        s.push(x)
    assert s.state_nbytes() == s.state_nbytes_at(window)          # bounded: the cache slid


def test_pi_replay_prints_the_true_label_and_scores_the_stream(exported, basicmotions):
    s = StreamSession(exported("gru")[0])
    lines = []
    summary = run_live(s, open_source("replay:basicmotions", s.features), max_readings=300, echo=lines.append)
    t = summary["true_labels"]
    y = np.concatenate([basicmotions.test.Y[i, :basicmotions.test.lengths[i]] for i in range(4)])[:300]
    assert "(true " in lines[0] and t["scored"] == 300 and t["grace"] == GRACE
    assert t["past_grace"] == int((since_change(y) >= GRACE).sum())       # eval's continuous protocol, one order
    assert 0.0 <= t["accuracy_past_grace"] <= 1.0 and t["unknown"] == {} and t["unlabelled"] == 0
    assert summary["stopped_by"] == "reading limit"
