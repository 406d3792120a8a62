import numpy as np


def assert_close(a, b, name, atol, rtol=0.0):
    """Shape, dtype kind, then values; the message carries the max difference."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, f"{name}: shape {a.shape} != {b.shape}"
    assert a.dtype.kind == b.dtype.kind, f"{name}: dtype {a.dtype} != {b.dtype}"
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    bound = atol + rtol * np.abs(b.astype(np.float64))
    assert (diff <= bound).all(), f"{name}: max abs diff {diff.max():.3g} > atol {atol:g} (rtol {rtol:g})"
    return float(diff.max())
