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
  - docs/figures/decision_bench.json  `python scripts/bench_decision.py --json docs/figures/decision_bench.json
                                 models/...onnx` (after `make demo`; the command is recorded in the JSON)
  - docs/figures/anomaly.json   `python scripts/measure_anomaly.py --json docs/figures/anomaly.json` (trains,
                                 exports, calibrates and scores; the command is recorded in the JSON)
  - docs/figures/regress.json   `python scripts/measure_regress.py --json docs/figures/regress.json` (trains,
                                 exports and scores; the command is recorded in the JSON)
  - docs/figures/demo.json      `.venv/bin/python examples/demo.py --json docs/figures/demo.json` (what
                                 `make demo` runs, plus the JSON; the command is recorded in the JSON)

Standard library only, so it runs wherever the docs build.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

SOURCES = {
    "bench": "docs/figures/bench.json",
    "report": "docs/report/report.json",
    "firmware": "docs/figures/firmware.json",
    "gateway": "docs/figures/gateway.json",
    "gateway-batched": "docs/figures/gateway_batched.json",
    "gateway-overload": "docs/figures/gateway_overload.json",
    "gateway-cluster": "docs/figures/gateway_cluster.json",
    "ucr": "docs/figures/ucr.json",
    "compilers": "docs/figures/compilers.json",
    "demo": "docs/figures/demo.json",
    "events": "docs/figures/events.json",
    "decision-bench": "docs/figures/decision_bench.json",
    "anomaly": "docs/figures/anomaly.json",
    "regress": "docs/figures/regress.json",
    "int8": "docs/figures/int8.json",
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
                    f"{f['failover_s']:.1f} s ({f['devices_interrupted']} of {f['sampled_devices']} sampled devices "
                    f"went more than 1 s without one, the survivor's own too while it replayed the partitions it "
                    "took); " + ("every sampled prediction arrived" if f["sampled_received"] == f["sampled_expected"]
                                 else "NOT every sampled prediction arrived") +
                    f" ({f['sampled_received']:,} of {f['sampled_expected']:,})." + stored)
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
    order = ["rnn", "gru", "lstm", "ssm", "transformer"]
    archs = sorted({r["arch"] for r in rows.values()}, key=order.index)
    sets = list(dict.fromkeys(r["set"] for r in rows.values()))
    body, best_all, rocket_all, beat, met, missed = [], [], [], 0, [], []
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
        best_all.append(best)
        if rocket is not None:
            rocket_all.append((best, rocket))
        beat += dtw is not None and best >= dtw
        if dtw is not None:
            (met if best >= dtw else missed).append(f"{name} ({best:.3f} against {dtw:.3f})")
        body.append([name, kinds.get(name, ""), shape, *cells, f"{best:.3f}",
                     "" if dtw is None else f"{dtw:.3f}", "" if rocket is None else f"{rocket:.3f}"])
    table = _table(["set", "kind", "train/test, length x channels", *archs, "best per sequence", "1-NN DTW",
                    "ROCKET"], body)
    n_dtw = sum((pub.get(s) or {}).get("dtw") is not None for s in sets)
    gap = sum(r - b for b, r in rocket_all) / max(len(rocket_all), 1)
    text = (f"Each cell: per sequence / never reset (per reading); (nc): the run said it had not converged. The best "
            f"of {', '.join(archs)} per sequence reaches the 1-NN DTW figure on {beat} of {n_dtw} sets; over the "
            f"{len(rocket_all)} sets with a ROCKET figure its mean is {abs(gap):.3f} {'below' if gap > 0 else 'above'} "
            "ROCKET's.")
    sides = [f"At or above it: {', '.join(met)}." if met else "", f"Below it: {', '.join(missed)}." if missed else ""]
    text = " ".join([text, *filter(None, sides)])
    how = f"`{d.get('meta', {}).get('command', 'python scripts/measure_ucr.py run')}`, default settings, seed 0"
    return "\n\n".join([machine_line(d, source, how), table, text])


def render_ucr_augment(d: dict, source: str) -> str:
    """The single-channel sets under the full augmentation (the default before `auto`, kept in
    the JSON as `full_augment` with its own command and date) against `auto`'s jitter and join."""
    full = d.get("full_augment") or {}
    rows, old = d["rows"], full.get("rows", {})
    keys = [k for k in rows if k in old and rows[k].get("channels") == 1]
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
           f"`{d.get('meta', {}).get('command', '?')}`, default settings, seed 0")
    text = (f"Each cell: per sequence / never reset (per reading). Per sequence, jitter and join alone scored higher "
            f"in {up} of {len(keys)} runs and lower in {down}.")
    return "\n\n".join([machine_line(d, source, how), table, text])


def render_events(d: dict, source: str) -> str:
    """Event figures on BasicMotions' test split, per model, float and int8, backend by backend."""
    how = (f"`{d['meta']['command']}`: calibrated for {d['budget']:g} false alarms per hour "
           f"(background {', '.join(d['background'])}, {d['rate_hz']:g} Hz) on never-reset streams of the whole "
           f"training split (the default) or of its {d['validation_sequences']}-sequence validation part; scored on the "
           f"{d['test_sequences']} test sequences joined in {d['orders']} seeded orders")
    rows = []
    for r in d["rows"]:
        v = r["validation"]
        rows.append([r["arch"], r["model"], r["calibrated_on"], r["backend"], f"{r['f1']:.3f}",
                     f"{r['false_alarms_per_hour']:.1f} ({r['false_alarms']})",
                     f"{r['delay_median']:.0f} / {r['delay_p90']:.0f}" if r["delay_median"] is not None else "n/a",
                     f"{r['deleted']} / {r['fragmented']} / {r['insertions']}",
                     f"{v['f1']:.3f}, {v['false_alarms_per_hour']:.1f}/h", r["decision"]])
    return machine_line(d, source, how) + "\n\n" + _table(
        ["model", "weights", "calibrated on", "backend", "test event F1", "false alarms / h (count)",
         "delay median / p90 (readings)", "deleted / fragmented / insertions", "validation F1, FA/h",
         "settings chosen"], rows)


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
    rows = []
    for r in d["rows"]:
        if "refused" in r:
            rows.append([r["set"], r["arch"], r["weights"], "-", "int8 refused", "", "", "", "", "", ""])
            continue
        n = r["never_reset"]
        top = "n/a" if r["top_inside"] is None else f"{r['top_inside']:.0%}"
        rows.append([r["set"], r["arch"], r["weights"], r["backend"], f"{r['sigmas']:g} / {r['min_duration']}", top,
                     f"{r['detected']}/{r['anomalies']}", fa(r),
                     "n/a" if r["delay_median"] is None else f"{r['delay_median']:.0f}",
                     f"{n['detected']}/{n['anomalies']}", fa(n)])
    ok = [r for r in d["rows"] if "refused" not in r]
    inside = [r["top_inside"] for r in ok if r["top_inside"] is not None]
    per_hour = [(r, f) for r in ok for f in (r, r["never_reset"]) if f.get("false_alarms_per_hour") is not None]
    over = [(r, f) for r, f in per_hour if f["false_alarms_per_hour"] > 1.0]
    text = (f"Top score inside the labelled anomaly: at least 80% of the recordings in {sum(x >= 0.8 for x in inside)} "
            f"of {len(inside)} rows (the UCR series is one recording: 0% or 100%). False alarms above 1 per hour of "
            f"normal data in {len(over)} of {len(per_hour)} figures (per recording and never reset)"
            + (": " + "; ".join(f"{r['arch']} {r['weights']} on {r['backend']}, {f['false_alarms_per_hour']:.1f}/h"
                                for r, f in over) if over else "") + ".")
    return machine_line(d, source, how) + "\n\n" + _table(
        ["set", "model", "weights", "backend", "sigmas / min", "top score inside", "detected", "false alarms",
         "delay median", "never reset: detected", "never reset: false alarms"], rows) + "\n\n" + text


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


RENDERERS = {
    "int8": ("int8", render_int8),
    "regress": ("regress", render_regress),
    "anomaly": ("anomaly", render_anomaly),
    "events": ("events", render_events),
    "decision-bench": ("decision-bench", render_decision_bench),
    "ucr": ("ucr", render_ucr),
    "ucr-augment": ("ucr", render_ucr_augment),
    "bench-gru": ("bench", render_bench_gru),
    "bench-transformer": ("bench", render_bench_transformer),
    "bench-backends": ("bench", render_bench_backends),
    "bench-archs": ("bench", render_bench_archs),
    "report": ("report", render_report),
    "firmware": ("firmware", render_firmware),
    "firmware-summary": ("firmware", render_firmware_summary),
    "compilers": ("compilers", render_compilers),
    "gateway": ("gateway", render_gateway),
    "gateway-batched": ("gateway-batched", render_gateway),
    "gateway-overload": ("gateway-overload", render_gateway),
    "gateway-cluster": ("gateway-cluster", render_gateway),
    "demo": ("demo", render_demo),
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
