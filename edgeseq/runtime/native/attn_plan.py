"""The native Transformer step's plan: the exported graph walked from `reading` to `logits`
(`plan`), every node accounted for and every weight, scale and constant read into the layout
`edgeseq.runtime.native.attn.AttnStep` binds; a graph the walk does not recognise is refused."""

from __future__ import annotations

import math

import numpy as np

from edgeseq import contract
from edgeseq.runtime.native.graphread import _normalization, _refuse, input_transform, transform_nodes
from edgeseq.runtime.native.onnxfile import Graph
from edgeseq.runtime.native.schemes import scheme_reason

MAX_LAYERS = 16                     # es_attn.h ES_A_MAX_LAYERS
MASK_AT_MOST = -1e4                 # the graph's masked-score constant must send exp() to 0 in float32
OPS = {"Shape", "Squeeze", "Sub", "Div", "Asinh", "Gemm", "Unsqueeze", "Add", "Range", "GreaterOrEqual", "Greater", "And",
       "Where", "Reshape", "Concat", "LayerNormalization", "MatMul", "Split", "Transpose", "Softmax", "Erf", "Mul",
       "Gather", "Cast", "Sin", "Cos", "QuantizeLinear", "DequantizeLinear", "Identity"}


def meta_reason(meta) -> str | None:
    """Why the metadata alone rules the native Transformer step out, or None."""
    if meta.arch != "transformer":
        return f"a {meta.arch} model with a growing cache is no edgeseq transformer: onnxruntime only"
    if reason := scheme_reason(meta):
        return reason
    specs = meta.state
    L = len(specs) // 2
    want = [f"{kv}.{layer}" for layer in range(L) for kv in ("key", "value")]
    if not L or [s.role for s in specs] != want or any(s.kind != contract.KIND_GROWING for s in specs):
        return (f"its state {[s.role for s in specs]} is not the transformer cache the native step holds "
                f"({want or ['key.0', 'value.0']}): onnxruntime only")
    shape = list(specs[0].shape)
    if (len(shape) != 4 or shape[0] != contract.BATCH_AXIS or shape[2] != contract.HISTORY_AXIS
            or not all(isinstance(d, int) and d >= 1 for d in (shape[1], shape[3]))
            or any(list(s.shape) != shape for s in specs)):
        return f"its cache tensors are not [batch, heads, history, head_dim] alike ({shape}): onnxruntime only"
    if L > MAX_LAYERS:
        return f"{L} layers: the native step runs up to {MAX_LAYERS}; onnxruntime only"
    return None


# -- the graph, walked ---------------------------------------------------------------------------

class _Walk:
    """The graph with its wiring, the nodes a walk has accounted for, and constant lookups."""

    def __init__(self, graph: Graph, path):
        self.init, self.path = graph.initializers, path
        self.nodes = graph.nodes
        self.producer = {o: n for n in graph.nodes for o in n.output}
        self.readers: dict = {}
        for n in graph.nodes:
            for i in n.input:
                self.readers.setdefault(i, []).append(n)
        self.seen: set = set()
        self.used: set = set()               # initializers read

    def refuse(self, what):
        _refuse(self.path, what)

    def users(self, name: str, op: str | None = None) -> list:
        """Nodes reading `name` (through Identity copies), of type `op` if given."""
        out = []
        for n in self.readers.get(name, []):
            if n.op_type == "Identity":
                self.seen.add(id(n))
                out += self.users(n.output[0], op)
            elif op is None or n.op_type == op:
                out.append(n)
        return out

    def one(self, name: str, op: str, what: str):
        """The one `op` node reading `name`."""
        found = self.users(name, op)
        if len(found) != 1:
            self.refuse(f"does not compute {what} as one {op} (found {len(found)})")
        self.seen.add(id(found[0]))
        return found[0]

    def source(self, name: str) -> str:
        """`name` with Identity copies looked through, back to the tensor they copy."""
        n = self.producer.get(name)
        while n is not None and n.op_type == "Identity":
            self.seen.add(id(n))
            name = n.input[0]
            n = self.producer.get(name)
        return name

    def const(self, name: str, what: str) -> np.ndarray:
        name = self.source(name)
        if name not in self.init:
            self.refuse(f"has no constant {what}")
        self.used.add(name)
        return np.asarray(self.init[name])

    def scalar(self, name: str, what: str) -> float:
        v = self.const(name, what)
        if v.size != 1 or not np.isfinite(v.astype(np.float64)).all():
            self.refuse(f"has a {what} that is not one finite number")
        return float(v.reshape(-1)[0])

    def other(self, node, name: str) -> str:
        """The input of a two-input node that is not `name`."""
        ins = [self.source(i) for i in node.input]
        if len(ins) != 2 or ins.count(self.source(name)) != 1:
            self.refuse(f"has a {node.op_type} that does not combine {name} with one other input")
        return node.input[1 - ins.index(self.source(name))]

    def fake_quant(self, name: str):
        """(scale, zero point, dequantized name) when `name` goes through QuantizeLinear ->
        DequantizeLinear on one grid, else None."""
        qs = self.users(name, "QuantizeLinear")
        if not qs:
            return None
        if len(qs) != 1 or len(self.users(name)) != 1:
            self.refuse(f"quantizes {name} and also reads it unquantized")
        q = qs[0]
        self.seen.add(id(q))
        dq = self.one(q.output[0], "DequantizeLinear", f"the dequantized {name}")
        if len(q.input) < 3 or len(dq.input) < 3:
            self.refuse(f"quantizes {name} without an explicit zero point")
        s, z = self.scalar(q.input[1], "scale"), self.const(q.input[2], "zero point")
        s2, z2 = self.scalar(dq.input[1], "scale"), self.const(dq.input[2], "zero point")
        if z.dtype != np.int8 or z.size != 1 or s != s2 or z2.dtype != np.int8 or int(z) != int(z2) or not s > 0:
            self.refuse(f"quantizes {name} other than onto one int8 grid (asymmetric, per tensor)")
        return np.float32(s), float(int(z.reshape(-1)[0])), dq.output[0]

    def weight(self, name: str, axis: int, what: str):
        """(float weights, None) or (int8 weights, float32 per-channel scale) of `name`."""
        src = self.source(name)
        if src in self.init:
            w = self.const(src, what)
            if w.dtype != np.float32:
                self.refuse(f"has {what} of {w.dtype}, not float32")
            return w, None
        dq = self.producer.get(src)
        if dq is None or dq.op_type != "DequantizeLinear" or len(dq.input) < 2:
            self.refuse(f"has {what} that are neither constants nor dequantized constants")
        self.seen.add(id(dq))
        w = self.const(dq.input[0], what)
        s = self.const(dq.input[1], f"{what} scale").astype(np.float32).reshape(-1)
        z = self.const(dq.input[2], f"{what} zero point") if len(dq.input) > 2 else np.zeros(1, np.int8)
        ax = dq.attrs.get("axis", 1)
        ax = ax + w.ndim if isinstance(ax, int) and ax < 0 else ax
        if (w.dtype != np.int8 or w.ndim != 2 or np.any(z) or not (s > 0).all() or not np.isfinite(s).all()
                or (s.size != 1 and (s.size != w.shape[axis] or ax != axis))):
            self.refuse(f"has {what} that are not int8 with a positive scale per output channel")
        return w, np.broadcast_to(s, (w.shape[axis],)).astype(np.float32)

    def bias(self, name: str, what: str) -> tuple:
        """(float bias, int32 values, their scale) of a constant bias or a dequantized int32 one
        (int32 values and scale None for a float constant)."""
        src = self.source(name)
        if src in self.init:
            return np.asarray(self.const(src, what), np.float32).reshape(-1), None, None
        dq = self.producer.get(src)
        if dq is None or dq.op_type != "DequantizeLinear" or len(dq.input) < 2:
            self.refuse(f"has a {what} that is neither a constant nor a dequantized constant")
        self.seen.add(id(dq))
        q = self.const(dq.input[0], what).reshape(-1)
        s = self.const(dq.input[1], f"{what} scale").astype(np.float32).reshape(-1)
        z = self.const(dq.input[2], f"{what} zero point") if len(dq.input) > 2 else np.zeros(1, np.int32)
        if q.dtype != np.int32 or np.any(z) or s.size not in (1, q.size) or not (s > 0).all():
            self.refuse(f"has a {what} that is not int32 with a positive scale")
        s = np.broadcast_to(s, q.shape).astype(np.float32)
        return (q.astype(np.float64) * s).astype(np.float32), q, s

    def linear(self, x: str, K: int, N: int | None, what: str) -> tuple:
        """The product of `x` by a constant as the export writes it (MatMul + Add, or Gemm with
        transB), with the Q/DQ pairs of a static int8 graph: (product, output name). The
        product: {"w": [K, N] float or int8, "ws": per-column scale or None, "b": float [N],
        "in_q": (s, z) or None, "out_q": (s, z) or None, "acc_bias": bias added before the
        output's quantization (Gemm)}."""
        in_q = self.fake_quant(x)
        src = in_q[2] if in_q else x
        mms = self.users(src, "MatMul") + self.users(src, "Gemm")
        mms = [n for n in mms if self.source(n.input[0]) == self.source(src)]
        if len(mms) != 1:
            self.refuse(f"does not compute {what} as one product of {x}")
        mm = mms[0]
        self.seen.add(id(mm))
        gemm = mm.op_type == "Gemm"
        if gemm:
            a = mm.attrs
            if (len(mm.input) != 3 or a.get("transB") != 1 or a.get("transA", 0) != 0 or a.get("alpha", 1.0) != 1.0
                    or a.get("beta", 1.0) != 1.0):
                self.refuse(f"computes {what} as a Gemm other than x @ W^T + b")
            w, ws = self.weight(mm.input[1], 0, f"{what} weights")
            w = w.T
            b, bq, bs = self.bias(mm.input[2], f"{what} bias")
        else:
            w, ws = self.weight(mm.input[1], 1, f"{what} weights")
            bq = bs = None
        N = w.shape[1] if N is None else N
        if w.shape != (K, N):
            self.refuse(f"has {what} weights {list(w.shape)}, not [{K}, {N}]")
        y = mm.output[0]
        out_q = self.fake_quant(y)
        if out_q:
            y = out_q[2]
        if not gemm:
            add = self.users(y, "Add")
            if len(add) != 1 or len(self.users(y)) != 1:
                self.refuse(f"does not add one bias to {what}")
            self.seen.add(id(add[0]))
            b = self.const(self.other(add[0], y), f"{what} bias")
            y = add[0].output[0]
        b = np.asarray(b, np.float32).reshape(-1)
        if b.shape != (N,) or not np.isfinite(b).all():
            self.refuse(f"has a {what} bias that is not {N} finite numbers")
        if ws is not None and in_q is None:                  # int8 weights, float input: a float product
            w, ws = (w.astype(np.float32) * ws).astype(np.float32), None
        if ws is None and in_q is not None:
            self.refuse(f"quantizes the input of {what} but not its weights")
        if ws is None and out_q is not None:
            self.refuse(f"quantizes the output of a float product ({what})")
        if ws is None and not np.isfinite(w).all():
            self.refuse(f"has {what} weights that are not finite")
        return {"w": w, "ws": ws, "b": b, "bq": bq, "bs": bs, "gemm": gemm, "in_q": in_q and in_q[:2],
                "out_q": out_q and out_q[:2]}, y

    def layernorm(self, x: str, D: int, what: str) -> tuple:
        ln = self.one(x, "LayerNormalization", what)
        if len(ln.input) != 3 or ln.attrs.get("axis", -1) not in (-1, 2) or len(ln.output) < 1:
            self.refuse(f"normalizes {what} other than over d_model with a scale and a bias")
        w, b = self.const(ln.input[1], f"{what} scale"), self.const(ln.input[2], f"{what} bias")
        eps = float(ln.attrs.get("epsilon", 1e-5))
        if w.shape != (D,) or b.shape != (D,) or not (eps > 0 and math.isfinite(eps)):
            self.refuse(f"has a {what} that is not over {D} values")
        if len(ln.output) > 1 and any(self.readers.get(o) for o in ln.output[1:]):
            self.refuse(f"reads the statistics of {what}")
        return (np.asarray(w, np.float32), np.asarray(b, np.float32), eps), ln.output[0]

    def ancestors(self, name: str) -> list:
        """Every node `name` depends on (marked seen)."""
        out, todo = [], [name]
        while todo:
            n = self.producer.get(todo.pop())
            if n is None or id(n) in {id(m) for m in out}:
                continue
            out.append(n)
            todo += list(n.input)
        self.seen |= {id(n) for n in out}
        return out


def _chain(g: _Walk, x: str, ops: list, what: str) -> str:
    """Follow x through one reader per op type in `ops` (each the only reader of its kind)."""
    for op in ops:
        x = g.one(x, op, what).output[0]
    return x


def plan(meta, graph: Graph, path) -> dict:
    """Walk the step graph of an exported Transformer (float32 or static int8 QDQ) and lay out
    what `AttnStep` binds. Raises ModelFileError naming what is not the export's."""
    reason = meta_reason(meta)
    if reason:
        _refuse(path, f"cannot run natively: {reason}")
    bad = {n.op_type for n in graph.nodes} - OPS
    if bad:
        _refuse(path, f"has {', '.join(sorted(bad))} nodes the native transformer step does not compute")
    if any(n.domain not in ("", "ai.onnx") for n in graph.nodes):
        _refuse(path, "has nodes outside the standard ONNX domain")
    g = _Walk(graph, path)
    F, C = len(meta.features), len(meta.labels)
    NH, HD = int(meta.state[0].shape[1]), int(meta.state[0].shape[3])
    D, L = NH * HD, len(meta.state) // 2
    cfg = meta.config or {}
    for key, have in (("d_model", D), ("heads", NH), ("layers", L)):
        if key in cfg and cfg[key] != have:
            _refuse(path, f"has metadata edgeseq.config {key} {cfg[key]!r} but its cache gives {have}")
    mean, std, x = _normalization(graph, F, path)
    asinh, _ = input_transform(graph, F, path)
    div = g.producer[x]
    sub = g.producer[div.input[0]]
    t_nodes, t_init = transform_nodes(graph)
    g.seen |= {id(div), id(sub), *(id(n) for n in t_nodes)}
    g.used |= {sub.input[1], div.input[1], *t_init}
    embed, h = g.linear(x, F, D, "the embedding")
    freq = None
    adds = g.users(h, "Add")
    if adds:                                                    # + sinusoid(position)
        add = adds[0]
        g.seen.add(id(add))
        cat = g.producer.get(g.source(g.other(add, h)))
        if cat is None or cat.op_type != "Concat" or len(cat.input) != 2 or cat.attrs.get("axis") not in (-1, 1):
            g.refuse("adds something other than [sin, cos] of the position to the embedding")
        sin, cos = g.producer.get(cat.input[0]), g.producer.get(cat.input[1])
        if (sin is None or cos is None or sin.op_type != "Sin" or cos.op_type != "Cos" or sin.input != cos.input):
            g.refuse("adds something other than [sin, cos] of one angle to the embedding")
        mul = g.producer.get(sin.input[0])
        if mul is None or mul.op_type != "Mul":
            g.refuse("does not compute its position angles as position x frequencies")
        g.seen |= {id(cat), id(sin), id(cos), id(mul)}
        consts = [i for i in mul.input if g.source(i) in g.init]
        if len(consts) != 1:
            g.refuse("does not compute its position angles as position x frequencies")
        freq = g.const(consts[0], "position frequencies").astype(np.float32).reshape(-1)
        pos = g.producer.get(g.other(mul, consts[0]))
        while pos is not None and pos.op_type == "Unsqueeze":
            g.seen.add(id(pos))
            pos = g.producer.get(pos.input[0])
        if pos is None or pos.op_type != "Cast" or pos.input != [contract.POSITION] or pos.attrs.get("to") != 1:
            g.refuse("does not take its position angles from the position as float32")
        g.seen.add(id(pos))
        if freq.shape != (D // 2,) or D % 2 or not np.isfinite(freq).all():
            g.refuse(f"has {freq.size} position frequencies for d_model {D}")
        h = add.output[0]
    h = _chain(g, h, ["Unsqueeze"], "the embedding's sequence axis")
    layers, mask, score_div, gelu = [], None, None, None
    for layer in range(L):
        ln1, a = g.layernorm(h, D, f"layer {layer}'s first LayerNorm")
        qkv, y = g.linear(a, D, 3 * D, f"layer {layer}'s qkv")
        split = g.one(y, "Split", f"layer {layer}'s q, k and v")
        if len(split.output) != 3 or split.attrs.get("axis") not in (-1, 2) or len(split.input) > 1 and \
                not np.array_equal(g.const(split.input[1], "split sizes").reshape(-1), [D, D, D]):
            g.refuse(f"does not split layer {layer}'s qkv into q, k and v")
        q, k, v = split.output
        present = {}
        for kv, t in (("key", k), ("value", v)):
            t = _chain(g, t, ["Reshape", "Transpose"], f"layer {layer}'s {kv} heads")
            cat = g.one(t, "Concat", f"layer {layer}'s {kv} cache")
            if cat.input != [contract.past(layer, kv), t] or cat.attrs.get("axis") not in (2, -2) or \
                    cat.output != [contract.present(layer, kv)]:
                g.refuse(f"does not append layer {layer}'s {kv} to {contract.past(layer, kv)} as "
                         f"{contract.present(layer, kv)}")
            present[kv] = cat.output[0]
        qh = _chain(g, q, ["Reshape", "Transpose"], f"layer {layer}'s query heads")
        kt = g.one(present["key"], "Transpose", f"layer {layer}'s transposed keys").output[0]
        scores = g.one(qh, "MatMul", f"layer {layer}'s scores")
        if scores.input != [qh, kt]:
            g.refuse(f"does not compute layer {layer}'s scores as q @ k^T")
        scaled = scores.output[0]
        if HD == 1 and not g.users(scaled, "Div"):             # / sqrt(1): the export leaves the division out
            c = 1.0
        else:
            div = g.one(scaled, "Div", f"layer {layer}'s scaled scores")
            c = g.scalar(g.other(div, scaled), "score scale")
            if div.input[0] != scaled or not c > 0:
                g.refuse(f"does not divide layer {layer}'s scores by one positive constant")
            scaled = div.output[0]
        if score_div is not None and c != score_div:
            g.refuse("divides its layers' scores by different constants")
        score_div = c
        add = g.one(scaled, "Add", f"layer {layer}'s masked scores")
        m = g.other(add, scaled)
        if mask is not None and m != mask:
            g.refuse("masks its layers' scores differently")
        mask = m
        soft = g.one(add.output[0], "Softmax", f"layer {layer}'s attention")
        if soft.attrs.get("axis", -1) not in (-1, 3):
            g.refuse(f"takes layer {layer}'s softmax over another axis than the keys")
        mix = g.one(soft.output[0], "MatMul", f"layer {layer}'s weighted values")
        if mix.input != [soft.output[0], present["value"]] or \
                len([n for n in g.readers.get(present["value"], []) if n.op_type != "Identity"]) != 1 or \
                len(g.readers.get(present["key"], [])) != 1:
            g.refuse(f"does not weigh layer {layer}'s values by its attention alone")
        att = _chain(g, mix.output[0], ["Transpose", "Reshape"], f"layer {layer}'s attention output")
        proj, y = g.linear(att, D, D, f"layer {layer}'s attention projection")
        res = g.one(y, "Add", f"layer {layer}'s attention residual")
        if g.source(g.other(res, y)) != g.source(h):
            g.refuse(f"does not add layer {layer}'s attention to its input")
        h1 = res.output[0]
        ln2, a = g.layernorm(h1, D, f"layer {layer}'s second LayerNorm")
        fc1, y = g.linear(a, D, None, f"layer {layer}'s first MLP product")
        FF = fc1["w"].shape[1]
        if "d_ff" in cfg and cfg["d_ff"] != FF:
            g.refuse(f"has an MLP of width {FF}, its metadata says d_ff {cfg['d_ff']!r}")
        users = g.users(y)
        d1 = g.one(y, "Div", f"layer {layer}'s GELU")
        erf = g.one(d1.output[0], "Erf", f"layer {layer}'s GELU")
        one = g.one(erf.output[0], "Add", f"layer {layer}'s GELU")
        half = g.one(one.output[0], "Mul", f"layer {layer}'s GELU")
        out = g.one(half.output[0], "Mul", f"layer {layer}'s GELU")
        consts = (g.scalar(g.other(d1, y), "GELU divisor"), g.scalar(g.other(one, erf.output[0]), "GELU one"),
                  g.scalar(g.other(half, one.output[0]), "GELU half"))
        if (len(users) != 2 or d1.input[0] != y or g.source(g.other(out, half.output[0])) != g.source(y)
                or abs(consts[0] - math.sqrt(2)) > 1e-6 or consts[1] != 1.0 or consts[2] != 0.5
                or (gelu is not None and consts != gelu)):
            g.refuse(f"does not compute layer {layer}'s GELU as x * 0.5 * (1 + erf(x / sqrt 2))")
        gelu = consts
        fc2, y = g.linear(out.output[0], FF, D, f"layer {layer}'s second MLP product")
        res = g.one(y, "Add", f"layer {layer}'s MLP residual")
        if g.source(g.other(res, y)) != g.source(h1):
            g.refuse(f"does not add layer {layer}'s MLP to its input")
        h = res.output[0]
        layers.append({"ln1": ln1, "ln2": ln2, "qkv": qkv, "proj": proj, "fc1": fc1, "fc2": fc2, "d_ff": FF})
    gather = g.one(h, "Gather", "the last reading's features")
    if gather.attrs.get("axis") != 1 or int(g.const(gather.input[1], "gather index").reshape(-1)[0]) != 0:
        g.refuse("does not take the reading's row from the sequence axis")
    lnf, a = g.layernorm(gather.output[0], D, "the final LayerNorm")
    head, y = g.linear(a, D, C, "the head")
    if y != contract.LOGITS:
        g.refuse(f"does not compute {contract.LOGITS} as its head's output")
    soft = [n for n in g.readers.get(contract.LOGITS, [])]
    if len(soft) > 1 or (soft and (soft[0].op_type != "Softmax" or soft[0].output != [contract.PROBS])):
        g.refuse(f"reads {contract.LOGITS} other than for {contract.PROBS}")
    g.seen |= {id(n) for n in soft}
    window, slopes = _mask(g, mask, cfg, NH)
    rest = [n for n in graph.nodes if id(n) not in g.seen]
    if rest:
        g.refuse(f"has {len(rest)} node(s) the native transformer step does not account for "
                 f"({', '.join(sorted({n.op_type for n in rest}))})")
    extra = sorted(k for k, v in g.init.items() if k not in g.used and v.dtype.kind == "f")
    if extra:
        g.refuse(f"holds float constants the native step does not use ({', '.join(extra[:3])})")
    return {"F": F, "C": C, "D": D, "NH": NH, "HD": HD, "L": L, "mean": mean, "std": std, "asinh": asinh,
            "embed": embed,
            "freq": freq, "layers": layers, "lnf": lnf, "head": head, "score_div": score_div, "gelu": gelu,
            "window": window, "slopes": slopes, "int8": embed["ws"] is not None}


def _alibi(g: _Walk, mask: str, NH: int) -> tuple:
    """(the mask without its recency bias, slopes float32 [NH]) where the graph subtracts ALiBi's
    `slope_h x (T - j)` from the mask (positions "alibi"), else (mask, None)."""
    sub = g.producer.get(g.source(mask))
    if sub is None or sub.op_type != "Sub":
        return mask, None
    mul = g.producer.get(g.source(sub.input[1]))
    consts = [i for i in (mul.input if mul is not None and mul.op_type == "Mul" else []) if g.source(i) in g.init]
    if len(consts) != 1:
        g.refuse("subtracts something other than slope x readings back from its attention mask")
    slopes = g.const(consts[0], "recency slopes").astype(np.float32).reshape(-1)
    if slopes.size != NH or not np.isfinite(slopes).all() or (slopes < 0).any():
        g.refuse(f"has {slopes.size} recency slopes for {NH} heads, not one finite slope >= 0 each")
    back = g.producer.get(g.source(g.other(mul, consts[0])))
    while back is not None and back.op_type in ("Reshape", "Unsqueeze"):
        g.seen.add(id(back))
        g.used |= {i for i in back.input if i in g.init}
        back = g.producer.get(g.source(back.input[0]))
    if back is not None and back.op_type == "Cast" and back.attrs.get("to") == 1:
        g.seen.add(id(back))
        back = g.producer.get(g.source(back.input[0]))
    rng = g.producer.get(g.source(back.input[1])) if back is not None and back.op_type == "Sub" else None
    if rng is None or rng.op_type != "Range":
        g.refuse("does not count its keys' readings back as the cache length minus the key's index")
    g.seen |= {id(sub), id(mul), id(back)}
    g.ancestors(back.input[0])
    g.ancestors(back.input[1])
    return sub.input[0], slopes


def _mask(g: _Walk, mask: str, cfg: dict, NH: int) -> tuple:
    """(the window the graph's mask applies (0: none), ALiBi slopes float32 [NH] or None),
    checked: key j of T + 1 seen iff j >= T - position (and j > T - window), masked scores a
    constant that exp() sends to 0, a recency bias only where the metadata says alibi."""
    mask, slopes = _alibi(g, mask, NH)
    if (slopes is not None) != (cfg.get("positions") == "alibi"):
        says = f"says positions {cfg['positions']!r}" if "positions" in cfg else "names no positions"
        g.refuse(f"has {'a' if slopes is not None else 'no'} recency bias in its attention mask, its metadata {says}")
    nodes = g.ancestors(mask)
    where = [n for n in nodes if n.op_type == "Where"]
    if len(where) != 1:
        g.refuse("does not build its attention mask with one Where")
    keep, drop = g.scalar(where[0].input[1], "unmasked score offset"), g.scalar(where[0].input[2], "masked score")
    if keep != 0.0 or not drop <= MASK_AT_MOST:
        g.refuse(f"masks scores with {drop:g} (and adds {keep:g} to the rest), not a large negative number")
    own = [n for n in nodes if n.op_type == "Sub" and n.input[1:] == [contract.POSITION]]
    if len(own) != 1 or not any(n.op_type == "GreaterOrEqual" for n in nodes):
        g.refuse("does not mask the keys before each stream's position")
    greater = [n for n in nodes if n.op_type == "Greater"]
    window = 0
    if greater:
        sub = g.producer.get(greater[0].input[1])
        if len(greater) != 1 or sub is None or sub.op_type != "Sub" or g.source(sub.input[1]) not in g.init:
            g.refuse("does not mask keys beyond its window as the export does")
        window = int(g.const(sub.input[1], "window").reshape(-1)[0])
    if window < 0 or ("window" in cfg and cfg["window"] != window):
        g.refuse(f"masks a window of {window} readings, its metadata says {cfg.get('window')!r}")
    for n in nodes:
        g.used |= {i for i in n.input if i in g.init}
    return window, slopes
