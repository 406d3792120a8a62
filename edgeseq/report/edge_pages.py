"""`edgeseq report`'s pages: the plots (matplotlib), the tables, the summary lines, report.md
and index.html, all from the figures `edgeseq.report.edge` measured (report.json)."""

from __future__ import annotations

from pathlib import Path

BATCHES = [1, 16, 256, 1024]
MARKERS = {"rnn": "o", "gru": "s", "lstm": "^", "ssm": "D", "transformer": "v", "transformer-window": "x"}
COLORS = {"rnn": "tab:green", "gru": "tab:blue", "lstm": "tab:purple", "transformer": "tab:red", "ssm": "tab:brown",
          "transformer-window": "tab:orange", "recompute": "black"}

def _color(name):
    return COLORS.get(name.replace("-int8", ""), "gray")


def latency_at(lat: dict, name: str, step: int) -> dict:
    for row in lat["series"][name]:
        if row["from"] <= step <= row["to"]:
            return row
    return lat["series"][name][-1]


# --- 4. throughput ----------------------------------------------------------------------------

# --- plots ------------------------------------------------------------------------------------

def _finish(fig, ax, path, xlabel, ylabel, title, grid, legend):
    import matplotlib.pyplot as plt
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, **grid)
    ax.legend(**legend)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plots(r: dict, out: Path) -> dict:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = {}
    mem = r["memory"]
    fig, ax = plt.subplots(figsize=(8, 5))
    window = r["models"]["transformer"]["config"].get("window") or 0
    for name, s in mem["series"].items():
        if name == "transformer-window" and s["bytes"] == mem["series"]["transformer"]["bytes"]:
            continue                       # the window bounds both alike: one line
        label = {"transformer": "Transformer, KV cache" + (f" (its {window}-reading window)" if window else ""),
                 "transformer-window": f"Transformer, KV cache bounded at {s['max_history']}"}.get(
                     name, f"{name.upper()} state")
        ax.plot(s["history"], s["bytes"], marker=MARKERS.get(name, "o"), ms=5, mfc="none", color=_color(name),
                label=f"{label} ({s['backend']})")           # hollow markers: equal states stay visible
    g = mem["crossover"]["gru"]
    ax.axhline(g["footprint_bytes"], color="tab:blue", ls=":", lw=1)
    ax.text(1.1, g["footprint_bytes"] * 1.15, f"GRU whole footprint (state + float model, {g['footprint_bytes']:,} B)",
            fontsize=8, color="tab:blue")
    for key, what in (("passes_state_at", "passes GRU state"), ("passes_footprint_at", "passes GRU footprint")):
        h = g[key]
        if h is None:                      # the cache stays below it: its window bounds it
            continue
        y = h * mem["transformer_bytes_per_reading"]
        ax.plot([h], [y], marker="X", ms=10, color="black")
        ax.annotate(f"{what}\nat reading {h}", (h, y), textcoords="offset points", xytext=(8, -22), fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _finish(fig, ax, out / "memory.png", xlabel="history (readings streamed)",
            ylabel="bytes held per stream",
            title="Memory per stream: fixed state vs a KV cache that grows (to its window)",
            grid=dict(which="both", alpha=0.3), legend=dict(fontsize=8, loc="center right"))
    files["memory"] = "memory.png"

    lat = r["latency"]
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, rows in lat["series"].items():
        xs = [(row["from"] + row["to"]) / 2 for row in rows]
        ls = "--" if name.endswith("-int8") else "-"
        ax.plot(xs, [row["median_us"] for row in rows], ls=ls, color=_color(name), label=f"{name} median")
        ax.plot(xs, [row["p99_us"] for row in rows], ls=":", lw=0.8, color=_color(name))
    if lat["recompute"]:
        ax.plot([p["step"] for p in lat["recompute"]], [p["median_us"] for p in lat["recompute"]], "k-o", ms=4,
                label="Transformer, recompute history (no cache)")
    ref = lat["reference"]
    ax.axhline(ref["ort_floor_session_run"]["median_us"], color="gray", lw=1, ls="-.")
    ax.text(1.1, ref["ort_floor_session_run"]["median_us"] * 0.8, "onnxruntime per-call floor", fontsize=8, color="gray")
    ax.axhline(ref["gru_torch_eager"]["median_us"], color="tab:blue", lw=1, ls="-.")
    ax.text(1.1, ref["gru_torch_eager"]["median_us"] * 1.08, "GRU step, torch eager", fontsize=8, color="tab:blue")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _finish(fig, ax, out / "latency.png", xlabel="step index (readings streamed)",
            ylabel="microseconds per reading (dotted: p99)",
            title="Latency per reading: flat for recurrent models, growing with a KV cache",
            grid=dict(which="both", alpha=0.3), legend=dict(fontsize=7, ncol=2, loc="upper left"))
    files["latency"] = "latency.png"

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, rows in r["throughput"].items():
        ls = "--" if name.endswith("-int8") else "-"
        ax.plot([x["streams"] for x in rows], [x["readings_per_s"] for x in rows], ls=ls, marker="o",
                color=_color(name), label=f"{name} ({rows[-1]['vs_single_stream_calls']:.0f}x at B={rows[-1]['streams']})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _finish(fig, ax, out / "throughput.png", xlabel="streams per call (B)",
            ylabel="readings per second",
            title="Throughput: many streams in one call (ratio vs B single-stream calls)",
            grid=dict(which="both", alpha=0.3), legend=dict(fontsize=7))
    files["throughput"] = "throughput.png"

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, s in r["rss"].items():
        ls = "--" if name.endswith("-int8") else "-"
        ax.plot([p[0] for p in s["points"]], [p[1] / 1024 for p in s["points"]], ls=ls, color=_color(name),
                label=f"{name} ({s['readings']:,} readings)")
    _finish(fig, ax, out / "rss.png", xlabel="readings streamed",
            ylabel="process RSS (MiB)",
            title="Process memory over a long stream (one process per model)",
            grid=dict(alpha=0.3), legend=dict(fontsize=7))
    files["rss"] = "rss.png"
    if (r.get("mcu") or {}).get("available"):
        files["mcu"] = _plot_mcu(r["mcu"], out)
    return files


def _plot_mcu(p: dict, out: Path) -> str:
    """RAM and modelled cycles per reading against history on the emulated core."""
    import matplotlib.pyplot as plt

    fig, (ram, cyc) = plt.subplots(1, 2, figsize=(10, 4.5))
    xs = [t["history"] for t in p["transformer"]]
    for ax, key in ((ram, "ram_bytes"), (cyc, "cycles_per_step")):
        ax.plot(xs, [t[key] for t in p["transformer"]], "v-", color=COLORS["transformer"],
                label="Transformer int8, a KV ring of `history` rows")
        if key == "ram_bytes":
            ax.plot(xs, [t["cache_bytes"] for t in p["transformer"]], "v:", color=COLORS["transformer"],
                    label="  of which the KV ring")
        for name, f in p["fixed"].items():
            ax.axhline(f[key], color=_color(name), ls="--", label=f"{name.upper()} int8 (fixed state)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("history kept (readings; the Transformer's window)")
        ax.grid(True, which="both", alpha=0.3)
    ram.set_ylabel(f"RAM per stream on the {p['target']} (bytes)")
    cyc.set_ylabel(f"cycles per reading ({p['core']} {p['opt']}, modelled)")
    ram.legend(fontsize=7)
    fig.suptitle(f"On a microcontroller: int8 steps measured on an emulated {p['core']}, planned on the {p['target']}")
    fig.tight_layout()
    fig.savefig(out / "mcu.png", dpi=110)
    plt.close(fig)
    return "mcu.png"


def _mcu_line(p: dict) -> str:
    """One line: the panel's gist, or why it was not measured."""
    if not p.get("available"):
        return f"On a microcontroller: not measured ({p.get('reason', 'no cross compiler or emulator')})."
    g = p["fixed"].get("gru") or next(iter(p["fixed"].values()))
    t = p["transformer"]
    return (f"On an emulated {p['core']} ({p['opt']}, planned on the {p['target']}): the int8 {g['arch'].upper()} "
            f"holds {g['ram_bytes']:,} B of RAM and takes {g['cycles_per_step']:,.0f} cycles a reading whatever the "
            f"history; the int8 Transformer takes {t[0]['ram_bytes']:,} B and {t[0]['cycles_per_step']:,.0f} cycles "
            f"keeping {t[0]['history']} readings, {t[-1]['ram_bytes']:,} B and {t[-1]['cycles_per_step']:,.0f} cycles "
            f"keeping {t[-1]['history']}.")


# --- text -------------------------------------------------------------------------------------

MODES = {"early-stopping": "early stopping", "budget": "the data's epoch budget, no validation split"}


def schedule_text(s: dict) -> str:
    """The phrase shown beside a model's accuracy: 'after 5 epochs (fixed, quick: not trained to
    convergence)', 'after 41 of up to 300 epochs (early stopping, best epoch 29)', ... from a
    schedule as `edgeseq.report.edge.schedule_of` reads it."""
    n, top, mode = s.get("epochs_run"), s.get("max_epochs"), s.get("mode")
    if n is None:
        return "(schedule not recorded)"
    final = s.get("final_epochs") or 0
    run = n - final                                    # the final epochs over every sequence come on top
    head = f"after {run} epoch{'s' if run != 1 else ''}"
    if mode == "early-stopping" and top is not None and top != run:
        head = f"after {run} of up to {top} epochs"
    if final:
        head += f" and {final} final"
    notes = [MODES.get(mode, mode or "fixed")]
    if s.get("best_epoch") is not None and mode == "early-stopping":
        kept = s.get("kept") or "best"
        if kept == "best":
            notes[0] += f", best epoch {s['best_epoch']}"
        else:
            notes[0] += ", kept the last epoch" + (": underfit" if "underfit" in kept else "")
    if s.get("attempts"):
        n = len(s["attempts"])
        notes.append(f"attempt {s['attempt']} of {n} kept: the first run stalled underfit" if s["attempt"] > 1
                     else f"the first of {n} attempts kept: it stalled underfit and no restart fit better"
                     + (" (one diverged)" if any("left_out" in a for a in s["attempts"]) else ""))
    if s.get("quick"):
        notes.append("quick: not trained to convergence")
    elif s.get("converged") is False:
        notes.append("not converged")
    return f"{head} ({', '.join(notes)})"


def _accuracy_lines(r: dict) -> list:
    """The models' test accuracy, each with its schedule, then a line for each model at or below
    chance or flagged as not converged, and one for the models a quick report trained (cut short
    on purpose: that line, not one each, says they did not converge)."""
    m = r["models"]
    if not m:
        return []
    one = next(iter(m.values()))
    chance = f" (chance {one['chance']:.3f} with {one['classes']} classes)" if "chance" in one else ""
    lines = [f"Test accuracy per sequence, float / int8{chance}: " + "; ".join(f"{a} {v['float']['accuracy']:.3f} / {v['int8']['accuracy']:.3f} "
                                      f"{v.get('schedule', {}).get('text', '(schedule not recorded)')}"
                                      for a, v in m.items()) + "."]
    b = r.get("baseline") or {}
    from edgeseq.train.baseline import below, describe, scored_on
    if "accuracy" in b:
        lines.append(f"Baseline: {describe(b)}.")
    elif b.get("skipped"):
        lines.append(f"Baseline: {b.get('method', '1-NN DTW')} not scored: {b['skipped'].rstrip('.')}.")
    for a, v in m.items():
        chance, sched = v.get("chance"), (v.get("schedule") or {}).get("text", "(schedule not recorded)")
        under = [k for k in ("float", "int8") if below(v[k]["accuracy"], b)]
        if under and not (v.get("schedule") or {}).get("quick"):              # quick: see below
            scores = " / ".join(f"{v[k]['accuracy']:.3f}" for k in under)
            lines.append(f"Warning: {a} ({' and '.join(under)}) scores {scores} per sequence, below {b['method']}'s "
                         f"{b['accuracy']:.3f} {scored_on(b)}, {sched}.")
        low = [k for k in ("float", "int8") if chance is not None and v[k]["accuracy"] <= chance + 1e-9]
        if low:
            scores = " / ".join(f"{v[k]['accuracy']:.3f}" for k in low)
            lines.append(f"Warning: {a} ({' and '.join(low)}) scores {scores}, at or below chance ({chance:.3f} with "
                         f"{v['classes']} classes), {sched}: it has not learnt the task; its memory, "
                         "latency and size figures stand.")
        if (v.get("schedule") or {}).get("converged") is False and not v["schedule"].get("quick"):  # quick: see below
            advice = v["schedule"].get("advice")
            lines.append(f"Warning: {a} did not converge, {sched}" + (f": {advice}." if advice else "."))
    quick = [a for a, v in m.items() if (v.get("schedule") or {}).get("quick")]
    if quick:
        lines.append(f"Quick: {', '.join(quick)} trained for a few fixed epochs, not to convergence: their accuracy "
                     "says little about the architectures. For that, run without --quick, or pass trained runs "
                     "with --runs.")
    return lines


def _passes(at, mem: dict) -> str:
    return (f"reading {at:,}" if at is not None
            else f"never (its window holds it at {mem['transformer_most_bytes']:,} B)")


def _tables(r: dict) -> list:
    """[(title, header, rows)] shared by the Markdown and the HTML page."""
    m = r["models"]
    t1 = ("Models (accuracy per sequence, reset at each start / continuous, never reset, per reading; "
          "trained: the schedule behind both)",
          ["model", "parameters", "MACs/reading", "float file", "int8 file", "float acc", "int8 acc", "trained",
           "follow a change"],
          [[a, f"{v['parameters']:,}",
            f"{v['macs_per_reading']:,}" + (" (at 16)" if a == "transformer" else ""),
            f"{v['float']['bytes']:,} B", f"{v['int8']['bytes']:,} B",
            f"{v['float']['accuracy']:.3f} / {v['float']['continuous_accuracy']:.3f}",
            f"{v['int8']['accuracy']:.3f} / {v['int8']['continuous_accuracy']:.3f}",
            v.get("schedule", {}).get("text", "(schedule not recorded)"),
            "-" if v["float"]["median_readings_to_follow"] is None
            else f"{v['float']['median_readings_to_follow']:.0f} readings"] for a, v in m.items()])
    mem = r["memory"]
    t2 = ("Where the Transformer's cache passes the recurrent models",
          ["recurrent model", "state", "cache passes state at", "whole footprint (float)", "passes it at",
           "footprint (int8)", "passes it at"],
          [[a, f"{c['state_bytes']:,} B", _passes(c['passes_state_at'], mem), f"{c['footprint_bytes']:,} B",
            _passes(c['passes_footprint_at'], mem), f"{c['footprint_int8_bytes']:,} B",
            _passes(c['passes_footprint_int8_at'], mem)] for a, c in mem["crossover"].items()])
    lat = r["latency"]
    H = lat["history"]
    t3 = ("Latency per reading (microseconds, median / p99)",
          ["model", "backend", "step ~16", f"step ~{H}"],
          [[n, rows[0].get("backend", "-"), f"{latency_at(lat, n, 16)['median_us']:.1f} / {latency_at(lat, n, 16)['p99_us']:.1f}",
            f"{latency_at(lat, n, H)['median_us']:.1f} / {latency_at(lat, n, H)['p99_us']:.1f}"]
           for n, rows in lat["series"].items()]
          + [["Transformer recompute (no cache)", "onnxruntime",
              *[next((f"{p['median_us']:.1f}" for p in lat["recompute"] if p["step"] == s), "-") for s in (16, H)]],
             ["onnxruntime per-call floor", "onnxruntime", f"{lat['reference']['ort_floor_session_run']['median_us']:.1f}", "same"],
             ["GRU step, torch eager", "torch", f"{lat['reference']['gru_torch_eager']['median_us']:.1f}", "same"]])
    t4 = ("Throughput: B streams in one call",
          ["model", "backend"] + [f"B={b} readings/s (x vs B calls)" for b in BATCHES],
          [[n, rows[0].get("backend", "-")] + [f"{x['readings_per_s']:,.0f} ({x['vs_single_stream_calls']:.1f}x)" for x in rows]
           for n, rows in r["throughput"].items()])
    t5 = ("Process memory over a long stream",
          ["model", "backend", "readings", "RSS at 5%", "RSS at end", "growth", "peak", "state held at end"],
          [[n, s.get("backend", "-"), f"{s['readings']:,}", f"{s['points'][0][1] / 1024:.1f} MiB", f"{s['points'][-1][1] / 1024:.1f} MiB",
            f"{s['growth_kb_after_first_5pct'] / 1024:+.1f} MiB", f"{s['peak_kb'] / 1024:.1f} MiB",
            f"{s['state_bytes']:,} B"] for n, s in r["rss"].items()])
    out = [t1, t2, t3, t4, t5]
    ev = r.get("events") or {}
    if ev.get("rows"):
        f3 = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        out.append((f"Events: int8 models with a decision layer calibrated for {ev['budget']:g} false alarms per hour "
                    f"on the training split, scored on {ev['orders']} never-reset streams of the test split "
                    f"(background: {', '.join(ev['background']) or 'none'}, {ev['rate_hz']:g} Hz)",
                    ["model", "event F1", "false alarms / h", "missed / events", "fragmented", "delay median / p90",
                     "settings"],
                    [[a, f3(v["f1"]), f"{v['false_alarms_per_hour']:.1f} ({v['false_alarms']})",
                      f"{v['deleted']} / {v['events']}", str(v["fragmented"]),
                      "-" if v["delay_median"] is None else f"{v['delay_median']:.0f} / {v['delay_p90']:.0f} readings",
                      v["decision"]] for a, v in ev["rows"].items()]))
    p = r.get("mcu") or {}
    if p.get("available"):
        rows = [(n.upper() + " int8", "any", f) for n, f in p["fixed"].items()]
        rows += [("Transformer int8", f"{t['history']:,}", t) for t in p["transformer"]]
        out.append((f"On a microcontroller: {p['core']} {p['opt']} emulated (bit-exact over {p['readings']} readings, "
                    f"{p['counted']} counted), planned on the {p['target']}",
                    ["model", "history kept", "RAM: state / KV ring", "RAM in all", "flash", "instr. / MAC",
                     "cycles / reading (modelled)", "time / reading"],
                    [[name, h, f"{f['state_bytes']:,} B", f"{f['ram_bytes']:,} B", f"{f['flash_bytes']:,} B",
                      f"{f['instructions_per_mac']:.2f}", f"{f['cycles_per_step']:,.0f}",
                      f"{f['us_per_reading']:,.0f} us"] for name, h, f in rows]))
    return out


def _summary(r: dict) -> list:
    c, lat, th = r["memory"]["crossover"], r["latency"], r["throughput"]
    H = lat["history"]
    g16, gH = latency_at(lat, "gru", 16)["median_us"], latency_at(lat, "gru", H)["median_us"]
    t16, tH = latency_at(lat, "transformer", 16)["median_us"], latency_at(lat, "transformer", H)["median_us"]
    b = th["gru"][-1]
    mem = r["memory"]
    foot = (f"at reading {c['gru']['passes_footprint_at']:,}" if c["gru"]["passes_footprint_at"] is not None
            else f"never: its window holds it at {mem['transformer_most_bytes']:,} B")
    backends = sorted({s["backend"] for s in mem["series"].values()})
    return [
        f"The Transformer's cache grows by {mem['transformer_bytes_per_reading']:.0f} B per reading per stream; "
        f"it passes the GRU's {c['gru']['state_bytes']} B state at reading {c['gru']['passes_state_at']} and the "
        f"GRU's whole float footprint ({c['gru']['footprint_bytes']:,} B) {foot} "
        f"(step backend: {' and '.join(backends)}).",
        f"GRU latency per reading: {g16:.1f} us at step 16, {gH:.1f} us at step {H}. "
        f"Transformer with its cache: {t16:.1f} us at 16, {tH:.1f} us at {H}.",
        f"GRU with {b['streams']} streams in one call: {b['readings_per_s']:,.0f} readings/s, "
        f"{b['vs_single_stream_calls']:.0f}x the same readings as single-stream calls.",
        "int8 vs float file size: " + ", ".join(
            f"{a} {v['int8']['bytes'] / 1000:.1f} vs {v['float']['bytes'] / 1000:.1f} KB" for a, v in r["models"].items()) + ".",
    ] + ([_mcu_line(r["mcu"])] if "mcu" in r else []) + _events_lines(r) + _accuracy_lines(r)


def _events_lines(r: dict) -> list:
    """One line on the events table (or why there is none); none for a report made before it."""
    ev = r.get("events")
    if not ev:
        return []
    if ev.get("skipped"):
        return [f"Events: not measured: {ev['skipped']}."]
    best = max(ev["rows"].items(), key=lambda kv: kv[1]["f1"] or 0)
    return [f"Events (int8, decision layer calibrated on the training split for {ev['budget']:g} false alarms per "
            f"hour): best event F1 {best[0]} {best[1]['f1'] or 0:.3f} with {best[1]['false_alarms_per_hour']:.1f} false "
            "alarms per hour on the test split (the table has every model; `edgeseq calibrate` and `eval`)."]


def _phase_times(meta: dict) -> str:
    """' (per phase, wall / CPU seconds: models 110 / 65, ...)', or '' for a report without them."""
    wall, cpu = meta.get("phase_seconds") or {}, meta.get("phase_cpu_seconds") or {}
    if not wall:
        return ""
    return " (per phase, wall / CPU seconds: " + ", ".join(
        f"{k} {v:.0f} / {cpu[k]:.0f}" if k in cpu else f"{k} {v:.0f}" for k, v in wall.items()) + ")"


def _markdown(r: dict, files: dict) -> str:
    m = r["meta"]
    lines = ["# edgeseq report: fixed recurrent state vs growing KV cache", "",
             f"Measured {m['date']} on {m['machine']['machine']} ({m['machine']['cpus']} CPUs), "
             f"onnxruntime {m['machine']['onnxruntime']}, torch {m['machine'].get('torch', '-')}, "
             f"numpy {m['machine']['numpy']}, Python {m['machine']['python']}; one thread per session. "
             f"Data: {m.get('data', '-')}. "
             f"Mode: {'quick' if m['quick'] else 'full'}; latency repeats {r['latency']['repeats']} streams of "
             f"{r['latency']['history']} readings; warm-up {m['settings']['warmup']} calls; {m['seconds']:.0f} s in all"
             + _phase_times(m) + ".",
             ""] + [f"- {s}" for s in _summary(r)] + [""]
    plots = {"memory": "Memory per stream", "latency": "Latency per reading", "throughput": "Throughput",
             "rss": "Process memory", "mcu": "On a microcontroller"}
    for title, head, rows in _tables(r):
        lines += [f"## {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines.append("")
    for key, title in plots.items():
        if key in files:
            lines += [f"![{title}]({files[key]})", ""]
    return "\n".join(lines)


def _html(r: dict, files: dict) -> str:
    import html
    md_head = _markdown(r, files).split("\n")[2]
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>edgeseq report</title>",
             "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;"
             "text-align:right}td:first-child,th:first-child{text-align:left}img{max-width:100%}</style>",
             "</head><body><h1>edgeseq report: fixed recurrent state vs growing KV cache</h1>",
             f"<p>{html.escape(md_head)}</p><ul>"] + [f"<li>{html.escape(s)}</li>" for s in _summary(r)] + ["</ul>"]
    for key, title in (("memory", "Memory per stream"), ("latency", "Latency per reading")):
        parts.append(f"<h2>{title}</h2><img src='{files[key]}' alt='{title}'>")
    for title, head, rows in _tables(r):
        parts.append(f"<h2>{html.escape(title)}</h2><table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head)
                     + "</tr>" + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                                         for row in rows) + "</table>")
    for key, title in (("throughput", "Throughput"), ("rss", "Process memory"), ("mcu", "On a microcontroller")):
        if key in files:
            parts.append(f"<h2>{title}</h2><img src='{files[key]}' alt='{title}'>")
    parts.append("<p>Every figure is in <a href='report.json'>report.json</a>.</p></body></html>")
    return "\n".join(parts)
