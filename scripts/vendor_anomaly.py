"""Write the embedded anomaly sets: edgeseq/data/vibration.npz (synthetic, `edgeseq.data.vibration`)
and edgeseq/data/internalbleeding16.npz (UCR anomaly series 135 from the aeon wheel).

    pip download --no-deps aeon==1.6.0 -d /tmp/aeon && cd /tmp/aeon && unzip -q aeon-*.whl
    python scripts/vendor_anomaly.py /tmp/aeon/aeon/datasets/data/KDD-TSAD_135
"""

import csv
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from edgeseq.data import vibration  # noqa: E402


def read(path):
    """timestamp,value,is_anomaly -> values float32 [T], labels int64 [T]."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))[1:]
    return (np.array([float(r[1]) for r in rows], np.float32), np.array([int(float(r[2])) for r in rows], np.int64))


def main(src):
    out = ROOT / "edgeseq" / "data"
    np.savez_compressed(out / "vibration.npz", **vibration.recordings(0))
    name = "135_UCR_Anomaly_InternalBleeding16"
    tr, ytr = read(Path(src) / f"{name}_TRAIN.csv")
    te, yte = read(Path(src) / f"{name}_TEST.csv")
    assert not ytr.any() and (te[:len(tr)] == tr).all()
    np.savez_compressed(out / "internalbleeding16.npz", X_train=tr[None, :, None], y_train=ytr[None],
                        X_test=te[None, :, None], y_test=yte[None], labels=np.array(vibration.LABELS),
                        features=np.array(["value"]))
    for f in ("vibration.npz", "internalbleeding16.npz"):
        print(out / f, (out / f).stat().st_size, "bytes")


if __name__ == "__main__":
    main(sys.argv[1])
