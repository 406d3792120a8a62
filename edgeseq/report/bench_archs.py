"""`edgeseq bench`'s SSM and Transformer rows: both on the native step next to onnxruntime.

The SSM (fixed and selective, float32 and static int8) at 1 and 1,024 streams; the Transformer
with its window (50) full, and with no window at cached histories of 16, 50, 256 and 1,024
readings. Untrained models of the default sizes (latency does not depend on what they learned),
one thread, `StreamSession.push` per call.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeseq.report.bench_kit import _interleaved_us, _random_checkpoint

HISTORIES = (16, 50, 256, 1024)
GEMM_N = 512                            # the single-thread GEMM the bound is measured on (n x n by n x n)
MANY = 1024                             # streams of the SSM's throughput rows


def run_arch_steps(tmp: Path, repeats: int, warmup: int, floor_call) -> dict:
    """The SSM and the Transformer on the native step next to onnxruntime, us per call (median).

    SSM at one stream: each variant's float and int8 native pushes, their C steps alone and
    `floor_call` (onnxruntime's per-call floor) run interleaved, the onnxruntime pushes in rounds
    of their own (a 15-100 us call between two floor calls would slow the floor).

    SSM at 1,024 streams: all four models' pushes (onnxruntime and native) and a 512 x 512 x 512
    float32 GEMM (numpy, one BLAS thread) in one interleaved loop, so that a busy spell of a
    shared machine falls on every model alike. The share of the GEMM bound (the GEMM's rate over
    the step's multiply-adds a reading, `edgeseq.runtime.native.bench.macs_per_reading`) comes
    from the fastest call of each in max(20, repeats / 5) rounds: a 2.6 ms GEMM is preempted far
    more often than a 0.3 ms push, so medians would flatter the push. Each native push runs twice
    a round: right after its model's onnxruntime push (`share_of_gemm_bound_after_others`: its
    state and weights fetched again after the other calls' traffic) and right after itself
    (`share_of_gemm_bound`: push after push, as a gateway's loop runs it).

    Transformer: window 50 full against the floor, interleaved; no window (`window=0`) at each
    cached history (max_history = the history, sliding), where its time grows with the history.

    Returns {"gemm_macs_per_s", "ssm": [rows], "transformer": {"window_full", "history"}}, or
    {"native": why} where the native step cannot be built on this host."""
    from edgeseq.runtime import native
    from edgeseq.runtime.native.bench import gemm_rate, macs_per_reading
    from export import export_int8, export_model

    if not native.available():
        return {"native": native.why_unavailable()}
    rng = np.random.default_rng(0)
    rate = gemm_rate()
    out = {"gemm_macs_per_s": rate, "ssm": [], "transformer": {}}
    models = {}                         # (variant, kind) -> path, features
    for variant in ("fixed", "selective"):
        ckpt = _random_checkpoint("ssm", selective=variant == "selective")
        paths = {"float": tmp / f"ssm-{variant}.onnx", "int8": tmp / f"ssm-{variant}-8.onnx"}
        export_model(ckpt, paths["float"])
        export_int8(ckpt, paths["int8"], "static", keep_anyway=True)
        for kind, path in paths.items():
            models[variant, kind] = path, len(ckpt["features"])
    ones = {v: _ssm_one({k: models[v, k] for k in ("float", "int8")}, rng, repeats, warmup, floor_call)
            for v in ("fixed", "selective")}
    many = _ssm_many(models, rng, repeats, warmup)
    g = many.pop("gemm")
    r_b = GEMM_N ** 3 / g * 1e6                # the GEMM's rate in the same rounds
    for variant, kind in models:
        sessions, t = ones[variant][kind]
        macs = macs_per_reading(sessions["native"].meta)
        row = {"variant": variant, "model": kind, "streams": 1, "macs_per_reading": macs,
               "gemm_bound_readings_per_s": rate / macs, "kernel": sessions["native"]._native.kernel,
               "floor_iobinding_us": t["floor"]}
        for b in ("onnxruntime", "native"):
            row[b] = {"us_per_call": t[b], "readings_per_s": 1e6 / t[b], "share_of_gemm_bound": 1e6 / t[b] * macs / rate}
        row["native"].update(c_step_us=t["c_step"], over_floor=t["native"] / t["floor"],
                             int8_over_float=t["int8_over_float"])
        out["ssm"].append(row)
        t, kernel = many[variant, kind]
        row = {"variant": variant, "model": kind, "streams": MANY, "macs_per_reading": macs,
               "gemm_bound_readings_per_s": r_b / macs, "kernel": kernel, "gemm_macs_per_s_interleaved": r_b}
        for b in ("onnxruntime", "native"):
            rps = MANY / t[b] * 1e6
            row[b] = {"us_per_call": t[b], "readings_per_s": rps, "share_of_gemm_bound": rps * macs / r_b}
        row["native"].update(                  # fastest native calls against the fastest GEMM of the same rounds
            fastest_us_per_call=t["again"], share_of_gemm_bound=MANY / t["again"] * 1e6 * macs / r_b,
            fastest_after_others_us_per_call=t["after"],
            share_of_gemm_bound_after_others=MANY / t["after"] * 1e6 * macs / r_b)
        out["ssm"].append(row)
    out["transformer"] = _transformer(tmp, rng, repeats, warmup, floor_call)
    return out


def format_arch_steps(a: dict) -> list:
    if a.get("native"):
        return [f"SSM and Transformer on the native step: not timed ({a['native']})"]
    lines = ["SSM (d_model 32, d_state 32, 2 layers), StreamSession.push; at 1 stream the float and int8 pushes, "
             "their C steps and the floor interleaved in one loop; at 1,024 every model's pushes and a GEMM in one loop, "
             "the share of the GEMM bound from the fastest push and GEMM of the same rounds (the push right after "
             "a push; in brackets right after the model's onnxruntime push):",
             "  variant    model  streams   onnxruntime us   native us   native rd/s  of bound  vs floor  C step us"
             "  int8/float"]
    for r in a["ssm"]:
        nat = r["native"]
        extra = (f"{nat['over_floor']:8.2f}x {nat['c_step_us']:10.2f}  {nat['int8_over_float']:9.2f}x"
                 if r["streams"] == 1 else f"({nat['share_of_gemm_bound_after_others']:.0%})")
        lines.append(f"  {r['variant']:9s}  {r['model']:5s} {r['streams']:8d} {r['onnxruntime']['us_per_call']:16.2f} "
                     f"{nat['us_per_call']:11.2f} {nat['readings_per_s']:13,.0f} {nat['share_of_gemm_bound']:9.0%} {extra}")
    kernels = sorted({r["kernel"] for r in a["ssm"] if r.get("kernel") and r["model"] == "int8"})
    if kernels:
        lines.append(f"  int8 products: {'; '.join(kernels)}")
    w = a["transformer"]["window_full"]
    lines.append(f"Transformer, window {w['window']} full, 1 stream: native push {w['native_us']:.2f} us = "
                 f"{w['over_floor']:.2f}x the IO-binding floor ({w['floor_iobinding_us']:.2f} us); onnxruntime "
                 f"{w['onnxruntime_us']:.1f} us")
    lines.append("Transformer, no window, native push by cached history: " + ", ".join(
        f"{h['history']}: {h['native_us']:.2f} us ({h['state_bytes'] // 1024} KiB)" for h in a["transformer"]["history"]))
    return lines


def _ssm_one(paths: dict, rng, repeats: int, warmup: int, floor_call) -> dict:
    """One stream: {kind: (sessions, times)} for kind float and int8 of one variant."""
    from edgeseq.runtime import StreamSession
    one = {}                            # both models' native pushes, C steps and the floor in one loop
    for kind, (path, F) in paths.items():
        x = rng.standard_normal((1, F)).astype(np.float32)
        one[kind] = {b: StreamSession(path, streams=1, backend=b) for b in ("onnxruntime", "native")}
        one[kind]["native"]._native.x[:] = x
        one[kind]["x"] = x
    rounds, warm = max(20, repeats), max(5, warmup // 2)
    fns = {"floor": floor_call}
    for kind, o in one.items():
        fns[f"native_{kind}"] = lambda o=o: o["native"].push(o["x"])
        fns[f"c_step_{kind}"] = lambda n=o["native"]._native: n.run()     # called as the push is
    t1 = _interleaved_us(fns, rounds, warm)
    res = {}
    for kind, o in one.items():          # onnxruntime's push in rounds of its own: a long call between two
        ort = _interleaved_us({"o": lambda o=o: o["onnxruntime"].push(o["x"])}, rounds, warm)["o"]   # floor calls
        res[kind] = o, {"native": t1[f"native_{kind}"], "onnxruntime": ort, "floor": t1["floor"],   # would slow it
                        "c_step": t1[f"c_step_{kind}"], "int8_over_float": t1["native_int8"] / t1["native_float"]}
    return res


def _ssm_many(models: dict, rng, repeats: int, warmup: int) -> dict:
    """MANY streams, every model in one loop: {(variant, kind): (times, native kernel), "gemm": us}."""
    from edgeseq.runtime import StreamSession
    ga, gb = rng.random((GEMM_N, GEMM_N), np.float32), rng.random((GEMM_N, GEMM_N), np.float32)
    fns, kernels = {}, {}
    for key, (path, F) in models.items():
        x = rng.standard_normal((MANY, F)).astype(np.float32)
        for b in ("onnxruntime", "native"):
            s = StreamSession(path, streams=MANY, backend=b)
            fns[key + (b,)] = lambda s=s, x=x: s.push(x)
            if b == "native":
                kernels[key] = s._native.kernel
    fns["gemm"] = lambda: ga @ gb
    rounds, warm = max(20, repeats * 4 // (MANY + 3)), max(5, warmup // (MANY + 1))
    med = _interleaved_us(fns, rounds, warm)
    fast = {}                           # the native push again right after itself
    for k, fn in fns.items():
        fast[k] = fn
        if k != "gemm" and k[2] == "native":
            fast[k[:2] + ("again",)] = fn
    low = _interleaved_us(fast, max(rounds, repeats // 5), 1, stat=np.min)
    res = {"gemm": low["gemm"]}
    for key in models:
        res[key] = ({"onnxruntime": med[key + ("onnxruntime",)], "native": med[key + ("native",)],
                     "after": low[key + ("native",)], "again": low[key + ("again",)]}, kernels[key])
    return res


def _transformer(tmp: Path, rng, repeats: int, warmup: int, floor_call) -> dict:
    from edgeseq.runtime import StreamSession
    from export import export_model
    x = rng.standard_normal((1, 6)).astype(np.float32)
    w50 = tmp / "tr-w50.onnx"
    export_model(_random_checkpoint("transformer"), w50)
    sessions = {b: StreamSession(w50, max_history=50, on_full="slide", backend=b) for b in ("onnxruntime", "native")}
    for s in sessions.values():
        for _ in range(60):
            s.push(x)
    t = _interleaved_us({"native": lambda: sessions["native"].push(x), "floor": floor_call}, repeats, warmup)
    t["onnxruntime"] = _interleaved_us({"o": lambda: sessions["onnxruntime"].push(x)}, max(50, repeats // 4),
                                       max(5, warmup // 4))["o"]
    out = {"window_full": {"window": 50, "native_us": t["native"], "onnxruntime_us": t["onnxruntime"],
                           "floor_iobinding_us": t["floor"], "over_floor": t["native"] / t["floor"]}}
    w0 = tmp / "tr-w0.onnx"
    export_model(_random_checkpoint("transformer", window=0), w0)
    fns, held = {}, {}
    for n in HISTORIES:
        s = StreamSession(w0, max_history=n, on_full="slide", backend="native")
        for _ in range(n):
            s.push(x)
        fns[n], held[n] = (lambda s=s: s.push(x)), s.state_nbytes()
    t = _interleaved_us(fns, max(50, repeats // 4), max(5, warmup // 4))
    out["history"] = [{"history": n, "native_us": t[n], "state_bytes": held[n]} for n in HISTORIES]
    return out
