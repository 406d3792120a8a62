"""`edgeseq calibrate`: decision settings for a false-alarm budget, written into the model file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from edgeseq.cli._common import _backend_option, _errors, _json_option
from edgeseq.errors import UsageError, printable

ROWS_SHOWN = 12                # trade-off rows printed (--json has every setting tried)


def _delay(v, rate, unit=""):
    if v is None:
        return "n/a"
    return f"{v:g}{unit}" + (f" ({v / rate:.1f} s)" if rate else "")


def _check_outputs(model: Path, target: Path, plot: Path, data, dry_run: bool) -> None:
    """Refuse, before any work, outputs that would overwrite what they must not: a --out that is
    a folder, the data, or an existing file that is not an edgeseq model; a --plot that is not a
    .png file name or lands on the model, the data or the --out."""
    from edgeseq.errors import EdgeseqError
    from edgeseq.runtime.model import open_model

    def same(a, b) -> bool:
        return Path(os.path.realpath(a)) == Path(os.path.realpath(b))
    if target.is_dir():
        raise UsageError(f"--out '{printable(str(target))}' is a folder; give a file name ending in .onnx")
    if data and Path(data).exists() and same(target, data):
        raise UsageError("--out is the data file; give another file name ending in .onnx")
    if target.exists() and not same(target, model):
        try:
            open_model(target)
        except EdgeseqError:
            raise UsageError(f"--out '{printable(str(target))}' exists and is not an edgeseq model; choose another "
                             "name, or delete it first") from None
    if dry_run:
        return
    if plot.suffix.lower() != ".png" or plot.is_dir():
        raise UsageError(f"--plot '{printable(str(plot))}' must be a file name ending in .png")
    for other, what in ((model, "the model"), (target, "--out")) + (((Path(data), "the data"),) if data else ()):
        if same(plot, other):
            raise UsageError(f"--plot would replace {what}; give another file name ending in .png")


def _plot(r, path: Path, budget: float) -> str | None:
    """The trade-off as a PNG: false alarms per hour against missed events, every setting tried,
    the front joined and the chosen one marked. None where matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    t, f, c = r["table"], r["front"], r["chosen"].calibration["validation"]
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].scatter([x["false_alarms_per_hour"] for x in t], [x["missed"] for x in t], s=6, alpha=0.3,
                  label="settings tried")
    ax[0].plot([x["false_alarms_per_hour"] for x in f], [x["missed"] for x in f], "o-", ms=4, label="trade-off front")
    ax[0].scatter([c["false_alarms_per_hour"]], [c["missed"]], s=120, marker="*", color="red", label="chosen", zorder=3)
    ax[0].axvline(budget, ls="--", color="grey", lw=1, label=f"budget {budget:g}/h")
    ax[0].set_xlabel("false alarms per hour")
    ax[0].set_ylabel(f"missed events (of {c['events']})")
    ax[0].set_xscale("symlog", linthresh=1)
    ax[0].set_xlim(left=0)                                    # a rate is never negative
    ax[0].legend(fontsize=8)
    ax[1].scatter([x["false_alarms_per_hour"] for x in t], [x["delay_median"] or 0 for x in t], s=6, alpha=0.3)
    ax[1].plot([x["false_alarms_per_hour"] for x in f], [x["delay_median"] or 0 for x in f], "o-", ms=4)
    ax[1].scatter([c["false_alarms_per_hour"]], [c["delay_median"] or 0], s=120, marker="*", color="red", zorder=3)
    ax[1].axvline(budget, ls="--", color="grey", lw=1)
    if r.get("max_delay") is not None and r["max_delay"] <= 2 * max(x["delay_median"] or 0 for x in t):
        ax[1].axhline(r["max_delay"], ls=":", color="grey", lw=1, label=f"--max-delay {r['max_delay']:g}")
        ax[1].legend(fontsize=8)
    ax[1].set_xlabel("false alarms per hour")
    ax[1].set_ylabel("median detection delay (readings)")
    ax[1].set_xscale("symlog", linthresh=1)
    ax[1].set_xlim(left=0)
    fig.suptitle(f"decision calibration: {r['orders']} never-reset streams of each of {r['folds']} parts of "
                 f"{r['sequences']} training sequences, each through a model trained without it" if r.get("folds") else
                 f"decision calibration: {r['orders']} never-reset streams of {r['sequences']} sequences", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)


def _calibrate_anomaly(model, ds, rate_hz, budget, split, target, plot_path, dry_run, as_json, backend):
    """`calibrate` for an anomaly model (`edgeseq.runtime.anomaly.calibrate`) on normal recordings."""
    from edgeseq.runtime.anomaly import calibrate as run
    from edgeseq.runtime.anomaly import hold_out
    part = ds.train
    if split == "validation":
        _, rows = hold_out(ds.train)
        if not len(rows):
            raise UsageError(f"'{printable(ds.name)}' has fewer than 4 training recordings: nothing was held out; "
                             "use --split train or --data")
        part = ds.train.take(rows)
    r = run(model, part, rate_hz, budget, backend)
    spec = r["chosen"]
    written = plotted = None
    if not dry_run:
        from export.decision import write_decision
        plotted = _plot_anomaly(r, plot_path)
        written = str(write_decision(model, spec, target))
    if as_json:
        click.echo(json.dumps({"chosen": spec.to_json(), "table": r["table"], "written": written, "plot": plotted},
                              indent=2))
        return
    per = r["per"]
    span = f"{r['hours'] * 60:.1f} minutes at {rate_hz:g} Hz" if r["hours"] else "rate unknown"
    streams = r["recordings"]
    click.echo(f"calibrating on {len(part)} normal {split} recordings of {printable(ds.name)}, joined into {streams} "
               f"never-reset stream{'s' if streams > 1 else ''} (one per group): {r['normal_readings']:,} scored "
               f"readings ({span}); budget {budget:g} false alarms per {per}")
    click.echo(f"  {'min':>4s} {'highest':>8s} {'threshold':>10s} {'seen at it':>11s}")
    for x in r["table"]:
        mark = "* " if x["min_duration"] == spec.min_duration else "  "
        click.echo(f"{mark}{x['min_duration']:4d} {x['highest']:8.2f} {x['sigmas']:10.1f} {x['observed_false_alarms']:11d}")
    click.echo(f"chosen: {spec.describe()}")
    click.echo(f"the threshold meets the budget under a Gumbel law fitted to the highest level held "
               f"{spec.min_duration} readings in each of {r['blocks']} blocks (modelled, not counted: {r['observed_false_alarms']} false alarms seen "
               "on these recordings); check the test split: " + ("" if written else "once written (without --dry-run), ")
               + "edgeseq eval " + printable(str(written or target)))
    if r["weak_fit"]:
        click.echo(f"note: only {r['blocks']} blocks of {r['block_readings']} readings to fit: the threshold rests on "
                   "few maxima; calibrate on more normal recordings (--data) for one you can trust", err=True)
    if written:
        click.echo(f"wrote the anomaly settings into {printable(written)}"
                   + (f"; plot {printable(plotted)}" if plotted else "; no plot (pip install matplotlib for one)"))


def _plot_anomaly(r, path: Path) -> str | None:
    """Each recording's highest sustained level per minimum duration, and the thresholds chosen."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    t = r["table"]
    ax.plot([x["min_duration"] for x in t], [x["highest"] for x in t], "o-", label="highest level on normal data")
    ax.plot([x["min_duration"] for x in t], [x["sigmas"] for x in t], "s--", label="threshold for the budget")
    c = r["chosen"]
    ax.scatter([c.min_duration], [c.sigmas], s=120, marker="*", color="red", zorder=3, label="chosen")
    ax.set_xscale("log")
    ax.set_xlabel("minimum duration (readings)")
    ax.set_ylabel("level (standard deviations of the learnt score)")
    ax.legend(fontsize=8)
    fig.suptitle(f"anomaly calibration: {r['recordings']} normal recordings, budget {r['budget']:g} per {r['per']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)


def _fold_training(arch: str, settings, features):
    """The folds' training settings: the architecture's defaults with `--set` NAME=VALUE training
    settings (`edgeseq train --set`'s names, augment.NAME included) on top. Returns (TrainConfig,
    the settings as given, for the progress line). UsageError (one line) for a model setting
    (the folds take MODEL's) or an unknown name."""
    import difflib
    from dataclasses import fields, replace

    from edgeseq.data.augment import for_data, parse_settings, resolve_triples
    from edgeseq.errors import DataError
    from edgeseq.models import REGISTRY
    from edgeseq.train import (DEFAULTS, EARLY_SETTINGS, TRAIN_OPTIONS, TRAIN_SETTINGS, TrainConfig, check_train_config,
                               parse_overrides)
    tc = DEFAULTS.get(arch, TrainConfig())
    given = parse_overrides(settings)
    rest, augment = parse_settings(given, base=tc.augment, features=features)
    allowed = list(TRAIN_SETTINGS) + list(TRAIN_OPTIONS)
    model = [f.name for f in fields(REGISTRY[arch][1])]
    for name in rest:
        if name in model:
            raise UsageError(printable(f"--set {name} is a model setting: the folds' models take MODEL's; --set takes "
                                       "training settings here (as edgeseq train --set, and epochs, lr, seed)"))
        if name not in allowed:
            close = difflib.get_close_matches(name, allowed, n=1)
            raise UsageError(printable(f"--set {name}: no such training setting; "
                                       + (f"did you mean {close[0]}? " if close else "")
                                       + f"training settings: {', '.join(allowed)}, augment.NAME"))
    early = sorted(set(rest) & set(EARLY_SETTINGS))
    if "epochs" in rest and early:
        raise UsageError(f"--set {', '.join(early)} shape the default schedule, which --set epochs replaces by a "
                         "fixed one; drop epochs or those settings")
    tc = check_train_config(replace(tc, augment=augment, **rest))
    try:
        resolve_triples(for_data(tc.augment, features)[0], features)   # a channel the data lacks: refused before
                                                                       # anything trains (auto resolved first)
    except DataError as e:
        raise UsageError(str(e)) from None
    return tc, given


def _cross(model, meta, ds, background, rate_hz, budget, folds, orders, quiet, data, max_delay=None,
           settings=()) -> dict:
    """`calibrate`'s search on out-of-fold probabilities (`edgeseq.train.crossfit`): `folds`
    models of MODEL's architecture and settings, each trained without one part of the training
    split, run on that part's never-reset streams. Everything that can refuse does so before
    the first model trains."""
    from edgeseq.runtime.calibrate import search
    from edgeseq.runtime.session import StreamSession
    StreamSession(model, decision=False)             # a model that cannot stream is refused as calibrate refuses it
    try:
        from edgeseq.train.crossfit import fold_of, out_of_fold
    except ImportError as e:
        raise UsageError(f"--split cross trains models, which needs torch ({printable(str(e))}); install it as "
                         "README's set-up does, or use --split train") from None
    tc, given = _fold_training(meta.arch, settings, ds.features)
    fold_of(ds.train, folds, 0, ds.labels)          # parts that cannot each teach every class: refused now
    shown = ", ".join(f"{k}={v}" for k, v in meta.config.items() if k not in ("n_features", "n_classes", "levels"))
    how = ("default training settings" if not given else
           "default training settings but " + printable(", ".join(f"{k}={v}" for k, v in given.items())))
    say = None if quiet else (lambda line: click.echo(line, err=True))
    if say:
        say(f"cross-fitting: training {folds} {meta.arch} models ({how}, this model's "
            f"{shown or 'settings'}; float, in torch, whatever "
            "MODEL's weights)")
        if data:
            say("note: with --data the parts' models train on those recordings; if MODEL never saw them, --split "
                "train scores MODEL itself on them, which is the better measure")
    oof = out_of_fold(meta.arch, ds, folds, orders, 0, train_config=tc, config=meta.config, say=say)
    for k, ok in enumerate(oof["converged"]):
        if not ok and not quiet:
            click.echo(f"note: the model without part {k + 1} of {folds} did not converge (training accuracy "
                       f"{oof['train_accuracy'][k]:.3f}): its answers make these settings cautious; train the parts "
                       "as MODEL was trained (--set), or use --split train", err=True)
    r = search(oof["blocks"], list(ds.labels), ds.train, list(background), rate_hz, budget, orders, folds,
               max_delay=max_delay)
    if given:                                   # in the model file's calibration record and the JSON
        r["chosen"].calibration["fold_settings"] = r["fold_settings"] = given
    r["folds_converged"] = oof["converged"]
    return r


@click.command()
@click.argument("model", type=click.Path())
@click.option("--data", help="'basicmotions' or a .npz / .csv path (default: the data the model was trained on, as "
              "its file records). Only its training split is read, never its test split.")
@click.option("--background", "background", multiple=True, metavar="LABEL",
              help="A label that is not an event (rest, idle, nothing happening); repeat for several. Default: none, "
                   "every label is an event class.")
@click.option("--rate-hz", type=click.FloatRange(min=0, min_open=True),
              help="The data's readings per second (default: known for the embedded data, e.g. basicmotions 10 Hz).")
@click.option("--max-false-alarms-per-hour", "budget", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="The false-alarm budget the settings must keep on the validation streams.")
@click.option("--max-delay", type=float, default=None, metavar="READINGS",
              help="Also keep the median detection delay within this many readings, a number >= 0 (at 10 Hz, 15 is "
                   "1.5 s; a missed event counts as never found): the best F1 among the settings within both; where "
                   "the budget keeps none this quick, the quickest it keeps, and where it keeps none at all, the "
                   "fewest false alarms (each said in a note). Classifiers only. Default: no bound.")
@click.option("--split", type=click.Choice(["train", "validation", "cross"]), default="train", show_default=True,
              help="train: every training sequence; validation: the part training holds out to decide when to stop "
                   "(whole groups, or the last sequences of each class; the model's last epochs train on it too, "
                   "so neither is unseen: --data gives recordings the model never saw); cross: every training "
                   "sequence, each predicted by a model trained without it (--folds models of MODEL's architecture "
                   "and model settings, trained with the architecture's default training settings and --set's on "
                   "top; needs torch).")
@click.option("--folds", type=int, default=None, help="With --split cross: parts of the training split, each held "
              "out once (2 to 20, default 5; whole groups where the data names them).")
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="With --split cross: a training setting of the folds' models, on the architecture's defaults, "
                   "named as `edgeseq train --set` names them, and epochs, lr and seed (its options): repeat how MODEL "
                   "was trained, e.g. --set grace=8 (a model file does not record it). Their model settings are "
                   "MODEL's.")
@click.option("--orders", type=click.IntRange(1, 200), default=20, show_default=True,
              help="Never-reset streams: seeded orders of the split's sequences (a classifier's; an anomaly model "
                   "joins each group's recordings in file order).")
@click.option("--out", type=click.Path(), help="Model file to write (default: <MODEL stem>-events.onnx beside it; MODEL "
              "itself is replaced atomically where named, though state files saved for it then no longer match).")
@click.option("--plot", type=click.Path(), help="Trade-off plot, a .png file (default: <out>.calibration.png).")
@click.option("--dry-run", is_flag=True, help="Print the trade-off and the choice; write nothing.")
@_json_option
@_backend_option
@_errors
def calibrate(model, data, background, rate_hz, budget, max_delay, split, folds, settings, orders, out, plot, dry_run,
              as_json, backend):
    """Choose the decision layer's settings (smoothing, threshold, minimum duration, refractory
    and release time) for a false-alarm budget, on never-reset streams of a validation split,
    and write them into a copy of the model file (<MODEL stem>-events.onnx, or --out), where
    StreamSession, `stream`, the Pi demo and the gateway read them.

    Every combination of a grid (EMA weight, threshold, minimum duration, refractory, release)
    runs on the model's probabilities over the streams; the one with the best event F1 within
    the budget is kept (ties: the shorter median detection delay); with --max-delay, within the
    budget and that delay. A false alarm is an alert
    that announces no new event: a detection during another class or the background, or a
    second alert for one event. Prints the trade-off (false alarms per hour, missed events,
    median and p90 detection delay) and plots it. The test split is never read: score the
    calibrated model with `edgeseq eval`. By default it searches on every training sequence:
    the validation part is seen by the model's last epochs too, and holds fewer changes of
    activity; `--split cross` trains --folds models so that every training sequence is
    predicted by one that did not see it (docs/decisions.md compares the three).

    \b
      edgeseq calibrate models/gru.onnx --background Standing      # writes models/gru-events.onnx
      edgeseq calibrate models/mine.onnx --data held-out.csv --rate-hz 50 --background idle \\
          --max-false-alarms-per-hour 1 --out models/mine-events.onnx
    """
    import math

    from edgeseq.data import RATE_HZ, holdout
    from edgeseq.runtime.calibrate import calibrate as run
    from edgeseq.runtime.calibrate import check_max_delay
    from edgeseq.runtime.model import model_data

    for name, v in (("--rate-hz", rate_hz), ("--max-false-alarms-per-hour", budget)):
        if v is not None and not math.isfinite(v):
            raise UsageError(f"{name} must be a finite number, got {v}")
    if rate_hz is not None and rate_hz < 1e-3:
        raise UsageError(f"--rate-hz {rate_hz:g} is below one reading in 1,000 s; give the readings per second")
    max_delay = check_max_delay(max_delay)
    dup = sorted({b for b in background if background.count(b) > 1})
    if dup:
        raise UsageError(f"--background '{printable(dup[0])}' is given twice; name each background label once")
    target = Path(out) if out else Path(model).with_name(Path(model).stem + "-events.onnx")
    plot_path = Path(plot) if plot else target.with_name(target.name + ".calibration.png")
    _check_outputs(Path(model), target, plot_path, data, dry_run)
    from edgeseq.runtime.model import open_model
    meta = open_model(model)[1]
    if folds is not None and split != "cross":
        raise UsageError("--folds goes with --split cross; add --split cross or drop --folds")
    if settings and split != "cross":
        raise UsageError("--set sets how the folds' models train, which only --split cross does; add --split cross "
                         "or drop --set")
    if split == "cross":
        from edgeseq.runtime.calibrate import CROSS_FOLDS, check_folds
        folds = check_folds(CROSS_FOLDS if folds is None else folds)
        if backend is not None:
            raise UsageError("--backend chooses how MODEL runs; --split cross runs the parts' models in torch and "
                             "never MODEL: drop --backend")
    if meta.kind == "regress":
        raise UsageError(f"'{printable(model)}' is a regression model: it answers values, with no events or "
                         "threshold to calibrate; score it with `edgeseq eval`")
    ds = model_data(model, data)
    if meta.kind == "anomaly":
        if background:
            raise UsageError("--background names classes of a classifier; an anomaly model has none (drop it)")
        if split == "cross":
            raise UsageError("--split cross is for classifiers; an anomaly model calibrates on normal recordings "
                             "(--split train or validation)")
        if max_delay is not None:
            raise UsageError("--max-delay bounds a classifier's detection delay; an anomaly model's threshold is set "
                             "by its false-alarm budget alone (drop --max-delay)")
        rate = rate_hz or RATE_HZ.get(ds.source or "") or meta.task.get("rate_hz")
        if rate is None:
            raise UsageError(f"the sampling rate of '{printable(ds.name)}' is not known; give --rate-hz (readings per "
                             "second)")
        from edgeseq.runtime.anomaly import binary
        return _calibrate_anomaly(model, binary(ds)[0], rate, budget, split, target, plot_path, dry_run, as_json,
                                  backend)
    if rate_hz is None:
        rate_hz = RATE_HZ.get(ds.source or "")
        if rate_hz is None:
            raise UsageError(f"the sampling rate of '{printable(ds.name)}' is not known; give --rate-hz (readings per "
                             "second)")
    for b in background:
        if b not in ds.labels:
            raise UsageError(f"--background '{printable(b)}' is not one of the model's labels "
                             f"({printable(', '.join(map(str, ds.labels)))})")
    if split == "validation":
        _, part = holdout(ds.train, 0.2, seed=0, where=f"data '{ds.name}'", what="a validation split",
                          remedy="use --split train, or more training data")
    else:
        part = ds.train
    if split == "cross":
        r = _cross(model, meta, ds, background, rate_hz, budget, folds, orders, as_json, data, max_delay, settings)
    else:
        r = run(model, part, background=list(background), rate_hz=rate_hz, max_false_alarms_per_hour=budget,
                orders=orders, backend=backend, max_delay=max_delay)
    spec = r["chosen"]
    if not r["table"][0]["events"]:
        raise UsageError(f"the {split} sequences of '{printable(ds.name)}' hold no event (every reading is of a "
                         "background class); calibrate on recordings with events (--data)")
    written = plotted = None
    if not dry_run:
        from export.decision import write_decision
        plotted = _plot(r, plot_path, budget)           # first: a plot that fails leaves the model as it was
        written = str(write_decision(model, spec, target))
    if as_json:
        click.echo(json.dumps({"chosen": spec.to_json(), "met": r["met"], "front": r["front"], "table": r["table"],
                               "orders": r["orders"], "sequences": r["sequences"], "split": split, "folds": r.get("folds"),
                               "fold_settings": r.get("fold_settings"), "folds_converged": r.get("folds_converged"),
                               "max_delay": max_delay,
                               "delay_met": r["delay_met"],
                               "fastest_within_budget": r["fastest_within_budget"],
                               "fewest_within_delay": r["fewest_within_delay"],
                               "readings_per_stream": r["readings_per_stream"], "rate_hz": rate_hz,
                               "written": written, "plot": plotted}, indent=2))
        return
    hours = r["readings"] / rate_hz / 3600
    what = f"{r['orders']} never-reset streams of {r['sequences']} {split} sequences of {printable(ds.name)}"
    if split == "cross":
        fold_settings = ", ".join(f"{k}={v}" for k, v in (r.get("fold_settings") or {}).items())
        what = (f"{r['orders']} never-reset streams of each of {r['folds']} parts of the {r['sequences']} training "
                f"sequences of {printable(ds.name)}, each part run through a model trained without it"
                + (f" (trained with {printable(fold_settings)})" if fold_settings else ""))
    click.echo(f"calibrating on {what} ({hours:.2f} h at {rate_hz:g} Hz), "
               f"{r['settings_tried']} settings; background: {printable(', '.join(background)) or 'none'}")
    click.echo(f"{'':2s}{'FA/h':>7s} {'missed':>7s} {'F1':>6s} {'delay med':>14s} {'p90':>6s}   settings")
    cal = spec.calibration["validation"]
    def is_chosen(x):
        return all(x[k] == cal[k] for k in ("alpha", "threshold", "min_duration", "refractory", "release"))
    rows = r["front"][:ROWS_SHOWN]
    if not any(is_chosen(x) for x in rows):             # a bound can choose past the rows shown, or off the front
        rows = rows + [next(x for x in r["table"] if is_chosen(x))]
    for x in rows:
        mark = "* " if is_chosen(x) else "  "
        click.echo(f"{mark}{x['false_alarms_per_hour']:7.1f} {x['missed']:4d}/{x['events']:<3d}{x['f1'] or 0:6.3f} "
                   f"{_delay(x['delay_median'], rate_hz):>14s} {x['delay_p90'] or 0:6.0f}   alpha {x['alpha']:g}, "
                   f"threshold {x['threshold']:g}, min {x['min_duration']}, refractory {x['refractory']}, "
                   f"release {x['release']}")
    verdict = "within" if r["met"] else "NOT within (no setting kept it; chose the fewest false alarms)"
    click.echo(f"chosen: {spec.describe()}: {cal['false_alarms_per_hour']:.1f} false alarms per hour, "
               f"{verdict} the budget of {budget:g}/h; F1 {cal['f1'] or 0:.3f}, {cal['missed']} of {cal['events']} "
               f"events missed, median delay {_delay(cal['delay_median'], rate_hz, ' readings')}")
    if max_delay is not None:
        bound = _delay(max_delay, rate_hz, " readings")
        fewest = r["fewest_within_delay"]
        if not r["met"]:
            click.echo(f"note: --max-delay {bound} was not applied: no setting kept the false-alarm budget, so the one "
                       "with the fewest false alarms was chosen", err=True)
        elif r["delay_met"]:
            click.echo(f"the median delay (a missed event counted as never found) is within --max-delay {bound}")
        elif r["fastest_within_budget"] is None:
            click.echo(f"note: every setting within the budget misses half the events or more, so none has a median "
                       f"delay to keep within --max-delay {bound}: chose the best F1 within the budget", err=True)
        elif fewest is None:
            click.echo(f"note: no setting within the budget keeps the median delay within --max-delay {bound}, and no "
                       "setting tried is that quick at any false-alarm rate: chose the quickest within the budget; "
                       "raise --max-delay, or train the model to follow changes sooner (docs/decisions.md)", err=True)
        else:
            click.echo(f"note: no setting within the budget keeps the median delay within --max-delay {bound}: chose "
                       f"the quickest within the budget; the fewest false alarms of a setting within it: {fewest:.1f} "
                       "per hour; raise the budget or --max-delay, or train the model to follow changes sooner "
                       "(docs/decisions.md)", err=True)
    own = float(part.lengths.sum()) / rate_hz / 3600           # the split's own readings, however many orders
    bound = 3.0 / own                                           # 95% upper bound on a rate when none was seen
    seen = ("the parts' models did not train on, predicted by those models rather than this file" if split == "cross"
            else "the model trained on; --split cross chooses on sequences each predicted by a model that did not "
                 "train on them")
    click.echo(f"these are figures on the {'training' if split == 'cross' else split} sequences ({r['orders']} order{'s' if r['orders'] != 1 else ''} "
               f"of {own * 60:.1f} minutes of recordings {seen}); check the test split: "
               f"{'' if written else 'once written (without --dry-run), '}edgeseq eval {printable(str(written or target))}")
    if bound > budget:
        click.echo(f"note: {own * 60:.1f} minutes of recordings cannot show a rate as low as {budget:g} false alarms "
                   f"per hour (with none seen, the 95% upper bound is {bound:.0f} per hour); calibrate on more "
                   f"recordings ({'--data, or --split train' if split == 'validation' else '--data'}) for a budget you can "
                   "trust", err=True)
    if written:
        click.echo(f"wrote the decision settings into {printable(written)}"
                   + (f"; trade-off plot {printable(plotted)}" if plotted else
                      "; no plot (pip install matplotlib for one)"))
