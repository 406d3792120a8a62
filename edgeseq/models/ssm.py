"""Diagonal state-space classifier (S4D / LRU family), trained in parallel, streamed with a fixed state.

Each layer holds a real diagonal linear recurrence over `d_state` states, read in and out by
dense projections and followed by a gated output, pre-norm and residual (as in Mamba's block):

    v_t = LayerNorm(u_t)                           u_t: the layer's input (d_model)
    [x_t | g_t (| δ_t)] = W_in v_t + b_in
    s_t = a_t ⊙ s_{t-1} + (1 - a_t) ⊙ x_t          the state (d_state), the only thing carried
    y_t = C s_t + D ⊙ v_t
    u'_t = u_t + W_out (y_t ⊙ SiLU(g_t)) + b_out   the head reads LayerNorm(u') of the last layer

The gate multiplies two projections of the input, so without the norm a layer's output grows
with the square of its input: two such layers reach logits of 7.7e4 on BasicMotions training
readings, which float accuracy survives and one int8 scale per tensor does not. With the
norm every layer sees inputs of unit scale.

Parameterisation and discretisation. Each state n is the continuous-time system
ds/dt = λ_n (x(t) - s) (unit gain at rest: s settles at x), discretised by zero-order hold
(x held over one reading of length Δ): a = exp(-λΔ), and s_t = a s_{t-1} + (1 - a) x_t is
exact for a piecewise-constant input. λΔ > 0 by construction:
- fixed (`selective=False`): one parameter per state, log_rate = log(λΔ), so a = exp(-exp(log_rate));
- selective (`selective=True`, Mamba-style): the step depends on the reading, Δ_t =
  softplus(δ_t) from the input projection, λ = exp(log_lambda), a_t = exp(-λ ⊙ Δ_t): the
  layer decides per reading how much to forget and how much to take in.
Either way a lies in (0, 1) (float32 rounds to [0, 1]), so s_t is a convex combination of
s_{t-1} and x_t: |s_t| <= max(|s_{t-1}|, |x_t|) per state, the state cannot grow beyond its
inputs over any number of readings, and no decay ever needs clamping. Initial timescales
1/(λΔ) are log-spaced over `TIMESCALES` readings.

The state is real, not complex as in S4D and LRU: it stays a plain float32 tensor [batch,
d_state] per layer in the step graph, every state a float the budget counts (a complex state
holds two), and the step needs no complex arithmetic, which ONNX lacks. The selective variant
keeps the same state and step contract; only a_t and the input gain become functions of the
reading. The config's default is the fixed decay; training makes a classifier of
single-channel data selective (`edgeseq.train.loop.data_settings`): on BasicMotions (seed 0)
the selective variant scored 0.975 per sequence against 1.000 (never-reset per reading 0.991
against 0.990) with 2,112 more parameters and about 1.5x the step time, and on the
single-channel public sets of docs/training.md higher on six of seven.

Parallel form: `diagonal_scan` solves the recurrence over a whole sequence at once, in
chunks of `SCAN_CHUNK` readings. Inside a chunk, state t is sum_j exp(L_t - L_j) x'_j over
the chunk's earlier readings, with L_t - L_j the sum of log a over readings j+1..t (for the
fixed decay simply (t - j) log a); the chunk ends obey the same recurrence over
T / SCAN_CHUNK steps and are solved the same way, one level up (log_SCAN_CHUNK(T) levels in
all). Only sums of log a over a span (always <= 0) are exponentiated, so nothing overflows
however long the sequence, where dividing by the running product of decays would need
exp(+20 000) after 1,000 readings of log a = -20. No Python loop over readings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from edgeseq import contract
from edgeseq.models.common import Normalize, gain_specs, last_valid, output_layers

SCAN_CHUNK = 8                # readings per chunk of the parallel scan: work and memory O(T * SCAN_CHUNK * d_state)
TIMESCALES = (1.0, 100.0)     # initial 1/(λΔ) range in readings: a reading's worth up to a whole sequence


def diagonal_scan(log_a: torch.Tensor, x: torch.Tensor, s0: torch.Tensor | None = None,
                  chunk: int = SCAN_CHUNK) -> torch.Tensor:
    """Every state of s_t = exp(log_a_t) * s_{t-1} + x_t over a sequence, in parallel.

    log_a: finite, <= 0: the log of each reading's decay, (B, T, N), or (N,) for the same
    decay at every reading (time-invariant: one chunk matrix serves every chunk and stream).
    x: (B, T, N) float, what each reading adds. s0: (B, N) state before the first reading
    (None: zeros). chunk: readings per chunk (>= 2). Returns (B, T, N) float, s_1..s_T.

    Inside each chunk of `chunk` readings the states from a zero start are one masked product
    with exp(sums of log a over readings j+1..i), (chunk x chunk) per state; the chunk ends obey
    the same recurrence over T / chunk steps, solved by this function again, so work and memory
    stay O(T * chunk * N) for any T. Raises ValueError on mismatched shapes or chunk < 2."""
    if x.dim() != 3 or log_a.shape not in (x.shape, x.shape[-1:]):
        raise ValueError(f"log_a {tuple(log_a.shape)} must be (B, T, N) or (N,) for x (B, T, N), got x "
                         f"{tuple(x.shape)}")
    if chunk < 2:
        raise ValueError(f"chunk must be at least 2 readings, got {chunk}")
    B, T, N = x.shape
    s0 = torch.zeros(B, N, dtype=x.dtype, device=x.device) if s0 is None else s0
    if T == 0:
        return x
    K = min(chunk, T)
    C = -(-T // K)
    pad = C * K - T                                   # padded readings add x = 0 after the last one: dropped
    xs = F.pad(x, (0, 0, 0, pad)).view(B, C, K, N)                        # (B, C, K, N)
    i = torch.arange(K, device=x.device)
    lag = i.unsqueeze(1) - i.unsqueeze(0)                                  # (K, K): i - j
    past = (lag >= 0).unsqueeze(-1)                                        # (K, K, 1): j <= i
    if log_a.dim() == 1:                                                   # a^(i - j), shared
        decay = torch.exp(lag.clamp(min=0).unsqueeze(-1) * log_a).masked_fill(~past, 0.0)   # (K, K, N)
        local = torch.einsum("kjn,bcjn->bckn", decay, xs)                  # (B, C, K, N): from zero at chunk start
        into = torch.exp((i + 1).unsqueeze(-1) * log_a)                    # (K, N): decay since the chunk's start
        chunk_log_a = K * log_a                                            # (N,)
    else:
        # Running sums in float64, so that the difference of two (a span's sum) keeps float32
        # precision next to a fast decay (log a = -30) earlier in the chunk.
        cs = F.pad(log_a, (0, 0, 0, pad)).view(B, C, K, N).double().cumsum(2)              # (B, C, K, N)
        span = (cs.unsqueeze(3) - cs.unsqueeze(2)).to(x.dtype)                               # (B, C, K(i), K(j), N)
        span = span.masked_fill(~past, float("-inf"))
        cs = cs.to(x.dtype)
        local = torch.einsum("bckjn,bcjn->bckn", torch.exp(span), xs)      # (B, C, K, N)
        into = torch.exp(cs)                                               # (B, C, K, N)
        chunk_log_a = cs[:, :, -1]                                         # (B, C, N)
    if C == 1:
        start = s0.unsqueeze(1)                                            # (B, 1, N)
    else:                                                                  # end_c = A_c end_{c-1} + local end_c
        ends = diagonal_scan(chunk_log_a, local[:, :, -1], s0, chunk)      # (B, C, N)
        start = torch.cat([s0.unsqueeze(1), ends[:, :-1]], dim=1)          # (B, C, N): state before each chunk
    states = local + into * start.unsqueeze(2)                             # (B, C, K, N)
    return states.reshape(B, C * K, N)[:, :T]                              # (B, T, N)


@dataclass(frozen=True)
class SSMConfig:
    n_features: int = 6      # sensor channels per reading
    n_classes: int = 4       # activity classes
    d_model: int = 32        # width between layers (the residual stream)
    d_state: int = 32        # states per layer: a stream holds layers * d_state floats (GRU default: 64)
    layers: int = 2          # two layers of 32 states: the GRU's 64 floats per stream
    dropout: float = 0.1     # on each layer's output and on the head input
    selective: bool = False  # True: the decay and input gain depend on the reading (Mamba-style)
    levels: int = 0          # log levels the gain stage adds (one per gained channel; training sets it)

    def __post_init__(self):
        if not isinstance(self.selective, bool):
            raise ValueError(f"selective must be true or false, got {self.selective!r}")


class SSMLayer(nn.Module):
    """One diagonal state-space layer with a gated output and a residual connection."""

    def __init__(self, c: SSMConfig):
        super().__init__()
        d, N = c.d_model, c.d_state
        self.d_model, self.d_state, self.selective = d, N, c.selective
        self.ln = nn.LayerNorm(d)
        self.in_proj = nn.Linear(d, 2 * N + d if c.selective else N + d)     # [x | g (| δ)]
        rate = 1.0 / torch.logspace(math.log10(TIMESCALES[0]), math.log10(TIMESCALES[1]), N)   # λΔ, (N,)
        if c.selective:
            self.log_lambda = nn.Parameter(torch.zeros(N))                   # λ = 1: Δ_t alone sets the rate
            with torch.no_grad():
                self.in_proj.bias[N + d:] = torch.log(torch.expm1(rate))     # softplus(δ) = λΔ at δ = bias
                self.in_proj.weight[N + d:] *= 0.1                           # start near the fixed decay
        else:
            self.log_rate = nn.Parameter(torch.log(rate))
        self.out_state = nn.Linear(N, d, bias=False)                         # C
        self.skip = nn.Parameter(torch.ones(d))                              # D
        self.out_proj = nn.Linear(d, d)
        self.drop = nn.Dropout(c.dropout)

    def inputs(self, v: torch.Tensor):
        """v (..., d_model), the normalised input -> (log a (..., d_state), or (d_state,) when
        fixed; x (..., d_state); g (..., d_model)): the decay's log (<= 0), the state's target
        and the output gate."""
        N, d = self.d_state, self.d_model
        p = self.in_proj(v)                                                  # (..., N + d [+ N])
        x, g = p[..., :N], p[..., N:N + d]
        if self.selective:
            log_a = -torch.exp(self.log_lambda) * F.softplus(p[..., N + d:])  # (..., N): -λ Δ_t
        else:
            log_a = -torch.exp(self.log_rate)                                # (N,): -λΔ
        return log_a, x, g

    def output(self, u, v, s, g):
        """u (..., d_model) the input, v its norm, s (..., d_state), g (..., d_model) -> the
        layer's output (..., d_model)."""
        y = self.out_state(s) + self.skip * v
        return u + self.drop(self.out_proj(y * F.silu(g)))

    def forward(self, u: torch.Tensor, s0: torch.Tensor | None = None):
        """u (B, T, d_model), s0 (B, d_state) or None -> (outputs (B, T, d_model), last state (B, d_state))."""
        v = self.ln(u)
        log_a, x, g = self.inputs(v)                                         # log_a (B, T, N) or (N,)
        s = diagonal_scan(log_a, (1 - torch.exp(log_a)) * x, s0)             # (B, T, N)
        return self.output(u, v, s, g), s[:, -1]

    def step(self, u: torch.Tensor, s: torch.Tensor):
        """u (B, d_model), s (B, d_state) -> (output (B, d_model), next state (B, d_state))."""
        v = self.ln(u)
        log_a, x, g = self.inputs(v)
        a = torch.exp(log_a)
        s = a * s + (1 - a) * x
        return self.output(u, v, s, g), s


class SSM(nn.Module):
    """Input projection, `layers` SSMLayers, LayerNorm, linear head. State: one (B, d_state) tensor per layer."""

    input_weight = "encoder.weight"     # state_dict key of the matrix that reads the normalised reading

    def __init__(self, config: SSMConfig):
        super().__init__()
        self.config = config
        self.norm = Normalize(config.n_features, config.levels)
        self.encoder = nn.Linear(config.n_features + config.levels, config.d_model)
        self.layers = nn.ModuleList(SSMLayer(config) for _ in range(config.layers))
        self.ln_f, self.drop, self.head = output_layers(config)

    def _hidden(self, x, state=None, u=None):
        """x (B, T, F), state (per layer (B, d_state)) or None, u the gain stage's state or None
        -> (normalised outputs of the last layer (B, T, d_model), last states, last u)."""
        xn, u = self.norm.run(x, u)
        h, last = self.encoder(xn), []
        for i, layer in enumerate(self.layers):
            h, s = layer(h, None if state is None else state[i])
            last.append(s)
        return self.ln_f(h), tuple(last), u

    def forward_all(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, F) -> logits after every reading (B, T, C), from zero state."""
        return self.head(self._hidden(x)[0])

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, F) -> logits after each sequence's last valid reading (B, C)."""
        return self.head(self.drop(last_valid(self._hidden(x)[0], lengths)))

    def forward_stream(self, x: torch.Tensor, carry=None, fresh: torch.Tensor | None = None):
        """One chunk of a long stream, for truncated BPTT: x (B, T, F), `carry` what the previous
        chunk returned (None: zero state), `fresh` (B,) bool: rows that start from zero state
        here -> (logits after every reading (B, T, C), carry: the last state of each layer,
        detached, so gradients stop at the chunk's start)."""
        carry, u = carry if self.norm.gain and carry is not None else (carry, None)
        if carry is not None and fresh is not None:
            keep = (~fresh).to(x.dtype).unsqueeze(1)          # (B, 1)
            carry = tuple(s * keep for s in carry)
            u = None if u is None else u * keep
        h, last, u = self._hidden(x, carry, u)
        last = tuple(s.detach() for s in last)
        return self.head(self.drop(h)), (last, u) if self.norm.gain else last

    def init_state(self, batch: int) -> tuple:
        """Zero state for `batch` streams: one (batch, d_state) float32 tensor per layer, then
        the gain stage's (batch, F) where the model has one."""
        gain = (torch.zeros(batch, self.config.n_features),) if self.norm.gain else ()
        return tuple(torch.zeros(batch, self.config.d_state) for _ in range(self.config.layers)) + gain

    def step(self, x: torch.Tensor, state: tuple | None = None):
        """x (B, F) raw reading, state (per layer (B, d_state) float32; None: zeros) ->
        (logits (B, C), next state)."""
        if state is None:
            state = self.init_state(x.shape[0])
        xn, state, gain = self.norm.step_from(x, state)
        h, new = self.encoder(xn), []
        for layer, s in zip(self.layers, state):
            h, s = layer.step(h, s)
            new.append(s)
        return self.head(self.ln_f(h)), tuple(new) + gain

    def state_specs(self) -> list:
        """The step graph's state: per layer i, `state_in.{i}` -> `state_out.{i}`, float32
        (batch, d_state), kind fixed, role `s.{i}`."""
        specs = [contract.StateSpec(name=contract.state_in(i), output=contract.state_out(i),
                                    shape=(contract.BATCH_AXIS, self.config.d_state), role=f"s.{i}")
                 for i in range(self.config.layers)]
        return specs + gain_specs(self.norm, len(specs))

    def macs_per_reading(self) -> int:
        """Multiply-accumulates of the dense projections for one reading (the recurrence and the
        gate add a few element-wise operations per state and channel)."""
        c = self.config
        d, N = c.d_model, c.d_state
        per_layer = d * (2 * N + d if c.selective else N + d) + N * d + d * d
        return (c.n_features + c.levels) * d + c.layers * per_layer + d * c.n_classes
