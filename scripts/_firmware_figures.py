"""What the firmware scripts share: the integer-only accuracy line and the `--json` file of figures."""

import datetime
import json
import os


def integer_only_accuracy(path, float_path) -> dict:
    """The integer-only accuracy of the static int8 `path` against its float twin on both protocols
    (`firmware simulate`): printed as one line, returned as a row of the `--json` file."""
    from firmware_sim.simulate import simulate

    s = simulate(path, float_model=float_path)
    a, n = s["accuracy"], s["never_reset"]
    print(f"{os.path.basename(path)}: per sequence integer-only {a['integer_only']:.3f}, float {a['float']:.3f}, "
          f"onnxruntime int8 {a['onnxruntime_int8']:.3f}; never reset per reading integer-only "
          f"{n['integer_only']:.4f}, float {n['float']:.4f}, onnxruntime int8 {n['onnxruntime_int8']:.4f}; "
          f"logits vs float {s['vs_float']['mean_rel']:.2%} of range")
    return {"model": os.path.basename(path), "per_sequence": a, "never_reset": n, "vs_float": s["vs_float"]}


def write_figures(path, figures: dict) -> None:
    """Write `figures` to the JSON file `path`, after the date they were measured."""
    out = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")} | figures
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
