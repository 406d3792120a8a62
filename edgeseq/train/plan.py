"""How a training epoch is cut into updates, and the progress shown while it runs.

`plan_epoch` sizes an epoch: how many parallel streams and lanes of single sequences, how many
updates (the method is described in `edgeseq.train.loop`); `training_streams` and `sequence_lanes`
lay out one epoch's readings for it; `Progress` reports on stderr. numpy only: no torch.
"""

from __future__ import annotations

import heapq
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from edgeseq.data import Split, since_change
from edgeseq.data.augment import cut_pieces
from edgeseq.errors import printable, safe_text
from edgeseq.train.config import TrainConfig


def training_streams(split: Split, streams: int, grace: int, rng: np.random.Generator, join: float = 0.0,
                     cut_rng: np.random.Generator | None = None):
    """The split's sequences (valid readings) joined end to end in a random order and cut into
    `streams` streams of equal length (the last padded). Returns X (S, L, F) float32, labels
    (S, L) int64 and a scored mask (S, L) bool: False on padding and on the first `grace`
    readings after each change of label and at each stream's start. `join` above 0: each
    sequence is first cut in two at a random point with that chance, drawn from `cut_rng`,
    and the pieces joined in a shuffled order (`edgeseq.data.augment.cut_pieces`)."""
    order = rng.permutation(len(split))
    parts = cut_pieces(split.lengths, order, join, cut_rng) if join > 0 else \
        [(i, 0, split.lengths[i]) for i in order]
    x = np.concatenate([split.X[i, a:b] for i, a, b in parts])                   # (R, F)
    y = np.concatenate([split.Y[i, a:b] for i, a, b in parts])                   # (R,)
    S = max(1, min(streams, len(y)))
    L = math.ceil(len(y) / S)
    X = np.zeros((S, L, split.X.shape[2]), np.float32)
    Y = np.full((S, L), -1, np.int64)
    scored = np.zeros((S, L), bool)
    for s in range(S):
        part = slice(s * L, min((s + 1) * L, len(y)))
        n = part.stop - part.start
        X[s, :n], Y[s, :n] = x[part], y[part]
        scored[s, :n] = since_change(y[part]) >= grace
    return X, Y, scored


@dataclass(frozen=True)
class Plan:
    """How one epoch is cut into updates (`plan_epoch`): the figures behind the estimate."""
    readings: int             # training readings (valid, all sequences)
    streams: int              # parallel TBPTT streams (0: no stream loss)
    stream_len: int           # readings per stream
    chunk: int                # readings per update, in each stream and each lane
    lanes: int                # single sequences side by side (0: whole sequences in minibatches)
    lane_len: int             # readings per lane, each sequence padded to whole chunks
    batch: int                # whole sequences per update, where they run whole
    seq_updates: int          # updates the single sequences take per epoch
    per_epoch: int            # updates per epoch (the single sequences' reused in turn when fewer)

    @property
    def stream_updates(self) -> int:
        return -(-self.stream_len // self.chunk)


CHUNK_MIN, CHUNK_MAX = 50, 256     # the data-given TBPTT chunk's bounds (`chunk_for`)


def chunk_for(lengths) -> int:
    """The TBPTT chunk for sequences of `lengths` (N,): CHUNK_MIN where the median length is at
    most twice that (the gradient then reaches at least half of a typical sequence; 100-reading
    BasicMotions trained best so), else the median length up to CHUNK_MAX readings, so the loss
    after a sequence's last reading reaches back through the whole of a typical sequence (a class
    decided early in a 150-reading sequence is out of reach of a 50-reading chunk), while a long
    recording still trains in bounded chunks."""
    median = int(np.median(np.asarray(lengths)))
    return CHUNK_MIN if median <= 2 * CHUNK_MIN else int(min(CHUNK_MAX, median))


def plan_epoch(lengths: np.ndarray, tc: TrainConfig, streaming: bool, chunked: bool = True) -> Plan:
    """Updates per epoch for training sequences of `lengths` (N,) int. Streams: `tc.streams`,
    more when that would take over `tc.updates` updates. Single sequences, cut into pieces of
    at most `tc.seq_max` readings: as many lanes as streams (`sequence_lanes`), or with
    `chunked` False (bidirectional and positional models) whole in minibatches of
    `tc.batch_size`."""
    lengths = np.asarray(lengths, np.int64)
    N, R = len(lengths), int(lengths.sum())
    c = tc.chunk if tc.chunk is not None else chunk_for(lengths)
    S = max(tc.streams, math.ceil(R / (c * tc.updates)))
    S = max(1, min(S, R // c))                                # no stream shorter than one chunk
    stream_len = math.ceil(R / S) if streaming else 0
    if chunked:
        totals = lane_totals(pieces(lengths, tc.seq_max), S, c)
        lanes, lane_len, b = len(totals), int(totals.max()), 0
        n = lane_len // c
    else:
        lanes, lane_len, b = 0, 0, min(N, tc.batch_size)
        n = math.ceil(N / b)
    return Plan(R, S if streaming else 0, stream_len, c, lanes, lane_len, b, n,
                max(math.ceil(stream_len / c), n))


def pieces(lengths: np.ndarray, most: int) -> list:
    """[(sequence, start, length)]: each sequence whole, or one longer than `most` readings cut
    into the fewest near-equal pieces of at most `most`."""
    out = []
    for i, L in enumerate(np.asarray(lengths, np.int64).tolist()):
        m = -(-L // most)
        edges = [round(k * L / m) for k in range(m + 1)]
        out.extend((i, edges[k], edges[k + 1] - edges[k]) for k in range(m))
    return out


def lane_totals(parts: list, lanes: int, chunk: int, order=None) -> np.ndarray:
    """Readings per lane when `parts` [(sequence, start, length)], each padded to whole chunks,
    are dealt longest first to the least-filled of `lanes` lanes (fewer lanes than parts at
    most). The totals depend on the lengths only; `order` (a permutation of the parts) breaks
    ties, and with it returns (totals, [part indices per lane])."""
    n = len(parts)
    size = np.array([-(-p[2] // chunk) * chunk for p in parts], np.int64)
    perm = np.arange(n) if order is None else np.asarray(order)
    ranked = perm[np.argsort(-size[perm], kind="stable")]
    k = max(1, min(lanes, n))
    heap = [(0, j) for j in range(k)]
    members = [[] for _ in range(k)]
    for i in ranked:
        total, j = heapq.heappop(heap)
        members[j].append(int(i))
        heapq.heappush(heap, (total + int(size[i]), j))
    totals = np.zeros(k, np.int64)
    for total, j in heap:
        totals[j] = total
    return totals if order is None else (totals, members)


def sequence_lanes(split: Split, plan: Plan, most: int, rng: np.random.Generator):
    """One epoch's single sequences side by side in `plan.lanes` lanes, each piece (`pieces`)
    starting at a chunk boundary from zero state, in a random order. Returns X (lanes, L, F)
    float32, labels Y (lanes, L) int64 (-1 on padding), `last` (lanes, L) bool: a piece's last
    reading, `aux` (lanes, L) bool: readings past the first quarter of their piece, and
    `fresh` (lanes, L // chunk) bool: the chunk starts a piece."""
    parts = pieces(split.lengths, most)
    totals, members = lane_totals(parts, plan.lanes, plan.chunk, rng.permutation(len(parts)))
    k, L, c = len(members), plan.lane_len, plan.chunk
    X = np.zeros((k, L, split.X.shape[2]), np.float32)
    Y = np.full((k, L), -1, np.int64)
    last, aux = np.zeros((k, L), bool), np.zeros((k, L), bool)
    fresh = np.zeros((k, L // c), bool)
    for j, lane in enumerate(members):
        t = 0
        for p in rng.permutation(lane):
            i, start, n = parts[p]
            X[j, t:t + n] = split.X[i, start:start + n]
            Y[j, t:t + n] = split.Y[i, start:start + n]
            last[j, t + n - 1] = True
            aux[j, t + n // 4:t + n] = True
            fresh[j, t // c] = True
            t += -(-n // c) * c
    aux &= Y >= 0
    last &= Y >= 0
    return X, Y, last, aux, fresh


def clock(seconds: float) -> str:
    """Seconds as people read a duration: '45s', '3m05s', '2h10m'."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """Training progress on stderr: before the first update one line with the data's size, the
    plan and the time it should take (from timed updates); then, on a terminal, a bar per
    update with readings/s and the time left, else (CI, a log file) a plain line every
    `every` seconds; at the end one line with the time taken."""

    LONG = 600.0              # estimates past this many seconds come with advice

    def __init__(self, arch, dataset, plan: Plan, epochs: int, enabled: bool, every: float = 5.0, stream=None,
                 early: bool = False, held: str | None = None, extend: int = 1, restarts: int = 0):
        self.enabled, self.every = enabled, every
        self.out = stream or sys.stderr
        self.arch, self.dataset, self.plan, self.epochs = arch, dataset, plan, epochs
        self.early, self.held = early, held       # stops on a validation split (`held` says which), else a budget
        self.extend = extend                      # the budget may grow to this many times while the model learns
        self.restarts = restarts                  # a stalled run may train again this many more times
        self.total = epochs * plan.per_epoch
        self.done, self.bar, self.t0 = 0, None, None

    def grow(self, epochs: int):
        """The budget grew: `epochs` epochs in all now (the final ones included)."""
        self.epochs = max(self.epochs, epochs)
        self.total = self.epochs * self.plan.per_epoch
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.refresh()

    def _say(self, line: str):
        if self.bar is not None:               # above a bar on a terminal, not through it
            self.bar.write(safe_text(line), file=self.out)
            return
        print(safe_text(line), file=self.out, flush=True)       # names in it are escaped where it is built

    def start(self, seconds_per_update: float):
        p, ds = self.plan, self.dataset
        work = []
        if p.streams:
            work.append(f"{p.streams} streams x {p.chunk} readings")
        work.append(f"{p.lanes} lanes of sequences x {p.chunk} readings" if p.lanes else f"{p.batch} whole sequences")
        estimate = seconds_per_update * self.total
        epochs = f"up to {self.epochs} epochs" if self.early else f"{self.epochs} epochs"
        grow = (f"; the budget grows up to {self.extend}x while the model is still learning its training data"
                if self.early and self.extend > 1 else "")
        self._say(f"train {self.arch} on {printable(ds.name)}: {len(ds.train):,} sequences, {p.readings:,} readings x "
                  f"{ds.n_features} channels, {len(ds.labels)} classes; {epochs} x {p.per_epoch:,} "
                  f"updates ({' + '.join(work)}); {'at most' if self.early else 'about'} {clock(estimate)}"
                  f"{' for that' if grow else ''} (estimated from timed updates{grow})")
        if self.early:
            again = (f"; a run that stalls far from fitting its training data trains again, up to {self.restarts} "
                     f"more time{'s' if self.restarts != 1 else ''}" if self.restarts else "")
            self._say(f"  validation: {self.held}; training stops when its score has not improved for a while{again}")
        elif self.held:
            self._say(f"  no validation split ({self.held}): the whole budget runs, and once more while the "
                      "model is still learning its training data")
        if estimate > self.LONG:
            self._say("  that is long: fewer epochs (--epochs), a smaller model (--set hidden=32) or fewer "
                      "readings (downsample the recordings) shorten it; --quiet hides this progress")
        if getattr(self.out, "isatty", lambda: False)():
            from tqdm import tqdm
            self.bar = tqdm(total=self.total, desc=f"train {self.arch}", unit="update", leave=False, file=self.out)
        self.t0 = self.last = time.perf_counter()

    def update(self, epoch: int, loss: float, readings: int):
        if self.t0 is None:
            return
        self.done += 1
        now = time.perf_counter()
        rate = readings / max(now - self.t0, 1e-9)
        if self.bar is not None:
            self.bar.set_postfix_str(f"epoch {epoch + 1}/{max(self.epochs, epoch + 1)}, loss {loss:.3f}, {rate:,.0f} readings/s",
                                     refresh=False)
            self.bar.update(1)
        elif now - self.last >= self.every:
            self.last = now
            left = (now - self.t0) / self.done * max(0, self.total - self.done)   # the final epochs may run past it
            self._say(f"train {self.arch}: epoch {epoch + 1}/{max(self.epochs, epoch + 1)}, update {self.done:,}/"
                      f"{max(self.total, self.done):,} ({100 * min(1.0, self.done / self.total):.0f}%), loss {loss:.3f}, "
                      f"{rate:,.0f} readings/s, "
                      f"{clock(now - self.t0)} elapsed, about {clock(left)} left")

    def epoch_done(self, point: dict):
        """After an epoch with a validation score: off a terminal, one plain line."""
        now = time.perf_counter()
        if self.t0 is None or self.bar is not None or now - self.last < self.every:
            return
        self.last = now
        acc = point.get("val_accuracy")
        fit = f", fit {point['fit']:.3f}" if "fit" in point else ""
        self._say(f"train {self.arch}: epoch {point['epoch']}/{max(self.epochs, point['epoch'])}, loss "
                  f"{point['loss']:.3f}{fit}, validation "
                  f"loss {point.get('val_loss', float('nan')):.3f}, accuracy {acc if acc is None else round(acc, 3)}, "
                  f"lr {point['lr']:.2g}{' (best)' if point.get('best') else ''}")

    def close(self):
        if self.bar is not None:
            self.bar.close()
        if self.t0 is not None:
            self._say(f"train {self.arch}: {self.done:,} updates in {clock(time.perf_counter() - self.t0)}")
