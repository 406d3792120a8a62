"""`edgeseq serve`: a gateway that streams many devices' readings through one model, with NATS
JetStream as the engine (readings, predictions, dead letters, state and partition leases).

How it holds together:

- Readings arrive in one stream per partition, EDGESEQ_IN_<p>, one subject per device
  (`edgeseq.part.<p>.<device>`, the server's mapping; see `broker`). Each partition is read by
  one gateway at a time through a durable consumer `part-<p>-<lease revision>-<hex>`, so a device's readings are
  applied in the order they were stored. Once the state that holds them is stored, a partition's
  readings are purged from its stream up to a stream sequence (no subject filter, which would
  cost the server a walk over every device's subject). EDGESEQ_IN keeps readings that no
  partition holds (a server without the mapping): they are dead-lettered.
- Which gateway reads which partition is a lease in key-value bucket `edgeseq_leases`
  (key `part.<p>`, value the gateway's name), created with compare-and-set and renewed every
  quarter of `lease_seconds` by a task of its own, which never waits behind processing; the bucket's TTL ends the leases of a gateway that stops renewing
  (killed, hung, cut off), and another gateway then creates them. Gateways share the partitions
  evenly: each heartbeats `gw.<name>` in the same bucket and holds at most ceil(P / live
  gateways), handing extras over (state stored first) when another joins.
- Every `snapshot_every` readings of a partition, but not sooner than `snapshot_seconds` after
  its last store (at a high rate, a store per so many readings would cost as much as the readings:
  a put per device), the gateway stores the state of each device that
  changed (`d.<device>` in bucket `edgeseq_state`, with the last sequence number applied) and then
  the partition's mark (`m.<p>`: the stream sequence of the last reading applied). A gateway that
  takes a partition over replays the stream from the mark on; a device's stored state says which
  of those readings it already holds, so none is lost and none applied twice, and the predictions
  are those of one uninterrupted session (JetStream drops a prediction published again, by its
  `Nats-Msg-Id`, device:boot:seq, within its duplicate window).
- Back-pressure: each partition's consumer has at most `max_pending` readings delivered and
  not yet acknowledged (acknowledged once applied), so the server stops sending to a gateway that
  falls behind; JetStream holds the rest, and a full partition stream (`max_backlog` / P
  readings, or 1 GiB / P) refuses new ones instead of growing without bound (a device learns
  it where the streams acknowledge readings, `acknowledge_readings`). One device holds at most `max_device_backlog` of them (JetStream's per-subject
  limit, new ones refused): a device that floods can neither fill the stream nor bury its
  neighbours' readings.
- Fair share: a round steps one reading of each device with readings waiting, then the next;
  and a device may send at most `max_device_rate` readings a second (a token bucket of
  RATE_BURST_SECONDS' worth, timed by JetStream's storage time of each message, kept in the
  device's stored state, so a partition replayed elsewhere makes the same decisions). A message
  beyond it is dead-lettered with the reason.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import math
import os
import re
import secrets
import socket
import time
from collections import Counter

from edgeseq.errors import EdgeseqError, UsageError
from edgeseq.gateway import wire
from edgeseq.gateway.batcher import Batcher

ROUND_MESSAGES = 4096           # messages taken into one processing round at most ...
ROUND_BYTES = 1 << 20           # ... and about this many bytes of them (a message may carry 1,000 readings)
PREDICTIONS_KEPT = 1_000_000    # EDGESEQ_OUT keeps the newest this many predictions ...
PREDICTION_BYTES = 1 << 30      # ... and at most this many bytes of them
READING_BYTES = 1 << 30         # the partitions' streams hold at most this many bytes of readings waiting ...
READING_MAX = 1 << 20           # ... each message at most this many: nats-server's default max_payload, so
                                # the server refuses a larger one to its publisher (1,000 readings of a few
                                # float32 values as JSON fit)
DEAD_KEPT, DEAD_BYTES = 100_000, 64 << 20   # EDGESEQ_DEAD keeps the newest this many, in at most this many bytes
READING_DEDUP = 0.1             # EDGESEQ_IN_<p>'s duplicate window (s), kept short: a partition's devices
                                # share its stream, so one device could send another's Nats-Msg-Ids first and
                                # have its readings dropped; the gateway skips a repeated (boot, seq) itself
DEAD_PREFIX = 1024              # a dead letter carries this many bytes of the message at most
PUBLISH_TRIES, PUBLISH_WAIT = 12, 0.5   # a prediction message is sent again this often, this far apart (s) ...
PUBLISH_TIMEOUT = 2.0           # ... each time waiting this long for JetStream's acknowledgement
ACK_SOON = 5.0                  # seconds a quiet partition's readings wait for their acknowledgement at most
RATE_BURST_SECONDS = 10.0       # a device's rate limit lets this many seconds' worth of readings through at once
RATE_LETTER_NS = 1_000_000_000  # a device refused by its rate limit gets one dead letter a second at most
SNAPSHOT_SECONDS_MAX = 30.0     # states stored at least this often (readings wait unacknowledged until then)
OFFLOAD_READINGS = 32           # a round of at least this many readings steps in a thread, so the loop (and
                                # everything awaiting in it) goes on while the native step runs without the GIL
PROBE = "~probe-"               # device-token prefix of the gateway's mapping probes (no device id holds "~") ...
PROBES = 16                     # ... this many, so a mapping for another partition count shows in one of them
LEASE_API_TIMEOUT = 3.0         # seconds a lease call waits for JetStream
TAKE_CALL_TIMEOUT = 1.5         # seconds one JetStream call of a take (or of reading a partition again) waits
                                # before it is sent again: a stream electing its leader answers nothing, and a
                                # consumer made while a node is down may wait on the dead node (nats-server 2.9
                                # prefers one of its peers at random to lead it; the others stand for election
                                # only after 4-9 s), where the same call made again is placed afresh ...
TAKE_TIMEOUT = 20.0             # ... for this long in all; past it the lease is given back, to be taken again
CONSUMER_TRIES = 2              # consumers a take makes at once, keeping the first to answer
SETUP_TRIES = 6                 # tries at making the streams and buckets (each call waits up to 10 s)
NO_PEERS_YET = 10005            # JetStream's "no suitable peers for placement": a cluster whose nodes have not
                                # all joined yet cannot place a replicated stream; tried again like an election
MISSING = "nats-py is not installed: pip install nats-py (or pip install '.[gateway]' in edgeseq's clone)"


def _nats():
    try:
        import nats
        from nats.js import api, errors
    except ModuleNotFoundError:
        raise UsageError(MISSING) from None
    return nats, api, errors


class _Gone(Exception):
    """A partition being taken or read again stopped being this gateway's (its lease taken over)."""


async def _quietly(aw) -> None:
    with contextlib.suppress(Exception):
        await aw


class Partition:
    """What a gateway holds for one partition it leases."""

    def __init__(self, p: int, rev: int, epoch: int):
        self.p, self.rev, self.epoch = p, rev, epoch
        self.devices: dict = {}
        self.sub = None
        self.buf: list = []           # delivered, not yet applied
        self.wake: asyncio.Event | None = None
        self.applied_seq = 0          # stream sequence of the last reading applied
        self.since_snapshot = 0
        self.last_msg = None          # the last message applied and not yet acknowledged
        self.unacked = 0              # messages delivered since the last acknowledgement
        self.unacked_since = 0.0      # when the first of them arrived (monotonic seconds)
        self.backlog = 0              # readings stored and not yet delivered here (the last message's metadata)
        self.lost = False             # its lease was taken over: dropped without storing at the next round
        self.stored_at = time.monotonic()   # when its states were last stored (or it was taken)
        self.stream_id = ""           # its readings stream, name@created: marks and states say which they count in
        self.renewed = time.monotonic()   # when the last renewal of its lease that succeeded was sent
        self.delivered = 0            # stream sequence of the last reading delivered (0: none since subscribing)
        self.resume = False           # a delivery went missing: read again from applied_seq + 1
        self.gen = 0                  # the subscription's generation: deliveries of an older one are ignored
        self.ready = False            # its mark is read and its consumer made: it may be stored
        self.busy = False             # being taken or read again: its deliveries wait
        self.lapsed_at = 0.0          # when its lease was last renewed before it lapsed
        self.lapsed = False           # its lease went unrenewed lease_seconds (the bucket not answering): it
                                      # waits, its state kept, until the lease is renewed or found taken
        self.release = False          # to be handed over (another gateway joined): at the next round's end
        self.mark_rev = 0             # revision of its mark (m.<p>) as this gateway last read or wrote it
        self.storing = None           # the task storing its state (one at a time)
        self.io = None                # the task reading it again

    def receiver(self):
        """The callback of a new subscription: deliveries of the ones before it are ignored."""
        self.gen += 1
        gen = self.gen

        async def cb(msg):
            if self.gen == gen:
                await self.deliver(msg)
        return cb

    async def deliver(self, msg) -> None:
        self.buf.append(msg)
        self.wake.set()


class Gateway:
    """One gateway process's work. `run(stop)` until `stop` (an asyncio.Event) is set.

    model: an edgeseq .onnx step graph; url: the NATS server (JetStream on, with the partition
    mapping of `broker.mapping_block(partitions)`); partitions: P, as in that mapping;
    name: this gateway's id (default host-pid); snapshot_every: readings of a partition between
    stored states, and snapshot_seconds: seconds between them at least; lease_seconds: how long a lease outlives its last renewal (a partition is
    taken over within about 1.25x this after its gateway dies); idle_seconds: a device silent this
    long is stored and dropped from memory; max_backlog, max_device_backlog: readings waiting in
    all (each partition's stream holds max_backlog / P) and per device at most; max_device_rate:
    readings a second a device may send (0: no limit; RATE_BURST_SECONDS' worth at once), the
    excess dead-lettered with the reason; tls_ca: a PEM file of the CA (or self-signed
    certificate) that signed a tls:// server's certificate (default: the system's CAs);
    acknowledge_readings: the readings streams answer each reading they store (a device that
    publishes with a reply subject learns it was stored, and sends again what was not), safe only
    where every device has an account of its own (`edgeseq.gateway.fleet`), or on a server open
    to local processes only; replicas: copies of every stream and bucket (3 on a
    three-node JetStream cluster: one node may die); url: one server, or the nodes of a cluster
    comma-separated; `stats` counts readings, predictions, duplicates
    (a sequence number already applied: skipped), gaps (numbers skipped), dead (malformed or
    refused readings, sent to edgeseq.dead.<device>). Raises UsageError (settings, nats-py
    missing, a server without JetStream)."""

    def __init__(self, model, url: str, partitions: int = 8, name: str | None = None, snapshot_every: int = 1000,
                 snapshot_seconds: float = 1.0,
                 lease_seconds: float = 5.0, max_batch: int = 1024, backend: str | None = None,
                 max_history: int | None = None, idle_seconds: float = 300.0,
                 max_pending: int = 20000, max_backlog: int = 1_000_000, max_device_backlog: int = 10_000,
                 replicas: int = 1, replace_model: bool = False, predictions: bool = True,
                 max_device_rate: float = 1000.0, tls_ca: str | None = None, acknowledge_readings: bool = False,
                 echo=None):
        from edgeseq.gateway.broker import check_partitions
        _nats()
        self.P = check_partitions(partitions)
        for what, v, lo in (("snapshot_every", snapshot_every, 1),
                            ("max_pending", max_pending, 1), ("max_backlog", max_backlog, 1),
                            ("max_device_backlog", max_device_backlog, 1), ("replicas", replicas, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise UsageError(f"{what} must be a whole number >= {lo}, got {v!r}")
        for what, v in (("lease_seconds", lease_seconds), ("idle_seconds", idle_seconds)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 1 <= v <= 86400:
                raise UsageError(f"{what} must be a number of seconds from 1 to 86400, got {v!r}")
        if isinstance(snapshot_seconds, bool) or not isinstance(snapshot_seconds, (int, float)) \
                or not math.isfinite(snapshot_seconds) or not 0 <= snapshot_seconds <= SNAPSHOT_SECONDS_MAX:
            raise UsageError(f"--snapshot-seconds must be a number of seconds from 0 to {SNAPSHOT_SECONDS_MAX:g} "
                             f"(readings wait unacknowledged that long; JetStream sends them again after 60 s), "
                             f"got {snapshot_seconds!r}")
        self.snapshot_seconds = float(snapshot_seconds)
        if isinstance(max_device_rate, bool) or not isinstance(max_device_rate, (int, float)) \
                or not math.isfinite(max_device_rate) or not 0 <= max_device_rate <= 1e6:
            raise UsageError(f"--max-device-rate must be readings a second from 0 (no limit) to 1e6, got "
                             f"{max_device_rate!r}")
        self.max_device_rate = float(max_device_rate)
        self.tls_ca = tls_ca
        self.acknowledge_readings = bool(acknowledge_readings)
        if name is None:
            name = re.sub(r"[^A-Za-z0-9_-]", "-", f"{socket.gethostname()}-{os.getpid()}")[-wire.MAX_DEVICE:]
        try:
            wire.check_device(name)
        except wire.BadMessage:
            raise UsageError(f"--name {name!r}: a gateway's name is 1-{wire.MAX_DEVICE} letters, digits, '-' or "
                             "'_'") from None
        self.url, self.name = url, name
        self.batcher = Batcher(model, backend=backend, max_history=max_history, max_batch=max_batch)
        self._value_key = {"anomaly": "level", "regress": "value"}.get(self.batcher.kind, "prob")  # what it carries
        self.snapshot_every, self.lease_seconds, self.idle_seconds = snapshot_every, float(lease_seconds), idle_seconds
        self.max_backlog, self.replace_model = max_backlog, bool(replace_model)
        self.max_device_backlog, self.replicas = max_device_backlog, replicas
        self.predictions = bool(predictions)
        if not self.predictions and self.batcher.decision is None:
            raise UsageError("without per-reading predictions a gateway publishes events only, and this model has no "
                             "decision settings; run `edgeseq calibrate` on it, or keep the predictions")
        if max_device_backlog <= snapshot_every:
            raise UsageError(f"max_device_backlog ({max_device_backlog}) must be above snapshot_every "
                             f"({snapshot_every}): readings stay in the stream until their partition is stored")
        self.unmapped = None          # partition 0's owner dead-letters readings no partition holds
        self._tasks: set = set()      # background tasks (earlier owners' consumers deleted, tries unsubscribed)
        self._said: dict = {}
        self.wake: asyncio.Event | None = None
        self.ready: asyncio.Event | None = None     # set once the streams exist and the first leases are held
        self.max_pending = max_pending
        self.parts: dict = {}
        self.stats = Counter()
        self.echo = echo or (lambda line: None)
        self._epoch = 0
        self._gateways = 1            # gateways heartbeating, as last listed
        self._live_answered = True    # whether the last listing was answered
        self.refused = False          # the server stopped taking the gateway's credentials: `run` stops
        self.resume_all = False       # the connection came back: every partition reads again from its last reading
        self.wake: asyncio.Event | None = None
        self.metrics = None           # a GatewayMetrics (`edgeseq serve --metrics-port`): latency observed per message
        self._draining = False
        self._stepper = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="edgeseq-step")

    @property
    def where(self) -> str:
        """The server's URL as logs and errors show it: any password as `***`."""
        from edgeseq.gateway.fleet import redact
        return redact(self.url)

    # -- setup ------------------------------------------------------------------------------

    async def _connect(self):
        nats, api, errors = _nats()
        self.api, self.errors = api, errors
        addresses = [_address(u.strip()) for u in self.url.split(",")]
        loop = asyncio.get_running_loop()

        def reach():                              # any one node of a cluster will do
            error = None
            for host, port in addresses:
                try:
                    socket.create_connection((host, port), timeout=5).close()
                    return
                except OSError as e:
                    error = e
            raise error
        try:
            await loop.run_in_executor(None, reach)
        except OSError as e:
            raise EdgeseqError(f"cannot reach the NATS server at {self.where} ({e.strerror or type(e).__name__}); start "
                               "one (`edgeseq serve` without --nats starts nats-server here) or fix --nats") from None
        urls = [u.strip() for u in self.url.split(",")]
        tls = [(h, port) for u, (h, port) in zip(urls, addresses) if u.startswith("tls://")]
        if tls and len(tls) < len(urls):
            raise UsageError(f"--nats {self.where} mixes tls:// and nats:// nodes: give every node as tls:// (the "
                             "credentials go to each of them)")
        plain = await loop.run_in_executor(None, _without_tls, tls)
        if plain:                                 # nats-py would send the password before any TLS
            raise EdgeseqError(f"the NATS server at {plain} does not offer TLS (its INFO does not require it), though "
                               "--nats says tls://: refusing to send the gateway's credentials in the clear; check "
                               "the address, or configure the server's tls block")
        refused = []

        async def first_error(e):
            refused.append(e)
        server, creds = _credentials(self.url)
        secure = bool(tls)
        if secure or self.tls_ca is not None:
            creds["tls"] = self._tls_context()
        client = _tls_only_client() if secure else nats.NATS       # credentials never leave but over TLS

        async def connect(**kw):
            nc = client()
            await nc.connect(server, name=f"edgeseq-gateway-{self.name}", connect_timeout=5, **creds, **kw)
            return nc
        try:
            self.nc = await asyncio.wait_for(connect(max_reconnect_attempts=0, allow_reconnect=False,
                                                     error_cb=first_error), 20)
        except Exception as e:  # noqa: BLE001 - nats-py raises several kinds for one cause
            import ssl
            bad_tls = next((x for x in [*refused, e] if isinstance(x, ssl.SSLError)), None)
            if bad_tls is not None:
                why = getattr(bad_tls, "verify_message", None) or bad_tls.reason or str(bad_tls)
                raise EdgeseqError(f"TLS with the NATS server at {self.where} failed ({why}); the server's "
                                   "certificate must be valid now, name the host the gateway connects to among its "
                                   "alternative names (the host in --nats; for the server serve starts, "
                                   "IP:127.0.0.1), and be signed by a CA the gateway trusts (the system's, or "
                                   "--tls-ca)") from None
            if any("tls" in str(x).lower() for x in [*refused, e]) and "tls" not in creds:
                raise EdgeseqError(f"the NATS server at {self.where} requires TLS: give --nats tls://host:port "
                                   "(and --tls-ca for a private CA)") from None
            if any("authoriz" in str(x).lower() or "authentic" in str(x).lower() for x in [*refused, e]):
                raise EdgeseqError(f"the NATS server at {self.where} refused the gateway's credentials; without "
                                   "--nats `edgeseq serve` uses its own (in --fleet), with --nats give "
                                   "nats://USER:PASSWORD@host:port of a user allowed edgeseq.> and $JS.>") from None
            raise EdgeseqError(f"no NATS server answered at {self.where} ({type(e).__name__}); something listens "
                               "there but does not speak NATS: check --nats") from None
        await self.nc.close()
        self.nc = await asyncio.wait_for(connect(          # the credentials work: now the connection that stays
            max_reconnect_attempts=-1, allow_reconnect=True, error_cb=self._nats_error,
            disconnected_cb=self._nats_note("disconnected"), reconnected_cb=self._nats_note("reconnected"),
            closed_cb=self._closed), 20)
        self.js = self.nc.jetstream(timeout=10)
        await self._check_mapping(at_start=True)   # before anything is made or changed on the server
        for attempt in range(SETUP_TRIES):
            try:
                self.state = await self._bucket(wire.STATE_BUCKET)
                await self._check_deployment()
                await self._streams()
                # the leases answer fast or are tried again: a call waiting out a cluster's election would
                # hold the partitions it takes over that much longer
                self.leases_js = self.nc.jetstream(timeout=LEASE_API_TIMEOUT)
                self.leases = await self._bucket(wire.LEASE_BUCKET, ttl=self.lease_seconds, js=self.leases_js)
                break
            except (asyncio.TimeoutError, self.errors.ServiceUnavailableError, self.errors.BadRequestError) as e:
                if isinstance(e, self.errors.BadRequestError) and getattr(e, "err_code", None) != NO_PEERS_YET:
                    raise
                if isinstance(e, self.errors.ServiceUnavailableError) and getattr(e, "err_code", None) != 10008:
                    raise UsageError(f"the NATS server at {self.where} has no JetStream: start it with -js "
                                     "(or `jetstream {}` in its configuration)") from None
                if attempt == SETUP_TRIES - 1:     # a cluster placing replicated streams, or electing a leader
                    raise EdgeseqError(f"JetStream at {self.where} did not answer while the gateway made its "
                                       f"streams ({SETUP_TRIES} tries of 10 s); check the server's log "
                                       "(a cluster needs a majority of its nodes)") from None
                self._say("setup", "NATS: JetStream slow to answer or electing a leader while the gateway makes "
                          "its streams; retrying")
                await asyncio.sleep(2)

    def _tls_context(self):
        """The system's CAs, and tls_ca's certificates besides them."""
        import ssl
        try:
            ctx = ssl.create_default_context()
            if self.tls_ca is not None:
                ctx.load_verify_locations(cafile=self.tls_ca)
            return ctx
        except (OSError, ssl.SSLError) as e:
            raise UsageError(f"--tls-ca {self.tls_ca}: {getattr(e, 'strerror', None) or e}; give a PEM file of "
                             "the CA certificate") from None

    def _say(self, key: str, line: str, every: float = 30.0) -> None:
        """One line per kind of trouble per `every` seconds, not one per retry."""
        now = time.monotonic()
        if now - self._said.get(key, -1e9) >= every:
            self._said[key] = now
            self.echo(line)

    async def _nats_error(self, e):
        self.stats["nats_errors"] += 1
        if "authoriz" in str(e).lower() or "authentic" in str(e).lower():
            self.refused = True
        self._say(f"nats-{type(e).__name__}", f"NATS: {type(e).__name__}: {e or 'connection trouble'}; retrying")

    async def _closed(self):
        """The connection closed for good: it reconnects forever, so only a server that refused
        its credentials (nats-py gives up on that) or our own drain at the end closes it."""
        if not self._draining:
            self.refused = True

    def _nats_note(self, what):
        async def note():
            self.echo(f"NATS connection {what}")
            if what == "reconnected":           # readings in flight to the old connection are lost: read again
                self.resume_all = True
                if self.wake is not None:
                    self.wake.set()
        return note

    def _reading_limits(self) -> dict:
        api = self.api
        # Unless told that every device has an account of its own, EDGESEQ_IN_<p> sends no
        # acknowledgements (no_ack): JetStream publishes one, as the server, to whatever reply
        # subject a device set, which in a shared account may be a subject the device itself may
        # not publish to (another device's state, the JetStream API).
        return dict(max_msgs=-(-self.max_backlog // self.P), max_bytes=max(READING_MAX, READING_BYTES // self.P),
                    max_msg_size=READING_MAX, max_msgs_per_subject=self.max_device_backlog,
                    discard_new_per_subject=True, discard=api.DiscardPolicy.NEW, duplicate_window=READING_DEDUP,
                    no_ack=not self.acknowledge_readings, num_replicas=self.replicas)

    async def _streams(self):
        api = self.api
        readings = self._reading_limits()
        await self._old_layout()
        specs = [(wire.readings_stream(p), [f"{wire.PART_SUBJECT}.{p}.*"], readings) for p in range(self.P)]
        specs += [(wire.READINGS, [f"{wire.IN_SUBJECT}.>"], readings),
                  (wire.PREDICTIONS, [f"{wire.OUT_SUBJECT}.>"], dict(max_msgs=PREDICTIONS_KEPT, max_bytes=PREDICTION_BYTES,
                                                                 discard=api.DiscardPolicy.OLD, duplicate_window=120.0,
                                                                 num_replicas=self.replicas)),
                  (wire.DEAD, [f"{wire.DEAD_SUBJECT}.>"], dict(max_msgs=DEAD_KEPT, max_bytes=DEAD_BYTES,
                                                              max_msg_size=DEAD_PREFIX + 4096,
                                                              discard=api.DiscardPolicy.OLD, num_replicas=self.replicas))]
        for name, subjects, limits in specs:
            try:
                info = await self.js.stream_info(name)
                have = info.config
                if any(getattr(have, k) != v for k, v in limits.items()):   # made by another version: bound it
                    await self.js.update_stream(api.StreamConfig(name=name, subjects=have.subjects, **{
                        **{k: getattr(have, k) for k in ("storage", "retention", "duplicate_window")
                           if getattr(have, k, None) is not None}, **limits}))
                    self.echo(f"stream {name}: limits set to {', '.join(f'{k}={v}' for k, v in limits.items())}")
            except self.errors.NotFoundError:
                await self.js.add_stream(api.StreamConfig(name=name, subjects=subjects, **limits))

    async def _old_layout(self):
        """A deployment made before the partitions had streams of their own kept every partition's
        readings in EDGESEQ_IN: an empty one is narrowed to the unmapped readings; one that still
        holds readings is refused (they would never be read)."""
        try:
            info = await self.js.stream_info(wire.READINGS)
        except self.errors.NotFoundError:
            return
        if f"{wire.PART_SUBJECT}.>" not in (info.config.subjects or []):
            return
        held = {}
        if info.state.messages:
            held = (await self.js.stream_info(wire.READINGS, subjects_filter=">")).state.subjects or {}
        readings = sum(n for k, n in held.items() if PROBE not in k)
        if readings:
            raise UsageError(f"stream {wire.READINGS} holds {readings:,} readings in the layout of an "
                             "earlier edgeseq (every partition in one stream): serve them with that version first, "
                             f"or delete the stream (`nats stream rm {wire.READINGS}`), then start this gateway")
        for k in held:                            # gateways' mapping probes, nothing else: cleared
            await self.js.purge_stream(wire.READINGS, subject=k)
        have = info.config
        await self.js.update_stream(self.api.StreamConfig(name=wire.READINGS, subjects=[f"{wire.IN_SUBJECT}.>"], **{
            k: getattr(have, k) for k in ("storage", "retention", "max_msgs", "max_bytes", "max_msg_size",
                                          "max_msgs_per_subject", "discard", "no_ack", "num_replicas")
            if getattr(have, k, None) is not None}))
        for p in range(self.P):                   # the earlier layout's consumers: nothing reads through them now
            with contextlib.suppress(self.errors.NotFoundError):
                await self.js.delete_consumer(wire.READINGS, f"part-{p}")
        self.echo(f"stream {wire.READINGS}: now holds unmapped readings only (each partition has its own stream)")

    async def _bucket(self, bucket, ttl=None, js=None):
        js = js or self.js
        try:
            return await js.key_value(bucket)
        except self.errors.BucketNotFoundError:
            return await js.create_key_value(self.api.KeyValueConfig(bucket=bucket, history=1, ttl=ttl,
                                                                     replicas=self.replicas))

    async def _check_deployment(self):
        """Every gateway of a deployment runs the same model with the same partition count: the
        first one stores them (key `config`), the others must match (or --replace-model)."""
        mine = {"partitions": self.P, "model": self.batcher.model_sha256, "model_file": self.batcher.model}
        try:
            entry = await self.state.get("config")
        except self.errors.KeyNotFoundError:
            with contextlib.suppress(self.errors.KeyWrongLastSequenceError):
                await self.state.create("config", json.dumps(mine).encode())
            entry = await self.state.get("config")
        try:
            stored = json.loads(entry.value)
            if not (isinstance(stored, dict) and isinstance(stored.get("partitions"), int)):
                raise ValueError("not a deployment record")
        except ValueError:
            raise UsageError(f"key 'config' of bucket {wire.STATE_BUCKET} is not the deployment record a gateway "
                             "writes; delete it (`nats kv del edgeseq_state config`) and start the gateway again") \
                from None
        if stored["partitions"] != self.P:
            raise UsageError(f"this deployment has {stored['partitions']} partitions (stored when its first gateway "
                             f"started); run the gateway with --partitions {stored['partitions']}")
        if stored.get("model", mine["model"]) != mine["model"]:
            if not self.replace_model:
                raise UsageError(f"this deployment serves another model ({stored.get('model_file')}, sha256 "
                                 f"{stored['model'][:12]}); run every gateway with that model, or pass "
                                 "--replace-model to switch the deployment (devices then start over)")
            await self.state.update("config", json.dumps(mine).encode(), last=entry.revision)
            self.echo(f"the deployment now serves {self.batcher.model}; devices start over as they come")

    async def _check_mapping(self, at_start: bool = False):
        """The server must map edgeseq.in.<device> to edgeseq.part.<p>.<device> with this
        deployment's P, or readings land in no partition's stream: PROBES probes (device tokens
        `~probe-<name>-<i>`, which no device id can hold) are published and their mapped
        subjects read back. Raises UsageError at start; later, says so once a minute."""
        from edgeseq.gateway.fleet import partition_of
        probes = {f"{PROBE}{self.name}-{i}" for i in range(PROBES)}
        arrived: dict = {}
        done = asyncio.Event()

        async def seen(msg):
            arrived[msg.subject.split(".", 3)[3]] = msg.subject.split(".")[2]
            if len(arrived) == len(probes):
                done.set()
        subs = [await self.nc.subscribe(f"{wire.PART_SUBJECT}.*.{probe}", cb=seen) for probe in probes]
        try:
            await self.nc.flush()
            for probe in probes:
                await self.nc.publish(f"{wire.IN_SUBJECT}.{probe}", b"")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(done.wait(), 5)
        finally:
            for sub in subs:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        config = f"give the server the mapping from `edgeseq serve MODEL --partitions {self.P} --print-config`"
        wrong = sorted({int(p) for d, p in arrived.items() if p != str(partition_of(d, self.P))})
        if arrived and not wrong:
            self.stats.pop("unserved_partitions", None)
            return
        msg = (f"the NATS server maps devices to partition {wrong[-1]}, not as this deployment's partitions (of "
               f"{self.P}) do: {config}" if wrong else
               f"the NATS server does not map {wire.IN_SUBJECT}.<device> to partitions: {config}")
        if at_start:
            raise UsageError(msg)
        self.stats["unserved_partitions"] = 1
        self._say("mapping", f"error: {msg}", every=60)

    # -- leases ---------------------------------------------------------------------------

    async def _renew(self):
        """Heartbeat `gw.<name>` and renew every lease held. A lease whose key is gone (its TTL
        ran out while the bucket did not answer, a cluster electing its leader) is created again
        where nobody took it: the partition goes on from its state in memory if its mark is the
        one this gateway last wrote, else it is taken again from the stored state. One taken
        over marks its partition lost, dropped by the loop before its next round."""
        try:
            # every lease at once: one whose bucket call waits (a cluster electing a leader) never
            # delays the others' renewal
            done = await asyncio.gather(*(self._renew_one(p, part) for p, part in list(self.parts.items())),
                                        return_exceptions=True)
            await self.leases.put(f"gw.{self.name}", str(time.time()).encode())
            for r in done:
                if isinstance(r, BaseException):
                    raise r
        finally:
            self._expired()

    async def _renew_one(self, p: int, part: Partition) -> None:
        errors = self.errors
        sent = time.monotonic()
        try:
            part.rev = await self.leases.update(f"part.{p}", self.name.encode(), last=part.rev)
        except (errors.ServiceUnavailableError, errors.ServerError):
            # a cluster electing the bucket's leader: nobody can take the lease meanwhile; held
            # until it may have run out (`_expired`), then waiting until the bucket answers
            raise
        except errors.APIError:                  # taken over, or gone: ours again only if nobody took it
            if not await self._recreate(p, part):
                self._lose(p, part)
                return
        part.renewed = sent
        if part.lapsed:
            part.lapsed = False
            self.stats["leases_kept"] += 1
            self.echo(f"partition {p}: lease renewed after {sent - part.lapsed_at:.1f} s without an "
                      "answer; going on from the state in memory")
            self.wake.set()

    async def _recreate(self, p: int, part: Partition) -> bool:
        """Create the lease of `part` again where its key is gone (or find it holding this
        gateway's name, a renewal stored after its answer was given up for). True when it is
        ours and nobody else stored the partition since (its mark is the one this gateway last
        saw, or one it wrote: a store it gave up waiting for may have landed): its state in
        memory is still the partition's. Where another gateway's mark is there (it held the
        partition meanwhile), the lease is given up at once, to be taken again from the
        stored state. False when another gateway holds it."""
        errors = self.errors
        if part.lost or not part.ready:
            return False
        created = True
        try:
            rev = await self.leases.create(f"part.{p}", self.name.encode())
        except (errors.ServiceUnavailableError, errors.ServerError):
            raise
        except errors.APIError:
            created = False
            # held: by this gateway where a renewal it gave up waiting for was stored after all
            # (only this gateway writes its name), else by another
            try:
                entry = await self.leases.get(f"part.{p}")
            except errors.KeyNotFoundError:
                return False
            if entry.value != self.name.encode():
                return False
            rev = entry.revision
        try:
            entry = await asyncio.wait_for(self.state.get(f"m.{p}"), LEASE_API_TIMEOUT)
            mark, by = entry.revision, json.loads(entry.value).get("gateway")
        except errors.KeyNotFoundError:
            mark, by = 0, None
        except ValueError:
            mark, by = -1, None
        if mark == part.mark_rev or by == self.name:     # stored by this gateway only, if at all
            part.rev = rev
            if created:
                # another gateway may have held it meanwhile and deleted this one's consumer (of an
                # older lease revision) without storing anything: read again on a consumer of its own
                part.resume = True
            return True
        with contextlib.suppress(Exception):
            await self.leases.delete(f"part.{p}", last=rev)
        return False

    def _lose(self, p: int, part: Partition) -> None:
        if self.parts.get(p) is part and not part.lost:
            part.lost = True
            self.wake.set()

    def _expired(self) -> None:
        """Stop applying the readings of every partition whose lease was last renewed (counted
        from when that renewal was sent) lease_seconds ago or more: the bucket's TTL may have
        ended it and another gateway may hold it now. It waits, its state in memory, until the
        bucket answers (`_renew`: ours again, or lost)."""
        now = time.monotonic()
        for p, part in list(self.parts.items()):
            if now - part.renewed >= self.lease_seconds and not part.lapsed and not part.lost:
                part.lapsed, part.lapsed_at = True, part.renewed
                self.stats["leases_lapsed"] += 1
                self.echo(f"partition {p}: lease not renewed for {now - part.renewed:.1f} s (the lease bucket does "
                          "not answer); its readings wait until it does")

    async def _renewing(self):
        """Renew the leases every quarter of lease_seconds, in a task of its own: a slow round
        of readings (a flood, a slow server) never delays it."""
        while True:
            try:
                await self._renew()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a slow or restarting server: try again soon
                self._say("lease-trouble", f"NATS: {type(e).__name__} renewing leases; retrying")
            await asyncio.sleep(self.lease_seconds / 4)

    async def _drop_lost(self):
        for p in [p for p, part in self.parts.items() if part.lost]:
            self.echo(f"lost partition {p} (its lease was taken over); dropping it without storing")
            self.stats["partitions_lost"] += 1
            await self._drop(p)

    async def _leases(self):
        """Share the partitions: hold at most ceil(P / live gateways), handing extras over (at
        the end of a round: `release`) and taking free ones, all of them at once."""
        errors = self.errors
        share = math.ceil(self.P / await self._live())
        held = sorted(p for p, part in self.parts.items() if not part.lost and not part.release)
        for p in held[share:]:
            self.parts[p].release = True
            self.wake.set()
        if len(held) >= share:
            return
        start, takes, unanswered = sum(self.name.encode()) % self.P, [], False
        for k in range(self.P):
            p = (start + k) % self.P
            if p in self.parts:
                continue
            sent = time.monotonic()
            try:
                rev = await asyncio.wait_for(self.leases.create(f"part.{p}", self.name.encode()), TAKE_CALL_TIMEOUT)
            except (asyncio.TimeoutError, errors.ServiceUnavailableError):
                # a bucket electing its leader answers nothing: the leases created so far are taken, the
                # next round (soon) tries the rest
                unanswered = True
                break
            except (errors.KeyWrongLastSequenceError, errors.APIError):
                continue
            except BaseException:
                await asyncio.gather(*takes)        # the leases created so far are taken all the same
                raise
            takes.append(self._take(p, rev, sent))
            if len(held) + len(takes) >= share:
                break
        await asyncio.gather(*takes)
        if unanswered:
            raise TimeoutError("the lease bucket did not answer")

    async def _live(self) -> int:
        """How many gateways heartbeat: the `gw.<name>` keys the lease bucket holds (this
        gateway's among them), from one stream-info request; a key a stopped gateway deleted
        (its marker stays until the bucket's TTL) is left out by reading it. A bucket that does
        not answer (a cluster electing its leader) counts as last time, so taking partitions over
        never waits on it."""
        prefix = f"$KV.{wire.LEASE_BUCKET}.gw."
        try:
            info = await asyncio.wait_for(self.leases_js.stream_info(f"KV_{wire.LEASE_BUCKET}",
                                                                     subjects_filter=f"{prefix}>"), TAKE_CALL_TIMEOUT)
            others = {k[len(prefix) - 3:] for k in (info.state.subjects or {}) if k.startswith(prefix)}
            others.discard(f"gw.{self.name}")
            found = await asyncio.wait_for(asyncio.gather(*(self.leases.get(k) for k in others),
                                                          return_exceptions=True), LEASE_API_TIMEOUT)
            gone = sum(isinstance(r, self.errors.KeyNotFoundError) for r in found)
            self._gateways = 1 + len(others) - gone
            self._live_answered = True
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - as last time
            self._live_answered = False             # asked again soon: a gateway gone frees its partitions
            self._say("live", f"NATS: {type(e).__name__} listing the gateways' heartbeats; sharing as before",
                      every=5)
        return max(self._gateways, 1)

    async def _leasing(self):
        """Share the partitions every quarter of lease_seconds, in a task of its own: taking a
        partition (its stream, mark and consumer, which a cluster electing leaders answers
        slowly) never holds up the rounds of the partitions already held."""
        while True:
            wait = self.lease_seconds / 4
            try:
                await self._leases()
                self.ready.set()
                if not self._live_answered:
                    wait = min(wait, 0.25)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a slow or restarting server: try again soon
                self._say("share-trouble", f"NATS: {type(e).__name__} sharing the partitions; retrying", every=5)
                wait = min(wait, 0.25)          # an election ending frees the partitions of a gateway gone
            await asyncio.sleep(wait)

    async def _take(self, p: int, rev: int, sent: float):
        """Read partition p (its lease just created, revision `rev`) from its mark on. Its lease
        is renewed from now on; its deliveries wait until it is ready. A take that fails (a
        stream electing its leader past the API's timeout) gives the lease back at once, to be
        taken again."""
        self._epoch += 1
        part = self.parts[p] = Partition(p, rev, self._epoch)
        part.renewed, part.busy = sent, True
        part.wake = self.wake
        try:
            await asyncio.wait_for(self._open(part), TAKE_TIMEOUT)
        except asyncio.CancelledError:
            raise
        except _Gone:                             # taken over meanwhile: nothing of it is ours
            if part.sub is not None:
                await _quietly(part.sub.unsubscribe())
            return
        except Exception as e:  # noqa: BLE001 - taken again next time
            self._say(f"take-{p}", f"NATS: {type(e).__name__} taking partition {p}; giving its lease back to take "
                      "it again", every=5)
            if self.parts.get(p) is part:
                await self._drop(p)
                with contextlib.suppress(Exception):
                    await self.leases.delete(f"part.{p}", last=part.rev)
            return
        if self.parts.get(p) is not part:         # dropped meanwhile (lost): nothing of it is ours
            with contextlib.suppress(Exception):
                await part.sub.unsubscribe()
            return
        part.busy = False
        self.wake.set()
        self.stats["partitions_taken"] += 1
        self.echo(f"took partition {p} (replaying from stream sequence {part.applied_seq + 1})")

    async def _again(self, part: Partition, call):
        """`await call()` until JetStream answers it: each try waits TAKE_CALL_TIMEOUT at most, and
        one that times out or finds no leader (a cluster electing one) is sent again (at once
        after a timeout, 0.5 s after a quick refusal), so a take waits for an election no longer
        than the election itself; TAKE_TIMEOUT bounds the whole. `_Gone` once `part` is no longer
        this gateway's (its lease taken over meanwhile): nothing more is done in its name. Other
        errors are raised."""
        errors, deadline = self.errors, time.monotonic() + TAKE_TIMEOUT
        while True:
            self._check_held(part)
            try:
                return await asyncio.wait_for(call(), TAKE_CALL_TIMEOUT)
            except (asyncio.TimeoutError, errors.ServiceUnavailableError, errors.ServerError) as e:
                self.stats["take_retries"] += 1
                if time.monotonic() >= deadline:
                    raise asyncio.TimeoutError(f"no answer in {TAKE_TIMEOUT:g} s") from e
                await asyncio.sleep(0.05 if isinstance(e, asyncio.TimeoutError) else 0.5)

    def _check_held(self, part: Partition) -> None:
        if self.parts.get(part.p) is not part or part.lost:
            raise _Gone(part.p)

    async def _open(self, part: Partition) -> None:
        """`part`'s stream, mark and consumer (and partition 0's unmapped readings)."""
        api, p = self.api, part.p
        created = (await self._again(part, lambda: self.js.stream_info(wire.readings_stream(p)))).created
        part.stream_id = f"{wire.readings_stream(p)}@{created.isoformat() if created else ''}"
        try:
            entry = await self._again(part, lambda: self.state.get(f"m.{p}"))
            mark = json.loads(entry.value)
            part.mark_rev = entry.revision
            # a mark of another stream (the earlier layout's shared one, or this one before it was deleted and
            # made again) counts other sequences than this stream's
            part.applied_seq = mark["stream_seq"] if mark.get("stream") == part.stream_id else 0
        except self.errors.KeyNotFoundError:
            part.applied_seq = 0
        part.ready = True
        await self._subscribe(part)
        if p == 0:                            # readings the mapping sent nowhere: dead-lettered here
            unmapped = Partition(-1, 0, self._epoch)
            unmapped.wake = self.wake
            unmapped.sub = await self._consumer(part, wire.READINGS, "unmapped", unmapped.deliver,
                                                dict(deliver_policy=api.DeliverPolicy.ALL))
            if self.parts.get(p) is part:
                self.unmapped = unmapped
            else:
                with contextlib.suppress(Exception):
                    await unmapped.sub.unsubscribe()

    async def _consumer(self, part: Partition, stream: str, durable: str, cb, start: dict):
        """A durable push consumer on `stream` for `part`, delivering to `cb`, at most
        max_pending unacknowledged, named `durable`-<lease revision>-<random hex>.

        The stream's consumers of that name made under an older lease revision (an earlier
        owner's: a lease taken over is created again, at a higher revision; or this gateway's
        before it read the partition again) and the fixed name `durable` of earlier versions are
        deleted first, for TAKE_CALL_TIMEOUT at most, so an owner that has not yet seen its lease
        lapse is cut off before the new consumer delivers; what that left is deleted again in
        the background once the new one answers (`_delete_earlier`). A consumer made while a
        node is down may wait 4-9 s on it (nats-server 2.9 prefers one of its three peers at
        random to lead it), so CONSUMER_TRIES are made at once, each on an inbox of its own: the
        first to answer is kept (what it delivered meanwhile passes to `cb` in order), the others'
        deliveries reach nobody; none answering in TAKE_CALL_TIMEOUT, new ones are made (`_again`).
        `_Gone` where `part` stops being this gateway's meanwhile."""
        api, rev, given_up, kept = self.api, part.rev, [], []
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._delete_earlier(stream, durable, rev), TAKE_CALL_TIMEOUT)

        async def make():
            held, tries, subs, won = {}, {}, {}, []

            def route(name):
                async def deliver(msg):
                    if won and won[0] == name:
                        await cb(msg)
                    elif name in held:
                        held[name].append(msg)
                return deliver
            try:
                for _ in range(CONSUMER_TRIES):
                    name = f"{durable}-{rev}-{secrets.token_hex(4)}"
                    held[name] = []
                    inbox = self.nc.new_inbox()
                    subs[name] = await self.nc.subscribe(inbox, cb=route(name))
                    tries[asyncio.ensure_future(self.js.add_consumer(stream, api.ConsumerConfig(
                        durable_name=name, ack_policy=api.AckPolicy.ALL, ack_wait=60.0,
                        max_ack_pending=self.max_pending, deliver_subject=inbox, **start)))] = name
                pending, error = set(tries), None
                while pending:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    ok = [t for t in done if not t.cancelled() and t.exception() is None]
                    error = error or next((t.exception() for t in done if not t.cancelled() and t.exception()), None)
                    if ok:
                        name = tries[ok[0]]
                        while held[name]:                # delivered before it answered: first, in order
                            await cb(held[name].pop(0))
                        won.append(name)
                        kept.append(subs[name])
                        return name, subs[name]
                raise error
            finally:
                for task in tries:
                    task.cancel()
                for name, sub in subs.items():          # the others: unsubscribed without waiting
                    if not won or won[0] != name:
                        held.pop(name, None)
                        given_up.append(name)
                        self._background(_quietly(sub.unsubscribe()))
        try:
            name, sub = await self._again(part, make)
            self._check_held(part)
        except BaseException:                           # cancelled or gone, even as a try answered
            for sub in kept:
                self._background(_quietly(sub.unsubscribe()))
            raise
        self._background(self._delete_earlier(stream, durable, rev, part, given_up))
        return sub

    def _background(self, aw) -> None:
        """Run `aw` in a task of its own, held until it ends (asyncio keeps only weak references)."""
        task = asyncio.ensure_future(aw)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _delete_earlier(self, stream: str, durable: str, rev: int, part: Partition | None = None,
                              given_up: list = ()) -> None:
        """Delete `stream`'s consumers named `durable` (earlier versions' fixed name) or
        `durable`-<revision>-<hex> with a revision below `rev` (earlier owners'); without `part`
        (before a consumer is made) those of revision `rev` too (this gateway's, replaced), with
        it (after) only the names in `given_up` among them (its tries given up for: a consumer
        made since under the same revision is left alone). Names of any other form are left
        alone. With `part`, nothing is deleted once it is no longer this gateway's. Each call
        waits LEASE_API_TIMEOUT at most (deleting one whose raft group has no leader is done
        without an answer); a sweep that fails leaves them to the next."""
        try:
            msg = await self.nc.request(f"{self.api.DEFAULT_PREFIX}.CONSUMER.NAMES.{stream}", b"",
                                        timeout=LEASE_API_TIMEOUT)
            names = json.loads(msg.data).get("consumers") or []
            stale = []
            for n in names:
                m = re.fullmatch(rf"{re.escape(durable)}-(\d+)-[0-9a-f]{{8}}", n)
                made = int(m.group(1)) if m else None      # the lease revision it was made under
                replaced = made == rev and (part is None or n in given_up)
                if n == durable or (made is not None and (made < rev or replaced)):
                    stale.append(n)
            if part is not None:
                self._check_held(part)
            done = await asyncio.gather(*(asyncio.wait_for(self.js.delete_consumer(stream, n), LEASE_API_TIMEOUT)
                                          for n in stale), return_exceptions=True)
            failed = [n for n, r in zip(stale, done) if isinstance(r, BaseException)
                      and not isinstance(r, self.errors.NotFoundError)]
            if failed and part is not None:
                self._say("earlier-consumers", f"NATS: {len(failed)} earlier consumer(s) of {stream} not deleted "
                          "yet (no answer); the next take deletes them", every=60)
        except asyncio.CancelledError:
            raise
        except _Gone:
            return
        except Exception as e:  # noqa: BLE001 - left to the next sweep
            self._say("earlier-consumers", f"NATS: {type(e).__name__} deleting {stream}'s earlier consumers; left "
                      "to the next take", every=60)

    async def _subscribe(self, part: Partition):
        """`part`'s readings from the one after the last applied (all, where none was), on a
        consumer made afresh."""
        api = self.api
        start = dict(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=part.applied_seq + 1) \
            if part.applied_seq else dict(deliver_policy=api.DeliverPolicy.ALL)
        part.sub = await self._consumer(part, wire.readings_stream(part.p), f"part-{part.p}", part.receiver(), start)

    async def _resubscribe(self, part: Partition):
        """Read `part` again from the reading after the last one applied, on a consumer made
        afresh: readings delivered to a connection that dropped, or skipped in a delivery, would
        otherwise wait for ack_wait, or be acknowledged unseen with the next one (AckAll)."""
        with contextlib.suppress(Exception):
            await part.sub.unsubscribe()
        part.buf, part.last_msg, part.unacked, part.delivered, part.resume = [], None, 0, 0, False
        await self._subscribe(part)
        self.stats["resubscribed"] += 1

    def _resubscribe_due(self):
        """Partitions whose deliveries went missing (or all, after a reconnection) read again,
        each in a task of its own (a stream electing its leader answers slowly); a partition's
        deliveries wait until it has."""
        if self.resume_all:
            self.resume_all = False
            for part in self.parts.values():
                part.resume = True
        for part in [part for part in self.parts.values() if part.resume and not part.lost and not part.busy]:
            part.busy, part.resume = True, False
            part.io = asyncio.ensure_future(self._read_again(part))

    async def _read_again(self, part: Partition):
        try:
            await asyncio.wait_for(self._resubscribe(part), TAKE_TIMEOUT)
        except asyncio.CancelledError:
            raise
        except _Gone:                             # taken over meanwhile: dropped at the next round
            pass
        except Exception as e:  # noqa: BLE001 - a cluster electing the stream's leader: again next round
            part.resume = True
            self._say("resubscribe", f"NATS: {type(e).__name__} reading partition {part.p} again; retrying")
            await asyncio.sleep(0.5)
        finally:
            part.busy = False
            self.wake.set()

    async def _drop(self, p: int):
        part = self.parts.pop(p, None)
        if part is None:
            return
        for task in (part.storing, part.io):
            if task is not None and not task.done() and task is not asyncio.current_task():
                task.cancel()
        for holder in (part, self.unmapped if p == 0 else None):
            if holder is not None:
                with contextlib.suppress(Exception):
                    await holder.sub.unsubscribe()
                holder.buf = []
        if p == 0:
            self.unmapped = None

    async def _release(self, p: int):
        """Store partition p's state, then give its lease up (if it is still ours: the revision
        this gateway last wrote) so another gateway takes it at once."""
        part = self.parts[p]
        if part.lost or part.lapsed:              # another gateway may hold it: nothing of ours to store or give
            await self._drop(p)
            return
        await self._snapshot(part, evict=False)
        await self._drop(p)
        with contextlib.suppress(Exception):
            await self.leases.delete(f"part.{p}", last=part.rev)
        self.echo(f"handed partition {p} over")

    # -- state ----------------------------------------------------------------------------

    async def _stored(self, name: str) -> bytes | None:
        try:
            return (await self.state.get(f"d.{name}")).value
        except self.errors.KeyNotFoundError:
            return None

    async def _join(self, part: Partition, names: list) -> None:
        """Devices first seen in this round: their stored states fetched together (256 requests
        in flight at most), not one round trip after another."""
        for lo in range(0, len(names), 256):
            chunk = names[lo:lo + 256]
            for name, data in zip(chunk, await asyncio.gather(*(self._stored(n) for n in chunk))):
                self._device(part, name, data)

    def _device(self, part: Partition, name: str, data: bytes | None):
        dev = self.batcher.new_device(name)
        if data:
            try:
                st = wire.decode_state(data, max_bytes=self.batcher.max_state_bytes)
                if st["model"] == self.batcher.model_sha256 and self.batcher.check_arrays(st["arrays"]):
                    try:
                        decision = self.batcher.check_decision(st["decision"])
                    except UsageError as e:
                        raise wire.BadMessage(f"its decision state does not fit ({e})") from None
                    dev.arrays, dev.position, dev.last_seq = st["arrays"], st["position"], st["last_seq"]
                    dev.boot, dev.decision, dev.bucket = st["boot"], decision, st["bucket"]
                    # stream sequences of another stream (the earlier layout's shared one, or this one before it
                    # was made again) mean nothing here: the device's own numbering (last_seq) still keeps any
                    # reading from being applied twice
                    dev.stream_seq = st["stream_seq"] if st["stream"] == part.stream_id else 0
                else:
                    self.stats["state_mismatch"] += 1
                    self._say("model", f"device {name}: its stored state is for another model; starting it over "
                              "(and others like it)")
            except wire.BadMessage as e:
                self.stats["state_mismatch"] += 1
                self._say("unreadable", f"device {name}: {e}; starting it over (and others like it)")
        part.devices[name] = dev
        self.stats["devices_joined"] += 1
        return dev

    async def _snapshot(self, part: Partition, evict: bool = True):
        """Store `part` now (after any store in flight), awaited."""
        await self._settle(part)
        taken = self._capture(part)
        if taken is not None:
            await self._store(part, taken, evict)

    async def _settle(self, part: Partition) -> None:
        if part.storing is not None and not part.storing.done():
            await asyncio.wait({part.storing})

    def _store_soon(self, part: Partition, evict: bool = True) -> None:
        """Store `part` in a task of its own (one at a time; a store in flight defers this one
        to a later round): its state is taken now, between rounds, so the mark never covers a
        reading whose prediction is not stored, and the rounds go on while the bucket answers
        (a cluster electing its leader may take seconds)."""
        if part.storing is not None and not part.storing.done():
            return
        taken = self._capture(part)
        if taken is not None:
            part.storing = asyncio.ensure_future(self._store_logged(part, taken, evict))

    async def _store_logged(self, part: Partition, taken: dict, evict: bool) -> None:
        try:
            await self._store(part, taken, evict)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - stored next round: the mark moves once all is stored
            self._say("snapshot-trouble", f"NATS: {type(e).__name__} storing partition {part.p}; retrying")

    def _capture(self, part: Partition) -> dict | None:
        """What a store of `part` writes, taken now: each changed device's state (encoded), the
        mark, the last message to acknowledge. None where there is nothing of ours to store."""
        if part.lost or part.lapsed or not part.ready:   # another gateway may hold it, or its mark is unread
            return None
        sha = self.batcher.model_sha256
        dirty = [d for d in part.devices.values() if d.dirty]
        taken = {"devices": dirty, "seq": part.applied_seq, "msg": part.last_msg, "since": part.since_snapshot,
                 "unacked": part.unacked, "unacked_since": part.unacked_since,
                 "states": [(f"d.{d.name}", wire.encode_state(d.arrays, d.position, d.last_seq, sha, d.stream_seq,
                                                              d.boot, d.decision, d.bucket, stream=part.stream_id))
                            for d in dirty],
                 "mark": json.dumps({"stream_seq": part.applied_seq, "gateway": self.name,
                                     "stream": part.stream_id}).encode()}
        for d in dirty:
            d.dirty = False
        part.last_msg = None
        part.since_snapshot = part.unacked = 0
        part.stored_at = time.monotonic()
        return taken

    async def _store(self, part: Partition, taken: dict, evict: bool) -> None:
        """Write what `_capture` took: every changed device, then the mark; then acknowledge and
        purge the readings the mark covers. On failure, what was taken is marked to store again."""
        states = taken["states"]
        try:
            for lo in range(0, len(states), 256):
                if part.lost or part.lapsed:
                    return
                await asyncio.gather(*(self.state.put(k, v) for k, v in states[lo:lo + 256]))
            if part.lost or part.lapsed:
                return
            part.mark_rev = await self.state.put(f"m.{part.p}", taken["mark"])
            if taken["msg"] is not None:
                await self.nc.flush()             # the predictions first, then let the readings go
                await taken["msg"].ack()
                await self.js.purge_stream(wire.readings_stream(part.p), seq=taken["seq"] + 1)
        except BaseException:
            for d in taken["devices"]:
                d.dirty = True                    # its newest state goes with the next store
            if part.last_msg is None:
                part.last_msg = taken["msg"]      # AckAll: a later message acknowledges it with it
            part.since_snapshot += taken["since"]
            if taken["unacked"]:
                part.unacked_since = min(part.unacked_since, taken["unacked_since"]) if part.unacked \
                    else taken["unacked_since"]
                part.unacked += taken["unacked"]
            raise
        self.stats["snapshots"] += 1
        if evict:
            old = time.monotonic() - self.idle_seconds
            for name in [n for n, d in part.devices.items() if d.seen < old and not d.dirty]:
                del part.devices[name]
                self.stats["devices_left"] += 1

    async def _sweep(self):
        """Devices silent for idle_seconds leave memory: their partition's state is stored first.
        Rate-limit refusals not yet in a dead letter get one, a second after the last at least.
        A partition whose readings have waited ACK_SOON seconds unacknowledged (a quiet one) is
        stored too, so JetStream never redelivers them after its ack_wait."""
        now, wall = time.monotonic(), time.time_ns()
        old = now - self.idle_seconds
        for part in list(self.parts.values()):
            for dev in part.devices.values():     # refusals since a flood's last letter: told a second on
                last, since = dev.letters
                if since and wall - last >= RATE_LETTER_NS:
                    await self._dead(dev.name, b"", f"rate limit: {since} more message(s) of this device were refused "
                                     "since the last letter (the gateway's --max-device-rate)", refused=since)
                    dev.letters = (wall, 0)
            if any(d.seen < old for d in part.devices.values()) or \
                    part.unacked and now - part.unacked_since >= max(ACK_SOON, self.snapshot_seconds):
                self._store_soon(part)

    # -- readings -------------------------------------------------------------------------

    async def _publish(self, answers: list) -> None:
        """Publish prediction messages [(partition, subject, payload, id)] into EDGESEQ_OUT, each
        acknowledged by JetStream (sent together, the acknowledgements awaited together); those
        refused or unanswered (a cluster electing the stream's leader) are sent again, up to
        PUBLISH_TRIES rounds. A partition whose predictions still did not land is dropped without
        storing its state, so it is replayed from its last mark (the ids make the repeats free)."""
        for attempt in range(PUBLISH_TRIES):
            results = await asyncio.gather(*(self.js.publish(subject, payload, timeout=PUBLISH_TIMEOUT,
                                                             headers={"Nats-Msg-Id": mid})
                                             for _, subject, payload, mid in answers), return_exceptions=True)
            answers = [a for a, r in zip(answers, results) if isinstance(r, BaseException)]
            if not answers:
                return
            self.stats["publish_retries"] += len(answers)
            self._say("publish", f"NATS: {len(answers)} prediction message(s) not stored yet "
                      f"({type(next(r for r in results if isinstance(r, BaseException))).__name__}); retrying")
            await asyncio.sleep(PUBLISH_WAIT)
        for p in {part.p for part, *_ in answers}:
            if p in self.parts:
                self.echo(f"partition {p}: predictions not stored after {PUBLISH_TRIES} tries; dropping it to replay")
                self.stats["partitions_lost"] += 1
                await self._drop(p)

    async def _dead(self, device: str, payload: bytes, reason: str, refused: int | None = None):
        """Dead-letter a message: its first DEAD_PREFIX bytes, the reason and its full size in
        headers (Edgeseq-Error, Edgeseq-Size); a rate-limit letter also says how many messages it
        stands for (Edgeseq-Refused)."""
        self.stats["dead"] += 1
        headers = {"Edgeseq-Error": reason[:500], "Edgeseq-Size": str(len(payload))}
        if refused is not None:
            headers["Edgeseq-Refused"] = str(refused)
        await self.nc.publish(wire.dead_subject(device), payload[:DEAD_PREFIX], headers=headers)

    def _burst(self) -> float:
        return self.max_device_rate * RATE_BURST_SECONDS

    def _admit(self, dev, k: int, t: int) -> bool:
        """Take k readings from the device's token bucket (max_device_rate a second, at most
        _burst() held) at JetStream storage time t (ns): False, and nothing taken, when it holds
        fewer. A message larger than a full bucket passes when the bucket is full (the device sent
        nothing for RATE_BURST_SECONDS) and leaves it in debt, so the average rate still holds.
        Storage times make the decision the same wherever the partition is replayed."""
        if not t:
            return True                           # no storage time (not from JetStream): not limited
        burst = self._burst()
        if dev.bucket is None:
            tokens = burst
        else:
            tokens, t0 = dev.bucket
            tokens = min(burst, tokens + max(0, t - t0) * 1e-9 * self.max_device_rate)
        ok = k <= tokens or tokens >= burst
        dev.bucket = (tokens - k if ok else tokens, t)
        return ok

    def _applied(self, dev, seq: int, sseq: int) -> None:
        if dev.last_seq >= 0 and seq > dev.last_seq + 1:
            self.stats["gaps"] += seq - dev.last_seq - 1
        dev.last_seq, dev.stream_seq, dev.dirty = seq, sseq, True

    async def _unmapped(self, msgs: list):
        for m in msgs:
            if m.subject.startswith(f"{wire.IN_SUBJECT}.{PROBE}"):
                continue                          # a gateway's mapping probe on a server without the mapping
            await self._dead(m.subject.split(".", 2)[-1], m.data,
                             f"subject {m.subject[:200]!r} is not {wire.IN_SUBJECT}.<device> with a one-token device "
                             "id (MQTT: edgeseq/in/<device>), or the server lacks the partition mapping "
                             "(`edgeseq serve MODEL --print-config`)")
        if msgs:
            await self.nc.flush()
            await msgs[-1].ack()
            await self.js.purge_stream(wire.READINGS, seq=wire.stream_seq(msgs[-1].reply) + 1)

    @staticmethod
    def _newcomers(part: Partition, msgs: list) -> set:
        """Device ids in `msgs` that `part` does not hold yet (valid ids only)."""
        names = {m.subject.split(".", 3)[3] for m in msgs if m.subject.count(".") >= 3}
        return {n for n in names if n not in part.devices and wire.is_device(n)}

    @staticmethod
    def _in_order(part: Partition, msgs: list) -> list:
        """The messages up to the first one after a missing delivery: a partition's stream numbers
        its readings one after another (nothing is removed but what was applied), so a stream
        sequence beyond the last delivered + 1 means deliveries went missing; the partition is
        then marked to read again from its last applied reading (`_resubscribe`)."""
        if part.resume:
            return []
        for i, m in enumerate(msgs):
            sseq = wire.stream_seq(m.reply)
            if part.delivered and sseq > part.delivered + 1:
                part.resume = True
                part.buf = []
                if part.wake is not None:
                    part.wake.set()
                return msgs[:i]
            part.delivered = max(part.delivered, sseq)
        return msgs

    async def _process(self, batches: list):
        """Apply delivered messages [(partition, epoch, [msgs])]: parse, order per device, step in
        rounds (one reading per device a round), publish; store and acknowledge every
        snapshot_every readings, snapshot_seconds apart at least (or when half of max_pending waits
        unacknowledged)."""
        pending: dict = {}
        touched = []
        stored: list = []             # JetStream's storage times of the messages (seconds since the epoch)
        now = time.monotonic()
        for p, epoch, msgs in batches:
            part = self.parts.get(p)
            if part is None or part.epoch != epoch:
                continue                          # delivered before the partition was dropped: the next owner replays
            touched.append(part)
            seen = part.applied_seq
            msgs = self._in_order(part, msgs)
            for m in msgs:
                device = m.subject.split(".", 3)[3] if m.subject.count(".") >= 3 else ""
                sseq = wire.stream_seq(m.reply)
                if sseq and sseq <= seen:
                    self.stats["redelivered"] += 1    # handled already (its ack was still due): never twice
                    continue
                dev = part.devices.get(device)
                if dev is None:
                    if device.startswith(PROBE):
                        continue                  # a gateway's mapping probe: no device's reading
                    if not wire.is_device(device):
                        await self._dead(device, m.data, f"device id {device[:200]!r}: use 1-{wire.MAX_DEVICE} "
                                         "letters, digits, '-' or '_'")
                        continue
                    await self._join(part, sorted(self._newcomers(part, msgs)))
                    dev = part.devices[device]
                dev.seen = now
                if sseq and sseq <= dev.stream_seq:
                    self.stats["replayed"] += 1   # applied before this partition changed hands
                    continue
                try:
                    seq, x, reset = wire.parse_reading(m.data, self.batcher.features)
                except wire.BadMessage as e:
                    await self._dead(device, m.data, str(e))
                    dev.stream_seq, dev.dirty = sseq, True
                    continue
                except Exception as e:  # noqa: BLE001 - whatever a message holds, it never stops the gateway
                    await self._dead(device, m.data, f"unreadable ({type(e).__name__})")
                    dev.stream_seq, dev.dirty = sseq, True
                    continue
                k = 0 if x is None else len(x)
                t = wire.stored_ns(m.reply)
                if k and self.max_device_rate and not self._admit(dev, k, t):
                    self.stats["rate_limited"] += k
                    last, since = dev.letters
                    if t - last >= RATE_LETTER_NS:      # one letter a second at most: a flood is not a letter flood
                        await self._dead(device, m.data, f"rate limit: this device sent more than "
                                         f"{self.max_device_rate:g} readings a second on average (a full bucket "
                                         f"holds {self._burst():g}); this message's {k} reading(s) were refused"
                                         + (f", and {since} earlier message(s) since the last letter" if since else "")
                                         + " (the gateway's --max-device-rate)", refused=since + 1)
                        dev.letters = (t, 0)
                    else:
                        dev.letters = (last, since + 1)
                    dev.stream_seq, dev.dirty = sseq, True
                    continue
                queue = pending.setdefault(dev, [])
                if x is None:
                    queue.append((seq, None, reset, part, sseq, m.data, False))
                for i, row in enumerate(x if x is not None else ()):
                    queue.append((seq + i, row, reset and i == 0, part, sseq, m.data, len(x) > 1))
            if self.metrics is not None:
                for m in msgs:
                    if PROBE in m.subject:
                        continue                          # a mapping probe: no reading to time
                    with contextlib.suppress(Exception):      # a message without JetStream metadata: not timed
                        stored.append(m.metadata.timestamp.timestamp())
                with contextlib.suppress(Exception):
                    part.backlog = msgs[-1].metadata.num_pending if msgs else part.backlog
            if msgs:
                part.last_msg = msgs[-1]
                part.applied_seq = max(part.applied_seq, wire.stream_seq(msgs[-1].reply))
                if not part.unacked:
                    part.unacked_since = now
                part.unacked += len(msgs)
        outbox: dict = {}            # (device, stream sequence) -> predictions of a message of several readings
        answers: list = []           # (partition, subject, payload, Nats-Msg-Id) of each prediction message
        refused: set = set()         # (device, stream sequence) of messages dead-lettered already
        while pending:
            items, refs = [], []
            for dev in list(pending):
                seq, x, reset, part, sseq, data, several = pending[dev].pop(0)
                if not pending[dev]:
                    del pending[dev]
                if reset and seq != dev.last_seq:  # a new recording (a device rebooted): numbering starts again
                    self.batcher.reset(dev)
                    dev.last_seq = -1
                    dev.boot += 1
                    self.stats["resets"] += 1
                elif seq <= dev.last_seq:
                    self.stats["duplicates"] += 1
                    dev.stream_seq, dev.dirty = sseq, True
                    continue
                if x is None:
                    self._applied(dev, seq, sseq)
                    continue
                items.append((dev, x))
                refs.append((seq, part, sseq, data, several))
            if len(items) >= OFFLOAD_READINGS:
                outs = await asyncio.get_running_loop().run_in_executor(self._stepper, self.batcher.step, items)
            else:
                outs = self.batcher.step(items) if items else []
            events = self.batcher.events if items else []
            for (dev, _), (seq, part, sseq, data, several), out, fired in zip(items, refs, outs, events):
                part.since_snapshot += 1
                if isinstance(out, str):          # refused: the device's state and numbering stay as they were
                    if (dev.name, sseq) in refused:   # one dead letter a message, however many readings it refuses
                        self.stats["dead"] += 1
                    else:
                        refused.add((dev.name, sseq))
                        await self._dead(dev.name, data, f"reading {seq}: {out}")
                    dev.stream_seq, dev.dirty = sseq, True
                    continue
                self._applied(dev, seq, sseq)
                for e in fired:                   # the decision layer's events: a message each, on their own subject
                    self.stats["events"] += 1
                    answers.append((part, wire.event_subject(dev.name),
                                    wire.encode_event(dev.name, seq, dev.position, e, dev.boot),
                                    f"{dev.name}:{dev.boot}:{seq}:{e.kind}"))
                if not self.predictions:
                    continue
                label, value = self.batcher.answer(out)
                self.stats["predictions"] += 1
                if several:                       # one answer per message, as it came
                    outbox.setdefault((dev, sseq), []).append((seq, dev.position, label, value, part))
                    continue
                answers.append((part, f"{wire.OUT_SUBJECT}.{dev.name}",
                                wire.encode_prediction(dev.name, seq, dev.position, label, value, dev.boot,
                                                       self._value_key),
                                f"{dev.name}:{dev.boot}:{seq}"))
            self.stats["readings"] += len(items)
        for (dev, _), rows in outbox.items():
            answers.append((rows[0][4], f"{wire.OUT_SUBJECT}.{dev.name}",
                            wire.encode_predictions(dev.name, [r[:4] for r in rows], dev.boot, self._value_key),
                            f"{dev.name}:{dev.boot}:{rows[0][0]}"))
        await self._publish(answers)
        if stored:
            wall = time.time()
            for t in stored:
                self.metrics.observe(wall - t)
        for part in set(touched):
            due = part.since_snapshot >= self.snapshot_every and now - part.stored_at >= self.snapshot_seconds
            if self.parts.get(part.p) is part and (due or part.unacked >= self.max_pending // 2):
                self._store_soon(part)

    # -- the loop -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None, status_every: float = 0.0):
        """Serve until `stop` is set (or forever); then store every partition's state and hand
        its lease back. `status_every` > 0 echoes a status line (JSON) that often (seconds).
        Raises EdgeseqError when the server cannot be reached or refuses the credentials, or
        when `stop` is set before it connected; UsageError when it cannot serve
        this deployment (no JetStream, another model or partition count, the mapping)."""
        stop = stop or asyncio.Event()
        self.ready = self.ready or asyncio.Event()
        self.wake = asyncio.Event()
        connect, stopped = asyncio.ensure_future(self._connect()), asyncio.ensure_future(stop.wait())
        await asyncio.wait({connect, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not connect.done():                    # stopped (Ctrl-C) while connecting
            connect.cancel()
            with contextlib.suppress(BaseException):
                await connect
            raise EdgeseqError(f"stopped before the gateway had connected to the NATS server at {self.where}: "
                               "nothing was served")
        connect.result()
        self.echo(f"gateway {self.name}: {self.batcher.meta.arch} on the {self.batcher.backend} backend, "
                  f"{self.P} partitions, NATS at {self.where}")
        next_lease = next_status = 0.0
        next_mapping = time.monotonic() + 60
        with contextlib.suppress(Exception):     # heartbeat first, so the first share counts this gateway
            await self._renew()
        renewing, leasing = asyncio.ensure_future(self._renewing()), asyncio.ensure_future(self._leasing())
        try:
            while not stop.is_set():
                if self.refused:
                    raise EdgeseqError(f"the NATS server at {self.where} closed the gateway's connection: it no "
                                       "longer accepts the gateway's credentials (changed or removed while it ran); "
                                       "start it again with the current ones")
                now = time.monotonic()
                if any(part.lost for part in self.parts.values()):
                    await self._drop_lost()
                if self.resume_all or any(part.resume for part in self.parts.values()):
                    self._resubscribe_due()
                for p in [p for p, part in self.parts.items() if part.release and not part.busy]:
                    try:
                        await self._release(p)
                    except Exception as e:  # noqa: BLE001 - handed over at a later round
                        self.parts[p].release = False
                        self._say("release", f"NATS: {type(e).__name__} handing partition {p} over; retrying")
                if now >= next_lease:
                    try:
                        await self._sweep()
                    except Exception as e:  # noqa: BLE001 - a slow or restarting server: try again soon
                        self._say("sweep-trouble", f"NATS: {type(e).__name__} storing quiet partitions; retrying")
                    next_lease = now + self.lease_seconds / 4
                if now >= next_mapping and 0 in self.parts:
                    with contextlib.suppress(Exception):
                        await self._check_mapping()
                    next_mapping = now + 60
                if status_every and now >= next_status:
                    self.echo(json.dumps(self.status()))
                    next_status = now + status_every
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout=0.05)
                except asyncio.TimeoutError:
                    continue
                self.wake.clear()
                batches, room, size = [], ROUND_MESSAGES, 0   # bounded, so leases are renewed between rounds
                for part in self.parts.values():
                    if part.buf and not (part.busy or part.lapsed) and room > 0 and size < ROUND_BYTES:
                        n = 0
                        while n < min(room, len(part.buf)) and size < ROUND_BYTES:   # several readings a message
                            size += len(part.buf[n].data)
                            n += 1
                        take, part.buf = part.buf[:n], part.buf[n:]
                        batches.append((part.p, part.epoch, take))
                        room -= len(take)
                        if part.buf:
                            self.wake.set()
                await self._process(batches)
                if self.unmapped is not None and self.unmapped.buf:
                    msgs, self.unmapped.buf = self.unmapped.buf, []
                    await self._unmapped(msgs)
        finally:
            for task in (renewing, leasing):
                # cancelled again until it ends: asyncio.wait_for in Python 3.11 can swallow a
                # cancellation that arrives as its call completes, and the task would loop on
                while not task.done():
                    task.cancel()
                    await asyncio.wait({task}, timeout=1.0)
                with contextlib.suppress(BaseException):
                    task.result()
            for task in list(self._tasks):           # earlier consumers' deletes: left to the next take
                task.cancel()
            if self._tasks:
                await asyncio.wait(set(self._tasks), timeout=1.0)
            for p in list(self.parts):
                with contextlib.suppress(Exception):
                    await self._release(p)
            with contextlib.suppress(Exception):
                await self.leases.delete(f"gw.{self.name}")
            self._draining = True
            with contextlib.suppress(Exception):
                await self.nc.drain()
            self._stepper.shutdown(wait=False)

    def status(self) -> dict:
        devices = [d for part in self.parts.values() for d in part.devices.values()]
        return {"gateway": self.name, "partitions": sorted(self.parts), "devices": len(devices),
                "state_bytes": sum(d.nbytes() for d in devices), **dict(self.stats)}


def _tls_only_client():
    """A nats-py client class that sends its CONNECT (with any credentials) only over a TLS
    connection, on the first connection and every reconnect: nats-py starts TLS only when the
    server's greeting asks for it."""
    from nats.aio.client import Client
    from nats.errors import Error

    class TLSOnly(Client):
        def _connect_command(self) -> bytes:
            writer = getattr(self._transport, "_io_writer", None)
            if writer is None or writer.get_extra_info("ssl_object") is None:
                raise Error("the server did not start TLS: credentials not sent")
            return super()._connect_command()
    return TLSOnly


def _without_tls(addresses: list, timeout: float = 5.0) -> str | None:
    """The first (host, port) among `addresses` whose NATS INFO line does not require TLS, as
    host:port; None when every one requires it (or does not answer: the connection says why)."""
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout) as sock:
                sock.settimeout(timeout)
                line = b""
                while not line.endswith(b"\n") and len(line) < 65536:
                    chunk = sock.recv(4096)
                    if not chunk:
                        break
                    line += chunk
        except OSError:
            continue
        if line.startswith(b"INFO "):
            try:
                info = json.loads(line[5:].split(b"\r\n", 1)[0])
            except ValueError:
                continue
            if not info.get("tls_required"):
                return f"{host}:{port}"
    return None


def _credentials(url: str) -> tuple:
    """(the URL without credentials, nats.connect's user/password or token, percent-decoded):
    nats-py would send `%2F` in a URL's password as it is. Several URLs, comma-separated (the
    nodes of a cluster): a list of them, and the first credentials any gives."""
    from urllib.parse import unquote, urlsplit, urlunsplit
    if "," in url:
        parts = [_credentials(u.strip()) for u in url.split(",")]
        return [p[0] for p in parts], next((p[1] for p in parts if p[1]), {})
    u = urlsplit(url)
    if "@" not in u.netloc:
        return url, {}
    userinfo, host = u.netloc.rsplit("@", 1)
    bare = urlunsplit((u.scheme, host, u.path, u.query, u.fragment))
    if ":" not in userinfo:
        return bare, {"token": unquote(userinfo)}
    user, password = userinfo.split(":", 1)
    return bare, {"user": unquote(user), "password": unquote(password)}


def _address(url: str) -> tuple[str, int]:
    """(host, port) of a nats:// (or tls://) URL; UsageError for anything else."""
    from urllib.parse import urlsplit
    try:
        u = urlsplit(url)
        port = u.port or 4222
    except ValueError:
        u, port = None, 0
    if u is None or u.scheme not in ("nats", "tls") or not u.hostname:
        from edgeseq.errors import redact_url
        raise UsageError(f"--nats {redact_url(url)!r}: give the server as nats://[user:password@]host:port (or "
                         "tls://...), with any / ? # @ or : in the password percent-encoded (/ as %2F)")
    return u.hostname, port
