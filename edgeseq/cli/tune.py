"""`edgeseq tune`: search architectures, sizes and schedules for a microcontroller target."""

from __future__ import annotations

import click

from edgeseq.cli._common import Finite, _echo_json, _errors, _writing
from edgeseq.errors import EdgeseqError, printable, safe_text

_limit = Finite(min=0, min_open=True)


@click.command()
@click.option("--data", help="'basicmotions' (default for a new study) or a .npz / .csv path.")
@click.option("--target", help="Target profile for `firmware check` (default for a new study: nrf52840).")
@click.option("--targets-file", type=click.Path(), help="JSON file with more target profiles, as `firmware check` "
              "takes (the study keeps the --target's whole profile: workers and resumed runs need not read it).")
@click.option("--trials", type=click.IntRange(min=0), default=20, show_default=True,
              help="Trials to add (0: write the front of an existing --study).")
@click.option("--jobs", type=click.IntRange(min=1, max=256), default=1, show_default=True,
              help="Worker processes on this machine, over one storage.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), help="Sampler and training seed (default 0); each trial's "
              "sampler seed comes from it and the trial's number.")
@click.option("--sampler", type=click.Choice(["nsga2", "tpe"]), help="Optuna sampler (default nsga2).")
@click.option("--max-latency-ms", type=_limit, help="Hard limit: milliseconds per reading on --target.")
@click.option("--max-ram-kb", type=_limit, help="Hard limit: RAM in KB (1,024 B) on --target.")
@click.option("--max-flash-kb", type=_limit, help="Hard limit: flash in KB (1,024 B) on --target.")
@click.option("--storage", help="Optuna storage URL (sqlite:///..., postgresql://...); default: OUT/study.db.")
@click.option("--study", help="Study name: resume or join it (default for a new study: tune).")
@click.option("--out", required=True, type=click.Path(), help="Folder for the study, the front and the chosen model.")
@click.option("--quick", is_flag=True, help="A tiny search space (rnn and gru of 4-8 units, 1-2 epochs): a smoke test.")
@click.option("--quiet", is_flag=True, help="No progress lines.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (what pareto.json holds: the trials, "
              "the Pareto front and the chosen model's test scores).")
@_errors
def tune(data, target, targets_file, trials, jobs, seed, sampler, max_latency_ms, max_ram_kb, max_flash_kb, storage,
         study, out, quick, quiet, as_json):
    """Multi-objective search (Optuna) for the model a microcontroller should run.

    Each trial trains on the training split less a validation split (whole groups where the
    data names them), exports static int8 and measures never-reset and per-sequence accuracy on
    validation and, on --target, `firmware check`'s time per reading, flash and RAM. A trial
    over a --max-* limit is infeasible and never chosen. The chosen model (the feasible Pareto
    trial with the best never-reset accuracy, ties by latency) is retrained on the whole
    training split and scored on the test split. OUT holds study.db, pareto.json/.csv/.png/.html
    and model/ (checkpoint, float and int8 exports, scores.json). Ctrl-C keeps the finished trials.
    One worker on a new study draws the same trials for a --seed; workers on one study (--jobs, or
    several runs on one --storage and --study) each draw their own, in an order that is not
    reproducible.

    \b
      edgeseq tune --out runs/tune --trials 20 --jobs 2
      edgeseq tune --out runs/tune --target rp2040 --max-latency-ms 1 --max-flash-kb 64
      edgeseq tune --out runs/mine --target mypart --targets-file parts.json
      edgeseq tune --out runs/tune --study tune --trials 10        # resume: 10 more trials
      edgeseq tune --out runs/b --storage postgresql://me@db/tune --study gestures --trials 10
    """
    from edgeseq.tune import QUICK_SPACE, TuneInterrupted
    from edgeseq.tune import tune as tune_fn
    from edgeseq.tune.pages import table

    try:
        with _writing(out):
            r = tune_fn(out, data=data, target=target, trials=trials, jobs=jobs, seed=seed, sampler=sampler,
                        max_latency_ms=max_latency_ms, max_ram_kb=max_ram_kb, max_flash_kb=max_flash_kb,
                        storage=storage, study=study, space=QUICK_SPACE if quick else None, progress=not quiet,
                        targets_file=targets_file)
    except TuneInterrupted as e:
        click.echo(safe_text(e), err=True)
        raise click.exceptions.Exit(130) from None
    c = r["chosen"]
    if as_json:
        _echo_json(r)
    else:
        n, t = r["trials"], r["target"]
        click.echo(f"study '{printable(r['study'])}': {n['finished']} finished trials ({n['feasible']} feasible, {n['failed']} "
                   f"failed; {n['this_run']} this run in {n['this_run_seconds']:.0f} s) on {printable(t['name'])}; "
                   + ("Pareto front on the validation split:" if r["front"] else "no feasible trial, no Pareto front"))
        if r["front"]:
            click.echo(table(r))
        if c is not None:
            te, fw = c["test"], c["firmware"]
            click.echo(f"chosen: trial {c['trial']}, retrained on the whole training split; test ({te['sequences']} "
                       f"sequences), int8: per sequence {te['int8']['per_sequence_accuracy']:.3f}, never reset "
                       f"{te['int8']['never_reset_accuracy']:.3f} (float {te['float']['per_sequence_accuracy']:.3f} / "
                       f"{te['float']['never_reset_accuracy']:.3f}); {fw['latency_us']:,.0f} us/reading, flash "
                       f"{fw['flash_kb']:.1f} KB, RAM {fw['ram_kb']:.1f} KB on {printable(t['name'])}")
            b = te.get("baseline")                 # absent in a model chosen before tune scored it
            if b is not None:
                from edgeseq.train.baseline import below, describe, scored_on
                click.echo(f"baseline: {describe(b)}")
                low = [k for k in ("int8", "float") if below(te[k]["per_sequence_accuracy"], b)]
                if low:
                    scores = " / ".join(f"{te[k]['per_sequence_accuracy']:.3f}" for k in low)
                    click.echo(f"warning: the chosen model ({' and '.join(low)}) is below the nearest-neighbour "
                               f"baseline per sequence ({scores} against {b['accuracy']:.3f} {scored_on(b)}): give "
                               "the search more trials or a larger --target "
                               "(docs/training.md#the-nearest-neighbour-baseline)", err=True)
            click.echo(f"wrote {printable(out)}/pareto.json, pareto.csv, pareto.png, pareto.html and {printable(out)}/model/")
        else:
            click.echo(f"wrote {printable(out)}/pareto.json, pareto.csv, pareto.png, pareto.html")
    if c is None:
        raise EdgeseqError(r["notice"])
