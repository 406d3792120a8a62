"""int8 state-space models: what each part kept at float32 costs and buys.

    .venv/bin/python scripts/ssm_int8_parts.py                    # fixed and selective, seed 0
    .venv/bin/python scripts/ssm_int8_parts.py --seeds 0 1 --variants fixed
    .venv/bin/python scripts/ssm_int8_parts.py --json docs/figures/ssm_int8_parts.json   # docs/ssm.md's table

Trains the default `ssm` (and `--set selective=true`) with its default schedule, then exports
int8 with `--keep-anyway` under each choice and prints file size, the mean output error
against the float twin (4 streams x 500 test readings, never reset) and per-reading test
accuracy on both protocols (per sequence; continuous, never reset), float / int8:

- state int8: the quantizer's default for a state that a MatMul reads and that is also a
  graph output: the state comes out of every call rounded to int8 (per-tensor scale);
- projections int8: every MatMul/Gemm int8, the state, decay and state update float (export's
  choice when `SSM_FLOAT_PARTS` is empty);
- + <part> float: that projection of every layer kept float as well (`float_parts`);
- + decay int8: the fixed decays a rounded to an int8 grid (symmetric, per tensor, as a weight
  would be) in the exported int8 model, the rest as "projections int8".
`--json PATH` also writes every row (and each file's initializer bytes), the command, the
machine and the date, which `scripts/render_docs.py` renders into docs/ssm.md.
Takes about 2 minutes on 2 cores.
"""

import argparse
import dataclasses
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import torch

import export.quantize as q
from edgeseq import contract
from edgeseq.data import load_dataset
from edgeseq.runtime.evaluate import (joined_streams, long_streams, output_error, reading_accuracy, run_each,
                                      run_streams, score_continuous)
from edgeseq.train import DEFAULTS, train
from export import export_int8, export_model
from export.validate import cpu_session

CHOICES = [("state int8", "static", ()), ("projections int8", "static", ()),
           ("+ readout float", "static", ("readout",)),
           ("+ x float", "static", ("x",)), ("+ out float", "static", ("out",)),
           ("+ delta float", "static", ("delta",)), ("+ decay int8", "static", ()),
           ("projections int8", "dynamic", ()), ("+ readout float", "dynamic", ("readout",))]


def measure(float_path, q_path, ds, scheme):
    """The figures export_int8 checks, for any pair of files."""
    fsess, qsess = cpu_session(float_path), cpu_session(q_path)
    meta = contract.ModelMeta.from_props(fsess.get_modelmeta().custom_metadata_map)
    run_q = run_each if scheme == "dynamic" else run_streams
    X = long_streams(ds.test, 500, seed=0)
    err = output_error(run_streams(fsess, meta, X), run_q(qsess, meta, X))
    lf, lq = run_streams(fsess, meta, ds.test.X, ds.test.lengths), run_q(qsess, meta, ds.test.X, ds.test.lengths)
    Xc, Yc, ends = joined_streams(ds.test, seed=0)
    cf = score_continuous(run_streams(fsess, meta, Xc).argmax(-1).T, Yc, ends)["reading_accuracy"]
    cq = score_continuous(run_q(qsess, meta, Xc).argmax(-1).T, Yc, ends)["reading_accuracy"]
    return {"mean_rel": err["mean_rel"], "float_reading_accuracy": reading_accuracy(lf, ds.test),
            "int8_reading_accuracy": reading_accuracy(lq, ds.test), "float_continuous_accuracy": cf,
            "int8_continuous_accuracy": cq, "bytes": Path(q_path).stat().st_size}


def initializer_bytes(path) -> int:
    """Bytes of the file's initializers (weights, biases, scales, zero points, constants): the
    rest of the file is graph and metadata."""
    return sum(onnx.numpy_helper.to_array(t).nbytes for t in onnx.load_model(str(path)).graph.initializer)


def round_decay(src, dst):
    """Copy the int8 model at `src` to `dst` with each layer's decay on a symmetric int8 grid."""
    m = onnx.load_model(str(src))
    for t in m.graph.initializer:
        if t.name.endswith("_decay"):
            a = onnx.numpy_helper.to_array(t)
            scale = np.abs(a).max() / 127
            t.CopyFrom(onnx.numpy_helper.from_array((np.round(a / scale) * scale).astype(np.float32), t.name))
    onnx.save_model(m, str(dst))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--variants", nargs="+", default=["fixed", "selective"], choices=["fixed", "selective"])
    ap.add_argument("--json", metavar="PATH", help="also write the rows, the command, the machine and the date here "
                                                  "(docs/figures/ssm_int8_parts.json renders docs/ssm.md's table)")
    args = ap.parse_args()
    started = time.time()
    rows = []
    torch.set_num_threads(1)
    ds = load_dataset("basicmotions")
    isolate = q.isolate_matmul_inputs
    print(f"{'model':20s} {'scheme':8s} {'choice':18s} {'bytes':>7s} {'mean err':>8s} {'per seq f/q':>11s} "
          f"{'continuous f/q':>14s}")
    with tempfile.TemporaryDirectory() as tmp:
        for variant in args.variants:
            for seed in args.seeds:
                ckpt = train("ssm", ds, dataclasses.replace(DEFAULTS["ssm"], seed=seed),
                             {"selective": variant == "selective"}, progress=False)
                fpath = Path(tmp) / "float.onnx"
                fbytes = export_model(ckpt, fpath)["bytes"]
                print(f"{variant + ' seed ' + str(seed):20s} {'float':8s} {'':18s} {fbytes:7d}")
                rows.append({"variant": variant, "seed": seed, "scheme": "float", "choice": "float", "float_parts": [],
                             "bytes": fbytes, "initializer_bytes": initializer_bytes(fpath)})
                for name, scheme, parts in CHOICES:
                    if "delta" in parts and variant != "selective" or "decay" in name and variant != "fixed":
                        continue
                    out = Path(tmp) / "int8.onnx"
                    if name == "state int8":
                        q.isolate_matmul_inputs = lambda proto, outputs=False: isolate(proto)
                    try:
                        export_int8(ckpt, out, scheme, data=ds, keep_anyway=True, float_parts=parts)
                    finally:
                        q.isolate_matmul_inputs = isolate
                    if "decay" in name:
                        round_decay(out, Path(tmp) / "decay.onnx")
                        out = Path(tmp) / "decay.onnx"
                    r = measure(fpath, out, ds, scheme)
                    rows.append({"variant": variant, "seed": seed, "scheme": scheme, "choice": name,
                                 "float_parts": list(parts), "initializer_bytes": initializer_bytes(out), **r})
                    print(f"{'':20s} {scheme:8s} {name:18s} {r['bytes']:7d} {r['mean_rel']:8.2%} "
                          f"{r['float_reading_accuracy']:.3f}/{r['int8_reading_accuracy']:.3f} "
                          f"   {r['float_continuous_accuracy']:.3f}/{r['int8_continuous_accuracy']:.3f}", flush=True)
    if args.json:
        from edgeseq.report.bench import machine_info
        doc = {"command": " ".join(["python", "scripts/ssm_int8_parts.py", *map(shlex.quote, sys.argv[1:])]),
               "machine": machine_info(), "torch_threads": torch.get_num_threads(),
               "seconds": round(time.time() - started, 1), "data": ds.name, "streams": 4, "readings_per_stream": 500,
               "rows": rows}
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
