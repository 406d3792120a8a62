"""Pieces every architecture shares: in-graph normalisation and the recurrent classifier.

A recurrent model trains with torch's fused layer (`nn.RNN`/`nn.GRU`/`nn.LSTM`) and streams
with `step()`, which spells the same cell out as matrix products on the same weights. The
exported step graph is therefore made of MatMul/Gemm and element-wise nodes, which int8
quantizers can handle, and parity between the two paths is a real check of the cell math.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from edgeseq import contract
from edgeseq.data import GAIN_RELEASE


class Normalize(nn.Module):
    """(t - mean) / std per feature, t = asinh(x / asinh_scale) where the model has an input
    transform (`edgeseq.data.asinh_scales`), else x; fitted on training data, exported as the
    graph's first nodes (Div, Asinh, then Sub and Div). The scale is not in the state dict:
    the checkpoint's normalization carries it (`set`).

    With the gain stage (`levels` > 0, `edgeseq.data.gain_features`) t is each reading over its
    channel's running level and the G = `levels` log levels: F + G features, and a state of
    its own, u float32 (B, F), zeros at a stream's start (`step`, `run`)."""

    def __init__(self, n_features: int, levels: int = 0):
        super().__init__()
        self.register_buffer("mean", torch.zeros(n_features + levels))
        self.register_buffer("std", torch.ones(n_features + levels))
        self.register_buffer("asinh_scale", torch.ones(n_features), persistent=False)
        self.asinh = False
        self.levels = levels
        self.release = GAIN_RELEASE
        for name in ("gain_safe", "gain_on", "gain_log"):       # floor (1 where off), 1/0, log(floor) (0 where off)
            self.register_buffer(name, torch.ones(n_features), persistent=False)
        self.gain_idx = torch.zeros(levels, dtype=torch.long)  # the gained channels; not a buffer (an average
                                                                # of the weights, `ema`, averages buffers)

    @property
    def gain(self) -> bool:
        return self.levels > 0

    def set(self, mean, std, asinh_scale=None, gain_floor=None, gain_release=GAIN_RELEASE):
        self.mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
        self.std.copy_(torch.as_tensor(std, dtype=torch.float32))
        self.asinh = asinh_scale is not None
        if self.asinh:
            self.asinh_scale.copy_(torch.as_tensor(asinh_scale, dtype=torch.float32))
        if self.gain:
            floor = torch.as_tensor(gain_floor, dtype=torch.float32)
            on = floor > 0
            if int(on.sum()) != self.levels:
                raise ValueError(f"the gain stage has {int(on.sum())} gained channels, the model {self.levels} levels")
            self.gain_safe.copy_(torch.where(on, floor, torch.ones_like(floor)))
            self.gain_on.copy_(on.float())
            self.gain_log.copy_(torch.log(self.gain_safe) * self.gain_on)
            self.gain_idx = torch.nonzero(on).view(-1)
            self.release = float(gain_release)

    def forward(self, x):
        """x (B, T, F) raw readings (a whole sequence, from the gain stage's zero state) or,
        without the gain stage, any [..., F] -> (..., F + G) normalised."""
        if self.gain:
            return self.run(x)[0]
        if self.asinh:
            x = torch.asinh(x / self.asinh_scale)
        return (x - self.mean) / self.std

    def run(self, x, u0=None):
        """The gain stage over a chunk: x (B, T, F) raw, u0 (B, F) or None (zeros) -> (normalised
        (B, T, F + G), the state after the chunk's last reading (B, F)). A running maximum in
        float64 (`edgeseq.data.gain_levels`), no gradient (nothing before it is trained).
        Without the gain stage: (normalised x, None)."""
        if not self.gain:
            return self(x), None
        with torch.no_grad():
            xd, r = x.double(), self.release
            safe = self.gain_safe.double()
            lx = torch.log(torch.maximum(xd.abs(), safe) / safe)                 # (B, T, F)
            t = torch.arange(x.shape[1], dtype=torch.float64).view(1, -1, 1)
            u = torch.cummax(lx + r * t, dim=1).values - r * t
            if u0 is not None:
                u = torch.maximum(u, u0.double().unsqueeze(1) - r * (t + 1))
            u = u * self.gain_on.double()
            level = u + self.gain_log.double()
            feats = torch.cat([xd / torch.exp(level), level[..., self.gain_idx]], -1).float()
        return (feats - self.mean) / self.std, u[:, -1].float()

    def step_from(self, x, state: tuple) -> tuple:
        """One reading x (B, F) raw from a model's whole step state (the gain stage's last where
        the model has one) -> (normalised reading, the model's own state, the gain stage's next
        state as a tuple: (u,) or ())."""
        if not self.gain:
            return self(x), state, ()
        xn, u = self.step(x, state[-1])
        return xn, state[:-1], (u,)

    def step(self, x, u):
        """One reading through the gain stage, as the graph computes it: x (B, F) raw, u (B, F)
        -> (normalised (B, F + G), next u (B, F))."""
        u = torch.maximum(torch.log(torch.maximum(x.abs(), self.gain_safe) / self.gain_safe),
                          u - self.release) * self.gain_on
        level = u + self.gain_log
        feats = torch.cat([x / torch.exp(level), level[:, self.gain_idx]], -1)
        return (feats - self.mean) / self.std, u


def gain_specs(norm: Normalize, i: int) -> list:
    """[the gain stage's state spec, `contract.state_in(i)`, (batch, F), role "gain"], [] without one."""
    if not norm.gain:
        return []
    return [contract.StateSpec(name=contract.state_in(i), output=contract.state_out(i),
                               shape=(contract.BATCH_AXIS, norm.gain_on.shape[0]), role=contract.GAIN_ROLE)]


def output_layers(config) -> tuple:
    """(final LayerNorm, dropout, linear head) of a stacked model of width `config.d_model`,
    created in this order: the seeded initial weights depend on it."""
    return (nn.LayerNorm(config.d_model), nn.Dropout(config.dropout),
            nn.Linear(config.d_model, config.n_classes))


@dataclass(frozen=True)
class RecurrentConfig:
    n_features: int = 6      # sensor channels per reading
    n_classes: int = 4       # activity classes
    hidden: int = 64         # state size: 4 bytes per unit, layer and state tensor (LSTM has h and c)
    layers: int = 1          # one layer is enough for 100-reading windows
    dropout: float = 0.1     # on the head input; also between layers when layers > 1
    levels: int = 0          # log levels the gain stage adds (one per gained channel; training sets it)


def lecun_normal(weight: torch.Tensor) -> torch.Tensor:
    """Draw `weight` (out, fan_in) in place from N(0, 1/fan_in) (LeCun et al. 1998, "Efficient
    BackProp"): each gate's pre-activation from the normalised
    reading then has the variance of one reading, whatever the channel count. Torch draws every
    recurrent weight from U(+-1/sqrt(hidden)), the right fan-in for the recurrent matrices and for
    deeper layers but not for the first layer's input matrix: with one channel and 64 units the
    reading moved each gate by a standard deviation of 0.07, and the GRU and LSTM sat at chance
    on Coffee (UCR, 2 classes) for 150-300 epochs where this draw fits it in 25-50 (CHANGELOG,
    measured during development). Training applies it by `TrainConfig.input_init`
    (`edgeseq.train.loop.init_inputs`). Returns `weight`."""
    return nn.init.normal_(weight, 0.0, weight.shape[1] ** -0.5)


def last_valid(out: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """out (B, T, H) -> (B, H): the row after each sequence's last valid reading."""
    if lengths is None:
        return out[:, -1]
    idx = (lengths - 1).clamp(min=0).view(-1, 1, 1).expand(-1, 1, out.shape[-1])  # (B, 1, H)
    return out.gather(1, idx).squeeze(1)


class RecurrentClassifier(nn.Module):
    """Stacked recurrent layer + linear head. Subclasses set `rnn_cls`, `n_state` and `cell`."""

    rnn_cls: type = nn.RNN
    input_weight = "rnn.weight_ih_l0"   # state_dict key of the matrix that reads the normalised reading
    n_state = 1  # state tensors per layer: h (RNN, GRU) or h and c (LSTM)
    state_roles = ("h",)

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.norm = Normalize(config.n_features, config.levels)
        self.rnn = self.rnn_cls(config.n_features + config.levels, config.hidden, config.layers, batch_first=True,
                                dropout=config.dropout if config.layers > 1 else 0.0)
        self.drop = nn.Dropout(config.dropout)
        self.head = nn.Linear(config.hidden, config.n_classes)

    def forward_all(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, F) -> logits after every reading (B, T, C)."""
        out, _ = self.rnn(self.norm(x))                       # (B, T, H)
        return self.head(out)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, F) -> logits after each sequence's last valid reading (B, C)."""
        out, _ = self.rnn(self.norm(x))                       # (B, T, H)
        return self.head(self.drop(last_valid(out, lengths)))

    def forward_stream(self, x: torch.Tensor, carry=None, fresh: torch.Tensor | None = None):
        """One chunk of a long stream, for truncated BPTT: x (B, T, F), `carry` what the previous
        chunk returned (None: zero state), `fresh` (B,) bool: rows that start from zero state
        here -> (logits after every reading (B, T, C), carry). The carry is the fused layer's
        state, detached: gradients stop at the chunk's start."""
        carry, u = carry if self.norm.gain and carry is not None else (carry, None)
        if carry is not None and fresh is not None:
            keep = (~fresh).to(x.dtype).view(1, -1, 1)        # (1, B, 1): the layer's state is (layers, B, H)
            carry = tuple(s * keep for s in carry) if isinstance(carry, tuple) else carry * keep
            u = None if u is None else u * keep.view(-1, 1)
        xn, u = self.norm.run(x, u)
        out, state = self.rnn(xn, carry)                      # (B, T, H)
        carry = tuple(s.detach() for s in state) if isinstance(state, tuple) else state.detach()
        return self.head(self.drop(out)), (carry, u) if self.norm.gain else carry

    def init_state(self, batch: int) -> tuple:
        H = self.config.hidden
        gain = (torch.zeros(batch, self.config.n_features),) if self.norm.gain else ()
        return tuple(torch.zeros(batch, H) for _ in range(self.config.layers * self.n_state)) + gain

    def step(self, x: torch.Tensor, state: tuple | None = None):
        """x (B, F), state (tensors per layer, then the gain stage's) -> (logits (B, C), next state)."""
        if state is None:
            state = self.init_state(x.shape[0])
        inp, state, gain = self.norm.step_from(x, state)
        new = []
        for layer in range(self.config.layers):
            s = state[layer * self.n_state:(layer + 1) * self.n_state]
            w_ih = getattr(self.rnn, f"weight_ih_l{layer}")
            w_hh = getattr(self.rnn, f"weight_hh_l{layer}")
            b_ih = getattr(self.rnn, f"bias_ih_l{layer}")
            b_hh = getattr(self.rnn, f"bias_hh_l{layer}")
            gi = inp @ w_ih.t() + b_ih                        # (B, G*H)
            s = self.cell(gi, s, w_hh, b_hh)
            new.extend(s)
            inp = s[0]
        return self.head(inp), tuple(new) + gain

    def cell(self, gi, state, w_hh, b_hh):
        raise NotImplementedError

    def state_specs(self) -> list:
        specs = []
        for layer in range(self.config.layers):
            for k, role in enumerate(self.state_roles):
                i = layer * self.n_state + k
                specs.append(contract.StateSpec(
                    name=contract.state_in(i), output=contract.state_out(i),
                    shape=(contract.BATCH_AXIS, self.config.hidden), role=f"{role}.{layer}"))
        return specs + gain_specs(self.norm, len(specs))

    def macs_per_reading(self) -> int:
        c = self.config
        gates = {nn.RNN: 1, nn.GRU: 3, nn.LSTM: 4}[self.rnn_cls]
        macs = 0
        for layer in range(c.layers):
            n_in = c.n_features + c.levels if layer == 0 else c.hidden
            macs += gates * c.hidden * (n_in + c.hidden)
        return macs + c.hidden * c.n_classes
