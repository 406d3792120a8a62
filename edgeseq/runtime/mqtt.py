"""Publish a live stream's predictions over MQTT, QoS 1, through a broker that may come and go.

Needs paho-mqtt (`pip install paho-mqtt`, or `pip install ".[pi]"` in edgeseq's clone); this module imports
it only when a publisher is made, so the runtime stays importable without it.

    pub = MqttPublisher("mqtt://broker.local:1883", device="pi-kitchen", note=print)
    pub.start()                           # one connection attempt; on failure it retries in the background
    pub.publish({"reading": 1, "label": "Walking", "prob": 0.93, "latency_us": 21.4})
    counts = pub.stop()                   # {"published": ..., "queued": ..., "dropped": ..., ...}

The sensor loop never waits for the network. `publish()` puts the prediction at the end of a
queue of at most `max_queued` (DEFAULT_QUEUE) and hands the queue's head to paho, WINDOW
messages at a time, only while connected; paho's network thread sends them and collects the
broker's acknowledgements. While the broker is away the model keeps stepping and predictions
wait in the queue; once it is full the oldest waiting one is dropped for each new one (the
newest are the ones worth having), counted as `dropped`. After a reconnect paho first resends
what was sent and not acknowledged (flagged DUP: QoS 1 is at least once, so a subscriber may
see one twice), and only then does the queue move on, so predictions reach the broker in
reading order.

Topics: predictions on `edgeseq/<device>/prediction` (or `topic`); `edgeseq/<device>/availability`
holds "online" (retained, published on every connect) and, through the broker's last will,
"offline" when the connection dies (or at a clean stop). With `ha_discovery`, Home Assistant
MQTT discovery configs are published (retained, on every connect, so a broker that restarts
without persistence has them again) at `homeassistant/sensor/<node>/prediction/config` (the
label; the whole payload as attributes) and `.../probability/config` (percent), where
<node> is the device name with characters other than letters, digits, `_` and `-` made `_`.

Events of the model's decision layer (`edgeseq calibrate`; `publish_event`) go on
`edgeseq/<device>/event` (QoS 1), and the device's state, the active event's label or "none",
on `edgeseq/<device>/state` (retained, published when it changes: what Home Assistant shows as
the "Activity" sensor, whose discovery config is published with the others where the model has
decision settings). `predictions=False` publishes events and state only, not every reading.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid
from collections import deque
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from edgeseq.errors import UsageError, printable, redact_url

DEFAULT_QUEUE = 10_000   # predictions held while the broker is away: 200 s at 50 Hz, about 200 B of memory each
WINDOW = 100             # handed to paho and not yet acknowledged, at most: paho's own queue stays short
PUMP = 50                # handed to paho per publish() call, at most: bounds the time one call takes
FLUSH_SECONDS = 5.0      # at stop, how long queued predictions may take to reach a connected broker
KEEPALIVE = 30           # seconds; a silently dead link is noticed after 1.5 times this
RECONNECT = (1, 30)      # seconds between retries: the first, doubling up to the last
CONNECT_TIMEOUT = 5.0    # seconds for one TCP (and TLS) connection attempt
PORTS = {"mqtt": 1883, "mqtts": 8883}
HA_PREFIX = "homeassistant"
INSTALL = 'pip install paho-mqtt (or pip install ".[pi]" in a clone)'


@dataclass(frozen=True)
class BrokerURL:
    """A parsed `--mqtt` URL. `shown` is the URL for messages: no password, ever."""

    scheme: str              # mqtt (plain TCP) or mqtts (TLS, verified against the system's CAs)
    host: str
    port: int
    username: str | None
    password: str | None

    @property
    def tls(self) -> bool:
        return self.scheme == "mqtts"

    @property
    def shown(self) -> str:
        user = f"{self.username}@" if self.username else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{user}{host}:{self.port}"


def _redact(url: str) -> str:
    """`url` for an error message: a password replaced by ***, cut to 80 characters."""
    text = redact_url(url)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_url(url: str, env=None) -> BrokerURL:
    """`mqtt://[user[:password]@]host[:port]` or `mqtts://...` (TLS) as a BrokerURL.

    Port: 1883 for mqtt, 8883 for mqtts when not given. User and password are percent-decoded;
    where the URL has none they come from MQTT_USERNAME / MQTT_PASSWORD in `env` (default
    os.environ), and a URL with a user but no password takes MQTT_PASSWORD.
    Raises UsageError (exit 2) naming what is wrong: another scheme, no host, a port that is
    not 1 to 65535, a path, query or fragment (the topic is --topic), a host name that cannot
    be encoded."""
    env = os.environ if env is None else env
    if not isinstance(url, str) or not url.strip():
        raise UsageError("--mqtt needs a broker URL, e.g. mqtt://broker.local:1883")
    shown = _redact(url)
    example = "e.g. mqtt://broker.local:1883 or mqtts://user:password@broker.example.com"
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise UsageError(f"--mqtt URL '{printable(shown)}' has spaces or control "
                         f"characters; {example}")
    try:
        parts = urlsplit(url)                     # a bracketed address that does not close raises here
    except ValueError as e:
        raise UsageError(f"--mqtt URL '{shown}': {e}; {example}") from None
    if re.search(r"%(?![0-9A-Fa-f]{2})", parts.netloc):
        raise UsageError(f"--mqtt URL '{shown}': a '%' not followed by two hex digits (percent-encode a '%' in a "
                         f"password as %25); {example}")
    scheme = parts.scheme.lower()
    if scheme not in PORTS or not url.lower().startswith(f"{scheme}://"):
        raise UsageError(f"--mqtt URL '{shown}' must start with mqtt:// or mqtts:// (TLS); {example}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or "?" in url or "#" in url:
        raise UsageError(f"--mqtt URL '{shown}' has a path, query or fragment; give only the broker, "
                         "and the topic with --topic")
    host = parts.hostname or ""
    if not host:
        raise UsageError(f"--mqtt URL '{shown}' names no host; {example}")
    try:
        host.encode("idna")
    except UnicodeError:
        raise UsageError(f"--mqtt URL '{shown}': '{host[:40]}' is not a valid host name") from None
    try:
        port = parts.port
    except ValueError:
        port = None
    else:
        port = PORTS[scheme] if port is None and not parts.netloc.endswith(":") else port
    if port is None or not 1 <= port <= 65535:
        raise UsageError(f"--mqtt URL '{shown}': the port must be a whole number from 1 to 65535 "
                         f"(or left out: {PORTS[scheme]} for {scheme})")
    username = unquote(parts.username) if parts.username else env.get("MQTT_USERNAME") or None
    password = unquote(parts.password) if parts.password is not None else env.get("MQTT_PASSWORD") or None
    if password is not None and username is None:
        raise UsageError("MQTT_PASSWORD is set but no user name: give user:password@ in the --mqtt URL or set "
                         "MQTT_USERNAME too")
    return BrokerURL(scheme, host, port, username, password)


def default_device() -> str:
    """This machine's host name (the `--device` default), or "edgeseq" where it has none."""
    name = socket.gethostname().split(".")[0]
    return name if name and _device_problem(name) is None else "edgeseq"


def _device_problem(name) -> str | None:
    if not isinstance(name, str) or not name or len(name) > 100:
        return "must be 1 to 100 characters"
    if any(c in name for c in "/+#") or not name.isprintable():
        return "must not hold /, +, # or control characters (it is one level of an MQTT topic)"
    return None


def check_device(name: str) -> str:
    """`name` as a device name for topics and Home Assistant, or UsageError saying why not."""
    problem = _device_problem(name)
    if problem:
        raise UsageError(f"--device '{printable(str(name)[:40])}' {problem}")
    return name


def check_topic(topic: str) -> str:
    """`topic` as an MQTT topic to publish on, or UsageError: not empty, no wildcard (+ #), no
    NUL, at most 65,535 bytes of UTF-8."""
    if not isinstance(topic, str) or not topic:
        raise UsageError("--topic must not be empty, e.g. edgeseq/pi/prediction")
    if "+" in topic or "#" in topic:
        raise UsageError(f"--topic '{printable(topic[:60])}' has a wildcard (+ or #): those are for subscribing; name one "
                         "topic, e.g. edgeseq/pi/prediction")
    if "\0" in topic or len(topic.encode("utf-8", "surrogatepass")) > 65535:
        raise UsageError("--topic must be at most 65,535 bytes with no NUL character")
    try:
        topic.encode("utf-8")
    except UnicodeError:
        raise UsageError("--topic is not valid UTF-8 text") from None
    return topic


def ha_node(device: str) -> str:
    """The Home Assistant node id for `device`: letters, digits, `_` and `-`; others become `_`."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", device)


def ha_configs(device: str, topic: str, availability: str, model: str | None = None,
               state_topic: str | None = None, anomaly: bool = False, targets: list | None = None) -> list:
    """[(config topic, config dict)] of the Home Assistant MQTT discovery messages for a
    device's predictions: a sensor for the label (the payload's other fields as attributes) and
    one for its probability in percent, both on `topic`, available while `availability` says
    "online", grouped under one device; with `state_topic`, a third for the decision layer's
    state (the active event's label, or "none"). For an anomaly model (`anomaly`) the label is
    the device's state (learning, normal, anomaly) and the second sensor its level in standard
    deviations of its learnt score (unknown while it learns). For a regression model (`targets`,
    their names) each target is a sensor of its own, read from the payload's "values"."""
    from edgeseq import __version__
    node = ha_node(device)
    dev = {"identifiers": [f"edgeseq_{node}"], "name": device, "manufacturer": "edgeseq",
           "sw_version": __version__, **({"model": model} if model else {})}
    common = {"state_topic": topic, "availability_topic": availability, "payload_available": "online",
              "payload_not_available": "offline", "device": dev,
              "origin": {"name": "edgeseq", "sw_version": __version__}}
    label = {"name": "Prediction", "unique_id": f"edgeseq_{node}_prediction", "icon": "mdi:motion-sensor",
             "value_template": "{{ value_json.label }}", "json_attributes_topic": topic, **common}
    prob = {"name": "Probability", "unique_id": f"edgeseq_{node}_probability", "unit_of_measurement": "%",
            "state_class": "measurement", "value_template": "{{ (value_json.prob * 100) | round(1) }}", **common}
    if anomaly:
        label = {**label, "name": "Machine state", "icon": "mdi:pulse"}
        prob = {"name": "Anomaly level", "unique_id": f"edgeseq_{node}_level", "unit_of_measurement": "sd",
                "state_class": "measurement",
                "value_template": "{{ value_json.level if value_json.level is not none else 'unknown' }}", **common}
    sensors = [("prediction", label), ("level" if anomaly else "probability", prob)]
    if targets:
        sensors = [(f"target{i}", {"name": name, "unique_id": f"edgeseq_{node}_target{i}", "state_class": "measurement",
                                   "value_template": "{{ value_json['values'][%s] }}" % json.dumps(name), **common})
                   for i, name in enumerate(targets)]
    if state_topic is not None:
        sensors.append(("activity", {"name": "Activity", "unique_id": f"edgeseq_{node}_activity",
                                     "icon": "mdi:run", **common, "state_topic": state_topic}))
    return [(f"{HA_PREFIX}/sensor/{node}/{obj}/config", cfg) for obj, cfg in sensors]


def paho_client_module():
    """paho.mqtt.client, or UsageError with the line that installs it."""
    try:
        import paho.mqtt.client as mqtt
    except ImportError:
        raise UsageError(f"--mqtt needs paho-mqtt: {INSTALL}") from None
    if not hasattr(mqtt, "CallbackAPIVersion"):
        raise UsageError(f"--mqtt needs paho-mqtt 2.0 or later: {INSTALL.replace('paho-mqtt', '-U paho-mqtt')}")
    return mqtt


def _why(e: BaseException) -> str:
    text = getattr(e, "strerror", None) or getattr(e, "reason", None) or str(e) or type(e).__name__
    return " ".join(str(text).split())[:150]


class MqttPublisher:
    """Publishes prediction dicts as JSON on one topic, QoS 1, from a queue the sensor loop never
    waits on (see the module's docstring).

    url: a `--mqtt` URL or a BrokerURL. device: the name in topics and payloads (default: the
    host name). topic: default `edgeseq/<device>/prediction`. max_queued: predictions held
    while the broker is away or slow (>= 1). note: called with each line worth telling a person
    (connected, lost, back, dropping), from paho's thread as well as the caller's. model: the
    model's name for Home Assistant's device block. reconnect: (first, longest) seconds
    between retries. flush_seconds: how long stop() waits for queued predictions.
    Raises UsageError for a bad URL, device, topic or count, or paho-mqtt missing."""

    def __init__(self, url, topic: str | None = None, device: str | None = None, ha_discovery: bool = False,
                 max_queued: int = DEFAULT_QUEUE, note=None, model: str | None = None,
                 reconnect: tuple = RECONNECT, flush_seconds: float = FLUSH_SECONDS, events: bool = False,
                 predictions: bool = True):
        self.url = url if isinstance(url, BrokerURL) else parse_url(url)
        self.device = check_device(device) if device is not None else default_device()
        self.topic = check_topic(topic if topic is not None else f"edgeseq/{self.device}/prediction")
        if isinstance(max_queued, bool) or not isinstance(max_queued, int) or max_queued < 1:
            raise UsageError(f"--mqtt-queue must be a whole number >= 1, got {max_queued!r}")
        self.max_queued, self.window = max_queued, min(WINDOW, max_queued)
        self.availability = f"edgeseq/{self.device}/availability"
        self.event_topic, self.state_topic = f"edgeseq/{self.device}/event", f"edgeseq/{self.device}/state"
        self.predictions = bool(predictions)
        self._state = None               # the last state published (the active event's label, or "none")
        self._ha = (ha_discovery, model)
        self.with_events(events, check=False)
        # a broker's words and the topic reach the terminal escaped (edgeseq.errors.printable)
        self.note = (lambda line: note(printable(line))) if note else (lambda line: None)
        self.flush_seconds = flush_seconds
        mqtt = paho_client_module()
        self._pending = deque()          # (topic, JSON payload, retain) not yet handed to paho, oldest first
        self._handed = 0                 # handed to paho (written by the caller's thread only)
        self._acked = 0                  # acknowledged by the broker (written by paho's thread only)
        self._control = set()            # mids of availability and discovery messages (paho's thread)
        self._connected = False
        self._connecting = False         # a connection made, its CONNACK not yet in
        self._resync = False             # after a drop: wait until paho's resends are acknowledged
        self._ever_connected = False
        self._down_since = None
        self._dropping = False
        self._refused = None
        self._frozen = None
        self.dropped = 0
        self.reconnects = 0
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"edgeseq-{uuid.uuid4().hex[:12]}",
                        protocol=mqtt.MQTTv311, clean_session=True)
        if self.url.username is not None:
            c.username_pw_set(self.url.username, self.url.password)
        if self.url.tls:
            c.tls_set()                  # the system's CA certificates; the host name is checked
        c.will_set(self.availability, "offline", qos=1, retain=True)
        c.reconnect_delay_set(*reconnect)
        c.connect_timeout = CONNECT_TIMEOUT
        c.on_connect, c.on_disconnect, c.on_publish = self._on_connect, self._on_disconnect, self._on_publish
        self.client = c

    # -- paho's thread --------------------------------------------------------------------
    def _on_connect(self, client, userdata, flags, reason, properties):
        if reason.is_failure:
            self._connecting = False
            if self._refused != str(reason):             # once per reason, not at every retry
                self._refused = str(reason)
                self.note(f"MQTT: {self.url.shown} refused the connection ({reason}); check the user name and password "
                          "(in the URL, or MQTT_USERNAME / MQTT_PASSWORD); retrying")
            return
        for topic, payload, retain in [(self.availability, "online", True)] + \
                [(t, json.dumps(cfg), True) for t, cfg in self.discovery]:
            self._control.add(client.publish(topic, payload, qos=1, retain=retain).mid)
        if self._ever_connected:
            self.reconnects += 1
            gone = time.monotonic() - self._down_since if self._down_since else 0.0
            self.note(f"MQTT: reconnected to {self.url.shown} after {gone:.1f} s; {self.queued():,} predictions "
                      f"to send, {self.dropped:,} dropped so far")
        else:
            self.note(f"MQTT: connected to {self.url.shown}; publishing on {self._topics()}")
        self._ever_connected, self._down_since, self._dropping, self._refused = True, None, False, None
        self._connected, self._connecting = True, False      # in this order: stop() watches both

    def _on_disconnect(self, client, userdata, flags, reason, properties):
        was, self._connected, self._connecting, self._resync = self._connected, False, False, True
        if was and self._frozen is None:
            self._down_since = time.monotonic()
            why = "connection closed" if str(reason) == "Unspecified error" else str(reason)   # paho's word for EOF
            self.note(f"MQTT: lost {self.url.shown} ({why}); the stream goes on, retrying, holding up to "
                      f"{self.max_queued:,} predictions meanwhile")

    def _on_publish(self, client, userdata, mid, reason, properties):
        if mid in self._control:
            self._control.discard(mid)
        else:
            self._acked += 1

    # -- the caller's thread --------------------------------------------------------------
    def start(self) -> None:
        """Connect (one attempt, at most CONNECT_TIMEOUT seconds) and start paho's network thread.
        A broker that cannot be reached is one note; the thread then retries in the background."""
        c, u = self.client, self.url
        try:
            c.connect(u.host, u.port, KEEPALIVE)
            self._connecting = True
        except (OSError, ValueError) as e:
            self.note(f"MQTT: cannot reach {u.shown} ({_why(e)}); the stream runs and retries in the background, "
                      f"holding up to {self.max_queued:,} predictions")
            self._down_since = time.monotonic()
            c.connect_async(u.host, u.port, KEEPALIVE)
        c.loop_start()

    def with_events(self, events: bool, check: bool = True, anomaly: bool = False, targets: list | None = None) -> None:
        """Say whether the model has decision settings (its events and state are published, and
        Home Assistant gets the Activity sensor) and whether it is an anomaly model (its answers
        are a state and a level) or a regression model (`targets`: their names, a sensor each);
        before `start`. UsageError (with `check`) where predictions are off and there are no
        events to publish."""
        if check and not self.predictions and not events:
            raise UsageError("without per-reading predictions only events are published, and this model has no "
                             "decision settings; run `edgeseq calibrate` on it, or keep the predictions")
        ha_discovery, model = self._ha
        self.events = bool(events)
        self.discovery = ha_configs(self.device, self.topic, self.availability, model,
                                    self.state_topic if events else None, anomaly, targets) if ha_discovery else []
        if not self.predictions:             # events only: the prediction sensors would never get a value
            self.discovery = [(t, cfg) for t, cfg in self.discovery if t.endswith("/activity/config")]

    def _topics(self) -> str:
        """The topics this publisher writes readings' answers to, for its notes."""
        if not getattr(self, "events", False):
            return self.topic
        ev = f"{self.event_topic} and {self.state_topic}"
        return f"{self.topic}, {ev}" if self.predictions else ev

    def _what(self) -> str:
        if not getattr(self, "events", False):
            return "predictions"
        return "messages (predictions, events and states)" if self.predictions else "messages (events and states)"

    def queued(self) -> int:
        """Predictions waiting: not yet handed to paho, or handed and not acknowledged."""
        return len(self._pending) + self._handed - self._acked

    def publish(self, record: dict) -> None:
        """Queue `record` (a JSON-able dict; `device` and `time`, Unix seconds, are added) and hand
        waiting predictions to paho while connected. Never waits on the network; a full queue
        drops its oldest waiting prediction (counted). Nothing where predictions are off."""
        if self.predictions:
            self._queue(self.topic, json.dumps({"device": self.device, **record, "time": round(time.time(), 3)}))

    def publish_event(self, record: dict, state: str | None) -> None:
        """Queue an event `record` ({"reading", "event", "label", "onset"}) on the event topic,
        and the device's new `state` (the active event's label; None: "none") on the state
        topic, retained, where it changed. Queued like predictions, in order with them."""
        self._queue(self.event_topic, json.dumps({"device": self.device, **record, "time": round(time.time(), 3)}))
        state = "none" if state is None else str(state)
        if state != self._state:
            self._state = state
            self._queue(self.state_topic, state, retain=True)

    def _queue(self, topic: str, text: str, retain: bool = False) -> None:
        payload = (topic, text, retain)
        if self.queued() >= self.max_queued:
            if self._pending:
                self._pending.popleft()
            else:
                payload = None
            self.dropped += 1
            if not self._dropping:
                self._dropping = True
                self.note(f"MQTT: {self.max_queued:,} predictions waiting for {self.url.shown}; dropping the oldest "
                          "from now on (counted)")
        if payload is not None:
            self._pending.append(payload)
        self._pump()

    def _pump(self, most: int = PUMP) -> None:
        if not self._connected:
            return
        if self._resync:                             # paho resends the unacknowledged first, in order
            if self._handed != self._acked:
                return
            self._resync = False
        while self._pending and most > 0 and self._handed - self._acked < self.window:
            topic, payload, retain = self._pending.popleft()
            self.client.publish(topic, payload, qos=1, retain=retain)
            self._handed += 1
            most -= 1

    def counts(self) -> dict:
        """{"published": acknowledged by the broker, "queued": waiting (not delivered), "dropped":
        beyond the bound, "max_queued", "reconnects", "broker", "topic"}; fixed once stop() ran."""
        if self._frozen is not None:
            return dict(self._frozen)
        return {"published": self._acked, "queued": self.queued(), "dropped": self.dropped,
                "max_queued": self.max_queued, "reconnects": self.reconnects, "broker": self.url.shown,
                "topic": self._topics(), "what": self._what()}

    def stop(self) -> dict:
        """Give waiting predictions up to flush_seconds to reach a broker that is connected, or
        answering the first connection (Ctrl-C stops the wait); say "offline", disconnect and end
        paho's thread. Returns counts()."""
        deadline = time.monotonic() + self.flush_seconds
        try:
            while (self._connected or self._connecting) and self.queued() and time.monotonic() < deadline:
                self._pump(self.window)
                time.sleep(0.01)
        except KeyboardInterrupt:
            pass
        self._frozen = self.counts()
        if self._frozen["queued"] and self._connected:
            self.note(f"MQTT: {self._frozen['queued']:,} predictions not acknowledged by {self.url.shown} within "
                      f"{self.flush_seconds:g} s of the end")
        try:
            if self._connected:
                self.client.publish(self.availability, "offline", qos=1, retain=True).wait_for_publish(1.0)
        except (RuntimeError, ValueError):
            pass
        self.client.disconnect()
        self.client.loop_stop()
        return dict(self._frozen)


def summary_line(counts: dict) -> str:
    """MqttPublisher.stop()'s counts in words (the demo prints it under the run's summary)."""
    c = counts
    again = f"; reconnected {c['reconnects']} time{'s' if c['reconnects'] != 1 else ''}" if c["reconnects"] else ""
    return (f"MQTT: {c['published']:,} {c.get('what', 'predictions')} published to {printable(c['broker'])} on {printable(c['topic'])}, "
            f"{c['queued']:,} "
            f"still queued at exit (not delivered), {c['dropped']:,} dropped beyond the queue of "
            f"{c['max_queued']:,}{again}")
