"""Builds the optional C extension edgeseq.runtime.native._es_native; everything else about the
package (metadata, dependencies, packages) lives in pyproject.toml.

The extension is optional: where no C compiler is found, or the build fails, the install goes
on without it and edgeseq runs every model on onnxruntime (`edgeseq.runtime.native.available()`
is False and says why). Build it in place with `python setup.py build_ext --inplace`, or
install with `pip install -e .` where a C compiler is installed (`apt-get install build-essential`).

It is compiled from one translation unit per step family and, for the state-space step, per
instruction set and part (edgeseq/runtime/native/es_native.h lists them), as many at once as
there are CPUs (EDGESEQ_BUILD_JOBS=n: n at once), with a line for each saying what it compiles.
"""

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE = os.path.join("edgeseq", "runtime", "native")

# -O3 for the vectorizer (-fno-math-errno lets it vectorize sqrtf: errno is never read); no
# -ffast-math: the float step keeps IEEE semantics (NaN checks, no reassociation), and the int8
# step is integer arithmetic that must stay bit-exact. Every unit gets these (and _unit_flags'
# few more, none of which changes a result).
if sys.platform == "win32":
    compile_args, libraries = ["/O2"], []
else:
    compile_args = ["-O3", "-std=gnu99", "-fno-strict-aliasing", "-fno-trapping-math", "-fno-math-errno", "-Wno-psabi"]
    libraries = ["m"]

# The translation units, the longest to compile first (so that they start first), with what
# each compiles: the line the build prints for it.
UNITS = [
    ("es_attn_step.c", "Transformer step (baseline, AVX2, AVX-512 builds)"),
    ("es_ssm_run_v4.c", "state-space step, rows, x86-64-v4 (AVX-512)"),
    ("es_ssm_run_v3.c", "state-space step, rows, x86-64-v3 (AVX2, FMA)"),
    ("es_rnn_step.c", "RNN/GRU/LSTM step, float32 and int8 (baseline, AVX2, AVX-512, VNNI builds)"),
    ("es_ssm_run_base.c", "state-space step, rows, baseline"),
    ("es_ssm_lanes8_v3.c", "state-space step, 8-stream lanes, x86-64-v3 (AVX2, FMA)"),
    ("es_ssm_lanes16_base.c", "state-space step, 16-stream lanes, baseline"),
    ("es_ssm_lanes16_v3.c", "state-space step, 16-stream lanes, x86-64-v3 (AVX2, FMA)"),
    ("es_ssm_lanes8_base.c", "state-space step, 8-stream lanes, baseline"),
    ("es_ssm_lanes8_v4.c", "state-space step, 8-stream lanes, x86-64-v4 (AVX-512)"),
    ("es_ssm_lanes16_v4.c", "state-space step, 16-stream lanes, x86-64-v4 (AVX-512)"),
    ("es_ssm_step.c", "state-space step's type and its VNNI, AVX2 and AVX-512 kernels"),
    ("_es_native.c", "module, reading checks, the steps' run, push and set_bounds, Gate, Lock and Pusher"),
]
HEADERS = [os.path.join("firmware_sim", "kernels", h) for h in ("es_kernels.h", "es_decide.h")] + [
    os.path.join(NATIVE, h) for h in (
        "es_native.h", "es_float.h", "es_attn.h", "es_attn_step.h", "es_ssm.h", "es_ssm_lanes.h", "es_ssm_object.h",
        "es_ssm_step.h", "es_ssm_step_lanes.h", "es_ssm_run.h", "es_ssm_avx2.h", "es_ssm_simd.h", "es_push.h")]
WHAT = {os.path.normpath(os.path.join(NATIVE, f)): what for f, what in UNITS}

# gcc only, where its compile time and memory were measured (x86-64; docs/install.md), none of
# them changing a result:
# - every unit: collect garbage sooner (a unit's peak memory less by up to 40%, its time more by
#   ~10%; the object code is the same, byte for byte) and debug information of level 1 (line
#   tables, no local variables: ~12% less time);
# - the state-space step's units that run only on hosts without AVX2, or with AVX-512 but not
#   x86-64-v4 (16-stream lanes on a narrower target, the baseline's 8-stream lanes and rows): no
#   RTL GCSE and no load CSE after reload, which took most of their time (2-5x); passes that only
#   remove redundant loads and expressions, so every float is the same. The two 16-stream ones
#   collect garbage sooner still (their memory ~385 MB, not ~400).
GCC_ALL = ["--param=ggc-min-expand=30", "--param=ggc-min-heapsize=32768", "-g1"]
GCC_NARROW = ["-fno-gcse", "-fno-gcse-after-reload"]
GCC_UNIT = {
    "es_ssm_lanes16_v3.c": GCC_NARROW + ["--param=ggc-min-expand=10", "--param=ggc-min-heapsize=8192"],
    "es_ssm_lanes16_base.c": GCC_NARROW + ["--param=ggc-min-expand=10", "--param=ggc-min-heapsize=8192"],
    "es_ssm_lanes8_base.c": GCC_NARROW,
    "es_ssm_run_base.c": GCC_NARROW,
}


def _unit_flags(compiler) -> dict:
    """source path -> the extra flags above, for gcc on x86-64; {} elsewhere."""
    import platform
    import subprocess
    if platform.machine().lower() not in ("x86_64", "amd64") or not getattr(compiler, "compiler_so", None):
        return {}
    try:
        out = subprocess.run(compiler.compiler_so[:1] + ["--version"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    if "Free Software Foundation" not in out or "clang" in out.lower():
        return {}
    return {os.path.normpath(os.path.join(NATIVE, f)): GCC_ALL + GCC_UNIT.get(f, []) for f, _ in UNITS}


class BuildExt(build_ext):
    """build_ext that compiles an extension's translation units in parallel, a line for each.

    setuptools compiles one extension's sources one after another; this runs the compiler's
    own per-source step (CCompiler._compile, as CCompiler.compile does) on a thread pool of one
    worker per CPU. Compilers without that step (MSVC) compile as before, one after another."""

    def build_extension(self, ext):
        cc = self.compiler
        if cc.compiler_type not in ("unix", "cygwin", "mingw32"):       # those compile through _compile
            return super().build_extension(ext)
        raw = os.environ.get("EDGESEQ_BUILD_JOBS", "")
        if raw and not (raw.isdigit() and int(raw) > 0):
            raise SystemExit(f"EDGESEQ_BUILD_JOBS={raw!r}: give how many units to compile at once, a whole "
                             "number of 1 or more, or unset it for one per CPU")
        jobs = int(raw) if raw else os.cpu_count() or 1
        serial = cc.compile
        t0 = time.monotonic()
        compiled = []

        def compile_parallel(sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                             extra_preargs=None, extra_postargs=None, depends=None):
            macros, objects, extra_postargs, pp_opts, build = cc._setup_compile(
                output_dir, macros, include_dirs, sources, depends, extra_postargs)
            cc_args = cc._get_cc_args(pp_opts, debug, extra_preargs)
            flags = _unit_flags(cc)
            todo = [(obj, build[obj]) for obj in objects if obj in build]    # the rest is up to date
            rank = {w: i for i, w in enumerate(WHAT)}                         # setuptools sorts the sources
            todo.sort(key=lambda item: rank.get(os.path.normpath(item[1][0]), len(rank)))
            print(f"edgeseq native: compiling {len(todo)} of {len(objects)} units of {ext.name}, "
                  f"{min(jobs, len(todo)) or 1} at a time", flush=True)

            def one(item):
                obj, (src, ext_) = item
                print(f"edgeseq native: compiling {WHAT.get(os.path.normpath(src), src)} ({src}) ...", flush=True)
                t = time.monotonic()
                cc._compile(obj, src, ext_, cc_args, extra_postargs + flags.get(os.path.normpath(src), []), pp_opts)
                print(f"edgeseq native: compiled {os.path.basename(src)} in {time.monotonic() - t:.0f} s", flush=True)

            compiled.extend(todo)
            pool = ThreadPoolExecutor(max_workers=max(1, min(jobs, len(todo))))
            try:
                for _ in pool.map(one, todo):     # re-raises a unit's CompileError here
                    pass
            finally:
                pool.shutdown(wait=True, cancel_futures=True)     # a failed unit: start no more
            return objects

        cc.compile = compile_parallel
        try:
            super().build_extension(ext)
        finally:
            cc.compile = serial
        if compiled:
            print(f"edgeseq native: built {ext.name} in {time.monotonic() - t0:.0f} s", flush=True)
        else:
            print(f"edgeseq native: {ext.name} is up to date (nothing compiled)", flush=True)


# numpy's headers where numpy is importable at build time (pyproject's build requirements list
# it): readings are read and probabilities copied through its C API; without them, through the
# buffer protocol and ndarray.copy(), a little slower.
include_dirs, macros = [os.path.join("firmware_sim", "kernels"), NATIVE], []
try:
    import numpy
    include_dirs.append(numpy.get_include())
    macros.append(("ES_NUMPY", "1"))
except ImportError:
    pass

native = Extension(
    "edgeseq.runtime.native._es_native",
    sources=[os.path.join(NATIVE, f) for f, _ in UNITS],
    include_dirs=include_dirs,
    define_macros=macros,
    depends=HEADERS,
    extra_compile_args=compile_args,
    libraries=libraries,
    optional=True,
)

setup(ext_modules=[native], cmdclass={"build_ext": BuildExt})
