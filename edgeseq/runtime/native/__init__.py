"""The native step backend: an exported RNN, GRU or LSTM step run by C on the host.

The weights come from the .onnx file itself (read without the onnx package,
`edgeseq.runtime.native.onnxfile`); the C extension `_es_native` (es_float.h for float32
models; firmware_sim/kernels/es_kernels.h, the firmware's own kernels, for static int8) runs
one reading per stream per call with every buffer bound once:

    >>> from edgeseq.runtime import native
    >>> native.available(), native.supports(meta, path)        # True, None when it can run
    >>> step = native.NativeStep(path, meta, streams=4)
    >>> step.x[:] = readings                  # float32 [4, F], raw readings
    >>> step.run()                            # -1: adopted; i >= 0: stream i gave NaN/Inf, nothing changed
    >>> step.logits, step.probs               # float32 [4, C]
    >>> snap = [a.copy() for a in step.state]; step.set_state(snap); step.reset(stream=2)

Semantics: a float model computes what its graph computes, within float32 rounding (the sums
run in another order, and exp/tanh are ~1-ulp polynomials); an int8 model computes exactly
what `firmware_sim.intsim` computes (its Q12 logits are in `logits_q12`; `logits` holds them
/ 4096), which is what the emitted firmware computes too. A stream's results never depend on
the other streams of the call.

The state-space model (ssm, fixed and selective decay) runs the same way through
`edgeseq.runtime.native.ssm` and es_ssm.h: float32 within float32 rounding of its graph;
static int8 as onnxruntime runs its QDQ graph (each quantized MatMul's integers and rounding
as QLinearMatMul's, the norms, decay and state update float32), so its logits match
onnxruntime's int8 to the bit but where float32 rounding moves a value across a rounding
boundary. Its state stays float32, [B, d_state] per layer, the graph's state_in.{i}.

The Transformer runs through `edgeseq.runtime.native.attn` (`AttnStep`, es_attn.h) with its KV
cache as a ring of rows per stream and layer (the window's rows, or max_history's where that
is smaller; grown by doubling where neither bounds it), the history, max_history and on_full
counted as the onnxruntime backend counts them, and its `state` in the graph's
past.{l}.key/value layout: float32 within float32 rounding of its graph, static int8 as its
QDQ graph computes it. `open_step(path, meta, streams, max_history, on_full)` builds the step
a model needs; `probe` (`edgeseq.runtime.native.probing`) checks it against its graph.

The runtime stays light: numpy only here; the int8 layout comes from
`firmware_sim.intsim.from_parts` (numpy too), imported when an int8 model is opened.
"""

from __future__ import annotations

import os

import numpy as np

from edgeseq import contract
from edgeseq.errors import EdgeseqError, ModelFileError, UsageError
from edgeseq.runtime.native import attn as _attn
from edgeseq.runtime.native.bound import BoundStep
from edgeseq.runtime.native.buffers import zeros as _zeros64
from edgeseq.runtime.native.extension import _WHY, _ext
from edgeseq.runtime.native.graphread import (  # noqa: F401  (as before)
    _normalization, _refuse, input_transform, output_grid, transform_nodes)
from edgeseq.runtime.native import ssm as _ssm
from edgeseq.runtime.native.onnxfile import Graph, read_graph
from edgeseq.runtime.native.schemes import scheme_reason
from edgeseq.runtime.native.probing import (  # noqa: F401  (importable from here, as before)
    FLOAT_PROBE_RTOL, INT8_PROBE_Q12, INT8_PROBE_RTOL, INT8_PROBE_STEPS, PROBE_READINGS, PROBE_STREAMS, _agree,
    probe, probe_tolerance)

__all__ = ["NativeStep", "AttnStep", "open_step", "available", "why_unavailable", "supports", "simd", "vnni", "gate"]

KINDS = {"rnn": 0, "gru": 1, "lstm": 2}
GATES = {"rnn": 1, "gru": 3, "lstm": 4}
MAX_LAYERS = 16                     # es_native.h ES_MAX_LAYERS
NB = 16                             # es_float.h ES_F_NB: float columns are padded to it
Q15 = 1 << 15
FLOAT_OPS = {"Sub", "Div", "Asinh", "Concat", "MatMul", "Add", "Split", "Sigmoid", "Tanh", "Mul", "Gemm", "Softmax",
             "Slice", "Identity"}


def available() -> bool:
    """True when the C extension is built and imports."""
    return _ext is not None


def why_unavailable() -> str:
    """One line: why `available()` is False, and how to build the extension ("" when available)."""
    return _WHY


def simd() -> str:
    """The instruction set the float step uses on this machine ("" when not built)."""
    return _ext.simd() if _ext is not None else ""


def vnni() -> bool:
    """True when static int8 products run with AVX-512 VNNI on this machine."""
    return _ext is not None and _ext.vnni()


def gate(x: np.ndarray, hi: np.ndarray, lo, logits: np.ndarray):
    """The reading and logits checks in C for a step run elsewhere (onnxruntime), or None when
    the extension is not built. x float32 [B, F] (written), hi/lo float32 [F] (lo None:
    |reading| <= hi), logits float32 [B, C] (read), all bound once. `g.take(readings)` copies
    a C-contiguous float32 [B, F] array into x: 0 all in range, -2 a value out of range or
    NaN/Inf (x written, nothing else), -3 not such an array (nothing copied).
    `g.finite()`: every logit is finite."""
    if _ext is None:
        return None
    B, F = x.shape
    return _ext.gate(B, F, logits.shape[1], x, hi, lo, logits)


def pusher(native_step, probs: np.ndarray, count: np.ndarray, slow):
    """(lock, push) for a session on `native_step` (a NativeStep or AttnStep), or None when the
    extension is not built. `push(readings)` for a numpy.ndarray (not a subclass) takes the
    lock, copies, checks and steps in one C call and returns probs.copy() (float32 [B, C]), adding 1 to count (int64 [1]); any other
    outcome releases the lock and returns slow(readings) (es_push.h). The lock is the session's."""
    if _ext is None:
        return None
    lock = _ext.lock()
    return lock, _ext.pusher(native_step._step, lock, probs, count, slow, np.ndarray)


# -- what runs natively ---------------------------------------------------------------------

def _meta_reason(meta) -> str | None:
    """Why the metadata alone rules the native step out, or None."""
    if meta.mode != "stream":
        return f"a {meta.arch} model reads whole windows: onnxruntime only"
    if any(s.role == contract.GAIN_ROLE for s in meta.state):
        return "the native step does not carry the gain stage (input_transform gain): onnxruntime only"
    if meta.arch == "transformer" or any(s.kind == contract.KIND_GROWING for s in meta.state):
        return _attn.meta_reason(meta)                     # the KV cache: attn.py
    if meta.arch not in KINDS and meta.arch != "ssm":
        return f"the native step runs rnn, gru, lstm and ssm models, not {meta.arch}: onnxruntime only"
    if reason := scheme_reason(meta):
        return reason
    if meta.arch == "ssm":
        return _ssm.meta_reason(meta)
    per = 2 if meta.arch == "lstm" else 1
    roles = [s.role for s in meta.state]
    layers = len(roles) // per
    want = [f"{r}.{layer}" for layer in range(layers) for r in (("h", "c") if per == 2 else ("h",))]
    if not layers or roles != want:
        return (f"its state {roles} is not the {meta.arch} layout the native step holds ({want or ['h.0']}): "
                "onnxruntime only")
    if layers > MAX_LAYERS:
        return f"{layers} layers: the native step runs up to {MAX_LAYERS}; onnxruntime only"
    return None


def supports(meta, path, graph: Graph | None = None) -> str | None:
    """None when the model at `path` (its parsed metadata `meta`; `graph`: its graph as read
    once by `edgeseq.runtime.model.load_model`, else the file is read) can run natively: rnn,
    gru, lstm, ssm or transformer, stream mode, float32 or static int8, laid out as edgeseq's
    export writes it. Else a one-line reason, e.g. "int8 dynamic scales activations per call:
    onnxruntime only". Raises the MetadataError of an `edgeseq.arch` that the weights
    contradict (a GRU's gate blocks in a file named 'rnn'): the graph would run it misnamed.
    Says nothing about the extension itself: see `available()`."""
    reason = _meta_reason(meta)
    if reason:
        return reason
    try:
        graph = read_graph(path) if graph is None else graph
        if meta.arch == "transformer":
            with np.errstate(all="ignore"):
                _attn.plan(meta, graph, path)
        elif meta.arch == "ssm":
            _ssm.ssm_plan(meta, graph, path)
        elif meta.quantization:
            with np.errstate(all="ignore"):            # a non-finite constant is refused when bound
                _int_model(meta, graph, path)
        else:
            _float_plan(meta, graph, path)
    except EdgeseqError as e:
        if isinstance(e, contract.ArchMismatchError):          # another architecture's weights: the caller
            raise                                               # refuses the file rather than run it misnamed
        return str(e).splitlines()[0]
    return None


# -- float: the fused graph's weights, in es_float.h's layout --------------------------------

def _pad(n: int, k: int = NB) -> int:
    return -(-n // k) * k


def _float_plan(meta, graph: Graph, path) -> dict:
    """Check the float graph is the fused step export/step.py writes and lay its weights out
    for es_float.h: per layer W [K, np] (K = inputs + H, columns in blocks padded to 16),
    bias [np], blocks {col0, width, k0, k1}, and the GRU's n-gate offsets."""
    init, nodes = graph.initializers, graph.nodes
    ops = {n.op_type for n in nodes} - FLOAT_OPS
    if ops:
        _refuse(path, f"has {', '.join(sorted(ops))} nodes the native float step does not compute")
    if any(n.domain not in ("", "ai.onnx") for n in nodes):
        _refuse(path, "has nodes outside the standard ONNX domain")
    kind, F, C = meta.arch, len(meta.features), len(meta.labels)
    per = 2 if kind == "lstm" else 1
    L = len(meta.state) // per
    if f"w{L}" in init or any(f"w{layer}" not in init or f"b{layer}" not in init for layer in range(L)):
        _refuse(path, f"does not hold fused weights w0..w{L - 1} for its {L} layer(s) of state")
    H = int(meta.state[0].shape[1]) if len(meta.state[0].shape) == 2 else -1
    if any(list(s.shape) != [contract.BATCH_AXIS, H] for s in meta.state):
        _refuse(path, "has state tensors that are not [batch, hidden]")
    cfg = meta.config or {}
    for key, have in (("hidden", H), ("layers", L)):
        if key in cfg and cfg[key] != have:
            _refuse(path, f"has metadata edgeseq.config {key} {cfg[key]!r} but its state gives {have}")
    mean, std, norm_out = _normalization(graph, F, path)
    asinh, _ = input_transform(graph, F, path)
    producer = {o: n for n in nodes for o in n.output}
    consumers = {}
    for n in nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    G = 4 if kind in ("gru", "lstm") else 1                  # fused columns per hidden unit
    layers, used = [], {"model.norm.mean", "model.norm.std", *transform_nodes(graph)[1]}
    prev = norm_out
    for layer in range(L):
        h_in, h_out = meta.state[layer * per].name, meta.state[layer * per].output
        w, b = np.asarray(init[f"w{layer}"], np.float32), np.asarray(init[f"b{layer}"], np.float32)
        n_in = F if layer == 0 else H
        K = n_in + H
        other = 1 if G == 4 else 4                          # the fused width of the other kind of cell
        if w.shape == (K, other * H) and b.shape == (other * H,) and kind in ("rnn", "gru"):
            raise contract.ArchMismatchError(f"'{path}': metadata {contract.META_ARCH} says '{kind}' but layer "
                                             f"{layer}'s weights are [{K}, {other * H}], "
                                             f"{'a GRU' if other == 4 else 'an RNN'}'s; export it again")
        if w.shape != (K, G * H) or b.shape != (G * H,):
            _refuse(path, f"has w{layer} {list(w.shape)} / b{layer} {list(b.shape)}, not [{K}, {G * H}] / [{G * H}] "
                          f"for a {kind.upper()} of hidden {H}")
        mm = [n for n in nodes if n.op_type == "MatMul" and n.input[1:2] == [f"w{layer}"]]
        cat = producer.get(mm[0].input[0]) if len(mm) == 1 else None
        if cat is None or cat.op_type != "Concat" or cat.input != [prev, h_in] or cat.attrs.get("axis") not in (1, -1):
            _refuse(path, f"does not compute layer {layer} as [input, {h_in}] @ w{layer}")
        if h_out not in producer:
            _refuse(path, f"does not compute {h_out}")
        used |= {f"w{layer}", f"b{layer}"}
        if kind == "gru":                                    # [[W_ir W_iz W_in 0], [W_hr W_hz 0 W_hn]]
            if np.any(w[n_in:, 2 * H:3 * H]) or np.any(w[:n_in, 3 * H:]):
                _refuse(path, f"has a GRU weight w{layer} whose n-gate blocks are not the fused layout")
            widths = [(0, 2 * H, 0, K), (2 * H, H, 0, n_in), (3 * H, H, n_in, K)]
        else:
            widths = [(0, G * H, 0, K)]
        np_, blocks, cols = 0, [], []
        for src, width, k0, k1 in widths:
            blocks.append((np_, _pad(width), k0, k1))
            cols.append((src, np_, width))
            np_ += _pad(width)
        W = _zeros64((K, np_))
        bias = _zeros64(np_)
        for src, dst, width in cols:
            W[:, dst:dst + width] = w[:, src:src + width]
            bias[dst:dst + width] = b[src:src + width]
        ox, oh = (blocks[1][0], blocks[2][0]) if kind == "gru" else (0, 0)
        layers.append(((W.reshape(-1), bias, np.asarray(blocks, np.int32).reshape(-1), np_), ox, oh))
        prev = h_out
    gemm = [n for n in nodes if n.op_type == "Gemm"]
    if (len(gemm) != 1 or len(gemm[0].input) not in (2, 3) or gemm[0].input[0] != prev
            or gemm[0].output != [contract.LOGITS]
            or gemm[0].attrs.get("transB") != 1 or gemm[0].attrs.get("transA", 0) != 0
            or gemm[0].attrs.get("alpha", 1.0) != 1.0 or gemm[0].attrs.get("beta", 1.0) != 1.0
            or any(i not in init for i in gemm[0].input[1:])):
        _refuse(path, f"does not compute its logits as one Gemm of {prev}")
    hw = np.asarray(init[gemm[0].input[1]], np.float32)
    hb = (np.asarray(init[gemm[0].input[2]], np.float32).reshape(-1) if len(gemm[0].input) == 3
          else np.zeros(C, np.float32))                    # a head bias of zeros: the exporter drops it
    if hw.shape != (C, H) or hb.shape != (C,):
        _refuse(path, f"has a head of {list(hw.shape)} for {C} labels and hidden {H}")
    used |= set(gemm[0].input[1:])
    cp = _pad(C)
    HW = _zeros64((H, cp))
    HW[:, :C] = hw.T
    HB = _zeros64(cp)
    HB[:C] = hb
    head = (HW.reshape(-1), HB, np.asarray([0, cp, 0, H], np.int32), cp)
    extra = sorted(k for k, v in init.items() if k not in used and v.dtype.kind == "f")
    if extra:
        _refuse(path, f"holds float constants the native float step does not use ({', '.join(extra[:3])})")
    return {"H": H, "L": L, "mean": mean, "std": std, "asinh": asinh, "layers": layers, "head": head}


# -- int8: firmware_sim.intsim's integer model, in es_kernels.h's layout ----------------------

def _int_model(meta, graph: Graph, path):
    """firmware_sim.intsim's integer model of the graph: `from_parts`, whose
    `check_int_model` refuses any constant the integer step cannot hold, as firmware emit does."""
    from firmware_sim.intsim import from_parts     # numpy only; kept out of the float path
    return from_parts(meta, graph.initializers, graph.nodes, str(path))


def _rq_mode(shifts) -> int:
    """es_kernels.h ES_RQ_LO (1), ES_RQ_HI (2) or ES_RQ_ANY (0): as firmware_sim.cemit.rq_mode."""
    s = np.asarray(shifts)
    if s.min() >= 1 and s.max() <= 16:
        return 1
    if s.min() >= 16 and s.max() <= 31:
        return 2
    return 0


def _i32(a) -> np.ndarray:
    """int32 constants (`firmware_sim.intsim.check_int_model` has checked that they fit)."""
    a = np.asarray(a, np.int64)
    if a.size and (a.min() < -(1 << 31) or a.max() >= 1 << 31):
        raise ModelFileError("an int8 constant does not fit 32 bits; export it again")
    return np.ascontiguousarray(a.astype(np.int32))


EXACT_N = 1024                      # es_rnn_step.c ES_Q_EXACT_N: float32 sums of int8 products stay exact


def _matrix(mm, bias=None, reference=False) -> tuple:
    """One int8 product as es_rnn_step.c binds it: (weights, per-output {zero point x column sum,
    m, s, Q12 bias} int32 [out, 4], requantization mode, columns). Weights: float32 W^T [in][np]
    holding the int8 values (np = out padded to 16), for the exact float products; reference:
    int8 rows [out][in] in blocks of 4, as es_k_matvec reads them (firmware_sim.cemit._matrix
    writes the same bytes)."""
    w = mm.w.astype(np.int64).T                                   # (out, in)
    out, n = w.shape[0], -(-w.shape[1] // 4) * 4
    b = np.zeros(out, np.int64) if bias is None else np.asarray(bias, np.int64)
    q = _i32(np.stack([mm.wsum_zp, mm.m, mm.s, b], 1)).reshape(-1)
    if reference:
        rows = -(-out // 4) * 4
        wp = np.zeros((rows, n), np.int64)
        wp[:out, :w.shape[1]] = w
        wp = wp.reshape(rows // 4, 4, n // 4, 4).transpose(0, 2, 1, 3).astype(np.int8)
        return np.ascontiguousarray(wp).reshape(-1), q, _rq_mode(mm.s), 0
    np_ = _pad(out)
    wf = _zeros64((n, np_))
    wf[:w.shape[1], :out] = w.T
    return wf.reshape(-1), q, _rq_mode(mm.s), np_


# -- the step --------------------------------------------------------------------------------

AttnStep = _attn.AttnStep


def open_step(path, meta, streams: int = 1, max_history: int | None = None, on_full: str = "slide",
              graph: Graph | None = None):
    """The native step for the model at `path` (`graph`: its graph as read once by
    `edgeseq.runtime.model.load_model`; None: the file is read): an `AttnStep` (a Transformer,
    its cache bounded by max_history, None for none, full as `on_full` says) or a `NativeStep`
    (the others, which hold no history: max_history and on_full do not apply)."""
    if meta.arch == "transformer":
        return AttnStep(path, meta, streams, max_history=max_history, on_full=on_full, graph=graph)
    return NativeStep(path, meta, streams, graph=graph)


class NativeStep(BoundStep):
    """One recurrent step graph bound to C, for `streams` streams.

    Buffers (allocated once and bound to C: write into them, never rebind the attributes):
      x       float32 [B, F]  raw readings of the next call (the graph's normalisation is applied inside)
      logits  float32 [B, C]  after the last call (int8: logits_q12 / 4096)
      probs   float32 [B, C]  softmax of logits
      logits_q12  int32 [B, C]  int8 models only: firmware_sim.intsim's Q12 logits
    `run()` advances every stream one reading and returns -1; when a stream's logits come out
    NaN or Inf (float models and int8 ssm; integer logits cannot) it returns that stream's index
    and no state changes.
    `set_bounds(hi, lo)` (float32 [F] each; lo None for |reading| <= hi), once, then
    `push(readings)` does copy, check and run in one call: readings a C-contiguous float32
    [B, F] array ([F] for one stream); returns run()'s code, or -2 when a reading lies outside
    the bounds (NaN and Inf included; nothing ran) or -3 when `readings` is not such an array
    (nothing done: convert it and call again).

    State, as `meta.state` lists it (h per layer; h, c for LSTM), float32 [B, H] each:
      state        float models: the live arrays, valid until the next run() (copy to keep);
                   int8 models: a float copy of the integer state, h / 32768 and c / 32768.
      set_state(arrays)  installs float32 state: copied (float), or for int8 rounded to the
                   integers round(v x 32768), h saturated to int16, c to int32. A value from
                   `state` comes back to the same integer: h (16 bits) always, c whenever
                   |c| < 512 (2^24 / 32768: float32 holds 24 bits; a larger cell keeps its top 24).
                   ssm (float and int8): s per layer, float32 [B, d_state], live and copied as
                   a float model's; `logits_q12` and `int_state` belong to int8 rnn/gru/lstm only.
      reset(stream=None)  zeros one stream or all.
    Not thread-safe: serialize calls (StreamSession holds its lock around them).

    int8 products run, batched over streams, with AVX-512 VNNI where the CPU has it (u8 x s8
    dot products into int32, the inputs offset by 128 and the offset taken off after), else as
    float32 products of the int8 values (exact: every product and partial sum is an integer
    below 2^24 for up to 1024 inputs); either way the integers are es_k_matvec's. vnni=False
    skips VNNI; reference=True (and any layer wider than 1024) runs the firmware's own
    es_k_matvec, stream by stream. `kernel` names the one that runs; tests check all three
    against the simulator. The SSM's int8 products (onnxruntime's QLinearMatMul integers) run
    packed where the host allows, with VNNI or as AVX2 int16 pairs (vpmaddwd: two int8 x int8
    products into an int32 lane); vnni=False runs them as exact float32 sums instead (the same
    floats, to the bit; tests check it)."""

    def __init__(self, path: str | os.PathLike, meta, streams: int = 1, reference: bool = False,
                 vnni: bool = True, graph: Graph | None = None):
        reason = _meta_reason(meta)
        if reason is None and meta.arch == "transformer":
            reason = "a transformer's step with its cache is an AttnStep (native.open_step builds it)"
        self._open(path, meta, streams, reason)
        B, F, C = self.streams, len(meta.features), len(meta.labels)
        self.int8 = bool(meta.quantization)
        graph = read_graph(path) if graph is None else graph
        self.grid = output_grid(graph) if self.int8 else 0.0
        self.x = _zeros64((B, F))
        self.logits = _zeros64((B, C))
        self.probs = _zeros64((B, C))
        self._integer = self.int8 and meta.arch != "ssm"      # state held as integers (int8 RNN, GRU, LSTM)
        if meta.arch == "ssm":
            self._bind_ssm(_ssm.ssm_plan(meta, graph, path), B, F, C, vnni)
        elif self.int8:
            try:
                with np.errstate(all="ignore"):          # non-finite constants are refused below, not warned
                    self._bind_int8(_int_model(meta, graph, path), KINDS[meta.arch], B, F, C, reference, vnni)
            except ModelFileError as e:
                msg = str(e)
                raise ModelFileError(msg if str(path) in msg else f"'{path}': {msg}") from None
        else:
            self._bind_float(_float_plan(meta, graph, path), KINDS[meta.arch], B, F, C)

    def _bind_float(self, plan, kind, B, F, C):
        H = plan["H"]
        self.hidden, self.layers = H, plan["L"]
        self._banks = [[_zeros64((B, H)) for _ in self.meta.state] for _ in range(2)]
        self._keep = plan                      # the weights the Step points into
        self._bind(_ext.float_step(kind, B, F, H, C, self.x, self.logits, self.probs, plan["mean"], plan["std"],
                                   self._banks[0], self._banks[1],
                                   [(dense, ox, oh) for dense, ox, oh in plan["layers"]], plan["head"], plan["asinh"]))

    def _bind_ssm(self, plan, B, F, C, packed=True):
        self.hidden, self.layers = plan["N"], plan["L"]
        self._banks = [[_zeros64((B, plan["N"])) for _ in self.meta.state] for _ in range(2)]
        self._keep = plan                      # the weights the step points into
        self._bind(_ext.ssm_step(B, F, plan["D"], plan["N"], C, plan["selective"], self.int8, self.x, self.logits,
                                 self.probs, plan["mean"], plan["std"], self._banks[0], self._banks[1], plan["enc"],
                                 plan["layers"], plan["final"], plan["head"], packed, plan["asinh"]))

    def _bind_int8(self, m, kind, B, F, C, reference, vnni):
        from firmware_sim.intsim import SIGMOID, TANH
        H = m.hidden
        self.hidden, self.layers, self.int_model = H, m.layers, m
        self.logits_q12 = _zeros64((B, C), np.int32)
        self._int = [_zeros64((B, H), np.int32 if s.role.startswith("c.") else np.int16) for s in self.meta.state]
        x0 = m.cells[0]["x"]
        thr = None if m.asinh is None else _i32(m.asinh.thr)       # the input transform: by threshold table
        feat = (np.exp2(m.in_frac.astype(np.float64)), _i32(m.mean_fx), _i32(m.feat_m), _i32(m.feat_s), int(x0.in_zp),
                thr)
        reference = bool(reference) or max(m.hidden, m.n_features) > EXACT_N
        layers = []
        for layer, cell in enumerate(m.cells):
            x, h = cell["x"], cell["h"]
            aq = cell.get("aq", (0, 16))
            layers.append((_matrix(x, cell["b"], reference), _matrix(h, cell["bh"], reference),
                           int(cell["hq"][0]), int(cell["hq"][1]), int(h.in_zp), int(aq[0]), int(aq[1]), int(x.in_zp)))
        head = (_matrix(m.head, m.head_b, reference), int(m.head_hq[0]), int(m.head_hq[1]), int(m.head.in_zp))
        self._sig, self._tanh = np.ascontiguousarray(SIGMOID, np.int16), np.ascontiguousarray(TANH, np.int16)
        self._keep = (feat, layers, head)
        self._bind(_ext.int8_step(kind, B, F, H, C, self.x, self.logits, self.logits_q12, self.probs, self._int,
                                  feat, layers, head, self._sig, self._tanh, bool(reference), bool(vnni)))

    # -- state ---------------------------------------------------------------------------

    @property
    def state(self) -> list:
        if self._integer:
            return [(a.astype(np.float64) / Q15).astype(np.float32) for a in self._int]
        return self._banks[self._step.bank]

    @property
    def int_state(self) -> list:
        """int8 RNN, GRU and LSTM models: the live integer state (h int16 Q15, c int32 Q15), [B, H] each."""
        if not self._integer:
            raise UsageError("int_state belongs to int8 models; a float model's state is `state`")
        return self._int

    def set_state(self, arrays) -> None:
        """Install `arrays` (one real array [B, H] per `meta.state` entry, finite as float32):
        see the class docstring for int8 rounding. Raises UsageError (nothing installed) for a
        wrong count, shape or dtype, or a NaN, Inf or value beyond float32."""
        arrays = list(arrays)
        if len(arrays) != len(self.meta.state):
            raise UsageError(f"state holds {len(arrays)} tensors, this model has {len(self.meta.state)}")
        shape = (self.streams, self.hidden)
        new = []
        for spec, a in zip(self.meta.state, arrays):
            a = np.asarray(a)
            if a.shape != shape or a.dtype.kind not in "fiu":
                raise UsageError(f"state '{spec.name}' must be real numbers of shape {list(shape)}, got "
                                 f"{a.dtype} {list(a.shape)}")
            with np.errstate(over="ignore", invalid="ignore"):
                finite = bool(np.isfinite(a.astype(np.float32, copy=False)).all())
            if not finite:
                raise UsageError(f"state '{spec.name}' holds NaN, Inf or a value beyond float32; give finite "
                                 f"float32 values, as a snapshot holds")
            new.append(a)
        if not self._integer:
            for dst, a in zip(self.state, new):
                np.copyto(dst, a, casting="unsafe")
            return
        for dst, a in zip(self._int, new):
            info = np.iinfo(dst.dtype)
            with np.errstate(invalid="ignore", over="ignore"):
                v = np.rint(a.astype(np.float32).astype(np.float64) * Q15)
            np.copyto(dst, np.clip(np.nan_to_num(v), info.min, info.max).astype(dst.dtype))

    def reset(self, stream: int | None = None) -> None:
        """Zero the state of one stream, or of all (stream=None)."""
        rows = slice(None) if stream is None else stream
        for a in (self._int if self._integer else self.state):
            a[rows] = 0
