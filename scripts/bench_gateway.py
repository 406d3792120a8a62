"""Load benchmark for `edgeseq serve`: simulated devices at a fixed rate through a local
nats-server into gateways, measured end to end. Not a test: it prints figures (and writes JSON).

    .venv/bin/python scripts/bench_gateway.py                                # 1,000 devices at 50 Hz
    .venv/bin/python scripts/bench_gateway.py --devices 1000 --rates 10 25 50 --seconds 15 --gateways 1
    .venv/bin/python scripts/bench_gateway.py --failover --gateways 2        # then SIGKILL one of two
    .venv/bin/python scripts/bench_gateway.py --cluster --failover --gateways 2   # and a broker node with it

Devices publish readings (core NATS, JSON) in ticks of 1/rate seconds, every device once a tick;
a sample of devices' predictions is timed from the tick's publish to the prediction's arrival
(p50/p99). Readings/s end to end is the rate predictions enter EDGESEQ_OUT over the steady
window (from the stream's own count). CPU is each process's user+system time over that window
(/proc), as a share of one core; memory per device is the gateway's RSS growth over the run
divided by the devices (and the state bytes it holds, as the gateway reports). With --failover one
of the gateways is SIGKILLed mid-run; the figure is the longest gap in the sampled devices'
predictions after the kill (how long their partitions went unserved). With --cluster the broker
is three nats-server nodes (R3 streams and buckets) and the failover kills node-0 with the
gateway; the devices' connections move to the survivors. Each phase also counts the sampled
devices' prediction messages EDGESEQ_OUT stored against the messages they sent (fewer: lost;
more: applied twice). With --acked the gateways acknowledge readings (`--ack-readings`) and each
device publishes one message at a time with JetStream's acknowledgement, sending a message
again when no acknowledgement came in ACK_WAIT seconds and holding its later readings meanwhile,
as a device that must lose nothing does (one stored twice is skipped by the gateway: a
duplicate).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from edgeseq.gateway import wire  # noqa: E402
from edgeseq.gateway.broker import LocalBroker, LocalCluster  # noqa: E402
from edgeseq.runtime.session import StreamSession  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def start_gateway(model, url, name, partitions, extra=()):
    proc = subprocess.Popen([sys.executable, "-m", "edgeseq", "serve", str(model), "--nats", url, "--partitions",
                             str(partitions), "--name", name, "--status-every", "1",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    proc.status = {}
    proc.lines, proc.times = [], []
    return proc


async def follow(proc):
    """Keep the gateway's last status line (JSON) in proc.status."""
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, proc.stdout.readline)
        if not line:
            return
        proc.lines.append(line.rstrip())
        proc.times.append(time.monotonic())
        if line.startswith("{"):
            proc.status = json.loads(line)


async def wait_owned(gateways, partitions, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        owned = sum(len(g.status.get("partitions", [])) for g in gateways)
        if owned == partitions and all(g.status.get("partitions") for g in gateways):
            return
        await asyncio.sleep(0.2)
    raise SystemExit("gateways did not take the partitions: " + " | ".join(g.lines[-1] for g in gateways if g.lines))


ACK_WAIT = 2.0          # --acked: seconds a device waits for an acknowledgement before it sends again


class AckedDevices:
    """Devices that publish one message at a time, each acknowledged by JetStream, and send a
    message again when its acknowledgement does not come in ACK_WAIT s or an
    error does (no leader, no responders); later readings wait in order behind it."""

    def __init__(self, js, names):
        from collections import deque
        self.js, self.queue, self.inflight = js, {d: deque() for d in names}, {}
        self.resent = 0

    def add(self, device, subject, payload):
        self.queue[device].append((subject, payload))

    async def pump(self):
        now = time.monotonic()
        for d, q in self.queue.items():
            held = self.inflight.get(d)
            if held is not None:
                fut, msg, sent = held
                if fut.done() and not fut.cancelled() and fut.exception() is None:
                    del self.inflight[d]
                elif (fut.done() and now - sent > 0.2) or now - sent > ACK_WAIT:
                    fut.cancel()
                    self.resent += 1
                    q.appendleft(msg)
                    del self.inflight[d]
                else:
                    continue
            if q:
                subject, payload = msg = q.popleft()
                fut = await self.js.publish_async(subject, payload)
                self.inflight[d] = (fut, msg, now)

    def idle(self) -> bool:
        return not self.inflight and not any(self.queue.values())


async def phase(url, devices, features, rate, seconds, sample, brokers, gateways, kill_at=None, per_message=1,
                kill=None, acked=False):
    import nats
    nc = await nats.connect(servers=url.split(","), pending_size=64 * 1024 * 1024, max_reconnect_attempts=-1)
    js = nc.jetstream(timeout=60)                          # an overloaded broker answers slowly
    names = [f"dev-{i:05d}" for i in range(devices)]
    rng = np.random.default_rng(0)
    X = (rng.normal(size=(64, features)) * 0.5).astype(np.float32)
    K = per_message                                         # readings a message: a device sends rate / K a second
    payloads = [[wire.encode_reading(0, X[(i + t) % 64] if K == 1 else X[[(i + t + j) % 64 for j in range(K)]])
                 [len(b'{"seq":0'):] for t in range(64)] for i in range(min(devices, 64))]
    sampled = names[:: max(1, devices // sample)][:sample]
    sent, arrived = {}, {}

    async def on_pred(msg):
        now = time.monotonic()
        for p in wire.predictions_of(msg.data):
            arrived.setdefault((p["device"], p["seq"]), now)
    for d in sampled:
        await nc.subscribe(f"{wire.OUT_SUBJECT}.{d}", cb=on_pred)
    start_seq = int(time.time() * 1000) * 1000          # seq numbers rise across runs on one broker
    out0 = (await js.stream_info(wire.PREDICTIONS)).state.last_seq
    stored0 = await _stored(js, sampled)
    procs = {**brokers, **{g.name: g.pid for g in gateways}, "devices": os.getpid()}
    counted0 = _counted(gateways)
    cpu0 = {k: cpu_seconds(p) for k, p in procs.items()}
    t0 = time.monotonic()
    ticks = int(seconds * rate / K)
    killed = None
    late = 0
    sender = AckedDevices(nc.jetstream(publish_async_max_pending=4 * devices), names) if acked else None
    for t in range(ticks):
        due = t0 + t * K / rate
        now = time.monotonic()
        if now < due:
            await asyncio.sleep(due - now)
        elif now - due > K / rate:
            late += 1
        seq = start_seq + t * K
        head = b'{"seq":' + str(seq).encode()
        for j in range(K):
            sent[seq + j] = time.monotonic()
        for i, d in enumerate(names):
            if sender is not None:
                sender.add(d, f"{wire.IN_SUBJECT}.{d}", head + payloads[i % len(payloads)][t % 64])
            else:
                await nc.publish(f"{wire.IN_SUBJECT}.{d}", head + payloads[i % len(payloads)][t % 64])
        if sender is not None:
            await sender.pump()
        if kill_at is not None and killed is None and t * K >= kill_at * rate:
            gateways[0].proc.send_signal(signal.SIGKILL)
            if kill is not None:
                kill()                                      # a broker node too
            killed = time.monotonic()
    while sender is not None and not sender.idle() and time.monotonic() - t0 < seconds + 120:
        await asyncio.sleep(0.05)                           # the held and unacknowledged readings go out
        await sender.pump()
    await nc.flush(timeout=60)
    elapsed = time.monotonic() - t0
    cpu1 = {k: cpu_seconds(p) for k, p in procs.items() if killed is None or k not in (gateways[0].name, "node-0")}
    out1 = (await js.stream_info(wire.PREDICTIONS)).state.last_seq
    drained, last = time.monotonic(), out1                           # let the backlog drain before the next phase
    while time.monotonic() - drained < (3 if killed is None else 30) and time.monotonic() - t0 < elapsed + 180:
        await asyncio.sleep(0.5)
        now = (await js.stream_info(wire.PREDICTIONS)).state.last_seq
        if now != last:
            drained, last = time.monotonic(), now
    stored = await _stored(js, sampled)
    await nc.close()
    lat = np.array([arrived[k] - sent[k[1]] for k in arrived if k[1] in sent]) * 1e3
    expected = len(sampled) * ticks * K
    result = {"devices": devices, "rate_hz": rate, "readings_per_message": K, "offered_per_s": round(devices * rate),
              "seconds": round(elapsed, 2),
              "predictions_per_s": round((out1 - out0) * K / elapsed),   # a message answers each of its K readings
              "prediction_messages_per_s": round((out1 - out0) / elapsed), "backlog_drained_s": round(drained - t0 - elapsed, 1),
              "sampled_devices": len(sampled),
              "sampled_received": len(lat), "sampled_expected": expected, "late_ticks": late,
              "p50_ms": round(float(np.percentile(lat, 50)), 1) if len(lat) else None,
              "p99_ms": round(float(np.percentile(lat, 99)), 1) if len(lat) else None,
              "cpu_share": {k: round((cpu1[k] - cpu0[k]) / elapsed, 2) for k in cpu1},
              **{k: v - counted0[k] for k, v in _counted(gateways).items()},
              # EDGESEQ_OUT's prediction messages of the sampled devices stored in this phase: more than one a
              # message sent would be a reading applied twice (a duplicate id would have been dropped)
              "sampled_stored": sum(stored.get(d, 0) - stored0.get(d, 0) for d in sampled),
              "sampled_messages": len(sampled) * ticks}
    if sender is not None:
        result["acked"] = {"ack_wait_s": ACK_WAIT, "resent": sender.resent, "unacknowledged": len(sender.inflight) +
                           sum(map(len, sender.queue.values()))}
    if killed is not None:
        gaps = []
        ended = time.monotonic()
        for d in sampled:
            times = sorted(v for (dev, _), v in arrived.items() if dev == d)
            after = [b - a for a, b in zip(times, times[1:]) if b > killed]
            if (d, start_seq + ticks * K - 1) not in arrived:   # its last never came: the gap runs to the end
                after.append(ended - max([killed, *times]))
            gaps.append(max(after) if after else 0.0)
        result["failover_s"] = round(max(gaps), 2)
        missing = sorted(sent[q] - killed for d in sampled for q in sent if (d, q) not in arrived)
        # when the readings that never got a prediction were published, seconds from the kill
        result["unpredicted_sent_s"] = [round(missing[0], 2), round(missing[-1], 2)] if missing else None
        result["killed_at"] = killed
        result["devices_interrupted"] = sum(g > 1.0 for g in gaps)
    return result


async def _stored(js, devices) -> dict:
    """{device: prediction messages EDGESEQ_OUT holds for it}."""
    info = await js.stream_info(wire.PREDICTIONS, subjects_filter=f"{wire.OUT_SUBJECT}.*")
    have = {k.rsplit(".", 1)[1]: v for k, v in (info.state.subjects or {}).items()}
    return {d: have.get(d, 0) for d in devices}


def _counted(gateways) -> dict:
    """Partitions lost (leases taken over), leases that went unrenewed and were renewed again
    (state kept), readings refused by the rate limit and readings skipped as duplicates (a
    sequence number already applied: one sent again after its acknowledgement was lost), summed
    over the gateways' last status lines."""
    return {k: sum(g.status.get(k, 0) for g in gateways)
            for k in ("partitions_lost", "rate_limited", "leases_lapsed", "leases_kept", "duplicates")}


class Gw:
    def __init__(self, proc, name):
        self.proc, self.name, self.pid = proc, name, proc.pid

    @property
    def status(self):
        return self.proc.status

    @property
    def lines(self):
        return self.proc.lines


async def main_async(args):
    model = Path(args.model)
    if not model.exists():
        raise SystemExit(f"{model} not found: run `make demo` first (it exports models/gru-int8.onnx), or pass --model")
    features = StreamSession(str(model)).n_features
    results = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        broker = (LocalCluster(Path(tmp) / "nats", nodes=3, partitions=args.partitions) if args.cluster
                  else LocalBroker(Path(tmp) / "nats", partitions=args.partitions))
        await asyncio.get_running_loop().run_in_executor(None, broker.start)    # a cluster waits on its own loop
        stack.callback(broker.stop)
        extra = ["--snapshot-every", str(args.snapshot_every)] if args.snapshot_every else []
        extra += ["--ack-readings"] if args.acked else []
        if args.cluster:
            extra += ["--replicas", "3"]
            brokers = {f"node-{i}": n.proc.pid for i, n in enumerate(broker.nodes)}
        else:
            brokers = {"broker": broker.proc.pid}
        gateways = [Gw(start_gateway(model, broker.url, f"gw-{i}", args.partitions, extra), f"gw-{i}")
                    for i in range(args.gateways)]
        followers = [asyncio.ensure_future(follow(g.proc)) for g in gateways]
        t_start, failover_at = time.monotonic(), None
        try:
            await wait_owned(gateways, args.partitions)
            rss0 = {g.name: rss_kb(g.pid) for g in gateways}
            for rate in args.rates:
                r = await phase(broker.url, args.devices, features, rate, args.seconds, args.sample,
                                brokers, gateways, per_message=args.per_message, acked=args.acked)
                results.append(r)
                print(json.dumps(r), flush=True)
            mem = {g.name: {"rss_growth_kb": rss_kb(g.pid) - rss0[g.name], "devices": g.status.get("devices"),
                            "state_bytes": g.status.get("state_bytes")} for g in gateways}
            per_device = sum(m["rss_growth_kb"] for m in mem.values()) * 1024 / args.devices
            memory = {"per_gateway": mem, "rss_bytes_per_device": round(per_device),
                      "state_bytes_per_device": round(sum(m["state_bytes"] or 0 for m in mem.values()) / args.devices)}
            print(json.dumps({"memory": memory}), flush=True)
            failover = None
            if args.failover:
                if len(gateways) < 2:
                    raise SystemExit("--failover needs --gateways 2 or more")
                failover = await phase(broker.url, args.devices, features, args.failover_rate, args.seconds,
                                       args.sample, brokers, gateways, kill_at=args.seconds / 3,
                                       kill=broker.nodes[0].kill if args.cluster else None, acked=args.acked)
                failover["killed"] = "a gateway and broker node-0" if args.cluster else "a gateway"
                failover_at = failover.pop("killed_at")
                print(json.dumps({"failover": failover}), flush=True)
        finally:
            for g in gateways:
                if g.proc.poll() is None:
                    g.proc.send_signal(signal.SIGTERM)
                    try:
                        g.proc.wait(30)
                    except subprocess.TimeoutExpired:
                        g.proc.kill()
            for f in followers:
                f.cancel()
            if args.log:                                    # each gateway's lines, seconds from the kill (or start)
                Path(args.log).mkdir(parents=True, exist_ok=True)
                zero = failover_at if failover_at is not None else t_start
                for g in gateways:
                    Path(args.log, f"{g.name}.log").write_text("".join(
                        f"{t - zero:+9.2f} {line}\n" for t, line in zip(g.proc.times, g.proc.lines)))
    report = {"command": "python scripts/bench_gateway.py " + " ".join(sys.argv[1:]),
              "date": time.strftime("%Y-%m-%d"), "cpu": _cpu(), "cores": os.cpu_count(), "model": model.name,
              "gateways": args.gateways, "partitions": args.partitions, "phases": results, "memory": memory,
              "brokers": "a three-node JetStream cluster, R3 streams and buckets" if args.cluster else "one nats-server",
              "failover": failover}
    return report


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "gru-int8.onnx"))
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--rates", type=float, nargs="+", default=[50.0], help="readings per second per device")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--per-message", type=int, default=1, help="readings each message carries (the time to fill "
                    "one is not counted in the latency: it is timed from the publish)")
    ap.add_argument("--gateways", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--sample", type=int, default=50, help="devices whose predictions are timed")
    ap.add_argument("--snapshot-every", type=int, help="the gateways' --snapshot-every (default: theirs)")
    ap.add_argument("--cluster", action="store_true", help="a three-node JetStream cluster (R3); with --failover "
                    "broker node-0 is SIGKILLed with the gateway")
    ap.add_argument("--failover", action="store_true")
    ap.add_argument("--acked", action="store_true", help="devices publish with JetStream's acknowledgement and send "
                    "again what was not acknowledged; the gateways acknowledge readings")
    ap.add_argument("--failover-rate", type=float, default=10.0)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--log", help="write each gateway's output to DIR/<name>.log, each line timed in seconds from "
                                  "the failover's kill (or the start)")
    ap.add_argument("--repeat", type=int, default=1, help="run it all this many times, each on a fresh broker and "
                    "gateways (the failover's gap differs from run to run with the cluster's elections); the JSON is "
                    "the last run's, with every run's failover figures under failover_runs")
    args = ap.parse_args()
    if args.repeat < 1:
        raise SystemExit("--repeat takes 1 or more")
    runs = []
    for i in range(args.repeat):
        report = asyncio.run(main_async(args))
        if report["failover"]:
            f = report["failover"]
            runs.append({k: f.get(k) for k in ("failover_s", "devices_interrupted", "p99_ms", "sampled_stored",
                                               "sampled_messages", "duplicates", "partitions_lost")})
            print(json.dumps({"run": i + 1, **runs[-1]}), flush=True)
    if args.repeat > 1:
        report["failover_runs"] = runs
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
