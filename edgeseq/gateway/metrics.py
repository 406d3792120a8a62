"""The gateway's Prometheus endpoint (`edgeseq serve --metrics-port`), with HTTP basic
authentication: anything that listens asks who is there.

Served by prometheus_client's WSGI app on the standard library's wsgiref server (a thread per
connection, idle ones cut off after REQUEST_TIMEOUT), in a daemon thread, on loopback unless
told otherwise; only /metrics answers. Basic authentication sends the password in the clear:
beyond loopback, put the endpoint behind TLS (a reverse proxy). A scrape must present user `prometheus` and the
password in `<fleet>/metrics.json` (mode 0600, made on first use); anything else gets 401.
Prometheus's scrape configuration takes them as `basic_auth: {username, password_file}`.

Metrics (all `edgeseq_gateway_`, label `gateway`):

- counters read from the gateway's `stats` at each scrape: `readings_total`,
  `predictions_total`, `dead_letters_total`, `duplicates_total`, `gaps_total`,
  `resets_total`, `snapshots_total`, `partitions_taken_total`, `partitions_lost_total`,
  `nats_errors_total`;
- gauges: `partitions_held`, `devices`, `state_bytes`, `backlog` (readings stored in
  EDGESEQ_IN and not yet delivered to this gateway, from the last message's JetStream
  metadata per partition);
- histogram `latency_seconds`: from a reading's storage in JetStream to its prediction's
  publication, one observation per message.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import secrets
import threading
from pathlib import Path

from edgeseq.errors import UsageError

USER = "prometheus"
REQUEST_TIMEOUT = 10.0          # seconds a scrape's connection may sit idle
COUNTERS = ("readings", "predictions", "dead", "duplicates", "gaps", "resets", "snapshots", "partitions_taken",
            "partitions_lost", "nats_errors")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MISSING = "prometheus-client is not installed: pip install prometheus-client (or pip install '.[gateway]')"


def _prom():
    try:
        import prometheus_client
    except ModuleNotFoundError:
        raise UsageError(MISSING) from None
    return prometheus_client


def scrape_password(folder: str | os.PathLike) -> str:
    """The password a scrape must present, from `folder/metrics.json` (made, mode 0600, the first
    time). UsageError for a file that is not one edgeseq writes."""
    path = Path(folder) / "metrics.json"
    try:
        doc = json.loads(path.read_text())
        if not (isinstance(doc, dict) and doc.get("user") == USER and isinstance(doc.get("password"), str)
                and len(doc["password"]) >= 16):
            raise UsageError(f"{path} is not an edgeseq metrics credential; move it away and start again")
        return doc["password"]
    except FileNotFoundError:
        pass
    except (OSError, ValueError, RecursionError) as e:
        raise UsageError(f"{path} cannot be read ({type(e).__name__}); move it away and start again") from None
    path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    password = secrets.token_urlsafe(32)
    from edgeseq.gateway.fleet import write_private
    write_private(path, json.dumps({"user": USER, "password": password}) + "\n")
    return password


class GatewayMetrics:
    """The registry for one gateway: a collector over `gateway.stats` and `gateway.status()`,
    and the latency histogram the gateway observes into (`observe`)."""

    def __init__(self, gateway):
        prom = _prom()
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        self.registry = prom.CollectorRegistry(auto_describe=True)
        self.latency = prom.Histogram("edgeseq_gateway_latency_seconds", "From a reading's storage in JetStream to "
                                      "its prediction's publication", ["gateway"], buckets=LATENCY_BUCKETS,
                                      registry=self.registry).labels(gateway.name)
        gw = gateway

        class Collector:
            def collect(self):
                name = gw.name
                for _ in range(10):       # the gateway's loop changes these while this thread reads them
                    try:
                        stats, status = dict(gw.stats), gw.status()
                        backlog = sum(p.backlog for p in list(gw.parts.values()))
                        break
                    except RuntimeError:
                        continue
                else:
                    return
                for key in COUNTERS:
                    what = "dead_letters" if key == "dead" else key
                    c = CounterMetricFamily(f"edgeseq_gateway_{what}", f"{what.replace('_', ' ')} since start",
                                            labels=["gateway"])
                    c.add_metric([name], float(stats.get(key, 0)))
                    yield c
                for key, value, text in (("partitions_held", len(status["partitions"]), "partitions this gateway leases"),
                                         ("devices", status["devices"], "devices in memory"),
                                         ("state_bytes", status["state_bytes"], "bytes of device state in memory"),
                                         ("backlog", backlog, "readings stored and not yet delivered to this "
                                          "gateway")):
                    g = GaugeMetricFamily(f"edgeseq_gateway_{key}", text, labels=["gateway"])
                    g.add_metric([name], float(value))
                    yield g

            def describe(self):
                return []
        self.registry.register(Collector())

    def observe(self, seconds: float) -> None:
        self.latency.observe(max(0.0, seconds))


def serve_metrics(metrics: GatewayMetrics, host: str, port: int, password: str):
    """Serve `metrics` on http://host:port/metrics in a daemon thread; returns the server
    (`.shutdown()` stops it, `.server_port` is the port). Requests without user `prometheus`
    and `password` (HTTP basic authentication) get 401. UsageError when the port is taken."""
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    prom = _prom()
    app = prom.make_wsgi_app(metrics.registry)
    want = base64.b64encode(f"{USER}:{password}".encode()).decode()

    def guarded(environ, start_response):
        scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").strip().partition(" ")
        if not (scheme.lower() == "basic" and hmac.compare_digest(token.strip().encode(), want.encode())):
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="edgeseq"'),
                                                ("Content-Type", "text/plain")])
            return [b"401: give the user and password in the fleet's metrics.json\n"]
        if environ.get("PATH_INFO", "/") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"404: the metrics are at /metrics\n"]
        return app(environ, start_response)

    class Quiet(WSGIRequestHandler):
        timeout = REQUEST_TIMEOUT         # a client that opens a connection and sends nothing is cut off

        def log_message(self, *args):
            pass

    class Threaded(ThreadingMixIn, WSGIServer):
        daemon_threads = True             # one slow client never holds up the next scrape
    try:
        httpd = make_server(host, port, guarded, server_class=Threaded, handler_class=Quiet)
    except OSError as e:
        raise UsageError(f"--metrics-port {port} on {host}: {e.strerror or e}; pass a free port") from None
    threading.Thread(target=httpd.serve_forever, name="edgeseq-metrics", daemon=True).start()
    return httpd
