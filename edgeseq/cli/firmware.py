"""`edgeseq firmware ...`: microcontroller targets, fit and cost, integer-only execution, C code."""

from __future__ import annotations

import json
from pathlib import Path

import click

from edgeseq.cli._common import _DATA_HELP, Finite, _echo_json, _errors, _json_option, _writing
from edgeseq.errors import EdgeseqError, UsageError, printable

_targets_file_option = click.option("--targets-file", type=click.Path(),
                                    help="JSON file with more target profiles (each named apart from the built-in ones).")


@click.group()
def firmware():
    """Microcontroller targets: will a model fit, what a reading costs, integer-only execution, C code.

    \b
      edgeseq firmware targets
      edgeseq firmware check models/gru-int8.onnx --target nrf52840
      edgeseq firmware check models/transformer-int8.onnx --target rp2040 --history 32
      edgeseq firmware simulate models/gru-int8.onnx --json
      edgeseq firmware simulate models/ssm-int8.onnx --float models/ssm.onnx
      edgeseq firmware emit models/gru-int8.onnx --out firmware/gru --prefix gesture
      edgeseq firmware measure models/gru-int8.onnx --target nrf52840
    """


@firmware.command(name="targets")
@_targets_file_option
@_json_option
@_errors
def firmware_targets(targets_file, as_json):
    """List the built-in (and file) target profiles with their datasheet figures."""
    from firmware_sim.targets import load_targets

    ts = load_targets(targets_file)
    if as_json:
        _echo_json([t.to_json() for t in ts.values()])
        return
    click.echo(f"{'name':10s} {'core':16s} {'MHz':>5s} {'flash KB':>9s} {'SRAM KB':>8s} {'cyc/MAC':>8s}  part")
    for t in ts.values():
        click.echo(f"{printable(t.name):10s} {printable(t.core):16s} {t.clock_mhz:5.0f} {t.flash_kb:9,d} "
                   f"{t.sram_kb:8,d} {t.cycles_per_mac:8.2f}  {printable(t.part)}")
    click.echo("sources: `edgeseq firmware targets --json` (field 'source'); cycles/MAC are estimates, see --help of check")


def _fmt_check(r):
    f, m, c = r["flash"], r["ram"], r["cost"]
    t = r["target"]
    lines = [f"{printable(r['model'])} ({r['arch']}, {r['quantization']}) on {printable(t['name'])} "
             f"({printable(t['part'])}, {printable(t['core'])} "
             f"{t['clock_mhz']:.0f} MHz)" + ('' if r['history'] is None else f", history {r['history']:,}"),
             f"  plan of: {r['plan_of']}",
             "  flash            bytes",
             *[f"    {k:16s} {v:>9,d}" for k, v in f.items() if k not in ("total", "available", "margin")],
             f"    {'total':16s} {f['total']:>9,d} of {f['available']:,}  (margin {f['margin']:,})",
             "  RAM              bytes",
             f"    {'arena':16s} {m['arena']['used']:>9,d}  ({m['arena']['count']} buffers, {m['arena']['requested']:,} B "
             "requested before reuse)",
             f"    {'state/cache':16s} {m['state']:>9,d}",
             f"    {'inputs/outputs':16s} {m['io']:>9,d}",
             *([f"    {'stack (step)':16s} {m['stack']:>9,d}"] if m.get("stack") else []),
             *([f"    {'decision layer':16s} {m['decision']:>9,d}"] if m.get("decision") else []),
             *([f"    {'anomaly layer':16s} {m['anomaly']:>9,d}"] if m.get("anomaly") else []),
             f"    {'total':16s} {m['total']:>9,d} of {m['available']:,}  (margin {m['margin']:,})",
             (f"  cost per reading: {c['macs']:,} MACs, {c['cycles']:,} cycles ({c['cycles_per_mac']:.2f} per MAC)"
              if not c['cycles_per_op'] else
              f"  cost per reading: {c['macs']:,} MACs x {c['cycles_per_mac']:g} + {c['other_ops']:,} other ops x "
              f"{c['cycles_per_op']:g} = {c['cycles']:,} cycles")
             + f" = {c['us_per_reading']:,.0f} us; highest sample rate about {c['max_rate_hz']:,.0f} Hz ({c['source']})",
             *([f"  decision layer: {r['decision']['cycles']:,} cycles of those ({r['decision']['source']})"]
               if r.get("decision") else []),
             *([f"  anomaly layer: {r['anomaly']['cycles']:,} cycles of those ({r['anomaly']['source']})"]
               if r.get("anomaly") else []),
             f"  fits: {'yes' if r['fits'] else 'NO'}"]
    if r.get("note"):
        lines.append(f"  note: {r['note']}")
    if r.get("history_note"):
        lines.append(f"  history: {r['history_note']}")
    if "longest_history" in r:
        whole = r.get("window") and r["longest_history"] >= r["window"]
        lines.append(f"  longest history that fits in RAM: {r['longest_history']:,} readings"
                     + (" (the whole window: the model reads no older ones)" if whole else ""))
    return "\n".join(lines)


@firmware.command(name="check")
@click.argument("model", type=click.Path())
@click.option("--target", required=True, help="A profile name (see `edgeseq firmware targets`).")
@click.option("--history", type=int, help="Transformer: readings held in the cache (past a windowed model's "
              "window: planned at the window, the most it reads).")
@click.option("--cycles-per-mac", type=Finite(min=0, min_open=True), help="Override the target's estimate.")
@click.option("--compiler", type=click.Choice(["gcc", "clang"]), default="gcc", show_default=True,
              help="The compiler the firmware is built with: clang scales gcc's measured code, stack and cycles by "
              "clang's (firmware_sim/targets.py CLANG).")
@_targets_file_option
@_json_option
@_errors
def firmware_check(model, target, history, cycles_per_mac, compiler, targets_file, as_json):
    """Flash and RAM plan against a part, and cycles and time per reading.

    Static int8 RNN/GRU/LSTM/SSM and windowed Transformer are planned as the integer-only C step
    runs them (`firmware emit`): on Cortex-M0+, M4, M7 and M33 parts with code size, stack and
    cycles measured on emulated cores (`edgeseq firmware measure`; firmware_sim/targets.py
    MEASURED, built by arm-none-eabi-gcc; `--compiler clang` for clang's). Other models are
    planned as their ONNX graph runs (float intermediates), with per-core estimates from
    published instruction timings; pass --cycles-per-mac to refine. Exit 1 if it does not fit.
    """
    from firmware_sim.plan import check_model, verdict
    from firmware_sim.targets import get_target

    r = check_model(model, get_target(target, targets_file), history, cycles_per_mac, compiler=compiler)
    click.echo(json.dumps(r, indent=2) if as_json else _fmt_check(r))
    why = verdict(r)
    if why:
        raise EdgeseqError(why)


@firmware.command(name="measure")
@click.argument("model", type=click.Path())
@click.option("--target", help="A profile name: its core is emulated and its clock gives the time per reading.")
@click.option("--core", type=click.Choice(["cortex-m0plus", "cortex-m4", "cortex-m7", "cortex-m33"]),
              help="The core to emulate (instead of --target's).")
@click.option("--opt", type=click.Choice(["-Os", "-O2", "-O3"]), default="-O2", show_default=True,
              help="Optimisation level of the cross compiler.")
@click.option("--compiler", type=click.Choice(["gcc", "clang"]),
              help="The cross compiler: gcc (arm-none-eabi-gcc) or clang (pip install ziglang); default gcc where "
              "installed, else clang.")
@click.option("--readings", type=click.IntRange(min=10, max=20000), default=1000, show_default=True,
              help="Readings streamed through the compiled step and compared with the simulator.")
@click.option("--data", help="Readings to stream: the test split of this data (default: the data the model was "
              "trained on, as its file records; for files exported before it did, the embedded data when its "
              "channels are the model's, else synthetic readings over each channel's int8 range).")
@_targets_file_option
@_json_option
@_errors
def firmware_measure(model, target, core, opt, compiler, readings, data, targets_file, as_json):
    """Cross-compile the emitted int8 step (RNN, GRU, LSTM, SSM, Transformer) for a Cortex-M core, run it on
    an emulated core, and report measured sizes (.text, .rodata), stack, instructions per
    reading and the instruction mix, with cycles modelled from that mix (Arm TRM timings),
    after checking it bit-exact with the simulator. Needs arm-none-eabi-gcc (Debian:
    gcc-arm-none-eabi) or `pip install ziglang`, and `pip install ".[firmware]"` in edgeseq's clone.

    \b
      edgeseq firmware measure models/gru-int8.onnx --target nrf52840
      edgeseq firmware measure models/lstm-int8.onnx --core cortex-m0plus --opt -Os --json
      edgeseq firmware measure models/ssm-int8.onnx --core cortex-m4 --compiler clang
    """
    from firmware_sim.measure import core_of, measure
    from firmware_sim.targets import get_target

    if not target and not core:
        raise UsageError("give --target (a profile) or --core (cortex-m0plus, cortex-m4, cortex-m7, cortex-m33)")
    t = get_target(target, targets_file) if target else None
    r = measure(model, core or core_of(t), opt, readings=readings, target=t, data=data, compiler=compiler)
    if as_json:
        _echo_json(r)
        return
    sec = r["sections"]
    size = (f"d_model {r['hidden']}, d_state {r['d_state']}, {'selective' if r['selective'] else 'fixed'} decay"
            if r["arch"] == "ssm" else f"d_model {r['hidden']}, {r['heads']} head(s), window {r['window']}, counted at "
            "a full window" if r["arch"] == "transformer" else f"hidden {r['hidden']}")
    lines = [f"{printable(r['model'])} ({r['arch']}, {size}) on an emulated {r['core']} ({r['cpu_model']}), "
             f"{r['compiler']} {r['opt']}{', SMLAD path' if r['dsp_path'] else ', portable path'}",
             f"  bit-exact with `firmware simulate` over {r['bit_exact_readings']:,} readings ({printable(r['readings_from'])})",
             f"  measured: .text {sec['text']:,} B, .rodata {sec['rodata']:,} B, .data {sec['data']:,} B, "
             f".bss {sec['bss']:,} B; stack {r['stack_bytes']:,} B per step (plus {r['scratch_bytes']:,} B of "
             f"caller scratch and {r['state_bytes']:,} B of state)",
             f"  measured: {r['instructions_per_step']:,.0f} instructions per reading = "
             f"{r['instructions_per_mac']:.2f} per MAC ({r['macs']:,} MACs); 64-bit helpers: "
             + (", ".join(f"{k} {v:.0f}" for k, v in r["helper_instructions_per_step"].items()) or "none")]
    if "cycles_per_step" in r:
        lines.append(f"  modelled: {r['cycles_per_step']:,.0f} cycles per reading ({r['cycles_per_mac']:.2f} per MAC)"
                     + (f" = {r['us_per_reading']:,.0f} us at {t.clock_mhz:g} MHz, about {r['max_rate_hz']:,.0f} "
                        "readings/s" if t is not None else ""))
    for key in ("decision", "anomaly"):
        if not r.get(key):
            continue
        d = r[key]
        seen = f"{d.get('events_checked', 0)} events" + (f" and {d['candidates_checked']} candidates"
                                                          if "candidates_checked" in d else "")
        lines.append(f"  {key} layer ({d['settings']}): bit-exact over {d['bit_exact_readings']:,} readings ({seen} "
                     f"checked{'; more --readings would cover events' if not d.get('events_checked') else ''}); measured {d['instructions_per_step']:,.0f} instructions per reading "
                     f"({d['share_of_step']:.1%} of the step)"
                     + (f", modelled {d['cycles_per_step']:,.0f} cycles ({d['cycles_share']:.1%})"
                        if "cycles_per_step" in d else ""))
    if r.get("targets"):
        d = r["targets"]
        lines.append(f"  targets (es_targets, {d['targets']} value(s) in their units): bit-exact over "
                     f"{d['bit_exact_readings']:,} readings; measured {d['instructions_per_step']:,.0f} instructions "
                     f"per reading ({d['share_of_step']:.1%} of the step)"
                     + (f", modelled {d['cycles_per_step']:,.0f} cycles ({d['cycles_share']:.1%})"
                        if "cycles_per_step" in d else ""))
    lines.append("  most executed: " + ", ".join(f"{k} {v:,.0f}" for k, v in r["mix_top"][:8]))
    click.echo("\n".join(lines))


@firmware.command(name="simulate")
@click.argument("model", type=click.Path())
@click.option("--data", help=_DATA_HELP)
@click.option("--float", "float_model", type=click.Path(),
              help="The float twin (the float model exported from the same run), for accuracy and output "
                   "difference; any other model is refused.")
@_json_option
@_errors
def firmware_simulate(model, data, float_model, as_json):
    """Run the int8 step integer-only (no float on the path) over the test split (per sequence,
    and joined end to end never reset, scored per reading) and a long stream, of the model's
    training data unless --data says otherwise. RNN, GRU, LSTM, SSM (fixed or selective) and the
    windowed Transformer (window > 0). --float takes only the int8 model's float twin: a float
    model of the same architecture, features, labels (in the same order), settings and
    training data, scoring what the int8 export measured for it; anything else (another
    model, an int8 file, another training of the same settings) is refused in one line."""
    from firmware_sim.simulate import simulate

    r = simulate(model, data, float_model)
    if not r.get("float_twin", {"verified": True})["verified"]:
        click.echo(f"note: --float '{printable(float_model)}' was {r['float_twin']['how']}; export both files "
                   "again from the run to have that checked", err=True)
    if as_json:
        _echo_json(r)
        return
    if r.get("task") == "anomaly":
        from edgeseq.cli.train import anomaly_line
        click.echo(f"{r['arch']} anomaly model, integer-only on {printable(r['data'])} test ({r['test_sequences']} recordings):")
        for who, name in (("integer_only", "integer-only (firmware)"), ("onnxruntime_int8", "onnxruntime int8"),
                          ("float", "float")):
            if who in r:
                click.echo(f"  {name}: per recording {anomaly_line(r[who]['per_recording'])}; never reset "
                           f"{anomaly_line(r[who]['never_reset'])}")
        d = r["vs_onnxruntime_int8"]
        click.echo(f"  forecasts vs onnxruntime int8 over {r['stream_readings']} readings: mean {d['mean_rel']:.2%} of "
                   f"range, max {d['max_rel']:.1%}")
        return
    if r.get("task") == "regress":
        from edgeseq.runtime.regress import line
        click.echo(printable(f"{r['arch']} regression model, integer-only on {r['data']} test ({r['test_sequences']} "
                             f"recordings; persistence: each target {r['lag']} readings earlier):"))
        for who, name in (("integer_only", "integer-only (firmware)"), ("onnxruntime_int8", "onnxruntime int8"),
                          ("float", "float")):
            if who in r:
                click.echo(printable(f"  {name}: per recording {line(r[who]['per_recording'])}; never reset "
                                     f"{line(r[who]['never_reset'])}"))
        d = r["vs_onnxruntime_int8"]
        click.echo(f"  outputs vs onnxruntime int8 over {r['stream_readings']} readings: mean {d['mean_rel']:.2%} of "
                   f"range, max {d['max_rel']:.1%}")
        return
    a = r["accuracy"]
    click.echo(f"{r['arch']} integer-only on {printable(r['data'])} test ({r['test_sequences']} sequences): accuracy "
               f"{a['integer_only']:.3f}; onnxruntime int8 {a['onnxruntime_int8']:.3f}"
               + (f"; float {a['float']:.3f}" if "float" in a else ""))
    n = r["never_reset"]
    click.echo(f"  never reset (test sequences joined, scored per reading): integer-only {n['integer_only']:.4f}; "
               f"onnxruntime int8 {n['onnxruntime_int8']:.4f}" + (f"; float {n['float']:.4f}" if "float" in n else ""))
    for key, name in (("vs_onnxruntime_int8", "onnxruntime int8"), ("vs_float", "float")):
        if key in r:
            d = r[key]
            click.echo(f"  logits vs {name} over {r['stream_readings']} readings: mean {d['mean_rel']:.2%} of range, "
                       f"max {d['max_rel']:.1%}, same top class {d['argmax_agreement']:.1%}")


@firmware.command(name="emit")
@click.argument("model", type=click.Path())
@click.option("--out", required=True, type=click.Path(), help="Directory for the C files.")
@click.option("--prefix", default="es", show_default=True,
              help="Name prefix of every symbol, so several models link into one firmware.")
@click.option("--force", is_flag=True,
              help="Replace files of the same names in --out that emit did not write (their first line lacks "
                   "'Generated by edgeseq firmware emit').")
@_json_option
@_errors
def firmware_emit(model, out, prefix, force, as_json):
    """Write C99 for the integer-only step: PREFIX_model.h (the API), PREFIX_model.c (weights
    and step), es_kernels.h (shared kernels, with an SMLAD path on Cortex-M4/M7/M33) and a host
    example (PREFIX_example.c), and es_tables.c (the sigmoid/tanh tables, compiled once per
    firmware); for an SSM also es_ssm_int.h (LayerNorm, state update, gate) and es_ssm_tables.c;
    for a windowed Transformer also es_xf_int.h (KV ring, attention, GELU) and es_xf_tables.c.
    The caller passes PREFIX_SCRATCH_WORDS int32 words of working memory to each step.

    Every file starts with a 'Generated by edgeseq firmware emit' line, and emit replaces only
    such files: one of the same name without it (your own, or one whose line you deleted to
    keep your edits) is refused before anything is written; --force replaces it. The files are
    written all or nothing.

    \b
      edgeseq firmware emit models/gru-int8.onnx --out firmware/gru --prefix gesture
    """
    from firmware_sim.cemit import check_prefix, emit
    from firmware_sim.intsim import from_onnx

    check_prefix(prefix)
    if Path(out).exists() and not Path(out).is_dir():
        raise UsageError(f"--out '{printable(out)}' is a file; give a directory for the C files (it is created if missing)")
    m = from_onnx(model)
    with _writing(out):
        r = emit(m, out, prefix=prefix, protect=(model,), force=force)
    if as_json:
        _echo_json(r)
    else:
        own = {f"{prefix}_model.h", f"{prefix}_model.c", f"{prefix}_example.c"}
        shared = [f for f in r["files"] if f.startswith("es_") and f not in own]
        shown = printable(out)
        tables = " ".join(f"{shown}/{f}" for f in shared if f.endswith(".c"))
        click.echo(f"wrote {shown}/{prefix}_model.h, {prefix}_model.c ({r['int8_weights']:,} int8 weights, "
                   f"{r['tables_bytes']:,} B of tables), {', '.join(shared)} and {prefix}_example.c; the step needs "
                   f"{r['scratch_bytes']:,} B of scratch and {r['state_bytes']:,} B of state; readings are int32 "
                   f"with {', '.join(map(str, r['in_frac']))} fractional bits per channel"
                   + (f", mapped to int8 by a threshold table ({r['reading_table_bytes']:,} B; the input transform)"
                      if r.get("reading_table_bytes") else "")
                   + f"; build: gcc -std=c99 -O2 -o stream {shown}/{prefix}_example.c {shown}/{prefix}_model.c {tables}")
