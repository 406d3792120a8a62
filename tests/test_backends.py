"""StreamSession on both step backends: the same answers (float within float32 rounding of
onnxruntime), the same state rules (bad readings, snapshot/restore, reset, state files), and
the backend choice: auto picks native where it can, native where it cannot is one clear error."""

import numpy as np
import pytest
from click.testing import CliRunner

from edgeseq.cli import cli
from edgeseq.errors import ReadingError, UsageError
from edgeseq.runtime import StreamSession, native
from edgeseq.runtime.statefile import load_state, save_state

pytestmark = pytest.mark.skipif(not native.available(), reason=native.why_unavailable() or "native step not built")
RECURRENT = ["rnn", "gru", "lstm"]


def _readings(n, streams, seed=0):
    return np.random.default_rng(seed).standard_normal((n, streams, 6)).astype(np.float32)


@pytest.mark.parametrize("streams", [1, 7])
@pytest.mark.parametrize("arch", RECURRENT)
def test_float_native_equals_onnxruntime(exported, arch, streams):
    path = exported(arch)[0]
    nat, ort_ = StreamSession(path, streams=streams), StreamSession(path, streams=streams, backend="onnxruntime")
    assert nat.backend == "native" and ort_.backend == "onnxruntime"
    X = _readings(1000, streams)
    a = np.stack([nat.push_logits(x).copy() for x in X])
    b = np.stack([ort_.push_logits(x).copy() for x in X])
    assert np.abs(a - b).max() <= 1e-5 * max(1.0, float(np.abs(b).max()))
    assert np.allclose(nat.push(X[0]), ort_.push(X[0]), atol=1e-5)


@pytest.mark.parametrize("backend", ["native", "onnxruntime"])
@pytest.mark.parametrize("arch", RECURRENT)
def test_state_rules_are_the_same_on_both_backends(exported, int8, tmp_path, arch, backend):
    for path in (exported(arch)[0], int8(arch, "static")[0]):
        s = StreamSession(path, streams=3, backend=backend)
        X = _readings(40, 3, seed=1)
        for x in X[:20]:
            s.push(x)
        snap = s.snapshot()
        bad = X[20].copy()
        bad[1, 2] = np.nan
        with pytest.raises(ReadingError, match="stream 1"):
            s.push(bad)
        after = s.snapshot()
        assert all(np.array_equal(p, q) for p, q in zip(snap["state"], after["state"]))
        assert np.array_equal(snap["position"], after["position"])
        want = np.stack([s.push(x) for x in X[20:30]])
        s.restore(snap)
        assert np.array_equal(np.stack([s.push(x) for x in X[20:30]]), want)
        s.reset(stream=2)
        assert list(s.position) == [30, 30, 0]
        assert all(not a[2].any() for a in s.snapshot()["state"])
        save_state(tmp_path / "s.state", s, 30)
        t = StreamSession(path, streams=3, backend=backend)
        load_state(tmp_path / "s.state", t)
        assert np.array_equal(t.push(X[30]), s.push(X[30]))
        assert s.state_nbytes() == StreamSession(path, backend="onnxruntime").state_nbytes()


def test_auto_falls_back_and_native_says_why(exported, int8):
    tr = exported("transformer")[0]
    assert StreamSession(tr).backend == "onnxruntime"
    with pytest.raises(UsageError, match="backend 'native' cannot run .*transformer"):
        StreamSession(tr, backend="native")
    dyn = int8("gru", "dynamic")[0]
    assert StreamSession(dyn, streams=2).backend == "onnxruntime"
    with pytest.raises(UsageError, match="dynamic"):
        StreamSession(dyn, backend="native")
    with pytest.raises(UsageError, match="backend must be one of auto, onnxruntime, native"):
        StreamSession(exported("gru")[0], backend="tflite")
    r = CliRunner().invoke(cli, ["stream", str(tr), "--backend", "native"], input="0,0,0,0,0,0\n")
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "cannot run" in errors[0], r.output


def test_eval_says_which_backend_ran(exported):
    r = CliRunner().invoke(cli, ["eval", str(exported("gru")[0]), "--backend", "native"])
    assert r.exit_code == 0 and "(native backend)" in r.output, r.output
    r = CliRunner().invoke(cli, ["eval", str(exported("gru")[0]), "--backend", "onnxruntime"])
    assert r.exit_code == 0 and "(onnxruntime backend)" in r.output, r.output


@pytest.mark.parametrize("backend", ["native", "onnxruntime"])
def test_every_kind_of_reading_is_taken_as_float32(exported, int8, backend):
    """The C fast path takes C-contiguous float32 [streams, F]; anything else (a list, float64,
    a strided view, big-endian, one stream's [F]) goes through numpy's conversion and gives
    the same answer from the same state, and a bad value in any of them changes nothing."""
    for path in (exported("gru")[0], int8("lstm", "static")[0]):
        for streams in (1, 3):
            X = _readings(4, streams, seed=2)
            x = X[3]
            kinds = {"list": x.tolist(), "float64": x.astype(np.float64), "big-endian": x.astype(">f4"),
                     "strided": np.repeat(x, 2, axis=1)[:, ::2], "fortran": np.asfortranarray(x)}
            if streams == 1:
                kinds["one stream"] = x[0]
            ref = StreamSession(path, streams=streams, backend=backend)
            for r in X[:3]:
                ref.push(r)
            snap = ref.snapshot()
            want = ref.push(x)
            for name, given in kinds.items():
                ref.restore(snap)
                assert np.array_equal(ref.push(given), want), name
                ref.restore(snap)
                bad = np.array(given, dtype=np.asarray(given).dtype, copy=True, order="C")
                bad.reshape(-1)[-1] = np.inf if bad.dtype.kind == "f" else bad.reshape(-1)[-1]
                if bad.dtype.kind == "f":
                    with pytest.raises(ReadingError, match="stream state unchanged"):
                        ref.push(bad)
                    after = ref.snapshot()
                    assert all(np.array_equal(a, b) for a, b in zip(snap["state"], after["state"])), name


def test_the_backend_default_comes_from_the_environment(exported, monkeypatch):
    gru = exported("gru")[0]
    monkeypatch.setenv("EDGESEQ_BACKEND", "onnxruntime")
    assert StreamSession(gru).backend == "onnxruntime"
    assert StreamSession(gru, backend="native").backend == "native"        # a named backend wins
    monkeypatch.setenv("EDGESEQ_BACKEND", "native")
    assert StreamSession(gru).backend == "native"
    with pytest.raises(UsageError, match="backend 'native' cannot run"):
        StreamSession(exported("transformer")[0])
    monkeypatch.setenv("EDGESEQ_BACKEND", "tflite")
    with pytest.raises(UsageError, match="EDGESEQ_BACKEND is 'tflite'; set it to one of auto, onnxruntime, native"):
        StreamSession(gru)
    r = CliRunner().invoke(cli, ["eval", str(gru)])
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert r.exit_code != 0 and len(errors) == 1 and "EDGESEQ_BACKEND" in errors[0], r.output
