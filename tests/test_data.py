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


@pytest.mark.parametrize("y, shown", [
    (np.array([0.5, 1.5, 0.5, 1.5]), "(0.5, 1.5)"),
    (np.array([0.0, 1.0, np.nan, 1.0]), "(NaN)"),
    (np.array([0.25, 1.25, 2.25, 3.25]), "(0.25, 1.25, 2.25, ...)"),
])
def test_non_integer_labels_are_shown_as_they_are(tmp_path, y, shown):
    """The message lists only values the labels hold: no NaN where there is none."""
    np.savez(tmp_path / "d.npz", X=np.zeros((4, 5, 2), np.float32), y=y)
    with pytest.raises(DataError) as e:
        load_dataset(str(tmp_path / "d.npz"))
    assert f"found non-integer numbers {shown}" in str(e.value)


def test_csv_sequence_split_over_the_file_and_empty_labels_are_refused(tmp_path):
    (tmp_path / "a.csv").write_text("sequence,label,ax\ns1,a,1\ns2,b,2\ns1,a,3\n")
    with pytest.raises(DataError, match=r"line 4: sequence 's1' continues after other rows"):
        load_dataset(str(tmp_path / "a.csv"))
    (tmp_path / "b.csv").write_text("sequence,label,ax\ns1,a,1\ns1,,2\ns2,b,3\n")
    with pytest.raises(DataError, match="some labels are empty"):
        load_dataset(str(tmp_path / "b.csv"))


ARCHS = ["rnn", "gru", "lstm", "transformer", "bigru", "bilstm"]
RECURRENT = [a for a in ARCHS if a != "transformer"]
BAD_SETTINGS = [  # (NAME=VALUE as typed after --set, the message's fragment)
    ("hidden=0", "setting hidden must be a whole number in 1..4096, got 0"),
    ("hidden=-4", "setting hidden must be a whole number in 1..4096, got -4"),
    ("hidden=abc", "setting hidden must be a whole number in 1..4096, got 'abc'"),
    ("hidden=2.5", "setting hidden must be a whole number in 1..4096, got 2.5"),
    ("hidden=32.0", "setting hidden must be a whole number in 1..4096, got 32.0"),
    ("hidden=true", "setting hidden must be a whole number in 1..4096, got True"),
    ("hidden=1e9", "setting hidden must be a whole number in 1..4096, got 1000000000.0"),
    ("hidden=", "setting hidden must be a whole number in 1..4096, got ''"),
    ("layers=0", "setting layers must be a whole number in 1..16, got 0"),
    ("layers=null", "setting layers must be a whole number in 1..16, got None"),
    ("dropout=5", "setting dropout must be a number in 0.0..0.95, got 5"),
    ("dropout=-0.1", "setting dropout must be a number in 0.0..0.95, got -0.1"),
    ("dropout=NaN", "setting dropout must be a number in 0.0..0.95, got nan"),
    ("dropout=false", "setting dropout must be a number in 0.0..0.95, got False"),
    ("dropout=high", "setting dropout must be a number in 0.0..0.95, got 'high'"),
    ("colour=3", "has no setting colour; it has "),
]
TRANSFORMER_ONLY = [
    ("heads=3", r"setting heads=3 must divide d_model=32 \(heads one of 1, 2, 4, 8, 16, 32\)"),
    ("heads=0", "setting heads must be a whole number in 1..4096, got 0"),
    ("d_model=0", "setting d_model must be a whole number in 2..4096, got 0"),
    ("d_ff=-1", "setting d_ff must be a whole number in 1..16384, got -1"),
    ("window=2.5", r"setting window must be a whole number in 0..100000, got 2.5"),
    ("window=-1", r"setting window must be a whole number in 0..100000, got -1"),
    ("positions=x", "setting positions must be one of none, sinusoid, alibi, got 'x'"),
    ("positions=true", "setting positions must be one of none, sinusoid, alibi, got True"),
]
CASES = [(a, item, m.replace("hidden", "d_model").replace("1..4096", "2..4096") if a == "transformer" else m)
         for a in ARCHS for item, m in BAD_SETTINGS]   # the Transformer's width is d_model (LayerNorm: 2 at least)
CASES += [("transformer", item, m) for item, m in TRANSFORMER_ONLY]
CASES += [(a, "d_model=16", "has no setting d_model") for a in RECURRENT]
CASES += [("bigru", "cell=lstm", r"'bigru' fixes cell=gru"), ("bilstm", "cell=gru", r"'bilstm' fixes cell=lstm"),
          ("transformer", "d_model=7 heads=7 positions=sinusoid", "d_model=7 must be even with positions=sinusoid")]


@pytest.mark.parametrize("arch, items, match", CASES)
def test_bad_model_settings_are_one_line_usage_errors(arch, items, match):
    """--set as the CLI parses it, for every architecture: the message names the setting and
    what it may be."""
    from edgeseq.errors import UsageError
    from edgeseq.models import make_config
    from edgeseq.train import parse_overrides
    if arch == "transformer":
        items = items.replace("hidden=", "d_model=")
    with pytest.raises(UsageError, match=match) as e:
        make_config(arch, n_features=6, n_classes=4, **parse_overrides(items.split()))
    assert f"'{arch}'" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("items, match", [
    (["=3"], "--set takes NAME=VALUE, got '=3'"),
    (["hidden"], "--set takes NAME=VALUE, got 'hidden'"),
    (["hidden=8", "hidden=16"], "--set hidden is given twice"),
])
def test_set_syntax_is_checked(items, match):
    from edgeseq.errors import UsageError
    from edgeseq.train import parse_overrides
    with pytest.raises(UsageError, match=match):
        parse_overrides(items)


@pytest.mark.parametrize("overrides, tc, match", [
    ({"n_features": 3}, {}, "'gru' setting n_features comes from the data"),
    ({"n_classes": 9}, {}, "'gru' setting n_classes comes from the data"),
    ({}, {"epochs": 0}, r"training setting epochs must be a whole number in 1..100000, got 0"),
    ({}, {"lr": -1.0}, r"training setting lr must be a number above 0.0 up to 10.0, got -1.0"),
    ({}, {"lr": float("nan")}, r"training setting lr must be a number above 0.0 up to 10.0, got nan"),
    ({}, {"batch_size": 2.5}, r"training setting batch_size must be a whole number in 1..100000, got 2.5"),
    ({}, {"seed": -1}, r"training setting seed must be a whole number in 0..4294967295, got -1"),
    ({}, {"ema": 1.0}, r"training setting ema must be a number in 0.0..0.9999, got 1.0"),
    ({}, {"ema": "0.9"}, r"training setting ema must be a number in 0.0..0.9999, got '0.9'"),
])
def test_bad_training_settings_are_usage_errors(overrides, tc, match):
    from edgeseq.errors import UsageError
    from edgeseq.train import TrainConfig, train
    with pytest.raises(UsageError, match=match):
        train("gru", "basicmotions", TrainConfig(**{"epochs": 1, **tc}), overrides, progress=False)


def test_good_settings_keep_their_types():
    from edgeseq.models import make_config
    from edgeseq.train import parse_overrides
    c = make_config("transformer", n_features=6, n_classes=4,
                    **parse_overrides(["d_model=16", "heads=2", "dropout=0", "positions=sinusoid"]))
    assert (c.d_model, c.heads, c.dropout, c.positions) == (16, 2, 0.0, "sinusoid")
    assert isinstance(c.dropout, float)


# --- file content: encodings, quoting, pairs of arrays, split values ---------------------------

def _csv_rows(split=True):
    rows = ["sequence,label,ax,ay" + (",split" if split else "")]
    for s in range(6):
        for t in range(3):
            rows.append(f"s{s},{'up' if s % 2 else 'down'},{s + t},{-t}" + (f",{'test' if s >= 4 else 'train'}"
                                                                            if split else ""))
    return rows


def test_csv_from_a_spreadsheet_bom_quotes_crlf(tmp_path):
    rows = _csv_rows()
    rows[0] = '"sequence","label","ax","ay","split"'
    rows[1:] = [r.replace(",down,", ',"down",').replace(",up,", ', "up",') for r in rows[1:]]
    (tmp_path / "d.csv").write_bytes(b"\xef\xbb\xbf" + "\r\n".join(rows).encode() + b"\r\n")
    ds = load_dataset(str(tmp_path / "d.csv"))
    assert ds.features == ["ax", "ay"] and ds.labels == ["down", "up"]
    assert len(ds.train) == 4 and len(ds.test) == 2 and ds.train.X[1, 2].tolist() == [3.0, -2.0]


@pytest.mark.parametrize("content, match", [
    (b"sequence,label,ax\ns1,caf\xe9,1\n", r"'.*d.csv' is not UTF-8 text \(line 2, byte 24\); save it as CSV UTF-8"),
    (b"\xff\xfes\x00e\x00q\x00", r"is not UTF-8 text"),                       # UTF-16 from a spreadsheet
    (b"sequence,label,ax\ns1,a,1\x00\x00\n", r"holds NUL bytes, so it is not CSV text; save it as CSV UTF-8"),
    (b"PK\x03\x04\x14\x00\x00\x00\x08\x00\x9c\x8f", r"is not UTF-8 text \(line 1, byte 10\)"),
])
def test_csv_that_is_not_utf8_text_is_a_data_error(tmp_path, content, match):
    (tmp_path / "d.csv").write_bytes(content)
    with pytest.raises(DataError, match=match) as e:
        load_dataset(str(tmp_path / "d.csv"))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("edit, match", [
    (lambda r: r[:5] + [r[5].replace(",train", ",validation")] + r[6:],
     r"line 6: split 'validation' is neither 'train' nor 'test'"),
    (lambda r: r[:5] + [r[5].replace(",train", ",")] + r[6:], r"line 6: split '' is neither 'train' nor 'test'"),
    (lambda r: r[:3] + [r[3].replace(",train", ",test")] + r[4:], r"line 4: sequence 's0' moves from split 'train'"),
    (lambda r: ["sequence,label,ax,ax"] + [x.rsplit(",", 1)[0] for x in r[1:]],
     "header column 4 repeats the name 'ax'"),
    (lambda r: r[:2] + [r[2].replace(",1,", ",1e39,")] + r[3:], r"line 3: NaN or Inf value \(or one beyond float32"),
])
def test_csv_content_errors_name_the_line(tmp_path, edit, match):
    (tmp_path / "d.csv").write_text("\n".join(edit(_csv_rows())) + "\n")
    with pytest.raises(DataError, match=match):
        load_dataset(str(tmp_path / "d.csv"))


def _npz(tmp_path, **arrays):
    np.savez(tmp_path / "d.npz", **arrays)
    return str(tmp_path / "d.npz")


X8 = np.zeros((8, 5, 2), np.float32)
Y8 = np.array([0, 1] * 4)


@pytest.mark.parametrize("arrays, match", [
    ({"X": X8, "y": Y8, "X_test": X8}, r"has X_test but no y_test; save both \(a held-out split\) or neither"),
    ({"X": X8, "y": Y8, "y_test": Y8}, r"has y_test but no X_test; save both"),
    ({"X": X8, "y": Y8, "lengths_test": np.full(8, 5)}, r"has lengths_test but no X_test/y_test"),
    ({"X_train": X8, "X_test": X8, "y_test": Y8}, r"has X_train but no y_train; save both"),
    ({"X": X8}, r"has X but no y; save both"),
    ({"X": X8, "y": Y8, "X_train": X8, "y_train": Y8}, r"has both X/y and X_train/y_train"),
    ({"X": X8, "y": Y8[:7]}, r"y must be \[N\] .* for X of shape \[8, 5, 2\], got \[7\]"),
    ({"X": X8, "y": Y8, "X_test": X8, "y_test": Y8[:3]}, r"y_test must be \[N\] .* got \[3\]"),
    ({"X": X8, "y": Y8, "lengths": np.full(7, 5)}, r"lengths must be \[N\] whole numbers in 1..5"),
    ({"X": X8, "y": Y8, "lengths": np.full(8, 2.5)}, r"lengths must be \[N\] whole numbers in 1..5"),
    ({"X": X8, "y": Y8, "lengths": np.array(["a"] * 8)}, r"lengths must be \[N\] whole numbers in 1..5"),
    ({"X": X8, "y": Y8, "features": np.array(["a", "b", "c"])}, r"features must be 2 names, one per feature column"),
    ({"X": X8, "y": Y8, "features": np.array(["a", "a"])}, r"features must be distinct, non-empty names"),
    ({"X": X8, "y": Y8, "features": np.array("ab")}, r"features must be 2 names, one per .*, got shape \[\]"),
    ({"X": X8[:, :, :0], "y": Y8}, r"X must be \[N, T, F\] with at least one of each, got shape \[8, 5, 0\]"),
    ({"X": X8.astype(np.complex64), "y": Y8}, r"X must be real numbers, got dtype complex64"),
    ({"X": np.full((8, 5, 2), 1e39), "y": Y8}, r"X holds NaN or Inf inside the valid lengths \(or a value beyond"),
    # keys edgeseq would ignore that look meant for it
    ({"X": X8, "y": Y8, "group": Y8}, r"has an array 'group', which edgeseq does not read; did you mean 'groups'\?"),
    ({"X": X8, "y": Y8, "Groups": Y8}, r"did you mean 'groups'\?"),
    ({"X": X8, "y": Y8, "lenghts": np.full(8, 5)}, r"did you mean 'lengths'\?"),
    ({"X": X8, "y": Y8, "groups_train": Y8}, r"has groups_train beside X/y, where it would be ignored; name it groups"),
    ({"X": X8, "y": Y8, "lengths_train": np.full(8, 5)}, r"has lengths_train beside X/y"),
    ({"X_train": X8, "y_train": Y8, "lengths": np.full(8, 5)}, r"has lengths beside X_train/y_train, where it would "
                                                               r"be ignored; name it lengths_train"),
    ({"X_train": X8, "y_train": Y8, "lenghts": np.full(8, 5)}, r"did you mean 'lengths_train'\?"),
    ({"X": X8, "y": Y8, "sequence_lengths": np.full(8, 5)}, r"did you mean 'lengths'\?"),
    ({"X": X8, "y": Y8, "X_test": X8, "y_test": Y8, "test_groups": Y8}, r"did you mean 'groups_test'\?"),
])
def test_npz_layout_errors_are_one_line(tmp_path, arrays, match):
    with pytest.raises(DataError, match=match) as e:
        load_dataset(_npz(tmp_path, **arrays))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("write, match", [
    (lambda p: p.write_bytes(b"not a zip file"), r"cannot read '.*d.npz' as .npz \(not a zip archive\); re-save"),
    (lambda p: p.write_bytes(b""), r"cannot read '.*d.npz' as .npz"),
    (lambda p: p.write_bytes(b"PK\x03\x04" + b"\x00" * 30), r"cannot read '.*d.npz' as .npz"),
    (lambda p: np.save(open(p, "wb"), X8), r"cannot read '.*d.npz' as .npz"),          # a .npy by another name
    (lambda p: np.savez(p, X=np.array([X8, None], dtype=object), y=Y8), r"holds Python objects \(object arrays\)"),
    (lambda p: p.mkdir(), r"data '.*d.npz' is not a file"),
])
def test_npz_that_numpy_cannot_read_safely_is_a_data_error(tmp_path, write, match):
    write(tmp_path / "d.npz")
    with pytest.raises(DataError, match=match):
        load_dataset(str(tmp_path / "d.npz"))


def test_dataset_source_is_the_absolute_path(tmp_path, monkeypatch):
    np.savez(tmp_path / "d.npz", X=X8, y=Y8)
    monkeypatch.chdir(tmp_path)
    assert load_dataset("d.npz").source == str((tmp_path / "d.npz").resolve())
    assert load_dataset("basicmotions").source == "basicmotions"


def test_npz_labels_give_the_class_order_of_string_y(tmp_path):
    """`labels` beside string `y` is the class order (unused names stay classes); a name in
    `y` or `y_test` that `labels` lacks is one line naming the array and the name."""
    X, y = np.zeros((8, 5, 2), np.float32), np.array(["walk", "run", "sit", "walk"] * 2)
    labels = np.array(["sit", "walk", "run", "jump"])
    np.savez(tmp_path / "d.npz", X=X, y=y, labels=labels, X_test=X[:4], y_test=y[:4])
    ds = load_dataset(str(tmp_path / "d.npz"))
    assert ds.labels == ["sit", "walk", "run", "jump"]
    assert ds.train.y.tolist() == [1, 2, 0, 1] * 2 and ds.test.y.tolist() == [1, 2, 0, 1]
    np.savez(tmp_path / "h.npz", X=X, y=y, labels=labels)                      # held-out split, same order
    assert load_dataset(str(tmp_path / "h.npz")).labels == ["sit", "walk", "run", "jump"]

    np.savez(tmp_path / "e.npz", X=X, y=np.array(["walk", "run", "swim", "hop"] * 2), labels=labels)
    with pytest.raises(DataError) as e:
        load_dataset(str(tmp_path / "e.npz"))
    assert str(e.value) == (f"'{tmp_path / 'e.npz'}': y holds the label 'swim', which is not in labels "
                            "(sit, walk, run, jump); add it to labels or correct y")
    np.savez(tmp_path / "t.npz", X=X, y=y, labels=labels, X_test=X[:2], y_test=np.array(["run", "hop"]))
    with pytest.raises(DataError, match=r"'.*t.npz': y_test holds the label 'hop', which is not in labels"):
        load_dataset(str(tmp_path / "t.npz"))
    Y = np.array([["walk"] * 3 + ["run"] * 2] * 8)                              # one label per reading
    Y[5, 4] = "fly"
    np.savez(tmp_path / "r.npz", X=X, y=Y, labels=labels)
    with pytest.raises(DataError, match=r"y holds the label 'fly'"):
        load_dataset(str(tmp_path / "r.npz"))


def test_the_embedded_speaker_set_loads_with_its_lengths():
    """japanesevowels (edgeseq/data/PROVENANCE.md): the archive's 270/370 split, 9 speakers, 12
    channels, 7-29 frames; its grace (and the training stream loss's by default) is 3 readings."""
    from edgeseq.runtime.evaluate import grace_for
    ds = load_dataset("japanesevowels")
    assert (len(ds.train), len(ds.test), len(ds.labels), len(ds.features)) == (270, 370, 9, 12)
    lengths = np.concatenate([ds.train.lengths, ds.test.lengths])
    assert lengths.min() == 7 and lengths.max() == 29
    assert grace_for(ds.train.lengths) == 3 and grace_for(load_dataset("basicmotions").train.lengths) == 20
    assert set(np.unique(ds.train.y)) == set(range(9)) == set(np.unique(ds.test.y))


def test_the_stream_loss_grace_follows_the_data(monkeypatch):
    """TrainConfig.grace None: the training streams leave out grace_for(training lengths) readings
    after each change of label (3 on the vowels); a number sets it. The metrics record it."""
    import edgeseq.train as T
    from edgeseq.train import loop                     # where train() looks the name up
    seen, real = [], loop.training_streams

    def spy(split, streams, grace, *args, **kwargs):
        seen.append(grace)
        return real(split, streams, grace, *args, **kwargs)
    monkeypatch.setattr(loop, "training_streams", spy)
    ckpt = T.train("gru", "japanesevowels", T.TrainConfig(epochs=1), {"hidden": 8}, progress=False)
    assert seen and set(seen) == {3} and ckpt["metrics"]["stream_grace"] == 3      # recorded, as used
    seen.clear()
    ckpt = T.train("gru", "japanesevowels", T.TrainConfig(epochs=1, grace=5), {"hidden": 8}, progress=False)
    assert seen and set(seen) == {5} and ckpt["metrics"]["stream_grace"] == 5


def _npz_of_length(path, length: int, n: int = 12, seed: int = 0) -> str:
    """A seeded two-class .npz of `n` sequences of `length` readings, 3 channels."""
    rng = np.random.default_rng(seed)
    y = np.array([0, 1] * (n // 2))
    X = (rng.standard_normal((n, length, 3)) + y[:, None, None]).astype(np.float32)
    np.savez(path, X=X, y=y, lengths=np.full(n, length), X_test=X[:4], y_test=y[:4], lengths_test=np.full(4, length))
    return str(path)


def test_the_default_transformer_window_follows_the_data(tmp_path):
    """No window setting: with ALiBi (the default) the Transformer keeps the 50-reading window;
    with positions none it trains with window_for(training lengths), a multiple of the median
    length, at most 50 (100-reading BasicMotions keeps 50); the checkpoint carries it, so the
    model rebuilt from it (what export reads for the file's max_history) has it. A window
    setting, 0 included, is kept."""
    from edgeseq.models.transformer import WINDOW, window_for
    from edgeseq.train import TrainConfig, model_from_checkpoint, train

    assert window_for(np.full(40, 100)) == WINDOW == 50 and window_for(np.array([1, 1])) == 1
    assert window_for(np.array([16, 16, 17])) < window_for(np.array([30] * 3)) <= 50
    tiny, tc = {"d_model": 8, "heads": 2, "layers": 1, "d_ff": 8}, TrainConfig(epochs=1, augment="none")
    short = _npz_of_length(tmp_path / "short.npz", 12)
    ckpt = train("transformer", short, tc, tiny, progress=False)
    assert ckpt["config"]["positions"] == "alibi" and ckpt["config"]["window"] == WINDOW
    tiny = {**tiny, "positions": "none"}
    ckpt = train("transformer", short, tc, tiny, progress=False)
    assert ckpt["config"]["window"] == window_for([12]) < 50
    assert model_from_checkpoint(ckpt).config.window == window_for([12])
    long = _npz_of_length(tmp_path / "long.npz", 100, n=4)
    assert train("transformer", long, tc, tiny, progress=False)["config"]["window"] == 50
    for window in (7, 0):
        assert train("transformer", short, tc, {**tiny, "window": window}, progress=False)["config"]["window"] == window


def test_npz_keys_of_ones_own_are_left_alone(tmp_path):
    """Metadata of the user's own, and a near miss beside the key it resembles, load as before."""
    ds = load_dataset(_npz(tmp_path, X=X8, y=Y8, sample_rate=np.array(50.0), groups=np.arange(8) % 4,
                           group=np.zeros(8), notes=np.array("x"), feature_units=np.array(["g", "g"]),
                           lengths_raw=np.full(8, 5)))
    assert ds.train.groups is not None and len(ds.train) + len(ds.test) == 8
