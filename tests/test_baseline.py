"""The 1-NN DTW baseline `edgeseq train` scores beside a model: the archives' published figures on
the embedded sets, a plain DTW written out here on small random sets (full window and band,
one channel and several, unequal lengths), and the command's lines and metrics."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgeseq.cli import cli
from edgeseq.data import Split, load_dataset
from edgeseq.errors import UsageError
from edgeseq.train.baseline import PAIR_CELLS, below, describe, nearest_neighbour_dtw

pytest.importorskip("dtaidistance")


def _dtw(a, b, window=None):
    """Squared differences summed along the cheapest warping path, within `window` readings of
    the diagonals j = i and j - i = m - n (a, b [n, F] and [m, F]; None: the full window)."""
    n, m = len(a), len(b)
    w = n + m if window is None else window
    lo, hi = min(0, m - n) - w, max(0, m - n) + w
    D = np.full((n + 1, m + 1), np.inf)
    D[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(max(1, i + lo), min(m, i + hi) + 1):
            cost = float(((a[i - 1] - b[j - 1]) ** 2).sum())
            D[i, j] = cost + min(D[i - 1, j], D[i, j - 1], D[i - 1, j - 1])
    return D[n, m]


def _split(rng, n, F, lo, hi, classes=3):
    lengths = rng.integers(lo, hi + 1, n)
    y = rng.integers(0, classes, n)
    X = np.zeros((n, hi, F), np.float32)
    for i, (L, c) in enumerate(zip(lengths, y)):
        t = np.linspace(0, 1, L)[:, None]
        X[i, :L] = np.sin(2 * np.pi * (c + 1) * t + rng.uniform(0, 0.5)) + 0.3 * rng.normal(size=(L, F))
    return Split(X, y.astype(np.int64), lengths.astype(np.int64))


def _nearest(train, test, rows, window=None) -> np.ndarray:
    nearest = []
    for q in rows:
        a = test.X[q, :test.lengths[q]].astype(np.float64)
        d = [_dtw(a, train.X[r, :train.lengths[r]].astype(np.float64), window) for r in range(len(train))]
        nearest.append(int(np.argmin(d)))
    return np.asarray(nearest)


def _reference(train, test, rows, window=None):
    return float((train.y[_nearest(train, test, rows, window)] == test.y[rows]).mean())


@pytest.mark.parametrize("spec, published", [("basicmotions", 0.975), ("japanesevowels", 0.949)])
def test_reproduces_the_archives_dependent_dtw_figures(spec, published):
    # DTW_D of Bagnall et al. 2018 (arXiv:1811.00075) on the archive's own split, as scripts/measure_ucr.py quotes
    ds = load_dataset(spec)
    b = nearest_neighbour_dtw(ds.train, ds.test)
    assert b["dependent"] and b["window"] is None and b["queries"] == len(ds.test)
    assert round(b["accuracy"], 3) == published


@pytest.mark.parametrize("F", [1, 3])
def test_full_window_matches_a_plain_dtw_on_unequal_lengths(F):
    rng = np.random.default_rng(F)
    train, test = _split(rng, 12, F, 8, 20), _split(rng, 9, F, 6, 22)
    # labels drawn apart from the shapes: the accuracy then turns on which neighbour each query finds
    train, test = (Split(s.X, rng.integers(0, 3, len(s)), s.lengths) for s in (train, test))
    b = nearest_neighbour_dtw(train, test)
    assert b["window"] is None
    assert b["cells"] == int(test.lengths.sum() * train.lengths.sum()) + PAIR_CELLS * len(test) * len(train)
    assert b["accuracy"] == pytest.approx(_reference(train, test, np.arange(len(test))), abs=1e-12)
    assert 0.0 < b["accuracy"] < 1.0            # the check separates right from wrong neighbours


def _noise(rng, n, F, lengths):
    """White noise with labels drawn apart from it: which neighbour a query finds decides."""
    lengths = np.asarray(lengths)
    X = np.zeros((n, lengths.max(), F), np.float32)
    for i, L in enumerate(lengths):
        X[i, :L] = rng.normal(size=(L, F))
    return Split(X, rng.integers(0, 3, n).astype(np.int64), lengths.astype(np.int64))


@pytest.mark.parametrize("F", [1, 2])
def test_a_band_keeps_within_w_readings_of_the_diagonals(F):
    rng = np.random.default_rng(10 + F)
    train, test = _noise(rng, 12, F, rng.integers(20, 31, 12)), _noise(rng, 10, F, rng.integers(20, 31, 10))
    full = nearest_neighbour_dtw(train, test)["cells"]
    b = nearest_neighbour_dtw(train, test, max_cells=full - 1)      # band 3, a tenth of 30 rounded up
    assert b["window"] == 3 and b["queries"] == 10
    rows = np.arange(10)
    want, narrower = _nearest(train, test, rows, 3), _nearest(train, test, rows, 2)
    assert (want != narrower).any()                                 # the data tells a band of 3 from one of 2
    # each training sequence a class of its own, each query labelled with a band's nearest: 1.0 iff they agree
    ids = Split(train.X, np.arange(12), train.lengths)
    for labels, acc in ((want, 1.0), (narrower, np.mean(want == narrower))):
        got = nearest_neighbour_dtw(ids, Split(test.X, labels, test.lengths), max_cells=full - 1)
        assert got["window"] == 3 and got["accuracy"] == pytest.approx(acc, abs=1e-12)


def test_past_the_cell_budget_a_band_narrowed_then_a_seeded_draw(monkeypatch):
    import edgeseq.train.baseline as bl
    monkeypatch.setattr(bl, "PAIR_CELLS", 0)                        # cells alone, so the counts below are exact
    monkeypatch.setattr(bl, "MIN_QUERIES", 5)
    rng = np.random.default_rng(7)
    train, test = _noise(rng, 10, 2, [40] * 10), _noise(rng, 20, 2, [40] * 20)   # equal lengths: no widening
    assert nearest_neighbour_dtw(train, test)["cells"] == 20 * 10 * 40 * 40
    banded = nearest_neighbour_dtw(train, test, max_cells=100_000)       # band 4 (a tenth of 40): 9 cells a row
    assert (banded["window"], banded["queries"], banded["cells"]) == (4, 20, 20 * 10 * 40 * 9)
    assert banded["accuracy"] == pytest.approx(_reference(train, test, np.arange(20), 4), abs=1e-12)
    monkeypatch.setattr(bl, "MIN_QUERIES", 20)
    narrow = nearest_neighbour_dtw(train, test, max_cells=50_000)        # band 2 lets all 20 fit
    assert (narrow["window"], narrow["queries"], narrow["cells"]) == (2, 20, 20 * 10 * 40 * 5)
    assert narrow["accuracy"] == pytest.approx(_reference(train, test, np.arange(20), 2), abs=1e-12)
    monkeypatch.setattr(bl, "MIN_QUERIES", 8)
    drawn = nearest_neighbour_dtw(train, test, max_cells=10_000)         # band 1 and 8 of the 20
    assert (drawn["window"], drawn["queries"], drawn["cells"]) == (1, 8, 8 * 10 * 40 * 3)
    again = nearest_neighbour_dtw(train, test, max_cells=10_000)
    assert {**again, "seconds": 0} == {**drawn, "seconds": 0}          # the draw is seeded
    assert "8 of 20 test sequences (a seeded draw)" in describe(drawn) and "band of 1 reading;" in describe(drawn)
    assert bl.scored_on(drawn) == "on a seeded draw of 8 of the 20 test sequences"
    skipped = nearest_neighbour_dtw(train, test, max_cells=4_000)        # 3 of 20 fit, fewer than 8: none scored
    assert "accuracy" not in skipped and "take more than 4e+03 warping cells" in skipped["skipped"]
    assert describe(skipped).startswith("1-NN DTW not scored: 8 of the 20 test sequences") and not below(0.0, skipped)


def test_whatever_the_seed_a_draw_that_falls_short_narrows_the_band_before_giving_up():
    rng = np.random.default_rng(5)
    train = _noise(rng, 20, 1, [100] * 20)
    test = _noise(rng, 1000, 1, [10] * 900 + [100] * 100)          # mixed lengths: a draw's cost varies
    for seed in range(6):
        b = nearest_neighbour_dtw(train, test, max_cells=4.6e6, seed=seed)
        assert "accuracy" in b and b["queries"] >= 200 and b["cells"] <= 4.6e6, (seed, b)
    none = nearest_neighbour_dtw(train, test, max_cells=1e4)
    assert none["skipped"].startswith("200 of the 1,000 test sequences against 20 training sequences (up to 100 "
                                      "readings) take more than 1e+04 warping cells even in a band of 1 reading")


def test_parts_bound_cells_and_pairs_and_give_the_same_neighbours(monkeypatch):
    import edgeseq.train.baseline as bl
    assert bl._parts(np.full(10, 5.0), 3) == [(0, 10)]
    monkeypatch.setattr(bl, "CHUNK_CELLS", 12.0)
    assert bl._parts(np.full(10, 5.0), 3) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    monkeypatch.setattr(bl, "CHUNK_PAIRS", 6)
    assert bl._parts(np.full(5, 1.0), 3) == [(0, 2), (2, 4), (4, 5)]
    rng = np.random.default_rng(3)
    train, test = _noise(rng, 9, 1, rng.integers(5, 15, 9)), _noise(rng, 11, 1, rng.integers(5, 15, 11))
    b = nearest_neighbour_dtw(train, test)
    assert b["accuracy"] == pytest.approx(_reference(train, test, np.arange(11)), abs=1e-12)
    assert describe(nearest_neighbour_dtw(train, test.take(np.arange(1)))).count("1 test sequence against 9 training")


def test_an_empty_split_and_a_missing_library_are_one_line_errors(monkeypatch):
    rng = np.random.default_rng(0)
    train = _split(rng, 4, 1, 5, 8)
    with pytest.raises(ValueError, match="needs training and test sequences"):
        nearest_neighbour_dtw(train, train.take(np.arange(0)))
    monkeypatch.setitem(sys.modules, "dtaidistance", None)
    with pytest.raises(UsageError, match="pip install"):
        nearest_neighbour_dtw(train, train)
    from edgeseq.train.baseline import scored_or_why
    got = scored_or_why(train, train)                  # what train, report and tune call: the caller stands
    assert got["failed"] and "pip install" in got["skipped"] and "accuracy" not in got
    assert describe(got).startswith("1-NN DTW not scored: the 1-NN DTW baseline needs dtaidistance")


def test_below_compares_per_sequence_accuracy():
    b = {"accuracy": 0.8}
    assert below(0.79, b) and not below(0.8, b) and not below(0.9, b) and not below(0.1, None)


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def test_train_prints_the_baseline_and_warns_when_the_model_is_below_it(runner):
    r = runner.invoke(cli, ["train", "--arch", "gru", "--epochs", "1", "--set", "hidden=8", "--out", "runs/g",
                            "--quiet"])
    assert r.exit_code == 0, r.output
    m = json.loads(Path("runs/g/metrics.json").read_text())["metrics"]
    assert m["baseline"]["accuracy"] == pytest.approx(0.975)
    assert f"baseline: {describe(m['baseline'])}" in r.stdout
    assert m["test_accuracy"] < 0.975                  # one epoch of a GRU of 8 units does not learn BasicMotions
    warning = [line for line in r.stderr.splitlines() if "below the nearest-neighbour baseline" in line]
    assert len(warning) == 1 and f"{m['test_accuracy']:.3f} per sequence against 1-NN DTW's 0.975" in warning[0]


def test_train_without_baseline_or_library_keeps_the_model(runner, monkeypatch):
    r = runner.invoke(cli, ["train", "--arch", "gru", "--epochs", "1", "--set", "hidden=8", "--out", "runs/a",
                            "--quiet", "--no-baseline"])
    assert r.exit_code == 0, r.output
    assert "baseline" not in json.loads(Path("runs/a/metrics.json").read_text())["metrics"]
    assert "baseline" not in r.output
    monkeypatch.setitem(sys.modules, "dtaidistance", None)
    r = runner.invoke(cli, ["train", "--arch", "gru", "--epochs", "1", "--set", "hidden=8", "--out", "runs/b",
                            "--quiet"])
    assert r.exit_code == 0, r.output
    assert Path("runs/b/checkpoint.pt").is_file()
    assert "note: no baseline: the 1-NN DTW baseline needs dtaidistance" in r.stderr


def test_the_model_is_saved_before_the_baseline_and_stands_when_it_fails_or_is_too_costly(runner, monkeypatch):
    import edgeseq.train.baseline as bl
    args = ["train", "--arch", "gru", "--epochs", "1", "--set", "hidden=8", "--quiet"]
    r = runner.invoke(cli, [*args, "--out", "runs/c", "--baseline-cells", "1"])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if x.startswith("baseline: "))
    assert line.startswith("baseline: 1-NN DTW not scored: 40 of the 40 test sequences") and "--baseline-cells N" in line
    assert "below the nearest-neighbour baseline" not in r.stderr
    assert "skipped" in json.loads(Path("runs/c/metrics.json").read_text())["metrics"]["baseline"]

    def broken(*a, **k):
        raise RuntimeError("The compiled dtaidistance C library is not available.\nSee the documentation")
    monkeypatch.setattr(bl, "nearest_neighbour_dtw", broken)
    r = runner.invoke(cli, [*args, "--out", "runs/d"])
    assert r.exit_code == 0, r.output
    assert ("note: no baseline: dtaidistance failed: The compiled dtaidistance C library is not available; the "
            "model is saved (--no-baseline leaves the baseline out)") in r.stderr
    assert Path("runs/d/checkpoint.pt").is_file()

    def stopped(*a, **k):
        assert Path("runs/e/checkpoint.pt").is_file()                  # saved before the baseline starts
        raise KeyboardInterrupt
    monkeypatch.setattr(bl, "nearest_neighbour_dtw", stopped)
    r = runner.invoke(cli, [*args, "--out", "runs/e"])
    assert r.exit_code != 0 and Path("runs/e/checkpoint.pt").is_file()
    assert "note: the baseline was stopped; the model is saved: runs/e/checkpoint.pt" in r.stderr
    assert "baseline" not in json.loads(Path("runs/e/metrics.json").read_text())["metrics"]
