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


def _saved(tmp_path, edit=None, arch="gru"):
    """A checkpoint of an untrained 3-channel, 2-class model (what `edgeseq train` keeps),
    with `edit` applied to its dict before it is written: the run directory."""
    import copy

    from edgeseq.models import build_model, config_dict, make_config
    config = make_config(arch, n_features=3, n_classes=2, **({"hidden": 8} if arch in ("gru", "lstm", "bigru") else {}))
    model = build_model(arch, config)
    model.norm.set([0.0, 0.5, -1.0], [1.0, 2.0, 0.5])
    ckpt = {"arch": arch, "config": config_dict(config), "state_dict": model.state_dict(),
            "labels": ["rest", "move"], "features": ["ax", "ay", "az"],
            "normalization": {"mean": [0.0, 0.5, -1.0], "std": [1.0, 2.0, 0.5]}}
    ckpt = copy.deepcopy(ckpt)
    if edit:
        edit(ckpt)
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    torch.save(ckpt, run / "checkpoint.pt")
    return run


def _set(*path_value):
    *path, value = path_value

    def edit(d):
        for k in path[:-1]:
            d = d[k]
        if value is KeyError:
            del d[path[-1]]
        else:
            d[path[-1]] = value(d[path[-1]]) if callable(value) else value
    return edit


@pytest.mark.parametrize("arch", ["gru", "lstm", "ssm", "transformer", "bigru"])
def test_a_consistent_checkpoint_loads(tmp_path, arch):
    from edgeseq.train.checkpoint import load_checkpoint, model_from_checkpoint
    model = model_from_checkpoint(load_checkpoint(_saved(tmp_path, arch=arch)))
    assert model.config.n_features == 3


@pytest.mark.parametrize("edit, says", [
    (_set("config", "hidden", 16), "rnn.weight_ih_l0 has the shape [24, 3], the config builds [48, 3]"),
    (_set("arch", "lstm"), "rnn.weight_ih_l0 has the shape [24, 3], the config builds [32, 3]"),
    (_set("arch", "os.system"), "unknown architecture 'os.system'"),
    (_set("config", "hidden", 10 ** 9), "setting hidden must be a whole number in 1..4096"),
    (_set("config", "bogus", 1), "unexpected keyword argument 'bogus'"),
    (_set("config", "x"), "its config or state dict is not a mapping"),
    (_set("state_dict", "head.bias", KeyError), "the state dict lacks head.bias"),
    (_set("state_dict", "evil", torch.zeros(1)), "state dict entry 'evil' is not one a gru has"),
    (_set("state_dict", "head.bias", lambda t: t.fill_(float("nan"))), "head.bias holds NaN or infinite values"),
    (_set("labels", ["rest"]), "labels must be 2 names, as the model has 2 outputs"),
    (_set("labels", KeyError), "labels must be 2 names"),
    (_set("labels", [0, 1]), "labels must be 2 names"),
    (_set("features", ["a", "b"]), "features must be 3 names, as the model reads 3 channels"),
    (_set("normalization", "abc"), "normalization must hold a mean and a std of 3 finite numbers"),
    (_set("normalization", "std", [1.0, float("nan"), 1.0]), "normalization must hold"),
    (_set("normalization", "std", [1.0, 0.0, 1.0]), "the stds above 0"),
    (_set("normalization", "mean", [0.0]), "normalization must hold"),
    (_set("normalization", "asinh_scale", [1.0, -1.0, 1.0]), "asinh_scale must be 3 finite numbers above 0"),
    (_set("labels", ["rest", "rest"]), "labels names 'rest' more than once"),
    (_set("labels", ["rest", " "]), "labels entry 1 must be a non-empty name"),
    (_set("features", ["ax", "ax", "az"]), "features names 'ax' more than once"),
    (_set("task", "regress"), "task must be an object whose kind is one of classify, anomaly, regress"),
    (_set("task", {"kind": "bogus"}), "task must be an object whose kind is one of"),
    (_set("task", {"kind": "regress"}), "task 'targets' must name the outputs"),
    (_set("task", {"kind": "anomaly"}), "an anomaly model's labels must be 'mean:<feature>'"),
    (_set("state_dict", "norm.std", lambda t: t.zero_()), "the weights' norm.std is not the normalization's std"),
    (_set("state_dict", "norm.mean", lambda t: t.add_(100.0)), "the weights' norm.mean is not the normalization's"),
])
def test_an_edited_checkpoint_is_refused_in_one_line(tmp_path, edit, says):
    from edgeseq.errors import ModelFileError
    from edgeseq.train.checkpoint import load_checkpoint
    run = _saved(tmp_path, edit)
    with pytest.raises(ModelFileError, match="is not a consistent edgeseq checkpoint") as e:
        load_checkpoint(run)
    assert says in str(e.value) and "\n" not in str(e.value)
    out = tmp_path / "m.onnx"
    out.write_bytes(b"a good model")
    res = CliRunner().invoke(cli, ["export", str(run), "--out", str(out)])
    assert res.exit_code == 1 and res.output.startswith("Error: ") and says in res.output, res.output
    assert res.output.count("\n") == 1
    assert out.read_bytes() == b"a good model"


def test_a_bidirectional_checkpoint_renamed_to_its_other_cell_is_refused(tmp_path):
    from edgeseq.errors import ModelFileError
    from edgeseq.train.checkpoint import load_checkpoint
    with pytest.raises(ModelFileError, match=r"a bilstm has cell=lstm, its config cell='gru'"):
        load_checkpoint(_saved(tmp_path, _set("arch", "bilstm"), arch="bigru"))
