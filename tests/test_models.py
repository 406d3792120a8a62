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


def test_lstm_forget_gates_start_at_the_forget_bias():
    """Each layer's forget-gate bias (b_if + b_hf) starts at FORGET_BIAS; the other gates keep
    torch's draw (within +-2/sqrt(hidden))."""
    from edgeseq.models.lstm import FORGET_BIAS
    torch.manual_seed(0)
    H = 16
    model = build_model("lstm", make_config("lstm", hidden=H, layers=2))
    for layer in range(2):
        b = getattr(model.rnn, f"bias_ih_l{layer}") + getattr(model.rnn, f"bias_hh_l{layer}")
        assert torch.equal(b[H:2 * H], torch.full((H,), FORGET_BIAS))
        rest = torch.cat([b[:H], b[2 * H:]])
        assert rest.abs().max() <= 2 / H ** 0.5 and rest.std() > 0


@pytest.mark.parametrize("positions", ["alibi", "none"])
def test_alibi_is_shift_invariant(positions):
    """Without absolute positions a window gives the same logits wherever it sits in a stream:
    the last reading of 30 depends only on the 2 x (4 - 1) readings before it (two layers of
    window 4), with ALiBi's recency bias as without it. The slopes are Press et al.'s."""
    from edgeseq.models.transformer import alibi_slopes
    torch.manual_seed(0)
    model = build_model("transformer", make_config("transformer", window=4, layers=2, positions=positions)).eval()
    x = torch.randn(1, 30, 6)
    with torch.no_grad():
        late = model.forward_all(x)[0, -1]
        alone = model.forward_all(x[:, -7:])[0, -1]           # 2 x (4 - 1) readings before the last reach it
    assert_close(late.numpy(), alone.numpy(), f"{positions} shifted window", atol=1e-5)
    assert torch.allclose(alibi_slopes(4), torch.tensor([2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8]))
