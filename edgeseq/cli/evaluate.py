"""`edgeseq compare` and `edgeseq eval`: how exported models score, streamed as deployed."""

from __future__ import annotations

import json

import click

from edgeseq.cli._common import _DATA_HELP, _backend_option, _echo_json, _errors, _json_option, _provider_option
from edgeseq.errors import UsageError, printable, safe_text


@click.command()
@click.argument("models", nargs=-1, required=True, type=click.Path())
@click.option("--data", help="'basicmotions' or a .npz / .csv path (default: the data the first model was trained "
              "on, as its file records; basicmotions for files exported before it did)")
@click.option("--readings", type=click.IntRange(min=1), default=500, show_default=True,
              help="Readings per stream for the output difference.")
@click.option("--rounds", type=click.IntRange(min=1), default=20, show_default=True,
              help="Latency: interleaved rounds of 100 readings per model.")
@_json_option
@_backend_option
@_errors
def compare(models, data, readings, rounds, backend, as_json):
    """Compare models side by side: size, test accuracy, output difference over long streams
    from each model's twin (the first earlier model in the list exported from the same
    training run, with the same architecture, settings, labels, features and normalisation: a
    float model and its int8 export; n/a where there is none, and a note names models of the
    same settings from another run), and per-reading latency, on the first model's training
    data unless --data says otherwise.

    \b
      edgeseq compare models/gru.onnx models/gru-int8.onnx
      edgeseq compare models/lstm.onnx models/lstm-int8.onnx models/lstm-dyn.onnx --json
    """
    from edgeseq.report.compare import compare_models, format_compare

    for m in models:
        if _kind(m) != "classify":
            raise UsageError(f"'{printable(str(m))}' is {'an anomaly' if _kind(m) == 'anomaly' else 'a regression'} model: compare scores classifiers; score it with "
                             "`edgeseq eval` (and its int8 twin with `edgeseq firmware simulate --float`)")

    r = compare_models(list(models), data=data, readings=readings, rounds=rounds, backend=backend)
    # file and data names come from the command line and the model files: format_compare escaped them
    click.echo(json.dumps(r, indent=2) if as_json else "\n".join(map(safe_text, format_compare(r).split("\n"))))


GROUPS_SHOWN = 12                  # groups named on the text line, worst first (--json has them all)


def _n(k: int, what: str) -> str:
    return f"{k} {what}{'' if k == 1 else 's'}"


@click.command(name="eval")
@click.argument("model", type=click.Path())
@click.option("--data", help=_DATA_HELP)
@click.option("--split", type=click.Choice(["test", "train"]), default="test", show_default=True)
@_provider_option
@_json_option
@_backend_option
@_errors
def eval_cmd(model, data, split, provider, backend, as_json):
    """Accuracy of an exported model, streamed one reading at a time as deployed, on two
    protocols: per sequence (each test sequence its own stream, from zero state) and
    continuous (the test sequences joined end to end in 3 seeded orders, never reset, as a
    device sees them; scored per reading after a grace period after each change of label, a
    quarter of the median sequence length within 1..20 readings, at each sequence's last
    reading, and by the readings taken to follow a change). A model with decision settings
    (`edgeseq calibrate`) also gets event figures on 20 never-reset streams: event F1,
    false alarms per hour, detection delay and Ward et al.'s categories. Data that names groups (subjects,
    devices, sessions) also gets the accuracy of each group and the worst group. A name from
    the data or the model (a group, a label, the data's name) holding a control or format
    character, such as a terminal escape sequence, is printed as its Python escape (\\x1b);
    --json holds it exactly, escaped as JSON.

    An anomaly model gets its detections and false alarms on both protocols (docs/anomaly.md); a
    regression model each target's MAE and RMSE on both protocols beside the persistence
    baseline (docs/regression.md).

    The data defaults to the model's own training data (recorded in the file at export).

    \b
      edgeseq eval models/gru.onnx --json
      edgeseq eval models/mine.onnx --data new-recordings.csv
    """
    from edgeseq.runtime import evaluate
    from edgeseq.runtime.model import model_data

    ds = model_data(model, data)
    if _kind(model) == "regress":
        from edgeseq.runtime.regress import evaluate as evaluate_regress
        from edgeseq.runtime.regress import line
        r = evaluate_regress(model, getattr(ds, split), target_names=ds.target_names, backend=backend,
                             provider=provider)
        r["data"], r["split"] = ds.name, split
        if as_json:
            _echo_json(r)
            return
        click.echo(printable(f"regression ({r['backend']} backend) on {ds.name} {split}, {r['recordings']} recordings; "
                             f"persistence: each target {r['lag']} reading(s) earlier"))
        click.echo(printable(f"  per recording (each from a fresh state): {line(r['per_recording'])}"))
        click.echo(printable(f"  never reset (the recordings joined, one stream): {line(r['never_reset'])}"))
        return
    if _kind(model) == "anomaly":
        from edgeseq.cli.train import anomaly_line
        from edgeseq.runtime.anomaly import binary
        from edgeseq.runtime.anomaly import evaluate as evaluate_anomaly
        ds = binary(ds)[0]
        r = evaluate_anomaly(model, getattr(ds, split), backend=backend, provider=provider)
        r["data"], r["split"] = ds.name, split
        if as_json:
            _echo_json(r)
            return
        s = r["settings"]
        n = r["never_reset"]["streams"]
        click.echo(printable(f"anomaly ({r['backend']} backend) on {ds.name} {split}, {r['recordings']} recordings"))
        click.echo(f"  per recording (each learns its baseline at its start): {anomaly_line(r['per_recording'])}")
        click.echo(f"  never reset ({n} stream{'s' if n > 1 else ''}, a group's recordings joined, the baseline learnt "
                   f"once): {anomaly_line(r['never_reset'])}")
        click.echo(f"  settings: learn {s['learn']} readings, {s['sigmas']:g} standard deviations for "
                   f"{s['min_duration']} readings, EMA alpha {s['alpha']:g}")
        return
    r = evaluate(model, getattr(ds, split), labels=ds.labels, provider=provider, features=ds.features, backend=backend)
    r["data"], r["split"] = ds.name, split
    if r.get("backend_note"):
        click.echo(safe_text(f"note: onnxruntime backend, not native: {r['backend_note']}"), err=True)
    if r.get("events") is None and r["arch"] in ("bigru", "bilstm") and _has_decision(model):
        click.echo(f"note: a {r['arch']} model reads whole windows: its decision settings are not used "
                   "(events need a stream model)", err=True)
    c = r["continuous"]
    if c and not c["scored_readings"]:                    # nothing to score: no figure, rather than 0
        c["reading_accuracy"] = None
    if c and not c["changes"]:
        c["followed"] = None
    if as_json:
        _echo_json(r)
        return
    click.echo(f"{printable(r['arch'])} ({r.get('backend', 'onnxruntime')} backend) on {printable(ds.name)} {split}, "
               "per sequence (reset at "
               f"each start): accuracy {r['accuracy']:.3f} "
               f"({r['n']} sequences)")
    if r["accuracy_at_fraction"]:
        parts = ", ".join(f"{float(k):.0%}: {v:.3f}" for k, v in r["accuracy_at_fraction"].items())
        click.echo(f"  running prediction after {parts} of each sequence")
    if r.get("groups"):
        g, w = r["groups"]["per_group"], r["groups"]["worst"]
        tied = sum(v["accuracy"] == w["accuracy"] for v in g.values()) - 1
        shown = sorted(g.items(), key=lambda kv: (kv[1]["accuracy"], -kv[1]["n"], str(kv[0])))[:GROUPS_SHOWN]
        more = f"; {len(g) - len(shown)} more in --json" if len(g) > len(shown) else ""
        click.echo(f"  per group: worst '{printable(w['group'])}' {w['accuracy']:.3f} ({_n(w['n'], 'sequence')}"
                   + (f"; {tied} more group{'s' if tied > 1 else ''} at {w['accuracy']:.3f}" if tied else "") + "); "
                   + "; ".join(f"'{printable(k)}' {v['accuracy']:.3f} ({v['n']})" for k, v in shown) + more)
    if c:
        follow = "never" if c["median_readings_to_follow"] is None else f"{c['median_readings_to_follow']:.0f}"
        per = (f"{c['reading_accuracy']:.3f} (past {c['grace']} reading{'' if c['grace'] == 1 else 's'} after each change; "
               f"{c['scored_share']:.0%} of readings scored)" if c["scored_readings"]
               else f"n/a (no reading lies {c['grace']} reading{'s' if c['grace'] > 1 else ''} past a change: the "
                    "label changes too often)")
        click.echo(f"continuous (never reset, {c['orders']} orders x {c['readings_per_stream']:,} readings): "
                   f"per reading {per}, "
                   f"at each sequence's last reading {c['last_reading_accuracy']:.3f}; median readings to follow "
                   + (f"a change {follow} ({c['followed']:.0%} of {_n(c['changes'], 'change')} followed)" if c["changes"]
                      else "a change: none (no change of label in these streams: one sequence, or one class)"))
    ev = r.get("events")
    if ev:
        for line in event_lines(ev):
            click.echo(line)


def _kind(model) -> str:
    from edgeseq.runtime.model import open_model
    return open_model(model)[1].kind


def _has_decision(model) -> bool:
    from edgeseq.runtime.model import open_model
    return open_model(model)[1].decision is not None


def event_lines(ev: dict) -> list:
    """The text lines for `edgeseq.runtime.calibrate.event_scores`' figures."""
    rate = ev["decision"].get("rate_hz")
    bg = ", ".join(map(printable, ev["decision"]["background"])) or "none"
    f = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    d = ev["delay_readings"]
    delay = "n/a" if d is None else (f"median {d['median']:.0f}, p90 {d['p90']:.0f} readings"
                                     + (f" ({d['median'] / rate:.1f} s, {d['p90'] / rate:.1f} s)" if rate else ""))
    fa = (f"{ev['false_alarms']} false alarm{'' if ev['false_alarms'] == 1 else 's'}"
          + (f" ({ev['false_alarms_per_hour']:.1f} per hour over {ev['hours']:.2f} h)" if rate else ""))
    lines = [f"events (decision layer, {ev['orders']} never-reset streams, background {bg}): F1 {f(ev['f1'])}, "
             f"precision {f(ev['precision'])}, recall {f(ev['recall'])} ({ev['matched']} of {ev['events']} events, "
             f"{ev['detections']} alerts); {fa}; detection delay {delay}",
             f"  Ward et al. 2011: {ev['deleted']} deleted, {ev['fragmented']} fragmented, {ev['merged']} merged, "
             f"{ev['insertions']} insertions; per class: "
             + "; ".join(f"'{printable(k)}' F1 {f(v['f1'])}" for k, v in ev["per_class"].items())]
    return lines
