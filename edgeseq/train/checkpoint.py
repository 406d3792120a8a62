"""A training run on disk: `save_checkpoint` writes checkpoint.pt, metrics.json and the training
curve's PNG all or nothing; `load_checkpoint` reads one back and `model_from_checkpoint`
rebuilds its model."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch

from edgeseq.errors import ModelFileError, printable
from edgeseq.models import build_model

CHECKPOINT = "checkpoint.pt"


def model_from_checkpoint(ckpt: dict):
    model = build_model(ckpt["arch"], ckpt["config"])
    model.load_state_dict(ckpt["state_dict"])
    norm = ckpt.get("normalization") or {}
    scale, floor = norm.get("asinh_scale"), norm.get("gain_floor")
    if scale is not None or floor is not None:  # the input transform's settings: not in the state dict
        from edgeseq.data import GAIN_RELEASE
        model.norm.set(model.norm.mean, model.norm.std, scale, floor, norm.get("gain_release", GAIN_RELEASE))
    return model.eval()


def torch_bytes(obj) -> bytes:
    """`obj` as torch.save writes it, in memory: written to disk by `write_files`, a full disk
    gives an OSError naming the file (torch's own writer gives a RuntimeError without one)."""
    import io
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def write_files(files: dict) -> None:
    """Write {path: bytes} all or nothing (`edgeseq.runtime.statefile.write_files`)."""
    from edgeseq.runtime.statefile import write_files as write_all
    write_all(files)


CURVE = "training_curve.png"


def curve_png(ckpt: dict) -> bytes | None:
    """The training curve as a PNG (matplotlib): training loss, validation loss and accuracy and
    the learning rate per epoch, the kept epoch marked. None without matplotlib or a curve."""
    curve = ckpt.get("metrics", {}).get("curve")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if not curve:
        return None
    import io
    e = [p["epoch"] for p in curve]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    ax.plot(e, [p["loss"] for p in curve], label="training loss")
    scored = [p for p in curve if "val_loss" in p]
    if scored:
        ax.plot([p["epoch"] for p in scored], [p["val_loss"] for p in scored], label="validation loss")
        acc = [p for p in scored if "val_accuracy" in p]        # a forecast (anomaly) model has a loss only
        if acc:
            ax2.plot([p["epoch"] for p in acc], [p["val_accuracy"] for p in acc], label="validation accuracy",
                     color="C2")
            ax2.set_ylim(0, 1.02)
    else:
        ax2.set_title("no validation split", fontsize=8)
    fit = [p for p in curve if "fit" in p]
    if fit:
        ax2.plot([p["epoch"] for p in fit], [p["fit"] for p in fit], label="training fit (own updates)", color="C4")
        ax2.set_ylim(0, 1.02)
    if min(p["loss"] for p in curve) > 0:               # a Gaussian negative log-likelihood may be negative
        ax.set_yscale("log")
    final = [p["epoch"] for p in curve if p.get("final")]
    if final:
        ax.axvspan(final[0] - 0.5, final[-1] + 0.5, color="0.9", label="all training sequences")
    best = ckpt["metrics"].get("schedule", {}).get("best_epoch")
    lr = ax2.twinx()
    lr.plot(e, [p["lr"] for p in curve], color="0.4", lw=0.8, label="learning rate")
    lr.set_ylabel("learning rate", fontsize=8)
    for a in (ax, ax2):
        if best:
            a.axvline(best, color="0.6", ls="--", lw=1, label=f"kept: epoch {best}")
        a.set_xlabel("epoch")
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
    s = ckpt["metrics"].get("schedule", {})
    fig.suptitle(f"{ckpt['arch']} on {printable(ckpt['dataset'])}: {s.get('epochs_run', len(curve))} epochs, "
                 f"{s.get('mode', 'fixed')}{'' if s.get('converged', True) else ' (not converged)'}", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def save_checkpoint(ckpt: dict, out_dir: str | os.PathLike) -> Path:
    """Write `checkpoint.pt`, a readable `metrics.json` (the training curve included) and, where
    matplotlib is installed, `training_curve.png` into `out_dir`, all or nothing
    (`write_files`): a failed write (a full disk) raises an OSError naming the file and leaves
    the old checkpoint as it was, with no temporary file behind."""
    out = Path(out_dir)
    summary = {k: ckpt[k] for k in ("arch", "config", "train_config", "labels", "features", "dataset", "metrics")}
    summary["data_path"] = ckpt.get("data_path")
    data = torch_bytes(ckpt)
    out.mkdir(parents=True, exist_ok=True)
    files = {out / CHECKPOINT: data, out / "metrics.json": (json.dumps(summary, indent=2) + "\n").encode()}
    png = curve_png(ckpt)
    if png is not None:
        files[out / CURVE] = png
    write_files(files)
    return out / CHECKPOINT


def quiet_torch_load(path):
    """torch.load(weights_only=True) of `path` without the warnings torch prints for a file it
    refuses (a raw pickle): the caller turns the exception into one `Error:` line."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(path, map_location="cpu", weights_only=True)   # tensors and plain data only: no code runs


def load_checkpoint(path: str | os.PathLike) -> dict:
    """A run directory (holding checkpoint.pt) or the .pt file itself."""
    p = Path(path)
    if p.is_dir():
        p = p / CHECKPOINT
    if not p.exists():
        run = Path(path).parent if Path(path).name == CHECKPOINT else path    # --out names the run directory
        raise ModelFileError(f"no checkpoint at '{path}': run `edgeseq train --out {run}` first")
    try:
        ckpt = quiet_torch_load(p)
    except Exception as e:
        raise ModelFileError(f"'{p}' is not a readable edgeseq checkpoint ({type(e).__name__}); train it again") from None
    if not isinstance(ckpt, dict) or "arch" not in ckpt or "state_dict" not in ckpt:
        raise ModelFileError(f"'{p}' is not an edgeseq checkpoint; train one with `edgeseq train`")
    check_checkpoint(ckpt, p)
    return ckpt


def _numbers(v, n: int, positive: bool = False) -> bool:
    """Whether `v` is a list of `n` finite numbers (above 0 with `positive`)."""
    import math
    import numbers
    return isinstance(v, (list, tuple)) and len(v) == n and all(
        isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and (x > 0 or not positive)
        for x in v)


def check_checkpoint(ckpt: dict, shown) -> None:
    """ModelFileError, one line naming what does not agree, unless `ckpt` (as `torch.load`
    returned it) holds a known architecture, a config within the settings' limits
    (`edgeseq.models.LIMITS`), a state dict of finite tensors whose names and shapes are
    the ones that config builds (checked on torch's meta device: nothing is allocated), as
    many label names as the model has outputs, as many feature names as it reads, and a
    normalisation of that many finite means and stds above 0 (asinh scales above 0 where
    given). Every command that reads a checkpoint goes through it, so an edited file is
    refused before any work starts."""
    from edgeseq.errors import UsageError
    from edgeseq.models import LIMITS, REGISTRY, build_model, check_setting

    def bad(what):
        return ModelFileError(f"'{shown}' is not a consistent edgeseq checkpoint ({what}); train it again "
                              "with `edgeseq train`")
    arch, config, sd = ckpt.get("arch"), ckpt.get("config"), ckpt.get("state_dict")
    if not isinstance(arch, str) or arch not in REGISTRY:
        raise bad(f"unknown architecture {printable(repr(arch))[:60]}")
    if not isinstance(config, dict) or not isinstance(sd, dict):
        raise bad("its config or state dict is not a mapping")
    try:
        for name, value in config.items():
            if name in LIMITS:
                check_setting(arch, name, value)
        with torch.device("meta"):
            model = build_model(arch, config)
    except (UsageError, TypeError, ValueError, AssertionError, RuntimeError) as e:
        raise bad(f"its config does not build a {arch}: {printable(str(e)).splitlines()[0][:160]}") from None
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    for k, v in sd.items():
        if not isinstance(v, torch.Tensor):
            raise bad(f"state dict entry {printable(repr(k))[:60]} is not a tensor")
        if k not in want:
            raise bad(f"state dict entry {printable(repr(k))[:60]} is not one a {arch} has")
        if tuple(v.shape) != want[k]:
            raise bad(f"{k} has the shape {list(v.shape)}, the config builds {list(want[k])}")
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            raise bad(f"{k} holds NaN or infinite values")
    missing = sorted(set(want) - set(sd))
    if missing:
        raise bad(f"the state dict lacks {', '.join(missing[:3])}")
    F, C = model.config.n_features, model.config.n_classes
    labels, features, norm = ckpt.get("labels"), ckpt.get("features"), ckpt.get("normalization")
    if not isinstance(labels, (list, tuple)) or len(labels) != C or not all(isinstance(x, str) for x in labels):
        raise bad(f"labels must be {C} names, as the model has {C} outputs")
    if not isinstance(features, (list, tuple)) or len(features) != F or not all(isinstance(x, str) for x in features):
        raise bad(f"features must be {F} names, as the model reads {F} channels")
    G = model.config.levels if hasattr(model.config, "levels") else 0
    if not isinstance(norm, dict) or not _numbers(norm.get("mean"), F + G) or not _numbers(norm.get("std"), F + G, True):
        raise bad(f"normalization must hold a mean and a std of {F + G} finite numbers each, the stds above 0")
    floor = norm.get("gain_floor")
    if floor is not None or G:
        from edgeseq.contract import F32_LARGEST, F32_TINY
        ok = isinstance(floor, list) and len(floor) == F and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
            and (x == 0 or F32_TINY <= x <= F32_LARGEST) for x in floor)
        if not ok or sum(x > 0 for x in floor) != G or not G:
            raise bad(f"normalization's gain_floor must be {F} numbers, 0 or within float32's normal range, {G} of "
                      f"them above 0 (the config's levels)")
        release = norm.get("gain_release")
        if not isinstance(release, (int, float)) or isinstance(release, bool) or not math.isfinite(release) \
                or not F32_TINY <= release <= 1e6 or norm.get("asinh_scale") is not None:
            raise bad("normalization's gain_release must be a number above 0 (at most 1e6), without an asinh_scale "
                      "beside it")
    if norm.get("asinh_scale") is not None and not _numbers(norm["asinh_scale"], F, True):
        raise bad(f"normalization's asinh_scale must be {F} finite numbers above 0")
    for k in ("mean", "std"):                   # the graph computes with the weights' copy: the same numbers
        kept = sd.get(f"norm.{k}")
        if kept is not None and not torch.equal(kept.float(), torch.tensor(norm[k], dtype=torch.float32)):
            raise bad(f"the weights' norm.{k} is not the normalization's {k}")
    _, _, fixed = REGISTRY[arch]
    for name, value in fixed.items():
        if config.get(name, value) != value:
            raise bad(f"a {arch} has {name}={value}, its config {name}={printable(repr(config[name]))[:40]}")
    _check_task(ckpt.get("task"), list(features), list(labels), bad)


def _check_task(task, features: list, labels: list, bad) -> None:
    """The names and the task record as the exported file's metadata will carry them
    (`edgeseq.contract`'s own checks, so a checkpoint that exports is one the runtime opens):
    distinct non-empty label and feature names; a task of a known kind; an anomaly model's
    outputs 'mean:<feature>' then 'logvar:<feature>'; a regression model's targets, their
    mean and std and its persistence lag."""
    from edgeseq import contract

    def check(fn, *args):
        try:
            return fn(*args)
        except contract.MetadataError as e:
            raise bad(str(e).removeprefix("metadata ").rsplit("; ", 1)[0].replace("edgeseq.", "")) from None
    check(contract._names, contract.META_LABELS, labels, "label")
    check(contract._names, contract.META_FEATURES, features, "feature")
    if task is None:
        return
    if not isinstance(task, dict) or task.get("kind") not in contract.TASK_KINDS:
        raise bad(f"task must be an object whose kind is one of {', '.join(contract.TASK_KINDS)}")
    if task["kind"] == "anomaly":
        if labels != [f"mean:{f}" for f in features] + [f"logvar:{f}" for f in features]:
            raise bad("an anomaly model's labels must be 'mean:<feature>' then 'logvar:<feature>' for every feature")
    elif task["kind"] == "regress":
        check(contract._task, task, features, labels)
