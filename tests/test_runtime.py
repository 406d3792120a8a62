"""StreamSession against torch, state bookkeeping, bad readings, and the torch-free import."""

import numpy as np
import pytest
import torch

from edgeseq.errors import HistoryFullError, ProviderError, ReadingError, UsageError
from edgeseq.runtime import StreamSession, WindowSession, evaluate
from edgeseq.train import model_from_checkpoint
from helpers import assert_close, run_without_torch

pytestmark = pytest.mark.usefixtures("backend_suite")   # conftest: on both step backends

STREAM = ["rnn", "gru", "lstm", "transformer", "ssm"]


def _readings(basicmotions, n, B):
    """(n, B, F): test sequences back to back, so streams see real data."""
    flat = basicmotions.test.X.reshape(-1, 6)
    return np.stack([flat[b * 500: b * 500 + n] for b in range(B)], axis=1).astype(np.float32)


@pytest.mark.parametrize("arch", STREAM)
def test_session_matches_torch_step_loop(exported, trained, basicmotions, arch):
    path, _ = exported(arch)
    model = model_from_checkpoint(trained(arch))
    xs = _readings(basicmotions, 250, B=3)
    sess = StreamSession(path, streams=3)
    got = np.stack([sess.push(x) for x in xs])
    state, ref = None, []
    with torch.no_grad():
        for x in xs:
            logits, state = model.step(torch.from_numpy(x), state)
            ref.append(torch.softmax(logits, -1).numpy())
    assert_close(got, np.stack(ref), f"{arch} session vs torch", atol=1e-5)
    assert sess.position.tolist() == [250, 250, 250]


@pytest.mark.parametrize("arch", STREAM)
def test_bad_readings_leave_state_unchanged(exported, basicmotions, arch):
    path, _ = exported(arch)
    sess = StreamSession(path, streams=2)
    xs = _readings(basicmotions, 10, B=2)
    for x in xs[:5]:
        sess.push(x)
    snap = sess.snapshot()
    nan = xs[5].copy()
    nan[1, 3] = np.nan
    inf = xs[5].copy()
    inf[0, 0] = np.inf
    cases = [
        (nan, r"stream 1 has nan in 'gyr_x'"),
        (inf, r"stream 0 has inf in 'acc_x'"),
        (xs[5][:, :5], r"reading has 5 values, the model expects 6"),
        (xs[5][:1], r"readings must be \[2, 6\]"),
        ([["a"] * 6] * 2, r"not numeric"),
    ]
    for bad, msg in cases:
        with pytest.raises(ReadingError, match=msg):
            sess.push(bad)
        now = sess.snapshot()
        assert now["position"].tolist() == snap["position"].tolist()
        for a, b in zip(now["state"], snap["state"]):
            assert np.array_equal(a, b)
    # and the stream carries on exactly as if the bad readings never came
    ref = StreamSession(path, streams=2)
    for x in xs[:5]:
        ref.push(x)
    assert np.array_equal(sess.push(xs[5]), ref.push(xs[5]))


@pytest.mark.parametrize("arch", STREAM)
def test_reset_one_stream_equals_a_fresh_stream(exported, basicmotions, arch):
    path, _ = exported(arch)
    xs = _readings(basicmotions, 40, B=3)
    sess = StreamSession(path, streams=3)
    for x in xs[:20]:
        sess.push(x)
    sess.reset(stream=1)
    fresh = StreamSession(path, streams=1)
    for x in xs[20:]:
        both = sess.push(x)
        alone = fresh.push(x[1:2])
        assert_close(both[1:2], alone, f"{arch} reset stream", atol=1e-5)
    assert sess.position.tolist() == [40, 20, 40]


def test_snapshot_restore_replays_exactly(exported, basicmotions):
    path, _ = exported("transformer")
    xs = _readings(basicmotions, 30, B=2)
    sess = StreamSession(path, streams=2)
    for x in xs[:10]:
        sess.push(x)
    snap = sess.snapshot()
    first = [sess.push(x) for x in xs[10:]]
    sess.restore(snap)
    again = [sess.push(x) for x in xs[10:]]
    assert np.array_equal(np.stack(first), np.stack(again))


def test_state_bytes_flat_for_recurrent_growing_for_cache(exported, basicmotions):
    xs = _readings(basicmotions, 64, B=1)
    gru = StreamSession(exported("gru")[0])
    lstm = StreamSession(exported("lstm")[0])
    tr = StreamSession(exported("transformer")[0])
    per_row = 2 * 2 * 32 * 4        # layers * (key, value) * d_model * float32
    for t, x in enumerate(xs, start=1):
        gru.push(x), lstm.push(x), tr.push(x)
        assert gru.state_nbytes() == 64 * 4
        assert lstm.state_nbytes() == 2 * 64 * 4
        assert tr.state_nbytes() == min(t, tr.max_history) * per_row      # grows, then slides at its window
    assert tr.max_history == 50 and tr.state_nbytes_at(4096) == 50 * per_row


def test_bounded_history_error_and_slide(exported, trained, basicmotions):
    path, _ = exported("transformer")
    xs = _readings(basicmotions, 20, B=1)
    strict = StreamSession(path, max_history=8, on_full="error")
    for x in xs[:8]:
        strict.push(x)
    snap = strict.snapshot()
    with pytest.raises(HistoryFullError, match="history is full"):
        strict.push(xs[8])
    assert np.array_equal(strict.snapshot()["state"][0], snap["state"][0])

    slide = StreamSession(path, max_history=8, on_full="slide")
    got = [slide.push(x) for x in xs]
    assert slide.history == 8 and slide.state_nbytes() == 8 * 512
    # torch with the cache cut to the last 7 rows before each step is the reference
    model = model_from_checkpoint(trained("transformer"))
    state, ref = None, []
    with torch.no_grad():
        for x in xs:
            if state is not None and state[1].shape[2] >= 8:
                state = (state[0],) + tuple(s[:, :, -7:] for s in state[1:])
            logits, state = model.step(torch.from_numpy(x), state)
            ref.append(torch.softmax(logits, -1).numpy())
    assert_close(np.stack(got), np.stack(ref), "sliding window", atol=1e-5)


def test_bidirectional_model_is_refused_for_streaming(exported, basicmotions):
    path, _ = exported("bigru")
    with pytest.raises(UsageError, match="cannot stream one reading at a time"):
        StreamSession(path)
    probs = WindowSession(path).predict(basicmotions.test.X[:4])
    assert probs.shape == (4, 4) and np.allclose(probs.sum(-1), 1, atol=1e-5)


def test_cuda_request_without_cuda_says_so(exported):
    import onnxruntime as ort
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA")
    with pytest.raises(ProviderError, match="provider 'cuda' is not available"):
        StreamSession(exported("gru")[0], provider="cuda")


def test_evaluate_matches_training_accuracy(exported, trained, basicmotions):
    for arch in STREAM:
        r = evaluate(str(exported(arch)[0]), basicmotions.test, labels=basicmotions.labels)
        assert r["accuracy"] == trained(arch)["metrics"]["test_accuracy"], arch
        assert set(r["accuracy_at_fraction"]) == {"0.25", "0.5", "0.75", "1.0"}


def test_runtime_runs_without_torch(exported, tmp_path):
    """The runtime imports neither torch nor onnx: block both and stream, eval and use the CLI."""
    path = exported("gru")[0]
    run_without_torch(f"""
        import numpy as np
        from edgeseq.runtime import StreamSession, evaluate
        from edgeseq.data import load_dataset
        ds = load_dataset("basicmotions")
        s = StreamSession({str(path)!r})
        p = s.push(ds.test.X[0, 0])
        assert p.shape == (1, 4)
        r = evaluate({str(path)!r}, ds.test)
        from click.testing import CliRunner
        from edgeseq.cli import cli
        res = CliRunner().invoke(cli, ["eval", {str(path)!r}])
        assert res.exit_code == 0, res.output
        res = CliRunner().invoke(cli, ["compare", {str(path)!r}, {str(path)!r}, "--rounds", "1"])
        assert res.exit_code == 0 and "float" in res.output, res.output
        res = CliRunner().invoke(cli, ["train", "--out", "x"])
        assert res.exit_code == 1 and "needs torch" in res.output, res.output
        print("OK", r["accuracy"])
    """, tmp_path)
