"""What the Python side of every native step shares: `NativeStep` (rnn, gru, lstm, ssm) and
`AttnStep` (transformer) open alike and answer run, push, set_bounds and kernel with the C
step's own methods. Their state, and how it is read, set and reset, is each one's own."""

from __future__ import annotations

import numpy as np

from edgeseq.errors import UsageError
from edgeseq.runtime.native.extension import _WHY, _ext


class BoundStep:
    """A step graph bound to C for `streams` streams: `run`, `push`, `set_bounds` and `kernel`
    are the C step's methods themselves (no Python frame per call)."""

    def _open(self, path, meta, streams, reason: str | None):
        """The extension, once this checked that it is built, that the model runs natively
        (`reason`: why not, or None) and that `streams` is a whole number >= 1; sets path, meta
        and streams."""
        if _ext is None:
            raise UsageError(_WHY)
        if reason:
            raise UsageError(f"'{path}' cannot run natively: {reason}")
        if isinstance(streams, bool) or not isinstance(streams, (int, np.integer)) or streams < 1:
            raise UsageError(f"streams must be a whole number >= 1, got {streams!r}")
        self.path, self.meta, self.streams = str(path), meta, int(streams)
        return _ext

    def _bind(self, step) -> None:
        """Hold the C step `step` and answer with its methods."""
        self._step = step
        self.run, self.push, self.set_bounds, self.kernel = step.run, step.push, step.set_bounds, step.kernel
