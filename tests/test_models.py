"""torch full-sequence forward == torch step loop, for every streaming architecture."""

import pytest
import torch

from edgeseq.models import build_model, make_config
from helpers import assert_close

STEPS = 120


@pytest.mark.parametrize("arch", ["rnn", "gru", "lstm", "transformer"])
@pytest.mark.parametrize("layers", [1, 2])
def test_forward_equals_step_loop(arch, layers):
    torch.manual_seed(0)
    model = build_model(arch, make_config(arch, layers=layers)).eval()
    x = torch.randn(3, STEPS, 6)
    with torch.no_grad():
        full = model.forward_all(x)                      # (B, T, C)
        state, steps = None, []
        for t in range(STEPS):
            logits, state = model.step(x[:, t], state)
            steps.append(logits)
    assert_close(torch.stack(steps, 1).numpy(), full.numpy(), f"{arch} step loop", atol=1e-5)
    assert torch.equal(torch.stack(steps, 1).argmax(-1), full.argmax(-1))


@pytest.mark.parametrize("arch", ["rnn", "gru", "lstm", "transformer"])
def test_forward_reads_the_last_valid_reading(arch):
    torch.manual_seed(1)
    model = build_model(arch, make_config(arch)).eval()
    x = torch.randn(3, 20, 6)
    lengths = torch.tensor([20, 7, 1])
    with torch.no_grad():
        got = model(x, lengths)
        for b, L in enumerate(lengths.tolist()):
            alone = model(x[b:b + 1, :L])
            assert_close(got[b:b + 1].numpy(), alone.numpy(), f"{arch} length {L}", atol=1e-5)


def test_transformer_state_grows_recurrent_state_does_not():
    torch.manual_seed(0)
    tr = build_model("transformer", make_config("transformer"))
    gru = build_model("gru", make_config("gru"))
    s_t, s_g = None, None
    for t in range(5):
        _, s_t = tr.step(torch.randn(2, 6), s_t)
        _, s_g = gru.step(torch.randn(2, 6), s_g)
        assert s_t[1].shape[2] == t + 1 and s_t[0].tolist() == [t + 1, t + 1]
        assert s_g[0].shape == (2, 64)


def test_bidirectional_uses_both_directions():
    torch.manual_seed(0)
    model = build_model("bigru", make_config("bigru")).eval()
    x = torch.randn(2, 10, 6)
    y = x.clone()
    y[:, 0] += 5.0          # changes only the first reading: the backward pass sees it last
    with torch.no_grad():
        assert not torch.allclose(model(x), model(y))
        lengths = torch.tensor([10, 6])
        z = x.clone()
        z[1, 6:] = 100.0    # padding past length 6 must not matter
        assert_close(model(x, lengths).numpy(), model(z, lengths).numpy(), "bigru padding", atol=1e-6)
