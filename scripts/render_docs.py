"""Render the figure tables in docs/ from the JSON the benchmarks write.

    python scripts/render_docs.py            # rewrite every marked region that is out of date
    python scripts/render_docs.py --check    # exit 1, naming the regions, if any is out of date

A page (docs/**/*.md, or README.md) marks a region with two comments, and everything between them is this script's:

    <!-- figures:bench-gru -->
    ...generated...
    <!-- /figures:bench-gru -->

The name picks a renderer (RENDERERS), which reads one JSON file (SOURCES) and returns
Markdown: a line naming the machine and the date the JSON records, then the table. To change
a figure, re-run its benchmark into the JSON and run this script; an edit by hand between the
markers fails `tests/test_docs.py`.

Sources:
  - docs/figures/bench.json   `edgeseq bench --repeats 500 --json > docs/figures/bench.json`
  - docs/report/report.json   `edgeseq report --out docs/report` (the full report run)
  - docs/figures/firmware.json  `python scripts/firmware_table.py --json docs/figures/firmware.json
                                 --untrained-windows 16,256 models/{rnn,gru,lstm,ssm,transformer}-int8.onnx`
                                 (after `make demo`; the command is recorded in the JSON)
  - docs/figures/firmware_ssm.json  `python scripts/firmware_ssm_check.py models/ssm-int8.onnx --float
                                 models/ssm.onnx --train selective --json docs/figures/firmware_ssm.json` (after
                                 `make demo`; trains the selective SSM; the command is recorded in the JSON)
  - docs/figures/firmware_xf.json  `python scripts/firmware_xf_check.py models/transformer-int8.onnx --float
                                 models/transformer.onnx --train 16 --json docs/figures/firmware_xf.json` (after
                                 `make demo`; trains the window-16 Transformer; the command is recorded in the JSON)
  - docs/figures/gateway.json   `python scripts/bench_gateway.py ... --json docs/figures/gateway.json`
                                 (the command is recorded in the JSON; gateway_batched.json likewise, with
                                 --per-message; gateway_overload.json, at twice the capacity; and
                                 gateway_cluster.json, with --cluster --failover)
  - docs/figures/ucr.json       `python scripts/measure_ucr.py run --sets /tmp/ucr --json docs/figures/ucr.json`
                                 (after its `convert`; the command is recorded in the JSON)
  - docs/figures/compilers.json `python scripts/firmware_compilers.py --json docs/figures/compilers.json
                                 models/{rnn,gru,lstm,ssm,transformer}-int8.onnx` (after `make demo`; the
                                 command is recorded in the JSON)
  - docs/figures/events.json    `python scripts/measure_events.py --json docs/figures/events.json` (trains,
                                 exports, calibrates and scores; the command is recorded in the JSON)
  - docs/figures/switching.json `python scripts/measure_switching.py --json docs/figures/switching.json` (trains,
                                 exports, calibrates and scores; the command is recorded in the JSON)
  - docs/figures/decision_bench.json  `python scripts/bench_decision.py --json docs/figures/decision_bench.json
                                 models/...onnx` (after `make demo`; the command is recorded in the JSON)
  - docs/figures/anomaly.json   `python scripts/measure_anomaly.py --json docs/figures/anomaly.json` (trains,
                                 exports, calibrates and scores; the command is recorded in the JSON)
  - docs/figures/regress.json   `python scripts/measure_regress.py --json docs/figures/regress.json` (trains,
                                 exports and scores; the command is recorded in the JSON)
  - docs/figures/soak.json      `python examples/soak.py --model models/gru-int8.onnx --json > docs/figures/soak.json`
                                 (after `make demo`; the command is recorded in the JSON)
  - docs/figures/pi_demo.json   `python scripts/measure_pi_demo.py --json docs/figures/pi_demo.json` (after
                                 `make demo`: examples/pi_sensor_demo.py on its int8 models; the commands are
                                 recorded in the JSON)
  - docs/figures/report_quick.json  `python scripts/measure_report_quick.py --json docs/figures/report_quick.json`
                                 (one `edgeseq report --quick`; its report.json's meta and the command)
  - docs/figures/demo.json      `.venv/bin/python examples/demo.py --json docs/figures/demo.json` (what
                                 `make demo` runs, plus the JSON; the command is recorded in the JSON)
  - docs/figures/translation.json  `python scripts/measure_translation.py --json docs/figures/translation.json`
                                 (trains, exports, scores and times both translation models with the
                                 `edgeseq translate` commands; the commands are recorded in the JSON)
  - docs/figures/int8.json      `python scripts/measure_int8.py --runs runs --json docs/figures/int8.json` (after
                                 `make demo`: exports float, static and dynamic int8 from runs/, keeps each
                                 export's validation and compares them; the command is recorded in the JSON)
  - docs/figures/int8_margins.json  `python scripts/int8_margins.py --json docs/figures/int8_margins.json`
                                 (trains every architecture over seeds 0-4, exports int8 both ways; about
                                 5 minutes; the command is recorded in the JSON)
  - docs/figures/ssm_int8_parts.json  `python scripts/ssm_int8_parts.py --json docs/figures/ssm_int8_parts.json`
                                 (trains both SSM variants, exports int8 under each choice of part kept float;
                                 the command is recorded in the JSON)
  - docs/figures/ssm.json       `python scripts/measure_ssm.py --json docs/figures/ssm.json` (trains the fixed
                                 and selective SSM and the GRU, exports, scores and times them; the command is
                                 recorded in the JSON)
  - docs/figures/single_sequence.json  `python scripts/measure_single_sequence.py --json
                                 docs/figures/single_sequence.json` (trains each architecture with today's
                                 defaults and on single sequences only, scores both; the command is recorded)
  - docs/figures/train_throughput.json  `edgeseq bench --repeats 500 --train --json >
                                 docs/figures/train_throughput.json` (the whole bench; the regions read its
                                 `throughput`; the command is rebuilt from `repeats`, as for bench.json)
  - docs/figures/long_recordings.json  `python scripts/bench_long_recordings.py gru transformer --json
                                 docs/figures/long_recordings.json` (about 10 min on one core; the command is
                                 recorded in the JSON)

Standard library only, so it runs wherever the docs build.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

SOURCES = {
    "bench": "docs/figures/bench.json",
    "report": "docs/report/report.json",
    "firmware": "docs/figures/firmware.json",
    "firmware-ssm": "docs/figures/firmware_ssm.json",
    "firmware-xf": "docs/figures/firmware_xf.json",
    "gateway": "docs/figures/gateway.json",
    "gateway-batched": "docs/figures/gateway_batched.json",
    "gateway-overload": "docs/figures/gateway_overload.json",
    "gateway-cluster": "docs/figures/gateway_cluster.json",
    "ucr": "docs/figures/ucr.json",
    "compilers": "docs/figures/compilers.json",
    "demo": "docs/figures/demo.json",
    "pi-demo": "docs/figures/pi_demo.json",
    "report-quick": "docs/figures/report_quick.json",
    "events": "docs/figures/events.json",
    "switching": "docs/figures/switching.json",
    "decision-bench": "docs/figures/decision_bench.json",
    "anomaly": "docs/figures/anomaly.json",
    "regress": "docs/figures/regress.json",
    "int8": "docs/figures/int8.json",
    "external": "docs/figures/external.json",
    "soak": "docs/figures/soak.json",
    "augment": "docs/figures/augment.json",
    "translation": "docs/figures/translation.json",
    "single-sequence": "docs/figures/single_sequence.json",
    "train-throughput": "docs/figures/train_throughput.json",
    "long-recordings": "docs/figures/long_recordings.json",
    "ssm-int8-parts": "docs/figures/ssm_int8_parts.json",
    "ssm": "docs/figures/ssm.json",
    "int8-margins": "docs/figures/int8_margins.json",
}

REGION = re.compile(r"<!-- figures:(?P<name>[a-z0-9-]+) -->\n(?P<body>.*?)<!-- /figures:(?P=name) -->", re.S)
OPEN = re.compile(r"<!-- (/?)figures:([a-z0-9-]+) -->")


class RenderError(Exception):
    """A region or a source that cannot be rendered: unknown name, unclosed marker, missing JSON."""


# --- formatting --------------------------------------------------------------------------------

def _us(v: float) -> str:
    return f"{v:,.1f} us" if v < 100 else f"{v:,.0f} us"


def _x(v: float) -> str:
    return f"{v:.2f}x" if v < 10 else f"{v:.0f}x" if v >= 100 else f"{v:.1f}x"


def _rate(v: float) -> str:
    return f"{v / 1e6:.2f} M" if v >= 1e6 else f"{v:,.0f}"


def _table(header: list, rows: list) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine_line(d: dict, source: str, how: str) -> str:
    """One line: what was run, on which machine, when. The date comes from the JSON only."""
    m = d.get("machine") or d.get("meta", {}).get("machine") or {}
    parts = [m.get("machine", "unknown machine")]
    if m.get("cpus"):
        parts[0] += f" ({m['cpus']} CPUs)"
    if m.get("cpu") or m.get("processor"):
        parts.append(m.get("cpu") or m["processor"])
    for key, label in (("python", "Python"), ("onnxruntime", "onnxruntime"), ("numpy", "numpy"), ("torch", "torch")):
        if m.get(key):
            parts.append(f"{label} {m[key]}")
    if m.get("simd"):
        parts.append(f"native step {m['simd']}")
    if m.get("load_1min") is not None and "load average" not in how:     # unless the line gives its own
        parts.append(f"load average {m['load_1min']:.1f}")
    date = d.get("date") or d.get("measured") or d.get("meta", {}).get("date") or m.get("date")
    when = f"measured {date}" if date else f"the date is not recorded in `{source}`"
    return f"*{how}, on {', '.join(parts)}; {when}.*"


# --- renderers ---------------------------------------------------------------------------------

def render_bench_gru(d: dict, source: str) -> str:
    g = d["gru"]
    backend = g.get("edgeseq_push_backend", "onnxruntime")
    rows = [
        ["onnxruntime floor, Identity, `session.run`", g["ort_floor_session_run"]],
        ["onnxruntime floor, Identity, IO binding", g["ort_floor_iobinding"]],
        ["torch eager `model.step`", g["torch_eager"]],
        ["plain onnxruntime `session.run` loop", g["ort_session_run"]],
        [f"edgeseq `StreamSession.push`, {backend} backend (checks the reading, returns probabilities)",
         g["edgeseq_push"]],
    ]
    table = _table([f"GRU step, hidden {g['hidden']}, batch 1", "median", "p99"],
                   [[name, _us(t["median_us"]), _us(t["p99_us"])] for name, t in rows])
    graph = g["ort_session_run"]["median_us"] - g["ort_floor_session_run"]["median_us"]
    text = (f"`push` ({backend} backend) is {_x(g['ratio_push_to_floor'])} the `session.run` floor and "
            f"{_x(g['speedup_vs_torch_eager'])} faster than torch eager; the plain `session.run` loop costs "
            f"{_us(graph)} above the floor.")
    how = f"`edgeseq bench --repeats {d['repeats']}`, {d.get('threads', 1)} thread"
    return "\n\n".join([machine_line(d, source, how), table, text])


def render_bench_transformer(d: dict, source: str) -> str:
    rows = [[f"{r['history']:,}", _us(r["cached_us"]), _us(r["recompute_us"]), _x(r["speedup"]),
             f"{r['state_bytes_per_stream'] / 1024:,.0f} KB"] for r in d["transformer"]]
    table = _table(["Transformer history (onnxruntime)", "cached step", "recompute", "speedup", "cache per stream"],
                   rows)
    how = f"`edgeseq bench --repeats {d['repeats']}`, {d.get('threads', 1)} thread"
    return "\n\n".join([machine_line(d, source, how), table])


def render_bench_backends(d: dict, source: str) -> str:
    b = d.get("backends") or {}
    how = f"`edgeseq bench --repeats {d['repeats']}`, {d.get('threads', 1)} thread, calls interleaved"
    if not b.get("rows"):
        return "\n\n".join([machine_line(d, source, how), f"The step backends were not timed: {b.get('native', '-')}."])
    names = [n for n in ("native", "onnxruntime") if n in b["backends"]] + \
            [n for n in b["backends"] if n not in ("native", "onnxruntime")]
    models = list(dict.fromkeys(r["model"] for r in b["rows"]))
    top = max(r["streams"] for r in b["rows"])
    bound = b["rows"][0]["gemm_bound_readings_per_s"]
    rows = []
    for name in names:
        for model in models:
            one = next(r for r in b["rows"] if r["model"] == model and r["streams"] == 1)
            many = next(r for r in b["rows"] if r["model"] == model and r["streams"] == top)
            label = "float" if model == "float" else "int8 static" if model == "int8" else model
            rows.append([f"{name}, {label}", f"{one[name]['us_per_call']:.2f}", f"{one['floor_iobinding_us']:.2f} us",
                         _x(one[name]["us_per_call"] / one["floor_iobinding_us"]),
                         _rate(many[name]["readings_per_s"]), f"{many[name]['share_of_gemm_bound']:.0%}"])
    macs = b["rows"][0]["macs_per_reading"]
    table = _table([f"GRU hidden {d['gru']['hidden']}, `StreamSession.push`", "us per call, 1 stream", "IO-binding floor, same rounds",
                    "push / floor", f"readings/s at {top:,} streams", f"of the GEMM bound ({_rate(bound)}/s)"], rows)
    notes = [f"The GEMM bound is this core's single-thread float32 GEMM rate ({b['gemm_macs_per_s'] / 1e9:.1f} GMAC/s) "
             f"over the step's {macs:,} multiply-adds a reading."]
    ones = {r["model"]: r for r in b["rows"] if r["streams"] == 1}
    if "onnxruntime" in names and all("python_overhead_us" in r["onnxruntime"] for r in ones.values()):
        parts = [f"{ones[m]['onnxruntime']['python_overhead_us']:.2f} us ({m})" for m in models]
        notes.append("The onnxruntime backend's push is its IO-binding call plus " + ", ".join(parts) + " of Python.")
    if "native" in names and all("c_step_us" in r["native"] for r in ones.values()):
        parts = [f"{ones[m]['native']['c_step_us']:.2f} us ({m})" for m in models]
        notes.append(f"The C step alone, timed in the same rounds, takes {', '.join(parts)} at batch 1 "
                     f"(native SIMD: {b.get('simd') or '-'}; int8 products: {b.get('int8_kernel') or '-'}).")
    return "\n\n".join([machine_line(d, source, how), table, " ".join(notes)])


def _many(nat: dict) -> str:
    text = f"{_rate(nat['readings_per_s'])} ({nat['share_of_gemm_bound']:.0%}"
    if "share_of_gemm_bound_after_others" in nat:
        text += f"; {nat['share_of_gemm_bound_after_others']:.0%} after other work"
    return text + ")"


def render_bench_archs(d: dict, source: str) -> str:
    a = d.get("archs") or {}
    how = (f"`edgeseq bench --repeats {d['repeats']}`, {d.get('threads', 1)} thread; at one stream the float and "
           "int8 native pushes, their C steps alone and the floor interleaved in one loop, the onnxruntime push in "
           "rounds of its own; at many streams every model's pushes and a 512 x 512 x 512 GEMM in one loop, the share "
           "of the GEMM bound from the fastest push and the fastest GEMM of the same "
           f"{max(20, d['repeats'] // 5)} rounds, the push timed right after a push (a gateway's loop) and right "
           "after the model's onnxruntime push (after other work)")
    if not a.get("ssm"):
        return "\n\n".join([machine_line(d, source, how), f"Not timed: {a.get('native', 'no native step')}."])
    rows = []
    for variant in dict.fromkeys(r["variant"] for r in a["ssm"]):
        for model in dict.fromkeys(r["model"] for r in a["ssm"]):
            one = next(r for r in a["ssm"] if (r["variant"], r["model"], r["streams"]) == (variant, model, 1))
            many = max((r for r in a["ssm"] if (r["variant"], r["model"]) == (variant, model)),
                       key=lambda r: r["streams"])
            rows.append([f"{variant}, {'int8 static' if model == 'int8' else model}",
                         f"{one['native']['us_per_call']:.2f} us", f"{one['native']['c_step_us']:.2f} us",
                         f"{one['floor_iobinding_us']:.2f} us", _x(one["native"]["over_floor"]),
                         _us(one["onnxruntime"]["us_per_call"]),
                         _x(one["native"]["int8_over_float"]) if "int8_over_float" in one["native"] else "",
                         _many(many["native"])])
    top = max(r["streams"] for r in a["ssm"])
    ssm = _table(["SSM (d_model 32, d_state 32, 2 layers)", "native push, 1 stream", "C step alone", "floor, same rounds",
                  "push / floor", "onnxruntime push", "int8 / float push, same rounds",
                  f"native readings/s at {top:,} streams (of the GEMM bound)"], rows)
    kernels = sorted({r["kernel"] for r in a["ssm"] if r.get("kernel") and r["model"] == "int8"})
    if kernels:
        ssm += f"\n\nThe native SSM step's int8 kernel here: {'; '.join(f'`{k}`' for k in kernels)}."
    w = a["transformer"]["window_full"]
    hist = a["transformer"]["history"]
    tr = _table(["Transformer (d 32, 4 heads, 2 layers), 1 stream", "native push", "onnxruntime push", "floor, same rounds",
                 "native / floor"],
                [[f"window {w['window']}, full", f"{w['native_us']:.2f} us", _us(w["onnxruntime_us"]),
                  f"{w['floor_iobinding_us']:.2f} us", _x(w["over_floor"])]]
                + [[f"no window, {h['history']:,} readings cached ({h['state_bytes'] // 1024} KiB)",
                    f"{h['native_us']:.2f} us", "", "", ""] for h in hist])
    return "\n\n".join([machine_line(d, source, how), ssm, tr])


CORES = {"cortex-m4": "M4", "cortex-m0plus": "M0+"}


def _ms(us: float) -> str:
    return _us(us) if us < 1000 else f"{us / 1000:.2f} ms"


def _pair(a: str, b: str) -> str:
    return a if a == b else f"{a} / {b}"


def _name(r: dict) -> str:
    return r.get("label") or f"{r['arch'].upper()} h{r.get('hidden', '?')}"


def _firmware_how(d: dict) -> str:
    exact = min(r.get("bit_exact_readings", 0) for r in d["measured"])
    return (f"`{d['command']}`, {d['compiler']}, each build bit-exact with the simulator over {exact:,} readings"
            + (" (a Transformer counted at a full window)" if any(r["arch"] == "transformer" for r in d["measured"])
               else "") + f"; measured {d['date']}")


def _untrained_note(d: dict) -> list:
    names = sorted({_name(r) for r in d["measured"] if r.get("untrained")}, key=lambda n: len(n))
    if not names:
        return []
    return [f"Untrained: {', '.join(names)} ({d.get('untrained') or 'untrained checkpoints'}); a step's costs do not "
            "depend on its weights. The other models are the trained seed-0 models of `make demo`."]


def render_firmware(d: dict, source: str) -> str:
    rows = [[_name(r) + (" (untrained)" if r.get("untrained") else ""), f"{CORES.get(r['core'], r['core'])} {r['opt']}",
             f"{r['instructions_per_step']:,.0f} ({r['instructions_per_mac']:.2f})", f"{r['helper_instructions']:,.0f}",
             f"{r['stack_bytes']:,}", f"{r['cycles_per_step']:,.0f}" if r.get("cycles_per_step") else "-",
             f"{r['sections']['text']:,}", f"{r['sections']['rodata']:,}"] for r in d["measured"]]
    measured = _table(["model", "core, opt", "instructions / reading (per MAC)", "64-bit helper instr.", "stack B",
                       "modelled cycles", ".text B", ".rodata B"], rows)
    checks = _table(["model", "part", "flash", "RAM: state (KV ring)", "RAM: rest", "RAM in all", "cycles / reading",
                     "time / reading"],
                    [[_name(c) + (" (untrained)" if c.get("untrained") else ""), c["target"],
                      f"{c['flash_bytes']:,} B", f"{c.get('state_bytes', 0):,} B", f"{c.get('rest_bytes', 0):,} B",
                      f"{c['ram_bytes']:,} B", f"{c['cycles']:,.0f}", _ms(c["us_per_reading"])] for c in d["check"]])
    text = ("What `firmware check` says for the same models (cycles fitted to the measured steps; RAM's state is "
            "the recurrent or SSM state, for a Transformer its int16 KV ring of `window` rows and the ring's "
            "position; the rest is scratch, inputs/outputs and stack):")
    return "\n\n".join([f"*{_firmware_how(d)}.*", measured, text, checks, *_untrained_note(d)])


def render_firmware_summary(d: dict, source: str) -> str:
    """The README's table: one row per model, both parts side by side."""
    by = {}
    for c in d["check"]:
        by.setdefault(c["model"], {})[c["target"]] = c
    rows = []
    for parts in by.values():
        n, r = parts["nrf52840"], parts["rp2040"]
        rows.append([_name(n) + (" (untrained)" if n.get("untrained") else ""),
                     _pair(f"{n['flash_bytes'] / 1000:.1f}", f"{r['flash_bytes'] / 1000:.1f}") + " KB",
                     f"{n['state_bytes']:,} B", _pair(f"{n['rest_bytes']:,}", f"{r['rest_bytes']:,}") + " B",
                     f"{n['cycles']:,.0f} ({_ms(n['us_per_reading'])})", f"{r['cycles']:,.0f} ({_ms(r['us_per_reading'])})"])
    table = _table(["int8 model", "flash (nRF / RP)", "RAM: state or KV ring", "RAM: rest (nRF / RP)",
                    "nRF52840 (M4F 64 MHz): cycles (time) / reading", "RP2040 (M0+ 133 MHz): cycles (time) / reading"],
                   rows)
    return "\n\n".join([f"*{_firmware_how(d)}; cycles fitted to the steps measured on emulated cores.*", table])


# --- the SSM and Transformer firmware checks (scripts/firmware_ssm_check.py, firmware_xf_check.py) ----------

POSITIONS = {"alibi": "ALiBi", "sin": "sinusoidal positions", "none": "no positions"}


def _fw_inputs(d: dict) -> dict:
    return {i["model"]: i for i in d.get("inputs", [])}


def _fw_label(i: dict) -> str:
    """'SSM fixed', 'SSM selective', 'Transformer window 50 (ALiBi)' from an input's configuration."""
    c = i.get("config") or {}
    if i.get("arch") == "ssm":
        return "SSM selective" if c.get("selective") else "SSM fixed"
    if i.get("arch") == "transformer":
        return f"Transformer window {c.get('window')} ({POSITIONS.get(c.get('positions'), c.get('positions'))})"
    return ARCH_NAMES.get(i.get("arch"), i.get("arch", "?"))


def _fw_sources(d: dict) -> str:
    """Where each model came from: its file and SHA-256, or how the script trained it."""
    lines = []
    for i in d.get("inputs", []):
        if i.get("trained"):                  # 'train(...), how': the call as code
            call, rest = re.match(r"(.*\))(.*)", i["trained"], re.S).groups()
            where = f"`{call}`{rest}"
        else:
            where = f"`{i['path']}`" + (f" (float twin `{i['float']}`)" if i.get("float") else "")
        lines.append(f"- {_fw_label(i)}: {where}; {i['sha256'][:12]}")
    return "\n".join(["Models (and the first digits of each int8 file's SHA-256):", "", *lines])


def _fw_core(r: dict) -> str:
    core = CORES.get(r["core"], r["core"])
    return f"{core} {r['opt']}" + ((" SMLAD" if r["dsp_path"] else " portable") if r["core"] == "cortex-m4" else "")


def _fw_fitted(r: dict) -> bool:
    """The builds `check`'s fit measured: M4 -O2 on the SMLAD path, M0+ -O2."""
    return r["opt"] == "-O2" and (r["dsp_path"] or r["core"] == "cortex-m0plus")


def _fw_flash(r: dict) -> int:
    return r["sections"]["text"] + r["sections"]["rodata"] + r["tables_bytes"]


def _fw_helpers(d: dict) -> str:
    used = [f"{_fw_core(r)} {r['helper_instructions']:,.0f}" for r in d["measured"] if r["helper_instructions"]]
    return ("no 64-bit helper instructions in any build" if not used
            else "64-bit helper instructions a reading: " + ", ".join(used))


def _fw_pct(a: float, b: float) -> str:
    return f"{(a - b) / b:+.1%}"


def _fw_accuracy(d: dict, source: str) -> str:
    inputs = _fw_inputs(d)
    acc = d["accuracy"]
    rows = [[_fw_label(inputs.get(a["model"], {})),
             " / ".join(f"{a['per_sequence'][k]:.3f}" for k in ("float", "onnxruntime_int8", "integer_only")),
             " / ".join(f"{a['never_reset'][k]:.4f}" for k in ("float", "onnxruntime_int8", "integer_only")),
             f"{a['vs_float']['mean_rel']:.2%}"] for a in acc]
    table = _table(["model", "per sequence float / int8 ORT / integer-only",
                    "never reset float / int8 ORT / integer-only", "logits vs float (mean, % of range)"], rows)
    a = acc[0]
    how = (f"`{d['command']}`: `firmware simulate --float` per model (per sequence: the {a['test_sequences']} test "
           f"sequences of {a['data']}, each from zero state; never reset: the test split joined in "
           f"{a['never_reset_orders']} seeded orders, scored per reading past the grace; logits against float over "
           f"one stream of {a['stream_readings']:,} readings)")
    return "\n\n".join([machine_line(d, source, how), table, _fw_sources(d)])


def render_firmware_ssm_accuracy(d: dict, source: str) -> str:
    """The SSM's integer-only accuracy against float and int8 onnxruntime, fixed and selective decay."""
    return _fw_accuracy(d, source)


def render_firmware_xf_accuracy(d: dict, source: str) -> str:
    """The windowed Transformer's integer-only accuracy against float and int8 onnxruntime, per window."""
    return _fw_accuracy(d, source)


def _fw_how(d: dict) -> str:
    exact = min(r["bit_exact_readings"] for r in d["measured"])
    return (f"`{d['command']}`, {d['compiler']}; every build bit-exact with the simulator over {exact:,} "
            "never-reset readings; instructions, sections and stack measured, cycles modelled from the executed mix")


def render_firmware_ssm_cores(d: dict, source: str) -> str:
    """The integer SSM step per build on the emulated cores: instructions, stack, cycles, sections."""
    inputs = _fw_inputs(d)
    models = list(dict.fromkeys(r["model"] for r in d["measured"]))
    first = {m: next(r for r in d["measured"] if r["model"] == m) for m in models}
    short = {m: _fw_label(inputs.get(m, {"arch": "ssm", "config": {"selective": first[m]["selective"]}}))
             .removeprefix("SSM ") for m in models}
    sizes = sorted({(r["hidden"], r["d_state"], r["layers"]) for r in first.values()})
    size = "; ".join(f"d_model {h}, d_state {n}, {n_l} layers" for h, n, n_l in sizes)
    def each(key: str, unit: str) -> str:
        if len({first[m][key] for m in models}) == 1:
            return f"{first[models[0]][key]:,}{unit}"
        return ", ".join(f"{first[m][key]:,}{unit} ({short[m]})" for m in models)
    note = (f"{size}; MACs a reading {each('macs', '')}; {_fw_helpers(d)}; scratch {each('scratch_bytes', ' B')}; "
            f"state {each('state_bytes', ' B')}.")
    rows = [[short[r["model"]], _fw_core(r), f"{r['instructions_per_step']:,.0f} ({r['instructions_per_mac']:.2f})",
             f"{r['stack_bytes']:,}", f"{r['cycles_per_step']:,.0f}", f"{r['sections']['text']:,}",
             f"{r['sections']['rodata']:,}", f"{r['tables_bytes']:,}"] for r in d["measured"]]
    table = _table(["model", "core, opt, path", "instructions / reading (per MAC)", "stack B", "modelled cycles",
                    ".text B", ".rodata B", "tables B"], rows)
    return "\n\n".join([machine_line(d, source, _fw_how(d)), note, table])


def render_firmware_ssm_boards(d: dict, source: str) -> str:
    """What `firmware check` plans for each SSM on the nRF52840 and the RP2040, beside the measured builds."""
    inputs = _fw_inputs(d)
    fitted = {(r["model"], r["core"]): r for r in d["measured"] if _fw_fitted(r)}
    label = {c["model"]: _fw_label(inputs.get(c["model"], {"arch": "ssm", "config": {"selective": c["selective"]}}))
             for c in d["check"]}
    rows = [[label[c["model"]], c["target"], f"{c['flash']['total']:,} B", f"{c['ram']['total']:,} B",
             f"{c['cycles']:,.0f}", _ms(c["us_per_reading"])] for c in d["check"]]
    table = _table(["model", "part", "flash", "RAM", "cycles / reading", "time / reading"], rows)
    core_of = {"nrf52840": "cortex-m4", "rp2040": "cortex-m0plus"}
    notes = []
    for m in dict.fromkeys(c["model"] for c in d["check"]):
        by = {c["target"]: c for c in d["check"] if c["model"] == m}
        parts = []
        m4 = fitted.get((m, "cortex-m4"))
        if m4 and "nrf52840" in by:
            parts.append(f"flash {by['nrf52840']['flash']['total']:,} B planned, {_fw_flash(m4):,} B measured on the "
                         "M4 (.text + .rodata + the tables the step links)")
        for t, c in by.items():
            r = fitted.get((m, core_of.get(t)))
            if r:
                parts.append(f"{c['cycles']:,.0f} cycles planned on the {t}, {r['cycles_per_step']:,.0f} modelled on "
                             f"the {_fw_core(r)} build ({_fw_pct(c['cycles'], r['cycles_per_step'])})")
        notes.append(f"{label[m]}: " + "; ".join(parts))
    how = f"`{d['command']}`: `firmware check` on each part (cycles fitted to steps measured on the emulated cores)"
    return "\n\n".join([machine_line(d, source, how), table,
                        "Against the measured -O2 builds: " + ". ".join(notes) + "."])


def render_firmware_xf_cores(d: dict, source: str) -> str:
    """The integer windowed Transformer step per build on the emulated cores, with what `check` plans."""
    ms = d["measured"]
    windows = list(dict.fromkeys(r["window"] for r in ms))
    first = {w: next(r for r in ms if r["window"] == w) for w in windows}
    sizes = sorted({(r["hidden"], r["heads"], r["d_ff"], r["layers"]) for r in ms})
    size = "; ".join(f"d_model {h}, {n} heads, d_ff {f}, {n_l} layers" for h, n, f, n_l in sizes)
    exact = min(r["bit_exact_readings"] for r in ms)
    note = (f"{size}; the ring wraps {' and '.join(f'{exact // w:,}' for w in windows)} times over the {exact:,} "
            "readings (window " + " and ".join(str(w) for w in windows) + "); counted at a full window, attention as "
            "2 x window x d_model MACs per layer ("
            + ", ".join(f"{first[w]['macs']:,} MACs a reading at window {w}" for w in windows) + f"); {_fw_helpers(d)}; "
            "scratch and state (the ring) " + ", ".join(f"{first[w]['scratch_bytes']:,} B and {first[w]['state_bytes']:,} B "
                                                     f"at window {w}" for w in windows) + ".")
    rows = [[r["window"], _fw_core(r), f"{r['instructions_per_step']:,.0f} ({r['instructions_per_mac']:.2f})",
             f"{r['stack_bytes']:,}", f"{r['cycles_per_step']:,.0f}",
             f"{r['check']['cycles']:,.0f}" if _fw_fitted(r) else "", f"{r['sections']['text']:,}",
             f"{r['sections']['rodata']:,}", f"{r['tables_bytes']:,}"] for r in ms]
    table = _table(["window", "core, opt, path", "instructions / reading (per MAC)", "stack B", "modelled cycles",
                    "`check` cycles", ".text B", ".rodata B", "tables B"], rows)
    fit = [r for r in ms if _fw_fitted(r)]
    worst = max(fit, key=lambda r: abs(r["check"]["cycles"] / r["cycles_per_step"] - 1))
    parts = [f"cycles within {abs(worst['check']['cycles'] / worst['cycles_per_step'] - 1):.1%} of the modelled "
             f"ones on the fitted builds (M4 -O2 SMLAD for the nRF52840, M0+ -O2 for the RP2040; farthest: window "
             f"{worst['window']} on the {_fw_core(worst)})"]
    for w in windows:
        m4 = next((r for r in fit if r["window"] == w and r["core"] == "cortex-m4"), None)
        if m4 is None:
            continue
        c = m4["check"]
        ram = c.get("ram_parts") or {}
        measured_ram = m4["scratch_bytes"] + m4["state_bytes"] + ram.get("io", 0) + m4["stack_bytes"]
        parts.append(f"window {w} on the {c.get('target', 'nrf52840')}: flash {c['flash']:,} B planned, "
                     f"{_fw_flash(m4):,} B measured (.text + .rodata + tables, {_fw_pct(c['flash'], _fw_flash(m4))}); "
                     f"RAM {c['ram']:,} B planned, {measured_ram:,} B measured (scratch + state + stack, with the "
                     f"planned {ram.get('io', 0):,} B of inputs and outputs; {c['ram'] - measured_ram:+,} B)")
    return "\n\n".join([machine_line(d, source, _fw_how(d)), note, table, "`check` against these builds: "
                        + "; ".join(parts) + "."])


def _model_name(arch: str, c: dict) -> str:
    """'GRU (hidden 64)', 'Transformer (d 32, 2 layers, 4 heads, window 50, ALiBi)', ... from a config."""
    if arch in ("rnn", "gru", "lstm"):
        return f"{arch.upper()} (hidden {c['hidden']}" + (f", {c['layers']} layers)" if c.get("layers", 1) > 1 else ")")
    if arch == "transformer":
        pos = {"alibi": "ALiBi", "sin": "sinusoidal positions", "none": "no positions"}.get(c.get("positions"),
                                                                                           c.get("positions"))
        return (f"Transformer (d {c['d_model']}, {c['layers']} layers, {c['heads']} heads, window {c['window']}, "
                f"{pos})")
    return f"SSM (d {c['d_model']}, {c['d_state']} states, {c['layers']} layers)"


def render_demo(d: dict, source: str) -> str:
    """The README's table of the five streaming models, from `examples/demo.py --json`."""
    rows = []
    for r in d["rows"]:
        c = r["config"]
        state = (f"{r['state_bytes_4096'] // c['window']:,} B per reading, up to {c['window']} "
                 f"({r['state_bytes_4096']:,} B)" if r["arch"] == "transformer" else f"{r['state_bytes_100']:,} B")
        rows.append([_model_name(r["arch"], c), f"{r['per_sequence']:.3f} / {r['continuous']:.3f}",
                     f"{r['int8_continuous']:.3f}", f"{r['train_seconds']:.1f} s",
                     f"{r['bytes'] / 1000:.0f} KB ({r['int8_bytes'] / 1000:.0f} KB)", state,
                     f"{r['median_push_us']:.1f} us ({r['backend']})"])
    table = _table(["model", "test accuracy (per sequence / continuous)", "int8 continuous", "train time",
                    "file (int8)", "state per stream", "push (step backend)"], rows)
    n = d.get("torch_threads", 1)
    how = f"`{d['command']}` (what `make demo` runs, with --json), {n} torch thread{'s' if n != 1 else ''}"
    return "\n\n".join([machine_line(d, source, how), table])


ARCH_NAMES = {"rnn": "RNN", "gru": "GRU", "lstm": "LSTM", "ssm": "SSM", "transformer": "Transformer"}


def _state_bytes(n: int) -> str:
    return f"{n:,} B" if n < 1_000_000 else f"{n / 1024 ** 2:,.1f} MiB"


def render_soak(d: dict, source: str) -> str:
    """`examples/soak.py --json`: one model, many readings unpaced; latency percentiles and RSS."""
    lat = d["latency_us"]
    rss = d["rss_kb"]
    text = (f"{d['readings']:,} readings through `{Path(d['model']).name}` unpaced in {d['seconds']:.1f} s "
            f"({d['rate_hz']:,} readings/s), the state {d['state_bytes']:,} B.\n\n"
            f"- Latency " + ", ".join(f"{k} {_us(v)}" for k, v in lat.items()) + ".\n"
            f"- RSS {rss[0][1] / 1024:.1f} MiB at the start, {rss[1][1] / 1024:.1f} MiB after the first "
            f"{rss[1][0]:,} readings and {rss[-1][1] / 1024:.1f} MiB at the end (growth after the first tenth: "
            f"{d['rss_growth_kb']:,} KiB); sampled every {rss[2][0] - rss[1][0]:,} readings: "
            + ", ".join(f"{v / 1024:.1f}" for _, v in rss[1:]) + " MiB.")
    how = f"`{d['command']} > docs/figures/soak.json`"
    return "\n\n".join([machine_line(d, source, how), text])


def render_pi_demo(d: dict, source: str) -> str:
    """The Pi page's table: `examples/pi_sensor_demo.py --json`'s summary per int8 model, paced and
    unpaced (`scripts/measure_pi_demo.py`); then the paced medians against the unpaced ones and the
    time between readings."""
    rows, paced, free = [], {}, {}
    for r in d["rows"]:
        s, arch = r["summary"], r["arch"]
        name = ARCH_NAMES.get(arch, arch) + (f" (window {r['max_history']})" if r.get("max_history") else "")
        if s["paced"]:
            paced[arch] = s
            rate = f"{s['target_rate_hz']:g} Hz: {s['this_run']:,} readings, {s['rate_hz']:,.1f}/s achieved"
            late = f"{s['late']:,} / {s['dropped']:,}"
        else:
            free[arch] = s
            rate = f"unpaced: {s['this_run']:,} readings, {s['rate_hz']:,.0f}/s"
            late = "- (unpaced)"
        rows.append([name, r["backend"] or "-", rate, f"{_us(s['median_us'])} / {_us(s['p99_us'])}", late,
                     f"{s['rss_kb_end'] / 1024:.0f} MiB", _state_bytes(s["state_bytes"])])
    table = _table(["int8 model", "backend", "rate", "latency median / p99", "late / dropped", "RSS", "state held"],
                   rows)
    notes = []
    both = [a for a in paced if a in free]
    if both:
        higher = all(paced[a]["median_us"] > free[a]["median_us"] for a in both)
        ratios = ", ".join(f"{ARCH_NAMES.get(a, a)} {_x(paced[a]['median_us'] / free[a]['median_us'])}" for a in both)
        notes.append(f"Paced, the median latency is {'above' if higher else 'not always above'} the unpaced one "
                     f"({ratios} the unpaced median)" + (": the process sleeps between readings and wakes with "
                                                         "cold caches." if higher else "."))
    if paced:
        shares = ", ".join(f"{ARCH_NAMES.get(a, a)} {s['median_us'] / (1e6 / s['target_rate_hz']):.2%}"
                           for a, s in paced.items())
        periods = sorted({1e3 / s["target_rate_hz"] for s in paced.values()})
        notes.append(f"The paced median is this share of the {', '.join(f'{p:g}' for p in periods)} ms between "
                     f"readings: {shares}.")
    how = (f"`{d['command']}`: the summary of `examples/pi_sensor_demo.py --source replay:basicmotions --json` "
           "(each command in the JSON), one thread; latency over the last 1,000 readings pushed; the unpaced rate "
           "includes printing each reading's JSON line with its running median and p99; load average "
           f"{d['load_before'][0]:.1f} at the start, {d['load_after'][0]:.1f} at the end")
    return "\n\n".join([machine_line(d, source, how), table, " ".join(notes)])


def _secs(v: float) -> str:
    return f"{v:.1f}" if v < 10 else f"{v:,.0f}"


def render_report_quick_phases(d: dict, source: str) -> str:
    """`edgeseq report --quick`'s wall and CPU seconds per phase, from its report.json's meta
    (`scripts/measure_report_quick.py`)."""
    m = d["meta"]
    wall, cpu = m["phase_seconds"], m["phase_cpu_seconds"]
    mcu = (f"microcontroller panel: the GRU and SSM int8 and the Transformer exported int8 at windows "
           f"{' and '.join(map(str, d['mcu_windows']))}, built and run on the emulated core" if d.get("mcu_available")
           else f"microcontroller panel (not measured: {d.get('mcu_reason') or 'no toolchain'})")
    names = {"models": f"models: train {len(d['epochs'])} (the quick epochs above), export each float and int8",
             "events": "events: each int8 model's decision layer calibrated and scored",
             "memory": "memory", "latency": "latency", "throughput": "throughput",
             "rss": f"RSS, {d['rss_processes']} processes", "mcu": mcu}
    rows = [[names.get(k, k), _secs(v), _secs(cpu[k]) if k in cpu else "-"] for k, v in wall.items()]
    total_wall, total_cpu = sum(wall.values()), sum(cpu.values())
    rows.append(["the phases together", _secs(total_wall), _secs(total_cpu)])
    rows.append(["the whole command (imports, plots and files too)", _secs(d["process_wall_s"]),
                 _secs(d["process_cpu_s"])])
    table = _table(["part", "wall s", "CPU s"], rows)
    measuring = [k for k in ("memory", "latency", "throughput", "rss") if k in cpu]
    shown = ", ".join(k if k != "rss" else "RSS" for k in measuring)
    shares = [f"the models phase {cpu['models'] / total_cpu:.0%}" if "models" in cpu else None,
              f"events {cpu['events'] / total_cpu:.0%}" if "events" in cpu else None,
              f"the microcontroller panel {cpu['mcu'] / total_cpu:.0%}" if "mcu" in cpu else None,
              f"the measuring phases ({shown}) {sum(cpu[k] for k in measuring) / total_cpu:.0%}" if measuring else None]
    text = "Of the phases' CPU time: " + ", ".join(s for s in shares if s) + "." if total_cpu else ""
    how = (f"`{d['report_command']}` on the embedded data, run once by `{d['command']}`; CPU: the report's threads "
           f"and its child processes; load average {d['load_before'][0]:.1f} at the start, "
           f"{d['load_after'][0]:.1f} at the end")
    return "\n\n".join([machine_line(d, source, how), table] + ([text] if text else []))


def _span(values, fmt: str) -> str:
    """'lo-hi' of values in a format, one figure where both read the same."""
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def _compiled_name(r: dict) -> str:
    return r.get("label") or r["gcc"]["arch"].upper()


def render_compilers(d: dict, source: str) -> str:
    """gcc against clang on each emulated core, one row per model; then the ranges the prose cites."""
    rows, cores = d["rows"], list(dict.fromkeys(r["core"] for r in d["rows"]))
    by = {}
    for r in rows:
        by.setdefault(r["model"], {})[r["core"]] = r
    header, body = ["model"], []
    for core in cores:
        c = CORES.get(core, core)
        header += [f"{c}: instr./MAC gcc / clang", f"{c} cycles clang / gcc", f"{c} stack gcc / clang",
                   f"{c} .text clang / gcc"]
    for per_core in by.values():
        line = [_compiled_name(next(iter(per_core.values())))]
        for core in cores:
            r = per_core.get(core)
            if r is None:
                line += ["-"] * 4
                continue
            g, c = r["gcc"], r["clang"]
            line += [f"{g['instructions_per_mac']:.2f} / {c['instructions_per_mac']:.2f}",
                     _x(c["cycles_per_step"] / g["cycles_per_step"]), f"{g['stack_bytes']:,} / {c['stack_bytes']:,} B",
                     _x(c["text_bytes"] / g["text_bytes"])]
        body.append(line)
    notes = []
    for core in cores:
        on = [r for r in rows if r["core"] == core]
        span = lambda key: _span([r["clang"][key] / r["gcc"][key] for r in on], ".2f")  # noqa: E731
        deepest = max(on, key=lambda r: r["clang"]["stack_bytes"])
        notes.append(f"On the {CORES.get(core, core)} clang runs {span('instructions_per_mac')}x gcc's instructions "
                     f"per MAC in {span('cycles_per_step')}x its cycles, with {span('text_bytes')}x its .text; clang's "
                     f"deepest stack is {deepest['clang']['stack_bytes']:,} B ({_compiled_name(deepest)}), gcc's "
                     f"{max(r['gcc']['stack_bytes'] for r in on):,} B.")
    compilers = list(dict.fromkeys(r[cc]["compiler"] for r in rows for cc in ("clang", "gcc")))
    how = (f"`{d.get('command', 'python scripts/firmware_compilers.py')}`: "
           f"{' against '.join(compilers)}, {', '.join(dict.fromkeys(r['opt'] for r in rows))}, Unicorn; each build "
           f"bit-exact with the simulator over {d['readings']:,} readings (a Transformer counted at a full window), "
           f"cycles modelled from the executed mix; measured {d['date']}")
    return "\n\n".join([f"*{how}.*", _table(header, body), " ".join(notes)])


def render_gateway(d: dict, source: str) -> str:
    rows = []
    for r in d["phases"]:
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in r["cpu_share"].items())
        k = r.get("readings_per_message", 1)
        rows.append([f"{r['devices']:,} x {r['rate_hz']:g} Hz" + (f", {k} readings a message" if k > 1 else ""),
                     f"{r['offered_per_s']:,}", f"{r['predictions_per_s']:,}",
                     f"{r['p50_ms']:,.1f} ms" if r["p50_ms"] is not None else "-",
                     f"{r['p99_ms']:,.1f} ms" if r["p99_ms"] is not None else "-",
                     f"{r['sampled_received']:,} of {r['sampled_expected']:,}",
                     f"{r['partitions_lost']}" if "partitions_lost" in r else "-", cpu])
    table = _table(["devices x rate", "offered readings/s", "predictions/s", "p50 publish to prediction", "p99",
                    "sampled readings predicted", "leases lost", "CPU (cores)"], rows)
    m = d["memory"]
    text = [f"Memory: {m['state_bytes_per_device']:,} B of model state per device; the gateways' RSS grew by "
            f"{m['rss_bytes_per_device']:,} B per device over the run (the state, the device records and the "
            "batch sessions made on first use)."]
    f = d.get("failover")
    if f:
        stored = (f" EDGESEQ_OUT stored {f['sampled_stored']:,} of the sampled devices' {f['sampled_messages']:,} "
                  "prediction messages." if "sampled_stored" in f else "")
        text.append(f"Failover ({d['gateways']} gateways, {f['devices']:,} devices at {f['rate_hz']:g} Hz, "
                    f"{f.get('killed', 'a gateway')} SIGKILLed): the longest gap in a sampled device's predictions after the kill was "
                    f"{f['failover_s']:.2f} s ({f['devices_interrupted']} of {f['sampled_devices']} sampled devices "
                    "went more than 1 s without one); " +
                    ("every sampled prediction arrived" if f["sampled_received"] == f["sampled_expected"]
                     else "the benchmark's subscriber saw some" if f.get("sampled_stored") == f["sampled_expected"]
                     else "NOT every sampled prediction arrived") +
                    f" ({f['sampled_received']:,} of {f['sampled_expected']:,})." + stored)
        if f.get("sampled_stored") == f["sampled_expected"] and f["sampled_received"] < f["sampled_expected"]:
            text[-1] += (f" So every sampled reading was predicted; the {f['sampled_expected'] - f['sampled_received']:,} "
                         "the benchmark's subscriber did not see were lost on their way to it (a plain NATS "
                         "subscription, delivered at most once, through a node's death).")
        if f.get("unpredicted_sent_s"):
            lo, hi = f["unpredicted_sent_s"]
            text[-1] += (f" The sampled readings whose prediction the subscriber never saw were all published from "
                         f"{lo:+.2f} s to {hi:+.2f} s after the kill.")
        if "leases_lapsed" in f:
            text[-1] += (f" Leases that went unrenewed past their lease time (the lease bucket electing its leader): "
                         f"{f['leases_lapsed']}, renewed again with the state in memory kept: {f['leases_kept']}, "
                         f"lost: {f['partitions_lost']}.")
        if f.get("acked"):
            a = f["acked"]
            text[-1] += (f" The devices published with JetStream's acknowledgement: {a['resent']:,} readings sent "
                         f"again (no acknowledgement within {a.get('ack_wait_s', 2):g} s, or an error such as no "
                         f"stream leader), {a['unacknowledged']:,} never acknowledged.")
    runs = d.get("failover_runs")
    if runs:
        gaps = [r["failover_s"] for r in runs]
        once = sum(r["sampled_stored"] == r["sampled_messages"] and not r["duplicates"] for r in runs)
        text.append(f"Over the {len(runs)} runs of the command (each on a fresh broker and gateways; the figures "
                    f"above are the last run's), the longest gaps were {', '.join(f'{g:.2f}' for g in gaps)} s: "
                    f"under 10 s in {sum(g < 10 for g in gaps)} of {len(runs)}, median {statistics.median(gaps):.2f} s, "
                    f"longest {max(gaps):.2f} s. EDGESEQ_OUT stored every sampled prediction message exactly once "
                    f"in {once} of {len(runs)} runs; leases lost: {sum(r['partitions_lost'] or 0 for r in runs)}.")
    how = (f"`{d['command']}`: {d['gateways']} gateway process(es), {d['partitions']} partitions, model "
           f"{d['model']}, {d.get('brokers', 'one nats-server')}, gateways and devices on one {d['cores']}-core machine ({d['cpu']}); "
           f"measured {d['date']}")
    return "\n\n".join([f"*{how}.*", table, *text])


def _latency_at(lat: dict, name: str, step: int) -> dict:
    for row in lat["series"][name]:
        if row["from"] <= step <= row["to"]:
            return row
    return lat["series"][name][-1]


def render_report(d: dict, source: str) -> str:
    lat, th, rss = d["latency"], d["throughput"], d["rss"]
    H = lat["history"]
    rows = []
    for name in lat["series"]:
        a, b = _latency_at(lat, name, 16), _latency_at(lat, name, H)
        t = th.get(name, [])
        big = f"{t[-1]['readings_per_s']:,.0f} ({t[-1]['vs_single_stream_calls']:.1f}x)" if t else "-"
        r = rss.get(name)
        grow = f"{r['growth_kb_after_first_5pct'] / 1024:+.1f} MiB over {r['readings']:,}" if r else "-"
        rows.append([name, f"{a['median_us']:.1f} / {b['median_us']:.1f}", big, grow])
    top = max((t[-1]["streams"] for t in th.values() if t), default=0)
    table = _table(["model", f"us per reading, median, step ~16 / ~{H:,}",
                    f"readings/s at {top:,} streams (x vs {top:,} single-stream calls)", "RSS growth over readings"],
                   rows)
    ref = lat.get("reference", {})
    notes = []
    rec = {p["step"]: p["median_us"] for p in lat.get("recompute", [])}
    if 16 in rec and H in rec:
        notes.append(f"Recomputing the Transformer's history without a cache: {_us(rec[16])} at step 16, "
                     f"{_us(rec[H])} at step {H:,}.")
    if "ort_floor_session_run" in ref and "gru_torch_eager" in ref:
        notes.append(f"onnxruntime per-call floor {_us(ref['ort_floor_session_run']['median_us'])}; "
                     f"GRU step in torch eager {_us(ref['gru_torch_eager']['median_us'])}.")
    how = "`edgeseq report`" + (" --quick" if d.get("meta", {}).get("quick") else "") + ", one thread per session"
    return "\n\n".join([machine_line(d, source, how), table] + ([" ".join(notes)] if notes else []))


def render_ucr(d: dict, source: str) -> str:
    """Per-sequence / never-reset test accuracy of each architecture's default settings on public
    sets, the best per sequence against published 1-NN DTW and ROCKET on the same split."""
    rows, pub, kinds = d["rows"], d.get("published", {}), d.get("kinds", {})
    here = (d.get("baseline") or {}).get("rows", {})       # 1-NN DTW as `edgeseq train` scores it
    order = ["rnn", "gru", "lstm", "ssm", "transformer"]
    archs = sorted({r["arch"] for r in rows.values()}, key=order.index)
    sets = list(dict.fromkeys(r["set"] for r in rows.values()))
    body, met, missed, here_met, here_missed = [], [], [], [], []
    for name in sets:
        got = {a: rows.get(f"{name}/{a}") for a in archs}
        first = next(g for g in got.values() if g)
        n_tr, n_te = first.get("sequences", ["?", "?"])
        lo, hi = first.get("lengths", ["?", "?"])
        shape = f"{n_tr}/{n_te}, {lo if lo == hi else f'{lo}-{hi}'} x {first.get('channels', '?')}, " \
                f"{first.get('classes', '?')} classes"
        cells = []
        for g in got.values():
            if not g:
                cells.append("not run")
                continue
            mark = "" if (g.get("schedule") or {}).get("converged", True) else " (nc)"
            cells.append(f"{g['per_sequence']:.3f} / {g['never_reset']:.3f}{mark}")
        best = max(g["per_sequence"] for g in got.values() if g)
        dtw, rocket = (pub.get(name) or {}).get("dtw"), (pub.get(name) or {}).get("rocket")
        if dtw is not None:
            (met if best >= dtw else missed).append(f"{name} ({best:.3f} against {dtw:.3f})")
        b = here.get(name)
        b = b if b is None or "accuracy" in b else None          # a run the budget left unscored: no figure
        if b is not None:
            (here_met if best >= b["accuracy"] - 1e-9 else here_missed).append(
                f"{name} ({best:.3f} against {b['accuracy']:.3f})")
        measured = [] if not here else [
            "" if b is None else f"{b['accuracy']:.3f}" + ("" if b["window"] is None else f" (band {b['window']})")]
        body.append([name, kinds.get(name, ""), shape, *cells, f"{best:.3f}",
                     "" if dtw is None else f"{dtw:.3f}", *measured, "" if rocket is None else f"{rocket:.3f}"])
    table = _table(["set", "kind", "train/test, length x channels", *archs, "best per sequence", "1-NN DTW",
                    *(["1-NN DTW measured here"] if here else []), "ROCKET"], body)
    beat, n_dtw, n_rocket, gap = _ucr_summary(rows, pub)
    text = (f"Each cell: per sequence / never reset (per reading); (nc): the run said it had not converged. The best "
            f"of {', '.join(archs)} per sequence reaches the 1-NN DTW figure on {beat} of {n_dtw} sets; over the "
            f"{n_rocket} sets with a ROCKET figure its mean is {abs(gap):.3f} {'below' if gap > 0 else 'above'} "
            "ROCKET's.")
    sides = [f"At or above it: {', '.join(met)}." if met else "", f"Below it: {', '.join(missed)}." if missed else ""]
    if here:
        sides.append(f"Against 1-NN DTW measured here (as `edgeseq train` scores it beside a model) the best reaches "
                     f"it on {len(here_met)} of {len(here_met) + len(here_missed)} sets"
                     + (f"; below it: {', '.join(here_missed)}." if here_missed else "."))
    text = " ".join([text, *filter(None, sides)])
    how = f"`{d.get('meta', {}).get('command', 'python scripts/measure_ucr.py run')}`, default settings, seed 0"
    if here:
        bm = d["baseline"].get("meta", {})
        how += (f"; 1-NN DTW measured here: `{bm.get('command', 'python scripts/measure_ucr.py baseline')}`, "
                f"{next(iter(here.values()))['library']}, {bm.get('date', '?')}")
        for name, r in (d["baseline"].get("added") or {}).items():
            how += f" ({name}: `{r['command']}`, {r['date']})"
    again = {}
    for key, r in (d.get("remeasured") or {}).items():
        again.setdefault((r["command"], r["why"], bool(r.get("added"))), []).append((key, r["date"]))
    for (cmd, why, added), keys in again.items():
        dates = sorted({date for _, date in keys})
        how += (f"; {', '.join(k for k, _ in keys)} {'added' if added else 'measured again after'} {why} "
                f"(`{cmd}`, {' to '.join(dict.fromkeys([dates[0], dates[-1]]))})")
    return "\n\n".join([machine_line(d, source, how), table, text])


def render_ucr_augment(d: dict, source: str) -> str:
    """The single-channel sets under the full augmentation (the default before `auto`, kept in
    the JSON as `full_augment` with its own command and date) against `auto`'s jitter and join
    under the same schedule: the table's rows, or `auto_augment` (rows, meta, remeasured) where
    the table was measured again after a change of schedule."""
    full = d.get("full_augment") or {}
    auto = d.get("auto_augment") or d
    rows, old = auto["rows"], full.get("rows", {})
    again = auto.get("remeasured") or {}
    keys = [k for k in rows if k in old and rows[k].get("channels") == 1 and k not in again]
    if not keys:
        raise RenderError(f"`{source}` has no single-channel rows under 'full_augment' to compare")
    body, up, down = [], 0, 0
    for k in keys:
        a, b = old[k], rows[k]
        delta = b["per_sequence"] - a["per_sequence"]
        n = b.get("sequences", [0, 0])[1]
        up += delta > 0
        down += delta < 0
        body.append([b["set"], b["arch"], f"{a['per_sequence']:.3f} / {a['never_reset']:.3f}",
                     f"{b['per_sequence']:.3f} / {b['never_reset']:.3f}",
                     f"{delta:+.3f} ({round(delta * n):+d} of {n})" if n else f"{delta:+.3f}",
                     f"{a['train_accuracy']:.3f} -> {b['train_accuracy']:.3f}"])
    table = _table(["set", "arch", "full set", "jitter and join", "per sequence change (test sequences)",
                    "train accuracy"], body)
    how = (f"full set: `{full.get('command', '?')}`, measured {full.get('date', '?')}; jitter and join: "
           f"`{auto.get('meta', {}).get('command', '?')}`, default settings"
           + (" of then (the training schedule before the one the table above ran)" if auto is not d else "")
           + ", seed 0")
    text = (f"Each cell: per sequence / never reset (per reading). Per sequence, jitter and join alone scored higher "
            f"in {up} of {len(keys)} runs and lower in {down}.")
    left = sorted({again[k]["why"] for k in again if k in old})
    if left:
        text += (f" Left out: {', '.join(sorted(k for k in again if k in old))}, measured again after "
                 f"{'; '.join(left)}, so not comparable with the run under the full set.")
    return "\n\n".join([machine_line(auto, source, how), table, text])


def _ucr_summary(rows: dict, pub: dict) -> tuple:
    """(sets whose best per sequence reaches 1-NN DTW, sets with a DTW figure, sets with a ROCKET
    figure, mean gap to ROCKET) of `rows` ("set/arch": row), the best of its architectures per set."""
    best = {}
    for r in rows.values():
        best[r["set"]] = max(best.get(r["set"], 0.0), r["per_sequence"])
    dtw = [(b, (pub.get(n) or {}).get("dtw")) for n, b in best.items() if (pub.get(n) or {}).get("dtw") is not None]
    rocket = [(pub.get(n) or {}).get("rocket") - b for n, b in best.items()
              if (pub.get(n) or {}).get("rocket") is not None]
    return sum(b >= t for b, t in dtw), len(dtw), len(rocket), sum(rocket) / max(len(rocket), 1)


def render_ucr_ema(d: dict, source: str) -> str:
    """The same sets and architectures with a moving average of the weights (`ema`, kept in the
    JSON as `ema` with its own command, machine and date) against the table's default rows."""
    ema = d.get("ema") or {}
    rows, new = d["rows"], ema.get("rows", {})
    since = ema.get("meta", {}).get("date", "")
    later = {k: r for k, r in (d.get("remeasured") or {}).items() if k in new and r["date"] > since}
    keys = [k for k in rows if k in new and k not in later]
    if not keys:
        raise RenderError(f"`{source}` has no rows under 'ema' to compare")
    body, up, down, nr_up, nr_down = [], 0, 0, 0, 0
    for k in keys:
        a, b = rows[k], new[k]
        delta = b["per_sequence"] - a["per_sequence"]
        n = b.get("sequences", [0, 0])[1]
        up, down = up + (delta > 0), down + (delta < 0)
        nr_up += b["never_reset"] > a["never_reset"]
        nr_down += b["never_reset"] < a["never_reset"]
        body.append([b["set"], b["arch"], f"{a['per_sequence']:.3f} / {a['never_reset']:.3f}",
                     f"{b['per_sequence']:.3f} / {b['never_reset']:.3f}",
                     f"{delta:+.3f} ({round(delta * n):+d} of {n})" if n else f"{delta:+.3f}",
                     f"{a['seconds']:.0f} -> {b['seconds']:.0f}"])
    table = _table(["set", "arch", "default", f"ema {ema.get('decay', '?')}", "per sequence change (test sequences)",
                    "seconds"], body)
    pub = d.get("published", {})
    base = _ucr_summary({k: rows[k] for k in keys}, pub)
    avg = _ucr_summary({k: new[k] for k in keys}, pub)
    how = (f"default: the table above; ema: `{ema.get('meta', {}).get('command', '?')}`, the defaults but `ema`, "
           "seed 0")
    text = (f"Each cell: per sequence / never reset (per reading). With the average, per sequence was higher in {up} "
            f"of {len(keys)} runs and lower in {down}; never reset higher in {nr_up} and lower in {nr_down}. The best "
            f"per set reaches 1-NN DTW on {avg[0]} of {avg[1]} sets (default: {base[0]}), {avg[3]:.3f} below ROCKET "
            f"on average (default: {base[3]:.3f}). The two columns ran on different machines (the seconds are "
            "not comparable, nor the last bits of the arithmetic, which a run's seed does not fix across CPUs).")
    if later:
        text += (f" Left out: {', '.join(sorted(later))}, measured again after "
                 f"{'; '.join(sorted({r['why'] for r in later.values()}))}, so not comparable with the run with the "
                 "average.")
    return "\n\n".join([machine_line(ema, source, how), table, text])


def render_events(d: dict, source: str) -> str:
    """Event figures on BasicMotions' test split, per model, float and int8, backend by backend."""
    how = (f"`{d['meta']['command']}`: calibrated for {d['budget']:g} false alarms per hour "
           f"(background {', '.join(d['background'])}, {d['rate_hz']:g} Hz) on never-reset streams of the whole "
           f"training split (the default), of its {d['validation_sequences']}-sequence validation part, or of the "
           f"training split cross-fitted (cross: each fifth run through a model trained on the rest); scored on the "
           f"{d['test_sequences']} test sequences joined in {d['orders']} seeded orders")
    rows = []
    for r in d["rows"]:
        v = r["validation"]
        rows.append([r["arch"], r["model"], r["calibrated_on"], r["backend"], f"{r['f1']:.3f}",
                     f"{r['false_alarms_per_hour']:.1f} ({r['false_alarms']})",
                     f"{r['delay_median']:.0f} / {r['delay_p90']:.0f}" if r["delay_median"] is not None else "n/a",
                     f"{r['deleted']} / {r['fragmented']} / {r['insertions']}",
                     f"{v['f1']:.3f}, {v['false_alarms_per_hour']:.1f}/h",
                     re.sub(r"\b1 readings\b", "1 reading", r["decision"])])    # describe()'s wording now
    return machine_line(d, source, how) + "\n\n" + _table(
        ["model", "weights", "calibrated on", "backend", "test event F1", "false alarms / h (count)",
         "delay median / p90 (readings)", "deleted / fragmented / insertions", "validation F1, FA/h",
         "settings chosen"], rows)


def render_switching(d: dict, source: str) -> str:
    """How soon events can be detected, by training grace: accuracy, the test-split oracle and
    the calibrated settings' test figures."""
    how = (f"`{d['meta']['command']}`: default settings and the training grace shown, seed 0; "
           f"{d['test_sequences']} test sequences joined in {d['orders']} seeded orders; budget {d['budget']:g} false "
           f"alarms per hour, background {', '.join(d['background'])}, {d['rate_hz']:g} Hz")

    def efd(c):
        if c is None:
            return "none"
        delay = "n/a" if c["delay_median"] is None else f"{c['delay_median']:.0f}"
        return f"{c['f1']:.3f} / {c['false_alarms_per_hour']:.1f} / {delay}"
    rows = []
    for r in d["rows"]:
        since = r["since_change"]
        cal = r["calibrated"]
        rows.append([r["arch"], f"{r['grace']}" + (" (the data's)" if r["grace_setting"] == "data" else ""),
                     f"{r['per_sequence']:.3f} / {r['never_reset']:.3f}",
                     " / ".join(f"{since[k]:.2f}" for k in list(since)[:6]),
                     efd(r["oracle"]["15"]), efd(r["oracle"]["any"]),
                     efd(cal["train"]), efd(cal[f"train, max delay {d['max_delay']}"]),
                     efd(cal["cross"]), efd(cal[f"cross, max delay {d['max_delay']}"])])
    bins = " / ".join(list(d["rows"][0]["since_change"])[:6]) if d["rows"] else ""
    return machine_line(d, source, how) + "\n\n" + _table(
        ["model", "training grace", "per sequence / never reset", f"right at readings {bins} after a change",
         "oracle at delay <= 15: F1 / FA/h / delay", "oracle at any delay", "calibrated: train",
         f"train, --max-delay {d['max_delay']}", "cross", f"cross, --max-delay {d['max_delay']}"], rows)


def render_decision_bench(d: dict, source: str) -> str:
    """The push with and without the decision layer, side by side."""
    how = f"`{d['meta']['command']}`, median of {d['rounds']} alternating rounds"
    rows = [[r["model"], f"{r['streams']:,}", r["backend"], r["decision_in"], _us(r["push_us"]),
             _us(r["push_with_decision_us"]), f"{r['added']:+.1%}"] for r in d["rows"]]
    return machine_line(d, source, how) + "\n\n" + _table(
        ["model", "streams", "backend", "decision runs in", "push", "push with decision", "added"], rows)


def render_anomaly(d: dict, source: str) -> str:
    """Anomaly figures per set, model, weights and backend, on both protocols."""
    how = (f"`{d['meta']['command']}`: default settings, seed 0, threshold calibrated on the training recordings "
           "(budget: " + "; ".join(f"{k} {v['budget']:g} per {'hour' if v['rate_hz'] else '1,000 readings'}"
                                   for k, v in d["sets"].items()) + ")")

    def fa(f):
        if f.get("false_alarms_per_hour") is not None:
            return f"{f['false_alarms']} ({f['false_alarms_per_hour']:.1f}/h)"
        return f"{f['false_alarms']} ({f['false_alarms_per_1000'] or 0:.2f}/1,000)"
    def normal(f):
        if not f:
            return "n/a"
        return f"{f['false_alarms']} in {f['hours']:.1f} h ({f['false_alarms_per_hour']:.2f}/h, at most {f['per_hour_upper_95']:.2f})"
    rows = []
    for r in d["rows"]:
        if "refused" in r:
            rows.append([r["set"], r["arch"], r["weights"], "-", "int8 refused", "", "", "", "", "", "", ""])
            continue
        n = r["never_reset"]
        top = "n/a" if r["top_inside"] is None else f"{r['top_inside']:.0%}" + (
            f" ({r['ucr_score']:.0%})" if r.get("ucr_score") is not None else "")
        rows.append([r["set"], r["arch"], r["weights"], r["backend"], f"{r['sigmas']:g} / {r['min_duration']}", top,
                     f"{r['detected']}/{r['anomalies']}", fa(r),
                     "n/a" if r["delay_median"] is None else f"{r['delay_median']:.0f}",
                     f"{n['detected']}/{n['anomalies']}", fa(n), normal(r.get("normal_running"))])
    ok = [r for r in d["rows"] if "refused" not in r]
    inside = [r["top_inside"] for r in ok if r["top_inside"] is not None]
    per_hour = [(r, f) for r in ok for f in (r, r["never_reset"]) if f.get("false_alarms_per_hour") is not None]
    over = [(r, f) for r, f in per_hour if f["false_alarms_per_hour"] > 1.0]
    ucr = [r["ucr_score"] for r in ok if r.get("ucr_score") is not None]
    text = (f"Top score inside the labelled anomaly: at least 80% of the recordings in {sum(x >= 0.8 for x in inside)} "
            f"of {len(inside)} rows (the UCR series is one recording: 0% or 100%)"
            + (f"; by the UCR archive's protocol (within the anomaly's own length of it) in {sum(x >= 0.8 for x in ucr)} "
               f"of {len(ucr)}" if ucr else "") + ". False alarms above 1 per hour of "
            f"normal data in {len(over)} of {len(per_hour)} figures (per recording and never reset)"
            + (": " + "; ".join(f"{r['arch']} {r['weights']} on {r['backend']}, {f['false_alarms_per_hour']:.1f}/h"
                                for r, f in over) if over else "") + ".")
    long = [r for r in ok if r.get("normal_running")]
    if long:
        hours = sorted({r["normal_running"]["hours"] for r in long})
        above = [r for r in long if r["normal_running"]["false_alarms_per_hour"] > 1.0]
        bound = [r for r in long if r["normal_running"]["per_hour_upper_95"] <= 1.0]
        text += (f" Held-out normal running ({long[0]['normal_running']['machines']} machines, "
                 f"{hours[0]:.1f}{f'-{hours[-1]:.1f}' if len(hours) > 1 else ''} h scored): "
                 f"more than 1 false alarm per hour in {len(above)} of {len(long)} rows"
                 + (" (" + "; ".join(f"{r['arch']} {r['weights']} on {r['backend']}, "
                                      f"{r['normal_running']['false_alarms_per_hour']:.2f}/h" for r in above) + ")"
                    if above else "")
                 + f"; a 95% upper bound of at most 1 per hour in {len(bound)} of {len(long)}.")
    return machine_line(d, source, how) + "\n\n" + _table(
        ["set", "model", "weights", "backend", "sigmas / min", "top score inside (UCR protocol)", "detected", "false alarms",
         "delay median", "never reset: detected", "never reset: false alarms",
         "normal running: false alarms (rate, 95% upper bound)"], rows) + "\n\n" + text


def render_regress(d: dict, source: str) -> str:
    """Regression figures per model, weights and backend on both protocols, beside persistence."""
    data = d["data"]
    how = (f"`{d['meta']['command']}`: default settings, seed 0; {data['name']} test split, {data['recordings'][1]} "
           f"recordings of {data['readings']:,} readings; target {', '.join(data['targets'])}; persistence: the "
           f"target {data['persistence_lag']} readings earlier; errors in the target's units (degrees C)")
    rows, beat, scored, behind = [], 0, 0, []
    for r in d["rows"]:
        if "refused" in r:
            why = r["refused"].split("': ", 1)[-1].split(" (")[0].split(";")[0]       # the reason, not the temp path
            rows.append([r["arch"], r["weights"], r["backend"], f"not run: {why}", "", "", "", "", ""])
            continue
        p, n = r["per_recording"], r["never_reset"]
        for proto, f in (("per recording", p), ("never reset", n)):
            scored += 1
            beat += f["mae"] < f["persistence_mae"]
            if f["mae"] >= f["persistence_mae"]:
                behind.append(f"{r['arch']} {r['weights']} on {r['backend']} {proto}, MAE {f['mae']:.3f} vs "
                              f"{f['persistence_mae']:.3f}")
        rows.append([r["arch"], r["weights"], r["backend"], f"{p['mae']:.3f} / {p['persistence_mae']:.3f}",
                     f"{p['rmse']:.3f} / {p['persistence_rmse']:.3f}", f"{p['skill']:+.2f}",
                     f"{n['mae']:.3f} / {n['persistence_mae']:.3f}", f"{n['rmse']:.3f} / {n['persistence_rmse']:.3f}",
                     f"{n['skill']:+.2f}"])
    text = (f"MAE below persistence's in {beat} of {scored} figures (per recording and never reset)"
            + (": not " + "; ".join(behind) if behind else "") + ".")
    return machine_line(d, source, how) + "\n\n" + _table(
        ["model", "weights", "backend", "per recording: MAE / persistence", "RMSE / persistence", "skill",
         "never reset: MAE / persistence", "RMSE / persistence", "skill"], rows) + "\n\n" + text


def render_int8(d: dict, source: str) -> str:
    """float against its static and dynamic int8 twins, per architecture (`edgeseq compare`)."""
    names = {"rnn": "RNN", "gru": "GRU", "lstm": "LSTM", "ssm": "SSM", "transformer": "Transformer"}
    rows, floats = [], {}
    for r in d["rows"]:
        if r["quantization"] == "float":
            floats[r["arch"]] = r
        f = floats.get(r["arch"], r)
        diff = ["", "", ""] if r["max_rel"] is None else \
            [f"{r['max_rel']:.1%}", f"{r['mean_rel']:.2%}", f"{r['argmax_agreement']:.1%}"]
        rows.append([names.get(r["arch"], r["arch"]), r["quantization"], f"{r['bytes'] / 1000:.1f} KB",
                     _x(f["bytes"] / r["bytes"]), f"{r['accuracy']:.3f}", f"{r['continuous']:.3f}", *diff,
                     f"{r['latency_us']:.1f} ({r['backend']})"])
    table = _table(["model", "scheme", "file", "smaller", "per sequence", "continuous", "max diff", "mean diff",
                    "same top class", "us/reading (backend)"], rows)
    how = (f"`{d['meta']['command']}`: differences over {d['streams']} never-reset streams x "
           f"{d['readings_per_stream']} readings as a share of the float model's output range; latency median of "
           f"{d['rounds']} interleaved rounds")
    return "\n\n".join([machine_line(d, source, how), table])


INT8_NAMES = {"rnn": "RNN", "gru": "GRU", "lstm": "LSTM", "ssm": "SSM", "transformer": "Transformer"}


def render_int8_backends(d: dict, source: str) -> str:
    """What the static int8 export measured on each step backend, beside the float model."""
    v = [r for r in d["validation"] if r["scheme"] == "static"]
    names = [n for n in ("native", "onnxruntime") if any(n in r["backends"] for r in v)]

    def each(r, key):
        return " / ".join(f"{r['backends'][n][key]:.3f}" if n in r["backends"] else "-" for n in names)
    rows = [[INT8_NAMES.get(r["arch"], r["arch"]), r["backend"],
             *[f"{r['backends'][n]['mean_rel']:.2%}" if n in r["backends"] else "-" for n in names],
             f"{each(r, 'int8_reading_accuracy')} / {r['float_reading_accuracy']:.3f}",
             f"{each(r, 'int8_continuous_accuracy')} / {r['float_continuous_accuracy']:.3f}"] for r in v]
    table = _table(["model", "judged on", *[f"mean error, {n}" for n in names],
                    f"per-reading accuracy, {' / '.join(names)} / float",
                    f"never reset, {' / '.join(names)} / float"], rows)
    how = (f"`{d['meta']['command']}`: static int8 of the seed-0 models, {d['data']}, as "
           "`edgeseq export RUN --int8 --json` reports it (`backends`); mean error of the logits against the float "
           "model as a share of its output range")
    notes = sorted({f"{INT8_NAMES.get(r['arch'], r['arch'])}: {r['backend_note']}" for r in v if r.get("backend_note")})
    return "\n\n".join([machine_line(d, source, how), table] + (["Not on native: " + "; ".join(notes) + "."]
                                                                  if notes else []))


def render_int8_margins(d: dict, source: str) -> str:
    """The worst seed per architecture and scheme: mean error, error margin and accuracy margin."""
    rows = [[INT8_NAMES.get(w["arch"], w["arch"]), w["scheme"], ", ".join(w["backends"]), f"{w['mean_rel']:.2%}",
             f"{w['error_margin']:.1f}x", f"{w['accuracy_margin_points']:.2f} points",
             ", ".join(map(str, w["breaking_seeds"])) or "none"] for w in d["worst"]]
    bound = d["rows"][0]
    table = _table(["model", "scheme", "judged on", "mean error, worst seed", "error margin, worst seed (bound / error)",
                    f"accuracy margin, worst seed ({bound['max_accuracy_drop'] * 100:g} point minus the larger drop "
                    "of the two protocols)", "seeds breaking a bound"], rows)
    seeds = d["seeds"]
    span = f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 1 else \
        ", ".join(map(str, seeds))
    how = (f"`{d['command']}`: seeds {span}, default settings, {d['torch_threads']} torch thread, int8 with "
           f"`--keep-anyway`, each on the backend that judges its export; mean error bound "
           f"{bound['max_error']:.0%} of the float model's output range; {d['seconds'] / 60:.0f} minutes in all")
    return "\n\n".join([machine_line(d, source, how), table])


MT_NAMES = {"transformer": "Transformer", "lstm-attn": "LSTM + attention"}


def _mt_how(d: dict, step: str) -> str:
    """The script's command line and the `edgeseq translate STEP` line it ran for each model."""
    lines = [next(c for c in m["commands"] if c.startswith(f"edgeseq translate {step} ")) for m in d["models"].values()]
    seeds = sorted({m["train"].get("train_config", {}).get("seed", 0) for m in d["models"].values()})
    return (f"`{d['meta']['command']}` (models trained with the defaults, seed {', '.join(map(str, seeds))}), which "
            f"ran " + " and ".join(f"`{c}`" for c in lines))


def render_translation_quality(d: dict, source: str) -> str:
    """BLEU and chrF per translation model and beam size (`edgeseq translate eval --json`)."""
    evals = {arch: m["eval"] for arch, m in d["models"].items()}
    first = next(iter(evals.values()))
    labels = {k: "greedy" if v["beam"] == 1 else f"beam {v['beam']}" for k, v in first["results"].items()}
    rows = [[MT_NAMES.get(arch, arch), f"{e['sentences']:,}"]
            + [f"{e['results'][k][f]:.1f}" for k in labels for f in ("bleu", "chrf")] for arch, e in evals.items()]
    table = _table(["model", f"{first['split']} sentences"] + [f"{labels[k]} {f}" for k in labels for f in ("BLEU", "chrF")],
                   rows)
    metrics = sorted({e["metric"] for e in evals.values()})
    alphas = sorted({e["alpha"] for e in evals.values()})
    how = (_mt_how(d, "eval") + f": the {first['split']} split of {first['corpus']}, {'; '.join(metrics)}, beam "
           f"length penalty alpha {', '.join(f'{a:g}' for a in alphas)}")
    return "\n\n".join([machine_line(d, source, how), table])


def render_translation_speed(d: dict, source: str) -> str:
    """Greedy decoding speed per model: onnxruntime cached against torch eager (`edgeseq translate bench --json`)."""
    parts, ratios = [], []
    for arch, m in d["models"].items():
        b, name = m["bench"], MT_NAMES.get(arch, arch)
        rows, best = [], []
        for mode, runners in b["results"].items():
            rows += [[f"{runner}, {mode}", f"{v['sentences_per_s']:,.0f}", f"{v['tokens_per_s']:,.0f}",
                      _x(v["speedup_vs_recompute"])] for runner, v in runners.items()]
            ort = next((v for r, v in runners.items() if r.startswith("onnxruntime")), None)
            if ort:
                best.append(f"{_x(ort['speedup_vs_recompute'])} at {mode}")
        parts.append(_table([f"{name}, {b['sentences']} test sentences", "sentences/s", "tokens/s",
                             "vs torch recompute, same batching"], rows))
        ratios.append(f"{name}, {' and '.join(best)}")
    threads = sorted({m["bench"]["machine"]["torch_threads"] for m in d["models"].values()})
    max_len = sorted({m["bench"]["max_len"] for m in d["models"].values()})
    how = (_mt_how(d, "bench") + f": greedy decoding of the first test sentences, at most {', '.join(map(str, max_len))} "
           f"tokens each, the same sentences for every runner; torch on {', '.join(map(str, threads))} threads, "
           "onnxruntime at its default thread count")
    text = "onnxruntime with its cache against torch eager recomputing the prefix: " + "; ".join(ratios) + "."
    return "\n\n".join([machine_line(d, source, how), *parts, text])


def _machine_of_sets(d: dict) -> dict:
    """The machine line of a JSON that merges runs: the first run's machine, the span of the runs'
    dates, and the load average only where every run recorded the same (else `_loads_of_sets`)."""
    runs = list(d["sets"].values())
    m = dict(runs[0]["machine"])
    dates = sorted(r["machine"]["date"] for r in runs if r["machine"].get("date"))
    m["date"] = (dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}") if dates else None
    if len({r["machine"].get("load_1min") for r in runs}) > 1:
        m.pop("load_1min", None)
    return {"machine": m}


def _loads_of_sets(d: dict) -> str:
    """'; load average 5.2 (vowels), 3.0 (watch)' where the merged runs recorded different loads, else ''."""
    loads = {name: s["machine"].get("load_1min") for name, s in d["sets"].items()}
    if len(set(loads.values())) < 2:
        return ""
    return "; load average " + ", ".join(f"{v:.1f} ({k})" if v is not None else f"not recorded ({k})"
                                         for k, v in loads.items())


def render_external(d: dict, source: str) -> str:
    """Public sets from PyPI wheels: each architecture on both protocols, beside the independent scorer."""
    rows, notes = [], []
    for s in d["sets"].values():
        label = f"{s['label']} ({s['test_sequences']:,} test sequences)"
        best = max(r["per_sequence"] for r in s["rows"])
        for i, r in enumerate(s["rows"]):
            ps = f"{r['per_sequence']:.3f}"
            rows.append([label if i == 0 else "", ARCH_NAMES.get(r["arch"], r["arch"]),
                         f"**{ps}**" if r["per_sequence"] == best else ps, f"{r['never_reset']:.3f}",
                         f"{r['at_ends']:.3f}", f"{r['independent']:.3f}"])
        diff = [r["never_reset"] - r["independent"] for r in s["rows"]]
        ends = [ARCH_NAMES.get(r["arch"], r["arch"]) for r in s["rows"] if r["at_ends"] >= 0.90]
        notes.append(f"{s['label']}: never reset minus independent {min(diff):+.3f} to {max(diff):+.3f}; "
                     f"at sequence ends 0.90 or more: {', '.join(ends) or 'none'}"
                     + (f"; settings {' '.join(s['settings'])}" if s.get("settings") else ""))
    commands = "; ".join(f"`{s['command']}`" for s in d["sets"].values())
    table = _table(["data", "arch", "per sequence", "never reset, per reading", "at sequence ends", "independent"],
                   rows)
    text = ("The best per-sequence figure of each set is in bold. " + ". ".join(notes) + ".")
    return "\n\n".join([machine_line(_machine_of_sets(d), source, commands + _loads_of_sets(d)), table, text])


def _augment_means(d: dict) -> dict:
    """(arch, config) -> mean of each figure over the seeds (None where no seed has it)."""
    out = {}
    for arch in d["archs"]:
        for c in d["configs"]:
            rs = [r for r in d["rows"] if r["arch"] == arch and r["augment"] == c]
            out[arch, c] = {k: (sum(v) / len(v) if v else None) for k in ("per_sequence", "never_reset", "to_follow")
                            for v in [[r[k] for r in rs if r.get(k) is not None]]}
    return out


def _points(a, b) -> str:
    return f"{100 * (a - b):+.1f}"


def render_augment_mean(d: dict, source: str) -> str:
    """None against the default augmentation, per architecture, mean over the seeds."""
    m = _augment_means(d)
    rows = []
    for arch in d["archs"]:
        n, f = m[arch, "none"], m[arch, "default"]
        follow = [f"{x['to_follow']:.1f}" if x["to_follow"] is not None else "n/a" for x in (n, f)]
        rows.append([arch, f"{n['per_sequence']:.3f}", f"{f['per_sequence']:.3f} ({_points(f['per_sequence'], n['per_sequence'])})",
                     f"{n['never_reset']:.3f}", f"{f['never_reset']:.3f} ({_points(f['never_reset'], n['never_reset'])})",
                     *follow])
    seeds = ", ".join(map(str, d["seeds"]))
    how = f"`{d['command']}`; {d['data']}, mean over seeds {seeds}, change against none in points"
    return "\n\n".join([machine_line(d, source, how),
                        _table(["arch", "per sequence: none", "default", "never reset: none", "default",
                                "readings to follow a change: none", "default"], rows)])


def render_augment_each(d: dict, source: str) -> str:
    """Each transform alone (and the default), per architecture: per sequence / never reset, points against none."""
    m = _augment_means(d)
    rows = []
    for c in d["configs"]:
        if c == "none":
            continue
        name = "all (default)" if c == "default" else c.replace("=", " ")
        rows.append([name] + [f"{_points(m[a, c]['per_sequence'], m[a, 'none']['per_sequence'])} / "
                              f"{_points(m[a, c]['never_reset'], m[a, 'none']['never_reset'])}" for a in d["archs"]])
    seeds = ", ".join(map(str, d["seeds"]))
    how = f"`{d['command']}`; {d['data']}, mean over seeds {seeds}: per sequence / never reset, points against none"
    return "\n\n".join([machine_line(d, source, how), _table(["transform"] + list(d["archs"]), rows)])



SSM_CHOICES = {("float", "float"): "float",
               ("static", "projections int8"): "projections int8, state float (export's choice)",
               ("static", "state int8"): "state rounded to int8 between calls",
               ("static", "+ decay int8"): "decays on an int8 grid too",
               ("static", "+ readout float"): "readout `C` kept float",
               ("static", "+ x float"): "input projection `W_x` kept float",
               ("static", "+ out float"): "`W_out` kept float",
               ("static", "+ delta float"): "`W_δ` kept float",
               ("dynamic", "projections int8"): "dynamic int8",
               ("dynamic", "+ readout float"): "dynamic int8, readout `C` kept float"}


def _moved(values, fmt: str) -> str:
    """'a to b' of values in a format, one figure where both read the same."""
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo} to {hi}"


def _ssm_parts_note(rows: list, variant: str) -> str:
    """What keeping a projection float, and rounding the state or the decays, did to one model."""
    base = next(r for r in rows if (r["scheme"], r["choice"]) == ("static", "projections int8"))
    kept = [r for r in rows if r["scheme"] == "static" and r["float_parts"]]
    parts = [f"{variant}, static: keeping one projection float moved the mean error by "
             f"{_moved([(r['mean_rel'] - base['mean_rel']) * 100 for r in kept], '+.2f')} points for "
             f"{_moved([(r['bytes'] - base['bytes']) / 1000 for r in kept], '.1f')} KB more file, and int8 per-reading accuracy by "
             f"{_moved([(r['int8_reading_accuracy'] - base['int8_reading_accuracy']) * 100 for r in kept], '+.2f')} "
             f"points per sequence, "
             f"{_moved([(r['int8_continuous_accuracy'] - base['int8_continuous_accuracy']) * 100 for r in kept], '+.2f')}"
             " continuous"]
    for choice, what in (("state int8", "rounding the state to int8 between calls"),
                         ("+ decay int8", "the decays on an int8 grid")):
        r = next((r for r in rows if (r["scheme"], r["choice"]) == ("static", choice)), None)
        if r:
            parts.append(f"{what} moved the error by {(r['mean_rel'] - base['mean_rel']) * 100:+.2f} points")
    return "; ".join(parts) + "."


def render_ssm_int8_parts(d: dict, source: str) -> str:
    """Each int8 choice for a state-space model: file, weights, error against the float twin, accuracies."""
    out, notes = [], []
    for key in dict.fromkeys((r["variant"], r["seed"]) for r in d["rows"]):
        rows = [r for r in d["rows"] if (r["variant"], r["seed"]) == key]
        f = next(r for r in rows if r["scheme"] != "float")          # the float figures ride on every int8 row
        table = []
        for r in rows:
            int8 = r["scheme"] != "float"
            table.append([SSM_CHOICES.get((r["scheme"], r["choice"]), f"{r['scheme']} {r['choice']}"),
                          f"{r['bytes'] / 1000:.1f} KB", f"{r['initializer_bytes'] / 1000:.1f} KB",
                          f"{r['mean_rel']:.2%}" if int8 else "",
                          f"{(r if int8 else f)['int8_reading_accuracy' if int8 else 'float_reading_accuracy']:.3f}",
                          f"{(r if int8 else f)['int8_continuous_accuracy' if int8 else 'float_continuous_accuracy']:.3f}"])
        name = "fixed decay" if key[0] == "fixed" else "selective"
        out.append(_table([f"{name}, seed {key[1]}", "file", "of which initializers", "mean error",
                           "per reading: per sequence", "per reading: continuous"], table))
        notes.append(_ssm_parts_note(rows, name.capitalize()))
    how = (f"`{d['command']}`: {d['data']}, default settings, {d['torch_threads']} torch thread; mean error of the "
           f"logits against the float twin over {d['streams']} never-reset streams x {d['readings_per_stream']} test "
           "readings, as a share of the float model's output range; per-reading test accuracy past the first quarter "
           "of each sequence (per sequence) and on the test sequences joined, never reset (continuous); "
           "initializers: weights, biases, scales and constants, the rest of each file is graph and metadata; "
           f"{d['seconds'] / 60:.0f} minutes in all")
    return "\n\n".join([machine_line(d, source, how), *out, " ".join(notes)])


def _ssm_label(r: dict) -> str:
    name = {"ssm": "SSM", "ssm selective": "SSM selective", "gru": "GRU"}.get(r["name"], r["name"])
    return name if r["weights"] == "float" else f"{name} {r['weights']}"


def render_ssm(d: dict, source: str) -> str:
    """The state-space model, fixed and selective, beside the GRU: accuracy, size, cost, latency, training."""
    backends = [b for b in ("onnxruntime", "native") if any(b in r["latency_us"] for r in d["rows"])]
    rows = []
    for r in d["rows"]:
        float_ = r["weights"] == "float"
        follow = "" if r["follow_median"] is None else f"{r['follow_median']:.0f}"
        rows.append([_ssm_label(r), f"{r['per_sequence']:.3f}", f"{r['continuous']:.3f}", f"{r['last_reading']:.3f}",
                     follow, f"{r['parameters']:,}" if float_ else "", f"{r['macs_per_reading']:,}" if float_ else "",
                     f"{r['state_bytes']:,} B", f"{r['bytes'] / 1000:.1f} KB", f"{r['graph_nodes']}",
                     *[f"{r['latency_us'][b]:.1f}" if b in r["latency_us"] else "" for b in backends],
                     f"{r['train_seconds']:.1f} s" if float_ else ""])
    table = _table(["model", "per sequence", "continuous per reading", "last reading", "follow (median)",
                    "parameters", "MACs / reading", "state / stream", "file", "graph nodes",
                    *[f"us / reading, {b}" for b in backends], "training"], rows)
    picked = sorted({r["backend"] for r in d["rows"]})
    how = (f"`{d['command']}`: {d['data']} seed {d['seed']}, default settings, {d['torch_threads']} torch thread; "
           f"accuracy as `edgeseq eval` scores it, on the backend `StreamSession` picks here ({', '.join(picked)}); "
           f"latency `StreamSession.push`, one stream, median of {d['rounds']} interleaved rounds of "
           f"{d['latency']['readings_per_round']} readings, as `edgeseq compare --backend` each")
    by = {(r["name"], r["weights"]): r for r in d["rows"]}
    notes = []
    if ("ssm", "float") in by and ("gru", "float") in by:
        notes.append(f"The float SSM step is {by['ssm', 'float']['graph_nodes']} graph nodes against the GRU's "
                     f"{by['gru', 'float']['graph_nodes']}.")
    if ("ssm", "float") in by and ("ssm selective", "float") in by:
        fx, se = by["ssm", "float"], by["ssm selective", "float"]
        times = ", ".join(f"{_x(se['latency_us'][b] / fx['latency_us'][b])} on {b}" for b in backends
                          if b in fx["latency_us"] and b in se["latency_us"])
        notes.append(f"Selective against fixed: {se['parameters'] - fx['parameters']:+,} parameters, the step time "
                     f"{times}.")
    fw = [r for r in d["rows"] if r.get("firmware_check")]
    if fw:
        c0 = fw[0]["firmware_check"]
        notes.append(f"`edgeseq firmware check` of the int8 models on an {c0['target']}: " + "; ".join(
            f"{_ssm_label(r).replace(' int8 static', '')} {r['firmware_check']['flash_bytes'] / 1000:.1f} KB flash, "
            f"{r['firmware_check']['ram_bytes'] / 1000:.1f} KB RAM, about "
            f"{r['firmware_check']['us_per_reading']:,.0f} us a reading" for r in fw) + ".")
    return "\n\n".join([machine_line(d, source, how), table, " ".join(notes)])


def render_single_sequence(d: dict, source: str) -> str:
    """Each architecture trained with today's defaults and on single sequences only (no stream loss, no
    auxiliary loss, no augmentation; at the default schedule and, where the JSON has it, for a fixed
    number of epochs): per sequence and never reset side by side, mean over the seeds."""
    names = {"default": "today's defaults", "single": "single sequences"}
    trainings = list(d["trainings"])
    label = {t: names.get(t) or ("single sequences, " + ", ".join(f"{v} {k}" for k, v in d["trainings"][t].items()
                                                                   if k not in d["trainings"].get("single", {})))
             for t in trainings}
    rows = []
    for arch in d["archs"]:
        m = {}
        for t in trainings:
            rs = [r for r in d["rows"] if r["arch"] == arch and r["training"] == t]
            m[t] = {k: sum(r[k] for r in rs) / len(rs) for k in ("per_sequence", "never_reset", "epochs", "updates")}
        rows.append([ARCH_NAMES.get(arch, arch)] + [f"{m[t]['per_sequence']:.3f}" for t in trainings]
                    + [f"{m[t]['never_reset']:.3f}" for t in trainings]
                    + [f"{m[t]['epochs']:.0f} ({m[t]['updates']:,.0f})" for t in trainings])
    seeds = ", ".join(map(str, d["seeds"]))
    how = (f"`{d['command']}`; {d['data']}, seed{'s' if len(d['seeds']) > 1 else ''} {seeds}"
           + (" (mean)" if len(d["seeds"]) > 1 else "") + "; single sequences: "
           + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in d["trainings"]["single"].items())
           + ", the default schedule unless a column says otherwise")
    header = ["model"] + [f"{what}: {label[t]}" if i == 0 else label[t]
                          for what in ("per sequence", "never reset, per reading", "epochs (updates)")
                          for i, t in enumerate(trainings)]
    return "\n\n".join([machine_line(d, source, how), _table(header, rows)])


def render_train_throughput(d: dict, source: str) -> str:
    """`edgeseq bench --train`'s training readings/s per architecture at each recording length, with the
    share of this core's GEMM bound, and the GRU's rate against the others'."""
    t = d["throughput"]
    L = t["lengths"]
    rows, rates = [], {}
    for arch, row in t["archs"].items():
        cells = [row["lengths"][str(n)] for n in L]
        rates[arch] = [c["readings_per_s"] for c in cells]
        rows.append([ARCH_NAMES.get(arch, arch), f"{row['macs_per_reading']:,}"]
                    + [f"{c['readings_per_s']:,.0f} /s ({c['share_of_gemm_bound']:.1%})" for c in cells]
                    + [_x(row["linearity"])])
    how = (f"`edgeseq bench --repeats {d['repeats']} --train --json`: {t['epochs']} epochs of each default "
           f"schedule on {t['readings']:,} synthetic readings per length, {t['threads']} thread, GEMM "
           f"{t['gemm_macs_per_s'] / 1e9:.1f} GMAC/s")
    table = _table(["arch", "MACs per reading"] + [f"T = {n:,}" for n in L] + ["seconds per reading, max / min"],
                   rows)
    text = []
    others = [a for a in ("lstm", "ssm") if a in rates]
    if "gru" in rates and others:
        text.append("The GRU's slowest rate is " + " and ".join(
            f"{_x(min(rates['gru']) / min(rates[a]))} the {ARCH_NAMES[a]}'s" for a in others) + ".")
    if "gru" in rates and "transformer" in rates:
        ratios = [_x(g / x) for g, x in zip(rates["gru"], rates["transformer"])]
        at = [f"{n:,}" for n in L]
        text.append(f"The GRU trains {', '.join(ratios[:-1])} and {ratios[-1]} the Transformer's readings/s at "
                    f"T = {', '.join(at[:-1])} and {at[-1]}." if len(L) > 1 else
                    f"The GRU trains {ratios[0]} the Transformer's readings/s at T = {at[0]}.")
    return "\n\n".join([machine_line(d, source, how), table] + ([" ".join(text)] if text else []))


def render_long_recordings(d: dict, source: str) -> str:
    """`scripts/bench_long_recordings.py`: default training on synthetic recordings of a 50 Hz smartwatch
    set's shape, per architecture: epochs, time, readings/s, and both protocols of the export."""
    rows = []
    for r in d["rows"]:
        p = r["plan"]
        rows.append([ARCH_NAMES.get(r["arch"], r["arch"]), r["epochs"], f"{r['train_seconds']:,.0f} s",
                     f"{r['readings_per_second']:,}", f"{r['updates']:,}",
                     f"{p['streams']} + {p['lanes']} x {p['chunk']}",
                     f"{r['per_sequence']:.3f}", f"{r['never_reset']:.3f}"])
    data = d.get("data", {})
    how = f"`{d.get('command', 'scripts/bench_long_recordings.py')}`"
    if data:
        how += (f": {data['train_recordings']} training and {data['test_recordings']} test recordings, "
                f"{data['train_readings']:,} training readings (synthetic)")
    threads = sorted({r["threads"] for r in d["rows"] if "threads" in r})
    if threads:
        how += f", {'/'.join(map(str, threads))} torch thread{'s' if threads != [1] else ''}"
    return "\n\n".join([machine_line(d, source, how),
                        _table(["model", "epochs", "train time", "readings/s", "updates",
                                "each update: streams + lanes x readings", "per sequence",
                                "never reset, per reading"], rows)])


RENDERERS = {
    "single-sequence": ("single-sequence", render_single_sequence),
    "train-throughput": ("train-throughput", render_train_throughput),
    "long-recordings": ("long-recordings", render_long_recordings),
    "ssm-int8-parts": ("ssm-int8-parts", render_ssm_int8_parts),
    "ssm": ("ssm", render_ssm),
    "external": ("external", render_external),
    "augment-mean": ("augment", render_augment_mean),
    "augment-each": ("augment", render_augment_each),
    "translation-quality": ("translation", render_translation_quality),
    "translation-speed": ("translation", render_translation_speed),
    "int8": ("int8", render_int8),
    "int8-backends": ("int8", render_int8_backends),
    "int8-margins": ("int8-margins", render_int8_margins),
    "regress": ("regress", render_regress),
    "anomaly": ("anomaly", render_anomaly),
    "events": ("events", render_events),
    "switching": ("switching", render_switching),
    "decision-bench": ("decision-bench", render_decision_bench),
    "ucr": ("ucr", render_ucr),
    "ucr-augment": ("ucr", render_ucr_augment),
    "ucr-ema": ("ucr", render_ucr_ema),
    "bench-gru": ("bench", render_bench_gru),
    "bench-transformer": ("bench", render_bench_transformer),
    "bench-backends": ("bench", render_bench_backends),
    "bench-archs": ("bench", render_bench_archs),
    "report": ("report", render_report),
    "firmware": ("firmware", render_firmware),
    "firmware-summary": ("firmware", render_firmware_summary),
    "firmware-ssm-accuracy": ("firmware-ssm", render_firmware_ssm_accuracy),
    "firmware-ssm-cores": ("firmware-ssm", render_firmware_ssm_cores),
    "firmware-ssm-boards": ("firmware-ssm", render_firmware_ssm_boards),
    "firmware-xf-accuracy": ("firmware-xf", render_firmware_xf_accuracy),
    "firmware-xf-cores": ("firmware-xf", render_firmware_xf_cores),
    "compilers": ("compilers", render_compilers),
    "gateway": ("gateway", render_gateway),
    "gateway-batched": ("gateway-batched", render_gateway),
    "gateway-overload": ("gateway-overload", render_gateway),
    "gateway-cluster": ("gateway-cluster", render_gateway),
    "demo": ("demo", render_demo),
    "pi-demo": ("pi-demo", render_pi_demo),
    "soak": ("soak", render_soak),
    "report-quick-phases": ("report-quick", render_report_quick_phases),
}


# --- pages -------------------------------------------------------------------------------------

def load(source: str, root: Path = ROOT) -> dict:
    path = root / SOURCES[source]
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RenderError(f"{SOURCES[source]} is missing; run its benchmark (see scripts/render_docs.py)") from None
    except json.JSONDecodeError as e:
        raise RenderError(f"{SOURCES[source]} is not JSON: {e}") from None


def render_region(name: str, root: Path = ROOT, cache: dict | None = None) -> str:
    if name not in RENDERERS:
        raise RenderError(f"unknown figures region {name!r}; known: {', '.join(sorted(RENDERERS))}")
    source, fn = RENDERERS[name]
    cache = {} if cache is None else cache
    if source not in cache:
        cache[source] = load(source, root)
    return fn(cache[source], SOURCES[source]).rstrip() + "\n"


def check_markers(text: str, where: str) -> list:
    """Region names in order; raises on an unclosed, unopened or nested marker."""
    names, open_name = [], None
    for m in OPEN.finditer(text):
        closing, name = m.group(1) == "/", m.group(2)
        if not closing:
            if open_name:
                raise RenderError(f"{where}: figures:{name} opens inside figures:{open_name}")
            open_name = name
        else:
            if open_name != name:
                raise RenderError(f"{where}: /figures:{name} closes {'nothing' if not open_name else open_name}")
            names.append(name)
            open_name = None
    if open_name:
        raise RenderError(f"{where}: figures:{open_name} is never closed")
    return names


def render_page(text: str, where: str = "page", root: Path = ROOT, cache: dict | None = None) -> str:
    """The page with every region rendered from its JSON (in memory; nothing is written)."""
    check_markers(text, where)
    cache = {} if cache is None else cache

    def sub(m):
        body = render_region(m.group("name"), root, cache)
        return f"<!-- figures:{m.group('name')} -->\n\n{body}\n<!-- /figures:{m.group('name')} -->"
    return REGION.sub(sub, text)


def pages(root: Path = ROOT) -> list:
    """docs/**/*.md and README.md, where they mark a region."""
    found = list((root / "docs").rglob("*.md")) + [root / "README.md"]
    return sorted(p for p in found if p.is_file() and "<!-- figures:" in p.read_text(encoding="utf-8"))


def stale(root: Path = ROOT) -> dict:
    """{page: rendered text} for every page whose regions differ from their JSON."""
    out, cache = {}, {}
    for p in pages(root):
        text = p.read_text(encoding="utf-8")
        new = render_page(text, str(p.relative_to(root)), root, cache)
        if new != text:
            out[p] = new
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a region is out of date")
    args = ap.parse_args(argv)
    try:
        todo = stale()
    except RenderError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    for p, text in todo.items():
        rel = p.relative_to(ROOT)
        if args.check:
            print(f"{rel}: figures differ from their JSON; run python scripts/render_docs.py", file=sys.stderr)
        else:
            p.write_text(text, encoding="utf-8")
            print(f"rendered {rel}")
    if args.check:
        return 1 if todo else 0
    if not todo:
        print("figures up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
