"""The state-space model beside the GRU on BasicMotions: accuracy on both protocols, size, cost,
state, latency on both step backends and training time, written as JSON for docs/ssm.md.

    .venv/bin/python scripts/measure_ssm.py --json docs/figures/ssm.json

Trains the default `ssm` (fixed decay), `ssm` with `selective=true` and the default `gru` with
seed 0 and their default schedules (one torch thread), exports each float and static int8
(`edgeseq export RUN` and `--int8`), then:

- accuracy: `edgeseq compare` (as `edgeseq eval` scores: per sequence, each test sequence its
  own stream; continuous, the test sequences joined end to end and never reset, per reading
  after a grace period, at each sequence's last reading, and the readings taken to follow a
  change) on the backend `StreamSession` picks here;
- latency: StreamSession.push of one reading on one stream, median of `--rounds` interleaved
  rounds of 100 readings, once with `--backend onnxruntime` and once on the backend picked
  here (the native step where it runs);
- parameters and multiply-adds a reading from the model, state bytes per stream from the
  session, graph nodes of each file, and `edgeseq firmware check` of each int8 model on an
  nRF52840 (flash, RAM, time a reading).
About a minute of CPU on an idle core.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = [("ssm", "ssm", {}), ("ssm selective", "ssm", {"selective": True}), ("gru", "gru", {})]
TARGET = "nrf52840"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=20, help="latency rounds (interleaved across the models)")
    ap.add_argument("--json", required=True, metavar="PATH", help="write the figures here "
                    "(docs/figures/ssm.json renders docs/ssm.md's table)")
    args = ap.parse_args(argv)
    started = time.time()

    import onnx
    import torch

    from edgeseq.data import load_dataset
    from edgeseq.report.bench import machine_info
    from edgeseq.report.compare import compare_models
    from edgeseq.runtime import StreamSession, native
    from edgeseq.train import DEFAULTS, train
    from edgeseq.train.checkpoint import model_from_checkpoint
    from export import export_int8, export_model
    from firmware_sim.plan import check_model
    from firmware_sim.targets import get_target

    torch.set_num_threads(1)
    ds = load_dataset("basicmotions")
    work = Path(tempfile.mkdtemp(prefix="edgeseq-ssm-"))
    rows, paths = [], []
    for name, arch, settings in MODELS:
        ckpt = train(arch, ds, dataclasses.replace(DEFAULTS[arch], seed=args.seed), settings or None, progress=False)
        model = model_from_checkpoint(ckpt)
        stem = work / name.replace(" ", "-")
        f_path, q_path = stem.with_suffix(".onnx"), Path(f"{stem}-int8.onnx")
        fbytes = export_model(ckpt, f_path)["bytes"]
        q = export_int8(ckpt, q_path, "static", data=ds, keep_anyway=True, float_bytes=fbytes)
        c = check_model(str(q_path), get_target(TARGET))
        common = {"name": name, "arch": arch, "settings": settings, "config": ckpt["config"]}
        rows.append({**common, "weights": "float", "parameters": sum(p.numel() for p in model.parameters()),
                     "macs_per_reading": int(model.macs_per_reading()),
                     "train_seconds": ckpt["metrics"]["train_seconds"]})
        rows.append({**common, "weights": "int8 static", "mean_rel": q["mean_rel"], "judged_backend": q["backend"],
                     "within_bounds": q["within_bounds"],
                     "firmware_check": {"target": TARGET, "flash_bytes": c["flash"]["total"],
                                        "ram_bytes": c["ram"]["total"], "cycles": c["cost"]["cycles"],
                                        "us_per_reading": c["cost"]["us_per_reading"], "source": c["cost"]["source"],
                                        "fits": c["fits"]}})
        paths += [f_path, q_path]
        print(f"{name}: trained in {ckpt['metrics']['train_seconds']:.1f} s, exported", flush=True)

    for row, path in zip(rows, paths):
        row["bytes"] = path.stat().st_size
        row["graph_nodes"] = len(onnx.load_model(str(path)).graph.node)
        row["state_bytes"] = StreamSession(str(path)).state_nbytes()
    runs = {}
    for backend in ("onnxruntime", "auto"):           # auto: the backend StreamSession (and `edgeseq eval`) picks
        runs[backend] = compare_models([str(p) for p in paths], rounds=args.rounds, backend=backend)
        for row, m in zip(rows, runs[backend]["models"]):
            row.setdefault("latency_us", {})[m["backend"]] = m["latency_us_median"]
    for row, m in zip(rows, runs["auto"]["models"]):
        c = m["continuous"]
        row |= {"backend": m["backend"], "per_sequence": m["accuracy"], "continuous": c["reading_accuracy"],
                "last_reading": c["last_reading_accuracy"], "follow_median": c["median_readings_to_follow"]}
        print(json.dumps(row), flush=True)
    doc = {"command": " ".join(["python", "scripts/measure_ssm.py", *map(shlex.quote, sys.argv[1:] if argv is None
                                                                         else argv)]),
           "machine": machine_info(), "torch_threads": torch.get_num_threads(), "seed": args.seed,
           "data": ds.name, "test_sequences": len(ds.test), "rounds": args.rounds,
           "latency": runs["auto"]["latency"], "native": native.available(),
           "seconds": round(time.time() - started, 1), "rows": rows}
    Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
