"""Event scores of detections on a never-reset stream (Ward, Lukowicz & Gellersen 2011): each
Ward category on a case worked by hand, the one-to-one matching behind precision / recall / F1
and the false alarms, per-hour figures and delays, the input checks, and a brute-force reference
(an exact maximum matching by augmenting paths) on seeded random streams."""

import json
from pathlib import Path

import numpy as np
import pytest

from edgeseq.errors import UsageError
from edgeseq.runtime.events import score_events, true_events
from helpers import run_without_torch

ROOT = Path(__file__).resolve().parent.parent
LABELS = ["rest", "walk", "run"]          # 0 is background
REST, WALK, RUN = 0, 1, 2


def stream(*runs) -> np.ndarray:
    """Y from (class, readings) runs, e.g. stream((REST, 2), (WALK, 3))."""
    return np.concatenate([np.full(n, c, np.int64) for c, n in runs])


def score(detected, Y, **kw):
    r = score_events(detected, Y, LABELS, background=[REST], **kw)
    assert json.loads(json.dumps(r)) == r                              # plain, JSON-safe values
    assert r["deleted"] + r["fragmented"] + r["merged"] - r["fragmented_and_merged"] + r["correct"] == r["events"]
    assert r["found"] + r["deleted"] == r["events"]
    assert r["hits"] + r["insertions"] == r["detections"]
    assert r["matched"] <= min(r["hits"], r["found"])                  # one-to-one: never more than either side
    assert r["false_alarms"] == r["detections"] - r["matched"] >= r["insertions"]
    return r


# rest 0-1, walk 2-4, rest 5, run 6-7, rest 8-9
Y_TWO = stream((REST, 2), (WALK, 3), (REST, 1), (RUN, 2), (REST, 2))


def test_true_events_are_maximal_runs():
    assert true_events(Y_TWO, [REST]) == [(WALK, 2, 5), (RUN, 6, 8)]
    # two recordings of walk joined end to end are one event; another class next to it is its own
    Y = np.concatenate([stream((REST, 1), (WALK, 2)), stream((WALK, 3), (RUN, 2), (WALK, 1), (REST, 1))])
    assert true_events(Y, [REST]) == [(WALK, 1, 6), (RUN, 6, 8), (WALK, 8, 9)]
    assert true_events(stream((WALK, 4)), [REST]) == [(WALK, 0, 4)]
    assert true_events(np.zeros(0, np.int64), [REST]) == []
    assert all(type(v) is int for e in true_events(Y, [REST]) for v in e)


def test_unlabelled_readings_are_background():
    Y = np.array([-1, -1, 1, 1, -1, 1, 0, 0, 0, 0])
    assert true_events(Y, [0]) == [(WALK, 2, 4), (WALK, 5, 6)]           # -1 splits walk in two
    assert true_events(Y, []) == [(WALK, 2, 4), (WALK, 5, 6), (REST, 6, 10)]
    # a detection during unlabelled readings is a false alarm; -1 readings count as background time:
    # 7 of the 10 readings (0, 1, 4 and 6-9)
    r = score([(WALK, 0, 1), (WALK, 2, 4)], Y, rate_hz=10)
    assert (r["events"], r["insertions"], r["correct"], r["deleted"]) == (2, 1, 1, 1)
    assert (r["matched"], r["false_alarms"]) == (1, 1)
    assert r["hours"] == pytest.approx(10 / 10 / 3600)
    assert r["false_alarms_per_hour"] == pytest.approx(3600.0)
    assert r["false_alarms_per_hour_of_background"] == pytest.approx(1 / (7 / 10 / 3600))


def test_no_detections():
    r = score([], Y_TWO, rate_hz=10)
    assert (r["readings"], r["events"], r["detections"], r["hits"], r["found"], r["matched"]) == (10, 2, 0, 0, 0, 0)
    assert (r["precision"], r["recall"], r["f1"]) == (None, 0.0, 0.0)
    assert (r["deleted"], r["correct"], r["insertions"], r["false_alarms"]) == (2, 0, 0, 0)
    assert r["false_alarms_per_hour"] == 0.0
    assert r["delay_readings"] is None and r["delay_seconds"] is None
    assert r["per_class"] == {"walk": {"events": 1, "detections": 0, "precision": None, "recall": 0.0, "f1": 0.0},
                              "run": {"events": 1, "detections": 0, "precision": None, "recall": 0.0, "f1": 0.0}}
    # an empty array [0, 3] is no detections too; no rate, no per-hour figures
    r = score(np.zeros((0, 3), np.int64), Y_TWO)
    assert r["detections"] == 0 and r["hours"] is None and r["false_alarms_per_hour"] is None
    assert r["false_alarms_per_hour_of_background"] is None
    # no events and no detections: nothing to score
    r = score([], stream((REST, 5)))
    assert (r["precision"], r["recall"], r["f1"]) == (None, None, None)


def test_perfect_detection():
    r = score(true_events(Y_TWO, [REST]), Y_TWO, rate_hz=10)
    assert (r["matched"], r["false_alarms"]) == (2, 0)
    assert (r["precision"], r["recall"], r["f1"]) == (1.0, 1.0, 1.0)
    assert (r["correct"], r["deleted"], r["fragmented"], r["merged"]) == (2, 0, 0, 0)
    assert (r["insertions"], r["fragmenting"], r["merging"]) == (0, 0, 0)
    assert r["delay_readings"] == {"median": 0.0, "p90": 0.0, "max": 0}
    assert r["delay_seconds"] == {"median": 0.0, "p90": 0.0, "max": 0.0}
    assert all(c == {"events": 1, "detections": 1, "precision": 1.0, "recall": 1.0, "f1": 1.0}
               for c in r["per_class"].values())
    assert set(r["per_class"]) == {"walk", "run"}                        # background has no entry


def test_deletion():
    r = score([(WALK, 2, 5)], Y_TWO)
    assert (r["events"], r["detections"], r["deleted"], r["correct"]) == (2, 1, 1, 1)
    assert (r["matched"], r["false_alarms"]) == (1, 0)
    assert r["precision"] == 1.0 and r["recall"] == 0.5
    assert r["f1"] == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert r["per_class"]["run"] == {"events": 1, "detections": 0, "precision": None, "recall": 0.0, "f1": 0.0}


def test_fragmented_event():
    Y = stream((REST, 2), (WALK, 8), (REST, 2))                        # walk 2-9
    r = score([(WALK, 3, 5), (WALK, 6, 9)], Y)
    assert (r["events"], r["detections"], r["found"], r["hits"]) == (1, 2, 1, 2)
    assert (r["fragmented"], r["fragmenting"], r["correct"], r["merged"], r["merging"]) == (1, 2, 0, 0, 0)
    # one-to-one: the event matches one of its two detections; the second alert is a false alarm
    assert (r["matched"], r["false_alarms"], r["insertions"]) == (1, 1, 0)
    assert (r["precision"], r["recall"]) == (0.5, 1.0)
    assert r["f1"] == pytest.approx(2 / 3)
    assert r["per_class"]["walk"] == {"events": 1, "detections": 2, "precision": 0.5, "recall": 1.0,
                                      "f1": pytest.approx(2 / 3)}
    assert r["delay_readings"] == {"median": 1.0, "p90": 1.0, "max": 1}   # first detection starts at 3


def test_merged_pair():
    Y = stream((REST, 1), (WALK, 3), (REST, 2), (WALK, 3), (REST, 1))     # walk 1-3 and 6-8, gap 4-5
    r = score([(WALK, 2, 8)], Y)
    assert (r["events"], r["detections"], r["found"], r["hits"]) == (2, 1, 2, 1)
    assert (r["merged"], r["merging"], r["correct"], r["fragmented"], r["fragmenting"]) == (2, 1, 0, 0, 0)
    # one-to-one: the merging detection matches one of its two events; the other is not recalled
    assert (r["matched"], r["false_alarms"]) == (1, 0)
    assert (r["precision"], r["recall"]) == (1.0, 0.5)
    assert r["f1"] == pytest.approx(2 / 3)
    # delays 2-1 = 1 and 2-6 < 0 -> 0: median 0.5, p90 0 + 0.9 * (1 - 0)
    assert r["delay_readings"] == {"median": 0.5, "p90": pytest.approx(0.9), "max": 1}


def test_fragmented_and_merged():
    # two walk events; one detection spans both, a second one sits in the first: the first event is
    # fragmented and merged (Ward's FM), the second merged; the spanning detection both fragments and merges
    Y = stream((REST, 1), (WALK, 3), (REST, 2), (WALK, 3), (REST, 1))
    r = score([(WALK, 2, 8), (WALK, 1, 3)], Y)
    assert (r["fragmented"], r["merged"], r["fragmented_and_merged"], r["correct"]) == (1, 2, 1, 0)
    assert (r["fragmenting"], r["merging"], r["fragmenting_and_merging"], r["insertions"]) == (2, 1, 1, 0)
    # the short detection takes the first event, the spanning one the second: a perfect matching
    assert (r["matched"], r["false_alarms"], r["precision"], r["recall"]) == (2, 0, 1.0, 1.0)


def test_matching_is_the_largest():
    # walk 2-4 and 7-8. A long detection from 2 to 9 overlaps both; a short one overlaps one of them.
    Y = stream((REST, 2), (WALK, 3), (REST, 2), (WALK, 2), (REST, 1))
    assert true_events(Y, [REST]) == [(WALK, 2, 5), (WALK, 7, 9)]
    # The largest matching is 2 (short -> its event, long -> the other) whichever event the short
    # one sits in, and in either input order. A greedy that gives the long one the event the short
    # one needs finds 1: in detection start order that happens when the short one is in the first
    # event; when it is in the second, a greedy giving each detection its last event would.
    for det in ([(WALK, 2, 9), (WALK, 3, 4)], [(WALK, 2, 9), (WALK, 7, 8)]):
        for d in (det, det[::-1]):
            r = score(d, Y)
            assert (r["matched"], r["false_alarms"], r["precision"], r["recall"], r["f1"]) == (2, 0, 1.0, 1.0, 1.0)
            assert (r["merging"], r["fragmented"], r["correct"]) == (1, 1, 0)
    # walk 1-3, 6-8, 11-13: one detection spans all three, two short ones sit in the first. Every
    # detection hits and every event is found, yet only 2 pairs can be matched one-to-one.
    Y = stream((REST, 1), (WALK, 3), (REST, 2), (WALK, 3), (REST, 2), (WALK, 3), (REST, 1))
    r = score([(WALK, 1, 14), (WALK, 1, 2), (WALK, 2, 3)], Y)
    assert (r["events"], r["detections"], r["hits"], r["found"], r["insertions"]) == (3, 3, 3, 3, 0)
    assert (r["matched"], r["false_alarms"]) == (2, 1)
    assert r["precision"] == pytest.approx(2 / 3) and r["recall"] == pytest.approx(2 / 3)


def test_insertion_and_wrong_class():
    Y = stream((REST, 2), (WALK, 4), (REST, 4))                        # walk 2-5
    # run during rest, run during walk (another class's event), walk on walk
    r = score([(RUN, 0, 2), (RUN, 3, 5), (WALK, 2, 6)], Y)
    assert (r["events"], r["detections"], r["hits"], r["insertions"], r["false_alarms"]) == (1, 3, 1, 2, 2)
    assert r["matched"] == 1
    assert (r["correct"], r["deleted"]) == (1, 0)
    assert r["precision"] == pytest.approx(1 / 3) and r["recall"] == 1.0
    assert r["f1"] == pytest.approx(0.5)
    assert r["per_class"]["run"] == {"events": 0, "detections": 2, "precision": 0.0, "recall": None, "f1": 0.0}
    assert r["per_class"]["walk"] == {"events": 1, "detections": 1, "precision": 1.0, "recall": 1.0, "f1": 1.0}


def test_per_hour_figures():
    # one hour at 10 Hz: 36000 readings, half of them walk (1000-18999), the rest background
    Y = stream((REST, 1000), (WALK, 18000), (REST, 17000))
    det = [(WALK, 1050, 2000), (RUN, 100, 200), (WALK, 20000, 20100), (RUN, 30000, 36000)]  # last open at the end
    r = score(det, Y, rate_hz=10)
    assert r["readings"] == 36000 and r["hours"] == pytest.approx(1.0)
    assert (r["matched"], r["insertions"], r["false_alarms"]) == (1, 3, 3)
    assert r["false_alarms_per_hour"] == pytest.approx(3.0)
    assert r["false_alarms_per_hour_of_background"] == pytest.approx(6.0)   # 18000 background readings: half an hour
    assert r["delay_readings"] == {"median": 50.0, "p90": 50.0, "max": 50}
    assert r["delay_seconds"] == {"median": 5.0, "p90": 5.0, "max": 5.0}
    # a stream with no background readings has no per-hour-of-background figure
    r = score([(RUN, 0, 5)], stream((WALK, 10)), rate_hz=10)             # one false alarm in one second
    assert r["false_alarms_per_hour"] == pytest.approx(3600.0) and r["false_alarms_per_hour_of_background"] is None


def test_delays():
    # walk events at 10-19, 30-39, 50-59, 70-89; first detections start 2 early (-> 0), then +2, +4, +10
    Y = stream((REST, 10), (WALK, 10), (REST, 10), (WALK, 10), (REST, 10), (WALK, 10), (REST, 10), (WALK, 20),
               (REST, 10))
    det = [(WALK, 8, 12), (WALK, 32, 35), (WALK, 37, 39), (WALK, 54, 58), (WALK, 80, 85), (WALK, 88, 90)]
    r = score(det, Y, rate_hz=10)
    # delays 0, 2, 4, 10: median 3, p90 at position 2.7 -> 4 + 0.7 * 6 = 8.2
    assert r["delay_readings"] == {"median": 3.0, "p90": pytest.approx(8.2), "max": 10}
    assert r["delay_seconds"] == {"median": pytest.approx(0.3), "p90": pytest.approx(0.82), "max": pytest.approx(1.0)}
    assert (r["fragmented"], r["fragmenting"], r["correct"]) == (2, 4, 2)
    # each of the 4 events matches one detection; the 2 second alerts are false alarms
    assert (r["matched"], r["false_alarms"], r["insertions"]) == (4, 2, 0)
    assert (r["precision"], r["recall"]) == (pytest.approx(4 / 6), 1.0)
    assert r["false_alarms_per_hour"] == pytest.approx(2 / (100 / 10 / 3600))


def test_tolerance():
    Y = stream((REST, 2), (WALK, 3), (REST, 5))                        # walk 2-4
    late = [(WALK, 6, 8)]                                              # starts 2 readings after the end (5)
    assert score(late, Y)["insertions"] == 1
    assert score(late, Y, tolerance=1)["insertions"] == 1              # 6 not in [2, 6)
    r = score(late, Y, tolerance=2)                                    # 6 in [2, 7)
    assert (r["insertions"], r["correct"], r["matched"], r["recall"]) == (0, 1, 1, 1.0)
    assert r["delay_readings"] == {"median": 4.0, "p90": 4.0, "max": 4}
    # a start before the true event does not profit from the tolerance: it must share a reading
    assert score([(WALK, 0, 2)], Y, tolerance=5)["insertions"] == 1


@pytest.mark.parametrize("call, match", [
    (lambda: score_events([], np.zeros((2, 3), np.int64), LABELS, [0]), "1-d integer"),
    (lambda: score_events([], np.zeros(5), LABELS, [0]), "1-d integer"),
    (lambda: score_events([], np.zeros(0, np.int64), LABELS, [0]), "no readings"),
    (lambda: score_events([], np.array([0, 3]), LABELS, [0]), "class id 3"),
    (lambda: score_events([], np.array([0, -2]), LABELS, [0]), "class id -2"),
    (lambda: score_events([], Y_TWO, [], [0]), "labels is empty"),
    (lambda: score_events([], Y_TWO, ["a", "b", "a"], [0]), "names 'a' twice"),
    (lambda: score_events([], Y_TWO, LABELS, [3]), "background class id 3"),
    (lambda: score_events([], Y_TWO, LABELS, [0.5]), "integer class ids"),
    (lambda: score_events([(1, 4, 4)], Y_TWO, LABELS, [0]), "start >= end"),
    (lambda: score_events([(1, 2, 5), (1, 6, 3)], Y_TWO, LABELS, [0]), "detection 1 .* start >= end"),
    (lambda: score_events([(1, -1, 3)], Y_TWO, LABELS, [0]), "starts before reading 0"),
    (lambda: score_events([(1, 5, 11)], Y_TWO, LABELS, [0]), r"ends after the stream's end \(L = 10\)"),
    (lambda: score_events([(3, 2, 5)], Y_TWO, LABELS, [0]), "class id outside 0..2"),
    (lambda: score_events([(-1, 2, 5)], Y_TWO, LABELS, [0]), "class id outside 0..2"),
    (lambda: score_events([(0, 2, 5)], Y_TWO, LABELS, [0]), "'rest'.* background class"),
    (lambda: score_events([(1, 2.5, 5)], Y_TWO, LABELS, [0]), "triples of integers"),
    (lambda: score_events([(1, 2)], Y_TWO, LABELS, [0]), "triples of integers"),
    (lambda: score_events([], Y_TWO, LABELS, [0], rate_hz=0), "rate_hz"),
    (lambda: score_events([], Y_TWO, LABELS, [0], rate_hz=-10), "rate_hz"),
    (lambda: score_events([], Y_TWO, LABELS, [0], rate_hz=float("nan")), "rate_hz"),
    (lambda: score_events([], Y_TWO, LABELS, [0], rate_hz=float("inf")), "rate_hz"),
    (lambda: score_events([], Y_TWO, LABELS, [0], tolerance=-1), "tolerance"),
    (lambda: score_events([], Y_TWO, LABELS, [0], tolerance=float("nan")), "tolerance"),
    (lambda: true_events(np.zeros(4), [0]), "1-d integer"),
])
def test_bad_inputs_are_one_line_usage_errors(call, match):
    with pytest.raises(UsageError, match=match) as e:
        call()
    assert "\n" not in str(e.value)


def largest_matching(adj, n_right) -> int:
    """Size of a maximum matching of a bipartite graph, by Kuhn's augmenting paths: adj[i] lists
    the right vertices (0..n_right-1) left vertex i may be paired with."""
    owner = [None] * n_right

    def augment(i, seen):
        for k in adj[i]:
            if k not in seen:
                seen.add(k)
                if owner[k] is None or augment(owner[k], seen):
                    owner[k] = i
                    return True
        return False

    return sum(augment(i, set()) for i in range(len(adj)))


def test_largest_matching_reference():
    assert largest_matching([], 3) == 0
    assert largest_matching([[0, 1], [0]], 2) == 2                    # needs the augmenting path
    assert largest_matching([[0, 1, 2], [0], [0]], 3) == 2
    assert largest_matching([[0], [0], [1]], 2) == 2


def reference(detected, Y, C, background, tolerance):
    """The same scores the slow, obvious way: every detection against every true event, and an
    exact maximum matching per class."""
    bg = set(background) | {-1}
    events, start = [], 0
    for i in range(1, len(Y) + 1):
        if i == len(Y) or Y[i] != Y[start]:
            if Y[start] not in bg:
                events.append((int(Y[start]), start, i))
            start = i

    def overlaps(d, t):
        return d[0] == t[0] and ((d[1] < t[2] and d[2] > t[1]) or t[1] <= d[1] < t[2] + tolerance)

    covers = [[k for k, t in enumerate(events) if overlaps(d, t)] for d in detected]
    by_event = [[i for i, cv in enumerate(covers) if k in cv] for k in range(len(events))]
    merging = [len(cv) > 1 for cv in covers]
    merged = [any(merging[i] for i in ds) for ds in by_event]
    fragmented = [len(ds) > 1 for ds in by_event]
    fragmenting = [any(fragmented[k] for k in cv) for cv in covers]
    delays = [max(min(detected[i][1] for i in ds) - events[k][1], 0) for k, ds in enumerate(by_event) if ds]
    out = {"events": len(events), "detections": len(detected),
           "found": sum(bool(ds) for ds in by_event), "hits": sum(bool(cv) for cv in covers),
           "deleted": sum(not ds for ds in by_event), "fragmented": sum(fragmented), "merged": sum(merged),
           "correct": sum(len(ds) == 1 and not m for ds, m in zip(by_event, merged)),
           "fragmented_and_merged": sum(f and m for f, m in zip(fragmented, merged)),
           "insertions": sum(not cv for cv in covers), "fragmenting": sum(fragmenting), "merging": sum(merging),
           "fragmenting_and_merging": sum(f and m for f, m in zip(fragmenting, merging))}
    out["delay_readings"] = ({"median": float(np.median(delays)), "p90": float(np.percentile(delays, 90)),
                              "max": int(max(delays))} if delays else None)
    per_class = {}
    for c in range(C):
        if c in background:
            continue
        ks = [k for k, t in enumerate(events) if t[0] == c]
        ds = [i for i, d in enumerate(detected) if d[0] == c]
        per_class[c] = (len(ks), len(ds), largest_matching([covers[i] for i in ds], len(events)))
    out["matched"] = sum(m for _, _, m in per_class.values())
    out["false_alarms"] = len(detected) - out["matched"]
    return events, out, per_class


def prf(matched, detections, events):
    p = matched / detections if detections else None
    r = matched / events if events else None
    f1 = None if p is None and r is None else (2 * (p or 0) * (r or 0) / ((p or 0) + (r or 0)) if (p or r) else 0.0)
    return p, r, f1


@pytest.mark.parametrize("seed", range(6))
def test_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    C, background = 5, [0, 4]
    labels = [f"c{c}" for c in range(C)]
    # runs of random classes (-1 and background among them), short enough to make neighbours meet
    runs = [(int(rng.integers(-1, C)), int(rng.integers(1, 12))) for _ in range(80)]
    Y = np.concatenate([np.full(n, c) for c, n in runs]).astype(np.int32)
    L = len(Y)
    detected = []
    for _ in range(int(rng.integers(20, 70))):
        s = int(rng.integers(0, L))
        detected.append((int(rng.choice([1, 2, 3])), s, int(min(L, s + rng.integers(1, 30)))))
    tolerance = int(rng.integers(0, 6))
    events, want, per_class = reference(detected, Y, C, background, tolerance)
    assert true_events(Y, background) == events
    got = score_events(detected, Y, labels, background, rate_hz=50, tolerance=tolerance)
    for k, v in want.items():
        assert got[k] == (pytest.approx(v) if k == "delay_readings" and v else v), k
    assert (got["precision"], got["recall"], got["f1"]) == \
        pytest.approx(prf(want["matched"], want["detections"], want["events"]))
    for c, (n_events, n_det, matched) in per_class.items():
        pc = got["per_class"][labels[c]]
        assert (pc["events"], pc["detections"]) == (n_events, n_det)
        assert (pc["precision"], pc["recall"], pc["f1"]) == pytest.approx(prf(matched, n_det, n_events))
    bg_readings = int(np.isin(Y, [-1, 0, 4]).sum())
    assert got["false_alarms_per_hour"] == pytest.approx(want["false_alarms"] / (len(Y) / 50 / 3600))
    assert got["false_alarms_per_hour_of_background"] == \
        pytest.approx(want["false_alarms"] / (bg_readings / 50 / 3600))
    # the same detections as an int array, shuffled, score the same
    shuffled = np.array(detected)[rng.permutation(len(detected))]
    again = score_events(shuffled, Y, labels, background, rate_hz=50, tolerance=tolerance)
    assert {k: v for k, v in again.items() if k != "delay_readings"} == \
        {k: v for k, v in got.items() if k != "delay_readings"}
    assert again["delay_readings"] == pytest.approx(got["delay_readings"])


def test_matching_is_largest_on_small_crowded_streams():
    # many tiny streams of one event class, crowded with long and short detections, so that a
    # detection often overlaps several events and several detections one event: the matching
    # score_events reports is the largest, whatever the detections' order
    rng = np.random.default_rng(7)
    for _ in range(400):
        Y = rng.choice([-1, 0, 1], size=int(rng.integers(4, 20)), p=[0.1, 0.4, 0.5]).astype(np.int64)
        L = len(Y)
        detected = []
        for _ in range(int(rng.integers(1, 8))):
            s = int(rng.integers(0, L))
            detected.append((1, s, int(min(L, s + rng.integers(1, L + 1)))))
        tolerance = int(rng.integers(0, 3))
        _, want, _ = reference(detected, Y, 2, [0], tolerance)
        for d in (detected, detected[::-1]):
            got = score_events(d, Y, ["rest", "walk"], [0], tolerance=tolerance)
            assert (got["matched"], got["false_alarms"]) == (want["matched"], want["false_alarms"]), (Y, d, tolerance)


def test_imports_without_torch():
    run_without_torch("""
        from edgeseq.runtime.events import score_events
        r = score_events([(1, 0, 2)], [1, 1, 0], ["rest", "walk"], [0])
        assert r["correct"] == 1
        print("OK")
    """, ROOT)
