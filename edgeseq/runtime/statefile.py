"""Stream state on disk that survives a power cut: atomic writes, model identity, checksum.

File layout: the line `EDGESEQ-STATE 1`, one line of JSON (the header), then an .npz payload
with the state arrays and positions. The header carries the model file's SHA-256, the
payload's SHA-256, the stream count and the readings seen. A write goes to a temporary file
in the same directory (`.<name>.<pid>.<random>.tmp`), is flushed to disk, then renamed over
the old file (rename is atomic on POSIX file systems), and the directory is synced: a crash at
any point leaves either the old file or the new one, never a torn one.

`load_state` refuses a file that is corrupt (bad magic, unreadable or mistyped header,
checksum mismatch, a payload that is not a plain npz) or that does not fit the session
(another model, stream count, state shapes, non-finite values), with a message saying so;
the session is then unchanged, the caller starts fresh and the bad file is left for
inspection until the next save replaces it.

One process per state file: `lock_state_file(path)` holds an advisory lock on a sidecar
`.<name>.lock` (fcntl.flock, non-blocking) and, once it holds it, removes the temporary files
a killed writer left behind (`remove_leftovers`). Exports use the same temporary names and
the same clean-up for their outputs.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from edgeseq.errors import EdgeseqError

try:
    import fcntl
except ImportError:                  # Windows: no advisory locks; state files work unlocked
    fcntl = None

MAGIC = b"EDGESEQ-STATE 1\n"
TEMP_SUFFIX = ".tmp"


class StateFileError(EdgeseqError):
    """A state file that cannot be used: corrupt, for another model, or in use by another process."""


def model_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- temporary files and their leftovers ---------------------------------------------------

def temp_prefix(target) -> str:
    """Name prefix of this process's temporary files for `target`: `.<name>.<pid>.`; mkstemp or
    mkdtemp add a random part and the caller adds TEMP_SUFFIX, e.g. `.gru.onnx.4242.k3j9x_a1.tmp`."""
    return f".{Path(target).name}.{os.getpid()}."


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this machine (True when it cannot be told: never remove
    what another live process may be writing)."""
    if pid <= 0 or os.name == "nt":  # os.kill(pid, 0) would terminate the process on Windows
        return pid > 0
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):     # no such process (or a number no pid can be)
        return False
    except OSError:                                 # PermissionError: it exists, another user's
        return True
    return True


def leftovers(target) -> list:
    """Temporary files and directories that a killed writer of `target` left beside it: names
    `.<target name>.<pid>.<random>.tmp` whose process is gone, and `.<target name>.<random>.tmp`
    (written before the pid was part of the name). Nothing else in the directory matches."""
    target = Path(target)
    head = f".{target.name}."
    found = []
    try:
        names = os.listdir(target.parent if str(target.parent) else ".")
    except OSError:
        return []
    for name in names:
        if not (name.startswith(head) and name.endswith(TEMP_SUFFIX)) or name == target.name:
            continue
        middle = name[len(head):-len(TEMP_SUFFIX)]
        if not middle or "/" in middle:
            continue
        m = re.fullmatch(r"(\d+)\.[^.]+", middle)
        if m:
            if pid_alive(int(m.group(1))):           # still being written (or the pid was reused)
                continue
        elif "." in middle:                          # not a name we make
            continue
        found.append(target.parent / name)
    return sorted(found)


def remove_leftovers(target) -> list:
    """Remove `leftovers(target)`: files, and directories (the int8 export's working
    directory) with what is in them; symbolic links are unlinked, never followed. Returns the
    paths removed; one that cannot be removed is skipped."""
    removed = []
    for p in leftovers(target):
        try:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
            removed.append(p)
        except OSError:
            pass
    return removed


# -- one process per state file --------------------------------------------------------------

def lock_path(path) -> Path:
    """The sidecar lock file of state file `path`: `.<name>.lock` beside it."""
    path = Path(path)
    return path.parent / f".{path.name}.lock"


@contextlib.contextmanager
def lock_state_file(path):
    """Hold state file `path` for this process while the block runs; on entry remove the
    temporary files a killed writer left (`remove_leftovers`).

    >>> with lock_state_file("g.state"):
    ...     load_state("g.state", sess); ...; save_state("g.state", sess, n)

    Non-blocking: raises StateFileError "state file 'X' is in use by another process (pid N);
    stop it or use another --state-file" when another process holds it. The lock is an
    advisory fcntl.flock on `.<name>.lock` (removed on exit; the kernel drops the lock if the
    process dies). Where fcntl does not exist the block runs unlocked. OSError if the
    directory cannot be written."""
    path = Path(path)
    if fcntl is None:
        remove_leftovers(path)
        yield path
        return
    lp = lock_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(10):
        fd = os.open(lp, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            except OSError:
                holder = "unknown"
            os.close(fd)
            raise StateFileError(f"state file '{path}' is in use by another process (pid {holder}); "
                                 "stop it or use another --state-file") from None
        try:                             # the holder before us may have removed the file we opened
            same = os.path.samestat(os.fstat(fd), os.stat(lp))
        except OSError:
            same = False
        if same:
            break
        os.close(fd)
    else:
        raise StateFileError(f"state file '{path}': cannot take its lock {lp.name}; try again")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        remove_leftovers(path)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lp)                # while still locked: the next process makes a fresh one
        os.close(fd)


# -- writing and reading ------------------------------------------------------------------

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
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=TEMP_SUFFIX, dir=path.parent)
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


HEX64 = re.compile(r"[0-9a-f]{64}")
MAX_STATE_TENSORS = 4096            # far more than any model has; bounds what a forged header asks for


def _corrupt(path, what: str) -> StateFileError:
    return StateFileError(f"state file '{path}' is corrupt ({what}); delete it or use another --state-file")


def _check_header(path, header) -> dict:
    if not isinstance(header, dict):
        raise _corrupt(path, "header is not a JSON object")
    for key in ("model_sha256", "payload_sha256"):
        if not isinstance(header.get(key), str) or not HEX64.fullmatch(header[key]):
            raise _corrupt(path, f"header field {key} is not a SHA-256")
    for key, least, most in (("streams", 1, None), ("readings", 0, None), ("n_state", 0, MAX_STATE_TENSORS)):
        v = header.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < least or most is not None and v > most:
            raise _corrupt(path, f"header field {key} must be a whole number >= {least}"
                                 f"{f' and <= {most}' if most else ''}, got {json.dumps(v)[:30]}")
    for key in ("model", "arch", "saved_at"):
        if key in header and not isinstance(header[key], str):
            raise _corrupt(path, f"header field {key} must be a string")
    return header


def read_state(path) -> tuple:
    """(header dict, {name: array}) from a state file, or StateFileError saying what is wrong
    with it: bad magic, a header that is not a JSON object with the fields and types
    save_state writes, a checksum mismatch, or a payload that is not an npz of plain numeric
    arrays named position and state_0..state_{n_state-1} (never unpickled). OSError
    (FileNotFoundError included) when it cannot be read."""
    path = Path(path)
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        raise StateFileError(f"state file '{path}' is not an edgeseq state file (bad header); "
                             "delete it or use another --state-file")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        raise _corrupt(path, "truncated header")
    try:
        header = json.loads(data[len(MAGIC):end])
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _corrupt(path, "unreadable header") from None
    _check_header(path, header)
    payload = data[end + 1:]
    if hashlib.sha256(payload).hexdigest() != header["payload_sha256"]:
        raise _corrupt(path, "checksum mismatch")
    want = {"position"} | {f"state_{i}" for i in range(header["n_state"])}
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as z:
            names = set(z.files)
            if names != want:
                raise ValueError(f"holds {', '.join(sorted(names)) or 'nothing'}, not {', '.join(sorted(want))}")
            arrays = {k: z[k] for k in sorted(names)}
    except (AttributeError, TypeError):          # np.load gave a bare array, not an npz
        raise _corrupt(path, "payload is not an npz archive") from None
    except Exception as e:                       # zip, npy and pickle-refusal errors of any kind
        first = str(e).strip().splitlines()[0][:100] if str(e).strip() else type(e).__name__
        raise _corrupt(path, f"payload: {first}") from None
    for k, a in arrays.items():
        if a.dtype.kind not in "fiu":
            raise _corrupt(path, f"{k} has dtype {a.dtype}")
    return header, arrays


def load_state(path, sess, model_hash: str | None = None) -> dict:
    """Restore `sess` from `path`; returns the header. StateFileError if it cannot be used, and
    then `sess` is exactly as it was (everything is checked before anything is restored)."""
    header, arrays = read_state(path)
    want = model_hash or model_sha256(sess.path)
    if header["model_sha256"] != want:
        raise StateFileError(f"state file '{path}' was written for another model ({header.get('model')}, "
                             f"sha256 {header['model_sha256'][:12]}...)")
    if header["streams"] != sess.streams:
        raise StateFileError(f"state file '{path}' holds {header['streams']} streams, this session has {sess.streams}")
    state = [arrays[f"state_{i}"] for i in range(header["n_state"])]
    try:
        sess.restore({"position": arrays["position"], "state": state})
    except EdgeseqError as e:
        raise StateFileError(f"state file '{path}' does not fit this model ({e})") from None
    return header
