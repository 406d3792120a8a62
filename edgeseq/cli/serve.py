"""`edgeseq serve`: a gateway for many devices over NATS JetStream (devices may speak MQTT)."""

from __future__ import annotations

import asyncio
import signal

import click

from edgeseq.cli._common import MAX_HISTORY, History, _backend_option, _errors
from edgeseq.errors import printable, safe_text

RELOAD_SECONDS = 2.0             # how often a running server looks for fleet changes


@click.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--nats", "url", help="NATS server with JetStream (nats://host:4222). Default: start nats-server "
              "here (JetStream under --store, MQTT on --mqtt-port).")
@click.option("--partitions", type=click.IntRange(1, 1024), default=8, show_default=True,
              help="Partitions devices are hashed into (the server's mapping must say the same: --print-config).")
@click.option("--name", help="This gateway's id (letters, digits, - and _). Default: host-pid.")
@click.option("--snapshot-every", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Readings of a partition between stored device states.")
@click.option("--snapshot-seconds", type=click.FloatRange(0, 30), default=1.0, show_default=True,
              help="Seconds between a partition's stored states at least (each store is a put per device that "
              "changed); a gateway taking a partition over replays about this much and --snapshot-every readings.")
@click.option("--lease-seconds", type=click.FloatRange(1, 86400), default=5.0, show_default=True,
              help="A dead gateway's partitions are taken over this long after its last renewal.")
@click.option("--max-batch", type=click.IntRange(1, 1024), default=1024, show_default=True,
              help="Devices per multi-stream push at most.")
@click.option("--max-device-backlog", type=click.IntRange(1, 10_000_000), default=10_000, show_default=True,
              help="Readings of one device waiting in the stream at most; past it the server refuses its new ones.")
@click.option("--max-device-rate", type=click.FloatRange(0, 1e6), default=1000.0, show_default=True,
              help="Readings a second one device may send on average (10 seconds' worth at once, or one message "
              "of any size when it has sent nothing for that long); a message beyond it is dead-lettered with the "
              "reason (one letter a second at most). 0: no limit.")
@click.option("--replicas", type=click.IntRange(1, 5), default=1, show_default=True,
              help="Copies of every stream and bucket: 3 on a three-node JetStream cluster (--nats with the nodes' "
              "URLs, comma-separated), so one node may die.")
@click.option("--max-history", type=History(), help=f"Transformer: bound on cached readings (1 to {MAX_HISTORY:,}).")
@click.option("--store", default="runs/nats", show_default=True, type=click.Path(file_okay=False),
              help="Without --nats: where the local nats-server keeps JetStream's files.")
@click.option("--port", type=click.IntRange(1, 65535), default=4222, show_default=True,
              help="Without --nats: the local server's NATS port.")
@click.option("--mqtt-port", type=click.IntRange(0, 65535), default=1883, show_default=True,
              help="Without --nats: the local server's MQTT port (0: no MQTT).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Without --nats: the address to listen on "
              "(0.0.0.0: every interface; the server admits the --fleet's devices only).")
@click.option("--fleet", default="runs/fleet", show_default=True, type=click.Path(file_okay=False),
              help="Folder of the devices' credentials (`edgeseq devices add NAME`) and the gateway's own.")
@click.option("--tls-cert", type=click.Path(dir_okay=False), help="Without --nats: the server's certificate (PEM); "
              "NATS and MQTT clients must then use TLS (tls://, mqtts://). With --tls-key; see docs/gateway.md.")
@click.option("--tls-key", type=click.Path(dir_okay=False), help="The private key of --tls-cert (PEM).")
@click.option("--tls-ca", type=click.Path(dir_okay=False), help="The CA (or self-signed certificate) the gateway "
              "checks a tls:// server's certificate against. Default: the system's CAs; --tls-cert for the "
              "server serve starts.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Serve Prometheus metrics on http://--metrics-host:PORT/metrics (0: none), behind HTTP basic "
              "authentication: user prometheus, the password in --fleet's metrics.json.")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="The address --metrics-port listens on.")
@click.option("--status-every", type=click.FloatRange(0), default=10.0, show_default=True,
              help="Seconds between status lines (JSON) on stderr; 0: none.")
@click.option("--duration", type=click.FloatRange(0, min_open=True), help="Stop after this many seconds.")
@click.option("--print-config", is_flag=True, help="Print a nats-server configuration (JetStream, MQTT on 1883, the "
              "partition mapping for --partitions) and exit.")
@click.option("--predictions/--events-only", default=True, show_default=True,
              help="Publish a prediction per reading, or only the events of the model's decision layer "
                   "(`edgeseq calibrate`; most of the broker's load is the per-reading predictions).")
@click.option("--ack-readings/--no-ack-readings", default=None,
              help="The readings streams acknowledge what they store, so a device publishing with a reply subject "
                   "sends again what a cluster electing a leader dropped. Default: on for the server serve starts "
                   "(every device in an account of its own), off with --nats: turn it on only for a server "
                   "configured by --print-config.")
@click.option("--replace-model", is_flag=True, help="Switch a deployment that serves another model to MODEL "
              "(its devices start over).")
@_backend_option
@_errors
def serve(model, url, partitions, name, snapshot_every, snapshot_seconds, lease_seconds, max_batch,
          max_device_backlog, max_device_rate, replicas, max_history, store, port, mqtt_port, host, fleet, tls_cert,
          tls_key, tls_ca, metrics_port, metrics_host, status_every, duration, print_config, predictions, ack_readings,
          replace_model, backend):
    """Serve MODEL to many devices: readings in over NATS or MQTT, predictions out, each
    device's state kept in JetStream.

    Devices publish readings to `edgeseq.in.<device>` (MQTT: `edgeseq/in/<device>`) as JSON
    {"seq": n, "x": [...]}, seq rising by one per device; predictions come out on
    `edgeseq.out.<device>` (MQTT `edgeseq/out/<device>`) as JSON {"device", "seq", "position",
    "label", "prob"}; a model with decision settings (`edgeseq calibrate`) also publishes its
    events on `edgeseq.out.<device>.events` (MQTT `edgeseq/out/<device>/events`) as JSON
    {"device", "seq", "position", "event": "start" | "end", "label", "onset"}, and with
    --events-only nothing else; malformed readings go to `edgeseq.dead.<device>` with the reason. The
    local server admits only the devices in --fleet (`edgeseq devices add NAME`), each allowed
    to publish its own readings only, and the gateway (its credentials in --fleet). Start
    more gateways (same MODEL, --nats and --partitions) to share the partitions; one that dies is
    replaced within --lease-seconds and a bit, and no reading is lost or applied twice.

    \b
      edgeseq devices add pump-7                              # its credentials, shown once
      edgeseq serve models/gru-int8.onnx                      # a local nats-server, MQTT on 1883
      edgeseq serve models/gru-int8.onnx --nats nats://gw:4222 --name gw2
      edgeseq serve models/gru-int8.onnx --print-config       # the mapping for your own server
    """
    from edgeseq.gateway.broker import LocalBroker, mapping_block, tls_block
    from edgeseq.gateway.fleet import Fleet, with_credentials

    crew = Fleet(fleet)
    if (tls_cert is None) != (tls_key is None):
        raise click.BadParameter("give both --tls-cert and --tls-key (or neither)", param_hint="--tls-cert/--tls-key")
    if print_config:
        tls = tls_block(tls_cert, tls_key) if tls_cert else ""
        click.echo(f"server_name: edgeseq\njetstream {{}}\n{tls + chr(10) if tls else ''}"
                   f"mqtt {{ listen: 0.0.0.0:1883{', ' + tls if tls else ''} }}\n"
                   f"{crew.authorization_block(partitions)}{mapping_block(partitions)}", nl=False)
        click.echo(f"# the gateway connects as {crew.gateway_credentials()[0]} with the password in "
                   f"{printable(crew.gateway_file)}; devices as in `edgeseq devices list --fleet {printable(fleet)}`", err=True)
        return
    if tls_cert is not None and url is not None:
        raise click.BadParameter("--tls-cert configures the server serve starts; with --nats, TLS is that server's "
                                 "(give --nats tls://host:port and --tls-ca)", param_hint="--tls-cert")
    if duration is not None and not duration == duration:
        raise click.BadParameter("give a number of seconds", param_hint="--duration")
    from edgeseq.gateway.service import Gateway

    echo = lambda line: click.echo(safe_text(line), err=True)  # noqa: E731 - the gateway's status lines name models, devices
    if url is not None and "@" not in url and crew.gateway_file.exists():      # the server --print-config configured
        url = ",".join(with_credentials(u.strip(), *crew.gateway_credentials()) for u in url.split(","))
    gw = Gateway(model, url or "nats://placeholder", partitions=partitions, name=name, snapshot_every=snapshot_every,
                 snapshot_seconds=snapshot_seconds,
                 lease_seconds=lease_seconds, max_batch=max_batch, backend=backend, max_history=max_history,
                 max_device_backlog=max_device_backlog, max_device_rate=max_device_rate, replicas=replicas,
                 replace_model=replace_model, predictions=predictions, echo=echo,
                 acknowledge_readings=(url is None) if ack_readings is None else ack_readings,
                 tls_ca=tls_ca or (tls_cert if url is None else None))
    if url is not None and ack_readings:
        echo("note: --ack-readings with --nats is safe only on a server where every device has an account of its own "
             "(the configuration `edgeseq serve --print-config` prints): where devices share an account, a reading's "
             "reply subject makes JetStream write, as the server, wherever a device names")
    broker = None
    if url is None:
        if mqtt_port == port:
            raise click.BadParameter(f"--port and --mqtt-port are both {port}; give them different ports")
        broker = LocalBroker(store, partitions=partitions, port=port, mqtt_port=mqtt_port or None,
                             mqtt=bool(mqtt_port), host=host, fleet=crew,
                             tls=(tls_cert, tls_key) if tls_cert else None).start()
        from edgeseq.gateway.broker import is_loopback
        if not tls_cert and not is_loopback(host):
            echo(f"warning: listening on {host} without TLS: device passwords and readings cross the network in the "
                 "clear; give --tls-cert and --tls-key (docs/gateway.md shows how to make them)")
        gw.url = broker.gateway_url
        n = len(crew.devices())
        echo(f"nats-server: {broker.url}" + (f", MQTT {broker.mqtt_url}" if broker.mqtt_url else "")
             + f", JetStream in {printable(store)}; {n} device(s) in {printable(fleet)}"
             + ("" if n else " (add one: edgeseq devices add NAME)"))
    httpd = None
    try:
        if metrics_port:
            from edgeseq.gateway.metrics import GatewayMetrics, scrape_password, serve_metrics
            gw.metrics = GatewayMetrics(gw)
            httpd = serve_metrics(gw.metrics, metrics_host, metrics_port, scrape_password(fleet))
            echo(f"metrics: http://{metrics_host}:{httpd.server_port}/metrics (user prometheus, password in "
                 f"{printable(fleet)}/metrics.json)")
        asyncio.run(_serve(gw, duration, status_every, broker, echo))
    finally:
        if httpd is not None:
            httpd.shutdown()
        if broker is not None:
            broker.stop()
    click.echo(f"stopped: {gw.stats['readings']:,} readings, {gw.stats['predictions']:,} predictions, "
               + (f"{gw.stats['events']:,} events, " if gw.batcher.decision is not None else "") +
               f"{gw.stats['dead']:,} dead letters, {gw.stats['duplicates']:,} duplicates", err=True)


def _quiet_tls_eof(record) -> bool:
    """asyncio says this once per TLS connection nats-py closes: noise, not trouble."""
    return "eof_received() has no effect when using ssl" not in record.getMessage()


async def _serve(gw, duration, status_every, broker=None, echo=None):
    import logging
    logging.getLogger("asyncio").addFilter(_quiet_tls_eof)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if duration:
        loop.call_later(duration, stop.set)

    async def reload():                       # devices added or removed while it runs
        while broker is not None:
            await asyncio.sleep(RELOAD_SECONDS)
            try:
                if await asyncio.get_running_loop().run_in_executor(None, broker.reload):
                    echo(f"fleet changed: the server now admits {len(broker.fleet.devices())} device(s)")
            except Exception as e:  # noqa: BLE001 - a damaged fleet file: keep what the server has
                echo(f"fleet not reloaded: {e}")
    watcher = asyncio.ensure_future(reload())
    try:
        await gw.run(stop, status_every=status_every)
    finally:
        watcher.cancel()
