"""The Raspberry Pi page's table: `examples/pi_sensor_demo.py --json` on the embedded replay, each
int8 model paced at 50 Hz and unpaced, its summaries written as JSON for docs/raspberry-pi.md.

    .venv/bin/python scripts/measure_pi_demo.py --json docs/figures/pi_demo.json

Runs, one after the other, each in its own process as a user would run it:

    examples/pi_sensor_demo.py --model models/<arch>-int8.onnx --source replay:basicmotions --json \\
        --rate 50 --max-readings 500        # 10 s of readings on a fixed 20 ms schedule
    examples/pi_sensor_demo.py --model models/<arch>-int8.onnx --source replay:basicmotions --json \\
        --rate 0                            # the whole replay (4,000 readings), as fast as it goes

for the GRU, the LSTM and the Transformer (`--archs`), on the backend the demo picks by default
(or `--backend`). The models are the ones `make demo` leaves in models/ (`--models`); a missing
one is an error naming it, never skipped. The JSON keeps each run's command, its summary object
(the last line the demo prints), the backend it ran on, the model file's SHA-256 and, for the
Transformer, the window its cache is bounded by; and the machine, the load average before and
after, and the date. The demo's latency median and p99 are over the last 1,000 readings pushed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARCHS = ["gru", "lstm", "transformer"]
PACED = (50.0, 500)           # rate, readings: the Pi page's paced rows
DEMO = "examples/pi_sensor_demo.py"


def run_demo(model: str, rate: float, readings: int | None, backend: str | None) -> dict:
    """One demo run: its command (as typed from the repository root), summary and backend."""
    args = [DEMO, "--model", model, "--source", "replay:basicmotions", "--json", "--rate", f"{rate:g}"]
    if readings:
        args += ["--max-readings", str(readings)]
    if backend:
        args += ["--backend", backend]
    t = time.perf_counter()
    p = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"Error: {' '.join(args)} exited {p.returncode}:\n{p.stderr.strip()}")
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith('{"summary"')]
    if not lines:
        raise SystemExit(f"Error: {' '.join(args)} printed no summary line")
    found = re.search(r" on the (\S+) backend", p.stderr)
    return {"command": "python " + " ".join(shlex.quote(a) for a in args), "rate": rate, "max_readings": readings,
            "backend": found.group(1) if found else None, "wall_s": round(wall, 2),
            "summary": json.loads(lines[-1])["summary"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archs", nargs="+", default=ARCHS)
    ap.add_argument("--models", default="models", help="folder with <arch>-int8.onnx (`make demo` writes models/)")
    ap.add_argument("--backend", choices=["auto", "onnxruntime", "native"], help="passed to the demo (default: its own)")
    ap.add_argument("--json", required=True, help="write the figures here")
    args = ap.parse_args(argv)

    models = {a: Path(args.models) / f"{a}-int8.onnx" for a in args.archs}
    missing = [str(p) for p in models.values() if not (p if p.is_absolute() else ROOT / p).is_file()]
    if missing:
        raise SystemExit(f"Error: {', '.join(missing)} missing: run `make demo` first (it exports every "
                         "architecture's int8 model into models/)")

    from edgeseq.report.bench import machine_info
    from edgeseq.runtime import StreamSession

    load_before = os.getloadavg()
    rows = []
    for arch, model in models.items():
        path = model if model.is_absolute() else ROOT / model
        sess = StreamSession(str(path), backend=args.backend)
        info = {"arch": arch, "model": str(model), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "max_history": sess.max_history}
        for rate, readings in (PACED, (0.0, None)):
            r = {**info, **run_demo(str(model), rate, readings, args.backend)}
            rows.append(r)
            s = r["summary"]
            print(f"{arch} rate {rate:g}: {s['this_run']} readings, median {s['median_us']} us, p99 {s['p99_us']} us, "
                  f"{s['rate_hz']} readings/s, late {s['late']}, dropped {s['dropped']}, RSS {s['rss_kb_end']} kB, "
                  f"state {s['state_bytes']} B ({r['backend']})", flush=True)
    out = {"rows": rows, "machine": machine_info(), "load_before": [round(v, 2) for v in load_before],
           "load_after": [round(v, 2) for v in os.getloadavg()],
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "command": "python scripts/measure_pi_demo.py " + " ".join(
               shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))}
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
