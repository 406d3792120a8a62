"""What a gateway's purge of a partition's stored readings costs nats-server: a purge of one
stream shared by all partitions, filtered by the partition's subjects (`edgeseq.part.<p>.*`),
against a purge of the partition's own stream up to a sequence (no filter). Not a test: it
prints figures, measured side by side in one run on a local nats-server.

    .venv/bin/python scripts/bench_purge.py --devices 1000 --partitions 8
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from edgeseq.gateway.broker import LocalBroker  # noqa: E402


async def run(url: str, devices: int, partitions: int, per_device: int, rounds: int) -> None:
    import nats
    from nats.js import api
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=60)
    await js.add_stream(api.StreamConfig(name="SHARED", subjects=["shared.*.*"]))
    for p in range(partitions):
        await js.add_stream(api.StreamConfig(name=f"OWN_{p}", subjects=[f"own.{p}.*"]))
    payload = b'{"seq":0,"x":[0.1,0.2,0.3,0.4,0.5,0.6]}'
    for r in range(rounds):
        for i in range(devices * per_device):
            d = i % devices
            p = d % partitions
            await nc.publish(f"shared.{p}.d{d}", payload)
            await nc.publish(f"own.{p}.d{d}", payload)
        await nc.flush()
        await asyncio.sleep(0.5)
        last = (await js.stream_info("SHARED")).state.last_seq
        t = time.perf_counter()
        for p in range(partitions):
            await js.purge_stream("SHARED", subject=f"shared.{p}.*", seq=last + 1)
        filtered = (time.perf_counter() - t) / partitions
        lasts = [(await js.stream_info(f"OWN_{p}")).state.last_seq for p in range(partitions)]
        t = time.perf_counter()
        for p in range(partitions):
            await js.purge_stream(f"OWN_{p}", seq=lasts[p] + 1)
        own = (time.perf_counter() - t) / partitions
        print(f"round {r + 1}: {devices:,} devices, {devices * per_device:,} readings a stream kind: filtered purge "
              f"of the shared stream {filtered * 1e3:.2f} ms a partition; the partition's own stream "
              f"{own * 1e3:.2f} ms ({filtered / own:.0f}x)", flush=True)
    await nc.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--per-device", type=int, default=4, help="readings of each device stored before a purge")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, LocalBroker(Path(tmp) / "nats", partitions=args.partitions) as b:
        asyncio.run(run(b.url, args.devices, args.partitions, args.per_device, args.rounds))


if __name__ == "__main__":
    main()
