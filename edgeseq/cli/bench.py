"""`edgeseq bench`: per-reading latency of the runtimes and backends, and training time."""

from __future__ import annotations

import os
import sys

import click

from edgeseq.cli._common import _PROGRAM, _echo_json, _errors, _json_option
from edgeseq.errors import UsageError


@click.command()
@click.option("--repeats", type=click.IntRange(min=10), default=2000, show_default=True)
@click.option("--train", "with_train", is_flag=True,
              help="Also time each streaming architecture's default training, and one epoch at sequence "
                   "lengths 100 and 1,000 (needs torch).")
@click.option("--backend", type=click.Choice(["both", "onnxruntime", "native"]), default="both", show_default=True,
              help="Which step backends the backend table times.")
@_json_option
@_errors
def bench(repeats, with_train, backend, as_json):
    """Per-reading latency: GRU in torch eager, ONNX Runtime and edgeseq against the ORT floor;
    the Transformer with its KV cache against recomputing the history; the step backends
    (onnxruntime, native) on float and int8 GRUs at 1 to 1024 streams against this core's
    single-thread GEMM bound; with --train, training
    time per architecture against its target.

    \b
      edgeseq bench
      edgeseq bench --train
      edgeseq bench --json > bench.json
    """
    one = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    if _PROGRAM["main"] and any(os.environ.get(k) != "1" for k in one) and not os.environ.get("EDGESEQ_BENCH_CHILD"):
        # numpy's BLAS picks its threads when it loads: run again with one, as the other figures run
        os.execve(sys.executable, [sys.executable, "-m", "edgeseq", *sys.argv[1:]],
                  {**os.environ, **{k: "1" for k in one}, "EDGESEQ_BENCH_CHILD": "1"})
    from edgeseq.report.bench import format_bench, run_bench, run_train_bench, run_train_throughput

    if backend == "native":
        from edgeseq.runtime import native
        if not native.available():
            raise UsageError(f"--backend native: {native.why_unavailable()}")
    r = run_bench(repeats=repeats, backends=("onnxruntime", "native") if backend == "both" else (backend,))
    if with_train:
        r["train"] = run_train_bench()
        r["throughput"] = run_train_throughput(threads=1)
    if as_json:
        _echo_json(r)
    else:
        click.echo(format_bench(r))
