"""`edgeseq tune`'s outputs from a study's trials: the rows, the Pareto front, the chosen trial,
and the pages (pareto.json, pareto.csv, pareto.png, pareto.html)."""

from __future__ import annotations

import csv
import html
import io
import json
from pathlib import Path

from edgeseq.errors import EdgeseqError, printable
from edgeseq.report.edge_pages import COLORS
from edgeseq.tune.figures import OBJECTIVES, over_limits
from edgeseq.tune.space import describe

FILES = ("pareto.json", "pareto.csv", "pareto.png", "pareto.html")


def row_of(t, caps: dict) -> dict:
    """One trial as a plain dict: its settings, figures (None if it failed) and feasibility."""
    a = t.user_attrs
    r = {"trial": t.number, "state": t.state.name.lower(), "arch": a.get("arch"), "settings": a.get("settings", {}),
         "schedule": a.get("schedule", {}),
         "seconds": round(t.duration.total_seconds(), 1) if t.duration else None}
    m = a.get("measures") if t.state.name == "COMPLETE" else None
    if m is None:
        r.update(feasible=False, over=[], error=a.get("error"))
        return r
    r.update(m)
    r["over"] = over_limits(m, caps)
    r["feasible"] = not r["over"]
    return r


def dominates(a: dict, b: dict) -> bool:
    """a is at least as good as b on every objective and better on one."""
    better = False
    for key, direction, _ in OBJECTIVES:
        x, y = (a[key], b[key]) if direction == "minimize" else (-a[key], -b[key])
        if x > y:
            return False
        better |= x < y
    return better


def front(rows: list) -> list:
    """The feasible rows no feasible row dominates, best never-reset accuracy first (ties: the
    lower latency, then the earlier trial): the first is the chosen one."""
    ok = [r for r in rows if r["feasible"]]
    best = [r for r in ok if not any(dominates(o, r) for o in ok)]
    return sorted(best, key=lambda r: (-r["never_reset_accuracy"], r["latency_us"], r["trial"]))


def _notice(rows: list, search, study: str) -> str:
    done = [r for r in rows if "latency_us" in r]
    if not done:
        errors = [r["error"] for r in rows if r.get("error")]
        return (f"no trial finished ({len(rows)} failed" + (f"; the first: {errors[0]}" if errors else "") +
                "); nothing was chosen")
    t = search.target
    given = [f"--{k.replace('_', '-')} {v:g}" for k, v in search.settings["limits"].items() if v is not None]
    least = {k: min(r[k] for r in done) for k in ("latency_us", "ram_kb", "flash_kb")}
    return (f"none of the {len(done)} finished trials meets {' and '.join(given) or 'the part'} on {t.name} "
            f"({t.sram_kb:,} KB RAM, {t.flash_kb:,} KB flash): the smallest need {least['latency_us']:,.0f} us/reading, "
            f"RAM {least['ram_kb']:.1f} KB, flash {least['flash_kb']:.1f} KB; nothing was chosen: relax a limit or "
            f"search smaller models (add trials with --study {study})")


def summarize(trials: list, search, study: str, storage: str, this_run: int, seconds: float) -> dict:
    """What pareto.json holds, for `trials` (Optuna FrozenTrials) of a study run as `search`."""
    caps = search.caps()
    rows = [row_of(t, caps) for t in trials if t.state.name in ("COMPLETE", "FAIL")]
    best = front(rows)
    chosen = dict(best[0]) if best else None
    s = search.settings
    t = search.target
    return {
        "study": study, "storage": storage, "data": s["data"], "sampler": s["sampler"], "seed": s["seed"],
        "target": {"name": t.name, "part": t.part, "core": t.core, "clock_mhz": t.clock_mhz,
                   "flash_kb": t.flash_kb, "sram_kb": t.sram_kb},
        "limits": s["limits"], "limits_in_force": caps, "space": s["space"],
        "objectives": [{"key": k, "direction": d, "label": lab} for k, d, lab in OBJECTIVES],
        "trials": {"finished": sum(r["state"] == "complete" for r in rows),
                   "feasible": sum(r["feasible"] for r in rows),
                   "failed": sum(r["state"] == "fail" for r in rows), "this_run": this_run,
                   "this_run_seconds": round(seconds, 1)},
        "front": best, "chosen": chosen,
        "notice": None if chosen else _notice(rows, search, study),
        "all_trials": rows,
        "files": {name: str(search.out / name) for name in FILES},
    }


# --- pages -----------------------------------------------------------------------------------

COLUMNS = ("trial", "model", "never reset", "per sequence", "us/reading", "flash KB", "RAM KB")


def _cells(r: dict) -> list:
    return [str(r["trial"]), describe(r["arch"], r["settings"], r["schedule"]), f"{r['never_reset_accuracy']:.3f}",
            f"{r['per_sequence_accuracy']:.3f}", f"{r['latency_us']:,.0f}", f"{r['flash_kb']:.1f}", f"{r['ram_kb']:.1f}"]


def table(result: dict) -> str:
    """The front as a text table, the chosen trial marked '*'."""
    rows = [_cells(r) for r in result["front"]]
    widths = [max(len(c) for c in col) for col in zip(COLUMNS, *rows)]
    chosen = (result["chosen"] or {}).get("trial")
    lines = ["  " + "  ".join(c.ljust(w) if i == 1 else c.rjust(w) for i, (c, w) in enumerate(zip(COLUMNS, widths)))]
    for r, cells in zip(result["front"], rows):
        lines.append(("* " if r["trial"] == chosen else "  ")
                     + "  ".join(c.ljust(w) if i == 1 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))))
    return "\n".join(lines)


def _csv(result: dict) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["trial", "arch", "settings", "epochs", "lr", *[k for k, *_ in OBJECTIVES], "cost_source", "chosen"])
    chosen = (result["chosen"] or {}).get("trial")
    for r in result["front"]:
        w.writerow([r["trial"], r["arch"], " ".join(f"{k}={v}" for k, v in r["settings"].items()),
                    r["schedule"].get("epochs", ""), r["schedule"].get("lr", ""),
                    *[r[k] for k, *_ in OBJECTIVES], r["cost_source"], "yes" if r["trial"] == chosen else ""])
    return buf.getvalue().encode()


def _png(result: dict) -> bytes:
    """Never-reset accuracy against latency and against flash: every trial, the front ringed,
    infeasible ones crossed, the chosen one a star."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    except ModuleNotFoundError:
        raise EdgeseqError("edgeseq tune plots with matplotlib: pip install '.[tune]' in edgeseq's clone") from None
    fig = Figure(figsize=(10, 4.2))
    FigureCanvasAgg(fig)
    done = [r for r in result["all_trials"] if r.get("never_reset_accuracy") is not None]   # trained ones
    on_front = {r["trial"] for r in result["front"]}
    chosen = (result["chosen"] or {}).get("trial")
    for ax, key, xlabel in zip(fig.subplots(1, 2), ("latency_us", "flash_kb"),
                               (f"us per reading on {result['target']['name']}", "flash KB")):
        for arch in sorted({r["arch"] for r in done}):
            mine = [r for r in done if r["arch"] == arch]
            color = COLORS.get(arch, "gray")
            groups = ((lambda r: r["feasible"] and r["trial"] not in on_front, dict(s=25, linewidths=0, alpha=0.7)),
                      (lambda r: r["trial"] in on_front, dict(s=60, edgecolors="black", linewidths=1.2)),
                      (lambda r: not r["feasible"], dict(marker="x", alpha=0.6)))
            label = arch                                  # on the first of the arch's groups drawn
            for keep, style in groups:
                pts = [r for r in mine if keep(r)]
                if pts:
                    ax.scatter([r[key] for r in pts], [r["never_reset_accuracy"] for r in pts], color=color,
                               label=label, **style)
                    label = None
        for r in done:
            if r["trial"] == chosen:
                ax.scatter([r[key]], [r["never_reset_accuracy"]], marker="*", s=260, color="gold",
                           edgecolors="black", zorder=5, label="chosen")
        xs = [r[key] for r in done]
        if xs and max(xs) > 8 * min(xs):            # a wide span: log, with plain numbers
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(xlabel)
        ax.set_ylabel("never-reset accuracy (validation)")
        ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:                  # no trained trial: nothing to name
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"edgeseq tune, study '{printable(result['study'])}': {result['trials']['finished']} trials "
                 f"(ringed: Pareto front; x: over a limit)", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _html(result: dict) -> bytes:
    e = html.escape
    chosen = result["chosen"]
    head = "".join(f"<th>{e(c)}</th>" for c in COLUMNS)
    body = "".join("<tr{}>{}</tr>".format(' class="chosen"' if chosen and r["trial"] == chosen["trial"] else "",
                                          "".join(f"<td>{e(c)}</td>" for c in _cells(r))) for r in result["front"])
    n = result["trials"]
    lines = [f"{n['finished']} finished trials ({n['feasible']} feasible, {n['failed']} failed) on "
             f"{e(result['target']['name'])} ({e(result['target']['part'])}); data {e(str(result['data']))}; "
             f"{e(result['sampler'])}, seed {result['seed']}."]
    if chosen:
        lines.append(f"Chosen: trial {chosen['trial']}, {e(describe(chosen['arch'], chosen['settings'], chosen['schedule']))}"
                     " (best never-reset accuracy on validation, ties by latency).")
        if "test" in chosen:
            t = chosen["test"]["int8"]
            lines.append(f"Retrained on the whole training split, int8 on the test split: per sequence "
                         f"{t['per_sequence_accuracy']:.3f}, never reset {t['never_reset_accuracy']:.3f}.")
    else:
        lines.append(e(result["notice"]))
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>edgeseq tune: {e(result['study'])}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:70em}}table{{border-collapse:collapse}}
td,th{{padding:.2em .6em;border-bottom:1px solid #ddd;text-align:right}}td:nth-child(2){{text-align:left}}
tr.chosen{{background:#fff3b0}}</style></head>
<body><h1>edgeseq tune: study '{e(result['study'])}'</h1>
{''.join(f'<p>{line}</p>' for line in lines)}
<h2>Pareto front (validation split; firmware check)</h2>
<table><tr>{head}</tr>{body}</table>
<p><img src="pareto.png" alt="never-reset accuracy against latency and flash" width="1000"></p>
</body></html>
"""
    return page.encode()


def write_pages(result: dict, out: Path) -> None:
    """pareto.json, pareto.csv, pareto.png and pareto.html in `out`, all or nothing."""
    from edgeseq.runtime.statefile import write_files

    out = Path(out)
    write_files({out / "pareto.json": (json.dumps(result, indent=2) + "\n").encode(), out / "pareto.csv": _csv(result),
                 out / "pareto.png": _png(result), out / "pareto.html": _html(result)})
