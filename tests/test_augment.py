"""Augmentation: each transform keeps shapes and dtypes, is seeded, touches only what it should;
training augments the training split alone; bad settings are one clear line."""

from dataclasses import asdict, replace

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeseq.data import Dataset, Split
from edgeseq.data.augment import (AUTO, DEFAULT, LIGHT, NONE, STRENGTHS, Augment, Augmenter, check_augment, cut_pieces, describe,
                                  find_triples, for_data, jitter, magnitude_warp, parse_settings, resolve_triples, rotate,
                                  rotation_matrices, scale, time_warp)
from edgeseq.errors import DataError, UsageError
from helpers import assert_close, one_error_line

FEATURES = ["acc_x", "acc_y", "acc_z", "gyr_x", "gyr_y", "gyr_z", "temp"]


def _split(n=6, T=40, seed=0, per_reading=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(0, 1, (n, T, len(FEATURES))).astype(np.float32)
    X[..., 2] += 9.8                                             # gravity on acc_z
    lengths = np.array([T, T - 5, T, 17, T, 3][:n], np.int64)
    for i, L in enumerate(lengths):
        X[i, L:] = 0.0
    y = np.arange(n) % 3
    Y = None
    if per_reading:
        Y = np.repeat(y[:, None], T, 1).astype(np.int64)
        Y[:, T // 2:] = (y[:, None] + 1) % 3
        Y[np.arange(T)[None, :] >= lengths[:, None]] = -1
    return Split(X, y, lengths, Y)


TRANSFORMS = {
    "jitter": lambda X, L, rng: jitter(X, L, 0.1, rng, std=np.ones(X.shape[2])),
    "scale": lambda X, L, rng: scale(X, L, 0.2, rng),
    "magwarp": lambda X, L, rng: magnitude_warp(X, L, 0.2, rng),
    "timewarp": lambda X, L, rng: time_warp(X, L, 0.2, rng)[0],
    "rotate": lambda X, L, rng: rotate(X, L, [[0, 1, 2], [3, 4, 5]], 45.0, rng),
}


@pytest.mark.parametrize("name", TRANSFORMS)
def test_each_transform_keeps_shape_dtype_padding_and_is_seeded(name):
    s = _split()
    before = s.X.copy()
    a = TRANSFORMS[name](s.X, s.lengths, np.random.default_rng(7))
    b = TRANSFORMS[name](s.X, s.lengths, np.random.default_rng(7))
    c = TRANSFORMS[name](s.X, s.lengths, np.random.default_rng(8))
    assert a.shape == s.X.shape and a.dtype == s.X.dtype
    assert_close(a, b, f"{name} same seed", atol=0)
    assert not np.array_equal(a, c), f"{name}: another seed drew the same"
    assert not np.array_equal(a, s.X), f"{name} changed nothing"
    np.testing.assert_array_equal(s.X, before)                   # the input is never changed in place
    pad = np.arange(s.X.shape[1])[None, :] >= s.lengths[:, None]
    assert (a[pad] == 0).all(), f"{name} wrote into the padding"


@pytest.mark.parametrize("name", ["jitter", "scale", "magwarp", "timewarp", "rotate"])
def test_zero_strength_and_none_are_the_identity(name):
    s = _split(per_reading=True)
    rng = np.random.default_rng(0)
    out = {"jitter": lambda: jitter(s.X, s.lengths, 0.0, rng), "scale": lambda: scale(s.X, s.lengths, 0.0, rng),
           "magwarp": lambda: magnitude_warp(s.X, s.lengths, 0.0, rng),
           "timewarp": lambda: time_warp(s.X, s.lengths, 0.0, rng)[0],
           "rotate": lambda: rotate(s.X, s.lengths, [[0, 1, 2]], 0.0, rng)}[name]()
    np.testing.assert_array_equal(out, s.X)
    aug = Augmenter(NONE, FEATURES, seed=0)(s)
    for a, b in ((aug.X, s.X), (aug.Y, s.Y), (aug.y, s.y), (aug.lengths, s.lengths)):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), degrees=st.floats(0.1, 180.0))
def test_rotation_keeps_each_triples_norm_and_touches_only_the_triples(seed, degrees):
    s = _split()
    out = rotate(s.X, s.lengths, [[0, 1, 2], [3, 4, 5]], degrees, np.random.default_rng(seed))
    for t in ([0, 1, 2], [3, 4, 5]):
        assert_close(np.linalg.norm(out[..., t], axis=-1), np.linalg.norm(s.X[..., t], axis=-1), "norm",
                     atol=1e-4, rtol=1e-5)
    np.testing.assert_array_equal(out[..., 6], s.X[..., 6])     # temp is no vector


def test_one_rotation_per_sequence_for_every_triple_within_the_angle():
    R = rotation_matrices(200, 30.0, np.random.default_rng(0))
    assert_close(R @ R.transpose(0, 2, 1), np.broadcast_to(np.eye(3), R.shape), "orthogonal", atol=1e-12)
    assert_close(np.linalg.det(R), np.ones(200), "proper rotation", atol=1e-12)
    angle = np.degrees(np.arccos(np.clip((np.trace(R, axis1=1, axis2=2) - 1) / 2, -1, 1)))
    assert angle.max() <= 30.0 + 1e-9 and angle.max() > 20.0
    s = _split(n=1, T=10)
    s.X[0, :, 3:6] = s.X[0, :, 0:3]                             # gyr = acc: one frame, so they turn alike
    out = rotate(s.X, s.lengths, [[0, 1, 2], [3, 4, 5]], 90.0, np.random.default_rng(1))
    assert_close(out[0, :, 3:6], out[0, :, 0:3], "both triples, one rotation", atol=0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), strength=st.floats(0.01, 1.0))
def test_time_warp_keeps_endpoints_length_and_labels_it_had(seed, strength):
    s = _split(per_reading=True)
    X, Y = time_warp(s.X, s.lengths, strength, np.random.default_rng(seed), s.Y)
    assert X.shape == s.X.shape and X.dtype == s.X.dtype and Y.dtype == s.Y.dtype
    for i, n in enumerate(s.lengths):
        assert_close(X[i, [0, n - 1]], s.X[i, [0, n - 1]], "endpoints", atol=1e-6)
        assert Y[i, 0] == s.Y[i, 0] and Y[i, n - 1] == s.Y[i, n - 1]
        assert set(Y[i, :n].tolist()) <= set(s.Y[i, :n].tolist())
        lo, hi = s.X[i, :n].min(0), s.X[i, :n].max(0)            # resampled between neighbours: within range
        assert (X[i, :n] >= lo - 1e-5).all() and (X[i, :n] <= hi + 1e-5).all()
    np.testing.assert_array_equal(Y == -1, s.Y == -1)


def test_gains_and_noise_leave_constant_channels_alone():
    s = _split()
    active = np.array([True] * 6 + [False])
    rng = np.random.default_rng(0)
    for out in (scale(s.X, s.lengths, 0.3, rng, active), magnitude_warp(s.X, s.lengths, 0.3, rng, active),
                jitter(s.X, s.lengths, 0.3, rng, np.ones(7), active)):
        np.testing.assert_array_equal(out[..., 6], s.X[..., 6])
        assert not np.array_equal(out[..., :6], s.X[..., :6])


def test_jitter_is_in_units_of_the_channels_std():
    X = np.zeros((50, 200, 2), np.float32)
    out = jitter(X, np.full(50, 200), 0.1, np.random.default_rng(0), std=np.array([1.0, 100.0]))
    assert_close(out.std((0, 1)), [0.1, 10.0], "noise std", atol=0, rtol=0.02)


def test_triples_are_found_from_channel_names():
    assert find_triples(FEATURES) == [[0, 1, 2], [3, 4, 5]]
    assert find_triples(["gyrZ", "gyrY", "gyrX", "t"]) == [[2, 1, 0]]
    assert find_triples(["mag.x", "mag.y", "mag.z", "ax", "ay"]) == [[0, 1, 2]]
    assert find_triples(["x", "y", "z"]) == []                        # lone axes are not guessed
    assert find_triples(["f0", "f1", "f2"]) == []
    aug = Augment(rotate=10.0)
    assert resolve_triples(aug, FEATURES, np.array([False, False, True, False, False, False, False])) == [[3, 4, 5]]
    assert resolve_triples(replace(aug, triples=[["x", "y", "z"]]), ["t", "x", "y", "z"]) == [[1, 2, 3]]
    assert resolve_triples(replace(aug, triples="none"), FEATURES) == []
    assert resolve_triples(replace(aug, rotate=0.0), FEATURES) == []


def test_cut_and_join_keeps_every_reading_once():
    lengths = np.array([100, 100, 60, 7])
    parts = cut_pieces(lengths, np.arange(4), 1.0, np.random.default_rng(0))
    assert len(parts) == 8
    for i, n in enumerate(lengths):
        mine = sorted((a, b) for j, a, b in parts if j == i)
        assert mine[0][0] == 0 and mine[-1][1] == n and mine[0][1] == mine[1][0]
        assert n * 0.1 <= mine[0][1] <= n * 0.9
    assert cut_pieces(lengths, np.array([2, 0, 1, 3]), 0.0, None) == [(2, 0, 60), (0, 0, 100), (1, 0, 100), (3, 0, 7)]


def test_augmenter_is_seeded_per_epoch_and_never_changes_its_input():
    s = _split(per_reading=True)
    before = [a.copy() for a in (s.X, s.Y)]
    a, b = Augmenter(DEFAULT, FEATURES, seed=3), Augmenter(DEFAULT, FEATURES, seed=3)
    e1, e2 = a(s), a(s)
    assert_close(e1.X, b(s).X, "same seed, first epoch", atol=0)
    assert not np.array_equal(e1.X, e2.X)                          # a new draw each epoch
    np.testing.assert_array_equal(s.X, before[0])
    np.testing.assert_array_equal(s.Y, before[1])
    assert a.summary()["triples"] == [["acc_x", "acc_y", "acc_z"], ["gyr_x", "gyr_y", "gyr_z"]]


def test_auto_takes_the_full_set_on_motion_data_only():
    aug, why = for_data(AUTO, FEATURES)
    assert aug == DEFAULT and "acc_x/acc_y/acc_z" in why
    for features in (["c0", "c1", "c2"], ["x", "y", "z"], ["temp", "humidity"]):
        aug, why = for_data(AUTO, features)
        assert aug == DEFAULT and why.startswith(f"auto: {len(features)} channels"), features
    aug, why = for_data(AUTO, ["power"])
    assert aug == LIGHT and aug.scale == aug.magwarp == aug.timewarp == aug.rotate == 0
    assert LIGHT.jitter > 0 and LIGHT.join > 0 and why.startswith("auto: one channel")
    assert for_data(NONE, FEATURES) == (NONE, "as set")              # a set augmentation is kept
    assert describe({**Augmenter(LIGHT, ["power"]).summary(), "why": why}).startswith("jitter=0.05 join=0.5 [auto:")


@pytest.mark.parametrize("channels", [7, 1])
def test_training_records_what_auto_chose(channels):
    from edgeseq.train import DEFAULTS, train
    ds = _tiny()
    if channels == 1:
        one = [replace(sp, X=np.ascontiguousarray(sp.X[..., 6:])) for sp in (ds.train, ds.test)]
        ds = Dataset("tiny", *one, ds.labels, ["temp"])
    ckpt = train("gru", ds, replace(DEFAULTS["gru"], epochs=1), {"hidden": 4}, progress=False)
    aug = ckpt["metrics"]["augment"]
    want = DEFAULT if channels > 1 else LIGHT
    assert {k: aug[k] for k in STRENGTHS} == {k: getattr(want, k) for k in STRENGTHS}
    assert aug["why"].startswith("auto:")
    assert ckpt["train_config"]["augment"] == asdict(want)


def test_settings_parse_from_set_and_name_what_is_wrong():
    model, aug = parse_settings({"hidden": 8, "augment.rotate": 30, "augment.triples": "acc_x,acc_y,acc_z"},
                                features=FEATURES)
    assert model == {"hidden": 8}
    assert aug == replace(DEFAULT, rotate=30, triples=[["acc_x", "acc_y", "acc_z"]])
    assert parse_settings({"hidden": 8})[1] == AUTO                 # resolved by the data's channels in training
    assert parse_settings({"augment.jitter": 0.2}, features=["power"])[1] == replace(LIGHT, jitter=0.2)
    assert parse_settings({"augment.jitter": 0.2}, features=["a", "b"])[1] == replace(DEFAULT, jitter=0.2)
    assert parse_settings({"augment": "light"})[1] == LIGHT
    assert parse_settings({"augment": "none"})[1] == NONE
    assert parse_settings({"augment": "none", "augment.jitter": 0.1})[1] == Augment(jitter=0.1)
    assert parse_settings({}, base=NONE)[1] == NONE
    assert describe(NONE) == "none" and describe(Augment(jitter=0.05, rotate=15)) == "jitter=0.05 rotate=15"
    bad = {
        (("augment", "off"),): "augment takes auto, none, default, light, got 'off'",
        (("augment.wobble", 1),): "augment setting 'wobble' is unknown",
        (("augment.jitter", -0.1),): "augment.jitter (the noise std as a share of the channel's std) must be a "
                                     "number in 0..1, got -0.1",
        (("augment.rotate", 400),): "augment.rotate (the largest angle in degrees) must be a number in 0..180",
        (("augment.scale", "big"),): "augment.scale",
        (("augment.join", True),): "augment.join",
        (("augment.triples", "acc_x,acc_y"),): "augment.triples must be auto, none or channel names in threes",
        (("augment.triples", "a,b,c;c,d,e"),): "augment.triples names channel 'c' more than once",
        (("augment.triples", ""),): "augment.triples is empty; give auto",
        (("augment.triples", " ; "),): "augment.triples is empty; give auto",
    }
    for items, msg in bad.items():
        with pytest.raises(UsageError) as e:
            parse_settings(dict(items))
        assert msg in str(e.value) and "\n" not in str(e.value), str(e.value)
    with pytest.raises(UsageError, match="augment.timewarp"):
        check_augment(asdict(replace(DEFAULT, timewarp=float("nan"))))
    with pytest.raises(DataError, match="augment.triples names channel 'gx', which the data lacks"):
        Augmenter(Augment(rotate=10, triples=[["gx", "gy", "gz"]]), FEATURES)
    from edgeseq.train import TrainConfig, train
    for off in ({"augment": "none"}, {"augment.rotate": 0}):      # a misspelt channel is refused, rotated or not
        _, aug = parse_settings({**off, "augment.triples": "ax,ay,az"})
        with pytest.raises(DataError, match="augment.triples names channel 'ax', which the data lacks"):
            train("gru", _tiny(), TrainConfig(epochs=1, augment=aug), {"hidden": 4}, progress=False)


def _tiny(per_reading=False):
    tr, te = _split(n=6, T=30, seed=1, per_reading=per_reading), _split(n=6, T=30, seed=2, per_reading=per_reading)
    return Dataset("tiny", tr, te, ["a", "b", "c"], FEATURES)


@pytest.mark.parametrize("arch", ["gru", "bigru"])
def test_training_augments_the_training_split_only_and_is_seeded(arch):
    from edgeseq.train import TrainConfig, train
    ds = _tiny()
    copies = {k: [a.copy() for a in (getattr(ds, k).X, getattr(ds, k).Y)] for k in ("train", "test")}
    tc = TrainConfig(epochs=2, chunk=10, grace=2, augment="default")
    a = train(arch, ds, tc, {"hidden": 4}, progress=False)
    b = train(arch, ds, tc, {"hidden": 4}, progress=False)
    plain = train(arch, ds, replace(tc, augment="none"), {"hidden": 4}, progress=False)
    for k, (X, Y) in copies.items():
        np.testing.assert_array_equal(getattr(ds, k).X, X)
        np.testing.assert_array_equal(getattr(ds, k).Y, Y)
    assert a["loss_history"] == b["loss_history"]
    assert a["loss_history"] != plain["loss_history"]
    assert a["train_config"]["augment"] == asdict(DEFAULT)
    assert a["metrics"]["augment"]["triples"] == [["acc_x", "acc_y", "acc_z"], ["gyr_x", "gyr_y", "gyr_z"]]
    assert plain["metrics"]["augment"] is None and plain["train_config"]["augment"] == asdict(NONE)


def test_augment_none_trains_exactly_as_without_augmentation():
    from edgeseq.train import TrainConfig, train
    ds = _tiny(per_reading=True)
    a = train("gru", ds, TrainConfig(epochs=2, chunk=10, grace=2), {"hidden": 4}, progress=False)
    b = train("gru", ds, TrainConfig(epochs=2, chunk=10, grace=2, augment=Augment(rotate=0.0)), {"hidden": 4},
              progress=False)
    assert a["loss_history"] == b["loss_history"]


def test_only_the_training_split_is_augmented(monkeypatch):
    """Only `Augmenter.__call__` augments, and `train` calls it on its training split alone."""
    import edgeseq.data.augment as aug_mod
    from edgeseq.train import TrainConfig, train
    ds = _tiny()
    seen = []
    real = aug_mod.Augmenter.__call__
    monkeypatch.setattr(aug_mod.Augmenter, "__call__", lambda self, split: seen.append(split) or real(self, split))
    train("gru", ds, TrainConfig(epochs=3, chunk=10, grace=2, augment="default"), {"hidden": 4}, progress=False)
    assert len(seen) == 3 and all(s is ds.train for s in seen)


def test_cli_train_takes_augment_settings_and_refuses_bad_ones(tmp_path, monkeypatch):
    from edgeseq.cli import cli
    monkeypatch.chdir(tmp_path)
    ds = _tiny()
    np.savez("tiny.npz", X=ds.train.X, y=ds.train.y, lengths=ds.train.lengths, X_test=ds.test.X, y_test=ds.test.y,
             lengths_test=ds.test.lengths, features=np.array(FEATURES))
    runner = CliRunner()
    r = runner.invoke(cli, ["train", "--data", "tiny.npz", "--out", "run", "--epochs", "1", "--quiet",
                            "--set", "hidden=4", "--set", "augment=none", "--set", "augment.rotate=20"])
    assert r.exit_code == 0, r.output
    assert "augment: rotate=20 (acc_x/acc_y/acc_z, gyr_x/gyr_y/gyr_z)" in r.output
    r = runner.invoke(cli, ["train", "--data", "tiny.npz", "--out", "run", "--set", "augment.jitter=2"])
    assert "augment.jitter (the noise std as a share of the channel's std) must be a number in 0..1, got 2" \
        in one_error_line(r, 2)
    r = runner.invoke(cli, ["train", "--data", "tiny.npz", "--out", "run", "--set", "augment.rotate=10",
                            "--set", "augment.triples=ax,ay,az"])
    assert one_error_line(r, 1) == ("Error: augment.triples names channel 'ax', which the data lacks (it has "
                                    f"{', '.join(FEATURES)}); name three of its channels, or set augment.triples=auto")


def test_tune_space_may_choose_augmentation():
    from edgeseq.tune.space import check_space, describe as describe_trial
    assert check_space({"arch": ["gru"], "augment": ["default", "none"]})["augment"] == ["default", "none"]
    assert check_space({"arch": ["gru"], "augment": ["auto", "light"]})["augment"] == ["auto", "light"]
    with pytest.raises(UsageError, match="search space 'augment' must be a non-empty list of auto, none, default, light"):
        check_space({"arch": ["gru"], "augment": ["off"]})
    assert describe_trial("gru", {"hidden": 8}, {"augment": "none"}) == "gru hidden=8 augment=none"
