"""A local NATS server for the gateway: JetStream on, MQTT on, the devices' subjects mapped to
partitions.

Devices publish readings to `edgeseq.in.<device>` (NATS) or `edgeseq/in/<device>` (MQTT, which
nats-server turns into the same subject). The server's subject mapping sends each device to
`edgeseq.part.<p>.<device>`, p = a hash of the device id modulo the partition count (NATS's own
`partition` mapping function), so every reading of one device lands in one partition and stays
in order. `server_config` writes that configuration; a server run elsewhere needs the same
`mappings` block (print it with `edgeseq serve --print-config`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from edgeseq.errors import UsageError
from edgeseq.gateway.wire import mapping_block

INSTALL_HINT = ("install it (Debian/Ubuntu/Raspberry Pi OS: `sudo apt-get install nats-server`; elsewhere the "
                "release binary from https://github.com/nats-io/nats-server/releases), or pass --nats URL of a server "
                "with JetStream")
MAX_PARTITIONS = 1024


def find_server() -> str | None:
    """The nats-server binary: $EDGESEQ_NATS_SERVER, else `nats-server` on PATH, else /usr/sbin
    (where Debian installs it). None where there is none."""
    env = os.environ.get("EDGESEQ_NATS_SERVER")
    if env:
        return env if os.access(env, os.X_OK) else None
    return shutil.which("nats-server") or shutil.which("nats-server", path="/usr/sbin:/usr/local/sbin")


def tls_block(cert, key) -> str:
    """nats-server's `tls { cert_file, key_file }` for PEM files `cert` and `key` (absolute paths).
    UsageError for a file that cannot be read or is not PEM."""
    files = []
    for what, f in (("--tls-cert", cert), ("--tls-key", key)):
        try:
            text = Path(f).read_text(errors="replace")
        except OSError as e:
            raise UsageError(f"{what} {f}: {e.strerror or e}") from None
        if "-----BEGIN " not in text:
            raise UsageError(f"{what} {f}: not a PEM file (make one as docs/gateway.md shows, with openssl)")
        files.append(json.dumps(str(Path(f).resolve())))
    return f"tls {{ cert_file: {files[0]}, key_file: {files[1]} }}"


def server_config(store_dir: str | os.PathLike, port: int, mqtt_port: int | None, partitions: int,
                  host: str = "127.0.0.1", name: str = "edgeseq", fleet=None, cluster: dict | None = None,
                  tls: tuple | None = None) -> str:
    """nats-server configuration text: client port, JetStream stored under `store_dir`, MQTT on
    `mqtt_port` (None: off), the partition mapping and, with a `fleet`
    (`edgeseq.gateway.fleet.Fleet`), its authorization block (NATS and MQTT alike); with `tls`
    (certificate file, key file: PEM) both NATS and MQTT clients must speak TLS. Raises
    UsageError for a partition count outside 1..MAX_PARTITIONS, for a server without a fleet
    that would listen beyond loopback (anyone on the network could publish as any device), and
    for a certificate or key file that cannot be read."""
    check_partitions(partitions)
    block = tls_block(*tls) if tls is not None else ""
    if fleet is None and not is_loopback(host):
        raise UsageError(f"a server listening on {host} without authorization lets anyone on the network publish as "
                         "any device; listen on 127.0.0.1, or give the server a fleet of device credentials "
                         "(`edgeseq devices add NAME`)")
    text = (f"server_name: {name}\nlisten: {_hostport(host, port)}\n"
            f'jetstream {{ store_dir: "{Path(store_dir).resolve()}" }}\n')
    if block:
        text += block + "\n"
    if mqtt_port:
        text += f"mqtt {{ listen: {_hostport(host, mqtt_port)}{(', ' + block) if block else ''} }}\n"
    if fleet is not None:
        text += fleet.authorization_block(partitions)
    if cluster is not None:
        text += cluster_block(cluster, host)
    return text + mapping_block(partitions)


def cluster_block(cluster: dict, host: str) -> str:
    """nats-server `cluster` configuration text from {"name", "port", "routes": [ports of the
    other nodes], "user", "password"}: the route listener on `host`, open only to nodes that
    present the route credentials."""
    from edgeseq.gateway.fleet import with_credentials
    routes = [with_credentials(f"nats-route://{host}:{int(p)}", cluster["user"], cluster["password"])
              for p in cluster["routes"]]
    return (f"cluster {{\n  name: {json.dumps(cluster['name'])}\n  listen: {_hostport(host, cluster['port'])}\n"
            f"  authorization {{ user: {json.dumps(cluster['user'])}, password: {json.dumps(cluster['password'])} }}\n"
            f"  routes = {json.dumps(routes)}\n}}\n")


def _hostport(host: str, port: int) -> str:
    return f'"[{host}]:{int(port)}"' if ":" in host else f"{host}:{int(port)}"


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address) is this machine's loopback only."""
    import ipaddress
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_partitions(partitions) -> int:
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
        raise UsageError(f"--partitions must be a whole number from 1 to {MAX_PARTITIONS}, got {partitions!r}")
    return partitions


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _listening(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


class LocalBroker:
    """A nats-server child process (JetStream, MQTT, the partition mapping) in `workdir`.

    >>> with LocalBroker(workdir, partitions=8, fleet=Fleet("runs/fleet")) as b:
    ...     b.url, b.mqtt_url            # nats://127.0.0.1:PORT, mqtt://127.0.0.1:PORT
    ...     b.gateway_url                # nats://edgeseq-gateway:PASSWORD@127.0.0.1:PORT

    Ports default to free ones; JetStream's files stay in `workdir/jetstream` (so a broker
    restarted on the same directory keeps its streams). With `tls` (certificate file, key file)
    NATS and MQTT clients must use TLS (`url` is tls://, `mqtt_url` mqtts://). With a `fleet` the server admits its
    devices and the gateway only (`edgeseq.gateway.fleet`), and `reload()` applies a changed
    fleet; without one it listens on loopback only, open to every local process. Raises
    UsageError when nats-server is not installed (saying how to install it) or does not start
    (with its last log line), and as `server_config`.
    """

    def __init__(self, workdir: str | os.PathLike, partitions: int = 8, port: int | None = None,
                 mqtt_port: int | None = None, mqtt: bool = True, host: str = "127.0.0.1", fleet=None,
                 name: str = "edgeseq", cluster: dict | None = None, tls: tuple | None = None):
        self.binary = find_server()
        if self.binary is None:
            raise UsageError(f"nats-server not found: {INSTALL_HINT}")
        self.workdir = Path(workdir)
        self.host, self.partitions = host, check_partitions(partitions)
        self.port = port or free_port(host)
        self.mqtt_port = (mqtt_port or free_port(host)) if mqtt else None
        self.proc = None
        self._lock = None                 # the open lock file while this broker owns `workdir`
        self.fleet = fleet
        self.fleet_version = None
        self.name, self.cluster, self.tls = name, cluster, tls

    @property
    def url(self) -> str:
        """The client URL: loopback where the server listens on every address (0.0.0.0, ::), which a
        TLS certificate cannot name."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"{'tls' if self.tls else 'nats'}://{f'[{host}]' if ':' in host else host}:{self.port}"

    @property
    def gateway_url(self) -> str:
        """`url` with the gateway's credentials in it (the plain `url` without a fleet)."""
        if self.fleet is None:
            return self.url
        from edgeseq.gateway.fleet import with_credentials
        return with_credentials(self.url, *self.fleet.gateway_credentials())

    def _write_config(self) -> Path:
        conf = self.workdir / "nats.conf"
        self.fleet_version = self.fleet.version() if self.fleet is not None else None
        self.fleet_devices = set(self.fleet.devices()) if self.fleet is not None else set()
        text = server_config(self.workdir, self.port, self.mqtt_port, self.partitions, self.host, fleet=self.fleet,
                             name=self.name, cluster=self.cluster, tls=self.tls)
        from edgeseq.gateway.fleet import write_private
        write_private(conf, text)                 # it holds password hashes
        return conf

    def reload(self) -> bool:
        """Apply the fleet's credentials if they changed since the server read them. A changed
        password is reloaded (SIGHUP; connected devices stay connected); a device added or
        removed restarts the server, since nats-server does not wire the imports of an account
        added by a reload (every client reconnects; JetStream's streams are kept on disk). True
        when it applied a change, False when nothing changed; UsageError with the server's own
        line when it refused the new configuration (it then keeps the old one)."""
        if self.fleet is None or self.proc is None or self.proc.poll() is not None \
                or self.fleet.version() == self.fleet_version:
            return False
        if set(self.fleet.devices()) != self.fleet_devices:
            self.stop(release=False)
            self.start()
            return True
        self._write_config()
        seen = self.log.stat().st_size
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(self.log, "rb") as f:
                f.seek(seen)
                new = f.read().decode(errors="replace")
            for line in new.splitlines():
                if "Reloaded server configuration" in line:
                    return True
                if "Failed to reload" in line:
                    raise UsageError(f"nats-server kept its old credentials: {line.split('] ', 1)[-1]}")
            time.sleep(0.05)
        raise UsageError(f"nats-server did not confirm the reload within 10 s; see {self.log}")

    @property
    def mqtt_url(self) -> str | None:
        return f"{'mqtts' if self.tls else 'mqtt'}://{self.host}:{self.mqtt_port}" if self.mqtt_port else None

    def start(self, timeout: float = 10.0) -> LocalBroker:
        try:
            socket.getaddrinfo(self.host, self.port)
        except OSError as e:
            raise UsageError(f"--host {self.host!r}: {e.strerror or e}; give an address of this machine "
                             "(127.0.0.1, 0.0.0.0)") from None
        for what, port, option in (("NATS", self.port, "--port"), ("MQTT", self.mqtt_port, "--mqtt-port")):
            if port and _listening(self.host, port):
                raise UsageError(f"{self.host}:{port} is taken (another {what} server?); pass {option} with a free "
                                 "port" + (" (or 0 for no MQTT)" if what == "MQTT" else "") +
                                 ", or --nats URL to use a server that already runs")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._own_workdir()
        conf = self._write_config()
        self.log = self.workdir / "nats.log"
        with open(self.log, "wb") as log:            # this run's output only: its last line says why
            self.proc = subprocess.Popen([self.binary, "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if _listening(self.host, self.port) and (not self.mqtt_port or _listening(self.host, self.mqtt_port)):
                return self
            time.sleep(0.05)
        last = self.log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        self.stop()
        raise UsageError(f"nats-server did not start on {self.url}: {last[0]}; see {self.log}")

    def _own_workdir(self) -> None:
        """Hold an exclusive lock on `workdir/edgeseq.lock` (flock: the kernel lets it go when this
        process ends, however it ends) while this broker runs there: two nats-servers on one
        JetStream directory would each overwrite the other's files. UsageError where another
        process holds it."""
        if self._lock is not None:
            return
        import fcntl
        f = open(self.workdir / "edgeseq.lock", "a+")  # noqa: SIM115 - held open for the broker's life
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            raise UsageError(f"{self.workdir} is in use by another running nats-server of edgeseq (two servers on "
                             "one JetStream store would overwrite each other's files); stop that one (edgeseq serve "
                             "with this --store), or give another --store") from None
        self._lock = f

    def stop(self, release: bool = True) -> None:
        """Stop the server (SIGTERM, SIGKILL after 10 s); `release` False keeps `workdir`
        locked for a start that follows at once."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if release and self._lock is not None:
            self._lock.close()
            self._lock = None

    def kill(self) -> None:
        """SIGKILL (no clean shutdown): what a crash looks like."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class LocalCluster:
    """`nodes` nats-server processes on loopback forming one JetStream cluster (each a
    `LocalBroker` in `workdir/node-<i>`, its own server name and route port; routes
    authenticated with a password made for this cluster). For streams and buckets replicated on
    every node (`Gateway(replicas=3)`) a node may die and the cluster goes on.

    >>> with LocalCluster(workdir, nodes=3, partitions=8) as c:
    ...     c.url                    # nats://127.0.0.1:P1,nats://127.0.0.1:P2,nats://127.0.0.1:P3
    ...     c.nodes[0].kill()        # SIGKILL one node

    `start` returns once JetStream answers on every node (a metadata leader is elected).
    Raises UsageError as LocalBroker does, or when JetStream is not ready within `timeout`."""

    def __init__(self, workdir: str | os.PathLike, nodes: int = 3, partitions: int = 8, fleet=None):
        import secrets
        if not 1 <= nodes <= 9:
            raise UsageError(f"a local cluster has 1 to 9 nodes, got {nodes}")
        ports = [free_port() for _ in range(nodes)]
        auth = {"name": "edgeseq", "user": "route", "password": secrets.token_urlsafe(24)}
        self.nodes = [LocalBroker(Path(workdir) / f"node-{i}", partitions=partitions, mqtt=False, fleet=fleet,
                                  name=f"edgeseq-{i}",
                                  cluster={**auth, "port": ports[i], "routes": ports[:i] + ports[i + 1:]})
                      for i in range(nodes)]

    @property
    def url(self) -> str:
        """Every node's URL, comma-separated (what `--nats` and `Gateway` take)."""
        return ",".join(n.url for n in self.nodes)

    @property
    def gateway_url(self) -> str:
        return ",".join(n.gateway_url for n in self.nodes)

    def start(self, timeout: float = 60.0) -> LocalCluster:
        import asyncio
        try:
            for n in self.nodes:
                n.start()
            asyncio.run(self._ready(timeout))
        except BaseException:
            self.stop()
            raise
        return self

    async def _ready(self, timeout: float) -> None:
        import asyncio

        import nats
        deadline = time.monotonic() + timeout
        for n in self.nodes:
            while True:
                try:
                    nc = await nats.connect(n.gateway_url, allow_reconnect=False, connect_timeout=2)
                    try:
                        await nc.jetstream(timeout=2).account_info()
                        break
                    finally:
                        await nc.close()
                except Exception as e:  # noqa: BLE001 - not yet: no metadata leader, or still starting
                    if time.monotonic() > deadline:
                        raise UsageError(f"the local cluster's JetStream was not ready within {timeout:.0f} s "
                                         f"({type(e).__name__}); see {n.log}") from None
                    await asyncio.sleep(0.2)

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
