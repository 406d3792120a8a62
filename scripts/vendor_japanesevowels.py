"""Rebuild edgeseq/data/japanesevowels.npz from the JapaneseVowels .ts files in the aeon wheel.

    pip download --no-deps aeon==1.6.0 -d /tmp/aeon
    python scripts/vendor_japanesevowels.py /tmp/aeon/aeon-1.6.0-py3-none-any.whl

The argument is the wheel, or a folder holding aeon/ (an unpacked wheel, a site-packages);
without it the installed aeon is read. UEA JapaneseVowels: 9 male speakers saying /ae/, 12 LPC
cepstrum coefficients per frame, 7-29 frames, the speaker is the class; the archive's 270/370
split, unchanged apart from the container (zero-padded to the longest sequence, with lengths).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_external import convert_vowels  # noqa: E402  (the converter the measurements used)


def main(src=None):
    arrays = convert_vowels(src, None)
    out = Path(__file__).resolve().parents[1] / "edgeseq" / "data" / "japanesevowels.npz"
    np.savez_compressed(out, **arrays)
    print(out, arrays["X_train"].shape, arrays["X_test"].shape, f"{out.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
