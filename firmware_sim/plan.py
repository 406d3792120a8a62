"""Memory plan and cost of one reading on a microcontroller.

Arena planning: every intermediate buffer has a size and a lifetime (the first and last
operation that touches it). Buffers are placed largest first, each at the lowest offset where
it overlaps no placed buffer that is alive at the same time (the greedy planner TensorFlow
Lite Micro uses). The arena is the highest end offset.

Where the buffers come from:
- int8 RNN/GRU/LSTM/SSM (static), and the int8 Transformer with a window when no --history is
  given: the buffers of the integer-only step that `firmware emit` writes, op by op
  (`integer_buffers`). This is what the C code allocates; a Transformer's state is its KV ring
  at the window.
- anything else (a Transformer at a given --history, float models): the ONNX graph run once at batch 1 and the
  given history, every intermediate tensor at its real size and type (`graph_buffers`).
  Tensors computed from constants only are weights, not activations.

MACs per reading are counted from the graph's MatMul/Gemm shapes in that run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeseq.errors import DataError, EdgeseqError, UsageError

CODE_BASE = 3072          # bytes: step function, requantization, table lookup, call overhead (estimate)
CODE_PER_KERNEL = 512     # bytes per distinct kernel in the graph (estimate)
NO_COMPUTE = {"Identity", "Reshape", "Squeeze", "Unsqueeze", "Shape", "Constant", "QuantizeLinear",
              "DequantizeLinear", "Cast", "Flatten"}
SUPPORTED = {"MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Sigmoid", "Tanh", "Softmax", "Split", "Slice",
             "Concat", "Gather", "Transpose", "LayerNormalization", "Erf", "Sin", "Cos", "Range", "Where",
             "GreaterOrEqual", "Less", "Expand", "Neg", "Sqrt", "Pow", "ReduceMean", "Equal", "Max", "Min",
             "Relu", "Tile", "Greater", "LessOrEqual", "And", "Or", "Not", "Exp", "Softplus",
             "Asinh"} | NO_COMPUTE      # Asinh: the input transform (an integer model: a threshold table instead)


@dataclass(frozen=True)
class Buffer:
    name: str
    size: int
    first: int
    last: int

    def overlaps_in_time(self, other: "Buffer") -> bool:
        return self.first <= other.last and other.first <= self.last


# The integer decision layer (es_decide_q15.h), where a model has decision settings: its exp table (178 uint16),
# its code (estimated from the M4 and M0+ builds) and its cycles per class, measured by `firmware measure` on
# emulated cores with 4 classes (GRU, SSM, Transformer at -O2; the most of the three, per class): an EMA 290-297
# cycles on the M4, 472-478 on the M0+; a moving mean of 6 readings (a division per class: in software on the
# M0+) 375-385 on the M4, 819-968 on the M0+.
DECISION_EXP_BYTES = 356
DECISION_CODE = 400
DECISION_CYCLES_PER_CLASS = {"cortex-m4": 75, "cortex-m7": 75, "cortex-m33": 75, "cortex-m0plus": 120}
DECISION_MEAN_CYCLES_PER_CLASS = {"cortex-m4": 97, "cortex-m7": 97, "cortex-m33": 97, "cortex-m0plus": 242}
# The integer anomaly layer (es_anomaly_q8.h) of an anomaly model: its tables (exp(-v) and its limits, 2 x 257
# uint32, and the decision layer's exp table), per-channel constants (5 int32), code (estimated) and cycles per
# channel, from `firmware measure` of a 3-channel GRU past its learning phase (709 cycles on the M4, 1,085 on the
# M0+, scaled per channel: estimated for other channel counts).
ANOMALY_TABLE_BYTES = 2 * 257 * 4 + DECISION_EXP_BYTES + 16
ANOMALY_CODE = 900
ANOMALY_CYCLES_PER_CHANNEL = {"cortex-m4": 236, "cortex-m7": 236, "cortex-m33": 236, "cortex-m0plus": 362}

def plan(buffers: list) -> tuple:
    """Greedy placement: ({name: offset}, arena bytes)."""
    placed = []                                            # (offset, buffer)
    for b in sorted(buffers, key=lambda b: (-b.size, b.first, b.name)):
        live = sorted(((off, o) for off, o in placed if o.overlaps_in_time(b)), key=lambda p: p[0])
        offset = 0
        for off, o in live:
            if offset + b.size <= off:
                break
            offset = max(offset, off + o.size)
        placed.append((offset, b))
    offsets = {b.name: off for off, b in placed}
    arena = max((off + b.size for off, b in placed), default=0)
    return offsets, arena


def integer_buffers(m) -> list:
    """The integer step's working memory (the caller's scratch, `firmware_sim.cemit.layout`): its
    parts are all live during a step, so the plan is their sum. Sizes in bytes."""
    from firmware_sim.cemit import layout
    lay = layout(m)
    if m.kind == "transformer":
        names = {"u": "u (int32 Q12 residual stream)", "v": "v (int32 Q12 LayerNorm / product out)",
                 "qkv": "qkv (int32 Q12 q, k, v)", "y": "y (int32 attention out)", "h": "h (int32 Q12 MLP hidden)",
                 "scores": "scores (int32, one per cached row)", "widened": "widened activations (SMLAD operands)",
                 "q": "q (int16, heads padded to even)", "weights": "weights (int16 Q15 softmax)",
                 "a": "a (int8 product input)"}
        return [Buffer(label, lay[k], 0, 1) for k, label in names.items() if lay[k]]
    if m.kind == "ssm":
        names = {"u": "u (int32 Q12 residual stream)", "v": "v (int32 Q12 LayerNorm out)",
                 "x": "x (int32 state input)", "g": "g (int32 Q12 gate)", "delta": "delta (int32 Q12 step size)",
                 "r": "r (int32 Q12 readout / output)", "a": "a (int8 product input)",
                 "widened": "widened activations (SMLAD operands)"}
        return [Buffer(label, lay[k], 0, 1) for k, label in names.items() if lay[k]]
    names = {"gx": "gx (int32 Q12 input products)", "gh": "gh (int32 Q12 state products)", "a": "a (int8 layer input)",
             "ah": "ah (int8 state input)", "widened": "widened activations (SMLAD operands)"}
    return [Buffer(label, lay[k], 0, 1) for k, label in names.items()]


def _check_supported(proto, path) -> None:
    unsupported = sorted({n.op_type for n in proto.graph.node} - SUPPORTED)
    if any(p.key == "edgeseq.normalization" and '"gain_floor"' in p.value for p in proto.metadata_props):
        raise DataError(f"'{path}' reads its input through the gain stage (input_transform gain), which the firmware "
                        "path does not run; train it with --set input_transform=asinh for the firmware")
    if unsupported:
        raise DataError(f"'{path}' uses {', '.join(unsupported)}, which the firmware cost model and planner do "
                        "not support; export the model with edgeseq")


def run_shapes(path, history: int = 16) -> tuple:
    """Run the graph once at batch 1 (history `history` for cache inputs) with every node output
    exposed: ({tensor: (shape, itemsize)}, proto). `path`: a model file, or the ModelProto
    read from one (`check_model` reads its file once)."""
    import onnx
    import onnxruntime as ort
    from edgeseq import contract

    proto = path if isinstance(path, onnx.ModelProto) else onnx.load(str(path))
    _check_supported(proto, "the model" if proto is path else path)
    g = onnx.ModelProto()
    g.CopyFrom(proto)
    have = {o.name for o in g.graph.output}
    for n in g.graph.node:
        for o in n.output:
            if o and o not in have:
                g.graph.output.append(onnx.ValueInfoProto(name=o))
    feeds = {}
    for i in proto.graph.input:
        shape = []
        for d in i.type.tensor_type.shape.dim:
            if d.dim_value:
                shape.append(d.dim_value)
            elif d.dim_param == contract.HISTORY_AXIS or "history" in d.dim_param:
                shape.append(history)
            else:
                shape.append(1)
        if i.name == contract.POSITION:
            feeds[i.name] = np.full(shape, history, np.int64)
        elif i.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[i.name] = np.ones(shape, np.int64)
        else:
            feeds[i.name] = np.zeros(shape, np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(g.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    vals = sess.run(names, feeds)
    shapes = {n: (tuple(v.shape), v.dtype.itemsize) for n, v in zip(names, vals)}
    for k, v in feeds.items():
        shapes[k] = (tuple(v.shape), v.dtype.itemsize)
    return shapes, proto


def graph_buffers(proto, shapes) -> list:
    """Intermediate activations with lifetimes, from the graph run."""
    consts = {t.name for t in proto.graph.initializer}
    io = {i.name for i in proto.graph.input} | {o.name for o in proto.graph.output}
    first, last = {}, {}
    for t, n in enumerate(proto.graph.node):
        if n.op_type == "Constant" or all((i in consts or not i) for i in n.input):
            consts.update(n.output)                        # computed from weights alone: flash
            continue
        for i in n.input:
            if i in first:
                last[i] = t
        for o in n.output:
            if o and o not in io:
                first[o], last[o] = t, t
    return [Buffer(name, int(np.prod(shapes[name][0], dtype=np.int64)) * shapes[name][1], first[name], last[name])
            for name in first if name in shapes]


def macs_and_ops(proto, shapes) -> tuple:
    consts = {t.name for t in proto.graph.initializer}
    macs = ops = 0
    for n in proto.graph.node:
        if n.op_type in ("MatMul", "Gemm"):
            a, b = shapes[n.input[0]][0], shapes[n.output[0]][0]
            K = a[-1] if not (n.op_type == "Gemm" and any(x.name == "transA" and x.i for x in n.attribute)) else a[-2]
            macs += int(np.prod(b, dtype=np.int64)) * K
        elif n.op_type not in NO_COMPUTE and not all(i in consts or not i for i in n.input):
            ops += sum(int(np.prod(shapes[o][0], dtype=np.int64)) for o in n.output if o in shapes)
    return macs, ops


def flash_of(proto) -> dict:
    from onnx import numpy_helper
    weights = scales = 0
    for t in proto.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.ndim >= 2:
            weights += a.nbytes
        else:
            scales += a.nbytes
    kernels = {n.op_type for n in proto.graph.node} - NO_COMPUTE
    return {"weights": weights, "scales_biases": scales, "code_estimate": CODE_BASE + CODE_PER_KERNEL * len(kernels)}


STACK_ESTIMATE = 256        # bytes of stack per step where no measurement exists (measured: 92-160)
MAX_HISTORY = 1 << 20       # readings: the most --history the check plans (far beyond any part's RAM)
MAX_CACHE_BYTES = 256 << 20  # the check runs the graph at the history planned, with every intermediate
                             # kept: a cache larger than this would cost this machine several times as much
MAX_CYCLES = 1e4            # cycles per MAC or per operation: beyond any core


def check_model(path, target, history: int | None = None, cycles_per_mac: float | None = None,
                compiler: str = "gcc") -> dict:
    """Will `path` fit `target`, and what does one reading cost there. `compiler` "gcc" (the
    documented build, which the fit measured) or "clang": the integer step's code, stack and
    cycles scaled by clang's measured figures (`targets.CLANG`).

    `history` (readings held in a Transformer's cache) past a windowed model's `window` is planned
    at the window, the most rows the model reads: the result's 'history' is the window, and
    'history_asked' and 'history_note' say so. For a windowed model the longest history that fits
    is at most its window.

    UsageError for a --history below 1 or above MAX_HISTORY, or --cycles-per-mac outside
    (0, MAX_CYCLES]; EdgeseqError, with the longest history that fits, for a history whose cache
    alone overflows the part's RAM or MAX_CACHE_BYTES (the graph is never built at that size);
    MetadataError when the metadata's int8 claim disagrees with the graph."""
    import math

    import onnx

    from edgeseq.runtime.model import load_model
    from firmware_sim.intsim import check_quantization, from_parts

    _, meta, loaded = load_model(path)             # the file, read once: every figure below is of these bytes
    source = onnx.load_model_from_string(loaded.data)
    check_quantization(meta, source, path)
    if cycles_per_mac is not None and not (isinstance(cycles_per_mac, (int, float)) and math.isfinite(cycles_per_mac)
                                           and 0 < cycles_per_mac <= MAX_CYCLES):
        raise UsageError(f"--cycles-per-mac must be a number > 0 and at most {MAX_CYCLES:g}, got {cycles_per_mac}")
    if compiler not in ("gcc", "clang"):
        raise UsageError(f"--compiler must be gcc or clang, got {compiler!r}")
    if meta.mode != "stream":
        raise DataError(f"'{path}' is a window model; the firmware check covers streaming step graphs")
    if meta.kind == "regress":                     # the emitted C's integer output conversion must fit int32
        from types import SimpleNamespace

        from firmware_sim.cemit import model_regress
        model_regress(SimpleNamespace(meta={"task": meta.task}))
    growing = any(s.kind == "growing" for s in meta.state)
    if history is not None and not growing:
        raise UsageError("--history applies to models with a growing cache (the transformer); recurrent state is fixed")
    if history is not None and history < 1:
        raise UsageError("--history must be at least 1")
    _check_supported(source, path)
    cfg = meta.config or {}
    window = _window(meta)
    asked = exported = None
    if history is not None and window and history > window:     # older rows are never read: the steady state
        asked, history = history, window                        # is the window's
    H = history or ((meta.max_history or 16) if growing else 1)     # the window the model attends to
    if history is None and window and H > window:               # exported with --max-history past the window
        exported, H = H, window
    per = sum(s.bytes_per_reading() for s in meta.state if s.kind == "growing")
    avail = target.sram_kb * 1024
    ringed = (bool(window) and cfg.get("positions", "none") in ("none", "alibi")     # the integer step's KV ring
              and bool(meta.quantization) and meta.quantization.get("scheme") == "static")
    ring = ringed and (history is None or history >= window)   # the ring (a shorter --history plans the graph)
    if growing and per * H > avail and not ring:       # the ring's int16 cache is planned below, not the graph's
        # The cache alone overflows RAM: no need to build (and allocate) the graph at that size.
        longest = longest_history(source, target, meta, {"ram": {"io": _io_bytes(source)}})
        raise EdgeseqError(f"history {H:,} needs {per * H:,} B of cache alone, {target.name} has {avail:,} B of RAM; "
                           f"the longest history that fits is {longest:,} readings, pass --history with at most that")
    if growing and H > MAX_HISTORY:
        what = f"--history {H:,}" if history else f"the model's max_history {H:,}"
        raise UsageError(f"{what} is more than the check plans: pass --history with at most {MAX_HISTORY:,} readings")
    if growing and per * H > MAX_CACHE_BYTES:
        longest = longest_history(source, target, meta, {"ram": {"io": _io_bytes(source)}})
        raise EdgeseqError(f"history {H:,} needs {per * H:,} B of cache; the check plans at most "
                           f"{MAX_CACHE_BYTES:,} B of cache ({MAX_CACHE_BYTES / 2**20:g} MiB): the longest history "
                           f"that fits is {longest:,} readings, pass --history with at most that")
    shapes, proto = run_shapes(source, H)
    macs, ops = macs_and_ops(proto, shapes)
    flash = flash_of(proto)
    integer = bool(meta.quantization and meta.quantization.get("scheme") == "static"
                   and (meta.arch in ("rnn", "gru", "lstm", "ssm") or ring))
    measured, stack = None, 0
    if integer:
        from firmware_sim.cemit import flash_bytes, layout
        from firmware_sim.measure import cost_features, macs_per_step
        from firmware_sim.targets import MEASURED, MEASURED_SOURCE, emulated_core, measured_kind

        if loaded.graph is None:
            raise DataError(loaded.graph_error or f"'{path}' cannot be read; export it again")
        m = from_parts(meta, loaded.graph.initializers, loaded.graph.nodes, path)
        lay = layout(m)
        bufs = integer_buffers(m)
        core = emulated_core(target)
        measured = (MEASURED.get(core) or {}).get(measured_kind(m))
        text_f, clang_stack, cycle_f = 1.0, None, 1.0
        if compiler == "clang" and measured:
            from firmware_sim.targets import clang_figures
            text_f, clang_stack, cycle_f = clang_figures(core, measured_kind(m))
        fb = flash_bytes(m)
        flash = {"weights": fb["weights"], "scales_biases": fb["constants"], "activation_tables": fb["tables"],
                 **({"reading_table": fb["reading_table"]} if "reading_table" in fb else {}),   # an input transform's
                 ("code_fitted" if measured else "code_estimate"):
                     int(round((measured[-3] + measured[-2] * (m.layers - 1)) * text_f)) if measured
                     else CODE_BASE + CODE_PER_KERNEL * 4}
        state = lay["state"]
        io = lay["io"]
        stack = (clang_stack + 32 if clang_stack else measured[-1]) if measured else STACK_ESTIMATE
        macs = macs_per_step(m)
        fitted_cycles = float(np.dot(measured[:-3], cost_features(m))) * cycle_f if measured else None
        kind = ("integer-only step (as `firmware emit` writes it): int8 weights, "
                + {"ssm": "Q12 LayerNorm and gate, int32 state",
                   "transformer": f"Q12 LayerNorm, int16 KV ring of {getattr(m, 'window', 0)} rows (state + cache "
                                  "at the window)"}.get(m.kind, "int16/int32 state")
                + "; code, stack and "
                + (f"cycles fitted to measurements on an emulated {core} ({MEASURED_SOURCE})" if measured else
                   "cycles are estimates (no emulated core for this target)")
                + ("; built by clang: code, stack and cycles scaled by clang's measured figures (targets.CLANG)"
                   if compiler == "clang" and measured else ""))
    else:
        bufs = graph_buffers(proto, shapes)
        state = sum(s.bytes_per_reading() * (H if s.kind == "growing" else 1) for s in meta.state)
        io = sum(int(np.prod(shapes[i.name][0])) * shapes[i.name][1] for i in proto.graph.input
                 if not i.name.startswith(("state_in", "past")))
        io += sum(int(np.prod(shapes[o.name][0])) * shapes[o.name][1] for o in proto.graph.output
                  if not o.name.startswith(("state_out", "present")))
        kind = ("graph as exported (float intermediates, float state/cache)" if not meta.quantization
                else "graph as exported: int8 weights, float intermediates and cache")
    offsets, arena = plan(bufs)
    decision = None
    if integer and meta.decision is not None:          # the integer decision layer (es_decide_q15.h) after the step
        from edgeseq.runtime.decision import DecisionSpec
        from firmware_sim.intdecide import params
        W = params(DecisionSpec.from_json(meta.decision, meta.labels))["window"]
        C = len(meta.labels)
        per_class = DECISION_MEAN_CYCLES_PER_CLASS if W else DECISION_CYCLES_PER_CLASS
        decision = {"flash": DECISION_EXP_BYTES + 8 * C + DECISION_CODE,
                    "ram": 8 * C + 24 + (4 * W * C + 4 * C + 8 if W else 0),       # a moving mean: its ring and sums
                    "cycles": per_class.get(core, max(per_class.values())) * C}
        flash["decision"] = decision["flash"]
    if integer and meta.kind == "anomaly":             # the integer anomaly layer (es_anomaly_q8.h) after the step
        F = len(meta.features)
        decision = {"flash": ANOMALY_TABLE_BYTES + 20 * F + ANOMALY_CODE, "ram": 8 * F + 56,
                    "cycles": ANOMALY_CYCLES_PER_CHANNEL.get(core, max(ANOMALY_CYCLES_PER_CHANNEL.values())) * F,
                    "layer": "anomaly"}
        flash["anomaly"] = decision["flash"]
    flash_total = sum(flash.values())
    ram = {"arena": {"requested": int(sum(b.size for b in bufs)), "used": int(arena), "count": len(bufs)},
           "state": int(state), "io": int(io), "stack": int(stack),
           **({decision.get("layer", "decision"): decision["ram"]} if decision else {})}
    ram_total = arena + state + io + stack + (decision["ram"] if decision else 0)
    if measured and cycles_per_mac is None:
        cycles = fitted_cycles                    # the fit covers the whole step
        cpm, ops_cost = cycles / macs, 0.0
    else:
        cpm = target.cycles_per_mac if cycles_per_mac is None else cycles_per_mac
        ops_cost = target.cycles_per_op
        cycles = macs * cpm + ops * ops_cost
    if decision:
        cycles += decision["cycles"]
    us = cycles / target.clock_mhz
    r = {
        "model": str(path), "arch": meta.arch, "quantization": (meta.quantization or {}).get("scheme", "float"),
        "target": target.to_json(), "history": H if growing else None, "window": window or None, "plan_of": kind,
        "compiler": compiler,
        "flash": {**{k: int(v) for k, v in flash.items()}, "total": int(flash_total),
                  "available": target.flash_kb * 1024, "margin": target.flash_kb * 1024 - int(flash_total)},
        "ram": {**ram, "total": int(ram_total), "available": target.sram_kb * 1024,
                "margin": target.sram_kb * 1024 - int(ram_total)},
        "buffers": [{"name": b.name, "size": b.size, "first": b.first, "last": b.last, "offset": offsets[b.name]}
                    for b in bufs],
        "cost": {"macs": int(macs), "other_ops": int(ops), "cycles_per_mac": cpm,
                 "cycles_per_op": ops_cost, "cycles": int(cycles), "us_per_reading": us,
                 "max_rate_hz": 1e6 / us if us else None,
                 "source": ("fitted to steps measured on the emulated core (modelled cycles)" if measured
                            and cycles_per_mac is None else "estimated (--cycles-per-mac)" if cycles_per_mac
                            else "estimated from the core's instruction timings")},
    }
    if decision and decision.get("layer") == "anomaly":
        r["anomaly"] = {**decision, "source": "flash: the tables and per-channel constants (exact) and code "
                        f"(estimated, {ANOMALY_CODE} B); RAM: its state (exact); cycles: per channel, from `firmware "
                        "measure` of a 3-channel GRU (709 on the M4, 1,085 on the M0+)"}
    elif decision:
        r["decision"] = {**decision, "source": "flash: the exp table and per-class constants (exact) and code "
                         f"(estimated, {DECISION_CODE} B); RAM: its state and probabilities (exact); cycles: "
                         "per class, from `firmware measure` of GRU/SSM/Transformer with 4 classes (an EMA about "
                         "300 on the M4, 480 on the M0+; a moving mean of 6 readings about 385 and 970)"}
    r["fits"] = r["flash"]["margin"] >= 0 and r["ram"]["margin"] >= 0
    if asked is not None or exported is not None:
        r["history_asked"] = asked if asked is not None else exported
        what = f"--history {asked:,}" if asked is not None else f"the model's max_history {exported:,}"
        r["history_note"] = (f"{what} is past the model's window of {window:,} readings, the most it reads: "
                             f"planned at {window:,} (the cache at steady state)")
    if target.xip_cache_kb and flash_total - sum(v for k, v in flash.items() if k.startswith("code")) > target.xip_cache_kb * 1024:
        r["note"] = (f"weights and tables ({flash_total:,} B with code) exceed the {target.xip_cache_kb} KB XIP cache: "
                     "reads miss to external flash; expect a slower step than the figure above (copy hot weights to SRAM)")
    if growing and not (integer and ring):        # the integer ring holds the trained window, whatever fits
        r["longest_history"] = longest_history(source, target, meta, r)
    return r


def verdict(r: dict) -> str | None:
    """None if the model fits, else a one-line reason with what to do."""
    if r["fits"]:
        return None
    t = r["target"]["name"]
    if r["flash"]["margin"] < 0:
        todo = ("choose a smaller model (fewer hidden units or layers) or a part with more flash"
                if r.get("quantization", "float") != "float" else "export it with --int8 or choose a smaller model")
        return f"{r['model']} needs {r['flash']['total']:,} B of flash, {t} has {r['flash']['available']:,} B; {todo}"
    if r.get("history") and "longest_history" in r:
        return (f"history {r['history']:,} does not fit {t}: RAM {r['ram']['total']:,} B of {r['ram']['available']:,} B "
                f"(cache {r['ram']['state']:,} B); the longest history that fits is {r['longest_history']:,} readings, "
                "pass --history with at most that")
    return (f"{r['model']} needs {r['ram']['total']:,} B of RAM, {t} has {r['ram']['available']:,} B; "
            "choose a smaller model or a larger part")


def _io_bytes(path) -> int:
    """Bytes of the graph's non-state inputs and outputs (reading, position, logits) at batch 1;
    `path`: a model file or its ModelProto (as `run_shapes`)."""
    shapes, proto = run_shapes(path, 1)
    return sum(int(np.prod(shapes[v.name][0])) * shapes[v.name][1] for v in list(proto.graph.input) + list(proto.graph.output)
               if not v.name.startswith(("state_in", "past", "state_out", "present")))


def _window(meta) -> int:
    """A windowed Transformer's window (readings its attention reaches), else 0."""
    w = (meta.config or {}).get("window") if meta.arch == "transformer" else 0
    return w if isinstance(w, int) and not isinstance(w, bool) and w > 0 else 0


def longest_history(path, target, meta, at) -> int:
    """Largest history whose RAM (arena + cache + io) fits, found by bisection on the real plan;
    at most MAX_HISTORY readings and MAX_CACHE_BYTES of cache (no graph is built beyond them),
    and at most a windowed model's window (it reads no older rows)."""
    per = sum(s.bytes_per_reading() for s in meta.state if s.kind == "growing")
    avail = target.sram_kb * 1024
    top = max(1, min(MAX_HISTORY, MAX_CACHE_BYTES // per, avail // per, _window(meta) or MAX_HISTORY))

    def ram(h):
        shapes, proto = run_shapes(path, h)
        _, arena = plan(graph_buffers(proto, shapes))
        return arena + per * h + at["ram"]["io"]
    if ram(1) > avail:
        return 0
    if top == 1 or ram(top) <= avail:          # a part with RAM to spare: the cap is the answer
        return top
    lo, hi = 1, top
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ram(mid) <= avail:
            lo = mid
        else:
            hi = mid
    return lo
