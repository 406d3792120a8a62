"""Streaming sensor demo for a Raspberry Pi (or any machine): one reading per call, live.

    .venv/bin/python examples/pi_sensor_demo.py --model models/gru-int8.onnx --source serial:/dev/ttyUSB0 --rate 50
    .venv/bin/python examples/pi_sensor_demo.py --model models/gru-int8.onnx --source replay:basicmotions  # no hardware
    .venv/bin/python examples/pi_sensor_demo.py --model models/gru-int8.onnx --source replay:basicmotions \\
        --state-file /var/lib/edgeseq/gru.state --json
    .venv/bin/python examples/pi_sensor_demo.py --model models/gru-int8.onnx --source serial:/dev/ttyUSB0 \\
        --mqtt mqtt://homeassistant.local:1883 --ha-discovery        # predictions to an MQTT broker

Needs only the runtime install (numpy, onnxruntime; pyserial for serial sources, paho-mqtt for
--mqtt). Prints the prediction with its probability for every reading (or every --print-every), the latency
(median and p99 over the last 1,000 readings), the state bytes held, and late, dropped and bad
reading counts; where the source knows the true labels (the embedded replay, or a CSV whose
header has a `label` column) each line shows the true label and the summary scores them.
With --state-file the stream's state is written atomically every --save-every readings and
on Ctrl-C / SIGTERM, and a matching file is resumed on start (a replay source then continues
from the reading after the saved one). A state file that cannot
be used (another model, corrupt, values that do not fit) is moved aside to FILE.rejected
(.rejected.1, ... if taken), never overwritten; a symbolic link is followed. Sources: see
`edgeseq.runtime.live` (replay, csv, stdin, serial, sim, or your own driver class). A wrong
option or source is one `Error:` line and exit 2, a failure at run time exit 1.

With --mqtt URL (mqtt://[user:password@]host[:port], mqtts:// for TLS; user and password also
from MQTT_USERNAME / MQTT_PASSWORD; needs paho-mqtt) every prediction is also published as JSON
(device, reading, label, prob, true where known, latency_us, time) on --topic (default
edgeseq/<device>/prediction), QoS 1. The stream never waits for the broker: while it is away
predictions queue (up to --mqtt-queue, then the oldest are dropped and counted) and paho
reconnects in the background; a broker unreachable at start is a note on stderr, not an error.
--ha-discovery publishes Home Assistant discovery configs so the prediction shows as a sensor.
A model with decision settings (`edgeseq calibrate`) prints each event as it fires and, with
--mqtt, publishes it on edgeseq/<device>/event and the device's state (the active event's label,
or "none") on edgeseq/<device>/state, retained, shown in Home Assistant as the Activity sensor;
--events-only publishes those and no per-reading predictions.
The summary says how many were published, left queued and dropped. See `edgeseq.runtime.mqtt`.
"""

import argparse
import contextlib
import json
import math
import os
import sys

try:
    from edgeseq.errors import UsageError, printable, run_script
except ModuleNotFoundError as e:    # a Python without edgeseq (a bare `python`): one line naming the one to use
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # `python -I` leaves the script's folder out
    from _bootstrap import exit_naming_the_python
    exit_naming_the_python(e, __file__, "(`make demo` sets up .venv; on a device, `python3 -m venv .venv && .venv/bin/pip install '.[pi]'`)")


class Parser(argparse.ArgumentParser):
    """argparse whose own errors (unknown option, missing --model, a bad number) are one
    `Error: ... (see --help)` line with exit 2, like every other wrong request, instead of its
    usage block."""

    def error(self, message):
        raise UsageError(f"{' '.join(message.split())} (see --help)")


def main(argv=None):
    from edgeseq.runtime.live import MAX_RATE, MIN_RATE, check_rate
    from edgeseq.runtime.session import MAX_HISTORY

    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--source", default="replay:basicmotions")
    ap.add_argument("--rate", type=_number(float, 0), default=50.0,
                    help=f"readings per second for replay sources (0: unpaced; else {MIN_RATE:g} to {MAX_RATE:g})")
    ap.add_argument("--state-file")
    ap.add_argument("--save-every", type=_number(int, 1), default=500)
    ap.add_argument("--on-bad", choices=["skip", "error"], default="skip")
    ap.add_argument("--json", action="store_true", help="JSON lines on stdout")
    ap.add_argument("--print-every", type=_number(int, 1), default=1)
    ap.add_argument("--max-readings", type=_number(int, 1))
    ap.add_argument("--backend", choices=["auto", "onnxruntime", "native"], default=None,
                    help="step backend: native (compiled C step) where it can run, or onnxruntime "
                         "(default: auto, or $EDGESEQ_BACKEND)")
    ap.add_argument("--max-history", type=_number(int, 1, MAX_HISTORY),
                    help="Transformer: bound the cache (sliding window)")
    ap.add_argument("--mqtt", metavar="URL", help="publish predictions to this broker: mqtt://host[:port] or "
                                                  "mqtts://user:password@host (TLS)")
    ap.add_argument("--topic", help="MQTT topic (default: edgeseq/<device>/prediction)")
    ap.add_argument("--device", help="device name in topics and payloads (default: the host name)")
    ap.add_argument("--ha-discovery", action="store_true", help="publish Home Assistant MQTT discovery configs")
    ap.add_argument("--events-only", action="store_true",
                    help="publish only the events of the model's decision layer (edgeseq calibrate) and its state, "
                         "not a prediction per reading")
    ap.add_argument("--mqtt-queue", type=_number(int, 1), default=None,
                    help="predictions held while the broker is away before the oldest are dropped (default 10000)")
    args = ap.parse_args(argv)
    check_rate(args.rate)
    publisher = _publisher(args)
    from edgeseq.runtime import StreamSession
    from edgeseq.runtime.live import open_source, run_live, summary_lines
    from edgeseq.runtime.statefile import check_state_path, lock_state_file, resume_state

    if args.state_file is not None:
        source_file = args.source.split(":", 1)[1] if args.source.split(":", 1)[0] in ("csv", "replay") else None
        check_state_path(args.state_file, protect=(args.model, source_file))
    with lock_state_file(args.state_file) if args.state_file else contextlib.nullcontext() as state_file:
        sess = StreamSession(args.model, max_history=args.max_history, on_full="slide",  # a window never stops
                             backend=args.backend)
        if publisher:
            publisher.with_events(sess.decision is not None, anomaly=sess.meta.kind == "anomaly",
                                  targets=sess.meta.task["targets"] if sess.meta.kind == "regress" else None)
        if sess.backend_note:                   # why auto did not run the native step, as `edgeseq stream` says
            print(printable(f"note: onnxruntime backend, not native: {sess.backend_note}"), file=sys.stderr)
        model_hash = sess.model_sha256          # the bytes the session runs, read once
        start = 0
        if state_file:
            start = resume_state(args.state_file, sess, model_hash, note=lambda line: print(line, file=sys.stderr))
        source = open_source(args.source, sess.features, skip=start if args.source.startswith(("replay:", "csv:")) else 0)
        if publisher:
            publisher.start()
        try:
            summary = run_live(sess, source, rate=args.rate or None, on_bad=args.on_bad, as_json=args.json,
                               echo=lambda s: print(s, flush=True), state_file=state_file,
                               save_every=args.save_every, model_hash=model_hash, start_readings=start,
                               print_every=args.print_every, max_readings=args.max_readings,
                               on_prediction=publisher.publish if publisher else None,
                               on_event=publisher.publish_event if publisher else None)
        finally:
            if publisher:
                mqtt = publisher.stop()
    if publisher:
        summary["mqtt"] = mqtt
    if args.json:
        print(json.dumps({"summary": summary}), flush=True)
    for line in summary_lines(summary, sess.backend, sess.labels):
        print(line, file=sys.stderr)
    if publisher:
        from edgeseq.runtime.mqtt import summary_line
        print(summary_line(mqtt), file=sys.stderr)
    return 0


def _publisher(args):
    """The MQTT publisher --mqtt asks for (not connected yet), or None; UsageError for a bad URL,
    topic or device, an MQTT option without --mqtt, or paho-mqtt missing."""
    given = [f"--{name.replace('_', '-')}" for name in ("topic", "device", "ha_discovery", "mqtt_queue", "events_only")
             if getattr(args, name) not in (None, False)]
    if args.mqtt is None:
        if given:
            raise UsageError(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} --mqtt URL, "
                             "e.g. --mqtt mqtt://broker.local:1883")
        return None
    from edgeseq.runtime.mqtt import DEFAULT_QUEUE, MqttPublisher
    return MqttPublisher(args.mqtt, topic=args.topic, device=args.device, ha_discovery=args.ha_discovery,
                         max_queued=args.mqtt_queue or DEFAULT_QUEUE, model=os.path.basename(args.model),
                         predictions=not args.events_only,
                         note=lambda line: print(line, file=sys.stderr, flush=True))


def _number(kind, low, high=None):
    """An argparse type: a finite number of `kind` from `low` (to `high`), else one usage line
    naming the bound (NaN and inf are not numbers of readings or rates)."""
    def parse(text):
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            whole = "whole " if kind is int else ""
            raise argparse.ArgumentTypeError(f"'{printable(text[:30])}' is not a {whole}number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"'{printable(text[:30])}' is not a finite number")
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{value} is above {high:,}")
        return value
    return parse


if __name__ == "__main__":
    run_script(main)
