"""The native Transformer step: an exported causal Transformer (`edgeseq.models.transformer`)
run by C on the host, with its KV cache as a ring of rows per stream (`es_attn.h`).

    >>> step = AttnStep(path, meta, streams=4, max_history=50, on_full="slide")
    >>> step.x[:] = readings; step.run()      # -1 adopted; i >= 0 stream i non-finite (nothing changed);
    ...                                       # -4 history full (on_full="error"); -5 grow() first
    >>> step.state                            # past.{l}.key/value as onnxruntime holds them: [B, heads, T, head_dim]
    >>> step.set_state(arrays, position); step.reset(stream=2)

The cache: per stream and layer a ring of R rows (keys, then values), R = the model's window
or the history bound, whichever is smaller; with neither (window 0 and max_history 0) the
ring grows by doubling before a step would need more rows. The reading a stream saw at
position p lies in row p mod R. The history T counts rows as the onnxruntime backend's
shared cache does (one per call, slid at max_history, 0 after a full reset), so
max_history, on_full and positions mean the same on both backends: stream b attends to its
own last min(position_b, T', R - 1) readings and the new one (T' = T after the slide), which
are exactly the keys the graph's mask lets through. Rows no later step can see are not kept:
a snapshot (`state`) gives them as zeros, where onnxruntime keeps values its mask hides.

Weights come from the .onnx file (`onnxfile.read_graph`, no onnx package); the graph is walked
from `reading` to `logits` and every node must be one the walk accounts for, so a file whose
operations are not the export's is refused here, or (an edited constant the walk reads as a
weight) by the probe against onnxruntime (`probe`). Float32 computes what the graph computes
within float32 rounding; static int8 computes what the QDQ graph computes: inputs of each
product on their int8 grid, exact integer sums, outputs requantized where the graph
quantizes them (dequantized weights x float activations, the same numbers up to rounding).
"""

from __future__ import annotations

import os

import numpy as np

from edgeseq import contract
from edgeseq.errors import ModelFileError, UsageError
from edgeseq.runtime.native.bound import BoundStep
from edgeseq.runtime.native.buffers import zeros as _zeros64
from edgeseq.runtime.native.graphread import output_grid
from edgeseq.runtime.native.onnxfile import Graph, read_graph

MAX_LAYERS = 16                     # es_attn.h ES_A_MAX_LAYERS
NB = 16                             # es_float.h ES_F_NB: product columns are padded to it
FIRST_ROWS = 16                     # a growing ring starts with this many rows
from edgeseq.runtime.native.attn_plan import (  # noqa: E402,F401  (importable from here, as always)
    MASK_AT_MOST, OPS, _Walk, meta_reason, plan)

# -- the step --------------------------------------------------------------------------------

def _pad(n: int, k: int = NB) -> int:
    return -(-n // k) * k


def _product(p: dict) -> tuple:
    """One product as es_attn_step.h binds it: (w [K][np], b [np], np, quant, in_s, in_z, out_q,
    out_s, out_z, acc_bias, mul, bias)."""
    w = p["w"]
    K, N = w.shape
    np_ = _pad(N)
    W = _zeros64((K, np_))
    W[:, :N] = w
    b = _zeros64(np_)
    if p["ws"] is None:
        b[:N] = p["b"]
        return (W.reshape(-1), b, np_, 0, 1.0, 0.0, 0, 1.0, 0.0, None, None, None)
    in_s, in_z = p["in_q"]
    scale = (np.float32(in_s) * p["ws"]).astype(np.float32)                  # in_s w_s[c], as float32
    acc_bias = post = None
    if p["gemm"]:                                  # the bias inside the Gemm: on the integer sum's scale
        if p["bq"] is not None:                    # int32 on the sum's scale, as the quantizer writes it
            acc_bias = (p["bq"] * (p["bs"].astype(np.float64) / scale)).astype(np.float32)
        else:
            acc_bias = (p["b"].astype(np.float64) / scale).astype(np.float32)
    else:
        post = p["b"]
    if p["out_q"]:
        out_s, out_z = p["out_q"]
        mul = (scale / np.float32(out_s)).astype(np.float32)
        return (W.reshape(-1), b, np_, 1, float(in_s), in_z, 1, float(out_s), out_z, acc_bias, mul, post)
    return (W.reshape(-1), b, np_, 1, float(in_s), in_z, 0, 1.0, 0.0, acc_bias, scale, post)


class AttnStep(BoundStep):
    """One Transformer step graph bound to C, for `streams` streams, with its KV cache ring.

    Buffers (allocated once and bound to C; write into them, never rebind the attributes):
      x  float32 [B, F] raw readings; logits, probs float32 [B, C]; pos int64 [B] readings each
      stream has seen (the graph's `position`; run() advances it).
    `max_history` (None: no bound) and `on_full` ("slide" or "error") as StreamSession's.
    `run()`: -1 adopted; i >= 0 stream i gave NaN/Inf logits (nothing changed); -4 the history
    is full and on_full is "error" (nothing changed); -5 the ring is full: call grow(), then run()
    again. `push(readings)` after `set_bounds(hi, lo)`: copy, check, run, as NativeStep's.
    `history`: rows of the shared cache as the onnxruntime backend counts them; `rows_held()`:
    rows each stream holds (min(history, ring rows)). `state`: the cache as onnxruntime holds it
    (past.{l}.key/value float32 [B, heads, history, head_dim], rows no step can see again as
    zeros); `set_state(arrays, position)` installs such a cache; `reset(stream=None)`.
    Not thread-safe: serialize calls (StreamSession holds its lock around them)."""

    def __init__(self, path: str | os.PathLike, meta, streams: int = 1, max_history: int | None = None,
                 on_full: str = "slide", graph: Graph | None = None):
        _ext = self._open(path, meta, streams, meta_reason(meta))
        if max_history is not None and (not isinstance(max_history, (int, np.integer)) or max_history < 1):
            raise UsageError(f"max_history must be None or a whole number >= 1, got {max_history!r}")
        if on_full not in ("slide", "error"):
            raise UsageError(f"on_full must be slide or error, got {on_full!r}")
        if graph is None:
            graph = read_graph(path)
        p = plan(meta, graph, path)
        B, F, C, D, L = self.streams, p["F"], p["C"], p["D"], p["L"]
        self.int8 = p["int8"]
        self.grid = output_grid(graph) if self.int8 else 0.0
        self.heads, self.head_dim, self.layers, self.d_model = p["NH"], p["HD"], L, D
        self.window, self.max_history, self.on_full = p["window"], max_history, on_full
        bounds = [n for n in (self.window, max_history) if n]
        self.growable = not bounds
        R = min(bounds) if bounds else FIRST_ROWS
        self.x = np.zeros((B, F), np.float32)
        self.logits = np.zeros((B, C), np.float32)
        self.probs = np.zeros((B, C), np.float32)
        self.pos = np.zeros(B, np.int64)
        self._hist = np.zeros(1, np.int64)
        self._ring = np.zeros((L, 2, B, D, R), np.float32)       # channel by channel: es_attn.h
        FF = p["layers"][0]["d_ff"]
        if any(ly["d_ff"] != FF for ly in p["layers"]):
            raise ModelFileError(f"'{path}' has MLPs of different widths; the native step runs one width")
        layers = [(*ly["ln1"][:2], ly["ln1"][2], *ly["ln2"][:2], ly["ln2"][2], _product(ly["qkv"]),
                   _product(ly["proj"]), _product(ly["fc1"]), _product(ly["fc2"])) for ly in p["layers"]]
        consts = (p["score_div"], *p["gelu"], p["mean"], p["std"], p["freq"], *p["lnf"][:2], p["lnf"][2], p["slopes"],
                  p["asinh"])
        sizes = (B, F, D, p["NH"], L, FF, C, R, max_history or 0, int(on_full == "error"), int(self.growable))
        self._keep = (layers, consts, p)           # the arrays the step points into
        embed, head = _product(p["embed"]), _product(p["head"])
        self._keep += (embed, head)
        self._bind(_ext.attn_step(sizes, (self.x, self.logits, self.probs, self.pos, self._hist, self._ring),
                                  consts, embed, layers, head))

    # -- the cache ---------------------------------------------------------------------------

    @property
    def rows(self) -> int:
        """Ring rows per stream and layer now."""
        return self._ring.shape[4]

    @property
    def history(self) -> int:
        return int(self._hist[0])

    def rows_held(self) -> int:
        """Cache rows each stream holds now: the history, at most the ring's rows."""
        return min(self.history, self.rows)

    def nbytes(self) -> int:
        """Bytes the ring takes for all streams (a growing ring may hold up to twice its rows)."""
        return self._ring.nbytes

    def _held(self, R: int, T: int) -> np.ndarray:
        """Rows of each stream a step may still read: its last min(position, T, R - 1) readings
        (a growing ring, which grows before it is full: R)."""
        return np.minimum(np.minimum(self.pos, T), R if self.growable else R - 1)

    def grow(self) -> None:
        """Double a growing ring, its rows moved to their new places."""
        if not self.growable:
            raise UsageError("this cache is bounded by its window or max_history; it does not grow")
        R, T = self.rows, self.history
        new_R = R * 2
        while new_R < T + 1:
            new_R *= 2
        new = np.zeros(self._ring.shape[:4] + (new_R,), np.float32)
        n = np.minimum(np.minimum(self.pos, T), R)
        self._move(self._ring, R, new, new_R, n, min(R, T))
        self._step.set_ring(new, new_R)
        self._ring = new

    def _move(self, old, R, new, new_R, n, width):
        """Rows p of stream b, pos_b - n_b <= p < pos_b, from old (R rows) into new (new_R rows)."""
        if width <= 0:
            return
        B = self.streams
        p = self.pos[:, None] - width + np.arange(width)[None, :]            # (B, width)
        ok = p >= (self.pos - n)[:, None]
        b = np.broadcast_to(np.arange(B)[:, None], p.shape)[ok]
        new[:, :, b, :, p[ok] % new_R] = old[:, :, b, :, p[ok] % R]

    @property
    def state(self) -> list:
        """The cache as onnxruntime holds it: per layer key, value float32 [B, heads, T, head_dim],
        T = history; rows no later step reads are zeros."""
        B, T, R = self.streams, self.history, self.rows
        n = self._held(R, T)
        t = self.pos[:, None] - T + np.arange(T)[None, :]                    # (B, T): reading index
        ok = t >= (self.pos - n)[:, None]
        slot = np.where(ok, t % R, 0)
        out = []
        for layer in range(self.layers):
            for kv in range(2):
                rows = self._ring[layer, kv][np.arange(B)[:, None], :, slot]  # (B, T, D)
                rows[~ok] = 0.0
                out.append(np.ascontiguousarray(rows.reshape(B, T, self.heads, self.head_dim).transpose(0, 2, 1, 3)))
        return out

    def set_state(self, arrays, position=None) -> None:
        """Install a cache in onnxruntime's layout (one float32 [B, heads, T, head_dim] per
        `meta.state` entry, finite, T the same for all and within max_history; the session
        checks them) and the positions (int64 [B]; None: keep the current ones)."""
        arrays = [np.asarray(a) for a in arrays]
        if len(arrays) != 2 * self.layers:
            raise UsageError(f"state holds {len(arrays)} tensors, this model has {2 * self.layers}")
        B, NH, HD = self.streams, self.heads, self.head_dim
        T = arrays[0].shape[2] if arrays[0].ndim == 4 else -1
        for spec, a in zip(self.meta.state, arrays):
            if a.shape != (B, NH, T, HD) or a.dtype.kind not in "fiu":
                raise UsageError(f"state '{spec.name}' must be real numbers of shape {[B, NH, 'history', HD]} "
                                 f"alike, got {a.dtype} {list(a.shape)}")
        if self.max_history is not None and T > self.max_history:
            raise UsageError(f"state holds {T} history rows, more than max_history {self.max_history}")
        pos = self.pos.copy() if position is None else np.asarray(position, np.int64).reshape(B)
        if (pos < 0).any():
            raise UsageError("positions are readings seen, >= 0")
        R = self.rows
        if self.growable:
            R = FIRST_ROWS
            while R < T + 1:
                R *= 2
        ring = np.zeros(self._ring.shape[:4] + (R,), np.float32)
        n = np.minimum(np.minimum(pos, T), R if self.growable else R - 1)
        t = np.arange(T)[None, :]
        ok = t >= (T - n)[:, None]                                            # (B, T): rows kept
        b, tt = np.nonzero(ok)
        slot = (pos[b] - T + tt) % R
        for i, a in enumerate(arrays):
            rows = a.astype(np.float32, copy=False).transpose(0, 2, 1, 3).reshape(B, T, self.d_model)
            ring[i // 2, i % 2, b, :, slot] = rows[b, tt]
        self._step.set_ring(ring, R)                # a fresh ring: no row of the old one survives
        self._ring = ring
        self.pos[:] = pos
        self._hist[0] = T

    def reset(self, stream: int | None = None) -> None:
        """Forget one stream's history (its rows are never read again), or all: the history
        starts again from 0 rows and a growing ring goes back to its first size."""
        if stream is not None:
            self.pos[stream] = 0
            return
        self.pos[:] = 0
        self._hist[0] = 0
        if self.growable and self.rows != FIRST_ROWS:
            ring = np.zeros(self._ring.shape[:4] + (FIRST_ROWS,), np.float32)
            self._step.set_ring(ring, FIRST_ROWS)
            self._ring = ring


def probe(step: AttnStep, session, X: np.ndarray, agree) -> str | None:
    """`native.probe` for a Transformer: the step and the graph (onnxruntime, the cache grown,
    slid at the step's max_history, position fed) on the same seeded readings X float32
    [readings, streams, F] (`probing.probe_readings`); `agree(got, want)` judges the logits."""
    meta = step.meta
    B = step.streams
    past = [np.zeros((B, step.heads, 0, step.head_dim), np.float32) for _ in meta.state]
    pos = np.zeros(B, np.int64)
    names = [contract.LOGITS] + [s.output for s in meta.state]
    has_pos = contract.POSITION in {i.name for i in session.get_inputs()}
    got, want = [], []
    step.reset()
    with np.errstate(all="ignore"):
        for x in X:
            if step.max_history and past[0].shape[2] >= step.max_history:
                past = [a[:, :, past[0].shape[2] - step.max_history + 1:] for a in past]
            feeds = {contract.READING: x, **{s.name: a for s, a in zip(meta.state, past)}}
            if has_pos:
                feeds[contract.POSITION] = pos
            res = session.run(names, feeds)
            past = [np.ascontiguousarray(a) for a in res[1:]]
            pos = pos + 1
            step.x[:] = x
            rc = step.run()
            if rc == -5:
                step.grow()
                rc = step.run()
            want.append(res[0])
            got.append(step.logits.copy() if rc == -1 else np.full_like(res[0], np.nan))
    step.reset()
    return agree(np.stack(got).astype(np.float64), np.stack(want).astype(np.float64))
