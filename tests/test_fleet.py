"""Who may publish to `edgeseq serve`'s server: each device's own credentials, allowed its own
readings only (NATS and MQTT), the gateway's own, and no password in any file a user shares or
any line the tools print. Against a real nats-server started per test on free loopback ports;
without nats-server or nats-py those tests skip and say why."""

import asyncio
import json
import os
import stat
import time

import numpy as np
import pytest

from edgeseq.errors import UsageError
from edgeseq.gateway.broker import LocalBroker, find_server, server_config
from edgeseq.gateway.fleet import GATEWAY_USER, Fleet, partition_of, redact

from helpers import HAVE_NATS_PY, needs_server, private
bcrypt = pytest.importorskip("bcrypt", reason="bcrypt not installed (pip install '.[gateway]')")


def test_the_fleet_keeps_password_hashes_only_in_private_files(tmp_path):
    f = Fleet(tmp_path / "fleet")
    pw = f.add_device("pump-7")
    text = f.file.read_text()
    assert pw not in text and bcrypt.checkpw(pw.encode(), f.devices()["pump-7"]["hash"].encode())
    user, gw = f.gateway_credentials()
    assert user == GATEWAY_USER and gw not in f.authorization_block(4) and gw not in text
    assert private(f.file) and private(f.gateway_file) and f.gateway_credentials() == (user, gw)
    with pytest.raises(UsageError, match="already in"):
        f.add_device("pump-7")
    pw2 = f.add_device("pump-7", rotate=True)
    assert pw2 != pw and not bcrypt.checkpw(pw.encode(), f.devices()["pump-7"]["hash"].encode())
    for bad in ("a.b", "", "x" * 129, "a b", ">", "*", GATEWAY_USER):
        with pytest.raises(UsageError):
            f.add_device(bad)
    with pytest.raises(UsageError, match="not in"):
        f.add_device("other", rotate=True)
    f.remove_device("pump-7")
    assert f.devices() == {}
    with pytest.raises(UsageError, match="not in"):
        f.remove_device("pump-7")


def test_a_damaged_fleet_file_is_one_line_and_never_half_read(tmp_path):
    f = Fleet(tmp_path / "fleet")
    f.add_device("a")
    for junk, what in (("{not json", "cannot be read"), ("[1]", "not an edgeseq fleet"),
                       (json.dumps({"devices": {"a.b": {"hash": "x"}}}), "damaged"),
                       (json.dumps({"devices": {"a": {}}}), "damaged")):
        f.file.write_text(junk)
        with pytest.raises(UsageError, match=what):
            f.authorization_block(4)
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="not a folder"):
        Fleet(tmp_path / "file")


def test_the_authorization_block_gives_each_device_an_account_and_its_own_subjects_only(tmp_path):
    """Each device in an account of its own: it may publish its own readings only (imported as
    exactly its partition's subject of the gateway's account) and subscribe to its own
    predictions, events and inboxes; the gateway's user, in account edgeseq, has no limits."""
    f = Fleet(tmp_path / "fleet")
    f.add_device("dev-a")
    f.add_device("dev-b")
    block = f.authorization_block(8)
    p = partition_of("dev-a", 8)
    start = block.index('"device_dev-a": {')
    account = block[start:block.index("\n  }", start)]
    assert 'publish: {allow: ["edgeseq.in.dev-a"]}' in account
    assert 'subscribe: {allow: ["edgeseq.out.dev-a", "edgeseq.out.dev-a.events", "_INBOX.>"]}' in account
    assert f'{{service: {{account: edgeseq, subject: "edgeseq.part.{p}.dev-a"}}, to: "edgeseq.in.dev-a"}}' in account
    assert "dev-b" not in account and account.count("import") == 1 and account.count("service:") == 1
    gw_line = next(x for x in block.splitlines() if GATEWAY_USER in x)
    assert "permissions" not in gw_line and block.index("  edgeseq: {") < block.index(GATEWAY_USER) < start


def test_a_server_beyond_loopback_needs_a_fleet(tmp_path):
    for host in ("0.0.0.0", "192.168.1.10", "::"):
        with pytest.raises(UsageError, match="without authorization"):
            server_config(tmp_path, 4222, 1883, 4, host=host)
    assert "accounts" not in server_config(tmp_path, 4222, 1883, 4, host="127.0.0.1")
    assert "accounts" in server_config(tmp_path, 4222, 1883, 4, host="0.0.0.0", fleet=Fleet(tmp_path / "f"))


def test_passwords_of_any_characters_are_hidden_in_urls():
    from edgeseq.runtime.mqtt import parse_url
    for pw in ("s3cretZq", "Zq9/xx", "p@ssZq", "a?b#cZq", "x:yZq", "Zq%2Fq"):
        for scheme in ("nats", "mqtt"):
            shown = redact(f"{scheme}://gw:{pw}@127.0.0.1:4222")
            assert "Zq" not in shown and shown == f"{scheme}://gw:***@127.0.0.1:4222", shown
        try:
            parse_url(f"mqtt://user:{pw}@broker.local:1883/")
        except UsageError as e:
            assert "Zq" not in str(e), str(e)
    assert redact("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"


def test_devices_cli_prints_a_password_once_and_lists_no_secret(runner):
    from edgeseq.cli import cli
    r = runner.invoke(cli, ["devices", "add", "pump-7", "--fleet", "f"])
    assert r.exit_code == 0, r.output
    pw = next(x.split(": ", 1)[1] for x in r.output.splitlines() if x.startswith("password: "))
    assert len(pw) >= 40 and bcrypt.checkpw(pw.encode(), Fleet("f").devices()["pump-7"]["hash"].encode())
    r = runner.invoke(cli, ["devices", "list", "--fleet", "f"])
    assert r.exit_code == 0 and "pump-7" in r.output and pw not in r.output
    r = runner.invoke(cli, ["devices", "add", "pump-7", "--fleet", "f"])
    assert r.exit_code == 2 and "--rotate" in r.output and len(r.output.strip().splitlines()) == 1
    r = runner.invoke(cli, ["devices", "add", "a.b", "--fleet", "f"])
    assert r.exit_code == 2 and "letters, digits" in r.output
    for reserved in ("_", "-x"):
        r = runner.invoke(cli, ["devices", "add", "--fleet", "f", "--", reserved])
        assert r.exit_code == 2 and "start it with a letter or digit" in r.output, r.output
    assert runner.invoke(cli, ["devices", "remove", "pump-7", "--fleet", "f"]).exit_code == 0
    assert Fleet("f").devices() == {}


# -- against a real server ---------------------------------------------------------------------

@pytest.fixture
def fleet_broker(tmp_path):
    if find_server() is None or not HAVE_NATS_PY:
        pytest.skip("nats-server or nats-py not installed (`make test` installs them)")
    fleet = Fleet(tmp_path / "fleet")
    passwords = {d: fleet.add_device(d) for d in ("dev-a", "dev-b")}
    with LocalBroker(tmp_path / "nats", partitions=4, fleet=fleet) as b:
        yield b, passwords


async def _refused(url: str) -> bool:
    import nats
    try:
        nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=5)
    except Exception as e:  # noqa: BLE001 - nats-py raises a plain Error for 'Authorization Violation'
        return "authorization" in str(e).lower()
    await nc.close()
    return False


def _mqtt_connect(port, user=None, password=None, client_id="edgeseq-test"):
    """(client, the CONNACK's reason code as text)."""
    mqtt = pytest.importorskip("paho.mqtt.client", reason="paho-mqtt not installed (pip install paho-mqtt)")
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id)
    if user:
        c.username_pw_set(user, password)
    acks = []
    c.on_connect = lambda cl, ud, flags, rc, props: acks.append(str(rc))
    c.connect("127.0.0.1", port)
    c.loop_start()
    deadline = time.monotonic() + 30
    while not acks and time.monotonic() < deadline:
        time.sleep(0.02)
    return c, (acks or ["no answer"])[0]


@needs_server
def test_only_a_devices_own_credentials_publish_its_readings(fleet_broker, exported):
    """dev-a (NATS, each reading acknowledged by the stream) and dev-b (MQTT) each publish their
    own readings; dev-a's forged readings for dev-b, before and after the partition mapping, its
    write to dev-b's stored state, and its own readings sent with a reply subject it may not
    write to, where the stream's acknowledgement goes as the server (another device's state and
    readings, the deployment record, a lease, the JetStream API, dev-b's predictions) change
    nothing: that subject is in dev-a's own account. An anonymous client or a wrong password
    gets nothing in. The predictions are exactly one session per device."""
    import nats

    from edgeseq.gateway import devices, wire
    from edgeseq.gateway.fleet import with_credentials
    from edgeseq.runtime.session import StreamSession

    from test_gateway import _check_equal, _readings, _run_gateway
    broker, pw = fleet_broker
    model = str(exported("gru")[0])
    X = _readings(StreamSession(model).n_features, devices=2, T=5)
    X = {"dev-a": X["dev-0"], "dev-b": X["dev-1"]}
    errors = []

    async def body(gw):
        assert await _refused(broker.url)
        assert await _refused(with_credentials(broker.url, "dev-a", pw["dev-b"]))
        assert await _refused(with_credentials(broker.url, GATEWAY_USER, pw["dev-a"]))
        for user, password in ((None, None), ("dev-b", pw["dev-a"]), ("dev-b", "")):
            c, rc = _mqtt_connect(broker.mqtt_port, user, password, client_id=f"x-{user}")
            c.loop_stop()
            c.disconnect()
            assert rc != "Success", (user, rc)
        await devices.replay(broker.url, {"dev-a": X["dev-a"]}, passwords=pw, acked=True)

        async def note(e):
            errors.append(str(e))
        a = await nats.connect(with_credentials(broker.url, "dev-a", pw["dev-a"]), error_cb=note,
                               allow_reconnect=False)
        forged = wire.encode_reading(5, np.zeros(X["dev-a"].shape[1]))
        for subject in ("edgeseq.in.dev-b", f"edgeseq.part.{partition_of('dev-b', 4)}.dev-b",
                        f"edgeseq.part.{(partition_of('dev-a', 4) + 1) % 4}.dev-a",
                        f"$KV.{wire.STATE_BUCKET}.d.dev-b", "$JS.API.STREAM.PURGE.EDGESEQ_IN",
                        f"$JS.API.STREAM.PURGE.{wire.readings_stream(partition_of('dev-b', 4))}", "edgeseq.out.dev-b"):
            await a.publish(subject, forged)
        await a.flush()
        c, rc = _mqtt_connect(broker.mqtt_port, "dev-b", pw["dev-b"], client_id="dev-b")
        assert rc == "Success", rc
        for t in range(5):
            c.publish("edgeseq/in/dev-b", wire.encode_reading(t, X["dev-b"][t]), qos=1).wait_for_publish(10)
        c.publish("edgeseq/in/dev-a", forged, qos=1).wait_for_publish(10)
        got = await devices.predictions(broker.gateway_url, 10, timeout=90)
        # its own subject, with a reply subject where it may not write: JetStream would answer
        # there as the server. A repeat of reading 0, so nothing else changes.
        again = wire.encode_reading(0, X["dev-a"][0])
        for reply in (f"$KV.{wire.STATE_BUCKET}.d.dev-b", f"$KV.{wire.STATE_BUCKET}.config",
                      f"$KV.{wire.LEASE_BUCKET}.part.0", "$JS.API.STREAM.PURGE.EDGESEQ_OUT", "edgeseq.out.dev-b",
                      "edgeseq.in.dev-b", f"edgeseq.part.{partition_of('dev-b', 4)}.dev-b",
                      f"$JS.API.STREAM.DELETE.{wire.readings_stream(partition_of('dev-b', 4))}"):
            await a.publish("edgeseq.in.dev-a", again, reply=reply)
        await a.flush()
        await asyncio.sleep(1.0)                              # anything forged would have arrived by now
        got = await devices.predictions(broker.gateway_url, 11, timeout=2)
        g = await nats.connect(broker.gateway_url)
        js = g.jetstream()
        out = (await js.stream_info(wire.PREDICTIONS)).state.messages
        config = json.loads((await (await js.key_value(wire.STATE_BUCKET)).get("config")).value)
        lease = (await (await js.key_value(wire.LEASE_BUCKET)).get("part.0")).value
        await js.stream_info(wire.readings_stream(partition_of("dev-b", 4)))    # not deleted
        await g.close()
        c.loop_stop()
        c.disconnect()
        await a.close()
        return got, out, config, lease
    gw, (got, out, config, lease) = asyncio.run(_run_gateway(model, broker.gateway_url, body,
                                                             acknowledge_readings=True))
    _check_equal(got, devices.reference(model, X))
    assert out == 10 and config["partitions"] == 4 and lease == gw.name.encode()
    assert gw.stats["readings"] == 10 and gw.stats["dead"] == 0 and gw.stats["duplicates"] == 8, gw.stats
    assert sum("permissions violation" in e for e in errors) == 7, errors


def test_a_device_cannot_have_a_neighbours_readings_dropped_as_duplicates(tmp_path, exported):
    """Two devices share a partition's stream. The attacker sends readings with the ids its
    neighbour would use (`Nats-Msg-Id`, which the stream's duplicate window would match): the
    neighbour's acknowledged readings carry no id (`devices.replay(acked=True)`) and are all
    predicted, and even a device that does send that id is stored once the 0.1 s window is past."""
    if find_server() is None or not HAVE_NATS_PY:
        pytest.skip("nats-server or nats-py not installed (`make test` installs them)")
    import nats

    from edgeseq.gateway import devices, wire
    from edgeseq.gateway.fleet import with_credentials
    from edgeseq.runtime.session import StreamSession
    from test_gateway import _check_equal, _readings, _run_gateway
    assert partition_of("dev-0", 4) == partition_of("dev-4", 4)
    fleet = Fleet(tmp_path / "fleet")
    pw = {d: fleet.add_device(d) for d in ("dev-0", "dev-4")}
    model = str(exported("gru")[0])
    X = _readings(StreamSession(model).n_features, devices=1, T=6)
    victim = {"dev-4": X["dev-0"]}
    headers = []
    with LocalBroker(tmp_path / "nats", partitions=4, fleet=fleet) as broker:
        async def body(gw):
            g = await nats.connect(broker.gateway_url)

            async def seen(msg):
                if msg.subject.endswith(".dev-4"):
                    headers.append(dict(msg.headers or {}))
            await g.subscribe(f"{wire.PART_SUBJECT}.>", cb=seen)
            a = await nats.connect(with_credentials(broker.url, "dev-0", pw["dev-0"]))
            ja = a.jetstream()
            junk = wire.encode_reading(0, np.zeros(X["dev-0"].shape[1]))
            for i in range(6):                                  # ids a device might use
                await ja.publish(wire.reading_subject("dev-0"), junk, headers={"Nats-Msg-Id": f"dev-4:{i}"})
            await devices.replay(broker.url, victim, passwords={"dev-4": pw["dev-4"]}, acked=True)
            got = await devices.predictions(broker.gateway_url, 7, timeout=60)
            await asyncio.sleep(0.3)                            # past the readings streams' duplicate window
            b = await nats.connect(with_credentials(broker.url, "dev-4", pw["dev-4"]))
            ack = await b.jetstream().publish(wire.reading_subject("dev-4"), wire.encode_reading(6, X["dev-0"][5]),
                                              headers={"Nats-Msg-Id": "dev-4:0"})
            for _ in range(100):                                # its copy on the partition subject reaches g
                if len(headers) >= 7:                           # after the ack: wait for it, not for a fixed time
                    break
                await asyncio.sleep(0.05)
            for c in (a, b, g):
                await c.close()
            return got, ack
        gw, (got, ack) = asyncio.run(_run_gateway(model, broker.gateway_url, body, acknowledge_readings=True))
    assert not ack.duplicate
    _check_equal(got, devices.reference(model, victim))
    assert len(headers) >= 7 and not any("Nats-Msg-Id" in h for h in headers[:6]), headers


@needs_server
def test_a_fleet_change_restarts_the_server_and_an_acknowledging_device_loses_nothing(fleet_broker, exported):
    """A device added while readings flow restarts the server (`LocalBroker.reload`): the
    gateway and a device publishing with acknowledgements reconnect, and every reading is
    predicted once, equal to one session. The store stays locked across the restart: a second
    server on it is refused in one line."""
    from edgeseq.gateway import devices
    from edgeseq.runtime.session import StreamSession
    from test_gateway import _check_equal, _readings, _run_gateway
    broker, pw = fleet_broker
    model = str(exported("gru")[0])
    X = _readings(StreamSession(model).n_features, devices=1, T=40)
    X = {"dev-a": X["dev-0"]}

    async def body(gw):
        sending = asyncio.ensure_future(devices.replay(broker.url, X, rate_hz=20, passwords=pw, acked=True,
                                                       patience=60))
        await asyncio.sleep(0.5)
        broker.fleet.add_device("dev-z")
        assert await asyncio.get_running_loop().run_in_executor(None, broker.reload)
        await sending
        return await devices.predictions(broker.gateway_url, 40, timeout=60)
    gw, got = asyncio.run(_run_gateway(model, broker.gateway_url, body, acknowledge_readings=True))
    _check_equal(got, devices.reference(model, X))
    with pytest.raises(UsageError, match="is in use by another running nats-server of edgeseq"):
        LocalBroker(broker.workdir, partitions=4).start()


@needs_server
def test_a_device_added_while_the_server_runs_is_admitted_and_a_removed_one_refused(fleet_broker):
    from edgeseq.gateway.fleet import with_credentials
    broker, _ = fleet_broker
    pw = broker.fleet.add_device("dev-c")
    url = with_credentials(broker.url, "dev-c", pw)
    assert asyncio.run(_refused(url))                         # the server has not reloaded yet
    assert broker.reload() and not broker.reload()            # once per change

    async def admitted():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not await _refused(url):
                return True
            await asyncio.sleep(0.1)
        return False
    assert asyncio.run(admitted())
    broker.fleet.remove_device("dev-c")
    assert broker.reload()

    async def refused():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if await _refused(url):
                return True
            await asyncio.sleep(0.1)
        return False
    assert asyncio.run(refused())


@needs_server
def test_partition_of_is_the_servers_mapping(tmp_path):
    import nats
    ids = [f"d{i}-{'x' * (i % 7)}" for i in range(40)] + ["pump-7", "A_b-C"]

    async def run(url):
        nc = await nats.connect(url)
        got = {}

        async def cb(m):
            got[m.subject.split(".", 3)[3]] = int(m.subject.split(".")[2])
        await nc.subscribe("edgeseq.part.>", cb=cb)
        for d in ids:
            await nc.publish(f"edgeseq.in.{d}", b"x")
        await nc.flush()
        deadline = time.monotonic() + 30
        while len(got) < len(ids) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await nc.close()
        return got
    with LocalBroker(tmp_path / "nats", partitions=16, mqtt=False) as b:
        got = asyncio.run(run(b.url))
    assert got == {d: partition_of(d, 16) for d in ids}


@needs_server
def test_serve_says_when_its_credentials_are_refused_and_never_prints_a_password(fleet_broker, runner, exported):
    from edgeseq.cli import cli
    from edgeseq.gateway.broker import free_port
    from edgeseq.gateway.fleet import with_credentials
    broker, _ = fleet_broker
    model = str(exported("gru")[0])
    for url, code, text in ((with_credentials(broker.url, GATEWAY_USER, "Zq9/wrong"), 1, "refused the gateway's"),
                            (broker.url, 1, "refused the gateway's"),
                            (f"nats://gw:Zq9/x@127.0.0.1:{free_port()}", 2, "percent-encoded"),
                            (f"nats://gw:Zq9%2Fx@127.0.0.1:{free_port()}", 1, "cannot reach")):
        r = runner.invoke(cli, ["serve", model, "--nats", url, "--fleet", "elsewhere", "--duration", "30",
                                "--partitions", "4"])
        assert r.exit_code == code and text in r.output, r.output
        assert "Zq9" not in r.output and "Zq9%2F" not in r.output, r.output
    r = runner.invoke(cli, ["serve", model, "--print-config", "--fleet", str(broker.fleet.root)])
    assert r.exit_code == 0 and "accounts {" in r.output and broker.fleet.gateway_credentials()[1] not in r.output


def test_damaged_shapes_and_the_gateways_name_in_the_fleet_are_refused(tmp_path):
    f = Fleet(tmp_path / "fleet")
    f.add_device("a")
    for junk in (json.dumps({"devices": ["a"]}), "[" * 100_000 + "]" * 100_000,
                 json.dumps({"devices": {GATEWAY_USER: {"hash": "x"}}})):
        f.file.write_text(junk)
        for call in (lambda: f.add_device("b"), f.devices, lambda: f.authorization_block(4)):
            with pytest.raises(UsageError):
                call()


def test_a_folder_that_exists_keeps_its_mode_and_a_new_one_is_private(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    Fleet(shared).add_device("a")
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o755 and private(shared / "fleet.json")
    Fleet(tmp_path / "new").add_device("a")
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700
    with pytest.raises(UsageError, match="not in"):
        Fleet(tmp_path / "none").remove_device("a")
    assert not (tmp_path / "none").exists()


def test_url_credentials_are_decoded_and_tokens_hidden():
    from edgeseq.errors import redact_url
    from edgeseq.gateway.service import _credentials
    assert _credentials("nats://gw:p%2Fa%40s%23s%3Fx%25y@127.0.0.1:4222") == (
        "nats://127.0.0.1:4222", {"user": "gw", "password": "p/a@s#s?x%y"})
    assert _credentials("nats://s3cret@h:1") == ("nats://h:1", {"token": "s3cret"})
    assert _credentials("nats://h:1") == ("nats://h:1", {})
    for url in ("gw:Zq9secret@127.0.0.1:1", "nats:/gw:Zq9secret@h", "nats://Zq9token@h:1", "tls://a:Zq9@b@h:1"):
        assert "Zq9" not in redact_url(url), redact_url(url)


@needs_server
def test_a_gateway_whose_credentials_change_while_it_runs_stops(fleet_broker, exported):
    from edgeseq.errors import EdgeseqError

    from test_gateway import _run_gateway
    broker, _ = fleet_broker
    model = str(exported("gru")[0])

    async def body(gw):
        broker.fleet.gateway_file.unlink()                    # a new gateway password, the old one refused
        broker.fleet.gateway_credentials()
        assert await asyncio.get_running_loop().run_in_executor(None, broker.reload)
        deadline = time.monotonic() + 60
        while not gw.refused and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
    with pytest.raises(EdgeseqError, match="no longer accepts the gateway's credentials"):
        asyncio.run(_run_gateway(model, broker.gateway_url, body))


def _self_signed(tmp_path):
    """A self-signed certificate for 127.0.0.1 and localhost (openssl, as docs/gateway.md shows)."""
    import shutil
    import subprocess
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed (apt-get install openssl)")
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=edgeseq",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


@needs_server
def test_tls_carries_nats_and_mqtt_and_a_client_without_it_or_the_ca_is_refused(tmp_path, exported):
    """`serve --tls-cert --tls-key`: the server takes TLS only, on NATS and MQTT. A device
    publishes over mqtts:// checking the certificate; the gateway connects over tls:// with
    --tls-ca; plain NATS is refused, and a gateway without the CA stops with one line that
    says to give --tls-ca. The predictions are one session's."""
    import ssl

    import nats

    from edgeseq.errors import EdgeseqError
    from edgeseq.gateway import devices, wire
    from edgeseq.gateway.fleet import with_credentials
    from edgeseq.runtime.session import StreamSession

    from test_gateway import _check_equal, _readings, _run_gateway
    cert, key = _self_signed(tmp_path)
    fleet = Fleet(tmp_path / "fleet")
    pw = fleet.add_device("dev-b")
    model = str(exported("gru")[0])
    X = _readings(StreamSession(model).n_features, devices=2, T=5)
    X = {"dev-b": X["dev-1"]}
    with LocalBroker(tmp_path / "nats", partitions=4, fleet=fleet, tls=(cert, key)) as broker:
        assert broker.url.startswith("tls://") and broker.mqtt_url.startswith("mqtts://")
        assert "tls {" in (broker.workdir / "nats.conf").read_text()
        ctx = ssl.create_default_context(cafile=str(cert))
        plain = with_credentials(broker.url.replace("tls://", "nats://"), *fleet.gateway_credentials())

        async def body(gw):
            import paho.mqtt.client as mqtt
            try:                                    # no TLS: refused by the server
                nc = await nats.connect(plain, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=5)
                await nc.close()
                plain_ok = True
            except Exception:  # noqa: BLE001 - nats-py raises several kinds for a refused handshake
                plain_ok = False
            c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="dev-b")
            c.username_pw_set("dev-b", pw)
            c.tls_set(ca_certs=str(cert))
            c.connect("127.0.0.1", broker.mqtt_port)
            c.loop_start()
            for t in range(5):
                c.publish("edgeseq/in/dev-b", wire.encode_reading(t, X["dev-b"][t]), qos=1).wait_for_publish(10)
            nc = await nats.connect(broker.gateway_url, tls=ctx)
            sub = await nc.jetstream().subscribe(f"{wire.OUT_SUBJECT}.>", stream=wire.PREDICTIONS,
                                                 ordered_consumer=True)
            got: dict = {}
            while sum(map(len, got.values())) < 5:
                for p in wire.predictions_of((await sub.next_msg(timeout=60)).data):
                    got.setdefault(p["device"], {})[p["seq"]] = p
            await nc.close()
            c.loop_stop()
            c.disconnect()
            return plain_ok, got
        gw, (plain_ok, got) = asyncio.run(_run_gateway(model, broker.gateway_url, body, tls_ca=str(cert)))
        assert not plain_ok
        _check_equal(got, devices.reference(model, X))
        with pytest.raises(EdgeseqError, match=r"TLS with the NATS server at tls://.*failed \(.*certificate.*\).*"
                                               r"--tls-ca"):
            asyncio.run(_run_gateway(model, broker.gateway_url, lambda gw: None))


def test_tls_settings_are_checked_in_one_line(tmp_path, runner, exported):
    from edgeseq.cli import cli
    (tmp_path / "junk.pem").write_text("not a certificate")
    for conf, what in (((tmp_path / "junk.pem", tmp_path / "junk.pem"), "--tls-cert .*not a PEM file"),
                       ((tmp_path / "missing.pem", tmp_path / "junk.pem"), "--tls-cert .*missing.pem: No such file")):
        with pytest.raises(UsageError, match=what):
            server_config(tmp_path, 4222, 1883, 4, tls=conf)
    model = str(exported("gru")[0])
    for args, what in ((["--tls-cert", "c.pem"], "give both --tls-cert and --tls-key"),
                       (["--tls-cert", "c.pem", "--tls-key", "k.pem", "--nats", "tls://127.0.0.1:1"],
                        "with --nats, TLS is that server's")):
        r = runner.invoke(cli, ["serve", model, *args, "--duration", "1"])
        assert r.exit_code == 2 and what in r.output, r.output


@needs_server
def test_a_tls_url_to_a_server_without_tls_sends_no_credentials(tmp_path, exported):
    """--nats tls://... at a server whose greeting does not require TLS: refused in one line
    before the gateway's password is sent (nats-py would send it in the clear)."""
    from edgeseq.errors import EdgeseqError

    from test_gateway import _run_gateway
    cert, _ = _self_signed(tmp_path)
    with LocalBroker(tmp_path / "nats", partitions=4) as b:
        url = b.url.replace("nats://", "tls://gw:secret@")
        with pytest.raises(EdgeseqError, match="does not offer TLS .*refusing to send the gateway's credentials") as e:
            asyncio.run(_run_gateway(str(exported("gru")[0]), url, lambda gw: None, tls_ca=str(cert)))
        assert "secret" not in str(e.value)


def test_a_node_list_mixing_tls_and_plain_is_refused(exported):
    """Credentials in --nats go to every node: a list with a nats:// node beside tls:// ones
    would send them in the clear there."""
    import socket
    pytest.importorskip("nats", reason="nats-py not installed")

    from test_gateway import _run_gateway
    with socket.socket() as a, socket.socket() as b:             # listening, so the nodes can be reached
        for s in (a, b):
            s.bind(("127.0.0.1", 0))
            s.listen()
        url = f"tls://gw:secret@127.0.0.1:{a.getsockname()[1]},nats://127.0.0.1:{b.getsockname()[1]}"
        with pytest.raises(UsageError, match="mixes tls:// and nats:// nodes") as e:
            asyncio.run(_run_gateway(str(exported("gru")[0]), url, lambda gw: None))
        assert "secret" not in str(e.value)
