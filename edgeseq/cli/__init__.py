"""The `edgeseq` command: thin commands over library calls.

Library errors become one-line `Error:` messages: exit 1 when something failed at run time,
exit 2 when the request itself was wrong. torch is imported only inside the commands that
train or export, so `stream` and `eval` work with the runtime-only install.

One module per command or group (train, export, evaluate: eval and compare, calibrate, stream, bench,
report, firmware, translate, tune, serve, devices); `_common` holds the error boundary and what they share.
"""

from __future__ import annotations

import click

from edgeseq import __version__
from edgeseq.cli import bench, calibrate, devices, evaluate, export, firmware, report, serve, stream, train, translate, tune
from edgeseq.cli._common import _PROGRAM, MAX_HISTORY, Finite, History, _Cli, _writing

__all__ = ["MAX_HISTORY", "Finite", "History", "_writing", "cli", "main"]


@click.group(cls=_Cli)
@click.version_option(__version__, prog_name="edgeseq")
def cli():
    """edgeseq: train, export and stream tiny sequence models on edge devices.

    \b
      edgeseq train --arch gru --data basicmotions --out runs/gru
      edgeseq export runs/gru --out models/gru.onnx
      edgeseq export runs/gru --int8 --out models/gru-int8.onnx
      edgeseq eval models/gru.onnx --data basicmotions --json
      edgeseq compare models/gru.onnx models/gru-int8.onnx
      edgeseq calibrate models/gru.onnx --background Standing
      edgeseq stream models/gru.onnx --input readings.csv
      edgeseq bench --json
      edgeseq report --out reports/edge
      edgeseq firmware check models/gru-int8.onnx --target nrf52840
      edgeseq translate run models/mt "Save the notebook" --beam 4
      edgeseq devices add pump-7
      edgeseq serve models/gru-int8.onnx --partitions 8
      edgeseq tune --out runs/tune --trials 20 --jobs 2 --max-flash-kb 64
    """


for _command in (train.train, export.export, evaluate.compare, evaluate.eval_cmd, calibrate.calibrate, stream.stream,
                 serve.serve, devices.devices, bench.bench, report.report, firmware.firmware, translate.translate,
                 tune.tune):
    cli.add_command(_command)


def main():
    _PROGRAM["main"] = True
    cli(prog_name="edgeseq")
