"""The decision layer: `Decider` semantics on hand-made probabilities (smoothing, thresholds,
minimum duration, release, refractory time, background, several streams), `DecisionSpec`
validation, the decision state in StreamSession snapshots and state files on both backends,
`write_decision`, `calibrate` on probabilities whose answer is known, and `edgeseq calibrate`."""

import json
from types import SimpleNamespace

import numpy as np
import onnx
import pytest

from edgeseq.cli import cli
from edgeseq.data import DATA_DIR
from edgeseq.errors import ModelFileError, ReadingError, UsageError
from edgeseq.runtime import StreamSession, native
from edgeseq.runtime.calibrate import detections, score_orders
from edgeseq.runtime.decision import STATE_NAMES, Decider, DecisionSpec
from edgeseq.runtime.evaluate import joined_streams
from edgeseq.runtime.statefile import load_state, save_state
from helpers import one_error_line

LABELS = ("idle", "a", "b")           # idle is the background
ROW = {"i": 0, "a": 1, "b": 2}


def spec(**kw) -> DecisionSpec:
    """No smoothing, threshold 0.5, minimum duration 1, release 1, no refractory time, unless told."""
    kw = {"background": ("idle",), "smoothing": "none", "threshold": 0.5, "min_duration": 1, **kw}
    return DecisionSpec.make(LABELS, **kw)


def onehot(seq: str) -> np.ndarray:
    """float32 [len(seq), 3]: probability 1 on the class each letter names (i, a, b)."""
    P = np.zeros((len(seq), 3), np.float32)
    P[np.arange(len(seq)), [ROW[c] for c in seq]] = 1
    return P


def run(dec: Decider, P) -> list:
    """(stream, kind, label, position, onset) of every event over P [T, classes] (one stream) or
    [T, streams, classes]."""
    out = []
    for p in np.asarray(P, np.float32):
        out += [(e.stream, e.kind, e.label, e.position, e.onset) for e in dec.update(p.reshape(dec.streams, -1))]
    return out


def one(seq, **kw) -> list:
    """(kind, label, position, onset) of one stream's events over the one-hot readings `seq`."""
    return [e[1:] for e in run(Decider(spec(**kw)), onehot(seq))]


# -- Decider semantics --------------------------------------------------------------------------

def test_ema_first_reading_sets_the_average_then_it_follows_alpha():
    d = Decider(spec(smoothing="ema", alpha=0.25))
    p0, p1 = np.array([[0.7, 0.2, 0.1]], np.float32), np.array([[0.1, 0.3, 0.6]], np.float32)
    d.update(p0)
    assert np.array_equal(d.smooth, p0)                        # s = p on a stream's first reading
    d.update(p1)
    np.testing.assert_allclose(d.smooth, p0 + 0.25 * (p1 - p0), atol=1e-7)
    # 'a' at 1 after idle: s_a = 1 - 0.75^k crosses 0.5 (and passes idle's 0.75^k) at k = 3
    assert one("iaaaaa", smoothing="ema", alpha=0.25) == [("start", "a", 3, 3)]
    assert one("iaaaaa", smoothing="ema", alpha=1.0) == [("start", "a", 1, 1)]


def test_mean_smoothing_averages_the_last_window_readings():
    d = Decider(spec(smoothing="mean", window=3))
    P = np.array([[0.9, 0.1, 0.0], [0.0, 1.0, 0.0], [0.3, 0.3, 0.4], [0.0, 0.0, 1.0]], np.float32)
    want = [P[0], (P[0] + P[1]) / 2, (P[0] + P[1] + P[2]) / 3, (P[1] + P[2] + P[3]) / 3]
    for p, w in zip(P, want):
        d.update(p[None])
        np.testing.assert_allclose(d.smooth[0], w, atol=1e-6)
    # a mean of 3 one-hot readings: 'a' is top and >= 0.5 once two of the last three are 'a'
    assert one("iiaaa", smoothing="mean", window=3) == [("start", "a", 3, 3)]
    assert one("iiaia", smoothing="mean", window=3) == [("start", "a", 4, 4)]    # a, i, a: 2/3


def test_threshold_is_per_class_and_inclusive_and_the_top_class_must_pass_it():
    s = spec(threshold={"a": 0.5, "b": 0.8})

    def events(p):
        return [e[1:3] for e in run(Decider(s), np.array([p] * 3, np.float32))]
    assert events([0.51, 0.49, 0.0]) == []                  # idle is top: no candidate
    assert events([0.0, 0.49, 0.51]) == []                  # b top but under its 0.8
    assert events([0.25, 0.0, 0.75]) == []
    assert events([0.2, 0.0, 0.8]) == [("start", "b")]      # exactly the threshold
    assert events([0.4, 0.5, 0.1]) == [("start", "a")]
    # a class passing its threshold while not the top class is no candidate
    assert [e[1:3] for e in run(Decider(spec(threshold={"a": 0.3, "b": 0.5})),
                                 np.array([[0.0, 0.35, 0.65]] * 2, np.float32))] == [("start", "b")]


def test_min_duration_starts_on_the_nth_reading_in_a_row_with_its_onset():
    assert one("iaaaaa", min_duration=3) == [("start", "a", 3, 1)]
    assert one("aaiaaa", min_duration=3) == [("start", "a", 5, 3)]        # a break starts the count again
    assert one("aabbaa", min_duration=3) == []
    assert one("iaaa", min_duration=1) == [("start", "a", 1, 1)]
    assert one("bbaaaaaa", min_duration={"a": 4, "b": 2}) == [("start", "b", 1, 0), ("end", "b", 2, 0),
                                                            ("start", "a", 5, 2)]


def test_a_dip_shorter_than_release_does_not_split_an_event():
    seq = "aaiiaaiiii"
    assert one(seq, release=3) == [("start", "a", 0, 0), ("end", "a", 8, 0)]     # the 3rd reading in a row
    assert one(seq, release=1) == [("start", "a", 0, 0), ("end", "a", 2, 0), ("start", "a", 4, 4),
                                   ("end", "a", 6, 4)]
    # during the dip another class cannot start; it starts in the call that ends the event
    assert one("aabbbb", release=3) == [("start", "a", 0, 0), ("end", "a", 4, 0), ("start", "b", 4, 2)]


def test_refractory_time_blocks_the_readings_after_a_start_and_delays_a_start():
    # a start at reading 0 with refractory R blocks readings 1..R; b, the candidate since 1, starts at R + 1
    for R, at in ((0, 1), (1, 2), (3, 4)):
        assert one("abbbbbb", refractory=R) == [("start", "a", 0, 0), ("end", "a", 1, 0), ("start", "b", at, 1)], R
    # a start inside the refractory time whose class is no longer the candidate never comes
    assert one("aiaiiiii", refractory=3) == [("start", "a", 0, 0), ("end", "a", 1, 0)]
    # a start after it has passed is not delayed
    assert one("aiiiib", refractory=3) == [("start", "a", 0, 0), ("end", "a", 1, 0), ("start", "b", 5, 5)]
    # the same class is held back too
    assert one("aiaaaa", refractory=3) == [("start", "a", 0, 0), ("end", "a", 1, 0), ("start", "a", 4, 2)]


def test_background_never_starts_an_event():
    assert one("iiiiiiii") == []
    d = Decider(spec())
    assert np.isinf(d.threshold[0, 0]) and d.min_duration[0, 0] == 0
    assert run(d, np.array([[1.0, 0.0, 0.0]] * 10, np.float32)) == []
    assert d.state_label() == [None]
    # without a background class the same readings start an "idle" event
    d = Decider(DecisionSpec.make(LABELS, (), smoothing="none", threshold=0.5, min_duration=1))
    assert [e[1:3] for e in run(d, onehot("iii"))] == [("start", "idle")]
    assert d.state_label() == ["idle"]


def test_ends_come_before_starts_in_one_call():
    d = Decider(spec(), streams=2)
    P = np.stack([onehot("ia"), onehot("ab")], axis=1)                # [T, 2 streams, 3]
    assert run(d, P) == [(1, "start", "a", 0, 0),
                         (1, "end", "a", 1, 0), (0, "start", "a", 1, 1), (1, "start", "b", 1, 1)]
    assert d.state_label() == ["a", "b"]


def _random_probs(rng, T, S, C=3):
    """[T, S, C] probabilities in runs of one dominant class, with noise: events of every kind."""
    P = np.empty((T, S, C), np.float32)
    for s in range(S):
        t = 0
        while t < T:
            n, c = int(rng.integers(1, 12)), int(rng.integers(C))
            x = rng.dirichlet(np.ones(C), size=n) * 0.5
            x[:, c] += 0.5
            P[t:t + n, s] = x[:T - t]
            t += n
    return P


@pytest.mark.parametrize("smoothing", ["ema", "mean", "none"])
def test_streams_are_independent_and_each_setting_is_its_own(smoothing):
    rng = np.random.default_rng(0)
    P = _random_probs(rng, 300, 4)
    specs = [spec(smoothing=smoothing, alpha=0.5, window=4, threshold=0.55, min_duration=2, refractory=5, release=2),
             spec(smoothing=smoothing, alpha=0.3, window=2, threshold={"a": 0.6, "b": 0.7}, min_duration=1,
                  refractory=0, release=1),
             spec(smoothing=smoothing, alpha=1.0, window=7, threshold=0.5, min_duration=3, refractory=2, release=4),
             spec(smoothing=smoothing, alpha=0.8, window=1, threshold=0.9, min_duration=1, refractory=9, release=3)]
    together = run(Decider(specs), P)
    assert len(together) > 20
    for s in range(4):
        alone = [(s,) + e[1:] for e in run(Decider(specs[s]), P[:, s])]
        assert [e for e in together if e[0] == s] == alone, s
    # one stream's readings never change another's events
    Q = P.copy()
    Q[:, 2] = _random_probs(np.random.default_rng(1), 300, 1)[:, 0]
    changed = run(Decider(specs), Q)
    assert [e for e in changed if e[0] != 2] == [e for e in together if e[0] != 2]
    assert [e for e in changed if e[0] == 2] != [e for e in together if e[0] == 2]


def test_reset_one_stream_forgets_it_alone():
    rng = np.random.default_rng(2)
    P = _random_probs(rng, 120, 3)
    s = spec(smoothing="mean", window=5, min_duration=2, refractory=3, release=2)
    d = Decider(s, streams=3)
    run(d, P[:60])
    before = d.snapshot()
    d.reset(1)
    fresh = Decider(s, streams=3).snapshot()
    after = d.snapshot()
    for k in STATE_NAMES:
        assert np.array_equal(after[k][1], fresh[k][1]), k
        assert np.array_equal(after[k][[0, 2]], before[k][[0, 2]]), k
    # stream 1 then runs as a new stream (positions from 0); the others as if nothing happened
    rest = run(d, P[60:])
    assert [e for e in rest if e[0] == 1] == [(1,) + e[1:] for e in run(Decider(s), P[60:, 1])]
    whole = run(Decider(s, streams=3), P)
    assert [e for e in rest if e[0] != 1] == [e for e in whole if e[0] != 1 and e[3] >= 60]
    d.reset()
    assert all(np.array_equal(d.snapshot()[k], fresh[k]) for k in STATE_NAMES)


def test_decider_check_refuses_what_the_step_cannot_reach():
    s = spec(refractory=4, release=3)
    d = Decider(s, streams=2)
    run(d, np.stack([onehot("iaaab"), onehot("bbbbi")], axis=1))
    good = d.snapshot()
    loaded = Decider(s, streams=2)
    loaded.load(loaded.check(good))
    assert all(np.array_equal(loaded.snapshot()[k], good[k]) for k in STATE_NAMES)

    def bad(name, value, match):
        snap = {k: a.copy() for k, a in good.items()}
        snap[name] = value(snap[name])
        with pytest.raises(UsageError, match=match):
            d.check(snap)
    bad("smooth", lambda a: np.zeros((2, 4), np.float32), r"'smooth' has shape \(2, 4\), this session needs \(2, 3\)")
    bad("smooth", lambda a: np.where(a > 0.5, np.nan, a), "'smooth' must hold finite numbers")
    bad("smooth", lambda a: a + 2, r"probabilities must lie in \[0, 1\]")
    bad("active", lambda a: np.array([3, -1]), "'active' names a class that cannot start an event")
    bad("active", lambda a: np.array([0, -1]), "'active' names a class that cannot start an event")
    bad("run_cls", lambda a: np.array([-2, 1]), "'run_cls' names a class that cannot start an event")
    bad("cool", lambda a: np.array([5, 0]), "exceeds the refractory or release time")
    bad("gone", lambda a: np.array([3, 0]), "exceeds the refractory or release time")
    bad("seen", lambda a: np.array([-1, 5]), "'seen' must be >= 0")
    bad("seen", lambda a: a.astype(np.float64), "'seen' must hold integers")
    snap = dict(good)
    del snap["onset"]
    with pytest.raises(UsageError, match="has no 'onset'"):
        d.check(snap)


# -- DecisionSpec validation -----------------------------------------------------------------

GOOD = {"background": ["idle"], "smoothing": "ema", "alpha": 0.3, "window": 8, "threshold": {"a": 0.6, "b": 0.7},
        "min_duration": {"a": 2, "b": 3}, "refractory": 10, "release": 2, "rate_hz": 50.0, "calibration": None}


@pytest.mark.parametrize("change, message", [
    ({"colour": 1}, "decision: unknown setting 'colour'; the settings are background"),
    ({"threshold": {"a": 0.6, "b": 0.7, "c": 0.5}}, "decision: threshold names 'c', not one of the model's labels"),
    ({"threshold": {"a": 0.6, "b": 0.7, "idle": 0.5}}, "decision: threshold names 'idle', a background label"),
    ({"min_duration": {"a": 2, "b": 3, "idle": 1}}, "decision: min_duration names 'idle', a background label"),
    ({"threshold": {"a": 0.6}}, "decision: threshold has no value for 'b'; give one per non-background label"),
    ({"min_duration": {"b": 3}}, "decision: min_duration has no value for 'a'"),
    ({"threshold": {"a": 0, "b": 0.7}}, "decision: threshold['a'] must be a probability in (0, 1], got 0"),
    ({"threshold": {"a": 0.6, "b": 1.5}}, "decision: threshold['b'] must be a probability in (0, 1], got 1.5"),
    ({"threshold": {"a": 0.6, "b": True}}, "decision: threshold['b'] must be a probability in (0, 1], got True"),
    ({"min_duration": {"a": 0, "b": 3}}, "decision: min_duration['a'] must be a whole number of readings from 1"),
    ({"min_duration": {"a": 2.5, "b": 3}}, "decision: min_duration['a'] must be a whole number of readings from 1"),
    ({"refractory": -1}, "decision: refractory must be a whole number of readings from 0"),
    ({"release": 0}, "decision: release must be a whole number of readings from 1"),
    ({"smoothing": "median"}, "decision: smoothing must be one of ema, mean, none, got 'median'"),
    ({"alpha": 0}, "decision: alpha must be a probability in (0, 1], got 0"),
    ({"window": 0}, "decision: window must be a whole number of readings from 1 to 256, got 0"),
    ({"background": ["idle", "a", "b"], "threshold": {}, "min_duration": {}},
     "decision: every label is background; leave at least one class that can start an event"),
    ({"background": ["rest"]}, "decision: background label 'rest' is not one of the model's labels (idle, a, b)"),
    ({"rate_hz": 0}, "decision: rate_hz must be a positive number of readings per second or null, got 0"),
    ({"rate_hz": -10.0}, "decision: rate_hz must be a positive number of readings per second or null"),
    ({"rate_hz": float("nan")}, "decision: rate_hz must be a positive number of readings per second or null, got nan"),
    ({"rate_hz": float("inf")}, "decision: rate_hz must be a positive number of readings per second or null"),
    ({"calibration": [1]}, "decision: calibration must be an object or null"),
])
def test_spec_refuses_bad_settings_in_one_line(change, message):
    with pytest.raises(UsageError) as e:
        DecisionSpec.from_json({**GOOD, **change}, LABELS)
    assert str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value)


def test_spec_make_and_json_round_trip():
    s = DecisionSpec.from_json(GOOD, LABELS)
    assert s.labels == LABELS and s.background == ("idle",) and s.threshold == {"a": 0.6, "b": 0.7}
    assert s.refractory == 10 and s.rate_hz == 50.0
    back = DecisionSpec.from_json(json.loads(json.dumps(s.to_json())), LABELS)
    assert back == s and back.to_json() == GOOD
    c = DecisionSpec.make(LABELS, ["idle"], smoothing="mean", window=5, threshold=0.7, min_duration=4,
                          calibration={"met": True, "f1": 0.9})
    assert c.threshold == {"a": 0.7, "b": 0.7} and c.min_duration == {"a": 4, "b": 4} and c.window == 5
    assert DecisionSpec.from_json(json.loads(json.dumps(c.to_json())), LABELS) == c
    assert "background" not in DecisionSpec.make(LABELS).to_json()["threshold"]
    assert DecisionSpec.make(LABELS).threshold == {"idle": 0.5, "a": 0.5, "b": 0.5}       # no background
    assert DecisionSpec.from_json({"background": "idle", "threshold": {"a": 1, "b": 0.5},
                                   "min_duration": {"a": 1, "b": 1}}, LABELS).background == ("idle",)
    assert "mean of 5 readings, threshold 0.7, min duration 4 readings" in c.describe()
    one = DecisionSpec.make(LABELS, ["idle"], min_duration=1, refractory=0, release=1).describe()
    assert "min duration 1 reading, refractory 0 readings, release 1 reading, background idle" in one
    with pytest.raises(UsageError, match="must be a JSON object, got list"):
        DecisionSpec.from_json([], LABELS)


# -- StreamSession with a decision -------------------------------------------------------------

BACKENDS = ["onnxruntime"] + (["native"] if native.available() else [])


@pytest.fixture(scope="module")
def gru(exported):
    return exported("gru")[0]


@pytest.fixture(scope="module")
def streams(basicmotions):
    """Readings [T, 3, F]: two test sequences of each class joined end to end, in 3 orders."""
    test = basicmotions.test
    rows = np.concatenate([np.flatnonzero(test.y == c)[:2] for c in range(len(basicmotions.labels))])
    X, _, _ = joined_streams(test.take(rows), orders=3, seed=1)
    return np.ascontiguousarray(X.transpose(1, 0, 2))


def gru_spec(labels, **kw):
    kw = {"smoothing": "ema", "alpha": 0.5, "threshold": 0.6, "min_duration": 2, "refractory": 5, "release": 2, **kw}
    return DecisionSpec.make(labels, ["Standing"], **kw)


def decided(gru, backend, streams=3):
    """A session of the GRU with `gru_spec`'s settings on `backend`."""
    return StreamSession(gru, streams=streams, backend=backend,
                         decision=gru_spec(StreamSession(gru, decision=False).labels))


def push_all(sess, X) -> tuple:
    """(probabilities [T, streams, C], every event as a tuple) of pushing X [T, streams, F]."""
    probs, events = [], []
    for x in X:
        p, ev = sess.push_events(x)
        probs.append(p)
        events += [(len(probs) - 1, *e) for e in ev]
    return np.stack(probs), events


def assert_same_snapshot(a, b):
    assert np.array_equal(a["position"], b["position"])
    assert len(a["state"]) == len(b["state"])
    for x, y in zip(a["state"], b["state"]):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    assert (a.get("decision") is None) == (b.get("decision") is None)
    for k in (a.get("decision") or {}):
        assert a["decision"][k].dtype == b["decision"][k].dtype and np.array_equal(a["decision"][k],
                                                                                  b["decision"][k]), k


@pytest.mark.parametrize("backend", BACKENDS)
def test_push_events_gives_the_plain_probabilities_and_the_deciders_events(gru, streams, backend):
    plain = StreamSession(gru, streams=3, backend=backend, decision=False)
    assert plain.decision is None and plain.decision_state() == [None] * 3
    with pytest.raises(UsageError, match="this session has no decision settings"):
        plain.push_events(streams[0])
    want = np.stack([plain.push(x) for x in streams])
    spec_ = gru_spec(plain.labels)
    sess = StreamSession(gru, streams=3, backend=backend, decision=spec_)
    assert sess.backend == backend and sess.decision == spec_
    probs, events = push_all(sess, streams)
    assert probs.dtype == np.float32 and np.array_equal(probs, want)          # bit for bit
    # the events are the decider's on those probabilities
    d = Decider(spec_, 3)
    assert events == [(t, *e) for t, p in enumerate(want) for e in d.update(p)]
    assert {e[3] for e in events if e[2] == "start"} == {"Running", "Walking", "Badminton"}
    assert all(e[2] == "end" or e[3] != "Standing" for e in events)
    assert sess.decision_state() == d.state_label()
    # a JSON object works the same as the spec
    assert StreamSession(gru, streams=3, backend=backend, decision=spec_.to_json()).decision == spec_


def test_bad_decision_arguments_are_refused(gru):
    with pytest.raises(UsageError, match="decision settings were made for other labels than this model's"):
        StreamSession(gru, decision=spec())
    with pytest.raises(UsageError, match="decision: threshold names 'Jumping', not one of the model's labels"):
        StreamSession(gru, decision={"threshold": {"Jumping": 0.5}})
    with pytest.raises(UsageError, match="decision must be None"):
        StreamSession(gru, decision="ema")


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_push_advances_the_decider_and_a_bad_reading_changes_nothing(gru, streams, backend):
    sess = StreamSession(gru, streams=3, backend=backend, decision=gru_spec(["Standing", "Running", "Walking",
                                                                            "Badminton"]))
    for t, x in enumerate(streams[:40]):
        sess.push(x)                                           # plain push: the decider advances too
        assert list(sess.snapshot()["decision"]["seen"]) == [t + 1] * 3
    assert any(label is not None for label in sess.decision_state())
    before = sess.snapshot()
    bad = streams[40].copy()
    bad[1, 2] = np.nan
    with pytest.raises(ReadingError):
        sess.push_events(bad)
    with pytest.raises(ReadingError):
        sess.push(bad)
    assert_same_snapshot(sess.snapshot(), before)
    # push_logits advances the model only, as documented
    sess.push_logits(streams[40])
    after = sess.snapshot()
    assert list(after["position"]) == [41] * 3 and list(after["decision"]["seen"]) == [40] * 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_snapshot_restore_gives_the_same_future_events(gru, streams, backend):
    labels = StreamSession(gru, decision=False).labels
    sess = decided(gru, backend)
    push_all(sess, streams[:150])
    snap = sess.snapshot()
    assert set(snap["decision"]) == set(STATE_NAMES)
    probs, events = push_all(sess, streams[150:])
    assert events                                               # something happens after the snapshot
    other = StreamSession(gru, streams=3, backend=backend, decision=gru_spec(labels))
    other.restore(snap)
    assert_same_snapshot(other.snapshot(), snap)
    p2, e2 = push_all(other, streams[150:])
    assert e2 == events and np.array_equal(p2, probs)
    sess.restore(snap)                                          # and back in the session itself
    assert push_all(sess, streams[150:])[1] == events


@pytest.mark.parametrize("backend", BACKENDS)
def test_restore_of_a_damaged_decision_state_changes_nothing(gru, streams, backend):
    sess = decided(gru, backend)
    push_all(sess, streams[:100])
    good = sess.snapshot()
    push_all(sess, streams[100:160])
    now = sess.snapshot()
    assert not np.array_equal(now["position"], good["position"])

    def damaged(name, value):
        snap = {**good, "decision": {k: a.copy() for k, a in good["decision"].items()}}
        snap["decision"][name] = value(snap["decision"][name])
        return snap
    cases = [
        (damaged("smooth", lambda a: a[:, :3]), r"'smooth' has shape \(3, 3\), this session needs \(3, 4\)"),
        (damaged("smooth", lambda a: np.full_like(a, np.nan)), "'smooth' must hold finite numbers"),
        (damaged("active", lambda a: np.array([4, -1, -1])), "'active' names a class that cannot start an event"),
        (damaged("active", lambda a: np.array([0, -1, -1])), "'active' names a class that cannot start an event"),
        (damaged("run_cls", lambda a: np.array([0, 7, 1])), "'run_cls' names a class that cannot start an event"),
        ({**good, "decision": "nope"}, "the decision state must be a mapping of arrays"),
    ]
    for snap, match in cases:
        with pytest.raises(UsageError, match=match) as e:
            sess.restore(snap)
        assert str(e.value).startswith("snapshot: ") and "\n" not in str(e.value)
        assert_same_snapshot(sess.snapshot(), now)
    # a good decision state with a damaged model state changes nothing either
    with pytest.raises(UsageError):
        sess.restore({**good, "state": [np.full_like(a, np.nan) for a in good["state"]]})
    assert_same_snapshot(sess.snapshot(), now)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_snapshot_without_decision_resets_the_decider_and_reset_resets_it(gru, streams, backend):
    plain = StreamSession(gru, streams=3, backend=backend, decision=False)
    for x in streams[:80]:
        plain.push(x)
    snap = plain.snapshot()
    assert "decision" not in snap
    spec_ = gru_spec(plain.labels)
    sess = StreamSession(gru, streams=3, backend=backend, decision=spec_)
    push_all(sess, streams[:120])
    sess.restore(snap)
    got = sess.snapshot()
    assert_same_snapshot({**got, "decision": None}, snap)
    assert_same_snapshot(got, {**snap, "decision": Decider(spec_, 3).snapshot()})
    # and the other way: a snapshot with a decision state restores into a session without settings
    push_all(sess, streams[:120])
    plain.restore(sess.snapshot())
    assert_same_snapshot(plain.snapshot(), {**sess.snapshot(), "decision": None})
    # reset(stream) forgets that stream's decision state with its model state
    fresh = Decider(spec_, 3).snapshot()
    before = sess.snapshot()
    sess.reset(2)
    after = sess.snapshot()
    for k in STATE_NAMES:
        assert np.array_equal(after["decision"][k][2], fresh[k][2]), k
        assert np.array_equal(after["decision"][k][:2], before["decision"][k][:2]), k
    assert after["position"][2] == 0 and list(after["position"][:2]) == list(before["position"][:2])
    sess.reset()
    assert_same_snapshot({**sess.snapshot(), "state": [], "position": 0},
                         {"state": [], "position": 0, "decision": fresh})


# -- state files -----------------------------------------------------------------------------

def test_state_file_carries_the_decision_state(gru, streams, tmp_path):
    labels = StreamSession(gru, decision=False).labels
    spec_ = gru_spec(labels)
    sess = StreamSession(gru, streams=3, decision=spec_)
    push_all(sess, streams[:150])
    path = tmp_path / "state.bin"
    header = save_state(path, sess, readings=150)
    assert header["decision"] is True
    probs, events = push_all(sess, streams[150:])
    other = StreamSession(gru, streams=3, decision=spec_)
    assert load_state(path, other)["decision"] is True
    p2, e2 = push_all(other, streams[150:])
    assert e2 == events and np.array_equal(p2, probs)

    # saved with a decision, loaded without one: the model state is restored, the decision state unused
    plain = StreamSession(gru, streams=3, decision=False)
    load_state(path, plain)
    assert np.array_equal(np.stack([plain.push(x) for x in streams[150:]]), probs)

    # saved without a decision, loaded with one: the decider starts afresh
    plain = StreamSession(gru, streams=3, decision=False)
    for x in streams[:90]:
        plain.push(x)
    bare = tmp_path / "bare.bin"
    assert save_state(bare, plain, readings=90)["decision"] is False
    sess = StreamSession(gru, streams=3, decision=spec_)
    push_all(sess, streams[:120])
    assert load_state(bare, sess)["decision"] is False
    assert_same_snapshot(sess.snapshot(), {**plain.snapshot(), "decision": Decider(spec_, 3).snapshot()})


# -- write_decision and the model file's settings ----------------------------------------------

def test_write_decision_writes_reads_back_and_fails_atomically(gru, tmp_path):
    from edgeseq.runtime.model import open_model
    from export.decision import write_decision
    labels = StreamSession(gru, decision=False).labels
    s = gru_spec(labels, rate_hz=10.0, calibration={"met": True})
    out = tmp_path / "gru-events.onnx"
    original = gru.read_bytes()
    assert write_decision(gru, s, out) == out
    assert gru.read_bytes() == original                       # the source is never touched
    assert open_model(out)[1].decision == s.to_json()
    sess = StreamSession(out, streams=2)                        # decision=None: the file's own settings
    assert sess.decision == s
    assert StreamSession(out, decision=False).decision is None
    assert open_model(gru)[1].decision is None and StreamSession(gru).decision is None

    written = out.read_bytes()
    with pytest.raises(UsageError, match="the decision settings were made for other labels than the model's"):
        write_decision(out, spec(), out)
    assert out.read_bytes() == written
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model at all")
    with pytest.raises(ModelFileError, match="is not an ONNX model file"):
        write_decision(junk, s, out)
    assert out.read_bytes() == written
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []       # no temporary left

    assert write_decision(out, None, out) == out                # None removes the settings
    assert open_model(out)[1].decision is None and StreamSession(out).decision is None
    assert not any(p.key == "edgeseq.decision" for p in onnx.load(str(out)).metadata_props)


def test_a_model_file_with_bad_decision_settings_is_refused(gru, tmp_path):
    m = onnx.load(str(gru))
    m.metadata_props.add(key="edgeseq.decision", value=json.dumps(
        {"background": ["Standing"], "threshold": {"Running": 0.5, "Walking": 0.5, "Badminton": 2},
         "min_duration": {"Running": 1, "Walking": 1, "Badminton": 1}}))
    bad = tmp_path / "bad.onnx"
    onnx.save(m, str(bad))
    with pytest.raises(ModelFileError, match=r"edgeseq.decision threshold\['Badminton'\] must be a probability"):
        StreamSession(bad)


# -- calibrate on probabilities whose answer is known --------------------------------------------

def test_detections_give_intervals_and_open_events_end_at_the_stream_end():
    P = np.stack([onehot("iaaiibbb"), onehot("bbiiaaai")])           # [orders, L, C]
    s1, s2 = spec(), spec(min_duration=2, release=2)
    det = detections(P, [s1, s2])
    assert det[0] == [[(1, 1, 3), (2, 5, 8)], [(2, 0, 2), (1, 4, 7)]]
    assert det[1] == [[(1, 2, 4), (2, 6, 8)], [(2, 1, 3), (1, 5, 8)]]    # one reading later, ends one later
    Y = np.array([[0, 1, 1, 0, 0, 2, 2, 2], [2, 2, 0, 0, 1, 1, 1, 0]])
    r = score_orders(det[0], Y, list(LABELS), [0], rate_hz=1.0)
    assert (r["events"], r["detections"], r["matched"], r["false_alarms"]) == (4, 4, 4, 0)
    assert r["readings"] == 16 and r["hours"] == pytest.approx(16 / 3600)
    assert r["delay_readings"]["median"] == 0
    r = score_orders(det[1], Y, list(LABELS), [0], rate_hz=1.0)
    assert (r["events"], r["matched"], r["false_alarms"], r["delay_readings"]["median"]) == (4, 4, 0, 1)
    r = score_orders([[(1, 1, 3), (1, 5, 8)], []], Y, list(LABELS), [0], rate_hz=1.0)
    assert (r["events"], r["matched"], r["false_alarms"], r["deleted"]) == (4, 1, 1, 3)
    # an event open at one stream's end and one at the next's start are not one event
    r = score_orders([[(1, 0, 4)], [(1, 0, 4)]], np.ones((2, 4), np.int64), list(LABELS), [0], rate_hz=None)
    assert (r["events"], r["matched"], r["false_alarms"]) == (2, 2, 0) and r.get("hours") is None


def _known_case(spike=0.65, spike_len=10):
    """Probabilities [2, L, 3] and labels [2, L] of two never-reset streams: a strong 'a' and 'b'
    (0.95), a weak 'a' (0.65, 10 readings) and, in the background, a spike of 'a' as strong as the
    weak event: catching the weak event catches the spike too."""
    idle = [0.97, 0.02, 0.01]
    parts = [(idle, 0, 40), ([0.03, 0.95, 0.02], 1, 30), (idle, 0, 40), ([0.02, 0.03, 0.95], 2, 30),
             (idle, 0, 40), ([0.34, spike, 1 - 0.34 - spike], 0, spike_len), (idle, 0, 40),
             ([0.34, 0.65, 0.01], 1, 10), (idle, 0, 40)]
    P = np.concatenate([np.tile(np.array(p, np.float32), (n, 1)) for p, _, n in parts])
    Y = np.concatenate([np.full(n, y, np.int64) for _, y, n in parts])
    return np.stack([P, P]), np.stack([Y, Y])


def _calibrate(monkeypatch, P, Y, budget):
    import edgeseq.runtime.calibrate as cal

    class Split(SimpleNamespace):
        def __len__(self):
            return 6
    monkeypatch.setattr(cal, "stream_probs", lambda *a, **k: (P, Y, list(LABELS)))
    return cal.calibrate("unused.onnx", Split(lengths=np.array([1])), background=["idle"], rate_hz=1.0,
                         max_false_alarms_per_hour=budget, orders=2)


def test_calibrate_keeps_the_budget_when_a_setting_can(monkeypatch):
    P, Y = _known_case()
    hours = P.shape[0] * P.shape[1] / 3600
    r = _calibrate(monkeypatch, P, Y, budget=0.0)
    c, v = r["chosen"], r["chosen"].calibration["validation"]
    assert r["met"] is True and r["settings_tried"] == len(r["table"]) == 5 * 5 * 6 * 1 * 4
    # no false alarm: the weak event is missed in both streams (F1 of 4 of 6 events, precision 1)
    assert (v["false_alarms"], v["events"], v["found"], v["missed"]) == (0, 6, 4, 2)
    assert v["f1"] == pytest.approx(0.8)
    # the shortest delay among those: no smoothing, a threshold above the spike, a start at once
    assert (c.alpha, c.threshold, c.min_duration, c.refractory) == (1.0, {"a": 0.7, "b": 0.7}, {"a": 1, "b": 1}, 0)
    assert v["delay_median"] == 0 and c.rate_hz == 1.0 and c.background == ("idle",)
    assert c.calibration["met"] is True and c.calibration["max_false_alarms_per_hour"] == 0.0
    # a budget of one false alarm per stream buys the weak event: 6 of 6 events, 8 alerts
    r = _calibrate(monkeypatch, P, Y, budget=2 / hours)
    v = r["chosen"].calibration["validation"]
    assert r["met"] is True and (v["false_alarms"], v["found"]) == (2, 6)
    assert v["f1"] == pytest.approx(2 * 0.75 / 1.75) and v["false_alarms_per_hour"] == pytest.approx(2 / hours)
    assert r["chosen"].threshold["a"] <= 0.6
    # every row of the table within the budget does no better
    assert max(x["f1"] for x in r["table"] if x["false_alarms_per_hour"] <= 2 / hours) == pytest.approx(v["f1"])


def _slow_start_case():
    """Two streams: an 'a' whose first 10 readings the model calls 'a' at 0.55 only (then 0.95),
    a background spike of 'a' at 0.55 (5 readings) and a clean 'b': catching 'a' at once costs
    the spike as a false alarm."""
    idle, weak = [0.97, 0.02, 0.01], [0.40, 0.55, 0.05]
    parts = [(idle, 0, 40), (weak, 1, 10), ([0.03, 0.95, 0.02], 1, 20), (idle, 0, 40), (weak, 0, 5),
             (idle, 0, 40), ([0.02, 0.03, 0.95], 2, 30), (idle, 0, 40)]
    P = np.concatenate([np.tile(np.array(p, np.float32), (n, 1)) for p, _, n in parts])
    Y = np.concatenate([np.full(n, y, np.int64) for _, y, n in parts])
    return np.stack([P, P]), np.stack([Y, Y])


def test_calibrate_max_delay_trades_false_alarms_for_a_quicker_detection():
    from edgeseq.runtime.calibrate import search
    P, Y = _slow_start_case()
    hours = P.shape[0] * P.shape[1] / 3600

    def run(budget, max_delay):
        return search([(P, Y)], list(LABELS), _six(), ["idle"], 1.0, budget, 2, max_delay=max_delay)

    # no bound: the best F1 within one false alarm per stream waits out the weak start (a minimum
    # duration longer than the spike: 'a' found 8 readings in, 'b' at once)
    r = run(2 / hours, None)
    v = r["chosen"].calibration["validation"]
    slow = min(x["delay_median"] for x in r["table"] if x["false_alarms"] == 0 and x["delay_median"] is not None)
    assert (v["f1"], v["false_alarms"], v["delay_median"]) == (1.0, 0, slow) and slow > 2
    assert r["delay_met"] is None and r["fastest_within_budget"] == 0.0 and r["fewest_within_delay"] is None
    assert "max_delay_readings" not in r["chosen"].calibration
    # a bound of 2 readings: only catching 'a' at once keeps it, which costs the spike in each stream
    r = run(2 / hours, 2)
    v, c = r["chosen"].calibration["validation"], r["chosen"].calibration
    assert r["met"] is True and r["delay_met"] is True and v["delay_median"] <= 2
    assert v["false_alarms"] == 2 and v["f1"] == pytest.approx(0.8)
    assert (c["max_delay_readings"], c["delay_met"]) == (2.0, True)
    assert max(x["f1"] for x in r["table"] if x["false_alarms_per_hour"] <= 2 / hours
               and x["delay_median"] is not None and x["delay_median"] <= 2) == pytest.approx(v["f1"])
    # no false alarm allowed: nothing that quick keeps it; the quickest within the budget, said so
    r = run(0.0, 2)
    v = r["chosen"].calibration["validation"]
    assert r["met"] is True and r["delay_met"] is False and r["chosen"].calibration["delay_met"] is False
    assert v["false_alarms"] == 0 and v["delay_median"] == slow
    assert r["fewest_within_delay"] == pytest.approx(2 / hours)
    for bad in (-1, float("nan"), float("inf"), "5", True):
        with pytest.raises(UsageError, match="--max-delay must be a number of readings >= 0"):
            run(1.0, bad)


def test_calibrate_max_delay_is_not_met_by_missing_the_slow_events():
    """'a' is named at once, 'b' (three for each 'a') only 10 readings in: a threshold above
    'b's level finds 'a' alone, whose median delay over the events it found is 0. That is no
    quick setting: missed events count as never found."""
    from edgeseq.runtime.calibrate import search
    from edgeseq.runtime.events import score_events
    idle = [0.97, 0.02, 0.01]
    b = [([0.6, 0.0, 0.4], 2, 10), ([0.3, 0.0, 0.7], 2, 20), (idle, 0, 30)]
    parts = [(idle, 0, 30), ([0.03, 0.95, 0.02], 1, 30), (idle, 0, 30)] + b * 3
    P = np.concatenate([np.tile(np.array(p, np.float32), (n, 1)) for p, _, n in parts])
    Y = np.concatenate([np.full(n, y, np.int64) for _, y, n in parts])
    P, Y = np.stack([P, P]), np.stack([Y, Y])
    r = score_events([(1, 30, 60)], Y[0], list(LABELS), [0], 1.0)        # 'a' found at once, every 'b' missed
    assert r["delay_readings"]["median"] == 0 and r["delay_median_with_missed"] is None
    r = score_events([(1, 30, 60), (2, 100, 120), (2, 160, 180)], Y[0], list(LABELS), [0], 1.0)
    assert r["delay_median_with_missed"] == 10.0                          # 0, 10, 10, never
    for bound in (5, 0):
        r = search([(P, Y)], list(LABELS), _six(), ["idle"], 1.0, 1.0, 2, max_delay=bound)
        v = r["chosen"].calibration["validation"]
        assert r["delay_met"] is False and v["f1"] == 1.0 and v["missed"] == 0 and v["delay_median"] == 10
        assert r["fastest_within_budget"] == 10.0 and r["fewest_within_delay"] is None
    r = search([(P, Y)], list(LABELS), _six(), ["idle"], 1.0, 1.0, 2, max_delay=10)
    assert r["delay_met"] is True and r["chosen"].calibration["validation"]["f1"] == 1.0


def _six():
    class Split(SimpleNamespace):
        def __len__(self):
            return 6
    return Split(lengths=np.array([100]))


def test_calibrate_says_when_no_setting_keeps_the_budget(monkeypatch):
    idle, strong = np.array([0.97, 0.02, 0.01], np.float32), np.array([0.005, 0.99, 0.005], np.float32)
    # a true 'a', then 80 background readings the model calls 'a' at 0.99: every setting in the grid fires
    P = np.concatenate([np.tile(idle, (40, 1)), np.tile(strong, (30, 1)), np.tile(idle, (40, 1)),
                        np.tile(strong, (80, 1)), np.tile(idle, (40, 1))])
    Y = np.concatenate([np.zeros(40), np.ones(30), np.zeros(160)]).astype(np.int64)
    r = _calibrate(monkeypatch, np.stack([P, P]), np.stack([Y, Y]), budget=1.0)
    v = r["chosen"].calibration["validation"]
    assert r["met"] is False and r["chosen"].calibration["met"] is False
    assert min(x["false_alarms"] for x in r["table"]) == v["false_alarms"] == 2          # one per stream
    assert v["false_alarms_per_hour"] == pytest.approx(2 / (2 * 230 / 3600))
    assert v["found"] == 2
    import edgeseq.runtime.calibrate as cal
    for rate in (None, 0, float("nan")):
        with pytest.raises(UsageError, match="needs the data's sampling rate; give --rate-hz"):
            cal.calibrate("unused.onnx", None, rate_hz=rate)


# -- edgeseq calibrate and eval --------------------------------------------------------------------

def test_calibrate_cli_writes_the_settings_and_eval_scores_events(runner, gru, tmp_path):
    original = gru.read_bytes()
    r = runner.invoke(cli, ["calibrate", str(gru), "--background", "Standing", "--rate-hz", "10", "--out", "cal.onnx",
                            "--orders", "3", "--plot", "cal.png"])
    assert r.exit_code == 0, r.output
    assert "calibrating on 3 never-reset streams of 40 train sequences of basicmotions" in r.output
    chosen = [line for line in r.output.splitlines() if line.startswith("chosen: ")]
    assert len(chosen) == 1 and "background Standing" in chosen[0] and "the budget of 2/h" in chosen[0]
    assert any(line.startswith("* ") for line in r.output.splitlines())          # the chosen row is marked
    assert "wrote the decision settings into cal.onnx" in r.output
    assert "--split cross chooses on sequences each predicted by a model that did not train on them" in r.output
    assert gru.read_bytes() == original
    s = StreamSession(tmp_path / "cal.onnx").decision
    assert s is not None and s.background == ("Standing",) and s.rate_hz == 10.0
    assert s.calibration["orders"] == 3 and s.calibration["sequences"] == 40
    assert s.describe() in chosen[0]
    if (tmp_path / "cal.png").exists():
        assert (tmp_path / "cal.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert "no plot (pip install matplotlib for one)" in r.output

    r = runner.invoke(cli, ["eval", "cal.onnx"])
    assert r.exit_code == 0, r.output
    lines = [line for line in r.output.splitlines() if line.startswith("events (decision layer")]
    assert len(lines) == 1 and "20 never-reset streams, background Standing): F1 " in lines[0], r.output
    assert "false alarm" in lines[0] and "per hour over" in lines[0]
    r = runner.invoke(cli, ["eval", str(gru)])
    assert r.exit_code == 0 and "events (decision layer" not in r.output


def test_calibrate_cli_dry_run_json_and_errors(runner, gru, basicmotions, tmp_path):
    r = runner.invoke(cli, ["calibrate", str(gru), "--background", "Standing", "--orders", "1", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["written"] is None and out["plot"] is None and out["rate_hz"] == 10.0     # basicmotions: 10 Hz
    assert out["orders"] == 1 and len(out["table"]) == 5 * 5 * 6 * 3 * 4 and out["front"]
    DecisionSpec.from_json(out["chosen"], basicmotions.labels)
    assert list(tmp_path.iterdir()) == []                                               # wrote nothing

    e = one_error_line(runner.invoke(cli, ["calibrate", str(gru), "--background", "Sitting"]), 2)
    assert e == ("Error: --background 'Sitting' is not one of the model's labels "
                 "(Standing, Running, Walking, Badminton) (see 'cli calibrate --help')")
    d = np.load(DATA_DIR / "basicmotions.npz")
    np.savez(tmp_path / "mine.npz", **{k: d[k] for k in d.files})
    e = one_error_line(runner.invoke(cli, ["calibrate", str(gru), "--data", "mine.npz", "--background", "Standing"]), 2)
    assert e == ("Error: the sampling rate of 'mine' is not known; give --rate-hz (readings per second) "
                 "(see 'cli calibrate --help')")
    e = one_error_line(runner.invoke(cli, ["calibrate", str(gru), "--rate-hz", "0"]), 2)
    assert "--rate-hz" in e
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.npz"]


# -- the C step (firmware_sim/kernels/es_decide.h) ---------------------------------------------

@pytest.mark.skipif(not native.available(), reason="the native extension is not built here")
@pytest.mark.parametrize("smoothing", ["ema", "mean", "none"])
def test_the_c_decision_step_is_the_python_deciders_bit_for_bit(smoothing):
    """Random probabilities through 12 streams of different settings (a moving mean's windows
    1 to 40 readings, the ring's rows the largest): the C kernel's events and every state array
    equal the Python Decider's after every reading."""
    rng = np.random.default_rng(7)
    labels = ["rest", "a", "b", "c"]
    specs = [DecisionSpec.make(labels, ["rest"], smoothing, float(rng.choice([1.0, 0.5, 0.3, 0.1])),
                               int(rng.integers(1, 41)),
                               float(rng.choice([0.3, 0.5, 0.7])), int(rng.integers(1, 5)), int(rng.integers(0, 6)),
                               int(rng.integers(1, 4))) for _ in range(12)]
    py, c = Decider(specs), Decider(specs)
    kind, arrays = c.native_arrays()
    for t in range(400):
        p = rng.dirichlet(np.full(4, 0.3), size=12).astype(np.float32)
        want = py.update(p)
        native._ext.decide(kind, arrays, p)
        assert c.native_events() == want, t
    for k in STATE_NAMES:
        assert np.array_equal(getattr(py, k), getattr(c, k)), k


@pytest.mark.skipif(not native.available(), reason="the native extension is not built here")
def test_a_native_session_decides_in_c_on_both_its_paths(gru, streams, int8):
    """The native push decides in the C call (and a push that takes the Python path, readings of
    another dtype, in C once): the same events and decision state as the Python Decider, for a
    float and an int8 model, smoothed by an EMA and by a moving mean."""
    for model, kw in ((gru, {}), (int8("gru", "static")[0], {}), (gru, {"smoothing": "mean", "window": 4})):
        sess = StreamSession(model, streams=3, backend="native", decision=gru_spec(StreamSession(model).labels, **kw))
        assert sess._native_decide
        ref = Decider(sess.decision, 3)
        for t, x in enumerate(streams):
            p, ev = sess.push_events(x if t % 5 else x.astype(np.float64))
            assert ev == ref.update(p), t
        assert_same_snapshot(sess.snapshot(), {**sess.snapshot(), "decision": ref.snapshot()})


def test_calibrate_cli_max_delay(runner, gru, tmp_path):
    args = ["calibrate", str(gru), "--background", "Standing", "--orders", "1", "--dry-run"]
    r = runner.invoke(cli, args + ["--json", "--max-delay", "12"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    cal = out["chosen"]["calibration"]
    assert out["max_delay"] == 12.0 and cal["max_delay_readings"] == 12.0 and cal["delay_met"] is out["delay_met"]
    if out["delay_met"]:
        assert cal["validation"]["delay_median"] <= 12
    else:
        assert cal["validation"]["delay_median"] == out["fastest_within_budget"] > 12
    # no model names the class at an event's first reading: a bound of 0 is kept by no setting
    r = runner.invoke(cli, args + ["--max-delay", "0", "--max-false-alarms-per-hour", "1000"])
    assert r.exit_code == 0, r.output
    assert "note: no setting within the budget keeps the median delay within --max-delay 0 readings (0.0 s)" in r.output
    e = one_error_line(runner.invoke(cli, args + ["--max-delay", "-3"]), 2)
    assert e == "Error: --max-delay must be a number of readings >= 0, got -3 (see 'cli calibrate --help')"
    assert one_error_line(runner.invoke(cli, args + ["--max-delay", "nan"]), 2).startswith(
        "Error: --max-delay must be a number of readings >= 0")
    assert list(tmp_path.iterdir()) == []


def test_calibrate_refuses_outputs_that_would_overwrite_what_they_must_not(runner, gru, basicmotions, tmp_path):
    """--out on a file that is not a model or on the data, a --plot that is not a .png or lands on
    the model, an infinite budget or rate, a background named twice, data without events: one
    line each, before anything is written."""
    d = np.load(DATA_DIR / "basicmotions.npz")
    np.savez(tmp_path / "mine.npz", **{k: d[k] for k in d.files})
    (tmp_path / "notes.txt").write_text("mine")
    base = ["calibrate", str(gru), "--background", "Standing", "--orders", "1"]
    cases = [(["--out", "notes.txt"], "exists and is not an edgeseq model"),
             (["--data", "mine.npz", "--rate-hz", "10", "--out", "mine.npz"], "--out is the data file"),
             (["--out", "x.onnx", "--plot", "x.pdf"], "must be a file name ending in .png"),
             (["--out", "x.onnx", "--plot", "x.onnx"], "must be a file name ending in .png"),
             (["--max-false-alarms-per-hour", "inf"], "must be a finite number"),
             (["--rate-hz", "nan"], "must be a finite number"),
             (["--background", "Standing"], "is given twice")]
    for extra, message in cases:
        e = one_error_line(runner.invoke(cli, base + extra), 2)
        assert message in e, (extra, e)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.npz", "notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "mine"
    standing = np.flatnonzero(d["y_train"] == 0)                # only background readings: nothing to detect
    np.savez(tmp_path / "still.npz", X=d["X_train"][standing], y=d["y_train"][standing], X_test=d["X_test"],
             y_test=d["y_test"], labels=d["labels"], features=d["features"])
    e = one_error_line(runner.invoke(cli, base + ["--data", "still.npz", "--rate-hz", "10", "--out", "s.onnx"]), 2)
    assert "hold no event" in e and not (tmp_path / "s.onnx").exists()


def test_stream_events_onsets_are_right_after_a_resume(runner, gru, basicmotions, tmp_path):
    """`stream --events` with a state file, in two halves, prints the lines one run prints."""
    from export.decision import write_decision
    model = write_decision(gru, gru_spec(basicmotions.labels), tmp_path / "g.onnx")
    X, _, _ = joined_streams(basicmotions.test, 1, seed=0)
    rows = [",".join(f"{v:.5f}" for v in x) for x in X[0][:900]]
    head = ",".join(basicmotions.features)
    (tmp_path / "all.csv").write_text("\n".join([head] + rows) + "\n")
    (tmp_path / "a.csv").write_text("\n".join([head] + rows[:450]) + "\n")
    (tmp_path / "b.csv").write_text("\n".join([head] + rows[450:]) + "\n")
    whole = runner.invoke(cli, ["stream", str(model), "--input", "all.csv", "--events"])
    assert whole.exit_code == 0, whole.output
    want = [line for line in whole.stdout.splitlines() if line[:1].isdigit()]
    got = []
    for part in ("a.csv", "b.csv"):
        r = runner.invoke(cli, ["stream", str(model), "--input", part, "--events", "--state-file", "st.bin"])
        assert r.exit_code == 0, r.output
        got += [line for line in r.stdout.splitlines() if line[:1].isdigit()]
    assert len(want) >= 4 and got == want
    assert any(int(line.split(",")[0]) > 450 and line.split(",")[1] == "start" for line in want)


def test_restore_refuses_decision_states_the_step_cannot_reach(gru, streams):
    sess = decided(gru, "onnxruntime")
    push_all(sess, streams[:50])
    good = sess.snapshot()
    for name, value in (("onset", 10 ** 9), ("run_len", 10 ** 6), ("seen", 2 ** 63 - 1)):
        bad = {**good, "decision": {**good["decision"], name: np.full(3, value, np.int64)}}
        with pytest.raises(UsageError, match="decision state"):
            sess.restore(bad)
        assert_same_snapshot(sess.snapshot(), good)


def test_write_decision_through_a_link_replaces_its_target_and_keeps_the_link(gru, tmp_path):
    from export.decision import write_decision
    target = tmp_path / "target.onnx"
    target.write_bytes(gru.read_bytes())
    (tmp_path / "link.onnx").symlink_to(target)
    write_decision(gru, gru_spec(StreamSession(gru).labels), tmp_path / "link.onnx")
    assert (tmp_path / "link.onnx").is_symlink() and StreamSession(target).decision is not None
