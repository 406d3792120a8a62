"""Read readings as CSV lines and stream them through a session (used by `edgeseq stream`)."""

from __future__ import annotations

import json

import numpy as np

from edgeseq.errors import ReadingError


def parse_line(line: str, n: int, order=None) -> np.ndarray:
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != (len(order) if order is not None else n):
        raise ReadingError(f"{len(cells)} values, the model expects {n}")
    try:
        values = np.array([float(c) for c in cells], np.float32)
    except ValueError:
        bad = next(c for c in cells if not _is_number(c))
        raise ReadingError(f"non-numeric value '{bad[:20]}'") from None
    if order is not None:
        values = values[order]
    if not np.isfinite(values).all():
        raise ReadingError("NaN or Inf value")
    return values.reshape(1, -1)


def _is_number(c):
    try:
        float(c)
        return True
    except ValueError:
        return False


def header_order(line: str, features: list):
    """Column order if `line` is a header naming the model's features, None if it is data."""
    cells = [c.strip() for c in line.split(",")]
    if all(_is_number(c) for c in cells):
        return None
    if sorted(cells) != sorted(features):
        raise ReadingError(f"header {cells} does not name the model's features {features}")
    return np.array([cells.index(f) for f in features])


def stream_lines(sess, lines, on_bad="error", as_json=False, echo=print, on_reading=None, start: int = 0) -> dict:
    """Stream CSV lines; `on_reading(count)` runs after each good reading (e.g. to save state)."""
    stats = {"readings": start, "skipped": 0}
    order = None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            if lineno == 1:
                order = header_order(line, sess.features)
                if order is not None:
                    continue
            x = parse_line(line, sess.n_features, order)
            probs = sess.push(x)[0]
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
            echo(f"{stats['readings']},{sess.labels[k]},{probs[k]:.4f}")
        if on_reading is not None:
            on_reading(stats["readings"])
    return stats
