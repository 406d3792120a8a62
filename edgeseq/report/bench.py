"""`edgeseq bench`: per-reading latency, measured side by side in one process.

- the bare onnxruntime per-call floor: an Identity graph on one reading, called the plain way
  (`session.run`) and the way the runtime calls (IO binding);
- the GRU (hidden 64) step: torch eager, a plain `session.run` loop, and `StreamSession.push`;
- the Transformer step at cache lengths 16, 256, 1024 against recomputing the whole history
  (the same model's full-sequence graph on T + 1 readings);
- the step backends (onnxruntime, native) on the GRU, float and static int8, at 1 to 1024
  streams, against the GEMM bound of this core (`run_backends`);
- the SSM and the Transformer on the native step next to onnxruntime (`bench_archs`).

- training time of each streaming architecture's default schedule on BasicMotions (`train=True`),
  against the target of well under a minute for the default GRU on 2 cores.

Models have random weights: latency does not depend on what they learned. Figures are medians
over `repeats` timed calls after `warmup` untimed ones, single-threaded onnxruntime and torch.
"""

from __future__ import annotations

import platform
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from edgeseq.report.bench_kit import _interleaved_us, _random_checkpoint


def _median_us(fn, repeats: int, warmup: int) -> dict:
    for _ in range(warmup):
        fn()
    times = np.empty(repeats)
    clock = time.perf_counter
    for i in range(repeats):
        t0 = clock()
        fn()
        times[i] = clock() - t0
    return {"median_us": float(np.median(times) * 1e6), "p99_us": float(np.percentile(times, 99) * 1e6)}


def identity_model(features: int):
    import onnx
    from onnx import TensorProto, helper
    from edgeseq import contract
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", features])
    m = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "floor", [x], [y]),
                          opset_imports=[helper.make_opsetid("", contract.OPSET)])
    m.ir_version = contract.IR_VERSION
    onnx.checker.check_model(m)
    return m.SerializeToString()


class _Recompute:
    """The Transformer's full-sequence graph: what a step costs without a cache."""

    def __init__(self, ckpt, path):
        import torch
        from edgeseq.train import model_from_checkpoint
        from export.step import _trace
        import onnx
        model = model_from_checkpoint(ckpt)

        class Full(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m(x)

        T = torch.export.Dim("time", min=2, max=8192)
        proto = _trace(Full(model), (torch.randn(1, 5, model.config.n_features),), ["window"], ["logits"],
                       ({1: T},))
        proto.ir_version = 9
        onnx.save_model(proto, path)


TRAIN_TARGET_S = 60.0      # the default GRU's training on 2 cores must stay well under this


def run_train_bench(archs=("rnn", "gru", "lstm", "transformer", "ssm"), threads: int | None = None) -> dict:
    """Seconds each architecture's default schedule takes on the embedded data (wall clock,
    torch intra-op threads as given or torch's default)."""
    import torch

    from edgeseq.data import load_dataset
    from edgeseq.train import train
    if threads:
        torch.set_num_threads(threads)
    ds = load_dataset("basicmotions")
    rows = {}
    for arch in archs:
        ck = train(arch, ds, progress=False)
        sched = ck["metrics"]["schedule"]
        rows[arch] = {"seconds": ck["metrics"]["train_seconds"], "epochs": sched["epochs_run"],
                      "best_epoch": sched["best_epoch"], "converged": sched["converged"],
                      "test_accuracy": ck["metrics"]["test_accuracy"],
                      "test_continuous_accuracy": ck["metrics"].get("test_continuous_accuracy")}
    return {"archs": rows, "threads": torch.get_num_threads(), "target_s": TRAIN_TARGET_S,
            "gru_within_target": rows.get("gru", {}).get("seconds", 0.0) < TRAIN_TARGET_S}


TRAIN_ARCHS = ("rnn", "gru", "lstm", "transformer", "ssm")
TRAIN_PASSES = 3              # forward + backward of a reading's multiply-adds, the usual rule of thumb


def run_train_throughput(archs=TRAIN_ARCHS, lengths=(100, 1_000, 10_000), readings: int = 200_000,
                         epochs: int = 2, threads: int | None = None) -> dict:
    """Training readings per second against sequence length, through `edgeseq.train.train`.

    The data at every length: `readings` synthetic IMU readings (`edgeseq.data.synthetic`,
    6 channels, 7 classes) as readings / length recordings of `length` readings (+-5 %). Each
    architecture trains `epochs` epochs of its default schedule and model (seed 0, torch threads
    as given or torch's default). Figures per architecture and length: seconds per epoch and per
    1,000 data readings; training readings/s (forward and backward, stream and single-sequence
    readings both counted, as `train` reports them); and their share of this core's GEMM bound:
    numpy's single-thread float32 GEMM rate (`edgeseq.runtime.native.bench.gemm_rate`) over
    TRAIN_PASSES x the model's multiply-adds per reading (the Transformer's at its full window).
    `linearity`: the largest over the smallest seconds per data reading across lengths."""
    import torch

    from edgeseq.data.synthetic import recordings
    from edgeseq.models import build_model, make_config
    from edgeseq.runtime.native.bench import gemm_rate
    from edgeseq.train import DEFAULTS, train

    if threads:
        torch.set_num_threads(threads)
    rate = gemm_rate()
    rows = {}
    for arch in archs:
        cfg = make_config(arch, n_features=6, n_classes=7)
        model = build_model(arch, cfg)
        window = getattr(cfg, "window", 0)
        macs = model.macs_per_reading(window) if window else model.macs_per_reading()
        row = {"macs_per_reading": int(macs), "lengths": {}}
        for T in lengths:
            ds = recordings(max(1, readings // T), T, n_test=7, seed=0)
            ck = train(arch, ds, replace(DEFAULTS[arch], epochs=epochs, threads=threads or torch.get_num_threads()),
                       progress=False)
            m = ck["metrics"]
            data = int(ds.train.lengths.sum())
            row["lengths"][T] = {
                "recordings": len(ds.train), "data_readings": data, "seconds_per_epoch": m["train_seconds"] / epochs,
                "seconds_per_1000_readings": 1000 * m["train_seconds"] / epochs / data,
                "readings_per_s": m["readings_per_second"],
                "share_of_gemm_bound": m["readings_per_second"] * TRAIN_PASSES * macs / rate,
                "plan": m["plan"]}
        per = [v["seconds_per_1000_readings"] for v in row["lengths"].values()]
        row["linearity"] = max(per) / min(per)
        rows[arch] = row
    return {"archs": rows, "lengths": list(lengths), "readings": readings, "epochs": epochs,
            "gemm_macs_per_s": rate, "threads": torch.get_num_threads()}


def format_train_throughput(r: dict) -> str:
    L = r["lengths"]
    lines = [f"Training throughput, {r['readings']:,} synthetic IMU readings as recordings of "
             f"{', '.join(f'{t:,}' for t in L)} readings ({r['epochs']} epochs of each default schedule, "
             f"{r['threads']} torch thread(s); GEMM {r['gemm_macs_per_s'] / 1e9:.1f} GMAC/s, bound = GEMM / "
             f"({TRAIN_PASSES} x MACs per reading)):",
             "  arch          MACs " + "".join(f" | T={t:<6,d} readings/s  bound  s/epoch" for t in L)
             + " | s per reading, max/min"]
    for arch, row in r["archs"].items():
        cells = "".join(f" | {v['readings_per_s']:19,.0f} {v['share_of_gemm_bound']:5.1%} {v['seconds_per_epoch']:8.2f}"
                        for v in row["lengths"].values())
        lines.append(f"  {arch:11s} {row['macs_per_reading']:6,d}{cells} | {row['linearity']:.2f}x")
    rps = {a: min(v["readings_per_s"] for v in row["lengths"].values()) for a, row in r["archs"].items()}
    if "gru" in rps and {"lstm", "ssm"} & set(rps):
        ref = {a: rps[a] / rps["gru"] for a in ("lstm", "ssm") if a in rps}
        lines.append("  GRU's slowest readings/s against the slowest of: "
                     + ", ".join(f"{a} {v:.2f}x" for a, v in ref.items()))
    if {"gru", "transformer"} <= set(r["archs"]):
        g, t = (r["archs"][a]["lengths"].values() for a in ("gru", "transformer"))
        lines.append("  GRU's readings/s over the Transformer's: " + ", ".join(
            f"T={n:,} {a['readings_per_s'] / b['readings_per_s']:.2f}x" for n, a, b in zip(L, g, t)))
    return "\n".join(lines)


def run_bench(repeats: int = 2000, warmup: int = 200, cache_lengths=(16, 256, 1024), progress=True,
              backends=("onnxruntime", "native")) -> dict:
    import onnxruntime as ort
    import torch

    from edgeseq.runtime import StreamSession
    from edgeseq.runtime.providers import session_options
    from export import export_model

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    out = {"repeats": repeats, "warmup": warmup, "machine": machine_info(), "threads": 1}
    with tempfile.TemporaryDirectory() as tmp:
        gru_ckpt = _random_checkpoint("gru", hidden=64)
        gru_path = Path(tmp) / "gru.onnx"
        export_model(gru_ckpt, gru_path)
        F = len(gru_ckpt["features"])
        x = rng.standard_normal((1, F)).astype(np.float32)

        floor = ort.InferenceSession(identity_model(F), session_options(1), providers=["CPUExecutionProvider"])
        floor_run = _median_us(lambda: floor.run(None, {"x": x}), repeats, warmup)
        xo = ort.OrtValue.ortvalue_from_numpy(x)
        yo = ort.OrtValue.ortvalue_from_numpy(np.zeros_like(x))
        b = floor.io_binding()
        b.bind_ortvalue_input("x", xo)
        b.bind_ortvalue_output("y", yo)
        floor_bind = _median_us(lambda: floor.run_with_iobinding(b), repeats, warmup)

        from edgeseq.train import model_from_checkpoint
        model = model_from_checkpoint(gru_ckpt)
        xt = torch.from_numpy(x)
        state = [model.init_state(1)]

        @torch.no_grad()
        def torch_step():
            _, state[0] = model.step(xt, state[0])
        torch_eager = _median_us(torch_step, repeats, warmup)

        from edgeseq.runtime import native
        push_backend = "native" if "native" in backends and native.available() else "onnxruntime"
        sess = StreamSession(gru_path, backend=push_backend)
        plain = sess.session
        feeds = {"reading": x, "state_in.0": np.zeros((1, 64), np.float32)}
        names = [o.name for o in plain.get_outputs()]

        def plain_step():
            res = plain.run(names, feeds)
            feeds["state_in.0"] = res[-1]
        ort_plain = _median_us(plain_step, repeats, warmup)
        runtime = _median_us(lambda: sess.push(x), repeats, warmup)
        out["gru"] = {
            "hidden": 64,
            "torch_eager": torch_eager,
            "ort_session_run": ort_plain,
            "edgeseq_push": runtime,
            "edgeseq_push_backend": sess.backend,
            "ort_floor_session_run": floor_run,
            "ort_floor_iobinding": floor_bind,
            "ratio_push_to_floor": runtime["median_us"] / floor_run["median_us"],
            "ratio_push_to_floor_iobinding": runtime["median_us"] / floor_bind["median_us"],
            "speedup_vs_torch_eager": torch_eager["median_us"] / runtime["median_us"],
        }

        tr_ckpt = _random_checkpoint("transformer", window=0)     # full history: the cache against recomputing it
        tr_path = Path(tmp) / "transformer.onnx"
        export_model(tr_ckpt, tr_path)
        full_path = Path(tmp) / "transformer_full.onnx"
        _Recompute(tr_ckpt, full_path)
        full = ort.InferenceSession(str(full_path), session_options(1), providers=["CPUExecutionProvider"])
        rows = []
        n_rep = max(repeats // 10, 50)
        for T in cache_lengths:
            s = StreamSession(tr_path, backend="onnxruntime")
            for _ in range(T):
                s.push(x)
            snap = s.snapshot()

            def cached():
                s.restore(snap)                 # the cache stays at T rows for every timed call
                s.push(x)
            restore_only = _median_us(lambda: s.restore(snap), n_rep, 10)
            c = _median_us(cached, n_rep, 10)
            c_net = c["median_us"] - restore_only["median_us"]
            window = rng.standard_normal((1, T + 1, F)).astype(np.float32)
            r = _median_us(lambda: full.run(["logits"], {"window": window}), max(n_rep // 5, 20), 3)
            rows.append({"history": T, "backend": "onnxruntime", "cached_us": c_net, "cached_with_restore_us": c["median_us"],
                         "recompute_us": r["median_us"], "speedup": r["median_us"] / c_net,
                         "state_bytes_per_stream": s.state_nbytes_at(T)})
        out["transformer"] = rows
        out["backends"] = run_backends(gru_ckpt, Path(tmp), repeats, warmup, lambda: floor.run_with_iobinding(b),
                                       backends=tuple(backends))
        if "native" in backends:
            from edgeseq.report.bench_archs import run_arch_steps
            out["archs"] = run_arch_steps(Path(tmp), repeats, warmup, lambda: floor.run_with_iobinding(b))
    return out


def run_backends(gru_ckpt, tmp: Path, repeats: int, warmup: int, floor_call,
                 streams=(1, 16, 256, 1024), backends=("onnxruntime", "native")) -> dict:
    """The step backends side by side on one GRU (hidden 64), float and static int8, calls
    interleaved: StreamSession.push per call (median us) at 1, 16, 256 and 1024 streams,
    readings/s, and each backend's share of the GEMM bound (this core's single-thread float32
    GEMM rate, `edgeseq.runtime.native.bench.gemm_rate`, over the step's multiply-adds per
    reading). At one stream, in the same interleaved rounds: `floor_call` (onnxruntime's
    per-call floor, an Identity graph with IO binding), the bare IO-binding call of the same
    graph (push less that call is the onnxruntime backend's Python overhead) and the native C
    step alone (push over it is the native session's wrapper), each called from a lambda as the
    pushes are, so a ratio compares what runs inside the calls. `backends` picks which push."""
    from edgeseq.runtime import StreamSession, native
    from edgeseq.runtime.native.bench import gemm_rate, macs_per_reading
    from export import export_int8, export_model

    if "native" in backends and not native.available():
        if backends == ("native",):
            return {"native": native.why_unavailable()}
        backends = tuple(b for b in backends if b != "native")
    paths = {"float": tmp / "gru-b.onnx", "int8": tmp / "gru-b8.onnx"}
    export_model(gru_ckpt, paths["float"])
    export_int8(gru_ckpt, paths["int8"], "static", keep_anyway=True)
    rng = np.random.default_rng(0)
    rate = gemm_rate()
    out = {"simd": native.simd(), "int8_kernel": ("AVX-512 VNNI" if native.vnni() else "exact float32 products")
           if native.available() else "", "backends": list(backends), "gemm_macs_per_s": rate,
           "rows": []}
    if not native.available():
        out["native"] = native.why_unavailable()
    for kind, path in paths.items():
        for B in streams:
            x = rng.standard_normal((B, 6)).astype(np.float32)
            sessions = {b: StreamSession(path, streams=B, backend=b) for b in backends}
            fns = {b: (lambda s=s: s.push(x)) for b, s in sessions.items()}
            if B == 1:
                fns["floor"] = floor_call
                if "onnxruntime" in sessions:
                    s = sessions["onnxruntime"]
                    bind = s._bindings[0]
                    fns["bare"] = lambda: s.session.run_with_iobinding(bind)
                if "native" in sessions and sessions["native"]._native is not None:
                    nat = sessions["native"]._native
                    nat.x[:] = x
                    fns["c_step"] = lambda: nat.run()   # from a lambda, as the push: the difference is the wrapper
            rounds = max(20, repeats * 4 // (B + 3))
            t = _interleaved_us(fns, rounds, max(5, warmup // (B + 1)))
            macs = macs_per_reading(sessions[backends[0]].meta)
            bound = rate / macs
            row = {"model": kind, "streams": B, "macs_per_reading": macs, "gemm_bound_readings_per_s": bound}
            for b in backends:
                rps = B / t[b] * 1e6
                row[b] = {"us_per_call": t[b], "readings_per_s": rps, "share_of_gemm_bound": rps / bound}
            if "floor" in t:
                row["floor_iobinding_us"] = t["floor"]
                out.setdefault("floor_iobinding_us", t["floor"])
            if "bare" in t:
                row["onnxruntime"]["bare_iobinding_us"] = t["bare"]
                row["onnxruntime"]["python_overhead_us"] = t["onnxruntime"] - t["bare"]
            if "c_step" in t:
                row["native"]["c_step_us"] = t["c_step"]
                row["native"]["push_over_c_step"] = t["native"] / t["c_step"]
            out["rows"].append(row)
    return out


def _cpu_model() -> str:
    """The processor's model name (Linux /proc/cpuinfo), else platform.processor()."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine_info() -> dict:
    import os
    import onnxruntime as ort
    import datetime
    info = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpu": _cpu_model(),
            "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "onnxruntime": ort.__version__, "numpy": np.__version__, "processor": platform.processor()}
    if hasattr(os, "getloadavg"):            # other work on the machine moves every time measured
        info["load_1min"] = round(os.getloadavg()[0], 2)
    try:
        import torch
        info["torch"] = torch.__version__
    except ImportError:
        pass
    from edgeseq.runtime import native
    if native.available():                  # the vector width the native step runs at: figures differ by it
        info["simd"] = native.simd() + (", AVX-512 VNNI" if native.vnni() else "")
    return info


def format_bench(r: dict) -> str:
    g = r["gru"]
    lines = [
        f"GRU step (hidden {g['hidden']}, batch 1), median per reading over {r['repeats']} calls:",
        f"  onnxruntime floor, Identity, session.run   {g['ort_floor_session_run']['median_us']:8.1f} us",
        f"  onnxruntime floor, Identity, IO binding    {g['ort_floor_iobinding']['median_us']:8.1f} us",
        f"  torch eager step                           {g['torch_eager']['median_us']:8.1f} us",
        f"  onnxruntime session.run loop               {g['ort_session_run']['median_us']:8.1f} us",
        f"  edgeseq StreamSession.push, {g['edgeseq_push_backend'] + ' backend':18s}{g['edgeseq_push']['median_us']:8.1f} us",
        f"  push / floor (session.run): {g['ratio_push_to_floor']:.2f}x   push / floor (IO binding): "
        f"{g['ratio_push_to_floor_iobinding']:.2f}x   torch eager / push: {g['speedup_vs_torch_eager']:.2f}x",
        "Transformer step on onnxruntime, cached vs recomputing the whole history (the native step: below):",
        "  history   cached us   recompute us   speedup   cache bytes/stream",
    ]
    for row in r["transformer"]:
        lines.append(f"  {row['history']:7d}   {row['cached_us']:9.1f}   {row['recompute_us']:12.1f}   "
                     f"{row['speedup']:6.1f}x   {row['state_bytes_per_stream']:10d}")
    b = r.get("backends")
    if b and b.get("rows"):
        names = b["backends"]
        native_note = (f" (native: {b['simd'] or '-'}, int8 products {b['int8_kernel'] or '-'})"
                       if "native" in names else "")
        lines.append(f"Step backends, GRU hidden 64, StreamSession.push, calls interleaved{native_note}; this core's "
                     "single-thread GEMM "
                     f"{b['gemm_macs_per_s'] / 1e9:.1f} GMAC/s, so the GEMM bound is "
                     f"{b['gemm_macs_per_s'] / b['rows'][0]['macs_per_reading'] / 1e6:.2f} M readings/s "
                     f"({b['rows'][0]['macs_per_reading']:,} MACs a reading):")
        lines.append("  model  streams " + " | ".join(f"{n:>11s} us       rd/s  of bound" for n in names))
        for row in b["rows"]:
            cells = [f"{row[n]['us_per_call']:14.2f} {row[n]['readings_per_s']:10,.0f} {row[n]['share_of_gemm_bound']:9.0%}"
                     for n in names]
            lines.append(f"  {row['model']:5s} {row['streams']:7d} " + " | ".join(cells))
        for row in b["rows"]:
            if row["streams"] != 1:
                continue
            floor = row["floor_iobinding_us"]
            parts = [f"{n} push {row[n]['us_per_call'] / floor:.2f}x" for n in names]
            lines.append(f"  batch 1 {row['model']} against the IO-binding floor ({floor:.2f} us, timed in the same "
                         "interleaved rounds): " + ", ".join(parts))
            nat = row.get("native", {})
            if "c_step_us" in nat:
                lines.append(f"    native backend: push {nat['us_per_call']:.2f} us = {nat['push_over_c_step']:.2f}x "
                             f"the C step alone ({nat['c_step_us']:.2f} us)")
            o = row.get("onnxruntime", {})
            if "python_overhead_us" in o:
                lines.append(f"    onnxruntime backend: push {o['us_per_call']:.2f} us = the graph's IO-binding call "
                             f"{o['bare_iobinding_us']:.2f} us + Python {o['python_overhead_us']:.2f} us")
        if b.get("native"):
            lines.append(f"  native backend not timed: {b['native']}")
    elif b:
        lines.append(f"Step backends: {b['native']}")
    if "archs" in r:
        from edgeseq.report.bench_archs import format_arch_steps
        lines.extend(format_arch_steps(r["archs"]))
    if "train" in r:
        t = r["train"]
        lines.append(f"Training, default schedule on BasicMotions ({t['threads']} torch threads):")
        for arch, row in t["archs"].items():
            kept = f", kept {row['best_epoch']}" if row.get("best_epoch") else ""
            cont = row.get("test_continuous_accuracy")
            lines.append(f"  {arch:12s} {row['seconds']:6.1f} s  ({row['epochs']} epochs{kept}, test accuracy "
                         f"{row['test_accuracy']:.3f} per sequence" + (f", {cont:.3f} never reset" if cont else "")
                         + ("" if row.get("converged", True) else ", not converged") + ")")
        if "gru" in t["archs"]:
            lines.append(f"  default GRU under {t['target_s']:.0f} s: {'met' if t['gru_within_target'] else 'NOT met'}")
    if "throughput" in r:
        lines.append(format_train_throughput(r["throughput"]))
    m = r["machine"]
    lines.append(f"({m['machine']}, {m['cpus']} cpus, onnxruntime {m['onnxruntime']}, torch {m.get('torch', '-')}, "
                 "1 thread)")
    return "\n".join(lines)
