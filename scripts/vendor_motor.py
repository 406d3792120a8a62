"""Write the embedded regression set edgeseq/data/motor.npz (synthetic, `edgeseq.data.motor`).

    python scripts/vendor_motor.py
"""

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from edgeseq.data import motor  # noqa: E402


def main():
    out = ROOT / "edgeseq" / "data" / "motor.npz"
    np.savez_compressed(out, **motor.recordings(0))
    print(out, out.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
