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
readings into their recording (on the never-reset stream too: the baseline never reaches back
into the recording before), the same readings on both protocols. `skill` is 1 - MAE / persistence
MAE: above 0, the model beats persistence. numpy only (the runtime installs without torch).
"""

from __future__ import annotations

import numpy as np

from edgeseq.errors import UsageError
from edgeseq.runtime.session_checks import in_units  # noqa: F401  (importable from here, as always)


def joined(split) -> tuple:
    """(X float32 [1, T, F], targets float32 [1, T, K], lengths int64 [1], starts int64 [R]):
    every recording of `split` joined end to end in file order, one never-reset stream, and
    where each recording starts in it."""
    L = np.asarray(split.lengths)
    X = np.concatenate([split.X[i, :L[i]] for i in range(len(L))])[None]
    Y = np.concatenate([split.targets[i, :L[i]] for i in range(len(L))])[None]
    starts = np.concatenate([[0], np.cumsum(L)[:-1]]).astype(np.int64)
    return X, Y, np.array([X.shape[1]], np.int64), starts


def persistence(targets: np.ndarray, lag: int) -> np.ndarray:
    """The persistence baseline: [S, T, K] in the targets' dtype (float32 at least), each
    reading's target `lag` readings earlier in its stream (NaN for the first `lag` readings)."""
    out = np.full(targets.shape, np.nan, np.result_type(targets.dtype, np.float32))
    out[:, lag:] = targets[:, :-lag] if lag < targets.shape[1] else out[:, lag:]
    return out


def figures(pred: np.ndarray, targets: np.ndarray, lengths: np.ndarray, lag: int, names: list,
            starts: np.ndarray | None = None) -> dict:
    """Per-reading error of `pred` float [S, T, K] against `targets` [S, T, K] beside the
    persistence baseline, over the readings inside each stream's length and at least `lag`
    into its recording: into the stream, or, for a joined stream (S = 1), past each recording's
    start in `starts` (int [R]), where persistence would take the recording before's value.
    Returns {"readings": n, "lag": lag, "targets": {name: {"mae", "rmse", "persistence_mae",
    "persistence_rmse", "skill"}}} (units: the target's own; skill: 1 - MAE / persistence MAE).
    Raises UsageError where no reading is `lag` into a recording."""
    S, T, K = targets.shape
    t = np.arange(T)[None, :]
    keep = (t >= lag) & (t < np.asarray(lengths)[:, None])
    for s0 in (() if starts is None else starts):
        keep[:, s0:s0 + lag] = False
    if not keep.any():
        raise UsageError(f"no recording is longer than the persistence lag ({lag} readings): nothing to score; give "
                         "longer recordings")
    base = persistence(targets, lag)
    out = {}
    for k, name in enumerate(names):
        e, b = (pred[..., k] - targets[..., k])[keep], (base[..., k] - targets[..., k])[keep]
        mae, pmae = float(np.abs(e).mean()), float(np.abs(b).mean())
        out[name] = {"mae": mae, "rmse": float(np.sqrt((e.astype(np.float64) ** 2).mean())),
                     "persistence_mae": pmae, "persistence_rmse": float(np.sqrt((b.astype(np.float64) ** 2).mean())),
                     "skill": float(1 - mae / pmae) if pmae > 0 else None}
    return {"readings": int(keep.sum()), "lag": int(lag), "targets": out}


def aligned(split, data_names: list | None, model_names: list, where: str = "the data"):
    """`split` with its targets in the model's order: by name where the data names them as the
    model does (in any order), by position where the data's or the model's are unnamed (target,
    target0, ...: the names the loader gives).
    Raises UsageError, one line naming both, where they are other targets."""
    if split.targets is None:
        raise UsageError(f"{where} has no per-reading targets to score a regression model on; give data with "
                         "targets (and targets_test), docs/regression.md")
    K = split.targets.shape[2]
    unnamed = (["target"] if K == 1 else [f"target{i}" for i in range(K)])
    generic = data_names is None or list(data_names) == unnamed or list(model_names) == unnamed
    if K == len(model_names) and (generic or list(data_names) == list(model_names)):
        return split
    if not generic and sorted(data_names) == sorted(model_names):
        from dataclasses import replace
        order = [list(data_names).index(n) for n in model_names]
        return replace(split, targets=split.targets[..., order])
    have = ", ".join(data_names) if data_names else f"{K} unnamed"
    raise UsageError(f"{where} has the targets {have}, the model predicts {', '.join(model_names)}; give data with "
                     "the model's targets, named as in training")


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


def evaluate(model, split, target_names: list | None = None, lag: int | None = None, backend: str | None = None,
             provider: str = "cpu") -> dict:
    """A regression model file run as deployed, scored by `figures` on both protocols
    ("per_recording", "never_reset": `joined`) against `split.targets` (float32 [N, T, K]),
    put in the model's order by `target_names` (the data's, `aligned`). lag None: the model's
    `persistence_lag`. Returns {"per_recording", "never_reset", "backend", "recordings",
    "targets", "lag"}. Raises UsageError where the split has no targets or other ones."""
    from edgeseq.runtime.model import open_model
    task = open_model(model)[1].task
    if not task or task.get("kind") != "regress":
        raise UsageError(f"'{model}' is not a regression model (train one with `edgeseq train --task regress`)")
    split = aligned(split, target_names, task["targets"])
    use = int(lag or task.get("persistence_lag", 1))
    out = {}
    for name, (X, Y, L, starts) in (("per_recording", (split.X, split.targets, np.asarray(split.lengths), None)),
                                    ("never_reset", joined(split))):
        sess, pred = predictions(model, X, L, backend, provider)
        out[name] = figures(pred, Y, L, use, task["targets"], starts)
    return {**out, "backend": sess.backend, "recordings": len(split), "targets": task["targets"], "lag": use}


def line(fig: dict) -> str:
    """One line of `figures`: each target's MAE and RMSE beside persistence's."""
    parts = []
    for name, f in fig["targets"].items():
        skill = "" if f["skill"] is None else f", skill {f['skill']:+.2f}"
        parts.append(f"{name} MAE {f['mae']:.4g} (persistence {f['persistence_mae']:.4g}), RMSE {f['rmse']:.4g} "
                     f"(persistence {f['persistence_rmse']:.4g}){skill}")
    return "; ".join(parts) + f" over {fig['readings']:,} readings"
