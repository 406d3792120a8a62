"""GRU classifier, with torch's gate order (reset r, update z, new n):

    r = σ(W_ir x + b_ir + W_hr h + b_hr)        z = σ(W_iz x + b_iz + W_hz h + b_hz)
    n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))    h' = (1 - z) ⊙ n + z ⊙ h
"""

from dataclasses import dataclass

import torch
from torch import nn

from edgeseq.models.common import RecurrentClassifier


@dataclass(frozen=True)
class GRUConfig:
    n_features: int = 6      # sensor channels per reading
    n_classes: int = 4       # activity classes
    hidden: int = 64         # state size: the per-stream memory, 4 bytes per unit and layer
    layers: int = 1          # one layer is enough for 100-reading windows
    dropout: float = 0.1     # on the head input; also between layers when layers > 1


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
