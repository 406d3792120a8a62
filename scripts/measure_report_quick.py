"""How long `edgeseq report --quick` takes, phase by phase, written as JSON for docs/edge-report.md.

    .venv/bin/python scripts/measure_report_quick.py --json docs/figures/report_quick.json

Runs `edgeseq report --quick --out DIR --quiet` on the embedded data once (DIR: `--out`, else a
temporary folder, removed after), in its own process, and keeps from the report.json it writes
the `meta` object: the settings, machine, date, the wall seconds of the report's own count and
each phase's wall and CPU seconds (`phase_seconds`, `phase_cpu_seconds`: CPU of the report's
threads and its child processes). Beside them: the command, the whole process's wall and CPU
seconds (imports and plots included), the load average before and after, and what the phases
covered (the RSS processes, the microcontroller panel's windows, the models' quick epochs).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="the report's folder (default: a temporary one, removed after)")
    ap.add_argument("--json", required=True, help="write the figures here")
    args = ap.parse_args(argv)

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="edgeseq-report-quick-"))
    report = ["edgeseq", "report", "--quick", "--out", str(out) if args.out else "DIR", "--quiet"]
    load_before = os.getloadavg()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "edgeseq", *report[1:4], str(out), "--quiet"], cwd=ROOT,
                           capture_output=True, text=True)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            raise SystemExit(f"Error: {' '.join(report)} exited {p.returncode}:\n{p.stderr.strip()}")
        r = json.loads((out / "report.json").read_text())
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    mcu = r.get("mcu") or {}
    d = {"meta": r["meta"], "date": r["meta"]["date"], "machine": r["meta"]["machine"],
         "report_command": " ".join(report), "process_wall_s": round(wall, 1), "process_cpu_s": round(cpu, 1),
         "load_before": [round(v, 2) for v in load_before], "load_after": [round(v, 2) for v in os.getloadavg()],
         "rss_processes": len(r.get("rss") or {}), "mcu_available": mcu.get("available"),
         "mcu_reason": mcu.get("reason"), "mcu_windows": [row.get("window") for row in mcu.get("transformer") or []],
         "epochs": {a: (m.get("schedule") or {}).get("epochs_run") for a, m in (r.get("models") or {}).items()},
         "summary": p.stdout.strip().splitlines(),
         "command": "python scripts/measure_report_quick.py " + " ".join(
             shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))}
    Path(args.json).write_text(json.dumps(d, indent=1) + "\n")
    print(f"{' '.join(report)}: {wall:.0f} s wall, {cpu:.0f} s CPU; phases (wall / CPU s): " + ", ".join(
        f"{k} {v} / {r['meta']['phase_cpu_seconds'].get(k)}" for k, v in r["meta"]["phase_seconds"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
