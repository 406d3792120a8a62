"""WindowSession: whole windows through a window (bidirectional) model's graph."""

from __future__ import annotations

import os

import numpy as np

from edgeseq import contract
from edgeseq.errors import ReadingError
from edgeseq.runtime.model import open_model
from edgeseq.runtime.session_checks import softmax


class WindowSession:
    """Whole-window classification for models that cannot stream (bidirectional)."""

    def __init__(self, model: str | os.PathLike, provider: str = "cpu", threads: int = 0):
        self.path = str(model)
        self.session, self.meta = open_model(model, provider, threads)
        self.labels = list(self.meta.labels)
        self.n_features = len(self.meta.features)

    def predict_logits(self, windows, lengths=None) -> np.ndarray:
        x = np.asarray(windows, np.float32)
        if x.ndim != 3 or x.shape[2] != self.n_features:
            raise ReadingError(f"windows must be [N, T, {self.n_features}], got {list(x.shape)}")
        if lengths is None:
            lengths = np.full(len(x), x.shape[1], np.int64)
        lengths = np.asarray(lengths, np.int64)
        mask = np.arange(x.shape[1])[None, :] < lengths[:, None]
        if not np.isfinite(x[mask]).all():
            raise ReadingError("windows hold NaN or Inf; drop or repair them")
        feeds = {contract.WINDOW: x}
        if contract.LENGTHS in {i.name for i in self.session.get_inputs()}:
            feeds[contract.LENGTHS] = lengths
        return self.session.run([contract.LOGITS], feeds)[0]

    def predict(self, windows, lengths=None) -> np.ndarray:
        return softmax(self.predict_logits(windows, lengths))
