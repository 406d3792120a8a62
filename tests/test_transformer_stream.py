"""The Transformer's training path (fused attention over spans, only the readings the outputs
depend on) == the plain math it replaced: every carried reading through every layer under one
dense bias, softmax(q k^T / sqrt(hs) + bias) v. Logits and gradients, over a stream of chunks
with carries and restarts."""

import pytest
import torch

from edgeseq.models import build_model, make_config
from edgeseq.models.transformer import MASKED, SPAN, join_carry
from helpers import assert_close


def reference_stream(model, x, carry=None, fresh=None):
    """`forward_stream` as plain math: (logits (B, T, C), carry)."""
    c = model.config
    T = x.shape[1]
    full, seen = join_carry(x, carry, fresh)                   # (B, N, F), (B, N): the carry as forward_stream joins it
    N = full.shape[1]
    i = torch.arange(N)
    back = i.unsqueeze(1) - i.unsqueeze(0)                     # (N, N): readings back
    ok = back >= 0
    if c.window:
        ok &= back < c.window
    ok = ok & seen[:, None, None, :]                           # (B, 1, N, N)
    bias = torch.zeros(ok.shape).masked_fill(~ok, MASKED)
    if c.positions == "alibi":
        bias = bias - model.slopes.view(1, -1, 1, 1) * back.clamp(min=0).float()  # (B, nh, N, N)
    h = model._embed(full, i)                                  # (B, N, C)
    for block in model.blocks:
        a = block.attn
        q, k, v = (a.split(t) for t in a.qkv(block.ln1(h)).chunk(3, dim=-1))     # (B, nh, N, hs)
        h = h + a.attend(q, k, v, bias)
        h = h + block.mlp(block.ln2(h))
    logits = model.head(model.ln_f(h))[:, N - T:]              # (B, T, C)
    keep = model.context() if c.window else N - 1
    return logits, (full[:, max(0, N - keep):], seen[:, max(0, N - keep):])


# chunk lengths and the rows that restart at each chunk's start: a carry that grows to the
# layers' full context, restarts in some rows (their carry then hidden up to a point inside
# the next chunks' keys), in every row, and a chunk longer than SPAN (several spans)
CHUNKS = [(9, None), (7, [False, True, False]), (12, None), (5, [True, True, True]), (SPAN + 20, [True, False, False]),
          (6, None)]


@pytest.mark.parametrize("positions", ["alibi", "none", "sinusoid"])
@pytest.mark.parametrize("window,layers", [(5, 2), (4, 3), (0, 2)])
def test_transformer_forward_stream_equals_the_dense_math(positions, window, layers):
    torch.manual_seed(0)
    model = build_model("transformer", make_config("transformer", n_features=3, n_classes=4, d_model=16, heads=4,
                                                   window=window, layers=layers, positions=positions)).eval()
    X = torch.randn(3, sum(T for T, _ in CHUNKS), 3)
    carry = ref_carry = None
    t0 = 0
    for n, (T, fresh) in enumerate(CHUNKS):
        fresh = None if fresh is None else torch.tensor(fresh)
        x = X[:, t0:t0 + T]
        t0 += T
        model.zero_grad()
        got, carry = model.forward_stream(x, carry, fresh)
        weights = torch.randn(got.shape)
        (got * weights).sum().backward()
        grads = {k: p.grad.clone() for k, p in model.named_parameters()}
        model.zero_grad()
        want, ref_carry = reference_stream(model, x, ref_carry, fresh)
        (want * weights).sum().backward()
        scale = float(want.abs().max())
        assert_close(got.detach().numpy(), want.detach().numpy(), f"{positions} chunk {n} logits",
                     atol=1e-5 * scale + 1e-6)
        assert torch.equal(carry[0], ref_carry[0]) and torch.equal(carry[1], ref_carry[1])
        for k, p in model.named_parameters():
            g = float(p.grad.abs().max())
            assert_close(grads[k].numpy(), p.grad.numpy(), f"{positions} chunk {n} grad {k}", atol=1e-5 * g + 1e-7)


@pytest.mark.parametrize("positions", ["alibi", "none"])
def test_transformer_stream_with_restarts_equals_its_step_loop(positions):
    """Shift-invariant positions: a stream run in chunks, some rows restarting at a chunk's
    start, gives the logits of the step loop that resets those rows' state there."""
    torch.manual_seed(1)
    model = build_model("transformer", make_config("transformer", n_features=3, n_classes=4, d_model=16, heads=4,
                                                   window=6, positions=positions)).eval()
    X = torch.randn(3, sum(T for T, _ in CHUNKS), 3)
    with torch.no_grad():
        carry, got, t0 = None, [], 0
        for T, fresh in CHUNKS:
            logits, carry = model.forward_stream(X[:, t0:t0 + T], carry, None if fresh is None else torch.tensor(fresh))
            got.append(logits)
            t0 += T
        steps, t0 = [], 0
        rows = [None] * 3                                      # each row its own stream
        for T, fresh in CHUNKS:
            for b in range(3):
                if fresh is not None and fresh[b]:
                    rows[b] = None
            for t in range(t0, t0 + T):
                out = []
                for b in range(3):
                    logits, rows[b] = model.step(X[b:b + 1, t], rows[b])
                    out.append(logits)
                steps.append(torch.cat(out))
            t0 += T
    got = torch.cat(got, dim=1)                                # (B, steps, C)
    want = torch.stack(steps, dim=1)
    assert_close(got.numpy(), want.numpy(), f"{positions} stream against step loop",
                 atol=1e-5 * float(want.abs().max()) + 1e-6)
    assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_transformer_forward_exports_with_a_dynamic_length():
    """`forward` with a symbolic length (torch.export, as `edgeseq bench` exports the recomputing
    Transformer) runs every reading in one fused call: the ONNX graph gives the span path's logits."""
    import onnxruntime as ort

    from export.step import _trace

    torch.manual_seed(2)
    model = build_model("transformer", make_config("transformer", n_features=3, n_classes=4, d_model=16, heads=4,
                                                   window=6)).eval()
    T = torch.export.Dim("time", min=2, max=4096)
    proto = _trace(model, (torch.randn(1, 5, 3),), ["window"], ["logits"], ({1: T},))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for length in (2, 9, 3 * SPAN + 5):
        x = torch.randn(1, length, 3)
        with torch.no_grad():
            want = model(x).numpy()
        got = session.run(None, {"window": x.numpy()})[0]
        assert_close(got, want, f"exported forward, {length} readings", atol=1e-5 * float(abs(want).max()) + 1e-6)
