"""The state-space model's native step: its weights read from the exported graph and laid out
for es_ssm_step.h (`ssm_plan`; `NativeStep` binds the plan to C).

`ssm_plan` walks the graph back from `logits` and `state_out.{i}` and accepts only the step
export/step.py's `SSMStep` writes: per layer a LayerNormalization, the in-projections (float:
one MatMul + Add + Split; static int8: one MatMul per projection, each with its own
QuantizeLinear/DequantizeLinear pairs, Identity copies allowed), the fixed decay
(Mul + Add) or the selective one (Softplus under Where, Mul, Exp, Sub from 1), the readout,
the skip, SiLU (x * Sigmoid(x)), the output projection and the residual; then the input
normalisation (Sub, Div), the input projection (Gemm) before the layers, and the final
LayerNormalization, head (Gemm) and Softmax after them. Every node of the file must be one of
those: anything else is refused with one line, and onnxruntime runs the file. The constants
the step reads (weights, scales, zero points, decays, rates, epsilons, the Softplus threshold)
come from the file; the probe (`native.probe`) then checks the arithmetic against the graph.

The int8 products are computed as onnxruntime runs the QDQ graph (es_ssm.h): a MatMul between
quantized pairs as QLinearMatMul (integer sums, one float32 rescale, round half to even), a
Gemm as float products of dequantized values. numpy only.
"""

from __future__ import annotations

import numpy as np

from edgeseq import contract
from edgeseq.errors import ModelFileError
from edgeseq.runtime.native.buffers import zeros as _zeros64
from edgeseq.runtime.native.graphread import _normalization, _refuse, input_transform, transform_nodes
from edgeseq.runtime.quant import strip_copies

NB = 16                              # es_float.h ES_F_NB: product columns are padded to it
MAX_LAYERS = 16                      # es_ssm_object.h ES_S_MAX_LAYERS
IN_FLOAT, IN_FQ, IN_INT = 0, 1, 2    # es_ssm.h ES_S_IN_*
EXACT_SUM = 1 << 24                  # float32 sums of integer products stay exact below this
OPS = {"Sub", "Div", "Asinh", "Gemm", "LayerNormalization", "MatMul", "Add", "Split", "Mul", "Sigmoid", "Softplus",
       "Greater", "Where", "Exp", "Softmax", "Identity", "QuantizeLinear", "DequantizeLinear"}


def meta_reason(meta) -> str | None:
    """Why an ssm model's metadata rules the native step out, or None."""
    roles = [s.role for s in meta.state]
    want = [f"s.{i}" for i in range(len(roles))]
    if not roles or roles != want:
        return f"its state {roles} is not the ssm layout the native step holds ({want or ['s.0']}): onnxruntime only"
    if any(len(s.shape) != 2 or s.shape[0] != contract.BATCH_AXIS or not isinstance(s.shape[1], int)
           for s in meta.state):
        return "its state tensors are not [batch, d_state]: onnxruntime only"
    if len(roles) > MAX_LAYERS:
        return f"{len(roles)} layers: the native step runs up to {MAX_LAYERS}; onnxruntime only"
    return None


def _pad(n: int) -> int:
    return -(-n // NB) * NB


class _Refused(Exception):
    pass


class _Walk:
    """The graph's producers, and the nodes the walk has accounted for."""

    def __init__(self, graph):
        self.init, self.nodes = graph.initializers, graph.nodes
        self.producer = {o: n for n in self.nodes for o in n.output}
        self.seen = set()

    def refuse(self, what: str):
        raise _Refused(what)

    def node(self, tensor: str, *ops):
        n = self.producer.get(tensor)
        if n is None or n.op_type not in ops or n.domain not in ("", "ai.onnx"):
            self.refuse(f"does not compute {tensor} with {' or '.join(ops)}")
        self.seen.add(id(n))
        return n

    def peek(self, tensor: str):
        n = self.producer.get(tensor)
        return n.op_type if n is not None else None

    def strip(self, tensor: str) -> str:
        """What `fq` would return as the source, marking nothing (to tell inputs apart)."""
        return strip_copies(self.producer, self.init, tensor)

    def through(self, tensor: str) -> str:
        """The tensor an Identity chain copies."""
        while self.peek(tensor) == "Identity":
            tensor = self.node(tensor, "Identity").input[0]
        return tensor

    def const(self, name: str, shape=None, kinds="f") -> np.ndarray:
        if name not in self.init:
            self.refuse(f"reads {name} where edgeseq's export holds a constant")
        a = np.asarray(self.init[name])
        if a.dtype.kind not in kinds or (shape is not None and a.shape != tuple(shape)):
            self.refuse(f"has {name} {a.dtype} {list(a.shape)} where the export holds {kinds} {list(shape or [])}")
        return a

    def scalar(self, name: str) -> float:
        a = self.const(name, None, "f")
        if a.size != 1:
            self.refuse(f"has a constant {name} of {a.size} values where one is expected")
        return float(a.reshape(-1)[0])

    def qparams(self, node) -> tuple:
        """(scale, zero point) of an activation's QuantizeLinear/DequantizeLinear: one each, int8."""
        if len(node.input) < 3:
            self.refuse(f"quantizes {node.input[0]} without a zero point")
        s = self.const(node.input[1], None, "f")
        z = self.const(node.input[2], None, "i")
        if s.size != 1 or z.size != 1 or z.dtype != np.int8:
            self.refuse(f"quantizes {node.input[0]} other than to int8 with one scale")
        s = np.float32(s.reshape(-1)[0])
        if not (np.isfinite(s) and s > 0):
            self.refuse(f"quantizes {node.input[0]} with a scale that is not a positive number")
        return s, int(z.reshape(-1)[0])

    def fq(self, tensor: str) -> tuple:
        """(source, (scale, zero point) or None): an activation's QuantizeLinear -> DequantizeLinear
        pair (and Identity copies) stripped."""
        tensor = self.through(tensor)
        if self.peek(tensor) != "DequantizeLinear" or self.producer[tensor].input[0] in self.init:
            return tensor, None
        dq = self.node(tensor, "DequantizeLinear")
        q = self.node(dq.input[0], "QuantizeLinear")
        sq, sd = self.qparams(q), self.qparams(dq)
        if sq != sd:
            self.refuse(f"dequantizes {q.input[0]} with other parameters than it was quantized with")
        return self.through(q.input[0]), sq

    def weight(self, name: str, rows: int, cols: int, axis: int) -> tuple:
        """(dequantized float32 [rows, cols], int8 values or None, per-channel scale [cols or rows] or None)."""
        if name in self.init:
            w = self.const(name, (rows, cols))
            return w.astype(np.float32), None, None
        dq = self.node(name, "DequantizeLinear")
        q = self.const(dq.input[0], (rows, cols), "i")
        n = cols if axis == 1 else rows
        s = self.const(dq.input[1], None, "f").astype(np.float32).reshape(-1)
        z = self.const(dq.input[2], None, "i").reshape(-1) if len(dq.input) > 2 else np.zeros(1, np.int8)
        if (q.dtype != np.int8 or s.size not in (1, n) or z.size not in (1, n) or np.any(z)
                or dq.attrs.get("axis", 1) not in (axis, axis - 2)):
            self.refuse(f"has weights {dq.input[0]} that are not symmetric int8 per output channel")
        shape = (1, n) if axis == 1 else (n, 1)
        s = np.broadcast_to(s, (n,)).astype(np.float32)
        deq = q.astype(np.float32) * s.reshape(shape)             # DequantizeLinear's (q - 0) x scale
        return deq, q, s

    def bias(self, name: str, n: int) -> np.ndarray:
        if name in self.init:
            return self.const(name, None).astype(np.float32).reshape(-1)
        dq = self.node(name, "DequantizeLinear")
        q = self.const(dq.input[0], (n,), "i")
        s = self.const(dq.input[1], None, "f").astype(np.float32).reshape(-1)
        z = self.const(dq.input[2], None, "i").reshape(-1) if len(dq.input) > 2 else np.zeros(1, np.int32)
        if s.size not in (1, n) or np.any(z):
            self.refuse(f"has a bias {dq.input[0]} that is not int32 per channel with zero points 0")
        return q.astype(np.float32) * np.broadcast_to(s, (n,))        # DequantizeLinear's (q - 0) x scale

    def proj(self, tensor: str, n_in: int, n_out: int) -> tuple:
        """A MatMul or Gemm that computes `tensor` (after its output's QDQ pair, if any) ->
        (es_ssm.h projection as a dict, the input's source tensor)."""
        src, oq = self.fq(tensor)
        n = self.node(src, "MatMul", "Gemm")
        a, iq = self.fq(n.input[0])
        bias = None
        if n.op_type == "Gemm":
            at = n.attrs
            if (at.get("transA", 0) != 0 or at.get("transB", 0) != 1 or at.get("alpha", 1.0) != 1.0
                    or at.get("beta", 1.0) != 1.0 or len(n.input) not in (2, 3)):
                self.refuse(f"computes {src} with a Gemm other than a @ W^T + b")
            deq, q, ws = self.weight(n.input[1], n_out, n_in, 0)
            deq, q = deq.T, (None if q is None else q.T)
            if len(n.input) == 3:
                bias = self.bias(n.input[2], n_out)
                if bias.shape != (n_out,):
                    self.refuse(f"has a bias of {list(bias.shape)} for {n_out} outputs")
        else:
            if len(n.input) != 2:
                self.refuse(f"computes {src} with a MatMul of {len(n.input)} inputs")
            deq, q, ws = self.weight(n.input[1], n_in, n_out, 1)
        p = {"deq": deq, "bias": bias, "in": iq, "out": oq}
        # onnxruntime fuses DequantizeLinear -> MatMul -> QuantizeLinear with int8 weights into
        # QLinearMatMul: integer sums, exact here while they stay below 2^24
        exact = q is not None and iq is not None and n.op_type == "MatMul" and \
            n_in * 255 * max(1, int(np.abs(q.astype(np.int32)).max())) < EXACT_SUM
        if exact:
            p["int"], p["wscale"] = q.astype(np.float32), ws
        return p, a

    def finish(self):
        left = [n for n in self.nodes if id(n) not in self.seen]
        if left:
            ops = sorted({n.op_type for n in left})
            self.refuse(f"has {len(left)} node(s) ({', '.join(ops[:4])}) outside the step edgeseq's export writes")


def _layout(p: dict, n_in: int, n_out: int, post=None) -> tuple:
    """A projection dict -> the tuple es_ssm_step.h binds (see ssm_bind_proj)."""
    np_ = _pad(n_out)
    W = _zeros64((n_in, np_))
    b = _zeros64(np_)
    m = None
    iq, oq = p["in"], p["out"]
    if "int" in p:                                    # QLinearMatMul: (q - z) @ W_int, x a_s w_s / y_s
        W[:, :n_out] = p["int"]
        in_mode, in_s, in_z = IN_INT, iq[0], iq[1]
        m = np.float32(iq[0]) * p["wscale"]
        if oq is not None:
            m = m / np.float32(oq[0])
        out_d = 1.0
    else:                                             # float products (of dequantized values)
        W[:, :n_out] = p["deq"]
        if p["bias"] is not None:
            b[:n_out] = p["bias"]
        in_mode, in_s, in_z = (IN_FLOAT, 1.0, 0.0) if iq is None else (IN_FQ, iq[0], iq[1])
        out_d = 1.0 if oq is None else oq[0]
    out_q, out_z, out_s = (0, 0.0, 1.0) if oq is None else (1, float(oq[1]), float(oq[0]))
    if post is not None and m is None and oq is None and not b.any():
        b[:n_out], post = post, None                  # a float product's bias starts its sums: no pass after
    return (W.reshape(-1), b, None if m is None else np.ascontiguousarray(m, np.float32),
            None if post is None else np.ascontiguousarray(post, np.float32),
            n_in, n_out, np_, in_mode, float(in_s), float(in_z), out_q, float(out_d), out_z, out_s)


def _layernorm(w: _Walk, tensor: str, D: int) -> tuple:
    """LayerNormalization computing `tensor` -> (its input, weight, bias, epsilon)."""
    n = w.node(w.through(tensor), "LayerNormalization")
    if len(n.input) != 3 or n.attrs.get("axis", -1) not in (-1, 1):
        w.refuse(f"normalises {n.input[0]} other than over its last axis with a weight and a bias")
    eps = float(n.attrs.get("epsilon", 1e-5))
    if not (np.isfinite(eps) and eps >= 0):
        w.refuse("has a LayerNormalization epsilon that is not a number >= 0")
    return n.input[0], w.const(n.input[1], (D,)), w.const(n.input[2], (D,)), eps


def _args(w: _Walk, node, is_first) -> tuple:
    """A binary node's inputs as (the one `is_first` picks, the other), either order."""
    a, b = node.input[:2]
    if is_first(a) and not is_first(b):
        return a, b
    if is_first(b) and not is_first(a):
        return b, a
    w.refuse(f"computes {node.output[0]} from inputs the export does not combine so")


def _in_part(w: _Walk, tensor: str, v: str, n: int, D: int, fused: dict) -> tuple:
    """One of x, g, δ (`tensor`, n wide) projected from v -> (projection dict, post bias)."""
    tensor = w.through(tensor)
    if w.peek(tensor) == "Split":                     # float: one MatMul for [x | g (| δ)], then Split
        sp = w.node(tensor, "Split")
        if id(sp) not in fused:
            if sp.attrs.get("axis", 0) not in (1, -1):
                w.refuse(f"splits {sp.input[0]} other than along its last axis")
            sizes = sp.attrs.get("split") if len(sp.input) < 2 else w.const(sp.input[1], None, "i").tolist()
            add = w.node(sp.input[0], "Add")
            mm_out, b_name = _args(w, add, lambda t: t not in w.init)
            total = int(sum(sizes or []))
            p, a = w.proj(mm_out, D, total)
            if w.through(a) != v or p["in"] is not None or p["out"] is not None or p["bias"] is not None:
                w.refuse(f"does not project {v} with one plain MatMul before its Split")
            fused[id(sp)] = (p, w.const(b_name, (total,)), [int(s) for s in sizes])
        p, b, sizes = fused[id(sp)]
        k = sp.output.index(tensor)
        lo = sum(sizes[:k])
        if sizes[k] != n:
            w.refuse(f"splits off {sizes[k]} columns for {tensor}, the layer needs {n}")
        part = {**p, "deq": p["deq"][:, lo:lo + n]}
        return part, b[lo:lo + n]
    add = w.node(tensor, "Add")
    mm_out, b_name = _args(w, add, lambda t: t not in w.init)
    p, a = w.proj(mm_out, D, n)
    if w.through(a) != v:
        w.refuse(f"does not compute {tensor} from its layer's normalised input")
    return p, w.const(b_name, (n,))


def _layer(w: _Walk, u_out: str, i: int, meta, D: int, N: int, selective: bool) -> tuple:
    """Layer i, walked back from its output `u_out` -> (layer tuple, the layer's input tensor)."""
    fused = {}
    s_in, s_out = meta.state[i].name, meta.state[i].output
    add = w.node(w.through(u_out), "Add")                          # (u + P_o(m)) + b_out
    inner, ob_name = _args(w, add, lambda t: t not in w.init)
    ob = w.const(ob_name, (D,))
    res = w.node(inner, "Add")

    def is_out_proj(t):                                             # MatMul(m), m a Mul: not the input u
        n = w.producer.get(w.strip(t))
        return n is not None and n.op_type == "MatMul" and w.peek(w.strip(n.input[0])) == "Mul"
    po_t, u_in = _args(w, res, is_out_proj)
    po, m_t = w.proj(po_t, D, D)
    mul = w.node(w.through(m_t), "Mul")                             # (P_r(s') + D v) * SiLU(g)

    def is_silu(t):
        n = w.producer.get(w.through(t))
        if n is None or n.op_type != "Mul":
            return False
        return any(w.peek(x) == "Sigmoid" and w.producer[x].input[0] in n.input for x in n.input)
    silu_t, y_t = _args(w, mul, is_silu)
    silu = w.node(w.through(silu_t), "Mul")
    sig_t, g_t = _args(w, silu, lambda t: w.peek(t) == "Sigmoid")
    if w.node(sig_t, "Sigmoid").input[0] != g_t:
        w.refuse(f"does not compute SiLU of {g_t} as x * Sigmoid(x)")
    y = w.node(w.through(y_t), "Add")                               # P_r(s') + D ⊙ v
    skip_t, r_t = _args(w, y, lambda t: w.peek(w.through(t)) == "Mul" and
                        any(x in w.init for x in w.producer[w.through(t)].input))
    skip_mul = w.node(w.through(skip_t), "Mul")
    skip_name, v = _args(w, skip_mul, lambda t: t in w.init)
    skip = w.const(skip_name, (D,))
    v = w.through(v)
    ln_in, ln_g, ln_b, eps = _layernorm(w, v, D)
    if w.through(ln_in) != w.through(u_in):
        w.refuse(f"layer {i}: the residual does not add the input the layer normalises")
    pr, r_in = w.proj(r_t, N, D)
    if w.through(r_in) != s_out:
        w.refuse(f"layer {i}: the readout does not read {s_out}")
    pd = pd_post = decay = nrate = None
    thr = 20.0
    upd = w.node(s_out, "Add")
    if not selective:                                               # decay ⊙ s + x
        dm_t, x_t = _args(w, upd, lambda t: w.peek(t) == "Mul" and s_in in w.producer[t].input)
        dm = w.node(dm_t, "Mul")
        decay_name, st = _args(w, dm, lambda t: t in w.init)
        if st != s_in:
            w.refuse(f"layer {i}: the decay does not multiply {s_in}")
        decay = w.const(decay_name, (N,))
        px, px_post = _in_part(w, x_t, v, N, D, fused)
    else:                                                           # a ⊙ s + (1 - a) ⊙ x
        as_t, gx_t = _args(w, upd, lambda t: w.peek(t) == "Mul" and s_in in w.producer[t].input)
        as_ = w.node(as_t, "Mul")
        a_t, st = _args(w, as_, lambda t: t != s_in)
        if st != s_in:
            w.refuse(f"layer {i}: the decay does not multiply {s_in}")
        gx = w.node(gx_t, "Mul")
        one_minus, x_t = _args(w, gx, lambda t: w.peek(t) == "Sub")
        sub = w.node(one_minus, "Sub")
        if sub.input[1] != a_t or w.scalar(sub.input[0]) != 1.0:
            w.refuse(f"layer {i}: the state update is not a ⊙ s + (1 - a) ⊙ x")
        ex = w.node(a_t, "Exp")
        rm = w.node(ex.input[0], "Mul")
        rate_name, sp_t = _args(w, rm, lambda t: t in w.init)
        nrate = w.const(rate_name, (N,))
        wh = w.node(sp_t, "Where")
        gt = w.node(wh.input[0], "Greater")
        d_t = gt.input[0]
        thr = w.scalar(gt.input[1])
        if not np.isfinite(thr):
            w.refuse(f"layer {i}: its Softplus threshold ({thr}) is not a finite number")
        spn = w.node(wh.input[2], "Softplus")
        if wh.input[1] != d_t or spn.input[0] != d_t:
            w.refuse(f"layer {i}: the step size is not Where(δ > t, δ, Softplus(δ))")
        px, px_post = _in_part(w, x_t, v, N, D, fused)
        pd, pd_post = _in_part(w, d_t, v, N, D, fused)
    pg, pg_post = _in_part(w, g_t, v, D, D, fused)
    layer = (_layout(px, D, N, px_post), _layout(pg, D, D, pg_post),
             None if pd is None else _layout(pd, D, N, pd_post),
             _layout(pr, N, D), _layout(po, D, D), ln_g, ln_b, eps, decay, nrate, thr, skip, ob)
    return layer, u_in


def ssm_plan(meta, graph, path) -> dict:
    """Check the graph at `path` is the SSM step edgeseq's export writes (float or static int8)
    and lay its weights out for es_ssm_step.h. Raises ModelFileError (one line) otherwise."""
    reason = meta_reason(meta)
    if reason:
        raise ModelFileError(f"'{path}': {reason}")
    F, C, L = len(meta.features), len(meta.labels), len(meta.state)
    N = int(meta.state[0].shape[1])
    cfg = meta.config or {}
    D, selective = cfg.get("d_model"), cfg.get("selective", False)
    if not isinstance(D, int) or D < 1 or not isinstance(selective, bool):
        _refuse(path, "does not name its d_model and selective settings in edgeseq.config")
    if any(int(s.shape[1]) != N for s in meta.state) or cfg.get("d_state", N) != N or cfg.get("layers", L) != L:
        _refuse(path, "has state tensors that disagree with its edgeseq.config")
    ops = {n.op_type for n in graph.nodes} - OPS
    if ops:
        _refuse(path, f"has {', '.join(sorted(ops))} nodes the native ssm step does not compute")
    mean, std, norm_out = _normalization(graph, F, path)
    asinh, _ = input_transform(graph, F, path)
    w = _Walk(graph)
    div = w.node(norm_out, "Div")                                   # _normalization checked both
    w.node(div.input[0], "Sub")
    w.seen |= {id(n) for n in transform_nodes(graph)[0]}             # and input_transform these
    try:
        sm = w.node(contract.PROBS, "Softmax")
        if sm.input != [contract.LOGITS] or sm.attrs.get("axis", -1) not in (-1, 1):
            w.refuse("does not compute probs as Softmax(logits)")
        head, h_in = w.proj(contract.LOGITS, D, C)
        lnf_in, lnf_g, lnf_b, lnf_eps = _layernorm(w, h_in, D)
        u = lnf_in
        layers = []
        for i in reversed(range(L)):
            layer, u = _layer(w, u, i, meta, D, N, selective)
            layers.insert(0, layer)
        enc, x_in = w.proj(u, F, D)
        if w.through(x_in) != norm_out:
            w.refuse("does not project the normalised reading into the layers")
        w.finish()
        plan = {"D": D, "N": N, "L": L, "selective": selective, "mean": mean, "std": std, "asinh": asinh,
                "enc": _layout(enc, F, D), "layers": layers, "final": (lnf_g, lnf_b, lnf_eps),
                "head": _layout(head, D, C)}
    except _Refused as e:
        _refuse(path, str(e))
    if meta.quantization and not _finite(plan):
        _refuse(path, "holds a constant that is not a finite number")
    return plan


def _finite(plan) -> bool:
    def arrays(x):
        if isinstance(x, np.ndarray):
            yield x
        elif isinstance(x, (tuple, list)):
            for y in x:
                yield from arrays(y)
        elif isinstance(x, float):
            yield np.asarray(x)
    return all(np.isfinite(a).all() for k in ("enc", "layers", "final", "head", "mean", "std")
               for a in arrays(plan[k]))
