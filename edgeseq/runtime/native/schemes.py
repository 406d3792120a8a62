"""Which int8 schemes the native steps run: static only. Dynamic int8 scales each call's
activations over the whole batch, which a step that runs every stream on its own cannot."""

from __future__ import annotations


def scheme_reason(meta) -> str | None:
    """Why the model's int8 scheme rules the native step out, or None (a float model, static int8)."""
    q = meta.quantization
    if q:
        scheme = q.get("scheme")
        if scheme == "dynamic":
            return "int8 dynamic scales activations per call: onnxruntime only"
        if scheme != "static":
            return f"int8 scheme {scheme!r} runs on onnxruntime only (the native step runs static int8)"
    return None
