"""Many devices, one model: every device with a reading ready advances in one multi-stream push.

Each device's state lives with the device (`Device.arrays`, the session's state rows for one
stream). A round gathers the ready devices' rows into a session of a power-of-two number of
streams (one session per size, made on first use, on the backend asked for: native where it
runs), pushes all their readings in one call and scatters the new rows back. Devices join and
leave between rounds; a Transformer's devices are batched with those holding as many cache
rows (all of them once their windows are full). The arithmetic per device is the session's own:
a device's predictions do not depend on which other devices share its round.

A model with decision settings (`edgeseq calibrate`) runs its decision layer the same way: each
device's decision state (`Device.decision`) joins the round's `Decider` rows and goes back
with its new value, and `step` leaves each reading's events in `Batcher.events`.
"""

from __future__ import annotations

import numpy as np

from edgeseq.errors import HistoryFullError, ReadingError, UsageError
from edgeseq.runtime.session import StreamSession

MAX_BATCH = 1024


class Device:
    """One device's stream: `arrays` (float32, one per state tensor, batch axis of 1),
    `position` (readings since its start or reset), `last_seq` (the last sequence number
    applied, -1 before any), `stream_seq` (the stream sequence of the last message it consumed,
    0 before any), `dirty` (changed since its state was last stored), `boot` (resets seen: part of
    each prediction's id, so a device that counts from 0 again is never taken for a duplicate),
    `decision` (the decision layer's state, {name: array with a batch axis of 1}; None for a
    model without decision settings), `bucket` (its rate limit's (readings left, storage time in
    ns of the last message); None before its first message)."""

    __slots__ = ("name", "arrays", "position", "last_seq", "stream_seq", "dirty", "seen", "boot", "decision",
                 "bucket", "letters")

    def __init__(self, name: str, arrays: list, position: int = 0, last_seq: int = -1, boot: int = 0,
                 decision: dict | None = None):
        self.name, self.arrays, self.position, self.last_seq = name, arrays, int(position), int(last_seq)
        self.stream_seq, self.dirty, self.seen, self.boot = 0, False, 0.0, int(boot)
        self.decision, self.bucket = decision, None
        self.letters = (0, 0)     # rate-limit dead letters: (storage time in ns of the last, refusals since)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays) + sum(a.nbytes for a in (self.decision or {}).values())


def _bucket(n: int) -> int:
    return 1 << (int(n) - 1).bit_length()


class Batcher:
    """Batched pushes for many devices on one model file.

    `model`: an edgeseq .onnx step graph; `backend` as StreamSession (None: $EDGESEQ_BACKEND or
    auto); `max_history` bounds a Transformer's cache (default: its trained window, slid);
    `max_batch` streams per push at most (1..MAX_BATCH). Raises as StreamSession
    (ModelFileError, UsageError)."""

    def __init__(self, model, backend: str | None = None, max_history: int | None = None,
                 max_batch: int = MAX_BATCH):
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or not 1 <= max_batch <= MAX_BATCH:
            raise UsageError(f"max_batch must be a whole number from 1 to {MAX_BATCH}, got {max_batch!r}")
        self.model, self.backend_asked, self.max_history = str(model), backend, max_history
        self.max_batch = _bucket(max_batch) if _bucket(max_batch) == max_batch else _bucket(max_batch) // 2
        self.one = StreamSession(model, streams=1, backend=backend, max_history=max_history, on_full="slide",
                                 decision=False)
        self.meta, self.labels, self.features = self.one.meta, self.one.labels, self.one.n_features
        from edgeseq.runtime.decision import DecisionSpec
        self.kind = self.meta.kind
        if self.kind == "anomaly":               # each device learns its own baseline: its Watcher state is the decision's
            from edgeseq.runtime.anomaly import AnomalySpec
            self.decision = AnomalySpec.from_json(self.meta.task)
        else:
            self.decision = None if self.meta.decision is None else DecisionSpec.from_json(self.meta.decision,
                                                                                          self.labels)
        self._deciders = {}
        self._blank_decision = None if self.decision is None else self._decider(1).snapshot()
        self.events: list = []      # after `step`: the decision layer's events of each item ([] without settings)
        self.model_sha256, self.backend = self.one.model_sha256, self.one.backend
        self._blank = self.one.snapshot()["state"]
        self._sessions = {1: self.one}
        self.max_state_bytes = self._state_bytes()

    def _state_bytes(self) -> int:
        """The most bytes a stored device state of this model can take (`wire.encode_state`): its
        arrays (a Transformer's cache at its longest) and 64 KiB for the rest."""
        if not self.one.growing:
            return sum(a.nbytes for a in self._blank) + 65536
        rows = self.max_history or getattr(self.meta, "max_history", None) or (1 << 20)
        per_row = sum(int(np.prod(a.shape[:2] + a.shape[3:])) * a.itemsize if a.ndim >= 3 else a.nbytes
                      for a in self._blank)
        return per_row * int(rows) + 65536

    def _fresh_decision(self):
        return None if self._blank_decision is None else {k: a.copy() for k, a in self._blank_decision.items()}

    def new_device(self, name: str) -> Device:
        return Device(name, [a.copy() for a in self._blank], decision=self._fresh_decision())

    def reset(self, device: Device) -> None:
        device.arrays, device.position, device.dirty = [a.copy() for a in self._blank], 0, True
        device.decision = self._fresh_decision()

    def check_decision(self, decision: dict | None) -> dict | None:
        """A stored decision state checked for this model (`Decider.check`): the arrays to adopt,
        or a fresh state where the model has settings and `decision` is None; None for a model
        without settings. Raises UsageError for a state that does not fit."""
        if self.decision is None:
            return None
        if decision is None:
            return self._fresh_decision()
        return self._decider(1).check(decision)

    def _decider(self, b: int):
        d = self._deciders.get(b)
        if d is None:
            if self.kind == "anomaly":
                from edgeseq.runtime.anomaly import Watcher
                norm = self.meta.normalization
                d = self._deciders[b] = Watcher(self.decision, norm["mean"], norm["std"], b)
            else:
                from edgeseq.runtime.decision import Decider
                d = self._deciders[b] = Decider(self.decision, b)
        return d

    def answer(self, out) -> tuple:
        """(label, value) a prediction message carries for one `step` output: the top class and
        its probability; for an anomaly model the device's state ("learning", "normal" or
        "anomaly") and its level in standard deviations of its learnt score (None while learning);
        for a regression model its target's name and value in its units (several targets:
        "targets" and their values, in the model's order)."""
        if self.kind == "regress":               # out: the targets in their units
            if len(out) == 1:
                return self.labels[0], float(out[0])
            return "targets", [float(v) for v in out]
        if self.kind == "anomaly":
            level, active = float(out[0]), bool(out[1])
            if level != level:
                return "learning", None
            return ("anomaly" if active else "normal"), level
        k = int(out.argmax())
        return self.labels[k], float(out[k])

    def check_arrays(self, arrays: list) -> bool:
        """Whether stored `arrays` fit this model's state (count, shapes but the cache rows, finite)."""
        if len(arrays) != len(self._blank):
            return False
        for a, b in zip(arrays, self._blank):
            if a.ndim != b.ndim or a.shape[0] != 1 or not np.isfinite(a).all():
                return False
            if self.one.growing:
                if a.shape[:2] != b.shape[:2] or a.shape[3:] != b.shape[3:]:
                    return False
            elif a.shape != b.shape:
                return False
        return True

    def _session(self, b: int) -> StreamSession:
        s = self._sessions.get(b)
        if s is None:
            s = self._sessions[b] = StreamSession(self.model, streams=b, backend=self.backend_asked,
                                                  max_history=self.max_history, on_full="slide", decision=False)
        return s

    def step(self, items: list) -> list:
        """Advance each (Device, reading float32 [features]) of `items` (each device once) by its
        reading. Returns, in order, float32 [classes] probabilities, or a str saying why that
        reading was refused (out of range, NaN logits): a refused reading leaves its device as
        it was; the others advance. `self.events` then holds each item's decision events
        (`edgeseq.runtime.decision.Event`s, stream 0), [] for a refused reading."""
        out = [None] * len(items)
        self.events = [[] for _ in items]
        groups: dict = {}
        for i, (dev, _) in enumerate(items):
            groups.setdefault(dev.arrays[0].shape, []).append(i)
        for idx in groups.values():
            for lo in range(0, len(idx), self.max_batch):
                self._round([(i, *items[i]) for i in idx[lo:lo + self.max_batch]], out)
        return out

    def _round(self, chunk: list, out: list) -> None:
        b = _bucket(len(chunk))
        sess = self._session(b)
        pad = b - len(chunk)
        rows = chunk + [chunk[0]] * pad                     # padding rows repeat a real one; dropped after
        x = np.stack([r[2] for r in rows]).astype(np.float32, copy=False)
        try:
            x = sess.check_reading(x)
        except ReadingError:
            keep = []
            for i, dev, xi in chunk:
                try:
                    self.one.check_reading(xi)
                    keep.append((i, dev, xi))
                except ReadingError as e:
                    out[i] = str(e).replace("; stream state unchanged", "").replace(" for stream 0", "")
            if keep:
                self._round(keep, out)
            return
        arrays = [np.concatenate([r[1].arrays[k] for r in rows]) for k in range(len(self._blank))]
        position = np.array([r[1].position for r in rows], np.int64)
        sess._apply(position, arrays)
        try:
            probs = sess.push(x)
        except (ReadingError, HistoryFullError):
            if b == 1:
                out[chunk[0][0]] = "the model gave NaN or Inf from this reading; the device's state is unchanged"
                return
            for one in chunk:                            # find the reading that failed; the rest go on
                self._round([one], out)
            return
        snap = sess.snapshot()
        pos = snap["position"]
        fired, dstate = [[] for _ in range(b)], None
        if self.decision is not None:             # the decision layer: the devices' rows in, one step, out
            dec = self._decider(b)
            dec.load({k: np.concatenate([r[1].decision[k] for r in rows]) for k in self._blank_decision})
            for e in (dec.update(x, sess._outputs()) if self.kind == "anomaly" else dec.update(probs)):
                fired[e.stream].append(e._replace(stream=0))
            dstate = dec.snapshot()
            if self.kind == "anomaly":              # what a device's answer carries: its level and whether it is in an event
                probs = np.stack([dec.level, dec.active_mask()], 1).astype(np.float32)
        if self.kind == "regress":                  # a device's answer: its targets in their own units
            from edgeseq.runtime.regress import in_units
            probs = in_units(self.meta.task, sess._outputs())
        for j, (i, dev, _) in enumerate(chunk):
            dev.arrays = [a[j:j + 1].copy() for a in snap["state"]]
            dev.position = int(pos[j])
            dev.dirty = True
            if dstate is not None:
                dev.decision = {k: a[j:j + 1].copy() for k, a in dstate.items()}
                self.events[i] = fired[j]
            out[i] = probs[j]
