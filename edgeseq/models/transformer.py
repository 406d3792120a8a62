"""Causal Transformer classifier with a KV cache for streaming.

Pre-norm blocks (LayerNorm before attention and MLP), multi-head self-attention under a
causal mask that reaches back `window` readings (each reading sees itself and the
`window - 1` before it). `forward` runs a whole sequence; `step` takes one reading, the
stream's position and the cache, and returns the cache grown by one row per layer.

No absolute position: a device's stream never ends, so an absolute position grows past
anything seen in training, and a sliding window should look the same wherever it is in the
stream. Causal attention still tells a reading from its predecessors. `positions =
"sinusoid"` adds sinusoidal positions from the reading's index (checkpoints written before
this setting existed use it). `positions = "alibi"` adds no position to the readings but a
recency bias to the attention scores (ALiBi, Press et al. 2022, arXiv:2108.12409): head h
subtracts `slope_h * d` from the score of a key d readings back, slopes 2^(-8h/heads) for
h = 1..heads, so some heads look at the last few readings and others across the window. It
depends on distances only, so it stays shift-invariant like "none"; it is the default, since
on a never-reset stream it keeps the readings of the last activity in view without cutting the
window to one activity's length (docs/measured.md).

Streams in one batch share the cache length T but may have seen different numbers of
readings (a stream reset mid-batch starts again at position 0): each stream attends only to
its own last `position + 1` rows, the rest are masked with a large negative number (not
-inf, which breaks int8 calibration).

Training (`forward_stream`, and `forward` / `forward_all`) runs the same math through torch's
fused `scaled_dot_product_attention`, one call per span of at most SPAN queries over the keys
its window reaches, and computes only the readings the chunk's outputs depend on (the carried
readings' outputs in the lower layers, not in the top one); `step`, the exported graph, keeps
the plain softmax(q k^T / sqrt(hs) + bias) v.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from edgeseq import contract
from edgeseq.models.common import Normalize, last_valid, output_layers

POSITIONS = ("none", "sinusoid", "alibi")
SHIFT_INVARIANT = ("none", "alibi")   # positions under which a window looks the same anywhere in a stream
MASKED = -1e9  # added to scores of keys a query must not see
SPAN = 32      # queries per fused attention call at most; a call also reads the `window - 1` keys before its
               # first query, so a sequence costs its length x the window, not its length squared (training
               # on one thread: 24 to 64 alike within this machine's noise, 16 slower)
WINDOW = 50               # the default window, and the most `window_for` picks: the KV cache stays bounded
WINDOW_LENGTHS = 1.0      # `window_for`: this many median sequence lengths (chosen on validation splits of two
                          # short-sequence sets, docs/measured.md): a window that spans several activities
                          # keeps the last one in view long after a change


@dataclass(frozen=True)
class TransformerConfig:
    n_features: int = 6      # sensor channels per reading
    n_classes: int = 4       # activity classes
    d_model: int = 32        # width; each cached reading costs 2 * layers * d_model floats
    heads: int = 4           # head_dim = d_model / heads = 8
    layers: int = 2          # two blocks reach >= 0.90 on BasicMotions
    d_ff: int = 64           # MLP width
    dropout: float = 0.1     # on attention output, MLP output and head input
    window: int = WINDOW     # readings attended (own + 49 before): trained and deployed alike, so the
                             # cache is bounded; 0 = the whole history (grows without limit). Training
                             # without a window setting and without ALiBi picks it from the data (`window_for`)
    positions: str = "alibi"  # "alibi" or "none" (shift-invariant, for endless streams) or "sinusoid"

    def __post_init__(self):
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {', '.join(POSITIONS)}")
        if not isinstance(self.window, int) or isinstance(self.window, bool):
            raise ValueError(f"window must be a whole number of readings, got {self.window!r}")
        if self.window < 0:
            raise ValueError("window must be 0 (unbounded) or a number of readings")


def window_for(lengths) -> int:
    """The default window for training on sequences of `lengths` (N,): WINDOW_LENGTHS times their
    median length, rounded down, at least 1 and at most WINDOW (100-reading BasicMotions: 50;
    spoken digits of median 17 readings: 17)."""
    return int(min(WINDOW, max(1, np.floor(float(np.median(lengths)) * WINDOW_LENGTHS))))


def sinusoid(position: torch.Tensor, d_model: int) -> torch.Tensor:
    """position (...,) int -> (..., d_model): [sin(p w_i), cos(p w_i)], w_i = 10000^(-2i/d)."""
    i = torch.arange(d_model // 2, dtype=torch.float32, device=position.device)
    w = torch.exp(i * (-2.0 * math.log(10000.0) / d_model))   # (d/2,)
    angle = position.to(torch.float32).unsqueeze(-1) * w      # (..., d/2)
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)


def alibi_slopes(heads: int) -> torch.Tensor:
    """(heads,) float32: ALiBi's per-head recency slopes 2^(-8h/heads), h = 1..heads (Press et
    al. 2022, arXiv:2108.12409, section 3; their rule for any number of heads)."""
    return torch.pow(2.0, -8.0 * torch.arange(1, heads + 1, dtype=torch.float32) / heads)


def split_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, T, C) -> (B, heads, T, C // heads): each head's channels, one head per slice of dim 1."""
    B, T, C = t.shape
    return t.view(B, T, heads, C // heads).transpose(1, 2)  # (B, nh, T, hs)


def join_carry(x: torch.Tensor, carry=None, fresh=None) -> tuple:
    """A chunk x (B, T, F) after the `carry` of the chunk before it (None: the stream starts here),
    `fresh` (B,) bool: rows that start from nothing here -> (the carried readings then the chunk's
    (B, ctx + T, F), the mask of those each row may see (B, ctx + T))."""
    B, T, _ = x.shape
    if carry is None:
        return x, torch.ones(B, T, dtype=torch.bool)
    past, past_seen = carry
    if fresh is not None:
        past_seen = past_seen & ~fresh.unsqueeze(1)               # (B, ctx)
    full = torch.cat([past, x], dim=1)                           # (B, ctx + T, F)
    return full, torch.cat([past_seen, torch.ones(B, T, dtype=torch.bool)], dim=1)


class SelfAttention(nn.Module):
    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.heads, self.head_dim = c.heads, c.d_model // c.heads
        self.qkv = nn.Linear(c.d_model, 3 * c.d_model)
        self.proj = nn.Linear(c.d_model, c.d_model)
        self.drop = nn.Dropout(c.dropout)

    def split(self, t):
        return split_heads(t, self.heads)  # (B, nh, T, hs)

    def attend(self, q, k, v, bias):
        """q (B, nh, Tq, hs), k/v (B, nh, Tk, hs), bias broadcastable to (B, nh, Tq, Tk)."""
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim) + bias  # (B, nh, Tq, Tk)
        y = F.softmax(scores, dim=-1) @ v                     # (B, nh, Tq, hs)
        B, nh, Tq, hs = y.shape
        return self.drop(self.proj(y.transpose(1, 2).reshape(B, Tq, nh * hs)))  # (B, Tq, C)

    def forward(self, x, spans):
        """x (B, T, C); spans [(queries, keys, bias)]: slices of x's readings, bias broadcastable
        to (B, nh, queries, keys); the spans' queries are x's readings from some reading to the
        last, in order -> (B, Tq, C), the outputs of those. One fused call per span, `attend`'s
        math (the scale applied to q k^T, then the bias)."""
        q, k, v = (self.split(t) for t in self.qkv(x).chunk(3, dim=-1))  # (B, nh, T, hs) each
        # each (B, len sq, nh, hs): torch lays the fused call's output out so, the transpose is free
        ys = [F.scaled_dot_product_attention(q[:, :, sq], k[:, :, sk], v[:, :, sk], attn_mask=bias).transpose(1, 2)
              for sq, sk, bias in spans]
        y = ys[0] if len(ys) == 1 else torch.cat(ys, dim=1)   # (B, Tq, nh, hs)
        B, Tq, nh, hs = y.shape
        return self.drop(self.proj(y.reshape(B, Tq, nh * hs)))  # (B, Tq, C)

    def step(self, x, past_k, past_v, bias):
        """x (B, 1, C); past (B, nh, T, hs) -> y (B, 1, C), present (B, nh, T+1, hs)."""
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        k = torch.cat([past_k, self.split(k)], dim=2)         # (B, nh, T+1, hs)
        v = torch.cat([past_v, self.split(v)], dim=2)
        return self.attend(self.split(q), k, v, bias), k, v


class Block(nn.Module):
    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(c.d_model)
        self.attn = SelfAttention(c)
        self.ln2 = nn.LayerNorm(c.d_model)
        self.mlp = nn.Sequential(nn.Linear(c.d_model, c.d_ff), nn.GELU(), nn.Linear(c.d_ff, c.d_model),
                                 nn.Dropout(c.dropout))

    def forward(self, x, spans, first=0):
        """x (B, T, C) -> (B, T - first, C): the outputs of readings `first`.. only, the
        queries of `spans` (`SelfAttention.forward`)."""
        x = x[:, first:] + self.attn(self.ln1(x), spans)
        return x + self.mlp(self.ln2(x))

    def step(self, x, past_k, past_v, bias):
        a, k, v = self.attn.step(self.ln1(x), past_k, past_v, bias)
        x = x + a
        return x + self.mlp(self.ln2(x)), k, v


class Transformer(nn.Module):
    input_weight = "embed.weight"       # state_dict key of the matrix that reads the normalised reading

    def __init__(self, config: TransformerConfig):
        super().__init__()
        assert config.d_model % config.heads == 0, "d_model must be a multiple of heads"
        self.config = config
        self.norm = Normalize(config.n_features)
        self.embed = nn.Linear(config.n_features, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln_f, self.drop, self.head = output_layers(config)
        if config.positions == "alibi":
            self.register_buffer("slopes", alibi_slopes(config.heads), persistent=False)

    def _embed(self, x, position):
        h = self.embed(self.norm(x))
        if self.config.positions == "sinusoid":
            h = h + sinusoid(position, self.config.d_model)
        return h

    def _bias(self, queries, keys, hidden_keys=None):
        """Additive attention bias of queries at readings `queries` (Tq,) for keys at `keys`
        (Tk,): MASKED where the key is ahead of the query, out of its window or in
        `hidden_keys` (B, Tk), then ALiBi's recency term -> (1 or B, 1 or nh, Tq, Tk), always
        4-d (torch's fused CPU attention takes a 2-d or 4-d mask; a 3-d one falls back to
        unfused math). The same numbers as `step` builds for one query."""
        back = (queries.unsqueeze(1) - keys.unsqueeze(0))[None, None]  # (1, 1, Tq, Tk)
        seen = back >= 0
        if self.config.window:
            seen &= back < self.config.window
        if hidden_keys is not None:
            seen = seen & ~hidden_keys[:, None, None, :]      # (B, 1, Tq, Tk)
        bias = torch.zeros(seen.shape, device=seen.device).masked_fill(~seen, MASKED)
        if self.config.positions == "alibi":
            bias = bias - self.slopes.view(1, -1, 1, 1) * back.clamp(min=0).to(torch.float32)  # (., nh, Tq, Tk)
        return bias

    def _hidden(self, x, hidden_keys=None, first=0):
        """x (B, T, F) -> (B, T - first, C): the outputs of readings `first`.. only.
        `hidden_keys` (B, T) bool: keys no query of that row sees (a carried context that
        belongs to another sequence).

        Only what those outputs depend on is computed: the top layer's queries start at
        `first`, each layer below's `window - 1` readings earlier (the keys of the layer above),
        and readings hidden from every row are left out. Each layer's queries are cut into spans
        of at most SPAN at the same readings, so the layers share each span's bias; a span is
        one fused call over the keys its queries' windows reach. A symbolic length (torch.export
        with a dynamic time axis, as `edgeseq bench` exports `forward`) has no spans to cut:
        every layer then runs all readings in one call."""
        B, T, _ = x.shape
        if not isinstance(T, int):
            i = torch.arange(T, device=x.device)
            h, every = self._embed(x, i), [(slice(None), slice(None), self._bias(i, i, hidden_keys))]
            for block in self.blocks:
                h = block(h, every)                            # (B, T, C)
            return self.ln_f(h[:, first:])                    # (B, T - first, C)
        L, w = self.config.layers, self.config.window
        reach = w - 1 if w else T                              # readings before a query that it sees
        lo = 0                                                 # readings before lo: hidden from every row
        if hidden_keys is not None:
            lo = min(first, int(hidden_keys.all(0).cumprod(0).sum()))
        starts = [max(lo, first - (L - 1 - l) * reach) for l in range(L)]   # each layer's first query
        inputs = [max(lo, starts[0] - reach)] + starts[:-1]    # each layer's first input reading
        ends = sorted(set(starts)) + [T]
        cuts = [T]
        for p, r in zip(ends, ends[1:]):                       # in pieces of at most SPAN queries
            n = -(-(r - p) // SPAN) if w else 1
            cuts += [p + round(j * (r - p) / n) for j in range(n)]
        cuts.sort()
        i = torch.arange(T, device=x.device)
        spans = []                                             # (first query, end, first key, bias)
        for a, b in zip(cuts, cuts[1:]):
            ka = max(lo, a - reach)
            hidden = None if hidden_keys is None else hidden_keys[:, ka:b]
            if hidden is not None and not bool(hidden.any()):
                hidden = None
            spans.append((a, b, ka, self._bias(i[a:b], i[ka:b], hidden)))  # bias (., ., b - a, b - ka)
        h = self._embed(x[:, inputs[0]:], i[inputs[0]:])       # (B, T - inputs[0], C)
        for block, q0, k0 in zip(self.blocks, starts, inputs):
            mine = [(slice(a - k0, b - k0), slice(ka - k0, b - k0), bias) for a, b, ka, bias in spans if a >= q0]
            h = block(h, mine, q0 - k0)                        # (B, T - q0, C)
        return self.ln_f(h)                                   # (B, T - first, C)

    def forward_all(self, x):
        """x (B, T, F) -> logits after every reading (B, T, classes)."""
        return self.head(self._hidden(x))

    def forward_stream(self, x, carry=None, fresh=None):
        """One chunk of a long stream, for truncated BPTT: x (B, T, F), `carry` what the previous
        chunk returned (None: the stream starts here), `fresh` (B,) bool: rows that start from
        nothing here -> (logits after every reading of the chunk (B, T, C), carry: the last
        `context()` readings with a mask of those this row may see). Each reading sees what it
        would in deployment (the runtime slides the cache); without positions, where the window
        sits in the stream does not matter, so the logits are those of one pass over the whole
        stream (or, from a fresh row, over its own readings)."""
        T = x.shape[1]
        full, seen = join_carry(x, carry, fresh)                         # (B, ctx + T, F), (B, ctx + T)
        ctx = full.shape[1] - T
        blind = ~seen[:, :ctx].any(1)                                    # (B,): rows that see none of their carry
        if self.config.positions in SHIFT_INVARIANT and ctx and bool(blind.any()) and not bool(blind.all()):
            # those run without it: where a window sits does not matter, so their logits are the
            # same, and the carry (98 readings by default, against a chunk's 50) costs them nothing
            rest = ~blind
            order = torch.cat([blind.nonzero()[:, 0], rest.nonzero()[:, 0]])            # (B,)
            h = torch.cat([self._hidden(x[blind]), self._hidden(full[rest], ~seen[rest], first=ctx)])
            h = h[torch.argsort(order)]                                  # (B, T, C) in row order
        else:
            h = self._hidden(full, None if bool(seen.all()) else ~seen, first=ctx)  # (B, T, C)
        logits = self.head(self.drop(h))                                 # (B, T, C)
        keep = self.context() if self.config.window else full.shape[1] - 1
        start = max(0, full.shape[1] - keep)
        return logits, (full[:, start:].detach(), seen[:, start:])

    def context(self) -> int:
        """Readings before a reading that its logits depend on: each layer's window reaches
        `window - 1` readings further back through the previous layer's outputs (the KV cache
        of layer l holds outputs that saw their own windows). 0 when the window is unbounded."""
        return self.config.layers * (self.config.window - 1) if self.config.window else 0

    def forward(self, x, lengths=None):
        """x (B, T, F) -> logits after each sequence's last valid reading (B, classes)."""
        return self.head(self.drop(last_valid(self._hidden(x), lengths)))

    def init_state(self, batch: int, history: int = 0) -> tuple:
        c = self.config
        hs = c.d_model // c.heads
        kv = tuple(torch.zeros(batch, c.heads, history, hs) for _ in range(2 * c.layers))
        return (torch.zeros(batch, dtype=torch.int64),) + kv

    def step(self, x, state=None):
        """x (B, F), state (position (B,), past k0, v0, k1, v1, ...) -> (logits, next state)."""
        if state is None:
            state = self.init_state(x.shape[0])
        position, past = state[0], state[1:]
        T = past[0].shape[2]
        h = self._embed(x, position).unsqueeze(1)             # (B, 1, C)
        # Key j (of T + 1) is this stream's iff j >= T - position, and in its window iff j > T - window.
        j = torch.arange(T + 1, device=x.device)              # (T+1,)
        own = j.unsqueeze(0) >= (T - position).unsqueeze(1)   # (B, T+1)
        if self.config.window:
            own &= (j > T - self.config.window).unsqueeze(0)
        bias = torch.where(own, 0.0, MASKED).view(-1, 1, 1, T + 1)  # (B, 1, 1, T+1)
        if self.config.positions == "alibi":
            back = (T - j).to(torch.float32)                  # (T+1,): readings back from this one
            bias = bias - self.slopes.view(1, -1, 1, 1) * back.view(1, 1, 1, T + 1)  # (B, nh, 1, T+1)
        present = []
        for layer, block in enumerate(self.blocks):
            h, k, v = block.step(h, past[2 * layer], past[2 * layer + 1], bias)
            present += [k, v]
        logits = self.head(self.ln_f(h[:, 0]))                # (B, classes)
        return logits, (position + 1,) + tuple(present)

    def state_specs(self) -> list:
        c = self.config
        shape = (contract.BATCH_AXIS, c.heads, contract.HISTORY_AXIS, c.d_model // c.heads)
        specs = []
        for layer in range(c.layers):
            for kv in ("key", "value"):
                specs.append(contract.StateSpec(
                    name=contract.past(layer, kv), output=contract.present(layer, kv),
                    shape=shape, kind=contract.KIND_GROWING, role=f"{kv}.{layer}"))
        return specs

    def macs_per_reading(self, history: int = 0) -> int:
        """Multiply-accumulates for one reading with `history` cached readings."""
        c = self.config
        per_block = 4 * c.d_model * c.d_model + 2 * c.d_model * c.d_ff + 2 * (history + 1) * c.d_model
        return c.n_features * c.d_model + c.layers * per_block + c.d_model * c.n_classes
