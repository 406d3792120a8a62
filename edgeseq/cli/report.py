"""`edgeseq report`: the memory and latency report across architectures."""

from __future__ import annotations

import click

from edgeseq.cli._common import _errors, _writing
from edgeseq.errors import printable, safe_text


@click.command()
@click.option("--out", required=True, type=click.Path(), help="Directory for index.html, report.md, report.json, PNGs.")
@click.option("--quick", is_flag=True,
              help="Fewer readings and repeats; models it trains get a few fixed epochs, not trained to convergence "
                   "(every accuracy shown says so). Its time per phase, as measured: docs/edge-report.md.")
@click.option("--runs", type=click.Path(), help="Reuse trained runs from this directory (runs/<arch>/checkpoint.pt).")
@click.option("--data", help="'basicmotions' or a .npz / .csv path to train on and stream (default: the data the "
              "--runs were trained on, else basicmotions).")
@click.option("--quiet", is_flag=True, help="No progress on stderr (bars on a terminal, else a plain line every few "
              "seconds).")
@_errors
def report(out, quick, runs, data, quiet):
    """Memory/latency report: fixed recurrent state against a growing KV cache, float and int8.

    Trains (or reuses with --runs) RNN, GRU, LSTM, Transformer and SSM on one data set (--data;
    by default the data the reused runs were trained on, else the embedded BasicMotions),
    exports float and int8, and measures memory per stream against history, latency per reading
    against the step index, throughput with many streams and process memory over a long stream,
    streaming that data's test readings. The report is built beside --out and moved into it only
    once complete: a failed report leaves --out as it was.

    Every accuracy is shown with the schedule that trained the model ("0.750 after 6 epochs
    (fixed, quick: not trained to convergence)"), and the summary warns of a model at or below
    chance or one that did not converge. Progress goes to stderr: bars on a terminal, plain
    lines with the phase and the time taken elsewhere (CI, a log file).

    \b
      edgeseq report --out reports/edge             # trains each model fully: longest
      edgeseq report --quick --out /tmp/r           # ~1-2 min on 2 cores; models not trained to convergence
      edgeseq report --runs runs --out reports/edge # reuse `make demo`'s trained runs
      edgeseq report --quick --data mine.csv --out reports/mine
    """
    from edgeseq.report.edge import _summary, build_report

    with _writing(out):
        r = build_report(out, quick=quick, runs=runs, progress=not quiet, data=data)
    for line in _summary(r):                       # the data's name may stand in a line
        click.echo(safe_text(line))
    click.echo(f"wrote {printable(out)}/index.html, report.md, report.json and {len(r['files']) - 3} plots "
               f"in {r['meta']['seconds']:.0f} s")
