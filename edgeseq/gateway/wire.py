"""What travels between devices, brokers and gateways: subjects, readings, predictions and
the per-device state kept in JetStream's key-value store.

- A reading: subject `edgeseq.in.<device>` (MQTT topic `edgeseq/in/<device>`), payload JSON
  `{"seq": 17, "x": [0.1, -2.0, ...]}`: `seq` the device's own reading number (whole, >= 0,
  rising by one), `x` the reading (the model's features, real numbers). Several readings in one
  message (the telemetry convention: fewer, larger messages): `{"seq": 17, "x": [[...], [...]]}`,
  numbered 17, 18, ..., at most MAX_READINGS. `{"seq": n, "reset":
  true}` (with or without `x`) starts the device over: its state is zeroed before `x`, if any,
  and its numbering starts again at that `seq` (a device that rebooted sends seq 0 with reset);
  a reset received again before any later reading of the device (an MQTT QoS 1 redelivery) is
  applied once.
- A prediction: subject `edgeseq.out.<device>` (MQTT `edgeseq/out/<device>`), payload JSON
  `{"device", "seq", "boot", "position", "label", "prob"}`, header `Nats-Msg-Id:
  <device>:<boot>:<seq>` (`boot` counts the device's resets) so JetStream drops a prediction
  published twice (after a gateway takes a partition over) but never one after a reboot that
  counts from 0 again. A message of several readings gets one message of their predictions,
  `{"device", "boot", "seq": [...], "position": [...], "label": [...], "prob": [...]}`, its id
  the first `seq`'s (`predictions_of` reads either kind).
- An event of the model's decision layer (`edgeseq calibrate`): subject
  `edgeseq.out.<device>.events` (MQTT `edgeseq/out/<device>/events`), payload JSON `{"device",
  "boot", "seq", "position", "event": "start" | "end", "label", "onset"}`, id
  `<device>:<boot>:<seq>:<event>`.
- A malformed message goes to `edgeseq.dead.<device>` (`edgeseq.dead._.invalid` when the device
  id itself is bad) as received, with the reason in header `Edgeseq-Error`.
- A device's state: key `d.<device>` in bucket `edgeseq_state`, an .npz (numpy's format,
  read with allow_pickle=False: it can hold arrays only, never code) of the session's state
  rows, position, the last `seq` applied, the model's sha256 and its rate limit's token bucket.
"""

from __future__ import annotations

import io
import json
import math
import re

import numpy as np

READINGS, PREDICTIONS, DEAD = "EDGESEQ_IN", "EDGESEQ_OUT", "EDGESEQ_DEAD"
STATE_BUCKET, LEASE_BUCKET = "edgeseq_state", "edgeseq_leases"
IN_SUBJECT, PART_SUBJECT, OUT_SUBJECT, DEAD_SUBJECT = "edgeseq.in", "edgeseq.part", "edgeseq.out", "edgeseq.dead"
MAX_DEVICE = 128
MAX_SEQ = 2 ** 53
MAX_READINGS = 1000             # readings one message may carry
_DEVICE = re.compile(r"[A-Za-z0-9_-]+")
_NUMBERS = {int, float}


def readings_stream(p: int) -> str:
    """The JetStream stream holding partition p's readings (subjects edgeseq.part.<p>.*)."""
    return f"{READINGS}_{p}"


class BadMessage(ValueError):
    """A message the gateway cannot use; its text is the reason sent with the dead letter."""


def is_device(device) -> bool:
    """Whether `device` can be a device id (see `check_device`)."""
    return isinstance(device, str) and 0 < len(device) <= MAX_DEVICE and bool(_DEVICE.fullmatch(device))


def check_device(device: str) -> str:
    """A device id as it may appear in a subject: letters, digits, `-` and `_`, at most MAX_DEVICE
    characters. Raises BadMessage otherwise."""
    if not is_device(device):
        raise BadMessage(f"device id {device!r} must be 1-{MAX_DEVICE} letters, digits, '-' or '_'")
    return device


def reading_subject(device: str) -> str:
    return f"{IN_SUBJECT}.{check_device(device)}"


def encode_reading(seq: int, x, reset: bool = False) -> bytes:
    """A reading message's payload (JSON bytes): `x` one reading [features] or several in order
    [k, features], numbered seq, seq + 1, ..."""
    a = np.asarray(x, np.float64)
    msg = {"seq": int(seq), "x": [[float(v) for v in row] for row in a] if a.ndim == 2 else
           [float(v) for v in a.ravel()]}
    if reset:
        msg["reset"] = True
    return json.dumps(msg, separators=(",", ":")).encode()


def parse_reading(payload: bytes, features: int) -> tuple[int, np.ndarray | None, bool]:
    """(seq, x float32 [k, features] or None, reset) from a reading payload: `x` one reading (a
    list of `features` numbers, k = 1) or several in order (a list of up to MAX_READINGS such
    lists, numbered seq, seq + 1, ...). Raises BadMessage saying what is wrong: not JSON, not an
    object, seq missing or not a whole number in 0..2**53, x missing (without reset), not a
    list of `features` real numbers (or a list of such lists)."""
    try:
        msg = json.loads(payload)
    except Exception as e:  # noqa: BLE001 - bad bytes, bad JSON, nesting too deep: all one answer
        raise BadMessage(f"not JSON ({type(e).__name__}); send {{\"seq\": n, \"x\": [...]}}") from None
    if not isinstance(msg, dict):
        raise BadMessage("a reading is a JSON object {\"seq\": n, \"x\": [...]}")
    seq = msg.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_SEQ:
        raise BadMessage(f"'seq' must be a whole number from 0 to 2**53, got {seq!r}")
    reset = msg.get("reset", False)
    if not isinstance(reset, bool):
        raise BadMessage(f"'reset' must be true or false, got {reset!r}")
    x = msg.get("x")
    if x is None:
        if reset:
            return seq, None, True
        raise BadMessage("no 'x': a reading needs its values as a list")
    rows = x if type(x) is list and x and type(x[0]) is list else [x]
    if len(rows) > MAX_READINGS:
        raise BadMessage(f"'x' holds {len(rows)} readings; send at most {MAX_READINGS} a message")
    if seq + len(rows) - 1 > MAX_SEQ:
        raise BadMessage("'seq' of the message's last reading is beyond 2**53")
    for i, r in enumerate(rows):
        at = f" (reading {i + 1} of {len(rows)})" if len(rows) > 1 else ""
        if type(r) is not list or len(r) != features:
            got = f"{len(r)} values" if isinstance(r, list) else type(r).__name__
            raise BadMessage(f"'x' must be a list of {features} numbers (or a list of such lists), got {got}{at}")
        if not {type(v) for v in r} <= _NUMBERS:
            raise BadMessage(f"'x' holds something that is not a number{at}")
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            a = np.array(rows, np.float32)
    except (OverflowError, ValueError):
        raise BadMessage("'x' holds a number too large for float32") from None
    if not np.isfinite(a).all():
        raise BadMessage("'x' holds NaN or Infinity" if not all(math.isfinite(v) for r in rows for v in r) else
                         "'x' holds a number too large for float32")
    return seq, a, reset


def _ack_field(reply: str, i: int) -> int:
    """Field `i` of a JetStream acknowledgement subject's numbers
    ($JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>, or with domain and
    account after $JS.ACK): 0 delivered, 1 sseq, 2 cseq, 3 time. 0 if it has none."""
    t = (reply or "").split(".")
    try:
        return int(t[4 + i] if len(t) == 9 else t[6 + i])
    except (IndexError, ValueError):
        return 0


def stream_seq(reply: str) -> int:
    """The stream sequence of a JetStream message from its acknowledgement subject. 0 if it has none."""
    return _ack_field(reply, 1)


def stored_ns(reply: str) -> int:
    """JetStream's storage time of a message (ns since the epoch) from its acknowledgement
    subject. 0 if it has none."""
    return _ack_field(reply, 3)


def dead_subject(device: str) -> str:
    """Where a dead letter goes: edgeseq.dead.<device>, or edgeseq.dead._.invalid for a message
    whose device id cannot be one (two tokens: no device's subject)."""
    try:
        return f"{DEAD_SUBJECT}.{check_device(device)}"
    except BadMessage:
        return f"{DEAD_SUBJECT}._.invalid"


def _value(v, digits: int = 0) -> float | None:
    """A prediction's number for JSON: rounded to 6 decimals (`digits`: to that many significant
    digits, a regression model's values at any scale), None (null) where there is none (an anomaly
    model's level while the device learns its baseline); a list (several targets) item by item."""
    if isinstance(v, (list, tuple)):
        return [_value(x, digits) for x in v]
    if v is None or v != v:
        return None
    return float(f"{float(v):.{digits}g}") if digits else round(float(v), 6)


def encode_prediction(device: str, seq: int, position: int, label: str, prob: float | None, boot: int = 0,
                      key: str = "prob") -> bytes:
    """A prediction message's payload (JSON bytes); `label` is JSON-escaped (json.dumps). For an
    anomaly model (`key` "level") `label` is the device's state (learning, normal, anomaly) and
    "level" its level in standard deviations of its learnt score (null while learning); for a
    regression model (`key` "value") the target's name and its value (several: "targets" and a list)."""
    return (f'{{"device":"{device}","seq":{int(seq)},"boot":{int(boot)},"position":{int(position)},'
            f'"label":{json.dumps(label)},"{key}":{json.dumps(_value(prob, 7 if key == "value" else 0))}}}').encode()


def event_subject(device: str) -> str:
    """Where a device's events go: `edgeseq.out.<device>.events` (MQTT `edgeseq/out/<device>/events`)."""
    return f"{OUT_SUBJECT}.{device}.events"


def encode_event(device: str, seq: int, position: int, event, boot: int = 0) -> bytes:
    """An event message's payload (JSON bytes): {"device", "boot", "seq" (the reading that
    decided it), "position" (readings the device had streamed, it included), "event" ("start"
    or "end"), "label" (JSON-escaped), "onset" (the position at which its class took over)}."""
    onset = int(position) - (int(event.position) - int(event.onset))
    return json.dumps({"device": device, "boot": int(boot), "seq": int(seq), "position": int(position),
                       "event": event.kind, "label": event.label, "onset": onset}, separators=(",", ":")).encode()


def encode_predictions(device: str, rows: list, boot: int = 0, key: str = "prob") -> bytes:
    """The predictions of one message of several readings as one message (JSON bytes), lists in
    reading order: `{"device", "boot", "seq": [...], "position": [...], "label": [...], "prob":
    [...]}` from rows [(seq, position, label, prob)]."""
    return json.dumps({"device": device, "boot": int(boot), "seq": [int(r[0]) for r in rows],
                       "position": [int(r[1]) for r in rows], "label": [r[2] for r in rows],
                       key: [_value(r[3], 7 if key == "value" else 0) for r in rows]}, separators=(",", ":")).encode()


def predictions_of(payload: bytes) -> list:
    """[{"device", "seq", "boot", "position", "label", "prob" (an anomaly model's: "level", a
    regression model's: "value")}] from a
    prediction message: one
    (`encode_prediction`) or the several of one message (`encode_predictions`)."""
    p = json.loads(payload)
    if not isinstance(p["seq"], list):
        return [p]
    key = next((k for k in ("level", "value") if k in p), "prob")   # anomaly: its level; regression: values
    return [{"device": p["device"], "seq": s, "boot": p["boot"], "position": q, "label": lab, key: pr}
            for s, q, lab, pr in zip(p["seq"], p["position"], p["label"], p[key])]


def encode_state(arrays: list, position: int, last_seq: int, model_sha256: str, stream_seq: int = 0,
                 boot: int = 0, decision: dict | None = None, bucket: tuple | None = None,
                 stream: str = "") -> bytes:
    """A device's state as .npz bytes (np.savez: members stored, not compressed): `arrays`
    (float32, one per state tensor, batch axis 1), its position, the last `seq` applied, the
    stream sequence of the last message applied, its `boot` (resets seen so far) and its
    decision layer's state (`decision`, {name: array}, members `d_<name>`; none for a model
    without decision settings) and its rate limit's token bucket (`bucket`: (readings left,
    JetStream storage time of the last message in ns); none before its first message) and the
    stream its `stream_seq` counts in (`stream`)."""
    buf = io.BytesIO()
    extra = {} if bucket is None else {"rate_tokens": np.float64(bucket[0]), "rate_time": np.int64(bucket[1])}
    np.savez(buf, position=np.int64(position), last_seq=np.int64(last_seq), stream_seq=np.int64(stream_seq),
             boot=np.int64(boot), model=np.str_(model_sha256), stream=np.str_(stream), **extra,
             **{f"s{i}": np.ascontiguousarray(a, np.float32) for i, a in enumerate(arrays)},
             **{f"d_{k}": np.ascontiguousarray(a) for k, a in (decision or {}).items()})
    return buf.getvalue()


def _bucket(z) -> tuple | None:
    if "rate_tokens" not in z.files:
        return None
    tokens, t = float(z["rate_tokens"]), int(z["rate_time"])
    if not (math.isfinite(tokens) and tokens >= -MAX_READINGS and t >= 0):    # a message may leave it in debt
        raise BadMessage("stored state's rate-limit bucket is out of range")
    return tokens, t


def decode_state(data: bytes, max_bytes: int | None = None) -> dict:
    """{"arrays", "position", "last_seq", "stream_seq", "boot", "model", "decision", "bucket", "stream"} from `encode_state`
    bytes. Before anything is decompressed or read: bytes beyond `max_bytes` (what this model's
    state can take) and any member that is compressed (it could inflate far beyond its stored
    size) are refused, so a stored state never costs more memory than its own bytes. Arrays
    only (allow_pickle=False). Raises BadMessage for anything else."""
    import zipfile
    if max_bytes is not None and len(data) > max_bytes:
        raise BadMessage(f"stored state is {len(data):,} bytes, more than this model's state can take ({max_bytes:,})")
    try:
        infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except Exception as e:  # noqa: BLE001 - bad zip of any kind
        raise BadMessage(f"stored state unreadable ({type(e).__name__})") from None
    if len(infos) > 64 or any(i.compress_type != zipfile.ZIP_STORED or i.flag_bits & 0x1 for i in infos):
        raise BadMessage("stored state is not one the gateway writes (compressed, encrypted or too many members)")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            n = sum(1 for k in z.files if re.fullmatch(r"s\d+", k))
            return {"arrays": [np.array(z[f"s{i}"], np.float32) for i in range(n)], "position": int(z["position"]),
                    "last_seq": int(z["last_seq"]),
                    "stream_seq": int(z["stream_seq"]) if "stream_seq" in z.files else 0,
                    "boot": int(z["boot"]) if "boot" in z.files else 0, "model": str(z["model"]),
                    "decision": {k[2:]: np.array(z[k]) for k in z.files if k.startswith("d_")} or None,
                    "bucket": _bucket(z), "stream": str(z["stream"]) if "stream" in z.files else ""}
    except Exception as e:  # noqa: BLE001 - any unreadable bytes are one kind of failure here
        raise BadMessage(f"stored state unreadable ({type(e).__name__}: {str(e)[:200]})") from None


def mapping_block(partitions: int) -> str:
    """The nats-server `mappings` block that partitions devices (configuration text):
    `edgeseq.in.<id>` to `edgeseq.part.<p>.<id>`, p = partition(partitions, 1) of the id."""
    return ("mappings = {\n"
            f'  "{IN_SUBJECT}.*": "{PART_SUBJECT}.{{{{partition({int(partitions)},1)}}}}.{{{{wildcard(1)}}}}"\n'
            "}\n")
