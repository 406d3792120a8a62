"""The Pi demo's --mqtt against a real broker (mosquitto, started here on a free loopback port):
predictions arrive in order and equal a run without MQTT; Home Assistant discovery is retained;
the broker stopped mid-run and started again costs no state; a full queue drops and counts; a
bad URL or a missing paho-mqtt is one line."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from edgeseq.errors import UsageError, run_script
from edgeseq.runtime.mqtt import BrokerURL, check_topic, ha_node, parse_url

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "pi_sensor_demo.py"
MOSQUITTO = shutil.which("mosquitto") or next((p for p in ("/usr/sbin/mosquitto",) if os.path.exists(p)), None)
PAYLOAD_KEYS = {"device", "reading", "label", "prob", "true", "latency_us", "time"}


def _paho():
    return pytest.importorskip("paho.mqtt.client", reason="paho-mqtt not installed: pip install paho-mqtt (or '.[pi]')")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """mosquitto on 127.0.0.1:port, anonymous, no persistence: a restart forgets everything."""

    def __init__(self, root: Path, tls: bool = False, users: dict | None = None):
        self.port, self.root, self.proc, self.tls = _free_port(), root, None, tls
        self.conf = root / "mosquitto.conf"
        certs, access = "", "allow_anonymous true\n"
        if users:
            for i, (user, password) in enumerate(users.items()):
                subprocess.run(["mosquitto_passwd", "-b", *(["-c"] if i == 0 else []), "passwd", user, password],
                               cwd=root, check=True, capture_output=True)
            access = f"allow_anonymous false\npassword_file {root / 'passwd'}\n"
        if tls:                          # a self-signed certificate for 127.0.0.1, its own CA
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                            "-nodes", "-keyout", "key.pem", "-out", "cert.pem", "-days", "1", "-subj", "/CN=127.0.0.1",
                            "-addext", "subjectAltName=IP:127.0.0.1"], cwd=root, check=True, capture_output=True)
            certs = f"certfile {root / 'cert.pem'}\nkeyfile {root / 'key.pem'}\n"
        if os.geteuid() == 0:                     # else it drops to its own user, who cannot read this tmp dir
            certs += "user root\n"
        self.conf.write_text(f"listener {self.port} 127.0.0.1\n{certs}{access}persistence false\n")

    def start(self):
        log = open(self.root / "mosquitto.log", "ab")
        self.proc = subprocess.Popen([MOSQUITTO, "-c", str(self.conf)], stdout=log, stderr=subprocess.STDOUT,
                                     cwd=self.root)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.root / "mosquitto.log").read_text()[-2000:]
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.02)
        raise AssertionError(f"mosquitto did not listen on {self.port}")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    @property
    def url(self):
        return f"{'mqtts' if self.tls else 'mqtt'}://127.0.0.1:{self.port}"


@pytest.fixture
def broker(tmp_path):
    if MOSQUITTO is None:
        pytest.skip("mosquitto not installed (apt-get install mosquitto, or `make services` as root)")
    _paho()
    b = Broker(tmp_path).start()
    yield b
    b.stop()


class Subscriber:
    """A paho client subscribed to `topic` (QoS 1) that keeps every message: (topic, payload, retain)."""

    def __init__(self, port: int, topic: str = "#"):
        mqtt = _paho()
        self.messages = []
        ready = threading.Event()
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, reconnect_on_failure=False)
        c.on_message = lambda c, u, m: self.messages.append((m.topic, m.payload.decode(), bool(m.retain)))
        c.on_subscribe = lambda *a: ready.set()
        c.connect("127.0.0.1", port)
        c.subscribe(topic, qos=1)
        c.loop_start()
        assert ready.wait(10), "no SUBACK"
        self.client = c

    def on(self, topic: str) -> list:
        return [p for t, p, r in list(self.messages) if t == topic]

    def readings(self, topic: str) -> list:
        """The predictions on `topic`, each reading once (QoS 1 may deliver one twice), in arrival order."""
        seen, out = set(), []
        for p in map(json.loads, self.on(topic)):
            if p["reading"] not in seen:
                seen.add(p["reading"])
                out.append(p)
        return out

    def wait(self, cond, timeout=60.0, what="messages"):
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, f"timed out waiting for {what}; got {len(self.messages)}"
            time.sleep(0.02)

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """An untrained, seeded GRU (hidden 8) with the embedded data's features and labels, so the
    replay source (and its true labels) streams through it; exported without validation."""
    import onnx
    import torch

    import edgeseq
    from edgeseq.data import load_dataset
    from edgeseq.models import build_model, config_dict, make_config
    from export.step import build_graph
    ds = load_dataset("basicmotions")
    cfg = make_config("gru", n_features=len(ds.features), n_classes=len(ds.labels), hidden=8)
    torch.manual_seed(0)
    m = build_model("gru", cfg)
    X = ds.train.X.reshape(-1, len(ds.features))
    mean, std = X.mean(0).astype(np.float32), X.std(0).astype(np.float32) + 1e-3
    m.norm.set(mean, std)
    proto, _, _ = build_graph({"edgeseq_version": edgeseq.__version__, "arch": "gru", "config": config_dict(cfg),
                               "state_dict": m.state_dict(), "labels": list(ds.labels),
                               "features": list(ds.features),
                               "normalization": {"mean": mean.tolist(), "std": std.tolist()}})
    path = tmp_path_factory.mktemp("mqtt") / "gru.onnx"
    onnx.save(proto, str(path))
    return str(path)


def _demo(args, **kw):
    return subprocess.Popen([sys.executable, str(DEMO), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


@pytest.fixture(scope="module")
def reference(model):
    """reading -> the JSON line of a run over the whole replay without MQTT."""
    out, err = _demo(["--model", model, "--rate", "0", "--json"]).communicate(timeout=120)
    lines = [json.loads(line) for line in out.splitlines()[:-1]]
    assert len(lines) == 4000, err
    return {line["reading"]: line for line in lines}


def _same(pred: dict, ref: dict):
    assert (pred["label"], pred["prob"], pred["true"]) == (ref["label"], ref["prob"], ref["true"]), (pred, ref)


def test_predictions_reach_the_broker_in_order_and_equal_a_run_without_mqtt(broker, model, reference):
    sub = Subscriber(broker.port)
    p = _demo(["--model", model, "--rate", "0", "--max-readings", "300", "--json", "--mqtt", broker.url,
               "--device", "test-pi"])
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    summary = lines.pop()["summary"]
    topic = "edgeseq/test-pi/prediction"
    assert {k: summary["mqtt"][k] for k in ("published", "queued", "dropped", "reconnects", "topic")} == {
        "published": 300, "queued": 0, "dropped": 0, "reconnects": 0, "topic": topic}
    sub.wait(lambda: len(sub.on("edgeseq/test-pi/availability")) == 2, what="online, offline")
    sub.close()
    preds = [json.loads(m) for m in sub.on(topic)]
    assert [m["reading"] for m in preds] == list(range(1, 301))                # in order, each once
    assert all(set(m) == PAYLOAD_KEYS and m["device"] == "test-pi" for m in preds), preds[0]
    for pred, line in zip(preds, lines):
        _same(pred, reference[pred["reading"]])
        assert pred["latency_us"] == line["latency_us"] and pred["reading"] == line["reading"]
    assert sub.on("edgeseq/test-pi/availability") == ["online", "offline"]
    notes = [line for line in err.splitlines() if line.startswith("MQTT:")]
    assert notes == [f"MQTT: connected to {broker.url}; publishing on {topic}",
                     f"MQTT: 300 predictions published to {broker.url} on {topic}, 0 still queued at exit (not "
                     "delivered), 0 dropped beyond the queue of 10,000"], err


def test_home_assistant_discovery_is_retained_and_the_last_will_says_offline(broker, model):
    sub = Subscriber(broker.port)
    p = _demo(["--model", model, "--rate", "100", "--mqtt", broker.url, "--device", "Kitchen Pi", "--ha-discovery",
               "--json"])
    topic = "edgeseq/Kitchen Pi/prediction"
    sub.wait(lambda: len(sub.on(topic)) >= 5, what="predictions")
    p.send_signal(signal.SIGKILL)                                   # a power cut: the broker's last will speaks
    p.wait(timeout=30)
    sub.wait(lambda: sub.on("edgeseq/Kitchen Pi/availability")[-1:] == ["offline"], what="the last will")
    sub.close()

    late = Subscriber(broker.port, "homeassistant/#")                 # joins afterwards: sees only what is retained
    late.wait(lambda: len(late.messages) == 2, what="retained discovery configs")
    avail = Subscriber(broker.port, "edgeseq/Kitchen Pi/availability")
    avail.wait(lambda: len(avail.messages) == 1, what="retained availability")
    assert avail.messages == [("edgeseq/Kitchen Pi/availability", "offline", True)]
    configs = {t: json.loads(p) for t, p, retained in late.messages if retained}
    node = ha_node("Kitchen Pi")
    assert node == "Kitchen_Pi" and set(configs) == {f"homeassistant/sensor/{node}/prediction/config",
                                                     f"homeassistant/sensor/{node}/probability/config"}
    label = configs[f"homeassistant/sensor/{node}/prediction/config"]
    prob = configs[f"homeassistant/sensor/{node}/probability/config"]
    for cfg in (label, prob):
        assert cfg["state_topic"] == topic and cfg["availability_topic"] == "edgeseq/Kitchen Pi/availability"
        assert (cfg["payload_available"], cfg["payload_not_available"]) == ("online", "offline")
        assert cfg["device"]["identifiers"] == [f"edgeseq_{node}"] and cfg["device"]["name"] == "Kitchen Pi"
        assert cfg["device"]["model"] == "gru.onnx" and re.fullmatch(r"[A-Za-z0-9_-]+", cfg["unique_id"])
    assert label["unique_id"] != prob["unique_id"] and label["json_attributes_topic"] == topic
    assert prob["unit_of_measurement"] == "%"
    jinja2 = pytest.importorskip("jinja2", reason="jinja2 not installed: the templates are not rendered")
    payload = json.loads(sub.on(topic)[0])
    render = lambda t: jinja2.Environment().from_string(t).render(value_json=payload)  # noqa: E731
    assert render(label["value_template"]) == payload["label"]
    assert float(render(prob["value_template"])) == round(payload["prob"] * 100, 1)
    late.close()
    avail.close()


def test_broker_stopped_mid_run_and_restarted_loses_no_state(broker, model, reference):
    """The model keeps stepping while the broker is away; predictions made meanwhile are held,
    delivered after the reconnect in order, and equal those of a run without MQTT."""
    device, topic = "outage", "edgeseq/outage/prediction"
    sub = Subscriber(broker.port, topic)
    p = _demo(["--model", model, "--rate", "200", "--json", "--mqtt", broker.url, "--device", device])
    notes = []
    threading.Thread(target=lambda: notes.extend(p.stderr), daemon=True).start()
    lines = []
    threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True).start()

    def wait_note(text, timeout=60.0):
        deadline = time.monotonic() + timeout
        while not any(text in n for n in list(notes)):
            assert time.monotonic() < deadline and p.poll() is None, f"no '{text}' note: {notes}"
            time.sleep(0.02)
    try:
        sub.wait(lambda: len(sub.on(topic)) >= 50, what="50 predictions")
        broker.stop()
        wait_note("MQTT: lost")
        before = sub.readings(topic)
        sub.close()
        time.sleep(0.2)                  # the demo's first retry comes 1 s after the loss: this one is refused
        broker.start()
        after = Subscriber(broker.port, topic)
        raced = any("MQTT: reconnected" in n for n in list(notes))   # back before `after` listened: rare
        wait_note("MQTT: reconnected")
        after.wait(lambda: len(after.on(topic)) >= 300, what="300 predictions after the reconnect")
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
    after.close()
    time.sleep(0.1)                                                   # the readers' last lines
    summary = json.loads(lines[-1])["summary"]
    made = [json.loads(line)["reading"] for line in lines[:-1]]
    assert p.returncode == 0 and summary["stopped_by"] == "SIGTERM" and made == list(range(1, len(made) + 1))
    m = summary["mqtt"]
    assert (m["reconnects"], m["dropped"], m["queued"]) == (1, 0, 0) and m["published"] == summary["readings"]
    got = after.readings(topic)
    first = got[0]["reading"]
    assert [g["reading"] for g in got] == list(range(first, first + len(got)))    # in order, no gap
    assert raced or first <= before[-1]["reading"] + 10, (before[-1]["reading"], first)   # the held ones arrived
    for pred in before + got:
        _same(pred, reference[pred["reading"]])                                   # the state went on
    said = [n for n in notes if n.startswith("MQTT:")]
    assert sum("MQTT: lost" in n for n in said) == 1 and sum("MQTT: reconnected" in n for n in said) == 1, said


def test_unreachable_broker_at_start_is_a_note_and_a_full_queue_drops_the_oldest(model):
    _paho()
    port = _free_port()                                               # nothing listens there
    p = _demo(["--model", model, "--rate", "0", "--max-readings", "300", "--json", "--mqtt",
               f"mqtt://127.0.0.1:{port}", "--mqtt-queue", "50", "--device", "nowhere"])
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    lines = out.splitlines()
    assert [json.loads(line)["reading"] for line in lines[:-1]] == list(range(1, 301))   # the stream went on
    m = json.loads(lines[-1])["summary"]["mqtt"]
    assert (m["published"], m["queued"], m["dropped"], m["max_queued"]) == (0, 50, 250, 50)
    notes = [line for line in err.splitlines() if line.startswith("MQTT:")]
    assert notes[0] == (f"MQTT: cannot reach mqtt://127.0.0.1:{port} (Connection refused); the stream runs and "
                        "retries in the background, holding up to 50 predictions")
    assert notes[1] == "MQTT: 50 predictions waiting for mqtt://127.0.0.1:{}; dropping the oldest from now on " \
                       "(counted)".format(port)
    assert notes[-1] == (f"MQTT: 0 predictions published to mqtt://127.0.0.1:{port} on edgeseq/nowhere/prediction, "
                         "50 still queued at exit (not delivered), 250 dropped beyond the queue of 50")
    assert "Traceback" not in err and "Error" not in err


def test_mqtts_checks_the_certificate_against_the_systems_cas(tmp_path, model):
    """A self-signed broker is refused (a note; the stream runs on) until its certificate is one
    of the CAs OpenSSL trusts (SSL_CERT_FILE stands in for the system's store here)."""
    if MOSQUITTO is None or shutil.which("openssl") is None:
        pytest.skip("mosquitto or openssl not installed (apt-get install mosquitto openssl)")
    _paho()
    b = Broker(tmp_path, tls=True).start()
    try:
        args = ["--model", model, "--rate", "0", "--max-readings", "20", "--json", "--mqtt", b.url, "--device", "tls"]
        env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
        out, err = _demo(args, env=env).communicate(timeout=60)
        assert json.loads(out.splitlines()[-1])["summary"]["mqtt"]["published"] == 0
        assert re.search(rf"MQTT: cannot reach {b.url} \(.*certificate verify failed.*\); the stream runs", err), err
        p = _demo(args, env={**env, "SSL_CERT_FILE": str(tmp_path / "cert.pem")})
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0 and f"MQTT: connected to {b.url}" in err, err
        assert json.loads(out.splitlines()[-1])["summary"]["mqtt"]["published"] == 20
    finally:
        b.stop()


def test_user_and_password_from_the_url_or_the_environment(tmp_path, model):
    if MOSQUITTO is None or shutil.which("mosquitto_passwd") is None:
        pytest.skip("mosquitto not installed (apt-get install mosquitto, or `make services` as root)")
    _paho()
    b = Broker(tmp_path, users={"sensor": "pa:ss word"}).start()
    try:
        args = ["--model", model, "--rate", "0", "--max-readings", "20", "--json", "--device", "auth"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("MQTT_")}
        url = f"mqtt://127.0.0.1:{b.port}"
        runs = {"wrong": (["--mqtt", f"mqtt://sensor:nope@127.0.0.1:{b.port}"], env),
                "url": (["--mqtt", f"mqtt://sensor:pa%3Ass%20word@127.0.0.1:{b.port}"], env),
                "env": (["--mqtt", url], {**env, "MQTT_USERNAME": "sensor", "MQTT_PASSWORD": "pa:ss word"})}
        got = {}
        for name, (extra, e) in runs.items():
            p = _demo(args + extra, env=e)
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0 and "pa:ss" not in err and "nope" not in err, err
            got[name] = json.loads(out.splitlines()[-1])["summary"]["mqtt"]["published"], err
        assert got["url"][0] == got["env"][0] == 20 and got["wrong"][0] == 0
        refused = [line for line in got["wrong"][1].splitlines() if "refused" in line]
        assert refused == [f"MQTT: mqtt://sensor@127.0.0.1:{b.port} refused the connection (Not authorized); check "
                           "the user name and password (in the URL, or MQTT_USERNAME / MQTT_PASSWORD); retrying"]
    finally:
        b.stop()


def _run_demo(argv, capsys):
    import runpy
    main = runpy.run_path(str(DEMO))["main"]
    with pytest.raises(SystemExit) as e:
        run_script(lambda: main(argv))
    return e.value.code, capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--mqtt", "http://broker:1883"], "--mqtt URL 'http://broker:1883' must start with mqtt:// or mqtts:// (TLS)"),
    (["--mqtt", "mqtt://"], "--mqtt URL 'mqtt://' names no host"),
    (["--mqtt", "mqtt://broker:70000"], "the port must be a whole number from 1 to 65535"),
    (["--mqtt", "mqtt://me:s3cret@broker:x"], "--mqtt URL 'mqtt://me:***@broker:x': the port must be"),
    (["--mqtt", "mqtt://broker/edgeseq/pi"], "has a path, query or fragment; give only the broker, and the topic "
                                             "with --topic"),
    (["--mqtt", "broker.local"], "must start with mqtt:// or mqtts://"),
    (["--mqtt", "mqtt://broker", "--topic", "edgeseq/#"], "--topic 'edgeseq/#' has a wildcard"),
    (["--mqtt", "mqtt://broker", "--device", "a/b"], "--device 'a/b' must not hold /"),
    (["--topic", "x", "--ha-discovery"], "--topic, --ha-discovery need --mqtt URL"),
    (["--mqtt", "mqtt://broker", "--mqtt-queue", "0"], "argument --mqtt-queue: 0 is below 1"),
])
def test_bad_mqtt_options_are_one_line_before_the_model_is_read(extra, message, capsys, tmp_path):
    code, err = _run_demo(["--model", str(tmp_path / "missing.onnx"), *extra], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("Error: ") and message in err, err
    assert "s3cret" not in err and "Traceback" not in err


def test_without_paho_the_runtime_imports_and_mqtt_is_one_line(model, tmp_path):
    script = f"""
import contextlib, io, runpy, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "paho":
            raise ModuleNotFoundError("No module named " + repr(name), name=name)
sys.meta_path.insert(0, Block())
from edgeseq.runtime.mqtt import parse_url
assert parse_url("mqtts://broker").port == 8883
def demo(*argv):
    sys.argv = ["pi_sensor_demo.py", "--model", {model!r}, "--max-readings", "3", "--rate", "0", *argv]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            runpy.run_path({str(DEMO)!r}, run_name="__main__")
        except SystemExit as e:
            return e.code, err.getvalue()
assert demo()[0] == 0
code, err = demo("--mqtt", "mqtt://127.0.0.1:1883")
assert "paho" not in str([m for m in sys.modules if m.startswith("paho")])
print(code, err, end="")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout == ('2 Error: --mqtt needs paho-mqtt: pip install paho-mqtt (or pip install ".[pi]" in a '
                        'clone)\n')


def test_broker_urls(monkeypatch):
    assert parse_url("mqtt://broker.local", env={}) == BrokerURL("mqtt", "broker.local", 1883, None, None)
    u = parse_url("mqtts://pi%40home:p%3Ass@broker.example.com", env={"MQTT_PASSWORD": "ignored"})
    assert (u.tls, u.port, u.username, u.password) == (True, 8883, "pi@home", "p:ss")
    assert u.shown == "mqtts://pi@home@broker.example.com:8883" and "p:ss" not in u.shown
    env = {"MQTT_USERNAME": "sensor", "MQTT_PASSWORD": "from-env"}
    assert parse_url("mqtt://10.0.0.2:1884/", env=env) == BrokerURL("mqtt", "10.0.0.2", 1884, "sensor", "from-env")
    assert parse_url("mqtt://ha@[::1]:1883", env=env) == BrokerURL("mqtt", "::1", 1883, "ha", "from-env")
    assert parse_url("mqtt://[::1]", env={}).shown == "mqtt://[::1]:1883"
    with pytest.raises(UsageError, match="MQTT_PASSWORD is set but no user name"):
        parse_url("mqtt://broker", env={"MQTT_PASSWORD": "x"})
    for bad in ("mqtt://broker:", "mqtt://broker:0", "mqtt://bro ker", "mqtt://broker?x=1", "mqtt://a..b",
                "mqtt://broker#frag", ""):
        with pytest.raises(UsageError):
            parse_url(bad, env={})
    for bad in ("", "a/+/b", "a/#", "a\0b"):
        with pytest.raises(UsageError):
            check_topic(bad)
    assert check_topic("edgeseq/Kitchen Pi/prediction") == "edgeseq/Kitchen Pi/prediction"


# -- a model with decision settings: its events and the device's state ------------------------
# On the embedded replay the trained GRU's decision layer (these settings) starts Badminton at
# reading 4 (a false alarm in the Standing series), ends it at 17, starts Running at 1010, and at
# readings 1909 and 1911 ends one event and starts another: two events, one state change each.
DECIDE = {"background": ["Standing"], "alpha": 0.5, "threshold": 0.6, "min_duration": 1, "release": 2}
EVENT_READINGS = 1950
EVENT_KEYS = {"device", "reading", "event", "label", "onset", "time"}


@pytest.fixture(scope="module")
def decided(exported, tmp_path_factory):
    """The session's exported GRU with decision settings (DECIDE), written onto a copy."""
    from edgeseq.runtime import StreamSession
    from edgeseq.runtime.decision import DecisionSpec
    from export.decision import write_decision
    plain = exported("gru")[0]
    spec = DecisionSpec.make(StreamSession(plain).labels, **DECIDE)
    return str(write_decision(plain, spec, tmp_path_factory.mktemp("decided") / "gru-decided.onnx"))


@pytest.fixture(scope="module")
def decided_reference(decided):
    """What StreamSession.push_events gives on the replay's first EVENT_READINGS readings:
    {"events": the demo's records ({"event", "label", "reading", "onset"}; readings counted from 1),
    "states": the state after each reading with events, repeats left out ("none": no event),
    "predictions": reading -> (label, prob rounded as the demo rounds it)}."""
    from edgeseq.runtime import StreamSession
    from edgeseq.runtime.live import open_source
    sess = StreamSession(decided)
    source = open_source("replay:basicmotions", sess.features)
    events, states, preds = [], [], {}
    for n in range(1, EVENT_READINGS + 1):
        probs, fired = sess.push_events(source.read())
        k = int(probs[0].argmax())
        preds[n] = (sess.labels[k], round(float(probs[0][k]), 5))
        for e in fired:
            assert e.position == n - 1
            events.append({"event": e.kind, "label": e.label, "reading": n, "onset": e.onset + 1})
        state = sess.decision_state()[0] or "none"
        if fired and states[-1:] != [state]:
            states.append(state)
    # What the tests below need of the replay: starts and ends, a reading with two events (so one
    # state change covers two events: a repeat to leave out), and a last state that is not "none".
    at = [e["reading"] for e in events]
    assert {e["event"] for e in events} == {"start", "end"} and len(set(at)) < len(at), events
    assert len(states) < len(events) and states[-1] != "none", states
    return {"events": events, "states": states, "predictions": preds}


def _events(messages: list) -> list:
    return [{k: m[k] for k in ("event", "label", "reading", "onset")} for m in map(json.loads, messages)]


def test_events_only_publishes_each_event_and_the_retained_state_as_it_changes(broker, decided, decided_reference):
    ref, device = decided_reference, "events-pi"
    sub = Subscriber(broker.port)
    p = _demo(["--model", decided, "--rate", "0", "--max-readings", EVENT_READINGS, "--json", "--mqtt", broker.url,
               "--device", device, "--events-only"])
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    summary = lines.pop()["summary"]
    assert [line for line in lines if "event" in line] == ref["events"]          # printed as they fired
    assert summary["events"] == len(ref["events"]) and summary["readings"] == EVENT_READINGS
    m = summary["mqtt"]
    assert (m["published"], m["queued"], m["dropped"]) == (len(ref["events"]) + len(ref["states"]), 0, 0), m
    sub.wait(lambda: len(sub.on(f"edgeseq/{device}/availability")) == 2, what="online, offline")
    sub.close()
    got = sub.on(f"edgeseq/{device}/event")
    assert _events(got) == ref["events"]                                          # in order, each once
    assert all(set(e) == EVENT_KEYS and e["device"] == device for e in map(json.loads, got)), got
    assert sub.on(f"edgeseq/{device}/prediction") == []
    assert sub.on(f"edgeseq/{device}/state") == ref["states"]                     # only the changes
    assert [t for t, _, _ in sub.messages if t.startswith("homeassistant/")] == []

    late = Subscriber(broker.port, f"edgeseq/{device}/state")                    # joins afterwards
    late.wait(lambda: len(late.messages) == 1, what="the retained state")
    time.sleep(0.2)                                                               # nothing more comes
    assert late.messages == [(f"edgeseq/{device}/state", ref["states"][-1], True)]
    late.close()


def test_events_come_besides_a_prediction_per_reading(broker, decided, decided_reference):
    ref, device = decided_reference, "both-pi"
    sub = Subscriber(broker.port)
    p = _demo(["--model", decided, "--rate", "0", "--max-readings", EVENT_READINGS, "--mqtt", broker.url,
               "--device", device])
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert [line for line in out.splitlines() if line.startswith("event ")] == [
        f"event {e['event']} {e['label']} at reading {e['reading']} (onset {e['onset']})" for e in ref["events"]]
    sub.wait(lambda: len(sub.on(f"edgeseq/{device}/availability")) == 2, what="online, offline")
    sub.close()
    preds = [json.loads(m) for m in sub.on(f"edgeseq/{device}/prediction")]
    assert [p["reading"] for p in preds] == list(range(1, EVENT_READINGS + 1))   # one per reading, in order
    assert {p["reading"]: (p["label"], p["prob"]) for p in preds} == ref["predictions"]
    assert _events(sub.on(f"edgeseq/{device}/event")) == ref["events"]
    assert sub.on(f"edgeseq/{device}/state") == ref["states"]
    # One queue: an event goes out right after its reading's prediction, before the next one.
    order = [(t.rsplit("/", 1)[1], json.loads(x)["reading"]) for t, x, _ in sub.messages
             if t.endswith(("/prediction", "/event"))]
    for i, (kind, reading) in enumerate(order):
        if kind == "event":
            assert ("prediction", reading) in order[:i] and ("prediction", reading + 1) not in order[:i], order[i]


def test_home_assistant_gets_the_activity_sensor_only_for_a_model_with_decision_settings(broker, decided, exported,
                                                                                       decided_reference):
    runs = {"ha-decided": decided, "ha-plain": str(exported("gru")[0])}
    for device, path in runs.items():
        p = _demo(["--model", path, "--rate", "0", "--max-readings", EVENT_READINGS, "--json", "--mqtt", broker.url,
                   "--device", device, "--ha-discovery"])
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    late = Subscriber(broker.port, "homeassistant/#")                             # what is retained
    late.wait(lambda: len(late.messages) == 5, what="2 + 3 retained discovery configs")
    time.sleep(0.2)
    configs = {t: json.loads(x) for t, x, retained in late.messages if retained}
    late.close()
    assert set(configs) == {f"homeassistant/sensor/{d}/{obj}/config" for d in runs
                            for obj in ("prediction", "probability")} | {
        "homeassistant/sensor/ha-decided/activity/config"}
    activity = configs["homeassistant/sensor/ha-decided/activity/config"]
    label = configs["homeassistant/sensor/ha-decided/prediction/config"]
    assert activity["state_topic"] == "edgeseq/ha-decided/state" and activity["name"] == "Activity"
    assert activity["availability_topic"] == "edgeseq/ha-decided/availability"
    assert activity["device"] == label["device"] and activity["device"]["model"] == "gru-decided.onnx"
    assert activity["unique_id"] == "edgeseq_ha-decided_activity" != label["unique_id"]
    assert label["state_topic"] == "edgeseq/ha-decided/prediction"
    state = Subscriber(broker.port, activity["state_topic"])                      # the sensor's value is there
    state.wait(lambda: len(state.messages) == 1, what="the retained state")
    assert state.messages == [("edgeseq/ha-decided/state", decided_reference["states"][-1], True)]
    state.close()
    nothing = Subscriber(broker.port, "edgeseq/ha-plain/state")
    time.sleep(0.3)
    assert nothing.messages == []
    nothing.close()


def test_events_only_needs_a_model_with_decision_settings(exported, capsys):
    _paho()
    code, err = _run_demo(["--model", str(exported("gru")[0]), "--mqtt", "mqtt://127.0.0.1:1", "--events-only"],
                          capsys)
    assert code == 2 and err == ("Error: without per-reading predictions only events are published, and this model "
                                 "has no decision settings; run `edgeseq calibrate` on it, or keep the "
                                 "predictions\n"), err
