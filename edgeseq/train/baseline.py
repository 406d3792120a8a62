"""The nearest-neighbour baseline a trained model is set beside: 1-NN DTW on the same split.

Each test sequence takes the class of the training sequence nearest to it under dynamic time
warping (DTW), the baseline of the UCR and UEA archives: the readings as they are (no
normalisation), the squared difference summed along the warping path, and on several channels
the dependent form (DTW_D: one path for all channels, the squared Euclidean distance between
readings). The distances come from dtaidistance (its C library, OpenMP over the cores), not from
code of ours. It is a per-sequence classifier: it sees each whole test sequence, so it stands
beside a model's per-sequence accuracy, not its never-reset one.

The full window costs (test readings) x (training readings) cells, which on long or many
sequences takes hours. Past `max_cells` the path keeps within a band of w readings of the two
diagonals (Sakoe-Chiba; for sequences of equal length |i - j| <= w; for unequal ones between
the diagonals i = j and i - j = the length difference, widened by w), w a tenth of the longest
sequence; past that too a seeded draw of the test sequences is scored, the band halved while
the draw would hold fewer than MIN_QUERIES (all, if fewer), and where not even that many fit
in a band of 1 reading, nothing is scored and the result says why. What was done is
in the result, and the line `describe` prints says it.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from edgeseq.errors import UsageError

MAX_CELLS = 3e10      # warping cells at most: about a minute on 2 cores of an x86-64 VM (dtaidistance 2.5,
                      # 1-NN DTW of ACSF1, 100 x 100 sequences of 1,460 readings, 2.1e10 cells in 41 s)
PAIR_CELLS = 11       # a pair's cost beyond its cells, in cells: about 21 ns a pair of 1-reading sequences
                      # (100,000 x 10,000), where a cell took about 1.95 ns (ACSF1 above)
REF_CELLS = 550       # a call's cost a training sequence, in cells: dtaidistance takes about 1.07 us to
                      # prepare each sequence it is given, once a call (1e5 to 3e6 sequences, same VM)
BAND = 0.1            # the band past MAX_CELLS, as a share of the longest sequence
CHUNK_CELLS = 2e9     # cells per call into dtaidistance: a progress line after each ...
CHUNK_PAIRS = 2e7     # ... and pairs per call at most (its distances are held at once: 8 bytes a pair)
MIN_QUERIES = 200     # past the budget the band narrows (halving, to 1 reading) until this many test sequences
                      # fit; a draw of fewer is not scored


def _cells(lq: np.ndarray, lt: np.ndarray, window: int | None) -> np.ndarray:
    """Cost of each query (lengths `lq` [Q]) against every reference (lengths `lt`), in cells:
    a pair of lengths a <= b fills a x b cells with the full window and at most
    b x min(a, b - a + 2w + 1) within a band w, plus PAIR_CELLS; and its share of its call's
    REF_CELLS a reference (`_parts`: at most CHUNK_PAIRS pairs a call). float64 [Q], counted
    over distinct lengths (fast for many sequences)."""
    uq, inv = np.unique(lq, return_inverse=True)
    ut, counts = np.unique(lt, return_counts=True)
    a = np.minimum(uq[:, None], ut[None, :]).astype(np.float64)
    b = np.maximum(uq[:, None], ut[None, :]).astype(np.float64)
    cells = a * b if window is None else b * np.minimum(a, b - a + 2 * window + 1)
    per_call = len(lt) * REF_CELLS / max(1, CHUNK_PAIRS // max(len(lt), 1))
    return ((cells + PAIR_CELLS) * counts[None, :]).sum(1)[inv] + per_call


def _sequences(split) -> list:
    """The split's sequences as dtaidistance takes them: float64, one [T] array per sequence on
    one channel, [T, F] on several, each cut to its length."""
    F = split.X.shape[2]
    out = []
    for x, n in zip(split.X, split.lengths):
        s = np.asarray(x[:int(n)], np.float64)
        out.append(np.ascontiguousarray(s[:, 0] if F == 1 else s))
    return out


def _plan(lq: np.ndarray, lt: np.ndarray, max_cells: float, seed: int) -> tuple:
    """(band in readings or None for the full window, sorted indices of the test sequences to
    score, each query's cost `_cells`) within `max_cells`: every query with the full window where
    that fits, else in a band of BAND of the longest sequence, halved (3 -> 2 -> 1) while a seeded
    draw of the queries that fits holds fewer than MIN_QUERIES (all, if fewer); the indices None
    where none does."""
    least = min(MIN_QUERIES, len(lq))
    per_query = _cells(lq, lt, None)
    if per_query.sum() <= max_cells:
        return None, np.arange(len(lq)), per_query
    order = np.random.default_rng(seed).permutation(len(lq))
    window = max(1, int(np.ceil(BAND * max(lt.max(), lq.max()))))
    while True:
        per_query = _cells(lq, lt, window)
        if per_query.sum() <= max_cells:
            return window, np.arange(len(lq)), per_query
        drawn = order[np.cumsum(per_query[order]) <= max_cells]
        if len(drawn) >= least:
            return window, np.sort(drawn), per_query
        if window == 1:
            return 1, None, per_query
        window = (window + 1) // 2 if window > 2 else 1


def _parts(costs: np.ndarray, refs: int) -> list:
    """[(start, stop)] runs of queries of about CHUNK_CELLS and at most CHUNK_PAIRS pairs each."""
    most = max(1, int(CHUNK_PAIRS // max(refs, 1)))
    bounds, start, acc = [], 0, 0.0
    for i, c in enumerate(costs):
        acc += c
        if acc >= CHUNK_CELLS or i + 1 - start >= most or i == len(costs) - 1:
            bounds.append((start, i + 1))
            start, acc = i + 1, 0.0
    return bounds


def nearest_neighbour_dtw(train, test, max_cells: float = MAX_CELLS, seed: int = 0,
                          progress: bool = False) -> dict:
    """1-NN DTW accuracy of `test` against `train` (`edgeseq.data.Split`s: X float32 [N, T, F]
    zero padded past `lengths` int64 [N], y int64 [N]), at most `max_cells` warping cells.

    Returns {"method": "1-NN DTW", "dependent": several channels (DTW_D), "window": the band
    in readings (None: the full window), "accuracy": the share of scored test sequences whose
    nearest training sequence has their class, "queries": test sequences scored, "test_sequences",
    "references": training sequences, "cells": the cost counted (`_cells`: the cells, an upper bound in a
    band, with PAIR_CELLS a pair and REF_CELLS a training sequence a call), "seconds": wall clock, "library": "dtaidistance <version>"}; or, where
    not even MIN_QUERIES test sequences (all, if fewer) fit the budget in a band of 1 reading,
    {"method", "skipped": why, "test_sequences", "references"} without computing anything. With
    `progress`, lines on stderr: one first where the run takes more than one part, then one
    after each part.

    Raises UsageError where dtaidistance is not installed (it comes with edgeseq[train]) and
    ValueError for an empty split."""
    import logging
    logging.getLogger("be.kuleuven.dtai.distance").setLevel(logging.CRITICAL)   # its failures reach the caller
    try:
        import dtaidistance
        from dtaidistance import dtw, dtw_ndim
    except ImportError:
        raise UsageError("the 1-NN DTW baseline needs dtaidistance: pip install 'edgeseq[train]' "
                         "(or pip install dtaidistance)") from None
    if len(train) == 0 or len(test) == 0:
        raise ValueError(f"1-NN DTW needs training and test sequences (got {len(train)} and {len(test)})")
    t0 = time.perf_counter()
    lt, lq = np.asarray(train.lengths, np.int64), np.asarray(test.lengths, np.int64)
    window, queries, per_query = _plan(lq, lt, max_cells, seed)
    if queries is None:
        least = min(MIN_QUERIES, len(test))
        return {"method": "1-NN DTW", "test_sequences": int(len(test)), "references": int(len(train)),
                "skipped": f"{least:,} of the {_count(len(test), 'test sequence')} against "
                           f"{_count(len(train), 'training sequence')} (up to "
                           f"{_count(int(max(lt.max(), lq.max())), 'reading')}) take more than {max_cells:.3g} "
                           "warping cells even in a band of 1 reading"}
    refs, qs = _sequences(train), _sequences(test.take(queries))
    F = train.X.shape[2]
    kw = {"window": window + 1} if window else {}           # dtaidistance's window w keeps |i - j| < w
    nearest = np.empty(len(qs), np.int64)
    bounds = _parts(per_query[queries], len(refs))
    if progress and len(bounds) > 1:
        print(f"1-NN DTW baseline: {len(qs):,} test sequences against {len(refs):,}, "
              f"{per_query[queries].sum():.3g} warping cells in {len(bounds)} parts (--no-baseline leaves it out)",
              file=sys.stderr, flush=True)
    for a, b in bounds:
        series = qs[a:b] + refs
        block = ((0, b - a), (b - a, b - a + len(refs)))
        if F == 1:
            d = dtw.distance_matrix_fast(series, block=block, compact=True, **kw)
        else:
            d = dtw_ndim.distance_matrix_fast(series, ndim=F, block=block, compact=True, **kw)
        nearest[a:b] = np.argmin(np.asarray(d).reshape(b - a, len(refs)), axis=1)
        if progress and len(bounds) > 1:
            print(f"1-NN DTW baseline: {b:,} of {len(qs):,} test sequences ({time.perf_counter() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
    right = np.asarray(train.y)[nearest] == np.asarray(test.y)[queries]
    return {"method": "1-NN DTW", "dependent": F > 1, "window": window,
            "accuracy": float(right.mean()), "queries": int(len(queries)), "test_sequences": int(len(test)),
            "references": int(len(train)), "cells": int(per_query[queries].sum()),
            "seconds": round(time.perf_counter() - t0, 2),
            "library": f"dtaidistance {dtaidistance.__version__}"}


def scored_or_why(train, test, **kw) -> dict:
    """`nearest_neighbour_dtw(train, test, **kw)`, or, where dtaidistance is not installed or
    fails, {"method": "1-NN DTW", "skipped": why, "failed": True}: a model, report or study
    stands without its baseline. An empty split is the caller's to avoid (ValueError)."""
    try:
        return nearest_neighbour_dtw(train, test, **kw)
    except UsageError as e:                          # dtaidistance not installed
        why = str(e)
    except ValueError:
        raise
    except Exception as e:                           # noqa: BLE001 - dtaidistance failing
        why = "dtaidistance failed: " + (str(e).splitlines()[0].rstrip(".") if str(e) else type(e).__name__)
    return {"method": "1-NN DTW", "skipped": why, "failed": True}


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}" + ("" if n == 1 else "s")


def describe(b: dict) -> str:
    """One line for a `nearest_neighbour_dtw` result: accuracy, window, what was scored, time;
    or why it was not scored."""
    if "accuracy" not in b:
        return f"{b['method']} not scored: {b.get('skipped', 'no figure')}"
    how = "full window" if b["window"] is None else f"band of {_count(b['window'], 'reading')}"
    part = (f"{b['queries']:,} of {b['test_sequences']:,} test sequences (a seeded draw)"
            if b["queries"] < b["test_sequences"] else _count(b["test_sequences"], "test sequence"))
    return (f"{b['method']}{' (dependent, all channels)' if b['dependent'] else ''} on the same split: "
            f"{b['accuracy']:.3f} per sequence ({how}; {part} against {_count(b['references'], 'training sequence')}, "
            f"{b['seconds']:.1f} s)")


def below(accuracy: float, b: dict | None) -> bool:
    """Whether a per-sequence test accuracy is below the baseline `b` (None, or not scored: no)."""
    return b is not None and "accuracy" in b and accuracy < b["accuracy"] - 1e-9


def scored_on(b: dict) -> str:
    """Which test sequences the baseline scored, for a comparison's wording."""
    if b["queries"] < b["test_sequences"]:
        return f"on a seeded draw of {b['queries']:,} of the {b['test_sequences']:,} test sequences"
    return "on the same test split"
