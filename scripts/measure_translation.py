"""The translation page's figures: both translation models with their default settings (seed 0),
trained, exported, scored and timed by the `edgeseq translate` commands themselves, written as
JSON for docs/translation.md.

    .venv/bin/python scripts/measure_translation.py --json docs/figures/translation.json

Per architecture (transformer, lstm-attn) it runs, in a scratch folder:

    edgeseq translate train --arch ARCH --out runs/mt-ARCH --quiet --json
    edgeseq translate export runs/mt-ARCH --out models/mt-ARCH --json
    edgeseq translate eval models/mt-ARCH --json          # test split, greedy and beam 4: BLEU, chrF
    edgeseq translate bench runs/mt-ARCH --json           # ONNX Runtime cached vs torch recompute

and records each command line beside its JSON output. `--runs DIR` reuses DIR/mt-ARCH (what
`examples/translate_demo.py --out .` leaves in runs/) instead of training; such a run must have the
default settings, or it is refused.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARCHS = ["transformer", "lstm-attn"]


def edgeseq(args: list, cwd: Path) -> tuple:
    """(command line as typed, its JSON output): `edgeseq ARGS` run in `cwd` by this Python."""
    line = "edgeseq " + shlex.join(args)
    print(f"$ {line}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "edgeseq", *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"`{line}` failed (exit {r.returncode}):\n{r.stderr.strip()}")
    print(f"  {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return line, json.loads(r.stdout)


def check_defaults(run: Path, arch: str) -> dict:
    """The run's metrics.json, if it was trained with `edgeseq translate train`'s defaults (seed 0)."""
    from edgeseq.translate.models import LSTMAttnConfig, TransformerMTConfig
    from edgeseq.translate.train import DEFAULTS
    if not (run / "metrics.json").is_file():
        raise SystemExit(f"{run} is not a translation run (no metrics.json); train it or leave out --runs")
    summary = json.loads((run / "metrics.json").read_text())
    model = asdict(TransformerMTConfig() if arch == "transformer" else LSTMAttnConfig())
    differ = [k for k, v in asdict(DEFAULTS[arch]).items() if summary["train_config"].get(k) != v]
    differ += [k for k, v in model.items() if k != "vocab" and summary["config"].get(k) != v]
    if summary["arch"] != arch or differ:
        raise SystemExit(f"{run} is not a default {arch} run (differs in: {', '.join(differ) or 'arch'}); "
                         "train it again or leave out --runs")
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archs", nargs="+", default=ARCHS, choices=ARCHS)
    ap.add_argument("--runs", help="reuse DIR/mt-<arch> (default settings) instead of training")
    ap.add_argument("--json", required=True, help="write the figures here")
    args = ap.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv

    from edgeseq.report.bench import machine_info

    reused = {arch: check_defaults(Path(args.runs) / f"mt-{arch}", arch) for arch in args.archs} if args.runs else {}
    work = Path(tempfile.mkdtemp(prefix="edgeseq-mt-"))
    models = {}
    for arch in args.archs:
        entry, commands = {}, []
        if args.runs:
            shown = str(Path(args.runs) / f"mt-{arch}")
            entry["train"] = {"reused": shown, **reused[arch]}
            run = str(Path(shown).resolve())                       # the commands run in the scratch folder
        else:
            run = f"runs/mt-{arch}"
            line, entry["train"] = edgeseq(["translate", "train", "--arch", arch, "--out", run, "--quiet", "--json"],
                                           work)
            commands.append(line)
        model = f"models/mt-{arch}"
        for key, cmd in (("export", ["translate", "export", run, "--out", model, "--json"]),
                         ("eval", ["translate", "eval", model, "--json"]),
                         ("bench", ["translate", "bench", run, "--json"])):
            line, entry[key] = edgeseq(cmd, work)
            commands.append(line.replace(run, shown) if args.runs else line)
        entry["commands"] = commands
        models[arch] = entry
        e = entry["eval"]
        print(json.dumps({"arch": arch, **{k: (v["bleu"], v["chrf"]) for k, v in e["results"].items()}}), flush=True)

    m = machine_info()
    m.pop("simd", None)                 # the sensor models' native step; no part of translation
    date = m.pop("date")
    out = {"models": models,
           "meta": {"machine": m, "date": date,
                    "command": "python scripts/measure_translation.py " + shlex.join(argv)}}
    Path(args.json).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.json}; the models (and runs, if trained) are in {work}"
          + ("" if args.runs else f"; --runs {work / 'runs'} reuses them"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
