"""Synthetic recordings of a wrist-worn IMU, for benchmarks of training at scale.

`recordings(n, length)` draws `n` recordings of about `length` readings at 50 Hz: three
accelerometer and three gyroscope channels, one exercise per recording. Each exercise is a
periodic movement with its own tempo, harmonics and axis pattern; each recording varies it as
people do (tempo, amplitude, wrist orientation, a slow drift, sensor noise, a few seconds of
rest before the movement starts), so a model must integrate several periods to tell similar
exercises apart. It has the shape of public smartwatch exercise sets (about 140 recordings of
2,600 readings, 6 channels, 7 classes) and holds no real data: accuracy on it says only that
training works at that size, not how a model does on people.
"""

from __future__ import annotations

import numpy as np

from edgeseq.data import Dataset, Split

FEATURES = ["acc_x", "acc_y", "acc_z", "gyr_x", "gyr_y", "gyr_z"]
RATE_HZ = 50.0


def _exercises(n_classes: int, rng: np.random.Generator) -> list:
    """Per class: tempo (Hz), harmonic weights (3,), axis gains (6,) and phases (6,)."""
    tempos = np.linspace(0.6, 1.6, n_classes)            # neighbours differ by about 0.15 Hz
    rng.shuffle(tempos)
    return [{"tempo": float(t), "harmonics": rng.uniform(0.2, 1.0, 3) * [1.0, 0.6, 0.3],
             "gain": rng.uniform(0.3, 1.0, 6) * rng.choice([-1.0, 1.0], 6),
             "phase": rng.uniform(0, 2 * np.pi, 6)} for t in tempos]


def _rotation(rng: np.random.Generator, degrees: float) -> np.ndarray:
    """A random rotation (3, 3) of up to `degrees` about a random axis (Rodrigues)."""
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    a = np.deg2rad(rng.uniform(-degrees, degrees))
    K = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(a) * K + (1 - np.cos(a)) * K @ K


def recordings(n: int, length: int, n_classes: int = 7, seed: int = 0, n_test: int = 0,
               name: str = "synthetic-imu") -> Dataset:
    """`n` training and `n_test` test recordings of `length` readings (+-5 %, at least 10) of 6
    channels (accelerometer in g, gyroscope in rad/s, 50 Hz), classes spread evenly.

    Returns a Dataset with X float32 [N, T, 6], zero padded; seeded: the same arguments give
    the same arrays on every machine. Raises ValueError for n < 1 or length < 10."""
    if n < 1 or length < 10 or n_classes < 2:
        raise ValueError("recordings needs n >= 1, length >= 10 and n_classes >= 2")
    rng = np.random.default_rng(seed)
    kinds = _exercises(n_classes, rng)
    total = n + n_test
    lengths = np.maximum(10, np.round(length * rng.uniform(0.95, 1.05, total))).astype(np.int64)
    T = int(lengths.max())
    X = np.zeros((total, T, 6), np.float32)
    y = np.arange(total) % n_classes
    rng.shuffle(y)
    for i in range(total):
        k, L = kinds[y[i]], int(lengths[i])
        t = np.arange(L) / RATE_HZ
        f = k["tempo"] * rng.uniform(0.9, 1.1)                       # this person's tempo
        start = int(rng.uniform(0, 0.1) * L)                         # rest before the movement
        w = 2 * np.pi * f * (t - t[start])
        wave = sum(h * np.sin((j + 1) * w[:, None] + (j + 1) * k["phase"]) for j, h in enumerate(k["harmonics"]))
        x = wave * k["gain"] * rng.uniform(0.7, 1.3)                 # (L, 6)
        x[:start] = 0.0
        x[:, :3] += [0.0, 0.0, 1.0]                                  # gravity
        R = _rotation(rng, 30.0)                                     # how the watch sits on this wrist
        x[:, :3], x[:, 3:] = x[:, :3] @ R.T, x[:, 3:] @ R.T
        x += np.cumsum(rng.normal(0, 0.002, (L, 6)), axis=0)         # drift
        x += rng.normal(0, 0.15, (L, 6))                             # sensor noise
        X[i, :L] = x
    labels = [f"exercise{c}" for c in range(n_classes)]
    train = Split(X[:n], y[:n].astype(np.int64), lengths[:n])
    test = Split(X[n:], y[n:].astype(np.int64), lengths[n:]) if n_test else Split(X[:0], y[:0].astype(np.int64),
                                                                                  lengths[:0])
    return Dataset(name, train, test, labels, list(FEATURES))
