"""`edgeseq train`: train a streaming model and save its run directory."""

from __future__ import annotations

import json
from pathlib import Path

import click

from edgeseq.cli._common import Finite, _echo_json, _errors, _seed_option, _writing
from edgeseq.errors import UsageError, printable


@click.command()
@click.option("--arch", default="gru", show_default=True, help="rnn, gru, lstm, transformer, ssm, bigru or bilstm.")
@click.option("--data", default="basicmotions", show_default=True,
              help="An embedded set (basicmotions, japanesevowels; vibration and internalbleeding16 for --task "
                   "anomaly; motor for --task regress) or a .npz / .csv path.")
@click.option("--features", metavar="COL,COL,...", help="A .csv's feature columns, by name and in this order; every "
              "other column is ignored (default: the columns that hold readings, as described above).")
@click.option("--out", required=True, type=click.Path(), help="Run directory for checkpoint.pt and metrics.json.")
@click.option("--epochs", type=click.IntRange(min=1),
              help="Train exactly N epochs on every training sequence (no validation split, no early stopping). "
                   "Default: until the score on a validation split stops improving, within a budget scaled to "
                   "the data.")
@click.option("--lr", type=Finite(min=0, min_open=True), help="Peak learning rate.")
@_seed_option
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="Model setting, e.g. --set hidden=32 --set layers=2; augmentation: --set augment=none, "
                   "--set augment.rotate=30 (see docs/augment.md); training: --set patience=20, "
                   "--set val_fraction=0.25 (see docs/usage.md); input: --set input_transform=auto|asinh|gain|none, "
                   "input_init=auto|fan_in|torch (rnn/gru/lstm/bigru/bilstm classifiers; see docs/training.md).")
@click.option("--task", type=click.Choice(["classify", "anomaly", "regress"]), default="classify", show_default=True,
              help="classify: class per reading; anomaly: learn normal recordings only (a next-reading forecast "
                   "with its variance) to score how unusual each reading is (docs/anomaly.md); regress: the data's "
                   "per-reading targets, in their units (docs/regression.md).")
@click.option("--targets", metavar="COL,COL,...", help="--task regress on a .csv: its target columns, by name (its "
              "label column is then optional). An .npz carries its targets.")
@click.option("--persistence-lag", type=click.IntRange(min=1), help="--task regress: the persistence baseline's lag in readings (default: "
              "the .npz's persistence_lag, else 1).")
@click.option("--baseline/--no-baseline", default=True, show_default=True,
              help="Score 1-NN DTW on the same split beside the model, after the model is saved "
                   "(docs/training.md#the-nearest-neighbour-baseline): longer data gets a band or a draw of test "
                   "sequences, within --baseline-cells.")
@click.option("--baseline-cells", type=Finite(min=1), default=3e10, show_default=True,
              help="Warping cells the baseline may take: about a minute per 3e10 on 2 cores.")
@click.option("--json", "as_json", is_flag=True, help="Print metrics as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@_errors
def train(arch, data, out, epochs, lr, seed, settings, as_json, quiet, features, task="classify", targets=None,
          persistence_lag=None, baseline=True, baseline_cells=3e10):
    """Train a model and save a checkpoint that carries its config, normalisation and labels.

    User data: .npz with X [N,T,F], y [N], optional lengths [N]; or .csv with one reading per
    row and columns sequence,label,<features...> (optional split=train|test and group
    columns). A .csv's other columns are features, except those named as a time or an id
    (timestamp, time, date, t, id, index, sample, ..., any case) and those that hold no number
    on any row (notes, ISO times): these are ignored, and the output names them. --features
    names the feature columns instead.

    \b
      edgeseq train --arch lstm --data basicmotions --out runs/lstm
      edgeseq train --arch gru --data mydata.npz --out runs/mine --set hidden=32
      edgeseq train --arch ssm --out runs/ssm --set selective=true
      edgeseq train --arch gru --out runs/plain --set augment=none
      edgeseq train --arch gru --data wrist.csv --out runs/rot --set augment.rotate=45 --set augment.triples=ax,ay,az
      edgeseq train --arch gru --data log.csv --out runs/acc --features acc_x,acc_y,acc_z
      edgeseq train --task anomaly --arch gru --data vibration --out runs/vib
      edgeseq train --task regress --arch gru --data motor --out runs/motor
      edgeseq train --task regress --data log.csv --targets temp_in_60s --persistence-lag 60 --out runs/t
    """
    if (targets is not None or persistence_lag is not None) and task != "regress":
        raise UsageError(f"{'--targets' if targets is not None else '--persistence-lag'} applies to --task regress")
    if task == "regress" and targets is None and Path(data).suffix.lower() == ".csv":
        raise UsageError(f"--task regress on a .csv needs --targets: name the target columns of '{printable(data)}' "
                         "as --targets COL,COL,... (docs/regression.md)")
    if task != "classify":
        return _train_task(arch, data, out, epochs, lr, seed, settings, as_json, quiet, features, task, targets,
                           persistence_lag)
    from dataclasses import replace

    from edgeseq.data import load_dataset
    from edgeseq.data.augment import describe, parse_settings
    from edgeseq.models import check_arch
    from edgeseq.train import DEFAULTS, EARLY_SETTINGS, TRAIN_SETTINGS, TrainConfig, parse_overrides, save_checkpoint
    from edgeseq.train import train as train_fn

    check_arch(arch)
    tc = DEFAULTS.get(arch, TrainConfig())
    settings = parse_overrides(settings)
    overrides, augment = parse_settings(settings, base=tc.augment)   # usage errors before the data loads
    schedule = {k: overrides.pop(k) for k in list(overrides) if k in TRAIN_SETTINGS}
    early = sorted(set(schedule) & set(EARLY_SETTINGS))
    if epochs and early:
        raise UsageError(f"--set {', '.join(early)} shape the default schedule, which --epochs replaces by a fixed "
                         "one; drop --epochs or those settings")
    _check_names(arch, overrides)
    if features is not None and not data.lower().endswith(".csv"):
        raise UsageError(f"--features picks columns of a .csv file, and --data '{printable(data)}' is not one (an .npz's "
                         "channels are its X); drop --features")
    dataset = load_dataset(data, None if features is None else features.split(","))
    augment = parse_settings(settings, base=tc.augment, features=dataset.features)[1]   # augment.NAME on auto
    tc = replace(tc, seed=seed, augment=augment, **({"epochs": epochs} if epochs else {}), **({"lr": lr} if lr else {}),
                 **schedule)
    if Path(out).exists() and not Path(out).is_dir():
        raise UsageError(f"--out '{printable(out)}' is a file; give a directory for checkpoint.pt and metrics.json")
    ckpt = train_fn(arch, dataset, tc, overrides, progress=not quiet)      # progress goes to stderr
    if dataset.ignored:                         # the columns left out of a .csv, and why: in metrics.json too
        ckpt["metrics"]["ignored_columns"] = dict(dataset.ignored)
    with _writing(out):
        path = save_checkpoint(ckpt, out)
    if baseline and len(dataset.test):          # after the model is saved: stopping here loses nothing
        try:
            b = _baseline(dataset, seed, baseline_cells, quiet)
        except KeyboardInterrupt:
            click.echo(f"note: the baseline was stopped; the model is saved: {printable(path)}", err=True)
            raise
        if b is not None:
            ckpt["metrics"]["baseline"] = b
            with _writing(out):
                path = save_checkpoint(ckpt, out)
    m = ckpt["metrics"]
    if as_json:
        _echo_json({"checkpoint": str(path), "arch": arch, **m})
    else:
        cont = m.get("test_continuous_accuracy")
        click.echo(f"{arch} on {printable(dataset.name)}: test accuracy {m['test_accuracy']:.3f} per sequence"
                   + (f", {cont:.3f} never reset" if cont is not None else "")
                   + f" (train {m['train_accuracy']:.3f}) in {m['train_seconds']:.1f} s -> {printable(path)}")
        click.echo(f"schedule: {schedule_line(m.get('schedule'))}")
        click.echo(f"augment: {describe(m['augment'])}")
        if (m.get("input_transform") or "none").startswith(("asinh", "gain")):
            click.echo(printable(f"input: {m['input_transform']}"))
        if m.get("input_init"):
            click.echo(f"init: {m['input_init']} (--set input_init=torch keeps torch's draw)")
        if m.get("model_from_data"):
            chosen = ", ".join(f"{k}={json.dumps(v)}" for k, v in m["model_from_data"].items())
            click.echo(f"model: {chosen}, chosen for this data (--set NAME=VALUE chooses otherwise)")
        if dataset.ignored:
            click.echo(printable(f"columns: features {', '.join(dataset.features)}; ignored "
                                 + ", ".join(f"{name or repr(name)} ({why})" for name, why in dataset.ignored.items())))
        if m.get("groups"):
            click.echo(f"groups: {len(m['groups']['train'] or [])} in training, {len(m['groups']['test'] or [])} "
                       f"in the test split ({m['groups']['test_split']})")
            shared = m["groups"].get("shared") or []
            if shared:
                click.echo(f"note: {len(shared)} group(s) are in both splits ({', '.join(repr(g) for g in shared[:5])}"
                           f"{', ...' if len(shared) > 5 else ''}): the test accuracy is not on unseen groups; give "
                           "groups_test names the training split does not hold to measure that", err=True)
    if quiet and m.get("ignored_channels"):     # without --quiet the progress lines said so before training
        names = ", ".join(repr(str(c)) for c in m["ignored_channels"])
        click.echo(printable(f"warning: channel(s) {names} do not vary in the training data: they carry no "
                             "information and are ignored"), err=True)
    s = m.get("schedule") or {}
    if s.get("advice"):
        click.echo(f"warning: not converged: {s['advice']} (curve: {printable(Path(out) / 'training_curve.png')})", err=True)
    if m.get("baseline") is not None:
        from edgeseq.train.baseline import below, describe, scored_on
        b = m["baseline"]
        if not as_json:
            click.echo(f"baseline: {describe(b)}" + (" (--baseline-cells N raises the budget)" if "skipped" in b else ""))
        if below(m["test_accuracy"], b):
            click.echo(f"warning: below the nearest-neighbour baseline: {m['test_accuracy']:.3f} per sequence against "
                       f"{b['method']}'s {b['accuracy']:.3f} {scored_on(b)}; try another --arch (`edgeseq report` "
                       "trains them side by side), a longer schedule (--epochs N) or more training sequences "
                       "(docs/training.md#the-nearest-neighbour-baseline)", err=True)


def _baseline(dataset, seed: int, max_cells: float, quiet: bool) -> dict | None:
    """`nearest_neighbour_dtw` on the data's split, or None with a note on stderr where it
    cannot run (dtaidistance missing or failing): the model stands without it."""
    from edgeseq.train.baseline import scored_or_why
    b = scored_or_why(dataset.train, dataset.test, max_cells=max_cells, seed=seed, progress=not quiet)
    if not b.get("failed"):
        return b
    click.echo(f"note: no baseline: {printable(b['skipped'])}; the model is saved (--no-baseline leaves the baseline "
               "out)", err=True)
    return None


def _train_task(arch, data, out, epochs, lr, seed, settings, as_json, quiet, features, task, targets=None,
                persistence_lag=None):
    """`edgeseq train --task anomaly`: `edgeseq.train.forecast.train_task`, then its figures on
    the test split (torch outputs, the default anomaly settings)."""
    from edgeseq.data import RATE_HZ, load_dataset
    from edgeseq.models import check_arch
    from edgeseq.runtime.anomaly import AnomalySpec, binary, figures, joined, run
    from edgeseq.train import TRAIN_SETTINGS, parse_overrides
    from edgeseq.train.forecast import train_task
    from edgeseq.train.loop import stream_logits

    check_arch(arch)
    overrides = parse_overrides(settings)
    bad = [k for k in overrides if k in TRAIN_SETTINGS or k.startswith("augment")]
    if bad:
        raise UsageError(f"--set {bad[0]} applies to classification training; --task {task} takes model settings "
                         "(hidden, layers, ...), --epochs and --lr")
    _check_names(arch, overrides)
    if Path(out).exists() and not Path(out).is_dir():
        raise UsageError(f"--out '{printable(out)}' is a file; give a directory for checkpoint.pt and metrics.json")
    dataset = load_dataset(data, None if features is None else features.split(","),
                           None if targets is None else targets.split(","), persistence_lag)
    if task == "regress":
        return _train_regress(arch, dataset, out, epochs, lr, seed, overrides, as_json, quiet)
    scored, normal, other = binary(dataset)
    if other:
        click.echo(printable(f"warning: {other:,} readings of the training split are labelled other than '{normal}'; "
                             "an anomaly model learns everything it trains on as normal: give normal recordings only"),
                   err=True)
    ckpt = train_task(arch, dataset, task, epochs=epochs, lr=lr or 3e-3, seed=seed, settings=overrides,
                      progress=not quiet)
    if dataset.ignored:                         # the columns left out of a .csv, and why: in metrics.json too
        ckpt["metrics"]["ignored_columns"] = dict(dataset.ignored)
    from edgeseq.train.checkpoint import model_from_checkpoint
    model = model_from_checkpoint(ckpt)
    te = scored.test
    spec = AnomalySpec(rate_hz=RATE_HZ.get(dataset.source or ""))
    norm = ckpt["normalization"]
    fig = {}
    for name, part in (("per_recording", te), ("never_reset", joined(te))):
        outs = stream_logits(model, part.X).numpy()
        fig[name] = figures(part.Y, part.lengths, run(part.X, part.lengths, outs, norm["mean"], norm["std"], spec),
                            spec, spec.rate_hz)
    ckpt["metrics"]["test_settings"] = spec.to_json()
    path = _write_task(ckpt, fig, out, arch, as_json)
    if path is None:
        return
    m = ckpt["metrics"]
    click.echo(f"{arch} anomaly model on {printable(dataset.name)} in {m['train_seconds']:.1f} s -> {printable(path)}; "
               "test split (torch, default settings, not calibrated):")
    click.echo(f"  per recording: {anomaly_line(fig['per_recording'])}")
    click.echo(f"  never reset: {anomaly_line(fig['never_reset'])}")
    click.echo(f"schedule: {schedule_line(m.get('schedule'))}")
    if dataset.ignored:
        click.echo(printable(f"columns: features {', '.join(dataset.features)}; ignored "
                             + ", ".join(f"{name or repr(name)} ({why})" for name, why in dataset.ignored.items())))
    click.echo(f"next: edgeseq export {printable(out)} --out {printable(Path(out).name)}.onnx, then edgeseq calibrate on it")
    s = m.get("schedule") or {}
    if s.get("advice"):
        click.echo(f"warning: not converged: {s['advice']}", err=True)


def _write_task(ckpt, fig, out, arch, as_json):
    """Save an anomaly or regression checkpoint with its test figures `fig` into `out`; with
    `as_json` print its metrics and return None, else the checkpoint's path."""
    from edgeseq.train import save_checkpoint
    ckpt["metrics"]["test"] = fig
    with _writing(out):
        path = save_checkpoint(ckpt, out)
    if as_json:
        _echo_json({"checkpoint": str(path), "arch": arch, **ckpt["metrics"]})
        return None
    return path


def _train_regress(arch, dataset, out, epochs, lr, seed, overrides, as_json, quiet):
    """`edgeseq train --task regress`: `train_task`, then the per-reading error on the test split
    (torch outputs) on both protocols, beside the persistence baseline."""
    from edgeseq.runtime.regress import figures, in_units, joined, line
    from edgeseq.train.checkpoint import model_from_checkpoint
    from edgeseq.train.forecast import train_task
    from edgeseq.train.loop import stream_logits

    ckpt = train_task(arch, dataset, "regress", epochs=epochs, lr=lr or 3e-3, seed=seed, settings=overrides,
                      progress=not quiet)
    if dataset.ignored:
        ckpt["metrics"]["ignored_columns"] = dict(dataset.ignored)
    model = model_from_checkpoint(ckpt)
    task = ckpt["task"]
    te = dataset.test
    fig = {}
    for name, (X, Y, L, starts) in (("per_recording", (te.X, te.targets, te.lengths, None)),
                                    ("never_reset", joined(te))):
        pred = in_units(task, stream_logits(model, X).numpy())
        fig[name] = figures(pred, Y, L, dataset.persistence_lag, task["targets"], starts)
    path = _write_task(ckpt, fig, out, arch, as_json)
    if path is None:
        return
    m = ckpt["metrics"]
    click.echo(printable(f"{arch} regression model on {dataset.name} in {m['train_seconds']:.1f} s -> {path}; "
                         f"test split (torch), persistence: each target {dataset.persistence_lag} reading(s) earlier:"))
    click.echo(printable(f"  per recording: {line(fig['per_recording'])}"))
    click.echo(printable(f"  never reset: {line(fig['never_reset'])}"))
    click.echo(f"schedule: {schedule_line(m.get('schedule'))}")
    click.echo(f"next: edgeseq export {printable(out)} --out {printable(Path(out).name)}.onnx, then edgeseq eval on it")
    s = m.get("schedule") or {}
    if s.get("advice"):
        click.echo(f"warning: not converged: {s['advice']}", err=True)


def anomaly_line(fig: dict) -> str:
    """One line of `edgeseq.runtime.anomaly.figures`."""
    if not fig["normal_readings"] and not fig["detected"]:
        return (f"no reading scored against a learnt baseline ({fig['anomalies']} anomalies labelled): the recordings "
                "are shorter than the warm-up and learning phase")
    top = "" if fig["top_inside"] is None else f"{fig['top_inside']:.0%}"
    rate = (f"{fig['false_alarms_per_hour']:.2f} per hour of normal data" if fig.get("false_alarms_per_hour")
            is not None else f"{fig.get('false_alarms_per_1000') or 0:.3f} per 1,000 normal readings")
    delay = "" if fig["delay_median"] is None else f", median delay {fig['delay_median']:.0f} readings"
    return (f"detected {fig['detected']}/{fig['anomalies']}, {fig['false_alarms']} false alarms ({rate}){delay}"
            + ("" if fig["top_inside"] is None else f"; top score inside the anomaly on {top} of the streams with one"
               f" ({fig['ucr_score']:.0%} by the UCR archive's protocol, within the anomaly's length of it)"))


def _check_names(arch: str, overrides: dict) -> None:
    """UsageError for a --set name that is neither a model nor a training setting, naming the
    closest of either (a misspelt `patiance` is pointed to `patience`)."""
    import difflib
    from dataclasses import fields

    from edgeseq.models import FROM_DATA, REGISTRY
    from edgeseq.train import TRAIN_OPTIONS, TRAIN_SETTINGS
    model = [f.name for f in fields(REGISTRY[arch][1]) if f.name not in FROM_DATA]
    for name in overrides:
        if name in model or name in TRAIN_OPTIONS or name in FROM_DATA:
            continue          # train() points the last two kinds to their place
        close = difflib.get_close_matches(name, model + list(TRAIN_SETTINGS), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise UsageError(printable(f"'{arch}' has no setting {name}; {hint}model settings: {', '.join(model)}; "
                                   f"training settings: {', '.join(TRAIN_SETTINGS)}"))


def schedule_line(s: dict | None) -> str:
    """How a checkpoint was trained, in one line: 'early stopping on 8 of 40 training sequences
    (...): best epoch 31 of 43 run (budget 300)' or '25 epochs (fixed)'."""
    if not s:
        return "unknown"
    if s["mode"] == "fixed":
        return f"{s['epochs_run']} epochs (fixed)"
    if s["mode"] == "budget":
        again = (" and a second cosine cycle of it, the model still learning" if (s.get("cycles") or 1) > 1
                 else "")
        return f"{s['epochs_run']} epochs, the whole budget{again} (no validation split: {s['validation']})"
    how = "stopped early" if s["stopped"] == "early" else "budget spent"
    final = s.get("final_epochs") or 0
    tail = f", then {final} over every training sequence" if final else ""
    budget = s.get("budget_epochs") or s["max_epochs"]
    grown = f", grown to {s['max_epochs']} while the model still learnt" if s["max_epochs"] > budget else ""
    budget = f"{budget} epoch{'s' if budget != 1 else ''}"
    run, why = s["epochs_run"] - final, ""
    kept = f"kept epoch {s['best_epoch']} of {run}"
    if str(s.get("kept", "best")).startswith("last"):
        kept = f"kept the last of {run} epochs"
        lowest = f", epoch {s['val_best_epoch']}" if s.get("val_best_epoch") else ""
        why = ("; the model underfits and went on learning after its lowest validation loss" + lowest
               if "underfit" in s["kept"] else "; no epoch had a finite validation loss")
    if s.get("attempts"):
        n, acc = len(s["attempts"]), ", ".join(f"{a['train_accuracy']:.2f}" if "train_accuracy" in a else "diverged"
                                               for a in s["attempts"])
        why += (f"; attempt {s['attempt']} of {n} kept (a run that stalled underfit trains again from a new "
                f"initialisation; training accuracy {acc})")
    return f"validation on {s['validation']}; {kept} ({how}, budget {budget}{grown}){tail}{why}"
