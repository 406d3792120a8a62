"""The compiled extension `_es_native`, imported once, or why it is not there: every native
step binds it (`bound.BoundStep`), the decision layer runs its C step through it. A leaf: it
imports no other module of the package, so each of them can take `_ext` from here."""

from __future__ import annotations

try:
    import edgeseq.runtime.native._es_native as _ext
    _WHY = ""
except ImportError as _e:                           # not built: the session stays on onnxruntime
    _ext = None
    _msg = str(_e).splitlines()[0] if str(_e) else type(_e).__name__
    _WHY = ("the native step extension (edgeseq.runtime.native._es_native) is "
            + ("not built" if "cannot import name" in _msg or isinstance(_e, ModuleNotFoundError)
               else f"built but does not load ({_msg[:100]})")
            + "; build it with `pip install -e .` where a C compiler is installed "
              "(e.g. `apt-get install build-essential`)")
