"""Stream state on disk that survives a power cut: atomic writes, model identity, checksum.

File layout: the line `EDGESEQ-STATE 1`, one line of JSON (the header), then an .npz payload
with the state arrays and positions. The header carries the model file's SHA-256, the
payload's SHA-256, the stream count and the readings seen. A write goes to a temporary file
in the same directory (`.<name>.<pid>.<random>.tmp`), is flushed to disk, then renamed over
the old file (rename is atomic on POSIX file systems), and the directory is synced: a crash at
any point leaves either the old file or the new one, never a torn one.

A save keeps the old file's permission bits (a new file gets 0644 less the umask).

`load_state` refuses a file that is corrupt (bad magic, unreadable or mistyped header,
checksum mismatch, a payload that is not a plain npz) or that does not fit the session
(another model, stream count, state shapes, non-finite values), with a message saying so;
the session is then unchanged. Every array's declared shape and dtype (and the file's size)
are checked against the session before any array is read, so a forged file that would
inflate to gigabytes costs no more memory than its own bytes. `resume_state` is what the
commands call: an unusable file is never destroyed but moved aside to `<name>.rejected`
(`.rejected.1`, ... if taken) with a one-line note, and the stream starts fresh.

A state file path that is a symbolic link is resolved first (`resolve`): the lock, the reads
and the atomic rename all act on the file it points to, so the link survives a save and two
processes that name the same file through different links exclude each other.

One process per state file: `lock_state_file(path)` holds an advisory lock on a sidecar
`.<name>.lock` (fcntl.flock, non-blocking) and, once it holds it, removes the temporary files
a killed writer left behind (`remove_leftovers`). Exports use the same temporary names and
the same clean-up for their outputs.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

from edgeseq import contract
from edgeseq.data import file_sha256
from edgeseq.errors import EdgeseqError, UsageError, printable

try:
    import fcntl
except ImportError:                  # Windows: no advisory locks; state files work unlocked
    fcntl = None

MAGIC = b"EDGESEQ-STATE 1\n"
TEMP_SUFFIX = ".tmp"
ADVICE = "; delete it or use another --state-file"
MAX_HEADER = 1 << 16                 # bytes of the JSON header line: save_state writes a few hundred
MEMBER_OVERHEAD = 1024               # zip headers and the npy header of one array, generously
MAX_REJECTED = 1000                  # <name>.rejected.N: past this many, something else is wrong


class StateFileError(EdgeseqError):
    """A state file that cannot be used: corrupt, for another model, or in use by another process."""


class NotAStateFile(StateFileError, UsageError):
    """The path names something edgeseq never wrote (no state header, or not a regular file):
    refused (exit 2) and left where it is, never moved aside."""


def check_state_path(path, protect=()) -> None:
    """UsageError-like NotAStateFile unless `path` (symbolic links followed) can be a state
    file: not empty; in a folder that exists (it is never made: a mistyped path must not leave
    new folders behind); not a directory, FIFO, device or socket; not one of `protect` (the
    model, the input: saving state there would replace them); and short enough that its
    temporary, lock and `.rejected` files can be named beside it. Checked before a stream
    starts, so nothing is streamed that could not be saved."""
    shown = str(path)
    if not shown.strip():
        raise NotAStateFile("--state-file is empty; give a file name")
    folder = os.path.dirname(os.fsdecode(path)) or "."
    if not os.path.isdir(folder):
        raise NotAStateFile(f"'{printable(folder)}' is a file, not a folder: choose another --state-file"
                            if os.path.lexists(folder) else
                            f"the folder '{printable(folder)}' of --state-file does not exist; create it first")
    target = resolve(path)
    for other in protect:
        if other is not None and str(other) != "-" and (target == resolve(other) or _same_file(target, other)):
            raise NotAStateFile(f"--state-file '{shown}' is the file '{other}' this command reads; give the state "
                                "a file of its own")
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:                          # a run-time failure (exit 1), as writing there would be
        raise StateFileError(f"--state-file '{shown}' cannot be used ({e.strerror}); give a file in a folder "
                             "that can be written") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise NotAStateFile(f"--state-file '{shown}' is a directory; give a file name")
    if mode is not None and not stat.S_ISREG(mode):
        raise NotAStateFile(f"--state-file '{shown}' is not a regular file (a FIFO, device or socket); give a "
                            "file name")
    longest = max(len(f"{temp_prefix(target)}{'0' * 8}{TEMP_SUFFIX}"), len(lock_path(target).name),
                  len(f"{target.name}.rejected.{MAX_REJECTED}"))
    try:
        limit = os.pathconf(target.parent if target.parent.exists() else ".", "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        limit = 255
    if longest > limit:
        raise NotAStateFile(f"--state-file name '{target.name}' is too long: the files saved beside it would need "
                            f"{longest} characters, this file system allows {limit}; give a shorter name")


def _same_file(a, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def model_sha256(path) -> str:
    """The sha256 of a model file's bytes, hex."""
    return file_sha256(path)


def session_sha256(sess) -> str:
    """The sha256 of the model `sess` runs: of the bytes it was opened from (a file replaced
    since then does not count), else of the file at its path."""
    return getattr(sess, "model_sha256", None) or model_sha256(sess.path)


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


def resolve(path) -> Path:
    """The file a state file path names, symbolic links followed (it need not exist yet)."""
    return Path(os.path.realpath(path))


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
    directory cannot be written. A symbolic link is followed (`resolve`): the lock lies beside
    the file it points to, and the block gets that resolved path."""
    shown, path = path, resolve(path)
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
            raise StateFileError(f"state file '{shown}' is in use by another process (pid {holder}); "
                                 "stop it or use another --state-file") from None
        try:                             # the holder before us may have removed the file we opened
            same = os.path.samestat(os.fstat(fd), os.stat(lp))
        except OSError:
            same = False
        if same:
            break
        os.close(fd)
    else:
        raise StateFileError(f"state file '{shown}': cannot take its lock {lp.name}; try again")
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

def _create_temp(path: Path) -> tuple:
    """(fd, name) of a new temporary file beside `path`, named `.<name>.<pid>.<random>.tmp`,
    created 0644 less the umask (mkstemp's 0600 would make every saved file private)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        name = path.parent / f"{temp_prefix(path)}{secrets.token_hex(4)}{TEMP_SUFFIX}"
        try:
            return os.open(name, flags, 0o644), name
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))


def save_state(path, sess, readings: int, model_hash: str | None = None, extra: dict | None = None) -> dict:
    """Write the session's state atomically to the file `path` names (a symbolic link is
    followed and kept). The file keeps its permission bits; a new one gets 0644 less the
    umask. Returns the header written."""
    path = resolve(path)
    snap = sess.snapshot()
    buf = io.BytesIO()
    decision = snap.get("decision")
    np.savez(buf, position=np.asarray(snap["position"], np.int64),
             **{f"state_{i}": a for i, a in enumerate(snap["state"])},
             **{f"decision_{k}": a for k, a in (decision or {}).items()})
    payload = buf.getvalue()
    header = {"model_sha256": model_hash or session_sha256(sess), "model": os.path.basename(sess.path),
              "arch": sess.meta.arch, "streams": sess.streams, "readings": int(readings),
              "n_state": len(snap["state"]), "decision": decision is not None,
              **({"task": sess.meta.kind} if sess.meta.kind != "classify" else {}),
              "payload_sha256": hashlib.sha256(payload).hexdigest(),
              "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(extra or {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode) & 0o777
    except FileNotFoundError:
        mode = None
    fd, tmp = _create_temp(path)
    try:
        if mode is not None and hasattr(os, "fchmod"):
            os.fchmod(fd, mode)
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
    return StateFileError(f"state file '{path}' is corrupt ({what}){ADVICE}")


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
    if not isinstance(header.get("decision", False), bool):
        raise _corrupt(path, "header field decision must be true or false")
    if header.get("task", "classify") not in ("classify", "anomaly", "regress"):
        raise _corrupt(path, "header field task must be classify, anomaly or regress")
    return header


def _members(path, payload: bytes, want: set, expect: dict | None) -> None:
    """Check the npz payload's members from their zip and npy headers alone, before any array
    is read: exactly the names in `want`, stored (not compressed, as np.savez writes them),
    npy format 1.0 or 2.0, a plain numeric dtype, and a declared size that is the data
    actually there. With `expect` ({name: shape, None on an axis of up to `expect["rows"]`
    rows}) each declared shape must fit too. StateFileError otherwise."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(payload))
        infos = zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError, NotImplementedError):
        raise _corrupt(path, "payload is not an npz archive") from None
    names = sorted(i.filename for i in infos)
    if names != sorted(f"{w}.npy" for w in want):
        shown = ", ".join(n[:40] for n in names[:8]) or "nothing"
        raise _corrupt(path, f"payload: holds {shown}, not {', '.join(sorted(want))}")
    for info in infos:
        name = info.filename[:-4]
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            raise _corrupt(path, f"{name} is compressed or encrypted; edgeseq writes plain npz")
        try:
            with zf.open(info) as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    raise ValueError(f"npy format {version} is not one edgeseq writes")
                offset = f.tell()
        except Exception as e:                    # zip and npy header errors of any kind
            first = str(e).strip().splitlines()[0][:100] if str(e).strip() else type(e).__name__
            raise _corrupt(path, f"{name}: {first}") from None
        if dtype.kind not in "fiu" or dtype.itemsize > 8 or dtype.hasobject:
            raise _corrupt(path, f"{name} has dtype {dtype}")
        if expect is not None and name in expect:
            want_shape, rows = expect[name], expect["rows"]
            fits = len(shape) == len(want_shape) and all(
                d == w if w is not None else 0 <= d <= rows for d, w in zip(shape, want_shape))
            if not fits:
                need = ["history" if w is None else w for w in want_shape]
                raise StateFileError(f"state file '{path}' does not fit this model ({name} has shape {list(shape)}, "
                                     f"this session needs {need}"
                                     + (f" with history at most {rows:,}" if None in want_shape else "") + ")")
        size = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if size != info.file_size - offset:
            raise _corrupt(path, f"{name} declares shape {list(shape)} ({size:,} bytes) but holds "
                                 f"{max(info.file_size - offset, 0):,} bytes")


def read_state(path, check_header=None, expect: dict | None = None, max_bytes: int | None = None) -> tuple:
    """(header dict, {name: array}) from a state file, or StateFileError saying what is wrong
    with it: bad magic, a header that is not a JSON object with the fields and types
    save_state writes, a checksum mismatch, or a payload that is not an npz of plain numeric
    arrays named position and state_0..state_{n_state-1} (never unpickled). Every array's
    declared shape, dtype and size are checked from its headers before any array is read
    (against `expect`, see `_members`), a file over `max_bytes` is refused before it is
    read, and `check_header(header)` may refuse the header before the payload is looked at.
    OSError (FileNotFoundError included) when it cannot be read."""
    path = Path(path)
    fd = os.open(resolve(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with open(fd, "rb") as f:                   # non-blocking: a FIFO put there must not hang the open
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise NotAStateFile(f"state file '{path}' is not a regular file (a FIFO, device or socket); give a "
                                "file name")
        size = st.st_size
        if max_bytes is not None and size > max_bytes:
            raise StateFileError(f"state file '{path}' is {size:,} bytes, more than a state of this model can take "
                                 f"({max_bytes:,}){ADVICE}")
        data = f.read()
    if not data.startswith(MAGIC):
        raise NotAStateFile(f"state file '{path}' is not an edgeseq state file (bad header) and was left as it is; "
                            "use another --state-file, or delete it if it is an old state")
    end = data.find(b"\n", len(MAGIC), len(MAGIC) + MAX_HEADER)
    if end < 0:
        raise _corrupt(path, "truncated header" if len(data) < len(MAGIC) + MAX_HEADER else "header too long")
    try:
        header = json.loads(data[len(MAGIC):end])
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _corrupt(path, "unreadable header") from None
    _check_header(path, header)
    payload = data[end + 1:]
    if hashlib.sha256(payload).hexdigest() != header["payload_sha256"]:
        raise _corrupt(path, "checksum mismatch")
    if check_header is not None:
        check_header(header)
    want = {"position"} | {f"state_{i}" for i in range(header["n_state"])}
    if header.get("decision", False):                # the decision layer's state (`Decider.snapshot`)
        from edgeseq.runtime import anomaly, decision
        names = anomaly.STATE_NAMES if header.get("task") == "anomaly" else decision.STATE_NAMES
        want |= {f"decision_{k}" for k in names}
    _members(path, payload, want, expect)
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


def expected_arrays(sess) -> tuple:
    """({array name: shape, None on a cache's history axis, "rows": most history rows},
    most bytes a state file of `sess` can hold): what `read_state` checks before reading."""
    from edgeseq.runtime.session import MAX_HISTORY
    rows = sess.max_history or MAX_HISTORY
    expect = {"position": (sess.streams,), "rows": rows}
    total = len(MAGIC) + MAX_HEADER + MEMBER_OVERHEAD * (len(sess.meta.state) + 1) + 8 * sess.streams
    for i, spec in enumerate(sess.meta.state):
        shape = tuple(sess.streams if d == contract.BATCH_AXIS else None if d == contract.HISTORY_AXIS else int(d)
                      for d in spec.shape)
        expect[f"state_{i}"] = shape
        total += 8 * int(np.prod([rows if d is None else d for d in shape], dtype=object))
    decider = getattr(sess, "_decider", None)
    if decider is not None:                          # a decision layer's state: shapes fixed by the session
        for k, a in decider.snapshot().items():
            expect[f"decision_{k}"] = a.shape
            total += MEMBER_OVERHEAD + 8 * a.size
    else:                                            # a file saved with one is read; its decision state unused
        total += 16 * MEMBER_OVERHEAD + 8 * sess.streams * (2 * len(sess.meta.labels) + 12)
    return expect, total


def load_state(path, sess, model_hash: str | None = None) -> dict:
    """Restore `sess` from `path`; returns the header. StateFileError if it cannot be used, and
    then `sess` is exactly as it was (everything is checked before anything is restored; the
    arrays' declared shapes before any of them is read)."""
    want = model_hash or session_sha256(sess)

    def check_header(header):
        if header["model_sha256"] != want:
            name = " ".join(str(header.get("model")).split())[:60]        # the file's own words: one line
            raise StateFileError(f"state file '{path}' was written for another model ({name}, "
                                 f"sha256 {header['model_sha256'][:12]}...)")
        if header["streams"] != sess.streams:
            raise StateFileError(f"state file '{path}' holds {header['streams']} streams, this session has "
                                 f"{sess.streams}")
        if header["n_state"] != len(sess.meta.state):
            raise StateFileError(f"state file '{path}' does not fit this model (it holds {header['n_state']} state "
                                 f"tensors, this model has {len(sess.meta.state)})")
    expect, max_bytes = expected_arrays(sess)
    header, arrays = read_state(path, check_header, expect, max_bytes)
    state = [arrays[f"state_{i}"] for i in range(header["n_state"])]
    snap = {"position": arrays["position"], "state": state}
    if header.get("decision", False):
        snap["decision"] = {k[len("decision_"):]: a for k, a in arrays.items() if k.startswith("decision_")}
    try:
        sess.restore(snap)
    except EdgeseqError as e:
        raise StateFileError(f"state file '{path}' does not fit this model ({e})") from None
    return header


# -- resuming: an unusable file is set aside, never destroyed ------------------------------

def set_aside(path) -> Path:
    """Move state file `path` (symbolic links followed) to `<name>.rejected` beside it, or
    `<name>.rejected.1`, `.2`, ... if that is taken; an existing file is never replaced.
    Returns where it went. OSError if it cannot be moved (then it is where it was)."""
    path = resolve(path)
    for i in range(MAX_REJECTED):
        dest = path.with_name(f"{path.name}.rejected" + (f".{i}" if i else ""))
        try:
            os.link(path, dest)                   # fails if dest exists: never replaces a file
        except FileExistsError:
            continue
        except OSError as e:                      # a file system without hard links: a checked rename
            if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK,
                               errno.ENOSYS) or os.path.lexists(dest):
                raise
            os.rename(path, dest)
            return dest
        os.unlink(path)
        return dest
    raise StateFileError(f"state file '{path}': {MAX_REJECTED} rejected copies lie beside it already; "
                         "remove them, then run it again")


def resume_state(path, sess, model_hash: str | None = None, note=None) -> int:
    """Readings seen, restored into `sess` from state file `path`; 0 when there is no file
    yet. A file that cannot be used (corrupt, written for another model, values that do not
    fit) is never destroyed: it is moved aside (`set_aside`) and `note` gets one line saying
    what was wrong and where the file went; `sess` then starts fresh. `note` (default: a line
    on stderr) also hears "resumed from PATH at reading N". OSError if the file cannot be read
    or moved aside, StateFileError if it cannot be moved for another reason."""
    if note is None:
        def note(line):
            print(line, file=sys.stderr)
    try:
        header = load_state(path, sess, model_hash)
    except FileNotFoundError:
        return 0
    except NotAStateFile:                         # not edgeseq's to move
        raise
    except StateFileError as e:
        linked = os.path.islink(path)
        dest = set_aside(path)
        shown = dest if linked else Path(path).with_name(dest.name)
        note(printable(f"{str(e).replace(ADVICE, '')}; moved it to '{shown}' and starting fresh"))
        return 0
    note(printable(f"resumed from {path} at reading {header['readings']}"))
    return header["readings"]


def write_files(files: dict) -> None:
    """Write {path: bytes} all or nothing: each to `.<name>.<pid>.<random>.tmp` beside it, then,
    once every one is written and flushed, rename each into place. Removes first the temporary
    files a killed run left for these paths (and `<name>.tmp`, the name older versions used).
    A failed write removes this run's temporary files, leaves every target as it was and raises
    the OSError with the target's name."""
    for path in files:
        remove_leftovers(path)
        with contextlib.suppress(OSError):
            Path(f"{path}.tmp").unlink()
    temps = {}
    try:
        for path, data in files.items():
            try:
                fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=TEMP_SUFFIX, dir=Path(path).parent)
                temps[path] = tmp
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, 0o666 & ~umask)                  # mkstemp makes 0600: what open() would have made
            except OSError as e:
                if e.filename is None or e.filename == temps.get(path):
                    raise OSError(e.errno, e.strerror or str(e), str(path)) from None
                raise
        for path, tmp in temps.items():
            os.replace(tmp, path)
    except BaseException:
        for tmp in temps.values():
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise


def replace_dir(new, out) -> None:
    """Move directory `new` to `out`; an existing `out` is swapped out first (to `.<name>.old`
    beside it) and removed only once `new` is in place, or moved back if that fails."""
    new, out = Path(new), Path(out)
    if not out.exists():
        os.replace(new, out)
        return
    old = out.with_name(f".{out.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    os.replace(out, old)
    try:
        os.replace(new, out)
    except BaseException:
        os.replace(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)
