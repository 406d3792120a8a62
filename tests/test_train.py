"""Accuracy thresholds on BasicMotions with each architecture's default schedule, seed 0."""

import pytest

from edgeseq.train import load_checkpoint, model_from_checkpoint, save_checkpoint, accuracy

THRESHOLDS = {"gru": 0.95, "lstm": 0.95, "transformer": 0.90, "rnn": 0.5, "bigru": 0.75}


@pytest.mark.parametrize("arch", list(THRESHOLDS))
def test_test_accuracy(trained, arch):
    m = trained(arch)["metrics"]
    print(f"{arch}: test accuracy {m['test_accuracy']:.3f}, {m['train_seconds']:.1f} s")
    assert m["test_accuracy"] >= THRESHOLDS[arch]


def test_checkpoint_roundtrip_carries_everything(trained, basicmotions, tmp_path):
    ckpt = trained("gru")
    save_checkpoint(ckpt, tmp_path / "run")
    back = load_checkpoint(tmp_path / "run")
    for key in ("arch", "config", "normalization", "labels", "features", "train_config"):
        assert back[key] == ckpt[key]
    model = model_from_checkpoint(back)
    assert accuracy(model, basicmotions.test) == ckpt["metrics"]["test_accuracy"]
    assert (tmp_path / "run" / "metrics.json").exists()


def test_training_is_seeded(basicmotions):
    from edgeseq.train import TrainConfig, train
    a = train("gru", basicmotions, TrainConfig(epochs=2), {"hidden": 8}, progress=False)
    b = train("gru", basicmotions, TrainConfig(epochs=2), {"hidden": 8}, progress=False)
    assert a["loss_history"] == b["loss_history"]
