"""Fit the per-core figures `edgeseq firmware check` uses for int8 RNN/GRU/LSTM/SSM from measurements.

    .venv/bin/python scripts/calibrate_firmware.py            # about 5 minutes on 2 cores
    .venv/bin/python scripts/calibrate_firmware.py --kinds ssm,ssm-selective

Trains briefly and exports int8 models of several sizes (hidden 8-128, 1-2 layers, every
recurrent architecture; two hidden sizes not a multiple of 4), measures each with `firmware_sim.measure` at -O2 on every emulated
core, and fits, per core and architecture, by least squares:

    cycles per step = a x MACs as the kernels run them (in fours) + b x requantized outputs + c x hidden units x layers + d
    .text           = t0 + t1 x (layers - 1)
    stack           = the largest measured, rounded up to 8 bytes

For the SSM (fixed and selective decay, sizes `SSM_SIZES`: d_model, d_state, layers) the
features are `firmware_sim.cemit_ssm.cost_features` (MACs, requantized values, element-wise
channels, 1). It prints the table to paste into `firmware_sim/targets.py` (`MEASURED`; with
--kinds, the entries of those kinds) and each model's check/measure ratio under the fit.
"""

import argparse
import tempfile
from pathlib import Path

import numpy as np

from edgeseq.errors import run_script

SIZES = [(8, 1), (13, 1), (16, 1), (32, 2), (50, 1), (64, 1), (96, 1), (128, 1), (16, 2)]
KINDS = ["rnn", "gru", "lstm", "ssm", "ssm-selective"]
SSM_SIZES = [(8, 8, 1), (16, 8, 1), (16, 32, 1), (24, 12, 2), (32, 32, 2), (48, 16, 1), (64, 64, 1), (32, 16, 3)]
CORES = ["cortex-m0plus", "cortex-m4", "cortex-m7", "cortex-m33"]


def main():
    from edgeseq.train import TrainConfig, train
    from export import export_int8
    from firmware_sim.intsim import from_onnx
    from firmware_sim.measure import cost_features, measure

    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: " + ", ".join(KINDS))
    kinds = [k for k in ap.parse_args().kinds.split(",") if k]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            ssm = kind.startswith("ssm")
            sizes = [{"d_model": d, "d_state": n, "layers": layers, "selective": kind == "ssm-selective"}
                     for d, n, layers in SSM_SIZES] if ssm else [{"hidden": h, "layers": layers} for h, layers in SIZES]
            for size in sizes:
                arch, layers = ("ssm" if ssm else kind), size["layers"]
                ckpt = train(arch, "basicmotions", TrainConfig(epochs=2, seed=0), size, progress=False)
                name = "-".join(str(v) for v in size.values())
                path = Path(tmp) / f"{kind}-{name}.onnx"
                export_int8(ckpt, path, "static", keep_anyway=True)
                m = from_onnx(path)
                label = (f"d{size['d_model']} n{size['d_state']} l{layers}" if ssm
                         else f"h{size['hidden']} l{layers}")
                for core in CORES:
                    r = measure(path, core, "-O2", readings=100, counted=2)
                    rows.setdefault((core, kind), []).append(
                        (cost_features(m), r["cycles_per_step"], r["sections"]["text"], r["stack_bytes"], layers,
                         label))
    print("MEASURED = {")
    for core in CORES:
        parts = []
        for kind in kinds:
            data = rows[core, kind]
            X = np.array([d[0] for d in data])
            y = np.array([d[1] for d in data])
            coef, *_ = np.linalg.lstsq(X / y[:, None], np.ones(len(y)), rcond=None)   # relative error
            L = np.array([[1.0, d[4] - 1] for d in data])
            t, *_ = np.linalg.lstsq(L, np.array([d[2] for d in data], float), rcond=None)
            stack = int(np.ceil(max(d[3] for d in data) / 8) * 8)
            ratios = ", ".join(f"{d[5]} {float(np.dot(coef, d[0]) / d[1]):.2f}" for d in data)
            print(f"    # {core} {kind}: check/measure {ratios}")
            parts.append(f'"{kind}": ({", ".join(f"{c:.4g}" for c in coef)}, {t[0]:.0f}, {t[1]:.0f}, {stack})')
        print(f'    "{core}": {{{", ".join(parts)}}},')
    print("}")
    return 0


if __name__ == "__main__":
    run_script(main)
