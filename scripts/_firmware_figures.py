"""What the firmware scripts share: the integer-only accuracy line and the `--json` file of figures."""

import hashlib
import json
import os
import shlex
import sys


def integer_only_accuracy(path, float_path) -> dict:
    """The integer-only accuracy of the static int8 `path` against its float twin on both protocols
    (`firmware simulate`): printed as one line, returned as a row of the `--json` file."""
    from edgeseq.runtime.never_reset import ORDERS
    from firmware_sim.simulate import simulate

    s = simulate(path, float_model=float_path)
    a, n = s["accuracy"], s["never_reset"]
    print(f"{os.path.basename(path)}: per sequence integer-only {a['integer_only']:.3f}, float {a['float']:.3f}, "
          f"onnxruntime int8 {a['onnxruntime_int8']:.3f}; never reset per reading integer-only "
          f"{n['integer_only']:.4f}, float {n['float']:.4f}, onnxruntime int8 {n['onnxruntime_int8']:.4f}; "
          f"logits vs float {s['vs_float']['mean_rel']:.2%} of range")
    return {"model": os.path.basename(path), "per_sequence": a, "never_reset": n, "vs_float": s["vs_float"],
            "data": s["data"], "test_sequences": s["test_sequences"], "never_reset_orders": ORDERS,
            "stream_readings": s["stream_readings"]}


def command_line(script: str) -> str:
    """The command that ran `script` with this process's arguments, as a shell would take it."""
    return shlex.join([".venv/bin/python", f"scripts/{script}", *sys.argv[1:]])


def model_input(path, float_path=None, trained: str | None = None) -> dict:
    """What a figure was measured on: the int8 file (its SHA-256 and configuration), its float
    twin, and how this script made it when it trained it (`trained`; None: given on the command line)."""
    from edgeseq.runtime.model import load_model

    _, meta, _ = load_model(str(path))
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return {"model": os.path.basename(str(path)), "path": None if trained else str(path), "sha256": digest,
            "float": None if float_path is None else (os.path.basename(str(float_path)) if trained else str(float_path)),
            "arch": meta.arch, "config": meta.config, "data": meta.data, "trained": trained}


def write_figures(path, figures: dict) -> None:
    """Write `figures` to the JSON file `path`, after the date they were measured and the machine
    (`edgeseq.report.bench.machine_info`)."""
    from edgeseq.report.bench import machine_info

    machine = machine_info()
    out = {"date": machine["date"], "machine": machine} | figures
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
