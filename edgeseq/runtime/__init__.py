"""The streaming runtime: numpy and onnxruntime only, so it installs on a Pi without torch."""

from edgeseq.runtime.evaluate import evaluate
from edgeseq.runtime.model import open_model
from edgeseq.runtime.session import StreamSession, WindowSession, softmax

__all__ = ["StreamSession", "WindowSession", "evaluate", "open_model", "softmax"]
