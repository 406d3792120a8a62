"""The decision layer at the gateway: events on their own subject, equal to one StreamSession
with the same settings per device; the decision state stored with each device (a restarted
gateway goes on exactly); per-reading predictions optional. Against a real nats-server started
per test (skipped, saying why, without nats-server or nats-py)."""

import asyncio

import numpy as np
import pytest

from edgeseq.gateway.batcher import Batcher
from edgeseq.runtime.decision import DecisionSpec
from edgeseq.runtime.session import StreamSession
from helpers import needs_server
from test_gateway import _run_gateway, broker  # noqa: F401  (the per-test server fixture)


def _readings(model, devices, T, seed=0):
    """Each device a stretch of BasicMotions test readings joined end to end (so it crosses from one
    activity to another), in the model's feature order."""
    from edgeseq.data import load_dataset
    from edgeseq.runtime.evaluate import joined_streams
    ds = load_dataset("basicmotions").for_model(StreamSession(model).features)
    X, _, _ = joined_streams(ds.test, devices, seed)
    return {f"dev-{i}": np.ascontiguousarray(X[i, 70:70 + T]) for i in range(devices)}


@pytest.fixture
def decided(exported, tmp_path):
    """An exported GRU with decision settings that fire often on random readings."""
    from export.decision import write_decision
    src = exported("gru")[0]
    labels = StreamSession(src).labels
    spec = DecisionSpec.make(labels, background=[labels[0]], alpha=0.5, threshold=0.4, min_duration=2,
                             refractory=1, release=2, rate_hz=10.0)
    return str(write_decision(src, spec, tmp_path / "gru-events.onnx")), spec


def _reference(model, X):
    """{device: [(seq, kind, label, onset position)]} from one session per device."""
    out = {}
    for d, rows in X.items():
        s = StreamSession(model)
        ev = []
        for t, x in enumerate(rows):
            _, fired = s.push_events(x)
            ev += [(t, e.kind, e.label, e.onset + 1) for e in fired]
        out[d] = ev
    return out


def test_batched_decisions_equal_one_session_per_device(decided):
    model, spec = decided
    b = Batcher(model, max_batch=4)
    X = _readings(model, devices=7, T=40, seed=3)
    devs = {d: b.new_device(d) for d in X}
    got = {d: [] for d in X}
    t = {d: 0 for d in X}
    rng = np.random.default_rng(2)
    while any(t[d] < 40 for d in X):
        ready = [d for d in X if t[d] < 40 and rng.random() < 0.6]
        b.step([(devs[d], X[d][t[d]]) for d in ready])
        for d, fired in zip(ready, b.events):
            got[d] += [(t[d], e.kind, e.label, e.onset + 1) for e in fired]
            t[d] += 1
    ref = _reference(model, X)
    assert sum(map(len, ref.values())) >= 10, "the settings should fire on these readings"
    assert got == ref


@needs_server
def test_gateway_events_equal_one_session_per_device_across_a_restart(broker, decided):  # noqa: F811
    from edgeseq.gateway import devices
    model, _ = decided
    X = _readings(model, devices=4, T=30, seed=3)
    ref = _reference(model, X)
    n = sum(map(len, ref.values()))
    first = {d: [e for e in ev if e[0] < 13] for d, ev in ref.items()}

    async def one(gw):
        await devices.replay(broker.url, X, stop=13)
        return await devices.events(broker.url, sum(map(len, first.values())), timeout=90)

    async def two(gw):
        await devices.replay(broker.url, X, start=13)
        return await devices.events(broker.url, n, timeout=90)
    asyncio.run(_run_gateway(model, broker.url, one, snapshot_every=5))
    gw, got = asyncio.run(_run_gateway(model, broker.url, two, snapshot_every=5, predictions=False))
    seen = {d: [(e["seq"], e["event"], e["label"], e["onset"]) for e in ev] for d, ev in got.items()}
    assert {d: seen.get(d, []) for d in ref} == ref
    assert gw.stats["predictions"] == 0 and gw.stats["events"] == n - sum(map(len, first.values()))


def test_events_only_needs_decision_settings(exported):
    from edgeseq.errors import UsageError
    from edgeseq.gateway.service import Gateway
    pytest.importorskip("nats")
    with pytest.raises(UsageError, match="no decision settings"):
        Gateway(exported("gru")[0], "nats://127.0.0.1:1", predictions=False)
