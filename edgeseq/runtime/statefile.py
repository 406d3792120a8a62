"""Stream state on disk that survives a power cut: atomic writes, model identity, checksum.

File layout: the line `EDGESEQ-STATE 1`, one line of JSON (the header), then an .npz payload
with the state arrays and positions. The header carries the model file's SHA-256, the
payload's SHA-256, the stream count and the readings seen. A write goes to a temporary file
in the same directory, is flushed to disk, then renamed over the old file (rename is atomic
on POSIX file systems), and the directory is synced: a crash at any point leaves either the
old file or the new one, never a torn one.

`load_state` refuses a file that is corrupt (bad magic, unreadable header, checksum mismatch)
or written for another model or stream count, with a message saying so; the caller starts
fresh and the bad file is left for inspection until the next save replaces it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from edgeseq.errors import EdgeseqError

MAGIC = b"EDGESEQ-STATE 1\n"


class StateFileError(EdgeseqError):
    """A state file that cannot be used: corrupt, or for another model."""


def model_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save_state(path, sess, readings: int, model_hash: str | None = None, extra: dict | None = None) -> dict:
    """Write the session's state atomically. Returns the header written."""
    path = Path(path)
    snap = sess.snapshot()
    buf = io.BytesIO()
    np.savez(buf, position=np.asarray(snap["position"], np.int64),
             **{f"state_{i}": a for i, a in enumerate(snap["state"])})
    payload = buf.getvalue()
    header = {"model_sha256": model_hash or model_sha256(sess.path), "model": os.path.basename(sess.path),
              "arch": sess.meta.arch, "streams": sess.streams, "readings": int(readings),
              "n_state": len(snap["state"]), "payload_sha256": hashlib.sha256(payload).hexdigest(),
              "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(extra or {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + json.dumps(header).encode() + b"\n" + payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
    return header


def read_state(path) -> tuple:
    """(header, arrays) from a state file, or StateFileError saying what is wrong with it."""
    path = Path(path)
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        raise StateFileError(f"state file '{path}' is not an edgeseq state file (bad header)")
    end = data.find(b"\n", len(MAGIC))
    try:
        header = json.loads(data[len(MAGIC):end])
        payload = data[end + 1:]
    except (ValueError, UnicodeDecodeError):
        raise StateFileError(f"state file '{path}' is corrupt (unreadable header)") from None
    if hashlib.sha256(payload).hexdigest() != header.get("payload_sha256"):
        raise StateFileError(f"state file '{path}' is corrupt (checksum mismatch)")
    with np.load(io.BytesIO(payload)) as z:
        arrays = {k: z[k] for k in z.files}
    return header, arrays


def load_state(path, sess, model_hash: str | None = None) -> dict:
    """Restore `sess` from `path`; returns the header. StateFileError if it cannot be used."""
    header, arrays = read_state(path)
    want = model_hash or model_sha256(sess.path)
    if header.get("model_sha256") != want:
        raise StateFileError(f"state file '{path}' was written for another model ({header.get('model')}, "
                             f"sha256 {str(header.get('model_sha256'))[:12]}...)")
    if header.get("streams") != sess.streams:
        raise StateFileError(f"state file '{path}' holds {header.get('streams')} streams, this session has {sess.streams}")
    state = [arrays[f"state_{i}"] for i in range(header["n_state"])]
    try:
        sess.restore({"position": arrays["position"], "state": state})
    except EdgeseqError as e:
        raise StateFileError(f"state file '{path}' does not fit this model ({e})") from None
    return header
