"""Hardening of the runtime on tiny untrained models: metadata checked against the graph when a
model is opened, all-or-nothing state restores and state files, a session shared between
threads, one process per state file, leftovers of killed writers, and streams that never
affect each other (dynamic int8 included)."""

import io
import json
import hashlib
import os
import subprocess
import sys
import threading

import numpy as np
import onnx
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import edgeseq
from edgeseq import contract
from edgeseq.errors import HistoryFullError, ModelFileError, ReadingError, UsageError
from edgeseq.models import build_model, config_dict, make_config
from edgeseq.runtime import StreamSession, WindowSession, open_model
from edgeseq.runtime.evaluate import run_streams
from edgeseq.runtime.statefile import (MAGIC, StateFileError, leftovers, load_state, lock_path, lock_state_file,
                                       read_state, remove_leftovers, save_state)

pytestmark = pytest.mark.usefixtures("backend_suite")   # conftest: on both step backends

F, C = 3, 4
STREAM = ["rnn", "gru", "lstm", "transformer"]
SCHEMES = ["float", "static", "dynamic"]
DEAD_PID = 99999999                  # above any Linux pid_max: never a live process


def tiny_checkpoint(arch: str) -> dict:
    """An untrained, seeded checkpoint small enough to export in a second or two."""
    if arch == "transformer":
        over = {"d_model": 8, "heads": 2, "layers": 1, "d_ff": 8, "window": 6}
    else:
        over = {"hidden": 8} if arch in ("rnn", "gru") else {"hidden": 8, "layers": 1}
    cfg = make_config(arch, n_features=F, n_classes=C, **over)
    torch.manual_seed(0)
    model = build_model(arch, cfg)
    mean, std = np.arange(F, dtype=np.float32), np.ones(F, np.float32)
    model.norm.set(mean, std)
    return {"edgeseq_version": edgeseq.__version__, "arch": arch, "config": config_dict(cfg),
            "state_dict": model.state_dict(), "normalization": {"mean": mean.tolist(), "std": std.tolist()},
            "labels": [f"c{i}" for i in range(C)], "features": [f"f{i}" for i in range(F)]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(arch, scheme) -> path of a tiny model: float (the step graph as exported, not
    validated: export's own tests do that) or int8 by onnxruntime's quantizer (static
    calibrated on random streams), stamped with the quantization settings as export_int8 does."""
    from export.quantize import quantize
    from export.step import build_graph, stamp
    root = tmp_path_factory.mktemp("tiny")
    cache = {}

    def get(arch, scheme="float"):
        if (arch, scheme) in cache:
            return cache[arch, scheme]
        if scheme == "float":
            proto, _, _ = build_graph(tiny_checkpoint(arch))
            path = root / f"{arch}.onnx"
            onnx.save(proto, str(path))
        else:
            fpath = get(arch)
            sess, meta = open_model(fpath)
            calibration = []
            X = np.random.default_rng(1).standard_normal((4, 30, F)).astype(np.float32) * 2
            run_streams(sess, meta, X, record=calibration)
            path = root / f"{arch}-{scheme}.onnx"
            meta.quantization = quantize(fpath, path, scheme, calibration)
            proto = onnx.load(str(path))
            proto.ir_version = contract.IR_VERSION
            stamp(proto, meta)
            onnx.save(proto, str(path))
        cache[arch, scheme] = path
        return path
    return get


def readings(n, streams, seed=0):
    return np.random.default_rng(seed).standard_normal((n, streams, F)).astype(np.float32)


def same_state(a: dict, b: dict) -> bool:
    return (np.array_equal(a["position"], b["position"]) and len(a["state"]) == len(b["state"])
            and all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a["state"], b["state"])))


# -- A. metadata checked when a model is opened ----------------------------------------------

def _edited(src, dst, key, value):
    """Copy model `src` to `dst` with metadata `key` set to the text `value` (None: removed)."""
    proto = onnx.load(str(src))
    props = {p.key: p.value for p in proto.metadata_props}
    if value is None:
        props.pop(key, None)
    else:
        props[key] = value
    del proto.metadata_props[:]
    for k, v in props.items():
        proto.metadata_props.add(key=k, value=v)
    onnx.save(proto, str(dst))
    return dst


def _state_json(path):
    proto = onnx.load(str(path))
    return json.loads({p.key: p.value for p in proto.metadata_props}[contract.META_STATE])


def _state_edit(path, i, **change):
    s = _state_json(path)
    s[i] = {k: v for k, v in {**s[i], **change}.items() if v is not ...}
    return json.dumps(s)


def edit(i, **change):
    """A metadata edit: state entry i with fields changed (`...` removes one)."""
    return lambda path: _state_edit(path, i, **change)


LABELS, FEATS, STATE, NORM = contract.META_LABELS, contract.META_FEATURES, contract.META_STATE, contract.META_NORM
J = json.dumps

# (key, JSON text) edits that every model must refuse, with a piece of the message
COMMON_BAD = [
    (LABELS, J("abcd"), "edgeseq.labels must be a non-empty list of label names, got a string"),
    (LABELS, J(["a", "b", "c", "d", "e"]), "edgeseq.labels has 5 labels but the graph's logits have 4 classes"),
    (LABELS, J(["a", "b", "c"]), "has 3 labels but the graph's logits have 4"),
    (LABELS, J([]), "edgeseq.labels must be a non-empty list"),
    (LABELS, J(["a", "a", "b", "c"]), "edgeseq.labels names 'a' more than once"),
    (LABELS, J([1, 2, 3, 4]), "edgeseq.labels entry 0 must be a non-empty name"),
    (LABELS, J(["a", "", "b", "c"]), "edgeseq.labels entry 1"),
    (LABELS, J(None), "edgeseq.labels must be"),
    (LABELS, J({"0": "a"}), "edgeseq.labels must be"),
    (LABELS, "[\"a\", \"b\"", "edgeseq.labels is not valid JSON"),
    (LABELS, "", "edgeseq.labels is not valid JSON"),
    (LABELS, "[" * 100000, "edgeseq.labels is not valid JSON"),
    (LABELS, None, "not an edgeseq model (missing metadata edgeseq.labels)"),
    (FEATS, J("xyz"), "edgeseq.features must be a non-empty list of feature names"),
    (FEATS, J(["f0", "f1", "f2", "f3"]), "edgeseq.features names 4 features but the graph's"),
    (FEATS, J(["f0", "f1"]), "edgeseq.features names 2 features"),
    (FEATS, J(["f0", "f0", "f1"]), "edgeseq.features names 'f0' more than once"),
    (FEATS, J([None, "f1", "f2"]), "edgeseq.features entry 0"),
    (contract.META_FORMAT, J("1"), "edgeseq.format must be a format number"),
    (contract.META_FORMAT, J(0), "edgeseq.format must be a format number"),
    (contract.META_FORMAT, J(1.5), "edgeseq.format must be"),
    (contract.META_FORMAT, J(True), "edgeseq.format must be"),
    (contract.META_FORMAT, J(contract.FORMAT_VERSION + 1), "upgrade edgeseq"),
    (contract.META_MODE, J("batch"), "edgeseq.mode must be 'stream' or 'window'"),
    (contract.META_MODE, J(None), "edgeseq.mode must be"),
    (contract.META_ARCH, J(7), "edgeseq.arch must be an architecture name"),
    (contract.META_ARCH, J(""), "edgeseq.arch must be"),
    (contract.META_ARCH, J("mamba"), "edgeseq.arch must be one of rnn, gru, lstm, transformer, ssm, bigru, bilstm"),
    (contract.META_MAX_HISTORY, J(0), "edgeseq.max_history must be null or a number of readings >= 1"),
    (contract.META_MAX_HISTORY, J(-3), "edgeseq.max_history must be"),
    (contract.META_MAX_HISTORY, J("10"), "edgeseq.max_history must be"),
    (contract.META_MAX_HISTORY, J(2.5), "edgeseq.max_history must be"),
    (contract.META_MAX_HISTORY, J(True), "edgeseq.max_history must be"),
    (contract.META_QUANT, J("dynamic"), "edgeseq.quantization must be null or an object"),
    (contract.META_QUANT, J([1]), "edgeseq.quantization must be null or an object"),
    (contract.META_QUANT, J({"scheme": 5}), "edgeseq.quantization 'scheme' must be a string"),
    (contract.META_VERSION, J(5), "edgeseq.version must be a version string"),
    (contract.META_CONFIG, J([1]), "edgeseq.config must be null or an object"),
    (contract.META_VALIDATION, J("ok"), "edgeseq.validation must be null or an object"),
    (NORM, J([1, 2, 3]), "edgeseq.normalization must be an object"),
    # the list whose length disagrees with the 3 features is the one named
    (NORM, J({"mean": [0, 0], "std": [1, 1, 1]}), "'mean' must be a list of 3 numbers, got a list of 2"),
    (NORM, J({"mean": [0, 0, 0, 0], "std": [1, 1, 1]}), "'mean' must be a list of 3 numbers, got a list of 4"),
    (NORM, J({"mean": [0, 0, 0], "std": [1, 1]}), "'std' must be a list of 3 numbers, got a list of 2"),
    (NORM, J({"mean": [0, 0], "std": [1, 1]}), "edgeseq.normalization has 2 means and stds for 3 features"),
    (NORM, J({"mean": [0, 0, 0]}), "'std' must be a list of 3 numbers"),
    (NORM, J({"mean": [], "std": []}), "'mean' must be a list of one per feature numbers"),
    (NORM, J({"mean": [0, 0, 0], "std": [1, 0, 1]}), "'std' entry 1 is 0; it must be > 0"),
    (NORM, J({"mean": [0, 0, 0], "std": [1, -2, 1]}), "'std' entry 1 is -2"),
    (NORM, '{"mean": [0, NaN, 0], "std": [1, 1, 1]}', "'mean' entry 1 must be a finite number"),
    (NORM, '{"mean": [0, 0, 0], "std": [1, Infinity, 1]}', "'std' entry 1 must be a finite number"),
    (NORM, J({"mean": [0, "0", 0], "std": [1, 1, 1]}), "'mean' entry 1 must be a finite number"),
    (NORM, J({"mean": [0, 0, 0], "std": [1, 1, 1], "input_scale": [1, 1]}), "'input_scale' must be a list of 3"),
    (STATE, J({}), "edgeseq.state must be a list of state tensors"),
    (STATE, J("state_in.0"), "edgeseq.state must be a list"),
]

STREAM_BAD = [
    (STATE, J([5]), "edgeseq.state entry 0 must be an object"),
    (STATE, edit(0, name="state_in.9"), "promises graph input 'state_in.9' but the graph has none"),
    (STATE, edit(0, output="nowhere"), "promises graph output 'nowhere'"),
    (STATE, edit(0, name=7), "entry 0 needs 'name'"),
    (STATE, edit(0, output=...), "entry 0 needs 'output'"),
    (STATE, edit(0, shape=...), "needs 'shape'"),
    (STATE, edit(0, shape="batch"), "needs 'shape'"),
    (STATE, edit(0, kind="window"), "has kind a string (\"window\"); this runtime reads fixed or growing"),
    (STATE, edit(0, dtype="int8"), "this runtime holds float32 state"),
    (STATE, edit(0, role=3), "role must be a string"),
    (STATE, lambda p: J(_state_json(p) + _state_json(p)[:1]), "twice or for another tensor"),
    (STATE, lambda p: J(_state_json(p)[1:]), "does not describe graph input"),
    (contract.META_MODE, J("window"), "edgeseq.mode promises graph input 'window' but the graph has none"),
]

RECURRENT_BAD = [
    (STATE, edit(0, shape=["batch", 16]), "gives 'state_in.0' the shape ['batch', 16] but the graph's is ['batch', 8]"),
    (STATE, edit(0, shape=["batch", 8, 1]), "needs input 'state_in.0' with 3 axes but the graph's has 2"),
    (STATE, edit(0, shape=[1, 8]), "shape must have 'batch' on axis 0"),
    (STATE, edit(0, shape=["batch", 0]), "shape axis 1 must be a size >= 1"),
    (STATE, edit(0, shape=["batch", 8.0]), "shape axis 1 must be a size"),
    (STATE, edit(0, kind="growing"), "is growing but its shape ['batch', 8] lacks 'history' on axis 2"),
    (STATE, edit(0, shape=["batch", "history"]), "is fixed but its shape ['batch', 'history'] has"),
    (contract.META_ARCH, J("transformer"), "edgeseq.arch says 'transformer', but the state tensors are those of"),
    (contract.META_ARCH, J("ssm"), "edgeseq.arch says 'ssm', but the state tensors are those of"),
    (contract.META_ARCH, J("bigru"), "edgeseq.arch says 'bigru', whose mode is 'window', but the graph is a 'stream'"),
]

CACHE_BAD = [
    (STATE, edit(0, kind="fixed"), "is fixed but its shape ['batch', 2, 'history', 4] has"),
    (STATE, edit(0, shape=["batch", "history", 2, 4]), "lacks 'history' on axis 2"),
    (STATE, edit(0, shape=["batch", 4, "history", 2]), "gives 'past.0.key' the shape ['batch', 4, 'history', 2]"),
    (STATE, edit(0, shape=["batch", 2, 5, 4]), "lacks 'history' on axis 2"),
    (STATE, edit(0, shape=["batch", 2, "history", 5]), "but the graph's is ['batch', 2, 'history', 4] (axis 3)"),
    (STATE, edit(1, shape=["batch", 2, "history", 4, 1]), "with 5 axes but the graph's has 4"),
    (contract.META_ARCH, J("gru"), "edgeseq.arch says 'gru', but the state tensors are those of transformer"),
]

WINDOW_BAD = [
    (STATE, lambda p: J([{"name": "h", "output": "h_out", "shape": ["batch", 8]}]), "lists state for a window model"),
    (contract.META_MODE, J("stream"), "edgeseq.mode promises graph input 'reading' but the graph has none"),
    (contract.META_ARCH, J("gru"), "edgeseq.arch says 'gru', whose mode is 'stream', but the graph is a 'window'"),
]


def _cases():
    out = []
    lstm_named_gru = [(contract.META_ARCH, J("gru"), "edgeseq.arch says 'gru', but the state tensors are those of lstm")]
    for arch, extra in (("gru", STREAM_BAD + RECURRENT_BAD), ("lstm", STREAM_BAD + RECURRENT_BAD + lstm_named_gru),
                        ("transformer", STREAM_BAD + CACHE_BAD), ("bigru", WINDOW_BAD)):
        for key, value, msg in COMMON_BAD + extra:
            out.append((arch, key, value, msg))
    return out


CASES = _cases()


@pytest.mark.parametrize("arch", ["gru", "lstm", "transformer", "bigru"])
def test_edited_metadata_is_refused_when_the_model_is_opened(tiny, tmp_path, arch):
    """Every edit of the metadata that would load and then crash or mislead is refused by
    open_model with one ModelFileError line naming the file and the key."""
    src = tiny(arch)
    open_model(src)                                             # the unedited model opens
    cases = [c for c in CASES if c[0] == arch]
    for n, (_, key, value, msg) in enumerate(cases):
        text = value(src) if callable(value) else value
        dst = _edited(src, tmp_path / f"m{n}.onnx", key, text)
        with pytest.raises(ModelFileError) as e:
            open_model(dst)
        line = str(e.value)
        assert type(e.value) is ModelFileError and "\n" not in line, (key, text[:60], line)
        assert line.startswith(f"'{dst}'"), line
        assert msg in line, (key, text[:60], line)
        assert key in line or "not an edgeseq model" in line, line
        assert "export it again" in line or "upgrade edgeseq" in line or "edgeseq export" in line, line
        with pytest.raises(ModelFileError):                     # the sessions say the same, never TypeError
            (WindowSession if arch == "bigru" else StreamSession)(dst)
        dst.unlink()
    assert len(cases) >= 40


def test_the_labels_message_says_what_to_do(tiny, tmp_path):
    dst = _edited(tiny("gru"), tmp_path / "m.onnx", LABELS, J(["a", "b", "c", "d", "e"]))
    with pytest.raises(ModelFileError) as e:
        StreamSession(dst)
    assert str(e.value) == (f"'{dst}': metadata edgeseq.labels has 5 labels but the graph's logits have 4 classes; "
                            "export it again")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4), max_leaves=12)
META_KEYS = sorted(contract.ModelMeta(arch="gru", mode="stream", features=["a"], labels=["b"]).to_props()) \
    + [contract.META_VALIDATION]


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(META_KEYS), value=JSON_VALUES, raw=st.booleans())
def test_any_metadata_value_parses_or_raises_one_metadata_error(key, value, raw):
    """from_props never lets TypeError, KeyError or AttributeError out: any JSON value (or any
    text) under any key parses or raises MetadataError naming that key."""
    spec = contract.StateSpec("state_in.0", "state_out.0", ("batch", 8), role="h.0")
    props = contract.ModelMeta(arch="gru", mode="stream", features=["a", "b"], labels=["x", "y"],
                               state=[spec], normalization={"mean": [0, 0], "std": [1, 1]}).to_props()
    props[key] = value if raw and isinstance(value, str) else json.dumps(value)     # raw: text, rarely JSON
    try:
        meta = contract.ModelMeta.from_props(props)
    except contract.MetadataError as e:
        assert e.key == key and "\n" not in str(e)
        return
    inputs = {"reading": ("float32", ["batch", 2]), "state_in.0": ("float32", ["batch", 8])}
    outputs = {"logits": ("float32", ["batch", 2]), "state_out.0": ("float32", ["batch", 8])}
    try:
        meta.check_graph(inputs, outputs)
    except contract.MetadataError as e:
        assert "\n" not in str(e)


# -- B. state: all or nothing, only valid values ---------------------------------------------

def _bad_snapshots(good: dict, growing: bool, max_history):
    """(name, snapshot) pairs that restore must refuse; the last state tensor is the one
    spoiled where it matters (an LSTM's c after a valid h)."""
    st_, pos = good["state"], good["position"]

    def with_last(a):
        return {"position": pos, "state": list(st_[:-1]) + [a]}
    last = st_[-1]
    nan, inf, big = last.copy(), last.copy(), last.astype(np.float64)
    nan.flat[0], inf.flat[-1], big.flat[0] = np.nan, -np.inf, 1e300
    out = [
        ("not a dict", [st_, pos]),
        ("no state", {"position": pos}),
        ("no position", {"state": st_}),
        ("state is one array", {"position": pos, "state": st_[0]}),
        ("state is a dict", {"position": pos, "state": {i: a for i, a in enumerate(st_)}}),
        ("one tensor short", {"position": pos, "state": st_[:-1]}),
        ("one tensor more", {"position": pos, "state": st_ + [st_[-1]]}),
        ("last has NaN", with_last(nan)),
        ("last has -Inf", with_last(inf)),
        ("last beyond float32", with_last(big)),
        ("last is object", with_last(last.astype(object))),
        ("last is text", with_last(last.astype(str))),
        ("last is complex", with_last(last.astype(np.complex64))),
        ("last is bool", with_last(last != 0)),
        ("last is None", with_last(None)),
        ("last is ragged", with_last([[1.0], [1.0, 2.0]])),
        ("last has an extra axis", with_last(last[..., None])),
        ("last lacks an axis", with_last(last[0])),
        ("last for 3 streams", with_last(np.concatenate([last, last[:1]]))),
        ("last is wider", with_last(np.concatenate([last, last], axis=-1))),
        ("position is float", {"position": pos.astype(np.float64), "state": st_}),
        ("position is negative", {"position": pos - 10**6, "state": st_}),
        ("position is short", {"position": pos[:1], "state": st_}),
        ("position is 2-D", {"position": pos[None], "state": st_}),
        ("position is beyond int64", {"position": np.full(len(pos), 2**64 - 1, np.uint64), "state": st_}),
        ("position is None", {"position": None, "state": st_}),
        ("position is text", {"position": ["1", "2"], "state": st_}),
    ]
    if growing:
        shorter = [a[:, :, 1:] for a in st_]
        out.append(("history rows differ", {"position": pos, "state": st_[:-1] + [shorter[-1]]}))
        longer = [np.concatenate([a, a], axis=2) for a in st_]
        if max_history is not None and longer[0].shape[2] > max_history:
            out.append(("history beyond max_history", {"position": pos, "state": longer}))
    return out


@pytest.mark.parametrize("arch", ["gru", "lstm", "transformer"])
def test_a_bad_snapshot_changes_nothing(tiny, arch):
    sess = StreamSession(tiny(arch), streams=2)
    for x in readings(8, 2):
        sess.push(x)
    good = sess.snapshot()
    sess.push(readings(1, 2, seed=5)[0])                       # now != good
    before = sess.snapshot()
    bad = _bad_snapshots(good, sess.growing, sess.max_history if sess.on_full == "error" else None)  # slide keeps the newest
    for name, snap in bad:
        with pytest.raises(UsageError, match="session state unchanged"):
            sess.restore(snap)
        assert same_state(sess.snapshot(), before), name
    assert len(bad) >= 27
    # A valid snapshot in float64 or from lists restores exactly, and the stream runs on as before.
    ref = StreamSession(tiny(arch), streams=2)
    ref.restore(good)
    sess.restore({"position": good["position"].tolist(), "state": [a.astype(np.float64) for a in good["state"]]})
    assert same_state(sess.snapshot(), ref.snapshot())
    x = readings(1, 2, seed=9)[0]
    assert np.array_equal(sess.push(x), ref.push(x))


def _write_state(path, header: dict, payload: bytes, checksum=True):
    if checksum:
        header = {**header, "payload_sha256": hashlib.sha256(payload).hexdigest()}
    path.write_bytes(MAGIC + json.dumps(header).encode() + b"\n" + payload)


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_a_bad_state_file_is_refused_and_changes_nothing(tiny, tmp_path):
    """Files with a correct checksum but wrong contents (NaN state, object arrays, a header of
    the wrong types, a payload that is not an npz) raise StateFileError; the session is as it was."""
    model = tiny("lstm")
    sess = StreamSession(model, streams=2)
    for x in readings(6, 2):
        sess.push(x)
    path = tmp_path / "s.state"
    header = save_state(path, sess, 6)
    head, arrays = read_state(path)
    sess.push(readings(1, 2, seed=3)[0])
    before = sess.snapshot()
    good_payload = _npz(**arrays)
    h, c = arrays["state_0"], arrays["state_1"]
    nan_c = c.copy()
    nan_c[1, 2] = np.nan
    npy = io.BytesIO()
    np.save(npy, h)
    pickled = io.BytesIO()
    np.savez(pickled, position=arrays["position"], state_0=h, state_1=np.array([object()] * 2, dtype=object))
    cases = [
        ("header is a list", None, b"[1, 2]\n" + good_payload),
        ("no header line", None, b'{"streams": 2'),
        ("header not JSON", None, b"{streams: 2}\n" + good_payload),
        ("streams is text", {**header, "streams": "2"}, good_payload),
        ("streams is true", {**header, "streams": True}, good_payload),
        ("streams is 0", {**header, "streams": 0}, good_payload),
        ("readings negative", {**header, "readings": -1}, good_payload),
        ("readings is float", {**header, "readings": 6.5}, good_payload),
        ("n_state is text", {**header, "n_state": "2"}, good_payload),
        ("n_state is null", {**header, "n_state": None}, good_payload),
        ("model hash not hex", {**header, "model_sha256": "xyz"}, good_payload),
        ("model hash missing", {k: v for k, v in header.items() if k != "model_sha256"}, good_payload),
        ("model name a number", {**header, "model": 5}, good_payload),
        ("payload not npz", header, b"definitely not a zip archive"),
        ("payload empty", header, b""),
        ("payload a bare npy", header, npy.getvalue()),
        ("payload with an object array", header, pickled.getvalue()),
        ("payload a pickle", header, b"\x80\x04\x95" + b"\x00" * 20),
        ("state_1 missing", header, _npz(position=arrays["position"], state_0=h)),
        ("an extra array", header, _npz(**arrays, state_2=h)),
        ("c holds NaN", header, _npz(position=arrays["position"], state_0=h, state_1=nan_c)),
        ("c has the wrong shape", header, _npz(position=arrays["position"], state_0=h, state_1=c[:, :4])),
        ("c is text", header, _npz(position=arrays["position"], state_0=h, state_1=c.astype(str))),
        ("position negative", header, _npz(position=-arrays["position"] - 1, state_0=h, state_1=c)),
        ("position float", header, _npz(position=arrays["position"] + 0.5, state_0=h, state_1=c)),
        ("position too short", header, _npz(position=arrays["position"][:1], state_0=h, state_1=c)),
        ("three streams", {**header, "streams": 3}, good_payload),
        ("another model", {**header, "model_sha256": "0" * 64}, good_payload),
    ]
    for name, hdr, payload in cases:
        if hdr is None:
            path.write_bytes(MAGIC + payload)
        else:
            _write_state(path, {k: v for k, v in hdr.items() if k != "payload_sha256"}, payload)
        with pytest.raises(StateFileError) as e:
            load_state(path, sess)
        assert "\n" not in str(e.value) and f"'{path}'" in str(e.value), (name, str(e.value))
        assert same_state(sess.snapshot(), before), name
    assert len(cases) == 28
    _write_state(path, {k: v for k, v in header.items() if k != "payload_sha256"}, good_payload)
    assert load_state(path, sess)["readings"] == 6                                # the good file still loads
    assert np.array_equal(sess.position, [6, 6])


# -- C. one session, many threads ------------------------------------------------------------

@pytest.mark.parametrize("arch", ["gru", "lstm", "transformer"])
def test_threads_sharing_a_session_lose_no_reading(tiny, arch):
    """N threads push K identical readings each: every push is applied (position N*K) and the
    state equals one thread pushing N*K of them; every returned probability array is one a
    single thread gets (push copies under the lock)."""
    N, K = 4, 60
    x = readings(1, 2, seed=4)[0]
    shared = StreamSession(tiny(arch), streams=2)
    got, errors = [[] for _ in range(N)], []
    start = threading.Barrier(N)

    def work(i):
        try:
            start.wait()
            for _ in range(K):
                got[i].append(shared.push(x))
        except Exception as e:                                    # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    alone = StreamSession(tiny(arch), streams=2)
    ref = [alone.push(x) for _ in range(N * K)]
    assert shared.position.tolist() == [N * K] * 2
    assert same_state(shared.snapshot(), alone.snapshot())
    key = lambda a: a.tobytes()                                                   # noqa: E731
    assert sorted(map(key, sum(got, []))) == sorted(map(key, ref))


# -- C. one process per state file; leftovers of killed writers ----------------------------

HOLD = """
import sys, time
from edgeseq.runtime.statefile import lock_state_file
with lock_state_file(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_state_file_in_use_by_another_process_is_refused(tmp_path):
    path = tmp_path / "g.state"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StateFileError) as e:
            with lock_state_file(path):
                pass
        assert str(e.value) == (f"state file '{path}' is in use by another process (pid {holder.pid}); "
                                "stop it or use another --state-file")
    finally:
        holder.kill()
        holder.wait()
    with lock_state_file(path):                      # the kernel dropped the dead holder's lock
        assert lock_path(path).exists()
        with pytest.raises(StateFileError, match="in use by another process"):
            with lock_state_file(path):              # one holder, even within a process
                pass
    assert not lock_path(path).exists() and list(tmp_path.iterdir()) == []


def _plant(d, name):
    """Leftovers of killed writers of `name` and unrelated files that must survive."""
    dead = [f".{name}.{DEAD_PID}.a1b2c3.tmp", f".{name}.k3j9x_a1.tmp"]
    (d / dead[0]).write_bytes(b"half a file")
    (d / dead[1]).write_bytes(b"from an older edgeseq")
    work = d / f".{name}.{DEAD_PID}.w0rk.tmp"                   # an int8 working directory
    work.mkdir()
    (work / "float.onnx").write_bytes(b"x")
    dead.append(work.name)
    keep = [name, f".{name}.{os.getpid()}.live.tmp", f".other.{DEAD_PID}.a1b2c3.tmp", f"{name}.{DEAD_PID}.x.tmp",
            f".{name}.{DEAD_PID}.a1b2c3.tmp.bak", f".{name}.keep", f".{name}.a.b.c.tmp", "notes.txt"]
    for k in keep:
        (d / k).write_bytes(b"mine")
    return dead, keep


def test_leftovers_of_a_killed_state_writer_go_when_the_lock_is_taken(tmp_path):
    dead, keep = _plant(tmp_path, "g.state")
    target = tmp_path / "g.state"
    assert sorted(p.name for p in leftovers(target)) == sorted(dead)
    with lock_state_file(target):
        assert sorted(os.listdir(tmp_path)) == sorted(keep + [lock_path(target).name])
    assert sorted(os.listdir(tmp_path)) == sorted(keep)
    assert remove_leftovers(target) == []


def test_leftovers_of_a_killed_export_go_at_the_next_export_to_that_path(tmp_path):
    from export.step import write_validated
    dead, keep = _plant(tmp_path, "m.onnx")
    (tmp_path / "m.onnx").unlink()
    keep.remove("m.onnx")
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    seen = {}

    def validate(tmp):
        seen["tmp"] = os.path.basename(tmp)
        assert not any(n in os.listdir(tmp_path) for n in dead)    # removed before the new temp is made
        return {"ok": True}
    write_validated(helper.make_model(g), tmp_path / "m.onnx", validate)
    assert seen["tmp"].startswith(f".m.onnx.{os.getpid()}.") and seen["tmp"].endswith(".tmp")
    assert sorted(os.listdir(tmp_path)) == sorted(keep + ["m.onnx"])


def test_int8_working_directory_lies_beside_the_output_and_is_cleaned(tmp_path, basicmotions, monkeypatch):
    """export_int8 works in `.<out>.<pid>.<random>.tmp` beside the output (not an anonymous
    system temp directory a kill would strand), removes those a killed export left, and
    leaves nothing when it fails."""
    import export.quantize as q
    ckpt = tiny_checkpoint("gru")
    cfg = make_config("gru", n_features=6, n_classes=4, hidden=8)
    torch.manual_seed(0)
    m = build_model("gru", cfg)
    ckpt.update(config=config_dict(cfg), state_dict=m.state_dict(), features=list(basicmotions.features),
                labels=list(basicmotions.labels),
                normalization={"mean": [0.0] * 6, "std": [1.0] * 6})
    dead, keep = _plant(tmp_path, "m.onnx")
    (tmp_path / "m.onnx").unlink()
    keep.remove("m.onnx")
    seen = {}

    def stop(float_path, out_path, scheme, calibration=None, float_parts=()):
        seen["dir"] = os.path.dirname(float_path)
        seen["listing"] = os.listdir(tmp_path)
        raise RuntimeError("killed here")
    monkeypatch.setattr(q, "quantize", stop)
    with pytest.raises(RuntimeError, match="killed here"):
        q.export_int8(ckpt, tmp_path / "m.onnx", "dynamic", data=basicmotions)
    work = os.path.basename(seen["dir"])
    assert os.path.dirname(seen["dir"]) == str(tmp_path)
    assert work.startswith(f".m.onnx.{os.getpid()}.") and work.endswith(".tmp")
    assert not set(dead) & set(seen["listing"])
    assert sorted(os.listdir(tmp_path)) == sorted(keep)


# -- D. streams never affect each other -------------------------------------------------------

@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("arch", STREAM)
def test_a_loud_neighbour_changes_nothing(tiny, arch, scheme):
    """Stream 0's logits with a neighbour reading normal data and with one reading 50x larger
    values are identical, bit for bit, for every architecture and scheme."""
    path = tiny(arch, scheme)
    X = readings(50, 2, seed=2)
    loud = X.copy()
    loud[:, 1] *= 50
    out = []
    for data in (X, loud):
        s = StreamSession(path, streams=2)
        out.append(np.stack([s.push_logits(x).copy() for x in data]))
    assert np.array_equal(out[0][:, 0], out[1][:, 0])
    if scheme == "dynamic":                  # the test sees the problem: one call for the batch mixes streams
        sess, meta = open_model(path)
        raw = [run_streams(sess, meta, d.transpose(1, 0, 2)) for d in (X, loud)]
        assert not np.array_equal(raw[0][:, 0], raw[1][:, 0])
        assert StreamSession(path, streams=2)._subs is not None and StreamSession(path)._subs is None
    else:
        assert StreamSession(path, streams=2)._subs is None   # the batched hot path


@pytest.mark.parametrize("arch", ["lstm", "transformer"])
def test_per_stream_session_keeps_the_session_contract(tiny, arch):
    """A dynamic int8 session (one call per stream) equals separate one-stream sessions, and its
    snapshot, restore, reset, position, history, state_nbytes and failures behave as a batched one's."""
    path = tiny(arch, "dynamic")
    X = readings(12, 3, seed=6)
    sess = StreamSession(path, streams=3)
    alone = [StreamSession(path) for _ in range(3)]
    batched = StreamSession(tiny(arch), streams=3)                  # float twin: same contract, batched
    for x in X[:8]:
        p = sess.push(x)
        assert np.array_equal(p, np.concatenate([a.push(x[i:i + 1]) for i, a in enumerate(alone)]))
        batched.push(x)
    snap, ref = sess.snapshot(), batched.snapshot()
    assert [a.shape for a in snap["state"]] == [a.shape for a in ref["state"]]
    assert np.array_equal(snap["position"], ref["position"]) and sess.history == batched.history
    assert sess.state_nbytes() == batched.state_nbytes() and sess.state_nbytes_at(99) == batched.state_nbytes_at(99)
    for i, a in enumerate(alone):
        for mine, theirs in zip(snap["state"], a.snapshot()["state"]):
            assert np.array_equal(mine[i:i + 1], theirs)
    # a bad reading in one stream advances none
    bad = X[8].copy()
    bad[2, 1] = np.inf
    with pytest.raises(ReadingError, match="stream 2 has inf"):
        sess.push(bad)
    assert same_state(sess.snapshot(), snap)
    # a bad snapshot changes nothing; a good one restores every sub-stream
    spoiled = {"position": snap["position"], "state": [a.copy() for a in snap["state"]]}
    spoiled["state"][-1][2].flat[0] = np.nan
    with pytest.raises(UsageError):
        sess.restore(spoiled)
    assert same_state(sess.snapshot(), snap)
    after = [sess.push(x) for x in X[8:]]
    sess.restore(snap)
    assert np.array_equal(np.stack(after), np.stack([sess.push(x) for x in X[8:]]))
    # reset one stream: it starts over as a fresh stream would, the others run on
    sess.reset(stream=1)
    fresh = StreamSession(path)
    assert sess.position.tolist() == [12, 0, 12]
    for x in X[:4]:
        assert np.allclose(sess.push(x)[1], fresh.push(x[1:2])[0], atol=1e-6)
    sess.reset()
    assert sess.position.tolist() == [0, 0, 0] and sess.history == 0


def test_per_stream_session_refuses_a_full_history_before_any_stream_moves(tiny):
    path = tiny("transformer", "dynamic")
    sess = StreamSession(path, streams=2, max_history=3, on_full="error")
    for x in readings(3, 2):
        sess.push(x)
    snap = sess.snapshot()
    with pytest.raises(HistoryFullError, match="history is full"):
        sess.push(readings(1, 2, seed=8)[0])
    assert same_state(sess.snapshot(), snap) and sess.history == 3


def test_a_recurrent_file_named_as_another_cell_is_refused_where_its_weights_are_read(tiny, tmp_path):
    """GRU and RNN state tensors look alike (one h per layer): the native reader, which reads
    the fused weights, refuses a file whose weights are the other cell's instead of running
    the graph under a false name."""
    import edgeseq.runtime.native as native
    if not native.available():
        pytest.skip(f"native backend not built: {native.why_unavailable()}")
    src = tiny("gru")
    dst = _edited(src, tmp_path / "m.onnx", contract.META_ARCH, J("rnn"))
    open_model(dst)                                 # the metadata alone cannot tell
    with pytest.raises(ModelFileError, match=r"metadata edgeseq.arch says 'rnn' but layer 0's weights are "
                                             r"\[\d+, \d+\], a GRU's; export it again"):
        StreamSession(dst, backend="native")
    assert StreamSession(src, backend="native").backend == "native"


@pytest.mark.parametrize("backend", ["onnxruntime", "native"])
def test_a_longer_cache_restored_under_slide_keeps_its_newest_rows(tiny, backend):
    """A snapshot (or state file) whose cache is longer than this session's max_history: under
    on_full 'slide' the newest rows are kept, as sliding would have kept them, and the stream
    goes on exactly as one that slid from the start; under 'error' it is refused."""
    import edgeseq.runtime.native as native
    if backend == "native" and not native.available():
        pytest.skip(f"native backend not built: {native.why_unavailable()}")
    path = tiny("transformer")
    X = readings(12, 2)
    long = StreamSession(path, streams=2, max_history=20, backend=backend)
    slid = StreamSession(path, streams=2, max_history=4, on_full="slide", backend=backend)
    for x in X:
        long.push(x)
        slid.push(x)
    snap = long.snapshot()
    assert snap["state"][0].shape[2] == 12
    sess = StreamSession(path, streams=2, max_history=4, on_full="slide", backend=backend)
    sess.restore(snap)
    assert sess.history == 4 and same_state(sess.snapshot(), slid.snapshot())
    for x in readings(5, 2, seed=3):
        assert np.allclose(sess.push(x), slid.push(x), atol=1e-6)
    strict = StreamSession(path, streams=2, max_history=4, on_full="error", backend=backend)
    with pytest.raises(UsageError, match="more than this session's max_history 4"):
        strict.restore(snap)
