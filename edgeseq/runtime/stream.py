"""Read readings as CSV lines and stream them through a session (used by `edgeseq stream` and
the Pi demo).

Text is read as people write it: UTF-8 with or without a byte-order mark, lines ended by a
line feed (a carriage return before it is dropped; no other character splits a line), cells
optionally in double quotes. A line that is not UTF-8, too long or not a reading is a bad
reading (ReadingError, which `--on-bad skip` skips); a header that names columns but cannot be
used is a HeaderError, which no option skips: feeding columns in the wrong order would give
wrong answers silently.
"""

from __future__ import annotations

import csv
import io
import json

import numpy as np

from edgeseq.errors import DataError, ReadingError

BOM = "\ufeff"
F32_MAX = float(np.finfo(np.float32).max)
MAX_LINE = 1 << 16          # bytes: a reading is a few dozen; a longer "line" is not one


class HeaderError(DataError):
    """The first line names columns, but not the model's features: never skipped."""


def _cells(line: str) -> list:
    return [c.strip().strip('"').strip() for c in line.split(",")]


def parse_line(line: str, n: int, order=None, width=None) -> np.ndarray:
    """One CSV line -> float32 [1, n]. `order` picks the model's features from a header's
    columns (`width` cells per line). ReadingError names the problem."""
    cells = _cells(line)
    want = width if order is not None else n
    if len(cells) != want:
        raise ReadingError(f"{len(cells)} values, the model expects {want}")
    try:
        values = np.array([float(c) for c in cells], np.float64)
    except ValueError:
        bad = next(c for c in cells if not _is_number(c))
        raise ReadingError(f"non-numeric value '{bad[:20].encode('unicode_escape').decode('ascii')}'") from None
    if order is not None:
        values = values[order]
    if not np.isfinite(values).all():
        raise ReadingError("NaN or Inf value")
    if (np.abs(values) > F32_MAX).any():
        raise ReadingError(f"value {values[np.abs(values) > F32_MAX][0]:g} beyond float32 (3.4e38)")
    return values.astype(np.float32).reshape(1, -1)


def _is_number(c):
    try:
        float(c)
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
    cells = _cells(line)
    missing = [f for f in features if f not in cells]
    twice = sorted({c for c in cells if c in features and cells.count(c) > 1})
    if missing or twice:
        what = f"lacks {missing}" if missing else f"names {twice} twice"
        raise HeaderError(f"the header {cells} {what}; the model reads {list(features)}: name each of them once "
                          "(any order) or drop the header line")
    return np.array([cells.index(f) for f in features])


class LineReader:
    """Turns raw lines (bytes or str) into readings: decoding, byte-order mark, header.

    >>> r = LineReader(["acc_x", "acc_y"])
    >>> r.parse(b"acc_y,acc_x\\n")   # header: None, and the columns are reordered from now on
    >>> r.parse(b"1,2\\n")           # -> float32 [[2., 1.]]
    """

    def __init__(self, features: list):
        self.features = list(features)
        self.n = len(self.features)
        self.order = None
        self.width = None
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
                self.order, self.width = order, len(_cells(line))
                return None
        return parse_line(line, self.n, self.order, self.width)


def csv_line(*cells) -> str:
    """One CSV line (no line end) with the csv module's quoting: a cell holding a comma, a
    quote or a line break (a label may) is quoted, so the output stays one record per reading."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n").writerow(cells)      # \r and \n in a cell are then quoted
    return buf.getvalue()[:-2]


def read_lines(fh):
    """Raw lines of a binary file, split at line feeds only, each at most MAX_LINE bytes (the
    rest of an over-long line is read and dropped, and the line reported as too long)."""
    while True:
        chunk = fh.readline(MAX_LINE)
        if not chunk:
            return
        nl = b"\n" if isinstance(chunk, bytes) else "\n"
        if len(chunk) >= MAX_LINE and not chunk.endswith(nl):
            while True:                                     # drop the rest of the line
                more = fh.readline(MAX_LINE)
                if not more or more.endswith(nl):
                    break
        yield chunk


def stream_lines(sess, lines, on_bad="error", as_json=False, echo=print, on_reading=None, start: int = 0) -> dict:
    """Stream CSV lines (bytes or str); `on_reading(count)` runs after each good reading (e.g.
    to save state). Returns {"readings", "skipped"}. Raises ReadingError (on_bad="error") naming
    the input line, HeaderError for an unusable header; the state before a bad line is kept."""
    stats = {"readings": start, "skipped": 0}
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
            if as_json:
                echo(json.dumps({"line": lineno, "skipped": msg}))
            else:
                echo(f"# line {lineno} skipped: {msg}")
            continue
        k = int(probs.argmax())
        stats["readings"] += 1
        if as_json:
            echo(json.dumps({"reading": stats["readings"], "label": sess.labels[k], "prob": round(float(probs[k]), 6),
                             "probs": {l: round(float(p), 6) for l, p in zip(sess.labels, probs)}}))
        else:
            echo(csv_line(stats["readings"], sess.labels[k], f"{probs[k]:.4f}"))
        if on_reading is not None:
            on_reading(stats["readings"])
    return stats
