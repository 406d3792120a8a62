"""Encoder-decoder translation models (torch): a Transformer and an LSTM with additive attention.

Both expose the same three entry points, which the exporter turns into two graphs:

- `encode(source, lengths)` -> the encoder outputs the decoder reads at every step
  (Transformer: cross-attention K/V per layer; LSTM: memory, attention keys and the
  decoder's initial state),
- `decode(target_in, enc, lengths)` -> logits for every target position at once (training,
  teacher forcing),
- `step(token, position, state, enc, lengths)` -> (log-probabilities, new state, attention
  over the source), one target token at a time. The Transformer's state is its self-attention
  cache (growing); the LSTM's is (h, c, previous context) (fixed).

Shared source/target vocabulary (one joint subword tokenizer), tied embeddings and output
projection. Masks add a large negative number, not -inf.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

from edgeseq.errors import UsageError
from edgeseq.models.birnn import reverse_within
from edgeseq.models.transformer import sinusoid, split_heads
from edgeseq.translate.tokenizer import PAD_ID

MASKED = -1e9
ARCHS = ("transformer", "lstm-attn")


@dataclass(frozen=True)
class TransformerMTConfig:
    vocab: int = 2000
    d_model: int = 128
    heads: int = 4
    enc_layers: int = 2
    dec_layers: int = 2
    d_ff: int = 256
    dropout: float = 0.1


@dataclass(frozen=True)
class LSTMAttnConfig:
    vocab: int = 2000
    emb: int = 128
    hidden: int = 128        # per encoder direction; the decoder has 2 * hidden
    attn: int = 128          # additive attention width
    dropout: float = 0.2


def source_bias(lengths: torch.Tensor, S: int) -> torch.Tensor:
    """(B,) -> (B, S): 0 where the source token is real, MASKED where it is padding."""
    j = torch.arange(S, device=lengths.device).unsqueeze(0)
    return torch.where(j < lengths.unsqueeze(1), 0.0, MASKED)


def tied_embedding(vocab: int, dim: int) -> nn.Embedding:
    """Input embedding that is also the output projection: N(0, 1/dim) keeps the first logits small."""
    e = nn.Embedding(vocab, dim, padding_idx=PAD_ID)
    nn.init.normal_(e.weight, std=dim ** -0.5)
    with torch.no_grad():
        e.weight[PAD_ID].zero_()
    return e


class MHA(nn.Module):
    def __init__(self, c: TransformerMTConfig):
        super().__init__()
        self.h, self.dh = c.heads, c.d_model // c.heads
        self.q = nn.Linear(c.d_model, c.d_model)
        self.kv = nn.Linear(c.d_model, 2 * c.d_model)
        self.out = nn.Linear(c.d_model, c.d_model)
        self.drop = nn.Dropout(c.dropout)

    def heads(self, t):
        return split_heads(t, self.h)                                 # (B, h, T, dh)

    def project_kv(self, x):
        k, v = self.kv(x).chunk(2, dim=-1)
        return self.heads(k), self.heads(v)

    def attend(self, x, k, v, bias):
        """x (B, T, D) queries; k, v (B, h, S, dh); bias broadcast to (B, h, T, S)."""
        q = self.heads(self.q(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.dh) + bias
        w = torch.softmax(scores, dim=-1)
        y = (self.drop(w) @ v).transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
        return self.out(y), w


class FF(nn.Sequential):
    def __init__(self, c):
        super().__init__(nn.Linear(c.d_model, c.d_ff), nn.GELU(), nn.Dropout(c.dropout), nn.Linear(c.d_ff, c.d_model))


class EncoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln1, self.att, self.ln2, self.ff = nn.LayerNorm(c.d_model), MHA(c), nn.LayerNorm(c.d_model), FF(c)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x, bias):
        h = self.ln1(x)
        k, v = self.att.project_kv(h)
        x = x + self.drop(self.att.attend(h, k, v, bias)[0])
        return x + self.drop(self.ff(self.ln2(x)))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln1, self.self_att = nn.LayerNorm(c.d_model), MHA(c)
        self.ln2, self.cross = nn.LayerNorm(c.d_model), MHA(c)
        self.ln3, self.ff = nn.LayerNorm(c.d_model), FF(c)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x, k_self, v_self, self_bias, k_x, v_x, cross_bias):
        h = self.ln1(x)
        x = x + self.drop(self.self_att.attend(h, k_self, v_self, self_bias)[0])
        y, w = self.cross.attend(self.ln2(x), k_x, v_x, cross_bias)
        x = x + self.drop(y)
        return x + self.drop(self.ff(self.ln3(x))), w


class TransformerMT(nn.Module):
    """Pre-norm encoder-decoder Transformer, sinusoidal positions, tied embeddings."""

    arch = "transformer"

    def __init__(self, c: TransformerMTConfig):
        super().__init__()
        self.config = c
        self.embed = tied_embedding(c.vocab, c.d_model)
        self.enc = nn.ModuleList(EncoderLayer(c) for _ in range(c.enc_layers))
        self.dec = nn.ModuleList(DecoderLayer(c) for _ in range(c.dec_layers))
        self.ln_enc, self.ln_dec = nn.LayerNorm(c.d_model), nn.LayerNorm(c.d_model)
        self.drop = nn.Dropout(c.dropout)
        self.scale = math.sqrt(c.d_model)

    def _embed(self, ids, positions):
        return self.drop(self.embed(ids) * self.scale + sinusoid(positions, self.config.d_model))

    def encode(self, source, lengths):
        """-> [k_0, v_0, k_1, v_1, ...] cross-attention K/V per decoder layer, (B, h, S, dh)."""
        S = source.shape[1]
        pos = torch.arange(S, device=source.device).unsqueeze(0).expand_as(source)
        x = self._embed(source, pos)
        bias = source_bias(lengths, S)[:, None, None, :]
        for layer in self.enc:
            x = layer(x, bias)
        memory = self.ln_enc(x)
        out = []
        for layer in self.dec:
            out += list(layer.cross.project_kv(memory))
        return out

    def decode(self, target_in, enc, lengths):
        """Teacher forcing: target_in (B, T) -> logits (B, T, V)."""
        B, T = target_in.shape
        pos = torch.arange(T, device=target_in.device).unsqueeze(0).expand(B, T)
        x = self._embed(target_in, pos)
        i, j = torch.arange(T).unsqueeze(1), torch.arange(T).unsqueeze(0)
        causal = torch.where(j <= i, 0.0, MASKED)[None, None]
        cross_bias = source_bias(lengths, enc[0].shape[2])[:, None, None, :]
        for n, layer in enumerate(self.dec):
            k, v = layer.self_att.project_kv(layer.ln1(x))
            x, _ = layer(x, k, v, causal, enc[2 * n], enc[2 * n + 1], cross_bias)
        return self.ln_dec(x) @ self.embed.weight.t()

    def init_state(self, B: int):
        c = self.config
        e = torch.zeros(B, c.heads, 0, c.d_model // c.heads)
        return [e] * (2 * c.dec_layers)

    def step(self, token, position, state, enc, lengths):
        """token, position (B,) -> (log-probs (B, V), new self-attention cache, attention (B, S))."""
        x = self._embed(token.unsqueeze(1), position.unsqueeze(1))          # (B, 1, D)
        cross_bias = source_bias(lengths, enc[0].shape[2])[:, None, None, :]
        new, ws = [], []
        for n, layer in enumerate(self.dec):
            k, v = layer.self_att.project_kv(layer.ln1(x))
            k = torch.cat([state[2 * n], k], dim=2)
            v = torch.cat([state[2 * n + 1], v], dim=2)
            new += [k, v]
            x, w = layer(x, k, v, 0.0, enc[2 * n], enc[2 * n + 1], cross_bias)
            ws.append(w[:, :, 0])                                            # (B, h, S)
        logits = self.ln_dec(x[:, 0]) @ self.embed.weight.t()
        return F.log_softmax(logits, dim=-1), new, torch.stack(ws, 1).mean(dim=(1, 2))   # mean of layers and heads


class LSTMAttn(nn.Module):
    """Bidirectional LSTM encoder, LSTM decoder with additive (Bahdanau) attention.

    At step t the decoder scores every source position j with v^T tanh(K_j + W s_{t-1})
    (K = W_k memory, computed once by the encoder), takes the context c_t, runs its LSTM on
    [embed(y_{t-1}), c_t] and predicts y_t from [s_t, c_t]."""

    arch = "lstm-attn"

    def __init__(self, c: LSTMAttnConfig):
        super().__init__()
        self.config = c
        H2 = 2 * c.hidden
        self.embed = tied_embedding(c.vocab, c.emb)
        self.fwd = nn.LSTM(c.emb, c.hidden, batch_first=True)
        self.bwd = nn.LSTM(c.emb, c.hidden, batch_first=True)
        self.init_h = nn.Linear(H2, H2)
        self.key = nn.Linear(H2, c.attn, bias=False)
        self.query = nn.Linear(H2, c.attn)
        self.v = nn.Linear(c.attn, 1, bias=False)
        self.cell = nn.LSTMCell(c.emb + H2, H2)
        self.pre_out = nn.Linear(2 * H2, c.emb)
        self.drop = nn.Dropout(c.dropout)

    def encode(self, source, lengths):
        """-> [memory (B, S, 2H), keys (B, S, A), h0 (B, 2H), c0 (B, 2H)]."""
        x = self.drop(self.embed(source))
        out_f, _ = self.fwd(x)
        out_b, _ = self.bwd(reverse_within(x, lengths))
        out_b = reverse_within(out_b, lengths)
        memory = torch.cat([out_f, out_b], dim=-1)                           # (B, S, 2H)
        B = source.shape[0]
        last_f = out_f[torch.arange(B), lengths - 1]                          # forward state at the end
        first_b = out_b[:, 0]                                                 # backward state at the start
        h0 = torch.tanh(self.init_h(torch.cat([last_f, first_b], -1)))
        return [memory, self.key(memory), h0, torch.zeros_like(h0)]

    def _attend(self, h, memory, keys, bias):
        e = self.v(torch.tanh(keys + self.query(h).unsqueeze(1))).squeeze(-1) + bias    # (B, S)
        w = torch.softmax(e, dim=-1)
        return (w.unsqueeze(-1) * memory).sum(1), w

    def _cell(self, token, h, c, memory, keys, bias):
        ctx, w = self._attend(h, memory, keys, bias)
        h, c = self.cell(torch.cat([self.drop(self.embed(token)), ctx], -1), (h, c))
        out = self.pre_out(self.drop(torch.cat([h, ctx], -1)))
        return out @ self.embed.weight.t(), h, c, w

    def decode(self, target_in, enc, lengths):
        memory, keys, h, c = enc
        bias = source_bias(lengths, memory.shape[1])
        out = []
        for t in range(target_in.shape[1]):
            logits, h, c, _ = self._cell(target_in[:, t], h, c, memory, keys, bias)
            out.append(logits)
        return torch.stack(out, 1)

    def init_state(self, B: int):
        return []                                                             # (h, c) come from the encoder

    def step(self, token, position, state, enc, lengths):
        memory, keys, h0, c0 = enc
        h, c = state if state else (h0, c0)
        logits, h, c, w = self._cell(token, h, c, memory, keys, source_bias(lengths, memory.shape[1]))
        return F.log_softmax(logits, dim=-1), [h, c], w


def check_arch(arch: str) -> str:
    if arch not in ARCHS:
        raise UsageError(f"unknown translation architecture '{arch}'; use {' or '.join(ARCHS)}")
    return arch


def build(arch: str, config: dict | None = None, vocab: int | None = None):
    check_arch(arch)
    cls, cfg = (TransformerMT, TransformerMTConfig) if arch == "transformer" else (LSTMAttn, LSTMAttnConfig)
    config = dict(config or {})
    if vocab is not None:
        config["vocab"] = vocab
    known = set(cfg.__dataclass_fields__)
    unknown = sorted(set(config) - known)
    if unknown:
        raise UsageError(f"unknown {arch} setting {', '.join(unknown)}; known: {', '.join(sorted(known - {'vocab'}))}")
    return cls(cfg(**config))


def config_of(model) -> dict:
    return asdict(model.config)
