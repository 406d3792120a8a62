"""Rebuild edgeseq/data/basicmotions.npz from the BasicMotions .ts files in the aeon wheel.

    pip download --no-deps aeon==1.6.0 -d /tmp/aeon && cd /tmp/aeon && unzip -q aeon-*.whl
    python scripts/vendor_basicmotions.py /tmp/aeon/aeon/datasets/data/BasicMotions
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_external import read_ts  # noqa: E402  (the .ts reader the other measurements use)


def read_split(path):
    """An equal-length .ts file -> X (N, T, F) float32, its labels, the class names in header order."""
    series, labels, classes = read_ts(Path(path).read_text())
    return np.stack(series), labels, classes


def main(src):
    X_tr, l_tr, classes = read_split(Path(src) / "BasicMotions_TRAIN.ts")
    X_te, l_te, _ = read_split(Path(src) / "BasicMotions_TEST.ts")
    index = {c: i for i, c in enumerate(classes)}
    out = Path(__file__).resolve().parents[1] / "edgeseq" / "data" / "basicmotions.npz"
    np.savez_compressed(
        out,
        X_train=X_tr, y_train=np.array([index[l] for l in l_tr], dtype=np.int64),
        X_test=X_te, y_test=np.array([index[l] for l in l_te], dtype=np.int64),
        labels=np.array(classes),
        features=np.array(["acc_x", "acc_y", "acc_z", "gyr_x", "gyr_y", "gyr_z"]),
    )
    print(out, X_tr.shape, X_te.shape, classes)


if __name__ == "__main__":
    main(sys.argv[1])
