"""A tune trial's figures: accuracy on both protocols of its int8 model, and the calibrated
`firmware check` on the study's target (before training too, for the limits); the objectives
the study ranks them on (`OBJECTIVES`) and the limits they may break (`over_limits`)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from edgeseq.errors import EdgeseqError

# (key, direction, label); the order is the order of the study's values.
OBJECTIVES = (
    ("never_reset_accuracy", "maximize", "never reset"),
    ("per_sequence_accuracy", "maximize", "per sequence"),
    ("latency_us", "minimize", "us/reading"),
    ("flash_kb", "minimize", "flash KB"),
    ("ram_kb", "minimize", "RAM KB"),
)


def over_limits(m: dict, caps: dict) -> list:
    """What a trial's figures `m` break: ['flash 11.1 KB > 8 KB', ...]."""
    out = []
    if caps["latency_ms"] is not None and m["latency_us"] / 1000 > caps["latency_ms"]:
        out.append(f"latency {m['latency_us'] / 1000:.3g} ms > {caps['latency_ms']:g} ms")
    for key, name in (("ram_kb", "RAM"), ("flash_kb", "flash")):
        if m[key] > caps[key]:
            out.append(f"{name} {m[key]:.1f} KB > {caps[key]:g} KB")
    return out


def firmware_figures(model: str, target) -> dict:
    """`firmware check` of the int8 `model` on `target`: latency (us a reading), flash and RAM (KB)."""
    from firmware_sim.plan import check_model

    fw = check_model(model, target)
    return {"latency_us": fw["cost"]["us_per_reading"], "flash_kb": fw["flash"]["total"] / 1024,
            "ram_kb": fw["ram"]["total"] / 1024, "cost_source": fw["cost"]["source"], "fits_part": fw["fits"]}


def int8_figures(model: str, split, dataset, target) -> dict:
    """Both protocols of `model` on `split` and its firmware check on `target`."""
    from edgeseq.runtime.evaluate import evaluate

    ev = evaluate(model, split, dataset.labels, features=dataset.features)
    return {"never_reset_accuracy": ev["continuous"]["reading_accuracy"], "per_sequence_accuracy": ev["accuracy"],
            **firmware_figures(model, target)}


def untrained_figures(arch: str, settings: dict, tc, search) -> dict | None:
    """The firmware figures of a trial's model before it is trained (one update), or None where
    that model does not export. Latency, flash and RAM follow the architecture and its sizes,
    not the weights (tests/test_tune.py checks them against the trained model's), so a trial
    they put over a given limit is not trained."""
    from dataclasses import replace

    from edgeseq.train import train
    from export import export_int8

    try:
        ckpt = train(arch, search.data, replace(tc, epochs=1, updates=1), settings, progress=False)
        with tempfile.TemporaryDirectory(prefix=".screen-", dir=search.out) as tmp:
            path = str(Path(tmp) / "int8.onnx")
            export_int8(ckpt, path, "static", data=search.data, keep_anyway=True)
            return firmware_figures(path, search.target)
    except EdgeseqError:
        return None
