"""LSTM classifier, with torch's gate order (input i, forget f, cell g, output o):

    i, f, g, o = σ, σ, tanh, σ of (W_i x + b_i + W_h h + b_h)
    c' = f ⊙ c + i ⊙ g        h' = o ⊙ tanh(c')

State per layer is (h, c): state_in.{2l} is h and state_in.{2l+1} is c of layer l. The forget
gate's bias starts at FORGET_BIAS, the rest as torch draws them.
"""

import torch
from torch import nn

from edgeseq.models.common import RecurrentClassifier, RecurrentConfig

FORGET_BIAS = 1.0   # the forget gate's initial bias, b_if + b_hf (torch draws both from +-1/sqrt(hidden));
                    # measured on four data sets in docs/measured.md


class LSTMConfig(RecurrentConfig):
    """Settings in RecurrentConfig; a type of its own so a checkpoint names its architecture."""


class LSTM(RecurrentClassifier):
    rnn_cls = nn.LSTM
    n_state = 2
    state_roles = ("h", "c")

    def __init__(self, config):
        super().__init__(config)
        H = config.hidden
        with torch.no_grad():                  # forget gates start open: the cell keeps its memory until trained
            for layer in range(config.layers):  # to drop it (Gers et al. 2000; Jozefowicz et al. 2015, ICML)
                getattr(self.rnn, f"bias_ih_l{layer}")[H:2 * H] = FORGET_BIAS
                getattr(self.rnn, f"bias_hh_l{layer}")[H:2 * H] = 0.0

    def cell(self, gi, state, w_hh, b_hh):
        h, c = state
        gates = gi + h @ w_hh.t() + b_hh                      # (B, 4H)
        H = h.shape[-1]
        ifo = torch.sigmoid(torch.cat([gates[:, :2 * H], gates[:, 3 * H:]], dim=-1))  # (B, 3H)
        i, f, o = ifo[:, :H], ifo[:, H:2 * H], ifo[:, 2 * H:]                         # (B, H) each
        c = f * c + i * torch.tanh(gates[:, 2 * H:3 * H])
        h = o * torch.tanh(c)
        return (h, c)
