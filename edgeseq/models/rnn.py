"""Elman RNN classifier: h' = tanh(W_ih x + b_ih + W_hh h + b_hh)."""

import torch
from torch import nn

from edgeseq.models.common import RecurrentClassifier, RecurrentConfig


class RNNConfig(RecurrentConfig):
    """Settings in RecurrentConfig; a type of its own so a checkpoint names its architecture."""


class RNN(RecurrentClassifier):
    rnn_cls = nn.RNN

    def cell(self, gi, state, w_hh, b_hh):
        (h,) = state
        return (torch.tanh(gi + h @ w_hh.t() + b_hh),)        # (B, H)
