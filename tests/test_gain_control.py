"""scripts/measure_ucr.py's causal automatic gain control (the `gain` probe input): what a
stream would compute from a reset at each sequence's start, checked against a plain
reading-by-reading loop, on prefixes, and under a change of the readings' units."""

import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def ucr():
    from helpers import module_from_file
    return module_from_file("measure_ucr_probe", ROOT / "scripts" / "measure_ucr.py")


def _plain(x, n, tau, floor):
    """One sequence (T, F), one reading at a time, in Python floats."""
    T, F = x.shape
    out = np.zeros((T, 2 * F))
    for f in range(F):
        m, w = 0.0, 0.0
        for t in range(n):
            v = float(x[t, f])
            m = (1 - 1 / tau) * m + v * v / tau
            w = (1 - 1 / tau) * w + 1 / tau          # 1 - (1 - 1/tau)^(t+1)
            level = math.sqrt(m / w + floor)
            out[t, f], out[t, F + f] = v / level, math.log(level)
    return out


def _data(rng, N=5, T=30, F=2):
    lengths = rng.integers(3, T + 1, N)
    lengths[0] = T
    X = np.zeros((N, T, F), np.float32)
    for i, n in enumerate(lengths):
        X[i, :n] = rng.normal(size=(n, F)) * rng.uniform(0.01, 100, F)
    return X, lengths


def test_equals_a_reading_by_reading_loop(ucr):
    rng = np.random.default_rng(0)
    X, lengths = _data(rng)
    for tau in (1.0, 4.0, 40.0):
        got = ucr.gain_control(X, lengths, tau)
        assert got.shape == (5, 30, 4) and got.dtype == np.float32
        for i, n in enumerate(lengths):
            want = _plain(X[i], n, tau, ucr.GAIN_FLOOR)
            np.testing.assert_allclose(got[i], want, rtol=1e-6, atol=1e-6)
            assert not got[i, n:].any()                       # padding stays zero
    # a time constant of 1 reading: the level is the reading's own magnitude
    one = ucr.gain_control(X, lengths, 1.0)
    np.testing.assert_allclose(np.abs(one[0, :, :2]), 1.0, rtol=1e-5)


def test_causal_a_prefix_gives_the_same_readings(ucr):
    rng = np.random.default_rng(1)
    X, lengths = _data(rng, N=3, T=40)
    full = ucr.gain_control(X, lengths, 10.0)
    for k in (1, 7, 25):
        part = ucr.gain_control(X[:, :k], np.minimum(lengths, k), 10.0)
        np.testing.assert_array_equal(part, full[:, :k])


def test_units_move_the_level_only(ucr):
    rng = np.random.default_rng(2)
    X, lengths = _data(rng, N=4, T=25, F=1)
    a = ucr.gain_control(X, lengths, 8.0)
    b = ucr.gain_control(X * 1000.0, lengths, 8.0)
    live = np.arange(25)[None, :] < lengths[:, None]
    np.testing.assert_allclose(b[..., 0][live], a[..., 0][live], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b[..., 1][live] - a[..., 1][live], math.log(1000.0), rtol=1e-5)
