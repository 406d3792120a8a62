"""Who may publish what to the gateway's server: each device's credentials and the gateway's own.

A fleet is a folder (default `runs/fleet`) that `edgeseq devices add NAME` writes and `edgeseq
serve` reads:

- `fleet.json` (mode 0600): each device's user name (its device id) and the bcrypt hash of its
  password, never the password itself. nats-server checks a password against such a hash
  (the users of its `accounts`, NATS and MQTT alike).
- `gateway.json` (mode 0600): the gateway's own user and password (the gateway must present
  it), made on first use.

Accounts (`authorization_block`): the gateway's user is in account `edgeseq` (JetStream: the
streams and buckets; no limits). Each device has an account of its own, `device_<id>`, whose
one user may publish only its own readings, `edgeseq.in.<id>` (MQTT `edgeseq/in/<id>`), which
the account imports from `edgeseq` as the service `edgeseq.part.<p>.<id>` (its partition), and
subscribe only to its own predictions `edgeseq.out.<id>` and events `edgeseq.out.<id>.events`
(imported streams) and to its inboxes. So the readings streams may acknowledge what they store:
JetStream answers a reading, as the server, on whatever reply subject the device set, and that
subject is in the device's own account, where nothing of the gateway's or another device's is
(nats-server checks no permission on a reply subject). JetStream in a device's account, bounded
to DEVICE_JETSTREAM, holds its MQTT session only. A connection without credentials is refused.

nats-server 2.9 does not wire the imports of an account added by a configuration reload (its
publishes find no responders), so a changed set of devices needs the server restarted
(`LocalBroker.reload` does so); a changed password alone is reloaded.

Passwords are 32 random bytes (`secrets.token_urlsafe`), shown once by `add_device`, stored as
their bcrypt hash (pyca/bcrypt) at cost `BCRYPT_ROUNDS`, bcrypt's lowest. A slow hash protects a
password a person chose against guessing; against 256 random bits it adds nothing, while the
server spends one hash per connection attempt, wrong ones included: at cost 11 about 0.16-0.26 s
of a core each here, so a server restart that makes 2,000 devices connect again cost minutes of
a core; at cost 4 about 1.5 ms.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from edgeseq.errors import UsageError, redact_url
from edgeseq.gateway import wire

BCRYPT_ROUNDS = 4
GATEWAY_USER = "edgeseq-gateway"
GATEWAY_ACCOUNT = "edgeseq"
# JetStream of a device's own account: its MQTT session's streams (nats-server reserves max_file
# per account from its store at start: 1 MiB a device; the streams' block files on disk may grow
# to about 8 MB before compaction, as a device flooding retained messages shows)
DEVICE_JETSTREAM = "{max_mem: 0, max_file: 1M, max_streams: 8, max_consumers: 64}"
MISSING = "bcrypt is not installed: pip install bcrypt (or pip install '.[gateway]' in edgeseq's clone)"


def _bcrypt():
    try:
        import bcrypt
    except ModuleNotFoundError:
        raise UsageError(MISSING) from None
    return bcrypt


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` atomically, mode 0600 (it holds a secret or a hash of one): a
    reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def partition_of(device: str, partitions: int) -> int:
    """The partition nats-server's `partition(P, 1)` mapping puts `device` in: FNV-1a 32-bit of
    the id's bytes modulo P (nats-server's subject_transform.go, getHashPartition)."""
    h = 0x811C9DC5
    for b in device.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h % partitions


def redact(url: str | None) -> str | None:
    """`url` (or the nodes of a cluster, comma-separated) with any password replaced by `***`
    (nats://user:***@host:4222), for logs and errors."""
    return ",".join(redact_url(u) for u in url.split(",")) if url else url


def with_credentials(url: str, user: str, password: str) -> str:
    """nats://host:port with `user` and `password` in it (each percent-encoded)."""
    u = urlsplit(url)
    host = u.netloc.rsplit("@", 1)[-1]
    return urlunsplit((u.scheme, f"{quote(user, safe='')}:{quote(password, safe='')}@{host}", u.path, u.query,
                       u.fragment))


class Fleet:
    """The credentials in folder `root` (see the module's docstring). Raises UsageError for a
    folder that cannot be used (a file where the folder should be, a damaged fleet.json)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise UsageError(f"--fleet {self.root}: that is a file, not a folder; give a folder for the fleet's "
                             "credentials")
        self.file, self.gateway_file = self.root / "fleet.json", self.root / "gateway.json"

    # -- reading and writing ----------------------------------------------------------------

    def _read(self, path: Path) -> dict:
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, RecursionError) as e:
            raise UsageError(f"{path} cannot be read ({type(e).__name__}); restore it from a backup, or move it "
                             "away and add the devices again") from None
        if not isinstance(doc, dict):
            raise UsageError(f"{path} is not an edgeseq fleet file; move it away and add the devices again")
        return doc

    def _write(self, path: Path, doc: dict) -> None:
        self._make_root()
        write_private(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")

    def _make_root(self) -> None:
        """The folder, made mode 0700 when it is new (a folder that exists keeps its mode: it may
        be shared; the files in it are 0600 either way)."""
        if not self.root.is_dir():
            self.root.mkdir(parents=True, mode=0o700, exist_ok=True)

    @contextlib.contextmanager
    def _locked(self):
        """One writer at a time (two `devices add` at once both land)."""
        import fcntl
        self._make_root()
        with open(self.root / ".lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def devices(self) -> dict:
        """{device id: {"hash": bcrypt hash, "added": UTC time}} of every device."""
        devs = self._read(self.file).get("devices", {})
        if not isinstance(devs, dict) or not all(isinstance(v, dict) and isinstance(v.get("hash"), str)
                                                 for v in devs.values()) or GATEWAY_USER in devs:
            raise UsageError(f"{self.file} is damaged (devices without a password hash); move it away and add the "
                             "devices again")
        for d in devs:
            try:
                wire.check_device(d)
            except wire.BadMessage as e:
                raise UsageError(f"{self.file} is damaged ({e}); move it away and add the devices again") from None
        return devs

    def version(self) -> tuple:
        """A value that changes whenever the credentials do, the devices' or the gateway's (for
        a running server to reload)."""
        def stamp(path):
            try:
                return path.stat().st_mtime_ns
            except FileNotFoundError:
                return 0
        return stamp(self.file), stamp(self.gateway_file)

    # -- changes ----------------------------------------------------------------------------

    def add_device(self, device: str, rotate: bool = False) -> str:
        """Add `device` (its id: 1-128 letters, digits, '-' or '_', not '_' alone nor starting
        with '-') and return its new password,
        the only time it is shown. `rotate` gives a device that exists a new password (the old
        one stops working when the server reloads). UsageError for a bad id, an id that exists
        (without `rotate`), one that does not (with it) or the gateway's own user name."""
        try:
            wire.check_device(device)
        except wire.BadMessage as e:
            raise UsageError(f"{e}; pick another device id") from None
        if device == GATEWAY_USER:
            raise UsageError(f"'{GATEWAY_USER}' is the gateway's own user; pick another device id")
        if device == "_" or device.startswith("-"):
            # '_' names what is no device's (edgeseq.dead._.invalid); a leading '-' reads as an
            # option on every command line that would name the device
            raise UsageError(f"device id {device!r} is reserved or reads as a command-line option: start it with a "
                             "letter or digit")
        bcrypt = _bcrypt()
        password = secrets.token_urlsafe(32)
        digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_ROUNDS)).decode()
        with self._locked():
            self.devices()                                    # a damaged file is refused, never half-kept
            doc = self._read(self.file)
            devs = doc.setdefault("devices", {})
            if device in devs and not rotate:
                raise UsageError(f"device '{device}' is already in {self.root}; --rotate gives it a new password")
            if device not in devs and rotate:
                raise UsageError(f"device '{device}' is not in {self.root}; add it without --rotate")
            devs[device] = {"hash": digest, "added": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            doc["version"] = 1
            self._write(self.file, doc)
        return password

    def remove_device(self, device: str) -> None:
        """Remove `device`: the server refuses it once it reloads. UsageError when it is not there."""
        absent = UsageError(f"device '{device}' is not in {self.root} "
                            f"(`edgeseq devices list --fleet {self.root}` shows who is)")
        if not self.root.is_dir():                 # nothing to lock: no fleet folder is made for a removal
            raise absent
        with self._locked():
            if device not in self.devices():       # read and checked under the lock
                raise absent
            doc = self._read(self.file)
            del doc["devices"][device]
            self._write(self.file, doc)

    def gateway_credentials(self) -> tuple[str, str]:
        """(user, password) the gateway connects with, made (and stored, mode 0600) the first time."""
        with self._locked():
            doc = self._read(self.gateway_file)
            if not (isinstance(doc.get("password"), str) and doc.get("user") == GATEWAY_USER
                    and isinstance(doc.get("hash"), str)):
                bcrypt = _bcrypt()
                password = secrets.token_urlsafe(32)
                doc = {"user": GATEWAY_USER, "password": password,
                       "hash": bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_ROUNDS)).decode()}
                self._write(self.gateway_file, doc)
        return doc["user"], doc["password"]

    # -- the server's view --------------------------------------------------------------------

    def authorization_block(self, partitions: int) -> str:
        """nats-server configuration text: the `accounts` of the module's docstring, the gateway's
        (with the partition mapping for `partitions`) and one per device."""
        self.gateway_credentials()
        gw = self._read(self.gateway_file)
        mapping = wire.mapping_block(partitions).replace("\n", " ").strip()
        lines = ["accounts {", f"  {GATEWAY_ACCOUNT}: {{", "    jetstream: enabled",
                 f'    users: [{{user: {json.dumps(GATEWAY_USER)}, password: {json.dumps(gw["hash"])}}}]',
                 f"    {mapping}",
                 f'    exports: [{{service: "{wire.PART_SUBJECT}.*.*"}}, {{stream: "{wire.OUT_SUBJECT}.>"}}]', "  }"]
        for d, v in sorted(self.devices().items()):
            inbound, out = f"{wire.IN_SUBJECT}.{d}", f"{wire.OUT_SUBJECT}.{d}"
            events = wire.event_subject(d)
            part = f"{wire.PART_SUBJECT}.{partition_of(d, partitions)}.{d}"
            lines += [f"  {json.dumps(device_account(d))}: {{", f"    jetstream: {DEVICE_JETSTREAM}",
                      f"    users: [{{user: {json.dumps(d)}, password: {json.dumps(v['hash'])}, permissions: {{"
                      f"publish: {{allow: {json.dumps([inbound])}}}, "
                      f"subscribe: {{allow: {json.dumps([out, events, '_INBOX.>'])}}}}}}}]",
                      f"    imports: [{{service: {{account: {GATEWAY_ACCOUNT}, subject: {json.dumps(part)}}}, "
                      f"to: {json.dumps(inbound)}}},",
                      f"              {{stream: {{account: {GATEWAY_ACCOUNT}, subject: {json.dumps(out)}}}}},",
                      f"              {{stream: {{account: {GATEWAY_ACCOUNT}, subject: {json.dumps(events)}}}}}]",
                      "  }"]
        return "\n".join(lines) + "\n}\n"


def device_account(device: str) -> str:
    """The name of `device`'s own account on the server."""
    return f"device_{device}"
