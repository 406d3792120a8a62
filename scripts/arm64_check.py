"""The checks scripts/arm64_pi.sh runs: `ref` on the host, `check` in the emulated arm64 root.

    python scripts/arm64_check.py ref --models DIR --out host.npz          # x86 host, any install
    python scripts/arm64_check.py check --models DIR --ref host.npz --json out.json   # arm64 root

Both stream the same readings (the embedded BasicMotions test set, sequences end to end, as
`replay:basicmotions` replays them) one at a time through StreamSession over DIR/gru.onnx and
DIR/gru-int8.onnx. `ref` saves, per model and backend, every reading's probabilities and
logits. `check` first proves the runtime imports without torch, then opens each model with
backend="native" (the session probes the C step against onnxruntime and refuses where they
disagree, so opening is itself the parity check), compares its outputs with onnxruntime's
here and with the host's, and times one push per backend. Needs only the runtime install.
"""

import argparse
import importlib.util
import json
import platform
import sys
import time

MODELS = ("gru.onnx", "gru-int8.onnx")
BACKENDS = ("native", "onnxruntime")


def _readings(features, n):
    import numpy as np

    from edgeseq.runtime.live import ReplaySource
    rows = ReplaySource("basicmotions", features).rows
    return np.ascontiguousarray(rows[:n], dtype=np.float32)


def _stream(path, backend, X):
    """Every reading's probabilities and logits, [N, C] each, pushed one at a time (two sessions:
    push gives the probabilities the backend computes itself, push_logits the logits)."""
    import numpy as np

    from edgeseq.runtime import StreamSession
    a, b = StreamSession(path, backend=backend), StreamSession(path, backend=backend)
    assert a.backend == backend, f"{path}: asked for {backend}, got {a.backend} ({a.backend_note})"
    probs = np.stack([a.push(x[None])[0] for x in X])
    logits = np.stack([b.push_logits(x[None])[0].copy() for x in X])
    return probs, logits


def _time_push(path, backend, X, repeat):
    """Median and p99 microseconds of one StreamSession.push of one reading."""
    import numpy as np

    from edgeseq.runtime import StreamSession
    s = StreamSession(path, backend=backend)
    t = []
    for _ in range(repeat):
        s.reset()
        for x in X:
            x1 = x[None]
            t0 = time.perf_counter()
            s.push(x1)
            t.append(time.perf_counter() - t0)
    t = np.asarray(t) * 1e6
    return round(float(np.median(t)), 1), round(float(np.percentile(t, 99)), 1)


def ref(args):
    import numpy as np

    from edgeseq.runtime import StreamSession
    from edgeseq.runtime import native
    out = {"machine": np.array(platform.machine()), "simd": np.array(native.simd())}
    for name in MODELS:
        path = f"{args.models}/{name}"
        X = _readings(StreamSession(path, backend="onnxruntime").features, args.readings)
        out[f"{name}/readings"] = X
        for backend in BACKENDS:
            out[f"{name}/{backend}/probs"], out[f"{name}/{backend}/logits"] = _stream(path, backend, X)
    np.savez(args.out, **out)
    print(f"host reference: {platform.machine()} ({native.simd()}), {len(X)} readings per model -> {args.out}")


def check(args):
    rep = {"machine": platform.machine(), "python": platform.python_version()}
    import edgeseq.runtime  # noqa: F401
    import edgeseq.runtime.live  # noqa: F401
    import edgeseq.runtime.native  # noqa: F401
    rep["torch_imported"] = "torch" in sys.modules
    rep["torch_installed"] = importlib.util.find_spec("torch") is not None
    import numpy as np
    import onnxruntime

    from edgeseq.runtime import native
    rep["numpy"], rep["onnxruntime"] = np.__version__, onnxruntime.__version__
    rep["native_available"], rep["simd"] = native.available(), native.simd()
    if not native.available():
        rep["native_why"] = native.why_unavailable()
    host = np.load(args.ref)
    rep["host"] = f"{host['machine']} ({host['simd']})"
    rep["models"] = {}
    for name in MODELS:
        path = f"{args.models}/{name}"
        X = host[f"{name}/readings"]
        m = rep["models"][name] = {"readings": int(len(X))}
        got = {}
        for backend in BACKENDS:
            try:
                got[backend] = _stream(path, backend, X)
                m[f"{backend}_opened"] = True
            except Exception as e:      # a refused native backend is the finding: report it, go on
                m[f"{backend}_opened"], m[f"{backend}_error"] = False, f"{type(e).__name__}: {e}"
        if "native" in got and "onnxruntime" in got:
            (pn, ln), (po, lo) = got["native"], got["onnxruntime"]
            m["native_vs_ort_here"] = {"probs_max_abs": float(np.abs(pn - po).max()),
                                       "logits_max_abs": float(np.abs(ln - lo).max()),
                                       "argmax_equal": float((pn.argmax(1) == po.argmax(1)).mean())}
        for backend, (p, lg) in got.items():
            hp, hl = host[f"{name}/{backend}/probs"], host[f"{name}/{backend}/logits"]
            m[f"{backend}_vs_host"] = {
                "probs_bit_equal": bool(np.array_equal(p.view(np.uint32), hp.view(np.uint32))),
                "probs_max_abs": float(np.abs(p - hp).max()),
                "probs_differing_values": int((p != hp).sum()),
                "logits_bit_equal": bool(np.array_equal(lg.view(np.uint32), hl.view(np.uint32))),
                "logits_max_abs": float(np.abs(lg - hl).max()),
                "argmax_equal": float((p.argmax(1) == hp.argmax(1)).mean())}
        for backend in got:
            med, p99 = _time_push(path, backend, X[:args.timing_readings], 1)
            m[f"{backend}_push_us"] = {"median": med, "p99": p99, "readings": int(min(len(X), args.timing_readings))}
    text = json.dumps(rep, indent=2)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    print(text)
    ok = (not rep["torch_imported"] and not rep["torch_installed"] and rep["native_available"]
          and all(m.get("native_opened") for m in rep["models"].values()))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("ref")
    r.add_argument("--models", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--readings", type=int, default=2000)
    c = sub.add_parser("check")
    c.add_argument("--models", required=True)
    c.add_argument("--ref", required=True)
    c.add_argument("--json")
    c.add_argument("--timing-readings", type=int, default=500)
    args = ap.parse_args()
    return ref(args) if args.cmd == "ref" else check(args)


if __name__ == "__main__":
    sys.exit(main() or 0)
