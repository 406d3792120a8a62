"""No file a user is handed can run code: checkpoints load with weights_only=True everywhere."""

import pytest
import torch
from click.testing import CliRunner

from edgeseq.cli import cli


class Planted:
    """Unpickling this creates a file: the proof that a loader ran code from the checkpoint."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("args", [["export", "{run}", "--out", "{tmp}/m.onnx"],
                                  ["translate", "export", "{run}", "--out", "{tmp}/mt"],
                                  ["translate", "bench", "{run}"]])
def test_a_planted_checkpoint_runs_no_code(tmp_path, args):
    run = tmp_path / "run"
    run.mkdir()
    marker = tmp_path / "pwned"
    torch.save({"arch": "gru", "state_dict": {}, "tokenizer": "{}", "config": {}, "x": Planted(str(marker))},
               run / "checkpoint.pt")
    res = CliRunner().invoke(cli, [a.format(run=run, tmp=tmp_path) for a in args])
    assert not marker.exists(), "loading the checkpoint ran its code"
    assert res.exit_code == 1 and res.output.startswith("Error: ") and "checkpoint" in res.output, res.output
    assert res.output.count("\n") == 1
