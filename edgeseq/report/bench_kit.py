"""What both bench modules (`bench`, `bench_archs`) time with: calls timed in turn within
rounds, and an untrained checkpoint of an architecture's default sizes (latency does not depend
on what a model learned)."""

from __future__ import annotations

import time

import numpy as np


def _interleaved_us(fns: dict, rounds: int, warmup: int, stat=np.median) -> dict:
    """Median (or `stat`, e.g. np.min) us per call of each function, timed in turn within each
    round (one call each), so that a busy moment of a shared machine falls on all of them alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {k: np.empty(rounds) for k in fns}
    clock = time.perf_counter
    for i in range(rounds):
        for k, fn in fns.items():
            t0 = clock()
            fn()
            times[k][i] = clock() - t0
    return {k: float(stat(v) * 1e6) for k, v in times.items()}


def _random_checkpoint(arch, **overrides):
    import torch
    import edgeseq
    from edgeseq.data import load_dataset, Normalization
    from edgeseq.models import build_model, config_dict, make_config
    ds = load_dataset("basicmotions")
    torch.manual_seed(0)
    cfg = make_config(arch, n_features=ds.n_features, n_classes=len(ds.labels), **overrides)
    model = build_model(arch, cfg).eval()
    norm = Normalization.fit(ds.train)
    model.norm.set(norm.mean, norm.std)
    return {"edgeseq_version": edgeseq.__version__, "arch": arch, "config": config_dict(cfg),
            "state_dict": model.state_dict(), "normalization": norm.to_json(), "labels": ds.labels,
            "features": ds.features}
