"""GRU classifier, with torch's gate order (reset r, update z, new n):

    r = σ(W_ir x + b_ir + W_hr h + b_hr)        z = σ(W_iz x + b_iz + W_hz h + b_hz)
    n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))    h' = (1 - z) ⊙ n + z ⊙ h
"""

import torch
from torch import nn

from edgeseq.models.common import RecurrentClassifier, RecurrentConfig


class GRUConfig(RecurrentConfig):
    """Settings in RecurrentConfig; a type of its own so a checkpoint names its architecture."""


class GRU(RecurrentClassifier):
    rnn_cls = nn.GRU

    def cell(self, gi, state, w_hh, b_hh):
        (h,) = state
        gh = h @ w_hh.t() + b_hh                              # (B, 3H)
        H = h.shape[-1]
        rz = torch.sigmoid(gi[:, :2 * H] + gh[:, :2 * H])     # (B, 2H): one node for both gates
        r, z = rz[:, :H], rz[:, H:]                           # (B, H) each
        n = torch.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
        return ((1 - z) * n + z * h,)                         # (B, H)
