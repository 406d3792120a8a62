"""Elman RNN classifier: h' = tanh(W_ih x + b_ih + W_hh h + b_hh)."""

from dataclasses import dataclass

import torch
from torch import nn

from edgeseq.models.common import RecurrentClassifier


@dataclass(frozen=True)
class RNNConfig:
    n_features: int = 6      # sensor channels per reading
    n_classes: int = 4       # activity classes
    hidden: int = 64         # state size: the per-stream memory, 4 bytes per unit and layer
    layers: int = 1          # one layer is enough for 100-reading windows
    dropout: float = 0.1     # on the head input; also between layers when layers > 1


class RNN(RecurrentClassifier):
    rnn_cls = nn.RNN

    def cell(self, gi, state, w_hh, b_hh):
        (h,) = state
        return (torch.tanh(gi + h @ w_hh.t() + b_hh),)        # (B, H)
