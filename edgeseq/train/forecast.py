"""Training for the tasks beside classification, on the same five stream architectures.

- `anomaly`: trained on normal recordings only. After every reading the model forecasts the
  next one, normalised (z = (x - mean) / std per channel), as a Gaussian per channel: its
  outputs are the forecast means (F) and their log-variances (F), so C = 2F "logits" in the
  step contract. The loss is the Gaussian negative log-likelihood of the reading that came.
  The runtime scores each reading by how far it lies from the forecast
  (`edgeseq.runtime.anomaly`), and each device learns that score's normal level itself.
- `regress`: per-reading targets (K channels, the data's `targets` arrays), normalised by
  their training mean and std; the loss is the mean squared error at every reading past
  the first `grace`; the runtime returns the targets in their own units.

Both train on whole recordings as streams with truncated backpropagation through time (TBPTT):
every recording of the training split is one lane, cut into `chunk`-reading pieces with the
state carried between them (gradients stop at a piece's start), so a model learns from the
state it will run with on a device that is never reset. One recording of each group (or the
last tenth of the recordings) is held out for early stopping on its loss, with a cosine
learning-rate schedule over the epoch budget; a regression model then trains on every recording
for half its kept epochs, the learning rate annealed to 0 (`FINAL_SHARE`).
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np
import torch

import edgeseq
from edgeseq.data import Dataset, Normalization, Split
from edgeseq.errors import DataError, UsageError
from edgeseq.models import build_model, check_arch, config_dict, make_config
from edgeseq.runtime.anomaly import hold_out

TASKS = ("classify", "anomaly", "regress")
LOGVAR_LIMIT = 8.0          # forecast log-variances are clamped to +-this in the loss (variance e^-8 .. e^8)
WARM = 8                    # readings at a recording's start the loss leaves out (state still empty)
FINAL_SHARE = 0.5           # regress: after early stopping, every recording trains this share of the kept epochs
RESOLUTION = 1e-5           # regress: a target's std must be at least this share of |its mean| (float32 outputs)
PATIENCE_UPDATES = 250      # early stopping waits at least this many updates (short data has few per epoch)


def task_outputs(task: str, features: list, targets: list | None = None) -> list:
    """The output names of a task's step graph (its `edgeseq.labels`): anomaly 'mean:<f>' then
    'logvar:<f>' per feature; regress the target names."""
    if task == "anomaly":
        return [f"mean:{f}" for f in features] + [f"logvar:{f}" for f in features]
    return list(targets)


def _lanes(split: Split) -> list:
    """Each valid recording as float32 [T, F]."""
    return [split.X[i, :split.lengths[i]] for i in range(len(split))]


def _batch(lanes: list, chunk: int) -> tuple:
    """Pad lanes to a multiple of `chunk`: X float32 [B, T, F], valid bool [B, T]."""
    T = max(len(x) for x in lanes)
    T = int(math.ceil(T / chunk) * chunk)
    F = lanes[0].shape[1]
    X = np.zeros((len(lanes), T, F), np.float32)
    valid = np.zeros((len(lanes), T), bool)
    for i, x in enumerate(lanes):
        X[i, :len(x)] = x
        valid[i, :len(x)] = True
    return torch.from_numpy(X), torch.from_numpy(valid)


def forecast_loss(out: torch.Tensor, z_next: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean Gaussian negative log-likelihood (less the constant) of z_next (B, T, F) under the
    forecasts out (B, T, 2F) = (means, log-variances), over the readings where mask (B, T)."""
    F = z_next.shape[-1]
    mu, logvar = out[..., :F], out[..., F:].clamp(-LOGVAR_LIMIT, LOGVAR_LIMIT)
    nll = 0.5 * (logvar + (z_next - mu) ** 2 * torch.exp(-logvar)).mean(-1)      # (B, T)
    return nll[mask].mean()


def _run(model, X, valid, task, chunk, norm_t, Yn=None, opt=None, grace=WARM):
    """One pass over lanes X (B, T, F) in chunks; trains where `opt` is given. Returns the mean loss."""
    carry, total, count = None, 0.0, 0
    T = X.shape[1]
    F = X.shape[2]
    mean, std = norm_t
    for t0 in range(0, T, chunk):
        x = X[:, t0:t0 + chunk]
        out, carry = model.forward_stream(x, carry)
        pos = torch.arange(t0, t0 + x.shape[1])[None, :]
        if task == "anomaly":
            nxt = X[:, t0 + 1:t0 + chunk + 1]
            nv = valid[:, t0 + 1:t0 + chunk + 1]
            k = nxt.shape[1]
            out, z = out[:, :k], (nxt - mean) / std
            mask = nv & (pos[:, :k] >= grace)
            if not mask.any():
                continue
            loss = forecast_loss(out, z, mask)
        else:
            y = Yn[:, t0:t0 + chunk]
            mask = valid[:, t0:t0 + chunk] & (pos >= grace)
            if not mask.any():
                continue
            loss = ((out - y) ** 2).mean(-1)[mask].mean()
        if opt is not None:
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        n = int(mask.sum())
        total += float(loss.detach()) * n
        count += n
    del F
    return total / max(count, 1)


def train_task(arch: str, dataset: Dataset, task: str, epochs: int | None = None, lr: float = 3e-3,
               seed: int = 0, settings: dict | None = None, chunk: int = 128, patience: int = 8,
               progress: bool = True) -> dict:
    """Train `arch` (rnn, gru, lstm, ssm, transformer) for `task` ('anomaly' or 'regress') on
    `dataset` and return a checkpoint dict (`edgeseq.train.save_checkpoint` writes it).

    anomaly: the training split should hold normal recordings only (its labels are not used);
    regress: the dataset needs per-reading targets (`Split.targets` float64 [N, T, K],
    `Dataset.target_names`); the loss is the mean squared error of the normalised targets.
    epochs None: early stopping on the held-out recordings (`patience` epochs without a better
    loss, and at least PATIENCE_UPDATES updates' worth), within a budget of 3,000,000 training
    readings (20 to 200 epochs); a number: that many epochs, nothing held out. Raises
    UsageError (bad task or arch), DataError (recordings too short to forecast; for regress no
    targets, or a target constant or finer than float32 outputs resolve)."""
    check_arch(arch)
    if arch not in ("rnn", "gru", "lstm", "ssm", "transformer"):
        raise UsageError(f"--task {task} trains stream models (rnn, gru, lstm, ssm, transformer), not '{arch}'")
    if task not in ("anomaly", "regress"):
        raise UsageError(f"task must be anomaly or regress here, got {task!r}")
    tr = dataset.train
    if int(tr.lengths.max()) < WARM + 2:
        raise DataError(f"the recordings of '{dataset.name}' are {int(tr.lengths.max())} readings long at most; "
                        f"forecasting needs at least {WARM + 2}")
    targets = None
    if task == "regress":
        if tr.targets is None or dataset.target_names is None:
            if str(dataset.source or "").lower().endswith(".csv"):
                raise DataError(f"'{dataset.name}' has no per-reading targets: name the .csv's target columns "
                                "(--targets COL,... ; load_dataset(..., targets=[...])) (docs/regression.md)")
            raise DataError(f"'{dataset.name}' has no per-reading targets: save them as targets (and targets_test "
                            "beside X_test) [N, T, K] in the .npz, with target_names (docs/regression.md)")
        targets = {"names": list(dataset.target_names), "train": tr.targets}
    torch.manual_seed(seed)
    np.random.seed(seed)
    norm = Normalization.fit(tr, dataset.features)
    F = dataset.n_features
    outputs = task_outputs(task, dataset.features, None if targets is None else targets["names"])
    overrides = dict(settings or {})
    if arch == "transformer" and "window" not in overrides:
        overrides["window"] = 64                       # a bounded KV cache: an endless stream must not grow it
    config = make_config(arch, n_features=F, n_classes=len(outputs), **overrides)
    model = build_model(arch, config)
    model.norm.set(norm.mean, norm.std)
    norm_t = (torch.from_numpy(norm.mean), torch.from_numpy(norm.std))
    t_mean = t_std = None
    rows, vrows = hold_out(tr) if epochs is None else (np.arange(len(tr)), np.array([], np.int64))
    lanes = _lanes(tr)
    X, valid = _batch([lanes[i] for i in rows], chunk)
    Xv, validv = _batch([lanes[i] for i in vrows], chunk) if len(vrows) else (None, None)
    Yn = Yv = None
    if task == "regress":
        Ytr = targets["train"]
        flat = np.concatenate([Ytr[i, :tr.lengths[i]] for i in range(len(tr))]).astype(np.float64)
        t_mean, t_std = flat.mean(0), flat.std(0)
        for k, name in enumerate(targets["names"]):
            if not t_std[k] > 0:
                raise DataError(f"target '{name}' of '{dataset.name}' is constant in the training split "
                                f"({t_mean[k]:.6g}): there is nothing to learn; drop it from targets")
            if t_std[k] < RESOLUTION * abs(t_mean[k]):       # float32 outputs: mean + z x std keeps ~7 digits
                raise DataError(f"target '{name}' of '{dataset.name}' varies by {t_std[k]:.3g} around {t_mean[k]:.6g}, "
                                f"below {RESOLUTION:g} of its size, finer than the model's float32 outputs resolve; "
                                "subtract an offset from it (train on the difference)")
        tl = [((Ytr[i, :tr.lengths[i]] - t_mean) / t_std).astype(np.float32) for i in range(len(tr))]
        Yn, _ = _batch([tl[i] for i in rows], chunk)
        if len(vrows):
            Yv, _ = _batch([tl[i] for i in vrows], chunk)
    readings = int(valid.sum())
    budget = epochs if epochs is not None else int(min(200, max(20, 3_000_000 // max(readings, 1))))
    per_epoch = math.ceil(X.shape[1] / chunk)                  # updates an epoch takes (one per chunk)
    patience = max(patience, math.ceil(PATIENCE_UPDATES / per_epoch))   # a few updates per epoch: more epochs
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=budget, eta_min=lr / 50)
    best, best_epoch, best_state, since, curve = math.inf, 0, None, 0, []
    t0 = time.perf_counter()
    stopped = "budget" if epochs is None else "fixed"
    for epoch in range(1, budget + 1):
        model.train()
        loss = _run(model, X, valid, task, chunk, norm_t, Yn, opt)
        sched.step()
        point = {"epoch": epoch, "loss": round(loss, 5), "lr": opt.param_groups[0]["lr"]}
        if Xv is not None and epochs is None:
            model.eval()
            with torch.no_grad():
                vl = _run(model, Xv, validv, task, chunk, norm_t, Yv)
            point["val_loss"] = round(vl, 5)
            if best == math.inf or vl < best - 1e-3 * max(1.0, abs(best)):
                best, best_epoch, since = vl, epoch, 0
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            else:
                since += 1
            point["best"] = best_epoch == epoch
        curve.append(point)
        if progress:
            print(f"  epoch {epoch}/{budget}: loss {loss:.4f}" + (f", validation {point['val_loss']:.4f}"
                                                                   if "val_loss" in point else ""),
                  file=sys.stderr, flush=True)      # stdout stays the command's answer (--json)
        if Xv is not None and epochs is None and since >= patience:
            stopped = "early"
            break
    final = 0
    if best_state is not None:
        model.load_state_dict(best_state)
        if FINAL_SHARE and len(vrows) and task == "regress":
            # The held-out recordings join the rest for a share of the kept epochs, the learning rate
            # annealed from the kept epoch's to 0: the model learns from every recording it was given.
            final = max(1, round(FINAL_SHARE * best_epoch))
            lr_best = curve[best_epoch - 1]["lr"]
            Xa, valida = _batch(lanes, chunk)
            Ya = None if Yn is None else _batch(tl, chunk)[0]
            opt = torch.optim.AdamW(model.parameters(), lr=lr_best, weight_decay=1e-4)
            model.train()
            for e in range(final):
                for g in opt.param_groups:
                    g["lr"] = lr_best * (1 - e / final)
                loss = _run(model, Xa, valida, task, chunk, norm_t, Ya, opt)
                curve.append({"epoch": len(curve) + 1, "loss": round(loss, 5), "lr": opt.param_groups[0]["lr"],
                              "final": True})
    model.eval()
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        train_loss = _run(model, X, valid, task, chunk, norm_t, Yn)
    task_meta = {"kind": task}
    if task == "regress":
        task_meta.update(targets=list(targets["names"]), target_mean=[float(v) for v in t_mean],
                         target_std=[float(v) for v in t_std], persistence_lag=int(dataset.persistence_lag))
    schedule = {"mode": "fixed" if epochs is not None else ("early-stopping" if Xv is not None else "budget"),
                "max_epochs": budget, "epochs_run": len(curve) - final, "best_epoch": best_epoch or None,
                "final_epochs": final,
                "stopped": stopped, "patience": patience if Xv is not None else None,
                "validation": f"{len(vrows)} of {len(tr)} training recordings" if len(vrows) else
                "none: every training recording trains (--epochs)" if epochs is not None else
                f"{len(tr)} training recording(s), fewer than 4: nothing held out",
                "converged": None if not len(vrows) and epochs is None else stopped in ("early", "fixed"),
                "advice": f"the validation loss was still falling when the budget of {budget} epochs ran out: "
                "give --epochs with more" if stopped == "budget" and len(vrows) else None}
    metrics = {"task": task, "train_loss": train_loss, "validation_loss": None if best == math.inf else best,
               "train_seconds": round(seconds, 2), "readings_per_second": round(readings * len(curve) / seconds),
               "schedule": schedule, "curve": curve, "train_accuracy": None, "test_accuracy": None}
    return {
        "edgeseq_version": edgeseq.__version__, "arch": arch, "config": config_dict(config),
        "train_config": {"task": task, "epochs": epochs, "lr": lr, "seed": seed, "chunk": chunk,
                         "patience": patience},
        "state_dict": model.state_dict(), "normalization": norm.to_json(), "labels": outputs,
        "features": list(dataset.features), "dataset": dataset.name,
        "data_path": dataset.source if dataset.source and dataset.source.startswith("/") else None,
        "data_sha256": dataset.sha256, "task": task_meta, "metrics": metrics, "loss_history": [p["loss"] for p in curve],
    }
