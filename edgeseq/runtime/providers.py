"""Execution providers by short name; asking for one that is absent is an error, not a fallback."""

from __future__ import annotations

import onnxruntime as ort

from edgeseq.errors import ProviderError, UsageError

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
DEVICE = {"cpu": "cpu", "cuda": "cuda"}


def check_provider(name: str) -> list:
    """Provider list for `InferenceSession`, or ProviderError saying what is missing."""
    if name not in PROVIDERS:
        raise UsageError(f"unknown provider '{name}': choose one of {', '.join(PROVIDERS)}")
    wanted = PROVIDERS[name]
    available = ort.get_available_providers()
    if wanted not in available:
        raise ProviderError(
            f"provider '{name}' is not available in this onnxruntime {ort.__version__} "
            f"(it has {', '.join(p.replace('ExecutionProvider', '') for p in available)}); "
            + ("install onnxruntime-gpu on a machine with CUDA, or use --provider cpu" if name == "cuda"
               else "reinstall onnxruntime"))
    return [wanted] if name == "cpu" else [wanted, "CPUExecutionProvider"]


def confirm_provider(session: ort.InferenceSession, name: str) -> None:
    """onnxruntime silently drops a provider it cannot start (missing CUDA libraries): refuse that."""
    active = session.get_providers()
    if not active or active[0] != PROVIDERS[name]:
        raise ProviderError(
            f"onnxruntime could not start provider '{name}' (running on {', '.join(active)}); "
            "check the CUDA and cuDNN libraries onnxruntime-gpu needs, or use --provider cpu")


def session_options(threads: int = 1) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # A step graph is a handful of small products: a thread pool costs more than it saves.
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return so
