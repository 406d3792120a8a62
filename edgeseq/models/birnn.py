"""Bidirectional GRU / LSTM for offline window classification.

The backward direction needs the whole window before it can say anything, so these models
do not stream: they export a window graph (`window` [B, T, F], `lengths` [B] -> `logits`)
that `edgeseq eval` and `WindowSession` run, and `StreamSession` refuses them.

The backward pass reverses each sequence within its own length (padding stays at the end),
so variable-length windows need no packing and the graph stays a plain Gather.
"""

from dataclasses import dataclass

import torch
from torch import nn

from edgeseq.models.common import Normalize, last_valid


@dataclass(frozen=True)
class BiRNNConfig:
    n_features: int = 6      # sensor channels per reading
    n_classes: int = 4       # activity classes
    hidden: int = 32         # per direction; the head sees 2 * hidden
    layers: int = 1          # stacked layers per direction
    cell: str = "gru"        # "gru" or "lstm"
    dropout: float = 0.1     # on the head input


def reverse_within(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """x (B, T, F) -> rows 0..L-1 of each sequence in reverse order, padding left after L."""
    T = x.shape[1]
    t = torch.arange(T, device=x.device).unsqueeze(0)        # (1, T)
    L = lengths.unsqueeze(1)                                  # (B, 1)
    idx = torch.where(t < L, L - 1 - t, t)                    # (B, T)
    return x.gather(1, idx.unsqueeze(-1).expand(-1, -1, x.shape[2]))


class BiRNN(nn.Module):
    input_weights = ("fwd.weight_ih_l0", "bwd.weight_ih_l0")   # the matrices that read the normalised reading

    def __init__(self, config: BiRNNConfig):
        super().__init__()
        if config.cell not in ("gru", "lstm"):
            raise ValueError(f"cell must be 'gru' or 'lstm', got {config.cell!r}")
        self.config = config
        cls = nn.GRU if config.cell == "gru" else nn.LSTM
        self.norm = Normalize(config.n_features)
        self.fwd = cls(config.n_features, config.hidden, config.layers, batch_first=True)
        self.bwd = cls(config.n_features, config.hidden, config.layers, batch_first=True)
        self.drop = nn.Dropout(config.dropout)
        self.head = nn.Linear(2 * config.hidden, config.n_classes)

    def forward(self, x, lengths=None):
        """x (B, T, F), lengths (B,) -> logits (B, C) for each whole window."""
        if lengths is None:
            lengths = torch.full((x.shape[0],), x.shape[1], dtype=torch.int64, device=x.device)
        x = self.norm(x)
        out_f, _ = self.fwd(x)                                # (B, T, H)
        out_b, _ = self.bwd(reverse_within(x, lengths))       # (B, T, H)
        both = torch.cat([last_valid(out_f, lengths), last_valid(out_b, lengths)], dim=-1)  # (B, 2H)
        return self.head(self.drop(both))

    def macs_per_window(self, T: int) -> int:
        c = self.config
        gates = 3 if c.cell == "gru" else 4
        per_step = sum(gates * c.hidden * ((c.n_features if l == 0 else c.hidden) + c.hidden)
                       for l in range(c.layers))
        return 2 * T * per_step + 2 * c.hidden * c.n_classes
