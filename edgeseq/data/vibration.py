"""A synthetic machine-vibration set with injected faults, for anomaly detection.

`recordings(seed)` builds the embedded `vibration` set (`edgeseq/data/vibration.npz` is its
output, written by `scripts/vendor_anomaly.py`; PROVENANCE.md describes it). A 3-axis
accelerometer (acc_x, acc_y, acc_z, in g) on the housing of a rotating machine, read at
50 Hz. Each machine has its own shaft speed (4-6 Hz, drifting slowly), its own amplitudes and
phases of the running speed (1x) and its harmonics (2x, 3x) per axis, gravity on z, a slow
load cycle and sensor noise; readings are whole counts of 1/1024 g. Six machines, each
running without a break: its first 2 minutes are the training split's 4 recordings of 30 s
(normal running only), what follows is cut into its test recordings of 60 s (40 in all): 30
with one fault injected after their first 20 s, 10 normal throughout. A machine's test
recordings joined in order are one never-reset stream of that machine.

The faults are the textbook kinds of vibration analysis (ISO 20816 practice): imbalance (the
1x amplitude grows 1.6-2.2 times), misalignment (the 2x grows on the axial axis x), mechanical
looseness (2x-4x harmonics and a clipped waveform), a rolling-bearing defect (decaying
impulses at a rate that is no multiple of the shaft speed) and a sensor fault (one axis stuck
at its last value). Each lasts 4-10 s. Per-reading labels: 0 normal, 1 fault.

It holds no real data: figures on it say that the method finds faults of these kinds in this
kind of signal, not how it does on a given machine.
"""

from __future__ import annotations

import numpy as np

FEATURES = ["acc_x", "acc_y", "acc_z"]
LABELS = ["normal", "fault"]
RATE_HZ = 50.0
FAULTS = ("imbalance", "misalignment", "looseness", "bearing", "stuck")
TRAIN_SECONDS, TEST_SECONDS, FAULT_AFTER_S = 30, 60, 20
LSB_PER_G = 1024          # readings are whole counts of 1/1024 g, as a 16-bit accelerometer at +-16 g gives


def _machine(rng: np.random.Generator) -> dict:
    return {"f0": rng.uniform(4.0, 6.0),
            "amp": rng.uniform(0.15, 0.45, 3) * np.array([0.6, 1.0, 0.8]),      # 1x per axis
            "harm": rng.uniform(0.1, 0.35, (2, 3)),                             # 2x, 3x relative to 1x
            "phase": rng.uniform(0, 2 * np.pi, (3, 3)),                         # harmonic x axis
            "noise": rng.uniform(0.02, 0.04),
            "load_period": rng.uniform(8.0, 20.0)}


def _signal(m: dict, n: int, rng: np.random.Generator, faults=()) -> np.ndarray:
    """float64 [n, 3]: `n` readings of machine `m` running without a break, with each
    (kind, first, end) of `faults` injected between readings first:end."""
    t = np.arange(n) / RATE_HZ
    speed = m["f0"] * (1 + 0.02 * np.cumsum(rng.normal(0, 1, n)) / np.sqrt(n))   # slow drift, about 2%
    theta = 2 * np.pi * np.cumsum(speed) / RATE_HZ + rng.uniform(0, 2 * np.pi)
    load = 1 + 0.1 * np.sin(2 * np.pi * t / m["load_period"] + rng.uniform(0, 2 * np.pi))
    g = np.ones((n, 4, 3))                                # gain per reading, harmonic (1x..4x) and axis
    g[:, 1:3] = m["harm"]
    g[:, 3] = 0.0
    for kind, a, b in faults:
        if kind == "imbalance":
            g[a:b, 0] *= rng.uniform(1.6, 2.2)
        elif kind == "misalignment":
            g[a:b, 1, 0] = g[a:b, 1, 0] * 3.0 + 0.3
        elif kind == "looseness":
            g[a:b, 1:4] += rng.uniform(0.25, 0.4)
    x = np.zeros((n, 3))
    for k in range(4):
        x += (g[:, k] * m["amp"]) * np.sin((k + 1) * theta[:, None] + (m["phase"][k] if k < 3 else 0.0))
    x *= load[:, None]
    for kind, a, b in faults:
        if kind == "looseness":
            lim = 0.8 * np.abs(x[a:b]).max(0)
            x[a:b] = np.clip(x[a:b], -lim, lim)
        elif kind == "bearing":
            rate = m["f0"] * rng.uniform(3.2, 3.8)        # an outer-race defect rate, no multiple of the speed
            for h in np.arange(a / RATE_HZ, b / RATE_HZ, 1 / rate):
                i = int(round(h * RATE_HZ))
                k = np.arange(i, min(i + 6, b))
                x[k] += rng.uniform(0.4, 0.7) * np.exp(-(k - i) / 1.5)[:, None] * rng.choice([-1, 1], 3)
    x += rng.normal(0, m["noise"], (n, 3))
    x[:, 2] += 1.0                                        # gravity
    for kind, a, b in faults:
        if kind == "stuck":
            axis = rng.integers(3)
            x[a:b, axis] = x[a, axis]
    return x


def _counts(x) -> np.ndarray:
    """Readings in g rounded to whole counts of 1/LSB_PER_G g, float32."""
    return (np.round(np.asarray(x) * LSB_PER_G) / LSB_PER_G).astype(np.float32)


def normal_running(seed: int = 0, seconds: int = 3600) -> dict:
    """Held-out normal running of the six machines of `recordings(seed)` (the same machines:
    the same first draws), one unbroken recording of `seconds` per machine from draws of their
    own (numpy default_rng([seed, 1])), in counts of 1/1024 g: {"X": float32 [6, seconds * 50,
    3], "groups": str [6]}. No fault; for false-alarm rates over hours, which the test split's
    half hour of normal running cannot show."""
    rng = np.random.default_rng(seed)
    machines = [_machine(rng) for _ in range(6)]
    own = np.random.default_rng([seed, 1])
    n = int(seconds * RATE_HZ)
    X = np.stack([_signal(m, n, own) for m in machines])
    return {"X": _counts(X), "groups": np.asarray([f"machine{i + 1}" for i in range(6)])}


def recordings(seed: int = 0) -> dict:
    """The arrays of `vibration.npz` (edgeseq's .npz layout): X_train float32 [24, 1500, 3],
    y_train int64 [24, 1500] (all 0), X_test float32 [40, 3000, 3], y_test int64 [40, 3000]
    (1 inside the injected fault), fault_test str [40] (the fault's kind, '' for none),
    groups_train / groups_test (the machine), labels, features, rate_hz."""
    rng = np.random.default_rng(seed)
    machines = [_machine(rng) for _ in range(6)]
    n_tr, n_te = TRAIN_SECONDS * int(RATE_HZ), TEST_SECONDS * int(RATE_HZ)
    Xtr, gtr = [], []
    Xte, Yte, gte, kinds = [None] * 40, [None] * 40, [None] * 40, [None] * 40
    for i, m in enumerate(machines):                  # each machine runs without a break: training, then test
        mine = [r for r in range(40) if r % 6 == i]
        faults, where = [], {}
        for j, r in enumerate(mine):
            fault = FAULTS[r % len(FAULTS)] if r < 30 else None
            if fault:
                length = int(rng.uniform(4, 10) * RATE_HZ)
                start = int(rng.uniform(FAULT_AFTER_S * RATE_HZ, n_te - length - RATE_HZ))
                a = 4 * n_tr + j * n_te + start
                faults.append((fault, a, a + length))
                where[r] = (start, start + length)
        x = _signal(m, 4 * n_tr + len(mine) * n_te, rng, faults)
        for k in range(4):
            Xtr.append(x[k * n_tr:(k + 1) * n_tr])
            gtr.append(f"machine{i + 1}")
        for j, r in enumerate(mine):
            Xte[r] = x[4 * n_tr + j * n_te:4 * n_tr + (j + 1) * n_te]
            y = np.zeros(n_te, np.int64)
            if r in where:
                y[where[r][0]:where[r][1]] = 1
            Yte[r], gte[r] = y, f"machine{i + 1}"
            kinds[r] = FAULTS[r % len(FAULTS)] if r < 30 else ""
    return {"X_train": _counts(Xtr), "y_train": np.zeros((len(Xtr), n_tr), np.int64),
            "X_test": _counts(Xte), "y_test": np.asarray(Yte, np.int64),
            "groups_train": np.asarray(gtr), "groups_test": np.asarray(gte), "fault_test": np.asarray(kinds),
            "labels": np.asarray(LABELS), "features": np.asarray(FEATURES), "rate_hz": np.float64(RATE_HZ)}
