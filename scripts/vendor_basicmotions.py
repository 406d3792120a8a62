"""Rebuild edgeseq/data/basicmotions.npz from the BasicMotions .ts files in the aeon wheel.

    pip download --no-deps aeon==1.6.0 -d /tmp/aeon && cd /tmp/aeon && unzip -q aeon-*.whl
    python scripts/vendor_basicmotions.py /tmp/aeon/aeon/datasets/data/BasicMotions
"""

import sys
from pathlib import Path

import numpy as np


def read_ts(path):
    """Parse a UEA/UCR .ts file with equal-length multivariate series and a class label."""
    labels, series, classes = [], [], None
    in_data = False
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not in_data:
            if line.lower().startswith("@classlabel"):
                classes = line.split()[2:]
            if line.lower() == "@data":
                in_data = True
            continue
        *dims, label = line.split(":")
        series.append([[float(v) for v in d.split(",")] for d in dims])
        labels.append(label)
    X = np.asarray(series, dtype=np.float32).transpose(0, 2, 1)  # (N, F, T) -> (N, T, F)
    return X, labels, classes


def main(src):
    X_tr, l_tr, classes = read_ts(Path(src) / "BasicMotions_TRAIN.ts")
    X_te, l_te, _ = read_ts(Path(src) / "BasicMotions_TEST.ts")
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
