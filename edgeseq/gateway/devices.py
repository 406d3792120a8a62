"""Devices as the gateway sees them: publish readings, read predictions back (tests, the load
benchmark, and a template for a device's own publisher)."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np

from edgeseq.gateway import wire
from edgeseq.gateway.service import _nats


async def replay(url: str, readings: dict, rate_hz: float = 0.0, start: int = 0, stop: int | None = None,
                 seq_offset: int = 0, passwords: dict | None = None, per_message: int = 1,
                 acked: bool = False, patience: float = 120.0) -> dict:
    """Publish readings[device] (float32 [T, features]) rows start..stop, every device's reading
    t in turn before any t+1, as sequence numbers t + seq_offset; rate_hz > 0 paces each
    device at that many readings a second. Without `acked` this publishes and flushes (a full
    stream drops what does not fit, or a stream electing its leader, unseen). With `acked` (a
    gateway that acknowledges readings, `Gateway(acknowledge_readings=True)`) each message waits
    for JetStream's acknowledgement and is sent again until it is stored, every device's
    message t before any t+1, so none is lost or stored out of order; one stored twice (its
    acknowledgement lost) is applied once: the gateway skips a sequence number it has applied.
    No `Nats-Msg-Id` goes with a reading: a partition's stream is shared by its devices, and
    one device could send another's ids first and have its readings dropped as duplicates.
    `patience` seconds without an acknowledgement raise EdgeseqError (a full stream, a
    cluster without a majority).
    `passwords` {device: password} (`edgeseq devices add`): each device on its own connection
    with its own credentials, as devices are; else one connection at `url` (credentials in it,
    if any) publishes for all. `per_message` > 1 sends that many readings a message (the last
    message of a device fewer), each message's readings numbered from its `seq`. Returns
    {"published": readings, "seconds": s, "sent_at": {(device, seq): monotonic seconds}}."""
    nats, _, _ = _nats()
    if passwords:
        from edgeseq.gateway.fleet import with_credentials
        # acked devices reconnect, as a device that must lose nothing does (a server restarted
        # for a changed fleet, a cluster node gone); their connection trouble shows as readings
        # not acknowledged, not as nats-py's log
        own = {d: await nats.connect(with_credentials(url, d, passwords[d]), allow_reconnect=acked,
                                     error_cb=_quiet if acked else None)
               for d in readings}
    nc = await nats.connect(servers=_servers(url)) if not passwords else next(iter(own.values()))
    sent = {}
    n = 0
    batch: list = []
    t0 = time.monotonic()
    stop = min(len(r) for r in readings.values()) if stop is None else stop
    try:
        for t in range(start, stop, per_message):
            if rate_hz:
                due = t0 + (t - start) / rate_hz
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            k = min(per_message, stop - t)
            for device, r in readings.items():
                payload = wire.encode_reading(t + seq_offset, r[t] if per_message == 1 else r[t:t + k])
                subject = wire.reading_subject(device)
                now = time.monotonic()
                for i in range(k):
                    sent[(device, t + i + seq_offset)] = now
                if not acked:
                    await (own[device] if passwords else nc).publish(subject, payload)
                else:
                    batch.append((own[device] if passwords else nc, subject, payload))
                n += k
            if batch:
                await _stored(batch, patience)
                batch = []
        for c in (own.values() if passwords else [nc]):
            await c.flush()
    finally:
        for c in (own.values() if passwords else [nc]):
            await c.close()
    return {"published": n, "seconds": time.monotonic() - t0, "sent_at": sent}


async def _quiet(e) -> None:
    """nats-py's error callback that logs nothing."""


async def _stored(batch: list, patience: float) -> None:
    """Publish [(connection, subject, payload)] until JetStream has acknowledged each (sent
    together; those unanswered sent again, 0.2 s apart)."""
    import nats.errors as nats_errors

    from edgeseq.errors import EdgeseqError
    deadline = time.monotonic() + patience
    while batch:
        got = await asyncio.gather(*(c.jetstream(timeout=2.0).publish(s, p) for c, s, p in batch),
                                   return_exceptions=True)
        failed = [(b, r) for b, r in zip(batch, got) if isinstance(r, BaseException)]
        for _, r in failed:
            if not isinstance(r, (asyncio.TimeoutError, OSError, nats_errors.Error)):
                raise r
        batch = [b for b, _ in failed]
        if batch and time.monotonic() > deadline:
            why = failed[0][1]
            hint = ("the connection to the server closed and did not come back: is the server running, and the "
                    "device's password still valid?" if isinstance(why, nats_errors.ConnectionClosedError)
                    or (isinstance(why, OSError) and not isinstance(why, TimeoutError))
                    else "is the stream full, the cluster without a majority, or the gateway not acknowledging "
                    "readings (edgeseq serve --ack-readings)?")
            raise EdgeseqError(f"{len(batch)} reading message(s) not acknowledged in {patience:g} s "
                               f"({type(why).__name__}); {hint}")
        if batch:
            await asyncio.sleep(0.2)


async def _out_messages(url: str, subject: str, deadline: float):
    """The EDGESEQ_OUT messages on `subject` (a wildcard), from the stream's start, until the
    monotonic `deadline` (or the caller stops asking)."""
    nats, api, _ = _nats()
    nc = await nats.connect(servers=_servers(url))
    js = nc.jetstream(timeout=10)
    try:
        while True:                     # a cluster electing a new stream leader answers after a while
            try:
                sub = await js.subscribe(subject, stream=wire.PREDICTIONS, ordered_consumer=True,
                                         deliver_policy=api.DeliverPolicy.ALL)
                break
            except Exception:  # noqa: BLE001 - nats-py's timeout or 503: try again until the deadline
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        while time.monotonic() < deadline:
            try:
                yield await sub.next_msg(timeout=min(1.0, max(0.01, deadline - time.monotonic())))
            except Exception:  # noqa: BLE001 - nats-py's timeout: look at the clock again
                continue
    finally:
        await nc.close()


async def predictions(url: str, expect: int, timeout: float = 30.0, received: dict | None = None) -> dict:
    """Read predictions from the EDGESEQ_OUT stream (all of them, from its start) until `expect`
    distinct (device, seq) have arrived or `timeout` seconds pass. Returns {device: {seq:
    prediction dict}}; `received` (if given) gets the monotonic arrival time per (device, seq)."""
    out: dict = {}
    got = 0
    if expect <= 0:
        return out
    messages = _out_messages(url, f"{wire.OUT_SUBJECT}.>", time.monotonic() + timeout)
    async for msg in messages:
        if msg.subject.endswith(".events"):          # the decision layer's events: not predictions
            continue
        for p in wire.predictions_of(msg.data):
            seqs = out.setdefault(p["device"], {})
            if p["seq"] not in seqs:
                got += 1
                if received is not None:
                    received[(p["device"], p["seq"])] = time.monotonic()
            seqs[p["seq"]] = p
        if got >= expect:
            break
    await messages.aclose()
    return out


async def events(url: str, expect: int, timeout: float = 30.0) -> dict:
    """Read the decision layer's events from the EDGESEQ_OUT stream (from its start) until
    `expect` have arrived or `timeout` seconds pass: {device: [event dict, ...]} in stream
    order (`wire.encode_event`'s fields)."""
    out: dict = {}
    got = 0
    if expect <= 0:
        return out
    messages = _out_messages(url, wire.event_subject("*"), time.monotonic() + timeout)
    async for msg in messages:
        e = json.loads(msg.data)
        out.setdefault(e["device"], []).append(e)
        got += 1
        if got >= expect:
            break
    await messages.aclose()
    return out


def _servers(url: str) -> list:
    """A URL, or the nodes of a cluster comma-separated, as nats.connect's server list."""
    return [u.strip() for u in url.split(",")]


def reference(model: str, readings: dict, backend: str | None = None) -> dict:
    """What one uninterrupted session per device predicts: {device: [(label, prob) per reading]}."""
    from edgeseq.runtime.session import StreamSession
    out = {}
    for device, r in readings.items():
        s = StreamSession(model, backend=backend)
        rows = []
        for x in r:
            p = s.push(np.asarray(x, np.float32))[0]
            k = int(p.argmax())
            rows.append((s.labels[k], round(float(p[k]), 6)))
        out[device] = rows
    return out
