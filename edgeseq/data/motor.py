"""A synthetic motor-heating set for regression: forecast a winding's temperature a minute ahead.

`recordings(seed)` builds the embedded `motor` set (`edgeseq/data/motor.npz` is its output,
written by `scripts/vendor_motor.py`; PROVENANCE.md describes it). An electric motor driving a
machine with a varying duty cycle, read once a second (1 Hz): its phase current (RMS, A), the
ambient air temperature and the temperature of a sensor embedded in its stator winding (an
NTC or PT100, as motors for thermal protection carry; degrees C). The target of each reading
is the winding temperature `HORIZON` = 60 readings (one minute) later: what a thermal
protection needs to act before the winding overheats. The persistence baseline, the
winding's temperature now, is its target 60 readings earlier (`persistence_lag` 60).

Each motor has its own rating (4-12 A), copper loss, thermal resistances and time constants
(winding 60-150 s, housing 20-40 min), heated by the copper loss I^2 R (R rising 0.393% per
degree C) through a two-node thermal network (winding -> housing -> ambient), the usual
lumped model of IEC 60034-11 thermal protection practice. The load is a duty cycle of holds of
1-10 minutes at idle, part, full or overload current (0.2-1.35 x rating) joined by ramps of
2-15 s; the ambient drifts slowly. Sensor noise: current 1% and steps of 0.01 A, temperatures
0.15 degrees C and steps of 0.1 degrees C.

Twelve motors, each running for 80 minutes without a break: its first 60 minutes are the training
split's 3 recordings of 20 minutes, its last 20 minutes its test recording (groups name the
motor). It holds no measured data: figures on it say that a model learns this kind of
dynamics, not how it does on a given motor.
"""

from __future__ import annotations

import numpy as np

FEATURES = ["current_a", "ambient_c", "winding_c"]
TARGETS = ["winding_c_in_60s"]
RATE_HZ = 1.0
HORIZON = 60                    # readings (s) between a reading and the temperature its target is
RECORDING_S, TRAIN_RECORDINGS, MOTORS = 1200, 3, 12
ALPHA_CU = 0.00393              # copper's resistance rise per degree C (at 20 C)


def _load(n: int, rated: float, rng: np.random.Generator) -> np.ndarray:
    """float64 [n] phase current (A): holds at idle/part/full/overload joined by ramps."""
    levels = (0.2, 0.35), (0.5, 0.85), (0.9, 1.05), (1.1, 1.35)
    out, i, cur = np.empty(n), 0, rated * 0.3
    while i < n:
        lo, hi = levels[rng.choice(4, p=[0.25, 0.3, 0.3, 0.15])]
        nxt = rated * rng.uniform(lo, hi)
        ramp, hold = int(rng.integers(2, 16)), int(rng.integers(60, 601))
        seg = np.concatenate([np.linspace(cur, nxt, ramp, endpoint=False), np.full(hold, nxt)])
        out[i:i + len(seg)] = seg[:n - i]
        i, cur = i + len(seg), nxt
    return out * (1 + 0.02 * rng.standard_normal(n).cumsum() / np.sqrt(n))      # slow wander of the load


def motor(n: int, rng: np.random.Generator) -> tuple:
    """(readings float32 [n, 3], winding temperature float64 [n + HORIZON]) of one motor
    running `n` readings (its true winding temperature runs HORIZON readings further)."""
    m = n + HORIZON
    rated = rng.uniform(4.0, 12.0)
    p_rated = rng.uniform(100.0, 300.0)                 # copper loss at rated current and 20 C (W)
    r_cu = p_rated / rated ** 2
    rise = rng.uniform(55.0, 80.0)                      # steady winding rise at rated current (K)
    r_total = rise / p_rated
    r_wh, r_ha = 0.3 * r_total, 0.7 * r_total           # K/W winding->housing, housing->ambient
    tau_w, tau_h = rng.uniform(60.0, 150.0), rng.uniform(1200.0, 2400.0)
    c_w, c_h = tau_w / r_wh, tau_h / r_ha               # J/K
    amb = rng.uniform(15.0, 35.0) + 2.0 * np.sin(2 * np.pi * np.arange(m) / rng.uniform(3600, 7200)
                                                 + rng.uniform(0, 2 * np.pi))
    cur = _load(m, rated, rng)
    tw = np.empty(m)
    w = h = amb[0] + rng.uniform(0.2, 0.6) * rise       # a motor that has run before
    h = amb[0] + 0.7 * (w - amb[0])
    for t in range(m):                                   # 1 s steps (tau >= 60 s: explicit Euler is stable)
        tw[t] = w
        p = r_cu * cur[t] ** 2 * (1 + ALPHA_CU * (w - 20.0))
        q_wh, q_ha = (w - h) / r_wh, (h - amb[t]) / r_ha
        w += (p - q_wh) / c_w
        h += (q_wh - q_ha) / c_h
    x = np.stack([np.round(cur[:n] * (1 + 0.01 * rng.standard_normal(n)), 2),
                  np.round(amb[:n] + 0.15 * rng.standard_normal(n), 1),
                  np.round(tw[:n] + 0.15 * rng.standard_normal(n), 1)], axis=1)
    return x.astype(np.float32), tw


def recordings(seed: int = 0) -> dict:
    """The `motor` set's arrays as `edgeseq.data` reads them from an .npz: X, targets, groups
    (train: 3 recordings of 1,200 readings per motor) and X_test, targets_test, groups_test
    (1 per motor), target_names, persistence_lag, features."""
    rng = np.random.default_rng(seed)
    parts = {"X": [], "targets": [], "groups": [], "X_test": [], "targets_test": [], "groups_test": []}
    n = RECORDING_S * (TRAIN_RECORDINGS + 1)
    for k in range(MOTORS):
        x, tw = motor(n, rng)
        target = np.round(tw[HORIZON:HORIZON + n], 2).astype(np.float32)
        for r in range(TRAIN_RECORDINGS + 1):
            sl = slice(r * RECORDING_S, (r + 1) * RECORDING_S)
            side = "" if r < TRAIN_RECORDINGS else "_test"
            parts["X" + side].append(x[sl])
            parts["targets" + side].append(target[sl, None])
            parts["groups" + side].append(f"motor{k + 1}")
    out = {k: np.stack(v) if k.startswith(("X", "targets")) else np.array(v) for k, v in parts.items()}
    out.update(target_names=np.array(TARGETS), persistence_lag=np.int64(HORIZON), features=np.array(FEATURES))
    return out
