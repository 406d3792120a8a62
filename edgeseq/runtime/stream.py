"""Read readings as CSV lines and stream them through a session (used by `edgeseq stream` and
the Pi demo).

Text is read as people write it: UTF-8 with or without a byte-order mark, lines ended by a
line feed, a carriage return and line feed, or a carriage return alone (old Mac files), as
`edgeseq train` reads a CSV; no other character splits a line. Cells are separated by commas,
optionally in double quotes; a header separated by ';' or tabs is refused, saying so (such a
reading is a bad one, its message saying so too). A line that is not UTF-8, too long or not a
reading is a bad reading (ReadingError, which `--on-bad skip` skips); a header that names
columns but cannot be used is a HeaderError, which no option skips: feeding columns in the
wrong order would give wrong answers silently.

Without a header every cell is a feature, in the model's order. With a header that names the
model's features, a line is read as a CSV record (a quoted cell may hold a comma) with as many
cells as the header, and only the feature columns are parsed and checked: the others (a
timestamp, `sequence`, notes, empty cells) are ignored whatever they hold, so edgeseq's own
training CSV streams as it is. A column headed `label` (any case) is the reading's true label:
shown beside each prediction and scored (`LabelScore`).

Names from the model file or the input (labels, column names) reach the output, the notes and
the error messages escaped (`edgeseq.errors.printable`): a control or format character, such
as a terminal escape sequence's ESC or a right-to-left override, never reaches the terminal.
"""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np

from edgeseq.data import parse_float
from edgeseq.data.files import SEPARATORS, separator
from edgeseq.errors import DataError, ReadingError, printable, safe_text
from edgeseq.runtime.evaluate import GRACE

BOM = "\ufeff"
F32_MAX = float(np.finfo(np.float32).max)
MAX_LINE = 1 << 16          # bytes: a reading is a few dozen; a longer "line" is not one


class HeaderError(DataError):
    """The first line names columns, but not the model's features: never skipped."""


def _cells(line: str) -> list:
    return [c.strip().strip('"').strip() for c in line.split(",")]


def _record(line: str) -> list:
    """One line as a CSV record: quotes honoured (a quoted cell may hold a comma), cells stripped."""
    if "\r" in line or "\n" in line:          # a caller that did not split at every line end (read_lines does)
        raise ReadingError("a carriage return or line feed inside the line: the input's lines are not split as "
                           "expected (CR-only line endings?); save it with LF or CRLF line endings")
    try:
        return [c.strip() for c in next(csv.reader([line], skipinitialspace=True), [])]
    except csv.Error as e:                      # a cell past the csv module's size limit
        raise ReadingError(f"not a CSV line ({e})") from None


def parse_line(line: str, n: int, order=None, width=None) -> np.ndarray:
    """One CSV line -> float32 [1, n]. `order` picks the model's features from a header's
    columns (`width` cells per line; the other cells are not read). ReadingError names the
    problem."""
    return _parse(line, n, order, width)[0]


def _parse(line: str, n: int, order=None, width=None):
    """(float32 [1, n], the line's cells): every cell a feature, or with a header's `order`
    the line as a CSV record of `width` cells of which only the feature columns are read."""
    if order is None:
        row = cells = _cells(line)
        if len(cells) != n:
            raise ReadingError(f"{len(cells)} values, the model expects {n}{_separated(cells, every=True)}")
    else:
        row = _record(line)
        if len(row) != width:               # a missing or extra cell would shift the columns
            raise ReadingError(f"{len(row)} values, the header names {width} columns{_separated(row)}")
        cells = [row[i] for i in order]
    return _numbers(cells), row


def _separated(cells: list, every: bool = False) -> str:
    """A hint for a line of the wrong width that looks separated by ';' or tabs, or ''. `every`:
    every cell is a number, so any ';' or tab is one (decimal commas: '1,5;2,5' has more commas)."""
    text = "".join(cells)
    most = max(SEPARATORS, key=text.count)
    sep = (SEPARATORS[most] if most in text else None) if every else separator(cells)
    return f" (the line looks separated by {sep}, not commas: save the input comma-separated)" if sep else ""


def _numbers(cells: list) -> np.ndarray:
    try:
        values = np.array([parse_float(c) for c in cells], np.float64)
    except ValueError:
        bad = next(c for c in cells if not _is_number(c))
        raise ReadingError(f"non-numeric value '{printable(bad[:20])}'") from None
    if not np.isfinite(values).all():
        raise ReadingError("NaN or Inf value")
    if (np.abs(values) > F32_MAX).any():
        raise ReadingError(f"value {values[np.abs(values) > F32_MAX][0]:g} beyond float32 (3.4e38)")
    return values.astype(np.float32).reshape(1, -1)


def _is_number(c):
    try:
        parse_float(c)
        return True
    except ValueError:
        return False


def is_header(line: str, features: list) -> bool:
    """A first line is a header if it names a model feature, or holds no number at all."""
    cells = _cells(line.lstrip(BOM))
    return any(c in features for c in cells) or not any(_is_number(c) for c in cells)


def header_order(line: str, features: list):
    """Column index of each model feature if `line` is a header, None if it is data.

    A header must name every feature of the model exactly once; other columns (a timestamp,
    say) are ignored. HeaderError otherwise."""
    line = line.lstrip(BOM)
    if not is_header(line, features):
        return None
    cells = _record(line)
    missing = [f for f in features if f not in cells]
    twice = sorted({c for c in cells if c in features and cells.count(c) > 1})
    sep = separator(cells) if missing else None
    if sep:                                 # 'acc_x;acc_y;acc_z' is one cell: it names no feature
        raise HeaderError(f"the input looks separated by {sep}, not commas: save it comma-separated")
    if missing or twice:
        what = f"lacks {_names(missing)}" if missing else f"names {_names(twice)} twice"
        raise HeaderError(f"the header {_names(cells)} {what}; the model reads {_names(features)}: name each of them once "
                          "(any order) or drop the header line")
    return np.array([cells.index(f) for f in features])


def _quoted(name) -> str:
    """A name for a message: quoted, control characters escaped (`printable`)."""
    return f"'{printable(name)}'"


def _names(names) -> str:
    """Names for a message, as a Python list prints them but escaped by `printable`: ['a', 'b']."""
    return f"[{', '.join(map(_quoted, names))}]"


def label_column(cells: list, features: list):
    """Index of the header column named `label` (any case; not a model feature), or None.
    HeaderError if two columns are: which one holds the true label would be a guess."""
    found = [i for i, c in enumerate(cells) if c.lower() == "label" and c not in features]
    if len(found) > 1:
        raise HeaderError(f"the header names a label column {len(found)} times "
                          f"({', '.join(_quoted(cells[i]) for i in found)}); keep one")
    return found[0] if found else None


class LineReader:
    """Turns raw lines (bytes or str) into readings: decoding, byte-order mark, header.

    >>> r = LineReader(["acc_x", "acc_y"])
    >>> r.parse(b"acc_y,acc_x\\n")   # header: None, and the columns are reordered from now on
    >>> r.parse(b"1,2\\n")           # -> float32 [[2., 1.]]

    With a header naming a `label` column, `label` holds the true label of the reading parsed
    last ('' for an empty cell); without one it stays None.
    """

    def __init__(self, features: list):
        self.features = list(features)
        self.n = len(self.features)
        self.order = None
        self.width = None
        self.label_col = None       # header column of the true label, if the header has one
        self.label = None           # the last good reading's true label
        self._first = True

    def parse(self, raw) -> np.ndarray | None:
        """float32 [1, F], or None for a blank line or the header. ReadingError for a bad
        reading, HeaderError for an unusable header."""
        if isinstance(raw, (bytes, bytearray)):
            if len(raw) >= MAX_LINE and not raw.endswith(b"\n"):
                raise ReadingError(f"line longer than {MAX_LINE // 1024} KiB; is this a CSV of readings?")
            try:
                line = bytes(raw).decode("utf-8")
            except UnicodeDecodeError as e:
                raise ReadingError(f"not UTF-8 text (byte 0x{raw[e.start]:02x} at {e.start + 1}); "
                                   "save the input as UTF-8") from None
        else:
            if len(raw) >= MAX_LINE and not raw.endswith("\n"):
                raise ReadingError(f"line longer than {MAX_LINE // 1024} KiB; is this a CSV of readings?")
            line = raw
        if self._first:
            line = line.lstrip(BOM)
        line = line.rstrip("\n").rstrip("\r")
        if not line.strip():
            return None
        if self._first:
            self._first = False
            order = header_order(line, self.features)
            if order is not None:
                cells = _record(line)
                self.order, self.width = order, len(cells)
                self.label_col = label_column(cells, self.features)
                return None
        x, row = _parse(line, self.n, self.order, self.width)
        if self.label_col is not None:
            self.label = row[self.label_col]
        return x


def csv_line(*cells) -> str:
    """One CSV line (no line end): each cell escaped by `edgeseq.errors.printable`, then quoted by
    the csv module where it holds a comma or a double quote.

    A CSV is read on a terminal too (`cat`, `tail -f`), so a cell never carries a control or
    format character, even to a file or a pipe: a label holding ESC, BEL, a carriage return, a
    line feed, NUL or a right-to-left override is written as its Python escape (\\x1b, \\x07,
    \\r, \\n, \\x00, \\u202e); letters of any script are written as they are. The output stays
    one record per line. --json (json.dumps, ASCII only) gives the exact label."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n").writerow([printable(c) for c in cells])
    return buf.getvalue()[:-2]


LINE_END = {bytes: re.compile(rb"\r\n|\r|\n"), str: re.compile(r"\r\n|\r|\n")}


def _chunks(fh):
    """A file's data as it arrives: read1 where the file has it (a binary file, standard input:
    whatever has arrived, so a pipe streams), else a readline at a time (a serial port)."""
    read1 = getattr(fh, "read1", None)
    while True:
        chunk = read1(MAX_LINE) if read1 is not None else fh.readline(MAX_LINE)
        if not chunk:
            return
        yield bytes(chunk) if isinstance(chunk, bytearray) else chunk


def read_lines(fh):
    """Raw lines of a file (binary, or text), each ended by a line feed (the last one may have
    none), at most MAX_LINE bytes (the rest of an over-long line is read and dropped, and the
    line yielded MAX_LINE long without a line feed, reported as too long).

    Lines end at a line feed, a carriage return and line feed, or a carriage return alone, as
    `edgeseq train` reads a CSV (universal newlines). Each line is yielded as soon as its end
    arrives, so readings piped in stream one by one: a carriage return ends its line at once,
    and a line feed that follows it, in the same read or the next, is dropped."""
    pending, skip_lf, dropping = None, False, False
    for chunk in _chunks(fh):
        if pending is None:
            pending = chunk[:0]
            lf, cr, ends = ("\n", "\r", LINE_END[str]) if isinstance(chunk, str) else (b"\n", b"\r", LINE_END[bytes])
        if skip_lf and chunk[:1] == lf:              # the LF of a CR LF split across two reads
            chunk = chunk[1:]
        data, pos = pending + chunk, 0
        for m in ends.finditer(data):
            line, pos = data[pos:m.start()], m.end()
            if dropping:                            # the end of an over-long line, already reported
                dropping = False
            else:
                yield line + lf if len(line) < MAX_LINE else line[:MAX_LINE]
        skip_lf = pos == len(data) and data.endswith(cr)
        pending = data[pos:]
        if len(pending) >= MAX_LINE:                # no end in sight: report it now, drop the rest
            if not dropping:
                yield pending[:MAX_LINE]
            pending, dropping = pending[:0], True
    if pending and not dropping:
        yield pending


class LabelScore:
    """Accuracy per reading against true labels, on one stream that is never reset.

    Scored: every reading whose true label the model knows; and, as `edgeseq eval`'s continuous
    protocol scores a stream, those of them past the first `grace` readings after the start
    (of this run) and after each change of label. A reading whose label the model does not
    know is counted by label, one without a label (an empty cell) counted: neither is scored.
    """

    def __init__(self, labels: list, grace: int = GRACE):
        self.known, self.grace = list(labels), grace
        self.readings = self.scored = self.hits = self.past = self.past_hits = self.unlabelled = 0
        self.unknown: dict = {}                 # label -> readings
        self._prev, self._since = None, 0

    def add(self, true, predicted: str) -> None:
        """One reading's true label (None or '' for none) and the label the model predicted."""
        true = true or ""
        self._since = self._since + 1 if self.readings and true == self._prev else 0
        self._prev = true
        self.readings += 1
        if not true:
            self.unlabelled += 1
        elif true not in self.known:
            self.unknown[true] = self.unknown.get(true, 0) + 1
        else:
            hit = predicted == true
            self.scored += 1
            self.hits += hit
            if self._since >= self.grace:
                self.past += 1
                self.past_hits += hit

    def summary(self) -> dict:
        return {"scored": self.scored, "accuracy": self.hits / self.scored if self.scored else None,
                "grace": self.grace, "past_grace": self.past,
                "accuracy_past_grace": self.past_hits / self.past if self.past else None,
                "unknown": dict(self.unknown), "unlabelled": self.unlabelled}

    def lines(self) -> list:
        return label_lines(self.summary(), self.known)


def plural_readings(n: int) -> str:
    return f"{n} reading" if n == 1 else f"{n} readings"


def label_lines(d: dict, known: list) -> list:
    """A LabelScore summary in words: what was scored, the accuracy, and what was not scored."""
    if d["scored"]:
        past = (f"{d['accuracy_past_grace']:.3f} over the {d['past_grace']} past the first {d['grace']} after the "
                "start and each change of label" if d["past_grace"] else
                f"none lies {d['grace']} readings past the start or a change of label")
        out = [f"true labels: accuracy {d['accuracy']:.3f} over {plural_readings(d['scored'])} with a label the model "
               f"knows (one stream, never reset); {past}"]
    else:
        out = [f"true labels: no reading has a label the model knows ({', '.join(map(printable, known))}); "
               "nothing scored"]
    skipped = []
    if d["unknown"]:
        named = sorted(d["unknown"].items(), key=lambda kv: (-kv[1], kv[0]))
        text = ", ".join(f"{_quoted(k)} ({v})" for k, v in named[:5])
        text += f" and {len(named) - 5} more labels" if len(named) > 5 else ""
        skipped.append(f"{plural_readings(sum(d['unknown'].values()))} labelled {text}, which the model does not know")
    if d["unlabelled"]:
        skipped.append(f"{plural_readings(d['unlabelled'])} without a label")
    if skipped:
        out.append("not scored: " + "; ".join(skipped))
    return out


def stream_lines(sess, lines, on_bad="error", as_json=False, echo=print, on_reading=None, start: int = 0,
                 note=None, score: LabelScore | None = None, events_only: bool = False) -> dict:
    """Stream CSV lines (bytes or str); `on_reading(count)` runs after each good reading (e.g.
    to save state). Returns {"readings", "skipped"}. Raises ReadingError (on_bad="error") naming
    the input line, HeaderError for an unusable header; the state before a bad line is kept.

    `echo` gets one line per reading only (CSV, or JSON with `as_json`); a skipped line is
    reported to `note` (default: standard error). Where the header has a label column, each
    output line carries the true label and `score` (if given) scores it. A CSV line's labels
    are escaped (`csv_line`); JSON has the exact labels, escaped by json.dumps (ASCII only).

    A session with decision settings (`sess.decision`) adds each reading's events to its JSON
    object ("events": [{"event": "start" | "end", "label", "onset"}]); `events_only` writes one
    line per event instead of one per reading (CSV `reading,event,label,onset`, or JSON), and
    stats["events"] counts them. A regression model writes its targets in their own units
    (CSV `reading,<value per target>`, JSON {"reading", "values": {target: value}})."""
    if note is None:
        import sys
        note = lambda text: print(text, file=sys.stderr)      # noqa: E731
    stats = {"readings": start, "skipped": 0, "events": 0}
    decided = getattr(sess, "decision", None) is not None
    kind = getattr(getattr(sess, "meta", None), "kind", "classify")
    anomaly = kind == "anomaly" and decided
    regress = kind == "regress"
    if regress:                                       # outputs -> the targets in their own units
        from edgeseq.runtime.regress import in_units
        if not as_json and start == 0:                # CSV: a header names the targets' columns, in the model's order
            echo(csv_line("reading", *sess.labels))
    reader = LineReader(sess.features)
    for lineno, line in enumerate(lines, start=1):
        try:
            x = reader.parse(line)
            if x is None:
                continue
            probs = sess.push(x)[0]
        except HeaderError as e:
            raise HeaderError(f"input line {lineno}: {e}") from None
        except ReadingError as e:
            msg = str(e).replace("; stream state unchanged", "")
            if on_bad == "error":
                raise ReadingError(f"input line {lineno}: {msg}; fix it or pass --on-bad skip "
                                   "(state before it is kept)") from None
            stats["skipped"] += 1
            note(safe_text(f"line {lineno} skipped: {msg}"))      # msg escaped its value
            continue
        k = int(probs.argmax())
        stats["readings"] += 1
        true = () if reader.label_col is None else (reader.label,)
        if anomaly:                                   # the level against the stream's own baseline, not classes
            level = float(sess._decider.level[0])
            active = sess.decision_state()[0] is not None
        if regress:
            values = in_units(sess.meta.task, sess._outputs()[0])
            echo(json.dumps({"reading": stats["readings"], "values": {n: float(f"{v:.7g}") for n, v in
                                                                    zip(sess.labels, values)},
                             **({"true": reader.label or None} if true else {})}) if as_json
                 else csv_line(stats["readings"], *(f"{float(v):.7g}" for v in values), *true))
            if on_reading is not None:
                on_reading(stats["readings"])
            continue
        if true and score is not None and not anomaly:
            score.add(reader.label, sess.labels[k])
        fired = [{"event": e.kind, "label": e.label, "onset": stats["readings"] - (e.position - e.onset)}
                 for e in sess.events] if decided else []     # the onset counted back from this reading
        stats["events"] += len(fired)
        if events_only:
            for e in fired:
                echo(json.dumps({"reading": stats["readings"], **e}) if as_json
                     else csv_line(stats["readings"], e["event"], e["label"], e["onset"]))
        elif anomaly:                                 # level: NaN (JSON null, CSV 'learning') until the baseline is learnt
            if as_json:
                echo(json.dumps({"reading": stats["readings"], "level": None if level != level else round(level, 4),
                                 "anomaly": active, **({"true": reader.label or None} if true else {}),
                                 "events": fired}))
            else:
                echo(csv_line(stats["readings"], "learning" if level != level else f"{level:.3f}",
                              "anomaly" if active else "normal", *true))
        elif as_json:
            echo(json.dumps({"reading": stats["readings"], "label": sess.labels[k], "prob": round(float(probs[k]), 6),
                             **({"true": reader.label or None} if true else {}),
                             "probs": {l: round(float(p), 6) for l, p in zip(sess.labels, probs)},
                             **({"events": fired} if decided else {})}))
        else:
            echo(csv_line(stats["readings"], sess.labels[k], f"{probs[k]:.4f}", *true))
        if on_reading is not None:
            on_reading(stats["readings"])
    return stats
