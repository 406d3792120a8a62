"""Groups (subjects, devices, sessions) in .npz and .csv files: hold-outs take whole groups,
`eval` scores each group and names the worst, bad groups end in one `Error:` line; and the
continuous protocol's grace, scaled to the data, with the share of readings it scores.

One tiny GRU (hidden 8, 2 epochs) is trained once on `people.npz` and exported."""

import json

import numpy as np
import pytest
from helpers import one_error_line as _err
from hypothesis import given, settings, strategies as st

from edgeseq.cli import cli
from edgeseq.data import HOLDOUT_SEED, Split, holdout, load_dataset
from edgeseq.errors import DataError
from edgeseq.runtime.evaluate import GRACE, grace_for, group_accuracy, joined_streams, score_continuous

PEOPLE = [f"p{i}" for i in range(6)]


def _people(path, n=24, T=12, named=True, seed=0, **extra):
    """n sequences of two classes (rest, walk), 4 per person p0..p5, channel gx marks the class."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    X = rng.standard_normal((n, T, 3)).astype(np.float32)
    X[:, :, 0] += np.where(y == 1, 2.0, -2.0)[:, None]
    arrays = {"X": X, "y": np.array(["rest", "walk"])[y], "features": np.array(["gx", "gy", "gz"])}
    if named:
        arrays["groups"] = np.array(PEOPLE)[np.arange(n) // (n // len(PEOPLE))]
    np.savez(path, **{**arrays, **extra})
    return path


def _csv(path, rows):
    path.write_text("\n".join(rows) + "\n")
    return str(path)




# -- hold-outs ------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.integers(2, 9), st.integers(2, 3), st.integers(0, 2**32 - 1), st.data())
def test_a_hold_out_never_splits_a_group(n_groups, n_classes, seed, data):
    sizes = data.draw(st.lists(st.integers(1, 6), min_size=n_groups, max_size=n_groups))
    groups = np.repeat([f"g{i}" for i in range(n_groups)], sizes)
    N = len(groups)
    y = np.array(data.draw(st.lists(st.integers(0, n_classes - 1), min_size=N, max_size=N)), np.int64)
    X = np.arange(N, dtype=np.float32)[:, None, None] * np.ones((1, 3, 2), np.float32)   # X[i] names sequence i
    split = Split(X, y, np.full(N, 3), groups=groups)
    try:
        rest, held = holdout(split, seed=seed)
    except DataError as e:                      # no draw leaves the rest every class: refused, never returned
        assert "no hold-out of whole groups for a test split keeps every class in the rest" in str(e)
        return
    assert set(rest.y.tolist()) == set(y.tolist())
    a, b = set(rest.groups.tolist()), set(held.groups.tolist())
    assert a and b and not a & b and a | b == set(groups.tolist())
    assert sorted(np.r_[rest.X[:, 0, 0], held.X[:, 0, 0]].tolist()) == list(range(N))     # every sequence, once
    for part in (rest, held):                                   # each sequence keeps its own label and group
        i = part.X[:, 0, 0].astype(int)
        assert (part.y == y[i]).all() and (part.groups == groups[i]).all()
    again_rest, _ = holdout(split, seed=seed)
    assert np.array_equal(again_rest.X, rest.X)                 # seeded


def test_the_seed_moves_which_groups_are_held_out():
    groups = np.repeat([f"g{i}" for i in range(8)], 3)
    split = Split(np.zeros((24, 2, 1), np.float32), np.arange(24) % 2, np.full(24, 2), groups=groups)
    held = {tuple(sorted(set(holdout(split, seed=s)[1].groups.tolist()))) for s in range(10)}
    assert len(held) > 1
    for s in range(10):
        rest, test = holdout(split, seed=s)
        assert len(test) == 6 and set(np.unique(rest.y)) == {0, 1}     # 2 groups of 3 = a quarter of 24


def test_an_npz_with_groups_holds_out_whole_groups_and_says_which(tmp_path):
    ds = load_dataset(str(_people(tmp_path / "people.npz")))
    info = ds.group_split()
    assert ds.held_out == "group" and not set(info["train"]) & set(info["test"])
    assert sorted(info["train"] + info["test"]) == PEOPLE and len(ds.test) >= 6
    n, total = len(ds.test), len(ds.train) + len(ds.test)
    assert info["test_split"] == f"whole groups: {n} of {total} sequences ({n / total:.0%}), seed {HOLDOUT_SEED}"
    again = load_dataset(str(tmp_path / "people.npz"))
    assert np.array_equal(again.test.X, ds.test.X) and again.group_split() == info       # every command reads the same split


def test_files_without_groups_split_as_before(tmp_path):
    ds = load_dataset(str(_people(tmp_path / "plain.npz", named=False)))
    assert ds.held_out == "class" and ds.group_split() is None
    assert ds.train.groups is None and ds.test.groups is None
    X = np.load(tmp_path / "plain.npz")["X"]
    last_quarter = [i for c in (0, 1) for i in np.flatnonzero(np.arange(24) % 2 == c)[-3:]]
    assert np.array_equal(ds.test.X, X[sorted(last_quarter)])       # the last quarter of each class, file order
    assert load_dataset("basicmotions").group_split() is None


def test_a_given_test_split_keeps_its_groups(tmp_path):
    path = _people(tmp_path / "given.npz")
    z = dict(np.load(path))
    np.savez(path, **z, X_test=z["X"][:4], y_test=z["y"][:4], groups_test=np.array([7, 7, 8, 8]))
    ds = load_dataset(str(path))
    assert ds.held_out == "file" and len(ds.train) == 24
    assert ds.group_split()["test"] == ["7", "8"] and ds.group_split()["test_split"] == "given by the file"
    assert ds.train.groups.tolist()[:5] == ["p0", "p0", "p0", "p0", "p1"] and ds.group_split()["shared"] == []


def test_a_given_test_split_sharing_groups_with_training_is_said(tmp_path, runner):
    """The file's own test split is used as it is, but a test group that also trained is named:
    its accuracy is not on unseen people."""
    path = _people(tmp_path / "shared.npz")
    z = dict(np.load(path))
    np.savez(path, **z, X_test=z["X"][:4], y_test=z["y"][:4], groups_test=np.array(["p0", "p0", "q", "q"]))
    assert load_dataset(str(path)).group_split()["shared"] == ["p0"]
    r = runner.invoke(cli, ["train", "--arch", "gru", "--data", str(path), "--out", str(tmp_path / "r"), "--epochs",
                            "1", "--set", "hidden=4"])
    assert r.exit_code == 0, r.output
    assert ("note: 1 group(s) are in both splits ('p0'): the test accuracy is not on unseen groups; give groups_test "
            "names the training split does not hold to measure that") in r.stderr


def test_a_csv_group_column(tmp_path):
    rows = ["sequence,label,group,ax,ay"]
    for s in range(12):
        for t in range(3 + s % 2):
            rows.append(f"s{s},{'up' if s % 2 else 'down'},{100 + s // 2},{s + t},{-t}")
    ds = load_dataset(_csv(tmp_path / "d.csv", rows))
    assert ds.features == ["ax", "ay"]                          # the group is not a channel
    info = ds.group_split()
    assert not set(info["train"]) & set(info["test"]) and sorted(info["train"] + info["test"]) == [
        str(100 + i) for i in range(6)]
    rows = [r + (",split" if i == 0 else f",{'test' if r.startswith('s1,') else 'train'}") for i, r in enumerate(rows)]
    ds = load_dataset(_csv(tmp_path / "split.csv", rows))
    assert ds.held_out == "file" and ds.test.groups.tolist() == ["100"]


# -- bad groups --------------------------------------------------------------------------------

@pytest.mark.parametrize("groups, message", [
    (np.array(["a", "b"]), r"groups must be \[N\], one group name per sequence of X \(24\), got shape \[2\]; "
                           "save one string or integer per sequence"),
    (np.array([["a", "b"]] * 24), r"groups must be \[N\], one group name per sequence of X \(24\), got shape "
                                  r"\[24, 2\]"),
    (np.r_[np.arange(23), np.nan], "groups holds NaN or non-integer numbers; groups are names: save them as strings "
                                   "or integers"),
    (np.arange(24) + 0.5, "groups holds NaN or non-integer numbers"),
    (np.array([""] + ["a"] * 23), "groups holds an empty name; name the group of every sequence"),
    (np.array(["a"] * 24), r"names one group \('a'\) and a test split takes whole groups, so it needs at least 2; "
                           "add sequences from another subject, device or session, or add X_test/y_test"),
    (np.array(["rest", "walk"])[np.arange(24) % 2], r"no hold-out of whole groups for a test split keeps every class "
     r"in the rest \(2 of the 2 groups hold a single class\), and training needs every class; add groups that hold "
     "several classes, or add X_test/y_test"),                                     # each group: one class
])
def test_bad_npz_groups_are_refused(tmp_path, groups, message):
    path = _people(tmp_path / "bad.npz", named=False, groups=groups)
    with pytest.raises(DataError, match=message):
        load_dataset(str(path))


def test_bad_groups_test_are_refused(tmp_path):
    path = _people(tmp_path / "bad.npz", groups_test=np.array(["a"] * 3))
    with pytest.raises(DataError, match="has groups_test but no X_test/y_test; save the whole test split or drop "
                                        "groups_test"):
        load_dataset(str(path))
    z = dict(np.load(_people(tmp_path / "bad2.npz")))
    np.savez(tmp_path / "bad2.npz", **z, X_test=z["X"][:4], y_test=z["y"][:4], groups_test=np.array(["a"] * 3))
    with pytest.raises(DataError, match=r"groups_test must be \[N\], one group name per sequence of X_test \(4\)"):
        load_dataset(str(tmp_path / "bad2.npz"))


def test_a_csv_whose_group_changes_within_a_sequence_names_the_line(tmp_path, runner):
    rows = ["sequence,label,group,ax", "s1,a,anna,1", "s1,a,ben,2", "s2,b,ben,3"]
    path = _csv(tmp_path / "d.csv", rows)
    with pytest.raises(DataError, match="line 3: sequence 's1' changes group from 'anna' to 'ben'; give all rows of "
                                        r"a sequence one group \(or make them separate sequences\)$"):
        load_dataset(path)
    r = runner.invoke(cli, ["train", "--data", path, "--out", "runs/x"])
    assert _err(r) == (f"Error: '{path}' line 3: sequence 's1' changes group from 'anna' to 'ben'; give all rows of "
                       "a sequence one group (or make them separate sequences)")


def test_a_csv_with_an_empty_group_or_one_group(tmp_path, runner):
    path = _csv(tmp_path / "e.csv", ["sequence,label,group,ax", "s1,a,anna,1", "s2,b,,2"])
    with pytest.raises(DataError, match="line 3: the group is empty; name the group"):
        load_dataset(path)
    rows = ["sequence,label,group,ax"] + [f"s{i},{'ab'[i % 2]},anna,{i}" for i in range(8)]
    path = _csv(tmp_path / "one.csv", rows)
    r = runner.invoke(cli, ["train", "--data", path, "--out", "runs/x"])
    assert _err(r) == (f"Error: '{path}' names one group ('anna') and a test split takes whole groups, so it needs at "
                       "least 2; add sequences from another subject, device or session, or add X_test/y_test (a "
                       "split column in a .csv) or more data")


# -- training and eval ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def people(tmp_path_factory):
    """(root, people.npz, checkpoint, exported model) for a tiny GRU trained on people.npz."""
    from edgeseq.train import TrainConfig, train
    from export import export_model
    root = tmp_path_factory.mktemp("people")
    data = _people(root / "people.npz")
    ckpt = train("gru", load_dataset(str(data)), TrainConfig(epochs=2, seed=0), {"hidden": 8}, progress=False)
    export_model(ckpt, root / "g.onnx")
    return root, data, ckpt, root / "g.onnx"


def test_training_metrics_say_which_groups_went_where(people):
    _, data, ckpt, _ = people
    assert ckpt["metrics"]["groups"] == load_dataset(str(data)).group_split()


def test_eval_scores_each_group_and_names_the_worst(people, runner):
    root, data, _, model = people
    ds = load_dataset(str(data))
    r = runner.invoke(cli, ["eval", str(model), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    per, worst = res["groups"]["per_group"], res["groups"]["worst"]
    assert list(per) == ds.group_split()["test"] and sum(v["n"] for v in per.values()) == res["n"]
    assert worst["accuracy"] == min(v["accuracy"] for v in per.values()) and per[worst["group"]]["n"] == worst["n"]
    assert sum(v["n"] * v["accuracy"] for v in per.values()) == pytest.approx(res["n"] * res["accuracy"])
    r = runner.invoke(cli, ["eval", str(model)])
    assert r.exit_code == 0, r.output
    line = next(line for line in r.output.splitlines() if "per group" in line)
    ranked = sorted(per.items(), key=lambda kv: (kv[1]["accuracy"], -kv[1]["n"], kv[0]))   # worst first
    tied = sum(v["accuracy"] == worst["accuracy"] for v in per.values()) - 1
    assert len(per) <= 12 and ranked[0][0] == worst["group"]
    assert line == ("  per group: worst " + f"'{worst['group']}' {worst['accuracy']:.3f} ({worst['n']} sequence"
                    + ("s" if worst["n"] != 1 else "") + (f"; {tied} more group{'s' if tied > 1 else ''} at "
                                                            f"{worst['accuracy']:.3f}" if tied else "") + "); "
                    + "; ".join(f"'{k}' {v['accuracy']:.3f} ({v['n']})" for k, v in ranked))
    assert f"{res['continuous']['scored_share']:.0%} of readings scored" in r.output
    r = runner.invoke(cli, ["eval", str(model), "--split", "train", "--json"])
    assert list(json.loads(r.output)["groups"]["per_group"]) == ds.group_split()["train"]
    plain = _people(root / "plain.npz", named=False)
    r = runner.invoke(cli, ["eval", str(model), "--data", str(plain), "--json"])
    assert r.exit_code == 0 and "groups" not in json.loads(r.output)
    r = runner.invoke(cli, ["eval", str(model), "--data", str(plain)])
    assert "per group" not in r.output


def test_group_accuracy_breaks_ties_by_size():
    hit = np.array([True, False, True, False, True, False])
    r = group_accuracy(hit, np.array(["b", "b", "a", "a", "c", "c"]))
    assert list(r["per_group"]) == ["a", "b", "c"] and r["worst"]["group"] == "a"
    r = group_accuracy(np.array([True, False, True, False, True, False, True]), np.array(list("aabbbbc")))
    assert r["worst"] == {"group": "b", "n": 4, "accuracy": 0.5}          # a ties at 0.5 with fewer sequences


# -- the continuous protocol's grace ----------------------------------------------------------------

@pytest.mark.parametrize("lengths, grace", [
    ([100] * 40, 20), ([2600] * 3, 20), ([50, 50, 900], 12), ([12, 40, 60], 10), ([7, 7], 1), ([8, 8], 2), ([3], 1),
    ([1, 1], 1), ([99, 101], 20), ([80], 20), ([79], 19), ([17] * 5, 4),
])
def test_the_grace_is_a_quarter_of_the_median_length_within_1_and_20(lengths, grace):
    assert GRACE == 20 and grace_for(np.array(lengths)) == grace


def test_score_continuous_takes_its_grace_from_the_sequences_and_reports_the_share():
    y = np.r_[np.zeros(10), np.ones(10), np.zeros(15)].astype(np.int64)   # lengths 10, 10, 15: median 10, grace 2
    ends = np.array([[9, 19, 34]])
    r = score_continuous(y[None], y[None], ends)
    assert r["grace"] == 2 and r["scored_readings"] == 8 + 8 + 13
    assert r["scored_share"] == pytest.approx(29 / 35) and r["reading_accuracy"] == 1.0
    r = score_continuous(y[None], y[None], ends, grace=5)        # an explicit grace wins
    assert r["grace"] == 5 and r["scored_share"] == pytest.approx((5 + 5 + 10) / 35)


def test_basicmotions_keeps_the_20_reading_grace(basicmotions):
    assert grace_for(basicmotions.test.lengths) == 20 and grace_for(basicmotions.train.lengths) == 20
    X, Y, ends = joined_streams(basicmotions.test)
    r = score_continuous(Y, Y, ends)
    changes = int((Y[:, 1:] != Y[:, :-1]).sum())
    assert r["grace"] == 20 and r["scored_readings"] == Y.size - 20 * (changes + len(Y))
    assert r["scored_share"] == pytest.approx(r["scored_readings"] / Y.size)
