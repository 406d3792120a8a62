"""Regression models on streams: per-reading targets, their error and the persistence baseline.

A regression model (`edgeseq train --task regress`, `edgeseq.train.forecast`) answers every
reading with K values in the targets' own units (`StreamSession.push_scores`; the step graph's
outputs are the targets normalised by their training mean and std, `edgeseq.task`). Scored on
both protocols:

- per recording: each recording its own stream from a fresh state;
- never reset: the recordings joined end to end in file order, one stream, as a device that
  is never reset sees them (the state is not cleared where one recording follows another).

Every figure is the error per reading, in the target's units: mean absolute error (MAE) and
root mean squared error (RMSE), beside the persistence baseline, which predicts a reading's
target as its value `lag` readings earlier (the last value a device knew; for a target that is
a quantity h readings ahead, h). Both are scored on the same readings: those at least `lag`
readings into their stream, where the baseline has a value. `skill` is 1 - MAE / persistence
MAE: above 0, the model beats persistence. numpy only (the runtime installs without torch).
"""

from __future__ import annotations

import numpy as np

from edgeseq.errors import UsageError


def joined(split) -> tuple:
    """(X float32 [1, T, F], targets float32 [1, T, K], lengths int64 [1]): every recording of
    `split` joined end to end in file order, one never-reset stream."""
    L = np.asarray(split.lengths)
    X = np.concatenate([split.X[i, :L[i]] for i in range(len(L))])[None]
    Y = np.concatenate([split.targets[i, :L[i]] for i in range(len(L))])[None]
    return X, Y, np.array([X.shape[1]], np.int64)


def persistence(targets: np.ndarray, lag: int) -> np.ndarray:
    """The persistence baseline: float32 [S, T, K], each reading's target `lag` readings
    earlier in its stream (NaN for the first `lag` readings)."""
    out = np.full(targets.shape, np.nan, np.float32)
    out[:, lag:] = targets[:, :-lag] if lag < targets.shape[1] else out[:, lag:]
    return out


def figures(pred: np.ndarray, targets: np.ndarray, lengths: np.ndarray, lag: int, names: list) -> dict:
    """Per-reading error of `pred` float [S, T, K] against `targets` [S, T, K] beside the
    persistence baseline, over the readings at least `lag` into each stream and inside its
    length. Returns {"readings": n, "lag": lag, "targets": {name: {"mae", "rmse",
    "persistence_mae", "persistence_rmse", "skill"}}} (units: the target's own; skill: 1 -
    MAE / persistence MAE). Raises UsageError where no reading is `lag` into a stream."""
    S, T, K = targets.shape
    t = np.arange(T)[None, :]
    keep = (t >= lag) & (t < np.asarray(lengths)[:, None])
    if not keep.any():
        raise UsageError(f"no recording is longer than the persistence lag ({lag} readings): nothing to score")
    base = persistence(targets, lag)
    out = {}
    for k, name in enumerate(names):
        e, b = (pred[..., k] - targets[..., k])[keep], (base[..., k] - targets[..., k])[keep]
        mae, pmae = float(np.abs(e).mean()), float(np.abs(b).mean())
        out[name] = {"mae": mae, "rmse": float(np.sqrt((e.astype(np.float64) ** 2).mean())),
                     "persistence_mae": pmae, "persistence_rmse": float(np.sqrt((b.astype(np.float64) ** 2).mean())),
                     "skill": float(1 - mae / pmae) if pmae > 0 else None}
    return {"readings": int(keep.sum()), "lag": int(lag), "targets": out}


def predictions(model, X: np.ndarray, lengths: np.ndarray, backend: str | None = None,
                provider: str = "cpu") -> tuple:
    """(session, values float32 [S, T, K]): regression `model` (a path or bytes) run as
    deployed (`StreamSession.push_scores`) over X float32 [S, T, F], one stream per row (a
    finished row repeats its last reading). Raises UsageError for a model that is not a
    regression model, else as `StreamSession`."""
    from edgeseq.runtime.session import StreamSession
    S, T, _ = X.shape
    sess = StreamSession(model, streams=S, provider=provider, backend=backend)
    if sess.meta.kind != "regress":
        raise UsageError(f"'{model}' is not a regression model (train one with `edgeseq train --task regress`)")
    L = np.asarray(lengths)
    out = np.zeros((S, T, len(sess.labels)), np.float32)
    for t in range(T):
        out[:, t] = sess.push_scores(X[np.arange(S), np.minimum(t, L - 1)])[0]
    return sess, out


def evaluate(model, split, names: list | None = None, lag: int | None = None, backend: str | None = None,
             provider: str = "cpu") -> dict:
    """A regression model file run as deployed, scored by `figures` on both protocols
    ("per_recording", "never_reset": `joined`) against `split.targets` (float32 [N, T, K], the
    model's targets in its order). lag None: the model's `persistence_lag`. Returns
    {"per_recording", "never_reset", "backend", "recordings", "targets", "lag"}. Raises
    UsageError where the split has no targets or another number of them than the model."""
    if split.targets is None:
        raise UsageError("the data has no per-reading targets to score a regression model on; give data with "
                         "targets (and targets_test), docs/regression.md")
    out = {}
    for name, (X, Y, L) in (("per_recording", (split.X, split.targets, np.asarray(split.lengths))),
                            ("never_reset", joined(split))):
        sess, pred = predictions(model, X, L, backend, provider)
        task = sess.meta.task
        if Y.shape[2] != len(task["targets"]):
            raise UsageError(f"the data has {Y.shape[2]} targets per reading, the model predicts "
                             f"{len(task['targets'])} ({', '.join(task['targets'])}); give the data it was trained on")
        use = int(lag or task.get("persistence_lag", 1))
        out[name] = figures(pred, Y, L, use, names or task["targets"])
    return {**out, "backend": sess.backend, "recordings": len(split), "targets": task["targets"], "lag": use}


def line(fig: dict) -> str:
    """One line of `figures`: each target's MAE and RMSE beside persistence's."""
    parts = []
    for name, f in fig["targets"].items():
        skill = "" if f["skill"] is None else f", skill {f['skill']:+.2f}"
        parts.append(f"{name} MAE {f['mae']:.4g} (persistence {f['persistence_mae']:.4g}), RMSE {f['rmse']:.4g} "
                     f"(persistence {f['persistence_rmse']:.4g}){skill}")
    return "; ".join(parts) + f" over {fig['readings']:,} readings"
