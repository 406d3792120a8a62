"""Training that scales with the data: the epoch plan, chunked single sequences, progress."""

import io
from dataclasses import replace

import numpy as np
import pytest
import torch

from edgeseq.data.synthetic import recordings
from edgeseq.models import build_model, make_config
from edgeseq.data import Split
from edgeseq.train import (DEFAULTS, Progress, TrainConfig, clock, lane_totals, pieces, plan_epoch, sequence_lanes,
                           sequence_logits, train)


def _work(plan) -> int:
    """Readings one epoch runs, padding included: the streams once, the lanes once (reused in
    turn where they take fewer updates than the streams)."""
    return plan.streams * plan.stream_len + plan.lanes * plan.chunk * plan.per_epoch


def test_basicmotions_plan_is_the_small_data_schedule(basicmotions):
    plan = plan_epoch(basicmotions.train.lengths, DEFAULTS["gru"], True)
    assert (plan.streams, plan.stream_len, plan.per_epoch) == (8, 500, 10)
    assert (plan.lanes, plan.lane_len, plan.seq_updates) == (8, 500, 10)       # 5 sequences of 100 a lane


@pytest.mark.parametrize("length", [100, 1_000, 10_000, 100_000])
def test_an_epochs_work_follows_its_readings_not_their_length(length):
    readings = 400_000
    tc = TrainConfig()
    plan = plan_epoch(np.full(readings // length, length), tc, True)
    assert plan.stream_updates <= tc.updates                                  # streams grew instead of updates
    assert plan.per_epoch <= 1.25 * tc.updates                               # lanes: a sequence at most past it
    assert plan.lanes == plan.streams
    assert 2.0 <= _work(plan) / readings <= 2.25, plan                        # each reading twice, little padding


def test_lanes_hold_every_reading_once_each_piece_from_zero_state():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 2_500, 97)
    Y = np.full((97, 2_500), -1, np.int64)
    X = np.zeros((97, 2_500, 2), np.float32)
    for i, n in enumerate(lengths):                      # reading t of sequence i holds (i, t)
        X[i, :n, 0], X[i, :n, 1], Y[i, :n] = i, np.arange(n), i % 5
    split = Split(X, Y[np.arange(97), lengths - 1], lengths, Y)
    tc = TrainConfig(chunk=40, streams=6, seq_max=700)
    plan = plan_epoch(lengths, tc, True)
    x, y, last, aux, fresh = sequence_lanes(split, plan, tc.seq_max, np.random.default_rng(1))
    assert x.shape == (plan.lanes, plan.lane_len, 2) and fresh.shape == (plan.lanes, plan.lane_len // 40)
    got = {(int(a), int(b)) for a, b in x[y >= 0]}
    assert got == {(i, t) for i, n in enumerate(lengths) for t in range(n)}     # every reading once
    assert (y >= 0).sum() == lengths.sum()
    for lane in range(plan.lanes):
        starts = np.flatnonzero(fresh[lane]) * 40
        for s in starts:                                  # a piece starts where a chunk does, at most 700 long
            i, t = x[lane, s]
            n = 1
            while s + n < plan.lane_len and y[lane, s + n] >= 0 and x[lane, s + n, 1] == t + n:
                n += 1
            assert n <= 700 and last[lane, s + n - 1] and last[lane, s:s + n].sum() == 1
            assert aux[lane, s + n // 4:s + n].all() and not aux[lane, s:s + n // 4].any()
    assert last.sum() == len(pieces(lengths, 700))
    assert plan.lane_len == int(lane_totals(pieces(lengths, 700), plan.lanes, 40).max())


# small models of every architecture that trains on streams: (arch, settings)
SMALL = [("gru", {"hidden": 8}), ("lstm", {"hidden": 8, "layers": 2}), ("ssm", {"d_model": 8, "d_state": 4}),
         ("transformer", {"d_model": 8, "heads": 2, "window": 7})]


def _seeded(arch, settings):
    """An untrained model on 3 channels and 4 classes, in eval mode, built after torch.manual_seed(0)
    (the readings a test draws next come from the same seeded generator)."""
    torch.manual_seed(0)
    return build_model(arch, make_config(arch, n_features=3, n_classes=4, **settings)).eval()


@pytest.mark.parametrize("arch,settings", SMALL)
def test_a_fresh_row_forgets_its_carry(arch, settings):
    model = _seeded(arch, settings)
    X = torch.randn(3, 30, 3)
    with torch.no_grad():
        _, carry = model.forward_stream(X[:, :20])
        fresh = torch.tensor([True, False, True])
        mixed, _ = model.forward_stream(X[:, 20:], carry, fresh)
        alone, _ = model.forward_stream(X[:, 20:])
        carried, _ = model.forward_stream(X[:, 20:], carry)
    assert torch.allclose(mixed[fresh], alone[fresh], atol=1e-6)
    assert torch.allclose(mixed[~fresh], carried[~fresh], atol=1e-6)
    assert not torch.allclose(alone[~fresh], carried[~fresh], atol=1e-3)      # the carry mattered


@pytest.mark.parametrize("arch,settings", SMALL)
def test_chunked_sequence_logits_equal_one_pass(arch, settings):
    model = _seeded(arch, settings)
    X = torch.randn(5, 61, 3)
    lengths = torch.tensor([61, 13, 40, 1, 29])
    with torch.no_grad():
        whole = model(X, lengths)
    chunked = sequence_logits(model, X, lengths, chunk=9, batch=2)
    scale = float(whole.abs().max())
    assert chunked.shape == whole.shape
    assert torch.allclose(chunked, whole, atol=1e-5 * scale + 1e-6), (chunked - whole).abs().max()


def test_progress_is_timed_without_changing_the_run():
    ds = recordings(14, 120, n_test=7, seed=1)
    tc = replace(DEFAULTS["gru"], epochs=2, chunk=20, updates=3)
    quiet = train("gru", ds, tc, {"hidden": 8}, progress=False)
    loud = train("gru", ds, tc, {"hidden": 8}, progress=True)
    assert quiet["loss_history"] == loud["loss_history"]
    for k, v in quiet["state_dict"].items():
        assert torch.equal(v, loud["state_dict"][k]), k
    m = quiet["metrics"]
    assert m["updates"] == 2 * m["plan"]["per_epoch"]
    assert m["readings_per_second"] > 0


def test_progress_lines_when_not_on_a_terminal():
    ds = recordings(14, 120, n_test=7, seed=1)
    plan = plan_epoch(ds.train.lengths, TrainConfig(updates=3, chunk=20), True)
    out = io.StringIO()
    bar = Progress("gru", ds, plan, 2, True, every=0.0, stream=out)
    bar.start(1000.0)
    for i in range(bar.total):
        bar.update(i // plan.per_epoch, 0.5, 100 * (i + 1))
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"train gru on synthetic-imu: 14 sequences, {plan.readings:,} readings x 6 channels, "
                               f"7 classes; 2 epochs x {plan.per_epoch} updates (")
    assert lines[0].endswith(f"about {clock(1000.0 * bar.total)} (estimated from timed updates)")
    assert clock(59.4) == "59s" and clock(185) == "3m05s" and clock(7800) == "2h10m"
    assert lines[1].startswith("  that is long: fewer epochs (--epochs)")
    assert sum(" left" in line and "readings/s" in line for line in lines) == bar.total
    assert lines[-1].startswith(f"train gru: {bar.total} updates in ")
    out = io.StringIO()                          # the default schedule: the budget may grow
    Progress("gru", ds, plan, 2, True, stream=out, early=True, held="3 of 14", extend=2).start(1.0)
    first = out.getvalue().splitlines()[0]
    assert "up to 2 epochs" in first and first.endswith(
        "for that (estimated from timed updates; the budget grows up to 2x while the model is still learning "
        "its training data)")


def test_synthetic_recordings_are_seeded_and_shaped():
    a, b = recordings(21, 300, n_test=7, seed=3), recordings(21, 300, n_test=7, seed=3)
    assert np.array_equal(a.train.X, b.train.X) and np.array_equal(a.test.y, b.test.y)
    assert a.train.X.shape[0] == 21 and a.train.X.shape[2] == 6 and len(a.test) == 7
    assert set(a.train.y.tolist()) == set(range(7))
    assert ((a.train.lengths >= 285) & (a.train.lengths <= 315)).all()
    with pytest.raises(ValueError):
        recordings(0, 300)
