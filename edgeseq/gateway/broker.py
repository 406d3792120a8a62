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
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from edgeseq.errors import UsageError

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


def mapping_block(partitions: int) -> str:
    """The nats-server `mappings` block that partitions devices (configuration text)."""
    return ("mappings = {\n"
            f'  "edgeseq.in.*": "edgeseq.part.{{{{partition({int(partitions)},1)}}}}.{{{{wildcard(1)}}}}"\n'
            "}\n")


def server_config(store_dir: str | os.PathLike, port: int, mqtt_port: int | None, partitions: int,
                  host: str = "127.0.0.1", name: str = "edgeseq") -> str:
    """nats-server configuration text: client port, JetStream stored under `store_dir`, MQTT on
    `mqtt_port` (None: off) and the partition mapping. Raises UsageError for a partition count
    outside 1..MAX_PARTITIONS."""
    check_partitions(partitions)
    text = (f"server_name: {name}\nlisten: {host}:{int(port)}\n"
            f'jetstream {{ store_dir: "{Path(store_dir).resolve()}" }}\n')
    if mqtt_port:
        text += f"mqtt {{ listen: {host}:{int(mqtt_port)} }}\n"
    return text + mapping_block(partitions)


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

    >>> with LocalBroker(workdir, partitions=8) as b:
    ...     b.url, b.mqtt_url            # nats://127.0.0.1:PORT, mqtt://127.0.0.1:PORT

    Ports default to free ones; JetStream's files stay in `workdir/jetstream` (so a broker
    restarted on the same directory keeps its streams). Raises UsageError when nats-server is
    not installed (saying how to install it) or does not start (with its last log line).
    """

    def __init__(self, workdir: str | os.PathLike, partitions: int = 8, port: int | None = None,
                 mqtt_port: int | None = None, mqtt: bool = True, host: str = "127.0.0.1"):
        self.binary = find_server()
        if self.binary is None:
            raise UsageError(f"nats-server not found: {INSTALL_HINT}")
        self.workdir = Path(workdir)
        self.host, self.partitions = host, check_partitions(partitions)
        self.port = port or free_port(host)
        self.mqtt_port = (mqtt_port or free_port(host)) if mqtt else None
        self.proc = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def mqtt_url(self) -> str | None:
        return f"mqtt://{self.host}:{self.mqtt_port}" if self.mqtt_port else None

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
        conf = self.workdir / "nats.conf"
        conf.write_text(server_config(self.workdir, self.port, self.mqtt_port, self.partitions, self.host))
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

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

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
