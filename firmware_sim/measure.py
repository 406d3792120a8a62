"""Measure the emitted C step on an emulated Cortex-M core: sizes, stack, instructions, cycles.

`measure(model, core, opt)` emits the model's C (`firmware_sim.cemit`), cross-compiles it for
the core (`firmware_sim.toolchain`), and runs it in Unicorn (`firmware_sim.emulate`):

- bit-exactness: `readings` real test readings streamed through the compiled step, every
  logit compared with the integer simulator (`firmware_sim.intsim`);
- measured: `.text` / `.rodata` / `.data` / `.bss` of the model's object file (the step, the
  kernels it inlines, the weights and tables), the deepest stack of a step, the instructions
  executed per step (averaged over `counted` readings), the executed instruction mix, and the
  instructions spent in libgcc's 64-bit helpers (`__aeabi_l*`; there should be none);
- modelled: cycles per step from the instruction mix and the core's timing table
  (`emulate.TIMINGS`, from the Arm Technical Reference Manuals), and time per reading at the
  target's clock. No flash wait states, interrupts or caches are in it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from edgeseq.errors import EdgeseqError, UsageError

OPTS = ("-Os", "-O2", "-O3")

CHUNK = 256                 # readings the harness holds at once (inputs and outputs in emulated RAM)

HARNESS = r"""#include "es_model.h"
#define N_MAX {n}
int32_t bench_in[N_MAX][ES_FEATURES];
int32_t bench_out[N_MAX][ES_CLASSES];
static es_state_t bench_state;
static int32_t bench_scratch[ES_SCRATCH_WORDS];
void bench_reset(void) {{ es_reset(&bench_state); }}
int bench_run(int first, int n) {{
  int i;
  for (i = 0; i < n; i++) es_step(bench_in[first + i], &bench_state, bench_out[first + i], bench_scratch);
  return n;
}}
"""

# With decision settings: the step and the decision layer per reading, its events kept (ended, started, run).
HARNESS_DECIDE = r"""int32_t bench_ev[N_MAX][3];
static es_decision_t bench_dec;
static int32_t bench_probs[ES_CLASSES];
void bench_dec_reset(void) {{ es_decision_reset(&bench_dec); }}
int bench_run_decide(int first, int n) {{
  int i;
  for (i = 0; i < n; i++) {{
    es_step(bench_in[first + i], &bench_state, bench_out[first + i], bench_scratch);
    es_decide(bench_out[first + i], &bench_dec, bench_probs, &bench_ev[first + i][0], &bench_ev[first + i][1],
              &bench_ev[first + i][2]);
  }}
  return n;
}}
"""

HARNESS_ANOMALY = r"""int32_t bench_ev[N_MAX][4];
static es_anomaly_t bench_an;
void bench_dec_reset(void) {{ es_anomaly_reset(&bench_an); }}
int bench_run_decide(int first, int n) {{
  int i;
  for (i = 0; i < n; i++) {{
    es_step(bench_in[first + i], &bench_state, bench_out[first + i], bench_scratch);
    es_anomaly(bench_in[first + i], bench_out[first + i], &bench_an, &bench_ev[first + i][0],
               &bench_ev[first + i][1], &bench_ev[first + i][2], &bench_ev[first + i][3]);
  }}
  return n;
}}
"""

# A regression model: the step and its output conversion (es_targets) per reading, the values kept.
HARNESS_TARGETS = r"""int32_t bench_vals[N_MAX][ES_CLASSES];
void bench_dec_reset(void) {{ }}
int bench_run_decide(int first, int n) {{
  int i;
  for (i = 0; i < n; i++) {{
    es_step(bench_in[first + i], &bench_state, bench_out[first + i], bench_scratch);
    es_targets(bench_out[first + i], bench_vals[first + i]);
  }}
  return n;
}}
"""


def core_of(target) -> str:
    """The emulated core for a target profile (its `core` field), or UsageError."""
    from firmware_sim.targets import emulated_core
    core = emulated_core(target)
    if core is None:
        raise UsageError(f"no emulated core for {target.name} ({target.core}); measure covers Cortex-M0+, M4, M7 "
                         "and M33: pass --core")
    return core


def cost_features(m) -> list:
    """What a step's cycles scale with, for `check`'s fitted cost: [MACs, requantized outputs
    (every product output and every state value quantized to int8), hidden units x layers, 1].
    For an SSM: [MACs, requantized values (product outputs and int8 inputs), element-wise
    channels (LayerNorms, gates and states), 1]."""
    if m.kind == "ssm":
        from firmware_sim.cemit_ssm import cost_features as ssm_features
        return ssm_features(m)
    if m.kind == "transformer":
        from firmware_sim.cemit_xf import cost_features as xf_features
        return xf_features(m)
    outputs = sum(c["x"].w.shape[1] + c["h"].w.shape[1] for c in m.cells) + m.head.w.shape[1]
    quantized = m.hidden * (2 * m.layers)                 # h before its own product, and before the next layer's or the head
    return [float(kernel_macs_per_step(m)), float(outputs + quantized), float(m.hidden * m.layers), 1.0]


def kernel_macs_per_step(m) -> int:
    """Multiply-accumulates the emitted kernels execute for one step: es_k_matvec runs its
    inputs and its output rows in fours, so each product counts as ceil4(in) x ceil4(out)
    (a hidden size of 13 runs as 16)."""
    if m.kind == "ssm":
        from firmware_sim.cemit_ssm import kernel_macs
        return kernel_macs(m)
    if m.kind == "transformer":
        from firmware_sim.cemit_xf import kernel_macs as xf_kernel_macs
        return xf_kernel_macs(m)
    def padded(w) -> int:
        return (-(-w.shape[0] // 4) * 4) * (-(-w.shape[1] // 4) * 4)
    return int(sum(padded(c["x"].w) + padded(c["h"].w) for c in m.cells) + padded(m.head.w))


def macs_per_step(m) -> int:
    """int8 multiply-accumulates of one step (the products as the model defines them, unpadded)."""
    if m.kind == "ssm":
        from firmware_sim.cemit_ssm import macs
        return macs(m)
    if m.kind == "transformer":                          # attention at a full window, as macs_per_reading counts it
        from firmware_sim.cemit_xf import macs as xf_macs
        return xf_macs(m)
    return int(sum(c["x"].w.size + c["h"].w.size for c in m.cells) + m.head.w.size)


def readings_for(m, data: str | None, n: int, model=None) -> tuple:
    """(float readings [n, F], description): the test split of `data` joined end to end; with
    `data` None, of the data the model was trained on (its `edgeseq.data` metadata; a recorded
    file that is gone is a DataError saying to pass --data). A file exported before that key
    reads the embedded data if its channels are the model's, else seeded synthetic readings
    spread over each channel's int8 input range. `model` names the file in messages."""
    from edgeseq.data import data_for_model
    from edgeseq.errors import DataError

    recorded = m.meta.get("data")
    try:
        ds = data_for_model(data, m.meta["features"], trained=recorded, model=None if model is None else str(model),
                            trained_sha256=m.meta.get("data_sha256"))
    except DataError:
        if data is not None or recorded is not None:
            raise
        ds = None
    if ds is not None:
        X = np.concatenate([ds.test.X[i, :ds.test.lengths[i]] for i in range(len(ds.test))])
        return np.concatenate([X] * (1 + n // len(X)))[:n], f"the test split of {ds.name}"
    lo, hi = m.input_range()
    rng = np.random.default_rng(0)
    return lo + (hi - lo) * rng.random((n, m.n_features)), "synthetic readings over each channel's int8 range"


def measure(model, core: str, opt: str = "-O2", readings: int = 1000, counted: int = 8, target=None,
            work_dir=None, portable: bool = False, data: str | None = None, compiler: str | None = None) -> dict:
    """Cross-compile the emitted step of `model` (a static int8 RNN/GRU/LSTM/SSM/windowed Transformer
    .onnx; a Transformer's steps are counted once its ring holds a full window) for `core`
    ("cortex-m0plus", "cortex-m4", "cortex-m7", "cortex-m33") at `opt`, run it on the emulated
    core and return the figures (see the module docstring); `target` (a Target) adds time per
    reading at its clock; `portable=True` builds the portable C path (ES_PORTABLE) on a DSP core;
    `compiler` "gcc" or "clang" picks the cross compiler (default: gcc where installed, else
    clang from the ziglang wheel). Raises EdgeseqError if the compiled step differs from the simulator
    in any logit, if no cross compiler or emulator is installed (the message says how to get
    one), UsageError for an unknown core or optimisation level."""
    from firmware_sim import emulate, toolchain
    from firmware_sim.cemit import emit, layout
    from firmware_sim.intsim import from_onnx

    if core not in toolchain.CORES:
        raise UsageError(f"unknown core '{core}'; use one of {', '.join(toolchain.CORES)}")
    if opt not in OPTS:
        raise UsageError(f"optimisation '{opt}' must be one of {', '.join(OPTS)}")
    from firmware_sim.cemit import model_anomaly, model_decision, model_regress, targets_fixed
    m = from_onnx(model)
    X, source = readings_for(m, data, readings, model)       # a model or data error first: no toolchain needed
    compiler = toolchain.require_compiler(compiler)
    xq = m.to_fixed(X)
    spec = model_decision(m)
    aq = model_anomaly(m)
    dec = None
    if spec is not None:
        from firmware_sim.intdecide import IntDecider
        dec, want_ev = IntDecider(spec, 1), []
    elif aq is not None:                                   # the anomaly layer, checked and counted as the decision's
        from edgeseq.runtime.anomaly import AnomalySpec
        from firmware_sim.intanomaly import IntWatcher
        dec, want_ev = IntWatcher(aq, 1), []
        spec = AnomalySpec.from_json(m.meta["task"])
    width = 4 if aq is not None and dec is not None else 3
    state, want = m.init_state(1), []
    for x in xq:
        logits, state = m.step(x[None], state)
        want.append(logits[0])
        if dec is not None:
            ev = dec.update(x[None], logits) if width == 4 else dec.update(logits)
            end = [e.cls for e in ev if e.kind == "end"]
            start = [e for e in ev if e.kind == "start"]
            want_ev.append(([int(dec.cand[0])] if width == 4 else [])
                           + [end[0] if end else -1, start[0].cls if start else -1,
                              start[0].position - start[0].onset + 1 if start else 0])
    want = np.array(want, np.int64)
    tq = model_regress(m) if dec is None else None          # a regression model: its targets are checked and counted
    want_vals = targets_fixed(want, tq).astype(np.int64) if tq is not None else None
    layered = dec is not None or tq is not None

    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        d = Path(tmp)
        emit(m, d, prefix="es")
        layer = (HARNESS_TARGETS.format() if tq is not None else "" if dec is None
                 else (HARNESS_ANOMALY if width == 4 else HARNESS_DECIDE).format())
        (d / "harness.c").write_text(HARNESS.format(n=CHUNK) + layer)
        defines = ["ES_PORTABLE"] if portable else []
        obj = toolchain.compile_object(d / "es_model.c", core, opt, d, include_dirs=[d], defines=defines,
                                       compiler=compiler)
        sizes = toolchain.sections(obj)
        ssm, xf = m.kind == "ssm", m.kind == "transformer"
        tables = ([d / "es_tables.c"] + ([d / "es_ssm_tables.c"] if ssm or xf else [])
                  + ([d / "es_xf_tables.c"] if xf else []))
        elf = toolchain.build([d / "harness.c", d / "es_model.c", *tables], core, opt, d, include_dirs=[d],
                              defines=defines, compiler=compiler)
        code = (d / "es_model.c").read_text() + ((d / "es_ssm_int.h").read_text() if ssm else "")
        used = [t for t in ("es_sigmoid_q15", "es_tanh_q15") if t in code]
        if xf:
            used += ["es_rsqrt_q15", "es_exp_q15", "es_phi_q15"]
        if ssm:
            used += ["es_rsqrt_q15"] + (["es_softplus_q12", "es_decay_gain_q15"] if m.selective else [])
        tables = toolchain.sections(elf, symbols_from=used)["rodata"]       # the tables this model reads
        mach = emulate.Machine(elf, core)
        mach.call("bench_reset")
        if layered:
            mach.call("bench_dec_reset")
        got, got_ev, got_vals = [], [], []
        run = "bench_run_decide" if layered else "bench_run"
        for start in range(0, readings, CHUNK):             # the state carries over between chunks
            chunk = xq[start:start + CHUNK].astype(np.int32)
            mach.write("bench_in", chunk)
            mach.call(run, 0, len(chunk), max_instructions=2_000_000_000)
            got.append(np.frombuffer(mach.read("bench_out", 4 * len(chunk) * len(m.labels)), np.int32)
                       .reshape(len(chunk), -1))
            if dec is not None:
                got_ev.append(np.frombuffer(mach.read("bench_ev", 4 * width * len(chunk)), np.int32)
                              .reshape(len(chunk), width))
            if tq is not None:
                got_vals.append(np.frombuffer(mach.read("bench_vals", 4 * len(chunk) * len(m.labels)), np.int32)
                                .reshape(len(chunk), -1))
        got = np.concatenate(got)
        if tq is not None and not np.array_equal(np.concatenate(got_vals).astype(np.int64), want_vals):
            bad = int(np.argwhere((np.concatenate(got_vals) != want_vals).any(1))[0, 0])
            raise EdgeseqError(f"the compiled es_targets differs from firmware_sim.cemit.targets_fixed at reading "
                               f"{bad} on {core} {opt}")
        if dec is not None and not np.array_equal(np.concatenate(got_ev).astype(np.int64), np.array(want_ev)):
            bad = int(np.argwhere((np.concatenate(got_ev) != np.array(want_ev)).any(1))[0, 0])
            what = "anomaly" if width == 4 else "decision"
            raise EdgeseqError(f"the compiled {what} layer differs from the simulator at reading {bad} on {core} "
                               f"{opt}")
        if not np.array_equal(got.astype(np.int64), want):
            bad = int(np.argwhere((got != want).any(1))[0, 0])
            raise EdgeseqError(f"the compiled step differs from the simulator at reading {bad} on {core} {opt}: "
                               f"{got[bad].tolist()} vs {want[bad].tolist()}")
        mach.write("bench_in", xq[:CHUNK].astype(np.int32))
        mach.call("bench_reset")
        warm = m.window if xf else 0                        # a transformer is counted at a full window
        for start in range(0, warm, CHUNK):
            mach.call("bench_run", 0, min(CHUNK, warm - start), max_instructions=2_000_000_000)
        r = mach.call("bench_run", 0, min(counted, CHUNK), count=True, max_instructions=200_000_000)
        r_dec = None
        if layered:                                         # the same readings again, with the layer after the step
            mach.call("bench_reset")
            mach.call("bench_dec_reset")
            for start in range(0, warm, CHUNK):
                mach.call("bench_run", 0, min(CHUNK, warm - start), max_instructions=2_000_000_000)
            if width == 4:                                  # the anomaly layer is counted past its learning phase
                ahead = spec.warm + spec.learn + 2
                for start in range(0, ahead, CHUNK):
                    mach.call("bench_run_decide", 0, min(CHUNK, ahead - start), max_instructions=2_000_000_000)
            r_dec = mach.call("bench_run_decide", 0, min(counted, CHUNK), count=True, max_instructions=200_000_000)
    macs = macs_per_step(m)
    per_step = r["instructions"] / counted
    helpers = {k: v / counted for k, v in r["by_function"].items() if k.startswith(("__aeabi_l", "__mul", "__ash"))}
    lay = layout(m)
    ssm_keys = {"d_state": m.d_state, "selective": bool(m.selective)} if m.kind == "ssm" else {}
    if m.kind == "transformer":
        ssm_keys = {"heads": m.heads, "d_ff": m.d_ff, "window": m.window, "cache_bytes": lay["cache"],
                    "counted_at": "a full window (the first window readings after a reset are not counted)"}
    out = {**ssm_keys,
        "model": str(model), "arch": m.kind, "hidden": m.hidden, "layers": m.layers, "core": core, "opt": opt,
        "compiler": compiler.version(), "cpu_model": mach.cpu_model, "dsp_path": core in ("cortex-m4", "cortex-m7", "cortex-m33") and not portable,
        "bit_exact_readings": readings, "readings_from": source,
        "sections": {k: int(v) for k, v in sizes.items()}, "tables_bytes": int(tables),
        "stack_bytes": int(r["stack_bytes"]), "scratch_bytes": lay["scratch"], "state_bytes": lay["state"],
        "macs": macs, "instructions_per_step": per_step, "instructions_per_mac": per_step / macs,
        "helper_instructions_per_step": helpers,
        "mix_top": [(k, round(v / counted, 1)) for k, v in r["mix"].most_common(12)],
        "provenance": {"sections": "measured (pyelftools, the model's object file)",
                       "tables_bytes": "measured (the sigmoid/tanh tables the linked step keeps, es_tables.c)",
                       "stack_bytes": "measured (deepest stack below the caller's SP, emulated)",
                       "instructions_per_step": f"measured (Unicorn, mean over {counted} steps)",
                       "cycles_per_step": "modelled from the executed mix (emulate.TIMINGS)"},
    }
    if r_dec is not None and tq is not None:
        out["targets"] = {"bit_exact_readings": readings, "targets": len(m.labels),
                          "instructions_per_step": r_dec["instructions"] / counted - per_step,
                          "share_of_step": (r_dec["instructions"] / counted - per_step) / per_step,
                          "provenance": "measured (Unicorn): the step with es_targets after it, minus the step"}
        if r_dec.get("cycles") and r.get("cycles"):
            extra = (r_dec["cycles"]["cycles"] - r["cycles"]["cycles"]) / counted
            out["targets"].update({"cycles_per_step": extra, "cycles_share": extra * counted / r["cycles"]["cycles"]})
    elif r_dec is not None:
        key, fn = ("anomaly", "es_anomaly") if width == 4 else ("decision", "es_decide")
        ev = np.array(want_ev)
        fired = int((ev[:, -3] >= 0).sum() + (ev[:, -2] >= 0).sum())
        out[key] = {"bit_exact_readings": readings, "settings": spec.describe(), "events_checked": fired,
                    **({"candidates_checked": int(ev[:, 0].sum())} if width == 4 else {}),
                    "instructions_per_step": r_dec["instructions"] / counted - per_step,
                    "share_of_step": (r_dec["instructions"] / counted - per_step) / per_step,
                    "provenance": f"measured (Unicorn): the step with {fn} after it, minus the step"}
        if r_dec.get("cycles") and r.get("cycles"):
            extra = (r_dec["cycles"]["cycles"] - r["cycles"]["cycles"]) / counted
            out[key].update({"cycles_per_step": extra, "cycles_share": extra * counted / r["cycles"]["cycles"]})
    if r.get("cycles"):
        cyc = r["cycles"]["cycles"] / counted
        out["cycles_per_step"] = cyc
        out["cycles_per_mac"] = cyc / macs
        out["timing_source"] = r["cycles"].get("source")
        if target is not None:
            out["target"] = target.name
            out["us_per_reading"] = cyc / target.clock_mhz
            out["max_rate_hz"] = 1e6 * target.clock_mhz / cyc
    return out
