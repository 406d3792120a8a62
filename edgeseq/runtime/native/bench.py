"""Native step vs onnxruntime, side by side in one process, one thread each.

    python -m edgeseq.runtime.native.bench MODEL.onnx [MODEL.onnx ...] [--streams 1,16,256,1024]

For each model and stream count: microseconds per call and readings per second of
onnxruntime's IO-binding push (two pre-bound state banks, as StreamSession runs it) and of
`NativeStep.run()`, against the GEMM bound: this core's single-thread matrix-product rate
(numpy's float32 GEMM, 512 x 512 x 512, one BLAS thread) divided by the step's multiply-adds
per reading. Each figure is the fastest of many single calls, so a busy machine shows its
quiet moments rather than its load. Prints figures only; nothing here is a test.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import onnxruntime as ort

from edgeseq import contract
from edgeseq.runtime import native
from edgeseq.runtime.model import open_model

ONE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def fastest(fn, calls: int) -> float:
    best, clock = float("inf"), time.perf_counter
    for _ in range(calls):
        t = clock()
        fn()
        best = min(best, clock() - t)
    return best


def ort_push(path, B: int):
    """One IO-bound call of the graph for B streams, state ping-ponged between two banks."""
    sess, meta = open_model(path, threads=1)
    F, C = len(meta.features), len(meta.labels)
    x = ort.OrtValue.ortvalue_from_numpy(np.random.default_rng(0).standard_normal((B, F)).astype(np.float32))
    outs = {name: ort.OrtValue.ortvalue_from_numpy(np.zeros((B, C), np.float32))
            for name in (contract.LOGITS, contract.PROBS)}
    banks = [[ort.OrtValue.ortvalue_from_numpy(np.zeros((B, s.shape[1]), np.float32)) for s in meta.state]
             for _ in range(2)]
    binds = []
    for a, b in ((0, 1), (1, 0)):
        bind = sess.io_binding()
        bind.bind_ortvalue_input(contract.READING, x)
        for spec, v in zip(meta.state, banks[a]):
            bind.bind_ortvalue_input(spec.name, v)
        for name, v in outs.items():
            bind.bind_ortvalue_output(name, v)
        for spec, v in zip(meta.state, banks[b]):
            bind.bind_ortvalue_output(spec.output, v)
        binds.append(bind)
    bank = [0]

    def run():
        sess.run_with_iobinding(binds[bank[0]])
        bank[0] ^= 1
    return run, meta


def macs_per_reading(meta) -> int:
    """Multiply-adds of one reading's step of a recurrent or state-space model (its parsed
    metadata): the products' useful columns, no padding, no gates."""
    F, C, H = len(meta.features), len(meta.labels), int(meta.state[0].shape[1])
    if meta.arch == "ssm":                         # as edgeseq.models.ssm.SSM.macs_per_reading
        c = meta.config
        d, N = c["d_model"], c["d_state"]
        return F * d + c["layers"] * (d * (2 * N + d if c.get("selective") else N + d) + N * d + d * d) + d * C
    L = len(meta.state) // (2 if meta.arch == "lstm" else 1)
    G = {"rnn": 1, "gru": 3, "lstm": 4}[meta.arch]
    return sum(((F if layer == 0 else H) + H) * G * H for layer in range(L)) + H * C


def gemm_rate(n: int = 512, calls: int = 30) -> float:
    """This core's matrix-product rate, multiply-adds per second: numpy's float32 GEMM of
    n x n by n x n, the fastest of `calls` (one BLAS thread when OPENBLAS_NUM_THREADS=1 was
    set before numpy loaded, as `main` and `edgeseq bench` do)."""
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    return n ** 3 / fastest(lambda: a @ b, calls)


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(os.environ.get(k) != "1" for k in ONE_THREAD):      # numpy is loaded: its BLAS threads
        env = {**os.environ, **{k: "1" for k in ONE_THREAD}}      # are fixed, so start again with one
        os.execve(sys.executable, [sys.executable, "-m", "edgeseq.runtime.native.bench", *args], env)
    streams = [1, 16, 256, 1024]
    if "--streams" in args:
        i = args.index("--streams")
        streams = [int(s) for s in args[i + 1].split(",")]
        del args[i:i + 2]
    if not native.available():
        print(native.why_unavailable())
        return 1
    rate = gemm_rate()
    print(f"native step: {native.simd()}{', AVX-512 VNNI' if native.vnni() else ''}; "
          f"onnxruntime {ort.__version__}, numpy {np.__version__}; single-thread GEMM {rate / 1e9:.1f} GMAC/s")
    for path in args:
        for B in streams:
            ort_run, meta = ort_push(path, B)
            step = native.NativeStep(path, meta, B)
            step.x[:] = np.random.default_rng(0).standard_normal(step.x.shape).astype(np.float32)
            calls = max(50, 200000 // B)
            t_ort, t_nat = fastest(ort_run, calls), fastest(step.run, calls)
            bound = rate / macs_per_reading(meta)
            kind = "int8" if step.int8 else "float"
            print(f"{os.path.basename(str(path)):20s} {kind:5s} B={B:5d}  onnxruntime {t_ort * 1e6:9.2f} us "
                  f"{B / t_ort:12,.0f} rd/s ({B / t_ort / bound:4.0%}) | native {t_nat * 1e6:9.2f} us "
                  f"{B / t_nat:12,.0f} rd/s ({B / t_nat / bound:4.0%}; x{t_ort / t_nat:4.1f}) | GEMM bound "
                  f"{bound:12,.0f} rd/s | {step.kernel}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
