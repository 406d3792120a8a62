import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from edgeseq.data import Normalization, Split, load_dataset
from edgeseq.errors import DataError


def test_embedded_basicmotions_shape(basicmotions):
    ds = basicmotions
    assert ds.train.X.shape == (40, 100, 6) and ds.test.X.shape == (40, 100, 6)
    assert ds.labels == ["Standing", "Running", "Walking", "Badminton"]
    assert np.bincount(ds.train.y).tolist() == [10] * 4 and np.bincount(ds.test.y).tolist() == [10] * 4
    assert (ds.train.lengths == 100).all()
    assert np.isfinite(ds.train.X).all()


def test_npz_with_lengths_and_holdout(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12, 9, 3)).astype(np.float32)
    lengths = np.array([9, 4, 7] * 4)
    X[1, 4:] = np.nan   # padding may hold anything
    y = np.array(["a", "b"] * 6)
    np.savez(tmp_path / "d.npz", X=X, y=y, lengths=lengths)
    ds = load_dataset(str(tmp_path / "d.npz"))
    assert ds.labels == ["a", "b"] and ds.n_features == 3
    assert len(ds.train) + len(ds.test) == 12 and len(ds.test) == 4   # a quarter of each class
    assert np.isfinite(ds.train.X).all() and np.isfinite(ds.test.X).all()


def test_npz_nan_inside_lengths_is_refused(tmp_path):
    X = np.zeros((4, 5, 2), np.float32)
    X[0, 1, 0] = np.nan
    np.savez(tmp_path / "d.npz", X=X, y=np.array([0, 1, 0, 1]))
    with pytest.raises(DataError, match="NaN or Inf inside the valid lengths"):
        load_dataset(str(tmp_path / "d.npz"))


def test_csv_layout(tmp_path):
    rows = ["sequence,label,ax,ay,split"]
    for s in range(6):
        for t in range(3 + s % 2):
            rows.append(f"s{s},{'up' if s % 2 else 'down'},{s + t},{-t},{'test' if s >= 4 else 'train'}")
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    ds = load_dataset(str(tmp_path / "d.csv"))
    assert ds.features == ["ax", "ay"] and ds.labels == ["down", "up"]
    assert len(ds.train) == 4 and len(ds.test) == 2
    assert ds.train.lengths.tolist() == [3, 4, 3, 4]
    assert ds.train.X[1, 3].tolist() == [4.0, -3.0]


def test_csv_non_numeric_cell_names_the_line(tmp_path):
    (tmp_path / "d.csv").write_text("sequence,label,ax\ns1,a,1.0\ns1,a,oops\n")
    with pytest.raises(DataError, match=r"line 3: non-numeric value 'oops'"):
        load_dataset(str(tmp_path / "d.csv"))


def test_missing_data_file():
    with pytest.raises(DataError, match="not found"):
        load_dataset("/nonexistent/x.npz")


def test_normalization_ignores_padding():
    X = np.zeros((2, 4, 1), np.float32)
    X[0, :, 0] = [1, 3, 1000, 1000]       # padding past length 2
    X[1, :, 0] = [1, 3, 1, 3]
    norm = Normalization.fit(Split(X, np.array([0, 1]), np.array([2, 4])))
    assert norm.mean.tolist() == [2.0] and norm.std.tolist() == [1.0]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 9), st.data())
def test_reverse_within_lengths_is_an_involution(B, T, data):
    import torch
    from edgeseq.models.birnn import reverse_within
    lengths = torch.tensor(data.draw(st.lists(st.integers(1, T), min_size=B, max_size=B)))
    x = torch.randn(B, T, 2)
    r = reverse_within(x, lengths)
    assert torch.equal(reverse_within(r, lengths), x)
    for b in range(B):
        L = int(lengths[b])
        assert torch.equal(r[b, :L], x[b, :L].flip(0))
        assert torch.equal(r[b, L:], x[b, L:])


@pytest.mark.parametrize("y, match", [
    (np.array([["a"] * 5, ["b"] * 3 + [""] * 2, ["a"] * 5, ["b"] * 5]), "some labels are empty"),
    (np.array([0.0, 1.0, np.nan, 1.0]), "non-integer numbers"),
    (np.array([0, 1, None, 1], dtype=object), "Object arrays|Python objects|cannot read"),
])
def test_unusable_labels_are_refused(tmp_path, y, match):
    np.savez(tmp_path / "d.npz", X=np.zeros((4, 5, 2), np.float32), y=y)
    with pytest.raises(DataError, match=match):
        load_dataset(str(tmp_path / "d.npz"))


def test_csv_sequence_split_over_the_file_and_empty_labels_are_refused(tmp_path):
    (tmp_path / "a.csv").write_text("sequence,label,ax\ns1,a,1\ns2,b,2\ns1,a,3\n")
    with pytest.raises(DataError, match=r"line 4: sequence 's1' continues after other rows"):
        load_dataset(str(tmp_path / "a.csv"))
    (tmp_path / "b.csv").write_text("sequence,label,ax\ns1,a,1\ns1,,2\ns2,b,3\n")
    with pytest.raises(DataError, match="some labels are empty"):
        load_dataset(str(tmp_path / "b.csv"))


@pytest.mark.parametrize("arch, setting", [("gru", {"hidden": 0}), ("lstm", {"dropout": 1.5}),
                                           ("rnn", {"hidden": 2.5}), ("transformer", {"heads": 3}),
                                           ("transformer", {"window": 2.5}), ("transformer", {"positions": "x"})])
def test_settings_that_cannot_build_a_model_are_usage_errors(arch, setting):
    from edgeseq.errors import UsageError
    from edgeseq.models import make_config
    with pytest.raises(UsageError, match=f"'{arch}' settings"):
        make_config(arch, n_features=6, n_classes=4, **setting)
