"""A classifier's labels are matched to the data's by name, as its channels are: the same labels
in another order (a .csv's come out sorted) score the same, data with only some of the model's
classes is accepted with its class ids in the model's order, and a label the model does not
predict is refused in one line that names it. One tiny GRU (hidden 8, 2 epochs) on 3 classes."""

import json

import numpy as np
import pytest
from helpers import one_error_line as _err

from edgeseq.cli import cli
from edgeseq.data import LABELS_REMEDY, Split, align_labels, load_dataset
from edgeseq.errors import DataError

CLASSES = ["walk", "rest", "run"]            # the model's order: not sorted, as a .csv's would be
FEATURES = ["gx", "gy", "gz"]


def _arrays(seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(36) % 3
    X = rng.standard_normal((36, 10, 3)).astype(np.float32)
    X[:, :, 0] += (y - 1.0)[:, None] * 2.0                       # separable enough to score above chance
    return X, np.array(CLASSES)[y]


def _npz(path, X, names, order, test_from=27):
    """X and its label names saved with integer y indexing `order` (the file's `labels`)."""
    y = np.array([order.index(n) for n in names])
    np.savez(path, X=X[:test_from], y=y[:test_from], X_test=X[test_from:], y_test=y[test_from:],
             labels=np.array(order), features=np.array(FEATURES))
    return path


def _csv(path, X, names, test_from=27):
    rows = ["sequence,label,split," + ",".join(FEATURES)]
    for i in range(len(X)):
        for t in range(X.shape[1]):
            split = "train" if i < test_from else "test"
            rows.append(f"s{i},{names[i]},{split}," + ",".join(f"{v:.9g}" for v in X[i, t]))
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(root, X, label names, checkpoint, float model) for a GRU trained on the labels in CLASSES order."""
    from edgeseq.train import TrainConfig, train
    from export import export_model
    root = tmp_path_factory.mktemp("labels")
    X, names = _arrays()
    data = _npz(root / "base.npz", X, names, CLASSES)
    ckpt = train("gru", load_dataset(str(data)), TrainConfig(epochs=2, seed=0), {"hidden": 8}, progress=False)
    assert ckpt["labels"] == CLASSES
    export_model(ckpt, root / "m.onnx")
    return root, X, names, ckpt, root / "m.onnx"


def _eval(runner, onnx_path, data):
    r = runner.invoke(cli, ["eval", str(onnx_path), "--data", str(data), "--json", "--backend", "onnxruntime"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_the_same_labels_in_another_order_score_the_same(model, runner):
    root, X, names, _, onnx_path = model
    base = _eval(runner, onnx_path, root / "base.npz")
    other = _npz(root / "reversed.npz", X, names, CLASSES[::-1])
    assert load_dataset(str(other)).labels == CLASSES[::-1]
    csv = _csv(root / "same.csv", X, names)
    assert load_dataset(str(csv)).labels == sorted(CLASSES)
    for data in (other, csv):
        got = _eval(runner, onnx_path, data)
        assert got["labels"] == CLASSES and got["n"] == base["n"] == 9, data
        assert got["accuracy"] == base["accuracy"] and got["confusion"] == base["confusion"], data

    from edgeseq.runtime.evaluate import evaluate                 # the API: the split's labels, by name
    ds = load_dataset(str(other))
    got = evaluate(str(onnx_path), ds.test, labels=ds.labels, features=ds.features, backend="onnxruntime")
    assert got["accuracy"] == base["accuracy"] and got["confusion"] == base["confusion"]


def test_a_subset_of_the_classes_is_remapped_into_the_models_order(model, runner):
    from edgeseq.runtime.model import model_data
    from export.quantize import dataset_for
    root, X, names, ckpt, onnx_path = model
    keep = np.isin(names, ["run", "rest"])
    Xs, ns = X[keep], names[keep]
    # per-reading labels: the first sequence changes class half way; padding past `lengths` is -1
    Y = np.repeat(ns[:, None], X.shape[1], axis=1)
    Y[0, 5:] = "run" if ns[0] == "rest" else "rest"
    lengths = np.full(len(Xs), X.shape[1])
    lengths[1] = 6
    Y[1, 6:] = ""
    Yi = np.array([[["run", "rest"].index(v) if v else 0 for v in row] for row in Y])
    np.savez(root / "sub.npz", X=Xs[:18], y=Yi[:18], lengths=lengths[:18], X_test=Xs[18:], y_test=Yi[18:, -1],
             labels=np.array(["run", "rest"]), features=np.array(FEATURES))

    want = {"walk": 0, "rest": 1, "run": 2}
    for ds in (model_data(str(onnx_path), str(root / "sub.npz")), dataset_for(ckpt, str(root / "sub.npz"))):
        assert ds.labels == CLASSES
        assert ds.train.y.tolist() == [want[Y[i, lengths[i] - 1]] for i in range(18)]   # the last valid reading's
        assert ds.test.y.tolist() == [want[n] for n in ns[18:]]
        valid = np.arange(X.shape[1])[None, :] < lengths[:18, None]
        assert (ds.train.Y[~valid] == -1).all()
        assert (ds.train.Y[valid] == np.vectorize(want.get)(Y[:18][valid])).all()
        assert ds.train.Y[0, :5].tolist() == [want[Y[0, 0]]] * 5 and ds.train.Y[0, 5] == want[Y[0, 5]]
    got = _eval(runner, onnx_path, root / "sub.npz")
    assert got["labels"] == CLASSES and got["n"] == len(ns) - 18
    assert sum(got["confusion"][want["walk"]]) == 0               # a class the data lacks has no sequences


def test_a_label_the_model_does_not_know_is_refused_in_one_line(model, runner):
    from export.quantize import dataset_for
    root, X, names, ckpt, onnx_path = model
    odd = np.where(names == "run", "jump", names)
    _npz(root / "jump.npz", X, odd, ["rest", "jump", "walk"])
    msg = ("data 'jump' has the labels rest, jump, walk but the model predicts walk, rest, run (it does not know "
           f"jump); {LABELS_REMEDY}")
    assert _err(runner.invoke(cli, ["eval", str(onnx_path), "--data", str(root / "jump.npz")])) == f"Error: {msg}"
    with pytest.raises(DataError) as e:                           # export --int8 --data reads it the same way
        dataset_for(ckpt, str(root / "jump.npz"))
    assert str(e.value) == msg


def test_align_labels_and_split_classes():
    assert align_labels(["a", "b"], ["a", "b"], "d") is None
    assert align_labels(["c", "a"], ["a", "b", "c"], "d").tolist() == [2, 0]
    with pytest.raises(DataError, match=r"^data 'd' has the labels x, y but the model predicts a, b; pass --data"):
        align_labels(["x", "y"], ["a", "b"], "data 'd'")
    X = np.zeros((2, 3, 1), np.float32)
    s = Split(X, np.array([0, 1]), np.array([3, 2]), np.array([[1, 0, 0], [1, 1, -1]]))
    r = s.classes(np.array([2, 0]))
    assert r.y.tolist() == [2, 0] and r.Y.tolist() == [[0, 2, 2], [0, 0, -1]]
    assert s.y.tolist() == [0, 1]                                  # the original split is left as it was
