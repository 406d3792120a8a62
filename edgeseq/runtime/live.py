"""Live streaming from a sensor source: pacing, latency, keeping up, bad readings, a state file.

Sources (`open_source(spec)`), each an iterator of readings, a reading being either a text
line (CSV, parsed here) or a sequence of numbers:

    replay:basicmotions      the embedded test set, sequences end to end (no hardware needed)
    replay:FILE.csv          a CSV of readings (header line optional; lines ended by LF, CR LF or CR)
    csv:FILE.csv             the same, unpaced (as fast as it can)
    stdin / -                one CSV reading per line on standard input
    serial:/dev/ttyUSB0[@115200]   CSV over a UART (needs pyserial: pip install ".[pi]" in edgeseq's clone); any
                             pyserial URL works too (socket://host:port, loop://); baud 1 to 100,000,000
    sim:N[:bad]              N >= 1 synthetic readings; with ':bad', NaN, Inf, short and garbage ones mixed in
    python:module:Class      your own driver, e.g. an I2C IMU (see below)

A spec that cannot be used is a UsageError naming what is wrong, before anything streams.

A driver for hardware edgeseq does not know is a class with `read()` returning one reading
(a sequence of floats in the model's feature order, or None at the end) and an optional
`close()`; `python:mypkg.imu:IMU` constructs it with no arguments:

    class IMU:
        def __init__(self): self.bus = smbus2.SMBus(1)
        def read(self): return [ax, ay, az, gx, gy, gz]     # from the chip's registers

A driver whose constructor or read() raises ends the run with one error line (exit 1; 2 when
it cannot be built with no arguments), a state file saved as of the last good reading; a
reading it returns that is not real numbers is a bad reading like any other.

Pacing: replay sources are released at `rate` readings per second (0 or None: unpaced, else
MIN_RATE to MAX_RATE) on a fixed schedule; live
sources arrive at the device's pace. A reading handled after its slot has passed counts as
late; if the loop falls more than `max_lag` readings behind, readings are dropped to catch
up and counted. Neither is hidden: both are in every status line and in the summary.

True labels: the embedded replay knows each reading's; a CSV source (replay:, csv:, stdin,
serial) whose header has a `label` column carries them too (other non-feature columns are
ignored, see `edgeseq.runtime.stream`). Either way each line shows the true label and the
summary scores them the same way (`LabelScore`: readings whose label the model knows, and
those past the grace period after the start and each change of label).

Labels reach a status line escaped (`edgeseq.errors.printable`: a model's or a CSV's label
holding a terminal escape sequence or a right-to-left override is shown as \\x1b..., \\u202e);
JSON lines hold them exactly, escaped by json.dumps (ASCII only).
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import re
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from edgeseq.errors import EdgeseqError, ReadingError, UsageError, printable
from edgeseq.runtime.stream import LabelScore, LineReader, label_lines, plural_readings, read_lines

MIN_RATE, MAX_RATE = 1e-6, 1e6        # readings per second: one per 11 days to a million per second
MAX_BAUD = 100_000_000
SOURCES = ("replay:basicmotions (or another embedded set), replay:FILE.csv, csv:FILE.csv, stdin, serial:/dev/ttyUSB0[@baud], sim:N[:bad] "
           "or python:module:Class")


class ReplaySource:
    """Replayed readings. The embedded test set also knows each reading's true label
    (`truth()`; for regression data, its first target's value); a CSV file's come from a
    `label` column, through its `reader`."""

    paced = True
    labels = None              # per row: the true label's name (embedded data only)

    def __init__(self, what: str, features: list, skip: int = 0):
        from edgeseq.data import EMBEDDED
        if what in EMBEDDED:                  # its test split, joined; where it names groups, the first group's
            from edgeseq.data import load_dataset
            ds = load_dataset(what).for_model(features, f"the embedded data {what}")
            te = ds.test
            rows = range(len(te)) if te.groups is None else np.flatnonzero(te.groups == te.groups[0])
            self.rows = np.concatenate([te.X[i, :te.lengths[i]] for i in rows])
            y = np.concatenate([te.Y[i, :te.lengths[i]] for i in rows])
            self.labels = [ds.labels[k] for k in y]
            if te.targets is not None:            # regression data: the truth is the first target's value
                self.labels = [f"{v:.6g}" for v in np.concatenate([te.targets[i, :te.lengths[i], 0] for i in rows])]
        else:
            try:
                with open(what, "rb") as f:
                    raw = f.read()
            except OSError as e:
                raise UsageError(f"cannot read readings file '{what}': {e.strerror}") from None
            self.reader = LineReader(features)
            # lines end at LF, CR LF or a lone CR (an old Mac file), as `edgeseq train` and `stream` read them
            self.rows = [line for line in raw.splitlines() if line.strip()]
            try:
                header = self.rows and self.reader.parse(self.rows[0]) is None
            except ReadingError:                      # a bad first reading: streamed (and judged) as such
                header = False
            if header:                                # a header: columns reordered
                self.rows = self.rows[1:]
        self.i = skip

    def read(self):
        if self.i >= len(self.rows):
            return None
        r = self.rows[self.i]
        self.i += 1
        self.last = self.i - 1
        return r

    def truth(self):
        """The true label of the row read last, or None where the source has no labels of its own."""
        if self.labels is None or getattr(self, "last", None) is None:
            return None
        return self.labels[self.last]

    def close(self):
        pass


class LineSource:
    paced = False

    def __init__(self, fh, close=False):
        self.fh, self._close = fh, close
        self._lines = read_lines(fh)

    def read(self):
        return next(self._lines, None)

    def close(self):
        if self._close:
            self.fh.close()


class SimSource:
    """N synthetic readings (seeded); with bad=True every 7th is NaN, Inf, short or garbage."""
    paced = True

    def __init__(self, n: int, features: int, bad: bool = False, seed: int = 0):
        self.n, self.F, self.bad, self.k = n, features, bad, 0
        self.rng = np.random.default_rng(seed)

    def read(self):
        if self.k >= self.n:
            return None
        self.k += 1
        x = self.rng.standard_normal(self.F)
        if self.bad and self.k % 7 == 0:
            kind = (self.k // 7) % 4
            if kind == 0:
                x[0] = np.nan
            elif kind == 1:
                x[-1] = np.inf
            elif kind == 2:
                return ",".join(f"{v:.4f}" for v in x[:-1])
            else:
                return "\ufffd\ufffd\x00garbage"
        return ",".join(f"{v:.5f}" for v in x)

    def close(self):
        pass


def _why(e: BaseException) -> str:
    text = " ".join(str(e).split())[:120]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class PluginSource:
    """`python:module:Class`: a class with read() (and optionally close()), built with no arguments."""
    paced = False

    def __init__(self, spec: str):
        self.spec = f"python:{spec}"
        mod, _, name = spec.partition(":")
        if not mod or not name:
            raise UsageError(f"source '{self.spec}' must be python:module:Class, e.g. python:mypkg.imu:IMU")
        try:
            obj = importlib.import_module(mod)
            for part in name.split("."):
                obj = getattr(obj, part)
        except Exception as e:                   # the module is the user's: its import may raise anything
            raise UsageError(f"cannot load source {self.spec} ({_why(e)}); give module:Class with a read() "
                             "method") from None
        if not inspect.isclass(obj):
            raise UsageError(f"source {self.spec} is a {type(obj).__name__}, not a class; give module:Class, a "
                             "class with a read() method")
        if not callable(getattr(obj, "read", None)):
            raise UsageError(f"source {self.spec} has no read() method; it must return one reading per call "
                             "(None at the end)")
        try:
            self.obj = obj()
        except TypeError as e:
            raise UsageError(f"cannot construct source {self.spec} with no arguments ({_why(e)})") from None
        except Exception as e:
            raise EdgeseqError(f"source {self.spec} failed to start ({_why(e)})") from None

    def read(self):
        try:
            return self.obj.read()
        except Exception as e:
            raise EdgeseqError(f"source {self.spec} failed while reading ({_why(e)})") from None

    def close(self):
        try:
            getattr(self.obj, "close", lambda: None)()
        except Exception as e:
            raise EdgeseqError(f"source {self.spec} failed to close ({_why(e)})") from None


def stdin_bytes():
    """Standard input as a binary file, or UsageError if it is closed."""
    if sys.stdin is None or sys.stdin.closed:
        raise UsageError("standard input is closed; pipe readings in or pass a file")
    return getattr(sys.stdin, "buffer", sys.stdin)


def open_source(spec: str, features: list, skip: int = 0):
    kind, _, arg = spec.partition(":")
    if spec in ("stdin", "-"):
        return LineSource(stdin_bytes())
    if kind == "replay" and arg:
        return ReplaySource(arg, features, skip)
    if kind == "csv" and arg:
        src = ReplaySource(arg, features, skip)
        src.paced = False
        return src
    if kind == "serial" and arg:
        port, at, baud = arg.rpartition("@") if "@" in arg else (arg, "", "")
        if not port:
            raise UsageError(f"source '{spec}' names no port; e.g. serial:/dev/ttyUSB0@115200")
        if at and not _digits(baud, 1, MAX_BAUD):
            raise UsageError(f"source '{spec}': baud '{baud[:20]}' is not a whole number from 1 to {MAX_BAUD:,}; "
                             "e.g. serial:/dev/ttyUSB0@115200")
        try:
            import serial
        except ImportError:
            raise UsageError("serial sources need pyserial: pip install '.[pi]' in edgeseq's clone") from None
        try:
            return LineSource(serial.serial_for_url(port, baudrate=int(baud or 115200), timeout=5), close=True)
        except (serial.SerialException, ValueError, OverflowError, OSError) as e:
            raise UsageError(f"cannot open serial port {port}: {' '.join(str(e).split())[:150]}") from None
    if kind == "sim" and arg:
        n, _, bad = arg.partition(":")
        if not _digits(n, 1, None) or bad not in ("", "bad"):
            raise UsageError(f"source '{spec}' must be sim:N or sim:N:bad with N a whole number >= 1, e.g. sim:500")
        return SimSource(int(n), len(features), bad == "bad")
    if kind == "python" and arg:
        return PluginSource(arg)
    raise UsageError(f"unknown source '{spec}'; use {SOURCES}")


def _digits(text: str, low: int, high: int | None) -> bool:
    """Whether `text` is a whole number (plain digits) from `low` to `high`."""
    if not text.isascii() or not text.isdigit() or len(text) > 30:
        return False
    return low <= int(text) and (high is None or int(text) <= high)


def check_rate(rate) -> float:
    """`rate` as readings per second (0.0: unpaced), or UsageError: a finite number, 0 or from
    MIN_RATE to MAX_RATE (a pace of 1e-300 readings/s would sleep for ever; inf, no pace at all)."""
    if rate is None:
        return 0.0
    if isinstance(rate, bool) or not isinstance(rate, (int, float, np.integer, np.floating)) \
            or not math.isfinite(rate) or rate != 0 and not MIN_RATE <= rate <= MAX_RATE:
        raise UsageError(f"--rate must be 0 (unpaced) or from {MIN_RATE:g} to {MAX_RATE:g} readings per second, "
                         f"got {rate!r}")
    return float(rate)


def _count(name: str, value, low: int = 1, none_ok: bool = False):
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise UsageError(f"{name} must be a whole number >= {low}, got {value!r}")
    return int(value)


@dataclass
class Stats:
    readings: int = 0
    bad: dict = field(default_factory=lambda: {"nan_inf": 0, "field_count": 0, "garbage": 0, "non_numeric": 0,
                                               "out_of_range": 0})
    late: int = 0
    dropped: int = 0
    saves: int = 0
    latencies: deque = field(default_factory=lambda: deque(maxlen=1000))

    def latency(self) -> dict:
        if not self.latencies:
            return {"median_us": None, "p99_us": None}
        a = np.fromiter(self.latencies, float) * 1e6
        return {"median_us": round(float(np.median(a)), 1), "p99_us": round(float(np.percentile(a, 99)), 1)}


NAN_INF = re.compile(r"NaN or Inf|has -?(nan|inf) in '")


def _bad_kind(msg: str, line) -> str:
    if isinstance(line, (bytes, bytearray)):
        line = bytes(line).decode("utf-8", errors="replace")
    if "not UTF-8" in msg or "longer than" in msg or \
            (isinstance(line, str) and any(ord(c) < 9 or c == "\ufffd" for c in line)):
        return "garbage"
    if NAN_INF.search(msg):
        return "nan_inf"
    if "beyond" in msg:
        return "out_of_range"
    if re.search(r"values, the (model expects|header names)", msg):
        return "field_count"
    return "non_numeric"


def rss_kb() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def target_values(sess) -> dict:
    """A regression session's last answer on its first stream: {target: value in its units}."""
    t = sess.meta.task
    from edgeseq.runtime.regress import in_units
    out = in_units(t, sess._outputs()[0])
    return {name: float(f"{v:.7g}") for name, v in zip(t["targets"], out)}      # 7 significant digits, any scale


def answer(sess, probs, k: int) -> tuple:
    """(label, value) of one stream's last push: the top class and its probability (rounded);
    for an anomaly model its state ("learning", "normal", "anomaly") and its level in standard
    deviations of its learnt score (None while learning); for a regression model the first
    target's name and its value in the target's units (`target_values` has them all)."""
    if sess.meta.kind == "regress":
        return next(iter(target_values(sess).items()))
    if sess.meta.kind == "anomaly" and sess.decision is not None:
        level = float(sess._decider.level[0])
        if level != level:
            return "learning", None
        return ("anomaly" if sess.decision_state()[0] is not None else "normal"), round(level, 3)
    return sess.labels[k], round(float(probs[k]), 5)


def run_live(sess, source, rate: float | None = None, on_bad: str = "skip", as_json: bool = False,
             echo=print, state_file=None, save_every: int = 500, model_hash: str | None = None,
             start_readings: int = 0, print_every: int = 1, max_readings: int | None = None,
             max_lag: int = 50, status=None, clock=time.perf_counter, sleep=time.sleep, on_prediction=None,
             on_event=None) -> dict:
    """Push readings from `source` one at a time until it ends, max_readings, or SIGINT/SIGTERM.

    `on_prediction`, if given, is called after every good reading (whatever `print_every`) with
    a dict: reading (count from the stream's start), label, prob (rounded to 5 places), true
    (where the source knows it) and latency_us; it must not block (the MQTT publisher queues).
    A session with decision settings prints each event of its decision layer as it fires (text:
    a line `event start Walking at reading 812 (onset 800)`; JSON: {"event", "label", "reading",
    "onset"}), counts them in the summary ("events"), and calls `on_event(record, state)` with
    that record and the stream's state after it (the active event's label, or None).

    `clock` (seconds, monotonic) and `sleep` pace a paced source at `rate` readings/s; push
    latency is always measured with time.perf_counter. Every setting is checked first
    (UsageError): rate by `check_rate`, the counts whole numbers >= 1. A reading that is not
    real numbers (from a driver) is a bad reading like a bad text line."""
    from edgeseq.runtime.statefile import resolve, save_state

    rate = check_rate(rate) or None
    save_every, print_every, max_lag = _count("--save-every", save_every), _count("--print-every", print_every), \
        _count("max_lag", max_lag)
    max_readings = _count("--max-readings", max_readings, none_ok=True)
    if on_bad not in ("skip", "error"):
        raise UsageError(f"--on-bad must be skip or error, got {on_bad!r}")
    if state_file:
        state_file = resolve(state_file)
    st = Stats(readings=start_readings)
    stop = {"signal": None}

    def on_signal(signum, frame):
        stop["signal"] = signal.Signals(signum).name
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    period = 1.0 / rate if rate else 0.0
    paced = bool(rate) and getattr(source, "paced", False)
    reader = getattr(source, "reader", None) or LineReader(sess.features)
    score = LabelScore(sess.labels)
    decided, events = getattr(sess, "decision", None) is not None, 0
    ended = False
    t0 = clock()
    slot = 0
    started = time.time()
    rss_start = rss_kb()

    def save():
        if state_file:
            save_state(state_file, sess, st.readings, model_hash, extra={"late": st.late, "dropped": st.dropped})
            st.saves += 1
    try:
        while stop["signal"] is None and (max_readings is None or st.readings - start_readings < max_readings):
            if paced:
                due = t0 + slot * period
                now = clock()
                if now < due:
                    sleep(due - now)
                elif now - due > max_lag * period:              # too far behind: drop to catch up
                    behind = int((now - due) / period)
                    for _ in range(behind):
                        if source.read() is None:
                            break
                    st.dropped += behind
                    slot += behind
                    continue
                elif now - due > period:
                    st.late += 1
                slot += 1
            item = source.read()
            if item is None:
                ended = True
                break
            t_start = time.perf_counter()
            try:
                if isinstance(item, (str, bytes, bytearray)):
                    x = reader.parse(item)
                    if x is None:                               # a blank line, or the header
                        continue
                else:                                           # the session checks numbers, shape and range
                    x = item
                probs = sess.push(x)[0]
            except ReadingError as e:
                kind = _bad_kind(str(e), item)
                st.bad[kind] += 1
                msg = str(e).replace("; stream state unchanged", "")
                if on_bad == "error":
                    raise ReadingError(f"reading {st.readings + sum(st.bad.values())}: {msg} ({kind}); "
                                       "pass --on-bad skip to count and skip bad readings") from None
                if as_json:
                    echo(json.dumps({"skipped": msg, "kind": kind, "after_reading": st.readings}))
                continue
            st.latencies.append(time.perf_counter() - t_start)
            st.readings += 1
            k = int(probs.argmax())
            values = {"values": target_values(sess)} if sess.meta.kind == "regress" else {}
            label, value = next(iter(values["values"].items())) if values else answer(sess, probs, k)
            truth = source.truth() if hasattr(source, "truth") else None
            if truth is not None:
                truth = (truth,)
            elif isinstance(item, (str, bytes, bytearray)) and reader.label_col is not None:
                truth = (reader.label or None,)                 # None: an empty label cell
            if truth is not None and sess.meta.kind == "classify":
                score.add(truth[0], label)
            key = {"anomaly": "level", "regress": "value"}.get(sess.meta.kind, "prob")   # what the answer is
            if on_prediction is not None:
                on_prediction({"reading": st.readings, "label": label, key: value, **values,
                               **({"true": truth[0]} if truth else {}),
                               "latency_us": round(st.latencies[-1] * 1e6, 1)})
            if decided and sess.events:
                state = sess.decision_state()[0]
                for e in sess.events:
                    events += 1
                    rec = {"reading": st.readings, "event": e.kind, "label": e.label,
                           "onset": st.readings - (e.position - e.onset)}
                    echo(json.dumps(rec) if as_json else f"event {e.kind} {printable(e.label)} at reading "
                                                         f"{st.readings} (onset {rec['onset']})")
                    if on_event is not None:
                        on_event(rec, state)
            if st.readings % print_every == 0:
                lat = st.latency()
                if as_json:
                    echo(json.dumps({"reading": st.readings, "label": label, key: value, **values,
                                     **({"true": truth[0]} if truth else {}),
                                     "latency_us": round(st.latencies[-1] * 1e6, 1), **lat,
                                     "state_bytes": sess.state_nbytes(), "late": st.late, "dropped": st.dropped,
                                     "bad": sum(st.bad.values())}))
                else:
                    true = f" (true {printable(truth[0]):>9s})" if truth and truth[0] else ""
                    shown = "--" if value is None else f"{value:.5g}" if key == "value" else f"{value:.2f}"
                    echo(f"{st.readings:8d} {printable(label):>10s} {shown}{true}  {st.latencies[-1] * 1e6:7.1f} us "
                         f"(median {lat['median_us']}, p99 {lat['p99_us']})  state {sess.state_nbytes()} B  "
                         f"late {st.late} dropped {st.dropped} bad {sum(st.bad.values())}")
            if state_file and st.readings % save_every == 0:
                save()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        save()
        source.close()
    seconds = clock() - t0
    done = st.readings - start_readings
    summary = {"readings": st.readings, "this_run": done, "bad": st.bad, "late": st.late, "dropped": st.dropped,
               "seconds": round(seconds, 2), "rate_hz": round(done / seconds, 1) if seconds else None,
               "paced": paced, "target_rate_hz": rate if paced else None,
               "kept_up": st.late == 0 and st.dropped == 0, **st.latency(),
               "state_bytes": sess.state_nbytes(), "rss_kb_start": rss_start, "rss_kb_end": rss_kb(),
               "saves": st.saves, "started": started, **({"events": events} if decided else {}),
               "stopped_by": stop["signal"] or ("end of source" if ended else "reading limit"),
               "true_labels": score.summary() if score.readings else None}
    return summary


def summary_lines(summary: dict, backend: str, labels: list) -> list:
    """run_live's summary in words (the demo prints these on stderr). An unpaced source has no
    target, late or dropped readings: it is said to be unpaced instead; a figure that could
    not be measured (no readings, no /proc) is left out or said to be n/a."""
    s = summary
    rate = f"{s['rate_hz']} Hz" if s["rate_hz"] is not None else "too short to time"
    pace = f"{rate}; target {s['target_rate_hz']:g} Hz" if s["paced"] else f"{rate}; unpaced source"
    lat = (f"latency median {s['median_us']} us, p99 {s['p99_us']} us" if s["median_us"] is not None
           else "latency n/a (no readings)")
    bad = sum(s["bad"].values())
    counts = ([f"late {s['late']}", f"dropped {s['dropped']}"] if s["paced"] else []) + \
        [f"bad {bad}" + (f" ({', '.join(f'{v} {k}' for k, v in s['bad'].items() if v)})" if bad else "")]
    rss = f"; RSS {s['rss_kb_end']} kB" if s["rss_kb_end"] is not None else ""
    stopped = {"end of source": "stopped at the end of the source",
               "reading limit": f"stopped at the reading limit (--max-readings {s['this_run']})"}.get(
        s["stopped_by"], f"stopped by {s['stopped_by']}")
    out = [f"{plural_readings(s['this_run'])} in {s['seconds']} s on the {backend} backend ({pace}), {lat}, "
           f"{', '.join(counts)}{rss}; {stopped}"]
    if s["true_labels"] is not None:
        out += label_lines(s["true_labels"], labels)
    return out
