"""`edgeseq train`: train a streaming model and save its run directory."""

from __future__ import annotations

from pathlib import Path

import click

from edgeseq.cli._common import Finite, _echo_json, _errors, _seed_option, _writing
from edgeseq.errors import UsageError


@click.command()
@click.option("--arch", default="gru", show_default=True, help="rnn, gru, lstm, transformer, ssm, bigru or bilstm.")
@click.option("--data", default="basicmotions", show_default=True, help="'basicmotions' or a .npz / .csv path.")
@click.option("--out", required=True, type=click.Path(), help="Run directory for checkpoint.pt and metrics.json.")
@click.option("--epochs", type=click.IntRange(min=1), help="Override the architecture's default schedule.")
@click.option("--lr", type=Finite(min=0, min_open=True), help="Peak learning rate.")
@_seed_option
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="Model setting, e.g. --set hidden=32 --set layers=2; augmentation: --set augment=none, "
                   "--set augment.rotate=30 (see docs/augment.md).")
@click.option("--json", "as_json", is_flag=True, help="Print metrics as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@_errors
def train(arch, data, out, epochs, lr, seed, settings, as_json, quiet):
    """Train a model and save a checkpoint that carries its config, normalisation and labels.

    \b
    User data: .npz with X [N,T,F], y [N], optional lengths [N]; or .csv with one reading
    per row and columns sequence,label,<features...> (optional split=train|test column).
      edgeseq train --arch lstm --data basicmotions --out runs/lstm
      edgeseq train --arch gru --data mydata.npz --out runs/mine --set hidden=32
      edgeseq train --arch ssm --out runs/ssm --set selective=true
      edgeseq train --arch gru --out runs/plain --set augment=none
      edgeseq train --arch gru --data wrist.csv --out runs/rot --set augment.rotate=45 --set augment.triples=ax,ay,az
    """
    from dataclasses import replace

    from edgeseq.data import load_dataset
    from edgeseq.data.augment import describe, parse_settings
    from edgeseq.models import check_arch
    from edgeseq.train import DEFAULTS, TrainConfig, parse_overrides, save_checkpoint
    from edgeseq.train import train as train_fn

    check_arch(arch)
    tc = DEFAULTS.get(arch, TrainConfig())
    overrides, augment = parse_settings(parse_overrides(settings), base=tc.augment)
    dataset = load_dataset(data)
    tc = replace(tc, seed=seed, augment=augment, **({"epochs": epochs} if epochs else {}), **({"lr": lr} if lr else {}))
    if Path(out).exists() and not Path(out).is_dir():
        raise UsageError(f"--out '{out}' is a file; give a directory for checkpoint.pt and metrics.json")
    ckpt = train_fn(arch, dataset, tc, overrides, progress=not quiet)      # progress goes to stderr
    with _writing(out):
        path = save_checkpoint(ckpt, out)
    m = ckpt["metrics"]
    if as_json:
        _echo_json({"checkpoint": str(path), "arch": arch, **m})
    else:
        click.echo(f"{arch} on {dataset.name}: test accuracy {m['test_accuracy']:.3f} "
                   f"(train {m['train_accuracy']:.3f}) in {m['train_seconds']:.1f} s -> {path}")
        click.echo(f"augment: {describe(m['augment'])}")
        if m.get("groups"):
            click.echo(f"groups: {len(m['groups']['train'] or [])} in training, {len(m['groups']['test'] or [])} "
                       f"in the test split ({m['groups']['test_split']})")
            shared = m["groups"].get("shared") or []
            if shared:
                click.echo(f"note: {len(shared)} group(s) are in both splits ({', '.join(repr(g) for g in shared[:5])}"
                           f"{', ...' if len(shared) > 5 else ''}): the test accuracy is not on unseen groups; give "
                           "groups_test names the training split does not hold to measure that", err=True)
