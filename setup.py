"""Builds the optional C extension edgeseq.runtime.native._es_native; everything else about the
package (metadata, dependencies, packages) lives in pyproject.toml.

The extension is optional: where no C compiler is found, or the build fails, the install goes
on without it and edgeseq runs every model on onnxruntime (`edgeseq.runtime.native.available()`
is False and says why). Build it in place with `python setup.py build_ext --inplace`, or
install with `pip install -e .` where a C compiler is installed (`apt-get install build-essential`).
"""

import os
import sys

from setuptools import Extension, setup

# -O3 for the vectorizer (-fno-math-errno lets it vectorize sqrtf: errno is never read); no
# -ffast-math: the float step keeps IEEE semantics (NaN checks, no reassociation), and the int8
# step is integer arithmetic that must stay bit-exact.
if sys.platform == "win32":
    compile_args, libraries = ["/O2"], []
else:
    compile_args = ["-O3", "-std=gnu99", "-fno-strict-aliasing", "-fno-trapping-math", "-fno-math-errno", "-Wno-psabi"]
    libraries = ["m"]

# numpy's headers where numpy is importable at build time (pyproject's build requirements list
# it): readings are read and probabilities copied through its C API; without them, through the
# buffer protocol and ndarray.copy(), a little slower.
include_dirs, macros = [os.path.join("firmware_sim", "kernels"), os.path.join("edgeseq", "runtime", "native")], []
try:
    import numpy
    include_dirs.append(numpy.get_include())
    macros.append(("ES_NUMPY", "1"))
except ImportError:
    pass

native = Extension(
    "edgeseq.runtime.native._es_native",
    sources=[os.path.join("edgeseq", "runtime", "native", "_es_native.c")],
    include_dirs=include_dirs,
    define_macros=macros,
    depends=[os.path.join("firmware_sim", "kernels", "es_kernels.h"),
             os.path.join("edgeseq", "runtime", "native", "es_float.h"),
             os.path.join("edgeseq", "runtime", "native", "es_attn.h"),
             os.path.join("edgeseq", "runtime", "native", "es_attn_step.h"),
             os.path.join("edgeseq", "runtime", "native", "es_ssm.h"),
             os.path.join("edgeseq", "runtime", "native", "es_ssm_lanes.h"),
             os.path.join("edgeseq", "runtime", "native", "es_ssm_step.h"),
             os.path.join("edgeseq", "runtime", "native", "es_ssm_step_lanes.h"),
             os.path.join("edgeseq", "runtime", "native", "es_ssm_avx2.h"),
             os.path.join("edgeseq", "runtime", "native", "es_ssm_simd.h"),
             os.path.join("edgeseq", "runtime", "native", "es_push.h")],
    extra_compile_args=compile_args,
    libraries=libraries,
    optional=True,
)

setup(ext_modules=[native])
