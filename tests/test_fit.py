"""Data that fits badly: a channel around 1e20, a constant barometer, channels in another
order, one class, a label seen only in the test split, int8 export finding the run's data.

One tiny GRU (hidden 8) is trained once on synthetic data whose class lives in a channel
around 1e20, next to a barometer that never moves, and exported once."""

import numpy as np
import pytest

from edgeseq.data import Dataset, Normalization, Split, align_features, load_dataset
from edgeseq.errors import DataError

FEATURES = ["huge", "baro", "noise"]


def _data(rng, N=40, T=12):
    y = np.arange(N) % 2
    X = rng.standard_normal((N, T, 3))
    X[:, :, 0] = (X[:, :, 0] + np.where(y == 1, 2.0, -2.0)[:, None]) * 1e20   # the class, around 1e20
    X[:, :, 1] = 1013.7                                                        # a barometer, constant
    return X.astype(np.float32), np.array(["rest", "walk"])[y]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(dataset, checkpoint, exported model path) for a GRU trained on `one.npz`."""
    from edgeseq.train import TrainConfig, train
    from export import export_model
    root = tmp_path_factory.mktemp("fit")
    X, y = _data(np.random.default_rng(0))
    np.savez(root / "one.npz", X=X, y=y, features=np.array(FEATURES))
    ds = load_dataset(str(root / "one.npz"))
    ckpt = train("gru", ds, TrainConfig(epochs=15, lr=1e-2, stream_weight=0.0), {"hidden": 8}, progress=False)
    path = root / "one.onnx"
    export_model(ckpt, path)          # validates ONNX Runtime against torch: no NaN from std = inf
    return ds, ckpt, path


def test_channel_around_1e20_is_fitted_in_float64_and_learnt(run):
    ds, ckpt, _ = run
    mean, std = (np.array(ckpt["normalization"][k]) for k in ("mean", "std"))
    assert np.isfinite(mean).all() and np.isfinite(std).all()
    assert 1e20 < std[0] < 1e21                            # float32 statistics gave inf here
    z = (ds.test.X[:, :, 0] - np.float32(mean[0])) / np.float32(std[0])
    assert np.abs(z).max() < 10
    assert ckpt["metrics"]["test_accuracy"] == 1.0       # the class lives in that channel alone


def test_constant_barometer_keeps_std_1_and_a_drift_stays_small(run):
    import torch
    from edgeseq.train import model_from_checkpoint
    ds, ckpt, _ = run
    norm = Normalization.from_json(ckpt["normalization"])
    assert norm.std[1] == 1.0 and norm.mean[1] == np.float32(1013.7)
    drift = (np.float32(1013.8) - norm.mean[1]) / norm.std[1]
    assert 0.09 < drift < 0.11                            # float32 noise as std made this about 3
    model = model_from_checkpoint(ckpt)
    X = ds.test.X.copy()
    X[:, :, 1] += 0.1
    with torch.no_grad():
        a = model(torch.from_numpy(ds.test.X), torch.from_numpy(ds.test.lengths)).argmax(-1)
        b = model(torch.from_numpy(X), torch.from_numpy(ds.test.lengths)).argmax(-1)
    assert torch.equal(a, b)


def test_constant_test_is_relative_to_the_magnitude():
    X = np.zeros((2, 5000, 3), np.float32)
    X[:, :, 0] = 1013.7                       # float32 sums of 10,000 readings: rounding, not spread
    X[:, :, 1] = 1e-3 * np.sin(np.arange(5000))  # small but real
    X[:, :, 2] = 0.0
    norm = Normalization.fit(Split(X, np.array([0, 1]), np.array([5000, 5000])))
    assert norm.std.tolist()[0] == 1.0 and norm.std.tolist()[2] == 1.0
    assert 6e-4 < norm.std[1] < 8e-4


@pytest.mark.parametrize("column, match", [
    ([3e38, -3e38, 3e38, 3e38], r"channel 'b' \(column 1\): values up to 3e\+38 overflow .* rescale that channel"),
    ([1.0, np.nan, 2.0, 3.0], r"channel 'b' \(column 1\) holds NaN or Inf"),
    ([1.0, np.inf, 2.0, 3.0], r"channel 'b' \(column 1\) holds NaN or Inf"),
])
def test_statistics_that_do_not_fit_float32_are_refused(column, match):
    X = np.zeros((1, 4, 2), np.float32)
    X[0, :, 1] = column
    with pytest.raises(DataError, match=match):
        Normalization.fit(Split(X, np.array([0]), np.array([4])), ["a", "b"])


def test_channels_are_matched_by_name_in_eval(run):
    from edgeseq.runtime.evaluate import evaluate
    ds, _, path = run
    base = evaluate(str(path), ds.test, features=ds.features)
    perm = [2, 0, 1]
    moved = evaluate(str(path), ds.test.channels(perm), features=[ds.features[i] for i in perm])
    assert moved["accuracy"] == base["accuracy"] == 1.0 and moved["confusion"] == base["confusion"]
    with pytest.raises(DataError, match=r"data has the channels huge, pressure, noise but the model reads huge, "
                                        r"baro, noise \(it lacks baro and has extra pressure\)"):
        evaluate(str(path), ds.test, features=["huge", "pressure", "noise"])
    with pytest.raises(DataError, match=r"data has 2 channels \(f0, f1\) but the model reads 3 \(huge, baro, noise\)"):
        evaluate(str(path), ds.test.channels([0, 1]))          # unnamed: by position, counts must agree


@pytest.mark.parametrize("data, model, expect", [
    (["a", "b", "c"], ["a", "b", "c"], None),
    (["c", "a", "b"], ["a", "b", "c"], [1, 2, 0]),
    (["f0", "f1", "f2"], ["a", "b", "c"], None),       # unnamed data: by position
    (["x", "y"], ["f0", "f1"], None),                  # unnamed model: by position
])
def test_align_features(data, model, expect):
    order = align_features(data, model, "data 'd'")
    assert (order is None and expect is None) or order.tolist() == expect


@pytest.mark.parametrize("data, model, match", [
    (["a", "b"], ["a", "b", "c"], r"data 'd' has the channels a, b but the model reads a, b, c \(it lacks c\)"),
    (["a", "b", "c", "d"], ["a", "b", "c"], r"data 'd' has the channels a, b, c, d but the model reads a, b, c "
                                            r"\(it has extra d\)"),
    (["x", "y"], ["a", "b"], r"data 'd' has the channels x, y but the model reads a, b; give data with the model's "
                             r"channels, named as in training$"),
    (["a", "a", "b"], ["a", "b", "c"], r"names channel\(s\) a more than once"),
    (["f0", "f1"], ["a", "b", "c"], r"data 'd' has 2 channels \(f0, f1\) but the model reads 3 \(a, b, c\)"),
])
def test_align_features_refuses_other_channels(data, model, match):
    with pytest.raises(DataError, match=match):
        align_features(data, model, "data 'd'")


def test_int8_data_reopens_the_run_file_by_path_and_reorders_it(run, tmp_path, monkeypatch):
    from export.quantize import dataset_for
    ds, ckpt, _ = run
    assert ckpt["dataset"] == "one" and ckpt["data_path"] == ds.source
    monkeypatch.chdir(tmp_path)                   # the stem alone ('one') would not be found from here
    again = dataset_for(ckpt, None)
    assert np.array_equal(again.train.X, ds.train.X)
    perm = [1, 2, 0]
    moved = Dataset("m", ds.train.channels(perm), ds.test.channels(perm), ds.labels, [FEATURES[i] for i in perm])
    assert np.array_equal(dataset_for(ckpt, moved).train.X, ds.train.X)     # back in the model's order


def test_int8_data_gone_or_named_only_says_pass_data(run, tmp_path, basicmotions):
    from export.quantize import dataset_for
    _, ckpt, _ = run
    with pytest.raises(DataError, match=r"the run's training data '.*gone.npz' is gone; pass it with --data"):
        dataset_for({**ckpt, "data_path": str(tmp_path / "gone.npz")}, None)
    old = {k: v for k, v in ckpt.items() if k != "data_path"}
    with pytest.raises(DataError, match=r"names its training data only as 'one'.*; pass it with --data"):
        dataset_for(old, None)
    bm = {"dataset": "basicmotions", "features": basicmotions.features, "labels": basicmotions.labels}
    assert dataset_for(bm, None).train.X.shape == (40, 100, 6)             # old checkpoints of the embedded set


def _tiny(tmp_path, y, y_test=None, **extra):
    X = np.random.default_rng(0).standard_normal((len(y), 6, 2)).astype(np.float32)
    arrays = {"X": X, "y": np.array(y), **extra}
    if y_test is not None:
        arrays.update(X_test=X[:len(y_test)], y_test=np.array(y_test))
    np.savez(tmp_path / "d.npz", **arrays)
    return load_dataset(str(tmp_path / "d.npz"))


@pytest.mark.parametrize("y, y_test, extra, match", [
    (["walk"] * 8, None, {}, r"training split of 'd' holds one class \('walk'\); training needs at least 2 classes"),
    (["a", "b"] * 4, ["a", "c"], {}, r"label\(s\) 'c' of 'd' occur only in the test split"),
    ([0, 1] * 4, None, {"labels": np.array(["a", "b", "c"])}, r"label\(s\) 'c' of 'd' never occur in the training"),
])
def test_classes_that_cannot_be_learnt_are_refused(tmp_path, y, y_test, extra, match):
    from edgeseq.train import TrainConfig, train
    ds = _tiny(tmp_path, y, y_test, **extra)
    with pytest.raises(DataError, match=match):
        train("gru", ds, TrainConfig(epochs=1), {"hidden": 4}, progress=False)


def test_csv_label_only_in_the_test_split_is_refused(tmp_path):
    from edgeseq.train import TrainConfig, train
    rows = ["sequence,label,ax,split"] + [f"s{n},{'ab'[n % 2]},{n},train" for n in range(4)] + ["s9,jump,1,test"]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"'jump' of 'd' occur only in the test split"):
        train("gru", str(tmp_path / "d.csv"), TrainConfig(epochs=1), {"hidden": 4}, progress=False)
