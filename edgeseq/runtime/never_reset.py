"""The never-reset protocol's streams: a split's sequences joined end to end in seeded orders,
one stream each, as a device sees them (`joined_streams`). numpy only; below both the
accuracy on those streams (`edgeseq.runtime.evaluate`, which re-exports it) and the event
scores and calibration of the decision layer (`edgeseq.runtime.calibrate`)."""

from __future__ import annotations

import numpy as np

from edgeseq.data import Split

ORDERS = 3                    # continuous protocol: seeded orders of the test split, one stream each


def joined_streams(split: Split, orders: int = ORDERS, seed: int = 0):
    """The split's sequences (valid readings) joined end to end in `orders` seeded orders.
    Returns X (orders, L, F) float32, labels (orders, L) int64 and the index of each
    sequence's last reading (orders, N); L is the sum of the lengths."""
    rng = np.random.default_rng(seed)
    X, Y, ends = [], [], []
    for _ in range(orders):
        order = rng.permutation(len(split))
        X.append(np.concatenate([split.X[i, :split.lengths[i]] for i in order]))
        Y.append(np.concatenate([split.Y[i, :split.lengths[i]] for i in order]))
        ends.append(np.cumsum(split.lengths[order]) - 1)
    return np.stack(X).astype(np.float32), np.stack(Y), np.stack(ends)
